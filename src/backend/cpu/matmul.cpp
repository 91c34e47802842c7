// matmul and linear. Operands are brought to contiguous f32 (i32 stays integral and accumulates in
// i64); the inner loops run along contiguous rows so they vectorize. Rows of the output are split
// over the thread pool.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/parallel.h"
#include "backend/cpu/strided_loop.h"
#include "core/view_meta.h"

namespace sightline::cpu {
namespace {

// C[M,N] = A[M,K] @ B[K,N], all contiguous. i-k-j order: the j loop is a contiguous axpy.
template <typename T, typename Acc>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k) {
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(n * k, 1));
  parallel_for(0, m, grain, [&](int64_t row_begin, int64_t row_end) {
    std::vector<Acc> acc(static_cast<size_t>(n));
    for (int64_t i = row_begin; i < row_end; ++i) {
      std::fill(acc.begin(), acc.end(), Acc{0});
      Acc* __restrict out = acc.data();
      for (int64_t p = 0; p < k; ++p) {
        const Acc aip = static_cast<Acc>(a[i * k + p]);
        const T* __restrict brow = b + p * n;
        for (int64_t j = 0; j < n; ++j) out[j] += aip * static_cast<Acc>(brow[j]);
      }
      for (int64_t j = 0; j < n; ++j) c[i * n + j] = static_cast<T>(acc[static_cast<size_t>(j)]);
    }
  });
}

}  // namespace

void matmul_kernel(const OpCall& call, Tensor& out) {
  Tensor a = call.inputs[0], b = call.inputs[1];
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  if (a_vec) a = view_meta::unsqueeze(a, 0);
  if (b_vec) b = view_meta::unsqueeze(b, 1);
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape().back(), n = b.shape().back();
  Dims batch;
  {
    Dims ba, bb;
    for (int i = 0; i + 2 < a.dim(); ++i) ba.push_back(a.shape()[i]);
    for (int i = 0; i + 2 < b.dim(); ++i) bb.push_back(b.shape()[i]);
    batch = broadcast_shapes(ba, bb, "aten::matmul");
  }
  Dims a_shape = batch, b_shape = batch, c_shape = batch;
  a_shape.push_back(m);
  a_shape.push_back(k);
  b_shape.push_back(k);
  b_shape.push_back(n);
  c_shape.push_back(m);
  c_shape.push_back(n);
  const int64_t batches = batch.product();
  const bool integral = out.dtype() == DType::i32;
  const DType compute = integral ? DType::i32 : DType::f32;
  const Tensor ad = contiguous_as(view_meta::expand(a, a_shape), compute);
  const Tensor bd = contiguous_as(view_meta::expand(b, b_shape), compute);
  Tensor cd = empty(c_shape, compute);
  for (int64_t i = 0; i < batches; ++i) {
    if (integral) {
      gemm<int32_t, int64_t>(ad.data<int32_t>() + i * m * k, bd.data<int32_t>() + i * k * n,
                             cd.data<int32_t>() + i * m * n, m, n, k);
    } else {
      gemm<float, float>(ad.data<float>() + i * m * k, bd.data<float>() + i * k * n, cd.data<float>() + i * m * n, m,
                         n, k);
    }
  }
  // Drop the dims that 1-D operands added, then write (and round) into out.
  Tensor result = cd;
  if (b_vec) result = view_meta::squeeze(result, result.dim() - 1);
  if (a_vec) result = view_meta::squeeze(result, result.dim() - (b_vec ? 1 : 2));
  copy_strided(result, out);
}

void linear_kernel(const OpCall& call, Tensor& out) {
  const Tensor& x = call.inputs[0];
  const Tensor& w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  const bool integral = out.dtype() == DType::i32;
  const DType compute = integral ? DType::i32 : DType::f32;
  const int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  const int64_t rows = in_f == 0 ? x.numel() : x.numel() / in_f;
  const Tensor xd = contiguous_as(x, compute);
  const Tensor wd = contiguous_as(w, compute);
  const Tensor bd = bias.defined() ? contiguous_as(bias, compute) : Tensor();
  Tensor yd = empty({rows, out_f}, compute);
  dtype_visit(compute, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, int32_t>) {
      using Acc = std::conditional_t<std::is_same_v<T, int32_t>, int64_t, float>;
      const T* xp = xd.data<T>();
      const T* wp = wd.data<T>();
      const T* bp = bd.defined() ? bd.data<T>() : nullptr;
      T* yp = yd.data<T>();
      const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(in_f * out_f, 1));
      parallel_for(0, rows, grain, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const T* __restrict xr = xp + r * in_f;
          for (int64_t o = 0; o < out_f; ++o) {
            const T* __restrict wr = wp + o * in_f;
            // 8 independent partial sums let the compiler vectorize the dot product.
            Acc part[8] = {};
            int64_t i = 0;
            for (; i + 8 <= in_f; i += 8) {
              for (int l = 0; l < 8; ++l) part[l] += static_cast<Acc>(xr[i + l]) * static_cast<Acc>(wr[i + l]);
            }
            Acc s = 0;
            for (; i < in_f; ++i) s += static_cast<Acc>(xr[i]) * static_cast<Acc>(wr[i]);
            for (Acc p : part) s += p;
            if (bp) s += static_cast<Acc>(bp[o]);
            yp[r * out_f + o] = static_cast<T>(s);
          }
        }
      });
    }
  });
  const Tensor y = Tensor(yd.storage(), compute, out.shape(), contiguous_strides(out.shape()), 0);
  copy_strided(y, out);
}

}  // namespace sightline::cpu
