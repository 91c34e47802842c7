// The Explorer server: profile names cannot leave the root, windowed queries send only what is visible
// and merge sub-pixel events with counts, flows bind to their slices, and broken profiles are refused
// with a 4xx JSON error instead of a crash.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../analysis/profiles.h"
#include "sightline/device/spec.h"
#include "formats/manifest.h"
#include "server/http_server.h"
#include "server/profile_index.h"
#include "server/profile_store.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kHostPid = 100;
constexpr int64_t kRuntimePid = 2'000'000'001;
constexpr int64_t kHardwarePid = 2'000'000'002;

json metadata(const std::string& kind, int64_t pid, int64_t tid, const std::string& key, const json& value) {
  return {{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid}, {"ts", 0}, {"args", {{key, value}}}};
}

json complete(const std::string& name, int64_t pid, int64_t tid, double ts, double dur,
              json args = json::object(), const std::string& category = "cpu_op") {
  return {{"ph", "X"},  {"cat", category}, {"name", name}, {"pid", pid},
          {"tid", tid}, {"ts", ts},        {"dur", dur},   {"args", std::move(args)}};
}

json flow(bool start, uint64_t id, int64_t pid, int64_t tid, double ts, const std::string& category) {
  json event = {{"ph", start ? "s" : "f"}, {"id", id},        {"pid", pid}, {"tid", tid}, {"ts", ts},
                {"cat", category},         {"name", category}};
  if (!start) event["bp"] = "e";
  return event;
}

// Framework lane: ProfilerStep#1 [0, 1000) holding aten::mul [10, 60) that calls the runtime at 20; the
// runtime call [20, 30) launches nc_exec_running [40, 55) on the hardware lane. Then 1000 tiny
// nc_tiny events of 0.1 us every 0.2 us from 100 us on the hardware lane.
json sample_trace() {
  json events = json::array();
  events.push_back(metadata("thread_name", kHostPid, 7, "name", "host/100/framework/TID:0"));
  events.push_back(metadata("thread_name", kRuntimePid, 0, "name", "host/100/neuron_rt/NC:0"));
  events.push_back(metadata("thread_name", kHardwarePid, 0, "name", "host/100/neuron_hw/NC:0"));
  events.push_back(metadata("process_sort_index", kRuntimePid, 0, "sort_index", 1));
  events.push_back(metadata("process_sort_index", kHardwarePid, 0, "sort_index", 2));
  events.push_back(metadata("process_sort_index", kHostPid, 0, "sort_index", 0));
  events.push_back(complete("ProfilerStep#1", kHostPid, 7, 0, 1000));
  events.push_back(complete("aten::mul", kHostPid, 7, 10, 50, {{"External id", 5}}));
  events.push_back(complete("nrta_execute_schedule", kRuntimePid, 0, 20, 10, {{"External id", 5}, {"correlation", 9}},
                            "privateuse1_runtime"));
  events.push_back(complete("nc_exec_running", kHardwarePid, 0, 40, 15,
                            {{"External id", 5},
                             {"correlation", 9},
                             {"device", 0},
                             {"stream", 0},
                             {"neff", "neff_0123456789abcdef.neff"}},
                            "kernel"));
  for (int i = 0; i < 1000; ++i) {
    events.push_back(complete("nc_tiny", kHardwarePid, 0, 100 + 0.2 * i, 0.1, {{"device", 0}, {"stream", 0}}, "kernel"));
  }
  events.push_back(flow(true, 77, kHostPid, 7, 20, "fwd"));
  events.push_back(flow(false, 77, kRuntimePid, 0, 20, "fwd"));
  events.push_back(flow(true, 9, kRuntimePid, 0, 20, "ac2g"));
  events.push_back(flow(false, 9, kHardwarePid, 0, 40, "ac2g"));
  return {{"schemaVersion", 1}, {"traceEvents", events}};
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("sightline_server_test_{}",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    write_profile("good", sample_trace().dump());
  }
  void TearDown() override { fs::remove_all(root_); }

  void write_profile(const std::string& name, const std::string& trace_text) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "trace.json") << trace_text;
    formats::Manifest manifest;
    manifest.created_utc = formats::manifest_now_utc();
    manifest.device = device::Spec::builtin("trn2");
    manifest.files = {
        {formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, trace_text.size()}};
    formats::manifest_save(manifest, dir.string());
  }

  template <typename Body>
  static int status_of(Body body) {
    try {
      body();
    } catch (const RequestError& error) {
      return error.status();
    }
    return 200;
  }

  fs::path root_;
};

