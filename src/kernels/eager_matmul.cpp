// Matmul and linear on the Tensor engine.
//
// out[m, n] = sum_k a[m, k] * b[k, n], tiled as the systolic array wants it: K on partitions (up to
// 128 rows of the array), the stationary operand a^T[k, m] with m <= 128 (array columns = output
// partitions), the moving operand b[k, n] with n <= 512 (one PSUM bank of f32), accumulating over K
// tiles in PSUM. The DMA reads a^T straight from a's strides. Linear adds its bias as one more
// accumulation step: ones[1, m]^T @ bias[1, n].
//
// Schedule (the resident one, whenever the operands' K extent fits SBUF): a^T is loaded once per
// block of `m_block` rows and stays in SBUF while every 512-column panel of b streams past it; b's
// panels stay resident too when all of b fits next to the a^T blocks, so each operand byte crosses
// HBM once (the minimum traffic) and the Tensor engine, not the DMA, bounds the kernel. Otherwise
// each panel is reloaded once per a^T block, `m_block` as large as SBUF allows.
//
// Feeding the Tensor engine under the DMA cost model (a transfer pays ~1.3 us of fixed cost before
// its bytes move at ~23 B/ns per queue, and a queue holds two transfers, so the second one's fixed cost
// hides behind the first one's data: docs/hardware-model.md §1.4):
//   * loads and stores are cut as a stream of transfers (the finest split whose pieces still hide the
//     next transfer's fixed cost, stream_min_piece_bytes: docs/hardware-model.md §1.4, "How a transfer is
//     split"), over as many queues as that allows, except a start-up ramp: the first K slice goes out in
//     one piece per queue, so the Tensor engine starts as soon as one slice has landed, and the next
//     slices (kRampSlices) in pieces whose data takes as long as the fixed cost (fixed cost x queue
//     bandwidth), so each queue's third transfer is ready when its second ends; then pieces double;
//   * while a block's a^T still arrives, the K loop runs outermost over a group of every PSUM bank, so
//     each K slice that lands feeds as many matmuls as possible, and the last K tile runs tile by tile,
//     each tile stored as soon as it is complete; once resident, tile by tile over half the banks in
//     turn, so results leave steadily while the next tiles compute. An a^T handed over in SBUF (a
//     prefetched or kept activation) may run tile by tile from the first panel on
//     (PrefetchedWeight::tile_by_tile): each tile's epilogue then overlaps the next tiles' matmuls
//     instead of all of them coming after the last K slice; the caller times both orders;
//   * the next panel of b is fetched before the current panel's results are stored, and while loads
//     remain, results go to their own DMA queues (as many as the stored share of the traffic), so a
//     store waiting for its tile never holds back operands queued behind it;
//   * each transfer goes to the queue estimated to finish it first (the spec's DMA costs, and the
//     Tensor engine's matmul costs for when a result is ready);
//   * evacuation from PSUM alternates VectorE and ScalarE so it keeps up with the Tensor engine; a
//     linear's bias is added either as one more accumulation step (ones^T @ bias, which costs the Tensor
//     engine as much as a K tile) or in the evacuation (a Vector add of the bias, loaded broadcast to the
//     tile's rows after the panel's operands), whichever the spec's costs finish first
//     (fold_bias_into_evacuation: f32 at M = 128 folds, bf16 keeps the matmul); a folded bias is as many
//     bytes as its result tile, so with b prefetched the next panels' biases (kBiasPanelsAhead) are
//     loaded right behind the current one's, ahead of what is queued at the first store;
//   * a linear's weight may arrive prefetched (PrefetchedWeight: compile()'s lowering loads it while the
//     kernels before the linear run), laid out as the resident panels of b, so the kernel loads only a^T,
//     and a^T too (every row in one block), so the kernel loads nothing but its bias;
//   * the last group's results share the queues out, and the kernel's last tile runs its last
//     accumulation step, evacuation and store in column halves (kTailPieces), so less is left to
//     store after the last matmul. Column pieces of the same rows interleave in HBM without touching,
//     and the builder's hazard tracking tells them apart, so they go out on different queues at once.
//   * a product of few rows (at most the array's columns, one a^T block) runs weight-stationary when
//     the spec's costs say the Tensor engine does less work that way (weight_stationary_cost): a
//     matmul's cost follows its moving columns, at least the minimum initiation interval, so with 32
//     rows streaming a^T past each 128-column block of b beats streaming b's 512 columns past a^T,
//     even with one transpose per block to bring y^T back to y. The transposes multiply by an
//     identity, exact for finite values; an infinite or NaN sum spreads NaN over its row of y.
// With bf16 on trn2 this gives 86% MFU at 1024^3 and 98% at 2048^3 at the minimum HBM traffic; the DMA
// latency alone bounds any schedule at 91% and 99% (bench/kernels/kernel_floors, bench/README.md). At
// 512^3 HBM, not the Tensor engine, bounds it. When even one 128-row a^T block and one
// panel of b do not fit (K in the tens of thousands), the kernel falls back to streaming one
// stationary and one moving tile per matmul.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "device/cost_model.h"
#include "kernels/dma_rule.h"
#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

struct Operand {
  uint32_t io = 0;
  DType dtype = DType::f32;
  int64_t offset = 0;
  int64_t outer_stride = 0;  // a: between rows m; b: between columns n; out: between rows m
  int64_t inner_stride = 0;  // a: along k; b: along k; out: along n
};

struct Gemm {
  Operand a, b, out;
  std::optional<Operand> bias;  // inner_stride along n
  int64_t m = 0, n = 0, k = 0;
};

// The start-up ramp's pieces double up to this size (1.3 us of fixed cost vs 128 KiB / 23 B/ns = 5.7 us
// of data at trn2's per-queue bandwidth).
constexpr uint64_t kLoadPieceBytes = 128 * 1024;
// Operand loads are grouped into K slices of about this many bytes (several pieces each).
constexpr uint64_t kLoadChunkBytes = 256 * 1024;
// Below a few KiB a transfer is all fixed cost: never split finer than this (as KernelBuilder::dma_split).
constexpr uint64_t kMinPieceBytes = 4096;
// The kernel's last result tile is computed, evacuated and stored in this many column pieces.
constexpr uint32_t kTailPieces = 2;
// K slices after the first loaded in pieces of fixed cost x queue bandwidth before they grow.
constexpr int kRampSlices = 8;
// A linear whose weight arrives prefetched loads the folded biases of this many panels after the current
// one ahead, when their buffers take at most 1/kBiasShare of the free SBUF. Two, measured on ESM-2 t12_35M
// (f32, 128 tokens: the MLP's 1920 columns are four panels), compiled: none 1532.9 us, one 1487.3, two
// 1476.4, all three 1493.2 (their 1 MB of broadcast loads then delay the first store and the next
// weight's prefetch behind it).
constexpr int64_t kBiasPanelsAhead = 2;
constexpr uint64_t kBiasShare = 8;

int32_t stride32(int64_t stride, const char* what) {
  SIGHTLINE_CHECK(stride >= std::numeric_limits<int32_t>::min() && stride <= std::numeric_limits<int32_t>::max(),
                  "matmul: the {} stride {} does not fit a DMA access pattern (32-bit element strides); make "
                  "the operand contiguous first",
                  what, stride);
  return static_cast<int32_t>(stride);
}

uint64_t align64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

// A range of DMA queues.
struct Queues {
  uint32_t first = 0, count = 1;
};

// The resident schedule's shape, chosen from the problem size and the free SBUF (see the file comment).
struct Plan {
  bool resident = false;    // false: stream one tile pair per matmul
  bool b_resident = false;  // every panel of b stays in SBUF for the whole product
  int64_t k_tiles = 0;      // ceil(K / partitions)
  int64_t m_block = 0;      // a^T columns per resident block (a multiple of the partitions, or M)
  uint32_t panel = 0;       // b columns per panel (<= moving_free_max)
  int64_t panels = 0;
  uint32_t group = 1;       // output tiles per PSUM group once operands are resident (half the banks)
  uint32_t store_queues = 1;
};

