#include "compiler/row_kernel.h"

#include <algorithm>
#include <optional>
#include <variant>

#include <fmt/format.h>

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
};

struct SlotKey {
  bool wide = true;
  DType dtype = DType::f32;
  bool operator==(const SlotKey&) const = default;
};

struct Plan {
  std::vector<ValueInfo> values;
  std::vector<SlotKey> slots;
  std::vector<int> work_slot;  // per step: a full f32 row it uses as scratch, or -1
  bool stats = false;
  int64_t chunk = 0;  // columns per tile
  int buffers = 1;
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
    ValueInfo& out = plan.values[inputs + k];
    out.slot = take({out.wide, out.dtype});
    const kernels::TileOpNeeds needs = kernels::tile_op_needs(p.steps[k].op);
    if (needs.work || needs.scratch) plan.work_slot[k] = take({true, DType::f32});
    std::vector<int> released;
    for (int a : p.steps[k].args) {
      if (a < static_cast<int>(inputs) || std::find(released.begin(), released.end(), a) != released.end())
        continue;
      if (plan.values[static_cast<size_t>(a)].last_use == static_cast<int>(k)) released.push_back(a);
    }
    if (out.last_use < 0 && k + 1 < p.steps.size())
      released.push_back(static_cast<int>(inputs + k));  // unused
    for (int a : released) free_slots.push_back(plan.values[static_cast<size_t>(a)].slot);
    if (plan.work_slot[k] >= 0) free_slots.push_back(plan.work_slot[k]);
  }
}

// Bytes per partition: what is loaded once, and what one row tile in flight needs.
void budget(const RowProgram& p, const Plan& plan, uint64_t& once, uint64_t& per_tile) {
  once = plan.stats ? kStatBuffers * aligned(kStatColumns * 4) : 0;
  per_tile = 0;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const ValueInfo& v = plan.values[i];
    if (v.last_use < 0) continue;
    (v.source == Source::invariant ? once : per_tile) += width_bytes(v.wide, plan.chunk, v.dtype);
  }
  for (const SlotKey& s : plan.slots) per_tile += width_bytes(s.wide, plan.chunk, s.dtype);
}

