// `train` and the planning tools as a user runs them: logs without carriage returns,
// periodic checkpoints, metrics, config overrides, exit codes, human units and the small wording
// fixes (stopping on a signal: test_train_stop.cpp). Every case runs the tools as processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backends/cuda_backend.h"
#include "runtime/io/safetensors.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";
const std::string kSmallDag = test_source_dir() + "/configs/small_dag.yaml";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    out.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

class TrainCli : public ToolRunTest {
 protected:
  std::string small(const std::string& more) {
    return "--config '" + kSmallCnn + "' --batch 4 " + more;
  }
};

// ---- logs (Note [live lines]) ---------------------------------------------------------------
TEST_F(TrainCli, PipedOutputHasNoCarriageReturns) {
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --budget 9MB --steps 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("                    "), std::string::npos) << "no blanking:\n" << r.err;
  // One line per step with elapsed time, ms/step and an ETA; "1 recompute", not "1 recomputes".
  EXPECT_NE(r.out.find("1 recompute,"), std::string::npos) << r.out;
  int steps = 0;
  for (const std::string& l : lines_of(r.out))
    if (l.rfind("step ", 0) == 0) {
      ++steps;
      EXPECT_NE(l.find(" ms/step"), std::string::npos) << l;
      EXPECT_NE(l.find("elapsed "), std::string::npos) << l;
      EXPECT_NE(l.find("eta "), std::string::npos) << l;
    }
  EXPECT_EQ(steps, 3) << r.out;
  RunResult mb = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies chen-greedy");
  ASSERT_EQ(mb.code, 0) << mb.err;
  EXPECT_EQ(mb.err.find('\r'), std::string::npos) << mb.err;
  EXPECT_NE(mb.err.find("chen-greedy:"), std::string::npos) << "plain progress lines:\n" << mb.err;
}

