#include "analysis/trace_json.h"

#include <charconv>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using nlohmann::json;
using profiler::DeviceType;
using profiler::EventKind;

// "1234.567" (microseconds, three decimals, as JsonWriter::fixed3 writes them) to exact nanoseconds.
bool parse_thousandths(std::string_view text, std::int64_t& out) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  const std::size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot), fraction = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if (whole.empty() || fraction.size() > 3) return false;
  std::int64_t w = 0, f = 0;
  if (std::from_chars(whole.data(), whole.data() + whole.size(), w).ptr != whole.data() + whole.size()) return false;
  if (!fraction.empty() &&
      std::from_chars(fraction.data(), fraction.data() + fraction.size(), f).ptr != fraction.data() + fraction.size()) {
    return false;
  }
  for (std::size_t i = fraction.size(); i < 3; ++i) f *= 10;
  out = (w * 1000 + f) * (negative ? -1 : 1);
  return true;
}

// The DOM builder of nlohmann, except that "ts" and "dur" become integer nanoseconds parsed from their
// text (see the header for why).
class ExactTimeSax {
 public:
  explicit ExactTimeSax(json& root) : dom_(root, true) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return time_key_ ? dom_.number_integer(v * 1000) : dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) {
    return time_key_ ? dom_.number_integer(static_cast<json::number_integer_t>(v) * 1000) : dom_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    std::int64_t ns = 0;
    if (time_key_ && parse_thousandths(text, ns)) return dom_.number_integer(ns);
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

template <typename T>
T field(const json& event, const char* key, const std::string& origin, std::size_t index) {
  auto found = event.find(key);
  SIGHTLINE_CHECK(found != event.end(), "{}: traceEvents[{}] has no \"{}\"; the trace is not one sightline "
                  "wrote, re-export it with export_chrome_trace", origin, index, key);
  try {
    return found->get<T>();
  } catch (const json::exception& e) {
    fail("{}: traceEvents[{}].{} has the wrong type ({}); re-export the trace", origin, index, key, e.what());
  }
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
  for (const json& event : events) {
    const std::string ph = event.value("ph", "");
    if (ph == "M" && event.value("name", "") == "process_name" && event.contains("args")) {
      process_names[event.value("pid", std::int64_t{0})] = event["args"].value("name", "");
    } else if (ph == "s" && event.value("cat", "") == "fwd") {
      fwd_flow_thread[event.value("id", std::uint64_t{0}) ^ kOpToRuntimeFlowBit] = event.value("tid", std::int64_t{0});
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
    SIGHTLINE_CHECK(event.is_object(), "{}: traceEvents[{}] is not an object", origin, i);
    const std::string ph = event.value("ph", "");
    if (ph == "i" && event.value("name", "") == "Record Window End") window_end = event.value("ts", std::int64_t{0});
    if (ph == "i" && event.value("name", "") == "[memory]") {
      const json empty = json::object();
      const json& args = event.contains("args") ? event["args"] : empty;
      profiler::MemoryEvent memory;
      memory.ts_ns = field<std::int64_t>(event, "ts", origin, i);
      memory.thread = field<std::int64_t>(event, "tid", origin, i);
      memory.bytes = field<std::int64_t>(args, "Bytes", origin, i);
      memory.address = args.value("Addr", std::uint64_t{0});
      memory.device_index = args.value("Device Id", -1);
      memory.total_allocated = args.value("Total Allocated", std::int64_t{0});
      memory.total_reserved = args.value("Total Reserved", std::int64_t{0});
      batch.memory.push_back(memory);
      continue;
    }
    if (ph != "X") continue;
    profiler::FunctionEvent e;
    const std::string category = field<std::string>(event, "cat", origin, i);
    SIGHTLINE_CHECK(kind_from_category(category, e.kind), "{}: traceEvents[{}] has unknown category \"{}\"",
                    origin, i, category);
    e.name = field<std::string>(event, "name", origin, i);
    e.start_ns = field<std::int64_t>(event, "ts", origin, i);
    e.end_ns = e.start_ns + field<std::int64_t>(event, "dur", origin, i);
    const std::int64_t pid = field<std::int64_t>(event, "pid", origin, i);
    const std::int64_t tid = field<std::int64_t>(event, "tid", origin, i);
    const json empty = json::object();
    const json& args = event.contains("args") ? event["args"] : empty;
    e.external_id = args.value("External id", std::uint64_t{0});
    e.id = profiler::opens_correlation(e.kind) ? e.external_id : args.value("correlation", std::uint64_t{0});
    e.device_type = profiler::is_device_kind(e.kind) ? DeviceType::privateuse1 : DeviceType::cpu;
    if (e.device_type == DeviceType::privateuse1) {
      e.device_index = args.value("device", -1);
      e.resource = args.value("stream", std::int64_t{0});
    } else if (e.kind == EventKind::runtime && process_is(pid, "_rt")) {
      e.device_index = static_cast<int>(tid);
      auto thread = fwd_flow_thread.find(e.id);
      e.thread = thread != fwd_flow_thread.end() ? thread->second : next_unknown_thread--;
    } else {
      e.thread = tid;
    }
    if (args.contains("Input Dims")) {
      e.input_shapes = args["Input Dims"].get<std::vector<std::vector<std::int64_t>>>();
    }
    e.flops = args.value("flops", std::uint64_t{0});
    e.bytes = args.value("bytes", std::uint64_t{0});
    batch.events.push_back(std::move(e));
  }
  profiler::TraceWindow window;
  window.end_ns = window_end;
  window.wall_clock_at_start_ns = root.value("baseTimeNanoseconds", std::int64_t{0});
  batch.dropped = root.value("dropped_events", std::uint64_t{0});
  window.profile_memory = root.value("profile_memory", false);
  return profiler::build_trace(profiler::Collection{}, {std::move(batch)}, window);
}

profiler::CollectedTrace trace_json_load(const std::string& path, const ProgressCallback& progress) {
  return trace_json_parse(read_text(path), path, progress);
}

}  // namespace sightline::analysis
