// The bad-input suite: every class of broken input the tools must refuse (and the
// README's promises), run as processes. Each case asserts a non-zero exit, a message that names
// the file (and the line, node, step or field), and that no output file was left behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "tests/source_dir.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

const std::string kSmallCnn = test_source_dir() + "/configs/small_cnn.yaml";

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

class BadInput : public ToolRunTest {
 protected:
  // The run failed with `code`, its stderr holds every one of `want`, and none of `outputs`
  // (paths in the scratch directory) exists, not even as a temporary.
  void expect_refused(const RunResult& r, int code, const std::vector<std::string>& want,
                      const std::vector<std::string>& outputs) {
    EXPECT_EQ(r.code, code) << "stdout:\n" << r.out << "stderr:\n" << r.err;
    for (const auto& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "want '" << w
                                                                           << "' in:\n" << r.err;
    for (const auto& o : outputs) {
      EXPECT_FALSE(exists(path(o))) << o << " was left behind";
      EXPECT_FALSE(exists(path(o) + ".tmp")) << o << ".tmp was left behind";
    }
  }

  // A problem file of nodes a (no deps) and b (reads a) with the given sizes.
  std::string problem(const std::string& name, int64_t constant, int64_t bytes_a, int64_t bytes_b,
                      int64_t workspace_b) {
    nlohmann::json j = {
        {"format", "remat-problem/1"},
        {"name", "p"},
        {"constant_bytes", constant},
        {"nodes",
         {{{"name", "a"}, {"kind", "forward"}, {"cost", 1}, {"bytes", bytes_a}, {"deps", nlohmann::json::array()}},
          {{"name", "b"}, {"kind", "loss"}, {"cost", 1}, {"bytes", bytes_b},
           {"workspace_bytes", workspace_b}, {"deps", {0}}}}}};
    write(path(name), j.dump());
    return path(name);
  }

  // `train` on the small CNN (4 samples, 2 steps) writing a checkpoint; returns its path.
  std::string checkpoint() {
    const std::string ck = path("ck.safetensors");
    RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 2 --save '" + ck + "'");
    EXPECT_EQ(r.code, 0) << r.err;
    return ck;
  }

  std::string train_resume(const std::string& ck) {
    return "--config '" + kSmallCnn + "' --batch 4 --steps 3 --resume '" + ck + "' --save '" +
           path("out.safetensors") + "'";
  }
};

// ---- sizes that overflow (Note [checked sizes]) --------------------------------------------
TEST_F(BadInput, ProblemWorkspaceNearInt64MaxIsRefused) {
  const std::string p = problem("p.json", 100, 8, 8, std::numeric_limits<int64_t>::max() - 5);
  expect_refused(run(PLAN_EXE, "--problem '" + p + "' --budget 1GB -o '" + path("s.json") + "'"),
                 1, {p + ": nodes[1] 'b'", "field 'workspace_bytes'", "out of range"}, {"s.json"});
}

TEST_F(BadInput, ProblemConstantPlusBytesOverflowIsRefused) {
  const int64_t big = int64_t{3} << 60;  // each fits; constant + a + b does not
  const std::string p = problem("p.json", big, big, 8, 0);
  expect_refused(run(PLAN_EXE, "--problem '" + p + "' --budget 1GB -o '" + path("s.json") + "'"),
                 1, {p + ": nodes[0] 'a'", "field 'bytes", "out of range"}, {"s.json"});
}

TEST_F(BadInput, ProblemRescaledPastTheLimitIsRefused) {
  const std::string p = problem("p.json", 0, int64_t{1} << 40, 8, 0);
  expect_refused(run(PLAN_EXE, "--problem '" + p + "' --batch 1099511627776 --budget 1GB -o '" +
                                   path("s.json") + "'"),
                 1, {"nodes[0] 'a'", "field 'bytes'", "at batch 1099511627776"}, {"s.json"});
}

TEST_F(BadInput, ProblemDuplicateNodeNamesAreRefused) {
  write(path("p.json"), R"({"format": "remat-problem/1", "nodes": [
    {"name": "x", "kind": "forward", "cost": 1, "bytes": 4, "deps": []},
    {"name": "x", "kind": "loss", "cost": 1, "bytes": 4, "deps": [0]}]})");
  expect_refused(run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget 1GB -o '" +
                                   path("s.json") + "'"),
                 1, {path("p.json") + ": nodes[1] 'x'", "duplicate node name", "nodes[0]"},
                 {"s.json"});
}

