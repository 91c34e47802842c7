#include "server/profile_index.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "analysis/trace_json.h"
#include "sightline/device/isa.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// trace.json times have three decimals of a microsecond; flow points bind within this tolerance.
constexpr double kTimeToleranceUs = 0.0005;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_hardware_lane(const Lane& lane) { return lane.name.find("_hw/") != std::string::npos; }

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

// The fields of one traceEvents element the index uses. The strings view the parser's buffers, valid
// until the next document is parsed; `args` is the raw text of the event's args object, cut out of
// the parsed text, of which only the ids and metadata values are read.
struct EventFields {
  std::string_view phase, name, category;
  std::optional<int64_t> pid, tid, id;
  std::optional<double> ts, dur;
  std::string_view args;  // empty when the event has no args object
  std::optional<int64_t> external_id, correlation, sort_index;
  std::optional<std::string_view> args_name;
};

// trace.json mapped read-only; the parser reads a padded copy of it (or of runs of its events).
class MappedFile {
 public:
  explicit MappedFile(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw RequestError(422, fmt::format("profile file '{}' cannot be opened: {}", path.filename().string(),
                                          std::strerror(errno)));
    }
    struct stat info {};
    if (::fstat(fd, &info) == 0 && info.st_size > 0) {
      size_ = static_cast<size_t>(info.st_size);
      void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped != MAP_FAILED) {
        data_ = static_cast<const char*>(mapped);
        ::madvise(mapped, size_, MADV_SEQUENTIAL);
      }
    }
    ::close(fd);
    if (size_ > 0 && data_ == nullptr) {
      throw RequestError(422, fmt::format("profile file '{}' cannot be read", path.filename().string()));
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const char* begin() const { return data_ == nullptr ? "" : data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// The object keys the index reads, recognized once per key.
enum class Key { other, ph, name, cat, pid, tid, id, ts, dur, args, trace_events, external_id, correlation, sort_index };

Key key_of(std::string_view name) {
  switch (name.size()) {
    case 2:
      return name == "ph" ? Key::ph : name == "ts" ? Key::ts : name == "id" ? Key::id : Key::other;
    case 3:
      return name == "cat" ? Key::cat : name == "pid" ? Key::pid : name == "tid" ? Key::tid : name == "dur" ? Key::dur
                                                                                                            : Key::other;
    case 4:
      return name == "name" ? Key::name : name == "args" ? Key::args : Key::other;
    case 10:
      return name == "sort_index" ? Key::sort_index : Key::other;
    case 11:
      return name == "traceEvents"   ? Key::trace_events
             : name == "External id" ? Key::external_id
             : name == "correlation" ? Key::correlation
                                     : Key::other;
    default:
      return Key::other;
  }
}

namespace od = simdjson::ondemand;
using simdjson::error_code;
using simdjson::SUCCESS;

struct FlowKeyHash {
  size_t operator()(const std::pair<uint32_t, uint64_t>& key) const {
    return std::hash<uint64_t>()(key.second * 0x9e3779b97f4a7c15ULL ^ key.first);
  }
};

struct FlowPoint {
  bool start = false;
  int64_t pid = 0;
  int64_t tid = 0;
  double ts_us = 0;
};

using LaneKey = std::pair<int64_t, int64_t>;  // (pid, tid)

// What one run of traceEvents elements holds, with names interned locally: chunks of a large trace
// are read on separate threads and merged in file order.
using LaneKey = std::pair<int64_t, int64_t>;  // (pid, tid)

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
};

// What one run of traceEvents elements holds, with names interned locally: chunks of a large trace
// are read on separate threads and merged in file order.
struct ChunkIndex {
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_ids;
  std::vector<TraceEvent> events;  // name and category index `names`
  std::vector<LaneKey> event_lanes;
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<LaneKey, std::string> thread_names;
  std::map<LaneKey, int64_t> thread_sorts;
  std::vector<std::tuple<uint32_t, uint64_t, FlowPoint>> flow_points;  // (category name, id, end)
  bool keep = true;                 // false: events are checked, not kept (validation)
  bool bad_complete_event = false;  // an "X" event without a valid ts/dur
  bool parsed = false;              // the run was valid JSON
  std::string error;                // the parser's message otherwise
  error_code error_kind = simdjson::SUCCESS;
  std::optional<size_t> error_offset;  // where in the parsed text, when known
  bool found_events = false;
  const char* events_end = nullptr;  // just after the events array, when the run reached it

  uint32_t name_id(std::string_view text) {
    if (auto it = name_ids.find(text); it != name_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(names.size());
    names.emplace_back(text);
    name_ids.emplace(names.back(), id);
    return id;
  }

  void consume(const EventFields& event) {
    if (!event.pid || !event.tid) return;
    if (!keep) {
      if (event.phase == "X" && (!event.ts || !event.dur || *event.dur < 0)) bad_complete_event = true;
      return;
    }
    const LaneKey lane{*event.pid, *event.tid};
    if (event.phase == "M") {
      if (event.name == "process_name" && event.args_name) {
        process_names[lane.first] = std::string(*event.args_name);
      } else if (event.name == "thread_name" && event.args_name) {
        thread_names[lane] = std::string(*event.args_name);
      } else if (event.name == "process_sort_index" && event.sort_index) {
        process_sorts[lane.first] = *event.sort_index;
      } else if (event.name == "thread_sort_index" && event.sort_index) {
        thread_sorts[lane] = *event.sort_index;
      }
    } else if (event.phase == "X") {
      if (!event.ts || !event.dur || *event.dur < 0) {
        bad_complete_event = true;
        return;
      }
      TraceEvent parsed_event;
      parsed_event.ts_us = *event.ts;
      parsed_event.dur_us = *event.dur;
      parsed_event.name = name_id(event.name);
      parsed_event.category = name_id(event.category);
      parsed_event.args_json = event.args;
      parsed_event.external_id = event.external_id.value_or(0);
      parsed_event.correlation = event.correlation.value_or(0);
      events.push_back(std::move(parsed_event));
      event_lanes.push_back(lane);
    } else if (event.phase == "s" || event.phase == "f") {
      if (!event.id || !event.ts) return;
      flow_points.emplace_back(name_id(event.category), static_cast<uint64_t>(*event.id),
                               FlowPoint{event.phase == "s", lane.first, lane.second, *event.ts});
    }
  }
};


// A JSON number as the index reads it: integers that fit 64 bits (those above INT64_MAX, such as the
// profiler's correlation ids with the top bits set, keep their bits as int64) and every number as a
// double (correctly rounded, as strtod does).
struct Number {
  std::optional<int64_t> integer;
  double value = 0;
};

// Reads a trace document with simdjson's On-Demand API. Every value is visited, including those the
// index does not use, so that the whole text is validated as JSON, as a full parse would.
class TraceReader {
 public:
  TraceReader(ChunkIndex& chunk, od::document& document) : chunk_(chunk), document_(document) {}

  // Checks that `value` is valid JSON, recursively.
  error_code skip(od::value value) {
    od::json_type type;
    if (auto error = value.type().get(type)) return error;
    switch (type) {
      case od::json_type::object: {
        od::object object;
        if (auto error = value.get_object().get(object)) return error;
        for (auto maybe_field : object) {
          od::field field;
          if (auto error = std::move(maybe_field).get(field)) return error;
          std::string_view key;
          if (auto error = field.unescaped_key().get(key)) return error;
          if (auto error = skip(field.value())) return error;
        }
        return SUCCESS;
      }
      case od::json_type::array: {
        od::array array;
        if (auto error = value.get_array().get(array)) return error;
        for (auto maybe_element : array) {
          od::value element;
          if (auto error = std::move(maybe_element).get(element)) return error;
          if (auto error = skip(element)) return error;
        }
        return SUCCESS;
      }
      case od::json_type::string: {
        std::string_view text;
        return value.get_string().get(text);
      }
      case od::json_type::number: {
        Number number;
        return read_number(value, number);
      }
      case od::json_type::boolean: {
        // A damaged literal ("tru") reads as a bool of the wrong type: name what it is.
        bool flag = false;
        if (value.get_bool().get(flag) == SUCCESS) return SUCCESS;
        return value.raw_json_token().starts_with('t') ? simdjson::T_ATOM_ERROR : simdjson::F_ATOM_ERROR;
      }
      case od::json_type::null: {
        bool null = false;
        if (auto error = value.is_null().get(null)) return error;
        return null ? SUCCESS : simdjson::N_ATOM_ERROR;
      }
    }
    return simdjson::TAPE_ERROR;
  }

  // The elements of the events array: objects are events, anything else is only validated.
  error_code events(od::array array) {
    for (auto maybe_element : array) {
      od::value element;
      if (auto error = std::move(maybe_element).get(element)) return error;
      od::json_type type;
      if (auto error = element.type().get(type)) return error;
      if (type != od::json_type::object) {
        if (auto error = skip(element)) return error;
        continue;
      }
      od::object object;
      if (auto error = element.get_object().get(object)) return error;
      if (auto error = event(object)) return error;
    }
    return SUCCESS;
  }

  // Where the parser stands in the text: the start of the next token, or nullptr at the end.
  const char* location() {
    auto at = document_.current_location();
    return at.error() == SUCCESS ? at.value_unsafe() : nullptr;
  }

 private:
  static error_code read_number(od::value value, Number& number) {
    od::number parsed;
    if (auto error = value.get_number().get(parsed)) return error;
    switch (parsed.get_number_type()) {
      case od::number_type::signed_integer:
        number.integer = parsed.get_int64();
        number.value = static_cast<double>(parsed.get_int64());
        break;
      case od::number_type::unsigned_integer:
        number.integer = static_cast<int64_t>(parsed.get_uint64());
        number.value = static_cast<double>(parsed.get_uint64());
        break;
      case od::number_type::floating_point_number:
        number.value = parsed.get_double();
        break;
    }
    return SUCCESS;
  }

  static error_code type_of(od::value& value, od::json_type& type) { return value.type().get(type); }

  error_code string_or_skip(od::value value, std::string_view& out) {
    od::json_type type;
    if (auto error = type_of(value, type)) return error;
    if (type != od::json_type::string) return skip(value);
    return value.get_string().get(out);
  }

  error_code number_or_skip(od::value value, Number& out, bool& is_number) {
    od::json_type type;
    if (auto error = type_of(value, type)) return error;
    is_number = type == od::json_type::number;
    if (!is_number) return skip(value);
    return read_number(value, out);
  }

  // One event object: its fields in order, a repeated key's last value winning.
  error_code event(od::object object) {
    EventFields fields;
    for (auto maybe_field : object) {
      od::field field;
      if (auto error = std::move(maybe_field).get(field)) return error;
      std::string_view key;
      if (auto error = field.unescaped_key().get(key)) return error;
      od::value value = field.value();
      switch (key_of(key)) {
        case Key::ph:
          if (auto error = string_or_skip(value, fields.phase)) return error;
          break;
        case Key::name:
          if (auto error = string_or_skip(value, fields.name)) return error;
          break;
        case Key::cat:
          if (auto error = string_or_skip(value, fields.category)) return error;
          break;
        case Key::pid:
        case Key::tid:
        case Key::id:
        case Key::ts:
        case Key::dur: {
          const Key which = key_of(key);
          Number number;
          bool is_number = false;
          if (auto error = number_or_skip(value, number, is_number)) return error;
          if (!is_number) break;
          if (which == Key::ts) fields.ts = number.value;
          if (which == Key::dur) fields.dur = number.value;
          if (number.integer && which == Key::pid) fields.pid = number.integer;
          if (number.integer && which == Key::tid) fields.tid = number.integer;
          if (number.integer && which == Key::id) fields.id = number.integer;
          break;
        }
        case Key::args: {
          od::json_type type;
          if (auto error = type_of(value, type)) return error;
          if (type != od::json_type::object) {
            if (auto error = skip(value)) return error;
            break;
          }
          if (auto error = args(value, fields)) return error;
          break;
        }
        default:
          if (auto error = skip(value)) return error;
      }
    }
    chunk_.consume(fields);
    return SUCCESS;
  }

  // The args object: its raw text is kept; names, ids and sort indexes at its top level are read.
  error_code args(od::value value, EventFields& fields) {
    const char* begin = value.raw_json_token().data();  // the '{'
    od::object object;
    if (auto error = value.get_object().get(object)) return error;
    for (auto maybe_field : object) {
      od::field field;
      if (auto error = std::move(maybe_field).get(field)) return error;
      std::string_view key;
      if (auto error = field.unescaped_key().get(key)) return error;
      const Key which = key_of(key);
      if (which == Key::name) {
        std::string_view text;
        if (auto error = string_or_skip(field.value(), text)) return error;
        if (text.data() != nullptr) fields.args_name = text;
      } else if (which == Key::external_id || which == Key::correlation || which == Key::sort_index) {
        Number number;
        bool is_number = false;
        if (auto error = number_or_skip(field.value(), number, is_number)) return error;
        if (!is_number) continue;
        if (number.integer) {
          if (which == Key::external_id) fields.external_id = number.integer;
          if (which == Key::correlation) fields.correlation = number.integer;
          if (which == Key::sort_index) fields.sort_index = number.integer;
        } else if (which == Key::sort_index && !fields.sort_index && std::isfinite(number.value) &&
                   std::abs(number.value) < 9.2e18) {
          fields.sort_index = static_cast<int64_t>(number.value);
        }
      } else if (auto error = skip(field.value())) {
        return error;
      }
    }
    // The object's text ends at the '}' before the next token (in valid JSON an args object is never
    // the last token of a document: at least its event's '}' follows).
    const char* end = location();
    if (end == nullptr) return simdjson::INCOMPLETE_ARRAY_OR_OBJECT;
    while (end > begin && end[-1] != '}') --end;
    fields.args = std::string_view(begin, static_cast<size_t>(end - begin));
    return SUCCESS;
  }

  ChunkIndex& chunk_;
  od::document& document_;
};

// One thread's parser and the buffer it copies text into, with the padding simdjson reads past the
// end, both reused from one run of events to the next.
class PaddedParser {
 public:
  // The text, wrapped in '[' and ']' when bracketed, in the padded buffer.
  std::string_view load(std::string_view text, bool bracketed) {
    const size_t size = text.size() + (bracketed ? 2 : 0);
    if (size + simdjson::SIMDJSON_PADDING > capacity_) {
      capacity_ = size + size / 4 + simdjson::SIMDJSON_PADDING;
      buffer_ = std::make_unique_for_overwrite<char[]>(capacity_);
    }
    char* out = buffer_.get();
    if (bracketed) *out++ = '[';
    std::memcpy(out, text.data(), text.size());
    if (bracketed) out[text.size()] = ']';
    std::memset(buffer_.get() + size, 0, simdjson::SIMDJSON_PADDING);
    return {buffer_.get(), size};
  }
  simdjson::simdjson_result<od::document> iterate(std::string_view loaded) {
    return parser_.iterate(loaded.data(), loaded.size(), capacity_);
  }

 private:
  od::parser parser_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
};

std::string parse_error_message(error_code error, std::optional<size_t> offset) {
  std::string message = simdjson::error_message(error);
  if (offset) message += fmt::format(" (near byte {})", *offset);
  return message;
}

// Parses text[0, size) into `chunk`. Bracketed: the text is a run of elements of the events array,
// read as if wrapped in '[' and ']'; the last run (`strict` false) extends to the end of the file, and
// its parse stops after the events array's ']' (recorded as `events_end`). Otherwise the text is the
// whole file: either {"traceEvents": [...], ...} or a bare array of events.
void parse_chunk(const char* text, size_t size, bool bracketed, bool strict, ChunkIndex& chunk,
                 PaddedParser& parser) {
  const std::string_view buffer = parser.load(std::string_view(text, size), bracketed);
  // Maps a position in `buffer` back to the file text.
  auto in_text = [&](const char* at) { return text + (at - buffer.data()) - (bracketed ? 1 : 0); };
  od::document document;
  auto fail = [&](error_code error, bool located) {
    chunk.parsed = false;
    std::optional<size_t> offset;
    if (located) {
      auto at = document.current_location();
      // Past the first byte: at the start, the document as a whole is what is wrong.
      if (at.error() == SUCCESS && in_text(at.value_unsafe()) > text) {
        offset = static_cast<size_t>(in_text(at.value_unsafe()) - text);
      }
    }
    chunk.error = parse_error_message(error, offset);
    chunk.error_kind = error;
    chunk.error_offset = offset;
  };
  if (auto error = parser.iterate(buffer).get(document)) return fail(error, false);
  TraceReader reader(chunk, document);
  od::json_type type;
  if (auto error = document.type().get(type)) return fail(error, true);
  if (bracketed) {
    od::array array;
    if (auto error = document.get_array().get(array)) return fail(error, true);
    chunk.found_events = true;
    if (auto error = reader.events(array)) return fail(error, true);
    if (strict) {
      if (reader.location() != nullptr) return fail(simdjson::TRAILING_CONTENT, true);
    } else if (const char* end = reader.location(); end != nullptr) {
      // The wrapping '[' was closed by the file's own ']' of the events array.
      while (end > buffer.data() && end[-1] != ']') --end;
      chunk.events_end = in_text(end);
    }
    chunk.parsed = true;
    return;
  }
  switch (type) {
    case od::json_type::array: {
      od::array array;
      if (auto error = document.get_array().get(array)) return fail(error, true);
      chunk.found_events = true;
      if (auto error = reader.events(array)) return fail(error, true);
      break;
    }
    case od::json_type::object: {
      od::object object;
      if (auto error = document.get_object().get(object)) return fail(error, true);
      for (auto maybe_field : object) {
        od::field field;
        if (auto error = std::move(maybe_field).get(field)) return fail(error, true);
        std::string_view key;
        if (auto error = field.unescaped_key().get(key)) return fail(error, true);
        od::value value = field.value();
        od::json_type value_type;
        if (auto error = value.type().get(value_type)) return fail(error, true);
        if (!chunk.found_events && value_type == od::json_type::array && key_of(key) == Key::trace_events) {
          od::array array;
          if (auto error = value.get_array().get(array)) return fail(error, true);
          chunk.found_events = true;
          if (auto error = reader.events(array)) return fail(error, true);
        } else if (auto error = reader.skip(value)) {
          return fail(error, true);
        }
      }
      break;
    }
    case od::json_type::string: {
      std::string_view scalar;
      if (auto error = document.get_string().get(scalar)) return fail(error, true);
      break;
    }
    case od::json_type::number: {
      double scalar = 0;
      if (auto error = document.get_double().get(scalar)) return fail(error, true);
      break;
    }
    case od::json_type::boolean: {
      bool scalar = false;
      if (auto error = document.get_bool().get(scalar)) return fail(error, true);
      break;
    }
    case od::json_type::null: {
      bool null = false;
      if (auto error = document.is_null().get(null)) return fail(error, true);
      if (!null) return fail(simdjson::N_ATOM_ERROR, true);
      break;
    }
  }
  if (reader.location() != nullptr) return fail(simdjson::TRAILING_CONTENT, true);
  chunk.parsed = true;
}

// Splits the events array of a large trace written one event per line (as the exporter does) into
// runs of whole elements: each run starts at a '{' that opens a line after "},\n". Returns the
// [begin, end) ranges, the last one running to the end of the file (its parse stops at the array's
// ']'); empty when the layout is not found. A split inside a nested value cannot parse, so a wrong
// guess shows up as a chunk error and the caller falls back to one sequential parse.
std::vector<std::pair<size_t, size_t>> split_events(std::string_view text, size_t parts, size_t& open_bracket) {
  const size_t key = text.find("\"traceEvents\"");
  if (key == std::string_view::npos || parts < 2) return {};
  size_t open = text.find_first_not_of(" \t\r\n", key + 13);
  if (open == std::string_view::npos || text[open] != ':') return {};
  open = text.find_first_not_of(" \t\r\n", open + 1);
  if (open == std::string_view::npos || text[open] != '[') return {};
  open_bracket = open;
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t begin = open + 1;
  for (size_t k = 1; k < parts; ++k) {
    size_t at = std::max(begin, open + (text.size() - open) / parts * k);
    while ((at = text.find("\n{", at)) != std::string_view::npos) {
      const size_t comma = text.find_last_not_of(" \t\r\n", at);
      if (comma != std::string_view::npos && comma > begin && text[comma] == ',') {
        ranges.emplace_back(begin, comma);
        begin = at + 1;
        break;
      }
      at += 2;
    }
    if (at == std::string_view::npos) break;
  }
  if (ranges.empty()) return {};
  ranges.emplace_back(begin, text.size());
  return ranges;
}

// Validates trace.json as ProfileIndex::load reads it, with bounded memory: the file is read a block
// at a time, and a scanner that follows strings and nesting cuts the events array into runs of whole
// elements (whatever the layout), each parsed on its own by the index's reader wrapped as
// {"traceEvents":[...]} (or [...] for a bare array), so at the depth it has in the file. What
// surrounds the array is parsed last, with the array as []. Every byte is in exactly one parsed
// piece, each piece is valid JSON exactly when the file is (a cut falls only between elements,
// before the element that follows a comma), so the result is the whole-file parse's.
class StreamingTraceValidator {
 public:
  StreamingTraceValidator(const fs::path& path, std::string origin, size_t run_bytes)
      : path_(path), origin_(std::move(origin)), run_bytes_(run_bytes) {}

  void run() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw RequestError(422, fmt::format("profile file '{}' cannot be opened: {}", origin_, std::strerror(errno)));
    }
    std::vector<char> block(kBlockBytes);
    bool first = true;
    while (true) {
      const ssize_t got = ::read(fd, block.data(), block.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int code = errno;
        ::close(fd);
        throw RequestError(422, fmt::format("profile file '{}' cannot be read: {}", origin_, std::strerror(code)));
      }
      if (got == 0) break;
      std::string_view text(block.data(), static_cast<size_t>(got));
      // A UTF-8 byte order mark is allowed before the document, as in the whole-file parse.
      if (first && text.starts_with("\xEF\xBB\xBF")) {
        text.remove_prefix(3);
        offset_ = 3;
      }
      first = false;
      for (const char c : text) {
        step(c);
        ++offset_;
      }
    }
    ::close(fd);
    if (phase_ == Phase::events) {
      // The file ends inside the events array (each run on its own would still parse).
      throw invalid(simdjson::error_message(simdjson::INCOMPLETE_ARRAY_OR_OBJECT), offset_);
    }
    ChunkIndex chunk;
    chunk.keep = false;
    parse_chunk(outside_.data(), outside_.size(), false, true, chunk, parser_);
    if (!chunk.parsed) throw RequestError(422, fmt::format("profile file '{}' is not valid JSON: {}", origin_, chunk.error));
    if (!chunk.found_events) throw RequestError(422, fmt::format("profile file '{}' has no traceEvents array", origin_));
    if (chunk.bad_complete_event) throw bad_event();
  }

 private:
  static constexpr size_t kBlockBytes = size_t{1} << 20;
  static constexpr size_t kMaxOutsideBytes = size_t{8} << 20;  // what surrounds the events array
  enum class Phase { before, events, after };
  enum class KeyState { none, key, colon };  // at depth 1: "traceEvents", then ':'

  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  // "traceEvents" as the parser reads it, escapes undone (\u0074raceEvents is the same key).
  static constexpr size_t kMaxKeyBytes = 6 * 11;
  static bool is_trace_events(const std::string& raw) {
    if (raw == "traceEvents") return true;
    if (raw.size() > kMaxKeyBytes || raw.find('\\') == std::string::npos) return false;
    const json key = json::parse("\"" + raw + "\"", nullptr, false);
    return key.is_string() && key.get<std::string>() == "traceEvents";
  }

  RequestError invalid(std::string_view message, std::optional<uint64_t> at) const {
    return RequestError(422, fmt::format("profile file '{}' is not valid JSON: {}{}", origin_, message,
                                         at ? fmt::format(" (near byte {})", *at) : std::string()));
  }
  RequestError bad_event() const {
    return RequestError(422, fmt::format("profile file '{}': a complete event without a valid ts/dur", origin_));
  }

  void keep_outside(char c) {
    if (outside_.size() >= kMaxOutsideBytes) {
      throw RequestError(422, fmt::format("profile file '{}' holds more than {} MiB outside its traceEvents array; "
                                          "it is not a trace sightline wrote",
                                          origin_, kMaxOutsideBytes >> 20));
    }
    outside_.push_back(c);
  }

  // Follows strings and escapes; true when `c` was inside (or closed) a string.
  bool in_string(char c) {
    if (!in_string_) return false;
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
    return true;
  }

  void step(char c) {
    switch (phase_) {
      case Phase::before:
        keep_outside(c);
        before(c);
        return;
      case Phase::events:
        events(c);
        return;
      case Phase::after:
        keep_outside(c);
        return;
    }
  }

  // Before the events array: finds it (the root array, or the first array value of a root object's
  // "traceEvents" key, written without escapes).
  void before(char c) {
    if (in_string_) {
      const bool was_open = in_string_;
      in_string(c);
      if (depth_ == 1) {
        if (in_string_) {
          if (string_.size() <= kMaxKeyBytes) string_.push_back(c);
        } else if (was_open) {
          key_ = is_trace_events(string_) ? KeyState::key : KeyState::none;
        }
      }
      return;
    }
    if (is_space(c)) return;
    if (c == '"') {
      in_string_ = true;
      string_.clear();
      return;
    }
    if (c == '[' && (depth_ == 0 || (depth_ == 1 && root_object_ && key_ == KeyState::colon))) {
      events_depth_ = depth_ + 1;
      root_array_ = depth_ == 0;
      depth_ = events_depth_;
      phase_ = Phase::events;
      return;
    }
    if (depth_ == 0 && c == '{') root_object_ = true;
    if (c == ':' && depth_ == 1) {
      key_ = key_ == KeyState::key ? KeyState::colon : KeyState::none;
      return;
    }
    key_ = KeyState::none;
    if (c == '{' || c == '[') ++depth_;
    if (c == '}' || c == ']') --depth_;
  }

  void events(char c) {
    if (in_string(c)) {
      run_.push_back(c);
      return;
    }
    if (depth_ != events_depth_) {  // inside an element (or, in a damaged file, above the array)
      run_.push_back(c);
      if (c == '"') in_string_ = true;
      if (c == '{' || c == '[') ++depth_;
      if ((c == '}' || c == ']') && depth_ >= events_depth_) --depth_;
      return;
    }
    if (is_space(c)) {
      if (!run_.empty()) run_.push_back(c);
      return;
    }
    if (c == ',') {
      run_.push_back(c);
      after_comma_ = true;
      return;
    }
    if (c == ']') {  // the end of the events array
      flush();
      depth_ = events_depth_ - 1;
      phase_ = Phase::after;
      keep_outside(']');
      return;
    }
    // An element starts. Past the run size, and after a comma, the run so far is parsed on its own
    // (without that comma): the element that follows proves the comma was a separator.
    if (after_comma_ && run_.size() >= run_bytes_) {
      while (!run_.empty() && is_space(run_.back())) run_.pop_back();
      run_.pop_back();  // the ','
      flush();
    }
    after_comma_ = false;
    if (run_.empty()) run_offset_ = offset_;
    run_.push_back(c);
    if (c == '"') in_string_ = true;
    if (c == '{' || c == '[') ++depth_;
    if (c == '}') --depth_;  // unbalanced: the run cannot parse
  }

  void flush() {
    if (run_.empty()) return;
    const std::string_view open = root_array_ ? "[" : "{\"traceEvents\":[";
    wrapped_.assign(open);
    wrapped_ += run_;
    wrapped_ += root_array_ ? "]" : "]}";
    ChunkIndex chunk;
    chunk.keep = false;
    parse_chunk(wrapped_.data(), wrapped_.size(), false, true, chunk, parser_);
    if (!chunk.parsed) {
      std::optional<uint64_t> at;
      if (chunk.error_offset && *chunk.error_offset >= open.size()) at = run_offset_ + (*chunk.error_offset - open.size());
      throw invalid(simdjson::error_message(chunk.error_kind), at);
    }
    if (chunk.bad_complete_event) throw bad_event();
    run_.clear();
  }

  fs::path path_;
  std::string origin_;
  size_t run_bytes_;  // runs are cut at the first element past this
  PaddedParser parser_;
  Phase phase_ = Phase::before;
  bool in_string_ = false, escape_ = false;
  int64_t depth_ = 0, events_depth_ = 0;
  bool root_object_ = false, root_array_ = false;
  KeyState key_ = KeyState::none;
  std::string string_;  // the string being read at depth 1 (its first 12 bytes)
  bool after_comma_ = false;
  std::string outside_, run_, wrapped_;
  uint64_t offset_ = 0, run_offset_ = 0;
};

}  // namespace

