// Note [step graphs]: the executor records a plan's walk at its second step and replays the
// record from then on. A recording backend stands in for CUDA graphs on the CPU: it wraps the
// CPU backend, keeps every call made while recording (with the context it was made with) and
// runs the list on replay, giving each kernel the replayed step as the device's copy of the
// step gives a captured kernel (Note [step source]). Replayed training is bit-identical to
// eager training, under recomputing plans, with dropout and batch norm, in fp32 and bf16; a new
// plan is recorded anew; a failed recording runs eagerly; steps that may not replay say why.
// What only a GPU shows (CUDA's capture rules, the device copy of the step) is gpu_verify's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "ops/registry.h"
#include "runtime/executor.h"
#include "runtime/graph/autodiff.h"
#include "tests/halfway_plan.h"
#include "tests/source_dir.h"

namespace remat {
namespace {

class RecordingBackend : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "recording cpu"; }
  void* raw_alloc(int64_t bytes) override { return cpu_->raw_alloc(bytes); }
  void raw_free(void* p) override { cpu_->raw_free(p); }
  void* host_alloc(int64_t bytes) override { return cpu_->host_alloc(bytes); }
  void host_free(void* p) override { cpu_->host_free(p); }
  // A host round trip cannot be recorded (CUDA invalidates the capture); copies between
  // backend memory, and into host_alloc memory, can.
  void copy_from_host(void* dst, const void* src, int64_t bytes) override {
    no_host_wait("copy_from_host");
    cpu_->copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, int64_t bytes) override {
    no_host_wait("copy_to_host");
    cpu_->copy_to_host(dst, src, bytes);
  }
  void copy_to_host_async(void* dst, const void* src, int64_t bytes) override {
    if (recording_) return keep([=](int64_t) { cpu_->copy_to_host_async(dst, src, bytes); });
    cpu_->copy_to_host_async(dst, src, bytes);
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (recording_) return keep([=](int64_t) { cpu_->copy(dst, src, bytes); });
    cpu_->copy(dst, src, bytes);
  }
  void fill_zero(void* dst, int64_t bytes) override {
    if (recording_) return keep([=](int64_t) { cpu_->fill_zero(dst, bytes); });
    cpu_->fill_zero(dst, bytes);
  }
  void synchronize() override { no_host_wait("synchronize"); }
  bool all_finite(const std::vector<FloatSpan>& spans) override {
    no_host_wait("all_finite");
    return cpu_->all_finite(spans);
  }
  int64_t workspace_bytes(const OpDef& op, const ExecContext& ctx) override {
    return cpu_->workspace_bytes(op, ctx);
  }
  void run(const OpDef& op, ExecContext& ctx) override {
    if (!recording_) {
      ++eager_runs;
      return cpu_->run(op, ctx);
    }
    if (fail_after >= 0 && static_cast<int>(record_.size()) >= fail_after)
      REMAT_FAIL("node '" << ctx.node->name << "' cannot be recorded (test)");
    keep([this, &op, c = ctx](int64_t step) mutable {
      c.step = step;  // what the device copy of the step gives a captured kernel
      cpu_->run(op, c);
    });
  }
  std::vector<double> time_run(const OpDef& op, ExecContext& ctx, int warmup,
                               int repeats) override {
    return cpu_->time_run(op, ctx, warmup, repeats);
  }

  bool begin_capture() override {
    if (fail_begin) REMAT_FAIL("cannot start recording (test)");
    recording_ = true;
    record_.clear();
    return true;
  }
  int end_capture(std::string* why, int64_t* launches) override {
    (void)why;
    recording_ = false;
    *launches = static_cast<int64_t>(record_.size());
    records_.push_back(std::move(record_));
    return static_cast<int>(records_.size()) - 1;
  }
  void abort_capture() override {
    recording_ = false;
    record_.clear();
    ++aborted;
  }
  void replay(int graph, int64_t step) override {
    if (step == fail_replay) REMAT_FAIL("replay " << graph << " fails (test)");
    ++replays;
    for (auto& f : records_.at(static_cast<size_t>(graph))) f(step);
  }
  void drop_graph(int graph) override {
    records_.at(static_cast<size_t>(graph)).clear();
    ++dropped;
  }

  int eager_runs = 0, replays = 0, dropped = 0, aborted = 0;
  int fail_after = -1;  // >= 0: the run() call after that many recorded calls throws
  bool fail_begin = false;  // begin_capture() throws
  int64_t fail_replay = -1;  // replaying at this step throws
  size_t records() const { return records_.size(); }

