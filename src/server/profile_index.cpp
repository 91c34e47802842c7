#include "server/profile_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "device/isa.h"
#include "formats/neff.h"
#include "formats/ntff.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// trace.json times have three decimals of a microsecond; flow points bind within this tolerance.
constexpr double kTimeToleranceUs = 0.0005;

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw RequestError(422, fmt::format("profile file '{}' cannot be opened", path.filename().string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> integer_field(const json& event, const char* key) {
  auto it = event.find(key);
  if (it == event.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned()) return static_cast<int64_t>(it->get<uint64_t>());
  return std::nullopt;
}

std::optional<double> number_field(const json& event, const char* key) {
  auto it = event.find(key);
  if (it == event.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_hardware_lane(const Lane& lane) { return lane.name.find("_hw/") != std::string::npos; }
bool is_framework_lane(const Lane& lane) { return lane.name.find("/framework/") != std::string::npos; }

std::optional<uint64_t> parse_neff_hash(std::string_view neff) {
  if (neff.starts_with("neff_")) neff.remove_prefix(5);
  if (neff.ends_with(".neff")) neff.remove_suffix(5);
  if (neff.size() != 16) return std::nullopt;
  uint64_t hash = 0;
  auto [end, error] = std::from_chars(neff.data(), neff.data() + neff.size(), hash, 16);
  if (error != std::errc{} || end != neff.data() + neff.size()) return std::nullopt;
  return hash;
}

std::string engine_row_name(device::Engine engine) {
  switch (engine) {
    case device::Engine::tensor:
      return "Tensor";
    case device::Engine::vector:
      return "Vector";
    case device::Engine::scalar:
      return "Scalar";
    case device::Engine::gpsimd:
      return "GpSimd";
    case device::Engine::dma:
      return "DMA";
  }
  return "DMA";
}

struct FlowPoint {
  bool start = false;
  int64_t pid = 0;
  int64_t tid = 0;
  double ts_us = 0;
};

}  // namespace

std::shared_ptr<const ProfileIndex> ProfileIndex::load(const fs::path& dir) {
  auto index = std::make_shared<ProfileIndex>();
  index->dir_ = dir;
  if (!fs::is_directory(dir)) {
    throw RequestError(404, fmt::format("profile '{}' is not a directory", dir.filename().string()));
  }
  try {
    index->manifest_ = formats::manifest_load(dir.string());
  } catch (const std::exception& error) {
    throw RequestError(422,
                       fmt::format("profile '{}' is malformed: {}", dir.filename().string(), error.what()));
  }
  std::string trace_file = "trace.json";
  for (const formats::ManifestFile& file : index->manifest_.files) {
    if (file.kind == formats::ManifestFileKind::trace) trace_file = file.path;
  }
  index->parse_trace(dir / trace_file);
  return index;
}

void ProfileIndex::parse_trace(const fs::path& trace_path) {
  const std::string origin = (dir_.filename() / trace_path.filename()).string();
  json document;
  try {
    document = json::parse(read_text_file(trace_path));
  } catch (const json::parse_error& error) {
    throw RequestError(422, fmt::format("profile file '{}' is not valid JSON: {}", origin, error.what()));
  }
  const json* trace_events = nullptr;
  if (document.is_object() && document.contains("traceEvents") && document["traceEvents"].is_array()) {
    trace_events = &document["traceEvents"];
  } else if (document.is_array()) {
    trace_events = &document;
  } else {
    throw RequestError(422, fmt::format("profile file '{}' has no traceEvents array", origin));
  }

  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::map<std::pair<int64_t, int64_t>, int64_t> thread_sorts;
  std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> lane_events;
  std::map<std::pair<std::string, uint64_t>, std::pair<std::optional<FlowPoint>, std::optional<FlowPoint>>>
      flow_points;
  std::unordered_map<std::string, uint32_t> name_ids;
  auto name_id = [&](const std::string& text) {
    auto [it, inserted] = name_ids.emplace(text, static_cast<uint32_t>(names_.size()));
    if (inserted) names_.push_back(text);
    return it->second;
  };

  for (const json& event : *trace_events) {
    if (!event.is_object()) continue;
    const std::string phase = event.value("ph", "");
    const auto pid = integer_field(event, "pid");
    const auto tid = integer_field(event, "tid");
    if (!pid || !tid) continue;
    if (phase == "M") {
      const std::string name = event.value("name", "");
      const json args = event.value("args", json::object());
      if (name == "process_name" && args.contains("name") && args["name"].is_string()) {
        process_names[*pid] = args["name"].get<std::string>();
      } else if (name == "thread_name" && args.contains("name") && args["name"].is_string()) {
        thread_names[{*pid, *tid}] = args["name"].get<std::string>();
      } else if (name == "process_sort_index" && args.contains("sort_index") &&
                 args["sort_index"].is_number()) {
        process_sorts[*pid] = args["sort_index"].get<int64_t>();
      } else if (name == "thread_sort_index" && args.contains("sort_index") &&
                 args["sort_index"].is_number()) {
        thread_sorts[{*pid, *tid}] = args["sort_index"].get<int64_t>();
      }
    } else if (phase == "X") {
      const auto ts = number_field(event, "ts");
      const auto dur = number_field(event, "dur");
      if (!ts || !dur || *dur < 0) {
        throw RequestError(422,
                           fmt::format("profile file '{}': a complete event without a valid ts/dur", origin));
      }
      TraceEvent parsed;
      parsed.ts_us = *ts;
      parsed.dur_us = *dur;
      parsed.name = name_id(event.value("name", ""));
      parsed.category = name_id(event.value("cat", ""));
      if (auto args = event.find("args"); args != event.end() && args->is_object()) {
        parsed.args_json = args->dump();
        parsed.external_id = integer_field(*args, "External id").value_or(0);
        parsed.correlation = integer_field(*args, "correlation").value_or(0);
      }
      events_.push_back(std::move(parsed));
      lane_events[{*pid, *tid}].push_back(static_cast<uint32_t>(events_.size() - 1));
    } else if (phase == "s" || phase == "f") {
      const auto id = integer_field(event, "id");
      const auto ts = number_field(event, "ts");
      if (!id || !ts) continue;
      auto& ends = flow_points[{event.value("cat", ""), static_cast<uint64_t>(*id)}];
      (phase == "s" ? ends.first : ends.second) = FlowPoint{phase == "s", *pid, *tid, *ts};
    }
  }

  // Times become relative to the earliest event: trace.json holds host-clock microseconds (about 1e12),
  // where a double keeps only about a nanosecond, too coarse for zooming into one instruction.
  if (!events_.empty()) {
    origin_us_ = events_.front().ts_us;
    for (const TraceEvent& event : events_) origin_us_ = std::min(origin_us_, event.ts_us);
    for (TraceEvent& event : events_) event.ts_us -= origin_us_;
    for (auto& [key, ends] : flow_points) {
      if (ends.first) ends.first->ts_us -= origin_us_;
      if (ends.second) ends.second->ts_us -= origin_us_;
    }
  }

  // Lanes in the order the metadata asks for: process sort index, then thread sort index.
  std::vector<std::pair<int64_t, int64_t>> keys;
  for (const auto& [key, ids] : lane_events) keys.push_back(key);
  for (const auto& [key, name] : thread_names) {
    if (!lane_events.contains(key)) keys.push_back(key);
  }
  auto sort_key = [&](const std::pair<int64_t, int64_t>& key) {
    auto ps = process_sorts.find(key.first);
    auto ts = thread_sorts.find(key);
    return std::tuple(ps == process_sorts.end() ? key.first : ps->second, key.first,
                      ts == thread_sorts.end() ? key.second : ts->second, key.second);
  };
  std::sort(keys.begin(), keys.end(),
            [&](const auto& a, const auto& b) { return sort_key(a) < sort_key(b); });
  std::map<std::pair<int64_t, int64_t>, uint32_t> lane_of;
  bool first_event = true;
  for (const auto& key : keys) {
    Lane lane;
    lane.pid = key.first;
    lane.tid = key.second;
    lane.process_sort = std::get<0>(sort_key(key));
    lane.thread_sort = std::get<2>(sort_key(key));
    if (auto it = thread_names.find(key); it != thread_names.end()) {
      lane.name = it->second;
    } else {
      auto process = process_names.find(key.first);
      const std::string prefix =
          process == process_names.end() ? fmt::format("PID:{}", key.first) : process->second;
      lane.name = fmt::format("{}/TID:{}", prefix, key.second);
    }
    const uint32_t lane_id = static_cast<uint32_t>(lanes_.size());
    lane_of[key] = lane_id;
    if (auto it = lane_events.find(key); it != lane_events.end()) lane.events = std::move(it->second);
    std::sort(lane.events.begin(), lane.events.end(), [&](uint32_t a, uint32_t b) {
      const TraceEvent& x = events_[a];
      const TraceEvent& y = events_[b];
      return x.ts_us != y.ts_us ? x.ts_us < y.ts_us : x.dur_us > y.dur_us;
    });
    // Nesting depth: a stack of the end times of the enclosing events.
    std::vector<double> open_ends;
    for (uint32_t id : lane.events) {
      TraceEvent& event = events_[id];
      event.lane = lane_id;
      while (!open_ends.empty() && event.ts_us >= open_ends.back() - kTimeToleranceUs) open_ends.pop_back();
      event.depth = static_cast<uint32_t>(open_ends.size());
      open_ends.push_back(event.ts_us + event.dur_us);
      lane.max_dur_us = std::max(lane.max_dur_us, event.dur_us);
      lane.max_depth = std::max(lane.max_depth, event.depth);
      start_us_ = first_event ? event.ts_us : std::min(start_us_, event.ts_us);
      end_us_ = first_event ? event.ts_us + event.dur_us : std::max(end_us_, event.ts_us + event.dur_us);
      first_event = false;
    }
    lanes_.push_back(std::move(lane));
  }

  for (const auto& [key, ends] : flow_points) {
    if (!ends.first || !ends.second) continue;
    auto from_lane = lane_of.find({ends.first->pid, ends.first->tid});
    auto to_lane = lane_of.find({ends.second->pid, ends.second->tid});
    if (from_lane == lane_of.end() || to_lane == lane_of.end()) continue;
    auto from = enclosing_event(from_lane->second, ends.first->ts_us);
    auto to = enclosing_event(to_lane->second, ends.second->ts_us);
    if (from && to) flows_.push_back({key.first, *from, *to});
  }
}

std::optional<uint32_t> ProfileIndex::enclosing_event(uint32_t lane_id, double ts_us) const {
  const Lane& lane = lanes_[lane_id];
  auto after = std::upper_bound(lane.events.begin(), lane.events.end(), ts_us + kTimeToleranceUs,
                                [&](double ts, uint32_t id) { return ts < events_[id].ts_us; });
  std::optional<uint32_t> best;
  for (auto it = after; it != lane.events.begin();) {
    --it;
    const TraceEvent& event = events_[*it];
    if (event.ts_us < ts_us - lane.max_dur_us - kTimeToleranceUs) break;
    if (event.ts_us + event.dur_us + kTimeToleranceUs < ts_us) continue;
    if (!best || event.depth > events_[*best].depth) best = *it;
  }
  return best;
}

nlohmann::json ProfileIndex::lanes_json() const {
  json lanes = json::array();
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const Lane& lane = lanes_[i];
    lanes.push_back({{"id", i},
                     {"name", lane.name},
                     {"pid", lane.pid},
                     {"tid", lane.tid},
                     {"events", lane.events.size()},
                     {"max_depth", lane.max_depth}});
  }
  return {{"start", start_us_},
          {"end", end_us_},
          {"origin_us", origin_us_},
          {"lanes", lanes},
          {"flows", flows_.size()}};
}

nlohmann::json ProfileIndex::window(const WindowQuery& query) const {
  if (!(query.end_us > query.start_us)) throw RequestError(400, "window end must be greater than its start");
  if (query.width_px == 0 || query.width_px > 100000) {
    throw RequestError(400, "window width must be between 1 and 100000 pixels");
  }
  const double pixel_us = (query.end_us - query.start_us) / query.width_px;
  std::vector<uint32_t> lane_ids = query.lanes;
  if (lane_ids.empty()) {
    for (uint32_t i = 0; i < lanes_.size(); ++i) lane_ids.push_back(i);
  }
  json result_lanes = json::array();
  size_t event_count = 0, merged_count = 0;
  for (uint32_t lane_id : lane_ids) {
    if (lane_id >= lanes_.size()) throw RequestError(400, fmt::format("lane {} does not exist", lane_id));
    const Lane& lane = lanes_[lane_id];
    json visible = json::array();
    json merged = json::array();
    struct Aggregate {
      double start = 0, end = 0;
      uint32_t count = 0, first = 0;
      bool one_name = true;
    };
    std::vector<Aggregate> open(lane.max_depth + 1);
    auto emit_event = [&](uint32_t id) {
      const TraceEvent& event = events_[id];
      visible.push_back({{"id", id},
                         {"ts", event.ts_us},
                         {"dur", event.dur_us},
                         {"depth", event.depth},
                         {"name", names_[event.name]}});
    };
    auto flush = [&](uint32_t depth) {
      Aggregate& box = open[depth];
      if (box.count == 1) emit_event(box.first);
      if (box.count > 1) {
        json entry = {
            {"ts", box.start}, {"dur", box.end - box.start}, {"depth", depth}, {"count", box.count}};
        entry["name"] = box.one_name ? names_[events_[box.first].name] : fmt::format("{} events", box.count);
        merged.push_back(std::move(entry));
      }
      box.count = 0;
    };
    auto first = std::lower_bound(lane.events.begin(), lane.events.end(), query.start_us - lane.max_dur_us,
                                  [&](uint32_t id, double ts) { return events_[id].ts_us < ts; });
    for (auto it = first; it != lane.events.end(); ++it) {
      const TraceEvent& event = events_[*it];
      if (event.ts_us > query.end_us) break;
      if (event.ts_us + event.dur_us < query.start_us) continue;
      if (event.dur_us >= pixel_us) {
        emit_event(*it);
        continue;
      }
      Aggregate& box = open[event.depth];
      if (box.count > 0 && event.ts_us > box.end + pixel_us) flush(event.depth);
      if (box.count == 0) {
        box = {event.ts_us, event.ts_us + event.dur_us, 1, *it, true};
      } else {
        box.end = std::max(box.end, event.ts_us + event.dur_us);
        box.one_name = box.one_name && events_[box.first].name == event.name;
        ++box.count;
      }
    }
    for (uint32_t depth = 0; depth < open.size(); ++depth) flush(depth);
    event_count += visible.size();
    merged_count += merged.size();
    result_lanes.push_back(
        {{"lane", lane_id}, {"events", std::move(visible)}, {"merged", std::move(merged)}});
  }
  return {{"start", query.start_us}, {"end", query.end_us},        {"pixel_us", pixel_us},
          {"lanes", result_lanes},   {"event_count", event_count}, {"merged_count", merged_count}};
}

nlohmann::json ProfileIndex::event_summary(uint32_t id) const {
  const TraceEvent& event = events_[id];
  return {{"id", id},
          {"name", names_[event.name]},
          {"cat", names_[event.category]},
          {"lane", event.lane},
          {"lane_name", lanes_[event.lane].name},
          {"ts", event.ts_us},
          {"dur", event.dur_us},
          {"depth", event.depth}};
}

nlohmann::json ProfileIndex::event_details(uint32_t id) const {
  if (id >= events_.size()) throw RequestError(404, fmt::format("event {} does not exist", id));
  json details = event_summary(id);
  details["args"] = events_[id].args_json.empty() ? json::object() : json::parse(events_[id].args_json);
  json upstream = json::array(), downstream = json::array();
  for (const Flow& flow : flows_) {
    if (flow.to == id) upstream.push_back({{"category", flow.category}, {"event", event_summary(flow.from)}});
    if (flow.from == id)
      downstream.push_back({{"category", flow.category}, {"event", event_summary(flow.to)}});
  }
  details["flows_in"] = std::move(upstream);
  details["flows_out"] = std::move(downstream);
  // Hardware events of the same launch: the ac2g flow binds to the first one only.
  json launch = json::array();
  const TraceEvent& event = events_[id];
  if (event.correlation != 0 && is_hardware_lane(lanes_[event.lane])) {
    for (uint32_t other : lanes_[event.lane].events) {
      if (other != id && events_[other].correlation == event.correlation)
        launch.push_back(event_summary(other));
    }
  }
  details["same_launch"] = std::move(launch);
  return details;
}

nlohmann::json ProfileIndex::search(std::string_view text, size_t limit) const {
  if (text.empty()) throw RequestError(400, "search needs a non-empty q parameter");
  const std::string needle = lower(text);
  std::vector<bool> name_matches(names_.size());
  for (size_t i = 0; i < names_.size(); ++i)
    name_matches[i] = lower(names_[i]).find(needle) != std::string::npos;
  std::vector<uint32_t> hits;
  for (uint32_t id = 0; id < events_.size(); ++id) {
    if (name_matches[events_[id].name]) hits.push_back(id);
  }
  std::sort(hits.begin(), hits.end(), [&](uint32_t a, uint32_t b) {
    return events_[a].ts_us != events_[b].ts_us ? events_[a].ts_us < events_[b].ts_us : a < b;
  });
  json matches = json::array();
  for (size_t i = 0; i < hits.size() && i < limit; ++i) matches.push_back(event_summary(hits[i]));
  return {{"query", std::string(text)}, {"total", hits.size()}, {"matches", matches}};
}

nlohmann::json ProfileIndex::key_averages() const {
  // Device time per framework op: hardware events carry the "External id" of the op that caused them.
  std::unordered_map<int64_t, double> device_by_external_id;
  for (const Lane& lane : lanes_) {
    if (!is_hardware_lane(lane)) continue;
    for (uint32_t id : lane.events) {
      if (events_[id].external_id != 0) device_by_external_id[events_[id].external_id] += events_[id].dur_us;
    }
  }
  struct Row {
    uint64_t count = 0;
    double cpu_total = 0, self_cpu = 0, device_total = 0, self_device = 0;
  };
  std::map<std::string, Row> rows;
  for (const Lane& lane : lanes_) {
    if (!is_framework_lane(lane)) continue;
    // Walk the lane keeping the open ancestors; a child's time leaves its parent's self time.
    std::vector<uint32_t> stack;
    std::vector<double> self_cpu(lane.events.size()), self_device(lane.events.size()),
        device_total(lane.events.size());
    std::unordered_map<uint32_t, size_t> position;
    for (size_t i = 0; i < lane.events.size(); ++i) position[lane.events[i]] = i;
    std::vector<int64_t> parent(lane.events.size(), -1);
    for (size_t i = 0; i < lane.events.size(); ++i) {
      const TraceEvent& event = events_[lane.events[i]];
      while (!stack.empty() && events_[stack.back()].depth >= event.depth) stack.pop_back();
      if (!stack.empty()) parent[i] = static_cast<int64_t>(position[stack.back()]);
      stack.push_back(lane.events[i]);
      self_cpu[i] = event.dur_us;
      if (auto device = device_by_external_id.find(event.external_id);
          event.external_id != 0 && device != device_by_external_id.end()) {
        self_device[i] = device->second;
      }
      device_total[i] = self_device[i];
    }
    for (size_t i = lane.events.size(); i-- > 0;) {
      if (parent[i] < 0) continue;
      self_cpu[static_cast<size_t>(parent[i])] -= events_[lane.events[i]].dur_us;
      device_total[static_cast<size_t>(parent[i])] += device_total[i];
    }
    for (size_t i = 0; i < lane.events.size(); ++i) {
      Row& row = rows[names_[events_[lane.events[i]].name]];
      ++row.count;
      row.cpu_total += events_[lane.events[i]].dur_us;
      row.self_cpu += std::max(0.0, self_cpu[i]);
      row.self_device += self_device[i];
      row.device_total += device_total[i];
    }
  }
  json table = json::array();
  double self_cpu_total = 0, self_device_total = 0;
  for (const auto& [name, row] : rows) {
    self_cpu_total += row.self_cpu;
    self_device_total += row.self_device;
    table.push_back({{"name", name},
                     {"count", row.count},
                     {"cpu_total_us", row.cpu_total},
                     {"self_cpu_us", row.self_cpu},
                     {"device_total_us", row.device_total},
                     {"self_device_us", row.self_device}});
  }
  return {{"source", "rebuilt from trace.json"},
          {"device", "NEURON"},
          {"rows", table},
          {"self_cpu_total_us", self_cpu_total},
          {"self_device_total_us", self_device_total}};
}

nlohmann::json ProfileIndex::device_execution(std::string_view neff, uint32_t core,
                                              std::optional<uint64_t> sequence) const {
  const auto hash = parse_neff_hash(neff);
  if (!hash) {
    throw RequestError(400,
                       fmt::format("neff '{}' is neither a 16-hex-digit hash nor neff_<hash>.neff", neff));
  }
  const formats::ManifestFile* ntff_file = nullptr;
  const formats::ManifestFile* neff_file = nullptr;
  for (const formats::ManifestFile& file : manifest_.files) {
    if (file.neff_hash != hash) continue;
    if (file.kind == formats::ManifestFileKind::ntff && file.core == core) ntff_file = &file;
    if (file.kind == formats::ManifestFileKind::neff) neff_file = &file;
  }
  if (!ntff_file || !neff_file) {
    throw RequestError(
        404,
        fmt::format("no instruction trace of executable {:016x} on core {} in this profile", *hash, core));
  }
  formats::NtffTrace trace;
  device::Executable executable;
  try {
    trace = formats::ntff_load((dir_ / ntff_file->path).string());
    executable = formats::neff_load((dir_ / neff_file->path).string());
  } catch (const std::exception& error) {
    throw RequestError(422, fmt::format("instruction trace unreadable: {}", error.what()));
  }
  if (trace.executions.empty()) throw RequestError(404, "the instruction trace holds no execution");
  const formats::NtffExecution* execution = &trace.executions.front();
  if (sequence) {
    auto it = std::find_if(trace.executions.begin(), trace.executions.end(),
                           [&](const formats::NtffExecution& e) { return e.seq == *sequence; });
    if (it == trace.executions.end()) {
      throw RequestError(
          404, fmt::format("execution with sequence {} was not captured on core {}", *sequence, core));
    }
    execution = &*it;
  }
  // One row per compute engine, then one per DMA queue that has records.
  std::map<std::pair<int, int>, json> rows;
  for (int engine = 0; engine < device::kComputeEngineCount; ++engine) {
    rows[{engine, 0}] = json::array();
  }
  for (const device::InstructionRecord& record : execution->records) {
    const bool dma = record.engine == device::Engine::dma;
    const std::pair<int, int> key{static_cast<int>(record.engine), dma ? record.queue : 0};
    auto& row = rows[key];
    if (row.is_null()) row = json::array();
    row.push_back(
        {{"start", record.start_ns},
         {"dur", record.end_ns - record.start_ns},
         {"op", record.source_op == device::kNoSourceOp ? -1 : static_cast<int64_t>(record.source_op)},
         {"opcode", std::string(device::opcode_name(record.opcode))},
         {"hbm_read", record.hbm_bytes_read},
         {"hbm_written", record.hbm_bytes_written},
         {"onchip", record.onchip_bytes_read + record.onchip_bytes_written},
         {"flops", record.flops},
         {"semaphore_wait", record.semaphore_wait_ns}});
  }
  json result_rows = json::array();
  for (auto& [key, records] : rows) {
    const auto engine = static_cast<device::Engine>(key.first);
    const std::string name =
        engine == device::Engine::dma ? fmt::format("DMA q{}", key.second) : engine_row_name(engine);
    result_rows.push_back({{"name", name},
                           {"engine", std::string(device::engine_name(engine))},
                           {"queue", key.second},
                           {"records", std::move(records)}});
  }
  return {{"neff", fmt::format("{:016x}", *hash)},
          {"executable", executable.name},
          {"core", core},
          {"sequence", execution->seq},
          {"correlation", execution->correlation},
          {"start_ns", execution->start_ns},
          {"duration_ns", execution->duration_ns},
          {"executions", trace.executions.size()},
          {"source_ops", executable.source_ops},
          {"rows", result_rows}};
}

}  // namespace sightline::server
