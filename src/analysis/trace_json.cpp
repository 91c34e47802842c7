#include "analysis/trace_json.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <tuple>
#include <filesystem>
#include <functional>
#include <iterator>
#include <new>
#include <optional>
#include <limits>
#include <map>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "formats/trace_reader.h"
#include "profiler/lane_names.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using nlohmann::json;
using profiler::DeviceType;
using profiler::EventKind;

// Times are kept within +-10^18 ns of the trace's base (formats/trace_reader.h).
constexpr std::int64_t kMaxTimeNs = formats::kMaxTraceTimeNs;

// Where a value sits, for errors: "trace.json: traceEvents[12].args.External id". Formatted only
// when an error is raised.
struct Where {
  const std::string& origin;
  std::size_t index = 0;
  const char* object = nullptr;  // nullptr: the top-level object; "": the event; "args": its arguments

  std::string operator()(std::string_view key) const {
    if (object == nullptr) return fmt::format("{}: {}", origin, key);
    return *object == '\0' ? fmt::format("{}: traceEvents[{}].{}", origin, index, key)
                            : fmt::format("{}: traceEvents[{}].{}.{}", origin, index, object, key);
  }
};

const json& required(const json& object, const char* key, const Where& where) {
  auto found = object.find(key);
  SIGHTLINE_CHECK(found != object.end(), "{} is missing; the trace is not one sightline wrote, re-export it with "
                  "export_chrome_trace", where(key));
  return *found;
}

// An integer within T's range (never a float: converting one out of range is undefined).
template <typename T>
T integer_of(const json& value, const Where& where, std::string_view key) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<json::number_unsigned_t>();
    SIGHTLINE_CHECK(v <= static_cast<json::number_unsigned_t>(std::numeric_limits<T>::max()),
                    "{} is {}, out of range (at most {})", where(key), v, std::numeric_limits<T>::max());
    return static_cast<T>(v);
  }
  if (value.is_number_integer()) {
    const auto v = value.get<json::number_integer_t>();
    const bool fits = std::is_signed_v<T>
                          ? v >= static_cast<json::number_integer_t>(std::numeric_limits<T>::min()) &&
                                v <= static_cast<json::number_integer_t>(std::numeric_limits<T>::max())
                          : v >= 0 && static_cast<json::number_unsigned_t>(v) <=
                                          static_cast<json::number_unsigned_t>(std::numeric_limits<T>::max());
    SIGHTLINE_CHECK(fits, "{} is {}, out of range ({} to {})", where(key), v, std::numeric_limits<T>::min(),
                    std::numeric_limits<T>::max());
    return static_cast<T>(v);
  }
  fail("{} must be an integer, found {} ({}); re-export the trace", where(key), value.type_name(),
       value.dump(-1, ' ', false, json::error_handler_t::replace));
}

template <typename T>
T integer_field(const json& object, const char* key, const Where& where) {
  return integer_of<T>(required(object, key, where), where, key);
}

template <typename T>
T integer_or(const json& object, const char* key, T fallback, const Where& where) {
  auto found = object.find(key);
  return found == object.end() ? fallback : integer_of<T>(*found, where, key);
}