TEST_F(ServerTest, NamesThatLeaveTheRootAreRefused) {
  ProfileStore store(root_);
  for (const char* name : {"..", "../good", "good/../good", "a/b", ".hidden", "", "..%2f", "/etc"}) {
    EXPECT_EQ(status_of([&] { store.open(name); }), 400) << name;
  }
  const fs::path outside = root_.parent_path() / (root_.filename().string() + "_outside");
  fs::create_directories(outside);
  fs::create_directory_symlink(outside, root_ / "escape");
  EXPECT_EQ(status_of([&] { store.open("escape"); }), 403);
  EXPECT_EQ(status_of([&] { store.remove("escape"); }), 403);
  EXPECT_TRUE(fs::exists(outside));
  fs::remove_all(outside);
  EXPECT_EQ(status_of([&] { store.open("missing"); }), 404);
  EXPECT_EQ(status_of([&] { store.open("good"); }), 200);
}

TEST_F(ServerTest, LanesFollowTheSortIndexAndFlowsBindToTheirSlices) {
  auto profile = ProfileIndex::load(root_ / "good");
  const json lanes = profile->lanes_json();
  ASSERT_EQ(lanes["lanes"].size(), 3u);
  EXPECT_EQ(lanes["lanes"][0]["name"], "host/100/framework/TID:0");
  EXPECT_EQ(lanes["lanes"][1]["name"], "host/100/neuron_rt/NC:0");
  EXPECT_EQ(lanes["lanes"][2]["name"], "host/100/neuron_hw/NC:0");
  ASSERT_EQ(profile->flows().size(), 2u);
  for (const Flow& f : profile->flows()) {
    const std::string from = profile->name_of(profile->events()[f.from].name);
    const std::string to = profile->name_of(profile->events()[f.to].name);
    if (f.category == "fwd") {
      EXPECT_EQ(from, "aten::mul");  // the deepest framework slice holding the flow start
      EXPECT_EQ(to, "nrta_execute_schedule");
    } else {
      EXPECT_EQ(from, "nrta_execute_schedule");
      EXPECT_EQ(to, "nc_exec_running");
    }
  }
}

TEST_F(ServerTest, WindowMergesSubPixelEventsWithCounts) {
  auto profile = ProfileIndex::load(root_ / "good");
  // 300 us over 150 px: 2 us a pixel; the 0.1 us events merge, the long ones stay events.
  const json window = profile->window({.start_us = 0, .end_us = 300, .lanes = {}, .width_px = 150});
  const json& hardware = window["lanes"][2];
  uint64_t merged_events = 0;
  for (const json& box : hardware["merged"]) {
    merged_events += box["count"].get<uint64_t>();
    EXPECT_EQ(box["name"], "nc_tiny");
  }
  EXPECT_EQ(merged_events, 1000u);
  EXPECT_LE(hardware["merged"].size(), 150u);
  ASSERT_EQ(hardware["events"].size(), 1u);
  EXPECT_EQ(hardware["events"][0]["name"], "nc_exec_running");

  // Zoomed in to 10 us over 1000 px, every event in range is sent on its own and nothing else.
  const json zoomed = profile->window({.start_us = 100, .end_us = 110, .lanes = {2}, .width_px = 1000});
  ASSERT_EQ(zoomed["lanes"].size(), 1u);
  EXPECT_TRUE(zoomed["lanes"][0]["merged"].empty());
  EXPECT_EQ(zoomed["lanes"][0]["events"].size(), 51u);  // starts at 100.0, 100.2, ..., 110.0
  // A range after everything is empty; an empty range is refused.
  const json after = profile->window({.start_us = 5000, .end_us = 6000, .lanes = {}, .width_px = 100});
  EXPECT_EQ(after["event_count"], 0u);
  EXPECT_EQ(status_of([&] { profile->window({.start_us = 10, .end_us = 10, .lanes = {}, .width_px = 100}); }),
            400);
  EXPECT_EQ(status_of([&] { profile->window({.start_us = 0, .end_us = 10, .lanes = {9}, .width_px = 100}); }),
            400);
}