TEST_F(BadInput, ConfigWhoseInputOverflowsIsRefused) {
  write(path("m.yaml"), "name: m\ninput: [16777216, 16777216, 16777216]\nclasses: 2\nbatch: 8\n"
                        "layers:\n  - {name: fc, op: dense, units: 2}\n");
  expect_refused(run(PLAN_EXE, "--config '" + path("m.yaml") + "' --budget 1GB -o '" +
                                   path("s.json") + "'"),
                 1, {path("m.yaml") + ":2:1: model: input batch [8, 16777216", "field 'input'",
                     "out of range"},
                 {"s.json"});
}

TEST_F(BadInput, NestedRepeatBeyondTheLayerLimitIsRefusedAtOnce) {
  write(path("m.yaml"), "name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayers:\n"
                        "  - name: outer\n    repeat: 1000\n    layers:\n"
                        "      - name: inner\n        repeat: 1000\n        layers:\n"
                        "          - {name: r, op: relu}\n"
                        "  - {name: gap, op: global_avgpool}\n  - {name: fc, op: dense, units: 2}\n");
  expect_refused(run(PLAN_EXE, "--config '" + path("m.yaml") + "' --budget 1GB -o '" +
                                   path("s.json") + "'"),
                 1, {path("m.yaml") + ":7:13: block 'outer': field 'repeat'", "more than 10000 layers"},
                 {"s.json"});
}

// ---- JSON and paths that name no file otherwise --------------------------------------------
TEST_F(BadInput, NumberOverflowInJsonNamesTheFile) {
  write(path("p.json"), R"({"format": "remat-problem/1", "nodes": [
    {"name": "x", "kind": "forward", "cost": 1e999, "bytes": 4, "deps": []}]})");
  expect_refused(run(PLAN_EXE, "--problem '" + path("p.json") + "' --budget 1GB"), 1,
                 {path("p.json") + ": invalid JSON", "number overflow"}, {});
  write(path("c.json"), R"({"format": "remat-costs/1", "unit": "flops", "batch": 1e999, "nodes": []})");
  expect_refused(run(PLAN_EXE, "--config '" + kSmallCnn + "' --cost-model '" + path("c.json") +
                                   "' --budget 1GB"),
                 1, {path("c.json") + ": invalid JSON", "number overflow"}, {});
}

TEST_F(BadInput, DirectoriesGivenAsInputFilesAreNamed) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  const std::string d = path("d");
  expect_refused(run(PLAN_EXE, "--problem '" + d + "' --budget 1GB"), 1,
                 {d + ": is a directory, expected a problem file"}, {});
  expect_refused(run(PLAN_EXE, "--config '" + d + "' --budget 1GB"), 1,
                 {d + ": is a directory, expected a model config"}, {});
  expect_refused(run(PLAN_EXE, "--config '" + kSmallCnn + "' --cost-model '" + d + "' --budget 1GB"),
                 1, {d + ": is a directory, expected a cost table"}, {});
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 --budget 1GB --plan '" +
                                    d + "' --save '" + path("o.safetensors") + "'"),
                 1, {d + ": is a directory, expected a plan or schedule"}, {"o.safetensors"});
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 --resume '" + d +
                                    "' --save '" + path("o.safetensors") + "'"),
                 1, {d + ": is a directory, expected a safetensors file"}, {"o.safetensors"});
}

// ---- plans ----------------------------------------------------------------------------------
TEST_F(BadInput, StructurallyBrokenPlanNamesFileAndStep) {
  RunResult ok = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 1 --budget 1GB "
                                "--strategy all-keep --save-plan '" + path("plan.json") + "'");
  ASSERT_EQ(ok.code, 0) << ok.err;
  nlohmann::json plan = nlohmann::json::parse(read_whole_file(path("plan.json")));
  // Drop the first free: a value stays in memory and is computed again later or never freed.
  auto& steps = plan["steps"];
  size_t first_free = 0;
  while (!steps[first_free].contains("free")) ++first_free;
  const std::string freed = steps[first_free]["free"];
  steps.erase(first_free);
  write(path("broken.json"), plan.dump());
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 1 --budget 1GB "
                                "--plan '" + path("broken.json") + "' --save '" +
                                    path("o.safetensors") + "'"),
                 1, {path("broken.json") + ": ", "'" + freed + "'"}, {"o.safetensors"});
  // A compute before its input exists.
  plan = nlohmann::json::parse(read_whole_file(path("plan.json")));
  std::swap(plan["steps"][0], plan["steps"][1]);
  write(path("swapped.json"), plan.dump());
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 1 --budget 1GB "
                                "--plan '" + path("swapped.json") + "'"),
                 1, {path("swapped.json") + ": steps[0]: computes", "is not in memory"}, {});
}

