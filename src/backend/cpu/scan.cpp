// cumsum and argmax along one dim: the dim is moved last (a permuted view, copied contiguous), each row
// is scanned on its own. cumsum accumulates floats in f32 (rounding each output once, as torch's CPU
// kernel) and integers (i32, bool) in i64; argmax keeps the first largest value, a NaN above every number.
// topk orders each row by (value, index): NaN above every number for largest (below for smallest, as
// torch's comparators), equal values in ascending index, and keeps the first k.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
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

namespace {

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// The first k of each row of `src` (rows of n) in topk's order, values into `values` and indices into
// `indices` (rows of k).
template <typename T>
void topk_rows(const T* src, int64_t rows, int64_t n, int64_t k, bool largest, T* values, int32_t* indices) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = src + r * n;
    // torch's comparators (NaN first for largest, last for smallest), with the index breaking ties.
    auto before = [&](int32_t i, int32_t j) {
      const T a = row[i], b = row[j];
      const bool a_first = largest ? (is_nan(a) && !is_nan(b)) || a > b : (!is_nan(a) && is_nan(b)) || a < b;
      const bool b_first = largest ? (is_nan(b) && !is_nan(a)) || b > a : (!is_nan(b) && is_nan(a)) || b < a;
      return a_first || (!b_first && i < j);
    };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    for (int64_t j = 0; j < k; ++j) {
      indices[r * k + j] = order[static_cast<size_t>(j)];
      values[r * k + j] = row[order[static_cast<size_t>(j)]];
    }
  }
}

}  // namespace

void topk_kernel(const OpCall& call, Tensor& out) {
  const Tensor& x = call.inputs[0];
  SIGHTLINE_ASSERT_MSG(call.more_outputs.size() == 1, "aten::topk: {} extra outputs", call.more_outputs.size());
  const int dim = normalize_dim(static_cast<int>(call.attrs.dim), x.dim(), "aten::topk");
  const int64_t n = x.shape()[dim], k = call.attrs.k;
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Dims order;
  const bool integral = !dtype_is_floating(x.dtype());
  const Tensor src = rows_last(x, dim, integral ? DType::i32 : DType::f32, order);
  Dims shape = src.shape();
  shape[shape.size() - 1] = k;
  Tensor values = empty(shape, integral ? DType::i32 : DType::f32), indices = empty(shape, DType::i32);
  if (k > 0) {
    if (integral) {
      topk_rows(src.data<int32_t>(), rows, n, k, call.attrs.largest, values.data<int32_t>(), indices.data<int32_t>());
    } else {
      topk_rows(src.data<float>(), rows, n, k, call.attrs.largest, values.data<float>(), indices.data<int32_t>());
    }
  }
  const Dims back = inverse(order);
  copy_strided(view_meta::permute(values, back), out);
  copy_strided(view_meta::permute(indices, back), call.more_outputs[0]);
}

}  // namespace sightline::cpu
