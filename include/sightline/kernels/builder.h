// The kernel builder: a tile-level C++ DSL that emits a device::Executable (what NKI is for Trainium).
//
// A kernel is ordinary C++: declare the I/O tensors, allocate tiles in SBUF/PSUM, and loop over tiles
// emitting DMA transfers and engine instructions. The builder does the bookkeeping a hand-written
// program gets wrong:
//   * it tracks which instruction reads and writes every byte range of SBUF, PSUM and each I/O tensor,
//     and inserts the semaphore waits itself (read-after-write, write-after-read, write-after-write,
//     across engines and DMA queues). Each stream (engine or DMA queue) owns one semaphore that every
//     instruction of the stream increments on completion, so "instruction i of stream S is done" is
//     "semaphore S >= i + 1"; waits already implied by earlier waits are left out;
//   * it allocates tiles per partition and reports overflows with the sizes involved; tiles can be
//     freed, and a TilePool rotates over a few buffers for double buffering (the hazard tracking makes
//     the reuse safe: a load into a buffer waits for the store that last read it);
//   * it spreads DMA transfers over the spec's queues and splits big ones so the queues run together.
//
// Worked example, y = x * sigmoid(x) over a [rows, cols] f32 tensor (tests/kernels/custom_op_test.cpp):
//
//   KernelBuilder b(spec, "silu_fused");
//   b.set_source_op("custom::silu");
//   uint32_t x = b.input("x", DType::f32, {rows, cols}), y = b.output("y", DType::f32, {rows, cols});
//   TilePool in = b.pool("x", DType::f32, {cols}, 3), out = b.pool("y", DType::f32, {cols}, 3);
//   for (int64_t r = 0; r < rows; r += 128) {
//     uint16_t p = uint16_t(std::min<int64_t>(128, rows - r));
//     Tile xt = in.next(), yt = out.next();
//     b.load(xt.rows(p), hbm_rows(x, DType::f32, r * cols, p, cols, cols));
//     b.activate(ActFunc::sigmoid, yt.rows(p), xt.rows(p));                       // ScalarE
//     b.tensor_tensor(AluOp::multiply, yt.rows(p), yt.rows(p), xt.rows(p));      // VectorE waits
//     b.store(hbm_rows(y, DType::f32, r * cols, p, cols, cols), yt.rows(p));      // DMA waits
//   }
//   device::Executable exe = b.build();   // validated against the spec
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sightline/device/executable.h"
#include "sightline/device/spec.h"
#include "sightline/kernels/hazards.h"

namespace sightline::kernels {

using device::AccessPattern;
using device::ActFunc;
using device::AluOp;
using device::Engine;
using device::Memory;

// A tile: a block of `partitions` partitions x `free_elements` contiguous elements in SBUF or PSUM.
struct Tile {
  Memory memory = Memory::sbuf;
  DType dtype = DType::f32;
  uint16_t partitions = 0;
  uint32_t offset = 0;         // bytes into each partition
  uint32_t free_elements = 0;  // per partition
  uint32_t id = 0;             // allocation id (for free())

  // The whole tile as one free dim, or its first `p` partitions.
  AccessPattern ap() const { return rows(partitions); }
  AccessPattern rows(uint16_t p) const;
  // Partitions [p0, p0 + p) and free elements [f0, f0 + f).
  AccessPattern region(uint16_t p0, uint16_t p, uint32_t f0, uint32_t f) const;
  // The first `p` partitions seen as free dims `sizes` (row-major, their product <= free_elements).
  AccessPattern shaped(uint16_t p, std::initializer_list<uint32_t> sizes) const;
  // One element per partition: column `f` of the first `p` partitions (per-partition scalars).
  AccessPattern column(uint16_t p, uint32_t f = 0) const { return region(0, p, f, 1); }
  uint32_t bytes_per_partition() const { return free_elements * static_cast<uint32_t>(dtype_size(dtype)); }
};

// An HBM operand over I/O tensor `tensor`: `partitions` rows starting `element_offset` elements into the
// tensor, `partition_stride` elements apart, each row `free` (size, stride in elements) dims.
AccessPattern hbm_pattern(uint32_t tensor, DType dtype, int64_t element_offset, uint16_t partitions,
                          int64_t partition_stride, std::initializer_list<device::FreeDim> free);
// The common case: rows of `cols` contiguous elements.
inline AccessPattern hbm_rows(uint32_t tensor, DType dtype, int64_t element_offset, uint16_t partitions,
                              int64_t row_stride, uint32_t cols) {
  return hbm_pattern(tensor, dtype, element_offset, partitions, row_stride, {{cols, 1}});
}

class KernelBuilder;

// A ring of equally shaped tiles: next() hands them out in turn (double/triple buffering).
class TilePool {
 public:
  TilePool() = default;
  Tile next();
  const Tile& at(size_t i) const { return tiles_[i]; }
  size_t size() const { return tiles_.size(); }

