// Summary metrics of device executions (docs/hardware-model.md §3.5), from an executable and its
// instruction trace: one execution, every execution of one NTFF, or a whole profile directory.
//
//   analysis::Summary s = analysis::summarize_profile(profile_dir_load("profiles/fused"));
//   fmt::print("{:.1f}% MBU, {}\n", 100 * s.mbu, analysis::bound_name(s.bound));
//
//   analysis::SummaryBuilder one(spec);                 // or piece by piece
//   one.add(exe, trace.executions[0]);
//   analysis::Summary first = one.finish("first execution");
//
// Definitions (docs/analysis.md lists where they differ from the reference):
//   total_time        sum of execution durations (device time 0 to last completion of each)
//   engine active     union of the engine's instruction intervals; semaphore waits are not inside
//                     them (an instruction's record starts when its waits are satisfied)
//   instruction time  sum of instruction durations, overlaps counted twice
//   hardware FLOPs    TensorE matmul FLOPs (2*K*M*N); adjusted: fp32 operands x fp32_cost_factor
//   model FLOPs       the op table's cost rule on the executable's I/O shapes when it runs exactly one
//                     source op; the instructions' FLOPs (every engine) otherwise
//   MFU / HFU         model / hardware FLOPs over TensorE peak (rows*cols*2*clock) x total time
//   MBU               HBM bytes / total time / HBM bandwidth
//   mm intensity      hardware FLOPs / HBM bytes, against the ridge point peak / HBM bandwidth
//
// The device lanes of trace.json say what the NTFFs cannot: when each execution ran on the host's
// timeline, so the idle gaps between them, and the executable switches (device_activity below).
//   span              first to last device activity of any kind (executions, copies, switches, loads),
//                     over all cores: neuron::last_trace_summary's span, read back from the file
//                     (both through profiler::DeviceTimeline)
//   idle              the gaps between consecutive executions of a core, summed over cores
//   switches          nc_model_switch events (the core changed executables)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/profile_dir.h"
#include "device/core.h"
#include "sightline/device/executable.h"
#include "sightline/device/spec.h"
#include "formats/ntff.h"
#include "profiler/device_time.h"
#include "sightline/profiler/events.h"

namespace sightline::analysis {

enum class Bound { memory, compute };
std::string_view bound_name(Bound bound);  // "memory-bound", "compute-bound"

struct EngineSummary {
  double active_ns = 0;
  double instruction_ns = 0;
  double semaphore_wait_ns = 0;
  uint64_t instruction_count = 0;
};

struct Summary {
  std::string name;
  uint64_t executions = 0;
  double total_time_ns = 0;
  uint64_t cycles = 0;  // total time in the spec's base clock
  std::array<EngineSummary, device::kEngineCount> engines{};  // by device::Engine; DMA: all queues

  uint64_t hbm_read_bytes = 0, hbm_write_bytes = 0;
  uint64_t sbuf_read_bytes = 0, sbuf_write_bytes = 0;
  uint64_t psum_read_bytes = 0, psum_write_bytes = 0;
  uint64_t min_hbm_bytes = 0;  // the executables' inputs read once plus outputs written once

  uint64_t dma_transfer_count = 0;
  uint64_t dma_transfer_bytes = 0;
  uint64_t matmul_count = 0;

  double model_flops = 0;
  bool model_flops_from_op_table = true;  // false when some executable fell back to instruction FLOPs
  double hardware_flops = 0;
  double adjusted_hardware_flops = 0;
  double instruction_flops = 0;  // every engine

  // Spec figures used by the ratios.
  double peak_flops_per_s = 0;
  double hbm_bytes_per_s = 0;

  // Derived by SummaryBuilder::finish.
  double dma_active_ns() const { return engines[static_cast<int>(device::Engine::dma)].active_ns; }
  double dma_average_bytes = 0;
  double mfu = 0, hfu = 0, mbu = 0;
  double mm_arithmetic_intensity = 0;    // hardware FLOPs / HBM byte
  double model_arithmetic_intensity = 0;  // model FLOPs / HBM byte (the roofline's x)
  double ridge_point = 0;                 // peak FLOP/s / HBM byte/s
  Bound bound = Bound::memory;

