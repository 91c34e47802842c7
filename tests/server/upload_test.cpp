// The Explorer server's write side and analysis pages, through a real server on a free port: uploads
// of a whole profile directory and of a NEFF + NTFF pair round-trip; oversize, malformed, duplicate
// and path-traversal uploads are refused with a message and leave the store as it was; the summary
// and compare endpoints answer exactly what analysis/ computes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "../analysis/profiles.h"
#include "analysis/compare.h"
#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/roofline.h"
#include "analysis/sqlite.h"
#include "server/http_server.h"
#include "server/profile_store.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The files of a profile directory as a browser's directory upload sends them ("folder/file").
httplib::MultipartFormDataItems directory_parts(const fs::path& dir, const std::string& folder) {
  httplib::MultipartFormDataItems items;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    items.push_back({"file", slurp(entry.path()), folder + "/" + name, "application/octet-stream"});
  }
  return items;
}

fs::path file_with_extension(const fs::path& dir, const std::string& extension) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == extension) return entry.path();
  }
  ADD_FAILURE() << "no " << extension << " file in " << dir;
  return {};
}

// Names in the root, hidden ones included: what a failed upload must not change.
std::set<std::string> root_entries(const fs::path& root) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) names.insert(entry.path().filename().string());
  return names;
}

class UploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("sightline_upload_test_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      serving_.join();
    }
    fs::remove_all(root_);
  }

  httplib::Client& start(uint64_t max_upload_bytes = uint64_t{64} << 20) {
    server_ = std::make_unique<ExplorerServer>(ServerOptions{.profile_root = root_,
                                                             .static_dir = {},
                                                             .host = "127.0.0.1",
                                                             .port = 0,
                                                             .max_upload_bytes = max_upload_bytes,
                                                             .token = "upload-test-token"});
    const int port = server_->bind();
    serving_ = std::thread([this] { server_->serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    client_->set_default_headers({{std::string(kTokenHeader), "upload-test-token"}});  // writes need it
    client_->set_connection_timeout(std::chrono::seconds(5));
    client_->set_read_timeout(std::chrono::seconds(60));
    return *client_;
  }

  static json body_of(const httplib::Result& result) {
    EXPECT_TRUE(result);
    return result ? json::parse(result->body) : json();
  }

  fs::path root_;
  std::unique_ptr<ExplorerServer> server_;
  std::thread serving_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(UploadTest, WholeDirectoryRoundTripsAndItsSummaryIsAnalysis) {
  const test_profiles::Generated& g = test_profiles::generate();
  httplib::Client& client = start();
  const httplib::MultipartFormDataItems parts = directory_parts(g.fused.dir, "fused");
  uint64_t bytes = 0;
  for (const auto& part : parts) bytes += part.content.size();

  auto uploaded = client.Post("/api/profiles?name=mine", parts);
  ASSERT_TRUE(uploaded);
  ASSERT_EQ(uploaded->status, 201) << uploaded->body;
  const json answer = json::parse(uploaded->body);
  EXPECT_EQ(answer["uploaded"], "mine");
  EXPECT_EQ(answer["files"], parts.size());
  EXPECT_EQ(answer["bytes"], bytes);
  for (const auto& part : parts) {
    const std::string name = fs::path(part.filename).filename().string();
    EXPECT_EQ(slurp(root_ / "mine" / name), part.content) << name;
  }

  const json listing = body_of(client.Get("/api/profiles"));
  ASSERT_EQ(listing["profiles"].size(), 1u);
  EXPECT_EQ(listing["profiles"][0]["name"], "mine");
  EXPECT_TRUE(listing["profiles"][0]["ok"].get<bool>());
  auto lanes = client.Get("/api/profiles/mine/lanes");
  ASSERT_TRUE(lanes);
  EXPECT_EQ(lanes->status, 200);

  // The summary is `sightline view --output-format summary-json` plus the roofline of analysis/.
  auto summary_answer = client.Get("/api/profiles/mine/summary");
  ASSERT_TRUE(summary_answer);
  ASSERT_EQ(summary_answer->status, 200) << summary_answer->body;
  json summary = json::parse(summary_answer->body);
  const analysis::ProfileDir profile = analysis::profile_dir_load(g.fused.dir);
  const json roofline = summary["roofline"];
  summary.erase("roofline");
  EXPECT_EQ(summary, json::parse(analysis::report_summary_json(profile)));
  const analysis::Roofline roof = analysis::roofline(profile);
  EXPECT_EQ(roofline["peak_flops_per_s"].get<double>(), roof.peak_flops_per_s);
  EXPECT_EQ(roofline["hbm_bytes_per_s"].get<double>(), roof.hbm_bytes_per_s);
  EXPECT_EQ(roofline["ridge_point"].get<double>(), roof.ridge_point);
  ASSERT_EQ(roofline["points"].size(), roof.executables.size() + roof.ops.size());
  ASSERT_FALSE(roof.ops.empty());
  const json& first_op = roofline["points"][roof.executables.size()];
  EXPECT_EQ(first_op["kind"], "op");
  EXPECT_EQ(first_op["name"], roof.ops.front().name);
  EXPECT_EQ(first_op["intensity"].get<double>(), roof.ops.front().intensity);
  EXPECT_EQ(first_op["achieved_flops_per_s"].get<double>(), roof.ops.front().achieved_flops_per_s);
  EXPECT_EQ(first_op["attainable_flops_per_s"].get<double>(), roof.ops.front().attainable_flops_per_s);
  EXPECT_EQ(first_op["efficiency"].get<double>(), roof.ops.front().efficiency);
  EXPECT_EQ(first_op["bound"], analysis::bound_name(roof.ops.front().bound));
  EXPECT_EQ(first_op["time_us"].get<double>(), roof.ops.front().time_ns / 1000);
  EXPECT_EQ(roofline["points"][0]["kind"], "executable");

  // A second upload under the same name is refused and changes nothing.
  const std::set<std::string> before = root_entries(root_);
  auto again = client.Post("/api/profiles?name=mine", parts);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 409);
  EXPECT_NE(json::parse(again->body)["error"].get<std::string>().find("already exists"), std::string::npos);
  EXPECT_EQ(root_entries(root_), before);

  // Deleting drops the cached summary with the profile.
  auto deleted = client.Delete("/api/profiles/mine");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  auto gone = client.Get("/api/profiles/mine/summary");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
}

TEST_F(UploadTest, ExecutableAndInstructionTracePairBecomesAProfile) {
  const test_profiles::Generated& g = test_profiles::generate();
  httplib::Client& client = start();
  const fs::path ntff = file_with_extension(g.matmul.dir, ".ntff");
  const formats::NtffTrace trace = formats::ntff_load(ntff.string());
  const fs::path neff = fs::path(g.matmul.dir) / formats::ntff_paired_neff_file_name(trace.neff_hash);
  const httplib::MultipartFormDataItems parts = {
      {"file", slurp(neff), neff.filename().string(), "application/octet-stream"},
      {"file", slurp(ntff), ntff.filename().string(), "application/octet-stream"}};
  auto uploaded = client.Post("/api/profiles?name=pair", parts);
  ASSERT_TRUE(uploaded);
  ASSERT_EQ(uploaded->status, 201) << uploaded->body;
  EXPECT_EQ(json::parse(uploaded->body)["files"], 2u);

  // A valid profile directory: manifest, generated trace.json, the two files.
  const analysis::ProfileDir profile = analysis::profile_dir_load((root_ / "pair").string());
  ASSERT_EQ(profile.traced.size(), 1u);
  EXPECT_EQ(profile.manifest.device.name, "trn2");
  EXPECT_EQ(profile.manifest.events.hardware, trace.executions.size());

  // One hardware lane with one nc_exec_running per captured execution, each naming its NEFF.
  const json lanes = body_of(client.Get("/api/profiles/pair/lanes"));
  ASSERT_EQ(lanes["lanes"].size(), 1u);
  EXPECT_NE(lanes["lanes"][0]["name"].get<std::string>().find("neuron_hw/NC:"), std::string::npos);
  EXPECT_EQ(lanes["lanes"][0]["events"], trace.executions.size());
  const json found = body_of(client.Get("/api/profiles/pair/search?q=nc_exec_running"));
  ASSERT_EQ(found["total"], trace.executions.size());
  const int first = found["matches"][0]["id"];
  const json details = body_of(client.Get(fmt::format("/api/profiles/pair/events/{}", first)));
  EXPECT_EQ(details["args"]["neff"], neff.filename().string());

  // The device view opens on it, and the summary is analysis' own.
  const json device = body_of(client.Get(fmt::format("/api/profiles/pair/device?neff={:016x}&core={}&seq={}",
                                                     trace.neff_hash, trace.core, trace.executions.front().seq)));
  EXPECT_EQ(device["sequence"], trace.executions.front().seq);
  EXPECT_FALSE(device["rows"].empty());
  json summary = body_of(client.Get("/api/profiles/pair/summary"));
  summary.erase("roofline");
  EXPECT_EQ(summary, json::parse(analysis::report_summary_json(profile)));

  // A NEFF with some other executable's trace is refused.
  const fs::path other_neff = file_with_extension(g.fused.dir, ".neff");
  auto mismatched = client.Post("/api/profiles?name=mismatch",
                                httplib::MultipartFormDataItems{
                                    {"file", slurp(other_neff), other_neff.filename().string(), ""},
                                    {"file", slurp(ntff), ntff.filename().string(), ""}});
  ASSERT_TRUE(mismatched);
  EXPECT_EQ(mismatched->status, 400);
  EXPECT_NE(mismatched->body.find("is not the instruction trace of"), std::string::npos) << mismatched->body;
}

TEST_F(UploadTest, RefusalsSayWhyAndLeaveTheStoreUnchanged) {
  const test_profiles::Generated& g = test_profiles::generate();
  httplib::Client& client = start(uint64_t{16} << 10);  // 16 KiB: the fused profile is larger
  fs::copy(g.naive.dir, root_ / "kept", fs::copy_options::recursive);
  const std::set<std::string> before = root_entries(root_);
  auto expect_refused = [&](const httplib::Result& result, int status, const std::string& words) {
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, status) << result->body;
    const json body = json::parse(result->body);
    ASSERT_TRUE(body.contains("error")) << result->body;
    EXPECT_NE(body["error"].get<std::string>().find(words), std::string::npos) << body["error"];
    EXPECT_EQ(root_entries(root_), before);
  };

  expect_refused(client.Post("/api/profiles?name=big", directory_parts(g.fused.dir, "fused")), 413,
                 "--max-upload-mb");

  const httplib::MultipartFormDataItems manifest_only = {
      {"file", slurp(fs::path(g.fused.dir) / "manifest.json"), "manifest.json", ""}};
  expect_refused(client.Post("/api/profiles?name=x", manifest_only), 400, "no trace.json");
  for (const char* name : {"../trace.json", "a/../../trace.json", ".hidden", "run.sh", "x/neff_zz.neff"}) {
    const httplib::MultipartFormDataItems parts = {{"file", "{}", name, ""}};
    expect_refused(client.Post("/api/profiles?name=x", parts), 400, "uploaded file");
  }
  for (const char* name : {"..", ".hidden", "a%2Fb", "a%2F..%2F..%2Fetc", "x.tmp-1-2"}) {
    expect_refused(client.Post(fmt::format("/api/profiles?name={}", name), manifest_only), 400, "not a profile name");
  }
  expect_refused(client.Post("/api/profiles", manifest_only), 400, "'name'");
  expect_refused(client.Post("/api/profiles?name=kept", manifest_only), 409, "already exists");
}

