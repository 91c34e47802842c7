#include "profiler/chrome_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "profiler/json_writer.h"
#include "profiler/lane_names.h"
#include "sightline/error.h"

namespace sightline::profiler {
namespace {

// Kineto floors the base time to a ~3 month boundary so that relative microsecond timestamps keep
// full precision as doubles in the viewers.
constexpr std::int64_t kBaseTimeGranularityNs = 7'889'238LL * 1'000'000'000LL;
constexpr std::int64_t kDeviceSortIndexBase = 5'000'000;  // Kineto's kExceedMaxPid

std::string process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? std::string("sightline") : name;
}

std::string_view category(EventKind kind) {
  switch (kind) {
    case EventKind::cpu_op: return "cpu_op";
    case EventKind::user_annotation: return "user_annotation";
    case EventKind::runtime: return "privateuse1_runtime";
    case EventKind::device_exec: return "kernel";
    case EventKind::device_memcpy: return "gpu_memcpy";
    case EventKind::device_other: return "kernel";
    case EventKind::memory: return "cpu_instant_event";
  }
  return "cpu_op";
}

bool is_host(const FunctionEvent& event) { return event.device_type == DeviceType::cpu; }

std::string host_name() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') return "localhost";
  return buffer;
}

// Synthetic process ids of the runtime and hardware subsystems in the system-lane layout; far from
// any OS pid.
constexpr std::int64_t kRuntimeProcess = 2'000'000'001;
constexpr std::int64_t kHardwareProcess = 2'000'000'002;
constexpr std::uint64_t kOpToRuntimeFlowBit = std::uint64_t{1} << 61;

// A runtime call made on behalf of a device core (placed on that core's runtime lane).
bool is_core_runtime_call(const FunctionEvent& event) {
  return is_host(event) && event.kind == EventKind::runtime && event.device_index >= 0;
}

void write_metadata(JsonWriter& json, std::string_view name, std::int64_t ts_thousandths, std::int64_t pid,
                    std::int64_t tid, std::string_view arg_key, const auto& arg_value) {
  json.begin_object().key("name").value(name).key("ph").value("M").key("ts").fixed3(ts_thousandths);
  json.key("pid").value(pid).key("tid").value(tid);
  json.key("args").begin_object().key(arg_key).value(arg_value).end_object();
  json.end_object();
}

// Where the raw event values go: straight into the writer (one thread) ...
struct WriterOut {
  JsonWriter& json;
  char* begin(std::size_t max_bytes) { return json.begin_raw(max_bytes); }
  void end(char* end) { json.end_raw(end); }
};

// ... or into a block of text formatted on a thread of its own, each value after its separator, for
// JsonWriter::hand_over_elements.
struct TextOut {
  JsonWriter::Text& text;
  std::string_view separator;
  char* begin(std::size_t max_bytes) {
    return JsonWriter::write_literal(text.room(separator.size() + max_bytes), separator);
  }
  void end(char* end) { text.commit(end); }
};

// Events per block when a large trace's events are formatted on several threads: about 1 MiB of text, the
// size of the writer's own pieces, so that a block is still in cache when the file writer copies it
// (16Ki-event blocks were slower to a file on the 2-core machine, bench/README.md).
constexpr std::size_t kBlockEvents = std::size_t{1} << 12;

