// A streaming JSON writer: the one place that turns text into JSON, so no exporter escapes strings
// by hand. It buffers output and hands it to a sink in large pieces, tracks nesting and commas,
// escapes quotes, backslashes and control characters, passes valid UTF-8 through unchanged and
// replaces invalid bytes by U+FFFD, so its output always parses.
//
//   std::string text;
//   JsonWriter json([&text](std::string_view piece) { text += piece; });
//   json.begin_object().key("name").value("aten::mul").key("ts").fixed3(1234567).end_object();
//   json.flush();   // text == R"({"name":"aten::mul","ts":1234.567})"
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sightline::profiler {

class JsonWriter {
 public:
  using Sink = std::function<void(std::string_view)>;

  // How long the sink may read a piece it was handed.
  enum class Pieces {
    // Until the sink returns: the writer fills the same buffer again.
    until_return,
    // Until the sink's next call returns: the writer alternates two buffers, so a sink that hands a
    // piece to another thread (a file writer) needs no copy, provided each call waits until the
    // piece before it is done with.
    until_next_return,
  };

  explicit JsonWriter(Sink sink, std::size_t flush_threshold = 1 << 16, Pieces pieces = Pieces::until_return);
  JsonWriter(const JsonWriter&) = delete;
  JsonWriter& operator=(const JsonWriter&) = delete;

  // one_per_line: elements separated by ",\n" (readable traces); otherwise compact.
  JsonWriter& begin_array(bool one_per_line = false);
  JsonWriter& end_array();
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& key(std::string_view name);
  // A key known to need no escaping (printable ASCII without '"' or '\\', as every literal key of
  // our exporters is): written as is, which the hot paths of the trace writers use.
  JsonWriter& plain_key(std::string_view name);
  // The same for a value.
  JsonWriter& plain_value(std::string_view text);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(double number);  // NaN and infinities, which JSON lacks, are written as null
  JsonWriter& value(bool flag);
  JsonWriter& null();

  // A number with exactly three decimals from an integer count of thousandths: 1234567 -> 1234.567.
  // Kineto writes timestamps this way (microseconds from nanoseconds) to keep full precision.
  JsonWriter& fixed3(std::int64_t thousandths);

  // Hands buffered output to the sink.
  void flush();

  // True when every object and array opened has been closed.
  bool complete() const { return frames_.empty() && wrote_root_; }

  // Appends `text` to `out` as a JSON string literal (quotes included).
  static void append_quoted(std::string& out, std::string_view text);

  // For hot loops that format a whole value at once (the trace writers' events): writes the
  // separator the value needs, makes room for `max_bytes` and returns where its text goes;
  // end_raw(end) then takes the bytes written up to `end`. The text must be one complete JSON value,
  // written with the helpers below so that it is the same as the calls it stands for would write.
  char* begin_raw(std::size_t max_bytes);
  void end_raw(char* end);

  // Text formatted away from the writer (on other threads) and handed over whole: a growable
  // buffer that, like the writer's own, is not zeroed before it is written.
  class Text {
   public:
    // Makes room for `bytes` more and returns where they go; commit(end) then keeps them.
    char* room(std::size_t bytes) {
      if (capacity_ - size_ < bytes) grow(bytes);
      return data_.get() + size_;
    }
    void commit(char* end) { size_ = static_cast<std::size_t>(end - data_.get()); }
    void clear() { size_ = 0; }
    std::string_view view() const { return {data_.get(), size_}; }

   private:
    void grow(std::size_t bytes);
    std::unique_ptr<char[]> data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
  };

  // The separator that goes before each element of the array being written after its first.
  std::string_view element_separator() const;

  // Hands `text` to the sink as a piece of its own, after what is buffered, without copying it:
  // whole elements of the array being written, each after element_separator() (the first one's is
  // dropped when the array has no element yet), written with the raw helpers below. The writer keeps
  // the text for as long as the sink may read it and returns a Text the caller may fill again (one
  // handed over earlier that the sink is done with, or an empty one).
  Text hand_over_elements(Text text);

  // The writers of the calls above, on a raw pointer; each returns the end of what it wrote.
  static constexpr std::size_t kMaxNumberBytes = 24;  // an int64, uint64 or fixed3, sign included
  static constexpr std::size_t kMaxDoubleBytes = 32;
  static constexpr std::size_t max_quoted_bytes(std::size_t text_bytes) { return 2 + 6 * text_bytes; }
  static char* write_quoted(char* out, std::string_view text);
  static char* write_integer(char* out, std::int64_t number);
  static char* write_integer(char* out, std::uint64_t number);
  static char* write_fixed3(char* out, std::int64_t thousandths);
  static char* write_double(char* out, double number);  // null when not finite
  static char* write_literal(char* out, std::string_view text) {
    for (char c : text) *out++ = c;
    return out;
  }

 private:
  struct Frame {
    bool is_object = false;
    bool one_per_line = false;
    bool has_elements = false;
    bool after_key = false;
  };
  void before_value();
  void before_key();
  void maybe_flush();

  // The output buffer: grown by hand so that raw writers can fill it without zeroing it first.
  void reserve_more(std::size_t bytes) {
    if (capacity_ - size_ < bytes) grow(bytes);
  }
  void grow(std::size_t bytes);
  void append(std::string_view text) {
    reserve_more(text.size());
    if (!text.empty()) std::memcpy(data_.get() + size_, text.data(), text.size());
    size_ += text.size();
  }
  void append(char c) {
    reserve_more(1);
    data_[size_++] = c;
  }

  Sink sink_;
  std::size_t flush_threshold_;
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  // Pieces::until_next_return: the buffer of the piece handed last, swapped with data_ at each flush.
  bool double_buffered_ = false;
  std::unique_ptr<char[]> spare_;
  std::size_t spare_capacity_ = 0;
  std::vector<Frame> frames_;
  bool wrote_root_ = false;
  // Pieces::until_next_return: the Text handed over last, which the sink may still read.
  Text handed_;
};

}  // namespace sightline::profiler
