// Shared by the eager kernel files: the context of one build and the per-kind entry points.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "sightline/kernels/builder.h"
#include "kernels/eager.h"
#include "kernels/emit.h"
#include "kernels/layout.h"

namespace sightline::kernels {

struct EagerContext {
  KernelBuilder& b;
  OpId op;
  std::span<const TensorDesc> inputs;
  const OpAttrs& attrs;
  const TensorDesc& out;
  std::vector<uint32_t> input_io;  // I/O index of each input
  uint32_t out_io = 0;
  const EagerHooks* hooks = nullptr;  // matmul / linear and the normalizations (emit_eager_kernel)
  // The outputs after the first of an op of several (topk's indices) and their I/O indices.
  std::span<const TensorDesc> more_out = {};
  std::vector<uint32_t> more_out_io = {};
  // matmul / linear: whether a product of few rows may run weight-stationary (eager_matmul.cpp), and
  // (optional) set when it did.
  bool allow_weight_stationary = true;
  bool* weight_stationary = nullptr;
};

// Largest free size of a per-block tile for the streaming kernels: with three operands triple
// buffered in f32 this keeps well inside a v2 partition (192 KiB).
inline constexpr uint32_t kStreamFree = 4096;

void build_binary(EagerContext& c);
void build_unary(EagerContext& c);
void build_fill(EagerContext& c);
void build_select(EagerContext& c);  // where, masked_fill
void build_reduction(EagerContext& c);
void build_softmax(EagerContext& c);
void build_matmul(EagerContext& c);
void build_linear(EagerContext& c);
void build_rms_norm(EagerContext& c);
void build_layer_norm(EagerContext& c);
void build_copy(EagerContext& c);  // contiguous and to_copy
void build_cat(EagerContext& c);
void build_embedding(EagerContext& c);
void build_attention(EagerContext& c);  // scaled_dot_product_attention (eager_attention.cpp)
void build_cumsum(EagerContext& c);     // eager_scan.cpp
void build_argmax(EagerContext& c);     // eager_scan.cpp
void build_topk(EagerContext& c);       // eager_scan.cpp

// Strided HBM -> HBM copy of `shape` elements with dtype conversion (DMA only). Float to i32 goes
// through SBUF instead, so that it truncates toward zero as the CPU reference does.
void copy_tensor(EagerContext& c, uint32_t dst_io, DType dst_dtype, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides, uint32_t src_io, DType src_dtype,
                 const std::vector<int64_t>& src_strides, const Dims& shape);

// A software pipeline over `count` work items: the loads of the next `ahead` items are emitted before
// item i's compute and store. DMA queues run their transfers in order, so a load emitted after a store
// waits behind it, and the store waits for compute: loading ahead keeps every queue moving while the
// engines work. Each item's input buffers must come from a ring of at least ahead + 1 buffers (a load
// may only run ahead into a buffer no earlier item still uses; the hazard tracking orders the rest).
template <typename Load, typename Body>
void pipeline(size_t count, size_t ahead, Load&& load, Body&& body) {
  for (size_t i = 0; i < std::min(ahead, count); ++i) load(i);
  for (size_t i = 0; i < count; ++i) {
    if (i + ahead < count) load(i + ahead);
    body(i);
  }
}

// pipeline() with each item's body cut into `stages` parts: item i's stage s is emitted in step i + s,
// after item i + 1's stage s - 1 (the newest item first), so engines that each run their instructions
// in order work on neighbouring items at once (a Vector step waiting for the Scalar engine would
// otherwise hold up the next item's first one). Only stage 0 may read what load() wrote: the next
// loads run ahead into its buffer. Whatever a later stage reads must come from a ring of at least two
// buffers per item in flight.
template <typename Load, typename Stage>
void pipeline_staged(size_t count, size_t ahead, size_t stages, Load&& load, Stage&& stage) {
  auto step = [&](size_t s) {
    for (size_t st = 0; st < stages; ++st) {
      if (st <= s && s - st < count) stage(st, s - st);
    }
  };
  pipeline(count, ahead, load, step);
  for (size_t s = count; s + 1 < count + stages; ++s) step(s);
}

// All blocks of `nest` (for_each_block), for kernels that pipeline over them.
std::vector<Block> collect_blocks(const LoopNest& nest, uint16_t max_partitions, uint32_t max_free);

// Calls fn(index) for every index of `sizes` (row-major); once with an empty index when sizes is empty.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& sizes, Fn&& fn) {
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  std::vector<int64_t> index(sizes.size(), 0);
  for (;;) {
    fn(index);
    int d = static_cast<int>(sizes.size()) - 1;
    for (; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < sizes[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace sightline::kernels
