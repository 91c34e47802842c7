#include <bit>
#include <cmath>
#include <numbers>
#include <limits>
#include <memory>

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "sightline/sightline.h"

using namespace sightline;
using ::testing::HasSubstr;

namespace {

std::vector<float> values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::f32).contiguous();
  return {h.data<float>(), h.data<float>() + h.numel()};
}

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

TEST(Tensor, FactoriesShapesAndStrides) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Dims{2, 3}));
  EXPECT_EQ(z.strides(), (Dims{3, 1}));
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(values(z), std::vector<float>(6, 0.0f));
  EXPECT_EQ(values(ones({4}, DType::bf16)), std::vector<float>(4, 1.0f));
  EXPECT_EQ(values(full({2}, 2.5, DType::f16)), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(values(arange(5)), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(arange(1.0, 2.0, 0.25)), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(4, DType::i32).dtype(), DType::i32);
}

TEST(Tensor, RandomIsSeededAndDistributed) {
  Generator g1(42), g2(42);
  EXPECT_EQ(values(randn({100}, {}, &g1)), values(randn({100}, {}, &g2)));
  Generator g(1);
  const auto u = values(rand({100000}, {}, &g));
  double mean = 0;
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / static_cast<double>(u.size()), 0.5, 0.01);
  const auto n = values(randn({100000}, {}, &g));
  double m = 0, var = 0;
  for (float v : n) m += v;
  m /= static_cast<double>(n.size());
  for (float v : n) var += (v - m) * (v - m);
  var /= static_cast<double>(n.size());
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
}

// Generator::next_normal takes its sine and cosine from a fast polynomial and falls back to libm only
// where the float rounding is in doubt: every float must be that of libm's Box-Muller on the same
// uniforms (what the generator has always drawn), and randn must give those floats.
TEST(Tensor, NextNormalRoundsAsLibmBoxMuller) {
  Generator fast(7), uniforms(7);
  for (int i = 0; i < 2000000; ++i) {
    double u1 = uniforms.next_uniform();
    while (u1 <= 0.0) u1 = uniforms.next_uniform();
    const double u2 = uniforms.next_uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    const float first = static_cast<float>(r * std::cos(theta)), second = static_cast<float>(r * std::sin(theta));
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(fast.next_normal())), std::bit_cast<uint32_t>(first)) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(fast.next_normal())), std::bit_cast<uint32_t>(second)) << i;
  }
  EXPECT_EQ(fast.next_u64(), uniforms.next_u64());  // both end in the same state
  Generator g1(3), g2(3);
  const auto x = values(randn({1001}, {}, &g1));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], static_cast<float>(g2.next_normal())) << i;
}

// normal(mean, std) is randn * std + mean in f32, bit for bit, for every dtype it converts to.
TEST(Tensor, NormalIsRandnScaledAndShifted) {
  for (const auto& [mean, std] : {std::pair{0.0, 0.02}, std::pair{1.5, 3.0}, std::pair{-2.0, 0.0}}) {
    Generator g1(9), g2(9);
    const auto got = values(normal(mean, std, {3, 70001}, {}, &g1));
    const auto want = values(randn({3, 70001}, {}, &g2) * std + mean);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << mean << " " << std << " " << i;
    }
    EXPECT_EQ(g1.next_u64(), g2.next_u64());
  }
  Generator g1(4), g2(4);
  const auto bf16 = values(normal(0.0, 0.02, {257}, TensorOptions(DType::bf16), &g1).to(DType::f32));
  const auto want = values((randn({257}, {}, &g2) * 0.02).to(DType::bf16).to(DType::f32));
  for (size_t i = 0; i < bf16.size(); ++i) ASSERT_EQ(bf16[i], want[i]) << i;
  EXPECT_THROW(normal(0.0, -1.0, {4}), Error);
  EXPECT_THROW(normal(0.0, 1.0, {4}, TensorOptions(DType::i32)), Error);
}

