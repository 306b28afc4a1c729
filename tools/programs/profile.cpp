// `profile`: measures every node of a model's training graph on a device and writes the cost
// table ("remat-costs/1") that `plan` and `train` solve with. Measurements are cached per
// (model, input, batch, device); --no-cache re-measures.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/graph/autodiff.h"
#include "runtime/backends/backend.h"
#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/profiler.h"
#include "tools/common/cli.h"
#include "tools/common/progress.h"

namespace remat {
namespace {

std::unique_ptr<Backend> make_backend(const std::string& device, const std::string& precision,
                                      std::optional<int64_t> workspace_limit) {
  if (device == "cpu") return make_cpu_backend();
  std::string why;
  CudaOptions o = cuda_precision_options(precision);
  if (workspace_limit) o.workspace_limit = *workspace_limit;
  auto be = make_cuda_backend(0, &why, o);
  if (!be) REMAT_USER_ERROR("profile: --device cuda: " << why);
  return be;
}

// Where the measured time goes, op by op (largest first): the sum over nodes of each op, its
// share of the step, and the node count. Against a training step's measured time, the
// difference is what running the nodes one after another costs beyond the nodes themselves.
void print_by_op(const Graph& g, const CostTable& t, double total) {
  struct OpTime {
    double ms = 0;
    int nodes = 0;
  };
  std::map<std::string, OpTime> by_op;
  size_t i = 0;
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::Update) continue;
    OpTime& o = by_op[n.op];
    o.ms += t.nodes.at(i++).cost;
    ++o.nodes;
  }
  std::vector<std::pair<std::string, OpTime>> rows(by_op.begin(), by_op.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::printf("%-36s %11s %7s %6s\n", "by op", "total ms", "share", "nodes");
  for (const auto& [op, o] : rows)
    std::printf("op %-33s %11.3f %6.1f%% %6d\n", op.c_str(), o.ms,
                total > 0 ? 100.0 * o.ms / total : 0.0, o.nodes);
}

void print_table(const Graph& g, const CostTable& t) {
  std::printf("%-36s %-9s %11s %8s %12s %12s\n", "node", "kind", "median ms", "spread", "output",
              "workspace");
  double fwd = 0, bwd = 0;
  size_t i = 0;
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::Update) continue;
    const NodeCost& c = t.nodes.at(i++);
    (n.kind == NodeKind::Backward ? bwd : fwd) += c.cost;
    std::printf("%-36s %-9s %11.4f %7.1f%% %12s %12s\n", c.name.c_str(), node_kind_name(n.kind),
                c.cost, 100.0 * c.spread, format_bytes(c.bytes).c_str(),
                format_bytes(c.workspace_bytes).c_str());
  }
  std::printf("total: forward (with loss) %.3f ms, backward %.3f ms, step without updates %.3f ms\n",
              fwd, bwd, fwd + bwd);
  print_by_op(g, t, fwd + bwd);
}

int profile_main(int argc, char** argv) {
  FlagParser f("profile", "Measures each node of a model's training graph (cost table JSON).");
  f.add("config", "FILE", "model YAML (or --onnx)")
      .add("onnx", "FILE", kOnnxFlagHelp)
      .add("device", "cpu|cuda", "where to measure", "cpu")
      .add("batch", "N", "override the config's batch size")
      .add("input", "CxHxW", "override the per-sample input size, e.g. 3x32x32 (F, TxF)")
      .add("seq", "T", "override a token model's sequence length")
      .add("precision", "fp32|tf32|tf32-all|bf16",
           "as train's --precision (default: the config's; fp32 configs in tf32)")
      .add("repeats", "R", "timed runs per node (the median is kept)", "10")
      .add("warmup", "W", "untimed runs per node first", "2")
      .add("output", "FILE", "also write the cost table here")
      .alias("-o", "output")
      .add("no-cache", "", "measure again even if a cached table exists")
      .add("workspace-limit", "SIZE",
           "--device cuda: the most workspace one convolution's algorithm may use, as train's "
           "--workspace-limit (default 1 GiB)")
      .allow_positional("KEY=VALUE", "override a config field, as train takes them");
  if (!f.parse(argc, argv)) return 0;
  const std::string model_file = model_file_flag(f, "profile");
  if (model_file.empty())
    throw UsageError("profile: --config FILE (or --onnx FILE) is required\n" + f.usage());
  if (f.has("output")) check_output_file(f.get("output"), "profile: --output");
  const std::string device = f.get_choice("device", {"cpu", "cuda"});
  const std::optional<int64_t> workspace_limit = workspace_limit_flag(f, "profile", device);
  ProfileOptions po;
  po.repeats = static_cast<int>(f.get_int("repeats", 1, 100000));
  po.warmup = static_cast<int>(f.get_int("warmup", 0, 100000));

  ModelConfig cfg = load_model_config(model_file, model_overrides(f, model_file));
  const OpRegistry ops = make_builtin_registry();
  const std::string precision = resolve_precision(
      f.has("precision") ? f.get_choice("precision", kPrecisionChoices) : "", cfg.precision);
  BuildOptions bo;
  bo.precision = precision_storage(precision);
  if (f.has("batch")) bo.batch = f.get_int("batch", 1, 1 << 20);
  if (f.has("input"))
    bo.input = parse_flag_value([&] { return parse_input_size(f.get("input"), "profile: --input"); });
  if (f.has("seq")) bo.sequence = f.get_int("seq", 1, 1 << 24);
  Graph fwd = build_forward_graph(cfg, ops, bo);
  Graph g = make_training_graph(fwd, ops, cfg.optimizer.op, cfg.optimizer.attrs, cfg.accumulate);

  std::unique_ptr<Backend> be = make_backend(device, precision, workspace_limit);
  std::printf("model %s, input %s, batch %lld: %s to measure (the optimizer updates are not); "
              "device %s; precision %s\n",
              g.name.c_str(), profile_cache_key(g).c_str(), static_cast<long long>(g.batch),
              plural(planned_nodes(g), "node").c_str(), be->name().c_str(), precision.c_str());
  if (device == "cuda") std::printf("libraries: %s\n", cuda_library_versions().c_str());

  if (stream_is_terminal(stderr)) {  // Note [live lines]
    po.on_node = [](size_t i, size_t n, const NodeCost& c) {
      std::fprintf(stderr, "\r[%zu/%zu] %-40s", i + 1, n, c.name.c_str());
      if (i + 1 == n) std::fprintf(stderr, "\n");
    };
  } else {  // a log: a plain line every 10 % of the nodes
    po.on_node = [](size_t i, size_t n, const NodeCost& c) {
      if ((i + 1) % std::max<size_t>(1, n / 10) == 0 || i + 1 == n) {
        std::printf("profiled %zu/%zu nodes (last %s)\n", i + 1, n, c.name.c_str());
        std::fflush(stdout);
      }
    };
  }
  std::string note;
  CostTable t = profile_graph_cached(g, ops, *be, po, f.has("no-cache"), &note);
  std::printf("%s\n", note.c_str());
  print_table(g, t);
  if (t.link.measured())
    std::printf("host link: to host %.2f GB/s, from host %.2f GB/s (copies of %s, median of %d); "
                "plan and train copy at the slower without --link-bandwidth\n",
                t.link.to_host_bytes_per_second / 1e9, t.link.from_host_bytes_per_second / 1e9,
                format_bytes(t.link.bytes).c_str(), po.repeats);
  if (f.has("output")) {
    costs_save(t, f.get("output"));
    std::printf("wrote %s\n", f.get("output").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::profile_main(argc, argv); });
}
