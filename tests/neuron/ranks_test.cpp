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
#include "collective_util.h"
#include "formats/manifest.h"
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
  EXPECT_THAT([&] { analysis::merge_profiles({dir0, dir0}, (root / "twice").string()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("are both rank 0")));
}
