#include "compiler/row_kernel.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <variant>

#include <fmt/format.h>

#include "compiler/engine_balance.h"
#include "device/core.h"
#include "kernels/eager_internal.h"
#include "kernels/emit.h"
#include "kernels/layout.h"
#include "sightline/error.h"

namespace sightline::compiler {
namespace {

using kernels::AccessPattern;
using kernels::KernelBuilder;
using kernels::Tile;
using kernels::TilePool;

constexpr int kMaxBuffers = 3;
constexpr uint32_t kStatColumns = 4;  // per-row statistics of softmax and the normalizations
static_assert(kStatColumns >= kernels::kTileStatColumns);
constexpr size_t kStatBuffers = 4;

// Tile bytes as the allocator places them (64-byte aligned).
uint64_t aligned(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

int normalized(int64_t dim, int rank) { return static_cast<int>(dim < 0 ? dim + rank : dim); }

// The host scalar as the eager backend sees it: a 0-dim tensor of the op's dtype.
float scalar_in(double value, DType dtype) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(f));
    case DType::f16:
      return f16_bits_to_float(float_to_f16_bits(f));
    default:
      return f;
  }
}

// Why a step is not a row step of this row space, or empty.
std::string step_problem(const RowProgram& p, const RowStep& s, int rank) {
  const OpInfo& info = op_info(s.op);
  if (s.meta.shape.size() != rank || (s.meta.shape.back() != p.cols && s.meta.shape.back() != 1)) {
    return fmt::format("{} produces {}, not a row of the row space [{}] x {}", info.name, s.meta.shape,
                       fmt::join(p.lead, ", "), p.cols);
  }
  if (!kernels::tile_op_needs(s.op).supported)
    return fmt::format("{} has no tile-level lowering (kernels/emit.h)", info.name);
  if (info.kind == OpKind::elementwise) return {};
  if (s.op == OpId::sum || s.op == OpId::mean || s.op == OpId::amax) {
    if (s.attrs.keepdim && s.attrs.dims.size() == 1 && normalized(s.attrs.dims[0], rank) == rank - 1)
      return {};
    return fmt::format("{} does not reduce the last dim with keepdim", info.name);
  }
  if (s.op == OpId::softmax || s.op == OpId::log_softmax) {
    if (normalized(s.attrs.dim, rank) == rank - 1) return {};
    return fmt::format("{} is not along the last dim", info.name);
  }
  if (s.op == OpId::rms_norm || s.op == OpId::layer_norm) return {};
  return fmt::format("{} is not a row op", info.name);
}

enum class Source : uint8_t { invariant, per_tile, step };

struct ValueInfo {
  Source source = Source::step;
  bool wide = true;  // a full row, else one element per row
  DType dtype = DType::f32;
  int last_use = -1;              // the last step reading it
  int slot = -1;                  // step values: their tile slot
  std::vector<int64_t> strides;   // inputs: element strides over [lead..., width]
  OpId first_reader = OpId::add;  // inputs: for profiler attribution of the load
  int moment = -1;  // a column of the tile's bn_stats moments (0 mean, 1 variance) instead of a slot
};

// How one step runs (schedule()). By default a step is its op's tile-level emitter (kernels/emit.h);
// the schedule may instead run it as one Scalar-engine activation func(x * scale + bias), fold it into
// the activation that reads it, or fold a row sum into the activation that produces its row.
struct StepPlan {
  std::vector<int> args;    // the values it reads (an activation reads the start of the chain it absorbed)
  bool elided = false;      // computed by its reader's activation (as its scale or bias): emits nothing
  bool on_scalar = false;   // one Scalar-engine activation
  kernels::Engine engine = kernels::Engine::vector;  // else where it runs: Vector, or GpSimd (a binary op)
  kernels::ActFunc func = kernels::ActFunc::identity;
  float scale = 1.0f, bias = 0.0f;
  int scale_by = -1;         // a per-row value that replaces `scale`
  bool accumulates = false;  // also writes its row sum into the next step's value (that step is folded)
  bool reduces = false;      // on_scalar: a sum / mean of x, through the accumulate output (x's copy to work)
  bool folded = false;       // a sum / mean that the previous step's activation accumulated
  bool raw_sum = false;      // a mean whose 1 / n its reader's activation applies: its value holds the sum
  bool to_scratch = false;   // its row is read by no step (only its folded sum is): written to scratch
  bool moments = false;      // a mean whose bn_stats pass also gives a variance step's value (find_moments)
};

// Where the row loop cuts a tile's steps into stages (stage_bounds).
struct Stages {
  std::vector<size_t> bounds;  // stage i runs steps [bounds[i], bounds[i + 1])
  bool within = false;         // the step at bounds[1] is an rms_norm split over stages 0 and 1
};

struct SlotKey {
  bool wide = true;
  DType dtype = DType::f32;
  bool operator==(const SlotKey&) const = default;
};

struct Plan {
  std::vector<ValueInfo> values;
  std::vector<StepPlan> steps;
  std::vector<SlotKey> slots;
  std::vector<int> work_slot;  // per step: a full f32 row it uses as scratch, or -1
  std::vector<size_t> slot_buffers;  // per slot: the buffers its ring rotates over (choose_stages)
  bool scratch = false;  // a ring of two f32 rows for outputs no step reads (StepPlan::to_scratch, reduces)
  Stages stages;
  bool stats = false;
  int64_t chunk = 0;  // columns per tile
  int buffers = 1;
  uint64_t spare = 0;  // SBUF bytes per partition the row tiles leave (choose_stages)
  Loads loads{};       // each engine's work per row tile as placed (schedule), by the spec's rates
};

uint64_t width_bytes(bool wide, int64_t chunk, DType dtype) {
  return aligned(static_cast<uint64_t>(wide ? chunk : 1) * dtype_size(dtype));
}

// Assigns tile slots to the step values by liveness: a slot is reused once its value is dead.
void assign_slots(const RowProgram& p, Plan& plan) {
  const size_t inputs = p.inputs.size();
  std::vector<int> free_slots;
  auto take = [&](SlotKey key) {
    for (size_t i = 0; i < free_slots.size(); ++i) {
      const int s = free_slots[i];
      if (plan.slots[static_cast<size_t>(s)] == key) {
        free_slots.erase(free_slots.begin() + static_cast<std::ptrdiff_t>(i));
        return s;
      }
    }
    plan.slots.push_back(key);
    return static_cast<int>(plan.slots.size()) - 1;
  };
  plan.work_slot.assign(p.steps.size(), -1);
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const StepPlan& sp = plan.steps[k];
    if (sp.elided || sp.moments) continue;
    ValueInfo& out = plan.values[inputs + k];
    const SlotKey key{out.wide, out.dtype};
    // An elementwise step may write the row it reads for the last time (the engines read each element
    // before writing it): a chain of them then lives in one slot, as in the hand-written kernels.
    int in_place = -1;
    if (!sp.to_scratch && ((sp.on_scalar && !sp.reduces) || op_info(p.steps[k].op).kind == OpKind::elementwise)) {
      for (int a : sp.args) {
        if (a < static_cast<int>(inputs)) continue;
        const ValueInfo& v = plan.values[static_cast<size_t>(a)];
        if (v.last_use == static_cast<int>(k) && v.slot >= 0 && plan.slots[static_cast<size_t>(v.slot)] == key) {
          in_place = v.slot;
          break;
        }
      }
    }
    out.slot = sp.to_scratch ? -1 : in_place >= 0 ? in_place : take(key);
    const kernels::TileOpNeeds needs = kernels::tile_op_needs(p.steps[k].op);
    if (!sp.on_scalar && (needs.work || needs.scratch)) plan.work_slot[k] = take({true, DType::f32});
    std::vector<int> released;
    for (int a : sp.args) {
      if (a < static_cast<int>(inputs) || std::find(released.begin(), released.end(), a) != released.end())
        continue;
      const ValueInfo& v = plan.values[static_cast<size_t>(a)];
      if (v.last_use == static_cast<int>(k) && v.slot >= 0 && v.slot != in_place) released.push_back(a);
    }
    if (out.last_use < 0 && out.slot >= 0 && k + 1 < p.steps.size())
      released.push_back(static_cast<int>(inputs + k));  // unused
    for (int a : released) free_slots.push_back(plan.values[static_cast<size_t>(a)].slot);
    if (plan.work_slot[k] >= 0) free_slots.push_back(plan.work_slot[k]);
  }
}