TEST_F(ServerTest, EventDetailsSearchAndKeyAverages) {
  auto profile = ProfileIndex::load(root_ / "good");
  const json found = profile->search("ATEN::M", 10);
  ASSERT_EQ(found["total"], 1u);
  const uint32_t mul = found["matches"][0]["id"];
  const json details = profile->event_details(mul);
  EXPECT_EQ(details["args"]["External id"], 5);
  ASSERT_EQ(details["flows_out"].size(), 1u);
  EXPECT_EQ(details["flows_out"][0]["event"]["name"], "nrta_execute_schedule");
  EXPECT_EQ(profile->search("nc_tiny", 10)["total"], 1000u);
  // Paging: the last page holds what is left, in start order after the first page.
  const json first_page = profile->search("nc_tiny", 10);
  const json last_page = profile->search("nc_tiny", 10, 995);
  EXPECT_EQ(last_page["offset"], 995u);
  ASSERT_EQ(last_page["matches"].size(), 5u);
  EXPECT_GE(last_page["matches"][0]["ts"].get<double>(), first_page["matches"][9]["ts"].get<double>());
  EXPECT_TRUE(profile->search("nc_tiny", 10, 5000)["matches"].empty());
  // Pages of a search whose matches are written out of time order (and with equal starts, which go by
  // id): together, every match once, in start order.
  json shuffled = json::array();
  shuffled.push_back(metadata("thread_name", kHostPid, 7, "name", "host/100/framework/TID:0"));
  for (int i = 0; i < 60; ++i) shuffled.push_back(complete("step", kHostPid, 7, (i * 37) % 50, 0.5));
  write_profile("shuffled", json{{"traceEvents", shuffled}}.dump());
  const auto out_of_order = ProfileIndex::load(root_ / "shuffled");
  std::vector<std::pair<double, uint32_t>> expected;
  for (uint32_t id = 0; id < out_of_order->events().size(); ++id) expected.emplace_back(out_of_order->events()[id].ts_us, id);
  std::sort(expected.begin(), expected.end());
  std::vector<std::pair<double, uint32_t>> paged;
  for (size_t offset = 0; offset < 70; offset += 7) {
    const json page = out_of_order->search("step", 7, offset);
    for (const json& match : page["matches"]) paged.emplace_back(match["ts"], match["id"]);
  }
  EXPECT_EQ(paged, expected);

  const json table = profile->key_averages();
  bool saw_mul = false, saw_step = false;
  for (const json& row : table["rows"]) {
    if (row["name"] == "aten::mul") {
      saw_mul = true;
      EXPECT_DOUBLE_EQ(row["self_cpu_us"].get<double>(), 50);
      EXPECT_DOUBLE_EQ(row["self_device_us"].get<double>(), 15);
    }
    if (row["name"] == "ProfilerStep*") {  // torch merges the steps, and so does the CLI's table
      saw_step = true;
      EXPECT_DOUBLE_EQ(row["self_cpu_us"].get<double>(), 950);
      EXPECT_DOUBLE_EQ(row["device_total_us"].get<double>(), 15);
      EXPECT_DOUBLE_EQ(row["self_device_us"].get<double>(), 0);
    }
  }
  EXPECT_TRUE(saw_mul && saw_step);
  EXPECT_EQ(status_of([&] { profile->event_details(999999); }), 404);
  EXPECT_EQ(status_of([&] { profile->device_execution("not-a-hash", 0, std::nullopt); }), 400);
  EXPECT_EQ(status_of([&] { profile->device_execution("0123456789abcdef", 0, std::nullopt); }), 404);
}

// A key_averages text table as cells. The dashed separator gives each column's width; a cell is padded
// to its width and followed by two spaces, and one wider than its column (torch's "Self NEURON %" in
// 12) pushes the rest of its line right, so a line is read column by column from where the last cell
// ended.
struct TextTable {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> footer;
};

