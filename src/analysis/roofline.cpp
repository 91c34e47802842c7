#include "analysis/roofline.h"

#include <algorithm>
#include <map>

#include "sightline/error.h"

namespace sightline::analysis {
namespace {

void sort_by_time(std::vector<RooflinePoint>& points) {
  std::stable_sort(points.begin(), points.end(),
                   [](const RooflinePoint& a, const RooflinePoint& b) { return a.time_ns > b.time_ns; });
}

double union_ns(std::vector<std::pair<double, double>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, open_start = 0, open_end = 0;
  bool open = false;
  for (const auto& [start, end] : intervals) {
    if (open && start <= open_end) {
      open_end = std::max(open_end, end);
      continue;
    }
    if (open) total += open_end - open_start;
    open_start = start;
    open_end = end;
    open = true;
  }
  return open ? total + open_end - open_start : total;
}

// Which roof an instruction's FLOPs count toward: its engine, and for the Tensor engine fp32 or not,
// for the others 16-bit or not (Spec's two element rates).
std::string roof_of(const device::Instruction& in, device::Engine engine) {
  const bool fp32 = in.src0.dtype == DType::f32 || in.src1.dtype == DType::f32;
  const bool narrow = dtype_size(in.src0.dtype) <= 2 && dtype_size(in.dst.dtype) <= 2;
  switch (engine) {
    case device::Engine::tensor: return fp32 ? "Tensor fp32" : "Tensor bf16/fp16";
    case device::Engine::vector: return narrow ? "Vector bf16/fp16" : "Vector fp32";
    case device::Engine::scalar: return narrow ? "Scalar bf16/fp16" : "Scalar fp32";
    case device::Engine::gpsimd: return narrow ? "GpSimd bf16/fp16" : "GpSimd fp32";
    case device::Engine::dma: break;
  }
  return {};
}

// FLOPs per roof. The engines run in parallel, so a point's compute-bound time is that of the engine
// that needs longest for its share (its FLOPs over that engine's peak), and its compute roof is its
// FLOPs over that time: an op that does half its work on Scalar and half on Vector reaches twice the
// Scalar peak. Points without instruction FLOPs have no binding engine and the highest roof.
using RoofTally = std::map<std::string, double>;

void place_under_roofs(RooflinePoint& point, const RoofTally& tally, const Roofline& roof) {
  double total = 0, longest = 0;
  std::string binding;
  for (const auto& [name, flops] : tally) {
    total += flops;
    for (const Roof& r : roof.roofs) {
      if (r.name != name || r.flops_per_s <= 0) continue;
      if (flops / r.flops_per_s > longest) {
        longest = flops / r.flops_per_s;
        binding = name;
      }
    }
  }
  point.roof = binding;  // empty: no instruction FLOPs, nothing binds
  // In the point's own FLOPs (model FLOPs, which may differ from the instructions' count).
  point.compute_roof_flops_per_s =
      longest > 0 && total > 0 ? std::min(roof.peak_flops_per_s, (point.flops > 0 ? point.flops : total) / longest)
                               : roof.peak_flops_per_s;
  roofline_place(point, point.compute_roof_flops_per_s, roof.hbm_bytes_per_s);
}

}  // namespace

std::vector<Roof> compute_roofs(const device::Spec& spec) {
  const double tensor = spec.tensor.peak_flops_per_ns() * 1e9;  // the one definition of the peak
  const double partitions = spec.partitions;
  auto rate = [&](const device::EngineSpec& e, bool narrow) {
    return partitions * (narrow ? e.elements_per_cycle_16bit : e.elements_per_cycle_32bit) * e.clock_ghz * 1e9;
  };
  std::vector<Roof> roofs = {
      {"Tensor bf16/fp16", tensor},
      {"Tensor fp32", spec.tensor.peak_flops_per_ns(/*fp32=*/true) * 1e9},
      {"Vector bf16/fp16", rate(spec.vector, true)},
      {"Vector fp32", rate(spec.vector, false)},
      {"Scalar bf16/fp16", rate(spec.scalar, true)},
      {"Scalar fp32", rate(spec.scalar, false)},
      {"GpSimd bf16/fp16", rate(spec.gpsimd, true)},
      {"GpSimd fp32", rate(spec.gpsimd, false)},
  };
  std::stable_sort(roofs.begin(), roofs.end(), [](const Roof& a, const Roof& b) { return a.flops_per_s > b.flops_per_s; });
  return roofs;
}

void roofline_place(RooflinePoint& point, double peak_flops_per_s, double hbm_bytes_per_s) {
  const double bytes = static_cast<double>(point.hbm_bytes);
  const double seconds = point.time_ns * 1e-9;
  point.intensity = bytes > 0 ? point.flops / bytes : 0;
  point.achieved_flops_per_s = seconds > 0 ? point.flops / seconds : 0;
  point.attainable_flops_per_s = bytes > 0 ? std::min(peak_flops_per_s, point.intensity * hbm_bytes_per_s)
                                           : peak_flops_per_s;
  point.efficiency = point.attainable_flops_per_s > 0 ? point.achieved_flops_per_s / point.attainable_flops_per_s : 0;
  point.bound = bytes > 0 && point.intensity < peak_flops_per_s / hbm_bytes_per_s ? Bound::memory : Bound::compute;
}

Roofline roofline(const ProfileDir& profile) {
  Roofline roof;
  const device::Spec& spec = profile.manifest.device;
  roof.device = spec.name;
  SummaryBuilder empty(spec);
  const Summary peaks = empty.finish("");
  roof.peak_flops_per_s = peaks.peak_flops_per_s;
  roof.hbm_bytes_per_s = peaks.hbm_bytes_per_s;
  roof.ridge_point = peaks.ridge_point;
  roof.roofs = compute_roofs(spec);

  std::map<std::string, RooflinePoint> by_op;
  std::map<std::string, RoofTally> op_tally;
  for (const TracedExecutable& traced : profile.traced) {
    const device::Executable& exe = *traced.executable;
    const Summary s = summarize_traced(profile, traced);
    RooflinePoint point{.name = exe.name, .executions = s.executions, .flops = s.model_flops,
                        .hbm_bytes = s.hbm_bytes(), .time_ns = s.total_time_ns};
    RoofTally exe_tally;

    // Per source op: its own instructions' FLOPs (model FLOPs when it is the executable's only op).
    const std::optional<double> table_flops = op_table_flops(exe);
    for (const formats::NtffExecution& execution : traced.trace.executions) {
      std::map<uint32_t, std::vector<std::pair<double, double>>> intervals;
      std::map<uint32_t, RooflinePoint> in_execution;
      std::map<uint32_t, RoofTally> in_execution_tally;
      for_each_record(exe, execution, [&](const device::InstructionRecord& r, const device::Instruction& in) {
        RooflinePoint& op = in_execution[r.source_op];
        op.flops += r.flops;
        op.hbm_bytes += uint64_t{r.hbm_bytes_read} + r.hbm_bytes_written;
        intervals[r.source_op].emplace_back(r.start_ns, r.end_ns);
        if (r.flops > 0) {
          const std::string name = roof_of(in, r.engine);
          in_execution_tally[r.source_op][name] += r.flops;
          exe_tally[name] += r.flops;
        }
      });
      for (auto& [index, part] : in_execution) {
        const std::string name = index < exe.source_ops.size() ? exe.source_ops[index] : "(no source op)";
        RooflinePoint& total = by_op[name];
        total.name = name;
        ++total.executions;
        total.flops += table_flops && exe.source_ops.size() == 1 ? *table_flops : part.flops;
        total.hbm_bytes += part.hbm_bytes;
        total.time_ns += union_ns(intervals[index]);
        for (const auto& [roof_name, flops] : in_execution_tally[index]) op_tally[name][roof_name] += flops;
      }
    }
    place_under_roofs(point, exe_tally, roof);
    roof.executables.push_back(point);
  }
  for (auto& [name, point] : by_op) {
    place_under_roofs(point, op_tally[name], roof);
    roof.ops.push_back(point);
  }
  sort_by_time(roof.executables);
  sort_by_time(roof.ops);
  return roof;
}

}  // namespace sightline::analysis