unsigned format_thread_count(const ChromeTraceOptions& options) {
  if (options.format_threads != 0) return options.format_threads;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

// Writes the values of events [0, n) in order, as write_one(out, i) writes them. With more than one
// thread and more than one block of events, blocks of kBlockEvents are formatted on `threads` threads
// (this one among them) into texts of their own, and this thread hands each to the writer in order
// (JsonWriter::hand_over_elements, no copy): the same bytes as one thread writes, since every value's
// text depends only on its event. At most 2 * threads blocks are ahead of the one handed next, and
// their texts are reused, so memory stays a few blocks' worth whatever the trace's size.
template <typename WriteOne>
void write_events(JsonWriter& json, std::size_t n, unsigned threads, const WriteOne& write_one) {
  const std::size_t blocks = (n + kBlockEvents - 1) / kBlockEvents;
  if (threads <= 1 || blocks < 2) {
    WriterOut out{json};
    for (std::size_t i = 0; i < n; ++i) write_one(out, i);
    return;
  }
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, blocks));
  const std::string separator(json.element_separator());
  const std::size_t window = 2 * std::size_t{threads};
  struct Slot {
    JsonWriter::Text text;
    bool ready = false;
  };
  std::vector<Slot> slots(window);  // block b in slots[b % window]
  std::vector<JsonWriter::Text> spare;  // texts to format into again
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t next_block = 0;  // the next block to format
  std::size_t next_hand = 0;   // the next block to hand to the writer
  bool stop = false;
  std::exception_ptr error;

  // With the lock held: whether a block can be formatted now.
  auto can_take = [&] { return !stop && next_block < blocks && next_block < next_hand + window; };
  // With the lock held and can_take(): formats the next block (the lock released meanwhile).
  auto format_next = [&](std::unique_lock<std::mutex>& lock) {
    const std::size_t b = next_block++;
    JsonWriter::Text text;
    if (!spare.empty()) {
      text = std::move(spare.back());
      spare.pop_back();
    }
    lock.unlock();
    try {
      TextOut out{text, separator};
      const std::size_t end = std::min(n, (b + 1) * kBlockEvents);
      for (std::size_t i = b * kBlockEvents; i < end; ++i) write_one(out, i);
    } catch (...) {
      lock.lock();
      if (!error) error = std::current_exception();
      stop = true;
      changed.notify_all();
      return;
    }
    lock.lock();
    slots[b % window].text = std::move(text);
    slots[b % window].ready = true;
    changed.notify_all();
  };

  std::vector<std::thread> helpers;
  struct JoinHelpers {  // also when this thread throws: the helpers stop after their block
    std::vector<std::thread>& helpers;
    std::mutex& mutex;
    std::condition_variable& changed;
    bool& stop;
    ~JoinHelpers() {
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      changed.notify_all();
      for (std::thread& helper : helpers) helper.join();
    }
  } join_helpers{helpers, mutex, changed, stop};
  for (unsigned t = 1; t < threads; ++t) {
    helpers.emplace_back([&] {
      std::unique_lock lock(mutex);
      for (;;) {
        changed.wait(lock, [&] { return stop || next_block >= blocks || can_take(); });
        if (!can_take()) return;
        format_next(lock);
      }
    });
  }
  std::unique_lock lock(mutex);
  while (next_hand < blocks && !error) {
    Slot& slot = slots[next_hand % window];
    if (slot.ready) {
      JsonWriter::Text text = std::move(slot.text);
      slot.ready = false;
      lock.unlock();
      JsonWriter::Text back = json.hand_over_elements(std::move(text));
      lock.lock();
      ++next_hand;
      spare.push_back(std::move(back));
      changed.notify_all();
    } else if (can_take()) {
      format_next(lock);
    } else {
      changed.wait(lock);
    }
  }
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

// The largest text write_event_body can produce for `event`.
std::size_t event_text_bound(const FunctionEvent& event) {
  // Literal keys and punctuation (under 200 bytes), the longest category, nine numbers.
  std::size_t bytes = 256 + 9 * JsonWriter::kMaxNumberBytes + JsonWriter::max_quoted_bytes(event.name.size());
  for (const auto& dims : event.input_shapes) bytes += 3 + (JsonWriter::kMaxNumberBytes + 1) * dims.size();
  if (!event.stack.empty()) bytes += 16;
  for (const std::string& frame : event.stack) bytes += 1 + JsonWriter::max_quoted_bytes(frame.size());
  for (const TraceArg& arg : event.args) {
    bytes += 2 + JsonWriter::max_quoted_bytes(arg.key.size());
    if (const auto* text = std::get_if<std::string>(&arg.value)) {
      bytes += JsonWriter::max_quoted_bytes(text->size());
    } else {
      bytes += JsonWriter::kMaxDoubleBytes;
    }
  }
  return bytes;
}