// Bytes per partition: what is loaded once, and what one row tile in flight needs.
void budget(const RowProgram& p, const Plan& plan, uint64_t& once, uint64_t& per_tile) {
  once = plan.stats ? kStatBuffers * aligned(kStatColumns * 4) : 0;
  if (plan.scratch) once += 2 * width_bytes(true, plan.chunk, DType::f32);
  per_tile = 0;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const ValueInfo& v = plan.values[i];
    if (v.last_use < 0) continue;
    (v.source == Source::invariant ? once : per_tile) += width_bytes(v.wide, plan.chunk, v.dtype);
  }
  for (const SlotKey& s : plan.slots) per_tile += width_bytes(s.wide, plan.chunk, s.dtype);
}

// ---- the schedule ----

// The mean and variance of a row, written as the user's ops m = mean(x), d = x - m, v = mean(d * d)
// (layer_norm's), are one Vector-engine bn_stats pass over x, as torch inductor fuses a var_mean into one
// Welford reduction: the mean's step writes both moments (f32, as every per-row value of the loop), the
// square and the variance's mean emit nothing, and their readers read the tile's moments. The square must
// have no other reader, and neither mean may be the program's result (whose dtype is the output's).
void find_moments(const RowProgram& p, Plan& plan, const std::vector<int>& uses) {
  const int inputs = static_cast<int>(p.inputs.size()), n = static_cast<int>(p.steps.size());
  auto step = [&](int v) -> const RowStep* {
    return v >= inputs && v < inputs + n ? &p.steps[static_cast<size_t>(v - inputs)] : nullptr;
  };
  auto row_mean = [&](const RowStep& s) {
    return s.op == OpId::mean && s.args.size() == 1 && plan.values[static_cast<size_t>(s.args[0])].wide;
  };
  for (int d = 0; d + 1 < n; ++d) {
    const RowStep& var = p.steps[static_cast<size_t>(d)];
    if (!row_mean(var)) continue;
    const RowStep* sq = step(var.args[0]);
    if (!sq || sq->op != OpId::mul || sq->attrs.has_scalar || sq->args.size() != 2 || sq->args[0] != sq->args[1] ||
        uses[static_cast<size_t>(var.args[0])] != 1)
      continue;
    const RowStep* centred = step(sq->args[0]);
    if (!centred || centred->op != OpId::sub || centred->attrs.has_scalar || centred->args.size() != 2) continue;
    const RowStep* mean = step(centred->args[1]);
    const int m = centred->args[1] - inputs;
    if (!mean || !row_mean(*mean) || mean->args[0] != centred->args[0] || plan.steps[static_cast<size_t>(m)].moments)
      continue;
    plan.steps[static_cast<size_t>(m)].moments = true;
    plan.steps[static_cast<size_t>(var.args[0] - inputs)].elided = true;
    plan.steps[static_cast<size_t>(d)].elided = true;
    plan.values[static_cast<size_t>(inputs + m)].moment = 0;
    plan.values[static_cast<size_t>(inputs + d)].moment = 1;
    plan.stats = true;
  }
}