  uint64_t hbm_bytes() const { return hbm_read_bytes + hbm_write_bytes; }
};

// Busy, span and a core's idle gaps have one definition, the profiler's (profiler/device_time.h),
// which neuron::last_trace_summary uses too.
using profiler::CoreActivity;
using profiler::ExecutionSpan;
using profiler::core_activity;

struct DeviceActivity {
  std::vector<CoreActivity> cores;  // by core index; cores that ran at least one execution
  uint64_t executions = 0;
  int64_t span_ns = 0;  // first device activity's start to the last one's end, every core and kind
  int64_t idle_ns = 0;  // summed over cores
  uint64_t switches = 0;
};

// The device lanes of a framework trace (trace.json). Empty when it has no executions.
DeviceActivity device_activity(const profiler::CollectedTrace& trace);

// The captured executions of a profile (every NTFF execution, the population of every summary
// metric and insight), on the host timeline of the instruction traces: an execution ends where the
// runtime ends its nc_exec_running event, its device duration rounded to the nanosecond.
std::vector<ExecutionSpan> captured_executions(const ProfileDir& profile);

// The NTFF executions of a profile paired with their nc_exec_running events in its trace.json: the same
// executions, but their host times are on different bases (the trace's is placed after its wall-clock
// start). On one core both are in time order, so the k-th of each pair up when their ops agree; a core
// whose counts differ (a dropped trace) is left out.
std::map<const formats::NtffExecution*, const profiler::FunctionEvent*> executions_in_trace(const ProfileDir& profile);

// Accumulates executions (of any executables run with `spec`) into one summary.
class SummaryBuilder {
 public:
  explicit SummaryBuilder(const device::Spec& spec);
  // Throws sightline::Error when the execution's records do not match the executable's streams.
  void add(const device::Executable& exe, const formats::NtffExecution& execution);
  Summary finish(std::string name) const;

 private:
  device::Spec spec_;
  Summary sum_;
};

// Calls fn(record, instruction) for every record of one execution, in issue order, with the executable's
// instruction it records: every stream is in order, so the k-th record of an engine (or of a DMA queue)
// is the k-th instruction of that stream. Throws sightline::Error when the records do not match the
// executable's streams (an NTFF of another NEFF).
void for_each_record(const device::Executable& exe, const formats::NtffExecution& execution,
                     const std::function<void(const device::InstructionRecord&, const device::Instruction&)>& fn);

// Model FLOPs of one execution by the op table (see the header comment); nullopt when the executable
// does not run exactly one op the table knows.
std::optional<double> op_table_flops(const device::Executable& exe);

// Every execution of every traced executable in the directory (of every rank, in a merged profile).
Summary summarize_profile(const ProfileDir& profile);

// A merged profile's summary per rank (ProfileDir::ranks), and its straggler: the rank with the most
// device time (the sum of its executions), against the rank with the least. Every rank's summary is the one
// its own profile directory gives; the profile's summary is their sum (counts, bytes, FLOPs, times) with its
// ratios (MFU, MBU) over the summed time.
struct RankSummary {
  int rank = 0;
  uint64_t executables = 0;  // the rank's NEFF files
  Summary summary;
};
struct RankSummaries {
  std::vector<RankSummary> ranks;  // by rank
  int straggler = 0;               // the rank with the largest total_time_ns (the lowest such rank)
  int fastest = 0;                 // the rank with the smallest
  double straggler_excess_ns = 0;  // its total_time_ns minus the fastest rank's
};
RankSummaries summarize_ranks(const ProfileDir& profile);
// Every execution of one traced executable.
Summary summarize_traced(const ProfileDir& profile, const TracedExecutable& traced);

}  // namespace sightline::analysis
