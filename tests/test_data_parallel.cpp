// Data-parallel training end to end: `mpirun -np N train` on the CPU (OpenMPI) against one
// process at the global batch — same weights within float tolerance, the ranks identical after
// every step (train checks it with --check-every 1), also under a budget with recomputation,
// over TCP, with a sharded optimizer (and its smaller constant), resumed across world sizes;
// validation split over the ranks; plain log lines under mpirun; and a rank that fails ends the
// whole job with its message, without a hang.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/memory/param_layout.h"
#include "runtime/io/safetensors.h"
#include "tests/data_files.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

// A job's exit code and output (RunResult) and how long it took.
struct JobResult : RunResult {
  double seconds = 0;
};

std::string config(const std::string& name) {
  return test_source_dir() + "/configs/" + name + ".yaml";
}

class DataParallel : public ScratchDirTest {
 protected:
  // Note [gradients that are rounding noise]
  // small_dag's conv `b` has a bias and is followed by batchnorm, which removes any constant per
  // channel: the bias's true gradient is 0, and what backward computes is rounding noise whose
  // sign depends on the order of the additions. Adam divides it by its own magnitude and moves
  // the bias by about lr per step in a random direction, so no tolerance can compare it between
  // runs that add in different orders (N ranks and one process). The comparisons use the same
  // model with that bias off (`bias: false`, as ResNets do); the ranks are still compared bit
  // for bit on the config as shipped.
  std::string small_dag_without_noise() const {
    std::string text = read_whole_file(config("small_dag"));
    const std::string b = "{name: b, op: conv2d, filters: 16, kernel: 3, padding: 1";
    const size_t at = text.find(b);
    EXPECT_NE(at, std::string::npos) << "configs/small_dag.yaml changed: update this test";
    if (at != std::string::npos) text.insert(at + b.size(), ", bias: false");
    const std::string out = path("small_dag_no_bias.yaml");
    std::ofstream(out) << text;
    return out;
  }

  // Runs a shell command with a hard time limit (a hang fails the test instead of CI).
  JobResult run(const std::string& cmd, int limit_seconds = 240) {
    JobResult r;
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const auto t0 = std::chrono::steady_clock::now();
    // -k: mpirun that outlives the SIGTERM (its ranks blocked in a collective) is killed.
    const int status = std::system(("timeout -k 10 " + std::to_string(limit_seconds) + " " + cmd +
                                    " >'" + out + "' 2>'" + err + "'")
                                       .c_str());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_whole_file(out);
    r.err = read_whole_file(err);
    return r;
  }

  // `mpirun -np N` (as root allowed, more ranks than cores allowed) with `mca` options.
  static std::string mpirun(int np, const std::string& mca = "") {
    return std::string("'") + MPIEXEC + "' --allow-run-as-root --oversubscribe " + mca + " -np " +
           std::to_string(np) + " ";
  }
  static std::string train() { return std::string("'") + TRAIN_EXE + "' "; }

  // Trains and expects success; returns the run.
  JobResult train_ok(const std::string& cmd) {
    JobResult r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
    return r;
  }

  std::string dir_;
};

// Every tensor of checkpoint `a` within tolerance of `b`'s: |x - y| <= atol + rtol * |y|.
void expect_close(const std::string& a, const std::string& b, double rtol = 2e-4,
                  double atol = 2e-5) {
  const SafeTensorFile fa = safetensors_load(a), fb = safetensors_load(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const SafeTensor& ta : fa.tensors) {
    const SafeTensor* tb = fb.find(ta.name);
    ASSERT_TRUE(tb) << ta.name;
    const std::vector<float> x = ta.f32(), y = tb->f32();
    ASSERT_EQ(x.size(), y.size()) << ta.name;
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double excess = std::fabs(x[i] - y[i]) - (atol + rtol * std::fabs(y[i]));
      if (excess > worst) worst = excess, at = i;
    }
    EXPECT_LE(worst, 0.0) << ta.name << "[" << at << "]: " << x[at] << " vs " << y[at];
  }
}

