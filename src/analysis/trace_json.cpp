#include "analysis/trace_json.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using nlohmann::json;
using profiler::DeviceType;
using profiler::EventKind;

// Times are kept within +-10^18 ns (31 years) of the trace's base, so that sums and differences of
// them never overflow int64 wherever the trace is used.
constexpr std::int64_t kMaxTimeNs = 1'000'000'000'000'000'000;

// "1234.567" (microseconds, three decimals, as JsonWriter::fixed3 writes them) to exact nanoseconds;
// false for any other text and for values beyond kMaxTimeNs.
bool parse_thousandths(std::string_view text, std::int64_t& out) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  const std::size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot), fraction = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if (whole.empty() || fraction.size() > 3) return false;
  std::int64_t w = 0, f = 0;
  auto [whole_end, whole_error] = std::from_chars(whole.data(), whole.data() + whole.size(), w);
  if (whole_error != std::errc{} || whole_end != whole.data() + whole.size()) return false;
  if (!fraction.empty()) {
    auto [fraction_end, fraction_error] = std::from_chars(fraction.data(), fraction.data() + fraction.size(), f);
    if (fraction_error != std::errc{} || fraction_end != fraction.data() + fraction.size() || f < 0) return false;
  }
  for (std::size_t i = fraction.size(); i < 3; ++i) f *= 10;
  if (w > kMaxTimeNs / 1000) return false;  // also keeps w * 1000 + f from overflowing
  out = (w * 1000 + f) * (negative ? -1 : 1);
  return true;
}

// The DOM builder of nlohmann, except that "ts" and "dur" become integer nanoseconds parsed from their
// text (see the header for why). A time out of range stays a float, which the reader refuses naming
// the event and the field.
class ExactTimeSax {
 public:
  explicit ExactTimeSax(json& root) : dom_(root, true) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    if (!time_key_) return dom_.number_integer(v);
    if (v > kMaxTimeNs / 1000 || v < -kMaxTimeNs / 1000) return dom_.number_float(static_cast<double>(v), {});
    return dom_.number_integer(v * 1000);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (!time_key_) return dom_.number_unsigned(v);
    if (v > static_cast<json::number_unsigned_t>(kMaxTimeNs / 1000)) {
      return dom_.number_float(static_cast<double>(v), {});
    }
    return dom_.number_integer(static_cast<json::number_integer_t>(v) * 1000);
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    std::int64_t ns = 0;
    if (time_key_ && parse_thousandths(text, ns)) return dom_.number_integer(ns);
    // Another writer's time (more decimals, an exponent): rounded to the nanosecond when in range.
    if (time_key_ && std::isfinite(v) && std::fabs(v) * 1000 <= static_cast<double>(kMaxTimeNs)) {
      return dom_.number_integer(static_cast<std::int64_t>(std::llround(v * 1000)));
    }
    return dom_.number_float(v, text);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { return dom_.start_object(n); }
  bool key(json::string_t& k) {
    time_key_ = k == "ts" || k == "dur";
    return dom_.key(k);
  }
  bool end_object() { return dom_.end_object(); }
  bool start_array(std::size_t n) { return dom_.start_array(n); }
  bool end_array() { return dom_.end_array(); }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& ex) {
    return dom_.parse_error(position, token, ex);
  }

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  bool time_key_ = false;
};

// A char iterator that reports how far the parser got, every MiB.
class ProgressIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  ProgressIterator() = default;
  ProgressIterator(const char* at, const char* begin, std::size_t total, const ProgressCallback* progress)
      : at_(at), begin_(begin), total_(total), progress_(progress) {}
  reference operator*() const { return *at_; }
  ProgressIterator& operator++() {
    ++at_;
    if (progress_ != nullptr && *progress_ && ((at_ - begin_) & ((1 << 20) - 1)) == 0) {
      (*progress_)(static_cast<uint64_t>(at_ - begin_), total_);
    }
    return *this;
  }
  ProgressIterator operator++(int) {
    ProgressIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const ProgressIterator& other) const { return at_ == other.at_; }

 private:
  const char* at_ = nullptr;
  const char* begin_ = nullptr;
  std::size_t total_ = 0;
  const ProgressCallback* progress_ = nullptr;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot read trace '{}'; check that it exists and is readable", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

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