 private:
  void keep(std::function<void(int64_t)> f) { record_.push_back(std::move(f)); }
  void no_host_wait(const char* what) {
    if (recording_) REMAT_FAIL(what << " while recording");
  }

  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
  bool recording_ = false;
  std::vector<std::function<void(int64_t)>> record_;
  std::vector<std::vector<std::function<void(int64_t)>>> records_;
};

struct Model {
  OpRegistry ops = make_builtin_registry();
  ModelConfig cfg;
  Graph g;
  Model(const ModelConfig& c, const BuildOptions& bo) : cfg(c) {
    g = make_training_graph(build_forward_graph(cfg, ops, bo), ops, cfg.optimizer.op,
                            cfg.optimizer.attrs);
  }
};

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<float>> state;  // every parameter, gradient, buffer, optimizer state
  std::vector<StepResult> results;
  std::string note;
};

// `steps` steps of `plans[s % plans.size()]`... of plan_at(s), on `be` in arena mode.
Trained train(Model& m, Backend& be, const std::function<const ExecutionPlan&(int)>& plan_at,
              int steps, ExecutorOptions eo) {
  Executor ex(m.g, m.ops, be, eo);
  ex.init_parameters(m.cfg.seed);
  auto data = make_data_source(m.cfg, m.g.value(m.g.input).desc, m.g.value(m.g.label).desc, "");
  std::vector<uint32_t> x(static_cast<size_t>(m.g.value(m.g.input).desc.numel()));
  std::vector<int32_t> y(static_cast<size_t>(m.g.value(m.g.label).desc.numel()));
  Trained t;
  for (int s = 0; s < steps; ++s) {
    data->next_batch(s, x.data(), y.data());
    t.results.push_back(ex.run_step(plan_at(s), x.data(), y.data(), s));
    t.losses.push_back(t.results.back().loss);
  }
  for (size_t v = 0; v < m.g.values.size(); ++v)
    if (value_is_persistent(m.g.values[v].kind) && m.g.values[v].kind != ValueKind::Input &&
        m.g.values[v].kind != ValueKind::Label && dtype_is_float(m.g.values[v].desc.dtype))
      t.state.push_back(ex.read(static_cast<ValueId>(v)));
  t.note = ex.graph_note();
  return t;
}

void expect_bit_identical(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s)
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], sizeof(float)), 0)
        << "step " << s << ": " << a.losses[s] << " vs " << b.losses[s];
  ASSERT_EQ(a.state.size(), b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i)
    EXPECT_TRUE(a.state[i].size() == b.state[i].size() &&
                std::memcmp(a.state[i].data(), b.state[i].data(),
                            a.state[i].size() * sizeof(float)) == 0)
        << "persistent value #" << i << " differs";
}

ExecutionPlan plan_for(Model& m, Backend& be, const std::string& strategy) {
  return halfway_plan(m.g, m.ops, be, strategy, /*must_recompute=*/false);
}

ExecutorOptions arena(const ExecutionPlan& plan) {
  return ExecutorOptions{MemoryMode::Arena, plan.predicted_peak * 2};
}

// Replays against eager runs of the same plan: bit-identical losses and state; the first step
// ran eagerly, the second was recorded, every later one replayed, with the recorded counts.
void check_replay_matches_eager(Model& m, const std::string& strategy, int steps) {
  SCOPED_TRACE(m.cfg.name + " " + strategy);
  RecordingBackend rec;
  const ExecutionPlan plan = plan_for(m, rec, strategy);
  ExecutorOptions eager_opt = arena(plan);
  eager_opt.step_graphs = false;
  RecordingBackend plain;
  const Trained eager = train(m, plain, [&](int) -> const ExecutionPlan& { return plan; }, steps,
                              eager_opt);
  EXPECT_EQ(eager.note, "off: turned off (--no-cuda-graph)");
  EXPECT_EQ(plain.records(), 0u);
  const int runs_before = rec.eager_runs;
  const Trained replayed =
      train(m, rec, [&](int) -> const ExecutionPlan& { return plan; }, steps, arena(plan));
  expect_bit_identical(replayed, eager);
  EXPECT_EQ(rec.records(), 1u);
  EXPECT_EQ(rec.replays, steps - 1);
  int updates = 0;
  for (const Node& n : m.g.nodes) updates += n.kind == NodeKind::Update;
  // Eagerly: step 0's plan, and every step's optimizer updates.
  EXPECT_EQ(rec.eager_runs - runs_before,
            eager.results[0].computes + eager.results[0].recomputes + steps * updates);
  EXPECT_NE(replayed.note.find("step 1 recorded as"), std::string::npos) << replayed.note;
  for (int s = 0; s < steps; ++s) {
    EXPECT_EQ(replayed.results[s].replayed, s >= 1) << s;
    EXPECT_EQ(replayed.results[s].recorded, s == 1) << s;
    EXPECT_EQ(replayed.results[s].computes, eager.results[s].computes) << s;
    EXPECT_EQ(replayed.results[s].recomputes, eager.results[s].recomputes) << s;
    EXPECT_EQ(replayed.results[s].peak_bytes, plan.predicted_peak) << s;
  }
  if (strategy != "keep") {
    EXPECT_GT(eager.results[0].recomputes, 0) << "the plan recomputes nothing";
  }
}