TEST_F(BadInput, UnknownPlanFormatListsTheAcceptedOnes) {
  write(path("p.json"), R"({"format": "remat-plan/2", "steps": []})");
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --steps 1 --budget 1GB --plan '" +
                                    path("p.json") + "' --save '" + path("o.safetensors") + "'"),
                 1, {path("p.json") + ": field 'format': \"remat-plan/2\"", "remat-plan/1",
                     "remat-schedule/1"},
                 {"o.safetensors"});
}

// ---- checkpoints ----------------------------------------------------------------------------
TEST_F(BadInput, CheckpointWithNanOrInfIsRefused) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SafeTensorFile f = safetensors_load(checkpoint());
    for (auto& t : f.tensors)
      if (t.name == "fc1.weight") std::memcpy(t.data.data() + 8, &bad, sizeof bad);
    safetensors_save(path("bad.safetensors"), f.tensors, f.metadata);  // valid checksums
    expect_refused(run(TRAIN_EXE, train_resume(path("bad.safetensors"))), 1,
                   {path("bad.safetensors") + ": tensor 'fc1.weight': element 2 is",
                    std::isnan(bad) ? "nan" : "inf"},
                   {"out.safetensors"});
  }
}

TEST_F(BadInput, CheckpointWithANegativeStepIsRefused) {
  SafeTensorFile f = safetensors_load(checkpoint());
  f.metadata["step"] = "-3";
  safetensors_save(path("bad.safetensors"), f.tensors, f.metadata);
  expect_refused(run(TRAIN_EXE, train_resume(path("bad.safetensors"))), 1,
                 {path("bad.safetensors") + ": metadata 'step'", "'-3'"}, {"out.safetensors"});
}

TEST_F(BadInput, CheckpointWithAFlippedDataBitIsRefused) {
  std::string bytes = read_whole_file(checkpoint());
  bytes[bytes.size() - 3] ^= 0x10;  // inside the last tensor's data
  write(path("bad.safetensors"), bytes);
  expect_refused(run(TRAIN_EXE, train_resume(path("bad.safetensors"))), 1,
                 {path("bad.safetensors") + ": tensor '", "checksum mismatch"}, {"out.safetensors"});
}

TEST_F(BadInput, CheckpointWithoutChecksumsLoadsWithANote) {
  // The checkpoint's header without its checksum entries: a file from before checksums.
  const std::string bytes = read_whole_file(checkpoint());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  auto& meta = header["__metadata__"];
  for (auto it = meta.begin(); it != meta.end();)
    it = it.key().rfind("checksum.", 0) == 0 ? meta.erase(it) : std::next(it);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t len = text.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  write(path("old.safetensors"), out + text + bytes.substr(8 + n));
  RunResult r = run(TRAIN_EXE, train_resume(path("old.safetensors")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: " + path("old.safetensors") + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no checksum"), std::string::npos) << r.out;
  EXPECT_TRUE(exists(path("out.safetensors")));
}

TEST_F(BadInput, CheckpointAfterMoreStepsThanAskedIsRefused) {
  const std::string ck = checkpoint();  // after step 2
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 1 --resume '" +
                                    ck + "' --save '" + path("out.safetensors") + "'"),
                 1, {ck + ": checkpoint after step 2, beyond --steps 1"}, {"out.safetensors"});
}

