// Tile-level lowering: what each op means on the device, written once.
//
// Given an op's input tiles in SBUF/PSUM (one block of p partitions), an emitter adds to a
// KernelBuilder the instructions that compute the op's output tile. Loads, stores, tiling and buffer
// rotation are the caller's: the eager kernels (kernels/eager*.cpp) stream whole tensors through these
// emitters, the compiler's fused row loop (compiler/row_kernel.cpp) chains them on SBUF tiles, and its
// matmul epilogue (compiler/lower.cpp) applies them to each result tile before it is stored.
//
//   TileOp t{.op = OpId::softmax, .attrs = &attrs, .y = y, .p = p, .n = cols};
//   t.args = {{x}};
//   t.work = work;     // [p, n] f32 scratch (tile_op_needs(op).work)
//   t.stats = stats;   // kTileStatColumns f32 per row (tile_op_needs(op).stats)
//   emit_tile_op(b, t);
//
// An op that has no tile-level lowering is an error in emit_tile_op, the one place that knows them;
// tile_op_needs says beforehand whether an op has one and what scratch it needs.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "sightline/kernels/builder.h"
#include "sightline/ops.h"

namespace sightline::kernels {

// The activation that implements a unary op (gelu reads attrs.approximate); false when the op has none
// (pow is an ALU op).
bool unary_activation(OpId op, const OpAttrs& attrs, ActFunc& func);

// The Vector-engine ALU op of a binary elementwise op: out = alu(a, b), or alu(b, a) when `swapped`
// (rsub(a, b) = b - a). False for an op that has none.
struct BinaryAlu {
  AluOp alu = AluOp::add;
  bool swapped = false;
};
bool binary_alu(OpId op, BinaryAlu& out);

// The ALU op that folds partial results of a reduction op (sum, mean: add; amax: max), and the value
// an accumulator starts from. Throws for an op that is not such a reduction.
AluOp reduction_alu(OpId op);
float reduction_identity(AluOp alu);

// Per-row statistics columns (f32) the row-wide emitters use: softmax's max and sum, rms_norm's sum
// of squares and rstd, layer_norm's mean, variance and rstd.
inline constexpr uint32_t kTileStatColumns = 3;

// What an op's tile-level lowering is, and what scratch it needs.
struct TileOpNeeds {
  bool supported = false;  // has a tile-level lowering at all
  bool row_wide = false;   // needs the whole row (last dim) of its input in the tile
  bool stats = false;      // needs TileOp::stats
  bool work = false;       // needs TileOp::work (a full f32 row)
  bool scratch = false;    // needs TileOp::work as a second output-shaped tile (where, masked_fill)
};
TileOpNeeds tile_op_needs(OpId op);

// An input tile: a full [p, f] tile, or one element per partition ([p, 1]) that stands for a value
// constant along the free axis (a per-row scalar). An absent optional input has no pattern.
struct TileArg {
  AccessPattern ap;
  bool per_row = false;
};

struct TileOp {
  OpId op = OpId::add;
  const OpAttrs* attrs = nullptr;  // required
  AccessPattern y;                 // the output tile, [p, f] (or [p, 1] for a row reduction)
  std::vector<TileArg> args;       // the op's tensor inputs in call order
  // A binary op's second operand as an immediate (a host scalar, already in the op's operand dtype).
  std::optional<float> scalar;
  AccessPattern work;  // see TileOpNeeds
  Tile stats;          // see TileOpNeeds: a tile of at least kTileStatColumns f32 columns
  uint16_t p = 1;      // partitions of the tile
  uint32_t n = 1;      // the row length the row-wide ops reduce over (mean's count, rms_norm's n)
  // Where a binary elementwise op runs: the Vector engine or GpSimd (both run tensor_tensor and
  // tensor_scalar, docs/hardware-model.md §1.6; GpSimd only on SBUF operands). Other ops ignore it.
  Engine engine = Engine::vector;
};

// Emits the instructions that compute t.y from t.args. Throws sightline::Error naming the op when it
// has no tile-level lowering.
void emit_tile_op(KernelBuilder& b, const TileOp& t);

// The emitters emit_tile_op dispatches to, for callers that know their op's kind.
// Binary elementwise ops run on `on`: Engine::vector or Engine::gpsimd (SBUF operands only).
void emit_binary(KernelBuilder& b, OpId op, const AccessPattern& y, const TileArg& a, const TileArg& b_arg,
                 Engine on = Engine::vector);
void emit_binary_scalar(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& a, float scalar,
                        Engine on = Engine::vector);
void emit_unary(KernelBuilder& b, OpId op, const OpAttrs& attrs, const AccessPattern& y, const AccessPattern& x);
// where(cond, a, b) / masked_fill(x, mask, value): `picked` is an f32 scratch tile shaped like y.
void emit_select(KernelBuilder& b, OpId op, const OpAttrs& attrs, const AccessPattern& y,
                 std::span<const AccessPattern> args, const AccessPattern& picked);
// sum / mean / amax of each row of x (n elements) into the [p, 1] tile y.
void emit_row_reduce(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x, uint32_t n);
// What a reduction does to its folded value at the end: mean divides by the element count.
void emit_reduce_finish(KernelBuilder& b, OpId op, const AccessPattern& value, int64_t count);
void emit_softmax(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x,
                  const AccessPattern& work, const Tile& stats, uint16_t p);
// emit_softmax in two halves, for a kernel that overlaps one row tile's first half with the previous
// tile's second (the Vector engine runs its instructions in order, so a tile's last step, which waits
// for the Scalar engine's exp, would otherwise hold up the next tile's max): _exp leaves exp(x - max)
// in work (log_softmax: x - max, with y as scratch) and 1 / sum (log(sum)) in stats; _scale writes y.
void emit_softmax_exp(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x,
                      const AccessPattern& work, const Tile& stats, uint16_t p);
void emit_softmax_scale(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& work,
                        const Tile& stats, uint16_t p);
// weight / bias: absent patterns when the op has none.
void emit_rms_norm(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const AccessPattern& weight,
                   const Tile& stats, uint16_t p, uint32_t n, float eps);
// emit_rms_norm in two halves (see emit_softmax_exp): _stats leaves rstd in stats (y as scratch),
// _scale writes y from x and it.
void emit_rms_norm_stats(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                         uint16_t p, uint32_t n, float eps);
void emit_rms_norm_scale(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x,
                         const AccessPattern& weight, const Tile& stats, uint16_t p);
void emit_layer_norm(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x,
                     const AccessPattern& weight, const AccessPattern& bias, const Tile& stats, uint16_t p,
                     float eps);
// emit_layer_norm in two halves (see emit_softmax_exp): _normalize writes (x - mean) * rstd to y,
// _affine applies the weight and bias to it.
void emit_layer_norm_normalize(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                               uint16_t p, float eps);
void emit_layer_norm_affine(KernelBuilder& b, const AccessPattern& y, const AccessPattern& weight,
                            const AccessPattern& bias);
// emit_layer_norm_normalize in two halves: _center writes x - mean to y (the moments into stats),
// _scale multiplies y by rsqrt(var + eps) on the Scalar engine.
void emit_layer_norm_center(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                            uint16_t p);
void emit_layer_norm_scale(KernelBuilder& b, const AccessPattern& y, const Tile& stats, uint16_t p, float eps);

}  // namespace sightline::kernels