Plan plan_gemm(const KernelBuilder& b, int64_t m, int64_t n, int64_t k, DType a_dtype, DType b_dtype,
               DType out_dtype, uint64_t reserved_bytes, bool b_preloaded) {
  const device::Spec& spec = b.spec();
  const int64_t parts = spec.partitions;
  Plan p;
  p.group = std::max<uint32_t>(1, spec.psum_banks / 2);
  if (k == 0 || m == 0 || n == 0) return p;
  p.k_tiles = (k + parts - 1) / parts;
  p.panel = static_cast<uint32_t>(std::min<int64_t>(n, spec.tensor.moving_free_max));
  p.panels = (n + p.panel - 1) / p.panel;
  const uint64_t free = b.sbuf_free_bytes();
  if (free <= reserved_bytes) return p;
  const uint64_t budget = free - reserved_bytes;
  const uint64_t a_column = static_cast<uint64_t>(p.k_tiles) * dtype_size(a_dtype);  // bytes per m column
  const uint64_t panel_bytes = align64(static_cast<uint64_t>(p.k_tiles) * p.panel * dtype_size(b_dtype));
  // The largest a^T block (two buffers, so the next block loads while this one computes) in `left`.
  auto m_block_in = [&](uint64_t left) -> int64_t {
    const uint64_t per_buffer = left / 2;
    if (per_buffer < align64(static_cast<uint64_t>(std::min(m, parts)) * a_column)) return 0;
    if (align64(static_cast<uint64_t>(m) * a_column) <= per_buffer) return m;
    return static_cast<int64_t>(per_buffer / a_column) / parts * parts;
  };
  // A prefetched b is resident already, in tiles of its own (PrefetchedWeight).
  const uint64_t all_b = b_preloaded ? 0 : panel_bytes * static_cast<uint64_t>(p.panels);
  if (all_b < budget) {
    p.m_block = m_block_in(budget - all_b);
    p.b_resident = p.m_block > 0;
  }
  if (!p.b_resident && !b_preloaded && 2 * panel_bytes < budget) p.m_block = m_block_in(budget - 2 * panel_bytes);
  p.resident = p.m_block > 0;
  // Store queues in proportion to the bytes stored vs loaded, so neither direction starves.
  const double loaded = double(m) * double(k) * dtype_size(a_dtype) +
                        double(k) * double(n) * dtype_size(b_dtype) *
                            (p.b_resident ? 1.0 : double((m + p.m_block - 1) / std::max<int64_t>(p.m_block, 1)));
  const double stored = double(m) * double(n) * dtype_size(out_dtype);
  const uint32_t queues = spec.dma.queues;
  if (queues > 1) {
    const double share = stored / (stored + loaded) * queues;
    p.store_queues = std::clamp<uint32_t>(static_cast<uint32_t>(share + 0.5), 1, queues - 1);
  }
  return p;
}

// Whether a linear adds its bias in the evacuation (Vector: y = psum + bias, the bias broadcast to the
// tile's rows) instead of one more accumulation step on the Tensor engine (ones^T @ bias, as costly as a
// K tile's matmul: a matmul's cost depends on its columns only) followed by evacuations alternating
// between Vector and Scalar. Decided on the spec's costs for the plan's `tiles` result tiles: each way
// pipelines at its busiest engine's work per tile, and its last tile's chain drains after it.
bool fold_bias_into_evacuation(const device::Spec& spec, int64_t tiles, int64_t k_tiles, uint16_t rows,
                               uint32_t cols, DType a_dtype, DType b_dtype, DType out_dtype) {
  using device::AccessPattern;
  const uint16_t parts = static_cast<uint16_t>(spec.partitions);
  const AccessPattern acc = device::psum(0, rows, 0, DType::f32, {cols});
  const AccessPattern y = device::sbuf(0, rows, 0, out_dtype, {cols});
  const AccessPattern bias = device::sbuf(0, rows, 0, b_dtype, {cols});
  const double k_step = device::compute_instruction_ns(
      spec, device::matmul(acc, device::sbuf(0, parts, 0, a_dtype, {rows}), device::sbuf(0, parts, 0, b_dtype, {cols}),
                           true));
  const double bias_step = device::compute_instruction_ns(
      spec, device::matmul(acc, device::sbuf(0, 1, 0, a_dtype, {rows}), device::sbuf(0, 1, 0, b_dtype, {cols}), true));
  const double copy = device::compute_instruction_ns(spec, device::tensor_copy(y, acc));
  const double act = device::compute_instruction_ns(spec, device::activate(ActFunc::identity, y, acc));
  const double add = device::compute_instruction_ns(spec, device::tensor_tensor(AluOp::add, y, acc, bias));
  const double tensor = static_cast<double>(k_tiles) * k_step;
  const double matmul_way = static_cast<double>(tiles - 1) * std::max(tensor + bias_step, std::max(copy, act) / 2) +
                            tensor + bias_step + copy;
  const double folded_way = static_cast<double>(tiles - 1) * std::max(tensor, add) + tensor + add;
  return folded_way < matmul_way;
}

// Whether a product of few rows (m <= the array's columns) runs weight-stationary: per K tile, each
// 128-column block of b's panel is the stationary operand and a^T[k, m] the moving one, so the Tensor
// engine streams m columns (at least its minimum initiation interval) instead of the panel's n; the
// result y^T [n, m] is copied out of PSUM into SBUF (f32, exact) and turned back into y [m, n] by one
// transpose per block (y = (y^T)^T @ I: every product by 1 or 0, exact), after which the result tile is
// in PSUM as the activation-stationary schedule leaves it (the bias, evacuation, hooks and stores are
// the same). The matmul's cost depends on its moving columns only (docs/hardware-model.md §1.6), so at
// 32 rows a K tile's f32 matmuls take 64 instead of 128 cycles per 128 columns, against one transpose
// of 128 columns per block. Decided on the spec's costs (for the kernel on a full panel, then for each
// panel): the Tensor engine's work per panel each way against the time the panel's bytes take to cross
// HBM, when the kernel loads them; the copy out of PSUM goes to the otherwise lightly used Vector and
// Scalar engines.
struct WeightStationaryCost {
  double activation_stationary_ns = 0;  // the Tensor engine's work per panel, each way
  double weight_stationary_ns = 0;
  double load_ns = 0;  // the panel's bytes of b over the core's HBM bandwidth, when the kernel loads them
  // Only where it lowers the panel's bound: a panel whose load outlasts its matmuls either way gains
  // nothing, and its last tile's chain (the copy of y^T, the transposes) would come after the load.
  bool pays() const {
    return std::max(weight_stationary_ns, load_ns) < std::max(activation_stationary_ns, load_ns);
  }
};
// `b_loaded`: the kernel loads b's panels (not prefetched and not resident from an earlier block).
WeightStationaryCost weight_stationary_cost(const device::Spec& spec, int64_t m, uint32_t panel, int64_t k_tiles,
                                            DType a_dtype, DType b_dtype, bool b_loaded) {
  const uint16_t parts = static_cast<uint16_t>(spec.partitions);
  const uint16_t mp = static_cast<uint16_t>(std::min<int64_t>(m, parts));
  const uint32_t cols = std::min<uint32_t>(panel, spec.tensor.array_cols);
  const double blocks = std::ceil(double(panel) / double(cols));
  const double as = device::compute_instruction_ns(
      spec, device::matmul(device::psum(0, mp, 0, DType::f32, {panel}), device::sbuf(0, parts, 0, a_dtype, {mp}),
                           device::sbuf(0, parts, 0, b_dtype, {panel}), true));
  const double ws = device::compute_instruction_ns(
      spec, device::matmul(device::psum(0, static_cast<uint16_t>(cols), 0, DType::f32, {mp}),
                           device::sbuf(0, parts, 0, b_dtype, {cols}), device::sbuf(0, parts, 0, a_dtype, {mp}), true));
  const double transpose = device::compute_instruction_ns(
      spec, device::matmul(device::psum(0, mp, 0, DType::f32, {cols}),
                           device::sbuf(0, static_cast<uint16_t>(cols), 0, DType::f32, {mp}),
                           device::sbuf(0, static_cast<uint16_t>(cols), 0, DType::f32, {cols}), false));
  // The Tensor engine waits for y^T's copy out of PSUM before it transposes it (in-order streams), so
  // the copy is on its path once per panel.
  const double copy = device::compute_instruction_ns(
      spec, device::tensor_copy(device::sbuf(0, static_cast<uint16_t>(cols), 0, DType::f32,
                                             {static_cast<uint32_t>(blocks) * mp}),
                                device::psum(0, static_cast<uint16_t>(cols), 0, DType::f32,
                                             {static_cast<uint32_t>(blocks) * mp})));
  const double load = b_loaded ? double(k_tiles) * double(parts) * panel * double(dtype_size(b_dtype)) /
                                      spec.hbm.bytes_per_ns
                                : 0.0;
  return {static_cast<double>(k_tiles) * as, static_cast<double>(k_tiles) * blocks * ws + copy + blocks * transpose,
          load};
}

// The resident panels of b[k, n] for a product of `k` x `n`: ceil(K / partitions) K tiles, panels of up
// to the Tensor engine's moving columns.
struct PanelLayout {
  int64_t k_tiles = 0;
  uint32_t panel = 0;
  int64_t panels = 0;
};
PanelLayout panel_layout(const device::Spec& spec, int64_t n, int64_t k) {
  PanelLayout l;
  l.k_tiles = (k + spec.partitions - 1) / spec.partitions;
  l.panel = static_cast<uint32_t>(std::min<int64_t>(n, spec.tensor.moving_free_max));
  l.panels = l.panel ? (n + l.panel - 1) / l.panel : 0;
  return l;
}

// b[k, n] = weight[n, k]: along k the weight's inner stride, between columns n its row stride.
Operand linear_weight_operand(const TensorDesc& w, uint32_t io) { return {io, w.dtype, 0, w.strides[0], w.strides[1]}; }