TextTable parse_table(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<size_t> separators;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].empty() && lines[i].find_first_not_of("- ") == std::string::npos) separators.push_back(i);
  }
  EXPECT_EQ(separators.size(), 3u) << text;
  if (separators.size() != 3) return {};
  std::vector<size_t> widths;
  const std::string& dashes = lines[separators[0]];
  for (size_t at = dashes.find('-'); at != std::string::npos; at = dashes.find('-', at)) {
    const size_t end = std::min(dashes.find(' ', at), dashes.size());
    widths.push_back(end - at);
    at = end;
  }
  auto cells = [&](const std::string& line) {
    std::vector<std::string> out;
    size_t at = 0;
    for (const size_t width : widths) {
      size_t end = std::min(line.size(), at + width);
      if (end < line.size() && line[end] != ' ') end = std::min(line.find("  ", end), line.size());
      std::string cell = at < end ? line.substr(at, end - at) : "";
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      out.push_back(cell);
      at = end + 2;
    }
    return out;
  };
  TextTable table{cells(lines[separators[0] + 1]), {}, {}};
  for (size_t i = separators[1] + 1; i < separators[2]; ++i) table.rows.push_back(cells(lines[i]));
  for (size_t i = separators[2] + 1; i < lines.size(); ++i) table.footer.push_back(lines[i]);
  return table;
}

// The operator table the Explorer shows is the live key_averages table, cell for cell, on the
// analysis tests' profiles (the browser test checks the page against `sightline table` on the study's).
TEST_F(ServerTest, KeyAveragesCellsAreTheLiveTablesByteForByte) {
  const auto& generated = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&generated.naive, &generated.fused, &generated.matmul}) {
    const json table = ProfileIndex::load(p->dir)->key_averages();
    const TextTable live = parse_table(p->live_table);
    ASSERT_FALSE(live.rows.empty()) << p->live_table;
    EXPECT_EQ(table["headers"].get<std::vector<std::string>>(), live.headers) << p->dir;
    ASSERT_EQ(table["rows"].size(), live.rows.size()) << p->dir;
    for (size_t r = 0; r < live.rows.size(); ++r) {
      EXPECT_EQ(table["rows"][r]["cells"].get<std::vector<std::string>>(), live.rows[r]) << p->dir << " row " << r;
    }
    EXPECT_EQ(table["footer"].get<std::vector<std::string>>(), live.footer) << p->dir;
  }
}

TEST_F(ServerTest, MalformedProfilesAreRefusedWithAMessage) {
  write_profile("not_json", "{\"traceEvents\": [");
  write_profile("no_events", "{\"other\": 1}");
  write_profile("bad_event", R"({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "name": "x"}]})");
  fs::create_directories(root_ / "bad_manifest");
  std::ofstream(root_ / "bad_manifest" / "manifest.json") << "{\"format_version\": 99}";
  ProfileStore store(root_);
  for (const char* name : {"not_json", "no_events", "bad_event", "bad_manifest"}) {
    try {
      store.open(name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const RequestError& error) {
      EXPECT_EQ(error.status(), 422) << name;
      EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
    }
  }
  const json listing = store.list();
  bool listed_bad_manifest = false;
  for (const json& profile : listing["profiles"]) {
    if (profile["name"] == "bad_manifest") {
      listed_bad_manifest = true;
      EXPECT_FALSE(profile["ok"].get<bool>());
      EXPECT_TRUE(profile.contains("error"));
    }
  }
  EXPECT_TRUE(listed_bad_manifest);
}

TEST_F(ServerTest, DeleteRemovesOnlyProfiles) {
  fs::create_directories(root_ / "plain_directory");
  ProfileStore store(root_);
  store.open("good");
  EXPECT_EQ(status_of([&] { store.remove("plain_directory"); }), 409);
  EXPECT_TRUE(fs::exists(root_ / "plain_directory"));
  store.remove("good");
  EXPECT_FALSE(fs::exists(root_ / "good"));
  EXPECT_EQ(status_of([&] { store.open("good"); }), 404);
}

// Upload staging is the one writer's (formats/output_dir.h): what a killed server left is recovered by
// its rule (the pid in the name is not a live process), an upload still in flight is left alone, and a
// hidden directory that is not a writer's sibling is never touched.
TEST_F(ServerTest, OpeningTheRootRemovesOnlyAbandonedUploadStaging) {
  const fs::path abandoned = root_ / "mine.tmp-2147483647-0";  // no such process
  const fs::path in_flight = root_ / "theirs.tmp-1-0";         // pid 1 is alive
  const fs::path hidden = root_ / ".keep-me";
  for (const fs::path& dir : {abandoned, in_flight, hidden}) {
    fs::create_directories(dir);
    std::ofstream(dir / "trace.json") << "{}";
  }
  ProfileStore store(root_);
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(in_flight / "trace.json"));  // may be another server's upload in progress
  EXPECT_TRUE(fs::exists(hidden / "trace.json"));     // not ours to touch
  EXPECT_TRUE(fs::exists(root_ / "good"));
  ASSERT_EQ(store.list()["profiles"].size(), 1u);     // staging is never listed
  EXPECT_EQ(store.list()["profiles"][0]["name"], "good");
  EXPECT_EQ(status_of([&] { store.open("theirs.tmp-1-0"); }), 400);  // nor served by its name
}