nlohmann::json summary(const std::string& path) { return nlohmann::json::parse(read_whole_file(path)); }

// N ranks at batch B give the weights one process gives at batch N x B.
void expect_rank_count(const RunResult& r, int np) {
  EXPECT_NE(r.out.find("weights identical on all " + std::to_string(np) + " ranks"),
            std::string::npos)
      << r.out;
}

TEST_F(DataParallel, SmallCnnTwoRanksEqualOneProcessAtTheGlobalBatch) {
  const std::string common = "--config '" + config("small_cnn") + "' --steps 3 ";
  JobResult dp = train_ok(mpirun(2) + train() + common + "--batch 8 --check-every 1 --save '" +
                          path("dp.st") + "' --summary '" + path("dp.json") + "'");
  expect_rank_count(dp, 2);
  train_ok(train() + common + "--batch 16 --save '" + path("one.st") + "' --summary '" +
           path("one.json") + "'");
  expect_close(path("dp.st"), path("one.st"));
  const auto s = summary(path("dp.json")), o = summary(path("one.json"));
  EXPECT_EQ(s.at("world"), 2);
  EXPECT_EQ(s.at("global_batch"), 16);
  EXPECT_NEAR(s.at("last_loss").get<double>(), o.at("last_loss").get<double>(), 1e-4);
  EXPECT_NEAR(s.at("first_loss").get<double>(), o.at("first_loss").get<double>(), 1e-5);
}

TEST_F(DataParallel, SmallDagThreeRanksEqualOneProcessAtTheGlobalBatch) {
  const std::string common = "--config '" + small_dag_without_noise() + "' --steps 3 ";
  JobResult dp = train_ok(mpirun(3) + train() + common + "--batch 4 --check-every 1 --save '" +
                          path("dp.st") + "'");
  expect_rank_count(dp, 3);
  train_ok(train() + common + "--batch 12 --save '" + path("one.st") + "'");
  expect_close(path("dp.st"), path("one.st"));
}

// Under a budget the plan recomputes; each rank runs it inside the budget and the result is
// still the one process's at the global batch (which keeps everything). Small buckets: their
// all-reduces start in the middle of the backward, between recomputations.
TEST_F(DataParallel, UnderABudgetWithRecomputation) {
  struct Case {
    std::string config;
    int np;
    int batch;
    const char* budget;
  };
  for (const Case& c : {Case{config("small_cnn"), 2, 8, "4MB"},
                        Case{small_dag_without_noise(), 3, 4, "1MB"}}) {
    SCOPED_TRACE(c.config);
    const std::string common = "--config '" + c.config + "' --steps 3 ";
    JobResult dp = train_ok(mpirun(c.np) + train() + common + "--batch " +
                            std::to_string(c.batch) + " --budget " + c.budget +
                            " --strategy chen-sqrtn --check-every 1 --bucket-size 8KB --save '" +
                            path("dp.st") +
                            "' --summary '" + path("dp.json") + "'");
    expect_rank_count(dp, c.np);
    const auto s = summary(path("dp.json"));
    EXPECT_GT(s.at("recomputes_per_step").get<int>(), 0) << dp.out;
    EXPECT_LE(s.at("reserved_peak_bytes").get<int64_t>(), s.at("budget_bytes").get<int64_t>());
    EXPECT_EQ(s.at("measured_peak_bytes"), s.at("predicted_peak_bytes"));
    train_ok(train() + common + "--batch " + std::to_string(c.batch * c.np) + " --save '" +
             path("one.st") + "'");
    expect_close(path("dp.st"), path("one.st"));
  }
}