// ---- training that diverges (Note [finite check]) ------------------------------------------
TEST_F(BadInput, NonFiniteLossStopsAtTheStepNamingTheNode) {
  std::string cfg = read_whole_file(kSmallCnn);
  const size_t lr = cfg.find("lr: 0.02");
  ASSERT_NE(lr, std::string::npos);
  cfg.replace(lr, 8, "lr: 1000000");
  write(path("div.yaml"), cfg);
  const std::string args = "--config '" + path("div.yaml") + "' --batch 4 --steps 6 --save '" +
                           path("out.safetensors") + "'";
  RunResult r = run(TRAIN_EXE, args);
  expect_refused(r, 3, {"step 3: the loss is", "the first non-finite output is node 'conv2'",
                        "--no-check-finite"},
                 {});
  // Note [saving at an error]: --save holds the state after step 2, the last finite one, with
  // the running statistics step 3's forward spoiled reset (named); it loads as a checkpoint.
  EXPECT_NE(r.out.find("checkpoint after step 2 written to " + path("out.safetensors") +
                       " before the error below"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reset to their initial values in it: bn2.running_mean, bn2.running_var"),
            std::string::npos) << r.out;
  EXPECT_FALSE(exists(path("out.safetensors.tmp")));
  const SafeTensorFile ck = safetensors_load(path("out.safetensors"));
  EXPECT_EQ(ck.metadata.at("step"), "2");
  for (const SafeTensor& t : ck.tensors)
    for (float x : t.f32()) ASSERT_TRUE(std::isfinite(x)) << t.name;
  RunResult resumed = run(TRAIN_EXE, "--config '" + path("div.yaml") + "' --batch 4 --steps 3 "
                                      "--no-check-finite --resume '" + path("out.safetensors") + "'");
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + path("out.safetensors") + " after step 2"),
            std::string::npos) << resumed.out;
  RunResult on = run(TRAIN_EXE, args + " --no-check-finite");
  EXPECT_EQ(on.code, 0) << on.err;  // the opt-out trains on, as before
  EXPECT_NE(on.out.find("nan"), std::string::npos) << on.out;
}

// ---- outputs --------------------------------------------------------------------------------
TEST_F(BadInput, NonRegularOutputTargetsAreRefusedBeforeTraining) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 1 --save '" +
                                   path("fifo") + "'");
  expect_refused(r, 1, {"--save " + path("fifo") + ": exists and is not a regular file"}, {});
  EXPECT_EQ(r.out.find("step"), std::string::npos) << "refused before training:\n" << r.out;
  struct stat st {};
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO is still a FIFO";
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  expect_refused(run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 1GB -o '" + path("d") + "'"),
                 1, {"-o" , path("d") + ": exists and is not a regular file (a directory)"}, {});
  expect_refused(run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 1GB -o '" +
                                   path("none/s.json") + "'"),
                 1, {path("none/s.json") + ": directory '" + path("none") + "' does not exist"},
                 {"none"});
}

TEST_F(BadInput, AFailedWriteLeavesNoFileAndKeepsTheOldOne) {
  // A 1 KiB file-size limit (SIGXFSZ ignored, so write() fails with EFBIG) cuts the problem
  // file short: nothing may appear, and an existing file must keep its contents.
  const std::string limit = "trap '' XFSZ; ulimit -f 1;";
  const std::string args = "--config '" + kSmallCnn + "' --write-problem '" + path("p.json") + "'";
  expect_refused(run(PLAN_EXE, args, limit), 1, {path("p.json") + ".tmp: cannot write"}, {"p.json"});
  write(path("p.json"), "old");
  RunResult r = run(PLAN_EXE, args, limit);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(read_whole_file(path("p.json")), "old");
  EXPECT_FALSE(exists(path("p.json.tmp")));
}

// Note [file-size limit]: SIGXFSZ no longer kills `train`. Past `ulimit -f` the metrics stop
// on a whole line (training goes on) and the --save that does not fit is an error that leaves
// no temporary behind. 8 KB holds about 40 of the 100 steps' metrics lines (each near 190
// bytes) and none of small_cnn's 1.1 MB of weights.
TEST_F(BadInput, AFileSizeLimitFailsTheWritesInsteadOfKillingTrain) {
  RunResult r = run(TRAIN_EXE, "--config '" + kSmallCnn + "' --batch 4 --steps 100 --log-every 50 "
                    "--metrics '" + path("m.jsonl") + "' --save '" + path("s.safetensors") + "'",
                    "ulimit -f 8;");
  expect_refused(r, 1, {"--metrics " + path("m.jsonl") + ": cannot write (File too large) after step",
                        "training goes on", path("s.safetensors") + ".tmp: cannot write: File too large"},
                 {"s.safetensors"});
  EXPECT_NE(r.out.find("step 100/100"), std::string::npos) << "trained to the end:\n" << r.out;
  const std::string metrics = read_whole_file(path("m.jsonl"));
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(metrics.back(), '\n') << "the metrics end on a whole line";
}

