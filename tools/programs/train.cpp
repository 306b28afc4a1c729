// `train`: trains a model from a YAML config, optionally under a memory budget with a
// rematerialization schedule; under mpirun, as one rank of a data-parallel job. main() only
// parses flags and dispatches.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "models/build.h"
#include "ops/cpu_gemm.h"
#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/comm/mpi_session.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/training/stop_signal.h"
#include "tools/training/training.h"

namespace {

// Note [errors in a data-parallel job]
// Any rank's error ends the whole job: the failing rank prints its message, prefixed with its
// rank and host, and calls MPI_Abort with its exit code, which makes mpirun stop every other
// rank (even one blocked in a collective waiting for it) and exit with that code. A rank that
// dies without a word (a signal) is noticed by mpirun, which also stops the rest. Not errors of
// one rank: a usage error, which every rank meets on the same command line (rank 0 alone prints
// it, and every rank exits with 2 without MPI_Abort: several aborts at once garble mpirun's
// report); a stop (Note [stopping a data-parallel job]) and a side output's failure (exit 4),
// which end every rank normally after the same step.
//
// The command that continues a stopped run: this one with `--resume CHECKPOINT` instead of any
// --resume it had (arguments quoted for a POSIX shell where they need it).
std::string resume_command(int argc, char** argv, const std::string& checkpoint) {
  auto quoted = [](const std::string& a) {
    if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789-_./=:,+@%") == std::string::npos)
      return a;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = quoted(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--resume") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--resume=", 0) == 0) continue;
    cmd += " " + quoted(a);
  }
  return cmd + " --resume " + quoted(checkpoint);
}

// Every strategy, the offload ones included.
std::vector<std::string> train_strategies() {
  std::vector<std::string> all = remat::strategy_names();
  for (const auto& s : remat::offload_strategy_names()) all.push_back(s);
  return all;
}

// The flags `train` takes.
void declare_flags(remat::FlagParser& f) {
  std::string known;
  for (const auto& s : train_strategies()) known += (known.empty() ? "" : "|") + s;
  f.add("config", "FILE", "model YAML (or --onnx)")
      .add("onnx", "FILE", remat::kOnnxFlagHelp)
      .add("device", "cpu|cuda", "where to train", "cpu")
      .add("steps", "N", "training steps (total, when resuming)", "50")
      .add("batch", "N", "override the config's batch size (per rank under mpirun; per micro-batch with --accumulate)")
      .add("accumulate", "K", "K micro-batches per optimizer step, gradients summed (overrides the config's accumulate)")
      .add("input", "CxHxW", "override the per-sample input size, e.g. 3x32x32 (F, TxF)")
      .add("seq", "T", "override a token model's sequence length")
      .add("seed", "S", "override the config's seed (weights, dropout)")
      .add("budget", "BYTES", "memory budget for the whole step, e.g. 15GB or 12GiB (per rank)")
      .add("strategy", "S", known, "checkmate")
      .add("cost-model", "flops|profile|FILE", "costs the solver minimises", "flops")
      .add("plan", "FILE", "run a schedule (`plan -o`) or plan (--save-plan) instead of solving")
      .add("save-plan", "FILE", "write the execution plan that runs (JSON)")
      .add("link-bandwidth", "GB/s", "host link bandwidth each way (1e9 bytes/s), for the "
                                     "offload strategies")
      .add("device-tflops", "F", "with --link-bandwidth and FLOPs costs: the device rate copy "
                                 "time converts at", "100")
      .add("copy-overlap", "stage|stream", "with --link-bandwidth: each copy within its stage, or "
                                           "queued on its stream across stages", "stage")
      .add("host-budget", "SIZE", "host memory the offload strategies' copies may use at once")
      .add("time-limit", "SEC", "solver time limit", "60")
      .add("threads", "N", "solver threads", "1")
      .add("memory", "arena|pool", "how activations are placed in the budget", "arena")
      .add("trace", "FILE", "write a Chrome trace of the last step(s)")
      .add("trace-steps", "K", "steps the trace holds (the last K)", "1")
      .add("save", "FILE", "write a checkpoint (safetensors) after the last step, or when stopped")
      .add("save-every", "N", "also write FILE-step<k> every N steps (needs --save)")
      .add("keep-last", "K", "periodic checkpoints to keep (the oldest removed)", "3")
      .add("resume", "FILE", "continue from a checkpoint")
      .add("summary", "FILE", "write the run's summary (speed, peaks, plan) as JSON")
      .add("compare", "FILE", "a keep-everything run's --summary: print the slowdown against it")
      .add("precision", "fp32|tf32|tf32-all|bf16",
           "bf16: activations in bfloat16 (autocast's rules); else FP32 activations with GPU math "
           "fp32 everywhere, TF32 in convolutions (PyTorch's default) or also in GEMMs "
           "(default: the config's precision; fp32 configs train in tf32)")
      .add("log-every", "K", "print every K-th step (default: a live line on a terminal, "
                             "every step in a log)")
      .add("metrics", "FILE", "write one JSON object per step (loss, lr, speed, peak, ...)")
      .add("no-check-finite", "",
           "do not stop at a non-finite loss or gradient (saves a sync and a gradient read)")
      .add("workspace-limit", "SIZE",
           "--device cuda: the most workspace one convolution's algorithm may use (default: an "
           "eighth of what --budget leaves above the persistent values; 4 GiB without a budget)")
      .add("no-cuda-graph", "",
           "launch every kernel of every step (default on a GPU: from the second step of a plan "
           "on, its forward and backward replay as one CUDA graph)")
      .add("data-threads", "N", "image decode threads (default: the cores but one)")
      .add("skip-bad-samples", "", "replace an unreadable image or label map by the next sample "
                                   "(a warning and a count) instead of stopping")
      .add("eval-every", "K", "validate on the config's `val` data every K steps (and at the end)")
      .add("eval-batches", "N", "validation batches per pass (default: the whole set; 20 for "
                                "token files and generated data)")
      .add("no-eval", "", "do not validate, even when the config has `val` data")
      .add("shard-optimizer", "", "mpirun: each rank keeps 1/N of the optimizer state (ZeRO-1)")
      .add("bucket-size", "BYTES", "mpirun: gradient bucket size", "25MB")
      .add("check-every", "K", "mpirun: check that all ranks hold the same weights every K steps "
                               "(and at the start and end; 0: start and end only)", "100")
      .allow_positional("KEY=VALUE", "override a config field, e.g. optimizer.lr=0.01 batch=64 "
                                     "layers.conv1.filters=32");
}

