// Every op on neuron:0 against the CPU reference: the same random inputs on both devices, results
// compared within dtype tolerance. Shapes include sizes that are not multiples of 128, broadcast and
// transposed inputs.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "sightline/sightline.h"

using namespace sightline;

namespace {

Device neuron0() { return Device::parse("neuron:0"); }

double tolerance(DType t) {
  switch (t) {
    case DType::f32: return 2e-5;
    case DType::bf16: return 2e-2;
    case DType::f16: return 3e-3;
    case DType::i32: return 0;
    case DType::boolean: return 0;
  }
  return 0;
}

std::vector<double> host_values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  std::vector<double> v(static_cast<size_t>(h.numel()));
  dtype_visit(h.dtype(), [&]<typename T>() {
    for (size_t i = 0; i < v.size(); ++i) v[i] = to_double(h.data<T>()[i]);
  });
  return v;
}

// Compares a device result with the CPU result; `scale` widens the tolerance for long reductions.
void expect_same(const Tensor& device_result, const Tensor& cpu_result, const std::string& what, double scale = 1) {
  ASSERT_EQ(device_result.device(), neuron0()) << what;
  ASSERT_EQ(device_result.shape(), cpu_result.shape()) << what;
  ASSERT_EQ(device_result.dtype(), cpu_result.dtype()) << what;
  const auto got = host_values(device_result), want = host_values(cpu_result);
  const double tol = tolerance(cpu_result.dtype()) * scale;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && !(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])))) {
      ADD_FAILURE() << what << " element " << i << ": neuron " << got[i] << " cpu " << want[i];
      if (++shown > 4) return;
    }
  }
}

struct Pair {
  Tensor cpu, dev;
};

Pair input(const Dims& shape, DType dtype, Generator& g, bool positive = false, bool transposed = false) {
  Dims s = shape;
  if (transposed) std::swap(s[s.size() - 1], s[s.size() - 2]);
  Tensor t = randn(s, DType::f32, &g);
  if (positive) t = abs(t) + 0.5;
  if (dtype == DType::i32) t = t * 10.0;
  t = t.to(dtype);
  Tensor d = t.to(neuron0());
  if (transposed) {
    t = t.transpose(-1, -2);
    d = d.transpose(-1, -2);
  }
  return {t, d};
}

class CrossBackend : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  bool floating() const { return dtype_is_floating(dtype()); }
  Generator g_{2024};
};

}  // namespace