// Decides how each step runs, from the user's ops alone (no op is replaced by a built-in):
//  0. a row's mean and variance are one bn_stats pass (find_moments);
//  1. a unary activation absorbs the scalar affine chain it reads, act((x * c) + d) -> one activation
//     with scale c and bias d (the Scalar engine computes func(x * scale + bias), rounding the product
//     and the sum as the separate ops do), and a mean read only there leaves its 1 / n to that scale;
//     x * x is the activation square;
//  2. a sum / mean of the previous step's activated row is that activation's accumulate output;
//  3. the steps more than one engine can compute (a row scaled by a per-row value or an immediate, an
//     immediate added: Vector, Scalar or GpSimd; a row sum: Vector or Scalar; any other binary
//     elementwise op: Vector or GpSimd) are placed by place(), so that no engine becomes the loop's
//     bottleneck; the rest run where their op's emitter puts them.
void schedule(const RowProgram& p, Plan& plan, const device::Spec& spec, std::span<const Loads> hook_steps) {
  const size_t inputs = p.inputs.size(), n = p.steps.size();
  const int64_t cols = p.cols;
  plan.steps.assign(n, StepPlan{});
  std::vector<int> uses(inputs + n, 0);
  for (size_t k = 0; k < n; ++k) {
    plan.steps[k].args = p.steps[k].args;
    for (int a : p.steps[k].args) {
      if (a != kNoValue) ++uses[static_cast<size_t>(a)];
    }
  }
  // The step computing value v, if v is a step value read once and `pred` holds for it.
  auto single_use_step = [&](int v, auto pred) {
    if (v < static_cast<int>(inputs) || uses[static_cast<size_t>(v)] != 1) return -1;
    const int j = v - static_cast<int>(inputs);
    const StepPlan& sj = plan.steps[static_cast<size_t>(j)];
    return !sj.elided && !sj.moments && pred(p.steps[static_cast<size_t>(j)]) ? j : -1;
  };
  auto wide = [&](int v) { return plan.values[static_cast<size_t>(v)].wide; };
  find_moments(p, plan, uses);
  for (size_t k = 0; k < n; ++k) {
    const RowStep& s = p.steps[k];
    StepPlan& sp = plan.steps[k];
    if (sp.elided) continue;
    kernels::ActFunc func{};
    if (s.op != OpId::to_copy && kernels::unary_activation(s.op, s.attrs, func)) {
      sp.on_scalar = true;
      sp.func = func;
      int v = s.args[0];
      const int add = single_use_step(v, [](const RowStep& t) {
        return (t.op == OpId::add || t.op == OpId::sub) && t.attrs.has_scalar;
      });
      if (add >= 0) {
        const RowStep& a = p.steps[static_cast<size_t>(add)];
        const float c = scalar_in(a.attrs.scalar, a.meta.dtype);
        sp.bias = a.op == OpId::sub ? -c : c;
        plan.steps[static_cast<size_t>(add)].elided = true;
        v = a.args[0];
      }
      const int mul = single_use_step(v, [](const RowStep& t) { return t.op == OpId::mul && t.attrs.has_scalar; });
      const int mean = single_use_step(v, [](const RowStep& t) { return t.op == OpId::mean; });
      if (mul >= 0) {
        const RowStep& m = p.steps[static_cast<size_t>(mul)];
        sp.scale = scalar_in(m.attrs.scalar, m.meta.dtype);
        plan.steps[static_cast<size_t>(mul)].elided = true;
        v = m.args[0];
      } else if (mean >= 0) {
        plan.steps[static_cast<size_t>(mean)].raw_sum = true;
        sp.scale = cols > 0 ? 1.0f / static_cast<float>(cols) : 0.0f;  // emit_reduce_finish's factor
      }
      sp.args = {v};
    } else if (s.op == OpId::mul && !s.attrs.has_scalar && s.args.size() == 2 && s.args[0] == s.args[1]) {
      sp.on_scalar = true;
      sp.func = kernels::ActFunc::square;
      sp.args = {s.args[0]};
    }
  }
  // Step k sums the previous step's full-row activation: folded into it (not the last step, whose
  // dtype is the output's rather than the accumulator's f32).
  auto fold_sum = [&](size_t k) {
    const RowStep& s = p.steps[k];
    const int prev = static_cast<int>(inputs + k) - 1;
    const StepPlan& sk = plan.steps[k];
    if (k == 0 || k + 1 >= n || sk.folded || sk.elided || sk.moments || (s.op != OpId::sum && s.op != OpId::mean) ||
        s.args.size() != 1 || s.args[0] != prev || !wide(prev))
      return false;
    StepPlan& producer = plan.steps[k - 1];
    if (!producer.on_scalar || producer.reduces || producer.accumulates) return false;
    producer.accumulates = true;
    plan.steps[k].folded = true;
    plan.steps[k].on_scalar = plan.steps[k].reduces = false;
    return true;
  };
  // Each running step's time per row tile on every engine that can run it (kCannot elsewhere).
  std::vector<Choice> choices;  // the steps with more than one engine
  Loads fixed{};                // the steps with one
  std::vector<int> engine_of(n, -1);
  for (size_t k = 0; k < n; ++k) {
    const RowStep& s = p.steps[k];
    const StepPlan& sp = plan.steps[k];
    if (sp.elided || fold_sum(k)) continue;
    const int y = static_cast<int>(inputs + k);
    const double elements = wide(y) ? static_cast<double>(cols) : 1.0;
    // The engines run at their 16-bit rate only when the output and the row operands are all 16-bit.
    bool narrow = dtype_size(plan.values[static_cast<size_t>(y)].dtype) == 2;
    for (int a : s.args) {
      if (a != kNoValue && wide(a)) narrow = narrow && dtype_size(plan.values[static_cast<size_t>(a)].dtype) == 2;
    }
    const DType dtype = narrow ? DType::bf16 : DType::f32;
    if (sp.moments) {  // one bn_stats pass over the row, at the 32-bit rate of its f32 output
      fixed[kOnVector] += engine_ns(spec, spec.vector, static_cast<double>(cols), 1, DType::f32);
      engine_of[k] = kOnVector;
      continue;
    }
    if (sp.on_scalar) {
      fixed[kOnScalar] += engine_ns(spec, spec.scalar, elements, 1, dtype);
      engine_of[k] = kOnScalar;
      continue;
    }
    const bool immediate = s.attrs.has_scalar && (s.op == OpId::mul || s.op == OpId::add || s.op == OpId::sub);
    const bool per_row_scale = s.op == OpId::mul && !s.attrs.has_scalar && s.args.size() == 2 &&
                               wide(s.args[0]) != wide(s.args[1]) && wide(y);
    const bool row_sum = (s.op == OpId::sum || s.op == OpId::mean) && s.args.size() == 1 && wide(s.args[0]);
    int tensor_inputs = 0;
    for (int a : s.args) tensor_inputs += a != kNoValue && wide(a);
    kernels::BinaryAlu alu;
    // tensor_tensor and tensor_scalar run on GpSimd too (docs/hardware-model.md §1.6); every row-loop
    // operand is in SBUF, which GpSimd reaches.
    const bool binary = kernels::binary_alu(s.op, alu) && wide(y);
    const int passes = std::max(tensor_inputs, 1);
    const double gpsimd_ns = binary ? engine_ns(spec, spec.gpsimd, elements, passes, dtype) : kCannot;
    if ((immediate && wide(y)) || per_row_scale) {
      choices.push_back({k,
                         {engine_ns(spec, spec.vector, elements, 1, dtype),
                          engine_ns(spec, spec.scalar, elements, 1, dtype), gpsimd_ns}});
    } else if (row_sum) {
      const auto c = static_cast<double>(cols);
      choices.push_back(
          {k, {engine_ns(spec, spec.vector, c, 1, dtype), engine_ns(spec, spec.scalar, c, 1, dtype, true), kCannot}});
    } else if (binary) {
      choices.push_back({k, {engine_ns(spec, spec.vector, elements, passes, dtype), kCannot, gpsimd_ns}});
    } else {
      // A row-wide op (softmax, a normalization) makes about two passes over its row; a reduction one.
      const bool composite = kernels::tile_op_needs(s.op).stats;
      const bool whole_row = composite || kernels::tile_op_needs(s.op).row_wide || wide(y);
      fixed[kOnVector] += engine_ns(spec, spec.vector, whole_row ? static_cast<double>(cols) : 1.0,
                                    composite ? 2 : std::max(tensor_inputs, 1), dtype);
      engine_of[k] = kOnVector;
    }
  }
  int64_t rows = 1;
  for (int64_t d : p.lead) rows *= d;
  const double tiles = static_cast<double>(std::max<int64_t>(1, (rows + spec.partitions - 1) / spec.partitions));
  // A row tile's HBM time: its per-tile inputs in, its result out, at the core's HBM bandwidth.
  double tile_bytes = dtype_size(p.steps.back().meta.dtype) * (wide(static_cast<int>(inputs + n) - 1) ? cols : 1);
  for (size_t i = 0; i < inputs; ++i) {
    const ValueInfo& v = plan.values[i];
    if (std::any_of(v.strides.begin(), v.strides.end() - 1, [](int64_t st) { return st != 0; }))
      tile_bytes += static_cast<double>(dtype_size(v.dtype) * (v.wide ? cols : 1));
  }
  const double dma_ns =
      static_cast<double>(std::min<int64_t>(rows, spec.partitions)) * tile_bytes / spec.hbm.bytes_per_ns;
  // A loop no longer than its pipeline (kMaxBuffers tiles in flight) is paced by its loads: no tile waits
  // for an engine to finish the tile before it. In a longer one the busiest engine sets the pace even
  // below the HBM time, since a tile's store waits for its chain and the loads behind that store in
  // their queues wait with it (measured: softmax's division moved to GpSimd is faster at 4096 x 4096).
  // The work the caller's rows_computed hook adds to each tile (hook_steps), placed with the loop's own
  // steps so that the engines it leaves least loaded take them; plan.loads holds the loop's own.
  const size_t own = choices.size();
  for (const Loads& h : hook_steps) {
    choices.push_back({engine_of.size(), h});
    engine_of.push_back(-1);
  }
  std::vector<int> placed = place(choices, fixed, engine_of, tiles, tiles <= kMaxBuffers ? dma_ns : 0.0);
  choices.resize(own);
  placed.resize(own);
  plan.loads = fixed;
  for (size_t c = 0; c < choices.size(); ++c) {
    const RowStep& s = p.steps[choices[c].k];
    StepPlan& sp = plan.steps[choices[c].k];
    plan.loads[static_cast<size_t>(placed[c])] += choices[c].ns[static_cast<size_t>(placed[c])];
    if (placed[c] == kOnGpSimd) sp.engine = kernels::Engine::gpsimd;
    if (placed[c] != kOnScalar) continue;
    sp.on_scalar = true;
    sp.func = kernels::ActFunc::identity;
    // A product's bias is -0, the additive identity: + 0 would turn a product of -0 (x * 0 with x < 0,
    // a masked row) into +0, where the Vector op keeps the sign.
    if (s.op == OpId::mul) sp.bias = -0.0f;
    if (s.op == OpId::sum || s.op == OpId::mean) {
      sp.reduces = true;
    } else if (s.attrs.has_scalar) {
      const float v = scalar_in(s.attrs.scalar, s.meta.dtype);
      (s.op == OpId::mul ? sp.scale : sp.bias) = s.op == OpId::sub ? -v : v;
      sp.args = {s.args[0]};
    } else {
      const int row = wide(s.args[0]) ? 0 : 1;
      sp.scale_by = s.args[static_cast<size_t>(1 - row)];
      sp.args = {s.args[static_cast<size_t>(row)], sp.scale_by};
    }
  }
  for (size_t k = 0; k < n; ++k) fold_sum(k);  // sums of the rows the flexible steps now activate
  for (size_t k = 0; k < n; ++k) {
    StepPlan& sp = plan.steps[k];
    sp.to_scratch = sp.accumulates && uses[inputs + k] == 1;  // x * x whose only reader is its mean
    plan.scratch |= sp.to_scratch || sp.reduces;
  }
}

