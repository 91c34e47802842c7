#include <cmath>
#include <cstring>
#include <numbers>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided_loop.h"

namespace sightline::cpu {
namespace {

// Compute type: f32 for the floating types, a wide int for i32 (wrapping on overflow like torch).
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, int32_t>, int64_t, float>;

template <typename T>
inline Compute<T> load(const char* p) {
  const T v = *reinterpret_cast<const T*>(p);
  if constexpr (std::is_same_v<T, int32_t>) return v;
  else return to_float(v);
}

template <typename T>
inline void store(char* p, Compute<T> v) {
  if constexpr (std::is_same_v<T, int32_t>) *reinterpret_cast<T*>(p) = static_cast<int32_t>(static_cast<uint32_t>(v));
  else *reinterpret_cast<T*>(p) = from_float<T>(v);
}

// Runs out = f(a, b) over a loop, with a contiguous fast path the compiler vectorizes.
template <typename T, typename F>
void binary_rows(const ElementwiseLoop& loop, F f) {
  loop.run([f](char* const* p, int64_t n, const int64_t* s) {
    constexpr int64_t sz = sizeof(T);
    if constexpr (std::is_same_v<T, float>) {
      float* __restrict o = reinterpret_cast<float*>(p[0]);
      const float* __restrict a = reinterpret_cast<const float*>(p[1]);
      const float* __restrict b = reinterpret_cast<const float*>(p[2]);
      if (s[0] == sz && s[1] == sz && s[2] == sz) {
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
        return;
      }
      if (s[0] == sz && s[1] == sz && s[2] == 0) {
        const float bv = b[0];
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      store<T>(p[0] + i * s[0], f(load<T>(p[1] + i * s[1]), load<T>(p[2] + i * s[2])));
    }
  });
}

template <typename T, typename F>
void binary_scalar_rows(const ElementwiseLoop& loop, Compute<T> b, F f) {
  loop.run([f, b](char* const* p, int64_t n, const int64_t* s) {
    constexpr int64_t sz = sizeof(T);
    if constexpr (std::is_same_v<T, float>) {
      if (s[0] == sz && s[1] == sz) {
        float* __restrict o = reinterpret_cast<float*>(p[0]);
        const float* __restrict a = reinterpret_cast<const float*>(p[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) store<T>(p[0] + i * s[0], f(load<T>(p[1] + i * s[1]), b));
  });
}

template <typename T, typename F>
void unary_rows(const ElementwiseLoop& loop, F f) {
  loop.run([f](char* const* p, int64_t n, const int64_t* s) {
    constexpr int64_t sz = sizeof(T);
    if constexpr (std::is_same_v<T, float>) {
      if (s[0] == sz && s[1] == sz) {
        float* __restrict o = reinterpret_cast<float*>(p[0]);
        const float* __restrict a = reinterpret_cast<const float*>(p[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) store<T>(p[0] + i * s[0], f(load<T>(p[1] + i * s[1])));
  });
}

// Calls fn(functor) with the binary functor of `op` for compute type C.
template <typename C, typename Fn>
void with_binary_functor(OpId op, Fn&& fn) {
  switch (op) {
    case OpId::add: return fn([](C a, C b) { return a + b; });
    case OpId::sub: return fn([](C a, C b) { return a - b; });
    case OpId::rsub: return fn([](C a, C b) { return b - a; });
    case OpId::mul: return fn([](C a, C b) { return a * b; });
    case OpId::div: return fn([](C a, C b) { return a / b; });
    case OpId::maximum:
      return fn([](C a, C b) {
        if constexpr (std::is_floating_point_v<C>) {
          if (a != a || b != b) return a + b;  // NaN propagates, as in torch.maximum
        }
        return a > b ? a : b;
      });
    case OpId::minimum:
      return fn([](C a, C b) {
        if constexpr (std::is_floating_point_v<C>) {
          if (a != a || b != b) return a + b;
        }
        return a < b ? a : b;
      });
    default: break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a binary op", op_name(op));
}

// Calls fn(predicate) with the comparison of `op` for compute type C (NaN compares unequal, as in C++).
template <typename C, typename Fn>
void with_compare_functor(OpId op, Fn&& fn) {
  switch (op) {
    case OpId::eq: return fn([](C a, C b) { return a == b; });
    case OpId::ne: return fn([](C a, C b) { return a != b; });
    case OpId::lt: return fn([](C a, C b) { return a < b; });
    case OpId::le: return fn([](C a, C b) { return a <= b; });
    case OpId::gt: return fn([](C a, C b) { return a > b; });
    case OpId::ge: return fn([](C a, C b) { return a >= b; });
    default: break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a comparison", op_name(op));
}

inline float gelu_tanh(float x) {
  constexpr float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kAlpha * (x + 0.044715f * x * x * x)));
}

inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

template <typename C, typename Fn>
void with_unary_functor(OpId op, const OpAttrs& attrs, Fn&& fn) {
  const double scalar = attrs.scalar;
  if constexpr (std::is_same_v<C, int64_t>) {
    switch (op) {
      case OpId::neg: return fn([](C a) { return -a; });
      case OpId::abs: return fn([](C a) { return a < 0 ? -a : a; });
      case OpId::relu: return fn([](C a) { return a > 0 ? a : C{0}; });
      case OpId::pow: {
        const double e = scalar;
        return fn([e](C a) { return static_cast<C>(std::pow(static_cast<double>(a), e)); });
      }
      default: break;
    }
  } else {
    switch (op) {
      case OpId::neg: return fn([](float a) { return -a; });
      case OpId::abs: return fn([](float a) { return std::fabs(a); });
      case OpId::exp: return fn([](float a) { return std::exp(a); });
      case OpId::log: return fn([](float a) { return std::log(a); });
      case OpId::sqrt: return fn([](float a) { return std::sqrt(a); });
      case OpId::rsqrt: return fn([](float a) { return 1.0f / std::sqrt(a); });
      case OpId::reciprocal: return fn([](float a) { return 1.0f / a; });
      case OpId::tanh: return fn([](float a) { return std::tanh(a); });
      case OpId::sigmoid: return fn([](float a) { return 1.0f / (1.0f + std::exp(-a)); });
      case OpId::relu: return fn([](float a) { return a > 0.0f ? a : (a != a ? a : 0.0f); });
      case OpId::silu: return fn([](float a) { return a / (1.0f + std::exp(-a)); });
      case OpId::gelu:
        if (attrs.approximate == GeluApproximate::tanh) return fn([](float a) { return gelu_tanh(a); });
        return fn([](float a) { return gelu_erf(a); });
      case OpId::erf: return fn([](float a) { return std::erf(a); });
      case OpId::sin: return fn([](float a) { return std::sin(a); });
      case OpId::cos: return fn([](float a) { return std::cos(a); });
      case OpId::pow: {
        const float e = static_cast<float>(scalar);
        if (e == 2.0f) return fn([](float a) { return a * a; });
        return fn([e](float a) { return std::pow(a, e); });
      }
      default: break;
    }
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a unary op for this dtype", op_name(op));
}

}  // namespace

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : contiguous_as(t, dtype); }

void binary_kernel(const OpCall& call, Tensor& out) {
  const Tensor a = as_dtype(call.inputs[0], out.dtype());
  if (call.attrs.has_scalar) {
    ElementwiseLoop loop(out, {&a});
    dtype_visit(out.dtype(), [&]<typename T>() {
      using C = Compute<T>;
      with_binary_functor<C>(call.op, [&](auto f) { binary_scalar_rows<T>(loop, static_cast<C>(call.attrs.scalar), f); });
    });
    return;
  }
  const Tensor b = as_dtype(call.inputs[1], out.dtype());
  ElementwiseLoop loop(out, {&a, &b});
  dtype_visit(out.dtype(), [&]<typename T>() {
    with_binary_functor<Compute<T>>(call.op, [&](auto f) { binary_rows<T>(loop, f); });
  });
}

void compare_kernel(const OpCall& call, Tensor& out) {
  const DType t = elementwise_operand_dtype(call, 1, out.dtype());
  const Tensor a = as_dtype(call.inputs[0], t);
  const bool scalar = call.attrs.has_scalar;
  const Tensor b = scalar ? a : as_dtype(call.inputs[1], t);
  ElementwiseLoop loop = scalar ? ElementwiseLoop(out, {&a}) : ElementwiseLoop(out, {&a, &b});
  dtype_visit(t, [&]<typename T>() {
    using C = Compute<T>;
    const C s = static_cast<C>(call.attrs.scalar);
    with_compare_functor<C>(call.op, [&](auto f) {
      loop.run([&](char* const* p, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i) {
          const C lhs = load<T>(p[1] + i * st[1]);
          const C rhs = scalar ? s : load<T>(p[2] + i * st[2]);
          *reinterpret_cast<uint8_t*>(p[0] + i * st[0]) = f(lhs, rhs) ? 1 : 0;
        }
      });
    });
  });
}

void select_kernel(const OpCall& call, Tensor& out) {
  const bool is_where = call.op == OpId::where;
  const Tensor& mask = call.inputs[is_where ? 0 : 1];
  const Tensor a = as_dtype(call.inputs[is_where ? 1 : 0], out.dtype());
  const Tensor b = is_where ? as_dtype(call.inputs[2], out.dtype()) : a;
  // where: out = mask ? a : b; masked_fill: out = mask ? value : a.
  ElementwiseLoop loop = is_where ? ElementwiseLoop(out, {&mask, &a, &b}) : ElementwiseLoop(out, {&mask, &a});
  dtype_visit(out.dtype(), [&]<typename T>() {
    T value{};
    if constexpr (std::is_same_v<T, int32_t>) value = static_cast<int32_t>(call.attrs.scalar);
    else value = from_float<T>(static_cast<float>(call.attrs.scalar));
    loop.run([&](char* const* p, int64_t n, const int64_t* s) {
      for (int64_t i = 0; i < n; ++i) {
        const bool m = *reinterpret_cast<const uint8_t*>(p[1] + i * s[1]) != 0;
        T* o = reinterpret_cast<T*>(p[0] + i * s[0]);
        if (is_where) {
          *o = *reinterpret_cast<const T*>(m ? p[2] + i * s[2] : p[3] + i * s[3]);
        } else {
          *o = m ? value : *reinterpret_cast<const T*>(p[2] + i * s[2]);
        }
      }
    });
  });
}

void unary_kernel(const OpCall& call, Tensor& out) {
  const Tensor a = as_dtype(call.inputs[0], out.dtype());
  ElementwiseLoop loop(out, {&a});
  dtype_visit(out.dtype(), [&]<typename T>() {
    with_unary_functor<Compute<T>>(call.op, call.attrs, [&](auto f) { unary_rows<T>(loop, f); });
  });
}

void fill_kernel(const OpCall& call, Tensor& out) {
  dtype_visit(out.dtype(), [&]<typename T>() {
    T value{};
    if constexpr (std::is_same_v<T, int32_t>) value = static_cast<int32_t>(call.attrs.scalar);
    else value = from_float<T>(static_cast<float>(call.attrs.scalar));
    T* p = out.data<T>();
    std::fill(p, p + out.numel(), value);
  });
}

void to_copy_kernel(const OpCall& call, Tensor& out) { copy_strided(call.inputs[0], out); }

void contiguous_kernel(const OpCall& call, Tensor& out) { copy_strided(call.inputs[0], out); }

}  // namespace sightline::cpu
