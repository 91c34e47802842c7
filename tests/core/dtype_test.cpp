#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "sightline/dtype.h"
#include "sightline/error.h"

using namespace sightline;

namespace {

// Reference RNE conversion through double arithmetic, independent of the bit tricks under test.
double round_to_grid(double v, int mantissa_bits, int min_exp) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  e = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa_bits);
  return std::nearbyint(v / ulp) * ulp;  // nearbyint rounds half to even in the default mode
}

}  // namespace

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between bf16 1.0 and 1.0078125: ties go to even (1.0).
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1.8p-8f)), 1.0f + 0x1.0p-7f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(INFINITY)), INFINITY);
  uint32_t seed = 12345;
  for (int i = 0; i < 100000; ++i) {
    seed = seed * 1664525u + 1013904223u;
    float f;
    uint32_t bits = (seed & 0x3fffffffu) | 0x10000000u;  // finite normal magnitudes
    std::memcpy(&f, &bits, 4);
    if (i & 1) f = -f;
    const double expect = round_to_grid(f, 7, -126);
    ASSERT_EQ(static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(f))), expect) << f;
  }
}

TEST(DType, F16RoundsToNearestEvenIncludingSubnormals) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f16_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(65519.0f)), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(65520.0f)), INFINITY);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(0x1.0p-24f)), 0x1.0p-24f);
  EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(0x1.0p-25f)), 0.0f);  // tie to even (zero)
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(NAN))));
  for (int h = 0; h < 0x7c00; ++h) {  // every finite positive f16 survives a round trip
    ASSERT_EQ(float_to_f16_bits(f16_bits_to_float(static_cast<uint16_t>(h))), h);
  }
  uint32_t seed = 7;
  for (int i = 0; i < 100000; ++i) {
    seed = seed * 1664525u + 1013904223u;
    const float f = std::ldexp(static_cast<float>(seed % 1000000) / 1000000.0f + 0.5f, static_cast<int>(seed % 40) - 26);
    const double expect = round_to_grid(f, 10, -14);
    ASSERT_EQ(static_cast<double>(f16_bits_to_float(float_to_f16_bits(f))), expect) << f;
  }
}

TEST(DType, PromotionAndParsing) {
  EXPECT_EQ(dtype_promote(DType::bf16, DType::f16), DType::f32);
  EXPECT_EQ(dtype_promote(DType::i32, DType::bf16), DType::bf16);
  EXPECT_EQ(dtype_promote(DType::f32, DType::bf16), DType::f32);
  EXPECT_EQ(dtype_parse("bfloat16"), DType::bf16);
  try {
    dtype_parse("f64");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid dtypes are f32, bf16, f16, i32"), std::string::npos);
  }
}