std::variant<Plan, std::string> make_plan(const RowProgram& p, uint32_t sbuf_bytes) {
  if (p.steps.empty()) return std::string("the group has no ops");
  const int rank = p.lead.size() + 1;
  Plan plan;
  plan.values.resize(p.inputs.size() + p.steps.size());
  bool row_wide = false;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const kernels::TensorDesc& d = p.inputs[i].desc;
    ValueInfo& v = plan.values[i];
    if (!dtype_is_floating(d.dtype))
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
    const bool last = k + 1 == p.steps.size();
    out.dtype = last || s.op == OpId::to_copy ? s.meta.dtype : DType::f32;
    for (int a : s.args) {
      if (a == kNoValue) continue;
      SIGHTLINE_ASSERT_MSG(a >= 0 && static_cast<size_t>(a) < inputs + k, "row step {} reads value {}", k, a);
      ValueInfo& in = plan.values[static_cast<size_t>(a)];
      if (static_cast<size_t>(a) < inputs && in.last_use < 0) in.first_reader = s.op;
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

// The Scalar-engine activation a step computes (a unary activation, or x * x as square), if any.
std::optional<kernels::ActFunc> activation_of(const RowStep& s) {
  kernels::ActFunc func{};
  if (s.op != OpId::to_copy && kernels::unary_activation(s.op, s.attrs, func)) return func;
  if (s.op == OpId::mul && !s.attrs.has_scalar && s.args.size() == 2 && s.args[0] == s.args[1])
    return kernels::ActFunc::square;
  return std::nullopt;
}

// Where the row loop cuts a tile's steps into two stages (pipeline_staged, eager_internal.h): stage 0
// runs the steps before `step` (and, when `within`, step `step`'s statistics half), stage 1 the rest;
// step 0 and not within: one stage. The cut goes after the last Scalar-engine activation that a step
// follows (softmax's exp, layer_norm's rsqrt) or inside the last rms_norm (its sum of squares and
// rsqrt on the Scalar engine, then the scaling on the Vector engine), so the next tile's first steps
// run on the Vector engine while the Scalar engine works on this tile. Only the first stage may read
// the loaded row tiles (the next loads run ahead into their buffers), and a tile's values must not
// share buffers with the next tile's.
struct Split {
  size_t step = 0;
  bool within = false;
};

Split stage_split(const RowProgram& p, const Plan& plan) {
  if (plan.buffers < 2) return {};
  size_t inputs_read_until = 0;  // steps before this read every per-tile input they need
  for (size_t k = 0; k < p.steps.size(); ++k) {
    for (int a : p.steps[k].args) {
      if (a >= 0 && static_cast<size_t>(a) < p.inputs.size() &&
          plan.values[static_cast<size_t>(a)].source == Source::per_tile)
        inputs_read_until = k + 1;
    }
  }
  for (size_t k = p.steps.size(); k-- > std::max<size_t>(inputs_read_until, 1);) {
    if (p.steps[k].op == OpId::rms_norm) return {k, true};
    if (activation_of(p.steps[k - 1])) return {k, false};
  }
  return {};
}

// Per step: a row sum (or mean) of the previous step's full-row activation, which that activation
// accumulates as it writes its row (the Scalar engine's accumulate output) instead of a second pass
// over the row on the Vector engine. The last step keeps its own reduction (its dtype is the
// output's, not the accumulator's f32).
std::vector<bool> folded_sums(const RowProgram& p, const Plan& plan) {
  std::vector<bool> folded(p.steps.size(), false);
  for (size_t k = 1; k + 1 < p.steps.size(); ++k) {
    const RowStep& s = p.steps[k];
    const size_t prev = p.inputs.size() + k - 1;
    if ((s.op != OpId::sum && s.op != OpId::mean) || s.args.size() != 1 ||
        s.args[0] != static_cast<int>(prev) || !plan.values[prev].wide || plan.chunk < p.cols)
      continue;
    folded[k] = activation_of(p.steps[k - 1]).has_value();
  }
  return folded;
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
      : b_(b), p_(p), plan_(plan), folded_(folded_sums(p, plan)) {}

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
    const Split split = stage_split(p_, plan_);
    const size_t stages = split.step || split.within ? 2 : 1;
    split_stats_.assign(tiles.size(), Tile{});
    auto stage = [&](size_t st, size_t t) {
      const RowTile& tile = tiles[t];
      if (st == 0) {
        for (TilePool& pool : slot_pools_) slots[t].push_back(pool.next());
      }
      current_ = slots[t];
      for (size_t o = 0; o < tiled.size(); ++o) tile_input_[tiled[o]] = loaded[t][o];
      if (stages == 1) {
        for (size_t k = 0; k < p_.steps.size(); ++k) step(k, tile.partitions, tile.free);
      } else if (st == 0) {
        for (size_t k = 0; k < split.step; ++k) step(k, tile.partitions, tile.free);
        if (split.within) step(split.step, tile.partitions, tile.free, Half::first, t);
      } else {
        size_t k = split.step;
        if (split.within) step(k++, tile.partitions, tile.free, Half::second, t);
        for (; k < p_.steps.size(); ++k) step(k, tile.partitions, tile.free);
      }
      if (st + 1 < stages) return;
      const uint32_t w = root.wide ? tile.free : 1;
      const int64_t col_stride = out_strides.back();
      b_.set_source_op(op_name(p_.steps.back().op));
      b_.store(
          kernels::hbm_pattern(out.io, out.desc.dtype,
                               out.offset + tile.offset.back() + (root.wide ? tile.c0 * col_stride : 0),
                               tile.partitions, row_stride.back(), {{w, static_cast<int32_t>(col_stride)}}),
          value(p_.inputs.size() + p_.steps.size() - 1, tile.partitions, tile.free));
      loaded[t].clear();
      slots[t].clear();
    };
    kernels::pipeline_staged(tiles.size(), static_cast<size_t>(plan_.buffers) - 1, stages, load, stage);
  }

  void release() {
    for (const Tile& t : invariant_) b_.free(t);
    for (const TilePool& pool : input_pools_) b_.free(pool);
    for (const TilePool& pool : slot_pools_) b_.free(pool);
    if (plan_.stats) b_.free(stats_);
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
      // The same row (or scalar) for every row: loaded once onto every partition.
      const RowOperand& in = p_.inputs[i];
      const Tile t = b_.sbuf(v.dtype, w, 0, "row_invariant");
      b_.set_source_op(op_name(v.first_reader));
      b_.load(t.ap(), kernels::hbm_pattern(in.io, in.desc.dtype, in.offset, b_.partitions(), 0,
                                           {{w, static_cast<int32_t>(v.strides.back())}}));
      invariant_index_[i] = static_cast<int>(invariant_.size());
      invariant_.push_back(t);
    }
    for (const SlotKey& s : plan_.slots) {
      slot_pools_.push_back(b_.pool("row_value", s.dtype, s.wide ? static_cast<uint32_t>(plan_.chunk) : 1,
                                    static_cast<size_t>(plan_.buffers)));
    }
    if (plan_.stats) stats_ = b_.pool("row_stats", DType::f32, kStatColumns, kStatBuffers);
  }

  AccessPattern value(size_t v, uint16_t p, uint32_t f) const {
    const ValueInfo& info = plan_.values[v];
    const uint32_t w = info.wide ? f : 1;
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
  // (stage_split) through its split emitters, with the tile's statistics kept between them.
  void step(size_t k, uint16_t p, uint32_t f, Half half = Half::whole, size_t tile = 0) {
    const RowStep& s = p_.steps[k];
    b_.set_source_op(op_name(s.op));
    const size_t y = p_.inputs.size() + k;
    if (folded_[k]) {  // summed by step k - 1
      kernels::emit_reduce_finish(b_, s.op, value(y, p, f), p_.cols);
      return;
    }
    if (k + 1 < p_.steps.size() && folded_[k + 1]) {
      b_.activate(*activation_of(s), value(y, p, f), value(static_cast<size_t>(s.args[0]), p, f), 1.0f, 0.0f,
                  value(y + 1, p, f));
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
  const std::vector<bool> folded_;  // folded_sums
  std::vector<Tile> invariant_;
  std::vector<int> invariant_index_;
  std::vector<TilePool> input_pools_, slot_pools_;
  TilePool stats_;
  std::vector<Tile> current_;              // this tile's buffer of each slot
  std::vector<Tile> split_stats_;          // per tile: the statistics of a split rms_norm step
  std::vector<AccessPattern> tile_input_;  // this tile's loaded per-tile inputs
};

}  // namespace

std::optional<std::string> row_program_unsupported(const RowProgram& program, uint32_t sbuf_bytes) {
  std::variant<Plan, std::string> plan = make_plan(program, sbuf_bytes);
  if (std::string* why = std::get_if<std::string>(&plan)) return std::move(*why);
  return std::nullopt;
}

std::optional<std::string> emit_row_program(KernelBuilder& b, const RowProgram& program,
                                            const std::function<RowOperand()>& output) {
  std::variant<Plan, std::string> planned = make_plan(program, b.sbuf_free_bytes());
  if (std::string* why = std::get_if<std::string>(&planned)) return std::move(*why);
  const Plan& plan = std::get<Plan>(planned);
  const RowOperand out = output();
  Emitter emitter(b, program, plan);
  emitter.run(out);
  emitter.release();
  return std::nullopt;
}

}  // namespace sightline::compiler
