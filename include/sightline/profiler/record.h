// The recording API: the bottom of the profiler, and the only profiler header that lower layers
// (ops dispatch, backend, runtime, device) include. It knows nothing about sessions, schedules,
// tables or exporters; those live above it in src/profiler/ and read what this layer collected.
//
// Recording is a handful of stores into a thread-local buffer of fixed-size POD records. Names are
// interned once per call site, times come from the host clock (core/host_clock.h: modeled by
// default, so a profile does not depend on how fast this machine runs), and every formatting
// step happens after capture. When no profile is running, every entry point returns after one
// relaxed atomic load.
//
//   // A framework op, as the dispatcher records it:
//   static const NameId mul_name = intern("aten::mul");
//   PayloadId shapes = 0;
//   if (shapes_requested()) shapes = record_shapes_payload(input_shapes);   // only with record_shapes
//   ScopeHandle op = record_op_begin(mul_name, shapes, /*flops=*/n);
//   ...                                             // the runtime reads current_correlation_id()
//   record_scope_end(op);
//
//   // A runtime call that launches device work, and the device execution it caused:
//   static const NameId launch_name = intern("nrta_execute_schedule");
//   ScopeHandle launch = record_scope_begin(EventKind::runtime, launch_name);
//   // hand launch.correlation_id and launch.external_id to the device queue, then
//   record_scope_end(launch);
//   // later, on the core's worker thread:
//   record_complete({.name = exec_name, .kind = EventKind::device_exec, .device = 0, .resource = 0,
//                    .start_ns = t0, .end_ns = t1, .correlation_id = corr, .external_id = ext});
//
// Correlation: a framework op (cpu_op) or a user scope (user_annotation) pushes its correlation id
// on the thread's correlation stack while it is open; anything recorded inside it (a runtime call,
// device work launched from it) carries that id as its external id, so device time is attributed to
// the innermost framework op, as in torch.profiler.
//
// Limits: a session records at most RecordingOptions::max_events records; beyond that records are
// dropped and counted (Collection::dropped), never lost silently.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sightline::profiler {

// ---------------------------------------------------------------------------------------------
// Names and clock

using NameId = std::uint32_t;

// Returns the id of `name`, interning it on first use. Takes a lock: call it once per call site
// (a function-local static) or once per op table entry, never per event.
NameId intern(std::string_view name);

// The text of an interned name. The view stays valid for the life of the process.
std::string_view interned_name(NameId id);

// The host clock in nanoseconds (host_clock::now_ns(): this thread's modeled or measured host time);
// the time base of every record.
std::int64_t now_ns() noexcept;

// ---------------------------------------------------------------------------------------------
// Records

enum class EventKind : std::uint8_t {
  cpu_op,           // a framework op (aten::mul); pushes its correlation id while open
  user_annotation,  // a record_function scope; pushes its correlation id too
  runtime,          // a host-side runtime call (launch, copy submission); carries the op's id
  device_exec,      // device work (nc_exec_running) on a device lane
  device_memcpy,    // a host<->device or device<->device copy executed by the device
  device_other,     // any other device-side activity (waits, barriers)
  memory,           // an allocation (bytes > 0) or a release (bytes < 0), with profile_memory
};

constexpr bool is_device_kind(EventKind kind) {
  return kind == EventKind::device_exec || kind == EventKind::device_memcpy ||
         kind == EventKind::device_other;
}

// Pushes its correlation id on the thread's correlation stack while open.
constexpr bool opens_correlation(EventKind kind) {
  return kind == EventKind::cpu_op || kind == EventKind::user_annotation;
}

// Index of a payload (input shapes, memory totals) in the recording thread's side table; 0: none.
using PayloadId = std::uint32_t;

// One recorded event, as it sits in a thread buffer. Plain data, copied by value.
struct Record {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::uint64_t correlation_id;  // this event's id; for device work, the launching runtime call's id
  std::uint64_t external_id;     // the framework op it belongs to (its own id for a cpu_op)
  std::uint64_t value;           // flops for ops, bytes for copies, signed bytes for memory, else 0
  NameId name;
  PayloadId payload;
  std::int32_t resource;  // device lane (queue, engine) for device kinds
  std::int16_t device;    // device index for device kinds, -1 on the host
  EventKind kind;
  std::uint8_t reserved;
  std::uint32_t session_state;  // the recording state it was taken under (see recording_state())
  PayloadId stack;              // with_stack: the call stack in the thread's side table; 0: none
};
static_assert(sizeof(Record) <= 64, "records are copied on the hot path; keep them within a cache line");
static_assert(std::is_trivial_v<Record> && std::is_standard_layout_v<Record>, "records are plain data");

namespace detail {
// (session epoch << 1) | enabled. One relaxed load of this word is all that recording costs
// when no profile is running; the epoch lets a session ignore records of an earlier one.
inline std::atomic<std::uint32_t> recording_state{0};
}  // namespace detail

inline bool recording_enabled() noexcept {
  return (detail::recording_state.load(std::memory_order_relaxed) & 1u) != 0;
}

// An open scope. Returned by value and closed with record_scope_end(); inactive (correlation_id
// == 0) when no profile was recording at begin, in which case ending it costs one branch.
struct ScopeHandle {
  std::int64_t start_ns = 0;
  std::uint64_t correlation_id = 0;
  std::uint64_t external_id = 0;
  std::uint64_t previous_correlation_id = 0;
  std::uint64_t value = 0;
  NameId name = 0;
  PayloadId payload = 0;
  PayloadId stack = 0;  // from record_stack_payload(), taken before the scope opened
  std::uint32_t session_state = 0;
  EventKind kind = EventKind::cpu_op;