// Where the row loop cuts a tile's steps into stages (pipeline_staged, eager_internal.h): stage i runs
// steps [bounds[i], bounds[i + 1]); with `within`, the step at bounds[1] is an rms_norm whose statistics
// half (its sum of squares and rsqrt on the Scalar engine) runs in stage 0 and its scaling (Vector) in
// stage 1. A cut goes where the engine changes (folded and elided steps belong to the step before
// them), so that each engine, which runs its instructions in order, works on a neighbouring tile instead
// of waiting for this tile's other engine (emit_row_program then times the subsets of these cuts and
// keeps the fastest). `both_ways` false: only where a Vector step follows a step on another engine
// (softmax: max, shift and exp | the division). Only the first stage may read the loaded row tiles (the
// next loads run ahead into their buffers), and there are at most `max_stages` stages.
Stages stage_bounds(const RowProgram& p, const Plan& plan, bool both_ways, size_t max_stages) {
  const size_t n = p.steps.size();
  Stages one{{0, n}, false};
  if (plan.buffers < 2) return one;
  size_t inputs_read_until = 1;  // steps before this read every per-tile input they need
  for (size_t k = 0; k < n; ++k) {
    if (plan.steps[k].elided) continue;
    for (int a : plan.steps[k].args) {
      if (a >= 0 && static_cast<size_t>(a) < p.inputs.size() &&
          plan.values[static_cast<size_t>(a)].source == Source::per_tile)
        inputs_read_until = std::max(inputs_read_until, k + 1);
    }
  }
  for (size_t k = n; k-- > inputs_read_until;) {
    if (p.steps[k].op == OpId::rms_norm && !plan.steps[k].elided) return {{0, k, n}, true};
  }
  Stages staged{{0}, false};
  int engine = -1;  // of the last step that runs
  for (size_t k = 0; k < n; ++k) {
    const StepPlan& sp = plan.steps[k];
    if (sp.elided || sp.folded) continue;
    const int here = sp.on_scalar ? kOnScalar : sp.engine == kernels::Engine::gpsimd ? kOnGpSimd : kOnVector;
    if (engine >= 0 && here != engine && (both_ways || here == kOnVector) && k >= inputs_read_until &&
        staged.bounds.size() < max_stages)
      staged.bounds.push_back(k);
    engine = here;
  }
  staged.bounds.push_back(n);
  return staged;
}

// Sets `stages` and each slot's ring: a slot used from stage a to stage b of a tile rotates over
// max(buffers, b - a + 2) buffers, so that a tile's first use of a buffer comes two steps of the
// pipeline after the last use by the tile before it in the ring (one for its store or last reader to
// drain). False when the longer rings do not fit the plan's spare SBUF.
bool fit_stages(const RowProgram& p, Plan& plan, Stages stages) {
  const size_t inputs = p.inputs.size(), n = p.steps.size();
  plan.stages = std::move(stages);
  std::vector<size_t> lo(n), hi(n);
  for (size_t st = 0; st + 1 < plan.stages.bounds.size(); ++st) {
    for (size_t k = plan.stages.bounds[st]; k < plan.stages.bounds[st + 1]; ++k) lo[k] = hi[k] = st;
  }
  if (plan.stages.within) lo[plan.stages.bounds[1]] = 0;
  std::vector<size_t> first(plan.slots.size(), n), last(plan.slots.size(), 0);
  auto use = [&](int slot, size_t k) {
    if (slot < 0) return;
    first[static_cast<size_t>(slot)] = std::min(first[static_cast<size_t>(slot)], lo[k]);
    last[static_cast<size_t>(slot)] = std::max(last[static_cast<size_t>(slot)], hi[k]);
  };
  for (size_t k = 0; k < n; ++k) {
    if (plan.steps[k].elided) continue;
    use(plan.values[inputs + k].slot, k);
    use(plan.work_slot[k], k);
    for (int a : plan.steps[k].args) {
      if (a >= static_cast<int>(inputs)) use(plan.values[static_cast<size_t>(a)].slot, k);
    }
  }
  uint64_t extra = 0;
  plan.slot_buffers.assign(plan.slots.size(), static_cast<size_t>(plan.buffers));
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    if (first[i] > last[i]) continue;
    plan.slot_buffers[i] = std::max(plan.slot_buffers[i], last[i] - first[i] + 2);
    extra += (plan.slot_buffers[i] - static_cast<size_t>(plan.buffers)) *
             width_bytes(plan.slots[i].wide, plan.chunk, plan.slots[i].dtype);
  }
  return extra <= plan.spare;
}

// The stages of a plan before any is timed: cutting at every engine change first (as many stages as
// that makes), then at the first `buffers` - 1 of them, then only before a Vector step, then not at
// all, whichever first fits the `spare` bytes of SBUF the row tiles leave.
void choose_stages(const RowProgram& p, Plan& plan, uint64_t spare) {
  const size_t n = p.steps.size();
  const auto buffers = static_cast<size_t>(plan.buffers);
  plan.spare = spare;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (fit_stages(p, plan,
                   attempt == 0   ? stage_bounds(p, plan, true, n)
                   : attempt == 1 ? stage_bounds(p, plan, true, buffers)
                   : attempt == 2 ? stage_bounds(p, plan, false, buffers)
                                  : Stages{{0, n}, false}))
      return;
  }
}