// TrainOptions from the parsed flags; UsageError for a flag that is malformed or conflicts.
remat::TrainOptions options_from_flags(const remat::FlagParser& f) {
  remat::TrainOptions opt;
  opt.config = remat::model_file_flag(f, "train");
  if (opt.config.empty())
    throw remat::UsageError("train: --config FILE (or --onnx FILE) is required\n" + f.usage());
  opt.device = f.get_choice("device", {"cpu", "cuda"});
  opt.steps = f.get_int("steps", 1, 100000000);
  if (f.has("batch")) opt.batch = f.get_int("batch", 1, 1 << 20);
  if (f.has("accumulate"))
    opt.accumulate = static_cast<int>(f.get_int("accumulate", 1, remat::kMaxMicroBatches));
  if (f.has("input")) opt.input = remat::parse_flag_value(
      [&] { return remat::parse_input_size(f.get("input"), "train: --input"); });
  if (f.has("seq")) opt.sequence = f.get_int("seq", 1, 1 << 24);
  if (f.has("seed")) opt.seed = static_cast<uint64_t>(f.get_int("seed", 1, INT64_MAX));
  if (f.has("budget")) opt.plan.budget = f.get_bytes("budget");
  opt.plan.strategy = f.get_choice("strategy", train_strategies());
  if (f.has("link-bandwidth"))
    opt.plan.link_bytes_per_second = f.get_double("link-bandwidth", 1e-6, 1e6) * 1e9;
  opt.plan.device_flops = f.get_double("device-tflops", 1e-6, 1e9) * 1e12;
  opt.plan.copy_overlap =
      remat::copy_overlap_from_name(f.get_choice("copy-overlap", {"stage", "stream"}), "");
  if (f.has("host-budget")) opt.plan.host_budget = f.get_bytes("host-budget");
  opt.plan.cost_model = f.get("cost-model");
  if (f.has("plan")) opt.plan.schedule_file = f.get("plan");
  // Note [flags that need --budget]
  remat::require_budget_for(f, "train",
                            {"plan", "strategy", "link-bandwidth", "copy-overlap", "host-budget"});
  opt.plan.time_limit = f.get_double("time-limit", 0.1, 1e6);
  opt.plan.threads = static_cast<int>(f.get_int("threads", 1, 256));
  opt.memory = f.get_choice("memory", {"arena", "pool"});
  opt.trace_file = f.get("trace");
  opt.trace_steps = f.get_int("trace-steps", 1, 1000000);
  opt.save_plan_file = f.get("save-plan");
  opt.save_file = f.get("save");
  opt.resume_file = f.get("resume");
  opt.summary_file = f.get("summary");
  opt.compare_file = f.get("compare");
  if (f.has("precision")) opt.precision = f.get_choice("precision", remat::kPrecisionChoices);
  if (f.has("log-every")) opt.log_every = static_cast<int>(f.get_int("log-every", 1, 1000000));
  opt.metrics_file = f.get("metrics");
  if (f.has("save-every")) {
    if (!f.has("save"))
      throw remat::UsageError("train: --save-every needs --save FILE (periodic checkpoints "
                              "are named after it: FILE-step<k>)");
    opt.save_every = f.get_int("save-every", 1, 100000000);
  }
  if (f.has("keep-last") && !f.has("save-every"))
    throw remat::UsageError("train: --keep-last needs --save-every N (it bounds the periodic "
                            "checkpoints)");
  opt.keep_last = static_cast<int>(f.get_int("keep-last", 1, 1000000));
  opt.overrides = remat::model_overrides(f, opt.config);
  opt.check_finite = !f.has("no-check-finite");
  opt.cuda_graph = !f.has("no-cuda-graph");
  opt.workspace_limit = remat::workspace_limit_flag(f, "train", opt.device);
  if (f.has("data-threads")) opt.data_threads = static_cast<int>(f.get_int("data-threads", 1, 1024));
  opt.skip_bad_samples = f.has("skip-bad-samples");
  if (f.has("eval-every")) opt.eval_every = f.get_int("eval-every", 1, 100000000);
  if (f.has("eval-batches")) opt.eval_batches = f.get_int("eval-batches", 1, 100000000);
  opt.no_eval = f.has("no-eval");
  if (opt.no_eval && opt.eval_every > 0)
    throw remat::UsageError("train: --no-eval and --eval-every contradict each other");
  opt.shard_optimizer = f.has("shard-optimizer");
  opt.bucket_bytes = f.get_bytes("bucket-size");
  if (opt.bucket_bytes < 1)
    throw remat::UsageError("train: --bucket-size '" + f.get("bucket-size") + "' must be positive");
  opt.check_every = f.get_int("check-every", 0, INT64_MAX);
  for (const char* out : {"trace", "save-plan", "save", "summary", "metrics"})
    if (f.has(out)) remat::check_output_file(f.get(out), std::string("train: --") + out);
  return opt;
}

