// Element types. 16-bit floats are stored as 16 bits and converted to and from float with
// round-to-nearest-even, as hardware and PyTorch do. `boolean` (torch.bool) is one byte, 0 or 1: what
// comparisons produce and masks are; converting a value to it gives 1 for anything but zero (NaN too).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <climits>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace sightline {

// The dtypes: X(enum name, size in bytes, printed name). The enum, its count, sizes and names come from
// this table.
#define SIGHTLINE_DTYPE_TABLE(X) \
  X(f32, 4, "f32")               \
  X(bf16, 2, "bf16")             \
  X(f16, 2, "f16")               \
  X(i32, 4, "i32")               \
  X(boolean, 1, "bool")

enum class DType : uint8_t {
#define SIGHTLINE_DTYPE_ENUM(name, size, text) name,
  SIGHTLINE_DTYPE_TABLE(SIGHTLINE_DTYPE_ENUM)
#undef SIGHTLINE_DTYPE_ENUM
};
#define SIGHTLINE_DTYPE_COUNT(name, size, text) +1
inline constexpr int kDTypeCount = 0 SIGHTLINE_DTYPE_TABLE(SIGHTLINE_DTYPE_COUNT);
#undef SIGHTLINE_DTYPE_COUNT

constexpr size_t dtype_size(DType t) {
  switch (t) {
#define SIGHTLINE_DTYPE_SIZE(name, size, text) \
  case DType::name:                      \
    return size;
    SIGHTLINE_DTYPE_TABLE(SIGHTLINE_DTYPE_SIZE)
#undef SIGHTLINE_DTYPE_SIZE
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
#define SIGHTLINE_DTYPE_NAME(name, size, text) \
  case DType::name:                            \
    return text;
    SIGHTLINE_DTYPE_TABLE(SIGHTLINE_DTYPE_NAME)
#undef SIGHTLINE_DTYPE_NAME
  }
  return "?";
}

constexpr bool dtype_is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// Parses "f32", "float32", "bf16", "bfloat16", "f16", "float16", "half", "i32", "int32", "bool".
// Throws sightline::Error listing the accepted names otherwise.
DType dtype_parse(std::string_view name);

// PyTorch-style promotion of two tensor dtypes: the higher category wins (bool < int < float); between
// the two 16-bit floats the result is f32; otherwise the wider type.
constexpr DType dtype_promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  if (a == DType::i32) return b;
  if (b == DType::i32) return a;
  return DType::f32;  // {f32, bf16, f16} pairs that differ: f32 wins, bf16+f16 -> f32
}

// ---- 16-bit float conversions (round to nearest, ties to even; NaN stays NaN) ----

constexpr uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

constexpr float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

constexpr uint16_t float_to_f16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: value = abs_float; f16 subnormal unit is 2^-24.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
    const uint32_t exp = abs >> 23;                               // biased f32 exponent
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;          // with hidden bit
    const uint32_t shift = 126u - exp;                            // 14..24 + ... maps to 2^-24 units
    // value = mant * 2^(exp-150); in units of 2^-24: mant * 2^(exp-126) = mant >> (126-exp)
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t v = abs - 0x38000000u;  // exponent - 112 (<<23)
  const uint32_t rounding_bias = 0x0fffu + ((v >> 13) & 1u);
  v += rounding_bias;
  return static_cast<uint16_t>(sign | (v >> 13));
}

constexpr float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Storage types for the 16-bit floats: distinct types so kernels can be templated on them.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(float_to_bf16_bits(f)) {}
  explicit operator float() const { return bf16_bits_to_float(bits); }
};
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(float_to_f16_bits(f)) {}
  explicit operator float() const { return f16_bits_to_float(bits); }
};
// The storage type of DType::boolean: one byte, 0 or 1.
struct bool8 {
  uint8_t bits = 0;
  bool8() = default;
  explicit bool8(float f) : bits(f != 0.0f) {}  // NaN != 0: true, as bool(nan) in torch
  explicit operator float() const { return bits != 0 ? 1.0f : 0.0f; }
};
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2 && sizeof(bool8) == 1);

// Element <-> float/double conversions for any storage type.
template <typename T>
constexpr float to_float(T v) {
  return static_cast<float>(v);
}
template <typename T>
constexpr T from_float(float v) {
  if constexpr (std::is_same_v<T, int32_t>) {
    // Saturating, truncating toward zero like a C cast but without UB on NaN/out-of-range values.
    if (!(v == v)) return 0;
    if (v >= 2147483647.0f) return INT32_MAX;
    if (v <= -2147483648.0f) return INT32_MIN;
    return static_cast<int32_t>(v);
  } else {
    return T(v);
  }
}
template <typename T>
constexpr double to_double(T v) {
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<double>(v);
  else return static_cast<double>(static_cast<float>(v));
}

// Calls fn.template operator()<T>() with T the storage type of `t` (float, bf16, f16, int32_t, bool8).
template <typename Fn>
decltype(auto) dtype_visit(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn.template operator()<float>();
    case DType::bf16: return fn.template operator()<bf16>();
    case DType::f16: return fn.template operator()<f16>();
    case DType::i32: return fn.template operator()<int32_t>();
    case DType::boolean: return fn.template operator()<bool8>();
  }
  return fn.template operator()<float>();
}

}  // namespace sightline
