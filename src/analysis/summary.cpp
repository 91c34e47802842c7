#include "analysis/summary.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "device/cost_model.h"
#include "sightline/error.h"
#include "sightline/ops.h"

namespace sightline::analysis {
namespace {

using device::Engine;
using device::Memory;

// Union length of intervals (sorted in place).
double union_ns(std::vector<std::pair<double, double>>& intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, open_start = 0, open_end = -1;
  bool open = false;
  for (const auto& [start, end] : intervals) {
    if (!open || start > open_end) {
      if (open) total += open_end - open_start;
      open_start = start;
      open_end = end;
      open = true;
    } else {
      open_end = std::max(open_end, end);
    }
  }
  if (open) total += open_end - open_start;
  return total;
}

void add_onchip(Summary& s, const device::AccessPattern& pattern, bool write) {
  if (!pattern.present()) return;
  if (pattern.memory == Memory::sbuf) (write ? s.sbuf_write_bytes : s.sbuf_read_bytes) += pattern.bytes();
  if (pattern.memory == Memory::psum) (write ? s.psum_write_bytes : s.psum_read_bytes) += pattern.bytes();
}

double shape_elements(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

}  // namespace

std::string_view bound_name(Bound bound) { return bound == Bound::memory ? "memory-bound" : "compute-bound"; }

std::optional<double> op_table_flops(const device::Executable& exe) {
  if (exe.source_ops.size() != 1) return std::nullopt;
  const OpInfo* info = nullptr;
  for (const OpInfo& candidate : kOpTable) {
    if (candidate.name == exe.source_ops[0]) info = &candidate;
  }
  if (info == nullptr) return std::nullopt;
  std::vector<const device::IoTensor*> inputs, outputs;
  for (const device::IoTensor& t : exe.io) {
    if (t.kind == device::IoKind::input) inputs.push_back(&t);
    if (t.kind == device::IoKind::output) outputs.push_back(&t);
  }
  const double k = info->flops_per_element;
  switch (info->cost_rule) {
    case CostRule::none: return 0.0;
    case CostRule::per_output:
      if (outputs.empty()) return std::nullopt;
      return k * shape_elements(outputs[0]->shape);
    case CostRule::per_input:
      if (inputs.empty()) return std::nullopt;
      return k * shape_elements(inputs[0]->shape);
    case CostRule::matmul: {
      // out[..., M, N] = a[..., M, K] @ b[..., K, N]: 2*K FLOPs per output element (+1 with a bias).
      // An operand the kernel reads through strides is declared as its flat storage ([262144] for a
      // transposed [8, 256, 128] view), whose shape says nothing of K: then K comes from the other
      // operand, and when neither says it, from the instructions (nullopt).
      if (inputs.size() < 2 || outputs.empty()) return std::nullopt;
      const std::vector<int64_t>& a = inputs[0]->shape;
      const std::vector<int64_t>& b = inputs[1]->shape;
      const bool linear = info->id == OpId::linear;  // weight [N, K]: K is its last dim
      const std::optional<int64_t> k_of_a = a.size() >= 2 ? std::optional(a.back()) : std::nullopt;
      std::optional<int64_t> k_of_b;
      if (linear && b.size() >= 2) k_of_b = b.back();
      if (!linear && b.size() >= 2) k_of_b = b[b.size() - 2];
      if (k_of_a && k_of_b && *k_of_a != *k_of_b) return std::nullopt;
      const std::optional<int64_t> contraction = k_of_a ? k_of_a : k_of_b;
      if (!contraction) return std::nullopt;
      const double bias = inputs.size() >= 3 ? 1.0 : 0.0;
      return (2.0 * static_cast<double>(*contraction) + bias) * shape_elements(outputs[0]->shape);
    }
    case CostRule::attention:
      // q, k, v are declared as flat storage when the kernel reads them through strides (the models'
      // transposed heads), so their shapes do not always give L, S and E: count from the instructions.
      return std::nullopt;
  }
  return std::nullopt;
}

SummaryBuilder::SummaryBuilder(const device::Spec& spec) : spec_(spec) {
  sum_.peak_flops_per_s = spec.tensor.peak_flops_per_ns() * 1e9;
  sum_.hbm_bytes_per_s = spec.hbm.bytes_per_ns * 1e9;
}

void for_each_record(const device::Executable& exe, const formats::NtffExecution& execution,
                     const std::function<void(const device::InstructionRecord&, const device::Instruction&)>& fn) {
  SIGHTLINE_CHECK(execution.records.size() == exe.instruction_count(),
                  "execution {} of '{}' has {} instruction records but the executable has {} instructions; the "
                  "NTFF does not belong to this NEFF, profile again", execution.seq, exe.name,
                  execution.records.size(), exe.instruction_count());
  std::array<size_t, device::kComputeEngineCount> next_in_engine{};
  std::vector<size_t> next_in_queue(exe.dma_queues.size(), 0);
  for (const device::InstructionRecord& r : execution.records) {
    const device::Instruction* in = nullptr;
    if (r.engine == Engine::dma) {
      SIGHTLINE_CHECK(r.queue < exe.dma_queues.size() && next_in_queue[r.queue] < exe.dma_queues[r.queue].size(),
                      "'{}': a DMA record on queue {} has no matching descriptor; the NTFF does not belong to this "
                      "NEFF", exe.name, r.queue);
      in = &exe.dma_queues[r.queue][next_in_queue[r.queue]++];
    } else {
      const auto& stream = exe.stream(r.engine);
      const size_t e = static_cast<size_t>(r.engine);
      SIGHTLINE_CHECK(next_in_engine[e] < stream.size(), "'{}': more {} records than instructions; the NTFF does "
                      "not belong to this NEFF", exe.name, device::engine_name(r.engine));
      in = &stream[next_in_engine[e]++];
    }
    fn(r, *in);
  }
}

void SummaryBuilder::add(const device::Executable& exe, const formats::NtffExecution& execution) {
  Summary& s = sum_;
  std::array<std::vector<std::pair<double, double>>, device::kEngineCount> intervals;
  const std::optional<double> table_flops = op_table_flops(exe);
  double execution_flops = 0;
  for_each_record(exe, execution, [&](const device::InstructionRecord& r, const device::Instruction& instruction) {
    const device::Instruction* in = &instruction;
    EngineSummary& engine = s.engines[static_cast<size_t>(r.engine)];
    engine.instruction_ns += r.end_ns - r.start_ns;
    engine.semaphore_wait_ns += r.semaphore_wait_ns;
    ++engine.instruction_count;
    intervals[static_cast<size_t>(r.engine)].emplace_back(r.start_ns, r.end_ns);
    s.hbm_read_bytes += r.hbm_bytes_read;
    s.hbm_write_bytes += r.hbm_bytes_written;
    add_onchip(s, in->src0, false);
    add_onchip(s, in->src1, false);
    add_onchip(s, in->dst, true);
    add_onchip(s, in->aux, true);
    execution_flops += r.flops;
    if (r.engine == Engine::dma) {
      ++s.dma_transfer_count;
      s.dma_transfer_bytes += device::dma_transfer_bytes(*in);
    }
    if (in->opcode == device::Opcode::matmul) {
      ++s.matmul_count;
      s.hardware_flops += r.flops;
      const bool fp32 = in->src0.dtype == DType::f32 || in->src1.dtype == DType::f32;
      s.adjusted_hardware_flops += fp32 ? double(r.flops) * spec_.tensor.fp32_cost_factor : double(r.flops);
    }
  });
  ++s.executions;
  s.total_time_ns += execution.duration_ns;
  for (int e = 0; e < device::kEngineCount; ++e) s.engines[e].active_ns += union_ns(intervals[e]);
  s.instruction_flops += execution_flops;
  s.model_flops += table_flops.value_or(execution_flops);
  if (!table_flops) s.model_flops_from_op_table = false;
  for (const device::IoTensor& t : exe.io) {
    if (t.kind != device::IoKind::scratch) s.min_hbm_bytes += t.bytes();
  }
}

Summary SummaryBuilder::finish(std::string name) const {
  Summary s = sum_;
  s.name = std::move(name);
  s.cycles = spec_.ns_to_cycles(s.total_time_ns);
  const double seconds = s.total_time_ns * 1e-9;
  const double hbm = static_cast<double>(s.hbm_bytes());
  s.dma_average_bytes = s.dma_transfer_count == 0 ? 0 : double(s.dma_transfer_bytes) / double(s.dma_transfer_count);
  if (seconds > 0) {
    s.mfu = s.model_flops / (s.peak_flops_per_s * seconds);
    s.hfu = s.hardware_flops / (s.peak_flops_per_s * seconds);
    s.mbu = hbm / seconds / s.hbm_bytes_per_s;
  }
  s.mm_arithmetic_intensity = hbm > 0 ? s.hardware_flops / hbm : 0;
  s.model_arithmetic_intensity = hbm > 0 ? s.model_flops / hbm : 0;
  s.ridge_point = s.peak_flops_per_s / s.hbm_bytes_per_s;
  // The reference's pair is the TensorE intensity against the ridge; a program without HBM traffic
  // cannot be memory-bound.
  s.bound = (hbm == 0 || s.mm_arithmetic_intensity >= s.ridge_point) && s.hardware_flops > 0 ? Bound::compute
                                                                                              : Bound::memory;
  return s;
}

Summary summarize_traced(const ProfileDir& profile, const TracedExecutable& traced) {
  SummaryBuilder builder(profile.manifest.device);
  for (const formats::NtffExecution& execution : traced.trace.executions) builder.add(*traced.executable, execution);
  return builder.finish(traced.executable->name);
}

std::vector<ExecutionSpan> captured_executions(const ProfileDir& profile) {
  std::vector<ExecutionSpan> out;
  for (const TracedExecutable& traced : profile.traced) {
    for (const formats::NtffExecution& run : traced.trace.executions) {
      // The runtime's rule for the end of nc_exec_running (runtime.cpp): device ns rounded half up.
      const auto duration = static_cast<int64_t>(run.duration_ns + 0.5);
      out.push_back({static_cast<int>(traced.trace.core), run.start_ns, run.start_ns + duration, traced.rank});
    }
  }
  return out;
}

DeviceActivity device_activity(const profiler::CollectedTrace& trace) {
  profiler::DeviceTimeline timeline;
  std::map<int, std::pair<uint64_t, uint64_t>> switches_and_loads;  // by core
  for (const profiler::FunctionEvent& e : trace.events) {
    if (e.device_type != profiler::DeviceType::privateuse1) continue;
    if (e.kind == profiler::EventKind::device_exec && e.name == "nc_exec_running") {
      timeline.execution(e.device_index, e.start_ns, e.end_ns);
      continue;
    }
    timeline.activity(e.start_ns, e.end_ns);
    if (e.name == "nc_model_switch") {
      ++switches_and_loads[e.device_index].first;
    } else if (e.name == "nc_first_load") {
      ++switches_and_loads[e.device_index].second;
    }
  }
  DeviceActivity out;
  for (CoreActivity& c : timeline.cores()) {
    std::tie(c.switches, c.first_loads) = switches_and_loads[c.core];
    out.executions += c.executions;
    out.idle_ns += c.idle_ns;
    out.switches += c.switches;
    out.cores.push_back(c);
  }
  out.span_ns = timeline.span_ns();
  return out;
}

std::map<const formats::NtffExecution*, const profiler::FunctionEvent*> executions_in_trace(const ProfileDir& profile) {
  std::map<const formats::NtffExecution*, const profiler::FunctionEvent*> matched;
  if (!profile.trace) return matched;
  std::map<int, std::vector<const profiler::FunctionEvent*>> events;  // by core, in start order
  for (const profiler::FunctionEvent& e : profile.trace->events) {
    if (e.kind == profiler::EventKind::device_exec && e.name == "nc_exec_running") events[e.device_index].push_back(&e);
  }
  std::map<int, std::vector<const formats::NtffExecution*>> runs;
  for (const TracedExecutable& traced : profile.traced) {
    for (const formats::NtffExecution& run : traced.trace.executions) runs[int(traced.trace.core)].push_back(&run);
  }
  for (auto& [core, list] : runs) {
    std::stable_sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
    const auto on_core = events.find(core);
    if (on_core == events.end() || on_core->second.size() != list.size()) continue;
    for (size_t k = 0; k < list.size(); ++k) {
      if (on_core->second[k]->external_id == list[k]->correlation) matched[list[k]] = on_core->second[k];
    }
  }
  return matched;
}

Summary summarize_profile(const ProfileDir& profile) {
  SummaryBuilder builder(profile.manifest.device);
  for (const TracedExecutable& traced : profile.traced) {
    for (const formats::NtffExecution& execution : traced.trace.executions) builder.add(*traced.executable, execution);
  }
  return builder.finish(profile.path);
}

RankSummaries summarize_ranks(const ProfileDir& profile) {
  RankSummaries out;
  for (const int rank : profile.ranks()) {
    SummaryBuilder builder(profile.manifest.device);
    for (const TracedExecutable& traced : profile.traced) {
      if (traced.rank != rank) continue;
      for (const formats::NtffExecution& execution : traced.trace.executions) builder.add(*traced.executable, execution);
    }
    RankSummary r;
    r.rank = rank;
    r.summary = builder.finish(fmt::format("rank {}", rank));
    const uint32_t own = static_cast<uint32_t>(rank);
    for (const formats::ManifestFile& file : profile.manifest.files) {
      if (file.kind == formats::ManifestFileKind::neff && formats::manifest_file_rank(profile.manifest, file).value_or(own) == own) {
        ++r.executables;
      }
    }
    out.ranks.push_back(std::move(r));
  }
  if (out.ranks.empty()) return out;
  const RankSummary* slowest = &out.ranks.front();
  const RankSummary* fastest = &out.ranks.front();
  for (const RankSummary& r : out.ranks) {
    if (r.summary.total_time_ns > slowest->summary.total_time_ns) slowest = &r;
    if (r.summary.total_time_ns < fastest->summary.total_time_ns) fastest = &r;
  }
  out.straggler = slowest->rank;
  out.fastest = fastest->rank;
  out.straggler_excess_ns = slowest->summary.total_time_ns - fastest->summary.total_time_ns;
  return out;
}

}  // namespace sightline::analysis
