// Functional results of each instruction against a straightforward reference computed here.
#include <cmath>
#include <numbers>
#include <random>

#include <gtest/gtest.h>

#include "test_programs.h"

namespace sightline::device {
namespace {

using testing::Harness;

constexpr uint16_t kP = 64;
constexpr uint32_t kN = 300;     // not a multiple of anything the engines like
constexpr uint64_t kRow = 4096;  // SBUF byte stride between staged operands

std::vector<float> random_values(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
  }
}

TEST(DeviceFunctional, TensorTensorAluOps) {
  const std::vector<float> a = random_values(kP * kN, 0.5f, 2.0f, 1),
                           b = random_values(kP * kN, 0.5f, 2.0f, 2);
  const std::pair<AluOp, float (*)(float, float)> ops[] = {
      {AluOp::add, [](float x, float y) { return x + y; }},
      {AluOp::subtract, [](float x, float y) { return x - y; }},
      {AluOp::multiply, [](float x, float y) { return x * y; }},
      {AluOp::divide, [](float x, float y) { return x / y; }},
      {AluOp::max, [](float x, float y) { return std::max(x, y); }},
      {AluOp::min, [](float x, float y) { return std::min(x, y); }},
      {AluOp::pow, [](float x, float y) { return std::pow(x, y); }},
  };
  for (const auto& [op, ref] : ops) {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
    AccessPattern sb = h.input("b", kP, kN, DType::f32, b, kRow);
    AccessPattern out = sbuf(0, kP, 2 * kRow, DType::f32, {kN});
    h.output("out", out);
    const auto got = h.run(tensor_tensor(op, out, sa, sb));
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = ref(a[i], b[i]);
    SCOPED_TRACE(std::string(alu_op_name(op)));
    expect_close(got[0], want, 1e-6f);
  }
}

TEST(DeviceFunctional, TensorScalarImmediateAndPerPartition) {
  const std::vector<float> a = random_values(kP * kN, -2.0f, 2.0f, 3), s = random_values(kP, 1.0f, 3.0f, 4);
  {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
    AccessPattern out = sbuf(0, kP, kRow, DType::f32, {kN});
    h.output("out", out);
    const auto got = h.run(tensor_scalar(AluOp::subtract, out, sa, 5.0f, /*reverse=*/true));
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = 5.0f - a[i];
    expect_close(got[0], want, 1e-6f);
  }
  Harness h(Spec::builtin());
  AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
  AccessPattern ss = h.input("s", kP, 1, DType::f32, s, kRow);
  AccessPattern out = sbuf(0, kP, 2 * kRow, DType::f32, {kN});
  h.output("out", out);
  const auto got = h.run(tensor_scalar(AluOp::multiply, out, sa, ss));
  std::vector<float> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] * s[i / kN];
  expect_close(got[0], want, 1e-6f);
}

// The same elementwise instruction on GpSimd computes the same bits as on the Vector engine.
TEST(DeviceFunctional, ElementwiseOnGpSimdEqualsVector) {
  const std::vector<float> a = random_values(kP * kN, -2.0f, 2.0f, 5), b = random_values(kP * kN, 0.5f, 2.0f, 6);
  auto run_on = [&](Engine on, bool two_tensors) {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::bf16, a, 0);
    AccessPattern sb = h.input("b", kP, kN, DType::bf16, b, kRow);
    AccessPattern out = sbuf(0, kP, 2 * kRow, DType::bf16, {kN});
    h.output("out", out);
    return h.run(two_tensors ? tensor_tensor(AluOp::divide, out, sa, sb, on)
                             : tensor_scalar(AluOp::subtract, out, sa, 0.75f, /*reverse=*/true, on))[0];
  };
  for (bool two : {true, false}) {
    SCOPED_TRACE(two ? "tensor_tensor" : "tensor_scalar");
    const std::vector<float> vector = run_on(Engine::vector, two), gpsimd = run_on(Engine::gpsimd, two);
    ASSERT_EQ(vector.size(), gpsimd.size());
    for (size_t i = 0; i < vector.size(); ++i) ASSERT_EQ(vector[i], gpsimd[i]) << "at " << i;
  }
}

