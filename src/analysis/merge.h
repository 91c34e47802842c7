// sightline merge: one profile from the profiles of several ranks (one process each, as torchrun runs
// them), their clocks aligned, every rank's lanes on one timeline (docs/analysis.md).
//
//   MergeResult m = merge_profiles({"rank0/eager", "rank1/eager"}, "merged");
//   fmt::print("{}", merge_report_text(m));   // offsets, then the per-rank and cross-rank collective table
//
// Ranks come from each manifest's `distributed` object (trace.json's distributedInfo otherwise; the
// argument order last). Clocks: each rank's times are moved onto rank 0's base, then shifted so that the
// end of the first collective every rank ran coincides (a collective ends on all its ranks together);
// without a common collective, so that the first ProfilerStep starts together. Lanes keep their names
// under a "rank<r>/" instance prefix, pids move to r x kMergedRankPidStride + pid, and flow and
// correlation ids are made distinct per rank. The merged directory holds trace.json, a manifest and every
// rank's NEFF and NTFF files under rank<r>/ (listed with their rank; their times stay on the rank's own
// clock), so its summary is every rank's and has a row per rank (report.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/collectives.h"

namespace sightline::analysis {

inline constexpr int64_t kMergedRankPidStride = 10'000'000'000;

struct MergedRank {
  int rank = 0;
  std::string dir;
  double shift_us = 0;     // added to every timestamp of the rank (after moving it onto rank 0's base)
  std::string aligned_on;  // "collective 3", "ProfilerStep#3", or "trace start"
};

struct MergeResult {
  std::string dir;
  int world_size = 0;
  std::vector<MergedRank> ranks;  // by rank
  CollectiveSummary collectives;
};

// Throws sightline::Error for fewer than two directories, an unreadable profile, two profiles of one
// rank, or an output directory that holds something other than a profile.
MergeResult merge_profiles(const std::vector<std::string>& dirs, const std::string& out_dir);
std::string merge_report_text(const MergeResult& m);

}  // namespace sightline::analysis
