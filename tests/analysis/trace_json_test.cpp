// trace.json read back from hostile input (issue 21): every malformed value is a sightline::Error that
// names the file, the event and the field; no value makes the reader overflow, convert a float out of
// range or throw anything else.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/trace_json.h"
#include "formats/trace_reader.h"
#include "sightline/error.h"

using namespace sightline;
using nlohmann::json;

namespace {

// One of each event kind the reader looks at, in the layout export_chrome_trace writes.
json valid_trace() {
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 7}, {"tid", 0}, {"args", {{"name", "host"}}}});
  events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mul"}, {"pid", 7}, {"tid", 1},
                    {"ts", 10}, {"dur", 5},
                    {"args", {{"External id", 1}, {"Input Dims", {{2, 3}, {3}}}, {"flops", 6}, {"bytes", 24},
                              {"Call stack", {"model.py(3): f", "main.py(9): <module>"}}}}});
  events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "nc_exec_running"}, {"pid", 8}, {"tid", 0},
                    {"ts", 12}, {"dur", 2}, {"args", {{"External id", 1}, {"correlation", 1}, {"device", 0},
                                                      {"stream", 0}}}});
  events.push_back({{"ph", "i"}, {"name", "[memory]"}, {"pid", 7}, {"tid", 1}, {"ts", 11},
                    {"args", {{"Bytes", 24}, {"Addr", 4096}, {"Device Id", -1}, {"Total Allocated", 24},
                              {"Total Reserved", 24}}}});
  events.push_back({{"ph", "s"}, {"cat", "fwd"}, {"name", "fwd"}, {"id", 5}, {"pid", 7}, {"tid", 1}, {"ts", 10}});
  events.push_back({{"ph", "i"}, {"name", "Record Window End"}, {"pid", 7}, {"tid", 1}, {"ts", 20}});
  return {{"schemaVersion", 1}, {"baseTimeNanoseconds", 1000}, {"traceEvents", events}};
}

// Parses, and returns the error text ("" when accepted); any exception other than sightline::Error
// fails the test.
std::string parse_error(const std::string& text) {
  try {
    (void)analysis::trace_json_parse(text, "hostile/trace.json");
    return "";
  } catch (const Error& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not a named error: " << error.what() << "\n  for: " << text.substr(0, 300);
    return error.what();
  }
}

}  // namespace

TEST(TraceJsonHostile, TheValidBaseParses) {
  EXPECT_EQ(parse_error(valid_trace().dump()), "");
}

// with_stack's "Call stack": sightline's array of frames, or Kineto's one string joined by ';'.
TEST(TraceJsonHostile, CallStackReadsBothForms) {
  const std::vector<std::string> frames = {"model.py(3): f", "main.py(9): <module>"};
  json trace = valid_trace();
  auto stack_of = [](const json& t) {
    for (const profiler::FunctionEvent& e : analysis::trace_json_parse(t.dump(), "t.json").events)
      if (e.name == "aten::mul") return e.stack.to_vector();
    return std::vector<std::string>{};
  };
  EXPECT_EQ(stack_of(trace), frames);
  trace["traceEvents"][1]["args"]["Call stack"] = "model.py(3): f;main.py(9): <module>";
  EXPECT_EQ(stack_of(trace), frames);
  trace["traceEvents"][1]["args"]["Call stack"] = json::array({"ok", 3});
  EXPECT_NE(parse_error(trace.dump()).find("Call stack"), std::string::npos);
}

// libFuzzer's crashes: signed overflow multiplying ts/dur to nanoseconds and float -> int64 of huge
// values. Each is now an error naming the event and the field.
TEST(TraceJsonHostile, OutOfRangeTimesAreNamedErrors) {
  for (const char* value : {"9223372036854775807", "-9223372036854775808", "18446744073709551615",
                            "9223372036854775.807", "1e300", "-1e300", "12345678901234567.000", "1e16"}) {
    for (const char* key : {"ts", "dur"}) {
      std::string text = valid_trace().dump();
      const std::string field = fmt::format("\"{}\":{}", key, key == std::string("ts") ? "10" : "5");
      const size_t at = text.find(field);
      ASSERT_NE(at, std::string::npos);
      text.replace(at, field.size(), fmt::format("\"{}\":{}", key, value));
      const std::string error = parse_error(text);
      EXPECT_NE(error.find(fmt::format("hostile/trace.json: traceEvents[1].{}", key)), std::string::npos)
          << key << "=" << value << ": " << error;
    }
  }
}