// "ts" or "dur" as the trace reader hands them: integer nanoseconds, or a float when the text was no time.
std::int64_t time_field(const json& object, const char* key, const Where& where) {
  const json& value = required(object, key, where);
  SIGHTLINE_CHECK(value.is_number_integer(),
                  "{} is {}, not a time in microseconds within {} s of the trace's base; re-export the trace",
                  where(key), value.dump(-1, ' ', false, json::error_handler_t::replace), kMaxTimeNs / 1'000'000'000);
  return value.get<std::int64_t>();
}

std::string string_field(const json& object, const char* key, const Where& where) {
  const json& value = required(object, key, where);
  SIGHTLINE_CHECK(value.is_string(), "{} must be a string, found {}; re-export the trace", where(key),
                  value.type_name());
  return value.get<std::string>();
}

std::string string_or(const json& object, const char* key, const Where& where) {
  auto found = object.find(key);
  if (found == object.end()) return {};
  SIGHTLINE_CHECK(found->is_string(), "{} must be a string, found {}", where(key), found->type_name());
  return found->get<std::string>();
}

// The event's "args", an object (empty when absent).
const json& args_of(const json& event, const Where& where) {
  static const json empty = json::object();
  auto found = event.find("args");
  if (found == event.end()) return empty;
  SIGHTLINE_CHECK(found->is_object(), "{} must be an object, found {}", where("args"), found->type_name());
  return *found;
}

bool kind_from_category(std::string_view category, EventKind& kind) {
  static const std::map<std::string_view, EventKind> kinds = {
      {"cpu_op", EventKind::cpu_op},         {"user_annotation", EventKind::user_annotation},
      {"privateuse1_runtime", EventKind::runtime}, {"kernel", EventKind::device_exec},
      {"gpu_memcpy", EventKind::device_memcpy}};
  auto found = kinds.find(category);
  if (found == kinds.end()) return false;
  kind = found->second;
  return true;
}

// The args keys the builder reads: of a complete event, and of a [memory] event.
constexpr std::array<std::string_view, 8> kSliceArgs = {"External id", "correlation", "device", "stream",
                                                        "Input Dims",  "Call stack",  "flops",  "bytes"};
constexpr std::array<std::string_view, 6> kMemoryArgs = {"Bytes",           "Addr",           "Device Id",
                                                         "Total Allocated", "Total Reserved", "External id"};

// What the reader builds from the events. They come as the one trace reader's typed runs
// (formats::TraceRun: exact times, lanes, names; args read from the text only for the keys above), and
// as documents for the elements those runs cannot hold as typed (a field of another type, a field
// missing: TraceRun::irregular), which are then checked field by field and named in errors; both
// end in the same calls (complete, memory, window_end, fwd_flow, process_name), in file order. Runtime
// calls on a core's lane take their host thread from the "fwd" flow that links them to their
// framework op and their core from the lane's process, which may come later in the file: those are
// resolved once every event is read.
class TraceBuilder final : public formats::TraceDocumentHandler {
 public:
  TraceBuilder(const std::string& origin, bool keep) : origin_(origin), keep_(keep) {}

  void element(const json& event, std::size_t i) override { this->event(event, i); }

  // At most this many events will be kept: the vector is reserved once, so it never holds a grown
  // copy of itself (pages of the reserve that no event fills are never touched, so never resident).
  void expect_at_most(std::size_t events) {
    if (!keep_) return;
    try {
      batch_.events.reserve(events);
    } catch (const std::bad_alloc&) {  // address space refused: the vector grows as usual
    }
  }

  // One run of the reader, its first element being traceEvents[base]; `text` gives an args object's
  // text from its offset and size.
  template <class Text>
  void run(const formats::TraceRun& run, std::uint64_t base, const Text& text) {
    // The typed records and the irregular elements by element, in file order (each list already is).
    enum class Tag : std::uint8_t { slice, instant, flow, irregular };
    std::vector<std::tuple<std::uint64_t, Tag, std::size_t>> order;
    order.reserve(run.slices.size() + run.instants.size() + run.irregular.size());
    std::vector<std::uint64_t> irregular;  // in order: the reader appends them as it reads
    irregular.reserve(run.irregular.size());
    for (const auto& [element, document] : run.irregular) irregular.push_back(element);
    auto is_irregular = [&](std::uint64_t element) {
      return std::binary_search(irregular.begin(), irregular.end(), element);
    };
    for (std::size_t k = 0; k < run.slices.size(); ++k) {
      if (!is_irregular(run.slice_elements[k])) order.emplace_back(run.slice_elements[k], Tag::slice, k);
    }
    for (std::size_t k = 0; k < run.instants.size(); ++k) {
      if (!is_irregular(run.instants[k].element)) order.emplace_back(run.instants[k].element, Tag::instant, k);
    }
    for (std::size_t k = 0; k < run.flow_points.size(); ++k) {
      const auto& [category, id, point] = run.flow_points[k];
      if (point.start && run.names[category] == "fwd" && !is_irregular(run.flow_elements[k])) {
        order.emplace_back(run.flow_elements[k], Tag::flow, k);
      }
    }
    for (std::size_t k = 0; k < irregular.size(); ++k) order.emplace_back(irregular[k], Tag::irregular, k);
    std::sort(order.begin(), order.end());
    auto args_of_text = [&](std::uint64_t offset, std::uint32_t bytes, std::span<const std::string_view> keys) {
      if (bytes == 0) return json::object();
      return formats::read_trace_args(text(offset, bytes), keys, origin_);
    };
    for (const auto& [element, tag, k] : order) {
      const std::size_t i = base + element;
      switch (tag) {
        case Tag::slice: {
          const formats::TraceSlice& slice = run.slices[k];
          const formats::TraceLane& lane = run.slice_lanes[k];
          complete(i, kind_of(run.names[slice.category], i), run.names[slice.name], slice.ts_ns, slice.dur_ns,
                   lane.first, lane.second, args_of_text(slice.args_offset, slice.args_bytes, kSliceArgs));
          break;
        }
        case Tag::instant: {
          const formats::TraceInstant& instant = run.instants[k];
          const std::string& name = run.names[instant.name];
          if (name == "Record Window End") window_end(instant.ts_ns);
          if (name == "[memory]") {
            memory(i, instant.ts_ns, instant.lane.second,
                   args_of_text(instant.args_offset, instant.args_bytes, kMemoryArgs));
          }
          break;
        }
        case Tag::flow: {
          const auto& [category, id, point] = run.flow_points[k];
          fwd_flow(id, point.lane.second);
          break;
        }
        case Tag::irregular:
          event(run.irregular[k].second, i);
          break;
      }
    }
    for (const auto& [pid, name] : run.process_names) process_name(pid, name);
  }

  // One element as a document: every field checked and named in errors.
  void event(const json& event, std::size_t i) {
    SIGHTLINE_CHECK(event.is_object(), "{}: traceEvents[{}] is not an object", origin_, i);
    const Where where{origin_, i, ""};
    const Where in_args{origin_, i, "args"};
    const std::string ph = string_or(event, "ph", where);
    if (ph == "M") {
      if (string_or(event, "name", where) == "process_name" && event.contains("args")) {
        process_name(integer_or<std::int64_t>(event, "pid", 0, where), string_or(args_of(event, where), "name", in_args));
      }
      return;
    }
    if (ph == "s") {
      if (string_or(event, "cat", where) == "fwd") {
        const auto id = integer_or<std::uint64_t>(event, "id", 0, where);
        fwd_flow(id, integer_or<std::int64_t>(event, "tid", 0, where));
      }
      return;
    }
    if (ph == "i" && string_or(event, "name", where) == "Record Window End") {
      window_end(time_field(event, "ts", where));
    }
    if (ph == "i" && string_or(event, "name", where) == "[memory]") {
      const json& args = args_of(event, where);
      const std::int64_t ts = time_field(event, "ts", where);
      memory(i, ts, integer_field<std::int64_t>(event, "tid", where), args);
      return;
    }
    if (ph != "X") return;
    const EventKind kind = kind_of(string_field(event, "cat", where), i);
    std::string name = string_field(event, "name", where);
    const std::int64_t ts = time_field(event, "ts", where);
    const std::int64_t duration_ns = time_field(event, "dur", where);
    SIGHTLINE_CHECK(duration_ns >= 0, "{} is negative ({} ns); an event cannot end before it starts", where("dur"),
                    duration_ns);
    const std::int64_t pid = integer_field<std::int64_t>(event, "pid", where);
    const std::int64_t tid = integer_field<std::int64_t>(event, "tid", where);
    complete(i, kind, std::move(name), ts, duration_ns, pid, tid, args_of(event, where));
  }

  EventKind kind_of(std::string_view category, std::size_t i) const {
    EventKind kind{};
    SIGHTLINE_CHECK(kind_from_category(category, kind), "{}: traceEvents[{}] has unknown category \"{}\"", origin_, i,
                    category);
    return kind;
  }

  void process_name(std::int64_t pid, std::string name) { process_names_[pid] = std::move(name); }
  void fwd_flow(std::uint64_t id, std::int64_t tid) {
    if (keep_) fwd_flow_thread_[id ^ kOpToRuntimeFlowBit] = tid;
  }
  void window_end(std::int64_t ts_ns) { window_end_ = ts_ns; }

  void memory(std::size_t i, std::int64_t ts_ns, std::int64_t tid, const json& args) {
    const Where in_args{origin_, i, "args"};
    profiler::MemoryEvent memory;
    memory.ts_ns = ts_ns;
    memory.thread = tid;
    memory.bytes = integer_field<std::int64_t>(args, "Bytes", in_args);
    memory.address = integer_or<std::uint64_t>(args, "Addr", 0, in_args);
    memory.device_index = integer_or<int>(args, "Device Id", -1, in_args);
    memory.total_allocated = integer_or<std::int64_t>(args, "Total Allocated", 0, in_args);
    memory.total_reserved = integer_or<std::int64_t>(args, "Total Reserved", 0, in_args);
    memory.scope_known = args.contains("External id");
    memory.scope_id = integer_or<std::uint64_t>(args, "External id", 0, in_args);
    if (keep_) batch_.memory.push_back(memory);
  }

  // A complete event: times within kMaxTimeNs (no overflow), duration not negative.
  void complete(std::size_t i, EventKind kind, std::string name, std::int64_t ts_ns, std::int64_t duration_ns,
                std::int64_t pid, std::int64_t tid, const json& args) {
    const Where in_args{origin_, i, "args"};
    profiler::FunctionEvent e;
    e.kind = kind;
    e.name = std::move(name);
    e.start_ns = ts_ns;
    e.end_ns = ts_ns + duration_ns;
    e.external_id = integer_or<std::uint64_t>(args, "External id", 0, in_args);
    e.id = profiler::opens_correlation(e.kind) ? e.external_id
                                               : integer_or<std::uint64_t>(args, "correlation", 0, in_args);
    e.device_type = profiler::is_device_kind(e.kind) ? DeviceType::privateuse1 : DeviceType::cpu;
    if (e.device_type == DeviceType::privateuse1) {
      e.device_index = integer_or<int>(args, "device", -1, in_args);
      e.resource = integer_or<std::int64_t>(args, "stream", 0, in_args);
    } else {
      e.thread = tid;
      if (e.kind == EventKind::runtime) runtime_calls_.push_back({keep_ ? batch_.events.size() : 0, i, pid, tid});
    }
    if (auto found = args.find("Input Dims"); found != args.end()) {
      const json& dims = *found;
      SIGHTLINE_CHECK(dims.is_array(), "{} must be an array of shapes", in_args("Input Dims"));
      for (const json& shape : dims) {
        SIGHTLINE_CHECK(shape.is_array(), "{} must be an array of shapes (arrays of integers)", in_args("Input Dims"));
        std::vector<std::int64_t>& out = e.input_shapes.emplace_back();
        for (const json& extent : shape) out.push_back(integer_of<std::int64_t>(extent, in_args, "Input Dims"));
      }
    }
    if (auto found = args.find("Call stack"); found != args.end()) {
      // sightline writes an array of frames, innermost first; Kineto one string, frames joined by ';'.
      const json& stack = *found;
      if (stack.is_string()) {
        const std::string& text = stack.get_ref<const std::string&>();
        for (std::size_t at = 0; at < text.size();) {
          const std::size_t end = std::min(text.find(';', at), text.size());
          if (end > at) e.stack.push_back(text.substr(at, end - at));
          at = end + 1;
        }
      } else {
        SIGHTLINE_CHECK(stack.is_array(), "{} must be an array of frames (strings) or one string",
                        in_args("Call stack"));
        for (const json& frame : stack) {
          SIGHTLINE_CHECK(frame.is_string(), "{} must be an array of frames (strings)", in_args("Call stack"));
          e.stack.push_back(frame.get<std::string>());
        }
      }
    }
    e.flops = integer_or<std::uint64_t>(args, "flops", 0, in_args);
    e.bytes = integer_or<std::uint64_t>(args, "bytes", 0, in_args);
    if (keep_) batch_.events.push_back(std::move(e));
  }

  profiler::CollectedTrace finish(const json& root) {
    // Runtime calls on a "_rt" process's lane: the lane is the core, the thread comes from the flow.
    std::int64_t next_unknown_thread = -1;  // runtime calls without a framework op: a lane of their own
    for (const RuntimeCall& call : runtime_calls_) {
      auto process = process_names_.find(call.pid);
      if (process == process_names_.end() || profiler::process_layer(process->second) != profiler::LaneLayer::runtime) {
        continue;
      }
      const Where where{origin_, call.index, ""};
      SIGHTLINE_CHECK(call.tid >= std::numeric_limits<int>::min() && call.tid <= std::numeric_limits<int>::max(),
                      "{} is {}, out of range ({} to {})", where("tid"), call.tid, std::numeric_limits<int>::min(),
                      std::numeric_limits<int>::max());
      if (!keep_) continue;
      profiler::FunctionEvent& e = batch_.events[call.event];
      e.device_index = static_cast<int>(call.tid);
      auto thread = fwd_flow_thread_.find(e.id);
      e.thread = thread != fwd_flow_thread_.end() ? thread->second : next_unknown_thread--;
    }
    profiler::TraceWindow window;
    window.end_ns = window_end_;
    const Where top{origin_};
    window.wall_clock_at_start_ns = integer_or<std::int64_t>(root, "baseTimeNanoseconds", 0, top);
    batch_.dropped = integer_or<std::uint64_t>(root, "dropped_events", 0, top);
    if (auto found = root.find("profile_memory"); found != root.end()) {
      SIGHTLINE_CHECK(found->is_boolean(), "{} must be true or false", top("profile_memory"));
      window.profile_memory = found->get<bool>();
    }
    if (auto found = root.find("sightlineNotes"); found != root.end()) {  // what the profile left out and why
      SIGHTLINE_CHECK(found->is_array(), "{} must be an array of strings", top("sightlineNotes"));
      for (const json& note : *found) {
        SIGHTLINE_CHECK(note.is_string(), "{} must be an array of strings", top("sightlineNotes"));
        batch_.notes.push_back(note.get<std::string>());
      }
    }
    if (!keep_) return {};
    return profiler::build_trace(profiler::Collection{}, {std::move(batch_)}, window);
  }

 private:
  static constexpr std::uint64_t kOpToRuntimeFlowBit = std::uint64_t{1} << 61;  // profiler/chrome_trace.cpp
  struct RuntimeCall {
    std::size_t event;  // index in batch_.events
    std::size_t index;  // index in traceEvents
    std::int64_t pid, tid;
  };

  const std::string& origin_;
  bool keep_;
  profiler::ActivityBatch batch_;
  std::map<std::int64_t, std::string> process_names_;
  std::unordered_map<std::uint64_t, std::int64_t> fwd_flow_thread_;  // runtime call id -> op thread
  std::vector<RuntimeCall> runtime_calls_;
  std::int64_t window_end_ = 0;
};

// The runs of the one trace reader into the builder, in file order; `text` gives an args object's
// text. `keep` false: every check, nothing kept (validation).
template <class Text>
profiler::CollectedTrace build_from_runs(const std::vector<formats::TraceRun>& runs, const std::string& origin,
                                         bool keep, const Text& text, const ProgressCallback& progress = {},
                                         std::uint64_t total_bytes = 0) {
  TraceBuilder builder(origin, keep);
  std::size_t slices = 0;
  for (const formats::TraceRun& run : runs) slices += run.slices.size() + run.irregular.size();
  builder.expect_at_most(slices);
  std::uint64_t base = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    builder.run(runs[r], base, text);
    base += runs[r].element_count;
    if (progress) progress(total_bytes * (r + 1) / runs.size(), total_bytes);
  }
  return builder.finish(runs.empty() ? json::object() : runs.front().top_level);
}

