// The one reader of trace.json (the Chrome trace export_chrome_trace writes, docs/formats.md): the CLI,
// the analysis layer and the Explorer's server all read a profile's trace through it.
//
//   formats::MappedTrace file("profiles/fused/trace.json");
//   std::vector<formats::TraceRun> runs = formats::read_trace(file, "fused/trace.json", {});
//   for (const formats::TraceRun& run : runs)
//     for (const formats::TraceSlice& slice : run.slices) use(run.names[slice.name], slice.ts_ns, slice.dur_ns);
//
// simdjson's On-Demand API over a padded copy of the text: no document tree is built, every value is
// validated, and large files written one event per line are read in runs of whole events on several
// threads (TraceReadOptions), merged in file order by the caller; anything unexpected falls back to one
// sequential parse, which also gives the exact error of a damaged file. Times are exact integer
// nanoseconds, read from the decimal text of "ts" and "dur" (never through a double, which at three
// months from the clock's base cannot hold the last nanosecond); ids are exact 64-bit integers.
// validate_trace_file makes the same checks with bounded memory, for uploads.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sightline/error.h"

namespace sightline::formats {

// trace.json that cannot be read: the message names the file and what is wrong.
class TraceReadError : public Error {
 public:
  using Error::Error;
};

// Times are kept within +-10^18 ns (31 years) of the clock's base, so that sums and differences of
// them never overflow int64 wherever the trace is used.
inline constexpr int64_t kMaxTraceTimeNs = 1'000'000'000'000'000'000;

// A "ts" or "dur" value's JSON text in microseconds to exact nanoseconds: three decimals or fewer
// (as the exporter writes them) exactly; more decimals or an exponent (another writer) rounded to
// the nanosecond. False for anything else and for values beyond kMaxTraceTimeNs.
bool trace_time_ns(std::string_view text, int64_t& ns);

// How trace.json is read: large files are split into runs of whole events (at line starts of the
// exporter's one-event-per-line layout), each thread parsing the next run not yet taken, and the runs
// are merged in file order; the result is the same as one sequential parse, which is also the
// fallback for any other layout and gives the exact error of a damaged file.
struct TraceReadOptions {
  size_t parallel_parse_bytes = size_t{32} << 20;  // files smaller than this are read on one thread
  size_t bytes_per_thread = size_t{8} << 20;       // at most one thread per this many bytes
  unsigned threads = 0;                            // 0: std::thread::hardware_concurrency()
  size_t bytes_per_run = size_t{2} << 20;          // the events are parsed in runs of about this size
  // While read_trace runs (both optional, owned by the caller): bytes of the file parsed so far, added
  // to as each run is done (a progress report for a reader on another thread), and a flag that, once
  // set, ends the read early with TraceReadError (its result is no longer wanted).
  std::atomic<uint64_t>* parsed_bytes = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  // True: a complete event without a valid ts/dur ends the read with TraceReadError. False: it is
  // kept among TraceRun::irregular, for a caller that names the event and the field (analysis).
  bool refuse_bad_complete_events = true;
};

// A lane as trace.json writes it: (pid, tid).
using TraceLane = std::pair<int64_t, int64_t>;

// One complete ("X") event.
struct TraceSlice {
  int64_t ts_ns = 0;  // as written (the trace's clock), exact
  int64_t dur_ns = 0;
  uint32_t name = 0;      // index into TraceRun::names
  uint32_t category = 0;  // index into TraceRun::names
  uint64_t external_id = 0;  // args "External id": the framework op that caused it (0: none)
  uint64_t correlation = 0;  // args "correlation": the launch it belongs to (0: none)
  uint64_t args_offset = 0;  // the event's "args" object: where its JSON text is in the file
  uint32_t args_bytes = 0;   // and how long it is (0: no args)
};

// One end of a flow ("s" or "f"), on the lane it was written on.
struct TraceFlowPoint {
  bool start = false;
  TraceLane lane;
  int64_t ts_ns = 0;
};

// One instant ("i") event: analysis reads "[memory]" and "Record Window End".
struct TraceInstant {
  int64_t ts_ns = 0;
  uint32_t name = 0;  // index into TraceRun::names
  TraceLane lane;
  uint64_t args_offset = 0;  // as TraceSlice's
  uint32_t args_bytes = 0;
  uint64_t element = 0;  // its index in the run's elements
};

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};