// Another writer's times (more than three decimals, exponents) are rounded to the nanosecond, not
// truncated to an integer count of microseconds taken for nanoseconds.
TEST(TraceJsonHostile, TimesWithMoreDecimalsAreRoundedToNanoseconds) {
  json trace = valid_trace();
  trace["traceEvents"][1]["ts"] = 10.0004;
  trace["traceEvents"][1]["dur"] = 5.0004;
  const profiler::CollectedTrace parsed = analysis::trace_json_parse(trace.dump(), "other/trace.json");
  bool found = false;
  for (const profiler::FunctionEvent& e : parsed.events) {
    if (e.name != "aten::mul") continue;
    found = true;
    EXPECT_EQ(e.end_ns - e.start_ns, 5000);
  }
  EXPECT_TRUE(found);
}

TEST(TraceJsonHostile, NegativeDurationIsRefused) {
  json trace = valid_trace();
  trace["traceEvents"][1]["dur"] = -5;
  const std::string error = parse_error(trace.dump());
  EXPECT_NE(error.find("traceEvents[1].dur is negative"), std::string::npos) << error;
}

// Every field of every event, and of its args, replaced by a value of each other type: accepted or a
// named error, never an "internal error" from a JSON type exception.
TEST(TraceJsonHostile, EveryFieldOfTheWrongTypeIsANamedError) {
  const std::vector<json> replacements = {json(nullptr), json(true), json("text"), json(-1), json(1.5),
                                          json(1e300), json(18446744073709551615ull), json::array({1, "x"}),
                                          json::object({{"k", 1}})};
  const json base = valid_trace();
  size_t mutations = 0, refused = 0;
  for (size_t i = 0; i < base["traceEvents"].size(); ++i) {
    const json& event = base["traceEvents"][i];
    std::vector<std::vector<std::string>> paths;
    for (const auto& [key, value] : event.items()) {
      paths.push_back({key});
      if (value.is_object()) {
        for (const auto& [inner, unused] : value.items()) paths.push_back({key, inner});
      }
    }
    for (const auto& path : paths) {
      for (const json& replacement : replacements) {
        json trace = base;
        json& in_event = trace["traceEvents"][i];
        json& target = path.size() == 1 ? in_event[path[0]] : in_event[path[0]][path[1]];
        target = replacement;
        ++mutations;
        const std::string error = parse_error(trace.dump());
        if (error.empty()) continue;
        ++refused;
        EXPECT_NE(error.find("hostile/trace.json"), std::string::npos) << error;
        EXPECT_EQ(error.find("internal error"), std::string::npos) << error;
      }
    }
  }
  EXPECT_GT(mutations, 300u);
  EXPECT_GT(refused, 100u);
  // Top-level fields too.
  for (const char* key : {"baseTimeNanoseconds", "dropped_events", "profile_memory"}) {
    for (const json& replacement : replacements) {
      json trace = base;
      trace[key] = replacement;
      const std::string error = parse_error(trace.dump());
      if (!error.empty()) {
        EXPECT_NE(error.find(fmt::format("hostile/trace.json: {}", key)), std::string::npos) << error;
      }
    }
  }
}

// The one trace reader hands the analysis reader every element, so one that is no event object is
// refused with its index (not skipped, which would also shift the indexes of the events after it).
TEST(TraceJsonHostile, AnElementThatIsNoObjectIsRefusedWithItsIndex) {
  json trace = valid_trace();
  trace["traceEvents"].insert(trace["traceEvents"].begin() + 1, json(7));
  EXPECT_NE(parse_error(trace.dump()).find("hostile/trace.json: traceEvents[1] is not an object"), std::string::npos)
      << parse_error(trace.dump());
}

// Times are read from their text, exactly, at host-clock magnitudes where a double of microseconds
// cannot hold the nanosecond (1764000000014.681 us is no double: the nearest is 0.09 ns below it, so
// a conversion that truncates loses a nanosecond).
TEST(TraceJsonHostile, HostClockTimesAreExactNanoseconds) {
  std::string text = valid_trace().dump();
  const std::string field = "\"ts\":10}";  // aten::mul, the first event at 10 (keys are sorted)
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, field.size(), "\"ts\":1764000000014.681}");
  bool found = false;
  for (const profiler::FunctionEvent& e : analysis::trace_json_parse(text, "exact/trace.json").events) {
    if (e.name != "aten::mul") continue;
    found = true;
    EXPECT_EQ(e.start_ns, 1'764'000'000'014'681);
    EXPECT_EQ(e.end_ns, 1'764'000'000'019'681);
  }
  EXPECT_TRUE(found);
}

// The device name is read through the one reader (issue 16): from the lanes' metadata events, else from
// deviceProperties; an event's own name that looks like a lane never counts (a scan of the raw text took
// it), and a file gives what its text gives.
TEST(TraceJsonDeviceName, ComesFromTheLanesNotFromAnyText) {
  json trace = valid_trace();
  EXPECT_EQ(analysis::trace_json_device_name(trace.dump()), "privateuseone");
  trace["traceEvents"][1]["name"] = "host/7/neuron_hw/NC:0";  // an op so named is no lane
  EXPECT_EQ(analysis::trace_json_device_name(trace.dump()), "privateuseone");

  json lanes = trace;
  lanes["traceEvents"].insert(lanes["traceEvents"].begin(),
                              json{{"ph", "M"}, {"name", "thread_name"}, {"pid", 8}, {"tid", 0},
                                   {"args", {{"name", "host/7/trn_hw/NC:0"}}}});
  EXPECT_EQ(analysis::trace_json_device_name(lanes.dump()), "trn");

  json properties = trace;
  properties["deviceProperties"] = json::array({json{{"id", 0}, {"name", "neuron_hw/NC:0"}}});
  EXPECT_EQ(analysis::trace_json_device_name(properties.dump()), "neuron");

  const std::string path = ::testing::TempDir() + "/device_name_trace.json";
  for (const json& t : {trace, lanes, properties}) {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr);
    const std::string text = t.dump(1);
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
    EXPECT_EQ(analysis::trace_json_file_device_name(path), analysis::trace_json_device_name(text));
  }
  std::remove(path.c_str());
  EXPECT_THROW(analysis::trace_json_device_name("{\"traceEvents\": [ {\"ph\": "), Error);
}