// "ts" or "dur" after ExactTimeSax: integer nanoseconds, or a float when the text was no time.
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

json parse_exact(std::string_view text, const std::string& origin, const ProgressCallback& progress) {
  json root;
  ExactTimeSax sax(root);
  try {
    ProgressIterator begin(text.data(), text.data(), text.size(), &progress);
    ProgressIterator end(text.data() + text.size(), text.data(), text.size(), &progress);
    json::sax_parse(begin, end, &sax);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({}); the file is damaged or truncated, export the profile again", origin, e.what());
  }
  if (progress) progress(text.size(), text.size());
  return root;
}

}  // namespace

std::string trace_json_device_name(std::string_view text) {
  // Lane names are short; a cheap scan avoids parsing twice.
  const std::size_t at = text.find("_hw/NC:");
  if (at == std::string_view::npos) return "privateuseone";
  // The lane name is ".../neuron_hw/NC:0" or, in deviceProperties, "neuron_hw/NC:0".
  const std::size_t slash = text.find_last_of("/\"", at);
  if (slash == std::string_view::npos) return "privateuseone";
  return std::string(text.substr(slash + 1, at - slash - 1));
}

profiler::CollectedTrace trace_json_parse(std::string_view text, const std::string& origin,
                                          const ProgressCallback& progress) {
  const json root = parse_exact(text, origin, progress);
  SIGHTLINE_CHECK(root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array(),
                  "{} has no \"traceEvents\" array; it is not a Chrome trace", origin);
  const json& events = root["traceEvents"];

  // Lane roles from the process names of the system-lane layout.
  std::map<std::int64_t, std::string> process_names;
  std::unordered_map<std::uint64_t, std::int64_t> fwd_flow_thread;  // runtime call id -> op thread
  constexpr std::uint64_t kOpToRuntimeFlowBit = std::uint64_t{1} << 61;  // profiler/chrome_trace.cpp
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& event = events[i];
    SIGHTLINE_CHECK(event.is_object(), "{}: traceEvents[{}] is not an object", origin, i);
    const Where where{origin, i, ""};
    const std::string ph = string_or(event, "ph", where);
    if (ph == "M" && string_or(event, "name", where) == "process_name" && event.contains("args")) {
      process_names[integer_or<std::int64_t>(event, "pid", 0, where)] =
          string_or(args_of(event, where), "name", Where{origin, i, "args"});
    } else if (ph == "s" && string_or(event, "cat", where) == "fwd") {
      fwd_flow_thread[integer_or<std::uint64_t>(event, "id", 0, where) ^ kOpToRuntimeFlowBit] =
          integer_or<std::int64_t>(event, "tid", 0, where);
    }
  }
  auto process_is = [&](std::int64_t pid, std::string_view suffix) {
    auto found = process_names.find(pid);
    return found != process_names.end() && found->second.ends_with(suffix);
  };

  profiler::ActivityBatch batch;
  std::int64_t window_end = 0;
  std::int64_t next_unknown_thread = -1;  // runtime calls without a framework op: a lane of their own
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& event = events[i];
    const Where where{origin, i, ""};
    const Where in_args{origin, i, "args"};
    const std::string ph = string_or(event, "ph", where);
    if (ph == "i" && string_or(event, "name", where) == "Record Window End") {
      window_end = time_field(event, "ts", where);
    }
    if (ph == "i" && string_or(event, "name", where) == "[memory]") {
      const json& args = args_of(event, where);
      profiler::MemoryEvent memory;
      memory.ts_ns = time_field(event, "ts", where);
      memory.thread = integer_field<std::int64_t>(event, "tid", where);
      memory.bytes = integer_field<std::int64_t>(args, "Bytes", in_args);
      memory.address = integer_or<std::uint64_t>(args, "Addr", 0, in_args);
      memory.device_index = integer_or<int>(args, "Device Id", -1, in_args);
      memory.total_allocated = integer_or<std::int64_t>(args, "Total Allocated", 0, in_args);
      memory.total_reserved = integer_or<std::int64_t>(args, "Total Reserved", 0, in_args);
      memory.scope_known = args.contains("External id");
      memory.scope_id = integer_or<std::uint64_t>(args, "External id", 0, in_args);
      batch.memory.push_back(memory);
      continue;
    }
    if (ph != "X") continue;
    profiler::FunctionEvent e;
    const std::string category = string_field(event, "cat", where);
    SIGHTLINE_CHECK(kind_from_category(category, e.kind), "{}: traceEvents[{}] has unknown category \"{}\"",
                    origin, i, category);
    e.name = string_field(event, "name", where);
    e.start_ns = time_field(event, "ts", where);
    const std::int64_t duration_ns = time_field(event, "dur", where);
    SIGHTLINE_CHECK(duration_ns >= 0, "{} is negative ({} ns); an event cannot end before it starts", where("dur"),
                    duration_ns);
    e.end_ns = e.start_ns + duration_ns;  // both within kMaxTimeNs: no overflow
    const std::int64_t pid = integer_field<std::int64_t>(event, "pid", where);
    const std::int64_t tid = integer_field<std::int64_t>(event, "tid", where);
    const json& args = args_of(event, where);
    e.external_id = integer_or<std::uint64_t>(args, "External id", 0, in_args);
    e.id = profiler::opens_correlation(e.kind) ? e.external_id
                                               : integer_or<std::uint64_t>(args, "correlation", 0, in_args);
    e.device_type = profiler::is_device_kind(e.kind) ? DeviceType::privateuse1 : DeviceType::cpu;
    if (e.device_type == DeviceType::privateuse1) {
      e.device_index = integer_or<int>(args, "device", -1, in_args);
      e.resource = integer_or<std::int64_t>(args, "stream", 0, in_args);
    } else if (e.kind == EventKind::runtime && process_is(pid, "_rt")) {
      e.device_index = integer_of<int>(event["tid"], where, "tid");
      auto thread = fwd_flow_thread.find(e.id);
      e.thread = thread != fwd_flow_thread.end() ? thread->second : next_unknown_thread--;
    } else {
      e.thread = tid;
    }
    if (args.contains("Input Dims")) {
      const json& dims = args["Input Dims"];
      SIGHTLINE_CHECK(dims.is_array(), "{} must be an array of shapes", in_args("Input Dims"));
      for (const json& shape : dims) {
        SIGHTLINE_CHECK(shape.is_array(), "{} must be an array of shapes (arrays of integers)", in_args("Input Dims"));
        std::vector<std::int64_t>& out = e.input_shapes.emplace_back();
        for (const json& extent : shape) out.push_back(integer_of<std::int64_t>(extent, in_args, "Input Dims"));
      }
    }
    e.flops = integer_or<std::uint64_t>(args, "flops", 0, in_args);
    e.bytes = integer_or<std::uint64_t>(args, "bytes", 0, in_args);
    batch.events.push_back(std::move(e));
  }
  profiler::TraceWindow window;
  window.end_ns = window_end;
  const Where top{origin};
  window.wall_clock_at_start_ns = integer_or<std::int64_t>(root, "baseTimeNanoseconds", 0, top);
  batch.dropped = integer_or<std::uint64_t>(root, "dropped_events", 0, top);
  if (auto found = root.find("profile_memory"); found != root.end()) {
    SIGHTLINE_CHECK(found->is_boolean(), "{} must be true or false", top("profile_memory"));
    window.profile_memory = found->get<bool>();
  }
  if (auto found = root.find("sightlineNotes"); found != root.end()) {  // what the profile left out and why
    SIGHTLINE_CHECK(found->is_array(), "{} must be an array of strings", top("sightlineNotes"));
    for (const json& note : *found) {
      SIGHTLINE_CHECK(note.is_string(), "{} must be an array of strings", top("sightlineNotes"));
      batch.notes.push_back(note.get<std::string>());
    }
  }
  return profiler::build_trace(profiler::Collection{}, {std::move(batch)}, window);
}

profiler::CollectedTrace trace_json_load(const std::string& path, const ProgressCallback& progress) {
  return trace_json_parse(read_text(path), path, progress);
}

}  // namespace sightline::analysis
