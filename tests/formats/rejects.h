// What every reader of our binary formats (NEFF, NTFF) must reject, and how it must say so.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sightline/error.h"

namespace sightline::formats::testing {

// The message of the sightline::Error `parse` throws for `bytes`, or "" when it accepts them.
inline std::string error_of(const std::function<void(std::span<const uint8_t>)>& parse,
                            std::span<const uint8_t> bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every prefix of a valid file is rejected as truncated, naming the file.
inline void expect_every_truncation_rejected(const std::function<void(std::span<const uint8_t>)>& parse,
                                             const std::vector<uint8_t>& bytes, const std::string& file_name) {
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string e = error_of(parse, std::span(bytes).first(n));
    ASSERT_FALSE(e.empty()) << "truncated to " << n << " bytes was accepted";
    ASSERT_NE(e.find("truncated"), std::string::npos) << e;
    ASSERT_NE(e.find(file_name), std::string::npos) << e;
  }
}

// Every single-byte change of a valid file is rejected as corrupt (a checksum) or truncated (a length).
inline void expect_every_byte_corruption_rejected(const std::function<void(std::span<const uint8_t>)>& parse,
                                                  const std::vector<uint8_t>& bytes) {
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::vector<uint8_t> bad = bytes;
    bad[at] ^= static_cast<uint8_t>(1 + at % 255);
    const std::string e = error_of(parse, bad);
    ASSERT_FALSE(e.empty()) << "corruption at " << at << " was accepted";
    ASSERT_TRUE(e.find("corrupt") != std::string::npos || e.find("truncated") != std::string::npos) << e;
  }
}

}  // namespace sightline::formats::testing