// A stop that comes before the accept loop runs (sightline serve's SIGTERM right after it prints its
// URL) is not lost: serve() returns. Before the fix this hung with httplib's stop() a no-op.
TEST_F(ServerTest, StopBeforeOrRightAfterServeIsNotLost) {
  {
    ExplorerServer server({.profile_root = root_, .static_dir = {}, .host = "127.0.0.1", .port = 0});
    server.bind();
    server.stop();
    server.serve();  // returns at once
  }
  for (int i = 0; i < 20; ++i) {
    ExplorerServer server({.profile_root = root_, .static_dir = {}, .host = "127.0.0.1", .port = 0});
    server.bind();
    std::thread serving([&] { server.serve(); });
    server.stop();  // races the loop's start; must stop it either way
    serving.join();
  }
}

TEST_F(ServerTest, HttpApiAnswersJsonAndRefusesTraversal) {
  ExplorerServer server({.profile_root = root_, .static_dir = {}, .host = "127.0.0.1", .port = 0});
  const int port = server.bind();
  std::thread serving([&] { server.serve(); });
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));

  auto listing = client.Get("/api/profiles");
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->status, 200);
  EXPECT_EQ(json::parse(listing->body)["profiles"][0]["name"], "good");

  auto window = client.Get("/api/profiles/good/events?start=0&end=300&width=150&lanes=2");
  ASSERT_TRUE(window);
  EXPECT_EQ(window->status, 200);
  EXPECT_EQ(json::parse(window->body)["lanes"][0]["lane"], 2);

  for (const char* path : {"/api/profiles/%2e%2e/lanes", "/api/profiles/..%2f..%2fetc/lanes",
                           "/api/profiles/good/events?start=x&end=1", "/api/profiles/good/events/abc"}) {
    auto refused = client.Get(path);
    ASSERT_TRUE(refused) << path;
    EXPECT_GE(refused->status, 400) << path;
    EXPECT_LT(refused->status, 500) << path;
    EXPECT_TRUE(json::parse(refused->body).contains("error")) << path;
  }
  auto missing = client.Get("/api/profiles/missing/lanes");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto unknown = client.Get("/api/nothing");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(json::parse(unknown->body).contains("error"));

  server.stop();
  serving.join();
}

}  // namespace
}  // namespace sightline::server

namespace sightline::server {
namespace {

TEST_F(ServerTest, SummaryOfAProfileWithoutExecutionsHasZerosAndNoPoints) {
  ProfileStore store(root_);
  const json summary = store.summary("good");
  EXPECT_EQ(summary["executions"], 0);
  EXPECT_EQ(summary["total_time_us"], 0.0);
  EXPECT_TRUE(summary["insights"].is_array());
  EXPECT_TRUE(summary["roofline"]["points"].empty());
  EXPECT_GT(summary["roofline"]["ridge_point"].get<double>(), 0);
}

}  // namespace
}  // namespace sightline::server

