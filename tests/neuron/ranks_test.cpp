// The collective summary of a profile and `sightline merge` of two ranks' profiles
// (analysis/collectives.h, analysis/merge.h).
#include <filesystem>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "analysis/collectives.h"
#include "analysis/insights.h"
#include "analysis/merge.h"
#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/summary.h"
#include "collective_util.h"
#include "formats/manifest.h"
#include "server/profile_index.h"
#include "server/profile_store.h"
#include "sightline/parallel.h"
#include "study_util.h"

using namespace sightline;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(Ranks, SummaryStragglersAndMerge) {
  const fs::path root = test::fresh_dir("collectives", "merge");
  Generator gen(9);
  const Tensor x = randn({128, 128}, {}, &gen), w = randn({128, 128}, {}, &gen) * 0.1;
  const std::vector<Device> tp = parallel::devices(2);
  const std::vector<Tensor> xs = parallel::replicate(x, tp), ws = parallel::shard(w, 1, tp);
  // Core 1 does more work before each collective: core 0 waits for it.
  auto step = [&](int extra) {
    std::vector<Tensor> part = {xs[0].slice(1, 0, 64).contiguous(), xs[1].slice(1, 64, 128).contiguous()};
    for (int i = 0; i < extra; ++i) part[1] = part[1] * 1.0;
    parallel::row_parallel_linear(part, ws);
  };
  const std::string dir0 = test::profile_steps(root / "rank0", 0, 2, [&] { step(3); });
  const std::string dir1 = test::profile_steps(root / "rank1", 1, 2, [&] { step(6); });
  const formats::Manifest m = formats::manifest_load(dir0);
  ASSERT_TRUE(m.distributed.has_value());
  // One process: core 0 waits for core 1 at the barrier, and the summary and the insight say so.
  const analysis::CollectiveSummary s = analysis::collective_summary({{0, dir0 + "/trace.json"}}, m.distributed->link_bytes_per_ns);
  EXPECT_EQ(s.collectives, 1);
  ASSERT_EQ(s.lanes.size(), 2u);
  EXPECT_GT(s.lanes[0].wait_ns, 0);
  EXPECT_EQ(s.lanes[1].wait_ns, 0);
  EXPECT_EQ(s.lanes[1].last_arrivals, 1);
  EXPECT_GT(s.bus_bytes_per_ns, 0);
  EXPECT_LE(s.bus_bytes_per_ns, s.link_bytes_per_ns);
  EXPECT_THAT(analysis::collective_summary_text(s), HasSubstr("straggler: rank 0 core 1"));
  const analysis::ProfileDir rank0 = analysis::profile_dir_load(dir0);
  bool insight = false;
  for (const analysis::Insight& i : analysis::insights(rank0)) insight = insight || i.id == "collective_wait";
  EXPECT_TRUE(insight);
  // The Explorer's summary (sightline serve) says the same: its collective table and the insight.
  const fs::path served0 = fs::path(dir0).lexically_normal();
  server::ProfileStore store0(served0.parent_path());
  const nlohmann::json summary0 = store0.summary(served0.filename().string());
  ASSERT_TRUE(summary0.contains("collectives"));
  EXPECT_EQ(summary0["collectives"]["collectives"], s.collectives);
  EXPECT_EQ(summary0["collectives"]["lanes"].size(), s.lanes.size());
  EXPECT_DOUBLE_EQ(summary0["collectives"]["wait_us"].get<double>(), s.wait_ns / 1000);
  EXPECT_EQ(summary0["collectives"]["lanes"][1]["last_arrivals"], 1);
  bool served_insight = false;
  for (const auto& i : summary0["insights"]) served_insight = served_insight || i["id"] == "collective_wait";
  EXPECT_TRUE(served_insight);

  // Two ranks merged: every rank's lanes, collectives ending together.
  const analysis::MergeResult merged = analysis::merge_profiles({dir1, dir0}, (root / "merged").string());
  ASSERT_EQ(merged.ranks.size(), 2u);
  EXPECT_EQ(merged.ranks[0].rank, 0);
  EXPECT_EQ(merged.ranks[1].aligned_on, merged.ranks[0].aligned_on);
  EXPECT_THAT(merged.ranks[1].aligned_on, HasSubstr("collective"));
  EXPECT_EQ(merged.collectives.lanes.size(), 4u);
  const nlohmann::json out = test::read_json(root / "merged" / "trace.json");
  EXPECT_EQ(out["distributedInfo"]["world_size"], 2);
  std::map<int64_t, double> end_by_rank;
  bool rank1_lane = false;
  for (const auto& e : out["traceEvents"]) {
    if (e.value("name", "") == "thread_name") rank1_lane = rank1_lane || e["args"]["name"].get<std::string>().starts_with("rank1/");
    if (e.value("name", "") == "cc_running") {
      end_by_rank[e["pid"].get<int64_t>() / analysis::kMergedRankPidStride] = e["ts"].get<double>() + e["dur"].get<double>();
    }
  }
  EXPECT_TRUE(rank1_lane);
  ASSERT_EQ(end_by_rank.size(), 2u);
  EXPECT_NEAR(end_by_rank[0], end_by_rank[1], 1e-3);
  // The merged directory is a profile the readers (and the Explorer's) accept.
  const analysis::ProfileDir profile = analysis::profile_dir_load((root / "merged").string());
  EXPECT_TRUE(profile.trace.has_value());
  server::ProfileStore store(root);
  const nlohmann::json summary = store.summary("merged");
  ASSERT_TRUE(summary.contains("collectives"));
  EXPECT_EQ(summary["collectives"]["world_size"], 2);
  EXPECT_EQ(summary["collectives"]["lanes"].size(), merged.collectives.lanes.size());
  EXPECT_THAT(analysis::merge_report_text(merged), HasSubstr("rank 1:"));

  // A merged profile is a full profile: every rank's executables and instruction traces under rank<r>/, so
  // its summary is the sum of the ranks' summaries and its per-rank rows are each rank's own summary.
  ASSERT_EQ(profile.manifest.distributed->ranks.size(), 2u);
  EXPECT_EQ(profile.manifest.distributed->ranks[1].folder, "rank1");
  EXPECT_EQ(profile.ranks(), (std::vector<int>{0, 1}));
  const analysis::ProfileDir rank1 = analysis::profile_dir_load(dir1);
  EXPECT_EQ(profile.traced.size(), rank0.traced.size() + rank1.traced.size());
  const analysis::Summary total = analysis::summarize_profile(profile);
  const analysis::Summary s0 = analysis::summarize_profile(rank0), s1 = analysis::summarize_profile(rank1);
  EXPECT_GT(s0.executions, 0u);
  EXPECT_EQ(total.executions, s0.executions + s1.executions);
  EXPECT_EQ(total.hbm_read_bytes, s0.hbm_read_bytes + s1.hbm_read_bytes);
  EXPECT_EQ(total.hbm_write_bytes, s0.hbm_write_bytes + s1.hbm_write_bytes);
  EXPECT_EQ(total.dma_transfer_count, s0.dma_transfer_count + s1.dma_transfer_count);
  EXPECT_EQ(total.matmul_count, s0.matmul_count + s1.matmul_count);
  for (int e = 0; e < device::kEngineCount; ++e) {
    EXPECT_EQ(total.engines[e].instruction_count, s0.engines[e].instruction_count + s1.engines[e].instruction_count);
  }
  const analysis::RankSummaries per_rank = analysis::summarize_ranks(profile);
  ASSERT_EQ(per_rank.ranks.size(), 2u);
  EXPECT_EQ(per_rank.ranks[0].summary.total_time_ns, s0.total_time_ns);
  EXPECT_EQ(per_rank.ranks[1].summary.total_time_ns, s1.total_time_ns);
  // Rank 1 does more work before each collective: it is the straggler, by its extra device time.
  ASSERT_GT(s1.total_time_ns, s0.total_time_ns);
  EXPECT_EQ(per_rank.straggler, 1);
  EXPECT_EQ(per_rank.fastest, 0);
  EXPECT_EQ(per_rank.straggler_excess_ns, s1.total_time_ns - s0.total_time_ns);
  // `sightline view`'s JSON (and so the Explorer's summary): each rank's row is its own profile's summary.
  const nlohmann::json merged_json = nlohmann::json::parse(analysis::report_summary_json(profile));
  ASSERT_EQ(merged_json["ranks"].size(), 2u);
  for (const auto& [r, dir] : {std::pair{0, dir0}, std::pair{1, dir1}}) {
    nlohmann::json own = nlohmann::json::parse(analysis::report_summary_json(analysis::profile_dir_load(dir)));
    own.erase("insights");
    nlohmann::json row = merged_json["ranks"][static_cast<size_t>(r)];
    EXPECT_EQ(row["rank"], r);
    row.erase("rank");
    EXPECT_EQ(row, own) << "rank " << r;
  }
  EXPECT_EQ(merged_json["straggler"]["rank"], 1);
  EXPECT_EQ(merged_json["executions"], s0.executions + s1.executions);
  EXPECT_THAT(analysis::report_summary_text(profile), HasSubstr("straggler: rank 1 with"));
  EXPECT_EQ(store.summary("merged")["ranks"], merged_json["ranks"]);
  // Merging again into the same directory replaces the rank folders (nothing is kept aside).
  (void)analysis::merge_profiles({dir0, dir1}, (root / "merged").string());
  for (const auto& entry : fs::directory_iterator(root)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr("kept"))) << entry.path();
  }
  EXPECT_THAT([&] { analysis::merge_profiles({dir0, dir0}, (root / "twice").string()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("are both rank 0")));
}

