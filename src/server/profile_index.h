// The Explorer server's in-memory index of one profile output directory (docs/formats.md).
//
// Loading reads trace.json once through the one reader (formats/trace_reader.h: exact nanoseconds,
// large files read in runs on several threads) into per-lane arrays sorted by start time, binds the
// flow events ("s"/"f") to the slices they belong to, and keeps the manifest. Times here are
// microseconds relative to the earliest event, converted from the reader's nanoseconds at this edge
// (the JSON API and the Explorer speak microseconds). Queries answer the JSON API:
//
//   auto profile = ProfileIndex::load("/profiles/naive");
//   nlohmann::json visible = profile->window({.start_us = 0, .end_us = 500, .width_px = 1200});
//
// Windowed queries return only the events overlapping the range; events shorter than one pixel are
// merged per lane and nesting depth into aggregate boxes that carry how many events they stand for.
//
// The first view (FirstViewOptions): a large trace.json is first indexed only as far as its first
// runs of events, and load() returns that partial index at once while the reader's threads index the
// whole file in the background; every answer then comes from the complete index as soon as it is
// built. While partial, the answers of lanes, window, search and event details say so
// ("complete": false, "progress": {"indexed_bytes", "trace_bytes", "fraction"}); the operator table
// waits for the complete index. Event ids are the events' order in the file, so the partial index's
// ids are the complete index's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/device/executable.h"
#include "formats/manifest.h"
#include "formats/ntff.h"
#include "formats/trace_reader.h"
#include "profiler/lane_names.h"

namespace sightline::server {

// A request the server refuses: carries the HTTP status (4xx) and a message the UI shows.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

struct TraceEvent {
  double ts_us = 0;  // relative to the profile's earliest event
  double dur_us = 0;
  uint32_t name = 0;      // index into ProfileIndex names
  uint32_t category = 0;  // index into ProfileIndex names
  uint32_t lane = 0;
  uint32_t depth = 0;       // nesting level on its lane, 0 = outermost
  int64_t external_id = 0;  // args "External id": the framework op that caused it (0: none)
  int64_t correlation = 0;  // args "correlation": the launch it belongs to (0: none)
  uint64_t args_offset = 0;  // the event's "args" object: where its JSON text is in trace.json
  uint32_t args_bytes = 0;   // and how long it is (0: no args); ProfileIndex::args_json reads it
};

struct Lane {
  std::string name;  // instance/PID/subsystem/identifier, from the thread_name metadata
  profiler::LaneLayer layer = profiler::LaneLayer::other;  // the name's layer, parsed once (lane_names.h)
  int64_t pid = 0;
  int64_t tid = 0;
  int64_t process_sort = 0;
  int64_t thread_sort = 0;
  std::vector<uint32_t> events;  // event ids sorted by start, then by longer first
  double max_dur_us = 0;
  uint32_t max_depth = 0;
};

struct Flow {
  std::string category;  // "fwd" (framework op -> runtime call) or "ac2g" (runtime call -> hardware)
  uint32_t from = 0;     // event id of the "s" end
  uint32_t to = 0;       // event id of the "f" end
};

// The most events plus merged boxes one window answer holds (about 100 bytes of JSON each): a larger
// answer is refused with a message saying how to ask for less, rather than built.
inline constexpr size_t kMaxWindowEntries = 250'000;

struct WindowQuery {
  double start_us = 0;
  double end_us = 0;
  std::vector<uint32_t> lanes;  // empty: every lane; a lane listed twice is answered once
  uint32_t width_px = 1000;
  size_t max_entries = kMaxWindowEntries;
};

// How trace.json is read (formats::TraceReadOptions: runs of whole events on several threads).
using IndexOptions = formats::TraceReadOptions;

// When load() answers before the whole trace is indexed. A trace.json of at least min_trace_bytes is
// first indexed as far as its first runs of about first_view_bytes (formats::read_trace_prefix),
// which hold the earliest executions the Explorer's first view shows and, as the exporter writes
// them, every lane's metadata; the rest is indexed in the background.
struct FirstViewOptions {
  size_t first_view_bytes = size_t{16} << 20;  // 0: index the whole file before answering
  size_t min_trace_bytes = size_t{64} << 20;   // smaller files are indexed whole before answering
  // A test hook: the complete index is published only once this file exists (checked every 10 ms),
  // so a test sees the partial index for as long as it needs, whatever the machine's speed.
  std::filesystem::path gate{};

  // The defaults, or the environment's: SIGHTLINE_FIRST_VIEW_BYTES (first_view_bytes, with
  // min_trace_bytes four times it; 0 turns the first view off) and SIGHTLINE_FIRST_VIEW_GATE (gate).
  static FirstViewOptions from_environment();
};

// formats::validate_trace_file (every check ProfileIndex::load makes, with bounded memory: uploads
// are validated with it), its TraceReadError as RequestError(422).
void validate_trace_file(const std::filesystem::path& trace_path, const std::string& origin,
                         size_t run_bytes = size_t{1} << 20);

// The index's jobs, one file each: reading trace.json (the one reader, formats/trace_reader.cpp),
// building lanes and flows (profile_index.cpp), answering the timeline (profile_queries.cpp) and
// summarizing (profile_summaries.cpp).
class ProfileIndex {
 public:
  // Throws RequestError(422) naming the file and what is wrong when the directory is not a profile.
  // A large trace may come back partial (FirstViewOptions); an error in the part indexed later is
  // then what every answer throws (RequestError 422) once the background index has failed.
  static std::shared_ptr<const ProfileIndex> load(const std::filesystem::path& dir,
                                                  const IndexOptions& options = {},
                                                  const FirstViewOptions& first_view = FirstViewOptions::from_environment());
  ProfileIndex();
  ~ProfileIndex();  // a partial index stops its background indexing and waits for its threads