// The program without the casts that round nothing an engine would not round anyway, as a compiler
// folds a cast into the instruction beside it: the engines read every dtype as f32 and round only when
// they write (isa.h), so
//  - a cast of a 16-bit float to f32 is its input itself (exact): its readers read the input;
//  - a cast of an f32 full row to a 16-bit float, the only reader of a single-instruction elementwise
//    step (a binary op, a unary activation), is that step writing the 16-bit dtype: the step computes
//    its f32 result and rounds it once, as the cast rounds the stored f32 result.
// Each leaves the bits as they were and saves a pass over the row (LlamaRMSNorm's x.to(f32) and
// (h * rstd).to(bf16): two Vector-engine copies per row tile). The cast that is the result stays unless
// the step it rounds is the one before (that step then writes the result's dtype); so does a cast of a
// step that an activation or a row sum reads (see below).
RowProgram without_exact_casts(const RowProgram& in) {
  const size_t inputs = in.inputs.size();
  std::vector<RowStep> steps = in.steps;
  std::vector<int> uses(inputs + steps.size(), 0);
  for (const RowStep& s : steps) {
    for (int a : s.args) {
      if (a != kNoValue) ++uses[static_cast<size_t>(a)];
    }
  }
  const auto dtype_of = [&](int v) {
    return static_cast<size_t>(v) < inputs ? in.inputs[static_cast<size_t>(v)].desc.dtype
                                           : steps[static_cast<size_t>(v) - inputs].meta.dtype;
  };
  const auto sixteen_bit_float = [](DType d) { return d == DType::bf16 || d == DType::f16; };
  std::vector<int> alias(inputs + steps.size());
  for (size_t v = 0; v < alias.size(); ++v) alias[v] = static_cast<int>(v);
  std::vector<bool> dropped(steps.size(), false);
  for (size_t k = 0; k < steps.size(); ++k) {
    RowStep& s = steps[k];
    for (int& a : s.args) {
      if (a != kNoValue) a = alias[static_cast<size_t>(a)];
    }
    if (s.op != OpId::to_copy || s.args.size() != 1 || s.args[0] == kNoValue) continue;
    const int v = s.args[0];
    const bool last = k + 1 == steps.size();
    // schedule() folds a step into the activation or the row sum that reads it (an immediate's add or
    // product into the activation's bias or scale, an activation into its sum's accumulation), computing
    // the pair in f32: across a dropped cast that would skip its rounding. So a cast whose input is a
    // step stays when an activation or a row sum reads it.
    const bool folding_reader = std::any_of(steps.begin() + static_cast<std::ptrdiff_t>(k) + 1, steps.end(), [&](const RowStep& t) {
      kernels::ActFunc f{};
      const bool reads = std::find(t.args.begin(), t.args.end(), static_cast<int>(inputs + k)) != t.args.end();
      return reads && (t.op == OpId::sum || t.op == OpId::mean ||
                       (t.op != OpId::to_copy && kernels::unary_activation(t.op, t.attrs, f)));
    });
    if (static_cast<size_t>(v) >= inputs && folding_reader) continue;
    if (!last && s.meta.dtype == DType::f32 && sixteen_bit_float(dtype_of(v))) {
      alias[inputs + k] = v;
      dropped[k] = true;
      continue;
    }
    if (static_cast<size_t>(v) < inputs || !sixteen_bit_float(s.meta.dtype) || uses[static_cast<size_t>(v)] != 1)
      continue;
    const size_t j = static_cast<size_t>(v) - inputs;
    RowStep& producer = steps[j];
    kernels::ActFunc func{};
    kernels::BinaryAlu alu{};
    const bool binary = producer.op == OpId::mul || producer.op == OpId::add || producer.op == OpId::sub;
    const bool one_instruction = (binary && kernels::binary_alu(producer.op, alu)) ||
                                 (producer.op != OpId::to_copy && kernels::unary_activation(producer.op, producer.attrs, func));
    const bool full_row = !producer.meta.shape.empty() && producer.meta.shape.back() == in.cols &&
                          s.meta.shape == producer.meta.shape;
    if (producer.meta.dtype != DType::f32 || !one_instruction || !full_row || dropped[j] || (last && j + 1 != k))
      continue;
    producer.meta.dtype = s.meta.dtype;
    alias[inputs + k] = v;
    dropped[k] = true;
  }
  RowProgram out = in;
  out.steps.clear();
  std::vector<int> renumbered(inputs + steps.size(), kNoValue);
  for (size_t i = 0; i < inputs; ++i) renumbered[i] = static_cast<int>(i);
  for (size_t k = 0; k < steps.size(); ++k) {
    if (dropped[k]) continue;
    RowStep s = steps[k];
    for (int& a : s.args) {
      if (a != kNoValue) a = renumbered[static_cast<size_t>(a)];
    }
    renumbered[inputs + k] = static_cast<int>(inputs + out.steps.size());
    out.steps.push_back(std::move(s));
  }
  return out;
}

std::variant<Plan, std::string> make_plan(const RowProgram& p, const device::Spec& spec, uint32_t sbuf_bytes,
                                          std::span<const Loads> hook_steps = {}) {
  if (p.steps.empty()) return std::string("the group has no ops");
  const int rank = p.lead.size() + 1;
  Plan plan;
  plan.values.resize(p.inputs.size() + p.steps.size());
  bool row_wide = false;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const kernels::TensorDesc& d = p.inputs[i].desc;
    ValueInfo& v = plan.values[i];
    // An i32 or bool input (an attention mask, a count) is fine: only floating steps read it (integer
    // steps are refused below), and an engine reads its tile as f32 (bool as 0 or 1) as the per-op
    // kernels do. (Llama's causal mask, cast and scaled, was once slower as one loop than as the per-op
    // kernels; with the rotated projections emitted first it is faster: bench/README.md, issue 19.)
    if (!dtype_is_floating(d.dtype) && d.dtype != DType::i32 && d.dtype != DType::boolean)
      return fmt::format("input {} holds integers ({})", i, dtype_name(d.dtype));
    const int64_t width = d.shape.size() ? d.shape.back() : 1;
    if (d.shape.size() > rank || (width != p.cols && width != 1)) {
      return fmt::format("input {} of shape {} is not a row or a per-row scalar of [{}] x {}", i, d.shape,
                         fmt::join(p.lead, ", "), p.cols);
    }
    v.wide = width == p.cols;
    v.dtype = d.dtype;
    Dims shape = p.lead;
    shape.push_back(width);
    v.strides = kernels::broadcast_strides(d, shape);
  }
  const size_t inputs = p.inputs.size();
  for (size_t k = 0; k < p.steps.size(); ++k) {
    const RowStep& s = p.steps[k];
    if (std::string problem = step_problem(p, s, rank); !problem.empty()) return problem;
    if (!dtype_is_floating(s.meta.dtype)) {
      return fmt::format("{} computes integers ({})", op_name(s.op), dtype_name(s.meta.dtype));
    }
    const kernels::TileOpNeeds needs = kernels::tile_op_needs(s.op);
    row_wide |= needs.row_wide;
    plan.stats |= needs.stats;
    ValueInfo& out = plan.values[inputs + k];
    out.wide = s.meta.shape.back() == p.cols;
    // A select's tiles are full rows (kernels::emit_select), but for masked_fill's mask, which may be one
    // value per row.
    if (op_is_select(s.op)) {
      for (size_t a = 0; a < s.args.size(); ++a) {
        const bool narrow_mask = s.op == OpId::masked_fill && a == 1;
        if (s.args[a] != kNoValue && !narrow_mask && !plan.values[static_cast<size_t>(s.args[a])].wide)
          return fmt::format("{} reads one value per row as operand {}", op_name(s.op), a);
      }
      if (!out.wide) return fmt::format("{} writes one value per row", op_name(s.op));
    }
    const bool last = k + 1 == p.steps.size();
    // f32, but a full row of a 16-bit step keeps its dtype, as eager rounds it (row_kernel.h).
    out.dtype =
        last || s.op == OpId::to_copy || (out.wide && dtype_size(s.meta.dtype) == 2) ? s.meta.dtype : DType::f32;
    for (int a : s.args) {
      SIGHTLINE_ASSERT_MSG(a == kNoValue || (a >= 0 && static_cast<size_t>(a) < inputs + k),
                           "row step {} reads value {}", k, a);
    }
  }
  schedule(p, plan, spec, hook_steps);
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (plan.steps[k].elided) continue;
    for (int a : plan.steps[k].args) {
      if (a == kNoValue) continue;
      ValueInfo& in = plan.values[static_cast<size_t>(a)];
      if (static_cast<size_t>(a) < inputs && in.last_use < 0) in.first_reader = p.steps[k].op;
      in.last_use = static_cast<int>(k);
    }
  }
  assign_slots(p, plan);
  // Whole rows first; a program of elementwise steps may also be cut along the row.
  const int64_t widest = row_wide ? p.cols : std::min<int64_t>(p.cols, kernels::kStreamFree);
  uint64_t once = 0, per_tile = 0;
  for (plan.chunk = std::max<int64_t>(widest, 1);; plan.chunk = (plan.chunk + 1) / 2) {
    const bool whole = plan.chunk >= p.cols;
    for (size_t i = 0; i < inputs; ++i) {
      // An input the same for every row is loaded once, unless its row is cut into chunks.
      ValueInfo& v = plan.values[i];
      const bool varies =
          std::any_of(v.strides.begin(), v.strides.end() - 1, [](int64_t s) { return s != 0; });
      v.source = varies || (!whole && v.wide) ? Source::per_tile : Source::invariant;
    }
    budget(p, plan, once, per_tile);
    const uint64_t buffers = once < sbuf_bytes ? (sbuf_bytes - once) / std::max<uint64_t>(per_tile, 1) : 0;
    const uint64_t wanted = row_wide ? 1 : 2;  // a cut row can always be cut further to double buffer
    if (buffers >= wanted) {
      plan.buffers = static_cast<int>(std::min<uint64_t>(kMaxBuffers, buffers));
      choose_stages(p, plan, sbuf_bytes - once - per_tile * static_cast<uint64_t>(plan.buffers));
      return plan;
    }
    if (row_wide || plan.chunk == 1) break;
  }
  return fmt::format(
      "rows of {} elements need {} bytes per partition for one row tile ({} loaded once), more than the {} "
      "bytes of SBUF free{}",
      p.cols, per_tile, once, sbuf_bytes,
      row_wide
          ? "; the group has row-wide ops (reductions, softmax, normalizations), so its rows cannot be cut"
          : "");
}

