// Evaluator: the inference graph, its plan, the validation data and one pass of metrics.
#include "tools/training/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "runtime/comm/communicator.h"
#include "runtime/core/bf16.h"
#include "runtime/core/check.h"
#include "runtime/memory/param_layout.h"
#include "tools/common/cli.h"

namespace remat {

ModelConfig inference_config(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  for (LayerConfig& l : c.layers) {
    if (l.op == "batchnorm") l.attrs.set("mode", std::string("inference"));
    if (l.op == "dropout") l.attrs.set("rate", 0.0);
  }
  return c;
}

namespace {
constexpr int64_t kDefaultEvalBatches = 20;  // token files and generated data have no end
}  // namespace

Evaluator::Evaluator(const ModelConfig& cfg, const BuildOptions& bo, const OpRegistry& ops,
                     Backend& be, const EvalOptions& opt, int64_t constant_bytes)
    : cfg_(cfg), ops_(ops), be_(be), opt_(opt) {
  if (!cfg.val)
    REMAT_USER_ERROR(cfg.source << ": no `val` section: validation needs data (e.g. val: {source: "
                                << (cfg.tokens() ? "tokens, path: val.bin}" : "folder, path: val}")
                                << ")");
  g_ = build_forward_graph(inference_config(cfg), ops, bo);
  logits_ = g_.node(g_.value(g_.loss).producer).inputs.at(0);
  StepPlanOptions po = opt.plan;
  po.constant_bytes = constant_bytes;
  po.log_level = 0;
  sp_ = make_step_plan(g_, ops, be, po, po.budget.value_or(0));
  LoaderOptions lo = opt.loader;
  lo.evaluation = true;
  data_ = make_data_source(cfg, g_.value(g_.input).desc, g_.value(g_.label).desc, cfg.dir,
                           opt.shard, lo, &*cfg.val);
}

Evaluator::~Evaluator() = default;

int64_t Evaluator::arena_bytes() const {
  return Executor::arena_region_bytes(g_, ops_, be_, sp_.plan) -
         persistent_layout(g_, {}).region_bytes;
}

Executor& Evaluator::executor(Executor* host) {
  if (ex_) return *ex_;
  ExecutorOptions eo;
  if (host) {
    eo.borrow = host;
  } else {
    eo.memory = MemoryMode::Arena;
    eo.budget = opt_.plan.budget ? *opt_.plan.budget
                                 : Executor::arena_region_bytes(g_, ops_, be_, sp_.plan);
  }
  ex_ = std::make_unique<Executor>(g_, ops_, be_, eo);
  if (ex_->prepare(sp_.plan) > eo.budget && !host)
    REMAT_USER_ERROR("validation: budget " << format_bytes(eo.budget) << " is below what its plan "
                                           << "needs: " << format_bytes(ex_->prepare(sp_.plan)));
  return *ex_;
}

EvalMetrics Evaluator::run(double* seconds) {
  REMAT_CHECK(ex_, "Evaluator::run before executor()");
  const auto t0 = std::chrono::steady_clock::now();
  const TensorDesc& in = g_.value(g_.input).desc;
  const TensorDesc& lab = g_.value(g_.label).desc;
  const TensorDesc& out = g_.value(logits_).desc;
  const int64_t n = in.shape[0];
  const int64_t global = opt_.shard.global_batch > 0 ? opt_.shard.global_batch : n;
  EvalMetrics m;
  m.kind = cfg_.tokens() ? MetricKind::Tokens
           : lab.shape.size() == 3 ? MetricKind::Segmentation : MetricKind::Classification;
  m.classes = cfg_.tokens() ? cfg_.vocab : cfg_.classes;
  // A float sequence's labels [N, T]: each position a row of the logits [N, T, K].
  m.positions = m.kind == MetricKind::Classification && lab.shape.size() == 2;
  const int64_t rows = m.positions ? lab.shape[1] : 1;
  if (m.kind == MetricKind::Segmentation) m.confusion.assign(static_cast<size_t>(m.classes * m.classes), 0);
  // A pass: the whole set of an image source, else (or when asked for fewer) `batches`.
  const int64_t size = data_->size();
  const int64_t full = size > 0 ? (size + global - 1) / global : 0;
  int64_t batches = opt_.batches > 0 ? opt_.batches : m.kind == MetricKind::Tokens || full == 0 ? kDefaultEvalBatches : full;
  if (full > 0 && m.kind != MetricKind::Tokens) batches = std::min(batches, full);
  std::vector<char> x(static_cast<size_t>(in.bytes())), y(static_cast<size_t>(lab.bytes()));
  std::vector<uint8_t> raw(static_cast<size_t>(out.bytes()));
  std::vector<float> logits(static_cast<size_t>(out.numel()));
  if (m.kind != MetricKind::Tokens) ex_->capture(logits_, raw.data());
  const int64_t ignore = loss_ignore_index(cfg_);
  for (int64_t b = 0; b < batches; ++b) {
    data_->next_batch(b, x.data(), reinterpret_cast<int32_t*>(y.data()));
    const StepResult r = ex_->run_step(sp_.plan, x.data(), reinterpret_cast<int32_t*>(y.data()), b);
    if (m.kind == MetricKind::Tokens) {
      add_tokens(r.loss, lab.numel(), &m);
      continue;
    }
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = out.dtype == DType::BF16 ? bf16_to_float(reinterpret_cast<const uint16_t*>(raw.data())[i])
                                           : reinterpret_cast<const float*>(raw.data())[i];
    // Samples past the set's end (the last batch wraps around) were counted already.
    const int64_t valid = full > 0 && m.kind != MetricKind::Tokens
                              ? std::clamp<int64_t>(size - (b * global + opt_.shard.first), 0, n)
                              : n;
    const auto* labels = reinterpret_cast<const int32_t*>(y.data());
    if (m.kind == MetricKind::Classification)
      add_classification(logits.data(), labels, n * rows, m.classes, ignore, valid * rows, &m);
    else
      add_segmentation(logits.data(), labels, n, m.classes, out.shape[2], out.shape[3], ignore,
                       valid, &m);
  }
  ex_->capture(logits_, nullptr);
  samples_ = full > 0 && m.kind != MetricKind::Tokens ? std::min(size, batches * global)
                                                      : batches * global;
  if (opt_.host_comm) {  // data parallel: every rank's sums
    std::vector<double> v = m.to_vector();
    opt_.host_comm->all_reduce_now(v.data(), static_cast<int64_t>(v.size()), CommType::F64,
                                   CommOp::Sum);
    EvalMetrics total = m;
    total.count = total.loss_sum = total.top1 = total.top5 = 0;
    std::fill(total.confusion.begin(), total.confusion.end(), 0.0);
    total.add_vector(v);
    m = total;
  }
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

int Evaluator::recomputes() const {
  int n = 0;
  for (const auto& s : sp_.plan.steps) n += s.kind == PlanStepKind::Compute && s.recompute;
  return n;
}

std::string Evaluator::describe() const {
  std::ostringstream os;
  os << "validation: " << data_->describe() << "; plan " << sp_.plan.strategy << ", peak "
     << format_bytes(sp_.plan.predicted_peak) << ", " << plural(recomputes(), "recompute")
     << " (inference: batch norm from running statistics, dropout off)";
  return os.str();
}

}  // namespace remat
