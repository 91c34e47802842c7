#include "formats/trace_reader.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sightline::formats {

uint32_t TraceRun::name_id(std::string_view text) {
  if (auto it = name_ids.find(text); it != name_ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(names.size());
  names.emplace_back(text);
  name_ids.emplace(names.back(), id);
  return id;
}

bool trace_time_ns(std::string_view text, int64_t& ns) {
  // Three decimals or fewer (JsonWriter::fixed3): whole and thousandths read as integers, exactly.
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  const size_t dot = digits.find('.');
  const std::string_view whole = digits.substr(0, dot);
  const std::string_view fraction = dot == std::string_view::npos ? std::string_view() : digits.substr(dot + 1);
  int64_t w = 0, f = 0;
  auto [whole_end, whole_error] = std::from_chars(whole.data(), whole.data() + whole.size(), w);
  bool exact = !whole.empty() && fraction.size() <= 3 && whole_error == std::errc{} &&
               whole_end == whole.data() + whole.size();
  if (exact && !fraction.empty()) {
    auto [fraction_end, fraction_error] = std::from_chars(fraction.data(), fraction.data() + fraction.size(), f);
    exact = fraction_error == std::errc{} && fraction_end == fraction.data() + fraction.size() && f >= 0;
  }
  if (exact) {
    for (size_t i = fraction.size(); i < 3; ++i) f *= 10;
    if (w > kMaxTraceTimeNs / 1000) return false;  // also keeps w * 1000 + f from overflowing
    ns = (w * 1000 + f) * (negative ? -1 : 1);
    return true;
  }
  // Another writer's time (more decimals, an exponent): rounded to the nanosecond when in range.
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) ||
      std::fabs(value) * 1000 > static_cast<double>(kMaxTraceTimeNs)) {
    return false;
  }
  ns = static_cast<int64_t>(std::llround(value * 1000));
  return true;
}

namespace {

namespace fs = std::filesystem;

// What to do about text that is not JSON, after the parser's message.
constexpr std::string_view kDamaged = "; the file is damaged or truncated, export the profile again";
using nlohmann::json;

// The fields of one traceEvents element the index uses. The strings view the parser's buffers, valid
// until the next document is parsed; `args` is the raw text of the event's args object, cut out of
// the parsed text, of which only the ids and metadata values are read.
struct EventFields {
  std::string_view phase, name, category;
  std::optional<int64_t> pid, tid, id;
  std::optional<int64_t> ts, dur;  // nanoseconds; empty when absent or not a time (trace_time_ns)
  std::string_view args;  // empty when the event has no args object
  std::optional<int64_t> external_id, correlation, sort_index;
  std::optional<std::string_view> args_name;
  bool args_name_bad = false;  // args "name" present, not a string
  // A field of a type or range the typed records do not hold, or a field missing that the event's
  // kind needs (TraceRun::irregular).
  bool irregular = false;
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
// What one run holds while it is parsed: the run itself and how its parse went.
struct ChunkIndex : TraceRun {
  bool keep = true;                 // false: events are checked, not kept (validation)
  // Set: the elements go to it as documents (validate_trace_file), numbered from element_base, and
  // the top-level values other than the events array are kept in `root`; slices are not made.
  TraceDocumentHandler* documents = nullptr;
  size_t element_base = 0;
  bool keep_root = false;  // the top-level values other than the events array go to top_level
  bool bad_complete_event = false;  // an "X" event without a valid ts/dur
  bool parsed = false;              // the run was valid JSON
  std::string error;                // the parser's message otherwise
  error_code error_kind = simdjson::SUCCESS;
  std::optional<size_t> error_offset;  // where in the parsed text, when known
  bool found_events = false;
  const char* events_end = nullptr;  // just after the events array, when the run reached it
  // Where the parsed (padded) text sits in the file: an args object's file offset is
  // file_offset + (its position in the buffer - buffer).
  const char* buffer = nullptr;
  int64_t file_offset = 0;

