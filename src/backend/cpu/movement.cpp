#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided_loop.h"
#include "core/view_meta.h"

namespace sightline::cpu {

void cat_kernel(const OpCall& call, Tensor& out) {
  const int dim = normalize_dim(static_cast<int>(call.attrs.dim), out.dim(), "aten::cat");
  int64_t at = 0;
  for (const Tensor& t : call.inputs) {
    const int64_t n = t.shape()[dim];
    copy_strided(t, view_meta::slice(out, dim, at, at + n, 1));
    at += n;
  }
}

void embedding_kernel(const OpCall& call, Tensor& out) {
  const Tensor weight = call.inputs[0].contiguous();
  const Tensor idx = call.inputs[1].contiguous();
  const int64_t rows = weight.shape()[0], width = weight.shape()[1];
  const int32_t* ip = idx.data<int32_t>();
  const size_t row_bytes = static_cast<size_t>(width) * weight.element_size();
  const char* wp = static_cast<const char*>(weight.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  for (int64_t i = 0, n = idx.numel(); i < n; ++i) {
    SIGHTLINE_CHECK(ip[i] >= 0 && ip[i] < rows,
                    "aten::embedding: index {} at position {} is out of range for a table of {} rows (valid: 0..{})",
                    ip[i], i, rows, rows - 1);
    std::memcpy(op + static_cast<size_t>(i) * row_bytes, wp + static_cast<size_t>(ip[i]) * row_bytes, row_bytes);
  }
}

}  // namespace sightline::cpu
