// The first view (issue 17): a large trace.json is answered from its first runs while the rest is
// indexed on the reader's threads, and the complete index is swapped in when done. Partial answers say
// they are partial, hold the complete index's events id for id, and after the swap every answer is the
// complete index's; a damaged tail is reported, and a partial index destroyed mid-way stops. The swap
// is held by the test gate (FirstViewOptions::gate) so that nothing here depends on timing. Threads:
// runs under TSan in CI (label threads).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "sightline/device/spec.h"
#include "formats/manifest.h"
#include "server/profile_index.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kHostPid = 100;
constexpr int64_t kRuntimePid = 2'000'000'001;
constexpr int64_t kHardwarePid = 2'000'000'002;

// The exporter's layout: one element of traceEvents per line, lane metadata first. `steps` steps of a
// framework op that calls the runtime, which launches one execution on the hardware lane (fwd and
// ac2g flows), 100 us apart.
std::string layout_trace(int steps, bool damaged_tail = false) {
  std::vector<json> events;
  auto metadata = [&](const std::string& kind, int64_t pid, int64_t tid, const std::string& key, const json& value) {
    events.push_back({{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid}, {"ts", 0}, {"args", {{key, value}}}});
  };
  metadata("thread_name", kHostPid, 7, "name", "host/100/framework/TID:0");
  metadata("thread_name", kRuntimePid, 0, "name", "host/100/neuron_rt/NC:0");
  metadata("thread_name", kHardwarePid, 0, "name", "host/100/neuron_hw/NC:0");
  metadata("process_sort_index", kHostPid, 0, "sort_index", 0);
  metadata("process_sort_index", kRuntimePid, 0, "sort_index", 1);
  metadata("process_sort_index", kHardwarePid, 0, "sort_index", 2);
  auto slice = [&](const std::string& name, int64_t pid, int64_t tid, double ts, double dur, json args,
                   const std::string& category) {
    events.push_back({{"ph", "X"}, {"cat", category}, {"name", name}, {"pid", pid}, {"tid", tid},
                      {"ts", ts},  {"dur", dur},      {"args", std::move(args)}});
  };
  auto flow = [&](bool start, int id, int64_t pid, int64_t tid, double ts, const std::string& category) {
    json event = {{"ph", start ? "s" : "f"}, {"id", id}, {"pid", pid}, {"tid", tid},
                  {"ts", ts},                {"cat", category}, {"name", category}};
    if (!start) event["bp"] = "e";
    events.push_back(std::move(event));
  };
  for (int step = 0; step < steps; ++step) {
    const double base = 100.0 * step;
    slice(fmt::format("ProfilerStep#{}", step), kHostPid, 7, base, 90, json::object(), "user_annotation");
    slice("aten::mul", kHostPid, 7, base + 10, 50, {{"External id", step + 1}}, "cpu_op");
    slice("nrta_execute_schedule", kRuntimePid, 0, base + 20, 10, {{"External id", step + 1}, {"correlation", step + 1}},
          "privateuse1_runtime");
    slice("nc_exec_running", kHardwarePid, 0, base + 40, 15, {{"correlation", step + 1}}, "kernel");
    flow(true, step + 1, kHostPid, 7, base + 20, "fwd");
    flow(false, step + 1, kRuntimePid, 0, base + 20, "fwd");
    flow(true, step + 1, kRuntimePid, 0, base + 20, "ac2g");
    flow(false, step + 1, kHardwarePid, 0, base + 40, "ac2g");
  }
  std::string text = "{\"schemaVersion\": 1, \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) {
    text += events[i].dump();
    text += i + 1 < events.size() ? ",\n" : "\n";
  }
  // A damaged tail: the last event is not valid JSON (the first runs are still fine).
  if (damaged_tail) text.insert(text.rfind("\"dur\""), "\"bad\": oops, ");
  text += "], \"traceName\": \"first view\"}\n";
  return text;
}

class FirstViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("sightline_first_view_test_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    first_view_.gate = root_ / "gate";
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path write_profile(const std::string& name, const std::string& trace_text) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "trace.json") << trace_text;
    formats::Manifest manifest;
    manifest.created_utc = formats::manifest_now_utc();
    manifest.device = device::Spec::builtin("trn2");
    manifest.files = {{formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, trace_text.size()}};
    formats::manifest_save(manifest, dir.string());
    return dir;
  }
  void open_gate() const { std::ofstream(first_view_.gate) << "open\n"; }

  // Small runs on two threads, and a first view of a few runs, so that a 500 KB trace is "large".
  const IndexOptions read_{.parallel_parse_bytes = 0, .bytes_per_thread = 1024, .threads = 2, .bytes_per_run = 2048};
  FirstViewOptions first_view_{.first_view_bytes = 16 << 10, .min_trace_bytes = 64 << 10};
  fs::path root_;
};