TEST_P(CrossBackend, Elementwise) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{130, 70}, {130, 70}}, {{130, 70}, {70}}, {{130, 70}, {130, 1}}, {{3, 1}, {1, 4}}, {{2, 3, 5}, {}}};
  for (OpId op : {OpId::add, OpId::sub, OpId::rsub, OpId::mul, OpId::div, OpId::maximum, OpId::minimum}) {
    for (const auto& [sa, sb] : shapes) {
      const Pair a = input(sa, dtype(), g_), b = input(sb, dtype(), g_, op == OpId::div);
      const Tensor ci[] = {a.cpu, b.cpu}, di[] = {a.dev, b.dev};
      expect_same(dispatch(op, di, {}), dispatch(op, ci, {}), fmt::format("{} {} {}", op_name(op), sa, sb));
    }
    // Tensor-scalar (the scalar is copied to the device) and a transposed operand.
    const Pair a = input({129, 33}, dtype(), g_, false, true);
    OpAttrs s;
    s.scalar = 3.0;
    s.has_scalar = true;
    const Tensor ci[] = {a.cpu}, di[] = {a.dev};
    expect_same(dispatch(op, di, s), dispatch(op, ci, s), fmt::format("{} scalar transposed", op_name(op)));
  }
  for (const OpInfo& info : kOpTable) {
    if (!op_is_unary_elementwise(info.id) || info.id == OpId::fill) continue;
    const bool positive = info.id == OpId::log || info.id == OpId::sqrt || info.id == OpId::rsqrt ||
                          info.id == OpId::reciprocal || info.id == OpId::pow;
    const Pair a = input({130, 77}, dtype(), g_, positive);
    OpAttrs attrs;
    attrs.scalar = 2.0;  // pow's exponent
    const Tensor ci[] = {a.cpu}, di[] = {a.dev};
    expect_same(dispatch(info.id, di, attrs), dispatch(info.id, ci, attrs), std::string(info.name), 2);
  }
  for (OpId op : {OpId::eq, OpId::ne, OpId::lt, OpId::le, OpId::gt, OpId::ge}) {
    const Pair a = input({130, 70}, dtype(), g_), b = input({70}, dtype(), g_);
    const Tensor ci[] = {a.cpu, b.cpu}, di[] = {a.dev, b.dev};
    expect_same(dispatch(op, di, {}), dispatch(op, ci, {}), fmt::format("{} broadcast", op_name(op)));
    const Tensor ca[] = {a.cpu, a.cpu}, da[] = {a.dev, a.dev};
    expect_same(dispatch(op, da, {}), dispatch(op, ca, {}), fmt::format("{} equal operands", op_name(op)));
    // A fractional host scalar: an i32 tensor compares in f32, a 16-bit one in its own dtype.
    OpAttrs s;
    s.scalar = 0.25;
    s.has_scalar = true;
    const Tensor c1[] = {a.cpu}, d1[] = {a.dev};
    expect_same(dispatch(op, d1, s), dispatch(op, c1, s), fmt::format("{} scalar", op_name(op)));
    expect_same(a.dev.to(DType::boolean), a.cpu.to(DType::boolean), "to bool");
  }
  {
    const Pair a = input({130, 70}, dtype(), g_), b = input({70}, dtype(), g_), c = input({130, 1}, dtype(), g_);
    expect_same(where(gt(c.dev, 0.0), a.dev, b.dev), where(gt(c.cpu, 0.0), a.cpu, b.cpu), "where");
    expect_same(masked_fill(a.dev, gt(b.dev, 0.0), -1e4), masked_fill(a.cpu, gt(b.cpu, 0.0), -1e4),
                "masked_fill");
  }
  {
    const Pair a = input({130, 77}, dtype(), g_);
    expect_same(gelu(a.dev, "tanh"), gelu(a.cpu, "tanh"), "gelu tanh", 2);
    expect_same(1.0 - a.dev, 1.0 - a.cpu, "1 - x (aten::rsub, the scalar copied to the device)");
  }
  for (DType target : {DType::f32, DType::bf16, DType::i32}) {
    const Pair a = input({50, 3}, dtype(), g_);
    expect_same(a.dev.to(target), a.cpu.to(target), fmt::format("to {}", dtype_name(target)));
  }
  expect_same(full({129, 5}, 2.5, TensorOptions(dtype(), neuron0())), full({129, 5}, 2.5, dtype()), "fill");
  const Pair t = input({40, 130}, dtype(), g_, false, true);
  expect_same(t.dev.contiguous(), t.cpu.contiguous(), "contiguous of a transposed view");
}