// A token model (GPT-2 in miniature: AdamW with warm-up, global-norm clipping of the averaged
// gradients, tied embedding weights): two ranks equal one process at the global batch. A
// sharded optimizer cannot clip (Note [gradient buckets]) and says so.
TEST_F(DataParallel, TokenModelTwoRanksEqualOneProcessAtTheGlobalBatch) {
  const std::string common = "--config '" + config("gpt2_tiny") + "' --steps 3 ";
  JobResult dp = train_ok(mpirun(2) + train() + common + "--batch 2 --check-every 1 --save '" +
                          path("dp.st") + "'");
  expect_rank_count(dp, 2);
  train_ok(train() + common + "--batch 4 --save '" + path("one.st") + "'");
  expect_close(path("dp.st"), path("one.st"));
  JobResult sh = run(mpirun(2) + train() + common + "--batch 2 --shard-optimizer", 120);
  EXPECT_EQ(sh.code, 1) << sh.err;
  EXPECT_NE(sh.err.find("--shard-optimizer: node 'grad_clip'"), std::string::npos) << sh.err;
}

// Gradient accumulation on two ranks: 2 ranks x 2 micro-batches of 1 give the weights one
// process gives at batch 4 (rank r's micro-batch k holds sample 2 r + k of the global batch; the
// gradients are averaged once, after the last micro-batch), and so does one process with 2
// micro-batches of 2.
TEST_F(DataParallel, AccumulationOnTwoRanksEqualsOneProcessAtTheGlobalBatch) {
  const std::string common = "--config '" + config("gpt2_tiny") + "' --steps 3 ";
  JobResult dp = train_ok(mpirun(2) + train() + common + "--batch 1 --accumulate 2 --check-every 1 "
                          "--save '" + path("dp.st") + "' --summary '" + path("dp.json") + "'");
  expect_rank_count(dp, 2);
  EXPECT_NE(dp.out.find("2 ranks x batch 2 = global batch 4"), std::string::npos) << dp.out;
  train_ok(train() + common + "--batch 4 --save '" + path("one.st") + "'");
  train_ok(train() + common + "--batch 2 --accumulate 2 --save '" + path("acc.st") + "'");
  expect_close(path("dp.st"), path("one.st"));
  expect_close(path("acc.st"), path("one.st"));
  EXPECT_EQ(summary(path("dp.json")).at("global_batch"), 4);
}

// Validation on two ranks: each evaluates its half of every validation batch and rank 0 prints
// the sums of both, which equal one process's at the global batch (within the weights'
// tolerance: the ranks add their gradients in another order).
TEST_F(DataParallel, ValidationOnTwoRanksEqualsOneProcessAtTheGlobalBatch) {
  const std::string common = "--config '" + test::write_colours_dataset(dir_) + "' --steps 6 "
                             "--eval-every 3 --data-threads 1 ";
  JobResult dp = train_ok(mpirun(2) + train() + common + "--batch 6 --summary '" + path("dp.json") + "'");
  train_ok(train() + common + "--batch 12 --summary '" + path("one.json") + "'");
  const auto s = summary(path("dp.json")), o = summary(path("one.json"));
  EXPECT_EQ(s.at("val_count"), 12) << "every validation image once, on one of the ranks";
  EXPECT_EQ(s.at("val_top1"), o.at("val_top1"));
  const double loss = o.at("val_loss").get<double>();
  EXPECT_NEAR(s.at("val_loss").get<double>(), loss, 1e-4 + 1e-3 * loss);
  size_t lines = 0;
  for (size_t at = dp.out.find("eval after step 3:"); at != std::string::npos;
       at = dp.out.find("eval after step 3:", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u) << "rank 0 alone reports:\n" << dp.out;
}

// Under mpirun a rank's stdout is a pseudo-terminal (OpenMPI's), whatever the user redirected;
// the log still gets plain lines, no redraws (Note [live lines]).
TEST_F(DataParallel, ALogOfARunUnderMpirunHasPlainLines) {
  JobResult dp = train_ok(mpirun(2) + train() + "--config '" + config("small_cnn") +
                          "' --batch 8 --steps 4");
  EXPECT_EQ(dp.out.find('\r'), std::string::npos) << dp.out;
  EXPECT_EQ(dp.out.find("\x1b["), std::string::npos) << dp.out;
  EXPECT_NE(dp.out.find("step 4/4"), std::string::npos) << dp.out;
}

// TCP instead of shared memory: the transport ranks on different hosts use.
TEST_F(DataParallel, OverTcp) {
  const std::string common = "--config '" + config("small_cnn") + "' --steps 2 ";
  JobResult dp = train_ok(mpirun(2, "--mca btl tcp,self") + train() + common +
                          "--batch 8 --check-every 1 --save '" + path("tcp.st") + "'");
  expect_rank_count(dp, 2);
  train_ok(train() + common + "--batch 16 --save '" + path("one.st") + "'");
  expect_close(path("tcp.st"), path("one.st"));
}

// The per-rank constant the plan uses shrinks by (N - 1) / N of the optimizer state.
int64_t expected_constant(const std::string& model, int batch, int world, bool shard,
                          int64_t bucket_bytes) {
  const OpRegistry ops = make_builtin_registry();
  const ModelConfig cfg = load_model_config(config(model));
  BuildOptions bo;
  bo.batch = batch;
  const Graph g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                                      cfg.optimizer.attrs);
  ParallelConfig pc;
  pc.world = world;
  pc.shard_optimizer = shard;
  pc.bucket_bytes = bucket_bytes;
  return persistent_layout(g, pc).constant_bytes;
}