// K tiles [kt0, kt0 + count) of an operand into `tile` laid out [k tile][column]: partition p of K tile t
// holds row t * partitions + p. `width` columns from `column` (of `row` columns per K tile), read from
// HBM at `offset` + k * k_stride + column * column_stride. Returns (dst, src).
std::pair<AccessPattern, AccessPattern> k_slice_patterns(uint16_t parts, const Tile& tile, uint32_t row,
                                                         uint32_t column, uint32_t width, const Operand& op,
                                                         int64_t offset, int64_t kt0, int64_t count, int64_t k) {
  const int64_t k0 = kt0 * parts;
  const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts, k - k0));
  AccessPattern dst = tile.region(0, kp, static_cast<uint32_t>(kt0) * row + column, 1);
  dst.dim_count = 2;
  dst.dims[0] = {static_cast<uint32_t>(count), static_cast<int32_t>(row)};
  dst.dims[1] = {width, 1};
  const AccessPattern src =
      hbm_pattern(op.io, op.dtype, offset + k0 * op.inner_stride, kp, op.inner_stride,
                  {{static_cast<uint32_t>(count), stride32(parts * op.inner_stride, "K tile")},
                   {width, stride32(op.outer_stride, "column")}});
  return {dst, src};
}

class GemmEmitter {
 public:
  // `weight` (a linear's, or null): b already loaded into SBUF (prefetch_linear_weight).
  // `allow_weight_stationary`: a product of few rows may run weight-stationary (weight_stationary_cost).
  GemmEmitter(KernelBuilder& b, const Gemm& shape, bool with_bias, const EagerHooks* hooks,
              const PrefetchedWeight* weight = nullptr, bool allow_weight_stationary = true)
      : b_(b),
        parts_(b.partitions()),
        moving_max_(b.spec().tensor.moving_free_max),
        stream_piece_bytes_(stream_min_piece_bytes(b.spec())),
        hooks_(hooks) {
    const DType a_dtype = shape.a.dtype, b_dtype = shape.b.dtype, out_dtype = shape.out.dtype;
    const uint32_t banks = b.spec().psum_banks;
    // A PrefetchedWeight without panels hands the kernel only its a^T (the lowering keeps the input in
    // SBUF while the weight is too large to prefetch): b is loaded as without one.
    const bool has_panels = weight && weight->panels.size() > 0;
    if (has_panels) {
      const PanelLayout l = panel_layout(b.spec(), shape.n, shape.k);
      SIGHTLINE_CHECK(weight->weight.dtype == b_dtype && weight->panels.size() == static_cast<size_t>(l.panels) &&
                          (l.panels == 0 || weight->panels.at(0).free_elements == l.k_tiles * l.panel),
                      "aten::linear: the prefetched weight's panels do not match the kernel's {} x {} product",
                      shape.k, shape.n);
    }
    if (with_bias) {
      ones_ = b.sbuf(a_dtype, parts_, 1, "ones");
      // With b prefetched, the folded biases of the next panels are loaded ahead (load_bias in
      // emit_resident), when their buffers take little SBUF.
      const PanelLayout l = panel_layout(b.spec(), shape.n, shape.k);
      const int64_t ahead = has_panels ? std::min<int64_t>(kBiasPanelsAhead, l.panels - 1) : 0;
      const uint64_t buffer = align64(uint64_t{moving_max_} * dtype_size(b_dtype));
      if (ahead > 0 && static_cast<uint64_t>(ahead + 1) * buffer * kBiasShare <= b.sbuf_free_bytes()) {
        bias_ahead_ = static_cast<uint32_t>(ahead);
      }
      bias_ = b.pool("bias", b_dtype, moving_max_, std::max<size_t>(2, size_t{bias_ahead_} + 1));
    }
    const uint32_t group = std::max<uint32_t>(1, banks / 2);
    const size_t results = 2 * group;
    const uint64_t reserved = results * align64(uint64_t{moving_max_} * dtype_size(out_dtype));
    plan_ = plan_gemm(b, shape.m, shape.n, shape.k, a_dtype, b_dtype, out_dtype, reserved, has_panels);
    // Few rows: weight-stationary when the Tensor engine's work per panel is less that way. Its SBUF (the
    // identity and two y^T buffers, f32) is reserved and the plan made again; its PSUM is half of the
    // activation-stationary schedule's accumulators (one tile per panel is all it needs of them).
    if (allow_weight_stationary && plan_.resident && plan_.m_block >= shape.m && shape.m <= parts_ && banks >= 2) {
      const uint32_t blocks = (plan_.panel + b.spec().tensor.array_cols - 1) / b.spec().tensor.array_cols;
      const uint64_t extra = align64(uint64_t{parts_} * 4) + 2 * align64(uint64_t{blocks} * shape.m * 4);
      const Plan ws = plan_gemm(b, shape.m, shape.n, shape.k, a_dtype, b_dtype, out_dtype, reserved + extra,
                                has_panels);
      if (ws.resident && ws.m_block >= shape.m && (!has_panels || ws.b_resident)) {
        const WeightStationaryCost cost =
            weight_stationary_cost(b.spec(), shape.m, ws.panel, ws.k_tiles, a_dtype, b_dtype, !has_panels);
        if (cost.pays()) {
          plan_ = ws;
          weight_stationary_ = true;
          ws_blocks_ = blocks;
        }
      }
    }
    preloaded_ = has_panels && plan_.b_resident;
    a_preloaded_ = (preloaded_ || (weight && !has_panels && plan_.resident)) && weight->activation &&
                   plan_.m_block == shape.m && weight->activation->free_elements == plan_.k_tiles * shape.m;
    if (a_preloaded_) {
      a_preloaded_tile_ = *weight->activation;
      weight->activation_read = true;
    }
    tile_by_tile_ = a_preloaded_ && weight->tile_by_tile;
    if (with_bias) {
      const int64_t tiles = plan_.resident ? (shape.m + parts_ - 1) / parts_ * plan_.panels : 0;
      fold_bias_ = plan_.resident && fold_bias_into_evacuation(b.spec(), tiles, plan_.k_tiles,
                                                              static_cast<uint16_t>(std::min<int64_t>(shape.m, parts_)),
                                                              plan_.panel, a_dtype, b_dtype, out_dtype);
      if (!fold_bias_) {
        b.iota(ones_->ap(), 0.0f, 0.0f);
        b.activate(ActFunc::identity, ones_->ap(), ones_->ap(), 0.0f, 1.0f);
      }
    }
    result_ = b.pool("result", out_dtype, moving_max_, plan_.resident ? results : 2);
    if (weight_stationary_) {
      acc_ = b.pool("acc", DType::f32, moving_max_, group, Memory::psum);
      acc_t_ = b.pool("acc_t", DType::f32, moving_max_, group, Memory::psum);
      y_t_ = b.pool("y_t", DType::f32, ws_blocks_ * static_cast<uint32_t>(shape.m), 2);
      // The transposes' identity: (i - p) == 0, built while the first operands load.
      identity_ = b.sbuf(DType::f32, parts_, 0, "identity");
      const Tile ramp = b.sbuf(DType::f32, parts_, 0, "identity_ramp");
      b.iota(ramp.ap(), 0.0f, -1.0f);
      b.tensor_scalar(AluOp::is_equal, identity_->ap(), ramp.ap(), 0.0f, false, Engine::gpsimd);
      b.free(ramp);
    } else {
      acc_ = b.pool("acc", DType::f32, moving_max_, plan_.resident ? 2 * group : 2, Memory::psum);
    }
    const uint32_t queues = b.spec().dma.queues;
    if (plan_.resident) {
      if (!a_preloaded_) a_blocks_ = b.pool("a_t", a_dtype, static_cast<uint32_t>(plan_.k_tiles * plan_.m_block), 2);
      b_panels_ = preloaded_ ? weight->panels
                             : b.pool("b", b_dtype, static_cast<uint32_t>(plan_.k_tiles) * plan_.panel,
                                      plan_.b_resident ? static_cast<size_t>(plan_.panels) : 2);
      loads_ = stores_ = {0, queues};
      if (queues > 1) {
        loads_ = {0, queues - plan_.store_queues};
        stores_ = {queues - plan_.store_queues, plan_.store_queues};
      }
    } else {
      stationary_ = b.pool("stationary", a_dtype, parts_, 3);
      moving_ = b.pool("moving", b_dtype, moving_max_, 3);
      loads_ = stores_ = {0, queues};
    }
    all_ = {0, queues};
    queue_free_ns_.assign(queues, 0.0);
    if (hooks_ && hooks_->allocated) hooks_->allocated();
  }

  bool weight_stationary() const { return weight_stationary_; }

  void emit(const Gemm& g) {
    if (plan_.resident) {
      emit_resident(g);
    } else {
      emit_streaming(g);
    }
  }