  void consume(const EventFields& event) {
    if (!event.pid || !event.tid) return;
    if (!keep) {
      if (event.phase == "X" && (!event.ts || !event.dur || *event.dur < 0)) bad_complete_event = true;
      return;
    }
    const TraceLane lane{*event.pid, *event.tid};
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
      TraceSlice parsed_event;
      parsed_event.ts_ns = *event.ts;
      parsed_event.dur_ns = *event.dur;
      parsed_event.name = name_id(event.name);
      parsed_event.category = name_id(event.category);
      if (!event.args.empty()) {
        parsed_event.args_offset = static_cast<uint64_t>(file_offset + (event.args.data() - buffer));
        parsed_event.args_bytes = static_cast<uint32_t>(std::min<size_t>(event.args.size(), UINT32_MAX));
      }
      parsed_event.external_id = static_cast<uint64_t>(event.external_id.value_or(0));
      parsed_event.correlation = static_cast<uint64_t>(event.correlation.value_or(0));
      slices.push_back(parsed_event);
      slice_lanes.push_back(lane);
      slice_elements.push_back(element_count);
    } else if (event.phase == "i") {
      if (!event.ts) return;
      TraceInstant instant;
      instant.ts_ns = *event.ts;
      instant.name = name_id(event.name);
      instant.lane = lane;
      if (!event.args.empty()) {
        instant.args_offset = static_cast<uint64_t>(file_offset + (event.args.data() - buffer));
        instant.args_bytes = static_cast<uint32_t>(std::min<size_t>(event.args.size(), UINT32_MAX));
      }
      instant.element = element_count;
      instants.push_back(instant);
    } else if (event.phase == "s" || event.phase == "f") {
      if (!event.id || !event.ts) return;
      flow_points.emplace_back(name_id(event.category), static_cast<uint64_t>(*event.id),
                               TraceFlowPoint{event.phase == "s", lane, *event.ts});
      flow_elements.push_back(element_count);
    }
  }
};

// A JSON number as the index reads it: integers that fit 64 bits (those above INT64_MAX, such as the
// profiler's correlation ids with the top bits set, keep their bits as int64) and every number as a
// double (correctly rounded, as strtod does).
struct Number {
  std::optional<int64_t> integer;
  std::optional<uint64_t> unsigned_integer;  // beyond INT64_MAX
  double value = 0;
  std::string_view text;  // the number as written
};

// `text`, one element of the events array, as a document (the form TraceDocumentHandler gets).
error_code element_document(std::string_view text, json& out);

// Reads a trace document with simdjson's On-Demand API. Every value is visited, including those the
// index does not use, so that the whole text is validated as JSON, as a full parse would.
class TraceReader {
 public:
  TraceReader(ChunkIndex& chunk, od::document& document) : chunk_(chunk), document_(document) {}

  // Checks that `value` is valid JSON, recursively.
  error_code skip(od::value value) { return visit(value, nullptr); }

  // Checks that `value` is valid JSON, recursively, and with `out` makes a document of it
  // (TraceDocumentHandler's form); `time`: the value of a "ts" or "dur" key.
  error_code visit(od::value value, json* out, bool time = false) {
    od::json_type type;
    if (auto error = value.type().get(type)) return error;
    switch (type) {
      case od::json_type::object: {
        if (out != nullptr) *out = json::object();
        od::object object;
        if (auto error = value.get_object().get(object)) return error;
        for (auto maybe_field : object) {
          od::field field;
          if (auto error = std::move(maybe_field).get(field)) return error;
          std::string_view key;
          if (auto error = field.unescaped_key().get(key)) return error;
          json inner;
          if (auto error = visit(field.value(), out == nullptr ? nullptr : &inner, key == "ts" || key == "dur")) {
            return error;
          }
          if (out != nullptr) (*out)[std::string(key)] = std::move(inner);  // a repeated key: the last value wins
        }
        return SUCCESS;
      }
      case od::json_type::array: {
        if (out != nullptr) *out = json::array();
        od::array array;
        if (auto error = value.get_array().get(array)) return error;
        for (auto maybe_element : array) {
          od::value element;
          if (auto error = std::move(maybe_element).get(element)) return error;
          json inner;
          if (auto error = visit(element, out == nullptr ? nullptr : &inner)) return error;
          if (out != nullptr) out->push_back(std::move(inner));
        }
        return SUCCESS;
      }
      case od::json_type::string: {
        std::string_view text;
        if (auto error = value.get_string().get(text)) return error;
        if (out != nullptr) *out = std::string(text);
        return SUCCESS;
      }
      case od::json_type::number: {
        Number number;
        if (auto error = read_number(value, number)) return error;
        if (out != nullptr) *out = number_json(number, time);
        return SUCCESS;
      }
      case od::json_type::boolean: {
        // A damaged literal ("tru") reads as a bool of the wrong type: name what it is.
        bool flag = false;
        if (value.get_bool().get(flag) != SUCCESS) {
          return value.raw_json_token().starts_with('t') ? simdjson::T_ATOM_ERROR : simdjson::F_ATOM_ERROR;
        }
        if (out != nullptr) *out = flag;
        return SUCCESS;
      }
      case od::json_type::null: {
        bool null = false;
        if (auto error = value.is_null().get(null)) return error;
        if (out != nullptr) *out = nullptr;
        return null ? SUCCESS : simdjson::N_ATOM_ERROR;
      }
    }
    return simdjson::TAPE_ERROR;
  }

