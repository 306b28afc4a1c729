// TraceWriter tests: the output is valid Chrome trace JSON with the expected events.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "runtime/io/trace.h"

namespace remat {
namespace {

TEST(Trace, EventsAndPhases) {
  TraceWriter w;
  w.process_name("remat train");
  w.thread_name(1, "compute");
  w.span("conv1 \"fwd\"\n", "compute", 10.5, 250.25, 1, {{"bytes", "4096"}});
  w.span("conv1.grad", "recompute", 300, 0, 1);
  w.instant("free relu1", "memory", 260, 1, {{"value", "relu1"}});
  w.counter("pool", 260, {{"in use MB", 12.5}, {"free MB", 3.5}});
  EXPECT_EQ(w.size(), 6u);

  nlohmann::json doc = nlohmann::json::parse(w.json());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  const auto& ev = doc["traceEvents"];
  ASSERT_TRUE(ev.is_array());
  ASSERT_EQ(ev.size(), 6u);

  EXPECT_EQ(ev[0]["ph"], "M");
  EXPECT_EQ(ev[0]["name"], "process_name");
  EXPECT_EQ(ev[0]["args"]["name"], "remat train");
  EXPECT_EQ(ev[1]["ph"], "M");
  EXPECT_EQ(ev[1]["name"], "thread_name");
  EXPECT_EQ(ev[1]["tid"], 1);
  EXPECT_EQ(ev[1]["args"]["name"], "compute");

  EXPECT_EQ(ev[2]["ph"], "X");
  EXPECT_EQ(ev[2]["name"], "conv1 \"fwd\"\n");  // escaped on output, intact after parsing
  EXPECT_EQ(ev[2]["cat"], "compute");
  EXPECT_DOUBLE_EQ(ev[2]["ts"].get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(ev[2]["dur"].get<double>(), 250.25);
  EXPECT_EQ(ev[2]["args"]["bytes"], "4096");
  EXPECT_TRUE(ev[2].contains("pid"));
  EXPECT_FALSE(ev[3].contains("args"));

  EXPECT_EQ(ev[4]["ph"], "i");
  EXPECT_EQ(ev[4]["s"], "t");
  EXPECT_EQ(ev[4]["args"]["value"], "relu1");

  EXPECT_EQ(ev[5]["ph"], "C");
  EXPECT_DOUBLE_EQ(ev[5]["args"]["in use MB"].get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(ev[5]["args"]["free MB"].get<double>(), 3.5);
}

TEST(Trace, EmptyTraceAndBadInput) {
  TraceWriter w;
  nlohmann::json doc = nlohmann::json::parse(w.json());
  EXPECT_TRUE(doc["traceEvents"].is_array());
  EXPECT_TRUE(doc["traceEvents"].empty());
  EXPECT_THROW(w.span("x", "c", 0, -1, 0), Error);
  w.span(std::string("bad \xff utf8"), "c", 0, 1, 0);  // replaced, not thrown
  EXPECT_NO_THROW(nlohmann::json::parse(w.json()));
}

TEST(Trace, SaveWritesParseableFile) {
  char tmpl[] = "/tmp/remat_trace_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, p = dir + "/step.json";
  TraceWriter w;
  w.span("a", "compute", 0, 5, 0);
  w.save(p);
  std::ifstream in(p);
  nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["traceEvents"].size(), 1u);
  ::unlink(p.c_str());
  ::rmdir(dir.c_str());
  EXPECT_THROW(w.save(dir + "/missing/dir/t.json"), UserError);
}

}  // namespace
}  // namespace remat