namespace sightline::server {
namespace {

// An independent reading of trace.json through a whole-document parse: what the streaming index must
// reproduce, event for event (lane, name, category, times, args, ids) and flow for flow.
void expect_index_matches_document(const fs::path& dir) {
  std::ifstream in(dir / "trace.json");
  std::ostringstream text;
  text << in.rdbuf();
  const json document = json::parse(text.str());
  const json& events = document.is_array() ? document : document["traceEvents"];
  std::map<std::pair<int64_t, int64_t>, std::string> lane_names;
  // Times to exact nanoseconds: the file's three decimals, within half a nanosecond through a double
  // at these magnitudes; the index keeps times relative to the earliest event from exact nanoseconds.
  auto ns_of = [](const json& us) { return static_cast<int64_t>(std::llround(us.get<double>() * 1000)); };
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const json& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      lane_names[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}] = e["args"]["name"].get<std::string>();
    }
    if (e.value("ph", "") == "X") origin = std::min(origin, ns_of(e["ts"]));
  }
  using Row = std::tuple<std::string, std::string, std::string, double, double, std::string, int64_t, int64_t>;
  std::vector<Row> expected;
  std::map<std::pair<std::string, uint64_t>, int> flow_ends;
  for (const json& e : events) {
    const std::string phase = e.value("ph", "");
    if (phase == "X") {
      const json args = e.value("args", json::object());
      expected.emplace_back(lane_names.at({e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}), e["name"], e["cat"],
                            static_cast<double>(ns_of(e["ts"]) - origin) / 1000.0,
                            static_cast<double>(ns_of(e["dur"])) / 1000.0, args.dump(),
                            args.value("External id", int64_t{0}), args.value("correlation", int64_t{0}));
    } else if (phase == "s" || phase == "f") {
      flow_ends[{e["cat"].get<std::string>(), e["id"].get<uint64_t>()}] += phase == "s" ? 1 : 2;
    }
  }
  const auto index = ProfileIndex::load(dir);
  // Read on several threads in small runs, the index is the same, id for id.
  const auto parallel = ProfileIndex::load(dir, {.parallel_parse_bytes = 0, .bytes_per_thread = 4096, .threads = 7});
  // And on two threads taking many runs of a few events each, so that run boundaries fall all over it.
  const auto in_runs = ProfileIndex::load(
      dir, {.parallel_parse_bytes = 0, .bytes_per_thread = 256, .threads = 2, .bytes_per_run = 700});
  for (const auto& other : {parallel, in_runs}) {
    ASSERT_EQ(other->events().size(), index->events().size()) << dir;
    for (size_t i = 0; i < index->events().size(); ++i) {
      const TraceEvent& a = index->events()[i];
      const TraceEvent& b = other->events()[i];
      ASSERT_TRUE(a.ts_us == b.ts_us && a.dur_us == b.dur_us && a.name == b.name && a.category == b.category &&
                  a.lane == b.lane && a.depth == b.depth && index->args_json(a) == other->args_json(b) &&
                  a.external_id == b.external_id && a.correlation == b.correlation)
          << dir << " event " << i;
    }
    EXPECT_EQ(other->lanes_json(), index->lanes_json()) << dir;
    ASSERT_EQ(other->flows().size(), index->flows().size()) << dir;
    for (size_t i = 0; i < index->flows().size(); ++i) {
      EXPECT_EQ(other->flows()[i].from, index->flows()[i].from);
      EXPECT_EQ(other->flows()[i].to, index->flows()[i].to);
      EXPECT_EQ(other->flows()[i].category, index->flows()[i].category);
    }
  }
  std::vector<Row> indexed;
  for (const TraceEvent& e : index->events()) {
    indexed.emplace_back(index->lanes()[e.lane].name, index->name_of(e.name), index->name_of(e.category), e.ts_us,
                         e.dur_us, json::parse(index->args_json(e)).dump(), e.external_id, e.correlation);
  }
  std::sort(expected.begin(), expected.end());
  std::sort(indexed.begin(), indexed.end());
  ASSERT_EQ(indexed.size(), expected.size()) << dir;
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(indexed[i], expected[i]) << dir << " event " << i;

  // Every flow whose two ends are present is bound, to slices that contain its ends' times.
  size_t complete = 0;
  for (const auto& [key, ends] : flow_ends) complete += ends == 3;
  EXPECT_EQ(index->flows().size(), complete) << dir;
  EXPECT_GT(complete, 0u) << dir;
  for (const Flow& flow : index->flows()) {
    const TraceEvent& from = index->events()[flow.from];
    const TraceEvent& to = index->events()[flow.to];
    EXPECT_LE(from.ts_us, to.ts_us + 0.001) << dir << " " << flow.category;
    EXPECT_TRUE(flow.category == "fwd" || flow.category == "ac2g") << flow.category;
  }
}

