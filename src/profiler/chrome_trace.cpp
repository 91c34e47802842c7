#include "profiler/chrome_trace.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

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

void write_arg(JsonWriter& json, const TraceArg& arg) {
  json.key(arg.key);
  std::visit([&json](const auto& value) { json.value(value); }, arg.value);
}

void write_event_body(JsonWriter& json, const FunctionEvent& event, std::int64_t event_pid, std::int64_t event_tid,
                      std::int64_t ts) {
  const bool host = is_host(event);
  json.begin_object();
  json.plain_key("ph").plain_value("X").plain_key("cat").plain_value(category(event.kind)).plain_key("name").value(event.name);
  json.plain_key("pid").value(event_pid).plain_key("tid").value(event_tid);
  json.plain_key("ts").fixed3(ts).plain_key("dur").fixed3(std::max<std::int64_t>(0, event.duration_ns()));
  json.plain_key("args").begin_object();
  if (event.external_id != 0) json.plain_key("External id").value(event.external_id);
  if (!opens_correlation(event.kind) && event.id != 0) json.plain_key("correlation").value(event.id);
  if (!host) json.plain_key("device").value(event.device_index).plain_key("stream").value(event.resource);
  if (!event.input_shapes.empty()) {
    json.plain_key("Input Dims").begin_array();
    for (const auto& dims : event.input_shapes) {
      json.begin_array();
      for (std::int64_t dim : dims) json.value(dim);
      json.end_array();
    }
    json.end_array();
  }
  if (event.flops != 0) json.plain_key("flops").value(event.flops);
  if (event.bytes != 0) json.plain_key("bytes").value(event.bytes);
  for (const TraceArg& arg : event.args) write_arg(json, arg);
  json.end_object();
  json.end_object();
}

