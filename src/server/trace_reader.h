// How the Explorer's index reads trace.json (the first of its jobs; profile_index.cpp builds lanes
// and flows from what this returns, profile_queries.cpp answers windows, details and search,
// profile_summaries.cpp the operator table and device executions).
//
// simdjson's On-Demand API over a padded copy of the text: no document tree is built, every value is
// validated, and large files written one event per line are read in runs of whole events on several
// threads (IndexOptions), merged in file order; anything unexpected falls back to one sequential parse,
// which also gives the exact error of a damaged file. validate_trace_file (profile_index.h) makes the
// same checks with bounded memory, for uploads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/profile_index.h"

namespace sightline::server::detail {

// One end of a flow ("s" or "f"), on the lane (pid, tid) it was written on.
struct FlowPoint {
  bool start = false;
  int64_t pid = 0;
  int64_t tid = 0;
  double ts_us = 0;
};

using LaneKey = std::pair<int64_t, int64_t>;  // (pid, tid)

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};

// What one run of traceEvents elements holds, names interned per run (a TraceEvent's name and
// category index `names`).
struct TraceChunk {
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids;
  std::vector<TraceEvent> events;
  std::vector<LaneKey> event_lanes;  // the lane of each event
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<LaneKey, std::string> thread_names;
  std::map<LaneKey, int64_t> thread_sorts;
  std::vector<std::tuple<uint32_t, uint64_t, FlowPoint>> flow_points;  // (category name, id, end)

  uint32_t name_id(std::string_view text);
};

// trace.json mapped read-only: the parser reads padded copies of it, and the index keeps it for the
// events' args, which it reads from the file when asked (TraceEvent::args_offset).
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // RequestError(422) when it cannot be read
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* begin() const { return data_ == nullptr ? "" : data_; }
  size_t size() const { return size_; }
  // [offset, offset + bytes) of the file, or "" when the file no longer holds it (cut short since).
  std::string_view text(uint64_t offset, uint64_t bytes) const;

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open so that text() can see whether the file was cut short
};

// Reads the file whole: its runs in file order. Throws RequestError(422) naming `origin` when the
// file cannot be read, is not valid JSON, has no traceEvents array or holds a complete event without a
// valid ts/dur.
std::vector<TraceChunk> read_trace(const MappedFile& file, const std::string& origin, const IndexOptions& options);

}  // namespace sightline::server::detail