TEST_F(DataParallel, ShardedOptimizerEqualsUnshardedWithASmallerConstant) {
  for (const char* model : {"small_dag", "small_cnn"}) {  // Adam (m, v), SGD (momentum)
    SCOPED_TRACE(model);
    // Several buckets, each padded and split into 3 shards.
    const std::string common = "--config '" + std::string(config(model)) +
                               "' --steps 3 --batch 4 --check-every 1 --bucket-size 16KB ";
    JobResult sh = train_ok(mpirun(3) + train() + common + "--shard-optimizer --save '" +
                            path("sharded.st") + "' --summary '" + path("sharded.json") + "'");
    EXPECT_NE(sh.out.find("sharded: 1/3"), std::string::npos) << sh.out;
    train_ok(mpirun(3) + train() + common + "--save '" + path("full.st") + "' --summary '" +
             path("full.json") + "'");
    expect_close(path("sharded.st"), path("full.st"), 1e-5, 1e-6);
    const int64_t full = summary(path("full.json")).at("persistent_bytes");
    const int64_t sharded = summary(path("sharded.json")).at("persistent_bytes");
    EXPECT_EQ(full, expected_constant(model, 4, 3, false, 16000));
    EXPECT_EQ(sharded, expected_constant(model, 4, 3, true, 16000));
    EXPECT_LT(sharded, full);
  }
}

// A checkpoint holds the state as one process has it: written by 1 rank, resumed by 2 ranks
// with a sharded optimizer, written again and compared with one process that never stopped.
TEST_F(DataParallel, CheckpointsResumeUnderAnyWorldSize) {
  const std::string common = "--config '" + small_dag_without_noise() + "' ";
  train_ok(train() + common + "--batch 12 --steps 2 --save '" + path("half.st") + "'");
  JobResult dp = train_ok(mpirun(2) + train() + common +
                          "--batch 6 --steps 4 --shard-optimizer --resume '" + path("half.st") +
                          "' --save '" + path("dp.st") + "'");
  EXPECT_NE(dp.out.find("resumed from"), std::string::npos) << dp.out;
  train_ok(mpirun(3) + train() + common + "--batch 4 --steps 5 --resume '" + path("dp.st") +
           "' --save '" + path("dp3.st") + "'");
  train_ok(train() + common + "--batch 12 --steps 5 --save '" + path("one.st") + "'");
  expect_close(path("dp3.st"), path("one.st"));
}

// A tiny CIFAR-10 model whose data directory is `data`.
std::string cifar_config(const std::string& data) {
  return "name: tiny_cifar\ninput: [3, 32, 32]\nclasses: 10\nloss: softmax_xent\nbatch: 4\n"
         "seed: 1\noptimizer: {op: sgd, lr: 0.01}\ndata: {source: cifar10, path: '" + data +
         "'}\nlayers:\n  - {name: conv, op: conv2d, filters: 4, kernel: 3, padding: 1}\n"
         "  - {name: gap, op: global_avgpool}\n  - {name: fc, op: dense, units: 10}\n";
}

