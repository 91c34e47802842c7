// The Chrome trace exporter: parsed back with a strict parser and checked against Kineto's layout.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/chrome_trace.h"
#include "sightline/error.h"
#include "golden.h"
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

// Flows when launches are not in id order: device work reported late, a launch whose device events
// are apart, two host events with one id, device work no host event launched. The "s" end follows the
// first host event with the device event's id, the "f" end the first device event of that id, as the
// definition says (computed here over the trace's events in order).
TEST(profiler_chrome_trace, flows_bind_the_first_host_and_device_events_of_each_id) {
  std::vector<FunctionEvent> events = {
      host_event("aten::a", 10, 20, 1),
      host_event("launch", 11, 12, 9, EventKind::runtime, 1),
      host_event("aten::b", 30, 40, 2),
      host_event("launch", 31, 32, 5, EventKind::runtime, 2),
      host_event("launch again", 33, 34, 5, EventKind::runtime, 2),  // the same id again
      device_event("exec", 35, 36, 5, 2),
      device_event("exec", 50, 60, 9, 1),  // launched first, reported after the other
      device_event("orphan", 61, 62, 77, 0),
      device_event("copy", 63, 64, 5, 2, EventKind::device_memcpy),
      device_event("exec", 65, 66, 9, 1),
  };
  const CollectedTrace trace = make_trace(std::move(events));
  std::vector<char> expected(trace.events.size(), 0);  // 's' or 'f' after each event, else 0
  std::set<std::uint64_t> bound;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const FunctionEvent& device = trace.events[i];
    if (device.device_type == DeviceType::cpu || device.id == 0 || bound.count(device.id)) continue;
    for (std::size_t h = 0; h < trace.events.size(); ++h) {
      if (trace.events[h].device_type != DeviceType::cpu || trace.events[h].id != device.id) continue;
      expected[h] = 's';
      expected[i] = 'f';
      bound.insert(device.id);
      break;
    }
  }
  EXPECT_EQ(bound.size(), 2u);
  const nlohmann::ordered_json parsed = export_and_parse(trace, "flows.json");
  std::vector<char> found;
  for (const auto& event : parsed["traceEvents"]) {
    if (event["ph"] == "X") found.push_back(0);
    if ((event["ph"] == "s" || event["ph"] == "f") && event["cat"] == "ac2g") {
      ASSERT_FALSE(found.empty());
      EXPECT_EQ(found.back(), 0) << "two flow ends on one event";
      found.back() = event["ph"].get<std::string>()[0];
    }
  }
  EXPECT_EQ(found, expected);
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

// The exporter's bytes, both layouts, against files written by the exporter before its file writer and
// its walks over the events changed (issue 13): the pid, which differs per run, is the one thing
// replaced. SIGHTLINE_UPDATE_GOLDEN=1 rewrites them.
std::string without_pid(std::string text) {
  const std::string pid = std::to_string(::getpid());
  for (std::size_t at = text.find(pid); at != std::string::npos; at = text.find(pid, at + 1)) {
    const bool token = at > 0 && (text[at - 1] == ':' || text[at - 1] == '/') && at + pid.size() < text.size() &&
                       (text[at + pid.size()] == ',' || text[at + pid.size()] == '/' || text[at + pid.size()] == '}');
    if (token) text.replace(at, pid.size(), "PID");
  }
  return text;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

TEST(profiler_chrome_trace, bytes_of_both_layouts_are_the_golden_ones) {
  CollectedTrace trace = launch_trace();
  trace.events.push_back(device_event("cc_running", 300, 340, 6, 4));
  trace.events.back().resource = 3;
  trace.resources.push_back({0, 3, "host/1/neuron_hw/CC:0", 3});
  trace.notes.push_back("a note");
  for (const bool system_lanes : {false, true}) {
    const std::filesystem::path path = temp_path(fmt::format("golden_{}.json", system_lanes));
    export_chrome_trace(trace, path.string(),
                        {.device_name = "neuron", .trace_name = "golden", .system_lanes = system_lanes,
                         .instance = "golden"});
    testing::expect_golden(system_lanes ? "chrome_trace_system_lanes.json" : "chrome_trace_kineto.json",
                           without_pid(read_file(path)));
    std::filesystem::remove(path);
  }
}

// A trace of many MiB goes to the file in pieces handed to the writer thread without a copy: the file
// holds exactly the document formatted into memory.
TEST(profiler_chrome_trace, a_file_of_many_pieces_is_the_document_in_memory) {
  std::vector<FunctionEvent> events;
  for (int i = 0; i < 20'000; ++i) {
    const std::int64_t t = 4 * i;  // microseconds, inside make_trace's window
    events.push_back(host_event(i % 2 ? "aten::mul" : "aten::add", t, t + 3, std::uint64_t(2 * i + 1)));
    events.back().input_shapes = {{4096, 4096}, {4096, 4096}, {4096}};
    events.push_back(host_event("nrta_execute_schedule", t + 1, t + 2, std::uint64_t(2 * i + 2),
                                EventKind::runtime, std::uint64_t(2 * i + 1)));
    events.push_back(device_event("nc_exec_running", t + 3, t + 4, std::uint64_t(2 * i + 2),
                                  std::uint64_t(2 * i + 1)));
  }
  const CollectedTrace trace = make_trace(std::move(events));
  for (const bool system_lanes : {false, true}) {
    const ChromeTraceOptions options{.device_name = "neuron", .trace_name = "t", .system_lanes = system_lanes};
    std::string expected;
    {
      JsonWriter json([&expected](std::string_view piece) { expected += piece; });
      write_chrome_trace(trace, json, options);
    }
    ASSERT_GT(expected.size(), std::size_t{4} << 20);  // several of the exporter's 1 MiB pieces
    const std::filesystem::path path = temp_path(fmt::format("pieces_{}.json", system_lanes));
    export_chrome_trace(trace, path.string(), options);
    EXPECT_TRUE(read_file(path) == expected) << "the file differs from the document";
    EXPECT_EQ(std::filesystem::file_size(path), expected.size());  // nothing allocated past the end stays
    std::filesystem::remove(path);
  }
}

TEST(profiler_chrome_trace, unwritable_path_is_an_error) {
  EXPECT_THROW(export_chrome_trace(launch_trace(), "/nonexistent-dir/for/sure/trace.json"), Error);
}

}  // namespace
}  // namespace sightline::profiler