// One event as one raw value: the same bytes as
//   begin_object ph, cat, name, pid, tid, ts, dur, args {External id, correlation, device, stream,
//   Input Dims, flops, bytes, Call stack, the event's args} end_object
// written call by call, without a call per key (the trace's hot loop).
template <typename Out>
void write_event_body(Out& out, const FunctionEvent& event, std::int64_t event_pid, std::int64_t event_tid,
                      std::int64_t ts) {
  using W = JsonWriter;
  const bool host = is_host(event);
  char* p = out.begin(event_text_bound(event));
  p = W::write_literal(p, "{\"ph\":\"X\",\"cat\":\"");
  p = W::write_literal(p, category(event.kind));
  p = W::write_literal(p, "\",\"name\":");
  p = W::write_quoted(p, event.name);
  p = W::write_literal(p, ",\"pid\":");
  p = W::write_integer(p, event_pid);
  p = W::write_literal(p, ",\"tid\":");
  p = W::write_integer(p, event_tid);
  p = W::write_literal(p, ",\"ts\":");
  p = W::write_fixed3(p, ts);
  p = W::write_literal(p, ",\"dur\":");
  p = W::write_fixed3(p, std::max<std::int64_t>(0, event.duration_ns()));
  p = W::write_literal(p, ",\"args\":{");
  bool first = true;
  const auto key = [&](std::string_view quoted_key_colon) {
    if (!first) *p++ = ',';
    first = false;
    p = W::write_literal(p, quoted_key_colon);
  };
  if (event.external_id != 0) {
    key("\"External id\":");
    p = W::write_integer(p, event.external_id);
  }
  if (!opens_correlation(event.kind) && event.id != 0) {
    key("\"correlation\":");
    p = W::write_integer(p, event.id);
  }
  if (!host) {
    key("\"device\":");
    p = W::write_integer(p, std::int64_t{event.device_index});
    p = W::write_literal(p, ",\"stream\":");
    p = W::write_integer(p, event.resource);
  }
  if (!event.input_shapes.empty()) {
    key("\"Input Dims\":[");
    for (std::size_t i = 0; i < event.input_shapes.size(); ++i) {
      if (i != 0) *p++ = ',';
      *p++ = '[';
      const auto& dims = event.input_shapes[i];
      for (std::size_t d = 0; d < dims.size(); ++d) {
        if (d != 0) *p++ = ',';
        p = W::write_integer(p, dims[d]);
      }
      *p++ = ']';
    }
    *p++ = ']';
  }
  if (event.flops != 0) {
    key("\"flops\":");
    p = W::write_integer(p, event.flops);
  }
  if (event.bytes != 0) {
    key("\"bytes\":");
    p = W::write_integer(p, event.bytes);
  }
  if (!event.stack.empty()) {
    // with_stack: Kineto's "Call stack" field, here as an array of frames, innermost first.
    key("\"Call stack\":[");
    for (std::size_t i = 0; i < event.stack.size(); ++i) {
      if (i != 0) *p++ = ',';
      p = W::write_quoted(p, event.stack[i]);
    }
    *p++ = ']';
  }
  for (const TraceArg& arg : event.args) {
    if (!first) *p++ = ',';
    first = false;
    p = W::write_quoted(p, arg.key);
    *p++ = ':';
    if (const auto* number = std::get_if<std::int64_t>(&arg.value)) {
      p = W::write_integer(p, *number);
    } else if (const auto* real = std::get_if<double>(&arg.value)) {
      p = W::write_double(p, *real);
    } else {
      p = W::write_quoted(p, std::get<std::string>(arg.value));
    }
  }
  p = W::write_literal(p, "}}");
  out.end(p);
}

// A flow end as one raw value; the same bytes as begin_object ph, id, pid, tid, ts, cat, name, [bp]
// end_object.
template <typename Out>
void write_flow(Out& out, bool start, std::uint64_t id, std::int64_t pid, std::int64_t tid, std::int64_t ts,
                std::string_view cat) {
  using W = JsonWriter;
  char* p = out.begin(128 + 4 * W::kMaxNumberBytes + 2 * W::max_quoted_bytes(cat.size()));
  p = W::write_literal(p, start ? std::string_view("{\"ph\":\"s\",\"id\":") : std::string_view("{\"ph\":\"f\",\"id\":"));
  p = W::write_integer(p, id);
  p = W::write_literal(p, ",\"pid\":");
  p = W::write_integer(p, pid);
  p = W::write_literal(p, ",\"tid\":");
  p = W::write_integer(p, tid);
  p = W::write_literal(p, ",\"ts\":");
  p = W::write_fixed3(p, ts);
  p = W::write_literal(p, ",\"cat\":");
  p = W::write_quoted(p, cat);
  p = W::write_literal(p, ",\"name\":\"");
  p = W::write_literal(p, cat);
  *p++ = '"';
  if (!start) p = W::write_literal(p, ",\"bp\":\"e\"");
  *p++ = '}';
  out.end(p);
}

