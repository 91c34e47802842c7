// runtime/: an NRT-like runtime over simulated NeuronCores (docs/hardware-model.md §2).
//
//   runtime::Runtime rt(device::Spec::builtin("trn2"));
//   auto exe = rt.load(0, std::make_shared<device::Executable>(build_my_kernel()));
//   uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
//   rt.write(0, x, host_x.data(), bytes);                      // staged, queued, timed by the DMA model
//   uint64_t seq = rt.execute_schedule(0, exe, {x, y});        // async: returns once queued
//   rt.read(0, host_y.data(), y, bytes);                       // waits for the queue, then copies
//   rt.synchronize_all();
//
// One worker thread per core runs that core's queue in order: staged host-to-device writes,
// executions, reads, and stream-ordered frees (a tensor freed by the host is released only after the
// work queued before the free has run).
//
// Time (docs/architecture.md, "the one rule of time"): host calls take their timestamps from the host
// clock (core/host_clock.h) and advance it by the spec's host costs; the worker places device work on
// the core's modeled timeline with a sync point per execution:
//   start = max(submission + submission cost, core free) + executable switch + first load
// A host that needs a result (read, synchronize, is_completed) first waits, in wall time and outside
// host time, for the simulator to reach it, then waits in host time until its modeled completion. The
// queue is bounded in modeled time: at most queue_capacity executions/copies are in flight on a core;
// the next call waits (nrt_queue_full_wait) until the oldest completes in modeled time. So how fast the
// simulator runs never moves a timestamp; its cost is reported apart (simulation_wall_ns).
//
// Events (when capture is on) are kept per core up to a cap; events past the cap are counted as
// dropped, never silently lost. The profiler drains them; the runtime does not know the profiler.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "device/collective.h"
#include "device/core.h"
#include "sightline/device/executable.h"
#include "sightline/device/spec.h"

