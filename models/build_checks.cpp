// The forward-graph builder's checks (build_checks.h): each error names the config's position.
#include "models/build_checks.h"

#include <set>

#include "runtime/core/check.h"

namespace remat::build_detail {

std::string layer_ctx(const std::string& where, const std::string& layer) {
  return where + ": layer '" + layer + "': ";
}

// Op messages that already start with a position in the config are kept; others get the
// layer's position in front.
[[noreturn]] void rethrow_at(const UserError& e, const std::string& source,
                             const std::string& prefix) {
  std::string msg = e.what();
  if (!source.empty() && msg.rfind(source + ":", 0) == 0) throw e;
  throw UserError(prefix + msg);
}

const OpDef& get_op(const OpRegistry& ops, const std::string& name, const std::string& prefix) {
  try {
    return ops.get(name);
  } catch (const UserError& e) {
    throw UserError(prefix + e.what());
  }
}

void check_forward_op(const OpDef& op, const std::string& prefix) {
  if (op.kind == NodeKind::Loss)
    REMAT_USER_ERROR(prefix << "op '" << op.name
                            << "' is a loss; set it with the top-level `loss:` key instead");
  if (op.kind == NodeKind::Update)
    REMAT_USER_ERROR(prefix << "op '" << op.name
                            << "' is an optimizer; set it with the top-level `optimizer:` key");
  if (op.kind != NodeKind::Forward || !op.user_visible)
    REMAT_USER_ERROR(prefix << "op '" << op.name
                            << "' is internal (emitted by autodiff or the graph builder) and "
                               "cannot be a layer");
}

// Every layer must feed the loss: walk back from the last layer.
void check_all_used(const ModelConfig& cfg) {
  std::set<std::string> live = {cfg.layers.back().name};
  for (auto it = cfg.layers.rbegin(); it != cfg.layers.rend(); ++it) {
    if (!live.count(it->name))
      REMAT_USER_ERROR(layer_ctx(it->where, it->name)
                       << "output is never used (every layer must lead to the last layer, '"
                       << cfg.layers.back().name << "', which feeds the loss)");
    for (const auto& in : it->inputs) live.insert(in);
  }
}

void check_loss_shape(const ModelConfig& cfg, const LayerConfig& last, const TensorDesc& out,
                      int64_t n, int64_t t) {
  const Shape& s = out.shape;
  if (cfg.tokens()) {
    if (s == Shape{n, t, cfg.vocab} && dtype_is_float(out.dtype)) return;
    REMAT_USER_ERROR(layer_ctx(last.where, last.name)
                     << "output " << shape_str(s) << " does not fit loss '" << cfg.loss
                     << "' with vocab " << cfg.vocab << " (" << cfg.where_vocab
                     << "): the last layer must output logits " << shape_str({n, t, cfg.vocab})
                     << " [N, T, V]");
  }
  Shape want;
  bool ok;
  if (cfg.loss == "softmax_xent") {
    want = {n, cfg.classes};
    ok = s == want;
  } else if (cfg.loss == "token_xent") {  // a float sequence's classes at each position
    ok = s.size() == 3 && s[0] == n && s[2] == cfg.classes;
    want = {n, s.size() == 3 ? s[1] : -1, cfg.classes};
  } else {
    ok = s.size() == 4 && s[0] == n && s[1] == cfg.classes;
    want = {n, cfg.classes, s.size() == 4 ? s[2] : -1, s.size() == 4 ? s[3] : -1};
  }
  if (ok && dtype_is_float(out.dtype)) return;
  std::string want_str =
      cfg.loss == "softmax_xent" ? shape_str(want)
      : cfg.loss == "token_xent"
          ? "[" + std::to_string(n) + ", T, " + std::to_string(cfg.classes) + "] [N, T, K]"
          : "[" + std::to_string(n) + ", " + std::to_string(cfg.classes) + ", H, W]";
  REMAT_USER_ERROR(layer_ctx(last.where, last.name)
                   << "output " << shape_str(s) << " does not fit loss '" << cfg.loss
                   << "' with classes " << cfg.classes << " (" << cfg.where_classes
                   << "): the last layer must output " << want_str);
}

// The optimizer's op must be one of the ops that update parameters; the error lists those (not
// every op) with the nearest name.
void check_optimizer(const ModelConfig& cfg, const OpRegistry& ops) {
  const OptimizerConfig& o = cfg.optimizer;
  const std::string prefix = o.op_where + ": optimizer: ";
  std::vector<std::string> optimizers;
  std::string known;
  for (const std::string& name : ops.names(true))
    if (ops.get(name).kind == NodeKind::Update)
      optimizers.push_back(name), known += (known.empty() ? "" : ", ") + name;
  if (!ops.has(o.op) || ops.get(o.op).kind != NodeKind::Update)
    REMAT_USER_ERROR(prefix << "field 'op': "
                            << (ops.has(o.op) ? "'" + o.op + "' is a layer op, not an optimizer"
                                              : "unknown optimizer '" + o.op + "'")
                            << did_you_mean(o.op, optimizers) << " (known: " << known << ")");
  const OpDef& op = ops.get(o.op);
  try {
    AttrReader r(o.attrs);
    op.parse(r);
  } catch (const UserError& e) {
    rethrow_at(e, cfg.source, prefix);
  }
}

// Every suffix a layer shares must be one of its op's parameters.
void check_shared_suffixes(const LayerConfig& l, const OpDef& op,
                           const std::vector<ParamSpec>& params) {
  for (const auto& kv : l.shared) {
    std::string known;
    bool found = false;
    for (const ParamSpec& p : params) {
      known += (known.empty() ? "" : ", ") + p.suffix;
      found = found || p.suffix == kv.first;
    }
    if (!found)
      REMAT_USER_ERROR(l.shared_where.at(kv.first)
                       << ": layer '" << l.name << "': field 'share': op '" << op.name
                       << "' has no parameter '" << kv.first << "' (its parameters: "
                       << (known.empty() ? "none" : known) << ")");
  }
}

// The earlier parameter `target` that layer `l` uses as its parameter `p` (weight tying).
ValueId shared_param(const Graph& g, const LayerConfig& l, const ParamSpec& p,
                     const std::string& target) {
  const std::string at = l.shared_where.at(p.suffix) + ": layer '" + l.name +
                         "': field 'share': parameter '" + p.suffix + "': ";
  const ValueId v = g.find_value(target);
  if (v == kNoValue || g.value(v).kind != ValueKind::Param)
    REMAT_USER_ERROR(at << "'" << target << "' is not a trainable parameter of an earlier layer");
  if (p.kind != ValueKind::Param)
    REMAT_USER_ERROR(at << "only trainable parameters can be shared");
  if (!(g.value(v).desc == p.desc))
    REMAT_USER_ERROR(at << "'" << target << "' is " << shape_str(g.value(v).desc.shape)
                        << ", this layer needs " << shape_str(p.desc.shape));
  return v;
}

}  // namespace remat::build_detail
