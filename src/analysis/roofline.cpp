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

}  // namespace

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

  std::map<std::string, RooflinePoint> by_op;
  for (const TracedExecutable& traced : profile.traced) {
    const device::Executable& exe = *traced.executable;
    const Summary s = summarize_traced(profile, traced);
    RooflinePoint point{.name = exe.name, .executions = s.executions, .flops = s.model_flops,
                        .hbm_bytes = s.hbm_bytes(), .time_ns = s.total_time_ns};
    roof.executables.push_back(point);

    // Per source op: its own instructions' FLOPs (model FLOPs when it is the executable's only op).
    const std::optional<double> table_flops = op_table_flops(exe);
    for (const formats::NtffExecution& execution : traced.trace.executions) {
      std::map<uint32_t, std::vector<std::pair<double, double>>> intervals;
      std::map<uint32_t, RooflinePoint> in_execution;
      for (const device::InstructionRecord& r : execution.records) {
        RooflinePoint& op = in_execution[r.source_op];
        op.flops += r.flops;
        op.hbm_bytes += uint64_t{r.hbm_bytes_read} + r.hbm_bytes_written;
        intervals[r.source_op].emplace_back(r.start_ns, r.end_ns);
      }
      for (auto& [index, part] : in_execution) {
        const std::string name = index < exe.source_ops.size() ? exe.source_ops[index] : "(no source op)";
        RooflinePoint& total = by_op[name];
        total.name = name;
        ++total.executions;
        total.flops += table_flops && exe.source_ops.size() == 1 ? *table_flops : part.flops;
        total.hbm_bytes += part.hbm_bytes;
        total.time_ns += union_ns(intervals[index]);
      }
    }
  }
  for (auto& [name, point] : by_op) roof.ops.push_back(point);
  for (RooflinePoint& p : roof.executables) roofline_place(p, roof.peak_flops_per_s, roof.hbm_bytes_per_s);
  for (RooflinePoint& p : roof.ops) roofline_place(p, roof.peak_flops_per_s, roof.hbm_bytes_per_s);
  sort_by_time(roof.executables);
  sort_by_time(roof.ops);
  return roof;
}

}  // namespace sightline::analysis
