// The event model after collection: what key_averages and the exporters read.
//
// A profile's stop turns the raw records of every thread, plus the events that activity sources
// (device backends) hand over, into one CollectedTrace: a list of FunctionEvents sorted by start,
// with the CPU parent/child tree built per thread and each device event attributed to the
// framework op that launched it (by external id), as torch.profiler's EventList does.
//
//   CollectedTrace trace = build_trace(recording_collect(), activity_batches, window);
//   for (const FunctionEvent& event : trace.events)
//     if (event.device_type == DeviceType::privateuse1) ...;   // device work
//
// Times are nanoseconds on the monotonic clock of record.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sightline/profiler/compact_vector.h"
#include "sightline/profiler/record.h"

namespace sightline::profiler {

enum class DeviceType : std::uint8_t { cpu, privateuse1 };

// An extra trace argument an activity source attaches to its events (shown in the trace's args).
struct TraceArg {
  std::string key{};
  std::variant<std::int64_t, double, std::string> value{};
};

// One event of a trace. A collected trace writes a million of these into fresh memory, so the lists
// most events leave empty are CompactVectors (one pointer each) and the small fields share words; the
// size is held by a static_assert below.
struct FunctionEvent {
  std::uint64_t id = 0;           // correlation id; device work: the id of the runtime call
  std::uint64_t external_id = 0;  // the framework op it belongs to (its own id for an op)
  std::string name{};
  EventKind kind = EventKind::cpu_op;
  DeviceType device_type = DeviceType::cpu;
  int device_index = -1;      // device events: device (core) index
  std::int64_t thread = 0;    // OS thread id of host events
  std::int64_t resource = 0;  // device events: lane on the device (queue, engine)
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  CompactVector<std::vector<std::int64_t>> input_shapes{};
  // with_stack: the call stack it was recorded under, innermost frame first, "file(line): function".
  CompactVector<std::string> stack{};
  std::uint64_t flops = 0;
  std::uint64_t bytes = 0;
  CompactVector<TraceArg> args{};

  // Filled by build_trace: indices into CollectedTrace::events.
  std::int64_t parent = -1;
  CompactVector<std::int64_t> children{};
  CompactVector<std::int64_t> kernels{};  // device events attributed to this op

  // Filled by build_trace (torch's FunctionEvent properties).
  std::int64_t cpu_time_total_ns = 0;
  std::int64_t self_cpu_time_total_ns = 0;
  std::int64_t device_time_total_ns = 0;
  std::int64_t self_device_time_total_ns = 0;
  // With profile_memory: bytes allocated minus bytes released while the event ran, on its thread
  // (host memory, device memory); self excludes the direct children's.
  std::int64_t cpu_memory_usage = 0;
  std::int64_t self_cpu_memory_usage = 0;
  std::int64_t device_memory_usage = 0;
  std::int64_t self_device_memory_usage = 0;

  std::int64_t duration_ns() const { return end_ns - start_ns; }
  bool is_user_annotation() const { return kind == EventKind::user_annotation; }
};
static_assert(sizeof(FunctionEvent) <= 216, "a collected trace writes one per event: keep it small");

// One allocation (bytes > 0) or release (bytes < 0), torch's [memory] record.
struct MemoryEvent {
  std::int64_t ts_ns = 0;
  std::int64_t thread = 0;     // OS thread that allocated or released
  int device_index = -1;       // -1: host memory; else the device (core) whose memory it is
  std::uint64_t address = 0;   // identifies the block (host pointer or device address)
  std::int64_t bytes = 0;
  std::int64_t total_allocated = 0;  // the device's bytes in use after the event
  std::int64_t total_reserved = 0;
  // The innermost op or user scope open on its thread when it was recorded (its correlation id), 0
  // when none was or the source did not say. Attribution uses it first: with a modeled host clock an
  // allocation often falls exactly on an event's boundary, where time alone cannot tell.
  std::uint64_t scope_id = 0;
  bool scope_known = false;  // scope_id was recorded (0 then means no scope was open)
  std::int64_t owner = -1;  // filled by build_trace: the scope_id's event, else the innermost host
                            // event containing it in time; -1: none
};

// A device shown as a process in the trace (Kineto DeviceInfo).
struct DeviceLane {
  int device_index = 0;
  std::string name{};   // process_name
  std::string label{};  // process_labels
  std::int64_t sort_index = 0;
};

// A lane of a device shown as a thread in the trace (Kineto ResourceInfo).
struct ResourceLane {
  int device_index = 0;
  std::int64_t resource = 0;
  std::string name{};
  std::int64_t sort_index = 0;
};

// Kineto's distributedInfo: which rank of which job the trace is. The defaults are what Kineto writes
// for a process that is not distributed.
struct DistributedInfo {
  std::string backend = "none";
  int rank = 0;
  int world_size = 1;
  bool operator==(const DistributedInfo&) const = default;
};

// What one activity source hands over at the end of a trace.
struct ActivityBatch {
  std::vector<FunctionEvent> events{};  // device events must have device_type privateuse1
  std::vector<DeviceLane> devices{};
  std::vector<ResourceLane> resources{};
  std::vector<MemoryEvent> memory{};
  std::uint64_t dropped = 0;  // events the source refused (its own caps)
  // What the source left out and why (device work not complete when the trace stopped, work of
  // earlier steps); warned at stop, printed under the table, written in the trace.
  std::vector<std::string> notes{};
  std::optional<DistributedInfo> distributed{};  // a source that knows the job's ranks says so
};

struct HostThread {
  std::int64_t os_thread_id = 0;
  std::string name{};
};

struct CollectedTrace {
  std::vector<FunctionEvent> events{};  // sorted by (start, -end)
  std::vector<HostThread> threads{};
  std::vector<DeviceLane> devices{};
  std::vector<ResourceLane> resources{};
  std::vector<MemoryEvent> memory{};  // sorted by time; empty unless profile_memory
  bool profile_memory = false;        // recorded with profile_memory: the table shows memory columns
  std::int64_t window_start_ns = 0;  // monotonic clock
  std::int64_t window_end_ns = 0;
  std::int64_t wall_clock_at_window_start_ns = 0;  // system clock, for absolute trace timestamps
  std::uint64_t dropped = 0;                       // records and activities lost to caps
  std::vector<std::string> notes{};                // what the sources left out and why
  DistributedInfo distributed{};
};

struct TraceWindow {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t wall_clock_at_start_ns = 0;
  bool include_cpu = true;     // keep host events (the CPU activity)
  bool include_device = true;  // keep device events (the PrivateUse1 activity)
  bool profile_memory = false;  // the trace was recorded with profile_memory (also set by a Collection that was)
};

// Turns collected records and source batches into a trace: events sorted by (start, -end), the CPU
// tree built per thread (an event is a child of the innermost enclosing one; partial overlaps are
// not related), a parent with a single same-named child merged with it, device events attached to
// their op by external id, self/total CPU and device times computed, and each memory record
// attributed to the innermost host event on its thread that contains it (torch attributes it to every
// event whose interval contains it; the inclusive sums up the tree are the same on one thread).
CollectedTrace build_trace(const Collection& collection, std::vector<ActivityBatch> batches,
                           const TraceWindow& window);

}  // namespace sightline::profiler