TEST_F(UploadTest, MalformedFilesAreNamedAndNothingIsStored) {
  const test_profiles::Generated& g = test_profiles::generate();
  httplib::Client& client = start();
  fs::copy(g.naive.dir, root_ / "kept", fs::copy_options::recursive);
  const std::set<std::string> before = root_entries(root_);
  const std::string kept_manifest = slurp(root_ / "kept" / "manifest.json");

  struct Case {
    std::string what, file_extension, expected;
    std::function<void(std::string&)> damage;
  };
  const std::vector<Case> cases = {
      {"truncated NTFF", ".ntff", ".ntff", [](std::string& s) { s.resize(100); }},
      {"corrupt NEFF", ".neff", ".neff", [](std::string& s) { s[40] = static_cast<char>(s[40] ^ 0x7f); }},
      {"bad trace JSON", ".json", "trace.json", [](std::string& s) { s = "{\"traceEvents\": [ {\"ph\": "; }},
  };
  for (const Case& c : cases) {
    httplib::MultipartFormDataItems parts = directory_parts(g.fused.dir, "fused");
    bool damaged = false;
    for (auto& part : parts) {
      const bool target = c.file_extension == ".json" ? part.filename == "fused/trace.json"
                                                      : fs::path(part.filename).extension() == c.file_extension;
      if (target && !damaged) {
        c.damage(part.content);
        damaged = true;
      }
    }
    ASSERT_TRUE(damaged) << c.what;
    auto refused = client.Post("/api/profiles?name=broken", parts);
    ASSERT_TRUE(refused) << c.what;
    EXPECT_EQ(refused->status, 400) << c.what << ": " << refused->body;
    const std::string message = json::parse(refused->body)["error"];
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << ": " << message;
    EXPECT_EQ(message.find(root_.string()), std::string::npos) << "server paths leak: " << message;
    EXPECT_EQ(root_entries(root_), before) << c.what;
  }
  EXPECT_EQ(slurp(root_ / "kept" / "manifest.json"), kept_manifest);
  EXPECT_EQ(body_of(client.Get("/api/profiles"))["profiles"].size(), 1u);
}

