// The roofline (the roofline model: Williams, Waterman, Patterson, "Roofline", CACM 2009) of a profile: one point per executable and one per source op,
// at the HBM level, against the TensorE compute roof and the HBM bandwidth slope.
//
//   analysis::Roofline roof = analysis::roofline(profile_dir_load("profiles/fused"));
//   for (const analysis::RooflinePoint& p : roof.ops)
//     fmt::print("{}: {} ({:.0f}% of attainable)\n", p.name, bound_name(p.bound), 100 * p.efficiency);
//   analysis::roofline_svg_save(roof, "roofline.svg");
//
// Per point: intensity = FLOPs / HBM byte; achieved = FLOPs / time; attainable = min(peak, intensity x
// bandwidth); efficiency = achieved / attainable; bound by memory when intensity < ridge point.
// FLOPs are model FLOPs (summary.h). An op's time is the union of its instructions' intervals (every
// engine) in each execution, so ops that overlap inside a fused executable both count the overlap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/profile_dir.h"
#include "analysis/summary.h"

namespace sightline::analysis {

struct RooflinePoint {
  std::string name;
  uint64_t executions = 0;
  double flops = 0;
  uint64_t hbm_bytes = 0;
  double time_ns = 0;
  double intensity = 0;          // FLOP per HBM byte
  double achieved_flops_per_s = 0;
  double attainable_flops_per_s = 0;
  double efficiency = 0;
  Bound bound = Bound::memory;
};

struct Roofline {
  std::string device;  // spec name, "trn2"
  double peak_flops_per_s = 0;
  double hbm_bytes_per_s = 0;
  double ridge_point = 0;
  std::vector<RooflinePoint> executables;  // by time, largest first
  std::vector<RooflinePoint> ops;          // by time, largest first
};

Roofline roofline(const ProfileDir& profile);

// Fills intensity, achieved, attainable, efficiency and bound from flops, bytes and time.
void roofline_place(RooflinePoint& point, double peak_flops_per_s, double hbm_bytes_per_s);

// The chart: log-log axes with decade ticks and labels, the compute roof and the bandwidth slope, the
// ridge point, one circle per op (area by time) and a legend.
std::string roofline_svg(const Roofline& roof);
// Writes roofline_svg to `path`; throws sightline::Error when it cannot.
void roofline_svg_save(const Roofline& roof, const std::string& path);

}  // namespace sightline::analysis
