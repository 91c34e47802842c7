// Errors in two tiers.
//
//  * sightline::Error — a user error: bad shapes, dtypes, devices, files, exhausted memory. The
//    message says what was wrong and what would be valid, e.g.
//      "shape mismatch in aten::mul: [4096, 4096] vs [4095]; shapes must be broadcastable".
//    Throw it with SIGHTLINE_CHECK(cond, fmt, args...) or sightline::fail(fmt, args...).
//  * SIGHTLINE_ASSERT(cond) — a broken internal invariant: prints file:line and the condition and
//    aborts, because continuing would compute garbage.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace sightline {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char* condition, const char* file, int line, const std::string& detail);

}  // namespace sightline

#define SIGHTLINE_CHECK(cond, ...)              \
  do {                                          \
    if (!(cond)) ::sightline::fail(__VA_ARGS__); \
  } while (0)

#define SIGHTLINE_ASSERT(cond)                                                   \
  do {                                                                           \
    if (!(cond)) ::sightline::assert_fail(#cond, __FILE__, __LINE__, std::string()); \
  } while (0)

// SIGHTLINE_ASSERT_MSG(i < n, "i={} n={}", i, n): the same with the values that broke it.
#define SIGHTLINE_ASSERT_MSG(cond, ...)                                                     \
  do {                                                                                      \
    if (!(cond)) ::sightline::assert_fail(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