// ---- resuming --------------------------------------------------------------------------------
TEST_F(TrainCli, ResumingACheckpointThatIsDoneIsAnErrorAndKeepsIt) {
  const std::string ck = path("ck.safetensors");
  ASSERT_EQ(run(TRAIN_EXE, small("--steps 2 --save '" + ck + "'")).code, 0);
  const std::string before = read_whole_file(ck);
  RunResult r = run(TRAIN_EXE, small("--steps 2 --resume '" + ck + "' --save '" + ck + "'"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find(ck + ": checkpoint after step 2 has already done --steps 2: nothing to "
                            "train"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << r.out;
  EXPECT_EQ(read_whole_file(ck), before) << "the checkpoint was rewritten";
}

// Note [side outputs]: the metrics file meets a full disk (a 8 KiB file-size limit, SIGXFSZ
// ignored, so writes fail with EFBIG): train says why, keeps the metrics file on its last whole
// line, trains every step, writes the checkpoint and exits 4.
TEST_F(TrainCli, AFailedMetricsFileStopsTheMetricsNotTheRun) {
  const std::string cfg = path("tiny.yaml"), m = path("m.jsonl"), ck = path("ck.safetensors");
  {
    std::ofstream f(cfg);
    f << "name: tiny\ninput: [1, 4, 4]\nclasses: 2\nbatch: 2\nlayers:\n"
         "  - {name: flat, op: flatten}\n  - {name: fc, op: dense, units: 2}\n";
  }
  RunResult r = run(TRAIN_EXE, "--config '" + cfg + "' --steps 80 --log-every 1000 --metrics '" +
                                   m + "' --save '" + ck + "'",
                    "trap '' XFSZ; ulimit -f 8;");
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("warning: --metrics " + m + ": cannot write (File too large) after step "),
            std::string::npos)
      << r.err;
  const std::vector<std::string> lines = lines_of(read_whole_file(m));
  ASSERT_GT(lines.size(), 5u);
  ASSERT_LT(lines.size(), 80u);
  int64_t step = 0;
  for (const std::string& l : lines) {
    if (l.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(l);  // throws on a cut line
    EXPECT_EQ(j.at("step").get<int64_t>(), ++step);
  }
  EXPECT_EQ(read_whole_file(m).back(), '\n');
  ASSERT_TRUE(exists(ck));
  EXPECT_EQ(safetensors_load(ck).metadata.at("step"), "80");
}

// ---- periodic checkpoints and metrics --------------------------------------------------------
TEST_F(TrainCli, SaveEveryKeepsTheLastKAndMetricsHasOneLinePerStep) {
  const std::string ck = path("ck.safetensors"), m = path("m.jsonl");
  RunResult r = run(TRAIN_EXE, small("--steps 7 --save '" + ck + "' --save-every 2 --keep-last 2 "
                                     "--metrics '" + m + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(exists(path("ck-step2.safetensors")));  // the oldest, removed
  EXPECT_TRUE(exists(path("ck-step4.safetensors")));
  EXPECT_TRUE(exists(path("ck-step6.safetensors")));
  EXPECT_EQ(safetensors_load(path("ck-step6.safetensors")).metadata.at("step"), "6");
  EXPECT_EQ(safetensors_load(ck).metadata.at("step"), "7");
  const std::vector<std::string> ls = lines_of(read_whole_file(m));
  ASSERT_EQ(ls.size(), 7u);
  for (size_t i = 0; i < ls.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(ls[i]);
    EXPECT_EQ(j.at("step"), static_cast<int64_t>(i + 1));
    for (const char* k : {"loss", "lr", "samples_per_second", "ms_per_step", "peak_bytes",
                          "recomputes", "elapsed_seconds"})
      EXPECT_TRUE(j.contains(k)) << k << " in " << ls[i];
    EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 0.02);  // small_cnn's
  }
  // Note [metrics on resume]: resumed from step 4, the file keeps steps 1 to 4 and goes on; the
  // lines of steps 5 to 7 (of the run that went past that checkpoint) are replaced.
  RunResult resumed = run(TRAIN_EXE, small("--steps 8 --resume '" + path("ck-step4.safetensors") +
                                           "' --metrics '" + m + "'"));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("metrics: " + m + " continues after step 4 (4 lines kept; 3 lines "
                             "of later steps or cut short dropped)"),
            std::string::npos)
      << resumed.out;
  const std::vector<std::string> all = lines_of(read_whole_file(m));
  ASSERT_EQ(all.size(), 8u) << read_whole_file(m);
  for (size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(all[i]).at("step"), static_cast<int64_t>(i + 1)) << all[i];
  EXPECT_EQ(all[3], ls[3]) << "the first run's lines are kept as written";
  RunResult no_save = run(TRAIN_EXE, small("--steps 2 --save-every 1"));
  EXPECT_EQ(no_save.code, 2);
  EXPECT_NE(no_save.err.find("--save-every needs --save"), std::string::npos) << no_save.err;
}

// ---- gradient accumulation (Note [gradient accumulation]) ------------------------------------
// The header says how a step's samples are split, the metrics and the summary count a step's
// samples, the YAML key and the flag agree (the flag wins), and a run resumed from step 2
// ends with the weights of the uninterrupted run, bit for bit, under a budget.
TEST_F(TrainCli, AccumulateSplitsAStepIntoMicroBatches) {
  const std::string m = path("m.jsonl"), sum = path("s.json"), whole = path("whole.st");
  const std::string common =
      "--config '" + kSmallCnn + "' --batch 4 --budget 3MB --strategy chen-greedy ";
  RunResult r = run(TRAIN_EXE, common + "--steps 4 --accumulate 3 --metrics '" + m +
                                   "' --summary '" + sum + "' --save '" + whole + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("batch 12 per step (3 micro-batches of 4, gradients accumulated)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(exact match)"), std::string::npos) << r.out;
  for (const std::string& l : lines_of(read_whole_file(m)))
    EXPECT_EQ(nlohmann::json::parse(l).at("batch"), 12) << l;
  const nlohmann::json s = nlohmann::json::parse(read_whole_file(sum));
  EXPECT_EQ(s.at("micro_batches"), 3);
  EXPECT_EQ(s.at("global_batch"), 12);
  RunResult yaml = run(TRAIN_EXE, common + "--steps 1 accumulate=2");
  EXPECT_NE(yaml.out.find("batch 8 per step (2 micro-batches of 4"), std::string::npos) << yaml.out;
  RunResult flag = run(TRAIN_EXE, common + "--steps 1 accumulate=2 --accumulate 3");
  EXPECT_NE(flag.out.find("batch 12 per step (3 micro-batches"), std::string::npos) << flag.out;

  const std::string half = path("half.st"), resumed = path("resumed.st");
  ASSERT_EQ(run(TRAIN_EXE, common + "--steps 2 --accumulate 3 --save '" + half + "'").code, 0);
  RunResult rest = run(TRAIN_EXE, common + "--steps 4 --accumulate 3 --resume '" + half +
                                      "' --save '" + resumed + "'");
  ASSERT_EQ(rest.code, 0) << rest.err;
  const SafeTensorFile a = safetensors_load(whole), b = safetensors_load(resumed);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const SafeTensor& t : a.tensors) {
    const SafeTensor* u = b.find(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(t.f32(), u->f32()) << t.name;
  }
}

// ---- the slowdown against keep-everything ----------------------------------------------------
TEST_F(TrainCli, CompareReportsTheMeasuredSlowdownAgainstAKeepEverythingRun) {
  const std::string keep = path("keep.json"), tight = path("tight.json");
  ASSERT_EQ(run(TRAIN_EXE, small("--steps 3 --summary '" + keep + "'")).code, 0);
  RunResult r = run(TRAIN_EXE, small("--steps 3 --budget 1GB --summary '" + tight +
                                     "' --compare '" + keep + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("slowdown: [0-9.]+x against keep-everything "
                                                  "\\([0-9.]+ ms per step here, [0-9.]+ ms in ")))
      << r.out;
  RunResult not_keep = run(TRAIN_EXE, small("--steps 2 --compare '" + tight + "'"));
  EXPECT_EQ(not_keep.code, 1);
  EXPECT_NE(not_keep.err.find("must keep everything"), std::string::npos) << not_keep.err;
  EXPECT_EQ(not_keep.out.find("step "), std::string::npos) << "refused before training";
  RunResult other = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 8 --steps 2 --compare '" +
                                       keep + "'");
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("at batch 4 on cpu, not of this one"), std::string::npos) << other.err;
}

// A plan that offloads with measured costs (Note [copy streams]): the time line and the
// summary give the predicted step time, copies included, beside the measured one; with FLOPs
// costs there is no predicted time.
TEST_F(TrainCli, AnOffloadingRunPredictsItsStepTimeWithMeasuredCosts) {
  const std::string s = path("s.json");
  RunResult r = run(TRAIN_EXE, small("--steps 2 --budget 2.78MB --strategy all-keep-offload "
                                     "--link-bandwidth 25 --copy-overlap stream --cost-model "
                                     "profile --summary '" + s + "'"),
                    "REMAT_CACHE_DIR='" + path("cache") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("offload to host memory"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("time: predicted [0-9.]+ ms per step \\(computes "
                                                  "and the copies they wait for\\), measured ")))
      << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_whole_file(s));
  EXPECT_GT(j.at("predicted_ms_per_step").get<double>(), 0);
  ASSERT_EQ(run(TRAIN_EXE, small("--steps 1 --summary '" + s + "'")).code, 0);
  EXPECT_TRUE(nlohmann::json::parse(read_whole_file(s)).at("predicted_ms_per_step").is_null());
}

