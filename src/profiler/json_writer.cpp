#include "profiler/json_writer.h"

#include <array>
#include <charconv>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

#include "sightline/error.h"

namespace sightline::profiler {
namespace {

// Length of the valid UTF-8 sequence starting at text[at], or 0 when the bytes there are not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  std::size_t length = 0;
  unsigned char second_min = 0x80;
  unsigned char second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < second_min || byte(at + 1) > second_max) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

// Bytes that a JSON string holds as they are: printable ASCII but the quote and the backslash.
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x7F; ++c) plain[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return plain;
}();

template <typename Integer>
void append_integer(std::string& out, Integer number) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), number);
  out.append(digits, result.ptr);
}

}  // namespace

JsonWriter::JsonWriter(Sink sink, std::size_t flush_threshold)
    : sink_(std::move(sink)), flush_threshold_(flush_threshold) {
  buffer_.reserve(flush_threshold_ + 1024);
}

void JsonWriter::append_quoted(std::string& out, std::string_view text) {
  out += '"';
  std::size_t plain_from = 0;
  std::size_t at = 0;
  auto flush_plain = [&] { out.append(text.substr(plain_from, at - plain_from)); };
  while (at < text.size()) {
    const auto c = static_cast<unsigned char>(text[at]);
    if (kPlain[c]) {
      ++at;
      continue;
    }
    if (c >= 0x80) {
      const std::size_t length = utf8_sequence_length(text, at);
      if (length != 0) {
        at += length;
        continue;
      }
    }
    flush_plain();
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c >= 0x80) {
          out += "\\ufffd";  // not valid UTF-8: JSON text must be Unicode
        } else {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        }
    }
    ++at;
    plain_from = at;
  }
  flush_plain();
  out += '"';
}

void JsonWriter::before_value() {
  if (frames_.empty()) {
    SIGHTLINE_ASSERT_MSG(!wrote_root_, "{}", "a JSON document holds one root value");
    wrote_root_ = true;
    return;
  }
  Frame& frame = frames_.back();
  if (frame.is_object) {
    SIGHTLINE_ASSERT_MSG(frame.after_key, "{}", "a value inside a JSON object needs a key first");
    frame.after_key = false;
    return;
  }
  if (frame.has_elements) buffer_ += frame.one_per_line ? ",\n" : ",";
  frame.has_elements = true;
}

void JsonWriter::maybe_flush() {
  if (buffer_.size() >= flush_threshold_) flush();
}

void JsonWriter::flush() {
  if (buffer_.empty()) return;
  sink_(buffer_);
  buffer_.clear();
}

JsonWriter& JsonWriter::begin_array(bool one_per_line) {
  before_value();
  buffer_ += one_per_line ? "[\n" : "[";
  frames_.push_back({false, one_per_line, false, false});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && !frames_.back().is_object, "{}", "end_array without begin_array");
  if (frames_.back().one_per_line) buffer_ += '\n';
  buffer_ += ']';
  frames_.pop_back();
  maybe_flush();
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  buffer_ += '{';
  frames_.push_back({true, false, false, false});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && frames_.back().is_object && !frames_.back().after_key, "{}",
                       "end_object without begin_object, or after a key with no value");
  buffer_ += '}';
  frames_.pop_back();
  maybe_flush();
  return *this;
}

void JsonWriter::before_key() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && frames_.back().is_object && !frames_.back().after_key, "{}",
                       "a JSON key belongs directly inside an object");
  Frame& frame = frames_.back();
  if (frame.has_elements) buffer_ += ',';
  frame.has_elements = true;
  frame.after_key = true;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_key();
  append_quoted(buffer_, name);
  buffer_ += ':';
  return *this;
}

JsonWriter& JsonWriter::plain_key(std::string_view name) {
  before_key();
  buffer_ += '"';
  buffer_.append(name);
  buffer_.append("\":", 2);
  return *this;
}

JsonWriter& JsonWriter::plain_value(std::string_view text) {
  before_value();
  buffer_ += '"';
  buffer_.append(text);
  buffer_ += '"';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  append_quoted(buffer_, text);
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  before_value();
  append_integer(buffer_, number);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  before_value();
  append_integer(buffer_, number);
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  if (std::isfinite(number)) {
    fmt::format_to(std::back_inserter(buffer_), "{}", number);
  } else {
    buffer_ += "null";
  }
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  buffer_ += flag ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  buffer_ += "null";
  return *this;
}

JsonWriter& JsonWriter::fixed3(std::int64_t thousandths) {
  before_value();
  // Unsigned, so that INT64_MIN has a magnitude too.
  const std::uint64_t magnitude =
      thousandths < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(thousandths) : static_cast<std::uint64_t>(thousandths);
  if (thousandths < 0) buffer_ += '-';
  append_integer(buffer_, magnitude / 1000);
  const auto fraction = static_cast<int>(magnitude % 1000);
  const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                          static_cast<char>('0' + fraction % 10)};
  buffer_.append(digits, 4);
  return *this;
}

}  // namespace sightline::profiler
