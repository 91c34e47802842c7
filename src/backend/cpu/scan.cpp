// cumsum and argmax along one dim: the dim is moved last (a permuted view, copied contiguous), each row
// is scanned on its own. cumsum accumulates floats in f32 (rounding each output once, as torch's CPU
// kernel) and integers (i32, bool) in i64; argmax keeps the first largest value, a NaN above every number.
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided_loop.h"
#include "core/view_meta.h"

namespace sightline::cpu {
namespace {

// x with `dim` moved last, as a contiguous tensor of `dtype`; the order for permuting results back.
Tensor rows_last(const Tensor& x, int dim, DType dtype, Dims& order) {
  for (int i = 0; i < x.dim(); ++i) {
    if (i != dim) order.push_back(i);
  }
  order.push_back(dim);
  return contiguous_as(view_meta::permute(x, order), dtype);
}

Dims inverse(const Dims& order) {
  Dims inv = order;
  for (int i = 0; i < order.size(); ++i) inv[static_cast<int>(order[i])] = i;
  return inv;
}

}  // namespace

void cumsum_kernel(const OpCall& call, Tensor& out) {
  const Tensor& x = call.inputs[0];
  const int dim = normalize_dim(static_cast<int>(call.attrs.dim), x.dim(), "aten::cumsum");
  const int64_t n = x.shape()[dim];
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Dims order;
  const bool integral = !dtype_is_floating(x.dtype());
  const Tensor src = rows_last(x, dim, integral ? DType::i32 : DType::f32, order);
  Tensor result = empty(src.shape(), integral ? DType::i32 : DType::f32);
  if (integral) {
    const int32_t* s = src.data<int32_t>();
    int32_t* d = result.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      int64_t acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        acc += s[r * n + i];
        d[r * n + i] = static_cast<int32_t>(static_cast<uint32_t>(acc));
      }
    }
  } else {
    const float* s = src.data<float>();
    float* d = result.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int64_t i = 0; i < n; ++i) d[r * n + i] = acc = acc + s[r * n + i];
    }
  }
  copy_strided(view_meta::permute(result, inverse(order)), out);
}

void argmax_kernel(const OpCall& call, Tensor& out) {
  const Tensor& x = call.inputs[0];
  const int dim = normalize_dim(static_cast<int>(call.attrs.dim), x.dim(), "aten::argmax");
  const int64_t n = x.shape()[dim];
  const int64_t rows = x.numel() / n;
  Dims order;
  const Tensor src = rows_last(x, dim, DType::f32, order);
  const float* s = src.data<float>();
  Tensor result = empty(out.shape(), DType::i32);
  int32_t* d = result.data<int32_t>();  // the kept dims in order: the rows of src
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * n;
    int64_t best = 0;
    for (int64_t i = 1; i < n && !std::isnan(row[best]); ++i) {
      if (std::isnan(row[i]) || row[i] > row[best]) best = i;
    }
    d[r] = static_cast<int32_t>(best);
  }
  copy_strided(result, out);
}

}  // namespace sightline::cpu