 private:
  friend class KernelBuilder;
  std::vector<Tile> tiles_;
  size_t cursor_ = 0;
};

class KernelBuilder {
 public:
  KernelBuilder(const device::Spec& spec, std::string name);

  const device::Spec& spec() const { return spec_; }
  uint16_t partitions() const { return static_cast<uint16_t>(spec_.partitions); }

  // ---- I/O tensors, in executable order; the return value is the tensor index for hbm_pattern ----
  uint32_t input(std::string name, DType dtype, std::vector<int64_t> shape);
  uint32_t output(std::string name, DType dtype, std::vector<int64_t> shape);

  // Names the framework op the following instructions come from (profiler attribution).
  void set_source_op(std::string_view name);
  // The name set_source_op set last; empty before the first.
  std::string_view source_op() const {
    return source_op_ == device::kNoSourceOp ? std::string_view{} : std::string_view(exe_.source_ops[source_op_]);
  }
  void add_metadata(std::string key, std::string value) { exe_.metadata.emplace_back(std::move(key), value); }

  // ---- on-chip memory ----
  // `free_elements` elements per partition on `partitions` partitions (default: all). Throws
  // sightline::Error when the memory has no free range large enough, naming the sizes.
  Tile allocate(Memory memory, DType dtype, uint32_t free_elements, uint16_t partitions = 0,
                std::string_view name = "tile");
  Tile sbuf(DType dtype, uint32_t free_elements, uint16_t partitions = 0, std::string_view name = "tile") {
    return allocate(Memory::sbuf, dtype, free_elements, partitions, name);
  }
  // PSUM tiles start on a bank boundary, so a matmul output of up to one bank never straddles two.
  Tile psum(uint32_t free_elements, uint16_t partitions = 0, std::string_view name = "psum") {
    return allocate(Memory::psum, DType::f32, free_elements, partitions, name);
  }
  TilePool pool(std::string_view name, DType dtype, uint32_t free_elements, size_t count,
                Memory memory = Memory::sbuf);
  // Returns the tile's bytes to the allocator; later users of the range are ordered after its last
  // use by the hazard tracking, so freeing never races.
  void free(const Tile& tile);
  void free(const TilePool& pool);
  // Bytes per partition still free.
  uint32_t sbuf_free_bytes() const { return free_bytes(Memory::sbuf); }
  uint32_t psum_free_bytes() const { return free_bytes(Memory::psum); }

  // ---- DMA ----
  // One transfer on the next queue (round robin).
  void dma(const AccessPattern& dst, const AccessPattern& src);
  // Splits the transfer by partitions (or, for a single partition, by its outermost free dim) into
  // up to one piece per queue, so the queues move it in parallel. load/store are dma_split with
  // the usual direction.
  void dma_split(const AccessPattern& dst, const AccessPattern& src);
  // A source of partition stride 0 over several partitions is a broadcast row: load_broadcast.
  void load(const AccessPattern& tile, const AccessPattern& hbm);
  // Indirect DMA: dst[p, :] = row row_indices[p] of `table` (an HBM pattern, one partition per table
  // row); `row_indices` is an i32 SBUF [p, 1] tile.
  void gather(const AccessPattern& dst, const AccessPattern& table, const AccessPattern& row_indices);
  void store(const AccessPattern& hbm, const AccessPattern& tile) { dma_split(hbm, tile); }
  // A row broadcast to every partition of `tile` (an SBUF [p, n] pattern) from `row` (an HBM pattern of
  // one partition, n elements): a linear's bias, a norm's weight, any [n] operand every row uses. Either
  // (a) one DMA reading the row once per partition (an HBM partition stride of 0: p times the row's
  // bytes), or (b) one DMA of the row into the tile's first partition, then a GpSimd
  // partition_all_reduce (multiply over that one partition: 1 * x, an exact copy) writing it to all p;
  // the same bits either way. (b) where broadcast_row_on_chip says it is cheaper. `dma` emits the
  // transfers (default: dma_split), for callers that place them on queues themselves. Every load of a
  // row onto many partitions goes through here, load() included: one place decides.
  using DmaEmitter = std::function<void(const AccessPattern& dst, const AccessPattern& src)>;
  void load_broadcast(const AccessPattern& tile, const AccessPattern& row, const DmaEmitter& dma = {});
  // Whether (b) above is modeled faster than (a), each alone on an idle core, by the cost functions the
  // timing model uses (device/cost_model.h): (a) split over every queue (the fastest any split of it
  // can be), (b) its one-row DMA then the GpSimd instruction. Only floating-point tiles (the copy
  // passes through f32, exact for them) of more than one partition.
  bool broadcast_row_on_chip(const AccessPattern& tile, const AccessPattern& row) const;