// c10::DeviceType of a memory record's device: CPU (0) for host memory, PrivateUse1 (20) otherwise.
constexpr int kTorchDeviceTypeCpu = 0;
constexpr int kTorchDeviceTypePrivateUse1 = 20;

// torch.profiler's [memory] instant event (profile_memory), on the lane of the thread that allocated.
void write_memory_event(JsonWriter& json, const MemoryEvent& memory, std::int64_t pid, std::int64_t ts) {
  json.begin_object().key("ph").value("i").key("cat").value("cpu_instant_event").key("s").value("t");
  json.key("name").value("[memory]").key("pid").value(pid).key("tid").value(memory.thread).key("ts").fixed3(ts);
  json.key("args").begin_object();
  json.key("Total Reserved").value(memory.total_reserved).key("Total Allocated").value(memory.total_allocated);
  json.key("Bytes").value(memory.bytes).key("Addr").value(memory.address);
  json.key("Device Type").value(memory.device_index < 0 ? kTorchDeviceTypeCpu : kTorchDeviceTypePrivateUse1);
  json.key("Device Id").value(memory.device_index);
  // The op it belongs to (0: none was open); absent when the source did not know.
  if (memory.scope_known) json.key("External id").value(memory.scope_id);
  json.end_object();
  json.end_object();
}

template <typename RelativeNs>
void write_memory_events(const CollectedTrace& trace, JsonWriter& json, std::int64_t pid, RelativeNs relative_ns) {
  for (const MemoryEvent& memory : trace.memory) write_memory_event(json, memory, pid, relative_ns(memory.ts_ns));
}

// The lanes of the system layout beyond the host threads: the cores with runtime calls, the cores with
// device activity, and device lanes other than a core's executions (resource != 0, such as its
// collectives), which get rows of their own, named by the source's ResourceLane, after every core's
// execution lane.
struct SystemCores {
  std::set<int> runtime;
  std::set<int> hardware;
  std::set<std::pair<int, std::int64_t>> other_lanes;
};

// The thread id of a device lane other than a core's executions in the system layout: after every
// core's lane (tid = core), grouped by resource.
std::int64_t resource_lane_tid(int core, std::int64_t resource) { return resource * 1'000'000 + core; }

