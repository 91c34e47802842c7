// Metadata-only view computations (no data moves). The ops layer wraps them as the view ops of the
// op table so that they are dispatched (and profiled) like every other op.
#pragma once

#include <optional>

#include "sightline/tensor.h"

namespace sightline::view_meta {

// Strides that let `t` be viewed with `new_shape` without a copy, or nullopt when impossible.
std::optional<Dims> view_strides(const Tensor& t, const Dims& new_shape);
// Resolves one -1 in `requested` and checks the element count.
Dims infer_view_shape(const Dims& requested, int64_t numel, std::string_view op, const Dims& from);

Tensor transpose(const Tensor& t, int dim0, int dim1);
Tensor permute(const Tensor& t, const Dims& order);
Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step);
Tensor expand(const Tensor& t, const Dims& shape);
Tensor unsqueeze(const Tensor& t, int dim);
Tensor squeeze(const Tensor& t, int dim);
// torch.select: the slice at `index` of `dim` (negative counts from the end), without that dim.
Tensor select(const Tensor& t, int dim, int64_t index);

}  // namespace sightline::view_meta
