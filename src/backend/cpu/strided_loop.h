// Strided N-d iteration shared by the CPU reference kernels (a small TensorIterator).
//
// An ElementwiseLoop views an output and up to three inputs with the output's shape (inputs broadcast
// with stride 0), merges dims that are contiguous for every operand, and calls a row function over
// the innermost dim:   row(char* ptrs[], int64_t n, const int64_t strides_bytes[])
// Rows are split over the thread pool when the tensor is large enough to pay for it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>

#include "sightline/tensor.h"

namespace sightline::cpu {

inline constexpr int kMaxOperands = 4;

using RowFn = std::function<void(char* const* ptrs, int64_t n, const int64_t* strides)>;

class ElementwiseLoop {
 public:
  // operands[0] is the output; the others are broadcast to its shape.
  ElementwiseLoop(const Tensor& out, std::initializer_list<const Tensor*> inputs);
  void run(const RowFn& row) const;
  int64_t numel() const { return numel_; }

 private:
  int nops_ = 0;
  int ndim_ = 0;
  int64_t numel_ = 0;
  std::array<int64_t, kMaxDims> shape_{};                                // innermost first
  std::array<std::array<int64_t, kMaxDims>, kMaxOperands> strides_{};  // bytes, innermost first
  std::array<char*, kMaxOperands> base_{};
};

// dst[...] = src[...] converted to dst's dtype; shapes must match (src may be broadcast into dst).
void copy_strided(const Tensor& src, const Tensor& dst);
// A contiguous host tensor with src's values and the given dtype (src itself when already so).
Tensor contiguous_as(const Tensor& src, DType dtype);

}  // namespace sightline::cpu
