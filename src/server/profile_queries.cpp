#include "server/profile_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "profiler/lane_names.h"
#include "formats/trace_reader.h"

// The index's answers to the timeline (the third and fourth of its jobs): the lanes, a window of
// visible events with sub-pixel events merged into boxes, an event's details with its flows, and
// search by name.
namespace sightline::server {

using nlohmann::json;

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_hardware_lane(const Lane& lane) { return lane.layer == profiler::LaneLayer::hardware; }

// The lane name's parts, so that the Explorer groups and colours lanes without parsing names itself.
void add_lane_parts(json& out, std::string_view name) {
  const profiler::LaneName parts = profiler::parse_lane_name(name);
  out["layer"] = std::string(profiler::lane_layer_name(parts.layer));
  out["instance"] = std::string(parts.instance);
  out["process"] = std::string(parts.pid);
  out["subsystem"] = std::string(parts.subsystem);
  out["identifier"] = std::string(parts.identifier);
  if (parts.core) out["core"] = *parts.core;
}

// Consecutive sub-pixel events of one nesting depth, drawn as one box.
struct Aggregate {
  double start = 0, end = 0;
  uint32_t count = 0, first = 0;
  bool one_name = true;
};

}  // namespace

// Each answer from the complete index when it is built; from a partial one with its status added (the
// complete index is looked up once per answer, so an answer is all one index's).
nlohmann::json ProfileIndex::lanes_json() const {
  if (const ProfileIndex* complete = completed()) return complete->lanes_json_of();
  json answer = lanes_json_of();
  answer.update(status_json());
  return answer;
}

nlohmann::json ProfileIndex::window(const WindowQuery& query) const {
  if (const ProfileIndex* complete = completed()) return complete->window_of(query);
  json answer = window_of(query);
  answer.update(status_json());
  return answer;
}

nlohmann::json ProfileIndex::event_details(uint32_t id) const {
  if (const ProfileIndex* complete = completed()) return complete->event_details_of(id);
  json answer = event_details_of(id);
  answer.update(status_json());
  return answer;
}

nlohmann::json ProfileIndex::search(std::string_view text, size_t limit, size_t offset) const {
  if (const ProfileIndex* complete = completed()) return complete->search_of(text, limit, offset);
  json answer = search_of(text, limit, offset);
  answer.update(status_json());
  return answer;
}

nlohmann::json ProfileIndex::lanes_json_of() const {
  json lanes = json::array();
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const Lane& lane = lanes_[i];
    json entry = {{"id", i},
                  {"name", lane.name},
                  {"pid", lane.pid},
                  {"tid", lane.tid},
                  {"events", lane.events.size()},
                  {"max_depth", lane.max_depth}};
    add_lane_parts(entry, lane.name);
    lanes.push_back(std::move(entry));
  }
  return {{"start", start_us_},
          {"end", end_us_},
          {"origin_us", origin_us_},
          {"lanes", lanes},
          {"flows", flows_.size()}};
}

nlohmann::json ProfileIndex::window_of(const WindowQuery& query) const {
  if (!(query.end_us > query.start_us)) throw RequestError(400, "window end must be greater than its start");
  if (query.width_px == 0 || query.width_px > 100000) {
    throw RequestError(400, "window width must be between 1 and 100000 pixels");
  }
  const double pixel_us = (query.end_us - query.start_us) / query.width_px;
  // Each lane once, in the order first asked: repeating an id must not repeat the work.
  std::vector<uint32_t> lane_ids;
  std::vector<bool> listed(lanes_.size(), false);
  for (uint32_t lane_id : query.lanes) {
    if (lane_id >= lanes_.size()) throw RequestError(400, fmt::format("lane {} does not exist", lane_id));
    if (!listed[lane_id]) lane_ids.push_back(lane_id);
    listed[lane_id] = true;
  }
  if (lane_ids.empty()) {
    for (uint32_t i = 0; i < lanes_.size(); ++i) lane_ids.push_back(i);
  }
  json result_lanes = json::array();
  WindowCounts counts;
  for (uint32_t lane_id : lane_ids) result_lanes.push_back(lane_window(lane_id, query, pixel_us, counts));
  return {{"start", query.start_us}, {"end", query.end_us},           {"pixel_us", pixel_us},
          {"lanes", result_lanes},   {"event_count", counts.events}, {"merged_count", counts.merged}};
}