std::string bn_dropout_path() { return test_source_dir() + "/tests/data/bn_dropout.yaml"; }

BuildOptions small(int64_t batch, DType precision = DType::F32) {
  BuildOptions bo;
  bo.batch = batch;
  bo.precision = precision;
  return bo;
}

TEST(StepGraphs, ReplayIsBitIdenticalWithDropoutAndBatchNorm) {
  Model m(load_model_config(bn_dropout_path()), {});
  check_replay_matches_eager(m, "keep", 5);
  check_replay_matches_eager(m, "chen-sqrtn", 5);
}

TEST(StepGraphs, ReplayIsBitIdenticalOnADagAndGpt2) {
  Model dag(load_model_config(test_source_dir() + "/configs/small_dag.yaml"), small(4));
  check_replay_matches_eager(dag, "checkmate", 4);
  BuildOptions bo = small(2);
  bo.sequence = 16;
  Model gpt(load_model_config(test_source_dir() + "/configs/gpt2_tiny.yaml"), bo);
  check_replay_matches_eager(gpt, "chen-greedy", 4);
}

TEST(StepGraphs, ReplayIsBitIdenticalInBf16) {
  Model m(load_model_config(test_source_dir() + "/configs/small_cnn.yaml"),
          small(4, DType::BF16));
  check_replay_matches_eager(m, "checkmate", 4);
}

// A new plan is run eagerly once and recorded anew; the old record is dropped.
TEST(StepGraphs, ANewPlanIsRecordedAnew) {
  Model m(load_model_config(bn_dropout_path()), {});
  RecordingBackend rec;
  const ExecutionPlan keep = plan_for(m, rec, "keep");
  const ExecutionPlan tight = plan_for(m, rec, "chen-sqrtn");
  auto plan_at = [&](int s) -> const ExecutionPlan& { return s < 3 ? keep : tight; };
  ExecutorOptions eo = arena(keep);
  const Trained replayed = train(m, rec, plan_at, 6, eo);
  eo.step_graphs = false;
  RecordingBackend plain;
  expect_bit_identical(replayed, train(m, plain, plan_at, 6, eo));
  EXPECT_EQ(rec.records(), 2u);
  EXPECT_EQ(rec.dropped, 2);  // keep's record when the plan changed, tight's at the end
  EXPECT_EQ(rec.replays, 4);  // steps 1, 2 (keep) and 4, 5 (tight)
  for (int s : {0, 3}) EXPECT_FALSE(replayed.results[s].replayed) << s;
}