// Note [workspaces from the backend]: a cost table whose workspaces are not this backend's (here
// every node's raised by 1 MiB, as a table measured under a larger workspace limit would be)
// plans with the backend's, so the predicted peak is still the measured one, and train says
// how many nodes differ.
TEST_F(TrainCli, ATablesForeignWorkspacesGiveWayToTheBackends) {
  const std::string costs = path("c.json"), s = path("s.json");
  ASSERT_EQ(run(PROFILE_EXE, "--config '" + kSmallCnn + "' --batch 4 --repeats 1 --warmup 0 "
                             "--no-cache -o '" + costs + "'").code, 0);
  nlohmann::json t = nlohmann::json::parse(read_whole_file(costs));
  size_t nodes = 0;
  for (nlohmann::json& n : t.at("nodes"))
    n["workspace_bytes"] = n.value("workspace_bytes", int64_t{0}) + (int64_t{1} << 20), ++nodes;
  std::ofstream(costs) << t.dump();
  RunResult r = run(TRAIN_EXE, small("--steps 1 --budget 3MB --strategy checkmate --time-limit 5 "
                                     "--cost-model '" + costs + "' --summary '" + s + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("costs: " + std::to_string(nodes) + " of " + std::to_string(nodes) +
                       " nodes need another workspace on cpu than " + costs),
            std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(read_whole_file(s));
  EXPECT_EQ(j.at("predicted_peak_bytes"), j.at("measured_peak_bytes"));
}

// ---- overrides (Note [config overrides]) ------------------------------------------------------
TEST_F(TrainCli, OverridesAreAppliedAndValidatedLikeTheFile) {
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 batch=6 "
                               "layers.conv1.filters=8 optimizer.lr=0.01 optimizer.momentum=0.9 "
                               "optimizer.nesterov=true --metrics '" + path("m.jsonl") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("batch 6,"), std::string::npos) << r.out;
  // One line says what each override did: a change, the config's own value, a new key.
  EXPECT_EQ(lines_of(r.out).at(0),
            "overrides: batch 32 -> 6, layers.conv1.filters 16 -> 8, optimizer.lr 0.02 -> 0.01, "
            "optimizer.momentum 0.9 (the config's value: no change), optimizer.nesterov true "
            "(not in the config)")
      << r.out;
  const nlohmann::json j = nlohmann::json::parse(lines_of(read_whole_file(path("m.jsonl"))).at(0));
  EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 0.01);
  RunResult unknown = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 layers.conv1.filtrs=8");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("override 'layers.conv1.filtrs=8': layer 'conv1': field 'filtrs': "
                             "unknown field for op 'conv2d' (did you mean 'filters'?)"),
            std::string::npos) << unknown.err;
  RunResult bad = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 optimizer.lr=fast");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("override 'optimizer.lr=fast': optimizer: field 'lr': expected a number"),
            std::string::npos) << bad.err;
}

