// The Chrome trace exporter: parsed back with a strict parser and checked against Kineto's layout.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/chrome_trace.h"
#include "sightline/error.h"
#include "synthetic.h"

namespace sightline::profiler {
namespace {

using testing::device_event;
using testing::host_event;
using testing::make_trace;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("sightline_profiler_" + name);
}

CollectedTrace launch_trace() {
  std::vector<FunctionEvent> events = {
      host_event("aten::mul \"x\" * x", 10, 60, 2),
      host_event("nrta_execute_schedule", 20, 50, 3, EventKind::runtime, 2),
      device_event("nc_exec_running", 60, 160, 3, 2),
      device_event("dmem_buf_copyout", 161, 170, 3, 2, EventKind::device_memcpy),
      host_event("aten::add", 200, 260, 4),
      host_event("nrta_execute_schedule", 210, 230, 5, EventKind::runtime, 4),
      device_event("nc_exec_running", 240, 280, 5, 4),
  };
  events[0].input_shapes = {{4, 4}, {4, 4}};
  events[0].flops = 16;
  events[2].args.push_back({"exec_id", std::int64_t{7}});
  CollectedTrace trace = make_trace(std::move(events));
  trace.threads.push_back({1, "main"});
  trace.resources.push_back({0, 0, "NC:0 exec", 0});
  return trace;
}

nlohmann::ordered_json export_and_parse(const CollectedTrace& trace, const std::string& name) {
  const std::filesystem::path path = temp_path(name);
  export_chrome_trace(trace, path.string(), {.device_name = "neuron"});
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::ifstream file(path);
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(file);  // strict: throws on invalid JSON
  std::filesystem::remove(path);
  return parsed;
}

TEST(profiler_chrome_trace, top_level_layout_follows_kineto) {
  const nlohmann::ordered_json trace = export_and_parse(launch_trace(), "layout.json");
  std::vector<std::string> keys;
  for (const auto& item : trace.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"schemaVersion", "deviceProperties", "distributedInfo",
                                            "dropped_events", "displayTimeUnit", "baseTimeNanoseconds",
                                            "traceEvents", "traceName"}));
  EXPECT_EQ(trace["schemaVersion"], 1);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["distributedInfo"]["rank"], 0);
  EXPECT_EQ(trace["deviceProperties"][0]["name"], "neuron 0");
  EXPECT_EQ(trace["traceEvents"].back()["name"], "Record Window End");
}

TEST(profiler_chrome_trace, events_lanes_and_flows) {
  const nlohmann::ordered_json trace = export_and_parse(launch_trace(), "events.json");
  std::map<std::string, int> count_by_phase;
  std::map<std::uint64_t, std::vector<nlohmann::ordered_json>> flows;
  std::set<std::string> metadata;
  for (const auto& event : trace["traceEvents"]) {
    const std::string phase = event["ph"];
    ++count_by_phase[phase];
    if (phase == "s" || phase == "f") flows[event["id"].get<std::uint64_t>()].push_back(event);
    if (phase == "M") metadata.insert(event["name"].get<std::string>() + "@" + event["pid"].dump());
    if (phase != "X") continue;
    const std::string name = event["name"];
    if (name.rfind("aten::mul", 0) == 0) {
      EXPECT_EQ(name, "aten::mul \"x\" * x");
      EXPECT_EQ(event["cat"], "cpu_op");
      EXPECT_EQ(event["args"]["External id"], 2);
      EXPECT_EQ(event["args"]["Input Dims"], nlohmann::json::parse("[[4,4],[4,4]]"));
      EXPECT_EQ(event["args"]["flops"], 16);
      EXPECT_EQ(event["tid"], 1);
      EXPECT_DOUBLE_EQ(event["dur"].get<double>(), 50.0);
    }
    if (name == "nrta_execute_schedule") {
      EXPECT_EQ(event["cat"], "privateuse1_runtime");
      EXPECT_TRUE(event["args"].contains("correlation"));
    }
    if (name == "nc_exec_running") {
      EXPECT_EQ(event["cat"], "kernel");
      EXPECT_EQ(event["pid"], 0);
      EXPECT_EQ(event["tid"], 0);
      EXPECT_TRUE(event["args"].contains("External id"));
      EXPECT_TRUE(event["args"].contains("correlation"));
    }
    if (name == "dmem_buf_copyout") {
      EXPECT_EQ(event["cat"], "gpu_memcpy");
    }
  }
  EXPECT_EQ(count_by_phase["X"], 7);
  // One s/f pair per launch, even when one launch caused two device events.
  ASSERT_EQ(flows.size(), 2u);
  for (const auto& [id, ends] : flows) {
    ASSERT_EQ(ends.size(), 2u) << "flow " << id;
    EXPECT_EQ(ends[0]["ph"], "s");
    EXPECT_EQ(ends[1]["ph"], "f");
    EXPECT_EQ(ends[1]["bp"], "e");
    EXPECT_EQ(ends[0]["cat"], "ac2g");
    EXPECT_FALSE(ends[0].contains("bp"));
    EXPECT_LE(ends[0]["ts"].get<double>(), ends[1]["ts"].get<double>());
  }
  EXPECT_EQ(flows.begin()->second[1]["pid"], 0);
  const std::string host_pid = std::to_string(::getpid());
  for (const std::string& expected :
       {"process_name@" + host_pid, "process_labels@" + host_pid, "process_sort_index@" + host_pid,
        "thread_name@" + host_pid, std::string("process_name@0"), std::string("process_sort_index@0"),
        std::string("thread_name@0")}) {
    EXPECT_TRUE(metadata.count(expected)) << expected;
  }
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "process_sort_index" && event["pid"] == 0) {
      EXPECT_EQ(event["args"]["sort_index"], 5000000);
    }
    if (event["ph"] == "M" && event["name"] == "thread_name" && event["pid"] == 0) {
      EXPECT_EQ(event["args"]["name"], "NC:0 exec");
    }
  }
}

TEST(profiler_chrome_trace, timestamps_are_microseconds_with_three_decimals_from_the_base) {
  const CollectedTrace trace = launch_trace();
  std::string text;
  JsonWriter json([&](std::string_view piece) { text += piece; });
  write_chrome_trace(trace, json, {});
  const auto parsed = nlohmann::json::parse(text);
  const std::int64_t base = parsed["baseTimeNanoseconds"];
  EXPECT_EQ(base % (7'889'238LL * 1'000'000'000LL), 0);
  const std::int64_t offset_ns = trace.wall_clock_at_window_start_ns - base;
  const std::string expected_ts =
      fmt::format("\"ts\":{}.{:03}", (offset_ns + 10'000) / 1000, (offset_ns + 10'000) % 1000);
  EXPECT_NE(text.find(expected_ts), std::string::npos) << expected_ts;
}

TEST(profiler_chrome_trace, unwritable_path_is_an_error) {
  EXPECT_THROW(export_chrome_trace(launch_trace(), "/nonexistent-dir/for/sure/trace.json"), Error);
}

}  // namespace
}  // namespace sightline::profiler
