// A fused row group as ONE row-tiled loop whose intermediates never leave SBUF.
//
// A row program is what a `fused.rows` group computes: elementwise ops, reductions along the last dim
// (sum, mean, amax with keepdim), softmax / log_softmax along the last dim, rms_norm and layer_norm,
// over one row space [lead..., cols]. Every value is either a full row (last dim `cols`) or one
// scalar per row (last dim 1); a host scalar operand is an immediate of the instruction.
//
//   RowProgram p;
//   p.lead = {batch, seq};  p.cols = 512;
//   p.inputs = {{x_io, 0, x_desc}, {w_io, 0, w_desc}};        // values 0 and 1
//   p.steps = {{OpId::silu, {}, {0}, meta}, {OpId::mul, {}, {2, 1}, meta}};   // values 2 and 3
//   if (std::optional<std::string> why = emit_row_program(b, p, [&] { return output_operand; })) ...
//
// Per row tile (up to 128 rows on partitions): each input that varies with the row is loaded once from
// HBM into SBUF, every step runs on SBUF tiles, and only the last step's value is stored. Intermediates
// are f32, so an f32 chain rounds only at the result, except the full rows of a 16-bit step, which
// keep its dtype as the eager op's result does (the Vector engine then runs at its 16-bit rate, twice
// the 32-bit one, and the row takes half the SBUF); per-row values (statistics) stay f32. Inputs that are the same for every
// row (a weight [cols], a 0-dim tensor) are loaded once for the whole loop, on every partition. So the
// HBM traffic of the loop is its inputs once plus its output once. Intermediates share tiles by
// liveness (an elementwise step writes in place the row it reads last), and every tile rotates over up
// to three buffers so the next tile's loads overlap this tile's compute and store (the builder's hazard
// tracking orders the reuse).
//
// The loop is scheduled from the program's own ops, so a user's RMSNorm or layer_norm runs as fast as
// the hand-written kernels without being replaced by them: a unary activation absorbs the scalar
// affine chain it reads (rsqrt(mean(x * x) + eps) is one Scalar-engine activation with scale 1 / n and
// bias eps), a row sum of an activated row is that activation's accumulate output, a row's mean and
// variance written as mean(x) and mean((x - mean)^2) are one bn_stats pass, the steps more than one
// engine can run (scaling by a per-row value or an immediate, adding an immediate, a row sum; a binary
// op on Vector or GpSimd) are placed over the Vector, Scalar and GpSimd engines by the spec's rates,
// and the steps are cut into pipeline stages where the engine changes.
//
// Rows longer than fit SBUF: a program of elementwise steps only is also tiled along the row (column
// chunks); a program with a row-wide step (reduction, softmax, normalization) needs its whole row on
// chip and is not emitted. Programs whose steps compute integers are not emitted either (the engines
// compute in f32; the per-op kernels reproduce eager integer semantics). In both cases
// emit_row_program returns the reason and emits nothing, and the caller lowers the group op by op through
// HBM instead. i32 and bool inputs are fine: loaded as they are and read as f32 (bool as 0 or 1), as the
// per-op kernels read them.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/engine_balance.h"
#include "compiler/graph.h"
#include "sightline/kernels/builder.h"
#include "kernels/eager.h"
#include "sightline/ops.h"

namespace sightline::compiler {

// An HBM tensor of the program: I/O tensor `io`, its first element `offset` elements in, and the view.
struct RowOperand {
  uint32_t io = 0;
  int64_t offset = 0;
  kernels::TensorDesc desc;
};

// One op application. `args` are value ids: input i is value i, step k is value inputs.size() + k;
// kNoValue (-1) marks an absent optional input (rms_norm's weight, layer_norm's bias).
struct RowStep {
  OpId op = OpId::add;
  OpAttrs attrs;
  std::vector<int> args;
  TensorMeta meta;
};

struct RowProgram {
  Dims lead;         // the row dims, flattened onto partitions
  int64_t cols = 1;  // the row length
  std::vector<RowOperand> inputs;
  std::vector<RowStep> steps;  // in order; the last one is the result
};

// Why `program` cannot be emitted as one row loop with `sbuf_bytes` bytes of SBUF per partition free on
// a core of `spec` (whose engine rates the loop's schedule balances), or nullopt when it can.
std::optional<std::string> row_program_unsupported(const RowProgram& program, const device::Spec& spec,
                                                   uint32_t sbuf_bytes);

// Called with a row tile's result `y` (SBUF, the tile's rows on partitions from 0), the output rows it
// is stored to (`dst`, HBM) and the loop's own work per row tile on each engine (`per_tile`, by the
// spec's rates, as its steps are placed), for each tile that holds whole rows of a full-row result
// (compile()'s lowering transposes them into the next linear's a^T: a norm's result kept in SBUF).
// Called one tile late: after the next tile's steps are emitted (right after the tile's store for
// the last), so that the instructions it emits, which wait for this tile's last step, queue on each
// engine behind the next tile's work instead of holding it up.
using RowsComputed = std::function<void(const device::AccessPattern& y, const device::AccessPattern& dst,
                                        const Loads& per_tile)>;

// Input `input` of a row program already in SBUF (compile()'s lowering: the matmul epilogue before a
// norm leaves its result there, lower.cpp plan_kept_input): row tile k (rows 128k.., whole rows from
// partition 0) at columns [k * cols, (k + 1) * cols) of `tile`. The loop reads those rows there instead
// of loading them, when its tiles hold whole rows of one row space from row 0 and the input is
// contiguous; else it loads them from HBM as usual (the writer stores them there too).
// `invariants`: inputs that are one row for every row (a norm's weight), already broadcast onto every
// partition of their tile (loaded ahead of the kernel before, so that they do not queue behind its
// transfers); the loop reads them there when the tile holds the row as it would load it (its dtype and
// columns), and leaves the tile to its caller. `rows` false: only those, no input's rows.
struct RowsInSbuf {
  size_t input = 0;
  kernels::Tile tile;
  bool rows = true;
  std::vector<std::pair<size_t, kernels::Tile>> invariants;
};

// Emits `program` through `b`: `output` is called once, after the program is known to fit, for where
// the result goes (a view of shape [lead..., last dim of the result]). Returns the reason and emits
// nothing when the program is unsupported (see above). Tiles are freed again before returning.
// `input_rows`, when given, says where one input's rows already are; `*input_rows_read` (when given) is
// set to whether the loop read them there. `hook_steps` are the steps rows_computed adds to each tile,
// each with its time on every engine that can run it (kCannot elsewhere): the loop places its own
// steps beside them, so that the engines the hook will use are left room.
std::optional<std::string> emit_row_program(kernels::KernelBuilder& b, const RowProgram& program,
                                            const std::function<RowOperand()>& output,
                                            const RowsComputed& rows_computed = {},
                                            const RowsInSbuf* input_rows = nullptr, bool* input_rows_read = nullptr,
                                            std::span<const Loads> hook_steps = {});

}  // namespace sightline::compiler