template <typename RelativeNs>
void write_system_lanes(const CollectedTrace& trace, JsonWriter& json, const ChromeTraceOptions& options,
                        std::int64_t pid, std::int64_t window_ts,
                        const std::map<std::int64_t, std::string>& host_threads, const SystemCores& system,
                        const std::vector<bool>& flow_start, const std::vector<bool>& flow_end,
                        RelativeNs relative_ns) {
  const std::string instance = options.instance.empty() ? host_name() : options.instance;
  const std::string prefix = fmt::format("{}/{}", instance, pid);
  const std::string& device = options.device_name;
  // Host threads become framework/TID:k in order of their OS ids (the main thread first).
  std::map<std::int64_t, int> thread_index;
  for (const auto& [tid, name] : host_threads) thread_index.emplace(tid, static_cast<int>(thread_index.size()));
  const std::set<int>& runtime_cores = system.runtime;
  const std::set<int>& hardware_cores = system.hardware;
  const std::set<std::pair<int, std::int64_t>>& other_lanes = system.other_lanes;
  write_metadata(json, "process_name", window_ts, pid, 0, "name", fmt::format("{}/{}", prefix, kFrameworkSubsystem));
  write_metadata(json, "process_sort_index", window_ts, pid, 0, "sort_index", 0);
  for (const auto& [tid, k] : thread_index) {
    write_metadata(json, "thread_name", window_ts, pid, tid, "name",
                   lane_name(prefix, kFrameworkSubsystem, thread_identifier(k)));
    write_metadata(json, "thread_sort_index", window_ts, pid, tid, "sort_index", k);
  }
  auto subsystem = [&](std::int64_t process, std::string_view name, int sort, const std::set<int>& cores) {
    if (cores.empty()) return;
    write_metadata(json, "process_name", window_ts, process, 0, "name", fmt::format("{}/{}", prefix, name));
    write_metadata(json, "process_sort_index", window_ts, process, 0, "sort_index", sort);
    for (int core : cores) {
      write_metadata(json, "thread_name", window_ts, process, core, "name", lane_name(prefix, name, core_identifier(core)));
      write_metadata(json, "thread_sort_index", window_ts, process, core, "sort_index", core);
    }
  };
  subsystem(kRuntimeProcess, runtime_subsystem(device), 1, runtime_cores);
  subsystem(kHardwareProcess, hardware_subsystem(device), 2, hardware_cores);
  for (const auto& [core, resource] : other_lanes) {
    std::string name = lane_name(prefix, hardware_subsystem(device), fmt::format("{}:{}", resource, core));
    for (const ResourceLane& lane : trace.resources) {
      if (lane.device_index == core && lane.resource == resource) {
        name = lane_name(prefix, hardware_subsystem(device), parse_lane_name(lane.name).identifier);
      }
    }
    const std::int64_t tid = resource_lane_tid(core, resource);
    write_metadata(json, "thread_name", window_ts, kHardwareProcess, tid, "name", name);
    write_metadata(json, "thread_sort_index", window_ts, kHardwareProcess, tid, "sort_index", tid);
  }

  write_events(json, trace.events.size(), format_thread_count(options), [&](auto& out, std::size_t i) {
    const FunctionEvent& event = trace.events[i];
    std::int64_t event_pid = pid, event_tid = event.thread;
    if (is_core_runtime_call(event)) {
      event_pid = kRuntimeProcess;
      event_tid = event.device_index;
    } else if (!is_host(event)) {
      event_pid = kHardwareProcess;
      event_tid = event.resource == 0 ? event.device_index : resource_lane_tid(event.device_index, event.resource);
    }
    const std::int64_t ts = relative_ns(event.start_ns);
    write_event_body(out, event, event_pid, event_tid, ts);
    if (flow_start[i] || flow_end[i]) write_flow(out, flow_start[i], event.id, event_pid, event_tid, ts, "ac2g");
    // Framework op -> the runtime call it made (on another lane now, so nesting no longer shows it).
    if (is_core_runtime_call(event) && event.parent >= 0 && event.id != 0) {
      const FunctionEvent& op = trace.events[static_cast<std::size_t>(event.parent)];
      const std::uint64_t id = event.id ^ kOpToRuntimeFlowBit;
      write_flow(out, true, id, pid, op.thread, ts, "fwd");
      write_flow(out, false, id, event_pid, event_tid, ts, "fwd");
    }
  });
  write_memory_events(trace, json, pid, relative_ns);
  json.begin_object().key("name").value("Record Window End").key("ph").value("i").key("s").value("g");
  json.key("pid").value("").key("tid").value("").key("ts").fixed3(relative_ns(trace.window_end_ns));
  json.end_object();
  json.end_array();
  json.key("traceName").value(options.trace_name);
  json.end_object();
  json.flush();
}

}  // namespace

