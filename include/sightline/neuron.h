// The neuron device: sightline's tensors on simulated NeuronCores, and how to profile them the way
// TorchNeuron does.
//
//   #include <sightline/neuron.h>
//   #include <sightline/profiler.h>
//   using namespace sightline;
//
//   neuron::configure({.spec = "trn2", .functional = true});   // optional, before first use
//   Tensor x = randn({4096, 4096}).to(Device::parse("neuron:0"));
//   auto cfg = std::make_shared<neuron::NeuronConfig>();
//   cfg->profile_output_dir = "profiles/rmsnorm";
//   cfg->capture_enabled_for_nc = "0";                          // per-instruction traces of core 0
//   neuron::NeuronProfiler exporter(cfg);
//   profiler::ProfileOptions options;
//   options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
//   options.on_trace_ready = exporter.callback();               // writes the profile directory
//   options.experimental_config = cfg;
//   profiler::profile prof(options);
//   prof.start();
//   for (int step = 0; step < 4; ++step) { Tensor y = x * x; neuron::synchronize(); prof.step(); }
//   prof.stop();
//   neuron::TraceSummary s = neuron::last_trace_summary();     // executions, busy, span, HBM bytes
//
// Each eager op builds (once, then cached) a device executable and queues it on the tensor's core;
// a host scalar combined with a device tensor travels as a host-to-device copy of its own, as on real
// hardware. All times are modeled (docs/host-model.md); `functional = false` simulates timing only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/profiler/activity.h"
#include "sightline/tensor.h"

namespace sightline::profiler {
class profile;
}

namespace sightline::neuron {

struct Options {
  std::string spec = "trn2";   // a preset name (trn2, trn1) or the path of a spec JSON file
  int cores = 0;               // 0: the spec's cores per instance (one chip), times `chips`
  int chips = 0;               // 0 or 1: one chip; N: N chips of the instance, cores numbered chip by chip
                               // (core c on chip c / cores per chip; collectives between them use the
                               // spec's chip-to-chip links, docs/hardware-model.md §1.8)
  size_t queue_capacity = 64;  // per core: executions and copies in flight before a call waits
  bool functional = true;      // false: timing only; the same modeled times, results are not computed
};

// Sets the options used when the runtime starts (at the first use of a neuron device). Throws once
// the runtime has started, and for a spec that cannot be read.
void configure(const Options& options);
// Waits for every queued execution on every core (torch.neuron.synchronize()): the host clock moves to
// their modeled completion.
void synchronize();

// What the device is: the spec's name and core version, its cores and memory.
struct DeviceInfo {
  std::string spec_name;     // "trn2"
  std::string core_version;  // "NeuronCore-v3"
  int cores = 0;
  uint64_t hbm_bytes_per_core = 0;
  double hbm_bytes_per_ns = 0;  // per core
  bool functional = true;
  double tensor_flops_per_ns = 0;       // the Tensor engine's peak with 16-bit operands, per core
  double tensor_fp32_flops_per_ns = 0;  // and with fp32 operands (device::TensorEngineSpec::peak_flops_per_ns)
};
DeviceInfo device_info();
// Device memory of `core` allocated now, and free.
uint64_t memory_allocated(int core);
uint64_t memory_free(int core);
// Measured, never part of any time in a profile: wall time the simulator has spent so far.
int64_t simulation_wall_ns();

// Collectives between the cores of the chip, as torch.distributed's are between ranks: `shards[r]` is
// rank r's tensor, each on a different neuron core (neuron:k), all of one shape and dtype. They run as a
// ring on the chip's collective engine, beside the cores' compute (docs/hardware-model.md §1.8); each
// returns one tensor per rank, on that rank's core. In a profile they are framework ops named as
// torch's c10d ops are, `nrta_cc_schedule` runtime calls, and `cc_running` / `cc_exec_barrier` (waiting
// for the slowest peer) on each core's collective lane.
//
//   std::vector<Tensor> parts = {x0, x1};                   // x0 on neuron:0, x1 on neuron:1
//   std::vector<Tensor> sums = neuron::all_reduce(parts);   // both hold x0 + x1
std::vector<Tensor> all_reduce(const std::vector<Tensor>& shards);
// Rank r receives every rank's tensor concatenated along `dim`.
std::vector<Tensor> all_gather(const std::vector<Tensor>& shards, int64_t dim = 0);
// Rank r receives chunk r (along `dim`) of the sum; size(dim) must divide by the number of ranks.
std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& shards, int64_t dim = 0);

enum class ProfileMode { DEVICE, RUNTIME };
std::string_view profile_mode_name(ProfileMode mode);

struct NeuronConfig : profiler::ExperimentalConfig {
  // DEVICE: per-instruction traces (NTFF) and executables (NEFF); RUNTIME: runtime and hardware lanes.
  std::vector<ProfileMode> modes = {ProfileMode::DEVICE, ProfileMode::RUNTIME};
  std::string capture_enabled_for_nc = "0";  // cores whose instruction traces are kept: "0,1,2-5"
  bool correlate_device_time = true;         // attribute device time to framework ops
  std::string profile_output_dir = "profile_output";
  // Per core, for each of its streams (the host's runtime calls; the device's events with their
  // instruction records): the first ones are kept, the rest counted as dropped, the same on every run.
  size_t max_events_per_nc = 1'000'000;
  // This process's rank in its job and the number of ranks (torchrun's RANK and WORLD_SIZE; read them
  // where the program starts). Recorded in trace.json's distributedInfo and the manifest, with the
  // collectives seen; `sightline merge` lines the ranks' profiles up by them.
  int rank = 0;
  int world_size = 1;

  bool has(ProfileMode mode) const;
};

// Writes the profile output directory of a profile's last trace (docs/formats.md).
class NeuronProfiler {
 public:
  explicit NeuronProfiler(std::shared_ptr<const NeuronConfig> config);
  // Returns the directory written.
  std::string export_trace(profiler::profile& prof);
  // A callback for ProfileOptions::on_trace_ready.
  std::function<void(profiler::profile&)> callback();

 private:
  std::shared_ptr<const NeuronConfig> config_;
  int exports_ = 0;
};

// What the device did in the last trace that captured neuron activity, from the runtime's events: the
// one definition the examples and tools print.
struct TraceSummary {
  int executions = 0;         // nc_exec_running
  int copies_in = 0;          // dmem_buf_copyin
  double busy_us = 0;         // sum of executions
  double span_us = 0;         // first to last device activity
  double overhead_us = 0;     // executable switches and first loads
  double hbm_mb = 0;          // HBM bytes the executions moved, in 1e6 bytes
  int collectives = 0;        // collectives (each counted once, however many cores took part)
  double collective_us = 0;   // cc_running, summed over the cores that ran them
  double collective_wait_us = 0;  // cc_exec_barrier: cores waiting for their peers, summed
  uint64_t not_completed = 0; // left out: not complete when the trace stopped
  uint64_t earlier_steps = 0; // left out: launched before the trace, still running in it
  double simulation_ms = 0;   // measured: the simulator's wall time during the trace (never modeled)
  std::string host_clock;     // "modeled" or "measured"
};
// Throws when no trace has captured neuron activity yet.
TraceSummary last_trace_summary();

}  // namespace sightline::neuron