  // false while the background indexing has not finished; wait_complete() waits for it (and throws
  // its RequestError when it failed). The accessors below are the complete index's once it is built.
  bool complete() const;
  void wait_complete() const;

  const formats::Manifest& manifest() const { return manifest_; }
  const std::vector<TraceEvent>& events() const { return current().events_; }
  const std::vector<Lane>& lanes() const { return current().lanes_; }
  const std::vector<Flow>& flows() const { return current().flows_; }
  const std::string& name_of(uint32_t index) const { return current().names_[index]; }
  // The "args" object of an event as trace.json holds it ("" when it has none), read from the file
  // the index keeps mapped rather than from a copy per event.
  std::string_view args_json(const TraceEvent& event) const;

  nlohmann::json lanes_json() const;
  nlohmann::json window(const WindowQuery& query) const;
  nlohmann::json event_details(uint32_t id) const;
  // Matches ordered by start time; `offset` skips that many of them, so a client can page through all.
  nlohmann::json search(std::string_view text, size_t limit, size_t offset = 0) const;
  nlohmann::json key_averages() const;
  // One execution of one executable on one core: the NTFF records, one row per engine and DMA queue.
  // Each (executable, core) pair's NEFF and NTFF are read once and kept.
  nlohmann::json device_execution(std::string_view neff, uint32_t core,
                                  std::optional<uint64_t> sequence) const;

 private:
  struct MergedTrace;
  struct Completion;  // the background indexing of a partial index (profile_index.cpp)
  // The complete index once built, else this one (which is the complete one unless partial).
  const ProfileIndex& current() const;
  // This index when it is not partial; of a partial index, the complete index once built and
  // published, else null (and the background indexing's error once it has failed).
  const ProfileIndex* completed() const;
  nlohmann::json lanes_json_of() const;
  nlohmann::json window_of(const WindowQuery& query) const;
  nlohmann::json event_details_of(uint32_t id) const;
  nlohmann::json search_of(std::string_view text, size_t limit, size_t offset) const;
  nlohmann::json status_json() const;  // of a partial index: "complete": false and the progress
  void parse_trace(const std::filesystem::path& trace_path, const IndexOptions& options);
  bool parse_first_view(const std::filesystem::path& trace_path, const IndexOptions& options,
                        const FirstViewOptions& first_view);
  void index_runs(std::vector<formats::TraceRun>& runs);
  // The operator table of the runs of the whole file, as they are read (no second read of the file).
  void table_from_runs(const std::vector<formats::TraceRun>& runs, const std::string& origin);
  void merge_runs(std::vector<formats::TraceRun>& runs, MergedTrace& merged);
  void build_lanes(MergedTrace& merged);
  void bind_flows(MergedTrace& merged);
  std::optional<uint32_t> enclosing_event(uint32_t lane, double ts_us) const;
  struct WindowCounts {
    size_t events = 0, merged = 0;
  };
  nlohmann::json lane_window(uint32_t lane_id, const WindowQuery& query, double pixel_us,
                             WindowCounts& counts) const;
  nlohmann::json event_summary(uint32_t id) const;

  struct DeviceTrace {
    formats::NtffTrace trace;
    device::Executable executable;
  };
  std::shared_ptr<const DeviceTrace> device_trace(uint64_t neff_hash, uint32_t core) const;

  std::filesystem::path dir_;
  std::unique_ptr<Completion> completion_;  // set on a partial index only
  uint64_t indexed_bytes_ = 0;              // of a partial index: the bytes of trace.json it covers
  std::shared_ptr<const formats::MappedTrace> trace_file_;
  formats::Manifest manifest_;
  std::vector<std::string> names_;
  std::vector<TraceEvent> events_;
  std::vector<Lane> lanes_;
  std::vector<Flow> flows_;
  int64_t origin_ns_ = 0;  // trace.json time of the earliest event; every ts here is relative to it
  double origin_us_ = 0;  // the same in microseconds, as the API reports it
  double start_us_ = 0;
  double end_us_ = 0;
  mutable std::mutex device_mutex_;
  // Built from the runs of the whole file as they are read (table_from_runs), or why it cannot be
  // (one of the two is set on a complete index; a partial index asks the complete one).
  std::optional<nlohmann::json> key_averages_;
  std::optional<std::string> key_averages_error_;
  mutable std::map<std::pair<uint64_t, uint32_t>, std::shared_ptr<const DeviceTrace>> device_traces_;
};

}  // namespace sightline::server