  // A number in a document: a time ("ts", "dur") as exact nanoseconds or, when it is none, the
  // number as a float; integers as integers.
  static json number_json(const Number& number, bool time) {
    int64_t ns = 0;
    if (time) return trace_time_ns(number.text, ns) ? json(ns) : json(number.value);
    if (number.unsigned_integer) return json(*number.unsigned_integer);
    if (number.integer) return json(*number.integer);
    return json(number.value);
  }

  // The elements of the events array: objects are events, anything else is only validated (or, to
  // a document handler, handed on).
  error_code events(od::array array) {
    for (auto maybe_element : array) {
      od::value element;
      if (auto error = std::move(maybe_element).get(element)) return error;
      if (chunk_.documents != nullptr) {  // every element, for the handler to refuse what is no event
        if (auto error = document(element)) return error;
        continue;
      }
      od::json_type type;
      if (auto error = element.type().get(type)) return error;
      if (type != od::json_type::object) {
        json parsed;
        if (auto error = visit(element, chunk_.keep ? &parsed : nullptr)) return error;
        if (chunk_.keep) chunk_.irregular.emplace_back(chunk_.element_count, std::move(parsed));
        ++chunk_.element_count;
        continue;
      }
      const char* begin = element.raw_json_token().data();  // the '{'
      od::object object;
      if (auto error = element.get_object().get(object)) return error;
      bool irregular = false;
      if (auto error = event(object, irregular)) return error;
      if (irregular && chunk_.keep) {
        // The object's text ends at the '}' before the next token (at least the array's ']' follows).
        const char* end = location();
        if (end == nullptr) return simdjson::INCOMPLETE_ARRAY_OR_OBJECT;
        while (end > begin && end[-1] != '}') --end;
        json parsed;
        if (auto error = element_document(std::string_view(begin, static_cast<size_t>(end - begin)), parsed)) {
          return error;
        }
        chunk_.irregular.emplace_back(chunk_.element_count, std::move(parsed));
      }
      ++chunk_.element_count;
    }
    return SUCCESS;
  }

  // One element of the events array to the document handler.
  error_code document(od::value element) {
    json parsed;
    if (auto error = visit(element, &parsed)) return error;
    chunk_.documents->element(parsed, chunk_.element_base + chunk_.element_count++);
    return SUCCESS;
  }

 public:
  // A top-level value other than the events array: kept in the chunk's root (document mode) or
  // validated.
  error_code root_value(std::string_view key, od::value value) {
    if (chunk_.documents == nullptr && !chunk_.keep_root) return skip(value);
    json parsed;
    if (auto error = visit(value, &parsed)) return error;
    chunk_.top_level[std::string(key)] = std::move(parsed);
    return SUCCESS;
  }

  // Where the parser stands in the text: the start of the next token, or nullptr at the end.
  const char* location() {
    auto at = document_.current_location();
    return at.error() == SUCCESS ? at.value_unsafe() : nullptr;
  }