struct RowTile {
  std::vector<int64_t> offset;  // per nest operand: per-tile inputs, then the output
  uint16_t partitions = 1;
  int64_t c0 = 0;
  uint32_t free = 1;
};

class Emitter {
 public:
  Emitter(KernelBuilder& b, const RowProgram& p, const Plan& plan)
      : b_(b), p_(p), plan_(plan) {}

  RowsComputed rows_computed_;  // emit_row_program's caller's, called for each tile of whole rows
  const RowsInSbuf* input_rows_ = nullptr;  // emit_row_program's caller's: an input already in SBUF
  bool input_rows_read_ = false;            // the loop read that input there

  void run(const RowOperand& out) {
    const size_t inputs = p_.inputs.size();
    const ValueInfo& root = plan_.values.back();
    // Iteration space: the lead dims, with the per-tile inputs' and the output's strides.
    kernels::LoopNest nest;
    nest.sizes.assign(p_.lead.begin(), p_.lead.end());
    std::vector<size_t> tiled;  // per-tile inputs, by nest operand
    for (size_t i = 0; i < inputs; ++i) {
      const ValueInfo& v = plan_.values[i];
      if (v.source != Source::per_tile || v.last_use < 0) continue;
      tiled.push_back(i);
      nest.strides.emplace_back(v.strides.begin(), v.strides.end() - 1);
    }
    Dims out_space = p_.lead;
    out_space.push_back(root.wide ? p_.cols : 1);
    const std::vector<int64_t> out_strides = kernels::broadcast_strides(out.desc, out_space);
    nest.strides.emplace_back(out_strides.begin(), out_strides.end() - 1);
    nest = nest.coalesced();
    if (p_.cols == 0) return;
    for (int64_t s : nest.sizes) {
      if (s == 0) return;
    }
    const size_t operands = nest.strides.size();
    const size_t nest_rank = nest.sizes.size();
    const int64_t rows = nest_rank ? nest.sizes.back() : 1;
    std::vector<int64_t> row_stride(operands, 0);
    for (size_t o = 0; o < operands && nest_rank; ++o) row_stride[o] = nest.strides[o].back();
    const std::vector<int64_t> outer =
        nest_rank ? std::vector<int64_t>(nest.sizes.begin(), nest.sizes.end() - 1) : std::vector<int64_t>{};
    const uint16_t parts = b_.partitions();
    std::vector<RowTile> tiles;
    kernels::for_each_index(outer, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> base(operands, 0);
      for (size_t o = 0; o < operands; ++o) {
        for (size_t d = 0; d < idx.size(); ++d) base[o] += idx[d] * nest.strides[o][d];
      }
      for (int64_t r0 = 0; r0 < rows; r0 += parts) {
        for (int64_t c0 = 0; c0 < p_.cols; c0 += plan_.chunk) {
          RowTile t;
          t.partitions = static_cast<uint16_t>(std::min<int64_t>(parts, rows - r0));
          t.c0 = c0;
          t.free = static_cast<uint32_t>(std::min<int64_t>(plan_.chunk, p_.cols - c0));
          for (size_t o = 0; o < operands; ++o) t.offset.push_back(base[o] + r0 * row_stride[o]);
          tiles.push_back(std::move(t));
        }
      }
    });
    // An input whose rows are already in SBUF (input_rows_): read there when every tile is whole rows
    // of one row space from row 0 (tile t holds rows 128t..) and the input is laid out as the writer's
    // result, contiguous.
    const RowsInSbuf* kept = input_rows_ && input_rows_->rows ? input_rows_ : nullptr;
    if (kept) {
      const RowOperand& in = p_.inputs[kept->input];
      const ValueInfo& v = plan_.values[kept->input];
      const bool whole_rows = outer.empty() && plan_.chunk >= p_.cols && v.source == Source::per_tile &&
                              v.wide && v.last_use >= 0 && in.desc.dtype == kept->tile.dtype && v.dtype == kept->tile.dtype &&
                              in.desc.strides == contiguous_strides(in.desc.shape) &&
                              in.desc.shape.product() == rows * p_.cols &&
                              kept->tile.free_elements >= static_cast<uint32_t>(tiles.size() * p_.cols);
      if (!whole_rows) kept = nullptr;
    }
    input_rows_read_ = kept != nullptr;
    allocate();
    // Software pipeline: the loads of the next buffers-1 tiles go out before this tile's compute and
    // store, so no DMA queue holds a load behind a store that waits for compute; with a stage split the
    // steps after it are emitted one tile later (pipeline_staged).
    std::vector<std::vector<AccessPattern>> loaded(tiles.size());
    std::vector<std::vector<Tile>> slots(tiles.size());
    auto load = [&](size_t t) {
      const RowTile& tile = tiles[t];
      for (size_t o = 0; o < tiled.size(); ++o) {
        const size_t i = tiled[o];
        const ValueInfo& v = plan_.values[i];
        const RowOperand& in = p_.inputs[i];
        const uint32_t w = v.wide ? tile.free : 1;
        if (kept && i == kept->input) {
          loaded[t].push_back(kept->tile.region(0, tile.partitions, static_cast<uint32_t>(t * p_.cols), w));
          continue;
        }
        const int64_t col_stride = v.strides.back();
        const AccessPattern ap = input_pools_[o].next().region(0, tile.partitions, 0, w);
        b_.set_source_op(op_name(v.first_reader));
        b_.load(ap, kernels::hbm_pattern(in.io, in.desc.dtype,
                                         in.offset + tile.offset[o] + (v.wide ? tile.c0 * col_stride : 0),
                                         tile.partitions, row_stride[o],
                                         {{w, static_cast<int32_t>(col_stride)}}));
        loaded[t].push_back(ap);
      }
    };
    const Stages& split = plan_.stages;
    const size_t stages = split.bounds.size() - 1;
    split_stats_.assign(tiles.size(), Tile{});
    moments_.assign(tiles.size(), Tile{});
    // The tile whose rows_computed_ call waits for the next tile's steps (RowsComputed). Tile t + B
    // takes tile t's buffer of a ring of B, and the steps of tiles up to t + stages are emitted before
    // tile t's call: only a ring of more buffers than stages keeps the result there until the call
    // (else each tile's call comes right after its store).
    std::optional<std::pair<AccessPattern, AccessPattern>> pending;
    const int result_slot = plan_.values[p_.inputs.size() + p_.steps.size() - 1].slot;
    const bool defer = result_slot >= 0 && plan_.slot_buffers[static_cast<size_t>(result_slot)] > stages;
    auto stage = [&](size_t st, size_t t) {
      const RowTile& tile = tiles[t];
      tile_ = t;
      if (st == 0) {
        for (TilePool& pool : slot_pools_) slots[t].push_back(pool.next());
      }
      current_ = slots[t];
      for (size_t o = 0; o < tiled.size(); ++o) tile_input_[tiled[o]] = loaded[t][o];
      size_t k = split.bounds[st];
      if (split.within && st == 1) step(k++, tile.partitions, tile.free, Half::second, t);
      for (; k < split.bounds[st + 1]; ++k) step(k, tile.partitions, tile.free);
      if (split.within && st == 0) step(k, tile.partitions, tile.free, Half::first, t);
      if (st + 1 < stages) return;
      const uint32_t w = root.wide ? tile.free : 1;
      const int64_t col_stride = out_strides.back();
      b_.set_source_op(op_name(p_.steps.back().op));
      const AccessPattern dst =
          kernels::hbm_pattern(out.io, out.desc.dtype,
                               out.offset + tile.offset.back() + (root.wide ? tile.c0 * col_stride : 0),
                               tile.partitions, row_stride.back(), {{w, static_cast<int32_t>(col_stride)}});
      const AccessPattern y = value(p_.inputs.size() + p_.steps.size() - 1, tile.partitions, tile.free);
      b_.store(dst, y);
      if (pending) rows_computed_(pending->first, pending->second, plan_.loads);
      pending.reset();
      if (rows_computed_ && root.wide && tile.c0 == 0 && int64_t{tile.free} == p_.cols) pending.emplace(y, dst);
      if (pending && !defer) {
        rows_computed_(pending->first, pending->second, plan_.loads);
        pending.reset();
      }
      loaded[t].clear();
      slots[t].clear();
    };
    kernels::pipeline_staged(tiles.size(), static_cast<size_t>(plan_.buffers) - 1, stages, load, stage);
    if (pending) rows_computed_(pending->first, pending->second, plan_.loads);
  }

  void release() {
    for (const Tile& t : invariant_) {
      if (std::find(given_.begin(), given_.end(), t.id) == given_.end()) b_.free(t);
    }
    for (const TilePool& pool : input_pools_) b_.free(pool);
    for (const TilePool& pool : slot_pools_) b_.free(pool);
    if (plan_.stats) b_.free(stats_);
    if (plan_.scratch) b_.free(scratch_);
  }

 private:
  void allocate() {
    const size_t inputs = p_.inputs.size();
    tile_input_.resize(inputs);
    invariant_index_.assign(inputs, -1);
    for (size_t i = 0; i < inputs; ++i) {
      const ValueInfo& v = plan_.values[i];
      if (v.last_use < 0) continue;
      const uint32_t w = v.wide ? static_cast<uint32_t>(plan_.chunk) : 1;
      if (v.source == Source::per_tile) {
        input_pools_.push_back(b_.pool("row_in", v.dtype, w, static_cast<size_t>(plan_.buffers)));
        continue;
      }
      // The same row (or scalar) for every row: loaded once onto every partition, unless the caller has.
      const RowOperand& in = p_.inputs[i];
      if (input_rows_) {
        const auto given = std::find_if(input_rows_->invariants.begin(), input_rows_->invariants.end(),
                                        [&](const auto& g) { return g.first == i; });
        if (given != input_rows_->invariants.end() && given->second.dtype == v.dtype && given->second.free_elements == w &&
            given->second.partitions == b_.partitions() && in.desc.dtype == v.dtype) {
          invariant_index_[i] = static_cast<int>(invariant_.size());
          invariant_.push_back(given->second);
          given_.push_back(given->second.id);
          continue;
        }
      }
      const Tile t = b_.sbuf(v.dtype, w, 0, "row_invariant");
      b_.set_source_op(op_name(v.first_reader));
      b_.load(t.ap(), kernels::hbm_pattern(in.io, in.desc.dtype, in.offset, b_.partitions(), 0,
                                           {{w, static_cast<int32_t>(v.strides.back())}}));
      invariant_index_[i] = static_cast<int>(invariant_.size());
      invariant_.push_back(t);
    }
    for (size_t i = 0; i < plan_.slots.size(); ++i) {
      const SlotKey& s = plan_.slots[i];
      slot_pools_.push_back(b_.pool("row_value", s.dtype, s.wide ? static_cast<uint32_t>(plan_.chunk) : 1,
                                    plan_.slot_buffers[i]));
    }
    if (plan_.scratch) scratch_ = b_.pool("row_scratch", DType::f32, static_cast<uint32_t>(plan_.chunk), 2);
    if (plan_.stats) stats_ = b_.pool("row_stats", DType::f32, kStatColumns, kStatBuffers);
  }

  AccessPattern value(size_t v, uint16_t p, uint32_t f) const {
    const ValueInfo& info = plan_.values[v];
    const uint32_t w = info.wide ? f : 1;
    if (info.moment >= 0) return moments_[tile_].column(p, static_cast<uint32_t>(info.moment));
    switch (info.source) {
      case Source::invariant:
        return invariant_[static_cast<size_t>(invariant_index_[v])].region(0, p, 0, w);
      case Source::per_tile:
        return tile_input_[v];
      case Source::step:
        break;
    }
    return current_[static_cast<size_t>(info.slot)].region(0, p, 0, w);
  }

  bool wide(int v) const { return plan_.values[static_cast<size_t>(v)].wide; }

  enum class Half : uint8_t { whole, first, second };

  // Step k on this tile's values, through the op's tile-level emitter; a half of an rms_norm step
  // (stage_bounds) through its split emitters, with the tile's statistics kept between them.
  void step(size_t k, uint16_t p, uint32_t f, Half half = Half::whole, size_t tile = 0) {
    const RowStep& s = p_.steps[k];
    const StepPlan& sp = plan_.steps[k];
    if (sp.elided) return;  // its reader's activation applies it
    b_.set_source_op(op_name(s.op));
    const size_t y = p_.inputs.size() + k;
    if (sp.moments) {  // the mean and the variance (find_moments)
      moments_[tile_] = stats_.next();
      b_.bn_stats(moments_[tile_].region(0, p, 0, 2), value(static_cast<size_t>(s.args[0]), p, f));
      return;
    }
    if (sp.folded) {  // summed by step k - 1
      if (!sp.raw_sum) kernels::emit_reduce_finish(b_, s.op, value(y, p, f), p_.cols);
      return;
    }
    if (sp.on_scalar) {
      const AccessPattern x = value(static_cast<size_t>(sp.args[0]), p, f);
      if (sp.reduces) {  // the row sum is the accumulate output; the activated copy is scratch
        b_.activate(kernels::ActFunc::identity, scratch_.next().region(0, p, 0, f), x, 1.0f, 0.0f, value(y, p, f));
        if (!sp.raw_sum) kernels::emit_reduce_finish(b_, s.op, value(y, p, f), p_.cols);
        return;
      }
      const AccessPattern out = sp.to_scratch ? scratch_.next().region(0, p, 0, f) : value(y, p, f);
      b_.activate(sp.func, out, x, sp.scale, sp.bias, sp.accumulates ? value(y + 1, p, f) : AccessPattern{},
                  sp.scale_by >= 0 ? value(static_cast<size_t>(sp.scale_by), p, f) : AccessPattern{});
      return;
    }
    if (sp.raw_sum) {  // a mean whose reader applies the 1 / n
      b_.reduce(kernels::reduction_alu(s.op), value(y, p, f), value(static_cast<size_t>(sp.args[0]), p, f));
      return;
    }
    if (half != Half::whole) {
      SIGHTLINE_ASSERT_MSG(s.op == OpId::rms_norm, "row step {} ({}) has no split emitters", k, op_name(s.op));
      const AccessPattern x = value(static_cast<size_t>(s.args[0]), p, f);
      if (half == Half::first) {
        split_stats_[tile] = stats_.next();
        kernels::emit_rms_norm_stats(b_, value(y, p, f), x, split_stats_[tile], p, static_cast<uint32_t>(p_.cols),
                                     static_cast<float>(s.attrs.eps));
      } else {
        const bool weighted = s.args.size() > 1 && s.args[1] != kNoValue;
        kernels::emit_rms_norm_scale(b_, value(y, p, f), x,
                                     weighted ? value(static_cast<size_t>(s.args[1]), p, f) : AccessPattern{},
                                     split_stats_[tile], p);
      }
      return;
    }
    kernels::TileOp t;
    t.op = s.op;
    t.attrs = &s.attrs;
    t.y = value(p_.inputs.size() + k, p, f);
    t.p = p;
    t.n = static_cast<uint32_t>(p_.cols);
    t.engine = sp.engine;
    for (int a : s.args) {
      t.args.push_back(a == kNoValue ? kernels::TileArg{}
                                     : kernels::TileArg{value(static_cast<size_t>(a), p, f), !wide(a)});
    }
    if (s.attrs.has_scalar) t.scalar = scalar_in(s.attrs.scalar, s.meta.dtype);
    if (plan_.work_slot[k] >= 0) t.work = current_[static_cast<size_t>(plan_.work_slot[k])].region(0, p, 0, f);
    if (kernels::tile_op_needs(s.op).stats) t.stats = stats_.next();
    kernels::emit_tile_op(b_, t);
  }

  KernelBuilder& b_;
  const RowProgram& p_;
  const Plan& plan_;
  std::vector<Tile> invariant_;
  std::vector<int> invariant_index_;
  std::vector<uint64_t> given_;  // ids of the invariant tiles the caller loaded (RowsInSbuf::invariants)
  std::vector<TilePool> input_pools_, slot_pools_;
  TilePool stats_, scratch_;
  std::vector<Tile> current_;              // this tile's buffer of each slot
  std::vector<Tile> split_stats_;          // per tile: the statistics of a split rms_norm step
  std::vector<Tile> moments_;              // per tile: its bn_stats moments (find_moments)
  size_t tile_ = 0;                        // the tile being emitted
  std::vector<AccessPattern> tile_input_;  // this tile's loaded per-tile inputs
};

}  // namespace

