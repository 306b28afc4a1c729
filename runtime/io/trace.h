// TraceWriter: collects events of a training step and writes them as Chrome trace JSON
// ({"traceEvents": [...], "displayTimeUnit": "ms"}), which Perfetto (ui.perfetto.dev) and
// chrome://tracing open. Times are microseconds from any fixed origin.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace remat {

class TraceWriter {
 public:
  explicit TraceWriter(int pid = 1) : pid_(pid) {}

  // A complete span ("ph": "X"): `name` ran on thread `tid` from start_us for dur_us.
  void span(const std::string& name, const std::string& category, double start_us,
            double dur_us, int tid, const std::map<std::string, std::string>& args = {});
  // A thread-scoped instant ("ph": "i", "s": "t") at ts_us.
  void instant(const std::string& name, const std::string& category, double ts_us, int tid,
               const std::map<std::string, std::string>& args = {});
  // A counter sample ("ph": "C"): one track per series name, e.g. {"in use MB": 812.5}.
  void counter(const std::string& name, double ts_us, const std::map<std::string, double>& series);
  // Metadata ("ph": "M") naming a thread / the process in the viewer.
  void thread_name(int tid, const std::string& name);
  void process_name(const std::string& name);

  // Added to every later event's time: several steps, each timed from its own start, laid one
  // after another on one timeline (train --trace-steps K).
  void set_offset_us(double offset_us) { offset_us_ = offset_us; }
  double offset_us() const { return offset_us_; }

  size_t size() const { return events_.size(); }
  // The whole trace as JSON text.
  std::string json() const;
  // Writes json() to `path`; UserError naming the path when it cannot be written.
  void save(const std::string& path) const;

 private:
  int pid_;
  double offset_us_ = 0;
  std::vector<nlohmann::json> events_;
};

}  // namespace remat