 private:
  static error_code read_number(od::value value, Number& number) {
    number.text = value.raw_json_token();
    while (!number.text.empty() && (number.text.back() == ' ' || number.text.back() == '\t' ||
                                    number.text.back() == '\n' || number.text.back() == '\r')) {
      number.text.remove_suffix(1);
    }
    od::number parsed;
    if (auto error = value.get_number().get(parsed)) return error;
    switch (parsed.get_number_type()) {
      case od::number_type::signed_integer:
        number.integer = parsed.get_int64();
        number.value = static_cast<double>(parsed.get_int64());
        break;
      case od::number_type::unsigned_integer:
        number.integer = static_cast<int64_t>(parsed.get_uint64());
        number.unsigned_integer = parsed.get_uint64();
        number.value = static_cast<double>(parsed.get_uint64());
        break;
      case od::number_type::floating_point_number:
        number.value = parsed.get_double();
        break;
    }
    return SUCCESS;
  }

  static error_code type_of(od::value& value, od::json_type& type) { return value.type().get(type); }

  error_code string_or_skip(od::value value, std::string_view& out, bool* wrong_type = nullptr) {
    od::json_type type;
    if (auto error = type_of(value, type)) return error;
    if (type != od::json_type::string) {
      if (wrong_type != nullptr) *wrong_type = true;
      return skip(value);
    }
    return value.get_string().get(out);
  }

  error_code number_or_skip(od::value value, Number& out, bool& is_number) {
    od::json_type type;
    if (auto error = type_of(value, type)) return error;
    is_number = type == od::json_type::number;
    if (!is_number) return skip(value);
    return read_number(value, out);
  }