// The loop's modeled time run alone on a core of `spec`: its operands in HBM tensors of their own and
// its result in a contiguous one, simulated for timing only.
double time_alone(const device::Spec& spec, const RowProgram& program, const Plan& plan) {
  KernelBuilder kb(spec, "row_loop_trial");
  RowProgram alone = program;
  std::vector<std::pair<uint32_t, int64_t>> extents;  // per I/O tensor of the program: elements used
  for (const RowOperand& in : program.inputs) {
    const int64_t end = in.offset + kernels::tensor_extent(in.desc);
    auto it = std::find_if(extents.begin(), extents.end(), [&](const auto& e) { return e.first == in.io; });
    if (it == extents.end()) {
      extents.emplace_back(in.io, end);
    } else {
      it->second = std::max(it->second, end);
    }
  }
  std::vector<uint32_t> io(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    const auto in = std::find_if(program.inputs.begin(), program.inputs.end(),
                                 [&](const RowOperand& o) { return o.io == extents[i].first; });
    io[i] = kb.input(fmt::format("in{}", i), in->desc.dtype, {std::max<int64_t>(extents[i].second, 1)});
  }
  for (RowOperand& in : alone.inputs) {
    const auto it = std::find_if(extents.begin(), extents.end(), [&](const auto& e) { return e.first == in.io; });
    in.io = io[static_cast<size_t>(it - extents.begin())];
  }
  Dims shape = program.lead;
  shape.push_back(plan.values.back().wide ? program.cols : 1);
  const kernels::TensorDesc out_desc = kernels::TensorDesc::contiguous(program.steps.back().meta.dtype, shape);
  const RowOperand out{kb.output("out", out_desc.dtype, std::vector<int64_t>(shape.begin(), shape.end())), 0, out_desc};
  Emitter emitter(kb, alone, plan);
  emitter.run(out);
  emitter.release();
  return device::timing_only_ns(spec, kb.build());
}