// A u1 of 0 is rejected and drawn again (a chance of 2^-53 a draw; forced here: xoshiro256** outputs
// 0 from a state whose second word is 0). fill_normal draws its chunks of pairs at once from predicted
// first states; the rejection makes the first chunk draw one uniform more, so the chunks after it are
// drawn again from where it ended: every value and the final state are those of next_normal's calls.
TEST(Tensor, FillNormalAfterARejectedUniformIsNextNormals) {
  Generator block, calls;
  const Generator::State rejecting{{1, 0, 0, 0}, 0.0, false};
  block.set_state(rejecting);
  calls.set_state(rejecting);
  std::vector<float> out(3 * 131072 + 11);
  block.fill_normal(out.data(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(static_cast<float>(calls.next_normal()))) << i;
  }
  EXPECT_EQ(block.get_state().words, calls.get_state().words);
  EXPECT_EQ(static_cast<float>(block.next_normal()), static_cast<float>(calls.next_normal()));  // the spare
  EXPECT_THROW(block.set_state({}), Error);
}

// Generator::fill_normal draws blocks of pairs with its own vectorized log, sine and cosine: every float
// must be libm's Box-Muller's on the same uniforms, whatever the block sizes (an odd one leaves a spare
// that the next call or next_normal returns first), and the generator must end where as many next_normal
// calls leave it; randn of every floating dtype takes those floats.
TEST(Tensor, FillNormalIsLibmBoxMullersFloats) {
  Generator block(11), uniforms(11), calls(11);
  std::vector<float> reference;  // libm's Box-Muller on `uniforms`, pair by pair
  size_t k = 0;
  std::vector<float> out;
  const size_t sizes[] = {1, 2, 3, 1023, 1024, 1025, 4099, 7, 0, 40000};
  for (int round = 0; round < 50; ++round) {
    for (size_t n : sizes) {
      out.assign(n, 0.0f);
      block.fill_normal(out.data(), n);
      for (size_t i = 0; i < n; ++i, ++k) {
        if (k == reference.size()) {
          double u1 = uniforms.next_uniform();
          while (u1 <= 0.0) u1 = uniforms.next_uniform();
          const double u2 = uniforms.next_uniform();
          const double r = std::sqrt(-2.0 * std::log(u1));
          const double theta = 2.0 * std::numbers::pi * u2;
          reference.push_back(static_cast<float>(r * std::cos(theta)));
          reference.push_back(static_cast<float>(r * std::sin(theta)));
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(reference[k])) << k;
        ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(static_cast<float>(calls.next_normal())))
            << k;
      }
    }
  }
  EXPECT_GT(k, 2000000u);
  // Several chunks of pairs (transformed over the thread pool), the last one partial, after a spare.
  EXPECT_EQ(static_cast<float>(block.next_normal()), static_cast<float>(calls.next_normal()));
  out.assign(300001, 0.0f);
  block.fill_normal(out.data(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(static_cast<float>(calls.next_normal()))) << i;
  }
  EXPECT_EQ(static_cast<float>(block.next_normal()), static_cast<float>(calls.next_normal()));  // the spare
  EXPECT_EQ(block.next_u64(), calls.next_u64());
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    Generator g1(5), g2(5);
    const Tensor x = randn({3, 4097}, TensorOptions(dtype), &g1).to(DType::f32);
    const auto v = values(x);
    for (size_t i = 0; i < v.size(); ++i) {
      const float expected =
          static_cast<float>(randn({1}, TensorOptions(dtype), &g2).to(DType::f32).item<float>());
      ASSERT_EQ(v[i], expected) << dtype_name(dtype) << " " << i;
    }
  }
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = arange(24).view({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  EXPECT_TRUE(t.shares_storage(x));
  EXPECT_EQ(t.shape(), (Dims{4, 3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  Tensor p = x.permute({1, 2, 0});
  EXPECT_EQ(p.shape(), (Dims{3, 4, 2}));
  EXPECT_EQ(values(p.contiguous())[1], 12.0f);  // p[0,0,1] = x[1,0,0]
  Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Dims{2, 3, 2}));
  EXPECT_EQ(values(s), (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  Tensor e = arange(3).view({3, 1}).expand({3, 4});
  EXPECT_EQ(e.strides(), (Dims{1, 0}));
  EXPECT_EQ(values(e), (std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(x.view({-1, 4}).shape(), (Dims{6, 4}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Dims{1, 2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).squeeze(-1).shape(), (Dims{2, 3, 4}));
  // A transposed tensor cannot be viewed flat, but reshape copies.
  EXPECT_THAT(error_of([&] { (void)t.view({24}); }), HasSubstr("cannot be viewed as [24] without a copy"));
  Tensor r = t.reshape({24});
  EXPECT_FALSE(r.shares_storage(x));
  EXPECT_EQ(values(r)[1], 12.0f);
}

TEST(Tensor, DtypeConversionAndItem) {
  Tensor x = from_vector(std::vector<float>{1.0f, 1.00390625f, -2.5f}, {3});
  EXPECT_EQ(values(x.to(DType::bf16)), (std::vector<float>{1.0f, 1.0f, -2.5f}));
  EXPECT_EQ(values(x.to(DType::i32)), (std::vector<float>{1.0f, 1.0f, -2.0f}));
  EXPECT_DOUBLE_EQ(x.slice(0, 2, 3).item(), -2.5);
  EXPECT_THAT(error_of([&] { (void)x.item(); }), HasSubstr("one element"));
  EXPECT_EQ(x.clone().shares_storage(x), false);
}

TEST(Tensor, Printing) {
  EXPECT_EQ(arange(3).to_string(), "tensor([0., 1., 2.])");
  EXPECT_EQ(from_vector(std::vector<float>{0.5f, -1.25f}, {2}).to_string(), "tensor([ 0.5000, -1.2500])");
  EXPECT_EQ(arange(4, DType::i32).view({2, 2}).to_string(), "tensor([[0, 1],\n        [2, 3]], dtype=i32)");
  EXPECT_EQ(ones({2}, DType::bf16).to_string(), "tensor([1., 1.], dtype=bf16)");
  const std::string big = arange(2000).to_string();
  EXPECT_EQ(big, "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03, 1.9990e+03])");
  EXPECT_EQ(arange(12).to_string(), "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11.])");
  EXPECT_THAT(zeros({40, 40}).to_string(),
              ::testing::StartsWith("tensor([[0., 0., 0.,  ..., 0., 0., 0.],\n        [0., 0., 0.,  ..., 0., 0., 0.],\n"
                                    "        [0., 0., 0.,  ..., 0., 0., 0.],\n        ...,\n        [0., 0., 0.,"));
}

TEST(Tensor, Errors) {
  EXPECT_THAT(error_of([] { (void)Device::parse("tpu:0"); }), HasSubstr("unknown device 'tpu:0'; registered backends: cpu"));
  EXPECT_THAT(error_of([] { (void)Device::parse("cpu:x"); }), HasSubstr("must be a number"));
  EXPECT_THAT(error_of([] { (void)zeros({2, 3}).view({4}); }), HasSubstr("shape [4] is invalid for input [2, 3] of 6"));
  EXPECT_THAT(error_of([] { (void)zeros({2, 3}).expand({4, 3}); }), HasSubstr("cannot be expanded to [4, 3]"));
  EXPECT_THAT(error_of([] { (void)zeros({2, 3}).transpose(0, 2); }), HasSubstr("dim 2 is out of range"));
  EXPECT_THAT(error_of([] { (void)zeros({2}).permute({0, 0}); }), HasSubstr("has 2 dims but the tensor [2] has 1"));
  EXPECT_THAT(error_of([] { Tensor t; (void)t.data<float>(); }), HasSubstr("undefined"));
  Dims too_many = Dims::filled(8, 1);
  EXPECT_THAT(error_of([&] { too_many.push_back(1); }), HasSubstr("at most 8 dims"));
}

// Issue 21 item 5: zeros({1 << 32, 1 << 32}) wrapped numel to 0 and a slice then read out of bounds. Every
// shape, stride, element count and byte count is checked arithmetic, with an error naming the shape.
TEST(Tensor, HugeShapesAreErrorsNotWrappedCounts) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_THAT(error_of([&] { (void)zeros({big, big}); }),
              HasSubstr("aten::fill_: the output shape [4294967296, 4294967296] has more elements than a "
                        "64-bit count"));
  EXPECT_THAT(error_of([&] { (void)empty({big, big}); }),
              HasSubstr("the shape [4294967296, 4294967296] has more elements than a 64-bit count can hold"));
  EXPECT_THAT(error_of([&] { (void)Dims({big, big}).product(); }), HasSubstr("[4294967296, 4294967296]"));
  EXPECT_THAT(error_of([&] { (void)contiguous_strides({big, big, big}); }), HasSubstr("strides of the shape"));
  // The count fits but the bytes do not: 2^62 f32 elements are 2^64 bytes.
  const int64_t quarter = int64_t{1} << 62;
  EXPECT_THAT(error_of([&] { (void)zeros({quarter}); }), HasSubstr("of f32 takes more bytes than a 64-bit count"));
  EXPECT_THAT(error_of([&] { (void)empty({quarter}); }), HasSubstr("would take more bytes than a 64-bit count"));
  // A size of 0 makes 0 elements whatever the others.
  EXPECT_EQ(Dims({big, big, 0}).product(), 0);
}

TEST(Tensor, ViewsOfHugeShapesAreErrors) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_THAT(error_of([&] { (void)zeros({1, 1}).expand({big, big}); }), HasSubstr("[4294967296, 4294967296]"));
  EXPECT_THAT(error_of([&] { (void)zeros({4}).view({big, big}); }),
              HasSubstr("shape [4294967296, 4294967296] is invalid for input [4] of 4 elements"));
  EXPECT_THAT(error_of([&] { (void)zeros({4}).view({-1, big, big}); }), HasSubstr("overflows a 64-bit integer"));
  // ceil((end - start) / step) once overflowed for a huge step.
  const Tensor x = arange(10);
  const Tensor one = x.slice(0, 3, 10, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(one.shape(), (Dims{1}));
  EXPECT_EQ(values(one), (std::vector<float>{3}));
  EXPECT_EQ(x.slice(0, 0, 10, std::numeric_limits<int64_t>::max() / 2).shape(), (Dims{1}));
  EXPECT_EQ(x.slice(0, 10, 10, 3).shape(), (Dims{0}));
}

TEST(Tensor, ATensorCannotReachOutsideItsStorage) {
  const Tensor four = zeros({4});
  EXPECT_THAT(error_of([&] { (void)Tensor(four.storage(), DType::f32, {8}, {1}, 0); }),
              HasSubstr("reaches elements 0..7 of a storage of 16 bytes"));
  EXPECT_THAT(error_of([&] { (void)Tensor(four.storage(), DType::f32, {2}, {1}, 3); }),
              HasSubstr("a view must stay inside"));
  EXPECT_THAT(error_of([&] { (void)Tensor(four.storage(), DType::f32, {2}, {-1}, 0); }),
              HasSubstr("reaches elements -1..0"));
  const int64_t huge_stride = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(error_of([&] { (void)Tensor(four.storage(), DType::f32, {2}, {huge_stride}, 0); }),
              HasSubstr("overflows a 64-bit integer"));
  EXPECT_THAT(error_of([&] { (void)Tensor(four.storage(), DType::f32, {-2}, {1}, 0); }), HasSubstr("negative size"));
  // What fits is fine: a reversed view, the last two elements, a broadcast.
  EXPECT_EQ(Tensor(four.storage(), DType::f32, {2}, {-1}, 1).numel(), 2);
  EXPECT_EQ(Tensor(four.storage(), DType::f32, {2}, {1}, 2).numel(), 2);
  EXPECT_EQ(Tensor(four.storage(), DType::f32, {1000, 4}, {0, 1}, 0).numel(), 4000);
}

TEST(Tensor, OpOutputShapesThatOverflowAreErrors) {
  // A storage without memory or size holds metadata only (as a traced proxy does), so a huge input
  // needs no memory; the op's output shape is what must be refused.
  const auto meta = std::make_shared<Storage>(Device::cpu(), 0, nullptr, nullptr, nullptr);
  const Tensor huge(meta, DType::f16, {int64_t{1} << 61}, {1}, 0);
  EXPECT_THAT(error_of([&] { (void)cat({huge, huge, huge, huge}, 0); }),
              HasSubstr("aten::cat: the size of dim 0 of the result"));
  EXPECT_THAT(error_of([&] { (void)cat({huge, huge}, 0); }),
              HasSubstr("aten::cat: the output shape [4611686018427387904] of f16 takes more bytes"));
  const Tensor rows(meta, DType::f32, {int64_t{1} << 31, 1}, {1, 1}, 0);
  const Tensor cols(meta, DType::f32, {1, int64_t{1} << 31}, {1, 1}, 0);
  EXPECT_THAT(error_of([&] { (void)matmul(rows, cols); }), HasSubstr("aten::matmul: the output shape"));
}