// The command that launched this rank's job, before `train`: "mpirun -np 4 " (OpenMPI),
// "srun -n 4 " (Slurm), "mpiexec -n 4 " (another launcher); "" for one process. Other launcher
// options (hosts, MCA parameters) are not known to the ranks.
std::string launcher_prefix(const remat::MpiSession& session) {
  if (session.size() <= 1) return "";
  const std::string n = std::to_string(session.size());
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) return "mpirun -np " + n + " ";
  if (std::getenv("SLURM_STEP_ID")) return "srun -n " + n + " ";
  return "mpiexec -n " + n + " ";
}

int train_main(int argc, char** argv, remat::MpiSession& session) {
  remat::FlagParser f("train", "Trains a model described in YAML (see README).");
  declare_flags(f);
  if (!f.parse(argc, argv)) return 0;
  const remat::TrainOptions opt = options_from_flags(f);
  if (session.size() > 1) {
    // Rank 0 alone prints progress; the others keep stderr for their errors.
    if (session.rank() != 0 && !std::freopen("/dev/null", "w", stdout))
      throw remat::Error("cannot silence stdout of rank " + std::to_string(session.rank()));
    // CPU ranks on one host share its cores.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (opt.device == "cpu") remat::cpu_gemm_set_threads(cores / session.local_size());
  }
  // Note [graceful stop]; under mpirun, Note [stopping a data-parallel job].
  remat::StopSignals stop(session.size() <= 1  ? remat::StopMessages::All
                          : session.rank() == 0 ? remat::StopMessages::AtOnceOnly
                                                : remat::StopMessages::None);
  const remat::TrainSummary sum = remat::run_training(opt, &session);
  if (sum.stop_signal && !opt.save_file.empty() && !sum.losses.empty() && session.rank() == 0)
    std::printf("to continue: %s%s\n", launcher_prefix(session).c_str(),
                resume_command(argc, argv, opt.save_file).c_str());
  if (sum.stop_signal) return 128 + sum.stop_signal;
  return sum.side_output_failures.empty() ? 0 : 4;  // Note [side outputs]
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<remat::MpiSession> session;
  int code = 0;
  remat::ignore_file_size_signal();  // Note [file-size limit]
  try {
    session = std::make_unique<remat::MpiSession>();
    code = train_main(argc, argv, *session);
    if (code >= 128 && session->size() > 1) {
      // Stopped (Note [stopping a data-parallel job]): every rank has done its part. No
      // MPI_Finalize: after Ctrl-C mpirun is ending the job, and a rank in MPI_Finalize would
      // wait for its SIGKILL. The barrier keeps a rank's exit from ending rank 0 before it
      // has printed everything.
      std::fflush(nullptr);
      session->barrier();
      std::_Exit(code);
    }
    return code;  // a side output's failure too ends every rank normally
  } catch (const remat::UsageError&) {
    // Every rank reads the same command line: rank 0 alone says what is wrong, and no rank
    // aborts the job (several MPI_Aborts at once garble mpirun's report). _Exit: MPI_Finalize
    // would wait for a rank that went on; mpirun ends the job at the first non-zero exit.
    const bool quiet = session && session->size() > 1 && session->rank() != 0;
    code = quiet ? 2 : remat::report_exception();
    if (session && session->size() > 1) {
      std::fflush(nullptr);
      std::_Exit(code);
    }
    return code;
  } catch (...) {
    code = remat::report_exception(session ? session->label() : "");
  }
  if (session && session->size() > 1) {
    std::fflush(stderr);
    session->abort_job(code);  // Note [errors in a data-parallel job]
  }
  return code;
}