TEST_F(ServerTest, StreamingIndexEqualsADocumentParseOfTheExampleProfiles) {
  const test_profiles::Generated& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused, &g.matmul}) expect_index_matches_document(p->dir);
  expect_index_matches_document(root_ / "good");
}

TEST_F(ServerTest, TracesOfOtherShapesIndexToo) {
  // A bare array of events, pretty-printed, with nested args and fields in another order.
  json events = sample_trace()["traceEvents"];
  events.push_back({{"args", {{"nested", {{"list", {1, 2, {{"deep", "x"}}}}}}, {"External id", 77}}},
                    {"dur", 3},
                    {"ts", 2000},
                    {"tid", 7},
                    {"pid", kHostPid},
                    {"name", "nested_args"},
                    {"cat", "cpu_op"},
                    {"ph", "X"}});
  write_profile("bare_array", events.dump(2));
  expect_index_matches_document(root_ / "bare_array");
  const auto index = ProfileIndex::load(root_ / "bare_array");
  const json found = index->search("nested_args", 1);
  ASSERT_EQ(found["total"], 1u);
  const json details = index->event_details(found["matches"][0]["id"]);
  EXPECT_EQ(details["args"]["nested"]["list"][2]["deep"], "x");
  EXPECT_EQ(details["args"]["External id"], 77);
}

}  // namespace
}  // namespace sightline::server

namespace sightline::server {
namespace {

TEST_F(ServerTest, DamagedTracesAreRefusedWhetherReadInRunsOrWhole) {
  const test_profiles::Generated& g = test_profiles::generate();
  std::ifstream in(fs::path(g.fused.dir) / "trace.json");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string trace = text.str();
  ASSERT_EQ(trace.back() == '\n' ? trace[trace.size() - 2] : trace.back(), '}');
  const IndexOptions in_runs{.parallel_parse_bytes = 0, .bytes_per_thread = 4096, .threads = 5};
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"no_closing_brace", trace.substr(0, trace.rfind('}'))},
      {"truncated_events", trace.substr(0, trace.size() / 2)},
      {"garbage_after", trace + "]"},
      {"broken_event", trace.substr(0, trace.find("\n{", trace.size() / 2) + 1) + "{" +
                           trace.substr(trace.find("\n{", trace.size() / 2) + 1)},
  };
  for (const auto& [name, content] : damaged) {
    write_profile(name, content);
    for (const IndexOptions& options : {IndexOptions{}, in_runs}) {
      try {
        ProfileIndex::load(root_ / name, options);
        ADD_FAILURE() << name << " was accepted (threads " << options.threads << ")";
      } catch (const RequestError& error) {
        EXPECT_EQ(error.status(), 422) << name;
        EXPECT_NE(std::string(error.what()).find("is not valid JSON"), std::string::npos) << error.what();
      }
    }
  }
}

}  // namespace
}  // namespace sightline::server