TEST_P(CrossBackend, ReductionsAndSoftmax) {
  const std::vector<std::pair<Dims, Dims>> cases = {{{130, 300}, {-1}}, {{130, 300}, {0}}, {{4, 5, 6}, {0, 2}},
                                                    {{257}, {}}};
  for (const auto& [shape, dims] : cases) {
    for (bool keepdim : {false, true}) {
      const Pair a = input(shape, dtype(), g_);
      const double scale = std::sqrt(static_cast<double>(shape.product()));
      expect_same(sum(a.dev, dims, keepdim), sum(a.cpu, dims, keepdim), fmt::format("sum {} {}", shape, dims), scale);
      expect_same(amax(a.dev, dims, keepdim), amax(a.cpu, dims, keepdim), fmt::format("amax {} {}", shape, dims));
      if (floating()) {
        expect_same(mean(a.dev, dims, keepdim), mean(a.cpu, dims, keepdim), fmt::format("mean {} {}", shape, dims), 4);
      }
    }
  }
  {
    const Pair a = input({130, 300}, dtype(), g_);
    expect_same(sum(gt(a.dev, 0.0), {-1}), sum(gt(a.cpu, 0.0), {-1}), "sum of a bool tensor (i32 count)");
    expect_same(sum(gt(a.dev, 0.0)), sum(gt(a.cpu, 0.0)), "sum of a bool tensor, all dims");
  }
  // cumsum and argmax: rows across partitions, the dim along the free axis, in one chunk and in several
  // (10000 > the kernels' 4096-element chunks), along a strided dim, and a bool cumsum.
  for (const auto& [shape, dim] : std::vector<std::pair<Dims, int>>{{{130, 300}, -1}, {{130, 300}, 0},
                                                                     {{3, 10000}, 1}, {{4, 5, 6}, 1}}) {
    const Pair a = input(shape, dtype(), g_);
    const double n = static_cast<double>(shape[dim < 0 ? shape.size() + dim : dim]);
    expect_same(cumsum(a.dev, dim), cumsum(a.cpu, dim), fmt::format("cumsum {} dim {}", shape, dim), n);
    expect_same(argmax(a.dev, dim), argmax(a.cpu, dim), fmt::format("argmax {} dim {}", shape, dim));
    expect_same(argmax(a.dev, dim, true), argmax(a.cpu, dim, true), fmt::format("argmax keepdim {}", shape));
  }
  {
    const Pair a = input({130, 70}, dtype(), g_);
    expect_same(cumsum(gt(a.dev, 0.0), 1), cumsum(gt(a.cpu, 0.0), 1), "cumsum of a bool tensor (i32)");
  }
  // topk: k of 1, 3 and 8, largest and smallest, along the free axis and a strided dim, in one chunk and
  // in several; values and indices are the reference's (i32 inputs have many ties: index order).
  for (const auto& [shape, dim] : std::vector<std::pair<Dims, int>>{{{130, 300}, -1}, {{130, 300}, 0},
                                                                     {{3, 10000}, 1}, {{4, 5, 6}, 1}}) {
    const Pair a = input(shape, dtype(), g_);
    for (int64_t k : {1, 3, 8}) {
      if (k > shape[dim < 0 ? shape.size() + dim : dim]) continue;
      for (bool largest : {true, false}) {
        const TopkResult d = topk(a.dev, k, dim, largest), c = topk(a.cpu, k, dim, largest);
        const std::string what = fmt::format("topk {} dim {} k {} largest {}", shape, dim, k, largest);
        expect_same(d.values, c.values, what + " values");
        expect_same(d.indices, c.indices, what + " indices");
      }
    }
  }
  if (!floating()) return;
  {
    // Ties keep ascending indices within a chunk and across chunks; a NaN ranks first (largest).
    std::vector<float> v(2 * 9000, 0.0f);
    v[5] = 7.0f, v[6000] = 7.0f, v[8999] = 7.0f, v[9000 + 8000] = NAN, v[9000 + 10] = 9.0f, v[9000 + 4500] = 9.0f;
    const Tensor cpu = from_vector(v, {2, 9000}).to(dtype());
    const TopkResult d = topk(cpu.to(neuron0()), 5, 1), c = topk(cpu, 5, 1);
    expect_same(d.values, c.values, "topk ties and NaN values");
    expect_same(d.indices, c.indices, "topk ties and NaN indices");
    // Smallest: the zeros tie, in index order (without the NaN, which the device ranks first there and
    // torch last; docs/architecture.md, "What is still open").
    v[9000 + 8000] = 0.0f;
    const Tensor finite = from_vector(v, {2, 9000}).to(dtype());
    const TopkResult ds = topk(finite.to(neuron0()), 4, 1, false), cs = topk(finite, 4, 1, false);
    expect_same(ds.indices, cs.indices, "topk smallest ties indices");
  }
  {
    // A NaN wins argmax and a tie keeps the first index, in the first chunk and past it. 16-bit rows are
    // cut into chunks of at most 2048 whose candidates GpSimd folds (eager_scan.cpp): 9000 columns are
    // 5 chunks of 1800. Rows 2-5: two NaNs (the first wins), a NaN in the first chunk only, ties on both
    // sides of a chunk boundary (1799 | 1800), every value equal (index 0).
    std::vector<float> v(6 * 9000, 0.0f);
    v[5] = 7.0f, v[6000] = 7.0f, v[9000 + 8000] = NAN, v[9000 + 10] = 9.0f;
    v[2 * 9000 + 3000] = NAN, v[2 * 9000 + 7500] = NAN, v[2 * 9000 + 20] = 5.0f;
    v[3 * 9000 + 3] = NAN, v[3 * 9000 + 8999] = 5.0f;
    v[4 * 9000 + 1800] = 3.0f, v[4 * 9000 + 1799] = 3.0f, v[4 * 9000 + 8000] = 3.0f;
    for (size_t i = 0; i < 9000; ++i) v[5 * 9000 + i] = -3.0f;
    const Tensor cpu = from_vector(v, {6, 9000}).to(dtype());
    expect_same(argmax(cpu.to(neuron0()), 1), argmax(cpu, 1), "argmax ties and NaN");
    const TopkResult d = topk(cpu.to(neuron0()), 1, 1), c = topk(cpu, 1, 1);
    expect_same(d.values, c.values, "topk k = 1 ties and NaN values");
    expect_same(d.indices, c.indices, "topk k = 1 ties and NaN indices");
  }
  for (int dim : {-1, 0}) {
    const Pair a = input({130, 70}, dtype(), g_);
    expect_same(softmax(a.dev, dim), softmax(a.cpu, dim), fmt::format("softmax {}", dim), 2);
    expect_same(log_softmax(a.dev, dim), log_softmax(a.cpu, dim), fmt::format("log_softmax {}", dim), 2);
  }
}