std::shared_ptr<const ProfileIndex> ProfileIndex::load(const fs::path& dir, const IndexOptions& options) {
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
  index->parse_trace(dir / trace_file, options);
  return index;
}

void validate_trace_file(const fs::path& trace_path, const std::string& origin, size_t run_bytes) {
  StreamingTraceValidator(trace_path, origin, run_bytes).run();
}

void ProfileIndex::parse_trace(const fs::path& trace_path, const IndexOptions& options) {
  const std::string origin = (dir_.filename() / trace_path.filename()).string();
  const MappedFile file(trace_path);

  // Large traces: runs of events parsed on several threads, each thread taking the next run. Anything
  // unexpected (another layout, a parse error) falls back to one sequential parse of the whole file,
  // which also gives the exact error.
  std::vector<ChunkIndex> chunks;
  const unsigned available = options.threads != 0 ? options.threads : std::thread::hardware_concurrency();
  const size_t by_size = file.size() / std::max<size_t>(1, options.bytes_per_thread);
  const size_t threads = std::min<size_t>(std::max(1u, available), std::max<size_t>(1, by_size));
  if (file.size() >= options.parallel_parse_bytes && threads > 1) {
    size_t open_bracket = 0;
    const size_t runs = std::max(threads, file.size() / std::max<size_t>(1, options.bytes_per_run));
    const auto ranges = split_events(std::string_view(file.begin(), file.size()), runs, open_bracket);
    chunks.resize(ranges.size());
    std::atomic<size_t> next_run{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
      PaddedParser parser;
      for (size_t i = next_run++; i < ranges.size() && !failed; i = next_run++) {
        const bool last = i + 1 == ranges.size();
        parse_chunk(file.begin() + ranges[i].first, ranges[i].second - ranges[i].first, true, !last, chunks[i],
                    parser);
        if (!chunks[i].parsed) failed = true;
      }
    };
    std::vector<std::thread> workers;
    for (size_t t = 1; t < std::min(threads, ranges.size()); ++t) workers.emplace_back(work);
    if (!ranges.empty()) work();
    for (std::thread& worker : workers) worker.join();
    // Every run parsed, the last one reached the end of the events array, and what surrounds the array
    // is valid JSON on its own: then the file as a whole is, and the runs hold all of its events.
    const bool all_parsed = std::all_of(chunks.begin(), chunks.end(), [](const ChunkIndex& c) { return c.parsed; });
    bool whole = all_parsed && !chunks.empty() && chunks.back().events_end != nullptr;
    if (whole) {
      const char* end = file.begin() + file.size();
      std::string outside(file.begin(), open_bracket + 1);
      outside += ']';
      outside.append(chunks.back().events_end, end);
      whole = json::accept(outside);
    }
    if (!whole) chunks.clear();
  }
  if (chunks.empty()) {
    chunks.resize(1);
    PaddedParser parser;
    // A UTF-8 byte order mark is allowed before the document (simdjson leaves skipping it to callers).
    std::string_view text(file.begin(), file.size());
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    parse_chunk(text.data(), text.size(), false, true, chunks.front(), parser);
    if (!chunks.front().parsed) {
      throw RequestError(422,
                         fmt::format("profile file '{}' is not valid JSON: {}", origin, chunks.front().error));
    }
    if (!chunks.front().found_events) {
      throw RequestError(422, fmt::format("profile file '{}' has no traceEvents array", origin));
    }
  }

  // Merged in file order: names get their ids in order of first appearance, later metadata wins.
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sorts;
  std::map<LaneKey, std::string> thread_names;
  std::map<LaneKey, int64_t> thread_sorts;
  std::map<LaneKey, std::vector<uint32_t>> lane_events;
  using FlowEnds = std::pair<std::optional<FlowPoint>, std::optional<FlowPoint>>;
  std::unordered_map<std::pair<uint32_t, uint64_t>, FlowEnds, FlowKeyHash> flow_ends;
  std::unordered_map<std::string, uint32_t> name_ids;
  size_t total_events = 0, total_flow_points = 0;
  for (const ChunkIndex& chunk : chunks) {
    total_events += chunk.events.size();
    total_flow_points += chunk.flow_points.size();
  }
  events_.reserve(total_events);
  flow_ends.reserve(total_flow_points / 2);  // a flow has two ends
  for (ChunkIndex& chunk : chunks) {
    if (chunk.bad_complete_event) {
      throw RequestError(422, fmt::format("profile file '{}': a complete event without a valid ts/dur", origin));
    }
    std::vector<uint32_t> global(chunk.names.size());
    for (size_t i = 0; i < chunk.names.size(); ++i) {
      auto [it, inserted] = name_ids.emplace(chunk.names[i], static_cast<uint32_t>(names_.size()));
      if (inserted) names_.push_back(chunk.names[i]);
      global[i] = it->second;
    }
    for (size_t i = 0; i < chunk.events.size(); ++i) {
      TraceEvent& event = chunk.events[i];
      event.name = global[event.name];
      event.category = global[event.category];
      lane_events[chunk.event_lanes[i]].push_back(static_cast<uint32_t>(events_.size()));
      events_.push_back(std::move(event));
    }
    for (auto& [pid, name] : chunk.process_names) process_names.insert_or_assign(pid, std::move(name));
    for (auto& [pid, sort] : chunk.process_sorts) process_sorts.insert_or_assign(pid, sort);
    for (auto& [key, name] : chunk.thread_names) thread_names.insert_or_assign(key, std::move(name));
    for (auto& [key, sort] : chunk.thread_sorts) thread_sorts.insert_or_assign(key, sort);
    for (const auto& [category, id, point] : chunk.flow_points) {
      auto& ends = flow_ends[{global[category], id}];
      (point.start ? ends.first : ends.second) = point;
    }
    chunk = ChunkIndex{};  // free it as soon as it is merged
  }
  // Flows in (category, id) order, so flow ids are stable from one load to the next. Categories are
  // few: they are ranked by name once and the pairs sorted by (rank, id).
  std::vector<uint32_t> categories;
  for (const auto& [key, ends] : flow_ends) categories.push_back(key.first);
  std::sort(categories.begin(), categories.end());
  categories.erase(std::unique(categories.begin(), categories.end()), categories.end());
  std::sort(categories.begin(), categories.end(), [&](uint32_t a, uint32_t b) { return names_[a] < names_[b]; });
  std::vector<uint32_t> category_rank(names_.size());
  for (uint32_t i = 0; i < categories.size(); ++i) category_rank[categories[i]] = i;
  // The ends stay in `flow_ends` (its nodes do not move); the sort moves only small references to them.
  struct RankedFlow {
    uint32_t rank;
    uint32_t category;
    uint64_t id;
    FlowEnds* ends;
  };
  std::vector<RankedFlow> flow_points;
  flow_points.reserve(flow_ends.size());
  for (auto& [key, ends] : flow_ends) flow_points.push_back({category_rank[key.first], key.first, key.second, &ends});
  std::sort(flow_points.begin(), flow_points.end(), [](const RankedFlow& a, const RankedFlow& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.id < b.id;
  });

  // Times become relative to the earliest event: trace.json holds host-clock microseconds (about 1e12),
  // where a double keeps only about a nanosecond, too coarse for zooming into one instruction.
  if (!events_.empty()) {
    origin_us_ = events_.front().ts_us;
    for (const TraceEvent& event : events_) origin_us_ = std::min(origin_us_, event.ts_us);
    for (TraceEvent& event : events_) event.ts_us -= origin_us_;
    for (auto& [key, ends] : flow_ends) {
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

  for (const RankedFlow& point : flow_points) {
    const FlowEnds& ends = *point.ends;
    if (!ends.first || !ends.second) continue;
    auto from_lane = lane_of.find({ends.first->pid, ends.first->tid});
    auto to_lane = lane_of.find({ends.second->pid, ends.second->tid});
    if (from_lane == lane_of.end() || to_lane == lane_of.end()) continue;
    auto from = enclosing_event(from_lane->second, ends.first->ts_us);
    auto to = enclosing_event(to_lane->second, ends.second->ts_us);
    if (from && to) flows_.push_back({names_[point.category], *from, *to});
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
  size_t event_count = 0, merged_count = 0;
  auto check_size = [&](size_t pending) {
    if (event_count + merged_count + pending > query.max_entries) {
      throw RequestError(400, fmt::format("the window holds more than {} events and merged boxes; ask for a "
                                          "shorter time range, fewer lanes or a smaller width",
                                          query.max_entries));
    }
  };
  for (uint32_t lane_id : lane_ids) {
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
      check_size(visible.size() + merged.size() + 1);
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
        check_size(visible.size() + merged.size() + 1);
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

nlohmann::json ProfileIndex::search(std::string_view text, size_t limit, size_t offset) const {
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
  for (size_t i = offset; i < hits.size() && i - offset < limit; ++i) matches.push_back(event_summary(hits[i]));
  return {{"query", std::string(text)}, {"total", hits.size()}, {"offset", offset}, {"matches", matches}};
}

nlohmann::json ProfileIndex::key_averages() const {
  // One reader and one table: trace.json read back as the CLI's `sightline table` reads it
  // (analysis/trace_json), averaged by the profiler's own key_averages, so the Explorer's table is
  // the live one (ProfilerStep#N merged into ProfilerStep*, torch's self times), computed once.
  std::lock_guard lock(key_averages_mutex_);
  if (key_averages_) return *key_averages_;
  const std::string path = (dir_ / "trace.json").string();
  if (!fs::is_regular_file(path)) throw RequestError(404, fmt::format("{} cannot be read", path));
  // Streamed from the file (memory: the trace's events, not a document of the whole file). A trace
  // the index reads but the analysis reader refuses is the profile's fault (422), not the server's.
  profiler::CollectedTrace trace;
  std::string device;
  try {
    trace = analysis::trace_json_load(path);
    device = analysis::trace_json_file_device_name(path);
  } catch (const Error& error) {
    throw RequestError(422, fmt::format("the operator table cannot be built: {}", error.what()));
  }
  const profiler::KeyAverages averages = profiler::key_averages(trace, {.device_name = device});
  json table = json::array();
  double self_cpu_total = 0, self_device_total = 0;
  for (const profiler::FunctionEventAvg& row : averages.rows()) {
    self_cpu_total += static_cast<double>(row.self_cpu_time_total_ns) / 1e3;
    self_device_total += static_cast<double>(row.self_device_time_total_ns) / 1e3;
    table.push_back({{"name", row.key},
                     {"count", row.count},
                     {"cpu_total_us", static_cast<double>(row.cpu_time_total_ns) / 1e3},
                     {"self_cpu_us", static_cast<double>(row.self_cpu_time_total_ns) / 1e3},
                     {"device_total_us", static_cast<double>(row.device_time_total_ns) / 1e3},
                     {"self_device_us", static_cast<double>(row.self_device_time_total_ns) / 1e3}});
  }
  std::string upper = device;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  json notes = json::array();
  for (const std::string& note : averages.notes()) notes.push_back(note);
  key_averages_ = json{{"source", "trace.json through analysis::trace_json and profiler::key_averages"},
                       {"device", upper},
                       {"rows", table},
                       {"notes", notes},
                       {"self_cpu_total_us", self_cpu_total},
                       {"self_device_total_us", self_device_total}};
  return *key_averages_;
}

std::shared_ptr<const ProfileIndex::DeviceTrace> ProfileIndex::device_trace(uint64_t neff_hash,
                                                                          uint32_t core) const {
  std::lock_guard lock(device_mutex_);
  if (auto it = device_traces_.find({neff_hash, core}); it != device_traces_.end()) return it->second;
  const formats::ManifestFile* ntff_file = nullptr;
  const formats::ManifestFile* neff_file = nullptr;
  for (const formats::ManifestFile& file : manifest_.files) {
    if (file.neff_hash != neff_hash) continue;
    if (file.kind == formats::ManifestFileKind::ntff && file.core == core) ntff_file = &file;
    if (file.kind == formats::ManifestFileKind::neff) neff_file = &file;
  }
  if (!ntff_file || !neff_file) {
    throw RequestError(
        404,
        fmt::format("no instruction trace of executable {:016x} on core {} in this profile", neff_hash, core));
  }
  auto loaded = std::make_shared<DeviceTrace>();
  try {
    loaded->trace = formats::ntff_load((dir_ / ntff_file->path).string());
    loaded->executable = formats::neff_load((dir_ / neff_file->path).string());
  } catch (const std::exception& error) {
    throw RequestError(422, fmt::format("instruction trace unreadable: {}", error.what()));
  }
  device_traces_.emplace(std::pair{neff_hash, core}, loaded);
  return loaded;
}

nlohmann::json ProfileIndex::device_execution(std::string_view neff, uint32_t core,
                                              std::optional<uint64_t> sequence) const {
  const auto hash = parse_neff_hash(neff);
  if (!hash) {
    throw RequestError(400,
                       fmt::format("neff '{}' is neither a 16-hex-digit hash nor neff_<hash>.neff", neff));
  }
  const auto loaded = device_trace(*hash, core);
  const formats::NtffTrace& trace = loaded->trace;
  const device::Executable& executable = loaded->executable;
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