// A call that cannot be recorded, a recording that cannot start, or a record whose first replay
// fails (dropped then): the step runs eagerly, as does every later one, and the note says why;
// the results are those of eager training.
TEST(StepGraphs, AFailedRecordingRunsEagerly) {
  Model m(load_model_config(bn_dropout_path()), {});
  enum Failure { kBegin, kSixthCall, kFirstReplay };
  for (Failure f : {kBegin, kSixthCall, kFirstReplay}) {
    SCOPED_TRACE(f == kBegin       ? "begin_capture fails"
                 : f == kSixthCall ? "the sixth recorded call fails"
                                   : "the first replay fails");
    RecordingBackend rec;
    rec.fail_begin = f == kBegin;
    rec.fail_after = f == kSixthCall ? 5 : -1;
    rec.fail_replay = f == kFirstReplay ? 1 : -1;  // step 1 is recorded, then replayed
    const ExecutionPlan plan = plan_for(m, rec, "chen-sqrtn");
    auto plan_at = [&](int) -> const ExecutionPlan& { return plan; };
    const Trained got = train(m, rec, plan_at, 4, arena(plan));
    ExecutorOptions eo = arena(plan);
    eo.step_graphs = false;
    RecordingBackend plain;
    expect_bit_identical(got, train(m, plain, plan_at, 4, eo));
    EXPECT_EQ(rec.aborted, f == kFirstReplay ? 0 : 1);
    EXPECT_EQ(rec.replays, 0);
    EXPECT_EQ(rec.records(), f == kFirstReplay ? 1u : 0u);
    EXPECT_EQ(rec.dropped, f == kFirstReplay ? 1 : 0);
    const std::string why = f == kBegin ? "off: recording stopped: cannot start recording (test)"
                            : f == kSixthCall ? "off: recording stopped: node '"
                                              : "off: the first replay failed: replay 0 fails (test)";
    EXPECT_EQ(got.note.rfind(why, 0), 0u) << got.note;
    if (f == kSixthCall) {
      EXPECT_NE(got.note.find("' cannot be recorded (test)"), std::string::npos) << got.note;
    }
    for (const StepResult& r : got.results) {
      EXPECT_FALSE(r.replayed);
      EXPECT_EQ(r.peak_bytes, plan.predicted_peak);
    }
  }
}

// A step whose replay fails later (on a GPU: a fault found at the step's first host wait)
// throws an error naming the step and the record it replayed; the executor runs on.
TEST(StepGraphs, AFailedReplayNamesTheStepAndTheRecord) {
  Model m(load_model_config(bn_dropout_path()), {});
  RecordingBackend rec;
  rec.fail_replay = 3;
  const ExecutionPlan plan = plan_for(m, rec, "chen-sqrtn");
  Executor ex(m.g, m.ops, rec, arena(plan));
  ex.init_parameters(m.cfg.seed);
  auto data = make_data_source(m.cfg, m.g.value(m.g.input).desc, m.g.value(m.g.label).desc, "");
  std::vector<uint32_t> x(static_cast<size_t>(m.g.value(m.g.input).desc.numel()));
  std::vector<int32_t> y(static_cast<size_t>(m.g.value(m.g.label).desc.numel()));
  for (int s = 0; s < 5; ++s) {
    data->next_batch(s, x.data(), y.data());
    if (s != 3) {
      EXPECT_TRUE(std::isfinite(ex.run_step(plan, x.data(), y.data(), s).loss)) << s;
      continue;
    }
    try {
      ex.run_step(plan, x.data(), y.data(), s);
      ADD_FAILURE() << "the failed replay was not reported";
    } catch (const UserError& e) {
      ADD_FAILURE() << "a device failure reported as the user's: " << e.what();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("step 4: replay 0 fails (test)", 0), 0u) << what;
      EXPECT_NE(what.find("replayed the CUDA graph recorded at step 2"), std::string::npos) << what;
      EXPECT_NE(what.find("--no-cuda-graph"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(rec.replays, 3);  // steps 1, 2 and 4
}

// Steps that may not replay run eagerly and say why; the CPU backend records nothing.
TEST(StepGraphs, StepsThatMayNotReplaySayWhy) {
  Model m(load_model_config(bn_dropout_path()), {});
  RecordingBackend rec;
  const ExecutionPlan plan = plan_for(m, rec, "keep");
  auto plan_at = [&](int) -> const ExecutionPlan& { return plan; };
  ExecutorOptions pool{MemoryMode::Pool, plan.predicted_peak * 2};
  EXPECT_EQ(train(m, rec, plan_at, 3, pool).note,
            "off: memory mode pool (only the arena fixes every address)");
  ExecutorOptions unchecked = arena(plan);
  unchecked.check_finite = false;
  EXPECT_NE(train(m, rec, plan_at, 3, unchecked).note.find("off: the finite check is off"),
            std::string::npos);
  EXPECT_EQ(rec.records(), 0u);
  auto cpu = make_cpu_backend();
  const Trained on_cpu = train(m, *cpu, plan_at, 3, arena(plan));
  EXPECT_EQ(on_cpu.note, "off: backend cpu runs every call as it comes");
  for (const StepResult& r : on_cpu.results) EXPECT_FALSE(r.replayed);
}

}  // namespace
}  // namespace remat
