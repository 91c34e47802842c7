// Layout helpers shared by the eager kernels: I/O declaration of (possibly strided) tensors, and the
// walk of a strided iteration space in [partitions x free] blocks that map onto tiles and DMA patterns.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sightline/kernels/builder.h"
#include "kernels/eager.h"

namespace sightline::kernels {

// Declares `t` as an I/O tensor: its logical shape when contiguous, else [extent] (what its strides
// reach from the first element), so that the runtime's binding check holds for views.
uint32_t declare_input(KernelBuilder& b, std::string name, const TensorDesc& t);
uint32_t declare_output(KernelBuilder& b, std::string name, const TensorDesc& t);

// The strides of `t` seen through `shape` (numpy broadcasting, right-aligned; broadcast dims get 0).
std::vector<int64_t> broadcast_strides(const TensorDesc& t, const Dims& shape);

// An iteration space shared by several operands: sizes[d] and, per operand, strides[op][d] (elements).
struct LoopNest {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;

  // Drops size-1 dims and merges neighbours that every operand walks contiguously.
  LoopNest coalesced() const;
};

// One block of a LoopNest: `partitions` rows of `free` elements; per operand the element offset of the
// block, the stride between rows and between elements.
struct Block {
  uint16_t partitions = 1;
  uint32_t free = 1;
  std::vector<int64_t> offset, partition_stride, free_stride;
};

// Walks the whole nest in blocks of at most `max_partitions` x `max_free`: the innermost dim is the
// free axis and the next one the partition axis; when those rows are too few to fill the partitions,
// the innermost dim itself is folded into rows (plus a one-row tail).
void for_each_block(const LoopNest& nest, uint16_t max_partitions, uint32_t max_free,
                    const std::function<void(const Block&)>& fn);

// An HBM pattern for operand `op` of a block.
inline AccessPattern block_pattern(const Block& blk, size_t op, uint32_t tensor, DType dtype) {
  return hbm_pattern(tensor, dtype, blk.offset[op], blk.partitions, blk.partition_stride[op],
                     {{blk.free, static_cast<int32_t>(blk.free_stride[op])}});
}

}  // namespace sightline::kernels
