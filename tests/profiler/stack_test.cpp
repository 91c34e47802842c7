// with_stack: frames from the installed stack provider reach the events, key_averages groups by
// them (torch's Source Location column), export_stacks writes flamegraph's collapsed format and the
// Chrome trace carries them as "Call stack".
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sightline/error.h"
#include "sightline/host_clock.h"
#include "sightline/profiler/profile.h"
#include "golden.h"
#include "synthetic.h"

namespace sightline::profiler {
namespace {

std::atomic<int> g_calls{0};

void two_frames(std::vector<std::string>& frames) {
  g_calls.fetch_add(1);
  frames.emplace_back("model.py(12): forward");
  frames.emplace_back("main.py(40): <module>");
}

void failing_provider(std::vector<std::string>&) { throw std::runtime_error("no frames today"); }

// Installs a provider for one test and removes it after.
struct ProviderScope {
  explicit ProviderScope(StackProvider provider) { set_stack_provider(provider); }
  ~ProviderScope() { set_stack_provider(nullptr); }
};

const FunctionEvent& find(const CollectedTrace& trace, const std::string& name) {
  for (const FunctionEvent& event : trace.events)
    if (event.name == name) return event;
  throw std::runtime_error("no event " + name);
}

CollectedTrace scope_trace(bool with_stack) {
  profile prof({.activities = {ProfilerActivity::CPU}, .with_stack = with_stack});
  prof.start();
  {
    record_function outer("outer");
    host_clock::advance(1000);
    record_function inner("inner");
    host_clock::advance(1000);
  }
  prof.stop();
  return prof.trace();
}

TEST(profiler_stack, record_function_carries_the_providers_frames) {
  ProviderScope provider(&two_frames);
  g_calls = 0;
  const CollectedTrace trace = scope_trace(true);
  EXPECT_EQ(g_calls.load(), 2);
  const std::vector<std::string> expected = {"model.py(12): forward", "main.py(40): <module>"};
  EXPECT_EQ(find(trace, "outer").stack, expected);
  EXPECT_EQ(find(trace, "inner").stack, expected);  // the same stack twice: stored once, read twice
}

TEST(profiler_stack, without_with_stack_the_provider_is_not_asked) {
  ProviderScope provider(&two_frames);
  g_calls = 0;
  const CollectedTrace trace = scope_trace(false);
  EXPECT_EQ(g_calls.load(), 0);
  EXPECT_TRUE(find(trace, "outer").stack.empty());
}

TEST(profiler_stack, a_failing_provider_costs_the_stack_not_the_event) {
  ProviderScope provider(&failing_provider);
  const CollectedTrace trace = scope_trace(true);
  EXPECT_TRUE(find(trace, "outer").stack.empty());
  EXPECT_TRUE(find(trace, "inner").stack.empty());
}

TEST(profiler_stack, stacks_do_not_move_modeled_time) {
  // Walking frames is wall-time work: with and without stacks the modeled timestamps are the same.
  const CollectedTrace without = scope_trace(false);
  ProviderScope provider(&two_frames);
  const CollectedTrace with = scope_trace(true);
  ASSERT_EQ(with.events.size(), without.events.size());
  for (std::size_t i = 0; i < with.events.size(); ++i) {
    EXPECT_EQ(with.events[i].duration_ns(), without.events[i].duration_ns()) << with.events[i].name;
    EXPECT_EQ(with.events[i].start_ns - with.window_start_ns, without.events[i].start_ns - without.window_start_ns);
  }
}

// Two call sites of aten::mul, one of aten::add; the last mul runs under a very long path.
CollectedTrace stack_trace() {
  CollectedTrace trace = testing::make_trace({
      testing::host_event("aten::mul", 0, 10, 1),
      testing::host_event("aten::mul", 20, 50, 2),
      testing::host_event("aten::add", 60, 65, 3),
      testing::host_event("aten::mul", 70, 72, 4),
  });
  const std::vector<std::string> site_a = {"rmsnorm.py(8): rms_norm", "rmsnorm.py(20): <module>"};
  const std::vector<std::string> site_b = {"rmsnorm.py(9): rms_norm", "rmsnorm.py(20): <module>"};
  const std::string long_path = "/home/user/projects/a/very/long/path/that/does/not/fit/in/the/column/model.py";
  for (FunctionEvent& event : trace.events) {
    if (event.start_ns == 0) event.stack = site_a;
    if (event.start_ns == 20000) event.stack = site_a;
    if (event.start_ns == 60000) event.stack = site_b;
    if (event.start_ns == 70000) event.stack = {long_path + "(3): f"};
  }
  return trace;
}

TEST(profiler_stack, group_by_stack_n_splits_rows_by_call_site_golden) {
  const KeyAverages by_site = key_averages(stack_trace(), {.group_by_stack_n = 1});
  EXPECT_EQ(by_site.rows().size(), 3u);  // mul at line 8, add at line 9, mul in model.py
  testing::expect_golden("stack_group_by_1.txt", by_site.table("self_cpu_time_total", 10));
  const KeyAverages two = key_averages(stack_trace(), {.group_by_stack_n = 2});
  testing::expect_golden("stack_group_by_2.txt", two.table("self_cpu_time_total", 10));
  // Without grouping the rows and the table are those of a profile without stacks.
  CollectedTrace plain = stack_trace();
  for (FunctionEvent& event : plain.events) event.stack.clear();
  EXPECT_EQ(key_averages(stack_trace(), {}).table("self_cpu_time_total", 10),
            key_averages(plain, {}).table("self_cpu_time_total", 10));
}

TEST(profiler_stack, data_formats_carry_the_stack_when_grouped) {
  const KeyAverages by_site = key_averages(stack_trace(), {.group_by_stack_n = 2});
  const nlohmann::json rows = nlohmann::json::parse(by_site.to_json())["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["stack"], nlohmann::json::array({"rmsnorm.py(8): rms_norm", "rmsnorm.py(20): <module>"}));
  EXPECT_NE(by_site.to_csv().find(",rmsnorm.py(8): rms_norm;rmsnorm.py(20): <module>,"), std::string::npos);
  EXPECT_EQ(key_averages(stack_trace(), {}).to_csv().find("stack"), std::string::npos);
}

TEST(profiler_stack, collapsed_stacks_are_outermost_first_in_nanoseconds) {
  EXPECT_EQ(collapsed_stacks(stack_trace()),
            "rmsnorm.py(20):_<module>;rmsnorm.py(8):_rms_norm 10000\n"
            "rmsnorm.py(20):_<module>;rmsnorm.py(8):_rms_norm 30000\n"
            "rmsnorm.py(20):_<module>;rmsnorm.py(9):_rms_norm 5000\n"
            "/home/user/projects/a/very/long/path/that/does/not/fit/in/the/column/model.py(3):_f 2000\n");
  EXPECT_EQ(collapsed_stacks(stack_trace(), "self_privateuse1_time_total"), "");  // no device time
  EXPECT_THROW((void)collapsed_stacks(stack_trace(), "count"), Error);
}

TEST(profiler_stack, export_stacks_needs_with_stack) {
  profile prof({.activities = {ProfilerActivity::CPU}});
  prof.start();
  prof.stop();
  EXPECT_THROW(prof.export_stacks((std::filesystem::temp_directory_path() / "stacks.txt").string()), Error);
}

TEST(profiler_stack, chrome_trace_writes_the_call_stack) {
  ProviderScope provider(&two_frames);
  profile prof({.activities = {ProfilerActivity::CPU}, .with_stack = true});
  prof.start();
  { record_function scope("scope"); }
  prof.stop();
  const std::string path = (std::filesystem::temp_directory_path() / "sightline_stack_trace.json").string();
  prof.export_chrome_trace(path);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  bool found = false;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event.value("name", "") != "scope") continue;
    found = true;
    EXPECT_EQ(event["args"]["Call stack"], nlohmann::json::array({"model.py(12): forward", "main.py(40): <module>"}));
  }
  EXPECT_TRUE(found);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sightline::profiler