  bool active() const noexcept { return correlation_id != 0; }
};

// Opens a framework op scope (EventKind::cpu_op). `flops` is kept for with_flops tables.
ScopeHandle record_op_begin(NameId name, PayloadId payload = 0, std::uint64_t flops = 0) noexcept;

// Opens a scope of any host kind (cpu_op, user_annotation, runtime).
ScopeHandle record_scope_begin(EventKind kind, NameId name, PayloadId payload = 0,
                               std::uint64_t value = 0) noexcept;

// Closes a scope: restores the correlation stack and writes one complete record. Scopes on one
// thread must be closed in reverse order of opening.
void record_scope_end(ScopeHandle& scope) noexcept;

// Same as record_scope_end; reads better next to record_op_begin.
inline void record_op_end(ScopeHandle& scope) noexcept { record_scope_end(scope); }

// The correlation id of the innermost open cpu_op/user_annotation scope on this thread, 0 if none.
std::uint64_t current_correlation_id() noexcept;

// A fresh correlation id, for callers that record an event later with record_complete() (0 when
// no profile is recording).
std::uint64_t new_correlation_id() noexcept;

// An event whose start and end are already known: device work reported by a core's worker, or a
// host event measured elsewhere. Written into the calling thread's buffer.
struct CompleteEvent {
  NameId name = 0;
  EventKind kind = EventKind::device_exec;
  std::int16_t device = -1;
  std::int32_t resource = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t correlation_id = 0;
  std::uint64_t external_id = 0;
  std::uint64_t value = 0;
};
void record_complete(const CompleteEvent& event) noexcept;

// ---------------------------------------------------------------------------------------------
// Payloads (only when the session asked for them)

// True while a profile with record_shapes is recording.
bool shapes_requested() noexcept;

// The dims of one input; an empty span stands for a non-tensor input (printed "[]").
using ShapeView = std::span<const std::int64_t>;

// Stores the input shapes of one op in the thread's side table and returns its id, or 0 when
// shapes are not requested. Takes the thread's own (uncontended) side-table lock.
PayloadId record_shapes_payload(std::span<const ShapeView> inputs);

// Call stacks (only when the session asked for them: with_stack)

// True while a profile with with_stack is recording.
bool stacks_requested() noexcept;

// Stores one call stack (innermost frame first, each "file(line): function" as torch.profiler
// writes them) in the thread's side table and returns its id, or 0 when stacks are not requested or
// `frames` is empty. The same stack recorded again on a thread returns the same id. Set the id as
// ScopeHandle::stack of the scope it belongs to. Takes the thread's own side-table lock.
PayloadId record_stack_payload(std::span<const std::string> frames);

// Memory (only when the session asked for it: profile_memory)

// True while a profile with profile_memory is recording.
bool memory_requested() noexcept;

// One allocation (bytes > 0) or release (bytes < 0) of `device`'s memory (-1: host memory), as
// torch.profiler's [memory] records: `address` identifies the block, the totals are the device's
// bytes in use after the event. Recorded on the calling thread at the current time; key_averages
// attributes it to the innermost op open on that thread. A record of kind memory keeps the address
// in correlation_id, the signed bytes in value and the totals in the thread's side table.
void record_memory(std::int16_t device, std::uint64_t address, std::int64_t bytes, std::int64_t total_allocated,
                   std::int64_t total_reserved) noexcept;

// ---------------------------------------------------------------------------------------------
// Session control: used by the profile session, not by the layers that emit events.

struct RecordingOptions {
  std::uint64_t max_events = 4'000'000;  // records kept per session; the rest are dropped, counted
  bool record_shapes = false;
  bool profile_memory = false;
  bool with_stack = false;
};

// Discards whatever an earlier session left, then starts recording.
void recording_start(const RecordingOptions& options);

// Stops recording; records of this session stay in the buffers until recording_collect().
void recording_stop();

struct CollectedThread {
  std::int64_t os_thread_id = 0;
  std::string name{};
};

struct MemoryTotals {
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;
};

struct CollectedRecord {
  Record record;
  std::uint32_t thread = 0;  // index into Collection::threads
  std::uint32_t shapes = 0;  // 1 + index into Collection::shapes, 0 when none
  std::uint32_t memory = 0;  // memory records: 1 + index into Collection::memory_totals, 0 when none
  std::uint32_t stack = 0;   // 1 + index into Collection::stacks, 0 when none
};

struct Collection {
  std::vector<CollectedRecord> records{};
  std::vector<CollectedThread> threads{};
  std::vector<std::vector<std::vector<std::int64_t>>> shapes{};
  std::vector<MemoryTotals> memory_totals{};
  std::vector<std::vector<std::string>> stacks{};  // each distinct stack once per thread
  bool profile_memory = false;  // the session recorded memory (memory columns even when none came)
  std::uint64_t dropped = 0;  // records refused because the session's cap was reached
};

// Drains every thread's buffer, including threads that have exited, keeping the records of the
// last session. Call after recording_stop(); threads still inside a scope lose only that scope.
Collection recording_collect();

}  // namespace sightline::profiler