std::optional<std::string> row_program_unsupported(const RowProgram& written, const device::Spec& spec,
                                                   uint32_t sbuf_bytes) {
  std::variant<Plan, std::string> plan = make_plan(without_exact_casts(written), spec, sbuf_bytes);
  if (std::string* why = std::get_if<std::string>(&plan)) return std::move(*why);
  return std::nullopt;
}

std::optional<std::string> emit_row_program(KernelBuilder& b, const RowProgram& written,
                                            const std::function<RowOperand()>& output,
                                            const RowsComputed& rows_computed, const RowsInSbuf* input_rows,
                                            bool* input_rows_read, std::span<const Loads> hook_steps) {
  const RowProgram program = without_exact_casts(written);
  std::variant<Plan, std::string> planned = make_plan(program, b.spec(), b.sbuf_free_bytes(), hook_steps);
  if (std::string* why = std::get_if<std::string>(&planned)) return std::move(*why);
  Plan& plan = std::get<Plan>(planned);
  // A cut at an engine change lets each engine work on its own tile instead of waiting for another
  // engine's step of the same tile, and adds a stage to the pipeline's fill and drain; which cuts win
  // depends on the engines' work per tile. So every subset of the engine changes (up to 2^kMaxCuts) is
  // timed on the cost model (a timing-only run of the loop alone: deterministic) and the fastest kept,
  // the stages chosen above on a tie.
  constexpr size_t kMaxCuts = 6;
  const Stages every = stage_bounds(program, plan, true, program.steps.size());
  const size_t cuts = every.within ? 0 : every.bounds.size() - 2;
  if (cuts > 0 && cuts <= kMaxCuts) {
    double best = time_alone(b.spec(), program, plan);
    for (uint32_t mask = 0; mask < (1u << cuts); ++mask) {
      Stages stages{{0}, false};
      for (size_t c = 0; c < cuts; ++c) {
        if (mask & (1u << c)) stages.bounds.push_back(every.bounds[c + 1]);
      }
      stages.bounds.push_back(program.steps.size());
      if (stages.bounds == plan.stages.bounds) continue;
      Plan candidate = plan;
      if (!fit_stages(program, candidate, std::move(stages))) continue;
      const double ns = time_alone(b.spec(), program, candidate);
      if (ns < best) best = ns, plan = std::move(candidate);
    }
  }
  const RowOperand out = output();
  Emitter emitter(b, program, plan);
  emitter.rows_computed_ = rows_computed;
  emitter.input_rows_ = input_rows;
  emitter.run(out);
  emitter.release();
  if (input_rows_read) *input_rows_read = emitter.input_rows_read_;
  return std::nullopt;
}

}  // namespace sightline::compiler