void write_flow(JsonWriter& json, bool start, std::uint64_t id, std::int64_t pid, std::int64_t tid, std::int64_t ts,
                std::string_view cat) {
  json.begin_object().plain_key("ph").value(start ? "s" : "f").plain_key("id").value(id);
  json.plain_key("pid").value(pid).plain_key("tid").value(tid).plain_key("ts").fixed3(ts);
  json.plain_key("cat").value(cat).plain_key("name").plain_value(cat);
  if (!start) json.plain_key("bp").plain_value("e");
  json.end_object();
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

template <typename RelativeNs>
void write_system_lanes(const CollectedTrace& trace, JsonWriter& json, const ChromeTraceOptions& options,
                        std::int64_t pid, std::int64_t window_ts,
                        const std::map<std::int64_t, std::string>& host_threads, const std::vector<bool>& flow_start,
                        const std::vector<bool>& flow_end, RelativeNs relative_ns) {
  const std::string instance = options.instance.empty() ? host_name() : options.instance;
  const std::string prefix = fmt::format("{}/{}", instance, pid);
  const std::string& device = options.device_name;
  // Host threads become framework/TID:k in order of their OS ids (the main thread first).
  std::map<std::int64_t, int> thread_index;
  for (const auto& [tid, name] : host_threads) thread_index.emplace(tid, static_cast<int>(thread_index.size()));
  std::set<int> runtime_cores, hardware_cores;
  for (const FunctionEvent& event : trace.events) {
    if (is_core_runtime_call(event)) runtime_cores.insert(event.device_index);
    if (!is_host(event)) hardware_cores.insert(event.device_index);
  }
  write_metadata(json, "process_name", window_ts, pid, 0, "name", prefix + "/framework");
  write_metadata(json, "process_sort_index", window_ts, pid, 0, "sort_index", 0);
  for (const auto& [tid, k] : thread_index) {
    write_metadata(json, "thread_name", window_ts, pid, tid, "name", fmt::format("{}/framework/TID:{}", prefix, k));
    write_metadata(json, "thread_sort_index", window_ts, pid, tid, "sort_index", k);
  }
  auto subsystem = [&](std::int64_t process, std::string_view name, int sort, const std::set<int>& cores) {
    if (cores.empty()) return;
    write_metadata(json, "process_name", window_ts, process, 0, "name", fmt::format("{}/{}", prefix, name));
    write_metadata(json, "process_sort_index", window_ts, process, 0, "sort_index", sort);
    for (int core : cores) {
      write_metadata(json, "thread_name", window_ts, process, core, "name", fmt::format("{}/{}/NC:{}", prefix, name,
                                                                                        core));
      write_metadata(json, "thread_sort_index", window_ts, process, core, "sort_index", core);
    }
  };
  subsystem(kRuntimeProcess, device + "_rt", 1, runtime_cores);
  subsystem(kHardwareProcess, device + "_hw", 2, hardware_cores);

  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const FunctionEvent& event = trace.events[i];
    std::int64_t event_pid = pid, event_tid = event.thread;
    if (is_core_runtime_call(event)) {
      event_pid = kRuntimeProcess;
      event_tid = event.device_index;
    } else if (!is_host(event)) {
      event_pid = kHardwareProcess;
      event_tid = event.device_index;
    }
    const std::int64_t ts = relative_ns(event.start_ns);
    write_event_body(json, event, event_pid, event_tid, ts);
    if (flow_start[i] || flow_end[i]) write_flow(json, flow_start[i], event.id, event_pid, event_tid, ts, "ac2g");
    // Framework op -> the runtime call it made (on another lane now, so nesting no longer shows it).
    if (is_core_runtime_call(event) && event.parent >= 0 && event.id != 0) {
      const FunctionEvent& op = trace.events[static_cast<std::size_t>(event.parent)];
      const std::uint64_t id = event.id ^ kOpToRuntimeFlowBit;
      write_flow(json, true, id, pid, op.thread, ts, "fwd");
      write_flow(json, false, id, event_pid, event_tid, ts, "fwd");
    }
  }
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

  // Flows: the host event whose id is a device event's correlation id launched it. One pair per
  // launch: the "f" end binds to the first device event of that launch.
  std::unordered_map<std::uint64_t, std::size_t> host_by_id;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    if (is_host(trace.events[i]) && trace.events[i].id != 0) host_by_id.emplace(trace.events[i].id, i);
  }
  std::vector<bool> flow_start(trace.events.size(), false);
  std::vector<bool> flow_end(trace.events.size(), false);
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const FunctionEvent& event = trace.events[i];
    if (is_host(event) || event.id == 0) continue;
    auto source = host_by_id.find(event.id);
    if (source == host_by_id.end() || flow_start[source->second]) continue;
    flow_start[source->second] = true;
    flow_end[i] = true;
  }

  std::map<std::int64_t, std::string> host_threads;
  std::set<int> devices;
  std::set<std::pair<int, std::int64_t>> resources;
  std::map<std::int64_t, std::string> thread_names;
  for (const HostThread& thread : trace.threads) thread_names[thread.os_thread_id] = thread.name;
  for (const MemoryEvent& memory : trace.memory) host_threads.emplace(memory.thread, thread_names[memory.thread]);
  for (const FunctionEvent& event : trace.events) {
    if (is_host(event)) {
      host_threads.emplace(event.thread, thread_names[event.thread]);
    } else {
      devices.insert(event.device_index);
      resources.insert({event.device_index, event.resource});
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
  json.key("distributedInfo").begin_object().key("backend").value("none").key("rank").value(0);
  json.key("world_size").value(1).end_object();
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
    write_system_lanes(trace, json, options, pid, window_ts, host_threads, flow_start, flow_end, relative_ns);
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

  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const FunctionEvent& event = trace.events[i];
    const bool host = is_host(event);
    const std::int64_t event_pid = host ? pid : event.device_index;
    const std::int64_t event_tid = host ? event.thread : event.resource;
    const std::int64_t ts = relative_ns(event.start_ns);
    write_event_body(json, event, event_pid, event_tid, ts);
    if (flow_start[i] || flow_end[i]) write_flow(json, flow_start[i], event.id, event_pid, event_tid, ts, "ac2g");
  }
  write_memory_events(trace, json, pid, relative_ns);
  json.begin_object().key("name").value("Record Window End").key("ph").value("i").key("s").value("g");
  json.key("pid").value("").key("tid").value("").key("ts").fixed3(relative_ns(trace.window_end_ns));
  json.end_object();
  json.end_array();
  json.key("traceName").value(options.trace_name);
  json.end_object();
  json.flush();
}

void export_chrome_trace(const CollectedTrace& trace, const std::string& path, ChromeTraceOptions options) {
  if (options.trace_name.empty()) options.trace_name = path;
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  SIGHTLINE_CHECK(file != nullptr,
                  "cannot write chrome trace '{}': {}; check that the directory exists and is writable",
                  temporary, std::strerror(errno));
  bool write_failed = false;
  {
    JsonWriter json(
        [&](std::string_view piece) {
          if (std::fwrite(piece.data(), 1, piece.size(), file) != piece.size()) write_failed = true;
        },
        1 << 20);
    write_chrome_trace(trace, json, options);
  }
  write_failed = std::fflush(file) != 0 || write_failed;
  const int saved_errno = errno;
  write_failed = std::fclose(file) != 0 || write_failed;
  if (write_failed) {
    std::remove(temporary.c_str());
    fail("cannot write chrome trace '{}': {}", path, std::strerror(saved_errno));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temporary.c_str());
    fail("cannot move chrome trace into place at '{}': {}", path, std::strerror(rename_errno));
  }
}

}  // namespace sightline::profiler
