// Tensor metadata and the metadata-only view computations. Everything that moves data (contiguous,
// to, item, printing) goes through the dispatcher and lives in ops/.
#include "core/view_meta.h"

#include <algorithm>
#include <optional>

#include "core/checked_math.h"

namespace sightline {
namespace {

// Every tensor is checked once, here: its element count and byte count fit in an int64 and every element
// it can reach lies inside its storage. After that numel(), nbytes() and any offset a kernel computes
// from the strides cannot overflow, and a view cannot read outside its storage.
void check_extent(const Tensor& t) {
  const Dims& shape = t.shape();
  const Dims& strides = t.strides();
  const int64_t offset = t.offset();
  const Storage* storage = t.storage().get();
  for (int64_t d : shape) {
    SIGHTLINE_CHECK(d >= 0, "a tensor of shape {} has a negative size; sizes must be >= 0", shape);
  }
  const int64_t elements = shape.product();  // throws when the count overflows
  const auto element_bytes = static_cast<int64_t>(t.element_size());
  int64_t bytes = 0;
  SIGHTLINE_CHECK(!__builtin_mul_overflow(elements, element_bytes, &bytes),
                  "a {} tensor of shape {} would take more bytes than a 64-bit count can hold ({} elements of {} "
                  "bytes); check the sizes, one of them is far larger than intended",
                  dtype_name(t.dtype()), shape, elements, element_bytes);
  if (elements == 0 || storage == nullptr) return;
  // The lowest and highest element reached: offset + sum over dims of (size - 1) * stride.
  auto what = [&] { return fmt::format("a tensor of shape {} with strides {} at offset {}", shape, strides, offset); };
  int64_t lowest = offset;
  int64_t highest = offset;
  for (int i = 0; i < t.dim(); ++i) {
    const int64_t reach = checked_mul(shape[i] - 1, strides[i], what);
    if (reach < 0) {
      lowest = checked_add(lowest, reach, what);
    } else {
      highest = checked_add(highest, reach, what);
    }
  }
  // A storage with neither memory nor a size stands for a tensor that is only metadata (a traced proxy).
  if (storage->data() == nullptr && storage->nbytes() == 0) return;
  const int64_t end_byte = checked_mul(checked_add(highest, 1, what), element_bytes, what);
  SIGHTLINE_CHECK(lowest >= 0 && static_cast<uint64_t>(end_byte) <= storage->nbytes(),
                  "{} reaches elements {}..{} of a storage of {} bytes ({} elements of {}); a view must stay "
                  "inside the tensor it views",
                  what(), lowest, highest, storage->nbytes(), storage->nbytes() / static_cast<size_t>(element_bytes),
                  dtype_name(t.dtype()));
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset)
    : storage_(std::move(storage)), shape_(shape), strides_(strides), offset_(offset), dtype_(dtype) {
  SIGHTLINE_ASSERT_MSG(shape_.size() == strides_.size(), "shape {} strides {}", shape_, strides_);
  check_extent(*this);
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::size(int d) const { return shape_[normalize_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void Tensor::check_host_access() const {
  SIGHTLINE_CHECK(defined(), "the tensor is undefined (default-constructed); create it with a factory such as "
                  "zeros() first");
  SIGHTLINE_CHECK(device().is_cpu(), "host access to the memory of a tensor on {}; copy it first with .to(Device::cpu())",
                  device());
}

void* Tensor::raw_data() const {
  check_host_access();
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(element_size());
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_, device());
}

namespace view_meta {

std::optional<Dims> view_strides(const Tensor& t, const Dims& new_shape) {
  // PyTorch's computeStride: split the old shape into chunks of dims that are contiguous with each
  // other; each chunk must map onto a run of new dims with the same element count.
  const Dims& old_shape = t.shape();
  const Dims& old_strides = t.strides();
  Dims new_strides = Dims::filled(new_shape.size(), 0);
  if (t.numel() == 0) return contiguous_strides(new_shape);
  int view_d = new_shape.size() - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int tensor_d = old_shape.size() - 1; tensor_d >= 0; --tensor_d) {
    // Both products are bounded by the extent checked when `t` was built; checked all the same.
    auto what = [&] { return fmt::format("aten::view of {} as {}", old_shape, new_shape); };
    tensor_numel = checked_mul(tensor_numel, old_shape[tensor_d], what);
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != checked_mul(tensor_numel, chunk_base_stride, what))) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = checked_mul(view_numel, chunk_base_stride, what);
        view_numel = checked_mul(view_numel, new_shape[view_d], what);
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Dims infer_view_shape(const Dims& requested, int64_t numel, std::string_view op, const Dims& from) {
  Dims shape = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      SIGHTLINE_CHECK(infer < 0, "{}: only one dimension can be -1 in shape {}", op, requested);
      infer = i;
    } else {
      SIGHTLINE_CHECK(shape[i] >= 0, "{}: invalid size {} in shape {}", op, shape[i], requested);
      SIGHTLINE_CHECK(!__builtin_mul_overflow(known, shape[i], &known) || numel == 0,
                      "{}: shape {} is invalid for input {} of {} elements (the product of its sizes overflows a "
                      "64-bit integer)",
                      op, requested, from, numel);
    }
  }
  if (infer >= 0) {
    SIGHTLINE_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for input {} of {} elements", op,
                    requested, from, numel);
    shape[infer] = numel / known;
  }
  const std::optional<int64_t> count = checked_numel(shape);
  SIGHTLINE_CHECK(count && *count == numel, "{}: shape {} is invalid for input {} of {} elements", op, requested,
                  from, numel);
  return shape;
}

Tensor transpose(const Tensor& t, int dim0, int dim1) {
  const int a = normalize_dim(dim0, t.dim(), "aten::transpose");
  const int b = normalize_dim(dim1, t.dim(), "aten::transpose");
  if (t.dim() == 0) return t;
  Dims shape = t.shape(), strides = t.strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
}

Tensor permute(const Tensor& t, const Dims& order) {
  SIGHTLINE_CHECK(order.size() == t.dim(), "aten::permute: order {} has {} dims but the tensor {} has {}", order,
                  order.size(), t.shape(), t.dim());
  Dims shape = Dims::filled(t.dim(), 0), strides = Dims::filled(t.dim(), 0);
  std::array<bool, kMaxDims> seen{};
  for (int i = 0; i < order.size(); ++i) {
    const int d = normalize_dim(static_cast<int>(order[i]), t.dim(), "aten::permute");
    SIGHTLINE_CHECK(!seen[static_cast<size_t>(d)], "aten::permute: dim {} repeats in order {}", d, order);
    seen[static_cast<size_t>(d)] = true;
    shape[i] = t.shape()[d];
    strides[i] = t.strides()[d];
  }
  return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
}

Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step) {
  const int d = normalize_dim(dim, t.dim(), "aten::slice");
  SIGHTLINE_CHECK(step > 0, "aten::slice: step must be positive, got {}", step);
  const int64_t n = t.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Dims shape = t.shape(), strides = t.strides();
  // ceil((end - start) / step) without forming end - start + step - 1, which overflows for a huge step.
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;
  if (shape[d] == 0) return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
  auto what = [&] { return fmt::format("aten::slice of {} at dim {} with step {}", t.shape(), d, step); };
  // A single element keeps its stride (step may be anything); more than one means step < n, so the new
  // stride stays within the extent the tensor's constructor checked.
  if (shape[d] > 1) strides[d] = checked_mul(t.strides()[d], step, what);
  return Tensor(t.storage(), t.dtype(), shape, strides,
                checked_add(t.offset(), checked_mul(start, t.strides()[d], what), what));
}