// One lane's part of a window: events at least a pixel wide as themselves, runs of narrower events of
// one depth as counted boxes. Refuses to grow the answer past query.max_entries.
nlohmann::json ProfileIndex::lane_window(uint32_t lane_id, const WindowQuery& query, double pixel_us,
                                         WindowCounts& counts) const {
  const Lane& lane = lanes_[lane_id];
  json visible = json::array();
  json merged = json::array();
  auto check_size = [&] {
    if (counts.events + counts.merged + visible.size() + merged.size() + 1 > query.max_entries) {
      throw RequestError(400, fmt::format("the window holds more than {} events and merged boxes; ask for a "
                                          "shorter time range, fewer lanes or a smaller width",
                                          query.max_entries));
    }
  };
  std::vector<Aggregate> open(lane.max_depth + 1);
  auto emit_event = [&](uint32_t id) {
    check_size();
    const TraceEvent& event = events_[id];
    visible.push_back(
        {{"id", id}, {"ts", event.ts_us}, {"dur", event.dur_us}, {"depth", event.depth}, {"name", names_[event.name]}});
  };
  auto flush = [&](uint32_t depth) {
    Aggregate& box = open[depth];
    if (box.count == 1) emit_event(box.first);
    if (box.count > 1) {
      check_size();
      json entry = {{"ts", box.start}, {"dur", box.end - box.start}, {"depth", depth}, {"count", box.count}};
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
  counts.events += visible.size();
  counts.merged += merged.size();
  return {{"lane", lane_id}, {"events", std::move(visible)}, {"merged", std::move(merged)}};
}

nlohmann::json ProfileIndex::event_summary(uint32_t id) const {
  const TraceEvent& event = events_[id];
  const Lane& lane = lanes_[event.lane];
  return {{"id", id},
          {"name", names_[event.name]},
          {"cat", names_[event.category]},
          {"lane", event.lane},
          {"lane_name", lane.name},
          {"layer", std::string(profiler::lane_layer_name(lane.layer))},
          {"ts", event.ts_us},
          {"dur", event.dur_us},
          {"depth", event.depth}};
}

std::string_view ProfileIndex::args_json(const TraceEvent& event) const {
  if (event.args_bytes == 0 || trace_file_ == nullptr) return {};
  return trace_file_->text(event.args_offset, event.args_bytes);
}

nlohmann::json ProfileIndex::event_details_of(uint32_t id) const {
  if (id >= events_.size()) throw RequestError(404, fmt::format("event {} does not exist", id));
  json details = event_summary(id);
  const std::string_view args = args_json(events_[id]);
  details["args"] = args.empty() ? json::object() : json::parse(args);
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

nlohmann::json ProfileIndex::search_of(std::string_view text, size_t limit, size_t offset) const {
  if (text.empty()) throw RequestError(400, "search needs a non-empty q parameter");
  const std::string needle = lower(text);
  std::vector<bool> name_matches(names_.size());
  for (size_t i = 0; i < names_.size(); ++i)
    name_matches[i] = lower(names_[i]).find(needle) != std::string::npos;
  std::vector<uint32_t> hits;
  for (uint32_t id = 0; id < events_.size(); ++id) {
    if (name_matches[events_[id].name]) hits.push_back(id);
  }
  // Only the page asked for is put in order: the matches before it are found (nth_element), not
  // sorted, so a first page of 200 among a 10M-event profile's 130,000 executions costs one pass.
  auto before = [&](uint32_t a, uint32_t b) {
    return events_[a].ts_us != events_[b].ts_us ? events_[a].ts_us < events_[b].ts_us : a < b;
  };
  const size_t first = std::min(offset, hits.size());
  const size_t last = first + std::min(limit, hits.size() - first);
  if (first > 0 && first < hits.size()) std::nth_element(hits.begin(), hits.begin() + first, hits.end(), before);
  std::partial_sort(hits.begin() + first, hits.begin() + last, hits.end(), before);
  json matches = json::array();
  for (size_t i = first; i < last; ++i) matches.push_back(event_summary(hits[i]));
  return {{"query", std::string(text)}, {"total", hits.size()}, {"offset", offset}, {"matches", matches}};
}

}  // namespace sightline::server
