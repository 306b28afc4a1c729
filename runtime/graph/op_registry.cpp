// OpRegistry: a name -> OpDef map built explicitly by make_builtin_registry().
#include "runtime/core/check.h"
#include "runtime/graph/op.h"

namespace remat {

void OpRegistry::add(OpDef op) {
  REMAT_CHECK(!op.name.empty(), "op with empty name");
  REMAT_CHECK(!ops_.count(op.name), "op '" << op.name << "' registered twice");
  REMAT_CHECK(op.parse && op.infer && op.cost && op.cpu,
              "op '" << op.name << "' lacks parse/infer/cost/cpu");
  std::string name = op.name;
  ops_.emplace(name, std::move(op));
}

const OpDef& OpRegistry::get(const std::string& name) const {
  auto it = ops_.find(name);
  if (it != ops_.end()) return it->second;
  std::string known;
  for (const auto& n : names(true)) known += (known.empty() ? "" : ", ") + n;
  REMAT_USER_ERROR("unknown op '" << name << "' (known: " << known << ")");
}

std::vector<std::string> OpRegistry::names(bool user_visible_only) const {
  std::vector<std::string> out;
  for (const auto& kv : ops_)
    if (!user_visible_only || kv.second.user_visible) out.push_back(kv.first);
  return out;
}

}  // namespace remat
