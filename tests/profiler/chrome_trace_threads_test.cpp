// The Chrome trace exporter formatting a large trace's events on several threads (CI runs the
// "threads" label under TSan).
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/chrome_trace.h"
#include "synthetic.h"

namespace sightline::profiler {
namespace {

using testing::device_event;
using testing::host_event;
using testing::make_trace;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("sightline_profiler_" + name);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// A large trace's events are formatted in blocks on several threads: the document is the one a single
// thread writes, byte for byte, for any number of threads, in memory (either piece lifetime) and in
// the file, in both layouts.
TEST(profiler_chrome_trace_threads, events_formatted_on_several_threads_are_the_bytes_of_one) {
  std::vector<FunctionEvent> events;
  for (int i = 0; i < 15'000; ++i) {  // 60k events: 14 blocks of 4Ki events and part of a 15th
    const std::int64_t t = 6 * i;
    const auto op = std::uint64_t(2 * i + 1), call = std::uint64_t(2 * i + 2);
    events.push_back(host_event(i % 3 ? "aten::mul" : "aten::\"add\"\n", t, t + 5, op));
    events.back().input_shapes = {{4096, i}, {i % 7}};
    if (i % 5 == 0) events.back().stack = {"model.py(12): forward", "caf\xc3\xa9.py(3): <module>"};
    events.push_back(host_event("nrta_execute_schedule", t + 1, t + 2, call, EventKind::runtime, op));
    events.back().device_index = i % 2;  // a core's runtime call: the system layout's runtime lanes
    events.push_back(device_event("nc_exec_running", t + 3, t + 4, call, op));
    events.back().args.push_back({"exec_id", std::int64_t{i}});
    events.back().args.push_back({"util", 0.25 * i});
    events.push_back(device_event("dmem_buf_copyout", t + 4, t + 5, call, op, EventKind::device_memcpy));
    events.back().bytes = std::uint64_t(64 + i);
    events.back().resource = 1 + i % 3;
  }
  CollectedTrace trace = make_trace(std::move(events));
  trace.threads.push_back({1, "main"});
  for (const bool system_lanes : {false, true}) {
    auto document = [&](unsigned threads, JsonWriter::Pieces pieces) {
      std::string text;
      JsonWriter json([&text](std::string_view piece) { text += piece; }, 1 << 16, pieces);
      write_chrome_trace(trace, json,
                         {.device_name = "neuron", .trace_name = "t", .system_lanes = system_lanes,
                          .instance = "i", .format_threads = threads});
      return text;
    };
    const std::string expected = document(1, JsonWriter::Pieces::until_return);
    ASSERT_GT(expected.size(), std::size_t{8} << 20);
    EXPECT_TRUE(nlohmann::json::accept(expected));
    for (const unsigned threads : {2u, 3u, 8u}) {
      for (const auto pieces : {JsonWriter::Pieces::until_return, JsonWriter::Pieces::until_next_return}) {
        EXPECT_TRUE(document(threads, pieces) == expected) << threads << " threads differ from one";
      }
      const std::filesystem::path path = temp_path(fmt::format("threads_{}_{}.json", system_lanes, threads));
      export_chrome_trace(trace, path.string(),
                          {.device_name = "neuron", .trace_name = "t", .system_lanes = system_lanes,
                           .instance = "i", .format_threads = threads});
      EXPECT_TRUE(read_file(path) == expected) << "the file of " << threads << " threads differs";
      std::filesystem::remove(path);
    }
  }
}

}  // namespace
}  // namespace sightline::profiler
