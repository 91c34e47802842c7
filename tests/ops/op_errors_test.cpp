#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sightline/sightline.h"

using namespace sightline;
using ::testing::HasSubstr;

namespace {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(OpErrors, ScaledDotProductAttentionNamesTheFix) {
  const Tensor q = zeros({1, 4, 3, 8}), kv = zeros({1, 2, 5, 8});
  EXPECT_THAT(error_of([&] { (void)scaled_dot_product_attention(q, kv, kv); }),
              HasSubstr("for grouped-query attention pass enable_gqa=true or repeat k and v"));
  EXPECT_THAT(error_of([&] { (void)scaled_dot_product_attention(q, zeros({1, 4, 5, 6}), zeros({1, 4, 5, 8})); }),
              HasSubstr("key's last dim (6) must equal query's (8)"));
  EXPECT_THAT(error_of([&] {
                (void)scaled_dot_product_attention(q, kv, kv, zeros({3, 5}, DType::boolean), true, std::nullopt, true);
              }),
              HasSubstr("attn_mask and is_causal were both given"));
  EXPECT_THAT(error_of([&] { (void)scaled_dot_product_attention(q, kv, kv, zeros({3, 5}, DType::i32), false, {}, true); }),
              HasSubstr("attn_mask must be bool (true = attend) or additive of the query's dtype f32"));
  EXPECT_THAT(error_of([&] { (void)scaled_dot_product_attention(q, kv, kv, zeros({4, 5}), false, {}, true); }),
              HasSubstr("shape mismatch in aten::scaled_dot_product_attention: [1, 4, 3, 5] vs [4, 5]"));
}

TEST(OpErrors, ShapesAndDtypesAreNamed) {
  EXPECT_EQ(error_of([] { (void)mul(zeros({4096, 4096}), zeros({4095})); }),
            "shape mismatch in aten::mul: [4096, 4096] vs [4095]; shapes must be broadcastable (each trailing dim "
            "equal or 1)");
  EXPECT_THAT(error_of([] { (void)matmul(zeros({2, 3}), zeros({4, 5})); }),
              HasSubstr("aten::matmul: shapes [2, 3] and [4, 5] cannot be multiplied: the inner dims differ (3 vs 4)"));
  EXPECT_THAT(error_of([] { (void)matmul(zeros({2, 3}), zeros({3, 5}, DType::bf16)); }),
              HasSubstr("operands must have the same dtype, got f32[2, 3] on cpu and bf16[3, 5] on cpu"));
  EXPECT_THAT(error_of([] { (void)linear(zeros({2, 3}), zeros({4, 5})); }),
              HasSubstr("the input's last dim must equal in_features (5)"));
  EXPECT_THAT(error_of([] { (void)mean(zeros({2}, DType::i32)); }), HasSubstr("the input must be floating point"));
  EXPECT_THAT(error_of([] { (void)softmax(zeros({2}, DType::i32), 0); }), HasSubstr("expected a floating-point tensor"));
  EXPECT_THAT(error_of([] { (void)sum(zeros({2, 3}), {2}); }), HasSubstr("dim 2 is out of range for a tensor of rank 2"));
  EXPECT_THAT(error_of([] { (void)rms_norm(zeros({2, 8}), ones({4})); }),
              HasSubstr("weight must have the shape of the normalized dim [8], got [4]"));
  EXPECT_THAT(error_of([] { (void)cat({zeros({2, 3}), zeros({3, 3})}, 1); }),
              HasSubstr("sizes must match except in dim 1: [2, 3] vs [3, 3]"));
  EXPECT_THAT(error_of([] { (void)embedding(zeros({4, 2}), zeros({3})); }), HasSubstr("indices must be i32"));
  EXPECT_THAT(error_of([] { (void)embedding(zeros({4, 2}), from_vector(std::vector<int32_t>{1, 4}, {2})); }),
              HasSubstr("index 4 at position 1 is out of range for a table of 4 rows (valid: 0..3)"));
  EXPECT_THAT(error_of([] { (void)arange(0.0, 1.0, 0.0); }), HasSubstr("step must be non-zero"));
}

TEST(OpErrors, PromotionFollowsPyTorch) {
  EXPECT_EQ((zeros({2}, DType::bf16) + 1.5).dtype(), DType::bf16);        // scalar does not promote
  EXPECT_EQ((zeros({2}, DType::i32) + 1.5).dtype(), DType::f32);          // except int -> float
  EXPECT_EQ((zeros({2}, DType::i32) + 2.0).dtype(), DType::i32);
  EXPECT_EQ((zeros({2}, DType::bf16) + zeros({2}, DType::f16)).dtype(), DType::f32);
  EXPECT_EQ((zeros({2}, DType::bf16) + zeros({}, DType::f32)).dtype(), DType::bf16);  // 0-dim acts like a scalar
  EXPECT_EQ((zeros({2}, DType::i32) / zeros({2}, DType::i32)).dtype(), DType::f32);
  EXPECT_EQ(exp(zeros({2}, DType::i32)).dtype(), DType::f32);
}