// Text in memory through the one trace reader.
profiler::CollectedTrace read_trace(std::string_view text, const std::string& origin, bool keep,
                                    const ProgressCallback& progress = {}) {
  formats::TraceReadOptions options;
  options.refuse_bad_complete_events = false;  // the builder names the event and the field
  const std::vector<formats::TraceRun> runs = formats::read_trace_text(text, origin, options);
  auto args_text = [&](std::uint64_t offset, std::uint32_t bytes) { return text.substr(offset, bytes); };
  return build_from_runs(runs, origin, keep, args_text, progress, text.size());
}

}  // namespace

namespace {

// The backend of a hardware lane's name ("neuron" of ".../neuron_hw/NC:0" or "neuron_hw/NC:0"); empty
// for any other name.
std::string hardware_lane_device(const json& name) {
  if (!name.is_string()) return {};
  const profiler::LaneName lane = profiler::parse_lane_name(name.get_ref<const std::string&>());
  return lane.layer == profiler::LaneLayer::hardware ? std::string(lane.device) : std::string();
}

// No lane event names one: the device lanes listed in deviceProperties, as the exporters name them.
std::string device_of_properties(const json& root) {
  if (root.is_object()) {
    const auto properties = root.find("deviceProperties");
    if (properties != root.end() && properties->is_array()) {
      for (const json& device : *properties) {
        if (!device.is_object() || !device.contains("name")) continue;
        if (std::string name = hardware_lane_device(device["name"]); !name.empty()) return name;
      }
    }
  }
  return "privateuseone";
}

// Reads the lanes' names off the metadata events (ph "M": process_name, thread_name) and stops the read
// at the first hardware lane's (the exporters write the lanes before the events, so that is early).
class DeviceNameReader final : public formats::TraceDocumentHandler {
 public:
  struct Found {};  // thrown to end the read; never leaves device_name_of
  void element(const json& element, std::size_t) override {
    if (!element.is_object()) return;
    const auto ph = element.find("ph");
    const auto args = element.find("args");
    if (ph == element.end() || *ph != "M" || args == element.end() || !args->is_object()) return;
    const auto name = args->find("name");
    if (name == args->end()) return;
    device = hardware_lane_device(*name);
    if (!device.empty()) throw Found{};
  }
  std::string device;
};

// `read` runs the reader over the trace with the handler and returns the top level less traceEvents.
template <class Read>
std::string device_name_of(Read&& read) {
  DeviceNameReader reader;
  json root;
  try {
    root = read(reader);
  } catch (const DeviceNameReader::Found&) {
    return reader.device;
  }
  return device_of_properties(root);
}

}  // namespace