// The server streams an upload into staging as it arrives (issue 21: a body was held whole, and
// validation held it again): bytes go to disk per chunk, refusals come at the part that causes them,
// and an upload that is never finished leaves nothing.
TEST_F(UploadTest, StagingReceivesFilesAsTheyArriveAndVanishesUnlessFinished) {
  const test_profiles::Generated& g = test_profiles::generate();
  ProfileStore store(root_);
  {
    std::unique_ptr<UploadStaging> staging = store.begin_upload("streamed");
    staging->begin_file("run/trace.json");
    staging->append("{\"traceEvents\"");
    staging->append(": []}");
    EXPECT_EQ(staging->bytes(), 19u);
    std::set<std::string> entries = root_entries(root_);
    ASSERT_EQ(entries.size(), 1u);
    const fs::path staged = root_ / *entries.begin();
    // The one writer's staging sibling, which listings skip.
    EXPECT_TRUE(entries.begin()->starts_with("streamed.tmp-")) << *entries.begin();
    EXPECT_TRUE(formats::output_dir_is_sibling_name(*entries.begin()));
    EXPECT_TRUE(store.list()["profiles"].empty());
    EXPECT_EQ(slurp(staged / "trace.json"), "{\"traceEvents\": []}");
    EXPECT_THROW(staging->begin_file("other/trace.json"), RequestError);  // twice
    EXPECT_THROW(staging->begin_file("run/../x"), RequestError);
    EXPECT_THROW(staging->begin_file("notes.txt"), RequestError);
  }
  EXPECT_TRUE(root_entries(root_).empty());  // abandoned: removed

  std::unique_ptr<UploadStaging> staging = store.begin_upload("streamed");
  for (const auto& entry : fs::directory_iterator(g.fused.dir)) {
    staging->begin_file("fused/" + entry.path().filename().string());
    const std::string content = slurp(entry.path());
    for (size_t at = 0; at < content.size(); at += 4096) staging->append(std::string_view(content).substr(at, 4096));
  }
  const json stored = store.finish_upload(std::move(staging));
  EXPECT_EQ(stored["uploaded"], "streamed");
  EXPECT_EQ(root_entries(root_), std::set<std::string>{"streamed"});
  EXPECT_NO_THROW(analysis::profile_dir_load((root_ / "streamed").string()));
  try {
    store.begin_upload("streamed");
    ADD_FAILURE() << "a taken name was accepted";
  } catch (const RequestError& error) {
    EXPECT_EQ(error.status(), 409);
  }
}