 private:
  // The queue of `queues` that would finish a transfer of `bytes`, whose data is ready at `ready_ns`,
  // first, by an estimate of when each queue drains (the spec's DMA costs, the Tensor engine's matmul
  // costs for when results are ready): operands arrive evenly and results leave on idle queues.
  int pick_queue(const Queues& queues, double ready_ns, uint64_t bytes) {
    // Among queues free by then, the one idle longest: estimates err, and that one is the safest.
    uint32_t q = queues.first;
    for (uint32_t i = queues.first; i < queues.first + queues.count; ++i) {
      const double start_i = std::max(queue_free_ns_[i], ready_ns), start_q = std::max(queue_free_ns_[q], ready_ns);
      if (start_i < start_q || (start_i == start_q && queue_free_ns_[i] < queue_free_ns_[q])) q = i;
    }
    const device::Spec& spec = b_.spec();
    queue_free_ns_[q] = std::max(queue_free_ns_[q], ready_ns) + spec.dma.fixed_cost_ns +
                        static_cast<double>(bytes) / spec.dma.queue_bytes_per_ns;
    return static_cast<int>(q);
  }

  // Emits a matmul and advances the estimate of the Tensor engine's clock.
  void matmul(const AccessPattern& psum, const AccessPattern& stationary, const AccessPattern& moving, bool acc) {
    const device::Instruction in = device::matmul(psum, stationary, moving, acc);
    tensor_clock_ns_ = std::max(tensor_clock_ns_, operands_ready_ns_) + device::compute_instruction_ns(b_.spec(), in);
    b_.emit(in);
  }