void write_chrome_trace(const CollectedTrace& trace, JsonWriter& json, const ChromeTraceOptions& options) {
  const std::int64_t pid = static_cast<std::int64_t>(::getpid());
  const std::int64_t wall_start = trace.wall_clock_at_window_start_ns;
  const std::int64_t base_ns = wall_start - wall_start % kBaseTimeGranularityNs;
  // Timestamps in nanoseconds relative to the base: monotonic offset into the window plus the
  // window's wall-clock distance from the base. Negative ones are clamped, as Kineto does.
  auto relative_ns = [&](std::int64_t monotonic_ns) {
    const std::int64_t ns = monotonic_ns - trace.window_start_ns + (wall_start - base_ns);
    return ns < 0 ? std::int64_t{0} : ns;
  };

  struct HostId {
    std::uint64_t id;
    std::size_t index;
    bool operator<(const HostId& other) const { return id != other.id ? id < other.id : index < other.index; }
  };
  // One walk over the events collects what the document needs before them (each walk reads the first
  // cache lines of every event from memory: 1M events are ~300 MB): the host events by id, the device
  // events that may end a flow, the lanes, and the system layout's cores.
  std::vector<HostId> host_by_id;
  std::vector<HostId> device_with_id;  // device events with an id: (correlation id, index)
  std::map<std::int64_t, std::string> host_threads;
  std::set<int> devices;
  std::set<std::pair<int, std::int64_t>> resources;
  SystemCores cores;
  std::map<std::int64_t, std::string> thread_names;
  for (const HostThread& thread : trace.threads) thread_names[thread.os_thread_id] = thread.name;
  for (const MemoryEvent& memory : trace.memory) host_threads.emplace(memory.thread, thread_names[memory.thread]);
  // Events come in runs on one lane: look a lane up only when it changes.
  std::int64_t last_thread = 0, last_resource = 0;
  int last_device = 0, last_runtime_core = -1, last_hardware_core = -1;
  bool any_host = false, any_device = false;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const FunctionEvent& event = trace.events[i];
    if (is_host(event)) {
      if (event.id != 0) host_by_id.push_back({event.id, i});
      if (is_core_runtime_call(event) && (cores.runtime.empty() || event.device_index != last_runtime_core)) {
        cores.runtime.insert(event.device_index);
        last_runtime_core = event.device_index;
      }
      if (any_host && event.thread == last_thread) continue;
      any_host = true;
      last_thread = event.thread;
      if (host_threads.find(event.thread) == host_threads.end()) {
        host_threads.emplace(event.thread, thread_names[event.thread]);
      }
    } else {
      if (event.id != 0) device_with_id.push_back({event.id, i});
      if (cores.hardware.empty() || event.device_index != last_hardware_core) {
        cores.hardware.insert(event.device_index);
        last_hardware_core = event.device_index;
      }
      if (event.resource != 0) cores.other_lanes.insert({event.device_index, event.resource});
      if (any_device && event.device_index == last_device && event.resource == last_resource) continue;
      any_device = true;
      last_device = event.device_index;
      last_resource = event.resource;
      devices.insert(event.device_index);
      resources.insert({event.device_index, event.resource});
    }
  }
  // Flows: the host event whose id is a device event's correlation id launched it. One pair per
  // launch: the "s" end on the first host event with that id, the "f" end on the first device event
  // of that launch. Host and device events by (id, index), both usually sorted already (ids are
  // handed out as scopes open), matched in one merge walk: no lookup per device event, and no second
  // read of the events (a cache miss each, a third of the formatting's time when it searched).
  std::vector<bool> flow_start(trace.events.size(), false);
  std::vector<bool> flow_end(trace.events.size(), false);
  if (!device_with_id.empty()) {
    if (!std::is_sorted(host_by_id.begin(), host_by_id.end())) std::sort(host_by_id.begin(), host_by_id.end());
    if (!std::is_sorted(device_with_id.begin(), device_with_id.end())) {
      std::sort(device_with_id.begin(), device_with_id.end());
    }
    auto host = host_by_id.begin();
    for (std::size_t d = 0; d < device_with_id.size() && host != host_by_id.end(); ++d) {
      const HostId device = device_with_id[d];
      if (d != 0 && device_with_id[d - 1].id == device.id) continue;  // not its launch's first device event
      while (host != host_by_id.end() && host->id < device.id) ++host;
      if (host == host_by_id.end() || host->id != device.id) continue;
      flow_start[host->index] = true;
      flow_end[device.index] = true;
    }
  }

  std::map<int, const DeviceLane*> device_lanes;
  for (const DeviceLane& lane : trace.devices) {
    device_lanes[lane.device_index] = &lane;
    devices.insert(lane.device_index);
  }
  std::map<std::pair<int, std::int64_t>, const ResourceLane*> resource_lanes;
  for (const ResourceLane& lane : trace.resources) {
    resource_lanes[{lane.device_index, lane.resource}] = &lane;
    resources.insert({lane.device_index, lane.resource});
  }

  json.begin_object();
  json.key("schemaVersion").value(1);
  json.key("deviceProperties").begin_array();
  for (int device : devices) {
    auto lane = device_lanes.find(device);
    const std::string name =
        lane != device_lanes.end() ? lane->second->name : fmt::format("{} {}", options.device_name, device);
    json.begin_object().key("id").value(device).key("name").value(name).end_object();
  }
  json.end_array();
  json.key("distributedInfo").begin_object().key("backend").value(trace.distributed.backend);
  json.key("rank").value(trace.distributed.rank).key("world_size").value(trace.distributed.world_size).end_object();
  json.key("dropped_events").value(trace.dropped);
  if (!trace.notes.empty()) {  // what the sources left out and why (viewers ignore unknown keys)
    json.key("sightlineNotes").begin_array();
    for (const std::string& note : trace.notes) json.value(note);
    json.end_array();
  }
  if (trace.profile_memory) json.key("profile_memory").value(true);
  json.key("displayTimeUnit").value("ms");
  json.key("baseTimeNanoseconds").value(base_ns);
  json.key("traceEvents").begin_array(true);

  const std::int64_t window_ts = relative_ns(trace.window_start_ns);
  if (options.system_lanes) {
    write_system_lanes(trace, json, options, pid, window_ts, host_threads, cores, flow_start, flow_end, relative_ns);
    return;
  }
  write_metadata(json, "process_name", window_ts, pid, 0, "name", process_name());
  write_metadata(json, "process_labels", window_ts, pid, 0, "labels", "CPU");
  write_metadata(json, "process_sort_index", window_ts, pid, 0, "sort_index", pid);
  for (const auto& [tid, name] : host_threads) {
    const std::string label =
        name.empty() ? fmt::format("thread {}", tid) : fmt::format("thread {} ({})", tid, name);
    write_metadata(json, "thread_name", window_ts, pid, tid, "name", label);
    write_metadata(json, "thread_sort_index", window_ts, pid, tid, "sort_index", tid);
  }
  for (int device : devices) {
    auto lane = device_lanes.find(device);
    const bool named = lane != device_lanes.end();
    const std::string fallback = fmt::format("{} {}", options.device_name, device);
    write_metadata(json, "process_name", window_ts, device, 0, "name", named ? lane->second->name : fallback);
    write_metadata(json, "process_labels", window_ts, device, 0, "labels",
                   named ? lane->second->label : fallback);
    write_metadata(json, "process_sort_index", window_ts, device, 0, "sort_index",
                   named ? lane->second->sort_index : kDeviceSortIndexBase + device);
  }
  for (const auto& key : resources) {
    const std::int64_t lane_id = key.second;
    auto lane = resource_lanes.find(key);
    const bool named = lane != resource_lanes.end();
    write_metadata(json, "thread_name", window_ts, key.first, lane_id, "name",
                   named ? lane->second->name : fmt::format("stream {} ", lane_id));
    write_metadata(json, "thread_sort_index", window_ts, key.first, lane_id, "sort_index",
                   named ? lane->second->sort_index : lane_id);
  }

  write_events(json, trace.events.size(), format_thread_count(options), [&](auto& out, std::size_t i) {
    const FunctionEvent& event = trace.events[i];
    const bool host = is_host(event);
    const std::int64_t event_pid = host ? pid : event.device_index;
    const std::int64_t event_tid = host ? event.thread : event.resource;
    const std::int64_t ts = relative_ns(event.start_ns);
    write_event_body(out, event, event_pid, event_tid, ts);
    if (flow_start[i] || flow_end[i]) write_flow(out, flow_start[i], event.id, event_pid, event_tid, ts, "ac2g");
  });
  write_memory_events(trace, json, pid, relative_ns);
  json.begin_object().key("name").value("Record Window End").key("ph").value("i").key("s").value("g");
  json.key("pid").value("").key("tid").value("").key("ts").fixed3(relative_ns(trace.window_end_ns));
  json.end_object();
  json.end_array();
  json.key("traceName").value(options.trace_name);
  json.end_object();
  json.flush();
}