void write_fake_cifar(const std::string& dir) {
  std::system(("mkdir -p '" + dir + "'").c_str());
  for (int f = 1; f <= 5; ++f) {
    std::ofstream o(dir + "/data_batch_" + std::to_string(f) + ".bin", std::ios::binary);
    for (int r = 0; r < 8; ++r) {
      std::string rec(3073, '\0');
      rec[0] = static_cast<char>((f + r) % 10);
      for (int q = 1; q < 3073; ++q) rec[q] = static_cast<char>((7 * f + 3 * r + q) % 256);
      o << rec;
    }
  }
}

// Rank 1 alone reads a config whose data folder has no data: the same settings (a relative
// `path: cifar`, Note [ranks agree on the run]) in another folder (MPMD launch: one command
// line per rank). The job ends at once with rank 1's message and a non-zero exit.
TEST_F(DataParallel, ARankThatFailsEndsTheJobWithItsMessage) {
  std::filesystem::create_directories(path("good"));
  std::filesystem::create_directories(path("bad"));
  write_fake_cifar(path("good/cifar"));
  std::ofstream(path("good/c.yaml")) << cifar_config("cifar");
  std::ofstream(path("bad/c.yaml")) << cifar_config("cifar");
  const std::string args = " --steps 3 --check-every 1";
  JobResult ok = train_ok(mpirun(2) + train() + "--config '" + path("good/c.yaml") + "'" + args);
  JobResult r = run(std::string("'") + MPIEXEC + "' --allow-run-as-root --oversubscribe -np 1 " +
                        train() + "--config '" + path("good/c.yaml") + "'" + args + " : -np 1 " +
                        train() + "--config '" + path("bad/c.yaml") + "'" + args,
                    120);
  EXPECT_NE(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.code, 124) << "the job hung until the time limit";
  EXPECT_NE(r.err.find("error: rank 1 of 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad/cifar/data_batch_1.bin"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 60) << "a failing rank must not leave the others waiting";
}

// A step whose loss or averaged gradient is not finite stops every rank before the update
// (Note [finite check]): the job exits 3 with the step's message, at the step where one
// process at the global batch stops, and the ranks save the state before it together (Note
// [saving at an error]).
TEST_F(DataParallel, ANonFiniteStepStopsEveryRank) {
  std::string cfg = read_whole_file(config("small_cnn"));
  const size_t lr = cfg.find("lr: 0.02");
  ASSERT_NE(lr, std::string::npos) << "configs/small_cnn.yaml changed: update this test";
  cfg.replace(lr, 8, "lr: 1000000");
  std::ofstream(path("div.yaml")) << cfg;
  const std::string args = "--config '" + path("div.yaml") + "' --steps 6 --save '" +
                           path("out.st") + "'";
  JobResult r = run(mpirun(2) + train() + args + " --batch 2", 120);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("of 2 (" ), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 3: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped before the optimizer update"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("checkpoint after step 2 written to " + path("out.st") +
                       " before the error below"), std::string::npos) << r.out;
  EXPECT_EQ(safetensors_load(path("out.st")).metadata.at("step"), "2");
  JobResult one = run(train() + args + " --batch 4", 120);
  EXPECT_EQ(one.code, 3) << one.err;
  EXPECT_NE(one.err.find("step 3: "), std::string::npos) << one.err;
}

// Ranks given different models refuse to train together (Note [ranks agree on the run]).
TEST_F(DataParallel, RanksWithDifferentGraphsRefuse) {
  const std::string cfg = " --config '" + config("small_cnn") + "' --steps 1";
  JobResult r = run(mpirun(1) + train() + cfg + " --batch 4 : -np 1 " + train() + cfg +
                        " --batch 5",
                    120);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("ranks disagree on the run (every rank must be started with the same "
                       "config, overrides and flags): rank 1: --batch 5 (rank 0: 4)"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace remat