namespace sightline::server {
namespace {

// One event per line as the exporter writes them, but with other whitespace (CRLF, tabs, spaces around
// the separators), escapes in names and args, and raw args text that must be kept as written.
TEST_F(ServerTest, UnusualWhitespaceAndEscapesIndexTheSameInRunsAndWhole) {
  const json events = sample_trace()["traceEvents"];
  std::string text = "{ \"schemaVersion\" :\t1 ,\r\n  \"traceEvents\"\t:\r\n[\r\n";
  for (size_t i = 0; i < events.size(); ++i) {
    std::string line = events[i].dump();
    if (i % 3 == 0) line = events[i].dump(1, '\t');  // an event spread over several lines
    text += line + (i + 1 < events.size() ? " ,\r\n" : "\r\n");
  }
  text +=
      ",{\"ph\": \"X\", \"cat\": \"cpu_\\u006fp\", \"name\": \"esc\\\"aped\\n\\u00e9\", \"pid\": 100, \"tid\": 7, "
      "\"ts\": 2000.125, \"dur\": 1e1, \"args\" : { \"External id\" : 12 , "
      "\"text\": \"},\\n{\" ,\"deep\":[{},[],null,true,-0.5e-3] }\t}\r\n";
  text += "]\t,\r\n\"traceName\" : \"ws\" }\r\n";
  ASSERT_NO_THROW(json::parse(text));
  write_profile("whitespace", text);
  expect_index_matches_document(root_ / "whitespace");
  // With a UTF-8 byte order mark before it, the same trace reads the same.
  write_profile("byte_order_mark", "\xEF\xBB\xBF" + text);
  const IndexOptions in_runs{.parallel_parse_bytes = 0, .bytes_per_thread = 64, .threads = 2, .bytes_per_run = 500};
  for (const IndexOptions& options : {IndexOptions{}, in_runs}) {
    EXPECT_EQ(ProfileIndex::load(root_ / "byte_order_mark", options)->events().size(),
              ProfileIndex::load(root_ / "whitespace")->events().size());
  }
  const auto index = ProfileIndex::load(root_ / "whitespace");
  const json found = index->search("esc", 5);
  ASSERT_EQ(found["total"], 1u);
  const TraceEvent& event = index->events()[found["matches"][0]["id"].get<uint32_t>()];
  EXPECT_EQ(index->name_of(event.name), "esc\"aped\n\u00e9");
  EXPECT_EQ(index->name_of(event.category), "cpu_op");
  EXPECT_EQ(event.dur_us, 10);
  EXPECT_EQ(event.external_id, 12);
  EXPECT_EQ(index->args_json(event), R"({ "External id" : 12 , "text": "},\n{" ,"deep":[{},[],null,true,-0.5e-3] })");
}

// Damage inside values the index does not use is found too: every value is validated.
TEST_F(ServerTest, InvalidJsonAnywhereIsRefusedWithTheFileNamed) {
  const std::string head = R"({"traceEvents": [)"
                           "\n";
  const std::string good =
      R"({"ph": "X", "cat": "c", "name": "n", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2, "args": {"a": 1}})";
  std::vector<std::string> lines(40, good);
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"bad_literal", R"({"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "other": tru})"},
      {"bad_number", R"({"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "other": [01]})"},
      {"bad_escape", R"({"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"x": "\q"}})"},
      {"missing_comma", R"({"ph": "X", "name": "n" "pid": 1, "tid": 1, "ts": 1, "dur": 2})"},
      {"bad_key", R"({"ph": "X", "name": "n", pid: 1, "tid": 1, "ts": 1, "dur": 2})"},
  };
  const IndexOptions in_runs{.parallel_parse_bytes = 0, .bytes_per_thread = 64, .threads = 3, .bytes_per_run = 300};
  for (const auto& [name, bad] : damaged) {
    std::string text = head;
    for (size_t i = 0; i < lines.size(); ++i) text += (i == 25 ? bad : lines[i]) + ",\n";
    text += good + "\n]}\n";
    write_profile(name, text);
    for (const IndexOptions& options : {IndexOptions{}, in_runs}) {
      try {
        ProfileIndex::load(root_ / name, options);
        ADD_FAILURE() << name << " was accepted (threads " << options.threads << ")";
      } catch (const RequestError& error) {
        EXPECT_EQ(error.status(), 422) << name;
        const std::string message = error.what();
        EXPECT_NE(message.find(name + "/trace.json"), std::string::npos) << message;
        EXPECT_NE(message.find("is not valid JSON"), std::string::npos) << message;
      }
    }
  }
  // Cut off right after an event's args object, and with the events array never closed.
  write_profile("cut_after_args",
                R"({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"a": 1})");
  write_profile("unclosed_array", head + good + ",\n" + good + "\n");
  for (const char* name : {"cut_after_args", "unclosed_array"}) {
    for (const IndexOptions& options : {IndexOptions{}, in_runs}) {
      try {
        ProfileIndex::load(root_ / name, options);
        ADD_FAILURE() << name << " was accepted";
      } catch (const RequestError& error) {
        EXPECT_EQ(error.status(), 422) << name;
        EXPECT_NE(std::string(error.what()).find("is not valid JSON"), std::string::npos) << error.what();
      }
    }
  }
}

}  // namespace
}  // namespace sightline::server