TEST_F(UploadTest, CompareIsAnalysisCompareWithNamesAndTotals) {
  const test_profiles::Generated& g = test_profiles::generate();
  fs::copy(g.naive.dir, root_ / "naive", fs::copy_options::recursive);
  fs::copy(g.fused.dir, root_ / "fused", fs::copy_options::recursive);
  httplib::Client& client = start();
  auto answer = client.Get("/api/compare?a=naive&b=fused");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  json diff = json::parse(answer->body);
  const analysis::Comparison expected =
      analysis::compare(analysis::profile_dir_load(g.naive.dir), analysis::profile_dir_load(g.fused.dir));
  EXPECT_EQ(diff["a"], "naive");
  EXPECT_EQ(diff["b"], "fused");
  EXPECT_EQ(diff["total_a_us"].get<double>(), expected.total_a_ns / 1000);
  EXPECT_EQ(diff["total_b_us"].get<double>(), expected.total_b_ns / 1000);
  json reference = json::parse(analysis::compare_json(expected));
  EXPECT_EQ(diff["ranked"], reference["ranked"]);
  EXPECT_EQ(diff["total_time_a_ns"], reference["total_time_a_ns"]);
  ASSERT_FALSE(diff["ranked"].empty());
  EXPECT_EQ(diff["ranked"][0]["status"], "removed");

  for (const char* query : {"/api/compare?a=naive", "/api/compare?a=naive&b=missing", "/api/compare?a=..&b=fused"}) {
    auto refused = client.Get(query);
    ASSERT_TRUE(refused) << query;
    EXPECT_GE(refused->status, 400) << query;
    EXPECT_LT(refused->status, 500) << query;
  }
}

