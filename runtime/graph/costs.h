// The cost table: per node of a training graph, its compute cost (FLOPs or measured
// milliseconds), output bytes and workspace bytes. Written by the profiler or the FLOPs model,
// read by the solver. JSON format "remat-costs/1".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace remat {

struct NodeCost {
  std::string name;             // graph node name
  double cost = 0;              // FLOPs or milliseconds (CostTable::unit)
  int64_t bytes = 0;            // output bytes (0 when the output is persistent)
  int64_t workspace_bytes = 0;  // scratch while running
  double spread = 0;            // profiled: (max - min) / median of the repeats; 0 otherwise
};

// The host link as the profiler measured it (JSON "link"; absent: not measured).
struct LinkCost {
  double to_host_bytes_per_second = 0;    // device -> host copies into pinned host memory
  double from_host_bytes_per_second = 0;  // host -> device
  int64_t bytes = 0;                      // the size each timed copy moved
  bool measured() const { return to_host_bytes_per_second > 0 && from_host_bytes_per_second > 0; }
  // The slower direction: the one rate the planner's copy model has (Problem::copy_cost_per_byte).
  double bytes_per_second() const {
    return to_host_bytes_per_second < from_host_bytes_per_second ? to_host_bytes_per_second
                                                                 : from_host_bytes_per_second;
  }
};

struct CostTable {
  std::string model;
  std::string device;           // "flops-model" or the device name it was measured on
  std::string unit = "flops";   // "flops" | "ms"
  int64_t batch = 0;
  std::vector<NodeCost> nodes;  // one per non-update node, in graph order
  LinkCost link;                // measured tables (profile) only
};

// The link a plan copies at, in bytes per second: `given` (a flag) when > 0, else the slower
// direction of the link `t` measured, else 0 (no link).
double link_bytes_per_second(double given, const CostTable& t);

std::string costs_to_json_text(const CostTable& t);
CostTable costs_from_json_text(const std::string& text, const std::string& source);
void costs_save(const CostTable& t, const std::string& path);
CostTable costs_load(const std::string& path);

}  // namespace remat