TEST_F(FirstViewTest, PartialAnswersAreMarkedThenTheCompleteIndexIsSwappedIn) {
  const fs::path dir = write_profile("big", layout_trace(500));
  const auto whole = ProfileIndex::load(dir, read_, {.first_view_bytes = 0});
  ASSERT_TRUE(whole->complete());
  const auto index = ProfileIndex::load(dir, read_, first_view_);
  ASSERT_FALSE(index->complete());  // the gate is closed

  // The partial index: the first events of the file, the complete index's id for id, every lane (the
  // metadata comes first), and each answer says it is partial, with the progress.
  const size_t partial_events = index->events().size();
  ASSERT_GT(partial_events, 0u);
  ASSERT_LT(partial_events, whole->events().size() / 4);
  for (size_t i = 0; i < partial_events; ++i) {
    const TraceEvent& a = index->events()[i];
    const TraceEvent& b = whole->events()[i];
    ASSERT_TRUE(a.ts_us == b.ts_us && a.dur_us == b.dur_us && index->name_of(a.name) == whole->name_of(b.name) &&
                a.lane == b.lane && a.depth == b.depth && index->args_json(a) == whole->args_json(b))
        << "event " << i;
  }
  const json lanes = index->lanes_json();
  EXPECT_EQ(lanes["complete"], false);
  const json& progress = lanes["progress"];
  EXPECT_EQ(progress["trace_bytes"], fs::file_size(dir / "trace.json"));
  EXPECT_GE(progress["first_view_bytes"].get<uint64_t>(), uint64_t{16} << 10);
  EXPECT_LT(progress["first_view_bytes"].get<uint64_t>(), progress["trace_bytes"].get<uint64_t>());
  EXPECT_GE(progress["fraction"].get<double>(), 0.0);
  EXPECT_LE(progress["fraction"].get<double>(), 1.0);
  EXPECT_EQ(lanes["lanes"].size(), whole->lanes_json()["lanes"].size());
  for (size_t i = 0; i < lanes["lanes"].size(); ++i) EXPECT_EQ(lanes["lanes"][i]["name"], whole->lanes_json()["lanes"][i]["name"]);
  EXPECT_LT(lanes["end"].get<double>(), whole->lanes_json()["end"].get<double>());
  const WindowQuery late{.start_us = 40000, .end_us = 41000, .lanes = {}, .width_px = 800};
  const json partial_window = index->window(late);
  EXPECT_EQ(partial_window["complete"], false);  // beyond the indexed part: not empty-as-if-final
  EXPECT_EQ(partial_window["event_count"], 0);
  const json partial_search = index->search("nc_exec", 10);
  EXPECT_EQ(partial_search["complete"], false);
  EXPECT_LT(partial_search["total"].get<size_t>(), 500u);
  EXPECT_EQ(index->event_details(0)["complete"], false);

  // Published: every answer is the complete index's, byte for byte, with no partial status.
  open_gate();
  index->wait_complete();
  EXPECT_TRUE(index->complete());
  EXPECT_EQ(index->events().size(), whole->events().size());
  EXPECT_EQ(index->lanes_json(), whole->lanes_json());
  EXPECT_EQ(index->window(late), whole->window(late));
  EXPECT_EQ(index->search("nc_exec", 10, 5), whole->search("nc_exec", 10, 5));
  EXPECT_EQ(index->search("nc_exec", 10)["total"], 500);
  EXPECT_EQ(index->event_details(1), whole->event_details(1));
}

TEST_F(FirstViewTest, AnswersDuringTheSwapAreEachOneIndexs) {
  const fs::path dir = write_profile("big", layout_trace(500));
  const auto whole = ProfileIndex::load(dir, read_, {.first_view_bytes = 0});
  const auto index = ProfileIndex::load(dir, read_, first_view_);
  const WindowQuery all{.start_us = 0, .end_us = 50000, .lanes = {}, .width_px = 1000};
  const json complete_window = whole->window(all);
  const json complete_search = whole->search("aten", 20);
  std::atomic<int> partial{0}, complete{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      for (;;) {
        const json window = index->window(all);
        const json search = index->search("aten", 20);
        for (const json* answer : {&window, &search}) {
          if (answer->contains("complete")) {
            ++partial;
          } else if (*answer == (answer == &window ? complete_window : complete_search)) {
            ++complete;
          } else {
            ++wrong;
          }
        }
        if (index->complete() && complete > 0) break;
      }
    });
  }
  open_gate();
  index->wait_complete();
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(complete, 0);
}

TEST_F(FirstViewTest, ADamagedTailIsReportedOnceIndexed) {
  const fs::path dir = write_profile("damaged", layout_trace(500, true));
  EXPECT_THROW(ProfileIndex::load(dir, read_, {.first_view_bytes = 0}), RequestError);
  const auto index = ProfileIndex::load(dir, read_, first_view_);  // the first runs are fine
  EXPECT_EQ(index->lanes_json()["complete"], false);
  open_gate();
  try {
    index->wait_complete();
    FAIL() << "the damaged tail was not reported";
  } catch (const RequestError& error) {
    EXPECT_EQ(error.status(), 422);
    EXPECT_NE(std::string(error.what()).find("trace.json"), std::string::npos) << error.what();
  }
  EXPECT_THROW(index->lanes_json(), RequestError);
  EXPECT_THROW(index->window({.start_us = 0, .end_us = 10, .lanes = {}}), RequestError);
}

TEST_F(FirstViewTest, SmallOrOtherLayoutTracesAreIndexedWhole) {
  // One line (no run boundaries to cut at): the whole file before the first answer.
  const fs::path one_line = write_profile("one_line", json::parse(layout_trace(500)).dump());
  EXPECT_TRUE(ProfileIndex::load(one_line, read_, first_view_)->complete());
  // Below min_trace_bytes.
  const fs::path small = write_profile("small", layout_trace(20));
  EXPECT_TRUE(ProfileIndex::load(small, read_, first_view_)->complete());
}

TEST_F(FirstViewTest, APartialIndexDroppedMidwayStops) {
  const fs::path dir = write_profile("big", layout_trace(500));
  auto index = ProfileIndex::load(dir, read_, first_view_);
  EXPECT_FALSE(index->complete());
  index.reset();  // the gate never opens: the destructor cancels and joins
  SUCCEED();
}

}  // namespace
}  // namespace sightline::server