TEST(DeviceFunctional, ReductionsAndStatistics) {
  const std::vector<float> a = random_values(kP * kN, -3.0f, 3.0f, 5);
  for (AluOp op : {AluOp::add, AluOp::max, AluOp::min}) {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
    AccessPattern out = sbuf(0, kP, kRow, DType::f32, {1});
    h.output("out", out);
    const auto got = h.run(tensor_reduce(op, out, sa));
    std::vector<float> want(kP);
    for (uint32_t p = 0; p < kP; ++p) {
      float acc = op == AluOp::add ? 0.0f : a[p * kN];
      for (uint32_t i = 0; i < kN; ++i) {
        const float x = a[p * kN + i];
        acc = op == AluOp::add ? acc + x : op == AluOp::max ? std::max(acc, x) : std::min(acc, x);
      }
      want[p] = acc;
    }
    expect_close(got[0], want, 1e-5f);
  }
  Harness h(Spec::builtin());
  AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
  AccessPattern out = sbuf(0, kP, kRow, DType::f32, {2});
  h.output("out", out);
  const auto got = h.run(bn_stats(out, sa));
  for (uint32_t p = 0; p < kP; ++p) {
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < kN; ++i) mean += a[p * kN + i];
    mean /= kN;
    for (uint32_t i = 0; i < kN; ++i) var += (a[p * kN + i] - mean) * (a[p * kN + i] - mean);
    var /= kN;
    EXPECT_NEAR(got[0][2 * p], mean, 1e-5);
    EXPECT_NEAR(got[0][2 * p + 1], var, 1e-5);
  }
}

TEST(DeviceFunctional, CopyCastsWithRoundToNearestEven) {
  const std::vector<float> a = random_values(kP * kN, -100.0f, 100.0f, 6);
  for (DType to : {DType::bf16, DType::f16, DType::i32}) {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
    AccessPattern out = sbuf(0, kP, kRow, to, {kN});
    h.output("out", out);
    const auto got = h.run(tensor_copy(out, sa));
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      want[i] = to == DType::bf16  ? bf16_bits_to_float(float_to_bf16_bits(a[i]))
                : to == DType::f16 ? f16_bits_to_float(float_to_f16_bits(a[i]))
                                   : std::nearbyint(a[i]);
    }
    expect_close(got[0], want, 0.0f);
  }
}

// tensor_reduce over the innermost dim of [P, 4, 75] (one result per outer index, as a softmax's max
// per head), negated (the exp's bias), against a reduction of each run.
TEST(DeviceFunctional, ReductionsOverTheInnermostDimNegated) {
  const std::vector<float> a = random_values(kP * kN, -3.0f, 3.0f, 11);
  constexpr uint32_t kOuter = 4, kInner = kN / kOuter;
  for (const bool negate : {false, true}) {
    for (AluOp op : {AluOp::add, AluOp::max}) {
      Harness h(Spec::builtin());
      AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
      sa.dims[0] = {kOuter, static_cast<int32_t>(kInner)};
      sa.dims[1] = {kInner, 1};
      sa.dim_count = 2;
      AccessPattern out = sbuf(0, kP, kRow, DType::f32, {kOuter});
      h.output("out", out);
      const auto got = h.run(tensor_reduce(op, out, sa, negate));
      std::vector<float> want(kP * kOuter);
      for (uint32_t p = 0; p < kP; ++p) {
        for (uint32_t j = 0; j < kOuter; ++j) {
          float acc = op == AluOp::add ? 0.0f : -INFINITY;
          for (uint32_t i = 0; i < kInner; ++i) {
            const float x = a[p * kN + j * kInner + i];
            acc = op == AluOp::add ? acc + x : std::max(acc, x);
          }
          want[p * kOuter + j] = negate ? -acc : acc;
        }
      }
      SCOPED_TRACE(std::string(alu_op_name(op)) + (negate ? " negated" : ""));
      expect_close(got[0], want, 1e-5f);
    }
  }
}