  // Splits a transfer by partitions into `pieces` transfers on `queues` (see pick_queue); a load's
  // landing time feeds the estimate of when the Tensor engine can use it.
  void transfer(const AccessPattern& dst, const AccessPattern& src, uint32_t pieces, const Queues& queues,
                bool load) {
    pieces = std::clamp<uint32_t>(pieces, 1, dst.partition_count);
    auto shift = [](AccessPattern ap, uint32_t first, uint32_t count) {
      if (ap.memory == Memory::hbm) {
        const int64_t element = static_cast<int64_t>(dtype_size(ap.dtype));
        ap.offset += static_cast<uint64_t>(int64_t{first} * ap.partition_stride * element);
      } else {
        ap.partition_start = static_cast<uint16_t>(ap.partition_start + first);
      }
      ap.partition_count = static_cast<uint16_t>(count);
      return ap;
    };
    const uint32_t base = dst.partition_count / pieces, extra = dst.partition_count % pieces;
    uint32_t first = 0;
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t count = base + (i < extra ? 1 : 0);
      const device::Instruction piece = device::dma_copy(shift(dst, first, count), shift(src, first, count));
      const int q = pick_queue(queues, load ? 0.0 : tensor_clock_ns_, piece.dst.bytes());
      b_.emit(piece, q);
      if (load) operands_ready_ns_ = std::max(operands_ready_ns_, queue_free_ns_[static_cast<size_t>(q)]);
      first += count;
    }
  }

  static uint32_t pieces_for(uint64_t bytes, uint64_t piece_bytes, const Queues& queues) {
    return static_cast<uint32_t>(std::clamp<uint64_t>(bytes / piece_bytes, 1, queues.count));
  }

  // Loads K tiles [kt0, kt0 + count) of an operand into `tile` laid out [k tile][column]: partition p
  // of K tile t holds row t * partitions + p. `width` columns from `column` (of `row` columns per K
  // tile), read from HBM at `offset` + k * k_stride + column * column_stride, in `pieces` transfers
  // (0: the stream rule's pieces, stream_piece_bytes_).
  void load_k_slice(const Tile& tile, uint32_t row, uint32_t column, uint32_t width, const Operand& op,
                    int64_t offset, int64_t kt0, int64_t count, int64_t k, uint32_t pieces) {
    const auto [dst, src] = k_slice_patterns(parts_, tile, row, column, width, op, offset, kt0, count, k);
    // Before the first store every queue loads; afterwards the store queues are left to the stores.
    const Queues& queues = stored_ ? loads_ : all_;
    transfer(dst, src, pieces ? pieces : pieces_for(dst.bytes(), stream_piece_bytes_, queues), queues, true);
  }

  // K slices of `columns` columns: full K tiles grouped into chunks of about kLoadChunkBytes, the
  // partial last tile on its own. Calls fn(first K tile, tile count).
  template <typename Fn>
  void for_each_k_slice(int64_t k, uint64_t column_bytes, Fn&& fn) const {
    const int64_t full = k / parts_;
    const uint64_t tile_bytes = std::max<uint64_t>(1, column_bytes * parts_);
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kLoadChunkBytes / tile_bytes));
    for (int64_t kt = 0; kt < full; kt += chunk) fn(kt, std::min(chunk, full - kt));
    if (k % parts_ != 0) fn(full, int64_t{1});
  }

  // Evacuates one PSUM tile and stores it. A tail tile (the last group's: nothing left to overlap with)
  // goes out over up to `tail_queues` queues, its share of them, so the last results do not wait
  // behind each other; each queue has room for only two transfers in flight (docs/hardware-model.md §1.4).
  // `bias` (when the bias is folded into the evacuation): the tile's bias, broadcast to its rows.
  // EagerHooks::before_first_result, once, before the first result tile is made.
  void first_result() {
    if (first_result_done_ || !hooks_ || !hooks_->before_first_result) return;
    first_result_done_ = true;
    hooks_->before_first_result();
  }

  void finish_tile(const Gemm& g, const AccessPattern& psum, int64_t m0, uint16_t mp, int64_t n0, uint32_t np,
                   uint32_t tail_queues, bool loads_remain = true, const AccessPattern* bias = nullptr) {
    first_result();
    const AccessPattern y = result_.next().region(0, mp, 0, np);
    if (bias) {
      b_.tensor_tensor(AluOp::add, y, psum, *bias);  // PSUM and SBUF operands: the Vector engine's
    } else if (evacuations_++ % 2 == 0) {
      b_.copy(y, psum);  // alternate VectorE and ScalarE so evacuation keeps up with TensorE
    } else {
      b_.activate(ActFunc::identity, y, psum);
    }
    const AccessPattern out =
        hbm_pattern(g.out.io, g.out.dtype, g.out.offset + m0 * g.out.outer_stride + n0 * g.out.inner_stride, mp,
                    g.out.outer_stride, {{np, stride32(g.out.inner_stride, "output")}});
    if (hooks_ && hooks_->before_store) hooks_->before_store(y, out);
    if (plan_.resident && hooks_ && hooks_->after_epilogue) hooks_->after_epilogue(y, psum);
    if (!stored_ && hooks_ && hooks_->before_stores) hooks_->before_stores();
    if (!after_loads_done_ && (!plan_.resident || !loads_remain) && hooks_ && hooks_->after_loads) {
      after_loads_done_ = true;
      hooks_->after_loads();
    }
    stored_ = true;
    if (tail_queues > 0) {
      const uint64_t pieces = std::clamp<uint64_t>(y.bytes() / kMinPieceBytes, 1, tail_queues);
      transfer(out, y, static_cast<uint32_t>(pieces), all_, false);
    } else if (loads_remain) {
      transfer(out, y, pieces_for(y.bytes(), stream_piece_bytes_, stores_), stores_, false);
    } else {
      // Every load is out: stores may use every queue (nothing can queue up behind them), each over
      // half of them, so the last results do not wait behind long transfers.
      const uint64_t pieces = std::clamp<uint64_t>(y.bytes() / kMinPieceBytes, 1, std::max(1u, all_.count / 2));
      transfer(out, y, static_cast<uint32_t>(pieces), all_, false);
    }
  }

  void emit_resident(const Gemm& g) {
    const Plan& p = plan_;
    for (int64_t mb0 = 0; mb0 < g.m; mb0 += p.m_block) {
      const int64_t mbw = std::min<int64_t>(p.m_block, g.m - mb0);
      const int64_t m_tiles = (mbw + parts_ - 1) / parts_;
      // A prefetched a^T holds every row, one block: only the first emit() may read it (build_linear).
      SIGHTLINE_CHECK(!a_preloaded_ || (mb0 == 0 && !a_used_), "matmul: the prefetched a^T is one block, read once");
      const Tile a_block = a_preloaded_ ? a_preloaded_tile_ : a_blocks_.next();
      a_used_ = a_used_ || a_preloaded_;
      const uint32_t a_row = static_cast<uint32_t>(p.m_block);
      const bool last_block = mb0 + p.m_block >= g.m;
      // b's panels: resident ones are loaded in the first block only; streamed ones rotate over two
      // buffers. A panel is fetched one panel ahead, before the stores of the current one, so the
      // stores never hold its loads back.
      const bool needs_b = (!p.b_resident || mb0 == 0) && !preloaded_;
      auto panel_tile = [&](int64_t panel) {
        return p.b_resident ? b_panels_.at(static_cast<size_t>(panel))
                            : b_panels_.at(static_cast<size_t>((b_uses_ + panel) % 2));
      };
      int64_t b_fetched = needs_b ? -1 : p.panels - 1;
      std::deque<Tile> bias_ahead;  // the next panels' folded biases, loaded (load_bias)
      auto fetch_b = [&](int64_t panel) {
        if (panel >= p.panels || panel <= b_fetched) return;
        const int64_t n0 = panel * p.panel;
        const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(p.panel, g.n - n0));
        for_each_k_slice(g.k, np * dtype_size(g.b.dtype), [&](int64_t kt0, int64_t count) {
          load_k_slice(panel_tile(panel), p.panel, 0, np, g.b, g.b.offset + n0 * g.b.outer_stride, kt0, count, g.k, 0);
        });
        b_fetched = panel;
      };
      for (int64_t panel = 0; panel < p.panels; ++panel) {
        const int64_t n0 = panel * p.panel;
        const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(p.panel, g.n - n0));
        const bool last_panel = last_block && panel + 1 == p.panels;
        const Tile b_panel = panel_tile(panel);
        // a^T arrives with the block's first panel, interleaved with b's first panel.
        const bool load_a = panel == 0;
        bool load_b = panel > b_fetched && load_a;
        const uint64_t b_column = np * dtype_size(g.b.dtype);
        auto load_b_slice = [&](int64_t kt0, int64_t count, uint32_t pieces) {
          load_k_slice(b_panel, p.panel, 0, np, g.b, g.b.offset + n0 * g.b.outer_stride, kt0, count, g.k, pieces);
        };
        std::optional<Tile> bias;
        bool bias_loaded = false;
        // Folded into the evacuation, the bias is broadcast to every row of the block's tiles
        // (KernelBuilder::load_broadcast), once the panel's operand loads are out, since only the
        // evacuation needs it; as an accumulation step, as one row, first.
        auto emit_bias_load = [&](const Tile& tile, int64_t col0, uint32_t cols) {
          const uint16_t rows = fold_bias_ ? static_cast<uint16_t>(std::min<int64_t>(parts_, mbw)) : uint16_t{1};
          const AccessPattern dst = tile.region(0, rows, 0, cols);
          const AccessPattern src = hbm_pattern(g.bias->io, g.bias->dtype, g.bias->offset + col0 * g.bias->inner_stride,
                                                1, 0, {{cols, stride32(g.bias->inner_stride, "bias")}});
          const Queues& queues = stored_ ? loads_ : all_;
          if (fold_bias_) {
            // Broadcast by the builder's rule (the stride-0 DMA or the row once and GpSimd), on the queues
            // this emitter picks.
            b_.load_broadcast(dst, src, [&](const AccessPattern& to, const AccessPattern& from) {
              transfer(to, from, pieces_for(to.bytes(), stream_piece_bytes_, queues), queues, false);
            });
          } else {
            b_.emit(device::dma_copy(dst, src), pick_queue(queues, 0.0, dst.bytes()));
          }
        };
        // With b prefetched, the folded biases of the next bias_ahead_ panels are loaded right behind this
        // one's, ahead of this panel's stores: loaded only when its evacuations come, a panel's broadcast (as
        // many bytes as its result tile) waits behind what is queued by then (the next linear's weight,
        // which the lowering queues at the first store, and the stores) and holds back every evacuation,
        // epilogue and store of the panel.
        bool bias_came_ahead = false;  // loaded behind an earlier panel's
        auto load_bias = [&] {
          if (!g.bias || bias_loaded) return;
          bias_loaded = true;
          if (!bias_came_ahead) emit_bias_load(*bias, n0, np);
          if (!fold_bias_) return;
          const int64_t last = std::min<int64_t>(p.panels - 1, panel + int64_t{bias_ahead_});
          for (int64_t ahead = panel + 1 + static_cast<int64_t>(bias_ahead.size()); ahead <= last; ++ahead) {
            const int64_t n1 = ahead * p.panel;
            bias_ahead.push_back(bias_.next());
            emit_bias_load(bias_ahead.back(), n1, static_cast<uint32_t>(std::min<int64_t>(p.panel, g.n - n1)));
          }
        };
        if (g.bias) {
          if (!bias_ahead.empty()) {
            bias = bias_ahead.front();
            bias_ahead.pop_front();
            bias_came_ahead = true;
          } else {
            bias = bias_.next();
          }
          if (!fold_bias_) load_bias();
        }
        if (!load_a) {
          fetch_b(panel);      // normally fetched already, during the previous panel
          fetch_b(panel + 1);  // ahead of this panel's stores
        }
        for (int64_t t0 = 0, tiles = 0; t0 < m_tiles; t0 += tiles) {
          // While a^T still arrives, the K loop runs outermost over a group of every PSUM bank, so each K
          // slice feeds as many matmuls as possible as soon as it lands. Once resident, tile by tile
          // (half the banks in turn), so results leave while the next tiles compute; from the first
          // panel on when a^T was handed over and the caller asks for it (PrefetchedWeight::tile_by_tile).
          const bool k_outer = load_a && !(tile_by_tile_ && m_tiles > 1);
          tiles = std::min<int64_t>(k_outer ? 2 * p.group : p.group, m_tiles - t0);
          const bool last_group = last_panel && t0 + tiles >= m_tiles;
          std::vector<Tile> psum;
          for (int64_t t = 0; t < tiles; ++t) psum.push_back(acc_.next());
          auto rows = [&](int64_t t) {
            return static_cast<uint16_t>(std::min<int64_t>(parts_, mbw - (t0 + t) * parts_));
          };
          // Columns [c0, c0 + cw) of tile t's matmul with K tile kt.
          auto mm_columns = [&](int64_t t, int64_t kt, uint32_t c0, uint32_t cw) {
            const uint16_t mp = rows(t);
            const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.k - kt * parts_));
            const uint32_t col = static_cast<uint32_t>(kt) * a_row + static_cast<uint32_t>((t0 + t) * parts_);
            matmul(psum[static_cast<size_t>(t)].region(0, mp, c0, cw), a_block.region(0, kp, col, mp),
                   b_panel.region(0, kp, static_cast<uint32_t>(kt) * p.panel + c0, cw), kt > 0);
          };
          // Weight-stationary (one tile of every row, weight_stationary_): K tile kt's matmuls, one per
          // 128-column block of the panel, into y^T [block columns, rows] at column j * rows of acc_t.
          // Decided per panel: a narrow last panel may stream its few columns faster than its transposes.
          const bool transposed =
              weight_stationary_ &&
              weight_stationary_cost(b_.spec(), g.m, np, p.k_tiles, g.a.dtype, g.b.dtype, !preloaded_).pays();
          const std::optional<Tile> acc_t = transposed ? std::optional<Tile>(acc_t_.next()) : std::nullopt;
          const uint32_t cols = b_.spec().tensor.array_cols;
          auto mm_transposed = [&](int64_t kt) {
            const uint16_t mp = rows(0);
            const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.k - kt * parts_));
            const uint32_t col = static_cast<uint32_t>(kt) * a_row + static_cast<uint32_t>(t0 * parts_);
            for (uint32_t j = 0, c0 = 0; c0 < np; ++j, c0 += cols) {
              const uint16_t w = static_cast<uint16_t>(std::min(cols, np - c0));
              matmul(acc_t->region(0, w, j * mp, mp), b_panel.region(0, kp, static_cast<uint32_t>(kt) * p.panel + c0, w),
                     a_block.region(0, kp, col, mp), kt > 0);
            }
          };
          // y^T out of PSUM (f32: the bits of the sums), then y = (y^T)^T @ I block by block into the
          // result tile's accumulator, where the activation-stationary schedule leaves its sums.
          auto transpose_back = [&](const Tile& acc) {
            const uint16_t mp = rows(0);
            const Tile y_t = y_t_.next();
            const uint32_t full = np / cols, rest = np % cols;
            auto evacuate = [&](uint16_t partitions, uint32_t f0, uint32_t f) {
              const AccessPattern to = y_t.region(0, partitions, f0, f), from = acc_t->region(0, partitions, f0, f);
              if (evacuations_++ % 2 == 0) {
                b_.copy(to, from);
              } else {
                b_.activate(ActFunc::identity, to, from);
              }
            };
            if (full > 0) evacuate(static_cast<uint16_t>(cols), 0, full * mp);
            if (rest > 0) evacuate(static_cast<uint16_t>(rest), full * mp, mp);
            for (uint32_t j = 0, c0 = 0; c0 < np; ++j, c0 += cols) {
              const uint16_t w = static_cast<uint16_t>(std::min(cols, np - c0));
              matmul(acc.region(0, mp, c0, w), y_t.region(0, w, j * mp, mp), identity_->region(0, w, 0, w), false);
            }
          };
          auto mm = [&](int64_t t, int64_t kt) {
            if (transposed) {
              mm_transposed(kt);
            } else {
              mm_columns(t, kt, 0, np);
            }
          };
          // Tile t's last accumulation step (its last K tile's matmul if `k_pending`, then the bias's),
          // evacuation and store. The kernel's last tile does them in column pieces, so the first columns
          // leave while the rest compute and the last result to store is small.
          auto finish = [&](int64_t t, bool k_pending) {
            // Loads still to come in this product: b's or the bias's later panels, or the next a^T block.
            const bool loads_remain = !last_block || b_fetched + 1 < p.panels || (g.bias && panel + 1 < p.panels);
            const bool last_tile = last_group && t + 1 == tiles;
            const uint32_t pieces = last_tile && !(hooks_ && hooks_->whole_rows) ? kTailPieces : 1;
            const uint32_t tail_queues =
                last_group ? std::max<uint32_t>(1, all_.count / static_cast<uint32_t>(last_tile ? pieces : tiles)) : 0;
            const uint32_t width = std::max<uint32_t>(1, (np + pieces - 1) / pieces);
            const uint16_t mp = rows(t);
            load_bias();
            if (transposed) {
              if (k_pending) mm_transposed(p.k_tiles - 1);
              transpose_back(psum[static_cast<size_t>(t)]);
              k_pending = false;
            }
            for (uint32_t c0 = 0; c0 < np; c0 += width) {
              const uint32_t cw = std::min(width, np - c0);
              if (k_pending) mm_columns(t, p.k_tiles - 1, c0, cw);
              const AccessPattern acc = psum[static_cast<size_t>(t)].region(0, mp, c0, cw);
              if (bias && !fold_bias_) matmul(acc, ones_->region(0, 1, 0, mp), bias->region(0, 1, c0, cw), true);
              const AccessPattern folded = bias && fold_bias_ ? bias->region(0, mp, c0, cw) : AccessPattern{};
              finish_tile(g, acc, mb0 + (t0 + t) * parts_, mp, n0 + c0, cw, tail_queues, loads_remain,
                          bias && fold_bias_ ? &folded : nullptr);
            }
          };
          if (k_outer) {
            const uint32_t width = static_cast<uint32_t>(std::min<int64_t>(tiles * parts_, mbw - t0 * parts_));
            const uint64_t a_column = a_preloaded_ ? 0 : width * dtype_size(g.a.dtype);  // bytes loaded here
            for_each_k_slice(g.k, a_column + (load_b ? b_column : 0), [&](int64_t kt0, int64_t count) {
              // The kernel's first slices ramp up. The first goes out over every queue at once, one piece
              // per queue, so the Tensor engine starts as soon as it lands. The next ones fill the queues'
              // second slots in pieces whose data takes as long as the fixed cost, so each queue's third
              // transfer pays its fixed cost while the second moves (docs/hardware-model.md §1.4); after
              // kRampSlices of those, pieces double up to kLoadPieceBytes.
              uint32_t a_pieces = 0, b_pieces = 0;
              const uint64_t a_bytes = a_column * parts_ * static_cast<uint64_t>(count);
              const uint64_t b_bytes = load_b ? b_column * parts_ * static_cast<uint64_t>(count) : 0;
              if (ramp_slices_ == 0) {
                const double a_share = a_bytes > 0 ? double(a_bytes) / double(a_bytes + b_bytes) : 0.0;
                a_pieces = std::clamp<uint32_t>(static_cast<uint32_t>(a_share * all_.count + 0.5), 1,
                                                std::max(1u, all_.count - (b_bytes > 0 ? 1 : 0)));
                b_pieces = std::max(1u, all_.count - a_pieces);
                ramp_bytes_ = std::max<uint64_t>(
                    kMinPieceBytes, static_cast<uint64_t>(b_.spec().dma.fixed_cost_ns * b_.spec().dma.queue_bytes_per_ns));
              } else if (ramp_bytes_ < kLoadPieceBytes) {
                if (ramp_slices_ > kRampSlices) ramp_bytes_ = std::min(kLoadPieceBytes, 2 * ramp_bytes_);
                a_pieces = static_cast<uint32_t>(std::max<uint64_t>(1, (a_bytes + ramp_bytes_ / 2) / ramp_bytes_));
                b_pieces = static_cast<uint32_t>(std::max<uint64_t>(1, (b_bytes + ramp_bytes_ / 2) / ramp_bytes_));
              }
              ++ramp_slices_;
              if (!a_preloaded_) {
                load_k_slice(a_block, a_row, static_cast<uint32_t>(t0 * parts_), width, g.a,
                             g.a.offset + (mb0 + t0 * parts_) * g.a.outer_stride, kt0, count, g.k, a_pieces);
              }
              if (load_b) load_b_slice(kt0, count, b_pieces);
              const bool final_slice = kt0 + count == p.k_tiles;
              if (final_slice) {
                if (load_b) b_fetched = panel;
                fetch_b(panel + 1);  // ahead of this group's stores
              }
              for (int64_t kt = kt0; kt < kt0 + count - (final_slice ? 1 : 0); ++kt) {
                for (int64_t t = 0; t < tiles; ++t) mm(t, kt);
              }
              // The last K tile tile by tile, each tile stored as soon as it is complete.
              if (final_slice) {
                for (int64_t t = 0; t < tiles; ++t) finish(t, true);
              }
            });
            load_b = false;
          } else {
            // Tile by tile from the first panel on (a^T handed over, tile_by_tile_): b's panel, when the
            // kernel loads it, streams in ahead of the tiles' matmuls.
            if (load_b) {
              fetch_b(panel);
              fetch_b(panel + 1);  // ahead of this group's stores
              load_b = false;
            }
            for (int64_t t = 0; t < tiles; ++t) {
              for (int64_t kt = 0; kt + 1 < p.k_tiles; ++kt) mm(t, kt);
              finish(t, true);
            }
          }
        }
      }
      if (!p.b_resident) b_uses_ += p.panels;
    }
  }

  void emit_streaming(const Gemm& g) {
    for (int64_t m0 = 0; m0 < g.m; m0 += parts_) {
      const uint16_t mp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.m - m0));
      for (int64_t n0 = 0; n0 < g.n; n0 += moving_max_) {
        const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(moving_max_, g.n - n0));
        const AccessPattern psum = acc_.next().region(0, mp, 0, np);
        bool accumulate = false;
        for (int64_t k0 = 0; k0 < g.k; k0 += parts_) {
          const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.k - k0));
          const AccessPattern st = stationary_.next().region(0, kp, 0, mp);
          b_.dma_split(st, hbm_pattern(g.a.io, g.a.dtype, g.a.offset + m0 * g.a.outer_stride + k0 * g.a.inner_stride,
                                       kp, g.a.inner_stride, {{mp, stride32(g.a.outer_stride, "row")}}));
          const AccessPattern mv = moving_.next().region(0, kp, 0, np);
          b_.dma_split(mv, hbm_pattern(g.b.io, g.b.dtype, g.b.offset + k0 * g.b.inner_stride + n0 * g.b.outer_stride,
                                       kp, g.b.inner_stride, {{np, stride32(g.b.outer_stride, "column")}}));
          b_.matmul(psum, st, mv, accumulate);
          accumulate = true;
        }
        if (g.bias) {
          const AccessPattern bias = bias_.next().region(0, 1, 0, np);
          b_.dma(bias, hbm_pattern(g.bias->io, g.bias->dtype, g.bias->offset + n0 * g.bias->inner_stride, 1, 0,
                                   {{np, stride32(g.bias->inner_stride, "bias")}}));
          b_.matmul(psum, ones_->region(0, 1, 0, mp), bias, accumulate);
          accumulate = true;
        }
        if (!accumulate) {
          // K == 0: the product is all zeros.
          first_result();
          const AccessPattern y = result_.next().region(0, mp, 0, np);
          b_.iota(y, 0.0f, 0.0f);
          b_.tensor_scalar(AluOp::multiply, y, y, 0.0f);
          const AccessPattern out =
              hbm_pattern(g.out.io, g.out.dtype, g.out.offset + m0 * g.out.outer_stride + n0 * g.out.inner_stride,
                          mp, g.out.outer_stride, {{np, stride32(g.out.inner_stride, "output")}});
          if (hooks_ && hooks_->before_store) hooks_->before_store(y, out);
          b_.store(out, y);
        } else {
          finish_tile(g, psum, m0, mp, n0, np, 0);
        }
      }
    }
  }

  KernelBuilder& b_;
  uint16_t parts_;
  uint32_t moving_max_;
  uint64_t stream_piece_bytes_;  // stream_min_piece_bytes of the spec
  const EagerHooks* hooks_;
  Plan plan_;
  TilePool a_blocks_, b_panels_, stationary_, moving_, result_, acc_, bias_;
  uint32_t bias_ahead_ = 0;  // folded biases loaded this many panels ahead (kBiasPanelsAhead)
  std::optional<Tile> ones_;
  Queues loads_, stores_, all_;
  uint64_t evacuations_ = 0;
  std::vector<double> queue_free_ns_;  // estimates: when each DMA queue drains
  double tensor_clock_ns_ = 0;          // when the Tensor engine finishes the matmuls emitted so far
  double operands_ready_ns_ = 0;        // when the loads emitted so far have landed
  uint64_t ramp_bytes_ = 0;  // load pieces of the start-up ramp
  int ramp_slices_ = 0;      // K slices loaded so far by the ramp
  int64_t b_uses_ = 0;  // streamed b panels used so far (they alternate between two buffers)
  bool stored_ = false;  // a result store has been emitted
  bool preloaded_ = false;  // b's panels were loaded ahead of the kernel (PrefetchedWeight)
  bool a_preloaded_ = false;  // and a^T (PrefetchedWeight::activation)
  bool tile_by_tile_ = false;  // a^T handed over and PrefetchedWeight::tile_by_tile
  bool a_used_ = false;
  Tile a_preloaded_tile_;
  bool fold_bias_ = false;  // the bias is added in the evacuation (fold_bias_into_evacuation)
  bool after_loads_done_ = false;  // EagerHooks::after_loads has run
  bool first_result_done_ = false;  // EagerHooks::before_first_result has run
  // Weight-stationary (weight_stationary_cost): y^T accumulates in acc_t_, is copied to y_t_ and
  // transposed back into acc_ through identity_; the panel's 128-column blocks.
  bool weight_stationary_ = false;
  uint32_t ws_blocks_ = 0;
  TilePool acc_t_, y_t_;
  std::optional<Tile> identity_;
};

}  // namespace

