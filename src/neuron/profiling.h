// Profiling the neuron device, shaped like TorchNeuron's API (docs/hardware-model.md §5.1):
//
//   auto cfg = std::make_shared<neuron::NeuronConfig>();
//   cfg->profile_output_dir = "profiles/rmsnorm_naive";
//   cfg->capture_enabled_for_nc = "0";
//   neuron::NeuronProfiler exporter(cfg);
//   profiler::profile prof({.activities = {ProfilerActivity::CPU, ProfilerActivity::PrivateUse1},
//                           .schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1}),
//                           .on_trace_ready = exporter.callback(),
//                           .experimental_config = cfg});
//
// The neuron activity source (registered with the backend) arms the runtime's capture when a trace
// starts and turns what the runtime recorded into profiler events: host-side runtime calls
// (nrta_execute_schedule, nrt_tensor_write, ...) on the calling thread, and device activity
// (nc_exec_running, dmem_buf_copyin, nc_model_switch, ...) on the core's lane, each attributed to the
// framework op that caused it. NeuronProfiler::export_trace writes the profile output directory
// (docs/formats.md).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/runtime.h"
#include "sightline/neuron.h"
#include "sightline/profiler/activity.h"
#include "sightline/profiler/profile.h"

namespace sightline::neuron {

// Parses "0,1,2-5" into core indices (sorted, unique); throws on malformed input or cores that do
// not exist, listing the valid range.
std::vector<int> parse_core_list(std::string_view text, int core_count);

// What the neuron source captured in the last trace: the runtime's events and instruction traces.
struct NeuronCapture {
  std::shared_ptr<const NeuronConfig> config;
  runtime::Captured captured;
  int64_t window_start_ns = 0;
  int64_t window_end_ns = 0;
  // Left out of `captured` (see NeuronSource::collect): device activities of the trace not complete
  // when it stopped, and activities launched before it started.
  uint64_t not_completed = 0;
  uint64_t earlier_steps = 0;
  // Measured, apart from every modeled time: the simulator's wall time during the trace and the host's
  // wall-time waits for it.
  int64_t simulation_wall_ns = 0;
  int64_t host_blocked_wall_ns = 0;
  std::string host_clock;  // "modeled" or "measured"
  bool functional = true;
};
// The collective of each rank's cc_* events, found by the (core, sequence number) they carry, and the
// collectives the trace kept (those with a cc_running event), numbered from 1 in queue order: the
// "collective id" of the profile, the same in every rank that profiled the same steps.
class CollectiveIndex {
 public:
  explicit CollectiveIndex(const runtime::Captured& captured);  // keeps pointers into `captured`
  const runtime::CollectiveRecord* find(int core, uint64_t seq) const;
  uint64_t number(const runtime::CollectiveRecord& c) const;  // 1.., 0 for one the trace did not keep
  const std::vector<const runtime::CollectiveRecord*>& kept() const { return kept_; }

 private:
  std::map<std::pair<int, uint64_t>, const runtime::CollectiveRecord*> by_item_;
  std::map<uint64_t, uint64_t> number_;  // runtime id -> profile id
  std::vector<const runtime::CollectiveRecord*> kept_;
};
// The args of a collective's events on `core`: its kind, id, algorithm, sizes, group size and rank.
void add_collective_args(profiler::FunctionEvent& f, const runtime::CollectiveRecord& c, uint64_t number, int core);

// The capture of the most recent trace that used the neuron source (nullptr before any).
std::shared_ptr<const NeuronCapture> last_capture();

// Registers the neuron activity source and names the PrivateUse1 backend "neuron" (idempotent).
void register_profiling();

}  // namespace sightline::neuron
