#include "kernels/layout.h"

#include <algorithm>

#include "sightline/error.h"

namespace sightline::kernels {

int64_t tensor_extent(const TensorDesc& t) {
  int64_t extent = 1;
  for (int d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return 0;
    SIGHTLINE_CHECK(t.strides[d] >= 0, "eager kernels take non-negative strides, got {} for shape {}",
                    t.strides, t.shape);
    extent += (t.shape[d] - 1) * t.strides[d];
  }
  return extent;
}

namespace {

uint32_t declare(KernelBuilder& b, std::string name, const TensorDesc& t, bool output) {
  SIGHTLINE_CHECK(t.strides.size() == t.shape.size(), "tensor '{}': shape {} but strides {}", name, t.shape,
                  t.strides);
  std::vector<int64_t> shape;
  bool contiguous = true;
  int64_t expected = 1;
  for (int d = t.shape.size() - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) contiguous = false;
    expected *= t.shape[d];
  }
  if (contiguous) {
    shape.assign(t.shape.begin(), t.shape.end());
  } else {
    shape.push_back(tensor_extent(t));
  }
  return output ? b.output(std::move(name), t.dtype, std::move(shape))
                : b.input(std::move(name), t.dtype, std::move(shape));
}

}  // namespace

uint32_t declare_input(KernelBuilder& b, std::string name, const TensorDesc& t) {
  return declare(b, std::move(name), t, false);
}

uint32_t declare_output(KernelBuilder& b, std::string name, const TensorDesc& t) {
  return declare(b, std::move(name), t, true);
}

std::vector<int64_t> broadcast_strides(const TensorDesc& t, const Dims& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.size()), 0);
  const int shift = shape.size() - t.shape.size();
  SIGHTLINE_CHECK(shift >= 0, "tensor of shape {} cannot broadcast to {}", t.shape, shape);
  for (int d = 0; d < t.shape.size(); ++d) {
    const int64_t size = t.shape[d];
    SIGHTLINE_CHECK(size == shape[d + shift] || size == 1, "tensor of shape {} cannot broadcast to {}",
                    t.shape, shape);
    strides[static_cast<size_t>(d + shift)] = size == 1 ? 0 : t.strides[d];
  }
  return strides;
}

LoopNest LoopNest::coalesced() const {
  LoopNest out;
  out.strides.resize(strides.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merge = !out.sizes.empty();
    for (size_t op = 0; merge && op < strides.size(); ++op) {
      merge = out.strides[op].back() == strides[op][d] * sizes[d];
    }
    if (merge) {
      out.sizes.back() *= sizes[d];
      for (size_t op = 0; op < strides.size(); ++op) out.strides[op].back() = strides[op][d];
      continue;
    }
    out.sizes.push_back(sizes[d]);
    for (size_t op = 0; op < strides.size(); ++op) out.strides[op].push_back(strides[op][d]);
  }
  return out;
}

void for_each_block(const LoopNest& input, uint16_t max_partitions, uint32_t max_free,
                    const std::function<void(const Block&)>& fn) {
  const LoopNest nest = input.coalesced();
  const size_t ops = nest.strides.size();
  const int rank = static_cast<int>(nest.sizes.size());
  for (int64_t s : nest.sizes) {
    if (s == 0) return;
  }
  Block blk;
  blk.offset.assign(ops, 0);
  blk.partition_stride.assign(ops, 0);
  blk.free_stride.assign(ops, 0);
  if (rank == 0) {
    fn(blk);
    return;
  }
  const int64_t cols = nest.sizes[static_cast<size_t>(rank - 1)];
  const int64_t rows = rank >= 2 ? nest.sizes[static_cast<size_t>(rank - 2)] : 1;
  const bool fold = rows < max_partitions / 2 && cols >= 2 * int64_t{max_partitions};
  // Dims looped in C++: all but the free dim, and the partition dim too unless folding.
  const int outer_rank = fold ? rank - 1 : std::max(0, rank - 2);
  std::vector<int64_t> index(static_cast<size_t>(outer_rank), 0);
  auto stride = [&](size_t op, int d) { return nest.strides[op][static_cast<size_t>(d)]; };
  for (;;) {
    std::vector<int64_t> base(ops, 0);
    for (size_t op = 0; op < ops; ++op) {
      for (int d = 0; d < outer_rank; ++d) base[op] += index[static_cast<size_t>(d)] * stride(op, d);
    }
    if (fold) {
      const int64_t f = std::min<int64_t>(max_free, (cols + max_partitions - 1) / max_partitions);
      const int64_t q = cols / f, tail = cols - q * f;
      for (int64_t r0 = 0; r0 < q; r0 += max_partitions) {
        blk.partitions = static_cast<uint16_t>(std::min<int64_t>(max_partitions, q - r0));
        blk.free = static_cast<uint32_t>(f);
        for (size_t op = 0; op < ops; ++op) {
          const int64_t s = stride(op, rank - 1);
          blk.offset[op] = base[op] + r0 * f * s;
          blk.partition_stride[op] = f * s;
          blk.free_stride[op] = s;
        }
        fn(blk);
      }
      if (tail > 0) {
        blk.partitions = 1;
        blk.free = static_cast<uint32_t>(tail);
        for (size_t op = 0; op < ops; ++op) {
          const int64_t s = stride(op, rank - 1);
          blk.offset[op] = base[op] + q * f * s;
          blk.partition_stride[op] = 0;
          blk.free_stride[op] = s;
        }
        fn(blk);
      }
    } else {
      for (int64_t r0 = 0; r0 < rows; r0 += max_partitions) {
        for (int64_t c0 = 0; c0 < cols; c0 += max_free) {
          blk.partitions = static_cast<uint16_t>(std::min<int64_t>(max_partitions, rows - r0));
          blk.free = static_cast<uint32_t>(std::min<int64_t>(max_free, cols - c0));
          for (size_t op = 0; op < ops; ++op) {
            const int64_t rs = rank >= 2 ? stride(op, rank - 2) : 0;
            const int64_t cs = stride(op, rank - 1);
            blk.offset[op] = base[op] + r0 * rs + c0 * cs;
            blk.partition_stride[op] = rs;
            blk.free_stride[op] = cs;
          }
          fn(blk);
        }
      }
    }
    int d = outer_rank - 1;
    for (; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < nest.sizes[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) break;
  }
}

}  // namespace sightline::kernels
