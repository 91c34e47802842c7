#include "backend/cpu/strided_loop.h"

#include <cstring>

#include "core/parallel.h"

namespace sightline::cpu {
namespace {

constexpr int64_t kParallelGrainElements = 32768;

}  // namespace

ElementwiseLoop::ElementwiseLoop(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  nops_ = 1 + static_cast<int>(inputs.size());
  SIGHTLINE_ASSERT(nops_ <= kMaxOperands);
  const int nd = out.dim();
  numel_ = out.numel();
  base_[0] = static_cast<char*>(out.raw_data());
  // Reverse the dims so index 0 is innermost.
  for (int d = 0; d < nd; ++d) {
    shape_[static_cast<size_t>(d)] = out.shape()[nd - 1 - d];
    strides_[0][static_cast<size_t>(d)] = out.strides()[nd - 1 - d] * static_cast<int64_t>(out.element_size());
  }
  int op = 1;
  for (const Tensor* t : inputs) {
    base_[static_cast<size_t>(op)] = static_cast<char*>(t->raw_data());
    const int lead = nd - t->dim();
    SIGHTLINE_ASSERT_MSG(lead >= 0, "input {} has more dims than output {}", t->shape(), out.shape());
    for (int d = 0; d < nd; ++d) {
      const int src = nd - 1 - d - lead;  // dim of t aligned with reversed output dim d
      int64_t stride = 0;
      if (src >= 0 && t->shape()[src] != 1) {
        SIGHTLINE_ASSERT_MSG(t->shape()[src] == out.shape()[nd - 1 - d], "input {} does not broadcast to {}",
                             t->shape(), out.shape());
        stride = t->strides()[src] * static_cast<int64_t>(t->element_size());
      }
      strides_[static_cast<size_t>(op)][static_cast<size_t>(d)] = stride;
    }
    ++op;
  }
  // Drop size-1 dims and merge dims that are contiguous for every operand.
  int n = 0;
  for (int d = 0; d < nd; ++d) {
    const auto du = static_cast<size_t>(d);
    if (shape_[du] == 1) continue;
    if (n > 0) {
      const auto prev = static_cast<size_t>(n - 1);
      bool mergeable = true;
      for (int o = 0; o < nops_; ++o) {
        const auto& s = strides_[static_cast<size_t>(o)];
        if (s[du] != s[prev] * shape_[prev]) mergeable = false;
      }
      if (mergeable) {
        shape_[prev] *= shape_[du];
        continue;
      }
    }
    const auto nu = static_cast<size_t>(n);
    shape_[nu] = shape_[du];
    for (int o = 0; o < nops_; ++o) strides_[static_cast<size_t>(o)][nu] = strides_[static_cast<size_t>(o)][du];
    ++n;
  }
  ndim_ = n;
}

void ElementwiseLoop::run(const RowFn& row) const {
  if (numel_ == 0) return;
  if (ndim_ == 0) {  // a single element
    std::array<int64_t, kMaxOperands> zero{};
    row(base_.data(), 1, zero.data());
    return;
  }
  const int64_t inner = shape_[0];
  const int64_t rows = numel_ / inner;
  std::array<int64_t, kMaxOperands> inner_strides{};
  for (int o = 0; o < nops_; ++o) inner_strides[static_cast<size_t>(o)] = strides_[static_cast<size_t>(o)][0];

  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    // Decompose row_begin into a multi-index over dims 1..ndim-1, then step it like an odometer.
    std::array<int64_t, kMaxDims> idx{};
    std::array<char*, kMaxOperands> ptrs{};
    int64_t r = row_begin;
    for (int d = 1; d < ndim_; ++d) {
      idx[static_cast<size_t>(d)] = r % shape_[static_cast<size_t>(d)];
      r /= shape_[static_cast<size_t>(d)];
    }
    for (int64_t i = row_begin; i < row_end; ++i) {
      for (int o = 0; o < nops_; ++o) {
        char* p = base_[static_cast<size_t>(o)];
        for (int d = 1; d < ndim_; ++d) {
          p += idx[static_cast<size_t>(d)] * strides_[static_cast<size_t>(o)][static_cast<size_t>(d)];
        }
        ptrs[static_cast<size_t>(o)] = p;
      }
      row(ptrs.data(), inner, inner_strides.data());
      for (int d = 1; d < ndim_; ++d) {
        if (++idx[static_cast<size_t>(d)] < shape_[static_cast<size_t>(d)]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
  };
  if (numel_ < 2 * kParallelGrainElements) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {
    // One long row: split the row itself.
    parallel_for(0, inner, kParallelGrainElements, [&](int64_t b, int64_t e) {
      std::array<char*, kMaxOperands> ptrs{};
      for (int o = 0; o < nops_; ++o) {
        ptrs[static_cast<size_t>(o)] = base_[static_cast<size_t>(o)] + b * inner_strides[static_cast<size_t>(o)];
      }
      row(ptrs.data(), e - b, inner_strides.data());
    });
    return;
  }
  const int64_t grain_rows = std::max<int64_t>(1, kParallelGrainElements / inner);
  parallel_for(0, rows, grain_rows, run_rows);
}

void copy_strided(const Tensor& src, const Tensor& dst) {
  ElementwiseLoop loop(dst, {&src});
  dtype_visit(dst.dtype(), [&]<typename D>() {
    dtype_visit(src.dtype(), [&]<typename S>() {
      loop.run([](char* const* p, int64_t n, const int64_t* s) {
        if constexpr (std::is_same_v<D, S>) {
          if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
            std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(D));
            return;
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          const S v = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          D* out = reinterpret_cast<D*>(p[0] + i * s[0]);
          if constexpr (std::is_same_v<D, S>) {
            *out = v;
          } else if constexpr (std::is_same_v<D, int32_t> && std::is_same_v<S, int32_t>) {
            *out = v;
          } else if constexpr (std::is_same_v<S, int32_t>) {
            *out = from_float<D>(static_cast<float>(v));
          } else {
            *out = from_float<D>(to_float(v));
          }
        }
      });
    });
  });
}

Tensor contiguous_as(const Tensor& src, DType dtype) {
  if (src.dtype() == dtype && src.is_contiguous()) return src;
  Tensor out = empty(src.shape(), TensorOptions(dtype, src.device()));
  copy_strided(src, out);
  return out;
}

}  // namespace sightline::cpu
