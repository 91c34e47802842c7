// The dispatcher's own needs, in the backend layer beside it: allocating an op's output (empty),
// making an input dense (contiguous/clone: one dispatched copy) and the view ops of the op table
// (is_view), which are metadata-only and the same for every backend.
#include "backend/view_ops.h"
#include "core/view_meta.h"
#include "sightline/backend.h"

namespace sightline {

Tensor empty(const Dims& shape, TensorOptions options) {
  for (int64_t d : shape) {
    SIGHTLINE_CHECK(d >= 0, "empty: negative size in shape {}", shape);
  }
  const size_t nbytes = static_cast<size_t>(shape.product()) * dtype_size(options.dtype);
  std::shared_ptr<Storage> storage = backend(options.device.backend).allocate(options.device, nbytes);
  return Tensor(std::move(storage), options.dtype, shape, contiguous_strides(shape), 0);
}

// A dense copy is the contiguous op on this one tensor.
Tensor Tensor::clone() const {
  static const OpAttrs kNoAttrs;
  return dispatch(OpId::contiguous, std::span<const Tensor>(this, 1), kNoAttrs);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor apply_view_op(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const OpAttrs& at = call.attrs;
  SIGHTLINE_CHECK(x.defined(), "{}: the input is undefined", op_name(call.op));
  switch (call.op) {
    case OpId::view:
    case OpId::reshape: {
      const Dims shape = view_meta::infer_view_shape(at.dims, x.numel(), op_name(call.op), x.shape());
      if (auto strides = view_meta::view_strides(x, shape)) {
        return Tensor(x.storage(), x.dtype(), shape, *strides, x.offset());
      }
      SIGHTLINE_CHECK(call.op == OpId::reshape,
                      "aten::view: a tensor of shape {} and strides {} cannot be viewed as {} without a copy; use "
                      ".reshape(), or .contiguous().view()", x.shape(), x.strides(), shape);
      const Tensor dense = x.clone();
      return Tensor(dense.storage(), dense.dtype(), shape, contiguous_strides(shape), dense.offset());
    }
    case OpId::transpose:
      return view_meta::transpose(x, static_cast<int>(at.dim), static_cast<int>(at.dim1));
    case OpId::permute:
      return view_meta::permute(x, at.dims);
    case OpId::slice:
      return view_meta::slice(x, static_cast<int>(at.dim), at.start, at.end, at.step);
    case OpId::expand:
      return view_meta::expand(x, at.dims);
    case OpId::unsqueeze:
      return view_meta::unsqueeze(x, static_cast<int>(at.dim));
    case OpId::squeeze:
      return view_meta::squeeze(x, static_cast<int>(at.dim));
    case OpId::select:
      return view_meta::select(x, static_cast<int>(at.dim), at.start);
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a view op", op_name(call.op));
  return {};
}

}  // namespace sightline
