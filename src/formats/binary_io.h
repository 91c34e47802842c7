// Little-endian byte writer and bounds-checked reader shared by the binary formats (NEFF, NTFF).
//
//   ByteWriter w;  w.put(uint32_t{7});                       // appends the bytes of the value
//   ByteReader r("NTFF", w.out, "trace.ntff", /*base=*/64);
//   uint32_t v = r.get<uint32_t>("execution count");         // throws, naming the offset, if short
//
// Every error names the format, the file (origin) and the absolute byte offset (base + position), so
// a truncated or corrupt file says exactly where it went wrong. Formats derive from ByteReader to add
// readers of their own structures.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sightline/error.h"

namespace sightline::formats {

class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  std::vector<uint8_t> out;
};

class ByteReader {
 public:
  // `format` and `origin` must outlive the reader.
  ByteReader(std::string_view format, std::span<const uint8_t> bytes, const std::string& origin, size_t base)
      : bytes_(bytes), format_(format), origin_(origin), base_(base) {}

  template <typename... Args>
  [[noreturn]] void error_at(size_t at, fmt::format_string<Args...> format, Args&&... args) const {
    fail("{} '{}': corrupt at byte offset {}: {}", format_, origin_, base_ + at,
         fmt::format(format, std::forward<Args>(args)...));
  }

  void need(size_t n, const char* what) const {
    if (bytes_.size() - pos_ < n) {
      fail("{} '{}': truncated at byte offset {}: expected {} bytes for {}, {} left", format_, origin_,
           base_ + pos_, n, what, bytes_.size() - pos_);
    }
  }

  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

 protected:
  std::span<const uint8_t> bytes_;
  std::string_view format_;
  const std::string& origin_;
  size_t base_;
  size_t pos_ = 0;
};

}  // namespace sightline::formats