void build_matmul(EagerContext& c) {
  const TensorDesc& a = c.inputs[0];
  const TensorDesc& bt = c.inputs[1];
  const int ra = a.shape.size(), rb = bt.shape.size();
  SIGHTLINE_CHECK(ra >= 1 && rb >= 1, "aten::matmul: both operands need at least 1 dim, got {} and {}",
                  a.shape, bt.shape);
  Gemm g;
  g.k = a.shape[ra - 1];
  g.m = ra >= 2 ? a.shape[ra - 2] : 1;
  g.n = rb >= 2 ? bt.shape[rb - 1] : 1;
  g.a = {c.input_io[0], a.dtype, 0, ra >= 2 ? a.strides[ra - 2] : 0, a.strides[ra - 1]};
  g.b = {c.input_io[1], bt.dtype, 0, rb >= 2 ? bt.strides[rb - 1] : 0, bt.strides[rb >= 2 ? rb - 2 : 0]};
  const int ro = c.out.shape.size();
  const int64_t out_n_stride = rb >= 2 ? c.out.strides[ro - 1] : 0;
  const int64_t out_m_stride = ra >= 2 ? c.out.strides[ro - (rb >= 2 ? 2 : 1)] : 0;
  g.out = {c.out_io, c.out.dtype, 0, out_m_stride, out_n_stride};
  // Batch dims: broadcast a's and b's leading dims against the output's.
  const int batch_rank = ro - (ra >= 2 ? 1 : 0) - (rb >= 2 ? 1 : 0);
  Dims batch_shape;
  for (int d = 0; d < batch_rank; ++d) batch_shape.push_back(c.out.shape[d]);
  auto batch_strides = [&](const TensorDesc& t, int matrix_dims) {
    TensorDesc lead{t.dtype, {}, {}};
    for (int d = 0; d + matrix_dims < t.shape.size(); ++d) {
      lead.shape.push_back(t.shape[d]);
      lead.strides.push_back(t.strides[d]);
    }
    return broadcast_strides(lead, batch_shape);
  };
  LoopNest batch;
  batch.sizes.assign(batch_shape.begin(), batch_shape.end());
  batch.strides = {batch_strides(a, std::min(ra, 2)), batch_strides(bt, std::min(rb, 2)),
                   std::vector<int64_t>(c.out.strides.begin(), c.out.strides.begin() + batch_rank)};
  batch = batch.coalesced();
  GemmEmitter emitter(c.b, g, false, c.hooks, nullptr, c.allow_weight_stationary);
  if (c.weight_stationary) *c.weight_stationary = emitter.weight_stationary();
  for_each_index(batch.sizes, [&](const std::vector<int64_t>& idx) {
    Gemm at = g;
    for (size_t d = 0; d < idx.size(); ++d) {
      at.a.offset += idx[d] * batch.strides[0][d];
      at.b.offset += idx[d] * batch.strides[1][d];
      at.out.offset += idx[d] * batch.strides[2][d];
    }
    emitter.emit(at);
  });
}