// What one run of traceEvents elements holds, names interned per run (a slice's name and category
// index `names`); lane metadata as written (later metadata wins).
struct TraceRun {
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids;
  std::vector<TraceSlice> slices;
  std::vector<TraceLane> slice_lanes;  // the lane of each slice
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<TraceLane, std::string> thread_names;
  std::map<TraceLane, int64_t> thread_sorts;
  std::vector<std::tuple<uint32_t, uint64_t, TraceFlowPoint>> flow_points;  // (category name, id, end)
  // What a reader that names each event in its errors needs beside (analysis/trace_json): the index of
  // each slice, instant and flow point among the run's elements of traceEvents (the run's first
  // element is the file's element number sum of element_count of the runs before it), the instant
  // events, and the elements whose fields are not all of the types and ranges the typed records above
  // assume (or that lack a field one of them needs), or that are no object: those as documents, in
  // the form TraceDocumentHandler gets them, for that reader to refuse with the exact field, or to
  // read in place of their typed records (which it then skips).
  std::vector<uint64_t> slice_elements;
  std::vector<uint64_t> flow_elements;
  std::vector<TraceInstant> instants;
  std::vector<std::pair<uint64_t, nlohmann::json>> irregular;
  uint64_t element_count = 0;
  // The first run only: the top-level object less "traceEvents" (empty for a bare array of events).
  nlohmann::json top_level = nlohmann::json::object();

  uint32_t name_id(std::string_view text);
};

// trace.json mapped read-only: the parser reads padded copies of it, and a reader of the events' args
// keeps it to read them from the file when asked (TraceSlice::args_offset).
class MappedTrace {
 public:
  explicit MappedTrace(const std::filesystem::path& path);  // TraceReadError when it cannot be read
  ~MappedTrace();
  MappedTrace(const MappedTrace&) = delete;
  MappedTrace& operator=(const MappedTrace&) = delete;
  const char* begin() const { return data_ == nullptr ? "" : data_; }
  size_t size() const { return size_; }
  // [offset, offset + bytes) of the file, or "" when the file no longer holds it (cut short since).
  std::string_view text(uint64_t offset, uint64_t bytes) const;

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open so that text() can see whether the file was cut short
};

// Reads the file whole: its runs in file order. Throws TraceReadError naming `origin` when the file
// cannot be read, is not valid JSON, has no traceEvents array or holds a complete event without a
// valid ts/dur.
std::vector<TraceRun> read_trace(const MappedTrace& file, const std::string& origin, const TraceReadOptions& options);

// The same for text in memory, read on one thread; args offsets are offsets into `text`.
std::vector<TraceRun> read_trace_text(std::string_view text, const std::string& origin,
                                      const TraceReadOptions& options);

// An event's args object (its text: TraceSlice::args_offset, args_bytes) as a document of the keys
// named (the others are validated and left out), numbers as TraceDocumentHandler gets them. Throws
// TraceReadError naming `origin` when the text is no JSON object (the file changed since it was read).
nlohmann::json read_trace_args(std::string_view text, std::span<const std::string_view> keys,
                               const std::string& origin);

// The first runs of a large trace written one event per line (the layout read_trace reads on several
// threads): whole events from the start of the events array up to about `prefix_bytes` of the file
// (at least one run of options.bytes_per_run or less), parsed as read_trace parses its runs, on
// options.threads. `covered` is set to the file offset where the last of them ends. Empty when the
// layout is not found or a run does not parse or holds a complete event without a valid ts/dur (then
// read_trace gives the exact error). Nothing past the runs is read, so whether the file as a whole is
// valid is not known: the runs are a first view of it, never a substitute for read_trace.
std::vector<TraceRun> read_trace_prefix(const MappedTrace& file, const TraceReadOptions& options, size_t prefix_bytes,
                                        size_t& covered);

// The elements of traceEvents as small documents, one at a time in file order, for a reader that
// checks every field and names it in its errors while the upload validator (validate_trace_file)
// streams a file with bounded memory: analysis/trace_json checks uploads so, and reads the device
// name of a file so, as far as its first hardware lane. In these documents every "ts" and "dur" that is a time holds exact integer nanoseconds
// (trace_time_ns); one that is not (out of range) holds the number as a float, for the reader to
// refuse. Exceptions the handler throws end the read and reach the caller.
class TraceDocumentHandler {
 public:
  virtual ~TraceDocumentHandler() = default;
  virtual void element(const nlohmann::json& element, size_t index) = 0;
};

// Every check read_trace makes, keeping nothing and holding a bounded buffer (a MiB of the file, a
// run of whole events of about a MiB or the largest single event, and at most 8 MiB of what surrounds
// the events array) instead of the file: uploads are validated with it. Throws TraceReadError as
// read_trace does; `origin` names the file in messages. `run_bytes`: the size past which a run of
// events is cut (small in the fuzz target, so that every input is cut often). With a `handler`, the
// elements go to it as documents (and read_trace's own checks of complete
// events are left to it), still with bounded memory; the top-level object less "traceEvents" is
// returned (null without a handler).
nlohmann::json validate_trace_file(const std::filesystem::path& trace_path, const std::string& origin,
                                   size_t run_bytes = size_t{1} << 20, TraceDocumentHandler* handler = nullptr);

}  // namespace sightline::formats
