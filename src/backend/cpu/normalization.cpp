// rms_norm and layer_norm over the last dim, one row at a time, statistics in f64.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/parallel.h"
#include "backend/cpu/strided_loop.h"

namespace sightline::cpu {
namespace {

template <typename RowFn>
void for_each_row(const Tensor& x, Tensor& out, RowFn&& row_fn) {
  const Tensor xd = contiguous_as(x, DType::f32);
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor yd = out.dtype() == DType::f32 && out.is_contiguous() ? out : empty(out.shape(), DType::f32);
  const float* src = xd.data<float>();
  float* dst = yd.data<float>();
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) row_fn(src + r * n, dst + r * n, n);
  });
  if (!yd.shares_storage(out)) copy_strided(yd, out);
}

const float* optional_f32(const Tensor& t, Tensor& keep) {
  if (!t.defined()) return nullptr;
  keep = contiguous_as(t, DType::f32);
  return keep.data<float>();
}

}  // namespace

void rms_norm_kernel(const OpCall& call, Tensor& out) {
  Tensor w_keep;
  const float* w = optional_f32(call.inputs.size() > 1 ? call.inputs[1] : Tensor(), w_keep);
  const double eps = call.attrs.eps;
  for_each_row(call.inputs[0], out, [&](const float* x, float* y, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    if (w) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
    }
  });
}

void layer_norm_kernel(const OpCall& call, Tensor& out) {
  Tensor w_keep, b_keep;
  const float* w = optional_f32(call.inputs.size() > 1 ? call.inputs[1] : Tensor(), w_keep);
  const float* bias = optional_f32(call.inputs.size() > 2 ? call.inputs[2] : Tensor(), b_keep);
  const double eps = call.attrs.eps;
  for_each_row(call.inputs[0], out, [&](const float* x, float* y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    const double mu = s / static_cast<double>(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (x[i] - mu) * (x[i] - mu);
    var /= static_cast<double>(n);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mu);
    for (int64_t i = 0; i < n; ++i) {
      float v = (x[i] - m) * rstd;
      if (w) v *= w[i];
      if (bias) v += bias[i];
      y[i] = v;
    }
  });
}

}  // namespace sightline::cpu