// A config that is a FIFO (or any other non-regular file) is refused at once instead of waiting
// for a writer that never comes.
TEST_F(BadInput, AConfigThatIsNotARegularFileIsRefusedAtOnce) {
  ASSERT_EQ(::mkfifo(path("c.yaml").c_str(), 0644), 0);
  for (const char* exe : {TRAIN_EXE, PLAN_EXE})
    expect_refused(run(exe, "--config '" + path("c.yaml") + "' --budget 1GB", "timeout 60"), 1,
                   {path("c.yaml") + ": is a FIFO (named pipe), not a regular file; expected a "
                                     "model config"},
                   {});
  expect_refused(run(PLAN_EXE, "--config /dev/zero --budget 1GB", "timeout 60"), 1,
                 {"/dev/zero: is a character device, not a regular file"}, {});
}

// ---- memory ---------------------------------------------------------------------------------
TEST_F(BadInput, HostAllocationFailureNamesWhatWasAllocated) {
  // 2^20 samples of 3x4096x4096 floats: 2.1e14 bytes, more than a process can address.
  const std::string big = "--config '" + kSmallCnn + "' --batch 1048576 --input 3x4096x4096";
  expect_refused(run(PROFILE_EXE, big + " --no-cache -o '" + path("c.json") + "'"), 1,
                 {"profiling node 'conv1'", "host allocation of", "failed"}, {"c.json"});
  // train's first allocation of that size is the loader's ring of prefetched batches.
  expect_refused(run(TRAIN_EXE, big + " --steps 1 --save '" + path("o.safetensors") + "'"), 1,
                 {"a prefetched batch of [1048576, 3, 4096, 4096]: host allocation of", "failed"},
                 {"o.safetensors"});
}

// The GPU's algorithm choice has no CPU counterpart: --workspace-limit on the CPU is refused,
// as is a size that is not one.
TEST_F(BadInput, WorkspaceLimitNeedsTheGpuAndASize) {
  for (const char* exe : {TRAIN_EXE, PROFILE_EXE}) {
    const std::string name = exe == std::string(TRAIN_EXE) ? "train" : "profile";
    expect_refused(run(exe, "--config '" + kSmallCnn + "' --workspace-limit 1GB"), 2,
                   {name + ": --workspace-limit needs --device cuda"}, {});
    expect_refused(run(exe, "--config '" + kSmallCnn + "' --device cuda --workspace-limit lots"),
                   2, {name + ": --workspace-limit"}, {});
  }
}

// ---- what the README promises ---------------------------------------------------------------
TEST_F(BadInput, ReadmePromisedErrors) {
  write(path("key.yaml"), "name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayers:\n"
                          "  - {name: fc, op: dense, units: 2, unit: 3}\n");
  expect_refused(run(PLAN_EXE, "--config '" + path("key.yaml") + "' --budget 1GB"), 1,
                 {path("key.yaml") + ":6:", "layer 'fc'", "unit"}, {});
  write(path("op.yaml"), "name: m\ninput: [3, 8, 8]\nclasses: 2\nbatch: 2\nlayers:\n"
                         "  - {name: c, op: conv3, filters: 2}\n");
  expect_refused(run(PLAN_EXE, "--config '" + path("op.yaml") + "' --budget 1GB"), 1,
                 {path("op.yaml") + ":6:", "unknown op 'conv3'", "conv2d"}, {});
  expect_refused(run(PLAN_EXE, "--config '" + kSmallCnn + "' --budget 1KB -o '" + path("s.json") + "'"),
                 1, {"below the minimum"}, {"s.json"});
  expect_refused(run(TRAIN_EXE, "--config '" + kSmallCnn + "' --stepz 3"), 2,
                 {"unknown flag '--stepz'"}, {});
}

}  // namespace
}  // namespace remat