  // ---- engines ----
  // Elementwise on the Vector engine, or on GpSimd with `on` = Engine::gpsimd (SBUF operands only): a
  // kernel whose Vector engine is its busiest can move a pass to the otherwise idle GpSimd.
  void tensor_tensor(AluOp op, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b,
                     Engine on = Engine::vector);
  void tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a, float scalar,
                     bool reverse = false, Engine on = Engine::vector);
  void tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a,
                     const AccessPattern& per_partition, bool reverse = false, Engine on = Engine::vector);
  // VectorE dst[p, 0] = reduce(src[p, :]), or one result per index of src's outer free dims (isa.h);
  // `negate`: times -1 (kFlagNegate).
  void reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src, bool negate = false);
  void bn_stats(const AccessPattern& dst, const AccessPattern& src);
  void copy(const AccessPattern& dst, const AccessPattern& src);  // VectorE tensor_copy (dtype cast)
  // ScalarE dst = func(src * scale + bias); `accumulate` (optional, [p, 1]) receives the row sums of
  // dst; `scale_per_partition` (optional, [p, 1]) replaces `scale`.
  void activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale = 1.0f,
                float bias = 0.0f, const AccessPattern& accumulate = {},
                const AccessPattern& scale_per_partition = {});
  // ScalarE dst = func(src * scale + bias[p, 0]): the bias a [p, 1] column (kFlagBiasOperand), as
  // softmax's exp(x - max) in one pass.
  void activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                const AccessPattern& bias_per_partition, const AccessPattern& accumulate = {});
  void iota(const AccessPattern& dst, float base, float partition_step);
  void partition_all_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src);
  // TensorE: psum[M, N] (+)= stationary[K, M]^T @ moving[K, N].
  void matmul(const AccessPattern& psum, const AccessPattern& stationary, const AccessPattern& moving,
              bool accumulate);

  // Any instruction: hazards are tracked and semaphores inserted like for the helpers above.
  void emit(device::Instruction instruction, int dma_queue = -1);

  // ---- kernels emitted into a larger program (the compiler's lowering) ----
  // A tensor index for hbm_pattern that stands for I/O tensor `tensor` from element `element_offset`
  // (of `dtype`) on: a kernel written against its own tensors then reads and writes part of another
  // one (a view, a scratch buffer). Resolved to `tensor` when an instruction is emitted.
  uint32_t view(uint32_t tensor, int64_t element_offset, DType dtype);
  // One kernel's share of the builder: from begin_kernel() on, round-robin DMA placement restarts at
  // queue 0, as in a builder of its own; end_kernel() frees every tile allocated since and puts the
  // queue cursor back, so the kernel leaves the program's state as it found it.
  struct KernelScope {
    uint32_t first_tile_id = 0;
    uint32_t queue_cursor = 0;
  };
  KernelScope begin_kernel();
  void end_kernel(const KernelScope& scope);
  // How many DMA transfers each queue holds so far, and the modeled time of those from `since` on (an
  // earlier dma_queue_lengths()): each transfer's fixed cost plus its bytes at the queue's bandwidth
  // (docs/hardware-model.md §1.4), an estimate of how long a kernel keeps each queue busy.
  std::vector<size_t> dma_queue_lengths() const;
  std::vector<double> dma_queue_ns(const std::vector<size_t>& since) const;
  // Places every DMA transfer put on queue q (by its caller or round robin) on order[q] instead, until
  // called with an empty order: a stream of transfers placed from queue 0 on then goes to the queues a
  // caller knows to be idle. `order` names a queue for each of the spec's queues: a permutation, or a
  // mapping onto some of them (a stream kept off the queues another stream holds).
  void set_queue_order(std::vector<uint32_t> order);

  // Validates the program against the spec and returns it. The builder is spent afterwards.
  device::Executable build();

 private:
  struct Range {
    uint32_t begin, end;
  };
  struct Allocator {
    std::vector<Range> free_ranges;                // sorted, coalesced
    std::vector<std::pair<uint32_t, Range>> live;  // id -> range
    uint32_t capacity = 0;
  };
  Allocator& allocator(Memory memory);
  const Allocator& allocator(Memory memory) const;
  uint32_t free_bytes(Memory memory) const;
  int next_queue();
  uint32_t add_io(std::string name, DType dtype, std::vector<int64_t> shape, device::IoKind kind);
  void resolve_view(AccessPattern& ap) const;

  // Tensor indices from kFirstView on are views (view()): the I/O tensor and the byte offset they add.
  static constexpr uint32_t kFirstView = 0x80000000u;
  struct View {
    uint32_t tensor = 0;
    uint64_t byte_offset = 0;
  };
  std::vector<View> views_;

  const device::Spec& spec_;
  device::Executable exe_;
  HazardTracker hazards_;
  Allocator sbuf_, psum_;
  uint32_t next_tile_id_ = 1;
  uint32_t source_op_ = device::kNoSourceOp;
  uint32_t queue_cursor_ = 0;
  std::vector<uint32_t> queue_order_;  // set_queue_order (empty: none)
  bool built_ = false;
};

}  // namespace sightline::kernels