TEST(CrossBackendTopk, KAboveEightIsADeviceErrorThatSaysWhatToDo) {
  const Tensor x = zeros({4, 32}, TensorOptions(DType::f32, neuron0()));
  try {
    (void)topk(x, 9, -1);
    FAIL() << "topk with k = 9 ran on the device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k <= 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(topk(x.to(Device::cpu()), 9, -1).values.shape(), (Dims{4, 9}));
}

TEST_P(CrossBackend, MatmulLinearNormalization) {
  if (dtype() == DType::i32) GTEST_SKIP() << "the Tensor engine multiplies floating-point operands";
  const std::vector<std::pair<Dims, Dims>> cases = {{{130, 200}, {200, 140}}, {{7}, {7, 3}}, {{5, 7}, {7}},
                                                    {{2, 33, 65}, {65, 17}}, {{2, 1, 5, 7}, {3, 7, 2}}};
  for (const auto& [sa, sb] : cases) {
    const Pair a = input(sa, dtype(), g_), b = input(sb, dtype(), g_);
    expect_same(matmul(a.dev, b.dev), matmul(a.cpu, b.cpu), fmt::format("matmul {} {}", sa, sb),
                std::sqrt(static_cast<double>(sa.back())) * 2);
  }
  const Pair x = input({3, 50, 96}, dtype(), g_), w = input({70, 96}, dtype(), g_), b = input({70}, dtype(), g_);
  expect_same(linear(x.dev, w.dev, b.dev), linear(x.cpu, w.cpu, b.cpu), "linear", 20);
  const Pair y = input({130, 300}, dtype(), g_), nw = input({300}, dtype(), g_), nb = input({300}, dtype(), g_);
  expect_same(rms_norm(y.dev, nw.dev, 1e-6), rms_norm(y.cpu, nw.cpu, 1e-6), "rms_norm", 4);
  expect_same(layer_norm(y.dev, nw.dev, nb.dev, 1e-5), layer_norm(y.cpu, nw.cpu, nb.cpu, 1e-5), "layer_norm", 8);
  expect_same(layer_norm(y.dev, Tensor(), nb.dev, 1e-5), layer_norm(y.cpu, Tensor(), nb.cpu, 1e-5),
              "layer_norm with a bias only", 8);
  expect_same(layer_norm(y.dev, nw.dev, Tensor(), 1e-5), layer_norm(y.cpu, nw.cpu, Tensor(), 1e-5),
              "layer_norm with a weight only", 8);
  expect_same(rms_norm(y.dev, Tensor(), 1e-6), rms_norm(y.cpu, Tensor(), 1e-6), "rms_norm without weight", 4);
  expect_same(linear(x.dev, w.dev), linear(x.cpu, w.cpu), "linear without bias", 20);
}

TEST_P(CrossBackend, ScaledDotProductAttention) {
  if (dtype() == DType::i32) GTEST_SKIP() << "attention takes floating-point operands";
  // Two query tiles (130 > 128 partitions) and two key chunks (200 > 128) per head.
  const Pair q = input({2, 3, 130, 64}, dtype(), g_), k = input({2, 3, 200, 64}, dtype(), g_),
             v = input({2, 3, 200, 48}, dtype(), g_);
  const double tol = 8;
  expect_same(scaled_dot_product_attention(q.dev, k.dev, v.dev), scaled_dot_product_attention(q.cpu, k.cpu, v.cpu),
              "sdpa", tol);
  // An additive padding mask [B, 1, 1, S], as ESM-2 builds it (finfo.min on padded keys).
  const Tensor pad_cpu = where(gt(randn({2, 1, 1, 200}, DType::f32, &g_), 1.0), full({}, -1e30, DType::f32),
                               zeros({}, DType::f32))
                             .to(dtype());
  const Tensor pad_dev = pad_cpu.to(neuron0());
  expect_same(scaled_dot_product_attention(q.dev, k.dev, v.dev, pad_dev, false, 1.0),
              scaled_dot_product_attention(q.cpu, k.cpu, v.cpu, pad_cpu, false, 1.0), "sdpa additive mask", tol);
  // A bool mask [L, S] broadcast over batch and heads (true = attend).
  const Tensor keep_cpu = ge(randn({130, 200}, DType::f32, &g_), -0.5), keep_dev = keep_cpu.to(neuron0());
  expect_same(scaled_dot_product_attention(q.dev, k.dev, v.dev, keep_dev),
              scaled_dot_product_attention(q.cpu, k.cpu, v.cpu, keep_cpu), "sdpa bool mask", tol);
  // Causal, a scale, and q / k as transposed views of [B, L, H, E] (what .view().transpose(1, 2) gives).
  const Pair qh = input({1, 150, 2, 32}, dtype(), g_), kh = input({1, 150, 2, 32}, dtype(), g_),
             vh = input({1, 2, 150, 32}, dtype(), g_);
  expect_same(scaled_dot_product_attention(qh.dev.transpose(1, 2), kh.dev.transpose(1, 2), vh.dev, {}, true, 0.3),
              scaled_dot_product_attention(qh.cpu.transpose(1, 2), kh.cpu.transpose(1, 2), vh.cpu, {}, true, 0.3),
              "sdpa causal, transposed views", tol);
  // Grouped-query attention: 4 query heads over 2 key/value heads.
  const Pair gq = input({1, 4, 40, 32}, dtype(), g_), gk = input({1, 2, 60, 32}, dtype(), g_),
             gv = input({1, 2, 60, 32}, dtype(), g_);
  expect_same(scaled_dot_product_attention(gq.dev, gk.dev, gv.dev, {}, true, std::nullopt, true),
              scaled_dot_product_attention(gq.cpu, gk.cpu, gv.cpu, {}, true, std::nullopt, true), "sdpa gqa", tol);
}

TEST_P(CrossBackend, Movement) {
  const Pair a = input({130, 3}, dtype(), g_), b = input({130, 5}, dtype(), g_);
  expect_same(cat({a.dev, b.dev}, 1), cat({a.cpu, b.cpu}, 1), "cat dim 1");
  expect_same(cat({a.dev, a.dev}, 0), cat({a.cpu, a.cpu}, 0), "cat dim 0");
  const Pair table = input({300, 20}, dtype(), g_);
  const Tensor idx = from_vector(std::vector<int32_t>{3, 0, 299, 3, 7, 150}, {2, 3});
  expect_same(embedding(table.dev, idx.to(neuron0())), embedding(table.cpu, idx), "embedding");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossBackend, ::testing::Values(DType::f32, DType::bf16, DType::f16, DType::i32),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });
