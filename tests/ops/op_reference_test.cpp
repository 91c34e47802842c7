// Every op of the op table against the float64 reference, on fresh random inputs, for every dtype,
// on contiguous, transposed, strided and broadcast inputs, with guarded (sentinel) allocations.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "backend/cpu/guard.h"
#include "reference.h"

using namespace sightline;
using namespace sightline::testing;

namespace {

enum class Layout { contiguous, transposed, strided };

struct Tolerance {
  double atol, rtol;
};

Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f32: return {1e-5, 1e-5};
    case DType::bf16: return {2e-2, 1.6e-2};
    case DType::f16: return {2e-3, 2e-3};
    case DType::i32: return {0, 0};
    case DType::boolean: return {0, 0};
  }
  return {0, 0};
}

// Inputs are drawn on the host in f32, made positive where an op needs it, then cast.
Tensor make_input(Dims shape, DType dtype, Layout layout, Generator& g, bool positive = false) {
  auto draw = [&](const Dims& s) {
    Tensor t = randn(s, DType::f32, &g);
    if (positive) t = abs(t) + 0.5;
    if (dtype == DType::i32) t = t * 10.0;
    return t.to(dtype);
  };
  if (layout == Layout::transposed && shape.size() >= 2) {
    Dims swapped = shape;
    std::swap(swapped[shape.size() - 1], swapped[shape.size() - 2]);
    return draw(swapped).transpose(-1, -2);
  }
  if (layout == Layout::strided && shape.size() >= 1) {
    Dims wide = shape;
    wide[shape.size() - 1] *= 2;
    return draw(wide).slice(-1, 0, wide.back(), 2);
  }
  return draw(shape);
}

void expect_close(const Tensor& got, const Ref& want, DType dtype, const std::string& what, double scale = 1.0) {
  ASSERT_EQ(got.shape(), want.shape) << what;
  const Ref g = to_ref(got);
  const Tolerance tol = tolerance(dtype);
  int shown = 0;
  for (size_t i = 0; i < g.v.size(); ++i) {
    const double diff = std::fabs(g.v[i] - want.v[i]);
    const bool both_nan = std::isnan(g.v[i]) && std::isnan(want.v[i]);
    if (!both_nan && !(diff <= (tol.atol + tol.rtol * std::fabs(want.v[i])) * scale)) {
      ADD_FAILURE() << what << " element " << i << ": got " << g.v[i] << " want " << want.v[i];
      if (++shown > 5) return;
    }
  }
}

struct Param {
  DType dtype;
  Layout layout;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  static const char* layouts[] = {"contiguous", "transposed", "strided"};
  return fmt::format("{}_{}", dtype_name(info.param.dtype), layouts[static_cast<int>(info.param.layout)]);
}

class OpReference : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { cpu::set_guarded_allocations(true); }
  void TearDown() override {
    cpu::set_guarded_allocations(false);
    EXPECT_EQ(cpu::guard_violations(), 0u) << "a kernel wrote outside its output";
  }
  DType dtype() const { return GetParam().dtype; }
  Layout layout() const { return GetParam().layout; }
  bool floating() const { return dtype_is_floating(dtype()); }
  Tensor in(Dims shape, bool positive = false) { return make_input(shape, dtype(), layout(), gen_, positive); }
  Generator gen_{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) * 7919 + 17};
};

const std::vector<Dims> kShapes = {{7}, {3, 5}, {2, 3, 4}, {1, 130}};

}  // namespace

TEST_P(OpReference, BinaryWithBroadcasting) {
  const std::vector<std::pair<OpId, std::function<double(double, double)>>> ops = {
      {OpId::add, [](double a, double b) { return a + b; }},
      {OpId::sub, [](double a, double b) { return a - b; }},
      {OpId::rsub, [](double a, double b) { return b - a; }},
      {OpId::mul, [](double a, double b) { return a * b; }},
      {OpId::div, [](double a, double b) { return a / b; }},
      {OpId::maximum, [](double a, double b) { return std::max(a, b); }},
      {OpId::minimum, [](double a, double b) { return std::min(a, b); }}};
  const std::vector<std::pair<Dims, Dims>> shapes = {{{3, 5}, {3, 5}}, {{3, 5}, {5}}, {{3, 1}, {1, 4}},
                                                     {{2, 3, 4}, {3, 1}}, {{1, 130}, {}}, {{7}, {7}}};
  for (const auto& [op, f] : ops) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = in(sa), b = in(sb, op == OpId::div);
      const Tensor ab[] = {a, b};
      const Tensor out = dispatch(op, ab, OpAttrs{});
      const DType out_t = op == OpId::div && !floating() ? DType::f32 : dtype();
      ASSERT_EQ(out.dtype(), out_t);
      double scale = 1;
      if (dtype() == DType::i32) scale = 0;
      expect_close(out, round_to(ref_binary(to_ref(a), to_ref(b), f), out_t), out_t,
                   fmt::format("{} {} {}", op_name(op), sa, sb), scale);
      // Tensor-scalar form: the scalar does not promote the tensor.
      OpAttrs attrs;
      attrs.scalar = 2.0;
      attrs.has_scalar = true;
      const Tensor only_a[] = {a};
      const Tensor s = dispatch(op, only_a, attrs);
      ASSERT_EQ(s.dtype(), out_t);
      expect_close(s, round_to(ref_binary(to_ref(a), Ref{{}, {2.0}}, f), out_t), out_t,
                   fmt::format("{} {} scalar", op_name(op), sa));
    }
  }
}

// The comparisons write bool; they compare in result_type(a, b), so an integer tensor against 0.25
// compares as f32 and a tensor of 16-bit floats against 0.25 compares in its own dtype.
TEST_P(OpReference, ComparisonsWriteBool) {
  const std::vector<std::pair<OpId, std::function<double(double, double)>>> ops = {
      {OpId::eq, [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {OpId::ne, [](double a, double b) { return a != b ? 1.0 : 0.0; }},
      {OpId::lt, [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {OpId::le, [](double a, double b) { return a <= b ? 1.0 : 0.0; }},
      {OpId::gt, [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {OpId::ge, [](double a, double b) { return a >= b ? 1.0 : 0.0; }}};
  const std::vector<std::pair<Dims, Dims>> shapes = {{{3, 5}, {3, 5}}, {{3, 5}, {5}}, {{3, 1}, {1, 4}},
                                                     {{1, 130}, {}}};
  for (const auto& [op, f] : ops) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = in(sa);
      // Half the elements of b equal a's where the shapes agree, so eq/le/ge see equal pairs too.
      Tensor b = in(sb);
      if (sa == sb) b = cat({a.slice(1, 0, 2), b.slice(1, 2, sb[1])}, 1);
      const Tensor ab[] = {a, b};
      const Tensor out = dispatch(op, ab, OpAttrs{});
      ASSERT_EQ(out.dtype(), DType::boolean) << op_name(op);
      expect_close(out, ref_binary(to_ref(a), to_ref(b), f), DType::boolean,
                   fmt::format("{} {} {}", op_name(op), sa, sb));
    }
    for (double scalar : {0.0, 0.25}) {
      const Tensor a = in({3, 5});
      OpAttrs attrs;
      attrs.scalar = scalar;
      attrs.has_scalar = true;
      const Tensor only_a[] = {a};
      const Tensor out = dispatch(op, only_a, attrs);
      ASSERT_EQ(out.dtype(), DType::boolean);
      // The scalar is rounded to the dtype the comparison runs in, as torch does.
      const DType t = result_type(a, scalar);
      const double s = round_to(Ref{{}, {scalar}}, t).v[0];
      expect_close(out, ref_binary(to_ref(a), Ref{{}, {s}}, f), DType::boolean,
                   fmt::format("{} {} scalar {}", op_name(op), dtype_name(dtype()), scalar));
    }
  }
}

// where(cond, a, b) and masked_fill(x, mask, value), with broadcast masks and operands.
TEST_P(OpReference, SelectsPickByABoolMask) {
  const std::vector<std::array<Dims, 3>> shapes = {{Dims{3, 5}, Dims{3, 5}, Dims{3, 5}},
                                                   {Dims{3, 1}, Dims{3, 5}, Dims{5}},
                                                   {Dims{1, 130}, Dims{1, 130}, Dims{}}};
  for (const auto& [sc, sa, sb] : shapes) {
    const Tensor cond = gt(in(sc), 0.0);
    const Tensor a = in(sa), b = in(sb);
    const Tensor out = where(cond, a, b);
    ASSERT_EQ(out.dtype(), dtype());
    const Ref rc = to_ref(cond), ra = to_ref(a), rb = to_ref(b);
    const Ref picked_a = ref_binary(rc, ra, [](double c, double v) { return c != 0 ? v : 0.0; });
    const Ref picked_b = ref_binary(rc, rb, [](double c, double v) { return c != 0 ? 0.0 : v; });
    expect_close(out, ref_binary(picked_a, picked_b, [](double x, double y) { return x + y; }), dtype(),
                 fmt::format("where {} {} {}", sc, sa, sb));
    const Tensor filled = masked_fill(a, cond.slice(-1, 0, 1), -7.0);
    expect_close(filled,
                 ref_binary(ra, to_ref(cond.slice(-1, 0, 1)), [](double v, double m) { return m != 0 ? -7.0 : v; }),
                 dtype(), fmt::format("masked_fill {}", sa));
  }
}

TEST_P(OpReference, Unary) {
  struct U {
    OpId op;
    std::function<double(double)> f;
    bool positive;
    bool float_only;
  };
  const std::vector<U> ops = {
      {OpId::neg, [](double x) { return -x; }, false, false},
      {OpId::abs, [](double x) { return std::fabs(x); }, false, false},
      {OpId::relu, [](double x) { return x > 0 ? x : 0; }, false, false},
      {OpId::exp, [](double x) { return std::exp(x); }, false, true},
      {OpId::log, [](double x) { return std::log(x); }, true, true},
      {OpId::sqrt, [](double x) { return std::sqrt(x); }, true, true},
      {OpId::rsqrt, [](double x) { return 1 / std::sqrt(x); }, true, true},
      {OpId::reciprocal, [](double x) { return 1 / x; }, true, true},
      {OpId::tanh, [](double x) { return std::tanh(x); }, false, true},
      {OpId::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, false, true},
      {OpId::silu, [](double x) { return x / (1 + std::exp(-x)); }, false, true},
      {OpId::gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, false, true},
      {OpId::erf, [](double x) { return std::erf(x); }, false, true},
      {OpId::sin, [](double x) { return std::sin(x); }, false, true},
      {OpId::cos, [](double x) { return std::cos(x); }, false, true}};
  for (const U& u : ops) {
    for (const Dims& shape : kShapes) {
      const Tensor x = in(shape, u.positive);
      const Tensor xs[] = {x};
      const Tensor out = dispatch(u.op, xs, OpAttrs{});
      const DType out_t = u.float_only && !floating() ? DType::f32 : dtype();
      ASSERT_EQ(out.dtype(), out_t) << op_name(u.op);
      expect_close(out, round_to(ref_unary(to_ref(x), u.f), out_t), out_t, fmt::format("{} {}", op_name(u.op), shape));
    }
  }
  // gelu's tanh approximation.
  for (const Dims& shape : kShapes) {
    const Tensor x = in(shape);
    const DType out_t = floating() ? dtype() : DType::f32;
    const auto tanh_form = [](double v) {
      return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    };
    expect_close(gelu(x, "tanh"), round_to(ref_unary(to_ref(x), tanh_form), out_t), out_t,
                 fmt::format("gelu tanh {}", shape));
  }
  for (double e : {2.0, 3.0, 0.5}) {
    const Tensor x = in({3, 5}, true);
    const Tensor out = pow(x, e);
    const DType out_t = e == 0.5 && !floating() ? DType::f32 : dtype();
    expect_close(out, round_to(ref_unary(to_ref(x), [e](double v) { return std::pow(v, e); }), out_t), out_t,
                 fmt::format("pow {}", e), dtype() == DType::i32 ? 0 : 2);
  }
}

TEST_P(OpReference, Reductions) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{3, 5}, {-1}}, {{3, 5}, {0}}, {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {}}, {{1, 130}, {1}}, {{7}, {0}}};
  for (const auto& [shape, dims] : cases) {
    for (bool keepdim : {false, true}) {
      const Tensor x = in(shape);
      const Ref r = to_ref(x);
      // Sums of n terms carry about sqrt(n) roundings of the output dtype.
      const double scale = std::sqrt(static_cast<double>(shape.product()));
      expect_close(sum(x, dims, keepdim), round_to(ref_reduce(r, dims, keepdim, 0), dtype()), dtype(),
                   fmt::format("sum {} {}", shape, dims), dtype() == DType::i32 ? 0 : scale);
      expect_close(amax(x, dims, keepdim), ref_reduce(r, dims, keepdim, 2), dtype(), fmt::format("amax {}", shape));
      if (floating()) {
        expect_close(mean(x, dims, keepdim), round_to(ref_reduce(r, dims, keepdim, 1), dtype()), dtype(),
                     fmt::format("mean {} {}", shape, dims), 2);
      }
    }
  }
  if (!floating()) return;
  for (const Dims& shape : kShapes) {
    for (int dim : {0, -1}) {
      const Tensor x = in(shape);
      expect_close(softmax(x, dim), round_to(ref_softmax(to_ref(x), dim, false), dtype()), dtype(),
                   fmt::format("softmax {} {}", shape, dim), 2);
      expect_close(log_softmax(x, dim), round_to(ref_softmax(to_ref(x), dim, true), dtype()), dtype(),
                   fmt::format("log_softmax {} {}", shape, dim), 2);
    }
  }
}

TEST_P(OpReference, MatmulAndLinear) {
  const std::vector<std::pair<Dims, Dims>> cases = {{{5, 7}, {7, 3}},     {{7}, {7, 3}},     {{5, 7}, {7}},
                                                    {{7}, {7}},           {{2, 5, 7}, {7, 4}}, {{2, 1, 5, 7}, {3, 7, 2}},
                                                    {{130, 33}, {33, 129}}};
  for (const auto& [sa, sb] : cases) {
    const Tensor a = in(sa), b = in(sb);
    const Tensor out = matmul(a, b);
    const double k = static_cast<double>(sa.back());
    expect_close(out, round_to(ref_matmul(to_ref(a), to_ref(b)), dtype()), dtype(), fmt::format("matmul {} {}", sa, sb),
                 dtype() == DType::i32 ? 0 : k);
  }
  for (bool with_bias : {false, true}) {
    const Tensor x = in({2, 3, 9}), w = in({5, 9}), b = with_bias ? in({5}) : Tensor();
    Ref want = ref_matmul(to_ref(x), [&] {
      Ref wt = to_ref(w.transpose(0, 1));
      return wt;
    }());
    if (with_bias) want = ref_binary(want, to_ref(b), [](double p, double q) { return p + q; });
    expect_close(linear(x, w, b), round_to(want, dtype()), dtype(), "linear", dtype() == DType::i32 ? 0 : 9);
  }
}

TEST_P(OpReference, Normalization) {
  if (!floating()) return;
  for (const Dims& shape : kShapes) {
    const Tensor x = in(shape);
    const Tensor w = in({shape.back()}), b = in({shape.back()});
    const Ref rx = to_ref(x), rw = to_ref(w), rb = to_ref(b);
    expect_close(rms_norm(x, w, 1e-6), round_to(ref_rms_norm(rx, &rw, 1e-6), dtype()), dtype(), "rms_norm", 2);
    expect_close(rms_norm(x, Tensor(), 1e-5), round_to(ref_rms_norm(rx, nullptr, 1e-5), dtype()), dtype(),
                 "rms_norm without weight", 2);
    expect_close(layer_norm(x, w, b, 1e-5), round_to(ref_layer_norm(rx, &rw, &rb, 1e-5), dtype()), dtype(),
                 "layer_norm", 4);
  }
}

// scaled_dot_product_attention against its definition built from the reference's matmul and softmax:
// softmax(q k^T * scale + bias) in f64, P rounded to the dtype (as the op specifies), P v.
TEST_P(OpReference, ScaledDotProductAttention) {
  if (!floating()) return;
  const Tensor q = in({2, 2, 5, 8}), k = in({2, 2, 7, 8}), v = in({2, 2, 7, 6});
  auto expected = [&](const Tensor& kk, const Tensor& vv, const Ref* bias, double scale) {
    Ref scores = ref_unary(ref_matmul(to_ref(q), to_ref(kk.transpose(-1, -2))), [&](double x) { return x * scale; });
    if (bias) scores = ref_binary(scores, *bias, [](double a, double b) { return a + b; });
    const Ref p = round_to(ref_softmax(scores, -1, false), dtype());
    return round_to(ref_matmul(p, to_ref(vv)), dtype());
  };
  const double tol = 8;
  expect_close(scaled_dot_product_attention(q, k, v), expected(k, v, nullptr, 1.0 / std::sqrt(8.0)), dtype(), "sdpa",
               tol);
  const Tensor additive = in({2, 1, 1, 7});
  const Ref radd = to_ref(additive);
  expect_close(scaled_dot_product_attention(q, k, v, additive, false, 0.5), expected(k, v, &radd, 0.5), dtype(),
               "sdpa additive mask", tol);
  // A bool mask [L, S]: every query keeps key 0, so no row is all -inf.
  std::vector<float> keep(5 * 7);
  Ref rbool{{5, 7}, std::vector<double>(5 * 7)};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) {
      const bool attend = j == 0 || (i + 2 * j) % 3 != 0;
      keep[static_cast<size_t>(i * 7 + j)] = attend ? 1.0f : 0.0f;
      rbool.v[static_cast<size_t>(i * 7 + j)] = attend ? 0.0 : -INFINITY;
    }
  }
  const Tensor mask = gt(from_vector(keep, {5, 7}), 0.0);
  expect_close(scaled_dot_product_attention(q, k, v, mask), expected(k, v, &rbool, 1.0 / std::sqrt(8.0)), dtype(),
               "sdpa bool mask", tol);
  // is_causal: key j > query i is masked (L = 5 <= S = 7: top-left aligned, as torch).
  Ref rcausal{{5, 7}, std::vector<double>(5 * 7)};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) rcausal.v[static_cast<size_t>(i * 7 + j)] = j > i ? -INFINITY : 0.0;
  }
  expect_close(scaled_dot_product_attention(q, k, v, {}, true, 0.25), expected(k, v, &rcausal, 0.25), dtype(),
               "sdpa causal", tol);
  // enable_gqa: one key/value head serves both query heads, as repeating it would.
  const Tensor k1 = in({2, 1, 7, 8}), v1 = in({2, 1, 7, 6});
  expect_close(scaled_dot_product_attention(q, k1, v1, {}, false, std::nullopt, true),
               expected(cat({k1, k1}, 1), cat({v1, v1}, 1), nullptr, 1.0 / std::sqrt(8.0)), dtype(), "sdpa gqa", tol);
}

// cumsum and argmax along each dim, against index arithmetic over the f64 reference values.
TEST_P(OpReference, CumsumAndArgmax) {
  for (const Dims& shape : kShapes) {
    const Tensor x = in(shape);
    const Ref rx = to_ref(x);
    for (int dim = 0; dim < shape.size(); ++dim) {
      Ref sums{shape, std::vector<double>(rx.v.size())};
      Dims reduced = shape;
      reduced[dim] = 1;
      Ref best{reduced, std::vector<double>(rx.v.size() / static_cast<size_t>(shape[dim]))};
      for (size_t i = 0; i < rx.v.size(); ++i) {
        Dims idx = unravel(shape, static_cast<int64_t>(i));
        const int64_t at = idx[dim];
        double acc = 0;
        int64_t arg = 0;
        double top = -INFINITY;
        for (int64_t j = 0; j < shape[dim]; ++j) {
          idx[dim] = j;
          const double v = rx.v[static_cast<size_t>(flat_index(shape, idx))];
          if (j <= at) acc += v;
          if (v > top) top = v, arg = j;
        }
        sums.v[i] = acc;
        idx[dim] = 0;
        best.v[static_cast<size_t>(flat_index(reduced, idx))] = static_cast<double>(arg);
      }
      const double n = static_cast<double>(shape[dim]);
      expect_close(cumsum(x, dim), round_to(sums, dtype()), dtype(), fmt::format("cumsum {} dim {}", shape, dim), n);
      const Tensor a = argmax(x, dim, true);
      EXPECT_EQ(a.dtype(), DType::i32);
      // Ties (integer inputs) keep the first index, as the reference does.
      EXPECT_EQ(to_ref(a).v, best.v) << fmt::format("argmax {} dim {}", shape, dim);
    }
  }
}

// topk along each dim, largest and smallest, against selection over the f64 reference values: the best
// remaining element, the first one of equal values (integer inputs have ties), k times.
TEST_P(OpReference, Topk) {
  for (const Dims& shape : kShapes) {
    const Tensor x = in(shape);
    const Ref rx = to_ref(x);
    for (int dim = 0; dim < shape.size(); ++dim) {
      const int64_t k = std::min<int64_t>(3, shape[dim]);
      for (bool largest : {true, false}) {
        Dims out_shape = shape;
        out_shape[dim] = k;
        Ref values{out_shape, std::vector<double>(static_cast<size_t>(out_shape.product()))};
        Ref indices = values;
        for (size_t i = 0; i < values.v.size(); ++i) {
          Dims idx = unravel(out_shape, static_cast<int64_t>(i));
          if (idx[dim] != 0) continue;  // one row per position of the other dims
          std::vector<bool> taken(static_cast<size_t>(shape[dim]), false);
          for (int64_t r = 0; r < k; ++r) {
            int64_t pick = -1;
            double pv = 0;
            for (int64_t j = 0; j < shape[dim]; ++j) {
              Dims at = idx;
              at[dim] = j;
              const double v = rx.v[static_cast<size_t>(flat_index(shape, at))];
              if (taken[static_cast<size_t>(j)]) continue;
              if (pick < 0 || (largest ? v > pv : v < pv)) pick = j, pv = v;
            }
            taken[static_cast<size_t>(pick)] = true;
            Dims o = idx;
            o[dim] = r;
            values.v[static_cast<size_t>(flat_index(out_shape, o))] = pv;
            indices.v[static_cast<size_t>(flat_index(out_shape, o))] = static_cast<double>(pick);
          }
        }
        const TopkResult t = topk(x, k, dim, largest);
        const std::string what = fmt::format("topk {} dim {} largest {}", shape, dim, largest);
        EXPECT_EQ(t.indices.dtype(), DType::i32) << what;
        EXPECT_EQ(t.values.dtype(), x.dtype()) << what;
        EXPECT_EQ(to_ref(t.values).v, values.v) << what;
        EXPECT_EQ(to_ref(t.indices).v, indices.v) << what;
      }
    }
  }
}

TEST_P(OpReference, Movement) {
  const Tensor a = in({2, 3}), b = in({2, 5});
  const Tensor c = cat({a, b}, 1);
  ASSERT_EQ(c.shape(), (Dims{2, 8}));
  const Ref ra = to_ref(a), rb = to_ref(b), rc = to_ref(c);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 8; ++j) {
      const double want = j < 3 ? ra.v[static_cast<size_t>(i * 3 + j)] : rb.v[static_cast<size_t>(i * 5 + j - 3)];
      ASSERT_EQ(rc.v[static_cast<size_t>(i * 8 + j)], want);
    }
  }
  const Tensor c0 = cat({a, a, a}, 0);
  ASSERT_EQ(c0.shape(), (Dims{6, 3}));
  EXPECT_EQ(to_ref(c0.slice(0, 4, 6)).v, ra.v);

  const Tensor table = in({10, 4});
  const Tensor idx = from_vector(std::vector<int32_t>{3, 0, 9, 3, 7, 1}, {2, 3});
  const Tensor e = embedding(table, idx);
  ASSERT_EQ(e.shape(), (Dims{2, 3, 4}));
  const Ref rt = to_ref(table), re = to_ref(e);
  const int32_t rows[] = {3, 0, 9, 3, 7, 1};
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) ASSERT_EQ(re.v[static_cast<size_t>(i * 4 + j)], rt.v[static_cast<size_t>(rows[i] * 4 + j)]);
  }

  const Tensor x = in({3, 5});
  const Tensor dense = x.clone();
  EXPECT_TRUE(dense.is_contiguous());
  EXPECT_EQ(to_ref(dense).v, to_ref(x).v);
  for (DType target : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    const Tensor y = x.to(target);
    ASSERT_EQ(y.dtype(), target);
    Ref want = to_ref(x);
    if (target == DType::i32) {
      for (double& v : want.v) v = std::trunc(v);
    }
    expect_close(y, round_to(want, target), target, fmt::format("to {}", dtype_name(target)));
  }
  const Tensor f = full({2, 3}, 3.0, dtype());
  EXPECT_EQ(to_ref(f).v, std::vector<double>(6, 3.0));
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAndLayouts, OpReference,
                         ::testing::Values(Param{DType::f32, Layout::contiguous}, Param{DType::f32, Layout::transposed},
                                           Param{DType::f32, Layout::strided}, Param{DType::bf16, Layout::contiguous},
                                           Param{DType::bf16, Layout::transposed}, Param{DType::f16, Layout::strided},
                                           Param{DType::f16, Layout::contiguous}, Param{DType::i32, Layout::contiguous},
                                           Param{DType::i32, Layout::strided}),
                         param_name);

// Large tensors take the parallel and vectorized paths; compare them too.
TEST(OpReferenceLarge, ParallelPathsMatchReference) {
  Generator g(3);
  const Tensor x = randn({512, 1031}, {}, &g), y = randn({1031}, {}, &g);
  const Ref rx = to_ref(x), ry = to_ref(y);
  expect_close(x * y, round_to(ref_binary(rx, ry, [](double a, double b) { return a * b; }), DType::f32), DType::f32,
               "mul large");
  expect_close(sum(x), ref_reduce(rx, {}, false, 0), DType::f32, "sum all large", 100);
  expect_close(mean(x, {-1}, true), round_to(ref_reduce(rx, {-1}, true, 1), DType::f32), DType::f32, "mean rows");
  expect_close(rms_norm(x, y), round_to(ref_rms_norm(rx, &ry, 1e-6), DType::f32), DType::f32, "rms_norm large", 4);
  const Tensor t = x.transpose(0, 1).contiguous();
  EXPECT_EQ(to_ref(t.transpose(0, 1)).v, rx.v);
}

// Every op of the table is covered by a case above (or, for copy, by the cross-device tests).
TEST(OpReferenceCoverage, EveryOpHasACase) {
  const std::set<OpId> covered = {
      OpId::add, OpId::sub, OpId::rsub, OpId::mul, OpId::div, OpId::maximum, OpId::minimum, OpId::neg, OpId::abs,
      OpId::eq, OpId::ne, OpId::lt, OpId::le, OpId::gt, OpId::ge, OpId::where, OpId::masked_fill, OpId::exp,
      OpId::log, OpId::sqrt, OpId::rsqrt, OpId::reciprocal, OpId::pow, OpId::tanh, OpId::sigmoid,
      OpId::relu, OpId::silu, OpId::gelu, OpId::erf, OpId::sin, OpId::cos, OpId::to_copy, OpId::fill, OpId::sum,
      OpId::mean, OpId::amax, OpId::softmax, OpId::log_softmax, OpId::cumsum, OpId::argmax, OpId::matmul, OpId::linear, OpId::rms_norm,
      OpId::layer_norm, OpId::scaled_dot_product_attention, OpId::contiguous,
      OpId::copy /* backend_test: Registry.CustomBackendRegistersLikeCpu */, OpId::cat, OpId::embedding, OpId::view,
      OpId::reshape, OpId::transpose, OpId::permute, OpId::slice, OpId::expand, OpId::unsqueeze,
      OpId::squeeze /* core_test: Tensor.ViewsShareStorage */, OpId::select /* op_values_test: SelectChunkSplit */,
      OpId::topk};
  for (const OpInfo& info : kOpTable) EXPECT_TRUE(covered.count(info.id)) << info.name << " has no reference case";
}