// ---- exit codes (Note [exit codes]) ---------------------------------------------------------
TEST_F(TrainCli, ExitCodesAreTheSameInEveryTool) {
  struct Case {
    const char* exe;
    std::string args;
    int code;
  };
  const std::string cnn = " --config '" + kSmallCnn + "'";
  const std::vector<Case> cases = {
      {TRAIN_EXE, "--stepz 3", 2},
      {TRAIN_EXE, "--steps 3", 2},                      // --config missing
      {TRAIN_EXE, cnn + " --steps many", 2},
      {TRAIN_EXE, cnn + " --strategy lp", 2},            // needs --budget
      {TRAIN_EXE, cnn + " --plan p.json", 2},            // needs --budget
      {TRAIN_EXE, cnn + " --copy-overlap stream", 2},    // needs --budget
      {TRAIN_EXE, cnn + " --budget 1GB --copy-overlap async", 2},
      {EVALUATE_EXE, cnn + " --strategy lp", 2},         // the same rule, before --checkpoint
      {EVALUATE_EXE, cnn + " --strategy lp --checkpoint c.safetensors", 2},
      {TRAIN_EXE, cnn + " --budget lots", 2},
      {TRAIN_EXE, cnn + " --input 3xq", 2},
      {TRAIN_EXE, cnn + " --keep-last 2", 2},            // needs --save-every
      {TRAIN_EXE, cnn + " --budget 1KB --steps 1", 1},   // a valid budget that does not fit
      {TRAIN_EXE, "--config '" + path("none.yaml") + "'", 1},
      {PLAN_EXE, "--budget 1GB", 2},                     // no problem given
      {PLAN_EXE, cnn, 2},                                // --budget missing
      {PLAN_EXE, cnn + " --budget 1GB --strategies nope", 2},
      {MAXBATCH_EXE, cnn, 2},
      {MAXBATCH_EXE, cnn + " --problem p.json --budget 1GB", 2},
      {SWEEP_EXE, cnn, 2},
      {PROFILE_EXE, "", 2},
      {PLAN_EXE, cnn + " --budget 1KB", 1},
  };
  for (const Case& c : cases) {
    RunResult r = run(c.exe, c.args);
    EXPECT_EQ(r.code, c.code) << c.exe << " " << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << c.exe << " " << c.args;
  }
  for (const char* exe : {TRAIN_EXE, PLAN_EXE, MAXBATCH_EXE, SWEEP_EXE, PROFILE_EXE}) {
    RunResult v = run(exe, "--version");
    EXPECT_EQ(v.code, 0) << exe;
    EXPECT_NE(v.out.find("(remat) "), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("(git "), std::string::npos) << v.out;
    EXPECT_NE(v.out.find("build: "), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(", Cbc "), std::string::npos) << v.out;
    EXPECT_EQ(run(exe, "--help").code, 0) << exe;
  }
}

// ---- what a person reads --------------------------------------------------------------------
TEST_F(TrainCli, BytesInMessagesAreInHumanUnits) {
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 1000000");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(std::regex_search(r.err, std::regex("budget 1\\.00 MB is below the minimum "
                                                  "[0-9.]+ MB any schedule needs")))
      << r.err;
  RunResult t = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --budget 1000000 --steps 1");
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.err.find("budget 1.00 MB is below the minimum"), std::string::npos) << t.err;
  EXPECT_EQ(t.err.find(" bytes"), std::string::npos) << t.err;
}

TEST_F(TrainCli, StrategiesAllCanBeCombined) {
  RunResult r = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies "
                              "all,checkmate --time-limit 10 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 8u) << r.out;  // every strategy once
  RunResult bad = run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 20MB --strategies chekmate");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown strategy 'chekmate' (did you mean 'checkmate'?)"),
            std::string::npos) << bad.err;
}

TEST_F(TrainCli, MaxBatchShowsNotApplicable) {
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallDag + "' --budget 20MB --strategies "
                                  "all-keep,griewank");
  ASSERT_EQ(r.code, 0) << r.err;
  bool seen = false;
  for (const std::string& l : lines_of(r.out))
    if (l.rfind("griewank ", 0) == 0) {
      seen = true;
      EXPECT_NE(l.find("n/a"), std::string::npos) << l;
      EXPECT_NE(l.find("not applicable"), std::string::npos) << l;
    }
  EXPECT_TRUE(seen) << r.out;
  RunResult j = run(MAXBATCH_EXE, "--config '" + kSmallDag + "' --budget 20MB --strategies "
                                  "griewank --json --svg '" + path("mb.svg") + "'");
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_TRUE(nlohmann::json::parse(lines_of(j.out).at(0)).at("batch").is_null()) << j.out;
  EXPECT_NE(read_whole_file(path("mb.svg")).find(">n/a<"), std::string::npos);
}

TEST_F(TrainCli, MaxBatchVerifyFailsWhenARowFails) {
  if (cuda_device_available(nullptr)) GTEST_SKIP() << "a GPU is present: the rows would pass";
  RunResult r = run(MAXBATCH_EXE, "--config '" + kSmallCnn + "' --budget 6MB --strategies "
                                  "all-keep --verify --device cuda");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("failed: "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("maxbatch --verify: 1 row failed"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace remat
