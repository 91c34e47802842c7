// Compare two profiles: per-executable, per-op (key_averages) and per-engine deltas, ranked.
//
//   auto diff = analysis::compare(profile_dir_load("profiles/naive"), profile_dir_load("profiles/fused"));
//   fmt::print("{}", analysis::compare_text(diff));
//
// Ranking: executables that ran only in A (removed) come first, then those only in B (added), then
// every other row by the size of its device-time change; ties keep A's order.
#pragma once

#include <string>
#include <vector>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

enum class DeltaStatus { removed, added, changed };
std::string_view delta_status_name(DeltaStatus status);

struct Delta {
  std::string kind;  // "executable", "op", "engine"
  std::string name;
  DeltaStatus status = DeltaStatus::changed;
  double time_a_ns = 0, time_b_ns = 0;  // device time: execution time, self device time, active time
  int64_t count_a = 0, count_b = 0;     // executions, calls, instructions

  double delta_ns() const { return time_b_ns - time_a_ns; }
};

struct Comparison {
  std::string a, b;  // profile paths
  double total_a_ns = 0, total_b_ns = 0;
  std::vector<Delta> ranked;
};

Comparison compare(const ProfileDir& a, const ProfileDir& b);
std::string compare_text(const Comparison& comparison);
std::string compare_json(const Comparison& comparison);

}  // namespace sightline::analysis