std::string trace_json_device_name(std::string_view text) {
  formats::TraceReadOptions options;
  options.refuse_bad_complete_events = false;  // the lanes' names are all this reads
  return trace_json_runs_device_name(formats::read_trace_text(text, "trace.json", options));
}

profiler::CollectedTrace trace_json_parse(std::string_view text, const std::string& origin,
                                          const ProgressCallback& progress) {
  return read_trace(text, origin, true, progress);
}

profiler::CollectedTrace trace_json_build(const std::vector<formats::TraceRun>& runs,
                                          const formats::MappedTrace& file, const std::string& origin) {
  auto args_text = [&](std::uint64_t offset, std::uint32_t bytes) { return file.text(offset, bytes); };
  return build_from_runs(runs, origin, true, args_text);
}

std::string trace_json_runs_device_name(const std::vector<formats::TraceRun>& runs) {
  for (const formats::TraceRun& run : runs) {
    for (const auto& [pid, name] : run.process_names) {
      if (std::string device = hardware_lane_device(json(name)); !device.empty()) return device;
    }
    for (const auto& [lane, name] : run.thread_names) {
      if (std::string device = hardware_lane_device(json(name)); !device.empty()) return device;
    }
  }
  return runs.empty() ? "privateuseone" : device_of_properties(runs.front().top_level);
}

profiler::CollectedTrace trace_json_load(const std::string& path, const ProgressCallback& progress) {
  const formats::MappedTrace file(path);
  formats::TraceReadOptions options;
  options.refuse_bad_complete_events = false;  // the builder names the event and the field
  const std::vector<formats::TraceRun> runs = formats::read_trace(file, path, options);
  auto args_text = [&](std::uint64_t offset, std::uint32_t bytes) { return file.text(offset, bytes); };
  return build_from_runs(runs, path, true, args_text, progress, file.size());
}

void trace_json_validate_file(const std::string& path, const std::string& origin) {
  TraceBuilder builder(origin, false);
  const json root = formats::validate_trace_file(path, origin, std::size_t{1} << 20, &builder);
  (void)builder.finish(root);
}

void trace_json_validate(std::string_view text, const std::string& origin) { (void)read_trace(text, origin, false); }

std::string trace_json_file_device_name(const std::string& path) {
  // With bounded memory (a MiB of the file at a time), and only as far as the first hardware lane.
  return device_name_of(
      [&](DeviceNameReader& reader) { return formats::validate_trace_file(path, path, std::size_t{1} << 20, &reader); });
}

}  // namespace sightline::analysis
