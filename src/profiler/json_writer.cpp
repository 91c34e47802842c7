#include "profiler/json_writer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <charconv>
#include <cmath>
#include <iterator>
#include <utility>

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

// The escape of each byte that a JSON string cannot hold as it is (control characters, quote and
// backslash); bytes >= 0x80 are checked as UTF-8 instead.
struct Escape {
  char text[7];
  std::uint8_t size;
};
constexpr std::array<Escape, 0x80> kEscapes = [] {
  std::array<Escape, 0x80> escapes{};
  constexpr char kHex[] = "0123456789abcdef";
  for (int c = 0; c < 0x80; ++c) {
    Escape& e = escapes[static_cast<std::size_t>(c)];
    const auto two = [&e](char second) {
      e.text[0] = '\\';
      e.text[1] = second;
      e.size = 2;
    };
    switch (c) {
      case '"': two('"'); break;
      case '\\': two('\\'); break;
      case '\b': two('b'); break;
      case '\f': two('f'); break;
      case '\n': two('n'); break;
      case '\r': two('r'); break;
      case '\t': two('t'); break;
      default:
        e.text[0] = '\\';
        e.text[1] = 'u';
        e.text[2] = '0';
        e.text[3] = '0';
        e.text[4] = kHex[c >> 4];
        e.text[5] = kHex[c & 15];
        e.size = 6;
    }
  }
  return escapes;
}();

}  // namespace

JsonWriter::JsonWriter(Sink sink, std::size_t flush_threshold, Pieces pieces)
    : sink_(std::move(sink)), flush_threshold_(flush_threshold), double_buffered_(pieces == Pieces::until_next_return) {
  reserve_more(flush_threshold_ + 1024);
}

void JsonWriter::grow(std::size_t bytes) {
  const std::size_t capacity = std::max(size_ + bytes, 2 * capacity_);
  auto data = std::make_unique_for_overwrite<char[]>(capacity);
  if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  capacity_ = capacity;
}

void JsonWriter::Text::grow(std::size_t bytes) {
  const std::size_t capacity = std::max(size_ + bytes, 2 * capacity_);
  auto data = std::make_unique_for_overwrite<char[]>(capacity);
  if (size_ != 0) std::memcpy(data.get(), data_.get(), size_);
  data_ = std::move(data);
  capacity_ = capacity;
}

std::string_view JsonWriter::element_separator() const {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && !frames_.back().is_object, "{}", "array elements need an open array");
  return frames_.back().one_per_line ? std::string_view(",\n") : std::string_view(",");
}

JsonWriter::Text JsonWriter::hand_over_elements(Text text) {
  const std::string_view separator = element_separator();
  std::string_view piece = text.view();
  if (piece.empty()) return text;
  SIGHTLINE_ASSERT_MSG(piece.starts_with(separator), "{}", "handed-over elements start with their separator");
  Frame& frame = frames_.back();
  if (!frame.has_elements) piece.remove_prefix(separator.size());
  frame.has_elements = true;
  flush();
  if (!piece.empty()) sink_(piece);
  if (!double_buffered_) {
    text.clear();
    return text;
  }
  // The sink may read this piece until its next call returns; the one handed before it it is done with.
  std::swap(handed_, text);
  text.clear();
  return text;
}

char* JsonWriter::write_quoted(char* out, std::string_view text) {
  *out++ = '"';
  const char* at = text.data();
  const char* const end = at + text.size();
  while (at < end) {
    const char* plain = at;
    while (at < end && kPlain[static_cast<unsigned char>(*at)]) ++at;
    if (at != plain) {
      std::memcpy(out, plain, static_cast<std::size_t>(at - plain));
      out += at - plain;
    }
    if (at == end) break;
    const auto c = static_cast<unsigned char>(*at);
    if (c < 0x80) {
      const Escape& escape = kEscapes[c];
      std::memcpy(out, escape.text, 6);  // room for 6 bytes per input byte is reserved
      out += escape.size;
      ++at;
      continue;
    }
    const std::size_t length = utf8_sequence_length(text, static_cast<std::size_t>(at - text.data()));
    if (length != 0) {
      std::memcpy(out, at, length);
      out += length;
      at += length;
    } else {
      std::memcpy(out, "\\ufffd", 6);  // not valid UTF-8: JSON text must be Unicode
      out += 6;
      ++at;
    }
  }
  *out++ = '"';
  return out;
}

char* JsonWriter::write_integer(char* out, std::int64_t number) {
  return std::to_chars(out, out + kMaxNumberBytes, number).ptr;
}

char* JsonWriter::write_integer(char* out, std::uint64_t number) {
  return std::to_chars(out, out + kMaxNumberBytes, number).ptr;
}