// activate with a bias column (kFlagBiasOperand): exp(x * scale + bias[p]), softmax's exp(x - max) in one
// pass, with the row sum; bit for bit what the activation with the same bias as an immediate gives.
TEST(DeviceFunctional, ActivationWithAPerPartitionBias) {
  const std::vector<float> a = random_values(kP * kN, -2.0f, 2.0f, 12), bias = random_values(kP, -1.0f, 1.0f, 13);
  const float scale = 0.125f;
  Harness h(Spec::builtin());
  AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
  AccessPattern sb = h.input("bias", kP, 1, DType::f32, bias, kRow);
  AccessPattern out = sbuf(0, kP, 2 * kRow, DType::f32, {kN});
  AccessPattern sum = sbuf(0, kP, 3 * kRow, DType::f32, {1});
  h.output("out", out);
  h.output("sum", sum);
  Instruction in = activate(ActFunc::exp, out, sa, scale, sb);
  EXPECT_EQ(in.flags, kFlagBiasOperand);
  in.aux = sum;
  const auto got = h.run(in);
  for (uint32_t p = 0; p < kP; ++p) {
    Harness row(Spec::builtin());
    const std::vector<float> one_row(a.begin() + p * kN, a.begin() + (p + 1) * kN);
    AccessPattern ra = row.input("a", 1, kN, DType::f32, one_row, 0);
    AccessPattern rout = sbuf(0, 1, kRow, DType::f32, {kN});
    AccessPattern rsum = sbuf(0, 1, 2 * kRow, DType::f32, {1});
    row.output("out", rout);
    row.output("sum", rsum);
    Instruction immediate = activate(ActFunc::exp, rout, ra, scale, bias[p]);
    immediate.aux = rsum;
    const auto want = row.run(immediate);
    for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(got[0][p * kN + i], want[0][i]) << "partition " << p << " at " << i;
    ASSERT_EQ(got[1][p], want[1][0]) << "the row sum of partition " << p;
  }
}