// The dependency chain of a collective, as trace.json's flows give it: the c10d:: op -> nrta_cc_schedule on
// each core's runtime lane ("fwd") -> cc_running on that core's collective lane ("ac2g"), bound to their
// events as a reader binds flows (the enclosing event of the same pid/tid at the flow's timestamp), and
// the server's event details follow the same edges from either end.
TEST(Ranks, ACollectiveHasItsChain) {
  const fs::path root = test::fresh_dir("collectives", "chain");
  Generator gen(3);
  const Tensor x = randn({64, 64}, {}, &gen), w = randn({64, 64}, {}, &gen);
  const std::vector<Device> tp = parallel::devices(2);
  const std::vector<Tensor> xs = parallel::replicate(x, tp), ws = parallel::shard(w, 1, tp);
  const std::string dir = test::profile_steps(root / "chain", 0, 1, [&] {
    std::vector<Tensor> part = {xs[0].slice(1, 0, 32).contiguous(), xs[1].slice(1, 32, 64).contiguous()};
    parallel::row_parallel_linear(part, ws);
  });
  const nlohmann::json trace = test::read_json(fs::path(dir) / "trace.json");
  struct Lane {
    std::vector<const nlohmann::json*> events;
  };
  std::map<std::pair<int64_t, int64_t>, Lane> lanes;
  std::map<std::pair<std::string, uint64_t>, std::vector<const nlohmann::json*>> flow_starts, flow_ends;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "X") lanes[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}].events.push_back(&e);
    if (ph == "s") flow_starts[{e["cat"], e["id"].get<uint64_t>()}].push_back(&e);
    if (ph == "f") flow_ends[{e["cat"], e["id"].get<uint64_t>()}].push_back(&e);
  }
  // The innermost event of the flow point's lane that encloses its timestamp.
  auto bind = [&](const nlohmann::json& point) -> const nlohmann::json* {
    const nlohmann::json* best = nullptr;
    for (const nlohmann::json* e : lanes[{point["pid"].get<int64_t>(), point["tid"].get<int64_t>()}].events) {
      const double ts = (*e)["ts"].get<double>(), end = ts + (*e)["dur"].get<double>();
      const double at = point["ts"].get<double>();
      if (ts <= at && at <= end && (!best || (*best)["dur"].get<double>() > (*e)["dur"].get<double>())) best = e;
    }
    return best;
  };
  // from -> to names of every bound flow of a category
  auto edges = [&](const std::string& cat) {
    std::vector<std::pair<const nlohmann::json*, const nlohmann::json*>> out;
    for (const auto& [key, starts] : flow_starts) {
      if (key.first != cat || !flow_ends.contains(key)) continue;
      out.emplace_back(bind(*starts.front()), bind(*flow_ends[key].front()));
    }
    return out;
  };
  std::vector<const nlohmann::json*> schedules, runs;
  for (const auto& [from, to] : edges("fwd")) {
    ASSERT_TRUE(from && to);
    if ((*to)["name"] == "nrta_cc_schedule") {
      EXPECT_THAT((*from)["name"].get<std::string>(), ::testing::StartsWith("c10d::"));
      schedules.push_back(to);
    }
  }
  for (const auto& [from, to] : edges("ac2g")) {
    ASSERT_TRUE(from && to);
    if ((*to)["name"] == "cc_running") {
      EXPECT_EQ((*from)["name"], "nrta_cc_schedule");
      EXPECT_EQ((*from)["args"]["neuron core"], (*to)["args"]["neuron core"]);
      EXPECT_EQ((*from)["args"]["collective id"], (*to)["args"]["collective id"]);
      runs.push_back(to);
    }
  }
  // One collective over two cores: two schedules (one per core), each launching its core's cc_running.
  EXPECT_EQ(schedules.size(), 2u);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE((*runs[0])["args"]["neuron core"], (*runs[1])["args"]["neuron core"]);

  // The Explorer's chain reads the server's details: the same edges, from the cc_running and from the op.
  const fs::path served = fs::path(dir).lexically_normal();
  server::ProfileStore store(served.parent_path());
  const std::string name = served.filename().string();
  const std::shared_ptr<const server::ProfileIndex> index = store.open(name);
  const nlohmann::json found = index->search("cc_running", 10);
  ASSERT_GE(found["matches"].size(), 2u);
  const nlohmann::json run = index->event_details(found["matches"][0]["id"].get<uint32_t>());
  ASSERT_EQ(run["flows_in"].size(), 1u);
  EXPECT_EQ(run["flows_in"][0]["category"], "ac2g");
  EXPECT_EQ(run["flows_in"][0]["event"]["name"], "nrta_cc_schedule");
  const nlohmann::json schedule = index->event_details(run["flows_in"][0]["event"]["id"].get<uint32_t>());
  ASSERT_EQ(schedule["flows_in"].size(), 1u);
  EXPECT_EQ(schedule["flows_in"][0]["category"], "fwd");
  EXPECT_THAT(schedule["flows_in"][0]["event"]["name"].get<std::string>(), ::testing::StartsWith("c10d::"));
  const nlohmann::json op = index->event_details(schedule["flows_in"][0]["event"]["id"].get<uint32_t>());
  int scheduled = 0;
  for (const auto& f : op["flows_out"]) scheduled += f["event"]["name"] == "nrta_cc_schedule";
  EXPECT_EQ(scheduled, 2);
}
