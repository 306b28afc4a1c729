// write_initial_values: an imported model's weights into the executor.
#include "models/initial_values.h"

#include "runtime/core/check.h"

namespace remat {

int write_initial_values(Executor& ex, const ModelConfig& cfg) {
  if (!cfg.initial_values) return 0;
  const Graph& g = ex.graph();
  int written = 0;
  for (const auto& [name, values] : *cfg.initial_values) {
    const ValueId v = g.find_value(name);
    REMAT_CHECK(v != kNoValue, "initial value '" << name << "' names no value of the graph");
    const Value& val = g.value(v);
    REMAT_CHECK(val.kind == ValueKind::Param || val.kind == ValueKind::Buffer,
                "initial value '" << name << "' is not a parameter or buffer");
    REMAT_CHECK(static_cast<int64_t>(values.size()) == val.desc.numel(),
                "initial value '" << name << "' holds " << values.size() << " values, the graph's "
                                  << shape_str(val.desc.shape));
    ex.write(v, values);
    ++written;
  }
  return written;
}

}  // namespace remat
