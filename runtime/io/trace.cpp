// Chrome trace JSON events (the Trace Event Format): spans, instants, counters, metadata.
#include "runtime/io/trace.h"

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"

namespace remat {

namespace {
nlohmann::json string_args(const std::map<std::string, std::string>& args) {
  nlohmann::json a = nlohmann::json::object();
  for (const auto& [k, v] : args) a[k] = v;
  return a;
}
}  // namespace

void TraceWriter::span(const std::string& name, const std::string& category, double start_us,
                       double dur_us, int tid, const std::map<std::string, std::string>& args) {
  REMAT_CHECK(dur_us >= 0, "trace span '" << name << "' has negative duration " << dur_us);
  nlohmann::json e = {{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", start_us + offset_us_},
                      {"dur", dur_us}, {"pid", pid_},     {"tid", tid}};
  if (!args.empty()) e["args"] = string_args(args);
  events_.push_back(std::move(e));
}

void TraceWriter::instant(const std::string& name, const std::string& category, double ts_us,
                          int tid, const std::map<std::string, std::string>& args) {
  nlohmann::json e = {{"name", name}, {"cat", category}, {"ph", "i"}, {"s", "t"},
                      {"ts", ts_us + offset_us_},  {"pid", pid_},     {"tid", tid}};
  if (!args.empty()) e["args"] = string_args(args);
  events_.push_back(std::move(e));
}

void TraceWriter::counter(const std::string& name, double ts_us,
                          const std::map<std::string, double>& series) {
  nlohmann::json a = nlohmann::json::object();
  for (const auto& [k, v] : series) a[k] = v;
  events_.push_back({{"name", name}, {"ph", "C"}, {"ts", ts_us + offset_us_}, {"pid", pid_}, {"tid", 0}, {"args", a}});
}

void TraceWriter::thread_name(int tid, const std::string& name) {
  events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", tid},
                     {"args", {{"name", name}}}});
}

void TraceWriter::process_name(const std::string& name) {
  events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", 0},
                     {"args", {{"name", name}}}});
}

std::string TraceWriter::json() const {
  nlohmann::json doc = {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
  // Replace invalid UTF-8 in names instead of throwing: a trace is a diagnostic.
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void TraceWriter::save(const std::string& path) const { write_file_atomic(path, json() + "\n"); }

}  // namespace remat
