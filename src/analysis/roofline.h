// The roofline (the roofline model: Williams, Waterman, Patterson, "Roofline", CACM 2009) of a profile: one point per executable and one per source op,
// at the HBM level, against one compute roof per engine and operand width (Tensor 16-bit and fp32,
// Vector, Scalar, GpSimd, each 32-bit and 16-bit: Spec's peak rates) and the HBM bandwidth slope. The
// engines run in parallel, so a point's compute ceiling is its FLOPs over the time of the engine that
// needs longest for its share: f32 Vector and Scalar work is measured against what those engines can
// reach, not the Tensor engine's bf16 peak.
//
//   analysis::Roofline roof = analysis::roofline(profile_dir_load("profiles/fused"));
//   for (const analysis::RooflinePoint& p : roof.ops)
//     fmt::print("{}: {} ({:.0f}% of attainable)\n", p.name, bound_name(p.bound), 100 * p.efficiency);
//   analysis::roofline_svg_save(roof, "roofline.svg");
//
// Per point: intensity = FLOPs / HBM byte; achieved = FLOPs / time; attainable = min(compute ceiling,
// intensity x bandwidth); efficiency = achieved / attainable; bound by memory when the bandwidth slope
// is the lower of the two.
// FLOPs are model FLOPs (summary.h). An op's time is the union of its instructions' intervals (every
// engine) in each execution, so ops that overlap inside a fused executable both count the overlap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/profile_dir.h"
#include "analysis/summary.h"

namespace sightline::analysis {

// A compute roof: the peak FLOP/s of one engine at one operand width (Spec; one FLOP per element an
// ALU instruction produces, two per multiply-accumulate).
struct Roof {
  std::string name;  // "Tensor bf16/fp16", "Tensor fp32", "Vector fp32", "Vector bf16/fp16", ...
  double flops_per_s = 0;
};

struct RooflinePoint {
  std::string name;
  std::string roof{};  // the Roof that binds it: the engine and width whose share of its FLOPs takes
                       // longest; empty when its instructions do no FLOPs (DMA only)
  double compute_roof_flops_per_s = 0;  // its compute ceiling: FLOPs over the binding engine's time
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
  std::vector<Roof> roofs;     // every engine and width, highest first
  double peak_flops_per_s = 0;  // the highest roof (Tensor 16-bit), where the ridge point is
  double hbm_bytes_per_s = 0;
  double ridge_point = 0;
  std::vector<RooflinePoint> executables;  // by time, largest first
  std::vector<RooflinePoint> ops;          // by time, largest first
};

Roofline roofline(const ProfileDir& profile);

// The compute roofs of a spec, highest first.
std::vector<Roof> compute_roofs(const device::Spec& spec);

// Fills intensity, achieved, attainable, efficiency and bound from flops, bytes and time, under a roof
// of `peak_flops_per_s` (bound by memory when the intensity is left of that roof's ridge).
void roofline_place(RooflinePoint& point, double peak_flops_per_s, double hbm_bytes_per_s);

// The chart: log-log axes with decade ticks and labels, the compute roof and the bandwidth slope, the
// ridge point, one circle per op (area by time) and a legend.
std::string roofline_svg(const Roofline& roof);
// Writes roofline_svg to `path`; throws sightline::Error when it cannot.
void roofline_svg_save(const Roofline& roof, const std::string& path);

}  // namespace sightline::analysis