  // One event object: its fields in order, a repeated key's last value winning. `irregular`: see
  // TraceRun::irregular (set also where the typed records would still be right: only ever too often).
  error_code event(od::object& object, bool& irregular) {
    EventFields fields;
    for (auto maybe_field : object) {
      od::field field;
      if (auto error = std::move(maybe_field).get(field)) return error;
      std::string_view key;
      if (auto error = field.unescaped_key().get(key)) return error;
      od::value value = field.value();
      switch (key_of(key)) {
        case Key::ph:
          if (auto error = string_or_skip(value, fields.phase, &fields.irregular)) return error;
          break;
        case Key::name:
          if (auto error = string_or_skip(value, fields.name, &fields.irregular)) return error;
          break;
        case Key::cat:
          if (auto error = string_or_skip(value, fields.category, &fields.irregular)) return error;
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
          if (!is_number) {
            fields.irregular = true;
            break;
          }
          if (which == Key::ts || which == Key::dur) {
            int64_t ns = 0;
            std::optional<int64_t>& time = which == Key::ts ? fields.ts : fields.dur;
            if (trace_time_ns(number.text, ns)) {
              time = ns;
            } else {
              time.reset();  // a repeated key's last value wins, also when it is no time
              fields.irregular = true;
            }
          } else if (!number.integer || (number.unsigned_integer && which != Key::id) ||
                     (which == Key::id && !number.unsigned_integer && *number.integer < 0)) {
            fields.irregular = true;  // ids are unsigned, pid and tid signed 64-bit integers
          }
          if (number.integer && which == Key::pid) fields.pid = number.integer;
          if (number.integer && which == Key::tid) fields.tid = number.integer;
          if (number.integer && which == Key::id) fields.id = number.integer;
          break;
        }
        case Key::args: {
          od::json_type type;
          if (auto error = type_of(value, type)) return error;
          if (type != od::json_type::object) {
            fields.irregular = true;
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
    irregular = fields.irregular || lacks_a_needed_field(fields);
    chunk_.consume(fields);
    return SUCCESS;
  }

  // What an event of its kind needs for its typed record: a lane, and X: name, category and a time
  // span; i: a time; s, f: an id and a time; a process name: a string in args when it has args.
  static bool lacks_a_needed_field(const EventFields& e) {
    const bool lane = e.pid && e.tid;
    if (e.phase == "X") return !lane || !e.ts || !e.dur || *e.dur < 0 || e.name.data() == nullptr ||
                               e.category.data() == nullptr;
    if (e.phase == "i") return !lane || !e.ts;
    if (e.phase == "s" || e.phase == "f") return !lane || !e.ts || !e.id;
    if (e.phase == "M") return !lane || e.args_name_bad || (e.name == "process_name" && !e.args.empty() && !e.args_name);
    return false;
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
        if (auto error = string_or_skip(field.value(), text, &fields.args_name_bad)) return error;
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
  // The text, wrapped in '[' and ']' when bracketed, in the padded buffer. Text already in the
  // buffer (reserve) stays there, moved to its start when it begins later.
  std::string_view load(std::string_view text, bool bracketed) {
    const size_t size = text.size() + (bracketed ? 2 : 0);
    if (size + simdjson::SIMDJSON_PADDING > capacity_) {
      capacity_ = size + size / 4 + simdjson::SIMDJSON_PADDING;
      buffer_ = std::make_unique_for_overwrite<char[]>(capacity_);
    }
    char* out = buffer_.get();
    if (bracketed) *out++ = '[';
    if (text.data() != out) std::memmove(out, text.data(), text.size());
    if (bracketed) out[text.size()] = ']';
    std::memset(buffer_.get() + size, 0, simdjson::SIMDJSON_PADDING);
    return {buffer_.get(), size};
  }
  // A buffer for `size` bytes of text and the padding, for the caller to fill and then load().
  char* reserve(size_t size) {
    capacity_ = size + simdjson::SIMDJSON_PADDING;
    buffer_ = std::make_unique_for_overwrite<char[]>(capacity_);
    return buffer_.get();
  }
  simdjson::simdjson_result<od::document> iterate(std::string_view loaded) {
    return parser_.iterate(loaded.data(), loaded.size(), capacity_);
  }

 private:
  od::parser parser_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
};

error_code element_document(std::string_view text, json& out) {
  PaddedParser parser;
  const std::string_view loaded = parser.load(text, false);
  od::document document;
  if (auto error = parser.iterate(loaded).get(document)) return error;
  ChunkIndex scratch;
  TraceReader reader(scratch, document);
  od::value value;
  if (auto error = document.get_value().get(value)) return error;
  return reader.visit(value, &out);
}

std::string parse_error_message(error_code error, std::optional<size_t> offset) {
  std::string message = simdjson::error_message(error);
  if (offset) message += fmt::format(" (near byte {})", *offset);
  return message;
}

// The whole file's root value: {"traceEvents": [...], ...} (the first array under that key holds the
// events, every other value is validated) or a bare array of events; any other JSON value parses but
// has no events.
error_code parse_root(od::document& document, od::json_type type, TraceReader& reader, ChunkIndex& chunk) {
  switch (type) {
    case od::json_type::array: {
      od::array array;
      if (auto error = document.get_array().get(array)) return error;
      chunk.found_events = true;
      if (auto error = reader.events(array)) return error;
      break;
    }
    case od::json_type::object: {
      od::object object;
      if (auto error = document.get_object().get(object)) return error;
      for (auto maybe_field : object) {
        od::field field;
        if (auto error = std::move(maybe_field).get(field)) return error;
        std::string_view key;
        if (auto error = field.unescaped_key().get(key)) return error;
        od::value value = field.value();
        od::json_type value_type;
        if (auto error = value.type().get(value_type)) return error;
        if (!chunk.found_events && value_type == od::json_type::array && key_of(key) == Key::trace_events) {
          od::array array;
          if (auto error = value.get_array().get(array)) return error;
          chunk.found_events = true;
          if (auto error = reader.events(array)) return error;
        } else if (key_of(key) != Key::trace_events) {
          if (auto error = reader.root_value(key, value)) return error;
        } else if (auto error = reader.skip(value)) {  // a second events array: validated, not read
          return error;
        }
      }
      break;
    }
    case od::json_type::string: {
      std::string_view scalar;
      if (auto error = document.get_string().get(scalar)) return error;
      break;
    }
    case od::json_type::number: {
      double scalar = 0;
      if (auto error = document.get_double().get(scalar)) return error;
      break;
    }
    case od::json_type::boolean: {
      bool scalar = false;
      if (auto error = document.get_bool().get(scalar)) return error;
      break;
    }
    case od::json_type::null: {
      bool null = false;
      if (auto error = document.is_null().get(null)) return error;
      if (!null) return simdjson::N_ATOM_ERROR;
      break;
    }
  }
  return SUCCESS;
}

// Parses text[0, size) into `chunk`. Bracketed: the text is a run of elements of the events array,
// read as if wrapped in '[' and ']'; the last run (`strict` false) extends to the end of the file, and
// its parse stops after the events array's ']' (recorded as `events_end`). Otherwise the text is the
// whole file: either {"traceEvents": [...], ...} or a bare array of events.
void parse_chunk(const char* text, size_t size, bool bracketed, bool strict, ChunkIndex& chunk,
                 PaddedParser& parser, const char* file_begin = nullptr) {
  const std::string_view buffer = parser.load(std::string_view(text, size), bracketed);
  chunk.buffer = buffer.data();
  chunk.file_offset = (text - (file_begin != nullptr ? file_begin : text)) - (bracketed ? 1 : 0);
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
  if (auto error = parse_root(document, type, reader, chunk)) return fail(error, true);
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
  StreamingTraceValidator(const fs::path& path, std::string origin, size_t run_bytes, TraceDocumentHandler* handler)
      : path_(path), origin_(std::move(origin)), run_bytes_(run_bytes), handler_(handler) {}

  // The top-level object less "traceEvents" with a handler, else null.
  json run() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw TraceReadError(fmt::format("profile file '{}' cannot be opened: {}", origin_, std::strerror(errno)));
    }
    std::vector<char> block(kBlockBytes);
    bool first = true;
    while (true) {
      const ssize_t got = ::read(fd, block.data(), block.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int code = errno;
        ::close(fd);
        throw TraceReadError(fmt::format("profile file '{}' cannot be read: {}", origin_, std::strerror(code)));
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
    chunk.documents = handler_;
    parse_chunk(outside_.data(), outside_.size(), false, true, chunk, parser_);
    if (!chunk.parsed) {
      throw TraceReadError(fmt::format("profile file '{}' is not valid JSON: {}{}", origin_, chunk.error, kDamaged));
    }
    if (!chunk.found_events) throw TraceReadError(fmt::format("profile file '{}' has no traceEvents array", origin_));
    if (chunk.bad_complete_event) throw bad_event();
    return handler_ == nullptr ? json() : std::move(chunk.top_level);
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

  TraceReadError invalid(std::string_view message, std::optional<uint64_t> at) const {
    return TraceReadError(fmt::format("profile file '{}' is not valid JSON: {}{}{}", origin_, message,
                                      at ? fmt::format(" (near byte {})", *at) : std::string(), kDamaged));
  }
  TraceReadError bad_event() const {
    return TraceReadError(fmt::format("profile file '{}': a complete event without a valid ts/dur", origin_));
  }

  void keep_outside(char c) {
    if (outside_.size() >= kMaxOutsideBytes) {
      throw TraceReadError(fmt::format("profile file '{}' holds more than {} MiB outside its traceEvents array; "
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
    chunk.documents = handler_;
    chunk.element_base = elements_;
    parse_chunk(wrapped_.data(), wrapped_.size(), false, true, chunk, parser_);
    elements_ += chunk.element_count;
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
  TraceDocumentHandler* handler_;  // null: the checks of read_trace
  size_t elements_ = 0;            // elements handed to it so far
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

// Large traces: runs of events parsed on several threads, each thread taking the next run. Empty when
// the file is small or anything is unexpected (another layout, a parse error): the caller then parses
// the whole file at once, which also gives the exact error.
// Parses each range of the file into its chunk, each thread taking the next range not yet taken; the
// last range is the open one (to the end of the file) when `last_open`. False when a run did not
// parse (the rest are then left) or the read was cancelled.
bool parse_ranges(const MappedTrace& file, const std::vector<std::pair<size_t, size_t>>& ranges, bool last_open,
                  size_t threads, const TraceReadOptions& options, std::vector<ChunkIndex>& chunks) {
  chunks.resize(ranges.size());
  std::atomic<size_t> next_run{0};
  std::atomic<bool> failed{false};
  auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed); };
  auto work = [&] {
    PaddedParser parser;
    for (size_t i = next_run++; i < ranges.size() && !failed && !cancelled(); i = next_run++) {
      const bool open = last_open && i + 1 == ranges.size();
      parse_chunk(file.begin() + ranges[i].first, ranges[i].second - ranges[i].first, true, !open, chunks[i],
                  parser, file.begin());
      if (!chunks[i].parsed) failed = true;
      if (options.parsed_bytes != nullptr) *options.parsed_bytes += ranges[i].second - ranges[i].first;
    }
  };
  std::vector<std::thread> workers;
  for (size_t t = 1; t < std::min(threads, ranges.size()); ++t) workers.emplace_back(work);
  if (!ranges.empty()) work();
  for (std::thread& worker : workers) worker.join();
  return !failed && !cancelled();
}

size_t reader_threads(const TraceReadOptions& options) {
  return std::max(1u, options.threads != 0 ? options.threads : std::thread::hardware_concurrency());
}

std::vector<ChunkIndex> parse_in_runs(const MappedTrace& file, const TraceReadOptions& options) {
  const size_t by_size = file.size() / std::max<size_t>(1, options.bytes_per_thread);
  const size_t threads = std::min<size_t>(reader_threads(options), std::max<size_t>(1, by_size));
  if (file.size() < options.parallel_parse_bytes || threads <= 1) return {};
  size_t open_bracket = 0;
  const size_t runs = std::max(threads, file.size() / std::max<size_t>(1, options.bytes_per_run));
  const auto ranges = split_events(std::string_view(file.begin(), file.size()), runs, open_bracket);
  std::vector<ChunkIndex> chunks;
  if (!parse_ranges(file, ranges, true, threads, options, chunks)) return {};
  // Every run parsed, the last one reached the end of the events array, and what surrounds the array
  // is valid JSON on its own: then the file as a whole is, and the runs hold all of its events.
  const bool all_parsed = std::all_of(chunks.begin(), chunks.end(), [](const ChunkIndex& c) { return c.parsed; });
  if (!all_parsed || chunks.empty() || chunks.back().events_end == nullptr) return {};
  std::string outside(file.begin(), open_bracket + 1);
  outside += ']';
  outside.append(chunks.back().events_end, file.begin() + file.size());
  std::string_view top_text = outside;
  if (top_text.starts_with("\xEF\xBB\xBF")) top_text.remove_prefix(3);
  ChunkIndex top;
  top.keep = false;
  top.keep_root = true;
  PaddedParser parser;
  parse_chunk(top_text.data(), top_text.size(), false, true, top, parser);
  if (!top.parsed) return {};
  chunks.front().top_level = std::move(top.top_level);
  return chunks;
}

// The whole text at once.
void parse_whole(std::string_view whole, const std::string& origin, ChunkIndex& chunk, PaddedParser&& parser = {}) {
  // A UTF-8 byte order mark is allowed before the document (simdjson leaves skipping it to callers).
  std::string_view text = whole;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  parse_chunk(text.data(), text.size(), false, true, chunk, parser, whole.data());
  if (!chunk.parsed) {
    throw TraceReadError(fmt::format("profile file '{}' is not valid JSON: {}{}", origin, chunk.error, kDamaged));
  }
  if (!chunk.found_events) throw TraceReadError(fmt::format("profile file '{}' has no traceEvents array", origin));
}

}  // namespace

MappedTrace::MappedTrace(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw TraceReadError(fmt::format("profile file '{}' cannot be opened: {}; check that it exists and is readable",
                                     path.filename().string(), std::strerror(errno)));
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
  if (size_ > 0 && data_ == nullptr) {
    ::close(fd);
    throw TraceReadError(fmt::format("profile file '{}' cannot be read", path.filename().string()));
  }
  fd_ = fd;
}

MappedTrace::~MappedTrace() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

std::string_view MappedTrace::text(uint64_t offset, uint64_t bytes) const {
  // A file cut short since it was mapped would fault on the pages it lost: read only what it still holds.
  struct stat info {};
  if (offset + bytes > size_ || ::fstat(fd_, &info) != 0 || static_cast<uint64_t>(info.st_size) < offset + bytes) {
    return {};
  }
  return {data_ + offset, bytes};
}

namespace {

std::vector<TraceRun> runs_of(std::vector<ChunkIndex>& chunks, const std::string& origin,
                              const TraceReadOptions& options) {
  std::vector<TraceRun> runs;
  runs.reserve(chunks.size());
  for (ChunkIndex& chunk : chunks) {
    if (chunk.bad_complete_event && options.refuse_bad_complete_events) {
      throw TraceReadError(fmt::format("profile file '{}': a complete event without a valid ts/dur", origin));
    }
    runs.push_back(std::move(static_cast<TraceRun&>(chunk)));
  }
  return runs;
}

}  // namespace

std::vector<TraceRun> read_trace(const MappedTrace& file, const std::string& origin, const TraceReadOptions& options) {
  std::vector<ChunkIndex> chunks = parse_in_runs(file, options);
  if (options.cancel != nullptr && options.cancel->load()) {
    throw TraceReadError(fmt::format("reading profile file '{}' was cancelled", origin));
  }
  if (chunks.empty()) {
    chunks.emplace_back().keep_root = true;
    parse_whole(std::string_view(file.begin(), file.size()), origin, chunks.back());
    if (options.parsed_bytes != nullptr) *options.parsed_bytes = file.size();
  }
  return runs_of(chunks, origin, options);
}

std::vector<TraceRun> read_trace_text(std::string_view text, const std::string& origin,
                                      const TraceReadOptions& options) {
  std::vector<ChunkIndex> chunks(1);
  chunks.back().keep_root = true;
  parse_whole(text, origin, chunks.back());
  return runs_of(chunks, origin, options);
}

json read_trace_args(std::string_view text, std::span<const std::string_view> keys, const std::string& origin) {
  thread_local PaddedParser parser;
  const std::string_view loaded = parser.load(text, false);
  od::document document;
  json out = json::object();
  ChunkIndex scratch;
  auto read = [&]() -> error_code {
    if (auto error = parser.iterate(loaded).get(document)) return error;
    TraceReader reader(scratch, document);
    od::object object;
    if (auto error = document.get_object().get(object)) return error;
    for (auto maybe_field : object) {
      od::field field;
      if (auto error = std::move(maybe_field).get(field)) return error;
      std::string_view key;
      if (auto error = field.unescaped_key().get(key)) return error;
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        if (auto error = reader.skip(field.value())) return error;
        continue;
      }
      json inner;
      if (auto error = reader.visit(field.value(), &inner)) return error;
      out[std::string(key)] = std::move(inner);  // a repeated key: the last value wins
    }
    return SUCCESS;
  };
  if (auto error = read()) {
    throw TraceReadError(fmt::format("profile file '{}' changed while it was read ({} in an event's args); read it "
                                     "again", origin, simdjson::error_message(error)));
  }
  return out;
}

std::vector<TraceRun> read_trace_prefix(const MappedTrace& file, const TraceReadOptions& options, size_t prefix_bytes,
                                        size_t& covered) {
  covered = 0;
  const std::string_view whole(file.begin(), file.size());
  const size_t run_bytes = std::max<size_t>(1, std::min(options.bytes_per_run, prefix_bytes));
  // Split the head of the file (the prefix and a run beyond it, where the cut after the prefix is
  // found); the range that runs to the end of that head may end inside an event and is dropped.
  const std::string_view head = whole.substr(0, std::min(whole.size(), prefix_bytes + run_bytes));
  size_t open_bracket = 0;
  auto ranges = split_events(head, std::max<size_t>(2, head.size() / run_bytes), open_bracket);
  if (ranges.size() < 2 || head.size() == whole.size()) return {};
  ranges.pop_back();
  std::vector<ChunkIndex> chunks;
  if (!parse_ranges(file, ranges, false, reader_threads(options), options, chunks)) return {};
  std::vector<TraceRun> runs;
  runs.reserve(chunks.size());
  for (ChunkIndex& chunk : chunks) {
    if (chunk.bad_complete_event) return {};
    runs.push_back(std::move(static_cast<TraceRun&>(chunk)));
  }
  covered = ranges.back().second;
  return runs;
}

json validate_trace_file(const std::filesystem::path& trace_path, const std::string& origin, size_t run_bytes,
                         TraceDocumentHandler* handler) {
  return StreamingTraceValidator(trace_path, origin, run_bytes, handler).run();
}

}  // namespace sightline::formats