char* JsonWriter::write_fixed3(char* out, std::int64_t thousandths) {
  // Unsigned, so that INT64_MIN has a magnitude too.
  const std::uint64_t magnitude =
      thousandths < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(thousandths) : static_cast<std::uint64_t>(thousandths);
  if (thousandths < 0) *out++ = '-';
  out = std::to_chars(out, out + kMaxNumberBytes, magnitude / 1000).ptr;
  const auto fraction = static_cast<unsigned>(magnitude % 1000);
  out[0] = '.';
  out[1] = static_cast<char>('0' + fraction / 100);
  out[2] = static_cast<char>('0' + fraction / 10 % 10);
  out[3] = static_cast<char>('0' + fraction % 10);
  return out + 4;
}

char* JsonWriter::write_double(char* out, double number) {
  if (!std::isfinite(number)) return write_literal(out, "null");
  return fmt::format_to_n(out, kMaxDoubleBytes, "{}", number).out;
}

void JsonWriter::append_quoted(std::string& out, std::string_view text) {
  const std::size_t at = out.size();
  out.resize(at + max_quoted_bytes(text.size()));
  char* const end = write_quoted(out.data() + at, text);
  out.resize(static_cast<std::size_t>(end - out.data()));
}

char* JsonWriter::begin_raw(std::size_t max_bytes) {
  before_value();
  reserve_more(max_bytes);
  return data_.get() + size_;
}

void JsonWriter::end_raw(char* end) {
  size_ = static_cast<std::size_t>(end - data_.get());
  maybe_flush();
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
  if (frame.has_elements) append(frame.one_per_line ? std::string_view(",\n") : std::string_view(","));
  frame.has_elements = true;
}

void JsonWriter::maybe_flush() {
  if (size_ >= flush_threshold_) flush();
}

void JsonWriter::flush() {
  if (size_ == 0) return;
  sink_(std::string_view(data_.get(), size_));
  size_ = 0;
  if (double_buffered_) {
    // The sink may still read the piece: the next one goes into the other buffer.
    std::swap(data_, spare_);
    std::swap(capacity_, spare_capacity_);
    reserve_more(flush_threshold_ + 1024);
  }
}

JsonWriter& JsonWriter::begin_array(bool one_per_line) {
  before_value();
  append(one_per_line ? std::string_view("[\n") : std::string_view("["));
  frames_.push_back({false, one_per_line, false, false});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && !frames_.back().is_object, "{}", "end_array without begin_array");
  if (frames_.back().one_per_line) append('\n');
  append(']');
  frames_.pop_back();
  maybe_flush();
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  append('{');
  frames_.push_back({true, false, false, false});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && frames_.back().is_object && !frames_.back().after_key, "{}",
                       "end_object without begin_object, or after a key with no value");
  append('}');
  frames_.pop_back();
  maybe_flush();
  return *this;
}

void JsonWriter::before_key() {
  SIGHTLINE_ASSERT_MSG(!frames_.empty() && frames_.back().is_object && !frames_.back().after_key, "{}",
                       "a JSON key belongs directly inside an object");
  Frame& frame = frames_.back();
  if (frame.has_elements) append(',');
  frame.has_elements = true;
  frame.after_key = true;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_key();
  reserve_more(max_quoted_bytes(name.size()) + 1);
  char* end = write_quoted(data_.get() + size_, name);
  *end++ = ':';
  size_ = static_cast<std::size_t>(end - data_.get());
  return *this;
}

JsonWriter& JsonWriter::plain_key(std::string_view name) {
  before_key();
  append('"');
  append(name);
  append("\":");
  return *this;
}

JsonWriter& JsonWriter::plain_value(std::string_view text) {
  before_value();
  append('"');
  append(text);
  append('"');
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  reserve_more(max_quoted_bytes(text.size()));
  size_ = static_cast<std::size_t>(write_quoted(data_.get() + size_, text) - data_.get());
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  before_value();
  reserve_more(kMaxNumberBytes);
  size_ = static_cast<std::size_t>(write_integer(data_.get() + size_, number) - data_.get());
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  before_value();
  reserve_more(kMaxNumberBytes);
  size_ = static_cast<std::size_t>(write_integer(data_.get() + size_, number) - data_.get());
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  reserve_more(kMaxDoubleBytes);
  size_ = static_cast<std::size_t>(write_double(data_.get() + size_, number) - data_.get());
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  append(flag ? std::string_view("true") : std::string_view("false"));
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  append(std::string_view("null"));
  return *this;
}

JsonWriter& JsonWriter::fixed3(std::int64_t thousandths) {
  before_value();
  reserve_more(kMaxNumberBytes);
  size_ = static_cast<std::size_t>(write_fixed3(data_.get() + size_, thousandths) - data_.get());
  return *this;
}

}  // namespace sightline::profiler