namespace {

// valid_trace() repeated `copies` times (ids kept apart), one element per line as the exporter writes,
// so that the reader splits it into runs.
std::string one_event_per_line(size_t copies, size_t bad_copy = SIZE_MAX) {
  std::string text = "{\"schemaVersion\": 1, \"baseTimeNanoseconds\": 1000, \"traceEvents\": [\n";
  const json base = valid_trace()["traceEvents"];
  for (size_t c = 0; c < copies; ++c) {
    for (size_t e = 0; e < base.size(); ++e) {
      json event = base[e];
      if (event.contains("ts")) event["ts"] = event["ts"].get<int64_t>() + static_cast<int64_t>(c) * 100;
      if (c == bad_copy && e == 1) event["pid"] = "seven";
      text += event.dump();
      text += c + 1 == copies && e + 1 == base.size() ? "\n" : ",\n";
    }
  }
  return text + "]}\n";
}

}  // namespace

// The CollectedTrace is built from the one reader's runs (issue 16): read on several threads, a
// trace gives the events it gives read whole, and an error names the element by its index in the
// file, not in its run.
TEST(TraceJsonRuns, RunsReadOnSeveralThreadsGiveTheSameTraceAndIndexes) {
  const size_t copies = 400;
  const std::string path = ::testing::TempDir() + "/runs_trace.json";
  auto write = [&](const std::string& text) {
    std::FILE* file = std::fopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr);
    std::fwrite(text.data(), 1, text.size(), file);
    std::fclose(file);
  };
  formats::TraceReadOptions options;
  options.parallel_parse_bytes = 1;
  options.bytes_per_thread = 1;
  options.threads = 3;
  options.bytes_per_run = 4096;
  options.refuse_bad_complete_events = false;

  const std::string text = one_event_per_line(copies);
  write(text);
  {
    const formats::MappedTrace file(path);
    const std::vector<formats::TraceRun> runs = formats::read_trace(file, "runs.json", options);
    ASSERT_GT(runs.size(), 4u);
    const profiler::CollectedTrace built = analysis::trace_json_build(runs, file, "runs.json");
    const profiler::CollectedTrace whole = analysis::trace_json_parse(text, "runs.json");
    ASSERT_EQ(built.events.size(), whole.events.size());
    EXPECT_EQ(built.events.size(), 2 * copies);
    for (size_t i = 0; i < whole.events.size(); ++i) {
      EXPECT_EQ(built.events[i].name, whole.events[i].name);
      EXPECT_EQ(built.events[i].start_ns, whole.events[i].start_ns);
      EXPECT_EQ(built.events[i].input_shapes, whole.events[i].input_shapes);
    }
    EXPECT_EQ(built.memory.size(), whole.memory.size());
    EXPECT_EQ(analysis::trace_json_runs_device_name(runs), "privateuseone");
  }

  const size_t bad_copy = 333;
  write(one_event_per_line(copies, bad_copy));
  const std::string where = fmt::format("runs.json: traceEvents[{}].pid", bad_copy * 6 + 1);
  {
    const formats::MappedTrace file(path);
    const std::vector<formats::TraceRun> runs = formats::read_trace(file, "runs.json", options);
    try {
      (void)analysis::trace_json_build(runs, file, "runs.json");
      ADD_FAILURE() << "a pid that is no integer was accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(where), std::string::npos) << error.what();
    }
  }
  EXPECT_NE(parse_error(one_event_per_line(copies, bad_copy)).find("traceEvents[" + std::to_string(bad_copy * 6 + 1)),
            std::string::npos);
  std::remove(path.c_str());
}