TEST(DeviceFunctional, ActivationFunctionsWithScaleBiasAndAccumulate) {
  const std::vector<float> a = random_values(kP * kN, 0.1f, 2.0f, 7);
  const float scale = 0.75f, bias = 0.25f;
  const std::pair<ActFunc, double (*)(double)> funcs[] = {
      {ActFunc::identity, [](double x) { return x; }},
      {ActFunc::exp, [](double x) { return std::exp(x); }},
      {ActFunc::log, [](double x) { return std::log(x); }},
      {ActFunc::sqrt, [](double x) { return std::sqrt(x); }},
      {ActFunc::rsqrt, [](double x) { return 1 / std::sqrt(x); }},
      {ActFunc::reciprocal, [](double x) { return 1 / x; }},
      {ActFunc::tanh, [](double x) { return std::tanh(x); }},
      {ActFunc::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {ActFunc::relu, [](double x) { return x > 0 ? x : 0; }},
      {ActFunc::silu, [](double x) { return x / (1 + std::exp(-x)); }},
      {ActFunc::gelu_tanh,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
       }},
      {ActFunc::square, [](double x) { return x * x; }},
      {ActFunc::abs, [](double x) { return std::fabs(x); }},
      {ActFunc::neg, [](double x) { return -x; }},
      {ActFunc::erf, [](double x) { return std::erf(x); }},
      {ActFunc::gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {ActFunc::sin, [](double x) { return std::sin(x); }},
      {ActFunc::cos, [](double x) { return std::cos(x); }},
  };
  static_assert(std::size(funcs) == kActFuncCount, "every activation function is tested");
  for (const auto& [func, ref] : funcs) {
    Harness h(Spec::builtin());
    AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
    AccessPattern out = sbuf(0, kP, kRow, DType::f32, {kN});
    AccessPattern sum = sbuf(0, kP, 2 * kRow, DType::f32, {1});
    h.output("out", out);
    h.output("sum", sum);
    Instruction in = activate(func, out, sa, scale, bias);
    in.aux = sum;
    const auto got = h.run(in);
    std::vector<float> want(a.size()), want_sum(kP, 0.0f);
    for (size_t i = 0; i < a.size(); ++i) {
      want[i] = static_cast<float>(ref(a[i] * scale + bias));
      want_sum[i / kN] += want[i];
    }
    SCOPED_TRACE(std::string(act_func_name(func)));
    expect_close(got[0], want, 1e-5f);
    expect_close(got[1], want_sum, 1e-4f);
  }
}

TEST(DeviceFunctional, IotaAndPartitionAllReduce) {
  {
    Harness h(Spec::builtin());
    AccessPattern out = sbuf(0, kP, 0, DType::i32, {kN});
    h.output("out", out);
    const auto got = h.run(iota(out, 10.0f, 1000.0f));
    for (uint32_t p = 0; p < kP; ++p) {
      for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(got[0][p * kN + i], 10.0f + 1000.0f * p + i);
    }
  }
  const std::vector<float> a = random_values(kP * kN, -1.0f, 1.0f, 8);
  Harness h(Spec::builtin());
  AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
  AccessPattern out = sbuf(0, kP, kRow, DType::f32, {kN});
  h.output("out", out);
  const auto got = h.run(partition_all_reduce(AluOp::max, out, sa));
  for (uint32_t i = 0; i < kN; ++i) {
    float m = a[i];
    for (uint32_t p = 1; p < kP; ++p) m = std::max(m, a[p * kN + i]);
    for (uint32_t p = 0; p < kP; ++p) ASSERT_EQ(got[0][p * kN + i], m);
  }
}

TEST(DeviceFunctional, MatmulAccumulatesInPsum) {
  const uint16_t k = 96, m = 80;
  const uint32_t n = 200;
  const std::vector<float> st = random_values(k * m, -1.0f, 1.0f, 9),
                           mv = random_values(k * n, -1.0f, 1.0f, 10);
  Harness h(Spec::builtin());
  AccessPattern s = h.input("stationary", k, m, DType::bf16, st, 0);
  AccessPattern v = h.input("moving", k, n, DType::bf16, mv, kRow);
  AccessPattern acc = psum(0, m, 2048, DType::f32, {n});
  AccessPattern out = sbuf(0, m, 2 * kRow, DType::f32, {n});
  Executable& exe = h.executable();
  exe.semaphore_count = 3;
  // Two matmuls into one bank: the second accumulates, so the result is 2 * S^T V.
  Instruction first = matmul(acc, s, v, false);
  first.waits.push_back({0, 2});
  exe.stream(Engine::tensor).push_back(first);
  Instruction second = matmul(acc, s, v, true);
  second.updates.push_back({2, 1});
  exe.stream(Engine::tensor).push_back(second);
  h.output("out", out);
  Instruction evacuate = tensor_copy(out, acc);
  evacuate.waits.push_back({2, 1});
  const auto got = h.run(evacuate);
  std::vector<float> want(m * n, 0.0f);
  for (uint32_t p = 0; p < k; ++p) {
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        const float sv = bf16_bits_to_float(float_to_bf16_bits(st[p * m + i]));
        const float mvv = bf16_bits_to_float(float_to_bf16_bits(mv[p * n + j]));
        want[i * n + j] += 2 * sv * mvv;
      }
    }
  }
  expect_close(got[0], want, 1e-4f);
}

TEST(DeviceFunctional, StridedOperandsAndDmaCast) {
  // Read every other element of a row: dims {kN/2 : stride 2}.
  const std::vector<float> a = random_values(kP * kN, -1.0f, 1.0f, 11);
  Harness h(Spec::builtin());
  AccessPattern sa = h.input("a", kP, kN, DType::f32, a, 0);
  AccessPattern even = sa;
  even.dims[0] = FreeDim{kN / 2, 2};
  AccessPattern out = sbuf(0, kP, kRow, DType::bf16, {kN / 2});
  h.output("out", out);
  const auto got = h.run(tensor_copy(out, even));
  for (uint32_t p = 0; p < kP; ++p) {
    for (uint32_t i = 0; i < kN / 2; ++i) {
      ASSERT_EQ(got[0][p * (kN / 2) + i], bf16_bits_to_float(float_to_bf16_bits(a[p * kN + 2 * i])));
    }
  }
}

}  // namespace
}  // namespace sightline::device