Tensor expand(const Tensor& t, const Dims& requested) {
  SIGHTLINE_CHECK(requested.size() >= t.dim(),
                  "aten::expand: the target shape {} has fewer dims than the tensor {}", requested, t.shape());
  const int lead = requested.size() - t.dim();
  Dims shape = requested, strides = Dims::filled(requested.size(), 0);
  for (int i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      SIGHTLINE_CHECK(requested[i] >= 0, "aten::expand: size -1 is not allowed in a new leading dim of {}", requested);
      continue;
    }
    const int64_t have = t.shape()[i - lead];
    const int64_t want = requested[i] == -1 ? have : requested[i];
    SIGHTLINE_CHECK(have == want || have == 1,
                    "aten::expand: the tensor {} cannot be expanded to {}: dim {} has size {} (only size-1 dims "
                    "expand)", t.shape(), requested, i - lead, have);
    shape[i] = want;
    strides[i] = have == want ? t.strides()[i - lead] : 0;
  }
  return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
}

Tensor unsqueeze(const Tensor& t, int dim) {
  const int d = normalize_dim(dim, t.dim() + 1, "aten::unsqueeze");
  Dims shape = t.shape(), strides = t.strides();
  auto what = [&] { return fmt::format("aten::unsqueeze of {}", t.shape()); };
  const int64_t stride = d < t.dim() ? checked_mul(t.shape()[d], t.strides()[d], what) : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
}

Tensor squeeze(const Tensor& t, int dim) {
  const int d = normalize_dim(dim, t.dim(), "aten::squeeze");
  if (t.dim() == 0 || t.shape()[d] != 1) return t;
  Dims shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  return Tensor(t.storage(), t.dtype(), shape, strides, t.offset());
}

Tensor select(const Tensor& t, int dim, int64_t index) {
  SIGHTLINE_CHECK(t.dim() > 0, "aten::select: cannot select from a 0-dim tensor");
  const int d = normalize_dim(dim, t.dim(), "aten::select");
  const int64_t n = t.shape()[d];
  SIGHTLINE_CHECK(index >= -n && index < n, "aten::select: index {} is out of range for dim {} of size {}", index,
                  d, n);
  if (index < 0) index += n;
  const Tensor row = slice(t, d, index, index + 1, 1);
  Dims shape = row.shape(), strides = row.strides();
  shape.erase(d);
  strides.erase(d);
  return Tensor(t.storage(), t.dtype(), shape, strides, row.offset());
}

}  // namespace view_meta
}  // namespace sightline
