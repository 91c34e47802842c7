// Checked arithmetic for shapes, strides, element counts and byte counts. A shape such as
// {1 << 32, 1 << 32} must be an error naming the shape, never a count that wraps to a small number and
// lets a later view read outside its storage.
//
//   if (auto n = checked_numel(shape)) use(*n); else fail("... {} ...", shape);
//   int64_t stride = checked_mul(a, b, [&] { return fmt::format("unsqueeze of {}", t.shape()); });
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sightline/error.h"
#include "sightline/tensor.h"

namespace sightline {

// The element count of `shape` (0 when any size is 0, whatever the others), or nullopt when it does not
// fit in an int64.
std::optional<int64_t> checked_numel(const Dims& shape);

// a * b and a + b, or a sightline::Error saying that `what()` (a description of the shape or view being
// computed) overflows a 64-bit count.
template <typename What>
int64_t checked_mul(int64_t a, int64_t b, What&& what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    fail("{}: {} * {} overflows a 64-bit integer; the sizes are far larger than any memory, check them", what(),
         a, b);
  }
  return out;
}

template <typename What>
int64_t checked_add(int64_t a, int64_t b, What&& what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    fail("{}: {} + {} overflows a 64-bit integer; the sizes are far larger than any memory, check them", what(),
         a, b);
  }
  return out;
}

}  // namespace sightline