void build_linear(EagerContext& c) {
  const TensorDesc& x = c.inputs[0];
  const TensorDesc& w = c.inputs[1];
  const int rx = x.shape.size(), ro = c.out.shape.size();
  SIGHTLINE_CHECK(w.shape.size() == 2, "aten::linear: weight must be [out_features, in_features], got {}",
                  w.shape);
  Gemm g;
  g.k = x.shape[rx - 1];
  g.n = w.shape[0];
  g.b = linear_weight_operand(w, c.input_io[1]);
  if (c.inputs.size() > 2) g.bias = Operand{c.input_io[2], c.inputs[2].dtype, 0, 0, c.inputs[2].strides[0]};
  LoopNest rows;
  rows.strides.resize(2);
  for (int d = 0; d + 1 < rx; ++d) {
    rows.sizes.push_back(x.shape[d]);
    rows.strides[0].push_back(x.strides[d]);
    rows.strides[1].push_back(c.out.strides[d]);
  }
  rows = rows.coalesced();
  const size_t rank = rows.sizes.size();
  g.m = rank ? rows.sizes.back() : 1;
  g.a = {c.input_io[0], x.dtype, 0, rank ? rows.strides[0].back() : 0, x.strides[rx - 1]};
  g.out = {c.out_io, c.out.dtype, 0, rank ? rows.strides[1].back() : 0, c.out.strides[ro - 1]};
  const std::vector<int64_t> outer =
      rank ? std::vector<int64_t>(rows.sizes.begin(), rows.sizes.end() - 1) : std::vector<int64_t>{};
  const PrefetchedWeight* weight = c.hooks ? c.hooks->weight : nullptr;
  if (weight) {
    SIGHTLINE_CHECK(weight->weight.shape == w.shape && weight->weight.strides == w.strides,
                    "aten::linear: the prefetched weight is {} with strides {}, the kernel's {} with strides {}",
                    weight->weight.shape, weight->weight.strides, w.shape, w.strides);
  }
  // A prefetched x is one block of every row: it stands for a only when the rows are one run.
  PrefetchedWeight without_x;
  if (weight && weight->activation &&
      (!outer.empty() || weight->x.shape != x.shape || weight->x.strides != x.strides || weight->x.dtype != x.dtype)) {
    without_x = *weight;
    without_x.activation.reset();
    weight = &without_x;
  }
  GemmEmitter emitter(c.b, g, g.bias.has_value(), c.hooks, weight, c.allow_weight_stationary);
  if (c.weight_stationary) *c.weight_stationary = emitter.weight_stationary();
  for_each_index(outer, [&](const std::vector<int64_t>& idx) {
    Gemm at = g;
    for (size_t d = 0; d < idx.size(); ++d) {
      at.a.offset += idx[d] * rows.strides[0][d];
      at.out.offset += idx[d] * rows.strides[1][d];
    }
    emitter.emit(at);
  });
}

}  // namespace sightline::kernels

namespace sightline::kernels {

// A transfer that is one of a stream (a prefetch: nothing queued behind it waits for it) cut by
// partitions into pieces of at least stream_min_piece_bytes, round robin over every queue from `queue`.
void emit_stream_pieces(KernelBuilder& b, const AccessPattern& dst, const AccessPattern& src, uint32_t& queue) {
  const uint64_t piece_bytes = stream_min_piece_bytes(b.spec());
  const uint32_t pieces = static_cast<uint32_t>(std::clamp<uint64_t>(dst.bytes() / piece_bytes, 1, dst.partition_count));
  const uint32_t base = dst.partition_count / pieces, extra = dst.partition_count % pieces;
  uint32_t first = 0;
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint32_t count = base + (i < extra ? 1 : 0);
    AccessPattern d = dst, s = src;
    d.partition_start = static_cast<uint16_t>(d.partition_start + first);
    d.partition_count = static_cast<uint16_t>(count);
    s.offset += static_cast<uint64_t>(int64_t{first} * s.partition_stride * static_cast<int64_t>(dtype_size(s.dtype)));
    s.partition_count = static_cast<uint16_t>(count);
    b.emit(device::dma_copy(d, s), static_cast<int>(queue));
    queue = (queue + 1) % b.spec().dma.queues;
    first += count;
  }
}