namespace {

// Writes pieces to a file on a thread of its own, so that formatting the next megabyte overlaps the
// kernel's copy of the last one into the page cache. The JsonWriter alternates two buffers
// (Pieces::until_next_return), so a piece is written from where it was formatted, never copied: a
// call waits until the piece before it is written, then hands this one over. The thread starts with
// the first piece, so a small trace costs no thread until its one piece.
//
// The file's blocks are allocated ahead of the writes (fallocate, the size kept): on ext4 a file
// whose blocks are still delayed-allocated when it is renamed over an existing file has them
// allocated and its writeback started inside rename(2) (auto_da_alloc), which cost more than the
// writes themselves when a trace replaces the previous one (bench/README.md). What is allocated
// past the end is released at the end (ftruncate). Filesystems without fallocate just skip it.
class FileWriter {
 public:
  explicit FileWriter(int fd) : fd_(fd) {}
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter() { finish(); }

  void write(std::string_view piece) {
    std::unique_lock lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    written_.wait(lock, [this] { return !pending_; });  // the piece before it: its buffer comes next
    piece_ = piece;
    pending_ = true;
    ready_.notify_one();
  }

  // Waits until every piece is written and releases blocks allocated past the end; returns 0, or the
  // errno of the first failure.
  int finish() {
    {
      std::unique_lock lock(mutex_);
      written_.wait(lock, [this] { return !pending_; });
      closed_ = true;
      ready_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    if (allocated_ > offset_ && error_ == 0 && ::ftruncate(fd_, offset_) != 0) error_ = errno;
    allocated_ = 0;
    return error_;
  }

 private:
  static constexpr off_t kMaxAllocateAhead = off_t{64} << 20;

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return pending_ || closed_; });
      if (!pending_) return;
      const std::string_view piece = piece_;
      lock.unlock();
      const int error = error_ == 0 ? write_piece(piece) : 0;
      lock.lock();
      if (error != 0 && error_ == 0) error_ = error;
      pending_ = false;
      written_.notify_one();
    }
  }

  // Only the writer thread runs this (and reads or writes offset_ and allocated_ until finish()).
  int write_piece(std::string_view piece) {
    const off_t end = offset_ + static_cast<off_t>(piece.size());
    if (end > allocated_ && allocate_) {
      // As much again as is written, at most kMaxAllocateAhead: a small trace allocates little.
      const off_t target = end + std::min(end, kMaxAllocateAhead);
      if (::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, target) == 0) {
        allocated_ = target;
      } else {
        allocate_ = false;  // not supported here (or no space: the write will say so)
      }
    }
    while (!piece.empty()) {
      const ssize_t n = ::write(fd_, piece.data(), piece.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n == 0 ? ENOSPC : errno;
      piece.remove_prefix(static_cast<std::size_t>(n));
      offset_ += n;
    }
    return 0;
  }

  const int fd_;
  std::mutex mutex_;
  std::condition_variable ready_;    // a piece is handed over, or the writer is closed
  std::condition_variable written_;  // the piece handed over is written
  std::string_view piece_;
  bool pending_ = false;
  bool closed_ = false;
  int error_ = 0;  // guarded by mutex_
  bool allocate_ = true;
  off_t offset_ = 0;
  off_t allocated_ = 0;
  std::thread thread_;
};

}  // namespace

void export_chrome_trace(const CollectedTrace& trace, const std::string& path, ChromeTraceOptions options) {
  if (options.trace_name.empty()) options.trace_name = path;
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SIGHTLINE_CHECK(fd >= 0, "cannot write chrome trace '{}': {}; check that the directory exists and is writable",
                  temporary, std::strerror(errno));
  int error = 0;
  try {
    FileWriter writer(fd);
    {
      JsonWriter json([&writer](std::string_view piece) { writer.write(piece); }, 1 << 20,
                      JsonWriter::Pieces::until_next_return);
      // Destroyed before `json`: the thread is done with its buffers before they go, even on a throw.
      struct FinishFirst {
        FileWriter& writer;
        ~FinishFirst() { writer.finish(); }
      } finish_first{writer};
      write_chrome_trace(trace, json, options);
    }
    error = writer.finish();
  } catch (...) {
    ::close(fd);
    std::remove(temporary.c_str());
    throw;
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    std::remove(temporary.c_str());
    fail("cannot write chrome trace '{}': {}", path, std::strerror(error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    fail("cannot move chrome trace into place at '{}': {}", path, std::strerror(rename_errno));
  }
}

}  // namespace sightline::profiler