namespace sightline::runtime {

// The host clock every layer uses for timestamps (host_clock::now_ns()), in ns.
int64_t now_ns();

// What the runtime records: host-side runtime calls, on the calling thread (lane neuron_rt), and
// device-side activity on the core's modeled timeline (lane neuron_hw). One row per kind:
//   X(kind, Neuron name, on the device?, what it is)
#define SIGHTLINE_RUNTIME_EVENTS(X)                                                                        \
  X(load, "nrt_load", false, "an executable made resident on a core")                                     \
  X(execute_schedule, "nrta_execute_schedule", false, "an execution queued")                              \
  X(tensor_write, "nrt_tensor_write", false, "host data staged for a device copy")                        \
  X(tensor_read, "nrt_tensor_read", false, "the host waits for and receives device data")                 \
  X(allocate, "nrt_dma_mem_alloc", false, "device memory allocated")                                      \
  X(free, "nrt_tensor_free", false, "a device allocation released (stream-ordered)")                      \
  X(exec_wait, "kbl_exec_wait", false, "the host waits for modeled completion (synchronize / read)")      \
  X(queue_full_wait, "nrt_queue_full_wait", false, "the host waits: the core's queue is full")            \
  X(copy_in, "dmem_buf_copyin", true, "host-to-device DMA")                                               \
  X(copy_out, "dmem_buf_copyout", true, "device-to-host DMA")                                             \
  X(model_switch, "nc_model_switch", true, "the core switches to a different executable")                 \
  X(first_load, "nc_first_load", true, "first execution of an executable on this core (library load)")    \
  X(exec_running, "nc_exec_running", true, "one execution")                                               \
  X(cc_schedule, "nrta_cc_schedule", false, "a collective queued on one participating core")               \
  X(cc_barrier, "cc_exec_barrier", true, "the core's collective waits for every peer to reach it")         \
  X(cc_running, "cc_running", true, "one collective on the chip's collective engine (runtime/collective.h)")

enum class RuntimeEventKind : uint8_t {
#define SIGHTLINE_X(kind, name, device, what) kind,
  SIGHTLINE_RUNTIME_EVENTS(SIGHTLINE_X)
#undef SIGHTLINE_X
};
std::string_view runtime_event_name(RuntimeEventKind kind);  // the Neuron name, e.g. "nc_exec_running"
bool runtime_event_is_device(RuntimeEventKind kind);

using ExecutableId = uint32_t;
inline constexpr ExecutableId kNoExecutable = 0xffffffffu;

struct Event {
  RuntimeEventKind kind = RuntimeEventKind::load;
  int16_t core = 0;
  uint32_t thread = 0;  // OS thread id of the calling thread (host events)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t correlation = 0;  // the framework op that caused it (0: none)
  uint64_t seq = 0;          // execution sequence number on its core (executions, waits)
  uint64_t bytes = 0;        // copies and allocations
  ExecutableId executable = kNoExecutable;
};

// The instruction trace of one execution, in device ns from the execution's start.
struct ExecutionTrace {
  int16_t core = 0;
  uint64_t seq = 0;
  uint64_t correlation = 0;
  ExecutableId executable = kNoExecutable;
  int64_t start_ns = 0;  // host time of device time 0 (the sync point)
  device::RunResult result;
};

struct CaptureOptions {
  bool enabled = false;
  std::vector<bool> instruction_trace_cores;  // cores whose per-instruction records are kept
  // Per core, for each of its two streams: the events of host calls (loads, allocations, schedules,
  // waits, copies requested) and the device's (executions, copies, switches, collectives, with the
  // instruction records of its traces). The device stream is recorded by the simulator's thread, the
  // host's by the caller's, so one shared budget would keep a different mix depending on which ran
  // ahead in wall time; two budgets keep each stream's first events, the same on every run.
  size_t max_events_per_core = 1'000'000;
};

// One collective as every participant ran it: the events of kind cc_* carry (core, seq) of one rank.
struct CollectiveRecord {
  uint64_t id = 0;  // instance-wide, from 1, in the order collectives were queued
  device::CollectiveKind kind = device::CollectiveKind::all_reduce;
  DType dtype = DType::f32;
  uint64_t bytes = 0;              // the larger buffer of one rank (device/collective.h)
  uint64_t bus_bytes = 0;          // what each rank's link carried (nccl-tests' bus bandwidth numerator)
  std::vector<int> cores;          // ring order: rank r ran on cores[r]
  std::vector<uint64_t> seqs;      // the item's sequence number on each rank's core
  std::vector<int64_t> ready_ns;   // when each rank's core was ready for it
  int64_t start_ns = 0, end_ns = 0;  // the collective itself, the same on every rank
  uint64_t correlation = 0;
};

struct Captured {
  std::vector<Event> events;
  std::vector<CollectiveRecord> collectives;
  std::vector<ExecutionTrace> traces;
  std::vector<uint64_t> dropped_events_per_core;
  std::vector<uint64_t> dropped_traces_per_core;
};

struct RuntimeOptions {
  int cores = 0;               // 0: the spec's cores_per_instance
  size_t queue_capacity = 64;  // per core: executions and copies in flight (modeled) before a call waits
  bool functional = true;      // false: timing only (no data computed; reads return NaN bytes 0xff)
};

// Installs the spec's host costs into the host clock (core/host_clock.h).
void install_host_costs(const device::Spec& spec);

class Runtime {
 public:
  explicit Runtime(device::Spec spec, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const device::Spec& spec() const { return spec_; }
  int core_count() const { return static_cast<int>(cores_.size()); }

  // Registers an executable and makes it resident on `core` (first use on a core costs the spec's
  // first-load time at its first execution). The same executable may be loaded on several cores.
  ExecutableId load(int core, std::shared_ptr<const device::Executable> exe);
  std::shared_ptr<const device::Executable> executable(ExecutableId id) const;

  // Device memory. allocate throws sightline::Error when the core's HBM cannot hold `bytes` (the
  // message says how much was asked and how much is free). free is stream-ordered.
  uint64_t allocate(int core, uint64_t bytes, uint64_t correlation = 0);
  void free(int core, uint64_t address);
  uint64_t free_bytes(int core) const;

  // Host-to-device copy: staged now, performed in queue order, timed by the DMA model.
  void write(int core, uint64_t address, const void* src, uint64_t bytes, uint64_t correlation = 0);
  // Device-to-host copy: waits for the queued work, then for the modeled copy.
  void read(int core, void* dst, uint64_t address, uint64_t bytes, uint64_t correlation = 0);

  // Queues an execution with one HBM address per exe.io entry; returns its sequence number.
  uint64_t execute_schedule(int core, ExecutableId exe, std::vector<uint64_t> io_addresses,
                            uint64_t correlation = 0);
  // Queues a collective on every participating core (rank r on cores[r], its input and output at
  // inputs[r] and outputs[r]); returns each rank's sequence number. All ranks' items are queued under one
  // lock, so every core meets collectives in the same order. The collective starts on the chip's
  // collective engine when every core has reached it (work queued before it on each core has run); work
  // queued after it on a core waits only if it touches the collective's buffers. `bytes`: see
  // device/collective.h.
  struct CollectiveRequest {
    device::CollectiveKind kind = device::CollectiveKind::all_reduce;
    DType dtype = DType::f32;
    uint64_t bytes = 0;
    std::vector<int> cores{};
    std::vector<uint64_t> inputs{}, outputs{};
    uint64_t correlation = 0;
  };
  std::vector<uint64_t> collective(const CollectiveRequest& request);

  // Whether item `seq` is complete at this host time (waits for the simulator to know; host time does
  // not move).
  bool is_completed(int core, uint64_t seq);
  void synchronize(int core);
  void synchronize_all();
  // Items queued and not yet simulated, over all cores (wall-time state: for diagnostics only).
  uint64_t in_flight() const;
  // Waits, in wall time and outside host time, until the simulator has run everything queued, so that
  // every queued item's modeled times are known. Host time does not move.
  void wait_simulated();
  // The modeled host time at which item `seq` of `core` completes; waits (as wait_simulated) for the
  // simulator to reach it. Host time does not move.
  int64_t completion_ns(int core, uint64_t seq);
  // Executions and copies, over all cores, still running at host time `t` in modeled time (waits for
  // the simulator as wait_simulated does). Exact while t is at or after the last submission.
  uint64_t work_in_flight_at(int64_t t);
  // Wall time the cores' workers have spent simulating, since the runtime started (measured).
  int64_t simulation_wall_ns() const;
  bool functional() const { return options_.functional; }

  // Event capture (the profiler's narrow interface).
  void set_capture(const CaptureOptions& options);
  Captured drain();

 private:
  struct Item;
  struct CoreState;
  struct Collective;

  CoreState& core_state(int core) const;
  uint64_t enqueue(CoreState& c, std::unique_ptr<Item> item, uint64_t correlation);  // returns the seq
  void worker(CoreState& c);
  void run_item(CoreState& c, Item& item);
  int64_t simulated_completion(CoreState& c, uint64_t seq);  // wall wait, then the modeled completion
  void wait_for(CoreState& c, uint64_t seq, uint64_t correlation);
  void record(const Event& e);
  void record_trace(ExecutionTrace&& t);
  void run_collective(CoreState& c, Item& item);
  uint32_t thread_index();

  device::Spec spec_;
  RuntimeOptions options_;
  std::vector<std::unique_ptr<CoreState>> cores_;

  mutable std::mutex executables_mutex_;
  std::vector<std::shared_ptr<const device::Executable>> executables_;

  mutable std::mutex capture_mutex_;
  CaptureOptions capture_;
  std::atomic<bool> capturing_{false};
  Captured captured_;
  std::vector<uint64_t> host_events_per_core_;    // kept this capture (CaptureOptions::max_events_per_core)
  std::vector<uint64_t> device_events_per_core_;  // device events and instruction records
  std::atomic<int64_t> simulation_wall_ns_{0};
  std::mutex collectives_mutex_;  // queues a collective on all its cores at once
  uint64_t next_collective_id_ = 1;
};

}  // namespace sightline::runtime