std::optional<PrefetchedWeight> allocate_linear_weight(KernelBuilder& b, const TensorDesc& weight, uint64_t budget) {
  if (weight.shape.size() != 2 || weight.shape[0] == 0 || weight.shape[1] == 0) return std::nullopt;
  const PanelLayout l = panel_layout(b.spec(), weight.shape[0], weight.shape[1]);
  const uint64_t panel_bytes = align64(static_cast<uint64_t>(l.k_tiles) * l.panel * dtype_size(weight.dtype));
  if (panel_bytes * static_cast<uint64_t>(l.panels) > budget || panel_bytes * l.panels > b.sbuf_free_bytes()) {
    return std::nullopt;
  }
  PrefetchedWeight w;
  w.weight = weight;
  w.panels = b.pool("prefetched_weight", weight.dtype, static_cast<uint32_t>(l.k_tiles) * l.panel,
                    static_cast<size_t>(l.panels));
  return w;
}

void prefetch_linear_weight(KernelBuilder& b, const PrefetchedWeight& w, uint32_t tensor) {
  const device::Spec& spec = b.spec();
  const uint16_t parts = b.partitions();
  const int64_t n = w.weight.shape[0], k = w.weight.shape[1];
  const PanelLayout l = panel_layout(spec, n, k);
  const Operand op = linear_weight_operand(w.weight, tensor);
  // One transfer per K tile and panel, cut by partitions into pieces of at least stream_min_piece_bytes:
  // the loads are a stream, each hiding the fixed cost of the one queued behind it
  // (docs/hardware-model.md §1.4), round robin over every queue.
  uint32_t queue = 0;
  for (int64_t panel = 0; panel < l.panels; ++panel) {
    const int64_t n0 = panel * l.panel;
    const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(l.panel, n - n0));
    for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
      const auto [dst, src] = k_slice_patterns(parts, w.panels.at(static_cast<size_t>(panel)), l.panel, 0, np, op,
                                               n0 * op.outer_stride, kt, 1, k);
      emit_stream_pieces(b, dst, src, queue);
    }
  }
}

// x's rows as build_linear walks them: (m, the stride between rows) when they are one strided run.
std::optional<std::pair<int64_t, int64_t>> linear_row_run(const TensorDesc& x) {
  const int rx = x.shape.size();
  if (rx < 1) return std::nullopt;
  LoopNest rows;
  rows.strides.resize(1);
  for (int d = 0; d + 1 < rx; ++d) {
    rows.sizes.push_back(x.shape[d]);
    rows.strides[0].push_back(x.strides[d]);
  }
  rows = rows.coalesced();
  if (rows.sizes.size() > 1) return std::nullopt;
  return std::pair<int64_t, int64_t>{rows.sizes.empty() ? 1 : rows.sizes.back(),
                                     rows.sizes.empty() ? 0 : rows.strides[0].back()};
}

bool allocate_linear_activation(KernelBuilder& b, PrefetchedWeight& w, const TensorDesc& x, uint64_t budget) {
  const std::optional<std::pair<int64_t, int64_t>> run = linear_row_run(x);
  if (!run || x.shape.size() < 1 || x.shape[x.shape.size() - 1] != w.weight.shape[1] || x.dtype != w.weight.dtype)
    return false;
  const int64_t m = run->first, k = w.weight.shape[1];
  const PanelLayout l = panel_layout(b.spec(), w.weight.shape[0], k);
  const uint64_t bytes = align64(static_cast<uint64_t>(l.k_tiles * m) * dtype_size(x.dtype));
  if (m == 0 || bytes > budget || bytes > b.sbuf_free_bytes()) return false;
  w.activation = b.sbuf(x.dtype, static_cast<uint32_t>(l.k_tiles * m), 0, "prefetched_a_t");
  w.x = x;
  return true;
}

void prefetch_linear_activation(KernelBuilder& b, const PrefetchedWeight& w, uint32_t tensor) {
  const std::optional<std::pair<int64_t, int64_t>> run = linear_row_run(w.x);
  SIGHTLINE_ASSERT(w.activation && run);
  const uint16_t parts = b.partitions();
  const int64_t m = run->first, k = w.weight.shape[1];
  const PanelLayout l = panel_layout(b.spec(), w.weight.shape[0], k);
  const Operand a{tensor, w.x.dtype, 0, run->second, w.x.strides[w.x.shape.size() - 1]};
  uint32_t queue = 0;
  for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
    const auto [dst, src] = k_slice_patterns(parts, *w.activation, static_cast<uint32_t>(m), 0,
                                             static_cast<uint32_t>(m), a, 0, kt, 1, k);
    emit_stream_pieces(b, dst, src, queue);
  }
}

bool linear_transposes_into(const device::Spec& spec, const PrefetchedWeight& w, const PrefetchedWeight& next) {
  if (!w.activation || w.panels.size() == 0 || !next.activation) return false;
  const std::optional<std::pair<int64_t, int64_t>> run = linear_row_run(w.x), next_run = linear_row_run(next.x);
  if (!run || !next_run || run->first != next_run->first) return false;
  const int64_t m = run->first, n = w.weight.shape[0], k = w.weight.shape[1];
  const PanelLayout l = panel_layout(spec, n, k), into = panel_layout(spec, next.weight.shape[0], next.weight.shape[1]);
  // The next linear's K is this one's n; its a^T holds every row, K tile after K tile.
  return next.weight.shape[1] == n && next.x.dtype == w.x.dtype &&
         next.activation->free_elements == static_cast<uint64_t>(into.k_tiles * m) &&
         w.activation->free_elements == static_cast<uint64_t>(l.k_tiles * m) &&
         (l.panel % spec.tensor.array_cols == 0 || l.panels == 1);
}

void emit_linear_transposed(KernelBuilder& b, const PrefetchedWeight& w, std::optional<uint32_t> bias_tensor,
                            const TensorDesc& bias, const PrefetchedWeight& next,
                            const std::function<void(const AccessPattern&)>& epilogue,
                            const std::function<void()>& after_loads) {
  SIGHTLINE_ASSERT(linear_transposes_into(b.spec(), w, next));
  const uint16_t parts = b.partitions();
  const uint32_t cols = b.spec().tensor.array_cols, moving = b.spec().tensor.moving_free_max;
  const int64_t m = linear_row_run(w.x)->first, n = w.weight.shape[0], k = w.weight.shape[1];
  const PanelLayout l = panel_layout(b.spec(), n, k);
  const DType out_dtype = next.x.dtype;
  const int64_t blocks = (n + cols - 1) / cols;
  w.activation_read = true;
  // The bias as one column per block: partition p of column j holds bias[j * cols + p].
  std::optional<Tile> bias_columns;
  if (bias_tensor) {
    bias_columns = b.sbuf(bias.dtype, static_cast<uint32_t>(blocks), 0, "bias_columns");
    const int64_t full = n / cols, rest = n % cols;
    const int32_t step = stride32(bias.strides[0], "bias");
    if (full > 0) {
      b.load(bias_columns->region(0, static_cast<uint16_t>(cols), 0, static_cast<uint32_t>(full)),
             hbm_pattern(*bias_tensor, bias.dtype, 0, static_cast<uint16_t>(cols), bias.strides[0],
                         {{static_cast<uint32_t>(full), stride32(int64_t{cols} * bias.strides[0], "bias")}}));
    }
    if (rest > 0) {
      b.load(bias_columns->region(0, static_cast<uint16_t>(rest), static_cast<uint32_t>(full), 1),
             hbm_pattern(*bias_tensor, bias.dtype, full * cols * bias.strides[0], static_cast<uint16_t>(rest),
                         bias.strides[0], {{1, step}}));
    }
  }
  if (after_loads) after_loads();
  TilePool acc = b.pool("acc_t", DType::f32, moving, std::max<size_t>(2, b.spec().psum_banks / 2), Memory::psum);
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t n0 = j * cols;
    const uint16_t wj = static_cast<uint16_t>(std::min<int64_t>(cols, n - n0));
    const Tile& panel = w.panels.at(static_cast<size_t>(n0 / l.panel));
    const uint32_t c0 = static_cast<uint32_t>(n0 % l.panel);
    for (int64_t r0 = 0; r0 < m; r0 += moving) {
      const uint32_t rows = static_cast<uint32_t>(std::min<int64_t>(moving, m - r0));
      const Tile psum = acc.next();
      for (int64_t kt = 0; kt < l.k_tiles; ++kt) {
        const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts, k - kt * parts));
        b.matmul(psum.region(0, wj, 0, rows), panel.region(0, kp, static_cast<uint32_t>(kt) * l.panel + c0, wj),
                 w.activation->region(0, kp, static_cast<uint32_t>(kt * m + r0), rows), kt > 0);
      }
      const AccessPattern y = next.activation->region(0, wj, static_cast<uint32_t>(j * m + r0), rows);
      SIGHTLINE_ASSERT(y.dtype == out_dtype);
      if (bias_columns) {
        b.tensor_scalar(AluOp::add, y, psum.region(0, wj, 0, rows), bias_columns->region(0, wj, static_cast<uint32_t>(j), 1));
      } else {
        b.copy(y, psum.region(0, wj, 0, rows));
      }
      if (epilogue) epilogue(y);
    }
  }
  if (bias_columns) b.free(*bias_columns);
}

}  // namespace sightline::kernels
