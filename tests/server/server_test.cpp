// The Explorer server: profile names cannot leave the root, windowed queries send only what is visible
// and merge sub-pixel events with counts, flows bind to their slices, and broken profiles are refused
// with a 4xx JSON error instead of a crash.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "device/spec.h"
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
              json args = json::object()) {
  return {{"ph", "X"},  {"cat", "cpu_op"}, {"name", name}, {"pid", pid},
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
  events.push_back(
      complete("nrta_execute_schedule", kRuntimePid, 0, 20, 10, {{"External id", 5}, {"correlation", 9}}));
  events.push_back(
      complete("nc_exec_running", kHardwarePid, 0, 40, 15,
               {{"External id", 5}, {"correlation", 9}, {"neff", "neff_0123456789abcdef.neff"}}));
  for (int i = 0; i < 1000; ++i) events.push_back(complete("nc_tiny", kHardwarePid, 0, 100 + 0.2 * i, 0.1));
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

  const json table = profile->key_averages();
  bool saw_mul = false, saw_step = false;
  for (const json& row : table["rows"]) {
    if (row["name"] == "aten::mul") {
      saw_mul = true;
      EXPECT_DOUBLE_EQ(row["self_cpu_us"].get<double>(), 50);
      EXPECT_DOUBLE_EQ(row["self_device_us"].get<double>(), 15);
    }
    if (row["name"] == "ProfilerStep#1") {
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