// The query endpoint answers what `sightline query` answers, on the same database, and refuses what an
// HTTP caller must not do.
TEST_F(UploadTest, QueryAnswersTheCliSqlOnTheProfilesDatabase) {
  const test_profiles::Generated& g = test_profiles::generate();
  fs::copy(g.naive.dir, root_ / "naive", fs::copy_options::recursive);
  httplib::Client& client = start();
  const std::string sql = "select name, count(*) as calls, sum(self_device_ns) as device from ops "
                          "where kind = 'cpu_op' group by name order by name";
  auto answer = client.Get("/api/profiles/naive/query?sql=" + httplib::detail::encode_query_param(sql));
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const json rows = json::parse(answer->body);
  const json expected = json::parse(analysis::query_json(
      analysis::sqlite_query(analysis::sqlite_cached((root_ / "naive").string()), sql)));
  EXPECT_EQ(rows, expected);
  EXPECT_EQ(rows["columns"], json::array({"name", "calls", "device"}));
  bool saw_mul = false;
  for (const json& row : rows["rows"]) saw_mul = saw_mul || (row[0] == "aten::mul" && row[1] == 3);
  EXPECT_TRUE(saw_mul) << rows.dump();

  auto refused = [&](const std::string& query_sql, int status, const std::string& says) {
    auto result = client.Get("/api/profiles/naive/query?sql=" + httplib::detail::encode_query_param(query_sql));
    ASSERT_TRUE(result) << query_sql;
    EXPECT_EQ(result->status, status) << query_sql << ": " << result->body;
    EXPECT_NE(result->body.find(says), std::string::npos) << result->body;
    EXPECT_EQ(result->body.find(root_.string()), std::string::npos) << "the answer names a server path";
  };
  refused("select * from no_such_table", 400, "no_such_table");
  refused("attach database '" + (root_ / "naive" / "profile.sqlite").string() + "' as other", 400, "not authorized");
  refused("insert into ops (name) values ('x')", 400, "readonly");
  refused("with recursive n(i) as (select 1 union all select i + 1 from n where i < 200000) select i from n", 400,
          "LIMIT");
  refused("", 400, "sql");
  // A query that runs too long is stopped (the server allows kMaxQuerySeconds; here a fifth of a second).
  try {
    (void)analysis::sqlite_query(analysis::sqlite_cached((root_ / "naive").string()),
                                 "with recursive n(i) as (select 1 union all select i + 1 from n) select count(*) from n",
                                 {.max_seconds = 0.2});
    ADD_FAILURE() << "an endless query returned";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("ran longer than 0.2 s"), std::string::npos) << error.what();
  }
  auto missing = client.Get("/api/profiles/absent/query?sql=select%201");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

}  // namespace
}  // namespace sightline::server
