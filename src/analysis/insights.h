// Ranked findings about a profile, each with its evidence and a suggested fix.
//
//   for (const analysis::Insight& i : analysis::insights(profile))
//     fmt::print("[{}] {}\n  evidence: {}\n  fix: {}\n", i.id, i.title, i.evidence, i.fix);
//
// Rules: idle gaps between executions, many tiny executions, small DMA transfers, engine imbalance,
// low TensorE use in a matmul, HBM traffic far above the minimum. Ranked by the device time each
// finding could save (an estimate, stated in the evidence). Every rule reads the same population as
// the summary metrics: the captured executions (the instruction traces), never trace.json, so an
// insight never counts executions the metrics beside it do not, and needs no trace.json.
#pragma once

#include <string>
#include <vector>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

struct Insight {
  std::string id;        // "idle_gaps", "tiny_executions", "small_dma", "engine_imbalance", ...
  std::string title;
  std::string evidence;  // the numbers that triggered it
  std::string fix;
  double potential_saving_ns = 0;  // the ranking key
};

std::vector<Insight> insights(const ProfileDir& profile);

}  // namespace sightline::analysis
