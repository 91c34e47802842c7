#include "server/profile_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

// Building the index of one profile (the second of its jobs, after reading trace.json with the one
// reader, formats/trace_reader.cpp): the runs merged in file order, times made relative (exact
// nanoseconds to microseconds at this edge), lanes ordered and nested, flows bound to the slices they
// belong to.
namespace sightline::server {

namespace fs = std::filesystem;
using LaneKey = formats::TraceLane;

namespace {

// trace.json times have three decimals of a microsecond; flow points bind within this tolerance.
constexpr double kTimeToleranceUs = 0.0005;

// One end of a flow ("s" or "f"), on the lane it was written on, its time relative to the origin.
struct FlowPoint {
  bool start = false;
  int64_t pid = 0;
  int64_t tid = 0;
  double ts_us = 0;
};

// One end of a flow as the file holds it: its category (a global name id), id and where it is.
struct FlowEnd {
  uint32_t category = 0;
  uint64_t id = 0;
  FlowPoint point;
};

// A time of the trace relative to the origin, in the index's microseconds.
double relative_us(int64_t ns, int64_t origin_ns) { return static_cast<double>(ns - origin_ns) / 1000.0; }

}  // namespace

// The runs of trace.json merged: lane metadata (later metadata wins), each lane's events, flow ends.
struct ProfileIndex::MergedTrace {
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<LaneKey, std::string> thread_names;
  std::map<LaneKey, int64_t> thread_sorts;
  std::map<LaneKey, std::vector<uint32_t>> lane_events;
  std::vector<FlowEnd> flow_ends;  // in file order (of a flow's ends written twice, the later one counts)
  std::map<LaneKey, uint32_t> lane_of;  // filled by build_lanes
};

// The background indexing of a partial index: the complete index it builds, or the error that ended it.
struct ProfileIndex::Completion {
  std::mutex mutex;
  std::condition_variable finished_changed;
  bool finished = false;                         // under mutex, as are the two below
  std::shared_ptr<const ProfileIndex> complete;  // set once, when finished without error
  std::optional<RequestError> error;
  uint64_t trace_bytes = 0;
  std::atomic<uint64_t> parsed_bytes{0};  // the reader's progress (formats::TraceReadOptions)
  std::atomic<bool> cancel{false};        // the partial index is being destroyed
  std::thread worker;
};

ProfileIndex::ProfileIndex() = default;

ProfileIndex::~ProfileIndex() {
  if (completion_ == nullptr) return;
  completion_->cancel = true;
  if (completion_->worker.joinable()) completion_->worker.join();
}

FirstViewOptions FirstViewOptions::from_environment() {
  FirstViewOptions options;
  if (const char* bytes = std::getenv("SIGHTLINE_FIRST_VIEW_BYTES"); bytes != nullptr && *bytes != '\0') {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(bytes, &end, 10);
    if (end != nullptr && *end == '\0') {
      options.first_view_bytes = static_cast<size_t>(value);
      options.min_trace_bytes = static_cast<size_t>(value) * 4;
    }
  }
  if (const char* gate = std::getenv("SIGHTLINE_FIRST_VIEW_GATE"); gate != nullptr) options.gate = gate;
  return options;
}

std::shared_ptr<const ProfileIndex> ProfileIndex::load(const fs::path& dir, const IndexOptions& options,
                                                       const FirstViewOptions& first_view) {
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
  if (!index->parse_first_view(dir / trace_file, options, first_view)) index->parse_trace(dir / trace_file, options);
  return index;
}

void validate_trace_file(const fs::path& trace_path, const std::string& origin, size_t run_bytes) {
  try {
    formats::validate_trace_file(trace_path, origin, run_bytes);
  } catch (const formats::TraceReadError& error) {
    throw RequestError(422, error.what());
  }
}

void ProfileIndex::parse_trace(const fs::path& trace_path, const IndexOptions& options) {
  const std::string origin = (dir_.filename() / trace_path.filename()).string();
  std::vector<formats::TraceRun> runs;
  try {
    if (trace_file_ == nullptr) trace_file_ = std::make_shared<const formats::MappedTrace>(trace_path);
    runs = formats::read_trace(*trace_file_, origin, options);
  } catch (const formats::TraceReadError& error) {
    throw RequestError(422, error.what());
  }
  table_from_runs(runs, origin);
  index_runs(runs);
}

void ProfileIndex::index_runs(std::vector<formats::TraceRun>& runs) {
  MergedTrace merged;
  merge_runs(runs, merged);
  build_lanes(merged);
  bind_flows(merged);
}

// A large trace: its first runs indexed now (this index, partial), the whole file on a thread of its
// own that runs the reader's threads, published when done (after the test gate, when one is set).
// False when the file is small or its first runs cannot be read on their own: the caller then indexes
// the whole file, which also gives the exact error of a damaged one.
bool ProfileIndex::parse_first_view(const fs::path& trace_path, const IndexOptions& options,
                                    const FirstViewOptions& first_view) {
  std::error_code size_error;
  const uintmax_t size = fs::file_size(trace_path, size_error);
  if (first_view.first_view_bytes == 0 || size_error ||
      size < std::max<uintmax_t>(first_view.min_trace_bytes, uintmax_t{2} * first_view.first_view_bytes)) {
    return false;
  }
  try {
    trace_file_ = std::make_shared<const formats::MappedTrace>(trace_path);
  } catch (const formats::TraceReadError&) {
    return false;
  }
  size_t covered = 0;
  std::vector<formats::TraceRun> runs = formats::read_trace_prefix(*trace_file_, options, first_view.first_view_bytes, covered);
  if (runs.empty()) return false;
  index_runs(runs);
  indexed_bytes_ = covered;
  completion_ = std::make_unique<Completion>();
  completion_->trace_bytes = trace_file_->size();
  Completion* completion = completion_.get();
  auto full = std::make_shared<ProfileIndex>();
  full->dir_ = dir_;
  full->manifest_ = manifest_;
  full->trace_file_ = trace_file_;  // the same mapping: read-only, shared
  completion->worker = std::thread([completion, full = std::move(full), trace_path, options, gate = first_view.gate]() mutable {
    IndexOptions read = options;
    read.parsed_bytes = &completion->parsed_bytes;
    read.cancel = &completion->cancel;
    std::optional<RequestError> failure;
    try {
      full->parse_trace(trace_path, read);
    } catch (const RequestError& error) {
      failure = error;
    } catch (const std::exception& error) {
      failure = RequestError(500, fmt::format("indexing '{}' failed: {}", trace_path.filename().string(), error.what()));
    }
    if (!gate.empty()) {
      std::error_code missing;
      while (!completion->cancel && !fs::exists(gate, missing)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lock(completion->mutex);
    if (failure) {
      completion->error = std::move(failure);
    } else {
      completion->complete = std::move(full);
    }
    completion->finished = true;
    completion->finished_changed.notify_all();
  });
  return true;
}

const ProfileIndex* ProfileIndex::completed() const {
  if (completion_ == nullptr) return this;
  std::lock_guard lock(completion_->mutex);
  if (completion_->error) throw *completion_->error;
  return completion_->complete.get();
}

const ProfileIndex& ProfileIndex::current() const {
  const ProfileIndex* complete = completed();
  return complete != nullptr ? *complete : *this;
}

bool ProfileIndex::complete() const { return completed() != nullptr; }

void ProfileIndex::wait_complete() const {
  if (completion_ == nullptr) return;
  std::unique_lock lock(completion_->mutex);
  completion_->finished_changed.wait(lock, [&] { return completion_->finished; });
  if (completion_->error) throw *completion_->error;
}

nlohmann::json ProfileIndex::status_json() const {
  const uint64_t total = completion_->trace_bytes;
  const uint64_t parsed = std::min(total, completion_->parsed_bytes.load());
  return {{"complete", false},
          {"progress",
           {{"first_view_bytes", indexed_bytes_},
            {"indexed_bytes", parsed},
            {"trace_bytes", total},
            {"fraction", total == 0 ? 0.0 : static_cast<double>(parsed) / static_cast<double>(total)}}}};
}

// Names get their ids in order of first appearance; each run is freed as soon as it is merged. Times
// become relative to the earliest event: trace.json holds host-clock times (about 1e15 ns), where a
// double of microseconds keeps only about a nanosecond, too coarse for zooming into one instruction.
void ProfileIndex::merge_runs(std::vector<formats::TraceRun>& chunks, MergedTrace& merged) {
  std::unordered_map<std::string, uint32_t> name_ids;
  size_t total_events = 0, total_flow_points = 0;
  bool any_event = false;
  for (const formats::TraceRun& chunk : chunks) {
    total_events += chunk.slices.size();
    total_flow_points += chunk.flow_points.size();
    for (const formats::TraceSlice& slice : chunk.slices) {
      origin_ns_ = any_event ? std::min(origin_ns_, slice.ts_ns) : slice.ts_ns;
      any_event = true;
    }
  }
  origin_us_ = static_cast<double>(origin_ns_) / 1000.0;
  events_.reserve(total_events);
  merged.flow_ends.reserve(total_flow_points);
  for (formats::TraceRun& chunk : chunks) {
    std::vector<uint32_t> global(chunk.names.size());
    for (size_t i = 0; i < chunk.names.size(); ++i) {
      auto [it, inserted] = name_ids.emplace(chunk.names[i], static_cast<uint32_t>(names_.size()));
      if (inserted) names_.push_back(chunk.names[i]);
      global[i] = it->second;
    }
    for (size_t i = 0; i < chunk.slices.size(); ++i) {
      const formats::TraceSlice& slice = chunk.slices[i];
      TraceEvent event;
      event.ts_us = relative_us(slice.ts_ns, origin_ns_);
      event.dur_us = static_cast<double>(slice.dur_ns) / 1000.0;
      event.name = global[slice.name];
      event.category = global[slice.category];
      event.external_id = static_cast<int64_t>(slice.external_id);
      event.correlation = static_cast<int64_t>(slice.correlation);
      event.args_offset = slice.args_offset;
      event.args_bytes = slice.args_bytes;
      merged.lane_events[chunk.slice_lanes[i]].push_back(static_cast<uint32_t>(events_.size()));
      events_.push_back(event);
    }
    for (auto& [pid, name] : chunk.process_names) merged.process_names.insert_or_assign(pid, std::move(name));
    for (auto& [pid, sort] : chunk.process_sorts) merged.process_sorts.insert_or_assign(pid, sort);
    for (auto& [key, name] : chunk.thread_names) merged.thread_names.insert_or_assign(key, std::move(name));
    for (auto& [key, sort] : chunk.thread_sorts) merged.thread_sorts.insert_or_assign(key, sort);
    for (const auto& [category, id, point] : chunk.flow_points) {
      const FlowPoint relative{point.start, point.lane.first, point.lane.second, relative_us(point.ts_ns, origin_ns_)};
      merged.flow_ends.push_back({global[category], id, relative});
    }
    chunk = formats::TraceRun{};
  }
}

// Lanes in the order the metadata asks for (process sort index, then thread sort index), each lane's
// events by start (longer first) with their nesting depth.
void ProfileIndex::build_lanes(MergedTrace& merged) {
  std::vector<LaneKey> keys;
  for (const auto& [key, ids] : merged.lane_events) keys.push_back(key);
  for (const auto& [key, name] : merged.thread_names) {
    if (!merged.lane_events.contains(key)) keys.push_back(key);
  }
  auto sort_key = [&](const LaneKey& key) {
    auto ps = merged.process_sorts.find(key.first);
    auto ts = merged.thread_sorts.find(key);
    return std::tuple(ps == merged.process_sorts.end() ? key.first : ps->second, key.first,
                      ts == merged.thread_sorts.end() ? key.second : ts->second, key.second);
  };
  std::sort(keys.begin(), keys.end(), [&](const LaneKey& a, const LaneKey& b) { return sort_key(a) < sort_key(b); });
  bool first_event = true;
  for (const LaneKey& key : keys) {
    Lane lane;
    lane.pid = key.first;
    lane.tid = key.second;
    lane.process_sort = std::get<0>(sort_key(key));
    lane.thread_sort = std::get<2>(sort_key(key));
    if (auto it = merged.thread_names.find(key); it != merged.thread_names.end()) {
      lane.name = it->second;
    } else {
      auto process = merged.process_names.find(key.first);
      const std::string prefix =
          process == merged.process_names.end() ? fmt::format("PID:{}", key.first) : process->second;
      lane.name = fmt::format("{}/TID:{}", prefix, key.second);
    }
    lane.layer = profiler::parse_lane_name(lane.name).layer;
    const auto lane_id = static_cast<uint32_t>(lanes_.size());
    merged.lane_of[key] = lane_id;
    if (auto it = merged.lane_events.find(key); it != merged.lane_events.end()) lane.events = std::move(it->second);
    // The exporter writes each lane's events in this order already, so the sort is usually a check;
    // events with the same start and duration stay in file order.
    auto before = [&](uint32_t a, uint32_t b) {
      const TraceEvent& x = events_[a];
      const TraceEvent& y = events_[b];
      return x.ts_us != y.ts_us ? x.ts_us < y.ts_us : x.dur_us > y.dur_us;
    };
    if (!std::is_sorted(lane.events.begin(), lane.events.end(), before)) {
      std::stable_sort(lane.events.begin(), lane.events.end(), before);
    }
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
}

// Each flow with both ends binds to the innermost slice at each end. Flows in (category, id) order, so
// flow ids are stable from one load to the next; categories are few: ranked by name once.
void ProfileIndex::bind_flows(MergedTrace& merged) {
  std::vector<uint32_t> categories;
  for (const FlowEnd& end : merged.flow_ends) categories.push_back(end.category);
  std::sort(categories.begin(), categories.end());
  categories.erase(std::unique(categories.begin(), categories.end()), categories.end());
  std::sort(categories.begin(), categories.end(), [&](uint32_t a, uint32_t b) { return names_[a] < names_[b]; });
  std::vector<uint32_t> category_rank(names_.size());
  for (uint32_t i = 0; i < categories.size(); ++i) category_rank[categories[i]] = i;
  // The ends of one flow become neighbours, still in file order among themselves (a stable sort): a
  // flow is the last "s" and the last "f" written with its (category, id).
  std::vector<FlowEnd>& ends = merged.flow_ends;
  std::stable_sort(ends.begin(), ends.end(), [&](const FlowEnd& a, const FlowEnd& b) {
    const uint32_t rank_a = category_rank[a.category], rank_b = category_rank[b.category];
    return rank_a != rank_b ? rank_a < rank_b : a.id < b.id;
  });
  for (size_t first = 0; first < ends.size();) {
    size_t last = first;
    const FlowPoint* from = nullptr;
    const FlowPoint* to = nullptr;
    for (; last < ends.size() && ends[last].category == ends[first].category && ends[last].id == ends[first].id; ++last) {
      (ends[last].point.start ? from : to) = &ends[last].point;
    }
    const uint32_t category = ends[first].category;
    first = last;
    if (from == nullptr || to == nullptr) continue;
    auto from_lane = merged.lane_of.find({from->pid, from->tid});
    auto to_lane = merged.lane_of.find({to->pid, to->tid});
    if (from_lane == merged.lane_of.end() || to_lane == merged.lane_of.end()) continue;
    auto from_event = enclosing_event(from_lane->second, from->ts_us);
    auto to_event = enclosing_event(to_lane->second, to->ts_us);
    if (from_event && to_event) flows_.push_back({names_[category], *from_event, *to_event});
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

}  // namespace sightline::server
