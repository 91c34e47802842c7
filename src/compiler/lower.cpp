#include "compiler/lower.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <variant>

#include <fmt/format.h>

#include "compiler/engine_balance.h"
#include "compiler/row_kernel.h"
#include "compiler/view_epilogue.h"
#include "core/parallel.h"
#include "core/view_meta.h"
#include "device/core.h"
#include "device/cost_model.h"
#include "sightline/kernels/builder.h"
#include "kernels/eager.h"
#include "kernels/emit.h"
#include "kernels/layout.h"
#include "sightline/error.h"

namespace sightline::compiler {
namespace {

using device::ActFunc;
using kernels::TensorDesc;

constexpr std::string_view kConstantsPrefix = "constants.";

// Where a value lives in the program's HBM: an I/O tensor, an element offset into it and the view's
// shape and strides (a view op changes only these, as in eager mode).
struct Place {
  uint32_t io = 0;
  int64_t offset = 0;  // elements of desc.dtype
  TensorDesc desc;
};

// A tensor that carries a place's view metadata, for the view rules (never bound to memory).
Tensor view_of(const Place& p) {
  static const auto storage = std::make_shared<Storage>(Device::cpu(), 0, nullptr, nullptr, nullptr);
  return Tensor(storage, p.desc.dtype, p.desc.shape, p.desc.strides, p.offset);
}

// The place of a view op's result, or nullopt for a reshape that needs a copy first.
std::optional<Place> apply_view(OpId op, const OpAttrs& at, const Place& in) {
  const auto v = apply_view_desc(op, at, in.offset, in.desc);
  if (!v) return std::nullopt;
  return Place{in.io, v->first, v->second};
}

// Elementwise kernels take each operand in elementwise_operand_dtype (the output's, a comparison's
// result_type, bool for a mask);
// the eager backend casts a promoted operand first, as its own op, and so does the lowering.
bool casts_inputs(OpId op) {
  return op_is_binary_elementwise(op) || op_is_select(op) || (op_is_unary_elementwise(op) && op != OpId::fill);
}

bool takes_host_scalar(const Node& n) {
  return n.kind == NodeKind::op && op_is_binary_elementwise(n.op) && n.attrs.has_scalar;
}

std::vector<int64_t> to_vector(const Dims& dims) { return {dims.begin(), dims.end()}; }

std::string constants_io_name(DType dtype) { return fmt::format("const_{}", dtype_name(dtype)); }

// Whether a value of `shape` ([..., row]) has more rows than one tile of `partitions`: a linear's input
// whose kernel computes PreloadedOrder::tiles's way (one tile is the same either way), a matmul result
// whose epilogues come at its kernel's end when it runs K slice by K slice.
bool many_row_tiles(const Dims& shape, uint32_t partitions) {
  return shape.size() > 0 && shape.back() > 0 &&
         static_cast<int64_t>(shape.product()) / shape.back() > int64_t{partitions};
}

// A fused.rows body as a row program over `inputs` (the places of the body's inputs, in order).
RowProgram row_program(const Graph& body, std::span<const Place> inputs) {
  const TensorMeta& result = body.nodes[static_cast<size_t>(body.outputs.front())].meta;
  const int rank = result.shape.size();
  RowProgram p;
  for (int d = 0; d + 1 < rank; ++d) p.lead.push_back(result.shape[d]);
  p.cols = rank ? result.shape.back() : 1;
  for (const Node& n : body.nodes) {
    if (n.kind == NodeKind::input) {
      const Place& place = inputs[static_cast<size_t>(n.input_index)];
      p.inputs.push_back({place.io, place.offset, place.desc});
    } else {
      if (n.meta.shape.size() == rank && rank > 0) p.cols = std::max(p.cols, n.meta.shape.back());
      p.steps.push_back({n.op, n.attrs, n.inputs, n.meta});
    }
  }
  return p;
}

class Lowerer {
 public:
  Lowerer(const device::Spec& spec, const std::string& name, const LowerOptions& o)
      : spec_(spec), builder_(spec, name), prefetch_(o.prefetch != WeightPrefetch::never),
        after_loads_(o.prefetch == WeightPrefetch::after_loads), queues_(o.queues),
        idle_queues_(o.kernel_queues == KernelQueues::idlest), reach_(o.reach),
        chain_groups_(o.chain == ActivationChain::in_sbuf),
        chain_norms_(o.chain == ActivationChain::in_sbuf || o.chain == ActivationChain::norms_in_sbuf),
        tile_by_tile_(o.order == PreloadedOrder::tiles), share_activations_(o.shared == SharedInput::handed_on),
        keep_residuals_(o.residual == ResidualStream::kept),
        stream_past_attention_(o.mlp == MlpWeight::past_attention),
        prefetch_share_(o.budget == PrefetchBudget::half ? 2 : kPrefetchShare) {}

  device::Executable run(const Graph& graph) {
    std::vector<Place> arguments(static_cast<size_t>(graph.input_count()));
    for (const Node& n : graph.nodes) {
      if (n.kind != NodeKind::input) continue;
      const uint32_t io =
          builder_.input(fmt::format("arg{}", n.input_index), n.meta.dtype, to_vector(n.meta.shape));
      arguments[static_cast<size_t>(n.input_index)] = {io, 0,
                                                       TensorDesc::contiguous(n.meta.dtype, n.meta.shape)};
      argument_ios_.insert(io);
    }
    std::vector<std::optional<Place>> results;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const TensorMeta& meta = graph.nodes[static_cast<size_t>(graph.outputs[k])].meta;
      const uint32_t io = builder_.output(fmt::format("out{}", k), meta.dtype, to_vector(meta.shape));
      results.push_back(Place{io, 0, TensorDesc::contiguous(meta.dtype, meta.shape)});
    }
    declare_constants(graph);
    lower_graph(graph, arguments, results);
    device::Executable exe = builder_.build();
    for (uint32_t io : scratch_ios_) exe.io[io].kind = device::IoKind::scratch;
    for (const auto& [dtype, values] : constants_) {
      exe.metadata.emplace_back(fmt::format("{}{}", kConstantsPrefix, constants_io_name(dtype)),
                                fmt::format("{}", fmt::join(values.list, ",")));
    }
    exe.metadata.emplace_back("compiled.kernels", fmt::format("{}", kernel_count_));
    exe.metadata.emplace_back("compiled.row_loops", fmt::format("{}", row_loops_));
    exe.metadata.emplace_back("compiled.fused_epilogues", fmt::format("{}", epilogues_));
    exe.metadata.emplace_back("compiled.fused_attention", fmt::format("{}", attentions_));
    exe.metadata.emplace_back("compiled.prefetched_weights", fmt::format("{}", prefetched_weights_));
    exe.metadata.emplace_back("compiled.prefetched_activations", fmt::format("{}", prefetched_activations_));
    if (kept_activations_ > 0) exe.metadata.emplace_back("compiled.kept_activations", fmt::format("{}", kept_activations_));
    if (transposed_linears_ > 0)
      exe.metadata.emplace_back("compiled.transposed_linears", fmt::format("{}", transposed_linears_));
    if (kept_norm_inputs_ > 0) exe.metadata.emplace_back("compiled.kept_norm_inputs", fmt::format("{}", kept_norm_inputs_));
    if (kept_operands_ > 0) exe.metadata.emplace_back("compiled.kept_epilogue_operands", fmt::format("{}", kept_operands_));
    if (shared_activations_ > 0)
      exe.metadata.emplace_back("compiled.shared_activations", fmt::format("{}", shared_activations_));
    if (kept_residuals_ > 0) exe.metadata.emplace_back("compiled.kept_residuals", fmt::format("{}", kept_residuals_));
    if (streamed_past_attention_ > 0)
      exe.metadata.emplace_back("compiled.streamed_past_attention", fmt::format("{}", streamed_past_attention_));
    if (tile_by_tile_kernels_ > 0)
      exe.metadata.emplace_back("compiled.tile_by_tile", fmt::format("{}", tile_by_tile_kernels_));
    if (reach_ == PrefetchReach::past_compute_bound)
      exe.metadata.emplace_back("compiled.prefetched_ahead", fmt::format("{}", fmt::join(prefetched_ahead_, ",")));
    exe.metadata.emplace_back("compiled.attention_output_stores", fmt::format("{}", attention_stores_));
    if (grouped_kv_attentions_ > 0)
      exe.metadata.emplace_back("compiled.grouped_kv_attention", fmt::format("{}", grouped_kv_attentions_));
    for (size_t k = 0; k < attention_store_fallbacks_.size(); ++k) {
      exe.metadata.emplace_back(fmt::format("compiled.attention_output_fallback.{}", k),
                                attention_store_fallbacks_[k]);
    }
    for (size_t k = 0; k < row_fallbacks_.size(); ++k) {
      exe.metadata.emplace_back(fmt::format("compiled.row_group_fallback.{}", k), row_fallbacks_[k]);
    }
    for (size_t k = 0; k < epilogue_fallbacks_.size(); ++k) {
      exe.metadata.emplace_back(fmt::format("compiled.epilogue_fallback.{}", k), epilogue_fallbacks_[k]);
    }
    return exe;
  }

  // Whether two linears of `graph` read one input (SharedInput::handed_on can change the program).
  static bool linears_share_an_input(const Graph& graph) {
    std::set<size_t> inputs;
    for (const Node& n : graph.nodes) {
      const std::optional<std::pair<size_t, size_t>> in = linear_inputs(n);
      if (in && !inputs.insert(in->first).second) return true;
    }
    return false;
  }

 private:
  struct Constants {
    uint32_t io = 0;
    std::vector<double> list;
  };

  // One constants I/O tensor per dtype, sized up front (an I/O tensor's shape is fixed once declared).
  void declare_constants(const Graph& graph) {
    collect_constants(graph);
    for (auto& [dtype, c] : constants_) {
      c.io = builder_.input(constants_io_name(dtype), dtype, {static_cast<int64_t>(c.list.size())});
    }
  }

  void collect_constants(const Graph& graph) {
    for (const Node& n : graph.nodes) {
      // A row group emitted as one loop takes its scalars as immediates.
      if (n.kind == NodeKind::fused && !(n.fusion == FusionKind::rows && row_loop_fits(n))) {
        collect_constants(*n.body);
      }
      if (!takes_host_scalar(n)) continue;
      std::vector<double>& list = constants_[scalar_dtype(graph, n)].list;
      if (std::find(list.begin(), list.end(), n.attrs.scalar) == list.end()) list.push_back(n.attrs.scalar);
    }
  }

  // The dtype of a node's host scalar as kernel() passes it: its output's, a comparison's operand dtype.
  static DType scalar_dtype(const Graph& graph, const Node& n) {
    const TensorMeta& in = graph.nodes[static_cast<size_t>(n.inputs[0])].meta;
    const Tensor views[] = {view_of(Place{0, 0, TensorDesc::contiguous(in.dtype, in.shape)})};
    return elementwise_operand_dtype(OpCall{n.op, views, n.attrs}, 1, n.meta.dtype);
  }

  Place constant(double value, DType dtype) {
    const Constants& c = constants_.at(dtype);
    const auto it = std::find(c.list.begin(), c.list.end(), value);
    SIGHTLINE_ASSERT(it != c.list.end());
    return {c.io, it - c.list.begin(), {dtype, {}, {}}};
  }

  // Whether a fused.rows node is emitted as one row loop (the plan depends only on shapes and dtypes).
  bool row_loop_fits(const Node& n) const {
    std::vector<Place> places;
    for (const Node& in : n.body->nodes) {
      if (in.kind == NodeKind::input)
        places.push_back({0, 0, TensorDesc::contiguous(in.meta.dtype, in.meta.shape)});
    }
    return !row_program_unsupported(row_program(*n.body, places), builder_.spec(), builder_.sbuf_free_bytes());
  }

  // A fused.rows node as one row-tiled loop with its intermediates in SBUF; nullopt (nothing emitted)
  // when the group cannot be one loop: then it is lowered op by op, and the reason is recorded in the
  // executable's metadata ("compiled.row_group_fallback.<k>").
  std::optional<Place> row_group(const Node& n, std::span<const Place> operands,
                                 const std::optional<Place>& dst) {
    Place out;
    const RowProgram program = row_program(*n.body, operands);
    // The group's result kept in SBUF for the linear after it (keep_rows), when the loop still fits
    // beside the identity; its instructions (the identity's) are the result's, as its store is.
    if (!program.steps.empty()) builder_.set_source_op(op_name(program.steps.back().op));
    std::optional<KeptRows> kept = keep_rows(n, TensorDesc::contiguous(n.meta.dtype, n.meta.shape), [&](uint64_t bytes) {
      return !row_program_unsupported(program, spec_, builder_.sbuf_free_bytes() - static_cast<uint32_t>(bytes));
    });
    RowsComputed hook;
    if (kept || pending_prefetch()) {
      hook = [&](const device::AccessPattern& y, const device::AccessPattern& d, const Loads& per_tile) {
        if (pending_prefetch()) emit_weight_prefetch();
        if (kept) transpose_rows(*kept, y, d, out.offset, &per_tile);
      };
    }
    // Its first input's rows from the copy the matmul epilogue before it left in SBUF (plan_kept_input).
    std::optional<RowsInSbuf> input_rows;
    if (kept_input_ && kept_input_->reader == &n) {
      input_rows = RowsInSbuf{0, kept_input_->tile, kept_input_->filled, kept_input_->row_invariants};
    }
    bool input_rows_read = false;
    const std::vector<Loads> copies =
        kept ? kept_copy_steps(kept->row_length, kept->rows) : std::vector<Loads>{};
    const std::optional<std::string> why = emit_row_program(builder_, program, [&] {
      out = dst ? *dst : scratch(n.meta);
      return RowOperand{out.io, out.offset, out.desc};
    }, hook, input_rows ? &*input_rows : nullptr, &input_rows_read, copies);
    if (input_rows_read) ++kept_norm_inputs_;
    if (kept) {
      builder_.free(kept->identity);
      builder_.free(kept->psum);
      if (!why && kept->transposed == kept->rows) kept->prefetch->x_filled = true;
    }
    if (why) {
      row_fallbacks_.push_back(*why);
      return std::nullopt;
    }
    ++row_loops_;
    ++kernel_count_;
    return out;
  }

  // An epilogue chain with a softmax whose matmul tiles do not hold whole rows: the body with the ops
  // before the softmax as an epilogue group of their own (the matmul and its elementwise epilogue
  // still make one kernel), the rest after it op by op; nullopt when there is nothing to keep fused.
  static std::optional<Graph> epilogue_before_row_wide(const Graph& body) {
    size_t cut = 0, ops = 0;
    for (size_t k = 0; k < body.nodes.size(); ++k) {
      if (body.nodes[k].kind != NodeKind::op) continue;
      if (kernels::tile_op_needs(body.nodes[k].op).row_wide) {
        cut = k;
        break;
      }
      ++ops;
    }
    if (cut == 0 || ops < 2) return std::nullopt;
    Graph prefix, split;
    std::vector<int> inner(body.nodes.size(), kNoValue), outer(body.nodes.size(), kNoValue);
    std::vector<int> externals;
    for (size_t k = 0; k < body.nodes.size(); ++k) {
      const Node& m = body.nodes[k];
      if (m.kind == NodeKind::input) outer[k] = split.add(m);
    }
    for (size_t k = 0; k < cut; ++k) {
      const Node& m = body.nodes[k];
      if (m.kind != NodeKind::op) continue;
      Node copy = m;
      for (int& v : copy.inputs) {
        if (v == kNoValue) continue;
        if (inner[static_cast<size_t>(v)] == kNoValue) {  // a group input
          inner[static_cast<size_t>(v)] =
              prefix.add(make_input_node(static_cast<int>(externals.size()), body.nodes[static_cast<size_t>(v)].meta));
          externals.push_back(v);
        }
        v = inner[static_cast<size_t>(v)];
      }
      inner[k] = prefix.add(std::move(copy));
    }
    prefix.outputs = {inner[cut - 1]};
    Node fused;
    fused.kind = NodeKind::fused;
    fused.fusion = FusionKind::matmul_epilogue;
    fused.meta = body.nodes[cut - 1].meta;
    for (int v : externals) fused.inputs.push_back(outer[static_cast<size_t>(v)]);
    fused.body = std::make_shared<Graph>(std::move(prefix));
    outer[cut - 1] = split.add(std::move(fused));
    for (size_t k = cut; k < body.nodes.size(); ++k) {
      const Node& m = body.nodes[k];
      if (m.kind != NodeKind::op) continue;
      Node copy = m;
      for (int& v : copy.inputs) {
        if (v != kNoValue) v = outer[static_cast<size_t>(v)];
      }
      outer[k] = split.add(std::move(copy));
    }
    for (int v : body.outputs) split.outputs.push_back(outer[static_cast<size_t>(v)]);
    return split;
  }

  // A fused.matmul_epilogue node: the matmul kernel with the epilogue ops (activations, and add / sub /
  // mul / div by a scalar or a tensor: bias, residual, gate) applied to each result tile in SBUF right
  // before the kernel stores it, so the matmul result makes no HBM round trip. The tensor operands of
  // a tile are loaded kEpilogueAhead result tiles ahead, into buffers above the matmul kernel's own tiles, so
  // that their loads do not hold up the PSUM evacuation. nullopt (nothing emitted) when the chain or
  // the kernel's stores do not have that form; then the group is lowered op by op through HBM.
  std::optional<Place> epilogue_group(const Node& n, std::span<const Place> operands,
                                      const std::optional<Place>& dst) {
    constexpr size_t kEpilogueAhead = 2, kEpilogueBuffers = kEpilogueAhead + 2;
    const Graph& body = *n.body;
    std::vector<const Node*> chain;
    for (const Node& m : body.nodes) {
      if (m.kind == NodeKind::op) chain.push_back(&m);
    }
    if (chain.size() < 2 || op_info(chain[0]->op).kind != OpKind::matmul) return std::nullopt;
    const Node& mm = *chain[0];
    const TensorMeta& meta = mm.meta;
    if (meta.shape.size() == 0 || !dtype_is_floating(meta.dtype)) return std::nullopt;
    auto index_of = [&](const Node* node) { return static_cast<int>(node - body.nodes.data()); };
    // Each epilogue op reads the chain value and at most one group input of the result's dtype.
    for (size_t k = 1; k < chain.size(); ++k) {
      const Node& e = *chain[k];
      const int previous = index_of(chain[k - 1]);
      if (e.meta.dtype != meta.dtype || e.meta.shape != meta.shape) return std::nullopt;
      ActFunc func = ActFunc::identity;
      const bool unary =
          op_is_unary_elementwise(e.op) && (e.op == OpId::pow || kernels::unary_activation(e.op, e.attrs, func));
      const bool binary = e.op == OpId::add || e.op == OpId::sub || e.op == OpId::mul || e.op == OpId::div;
      const bool row_wide = e.op == OpId::softmax || e.op == OpId::log_softmax;
      if ((!unary && !binary && !row_wide) ||
          std::find(e.inputs.begin(), e.inputs.end(), previous) == e.inputs.end()) {
        return std::nullopt;
      }
      for (int v : e.inputs) {
        if (v == previous || v == kNoValue) continue;
        const Node& in = body.nodes[static_cast<size_t>(v)];
        if (in.kind != NodeKind::input || in.meta.dtype != meta.dtype) return std::nullopt;
      }
    }
    std::vector<Place> mm_operands;
    for (int v : mm.inputs) {
      if (v != kNoValue)
        mm_operands.push_back(operands[static_cast<size_t>(body.nodes[static_cast<size_t>(v)].input_index)]);
    }
    std::vector<TensorDesc> descs;
    for (const Place& p : mm_operands) descs.push_back(p.desc);
    const auto taken = find_prefetch(mm.op, mm_operands);
    const TensorDesc result = TensorDesc::contiguous(meta.dtype, meta.shape);
    // A dry run of the matmul kernel on a builder of its own tells its result tiles in store order
    // (each in SBUF, and where in the result it goes) and the SBUF its tiles leave free. Each tile must
    // be SBUF rows of one contiguous run inside one output row.
    struct ResultTile {
      device::AccessPattern y, dst;
    };
    std::vector<ResultTile> tiles;
    uint32_t sbuf_left = 0;
    // A softmax in the chain needs each tile to hold whole rows (from partition 0, where its
    // statistics and work rows are).
    bool row_wide = false;
    for (size_t k = 1; k < chain.size(); ++k) row_wide |= kernels::tile_op_needs(chain[k]->op).row_wide;
    // The next linear's a^T this kernel is to write (a result kept in SBUF, plan_weight_prefetch): the
    // tiles then hold whole rows, so that each splits into K tiles of the next linear at 128-column
    // boundaries, and each is transposed through its own PSUM accumulator (EagerHooks::after_epilogue).
    const auto kept = std::find_if(prefetches_.begin(), prefetches_.end(), [&](const Prefetch& p) { return p.x_on_chip == &n; });
    const bool keep = kept != prefetches_.end();
    // The norm after this group reads its result from SBUF (kept_input_): whole rows too.
    const bool keep_rows_for_norm = kept_input_ && kept_input_->writer == &n;
    // A binary op's operand that the group before left in SBUF (kept_input_, plan_kept_input), or that
    // a norm before read there (kept_residual_, residual_reader): read there, the tiles whole rows too, so
    // that each is a run of columns of the kept rows.
    const kernels::Tile* operand_rows = nullptr;
    int operand_input = -1;
    if (kept_input_ && kept_input_->reader == &n && kept_input_->filled && kept_input_->operand >= 0) {
      operand_rows = &kept_input_->tile;
      operand_input = kept_input_->operand;
    } else if (kept_residual_ && kept_residual_->reader == &n) {
      operand_rows = &kept_residual_->tile;
      operand_input = kept_residual_->operand;
    }
    const bool operand_in_sbuf = operand_rows != nullptr;
    if (keep && !keep_rows_for_norm && !dst) {
      if (std::optional<Place> made = linear_into_next(n, chain, mm_operands, taken, kept)) return made;
    }
    size_t evacuated = 0;  // the dry run's after_epilogue calls
    {
      kernels::KernelBuilder dry(spec_, "epilogue_plan");
      std::vector<uint32_t> io;
      for (size_t i = 0; i < descs.size(); ++i)
        io.push_back(kernels::declare_input(dry, fmt::format("in{}", i), descs[i]));
      const uint32_t out_io = kernels::declare_output(dry, "out", result);
      const std::optional<kernels::PrefetchedWeight> dry_weight =
          mirror_prefetches(dry, taken != prefetches_.end() ? &*taken : nullptr);
      kernels::EagerHooks plan;
      plan.whole_rows = row_wide || keep || keep_rows_for_norm || operand_in_sbuf;
      plan.weight = dry_weight ? &*dry_weight : nullptr;
      plan.allocated = [&] { sbuf_left = dry.sbuf_free_bytes(); };
      plan.before_store = [&](const device::AccessPattern& y, const device::AccessPattern& d) {
        tiles.push_back({y, d});
      };
      if (keep) plan.after_epilogue = [&](const device::AccessPattern&, const device::AccessPattern&) { ++evacuated; };
      kernels::emit_eager_kernel(dry, mm.op, descs, io, mm.attrs, result, out_io, &plan);
    }
    const int64_t row_length = meta.shape.back();
    uint32_t widest = 1;
    for (const ResultTile& t : tiles) {
      const device::AccessPattern &y = t.y, &d = t.dst;
      const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
      const bool row_run = y.memory == device::Memory::sbuf && y.dtype == meta.dtype && y.dim_count == 1 &&
                           y.dims[0].stride == 1 && d.dim_count == 1 && d.dims[0].stride == 1 &&
                           e0 % row_length + d.dims[0].size <= row_length && d.partition_stride % row_length == 0;
      if (!row_run) return std::nullopt;
      if (row_wide && (y.partition_start != 0 || d.dims[0].size != row_length)) return std::nullopt;
      widest = std::max(widest, d.dims[0].size);
    }
    size_t operand_ops = 0;
    for (size_t k = 1; k < chain.size(); ++k) operand_ops += op_is_binary_elementwise(chain[k]->op);
    const uint64_t tile_bytes = (uint64_t{widest} * dtype_size(meta.dtype) + 63) / 64 * 64;
    constexpr size_t kRowWideBuffers = 2;
    const uint64_t row_wide_bytes =
        row_wide ? kRowWideBuffers * ((uint64_t{widest} * 4 + 63) / 64 * 64 + (kernels::kTileStatColumns * 4 + 63) / 64 * 64)
                 : 0;
    if (operand_ops * kEpilogueBuffers * tile_bytes + row_wide_bytes > sbuf_left) return std::nullopt;
    // Keeping the result for the next linear needs every tile through the resident schedule's hook, at
    // K-tile boundaries of the result's columns, its transposes within the tile's PSUM accumulator, and
    // room for the identity beside the epilogue's buffers.
    const uint16_t parts = static_cast<uint16_t>(spec_.partitions);
    const uint64_t identity_bytes = kept_identity_bytes(meta.dtype);
    bool kept_here = keep && evacuated == tiles.size() &&
                     operand_ops * kEpilogueBuffers * tile_bytes + row_wide_bytes + identity_bytes <= sbuf_left;
    for (size_t t = 0; kept_here && t < tiles.size(); ++t) {
      const device::AccessPattern& d = tiles[t].dst;
      const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
      const int64_t chunks = (int64_t{d.dims[0].size} + parts - 1) / parts;
      kept_here = tiles[t].y.partition_start == 0 && d.partition_count <= parts && e0 % row_length % parts == 0 &&
                  d.partition_stride == row_length && chunks * d.partition_count <= int64_t{spec_.tensor.moving_free_max};
    }

    const Place out = dst ? *dst : scratch(meta);
    // The operand buffers go above the kernel's own tiles.
    std::vector<kernels::TilePool> pools(chain.size());
    kernels::TilePool work, stats;  // a softmax's f32 row and per-row statistics
    const Dims out_strides = contiguous_strides(meta.shape);
    const int rank = meta.shape.size();
    // Each tile maps onto kept rows (kept_rows_of: a run of columns of rows from partition 0; a row
    // longer than a PSUM bank comes in column pieces, Llama's 1024 f32).
    const kernels::Tile* some_rows = operand_rows ? operand_rows : kept_input_ ? &kept_input_->tile : nullptr;
    const bool whole_row_runs = some_rows && std::all_of(tiles.begin(), tiles.end(), [&](const ResultTile& t) {
      return kept_rows_of(*some_rows, t.y, t.dst, meta).has_value();
    });
    const bool input_kept = keep_rows_for_norm && whole_row_runs;
    const bool operand_kept = operand_in_sbuf && whole_row_runs;
    // Result tile `piece` (`y`) as a run of columns of the rows kept in `rows`.
    const auto kept_rows = [&](const kernels::Tile& rows, size_t piece, const device::AccessPattern& y) {
      return *kept_rows_of(rows, y, tiles[piece].dst, meta);
    };
    // Whether epilogue op `e`'s operand is the one kept in SBUF.
    const auto reads_kept = [&](const Node& e) {
      if (!operand_kept) return false;
      for (int v : e.inputs) {
        if (v == kNoValue) continue;
        const Node& in = body.nodes[static_cast<size_t>(v)];
        if (in.kind == NodeKind::input && in.input_index == operand_input) return true;
      }
      return false;
    };
    // Loads the operands of the epilogue of result tile `piece` into its buffers.
    auto prefetch = [&](size_t piece) {
      const device::AccessPattern& d = tiles[piece].dst;
      const uint16_t first_partition = tiles[piece].y.partition_start, rows = d.partition_count;
      const uint32_t cols = d.dims[0].size;
      const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
      for (size_t k = 1; k < chain.size(); ++k) {
        const Node& e = *chain[k];
        if (!op_is_binary_elementwise(e.op) || reads_kept(e)) continue;
        builder_.set_source_op(op_name(e.op));
        const kernels::Tile t = pools[k].at(piece % kEpilogueBuffers);
        if (e.attrs.has_scalar) {
          // The scalar from the constants tensor on every row, as the eager kernel reads it.
          const Place c = constant(e.attrs.scalar, meta.dtype);
          builder_.load(t.region(first_partition, rows, 0, 1),
                        kernels::hbm_pattern(c.io, meta.dtype, c.offset, rows, 0, {{1, 1}}));
          continue;
        }
        const int previous = index_of(chain[k - 1]);
        const Node& in_node =
            body.nodes[static_cast<size_t>(e.inputs[0] == previous ? e.inputs[1] : e.inputs[0])];
        const Place& src = operands[static_cast<size_t>(in_node.input_index)];
        const std::vector<int64_t> bs = kernels::broadcast_strides(src.desc, meta.shape);
        auto offset_of = [&](int64_t row) {
          int64_t element = e0 + row * d.partition_stride, off = src.offset;
          for (int dim = 0; dim < rank; ++dim) {
            off += element / out_strides[dim] * bs[static_cast<size_t>(dim)];
            element %= out_strides[dim];
          }
          return off;
        };
        // Rows whose operand offsets step evenly are one DMA.
        for (int64_t r0 = 0; r0 < rows;) {
          const int64_t first = offset_of(r0);
          int64_t len = 1, step = 0;
          if (r0 + 1 < rows) {
            step = offset_of(r0 + 1) - first;
            len = 2;
            while (r0 + len < rows && offset_of(r0 + len) - first == step * len) ++len;
          }
          builder_.load(
              t.region(static_cast<uint16_t>(first_partition + r0), static_cast<uint16_t>(len), 0, cols),
              kernels::hbm_pattern(src.io, src.desc.dtype, first, static_cast<uint16_t>(len), step,
                                   {{cols, static_cast<int32_t>(bs.back())}}));
          r0 += len;
        }
      }
      builder_.set_source_op(op_name(mm.op));
    };
    kernels::EagerHooks hooks;
    hooks.whole_rows = row_wide || keep || keep_rows_for_norm || operand_in_sbuf;
    prefetch_hooks(hooks, taken);
    // The operands of the first kEpilogueAhead tiles load as soon as the kernel has allocated its tiles,
    // ahead of its own loads; or, when it loads its operands itself (no a^T handed over) and its result
    // has more than one row tile, right before its first evacuation, behind its own loads
    // (EagerHooks::before_first_result), so that they do not hold back its first matmuls, and for as many
    // tiles as there are buffers: such a kernel runs K slice by K slice, so its tiles' epilogues all come
    // at its end, where two tiles ahead left the last tile's residual add waiting 3.1 us for its operand
    // (ESM-2 t12 at batch 4). With one row tile the first epilogue comes right after the kernel's loads
    // and would wait for its operands behind them (ESM-2 t12 at batch 1: 1025.0 against 1009.2 us).
    const bool handed_a = taken != prefetches_.end() && taken->weight.activation;
    const bool late_operands =
        !handed_a && many_row_tiles(meta.shape, spec_.partitions);
    size_t prefetched = 0;  // tiles whose operands are loaded
    const auto prefetch_until = [&](size_t end) {
      for (; prefetched < std::min(end, tiles.size()); ++prefetched) prefetch(prefetched);
    };
    const std::function<void()> prefetch_first = [&] { prefetch_until(late_operands ? kEpilogueBuffers : kEpilogueAhead); };
    if (late_operands) hooks.before_first_result = prefetch_first;
    kernels::Tile identity;
    hooks.allocated = [&] {
      if (kept_here) identity = kept_identity(meta.dtype);
      for (size_t k = 1; k < chain.size(); ++k) {
        if (op_is_binary_elementwise(chain[k]->op)) {
          pools[k] = builder_.pool("epilogue_operand", meta.dtype, widest, kEpilogueBuffers);
        }
      }
      if (row_wide) {
        work = builder_.pool("epilogue_work", DType::f32, widest, kRowWideBuffers);
        stats = builder_.pool("epilogue_stats", DType::f32, kernels::kTileStatColumns, kRowWideBuffers);
      }
      if (!late_operands) prefetch_first();
    };
    // With a norm after the group that reads its result from SBUF (input_kept) and more than one row
    // tile, the Vector engine's evacuations and epilogue ops are the tail the norm waits behind, while
    // GpSimd has only the copies for the norm: each binary op with a tensor operand goes to the engine
    // that the estimate of this kernel's work on each so far (the spec's costs: the evacuations on Vector,
    // the copies on GpSimd) says finishes it first (ESM-2 t12 at batch 4: 2736.0 -> 2721.6 us; alternating
    // by row tile, 2712.9, left Llama small f32's four tiles of two column pieces 2.3 us slower).
    const bool balance = input_kept && many_row_tiles(meta.shape, spec_.partitions);
    const bool bias = mm.op == OpId::linear && descs.size() > 2;
    double vector_ns = 0, gpsimd_ns = 0;
    size_t stored = 0;
    hooks.before_store = [&](const device::AccessPattern& y, const device::AccessPattern&) {
      const size_t piece = stored++;
      if (balance) vector_ns += engine_ns(spec_, spec_.vector, static_cast<double>(y.dims[0].size), bias ? 2 : 1, meta.dtype);
      SIGHTLINE_ASSERT_MSG(piece < tiles.size() && y == tiles[piece].y,
                           "the matmul kernel stored other tiles than its dry run");
      prefetch_until(piece + kEpilogueAhead + 1);
      for (size_t k = 1; k < chain.size(); ++k) {
        const Node& e = *chain[k];
        builder_.set_source_op(op_name(e.op));
        if (op_is_unary_elementwise(e.op)) {
          kernels::emit_unary(builder_, e.op, e.attrs, y, y);
          continue;
        }
        if (e.op == OpId::softmax || e.op == OpId::log_softmax) {
          kernels::emit_softmax(builder_, e.op, y, y, work.next().region(0, y.partition_count, 0, y.dims[0].size),
                                stats.next(), y.partition_count);
          continue;
        }
        // The chain value and the operand tile (a host scalar: one per row) in the op's input order.
        const kernels::Tile t = pools[k].at(piece % kEpilogueBuffers);
        const kernels::TileArg chain_value{y, false};
        if (e.attrs.has_scalar) {
          kernels::emit_binary(builder_, e.op, y, chain_value,
                               {t.region(y.partition_start, y.partition_count, 0, 1), true});
          continue;
        }
        const kernels::TileArg operand{
            reads_kept(e) ? kept_rows(*operand_rows, piece, y) : t.region(y.partition_start, y.partition_count, 0, y.dims[0].size), false};
        const bool chain_first = e.inputs[0] == index_of(chain[k - 1]);
        bool on_gpsimd = false;
        if (balance) {
          const double cols = y.dims[0].size;
          const double v = engine_ns(spec_, spec_.vector, cols, 2, meta.dtype), g = engine_ns(spec_, spec_.gpsimd, cols, 2, meta.dtype);
          on_gpsimd = gpsimd_ns + g < vector_ns + v;
          (on_gpsimd ? gpsimd_ns : vector_ns) += on_gpsimd ? g : v;
        }
        kernels::emit_binary(builder_, e.op, y, chain_first ? chain_value : operand,
                             chain_first ? operand : chain_value,
                             on_gpsimd ? device::Engine::gpsimd : device::Engine::vector);
      }
      if (input_kept) {
        if (balance) gpsimd_ns += engine_ns(spec_, spec_.gpsimd, static_cast<double>(y.dims[0].size), 1, meta.dtype);
        // A copy of the tile for the norm (GpSimd, idle in an epilogue: 1 * x, exact), beside its store.
        builder_.set_source_op(op_name(chain.back()->op));
        builder_.tensor_scalar(device::AluOp::multiply, kept_rows(kept_input_->tile, piece, y), y, 1.0f, false,
                               device::Engine::gpsimd);
      }
      builder_.set_source_op(op_name(mm.op));
    };
    // Each result tile, its epilogue applied, into the next linear's a^T (transpose_to_kept) through the
    // tile's PSUM accumulator, free once evacuated. Each tile's transposes are emitted
    // with the next tile's (the last's after the kernel): the Tensor engine runs in order, and a tile's
    // transposes wait for its evacuation and epilogue, which the next tile's matmuls need not. That
    // holds the tile's SBUF result buffer and PSUM bank one tile longer, which is safe while the matmul
    // kernel's PSUM groups take at most half the banks each (at most that many 128-row tiles: its
    // resident schedule's groups are as many tiles as rows allow, up to every bank on its first panel),
    // so that the next group's banks are other ones; else each tile's transposes go right after it.
    const int64_t result_rows = static_cast<int64_t>(meta.shape.product()) / row_length;
    const bool defer = result_rows <= int64_t{spec_.psum_banks / 2} * parts;
    size_t transposed = 0;
    struct Kept {
      device::AccessPattern y, acc;
    };
    std::optional<Kept> pending;
    auto transpose = [&](const device::AccessPattern& y, const device::AccessPattern& acc) {
      const device::AccessPattern& d = tiles[transposed++].dst;
      const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
      transpose_to_kept(kept->weight, identity, y, acc, e0 / row_length, e0 % row_length, row_length,
                        y.partition_count);
    };
    if (kept_here) {
      hooks.after_epilogue = [&](const device::AccessPattern& y, const device::AccessPattern& acc) {
        if (!defer) return transpose(y, acc);
        if (pending) transpose(pending->y, pending->acc);
        pending = Kept{y, acc};
      };
    }
    std::vector<uint32_t> tensors;
    for (const Place& p : mm_operands) tensors.push_back(builder_.view(p.io, p.offset, p.desc.dtype));
    const kernels::KernelBuilder::KernelScope scope = builder_.begin_kernel();
    kernels::emit_eager_kernel(builder_, mm.op, descs, tensors, mm.attrs, out.desc,
                               builder_.view(out.io, out.offset, out.desc.dtype), &hooks);
    if (pending) transpose(pending->y, pending->acc);
    builder_.end_kernel(scope);
    SIGHTLINE_ASSERT_MSG(stored == tiles.size(), "the matmul kernel stored {} tiles, its dry run {}", stored,
                         tiles.size());
    SIGHTLINE_ASSERT_MSG(!kept_here || transposed == tiles.size(), "the matmul kernel kept {} tiles, its dry run {}",
                         transposed, tiles.size());
    if (kept_here) kept->x_filled = true;
    if (input_kept) kept_input_->filled = true;
    if (operand_kept) ++(operand_rows == &kept_input_->tile ? kept_operands_ : kept_residuals_);
    if (taken != prefetches_.end()) took_prefetch(taken);
    ++kernel_count_;
    ++epilogues_;
    return out;
  }

  // A matmul epilogue group of a linear and unary ops whose result only the next linear reads (`kept`,
  // Prefetch::x_read_once), its own weight and input handed over in SBUF (`taken`): computed transposed
  // straight into the next linear's a^T (kernels::emit_linear_transposed), each block's unary ops applied
  // there. No result tile, no transpose through the Tensor engine, no store: the next linear reads it
  // from SBUF only (x_in_sbuf_only), and its value's place is scratch nothing writes. nullopt (nothing
  // emitted) when the group, the operands or the next linear's a^T do not have that form.
  std::optional<Place> linear_into_next(const Node& n, const std::vector<const Node*>& chain,
                                        std::span<const Place> mm_operands, auto taken, auto kept) {
    const Node& mm = *chain[0];
    if (mm.op != OpId::linear || !kept->x_read_once || taken == prefetches_.end() || !taken->weight.activation ||
        kept->weight.panels.size() == 0 || !kernels::linear_transposes_into(spec_, taken->weight, kept->weight))
      return std::nullopt;
    for (size_t k = 1; k < chain.size(); ++k) {
      if (!op_is_unary_elementwise(chain[k]->op)) return std::nullopt;
    }
    std::optional<uint32_t> bias_tensor;
    kernels::TensorDesc bias_desc;
    if (mm_operands.size() > 2) {
      const Place& b = mm_operands[2];
      if (b.desc.shape.size() != 1) return std::nullopt;
      bias_tensor = builder_.view(b.io, b.offset, b.desc.dtype);
      bias_desc = b.desc;
    }
    const Place out = scratch(n.meta);
    const kernels::KernelBuilder::KernelScope scope = builder_.begin_kernel();
    builder_.set_source_op(op_name(mm.op));
    // The next linear's weight streams in under this one's matmuls, behind its bias (all it loads).
    kernels::emit_linear_transposed(
        builder_, taken->weight, bias_tensor, bias_desc, kept->weight,
        [&](const device::AccessPattern& y) {
          for (size_t k = 1; k < chain.size(); ++k) {
            builder_.set_source_op(op_name(chain[k]->op));
            kernels::emit_unary(builder_, chain[k]->op, chain[k]->attrs, y, y);
          }
          builder_.set_source_op(op_name(mm.op));
        },
        [&] {
          if (pending_prefetch()) emit_weight_prefetch();
          builder_.set_source_op(op_name(mm.op));
        });
    builder_.end_kernel(scope);
    kept->x_filled = true;
    kept->x_in_sbuf_only = true;
    ++transposed_linears_;
    took_prefetch(taken);
    ++kernel_count_;
    ++epilogues_;
    return out;
  }

  // The identity a kept result's transposes multiply by (as the attention kernel's), in its dtype: an
  // SBUF [partitions, partitions] tile the caller's kernel scope frees. Built in place, i - p then
  // (i - p) == 0 (integers within +-127, exact in every float dtype), with no ramp tile of its own: a
  // ramp freed right away left a hole the next tiles took, so the norm's first Vector step waited for
  // this GpSimd work to finish reading it, behind the epilogue's copies on GpSimd (1 us per norm).
  kernels::Tile kept_identity(DType dtype, device::Engine on = device::Engine::vector) {
    const uint16_t parts = static_cast<uint16_t>(spec_.partitions);
    const kernels::Tile identity = builder_.sbuf(dtype, parts, 0, "kept_identity");
    builder_.iota(identity.ap(), 0.0f, -1.0f);  // i - p
    builder_.tensor_scalar(device::AluOp::is_equal, identity.ap(), identity.ap(), 0.0f, false, on);
    return identity;
  }
  // Its SBUF bytes per partition.
  uint64_t kept_identity_bytes(DType dtype) const {
    return (uint64_t{spec_.partitions} * dtype_size(dtype) + 63) / 64 * 64;
  }

  // Rows `y` of a result kept in SBUF (on partitions from 0: rows m0.. of a [M, row_length] value, its
  // columns c0..) into the next linear's a^T `kept.activation`: partition p of K tile kt holds column
  // kt * partitions + p, one column per row of the value (kernels::allocate_linear_activation's layout).
  // Transposed 128 columns at a time through the Tensor engine (y^T = y @ I, exact: one product by 1 and
  // the rest by 0 per element) into [w, rows] pieces of the PSUM range `acc`, `piece_stride` f32
  // elements apart (none straddling a bank), and copied out two pieces at a time by the Vector and the
  // Scalar engine in turn, or `on_scalar` all by the Scalar engine: a norm's rows, whose own steps keep
  // the Vector engine the busiest (bn_stats, the normalization, the weight; ESM-2 t12 at batch 4: 2752.0
  // -> 2736.0 us, Llama small f32 at batch 4 2789.8 -> 2787.7; ESM-2 t12 at batch 1 and Llama tiny 0.1 us
  // slower). c0 is a multiple of the partitions.
  void transpose_to_kept(const kernels::PrefetchedWeight& kept, const kernels::Tile& identity,
                         const device::AccessPattern& y, const device::AccessPattern& acc, int64_t m0, int64_t c0,
                         int64_t row_length, uint32_t piece_stride, bool on_scalar = false,
                         const Loads* least_loaded = nullptr) {
    const uint16_t parts = static_cast<uint16_t>(spec_.partitions);
    const int64_t m_total = kept.activation->free_elements / ((row_length + parts - 1) / parts);
    const uint16_t mp = y.partition_count;
    // Piece j's PSUM range and its place in the a^T (K tile (c0 + 128 j) / 128, rows m0..).
    auto psum_piece = [&](uint32_t j, uint16_t w) {
      device::AccessPattern tp = acc;
      tp.partition_start = 0;
      tp.partition_count = w;
      tp.dim_count = 1;
      tp.dims[0] = {mp, 1};
      tp.offset = acc.offset + uint64_t{j} * piece_stride * 4;
      return tp;
    };
    auto kept_piece = [&](uint32_t j, uint16_t w) {
      const int64_t kt = c0 / parts + j;
      return kept.activation->region(0, w, static_cast<uint32_t>(kt * m_total + m0), mp);
    };
    auto width = [&](uint32_t j) { return static_cast<uint16_t>(std::min<uint32_t>(parts, y.dims[0].size - j * parts)); };
    auto transpose = [&](uint32_t j0, uint32_t j1) {
      for (uint32_t j = j0; j < j1; ++j) {
        device::AccessPattern st = y;
        st.offset += uint64_t{j} * parts * dtype_size(y.dtype);
        st.dims[0].size = width(j);
        builder_.matmul(psum_piece(j, width(j)), st, identity.region(0, mp, 0, mp), false);
      }
    };
    // Copied out a run of pieces at a time, one instruction per run (its fixed cost once), pieces
    // [j0, j1) of one width: PSUM pieces piece_stride apart into K tiles m_total apart.
    auto copy_out = [&](uint32_t j0, uint32_t j1, bool scalar) {
      const uint16_t w = width(j0);
      device::AccessPattern from = psum_piece(j0, w), to = kept_piece(j0, w);
      if (j1 - j0 > 1) {
        from.dim_count = to.dim_count = 2;
        from.dims[1] = to.dims[1] = {mp, 1};
        from.dims[0] = {j1 - j0, static_cast<int32_t>(piece_stride)};
        to.dims[0] = {j1 - j0, static_cast<int32_t>(m_total)};
      }
      if (scalar) {
        builder_.activate(ActFunc::identity, to, from);
      } else {
        builder_.copy(to, from);
      }
    };
    // Runs of pieces (kept_copy_runs), each transposed then copied out, by the Vector and the Scalar
    // engine in turn, all by the Scalar engine, or each by the one `least_loaded` (the caller's work on
    // each) and the runs before leave less loaded.
    uint32_t run = 0;
    Loads loads = least_loaded ? *least_loaded : Loads{};
    for (const auto& [j0, j1] : kept_copy_runs(y.dims[0].size)) {
      transpose(j0, j1);
      bool scalar = on_scalar || run % 2 == 1;
      if (least_loaded) {
        const double elements = static_cast<double>(j1 - j0) * mp;
        const double v = loads[kOnVector] + engine_ns(spec_, spec_.vector, elements, 1, DType::f32);
        const double sc = loads[kOnScalar] + engine_ns(spec_, spec_.scalar, elements, 1, DType::f32);
        scalar = sc < v;
        loads[scalar ? kOnScalar : kOnVector] = scalar ? sc : v;
      }
      copy_out(j0, j1, scalar);
      ++run;
    }
  }

  // The runs of 128-column pieces transpose_to_kept copies out of PSUM one instruction each, for a row
  // of `cols` columns: pieces [j0, j1). Runs of two pieces, a last piece of fewer columns a run of its
  // own. Measured against runs of 1, 3 and 4 pieces and of a whole row tile's (bench/README.md, issue
  // 19, eighth session): longer runs wait for more transposes before their copy and lose where the
  // Tensor engine waits for the a^T (ESM-2 t12 at batch 4 +2.8 us with 4), one piece a run pays every
  // copy's fixed cost (Llama small f32 at batch 4 4.9 us slower, t33_650M 4.6).
  std::vector<std::pair<uint32_t, uint32_t>> kept_copy_runs(uint32_t cols) const {
    constexpr uint32_t kRun = 2;
    const uint32_t parts = spec_.partitions, pieces = (cols + parts - 1) / parts;
    const uint32_t full = cols % parts == 0 ? pieces : pieces - 1;
    std::vector<std::pair<uint32_t, uint32_t>> runs;
    for (uint32_t j0 = 0; j0 < pieces;) {
      const uint32_t j1 = j0 < full ? std::min(full, j0 + kRun) : pieces;
      runs.emplace_back(j0, j1);
      j0 = j1;
    }
    return runs;
  }

  // The copies a row tile of `rows` rows of `cols` columns adds to a loop that hands it into a kept
  // a^T (transpose_to_kept): each run's time on the Vector and the Scalar engine (not GpSimd, which
  // does not reach PSUM), for the loop to place its own steps beside.
  std::vector<Loads> kept_copy_steps(int64_t cols, int64_t rows) const {
    std::vector<Loads> steps;
    const double mp = static_cast<double>(std::min<int64_t>(rows, spec_.partitions));
    for (const auto& [j0, j1] : kept_copy_runs(static_cast<uint32_t>(cols))) {
      const double elements = static_cast<double>(j1 - j0) * mp;
      steps.push_back({engine_ns(spec_, spec_.vector, elements, 1, DType::f32),
                       engine_ns(spec_, spec_.scalar, elements, 1, DType::f32), kCannot});
    }
    return steps;
  }

  // The engines and emission order of a view epilogue's steps (engine_balance.h), for a matmul kernel
  // of `tiles` result tiles of `width` columns: a binary op on the Vector engine or GpSimd, a cat's
  // copies on the Vector engine or as GpSimd's 1 * x (the Scalar engine's identity would add +0 and turn
  // -0 into +0), a unary op where emit_unary puts it. A step follows the earlier steps whose buffers it
  // reads or overwrites, or that read the buffer it writes.
  EpilogueSchedule schedule_view_epilogue(const ViewEpiloguePlan& plan, const Node& mm,
                                          std::span<const TensorDesc> descs, int64_t width, size_t tiles,
                                          size_t buffers) const {
    const DType dtype = mm.meta.dtype;
    auto elements = [&](const RowPattern& at) {
      const std::optional<RowPattern> r = restrict_to_columns(at, plan.cols, 0, width);
      double count = r ? 1.0 : 0.0;
      if (r) {
        for (const device::FreeDim& d : r->dims) count *= d.size;
      }
      return count;
    };
    std::vector<EpilogueStepCost> costs;
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const EpilogueStep& step = plan.steps[s];
      const OpId op = step.node->op;
      EpilogueStepCost c{{kCannot, kCannot, kCannot}, {}};
      if (op == OpId::cat) {
        c.ns = {0.0, kCannot, 0.0};
        for (const RowPattern& piece : step.pieces) {
          c.ns[kOnVector] += engine_ns(spec_, spec_.vector, elements(piece), 1, dtype);
          c.ns[kOnGpSimd] += engine_ns(spec_, spec_.gpsimd, elements(piece), 1, dtype);
        }
      } else if (op_is_unary_elementwise(op)) {
        const bool on_vector = op == OpId::to_copy || (op == OpId::pow && step.node->attrs.scalar != 2.0);
        const int e = on_vector ? kOnVector : kOnScalar;
        c.ns[static_cast<size_t>(e)] = engine_ns(spec_, e == kOnVector ? spec_.vector : spec_.scalar,
                                                 elements(step.out), 1, dtype);
      } else {
        int passes = 0;
        for (const EpilogueOperand& o : step.operands) passes += o.kind != EpilogueOperand::Kind::scalar;
        passes = std::max(passes, 1);
        c.ns[kOnVector] = engine_ns(spec_, spec_.vector, elements(step.out), passes, dtype);
        c.ns[kOnGpSimd] = engine_ns(spec_, spec_.gpsimd, elements(step.out), passes, dtype);
      }
      auto reads = [&](const EpilogueStep& st, int buffer) {
        return std::any_of(st.operands.begin(), st.operands.end(), [&](const EpilogueOperand& o) {
          return o.kind == EpilogueOperand::Kind::value && o.buffer == buffer;
        });
      };
      for (size_t a = 0; a < s; ++a) {
        const EpilogueStep& before = plan.steps[a];
        if (reads(step, before.buffer) || before.buffer == step.buffer || reads(before, step.buffer))
          c.after.push_back(a);
      }
      costs.push_back(std::move(c));
    }
    // The Tensor engine's time per tile: its K tiles of `width` moving columns each (the cost model's rule).
    const int64_t k = descs[0].shape.empty() ? 1 : descs[0].shape.back();
    double cycles = static_cast<double>((k + spec_.partitions - 1) / spec_.partitions) *
                    std::max(static_cast<double>(width), static_cast<double>(spec_.tensor.mm_init_interval_cycles));
    if (descs[0].dtype == DType::f32 || descs[1].dtype == DType::f32) cycles *= spec_.tensor.fp32_cost_factor;
    const bool bias = mm.op == OpId::linear && descs.size() > 2;
    return schedule_epilogue(costs, spec_.tensor.cycles_to_ns(cycles),
                             engine_ns(spec_, spec_.vector, static_cast<double>(width), bias ? 2 : 1, dtype), tiles,
                             buffers);
  }

  // A fused.matmul_epilogue node whose ops work on views of the result (the heads of a projection and
  // the rotary embedding on them): the matmul kernel with every op of the plan (view_epilogue.h) applied
  // to each result tile before the kernel stores it, the tile's columns cutting every pattern at whole
  // blocks (heads), else whole rows. The values of the group live in SBUF buffers laid out as the result
  // tile; tensor operands (cos, sin) are loaded kEpilogueAhead tiles ahead, once per row of the dims they
  // do not broadcast along. The group's value is the stored result seen through the root's view (stored
  // into `dst` when that view is contiguous). nullopt (nothing emitted) when the views do not map or the
  // buffers do not fit, with the reason in the executable's metadata ("compiled.epilogue_fallback.<k>");
  // then the group is lowered op by op.
  std::optional<Place> view_epilogue_group(const Node& n, std::span<const Place> operands,
                                           const std::optional<Place>& dst) {
    constexpr size_t kEpilogueAhead = 2, kOperandBuffers = kEpilogueAhead + 2, kValueBuffers = 2;
    const Graph& body = *n.body;
    std::vector<TensorDesc> input_descs;
    for (const Place& p : operands) input_descs.push_back(p.desc);
    std::variant<ViewEpiloguePlan, std::string> planned = plan_view_epilogue(body, input_descs);
    if (const std::string* why = std::get_if<std::string>(&planned)) {
      epilogue_fallbacks_.push_back(*why);
      return std::nullopt;
    }
    const ViewEpiloguePlan& plan = std::get<ViewEpiloguePlan>(planned);
    const Node& mm = *std::find_if(body.nodes.begin(), body.nodes.end(),
                                   [](const Node& m) { return m.kind == NodeKind::op; });
    const TensorMeta& meta = mm.meta;
    const DType dtype = meta.dtype;
    const uint64_t es = dtype_size(dtype);
    std::vector<Place> mm_operands;
    for (int v : mm.inputs) {
      if (v != kNoValue)
        mm_operands.push_back(operands[static_cast<size_t>(body.nodes[static_cast<size_t>(v)].input_index)]);
    }
    std::vector<TensorDesc> descs;
    for (const Place& p : mm_operands) descs.push_back(p.desc);
    const auto taken = find_prefetch(mm.op, mm_operands);
    const TensorDesc result = TensorDesc::contiguous(dtype, meta.shape);
    // A result tile: rows [r0, r0 + rows) on partitions from p0, columns [c0, c0 + width) of them.
    struct ResultTile {
      uint16_t p0 = 0, rows = 0;
      int64_t r0 = 0, c0 = 0, width = 0;
      device::AccessPattern y;
    };
    std::vector<ResultTile> tiles;
    uint32_t sbuf_left = 0;
    // Whether every pattern of the plan cuts at the tile's columns (always so for whole rows).
    auto fits = [&](const ResultTile& t) {
      for (const EpilogueStep& step : plan.steps) {
        int64_t k0 = 0;
        const std::optional<RowPattern> out = restrict_to_columns(step.out, plan.cols, t.c0, t.width, &k0);
        if (!out) return false;
        for (size_t k = 0; k < step.operands.size(); ++k) {
          const EpilogueOperand& o = step.operands[k];
          if (o.kind == EpilogueOperand::Kind::scalar) continue;
          const RowPattern& target = step.pieces.empty() ? *out : step.pieces[k];
          int64_t ok0 = 0;
          const std::optional<RowPattern> r =
              o.kind == EpilogueOperand::Kind::value ? restrict_to_columns(o.at, plan.cols, t.c0, t.width, &ok0)
                                                     : std::optional<RowPattern>(target);
          if (!r || (o.kind == EpilogueOperand::Kind::value && step.pieces.empty() &&
                     (ok0 != k0 || r->dims[0].size != out->dims[0].size)))
            return false;
          if (!step.pieces.empty()) {
            int64_t pk0 = 0;
            const std::optional<RowPattern> piece = restrict_to_columns(step.pieces[k], plan.cols, t.c0, t.width, &pk0);
            if (!piece || pk0 != ok0 || piece->dims[0].size != r->dims[0].size) return false;
          }
        }
      }
      return true;
    };
    // A tensor operand on tile `t`: its free dims restricted to the tile's blocks, the HBM offset of the
    // first block and the elements a row loads.
    struct TileLoad {
      RowPattern at;
      std::vector<device::FreeDim> hbm;
      int64_t shift = 0;
      uint32_t elements = 0;
    };
    auto tile_load = [&](const EpilogueOperand& o, const EpilogueStep& step, const ResultTile& t) {
      int64_t k0 = 0;
      const RowPattern window = *restrict_to_columns(step.out, plan.cols, t.c0, t.width, &k0);
      TileLoad l{o.at, o.hbm, 0, o.loaded};
      if (!l.at.dims.empty() && (t.c0 != 0 || t.width != plan.cols)) {
        const uint32_t blocks = window.dims[0].size;
        if (l.at.dims[0].stride != 0) {  // the operand walks the outermost dim: load only the tile's blocks
          l.shift = k0 * l.hbm[0].stride;
          l.elements = o.loaded / l.hbm[0].size * blocks;
          l.hbm[0].size = blocks;
        }
        l.at.dims[0].size = blocks;
      }
      return l;
    };
    // Loads tensor operand `o` of `step` for result tile `tile` into `t` (its rows on the tile's partitions).
    auto load_operand = [&](const EpilogueOperand& o, const EpilogueStep& step, const ResultTile& tile,
                            const kernels::Tile& t) {
      const TileLoad l = tile_load(o, step, tile);
      if (l.elements == 0) return;
      const Place& src = operands[static_cast<size_t>(o.input)];
      auto offset_of = [&](int64_t row) { return src.offset + l.shift + o.hbm_offset(tile.r0 + row); };
      // Rows whose operand offsets step evenly are one DMA.
      for (int64_t a = 0; a < tile.rows;) {
        const int64_t first = offset_of(a);
        int64_t len = 1, step_rows = 0;
        if (a + 1 < tile.rows) {
          step_rows = offset_of(a + 1) - first;
          len = 2;
          while (a + len < tile.rows && offset_of(a + len) - first == step_rows * len) ++len;
        }
        device::AccessPattern hbm = kernels::hbm_pattern(src.io, src.desc.dtype, first, static_cast<uint16_t>(len),
                                                         step_rows, {{1, 1}});
        if (!l.hbm.empty()) {
          hbm.dim_count = static_cast<uint8_t>(l.hbm.size());
          for (size_t i = 0; i < l.hbm.size(); ++i) hbm.dims[i] = l.hbm[i];
        }
        builder_.load(t.region(static_cast<uint16_t>(tile.p0 + a), static_cast<uint16_t>(len), 0, l.elements), hbm);
        a += len;
      }
    };
    bool use_whole_rows = false;
    // The matmul kernel's result tiles, from a dry run of it beside the SBUF held across kernels; false
    // when they do not serve the plan (the group is then lowered op by op).
    auto plan_tiles = [&] {
    for (const bool whole_rows : {false, true}) {
      tiles.clear();
      kernels::KernelBuilder dry(spec_, "epilogue_plan");
      std::vector<uint32_t> io;
      for (size_t i = 0; i < descs.size(); ++i)
        io.push_back(kernels::declare_input(dry, fmt::format("in{}", i), descs[i]));
      const uint32_t out_io = kernels::declare_output(dry, "out", result);
      const std::optional<kernels::PrefetchedWeight> dry_weight =
          mirror_prefetches(dry, taken != prefetches_.end() ? &*taken : nullptr);
      kernels::EagerHooks dry_hooks;
      dry_hooks.whole_rows = whole_rows;
      dry_hooks.weight = dry_weight ? &*dry_weight : nullptr;
      dry_hooks.allocated = [&] { sbuf_left = dry.sbuf_free_bytes(); };
      bool rows_runs = true;
      dry_hooks.before_store = [&](const device::AccessPattern& y, const device::AccessPattern& d) {
        const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
        rows_runs &= y.memory == device::Memory::sbuf && y.dtype == dtype && y.dim_count == 1 &&
                     y.dims[0].stride == 1 && d.dim_count == 1 && d.dims[0].stride == 1 &&
                     d.partition_stride == plan.cols && e0 % plan.cols + d.dims[0].size <= plan.cols;
        tiles.push_back({y.partition_start, d.partition_count, e0 / plan.cols, e0 % plan.cols, d.dims[0].size, y});
      };
      kernels::emit_eager_kernel(dry, mm.op, descs, io, mm.attrs, result, out_io, &dry_hooks);
      if (rows_runs && std::all_of(tiles.begin(), tiles.end(), fits)) {
        use_whole_rows = whole_rows;
        return true;
      }
    }
    return false;
    };
    const auto no_tiles = [&] {
      epilogue_fallbacks_.push_back(
          "the matmul kernel's result tiles are not runs of whole rows, or cut a view's blocks of columns");
      return std::nullopt;
    };
    if (!plan_tiles()) return no_tiles();
    // Tensor operands every tile loads alike (cos and sin broadcast over the heads of a projection whose
    // rows are one row tile): kept in SBUF from their first load to the end of the program (resident_),
    // where every later kernel that loads them alike reads them too (Llama's q and k projections, every
    // layer). A tile's loads otherwise queue behind the stores of the tiles before it, and the epilogue
    // of the last tiles waits for them after the matmuls are done. A program value is written once (each
    // scratch is its own tensor), so the copy stays right. The first kernel loads them before its own
    // work; its tiles are then planned again beside them.
    std::map<std::pair<size_t, size_t>, kernels::Tile> resident;
    auto resident_key = [&](const EpilogueOperand& o, const EpilogueStep& step, const ResultTile& t) {
      const TileLoad l = tile_load(o, step, t);
      const Place& src = operands[static_cast<size_t>(o.input)];
      std::vector<int64_t> key = {int64_t{src.io}, static_cast<int64_t>(src.desc.dtype), static_cast<int64_t>(dtype),
                                  t.p0, t.rows, l.elements};
      for (const device::FreeDim& d : l.hbm) key.insert(key.end(), {int64_t{d.size}, int64_t{d.stride}});
      for (int64_t row = 0; row < t.rows; ++row) key.push_back(src.offset + l.shift + o.hbm_offset(t.r0 + row));
      return key;
    };
    bool loaded_now = false;
    for (size_t s = 0; s < plan.steps.size() && tiles.size() > 0; ++s) {
      for (size_t k = 0; k < plan.steps[s].operands.size(); ++k) {
        const EpilogueOperand& o = plan.steps[s].operands[k];
        if (o.kind != EpilogueOperand::Kind::tensor) continue;
        const uint32_t elements = tile_load(o, plan.steps[s], tiles[0]).elements;
        const std::vector<int64_t> key = resident_key(o, plan.steps[s], tiles[0]);
        bool alike = elements > 0;
        for (size_t t = 1; alike && t < tiles.size(); ++t) alike = resident_key(o, plan.steps[s], tiles[t]) == key;
        if (!alike) continue;
        auto it = resident_.find(key);
        if (it == resident_.end()) {
          if (uint64_t{elements} * es > builder_.sbuf_free_bytes() / kPrefetchShare) continue;
          const kernels::Tile t = builder_.sbuf(dtype, elements, 0, "resident_operand");
          builder_.set_source_op(op_name(plan.steps[s].node->op));
          load_operand(o, plan.steps[s], tiles[0], t);
          it = resident_.emplace(key, t).first;
          loaded_now = true;
        }
        resident.emplace(std::pair{s, k}, it->second);
      }
    }
    if (loaded_now && !plan_tiles()) return no_tiles();
    // The tiles planned again beside the new copies: an operand whose loads they change is loaded per
    // tile after all (its copy stays for the kernels that load it alike).
    for (auto it = resident.begin(); it != resident.end();) {
      const auto& [s, k] = it->first;
      const EpilogueOperand& o = plan.steps[s].operands[k];
      bool alike = true;
      for (size_t t = 0; alike && t < tiles.size(); ++t) {
        const auto r = resident_.find(resident_key(o, plan.steps[s], tiles[t]));
        alike = r != resident_.end() && r->second.offset == it->second.offset;
      }
      it = alike ? std::next(it) : resident.erase(it);
    }
    // Each step's engine and the order of a tile's steps (schedule_view_epilogue): a rotary embedding's
    // eight steps per tile on the Vector engine alone outlast the tile's matmuls. The matmul kernel's
    // result buffers, as many as the PSUM banks that rotate with them, pace it: two, or (its resident
    // schedule, more than two places among the tiles) one per bank.
    std::set<std::pair<uint16_t, uint64_t>> result_buffers;
    for (const ResultTile& t : tiles) result_buffers.insert({t.y.partition_start, t.y.offset});
    const EpilogueSchedule schedule = schedule_view_epilogue(
        plan, mm, descs, tiles.front().width, tiles.size(), result_buffers.size() <= 2 ? 2 : spec_.psum_banks);
    auto aligned = [](uint64_t bytes) { return (bytes + 63) / 64 * 64; };
    uint64_t need = static_cast<uint64_t>(plan.buffers - 1) * kValueBuffers * aligned(uint64_t(plan.cols) * es);
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      for (size_t k = 0; k < plan.steps[s].operands.size(); ++k) {
        const EpilogueOperand& o = plan.steps[s].operands[k];
        if (resident.count({s, k})) continue;
        if (o.kind == EpilogueOperand::Kind::tensor) need += kOperandBuffers * aligned(o.loaded * es);
        if (o.kind == EpilogueOperand::Kind::scalar) need += kOperandBuffers * aligned(es);
      }
    }
    if (need > sbuf_left) {
      epilogue_fallbacks_.push_back(fmt::format("its buffers need {} bytes per partition, {} are free beside the matmul",
                                                need, sbuf_left));
      return std::nullopt;
    }

    // The stored result is the group's value itself when the root's view of it is contiguous: then it
    // goes straight into `dst` (a contiguous tensor of the root's shape).
    const Node& root = body.nodes[static_cast<size_t>(body.outputs.front())];
    const bool contiguous = plan.offset == 0 && plan.strides == contiguous_strides(root.meta.shape);
    const Place out = dst && contiguous ? Place{dst->io, dst->offset, result} : scratch(meta);
    std::vector<kernels::TilePool> values(static_cast<size_t>(plan.buffers));
    std::map<std::pair<size_t, size_t>, kernels::TilePool> loaded;  // (step, operand) -> its buffers
    auto prefetch = [&](size_t piece) {
      const ResultTile& tile = tiles[piece];
      for (size_t s = 0; s < plan.steps.size(); ++s) {
        const EpilogueStep& step = plan.steps[s];
        for (size_t k = 0; k < step.operands.size(); ++k) {
          const EpilogueOperand& o = step.operands[k];
          if (o.kind == EpilogueOperand::Kind::value || resident.count({s, k})) continue;
          builder_.set_source_op(op_name(step.node->op));
          const kernels::Tile t = loaded.at({s, k}).at(piece % kOperandBuffers);
          if (o.kind == EpilogueOperand::Kind::scalar) {
            const Place c = constant(o.scalar, dtype);
            builder_.load(t.region(tile.p0, tile.rows, 0, 1),
                          kernels::hbm_pattern(c.io, dtype, c.offset, tile.rows, 0, {{1, 1}}));
            continue;
          }
          load_operand(o, step, tile, t);
        }
      }
      builder_.set_source_op(op_name(mm.op));
    };
    kernels::EagerHooks hooks;
    hooks.whole_rows = use_whole_rows;
    prefetch_hooks(hooks, taken);
    hooks.allocated = [&] {
      for (int b = 1; b < plan.buffers; ++b) {
        values[static_cast<size_t>(b)] =
            builder_.pool("epilogue_value", dtype, static_cast<uint32_t>(plan.cols), kValueBuffers);
      }
      for (size_t s = 0; s < plan.steps.size(); ++s) {
        for (size_t k = 0; k < plan.steps[s].operands.size(); ++k) {
          const EpilogueOperand& o = plan.steps[s].operands[k];
          if (o.kind == EpilogueOperand::Kind::value || resident.count({s, k})) continue;
          const uint32_t elements = o.kind == EpilogueOperand::Kind::scalar ? 1 : o.loaded;
          loaded.emplace(std::pair{s, k}, builder_.pool("epilogue_operand", dtype, elements, kOperandBuffers));
        }
      }
      for (size_t piece = 0; piece < std::min(kEpilogueAhead, tiles.size()); ++piece) prefetch(piece);
    };
    size_t stored = 0;
    hooks.before_store = [&](const device::AccessPattern& y, const device::AccessPattern&) {
      const size_t piece = stored++;
      SIGHTLINE_ASSERT_MSG(piece < tiles.size() && y == tiles[piece].y,
                           "the matmul kernel stored other tiles than its dry run");
      if (piece + kEpilogueAhead < tiles.size()) prefetch(piece + kEpilogueAhead);
      const ResultTile& tile = tiles[piece];
      auto shaped = [&](device::AccessPattern ap, const RowPattern& at) {
        ap.offset += static_cast<uint64_t>(at.offset) * es;
        ap.dim_count = static_cast<uint8_t>(at.dims.size());
        for (size_t i = 0; i < at.dims.size(); ++i) ap.dims[i] = at.dims[i];
        return ap;
      };
      auto in_buffer = [&](int buffer, const RowPattern& at) {
        const RowPattern local = *restrict_to_columns(at, plan.cols, tile.c0, tile.width);
        const device::AccessPattern base =
            buffer == 0 ? y
                        : values[static_cast<size_t>(buffer)].at(piece % kValueBuffers).region(tile.p0, tile.rows, 0, 1);
        return shaped(base, local);
      };
      auto empty = [](const device::AccessPattern& ap) { return ap.dim_count > 0 && ap.dims[0].size == 0; };
      for (const size_t s : schedule.order) {
        const EpilogueStep& step = plan.steps[s];
        const Node& e = *step.node;
        const device::Engine on = schedule.engine[s] == kOnGpSimd ? device::Engine::gpsimd : device::Engine::vector;
        builder_.set_source_op(op_name(e.op));
        std::vector<kernels::TileArg> args;
        for (size_t k = 0; k < step.operands.size(); ++k) {
          const EpilogueOperand& o = step.operands[k];
          if (o.kind == EpilogueOperand::Kind::value) {
            args.push_back({in_buffer(o.buffer, o.at), false});
            continue;
          }
          const auto r = resident.find({s, k});
          const kernels::Tile t = r != resident.end() ? r->second : loaded.at({s, k}).at(piece % kOperandBuffers);
          if (o.kind == EpilogueOperand::Kind::scalar) {
            args.push_back({t.region(tile.p0, tile.rows, 0, 1), true});
            continue;
          }
          args.push_back({shaped(t.region(tile.p0, tile.rows, 0, 1), tile_load(o, step, tile).at), false});
        }
        if (e.op == OpId::cat) {
          for (size_t k = 0; k < args.size(); ++k) {
            const device::AccessPattern piece_at = in_buffer(step.buffer, step.pieces[k]);
            if (empty(piece_at)) continue;
            if (on == device::Engine::gpsimd) {
              // 1 * x: an exact copy on GpSimd (the values are floating point, in SBUF).
              builder_.tensor_scalar(device::AluOp::multiply, piece_at, args[k].ap, 1.0f, false, device::Engine::gpsimd);
            } else {
              builder_.copy(piece_at, args[k].ap);
            }
          }
          continue;
        }
        const device::AccessPattern y_at = in_buffer(step.buffer, step.out);
        if (empty(y_at)) continue;
        if (op_is_unary_elementwise(e.op)) {
          kernels::emit_unary(builder_, e.op, e.attrs, y_at, args[0].ap);
        } else {
          kernels::emit_binary(builder_, e.op, y_at, args[0], args[1], on);
        }
      }
      builder_.set_source_op(op_name(mm.op));
    };
    std::vector<uint32_t> tensors;
    for (const Place& p : mm_operands) tensors.push_back(builder_.view(p.io, p.offset, p.desc.dtype));
    const kernels::KernelBuilder::KernelScope scope = builder_.begin_kernel();
    kernels::emit_eager_kernel(builder_, mm.op, descs, tensors, mm.attrs, out.desc,
                               builder_.view(out.io, out.offset, out.desc.dtype), &hooks);
    builder_.end_kernel(scope);
    SIGHTLINE_ASSERT_MSG(stored == tiles.size(), "the matmul kernel stored {} tiles, its dry run {}", stored,
                         tiles.size());
    if (taken != prefetches_.end()) took_prefetch(taken);
    ++kernel_count_;
    ++epilogues_;
    return Place{out.io, out.offset + plan.offset, {dtype, root.meta.shape, plan.strides}};
  }

  // Attention as the user writes it, softmax(q @ k^T [* scale] [+ mask]) @ v: the scores' matmul
  // epilogue (matmul, an optional multiply by a host scalar, an optional add of a mask tensor, softmax
  // along the last dim) read only by a matmul with v. It runs as one attention kernel (the one
  // scaled_dot_product_attention lowers to: q k^T into PSUM, scale, mask and softmax in SBUF, P v
  // accumulated in PSUM, per head and 128-query tile), so the scores never reach HBM; each phase's
  // instructions carry the name of the user's op it computes.
  struct AttentionMatch {
    const Node* scores = nullptr;  // the fused.matmul_epilogue node
    const Node* scale = nullptr;   // aten::mul by a host scalar, or none
    const Node* mask = nullptr;    // aten::add of a mask tensor, or none
    const Node* softmax = nullptr;
    const Node* cast = nullptr;    // a _to_copy of the probabilities to the operands' dtype (autocast), or none
    // Llama's softmax(scores.to(f32)).to(dtype): the row group of the two casts and the softmax, which
    // then live in its body (softmax and cast point there), or none.
    const Node* softmax_rows = nullptr;
    int q = 0, k_t = 0, mask_input = -1;  // body input indices
  };

  // The softmax and the cast back of a fused.rows node whose body is exactly
  // to_copy(x, f32) -> softmax(-1) -> to_copy(dtype), x of `dtype`: the f32 softmax of the scores.
  static std::optional<std::pair<const Node*, const Node*>> match_f32_softmax_rows(const Node& rows, DType dtype) {
    if (rows.kind != NodeKind::fused || rows.fusion != FusionKind::rows || rows.inputs.size() != 1) return std::nullopt;
    const Graph& body = *rows.body;
    std::vector<const Node*> chain;
    for (const Node& m : body.nodes) {
      if (m.kind == NodeKind::op) chain.push_back(&m);
    }
    if (chain.size() != 3 || body.outputs.size() != 1) return std::nullopt;
    const Node &up = *chain[0], &softmax = *chain[1], &down = *chain[2];
    auto index_of = [&](const Node& node) { return static_cast<int>(&node - body.nodes.data()); };
    const Node& in = body.nodes[static_cast<size_t>(up.inputs[0])];
    if (in.kind != NodeKind::input || in.meta.dtype != dtype || up.op != OpId::to_copy || up.meta.dtype != DType::f32) {
      return std::nullopt;
    }
    const int rank = softmax.meta.shape.size(), dim = static_cast<int>(softmax.attrs.dim);
    if (softmax.op != OpId::softmax || softmax.inputs[0] != index_of(up) || (dim != -1 && dim != rank - 1) ||
        softmax.meta.dtype != DType::f32) {
      return std::nullopt;
    }
    if (down.op != OpId::to_copy || down.inputs[0] != index_of(softmax) || down.meta.dtype != dtype ||
        body.outputs[0] != index_of(down)) {
      return std::nullopt;
    }
    return std::make_pair(&softmax, &down);
  }

  // The scores epilogue of an attention: matmul [* scale] [+ mask], then the softmax in the same body,
  // or, with `softmax_follows` (the f32 softmax rows of Llama's cast), as the body's output.
  static std::optional<AttentionMatch> match_attention_scores(const Node& epilogue, bool softmax_follows = false) {
    if (epilogue.kind != NodeKind::fused || epilogue.fusion != FusionKind::matmul_epilogue) return std::nullopt;
    const Graph& body = *epilogue.body;
    std::vector<const Node*> chain;
    for (const Node& m : body.nodes) {
      if (m.kind == NodeKind::op) chain.push_back(&m);
    }
    if (chain.empty() || chain[0]->op != OpId::matmul) return std::nullopt;
    if (softmax_follows ? chain.back()->op == OpId::softmax : chain.size() < 2 || chain.back()->op != OpId::softmax) {
      return std::nullopt;
    }
    AttentionMatch match;
    match.scores = &epilogue;
    match.softmax = softmax_follows ? nullptr : chain.back();
    const Node& mm = *chain[0];
    const int rank = mm.meta.shape.size();
    const DType dtype = mm.meta.dtype;
    if (rank < 2 || !dtype_is_floating(dtype)) return std::nullopt;
    auto input_of = [&](int v) {
      const Node& in = body.nodes[static_cast<size_t>(v)];
      return in.kind == NodeKind::input ? in.input_index : -1;
    };
    if (mm.inputs.size() != 2) return std::nullopt;
    match.q = input_of(mm.inputs[0]);
    match.k_t = input_of(mm.inputs[1]);
    if (match.q < 0 || match.k_t < 0) return std::nullopt;
    auto index_of = [&](const Node* node) { return static_cast<int>(node - body.nodes.data()); };
    int previous = index_of(chain[0]);
    const size_t steps = softmax_follows ? chain.size() : chain.size() - 1;
    for (size_t k = 1; k < steps; ++k) {
      const Node& e = *chain[k];
      if (e.meta.dtype != dtype || e.meta.shape != mm.meta.shape) return std::nullopt;
      if (e.op == OpId::mul && e.attrs.has_scalar && !match.scale && !match.mask && e.inputs[0] == previous) {
        match.scale = &e;
      } else if (e.op == OpId::add && !e.attrs.has_scalar && !match.mask && e.inputs.size() == 2) {
        const int other = e.inputs[0] == previous ? e.inputs[1] : e.inputs[1] == previous ? e.inputs[0] : kNoValue;
        if (other == kNoValue || input_of(other) < 0) return std::nullopt;
        if (body.nodes[static_cast<size_t>(other)].meta.dtype != dtype) return std::nullopt;
        match.mask = &e;
        match.mask_input = input_of(other);
      } else {
        return std::nullopt;
      }
      previous = index_of(&e);
    }
    if (softmax_follows) {
      if (body.outputs.size() != 1 || body.outputs[0] != previous) return std::nullopt;
      return match;
    }
    const int dim = static_cast<int>(match.softmax->attrs.dim);
    if (match.softmax->inputs[0] != previous || (dim != -1 && dim != rank - 1)) return std::nullopt;
    return match;
  }

  // The attention matches of `graph`: for each matmul node that reads such scores (and is their only
  // reader) as its first operand, the match; the scores node is then not lowered on its own.
  std::map<size_t, AttentionMatch> find_attention(const Graph& graph) const {
    std::vector<int> uses(graph.nodes.size(), 0);
    for (const Node& n : graph.nodes) {
      for (int v : n.inputs) {
        if (v != kNoValue) ++uses[static_cast<size_t>(v)];
      }
    }
    for (int v : graph.outputs) ++uses[static_cast<size_t>(v)];
    std::map<size_t, AttentionMatch> found;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& n = graph.nodes[i];
      if (n.kind != NodeKind::op || n.op != OpId::matmul || n.inputs.size() != 2) continue;
      auto scores = static_cast<size_t>(n.inputs[0]);
      if (uses[scores] != 1 || !dtype_is_floating(n.meta.dtype)) continue;
      // Under autocast the probabilities reach the matmul through a cast to its operands' dtype.
      const Node* cast = nullptr;
      if (const Node& c = graph.nodes[scores]; c.kind == NodeKind::op && c.op == OpId::to_copy) {
        cast = &c;
        scores = static_cast<size_t>(c.inputs[0]);
        if (uses[scores] != 1) continue;
      } else if (c.kind == NodeKind::fused && c.fusion == FusionKind::rows && c.inputs.size() == 1) {
        // Llama's softmax(scores.to(f32)).to(dtype): a row group of the casts and the softmax.
        const auto rows = match_f32_softmax_rows(c, n.meta.dtype);
        const auto at = static_cast<size_t>(c.inputs[0]);
        if (!rows || uses[at] != 1) continue;
        std::optional<AttentionMatch> m = match_attention_scores(graph.nodes[at], /*softmax_follows=*/true);
        if (!m) continue;
        m->softmax_rows = &c;
        m->softmax = rows->first;
        m->cast = rows->second;
        found.emplace(i, *m);
        continue;
      }
      if (std::optional<AttentionMatch> m = match_attention_scores(graph.nodes[scores])) {
        m->cast = cast;
        found.emplace(i, *m);
      }
    }
    return found;
  }

  // repeat_kv's copies (HF's grouped-query attention: x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b,
  // kv * n_rep, s, d)) that only attention kernels read, as k^T or v, through views: a contiguous copy of
  // an expand that broadcasts one inserted dim (the repeat dim, after the heads). The kernel reads the
  // key/value heads themselves instead, so the copy is not made (its value gets a stand-in place that no
  // kernel reads, unmade_io) unless the kernel turns the shapes down. For each such copy, its repeat dim.
  std::map<size_t, int> find_repeat_copies(const Graph& graph, const std::map<size_t, AttentionMatch>& attention_at,
                                           const std::map<int, Place>& destination) const {
    std::set<std::pair<size_t, int>> kv_reads;  // (attention node or its scores node, the value it reads)
    for (const auto& [at, match] : attention_at) {
      const Node& scores = *match.scores;
      kv_reads.insert({static_cast<size_t>(&scores - graph.nodes.data()),
                       scores.inputs[static_cast<size_t>(match.k_t)]});
      kv_reads.insert({at, graph.nodes[at].inputs[1]});
    }
    std::vector<std::vector<size_t>> readers(graph.nodes.size());
    for (size_t j = 0; j < graph.nodes.size(); ++j) {
      for (int v : graph.nodes[j].inputs) {
        if (v != kNoValue) readers[static_cast<size_t>(v)].push_back(j);
      }
    }
    const std::set<int> outputs(graph.outputs.begin(), graph.outputs.end());
    std::map<size_t, int> found;
    for (size_t c = 0; c < graph.nodes.size(); ++c) {
      const Node& copy = graph.nodes[c];
      if (copy.kind != NodeKind::op || copy.op != OpId::contiguous || copy.inputs.size() != 1 ||
          destination.count(static_cast<int>(c))) {
        continue;
      }
      const Node& expand = graph.nodes[static_cast<size_t>(copy.inputs[0])];
      if (expand.kind != NodeKind::op || expand.op != OpId::expand || expand.inputs.empty()) continue;
      const Dims& before = graph.nodes[static_cast<size_t>(expand.inputs[0])].meta.shape;
      const Dims& after = expand.meta.shape;
      if (before.size() != after.size()) continue;
      int dim = -1, broadcast = 0;
      for (int d = 0; d < after.size(); ++d) {
        if (before[d] == after[d]) continue;
        dim = d;
        broadcast += before[d] == 1 ? 1 : 2;
      }
      if (broadcast != 1 || dim < 1) continue;
      // Every reader, through views, is an attention's k^T or v, read once.
      bool only_attention = true;
      std::vector<size_t> stack = {c};
      while (!stack.empty() && only_attention) {
        const size_t v = stack.back();
        stack.pop_back();
        if (outputs.count(static_cast<int>(v))) only_attention = false;
        for (size_t r : readers[v]) {
          const Node& reader = graph.nodes[r];
          if (reader.kind == NodeKind::op && op_info(reader.op).is_view) {
            stack.push_back(r);
          } else if (!kv_reads.count({r, static_cast<int>(v)}) ||
                     std::count(reader.inputs.begin(), reader.inputs.end(), static_cast<int>(v)) != 1) {
            only_attention = false;
          }
        }
      }
      if (only_attention) found.emplace(c, dim);
    }
    return found;
  }

  // The stand-in I/O index of a copy not made (find_repeat_copies): views of it are resolved as of any
  // value, and the attention kernel that reads them reads the key/value heads instead.
  static constexpr uint32_t kUnmadeIo = 0x80000000u;
  static uint32_t unmade_io(size_t copy) { return kUnmadeIo | static_cast<uint32_t>(copy); }

  // The key/value heads behind `p`, a view of an unmade repeat copy (k with its last two dims swapped
  // back from k^T, or v), when the view is the copy's [.., kv * n_rep, s, d] reshape: the copy's input
  // (the expand) without its repeat dim. nullopt when `p` is no such view.
  std::optional<Place> kv_heads_of(const Graph& graph, const Place& p, const std::vector<Place>& values) const {
    if ((p.io & kUnmadeIo) == 0) return std::nullopt;
    const size_t c = p.io & ~kUnmadeIo;
    const auto it = unmade_copies_.find(c);
    if (it == unmade_copies_.end()) return std::nullopt;
    const int dim = it->second;
    const Node& copy = graph.nodes[c];
    // The repeat dim merges into the heads: the third dim from the end of the kernel's k and v.
    if (dim + 3 != copy.meta.shape.size()) return std::nullopt;
    Dims merged;
    for (int d = 0; d < copy.meta.shape.size(); ++d) {
      if (d == dim) {
        merged[merged.size() - 1] = merged[merged.size() - 1] * copy.meta.shape[d];
      } else {
        merged.push_back(copy.meta.shape[d]);
      }
    }
    const TensorDesc expected = TensorDesc::contiguous(copy.meta.dtype, merged);
    if (p.offset != 0 || p.desc.shape != expected.shape || p.desc.strides != expected.strides) return std::nullopt;
    const Place& src = values[static_cast<size_t>(copy.inputs[0])];
    if (src.desc.shape.size() != copy.meta.shape.size() || src.desc.strides[dim] != 0) return std::nullopt;
    Place heads{src.io, src.offset, {src.desc.dtype, {}, {}}};
    for (int d = 0; d < src.desc.shape.size(); ++d) {
      if (d == dim) continue;
      heads.desc.shape.push_back(src.desc.shape[d]);
      heads.desc.strides.push_back(src.desc.strides[d]);
    }
    return heads;
  }

  // Makes the unmade copy `c` after all (its attention kernel turned the shapes down): into scratch, and
  // every place that stood for it (values, the deferred operands) now points there.
  void make_unmade_copy(const Graph& graph, size_t c, std::vector<Place>& values,
                        std::map<size_t, std::vector<Place>>& deferred_operands) {
    if (!unmade_copies_.erase(c)) return;
    const Node& copy = graph.nodes[c];
    const Place made = lower_node(copy, {values[static_cast<size_t>(copy.inputs[0])]}, scratch(copy.meta));
    const uint32_t io = unmade_io(c);
    for (Place& p : values) {
      if (p.io == io) p.io = made.io;
    }
    for (auto& [node, places] : deferred_operands) {
      for (Place& p : places) {
        if (p.io == io) p.io = made.io;
      }
    }
  }

  // What a value's elements are by how the graph makes them: each 0 or 1 (a bool, or a bool cast to a
  // number), or each finite (such a 0/1 value times a finite host scalar that the dtype holds: Llama's
  // causal mask, gt(...).to(dtype) * finfo.min); through views, and into the bodies of fused nodes
  // (`outer`: the fused nodes entered, innermost last, with the graphs that hold them). Anything else
  // proves nothing (a cast of a finite f32 to bf16 may overflow; a product of two finite values too).
  enum class ValueBound { none, zero_one, finite };
  static ValueBound bound_of(const Graph& g, int v, std::vector<std::pair<const Graph*, const Node*>> outer = {}) {
    if (v == kNoValue) return ValueBound::none;
    const Node& n = g.nodes[static_cast<size_t>(v)];
    if (n.meta.dtype == DType::boolean) return ValueBound::zero_one;
    if (n.kind == NodeKind::input) {
      if (outer.empty()) return ValueBound::none;
      const auto [holder, fused] = outer.back();
      outer.pop_back();
      return bound_of(*holder, fused->inputs[static_cast<size_t>(n.input_index)], std::move(outer));
    }
    if (n.kind == NodeKind::fused) {
      if (!n.body || n.body->outputs.size() != 1) return ValueBound::none;
      outer.emplace_back(&g, &n);
      return bound_of(*n.body, n.body->outputs[0], std::move(outer));
    }
    if (n.kind != NodeKind::op || n.inputs.empty()) return ValueBound::none;
    if (op_info(n.op).is_view) return bound_of(g, n.inputs[0], std::move(outer));
    if (n.op == OpId::to_copy)
      return bound_of(g, n.inputs[0], std::move(outer)) == ValueBound::zero_one ? ValueBound::zero_one : ValueBound::none;
    // The scalar as the dtype holds it (rounded; infinite where it overflows).
    const auto held = [&](double x) {
      return dtype_visit(n.meta.dtype, [&]<typename T>() { return to_double(from_float<T>(static_cast<float>(x))); });
    };
    if (n.op == OpId::mul && n.attrs.has_scalar && dtype_is_floating(n.meta.dtype) && std::isfinite(held(n.attrs.scalar)) &&
        bound_of(g, n.inputs[0], std::move(outer)) == ValueBound::zero_one)
      return ValueBound::finite;
    return ValueBound::none;
  }

  // The attention kernel for `pv` = matmul(scores, v) with the scores' operands at `scores_operands`;
  // nullopt (nothing emitted) when the kernel does not take these shapes. `kv_heads` (both or neither):
  // k and v as their key/value heads, read in place of the repeat_kv copies the graph makes of them
  // (unmade_repeat_copies): query head h reads key/value head h / (query heads / key/value heads).
  std::optional<Place> attention(const AttentionMatch& match, const Node& pv, std::span<const Place> scores_operands,
                                 const Place& v_in, const std::optional<Place>& dst, bool mask_finite,
                                 const std::optional<std::pair<Place, Place>>& kv_heads = std::nullopt) {
    const Place& q = scores_operands[static_cast<size_t>(match.q)];
    const Place& k_t = scores_operands[static_cast<size_t>(match.k_t)];
    // k is k^T's view with its last two dims swapped back: the kernel reads k^T from k's strides.
    TensorDesc k = k_t.desc;
    const int rank = k.shape.size();
    if (rank < 2) return std::nullopt;
    std::swap(k.shape[rank - 1], k.shape[rank - 2]);
    std::swap(k.strides[rank - 1], k.strides[rank - 2]);
    Place k_place{k_t.io, k_t.offset, k};
    if (kv_heads) {
      k_place = kv_heads->first;
      k = k_place.desc;
    }
    const Place& v = kv_heads ? kv_heads->second : v_in;
    if (k.shape.size() != rank || q.desc.shape.size() != rank || v.desc.shape.size() != rank) return std::nullopt;
    // Leading (batch, head) dims as the kernel indexes them: q's, with k and v the same or, read from
    // their key/value heads, the same number of heads and one per group of query heads.
    for (int d = 0; d + 2 < rank; ++d) {
      if (kv_heads && d + 3 == rank) {
        if (k.shape[d] != v.desc.shape[d] || k.shape[d] <= 0 || q.desc.shape[d] % k.shape[d] != 0) return std::nullopt;
      } else if (k.shape[d] != q.desc.shape[d] || v.desc.shape[d] != q.desc.shape[d]) {
        return std::nullopt;
      }
    }
    // The kernel computes the scores and the softmax in f32 and rounds P once to the operands' dtype:
    // the graph's own numerics when the scores are in that dtype, or f32 scores with a cast of P to it.
    const DType dtype = q.desc.dtype;
    const DType scores_dtype = match.softmax->meta.dtype;
    if (k.dtype != dtype || v.desc.dtype != dtype) return std::nullopt;
    if (match.cast ? (match.cast->meta.dtype != dtype || scores_dtype != DType::f32) : scores_dtype != dtype) {
      return std::nullopt;
    }
    if (pv.meta.dtype != dtype && pv.meta.dtype != DType::f32) return std::nullopt;
    if (kernels::attention_unsupported(spec_, q.desc, k, v.desc)) return std::nullopt;
    std::vector<Place> operands = {q, k_place, v};
    if (match.mask) operands.push_back(scores_operands[static_cast<size_t>(match.mask_input)]);
    OpAttrs attrs;
    attrs.scalar = match.scale ? match.scale->attrs.scalar : 1.0;
    attrs.is_causal = false;
    const Place out = dst ? *dst : scratch(pv.meta);
    std::vector<TensorDesc> descs;
    std::vector<uint32_t> tensors;
    for (const Place& p : operands) {
      descs.push_back(p.desc);
      tensors.push_back(builder_.view(p.io, p.offset, p.desc.dtype));
    }
    const Node& scores_mm = *std::find_if(match.scores->body->nodes.begin(), match.scores->body->nodes.end(),
                                          [](const Node& m) { return m.kind == NodeKind::op; });
    kernels::EagerHooks hooks;
    hooks.mask_finite = match.mask && mask_finite;
    const bool streams = std::any_of(prefetches_.begin(), prefetches_.end(),
                                     [](const Prefetch& p) { return p.from_attention && !p.emitted; });
    if (streams)
      hooks.after_loads = [this] {
        streaming_ = true;
        emit_weight_prefetch();
        streaming_ = false;
      };
    hooks.attention_phase = [&](kernels::AttentionPhase phase) {
      switch (phase) {
        case kernels::AttentionPhase::scores: builder_.set_source_op(op_name(scores_mm.op)); break;
        case kernels::AttentionPhase::scale:
          builder_.set_source_op(op_name(match.scale ? match.scale->op : scores_mm.op));
          break;
        case kernels::AttentionPhase::mask:
          if (match.mask) builder_.set_source_op(op_name(match.mask->op));
          break;
        case kernels::AttentionPhase::softmax: builder_.set_source_op(op_name(match.softmax->op)); break;
        case kernels::AttentionPhase::values: builder_.set_source_op(op_name(pv.op)); break;
      }
    };
    const kernels::KernelBuilder::KernelScope scope = builder_.begin_kernel();
    kernels::emit_eager_kernel(builder_, OpId::scaled_dot_product_attention, descs, tensors, attrs, out.desc,
                               builder_.view(out.io, out.offset, out.desc.dtype), &hooks);
    builder_.end_kernel(scope);
    ++kernel_count_;
    ++attentions_;
    return out;
  }

  // Where the attention at node `at` can store its result: when that result is read only by a chain
  // of views (each read only by the next) ending in a contiguous copy, and the views only reorder its
  // dims (permute, transpose, and views that add or drop dims of one), the kernel stores each head's
  // rows straight into the copy's destination, at the pitch the views give them, and the copy
  // disappears. The views are resolved by their strides, not by their names: the chain applied to the
  // result's contiguous layout says which dim of the result each dim of the copy is, and the chain
  // applied to the store's layout must give the copy's. Otherwise the reason.
  struct AttentionStore {
    size_t copy = 0;   // the contiguous node the kernel's store replaces
    TensorDesc desc;   // the attention result's layout inside the copy's destination
  };
  std::variant<AttentionStore, std::string> attention_store(const Graph& graph, size_t at,
                                                            const std::vector<int>& uses) const {
    auto sole_reader = [&](size_t value) -> std::optional<size_t> {
      if (uses[value] != 1) return std::nullopt;
      for (size_t j = value + 1; j < graph.nodes.size(); ++j) {
        const Node& n = graph.nodes[j];
        if (std::find(n.inputs.begin(), n.inputs.end(), static_cast<int>(value)) != n.inputs.end()) return j;
      }
      return std::nullopt;  // read by the graph's outputs
    };
    const TensorMeta& meta = graph.nodes[at].meta;
    const TensorDesc base = TensorDesc::contiguous(meta.dtype, meta.shape);
    using Viewed = std::optional<std::pair<int64_t, TensorDesc>>;  // a view's offset and desc
    auto through = [](const std::vector<const Node*>& chain, TensorDesc desc) -> Viewed {
      int64_t offset = 0;
      for (const Node* v : chain) {
        const auto applied = apply_view_desc(v->op, v->attrs, offset, desc);
        if (!applied) return std::nullopt;
        std::tie(offset, desc) = *applied;
      }
      return std::pair{offset, desc};
    };
    std::vector<const Node*> chain;
    size_t value = at;
    while (true) {
      const std::optional<size_t> reader = sole_reader(value);
      if (!reader) return std::string("the result is read by more than one op or returned");
      const Node& n = graph.nodes[*reader];
      if (n.kind == NodeKind::op && n.op == OpId::contiguous) {
        if (chain.empty()) return std::string("the result is copied with no view before the copy");
        const Viewed viewed = through(chain, base);
        if (!viewed) return std::string("the views before the copy do not resolve to strides");
        const TensorDesc& v = viewed->second;
        const Dims copy_strides = contiguous_strides(n.meta.shape);
        // Dim i of the result (extent > 1) is the copy's dim with its contiguous stride and extent.
        TensorDesc desc = base;
        for (int i = 0; i < base.shape.size(); ++i) {
          if (base.shape[i] == 1) continue;
          bool found = false;
          for (int j = 0; j < v.shape.size() && !found; ++j) {
            if (v.strides[j] == base.strides[i] && v.shape[j] == base.shape[i]) {
              desc.strides[i] = copy_strides[j];
              found = true;
            }
          }
          if (!found) return std::string("the views before the copy do more than reorder the result's dims");
        }
        const Viewed stored = through(chain, desc);
        bool contiguous = stored && stored->first == 0;
        for (int j = 0; contiguous && j < n.meta.shape.size(); ++j) {
          contiguous = n.meta.shape[j] == 1 || stored->second.strides[j] == copy_strides[j];
        }
        if (!contiguous) return std::string("the views before the copy do more than reorder the result's dims");
        return AttentionStore{*reader, desc};
      }
      if (n.kind != NodeKind::op || !op_info(n.op).is_view) {
        return std::string("the result is read by an op other than views and a contiguous copy");
      }
      chain.push_back(&n);
      value = *reader;
    }
  }

  Place scratch(const TensorMeta& meta) {
    const uint32_t io =
        builder_.output(fmt::format("scratch{}", scratch_ios_.size()), meta.dtype, to_vector(meta.shape));
    scratch_ios_.push_back(io);
    return {io, 0, TensorDesc::contiguous(meta.dtype, meta.shape)};
  }

  // Lowers one fused or op node whose operands are at `operands`, into `dst` when that is set.
  Place lower_node(const Node& n, std::vector<Place> operands, const std::optional<Place>& dst) {
    if (n.kind == NodeKind::fused) {
      if (n.fusion == FusionKind::rows) {
        if (std::optional<Place> fused = row_group(n, operands, dst)) return *fused;
      }
      if (n.fusion == FusionKind::matmul_epilogue) {
        // A chain of ops on the result itself, or one that goes through views of it (or reads a value
        // twice), which only the view-level plan resolves.
        const bool views = epilogue_has_views(*n.body);
        if (std::optional<Place> fused = views ? view_epilogue_group(n, operands, dst) : epilogue_group(n, operands, dst))
          return *fused;
      }
      const std::optional<Place> body_result[] = {dst};
      if (n.fusion == FusionKind::matmul_epilogue) {
        if (std::optional<Graph> split = epilogue_before_row_wide(*n.body)) {
          return lower_graph(*split, operands, body_result).front();
        }
      }
      return lower_graph(*n.body, operands, body_result).front();
    }
    if (!op_info(n.op).is_view) return kernel(n.op, std::move(operands), n.attrs, n.meta, dst, &n);
    if (std::optional<Place> view = apply_view(n.op, n.attrs, operands.front())) return *view;
    const Place& source = operands.front();
    const Place dense = kernel(OpId::contiguous, {source}, {}, {source.desc.shape, source.desc.dtype}, std::nullopt);
    return *apply_view(n.op, n.attrs, dense);
  }

  // Lowers `graph` with its inputs at `inputs`. Output k is written to `results[k]` when that is set
  // (a contiguous tensor), else left where its producer put it. Returns the outputs' places.
  std::vector<Place> lower_graph(const Graph& graph, std::span<const Place> inputs,
                                 std::span<const std::optional<Place>> results) {
    // A kernel-producing output writes its result straight into the requested place; other outputs
    // (an argument returned as is, a view, a value returned twice) are copied there at the end.
    std::map<int, Place> destination;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const Node& n = graph.nodes[static_cast<size_t>(graph.outputs[k])];
      const bool produces = n.kind == NodeKind::fused || (n.kind == NodeKind::op && !op_info(n.op).is_view);
      if (results[k] && produces) destination.emplace(graph.outputs[k], *results[k]);
    }
    std::vector<Place> values(graph.nodes.size());
    // How many times each value is read (by nodes and as an output), for the attention's store.
    std::vector<int> uses(graph.nodes.size(), 0);
    for (const Node& n : graph.nodes) {
      for (int v : n.inputs) {
        if (v != kNoValue) ++uses[static_cast<size_t>(v)];
      }
    }
    for (int v : graph.outputs) ++uses[static_cast<size_t>(v)];
    // Contiguous copies an attention kernel already wrote (attention_store): their value is that place.
    std::set<size_t> stored_copies;
    // Attention's scores are lowered with the matmul that reads them (one kernel), not before it.
    const std::map<size_t, AttentionMatch> attention_at = find_attention(graph);
    std::vector<bool> deferred(graph.nodes.size(), false);
    std::map<size_t, std::vector<Place>> deferred_operands;
    for (const auto& [at, match] : attention_at) {
      deferred[static_cast<size_t>(match.scores - graph.nodes.data())] = true;
      if (match.softmax_rows) {
        deferred[static_cast<size_t>(match.softmax_rows - graph.nodes.data())] = true;
      } else if (match.cast) {
        deferred[static_cast<size_t>(match.cast - graph.nodes.data())] = true;
      }
    }
    // repeat_kv's copies the attention kernels read past (find_repeat_copies): this graph's, while it is
    // lowered (a fused node's body lowered inside it has its own).
    struct RestoreUnmade {
      std::map<size_t, int>& member;
      std::map<size_t, int> saved;
      ~RestoreUnmade() { member = std::move(saved); }
    } restore_unmade{unmade_copies_,
                     std::exchange(unmade_copies_, find_repeat_copies(graph, attention_at, destination))};
    // The contiguous copies the attention kernels are to write (attention_store), which then emit no
    // kernel: plan_weight_prefetch looks past them, and past the unmade repeat copies.
    std::set<size_t> planned_stores, attention_nodes;
    for (const auto& [c, dim] : unmade_copies_) planned_stores.insert(c);
    for (const auto& [at, match] : attention_at) {
      attention_nodes.insert(at);
      if (destination.count(static_cast<int>(at))) continue;
      const std::variant<AttentionStore, std::string> plan = attention_store(graph, at, uses);
      if (const auto* store = std::get_if<AttentionStore>(&plan)) planned_stores.insert(store->copy);
    }
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& n = graph.nodes[i];
      if (deferred[i]) {
        for (int v : n.inputs) {
          if (v != kNoValue) deferred_operands[i].push_back(values[static_cast<size_t>(v)]);
        }
        continue;
      }
      if (auto it = attention_at.find(i); it != attention_at.end()) {
        builder_.set_queue_order(kernel_queue_map());
        plan_stream_past_attention(graph, i, values, deferred, planned_stores);
        const size_t scores = static_cast<size_t>(it->second.scores - graph.nodes.data());
        std::optional<Place> at_dst;
        if (auto d = destination.find(static_cast<int>(i)); d != destination.end()) at_dst = d->second;
        // The result stored straight into the contiguous copy its permuted view feeds, when it can.
        std::variant<AttentionStore, std::string> plan = std::string("the result is returned");
        if (!at_dst) plan = attention_store(graph, i, uses);
        const AttentionStore* store = std::get_if<AttentionStore>(&plan);
        if (store) {
          const Node& copy = graph.nodes[store->copy];
          Place copy_dst;
          if (auto d = destination.find(static_cast<int>(store->copy)); d != destination.end()) {
            copy_dst = d->second;
          } else {
            copy_dst = scratch(copy.meta);
          }
          at_dst = Place{copy_dst.io, copy_dst.offset, store->desc};
          // The copy writes there when the kernel does not take these shapes after all.
          destination[static_cast<int>(store->copy)] = copy_dst;
        }
        // k and v from their key/value heads, when both are views of unmade repeat copies.
        std::vector<Place>& scores_operands = deferred_operands.at(scores);
        const Place& v_place = values[static_cast<size_t>(n.inputs[1])];
        TensorDesc k_desc = scores_operands[static_cast<size_t>(it->second.k_t)].desc;
        std::optional<std::pair<Place, Place>> kv_heads;
        if (const int r = k_desc.shape.size(); r >= 2) {
          std::swap(k_desc.shape[r - 1], k_desc.shape[r - 2]);
          std::swap(k_desc.strides[r - 1], k_desc.strides[r - 2]);
          const Place& k_t = scores_operands[static_cast<size_t>(it->second.k_t)];
          const std::optional<Place> k_heads = kv_heads_of(graph, {k_t.io, k_t.offset, k_desc}, values);
          const std::optional<Place> v_heads = kv_heads_of(graph, v_place, values);
          if (k_heads && v_heads) kv_heads = std::pair{*k_heads, *v_heads};
        }
        // Copies this attention reads that were not made, made now when it cannot read past them: it
        // then reads them as the graph says.
        auto make_copies = [&] {
          for (const Place* p : {static_cast<const Place*>(&scores_operands[static_cast<size_t>(it->second.k_t)]),
                                 &v_place}) {
            if (p->io & kUnmadeIo) make_unmade_copy(graph, p->io & ~kUnmadeIo, values, deferred_operands);
          }
        };
        if (!kv_heads) make_copies();
        // An additive mask whose elements the graph makes finite may be added on the Tensor engine.
        const bool mask_finite =
            it->second.mask_input >= 0 &&
            bound_of(graph, graph.nodes[scores].inputs[static_cast<size_t>(it->second.mask_input)]) == ValueBound::finite;
        std::optional<Place> fused = attention(it->second, n, scores_operands, v_place, at_dst, mask_finite, kv_heads);
        if (fused && kv_heads) ++grouped_kv_attentions_;
        if (!fused && kv_heads) {
          make_copies();
          fused = attention(it->second, n, scores_operands, v_place, at_dst, mask_finite);
        }
        // A stream the kernel did not emit (it does not take these shapes) is dropped.
        for (auto p = prefetches_.begin(); p != prefetches_.end();) {
          if (p->from_attention && !p->emitted) {
            release(*p);
            p = prefetches_.erase(p);
          } else {
            ++p;
          }
        }
        if (fused) {
          values[i] = *fused;
          if (store) {
            stored_copies.insert(store->copy);
            ++attention_stores_;
          } else {
            attention_store_fallbacks_.push_back(std::get<std::string>(plan));
          }
          continue;
        }
        // The kernel does not take these shapes: the scores' group (and its cast or its softmax rows),
        // then this matmul.
        values[scores] = lower_node(graph.nodes[scores], deferred_operands.at(scores), std::nullopt);
        if (const Node* rows = it->second.softmax_rows) {
          const auto r = static_cast<size_t>(rows - graph.nodes.data());
          values[r] = lower_node(*rows, {values[scores]}, std::nullopt);
        } else if (const Node* cast = it->second.cast) {
          const auto c = static_cast<size_t>(cast - graph.nodes.data());
          values[c] = lower_node(*cast, {values[scores]}, std::nullopt);
        }
      }
      std::optional<Place> dst;
      if (auto it = destination.find(static_cast<int>(i)); it != destination.end()) dst = it->second;
      std::vector<Place> operands;
      for (int v : n.inputs) {
        if (v != kNoValue) operands.push_back(values[static_cast<size_t>(v)]);
      }
      if (n.kind == NodeKind::input) {
        values[i] = inputs[static_cast<size_t>(n.input_index)];
        continue;
      }
      if (stored_copies.count(i)) {
        values[i] = destination.at(static_cast<int>(i));
        continue;
      }
      if (unmade_copies_.count(i)) {
        values[i] = Place{unmade_io(i), 0, TensorDesc::contiguous(n.meta.dtype, n.meta.shape)};
        continue;
      }
      previous_kernel_start_ = std::exchange(kernel_start_, builder_.dma_queue_lengths());
      current_ = &n;
      builder_.set_queue_order(kernel_queue_map());
      plan_weight_prefetch(graph, i, values, deferred, planned_stores, attention_nodes);
      // Each kernel's transfers from the queues the kernels since the one before left idlest (idle_queues_),
      // but while a stream past the attention holds the upper half.
      if (idle_queues_ && !stream_in_flight()) {
        kernel_order_ = idlest_queue_order();
        builder_.set_queue_order(kernel_order_);
      }
      plan_kept_input(graph, i, deferred, values);
      // A norm reading kept_input_'s rows: whether they stay for a residual add after it (the norm then
      // does not compute over them).
      residual_after_norm_ =
          kept_input_ && kept_input_->reader == &n && kept_input_->filled ? residual_reader(graph, i) : std::nullopt;
      values[i] = lower_node(n, std::move(operands), dst);
      if (kept_residual_ && kept_residual_->reader == &n) {
        builder_.free(kept_residual_->tile);
        kept_residual_.reset();
      }
      if (kept_input_ && (kept_input_->reader == &n || (kept_input_->writer == &n && !kept_input_->filled))) {
        if (residual_after_norm_) {
          kept_residual_ = residual_after_norm_;
          kept_residual_->tile = kept_input_->tile;
        } else {
          builder_.free(kept_input_->tile);
        }
        for (const kernels::Tile& t : kept_input_->parameters) builder_.free(t);
        kept_input_.reset();
      }
      residual_after_norm_.reset();
      // A result kept in SBUF for the next linear: read from there when node i's kernel wrote it, else
      // (the group lowered op by op) loaded from where it went, as a prefetched activation.
      for (Prefetch& p : prefetches_) {
        if (p.x_on_chip != &n) continue;
        p.x_io = values[i].io;
        p.x_offset = values[i].offset;
        if (p.x_filled) {
          ++kept_activations_;
          continue;
        }
        p.x_on_chip = nullptr;
        if (p.emitted) {
          builder_.set_source_op(op_name(OpId::linear));  // the linear's load, between kernels
          kernels::prefetch_linear_activation(builder_, p.weight, builder_.view(p.x_io, p.x_offset, p.weight.x.dtype));
        }
      }
      kernel_order_.clear();
      current_ = nullptr;
      builder_.set_queue_order(kernel_queue_map());
      // Every kernel that could have emitted the prefetch's loads is out: emit them now at the latest.
      if (pending_prefetch()) emit_weight_prefetch();
      // A linear that did not take its prefetched weight (kernel() found another layout) leaves it unread.
      for (auto it = prefetches_.begin(); it != prefetches_.end();) {
        if (it->linear == &n) {
          SIGHTLINE_ASSERT_MSG(!it->x_in_sbuf_only, "a linear's input held only in SBUF was left unread");
          release(*it);
          it = prefetches_.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::vector<Place> out;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const Place& value = values[static_cast<size_t>(graph.outputs[k])];
      const bool in_place = results[k] && value.io == results[k]->io && value.offset == results[k]->offset;
      if (results[k] && !in_place) {
        out.push_back(
            kernel(OpId::contiguous, {value}, {}, {value.desc.shape, value.desc.dtype}, results[k]));
      } else {
        out.push_back(value);
      }
    }
    return out;
  }

  // A norm's kernel may write its result into the next linear's a^T as well (ActivationChain::in_sbuf):
  // rms_norm and layer_norm, whose row tiles hold whole rows from partition 0, and a row loop (a user's
  // RMSNorm), whose tiles do when its rows fit SBUF (keep_rows).
  static bool keeps_rows(const Node& n) {
    return (n.kind == NodeKind::op && (n.op == OpId::layer_norm || n.op == OpId::rms_norm)) ||
           (n.kind == NodeKind::fused && n.fusion == FusionKind::rows);
  }

  // Emits the eager kernel of one op application straight into the program (of graph node `node`, when
  // it is one: a norm whose result a prefetch keeps in SBUF, plan_weight_prefetch).
  Place kernel(OpId op, std::vector<Place> operands, OpAttrs attrs, const TensorMeta& meta,
               const std::optional<Place>& dst, const Node* node = nullptr) {
    // Each operand is cast to the dtype the kernel reads it in (elementwise_operand_dtype).
    std::vector<Tensor> views;
    for (const Place& p : operands) views.push_back(view_of(p));
    const OpCall call{op, views, attrs};
    if (casts_inputs(op)) {
      for (size_t i = 0; i < operands.size(); ++i) {
        Place& p = operands[i];
        const DType operand_dtype = elementwise_operand_dtype(call, i, meta.dtype);
        if (p.desc.dtype == operand_dtype) continue;
        OpAttrs cast;
        cast.dtype = operand_dtype;
        p = kernel(OpId::to_copy, {p}, cast, {p.desc.shape, operand_dtype}, std::nullopt);
      }
    }
    if (op_is_binary_elementwise(op) && attrs.has_scalar) {
      operands.push_back(constant(attrs.scalar, elementwise_operand_dtype(call, 1, meta.dtype)));
      attrs.has_scalar = false;
    }
    const Place out = dst ? *dst : scratch(meta);
    std::vector<TensorDesc> descs;
    std::vector<uint32_t> tensors;
    for (const Place& p : operands) {
      descs.push_back(p.desc);
      tensors.push_back(builder_.view(p.io, p.offset, p.desc.dtype));
    }
    kernels::EagerHooks hooks;
    const auto taken = find_prefetch(op, operands);
    const bool takes_prefetch = taken != prefetches_.end();
    if (op_info(op).kind == OpKind::matmul) prefetch_hooks(hooks, taken);
    const kernels::KernelBuilder::KernelScope scope = builder_.begin_kernel();
    // The norm kernel's whole pipeline beside the kept identity, whose instructions are the norm's (a
    // prefetch emitted before may have left the builder on a linear's op).
    std::optional<KeptRows> kept;
    if (node) {
      builder_.set_source_op(op_name(op));
      kept = keep_rows(*node, out.desc, [&](uint64_t bytes) {
        return bytes + kernels::normalization_sbuf_bytes(descs, out.desc) <= builder_.sbuf_free_bytes();
      });
    }
    if (kept) hooks.rows_computed = [&](const device::AccessPattern& y, const device::AccessPattern& d) { transpose_rows(*kept, y, d, 0); };
    // This matmul's result kept in SBUF for the matmul epilogue group after it, which reads it as its
    // binary op's operand (plan_kept_input): each result tile copied there beside its store, as an
    // epilogue group's is for a norm, when every tile maps onto the kept rows (else the reader loads it).
    const bool keeps_result = node && kept_input_ && kept_input_->writer == node && op_info(op).kind == OpKind::matmul;
    bool kept_every_tile = keeps_result;
    if (keeps_result) {
      hooks.whole_rows = true;
      hooks.before_store = [&](const device::AccessPattern& y, const device::AccessPattern& d) {
        const std::optional<device::AccessPattern> rows = kept_rows_of(kept_input_->tile, y, d, meta);
        kept_every_tile = kept_every_tile && rows;
        if (!kept_every_tile) return;
        builder_.tensor_scalar(device::AluOp::multiply, *rows, y, 1.0f, false, device::Engine::gpsimd);
      };
    }
    // This norm reads its input from the copy the matmul epilogue before it left in SBUF (plan_kept_input).
    const bool reads_kept = node && kept_input_ && kept_input_->reader == node;
    const bool input_kept =
        reads_kept && kept_input_->filled && descs[0].strides == contiguous_strides(descs[0].shape);
    if (input_kept) {
      hooks.input_rows = &kept_input_->tile;
      hooks.input_rows_read_later = residual_after_norm_.has_value();
      ++kept_norm_inputs_;
    }
    // The parameters, loaded before the group (whether or not it filled the rows).
    const bool parameters_kept = reads_kept && !kept_input_->parameters.empty();
    if (reads_kept) {
      for (size_t k = 0; k < kept_input_->parameters.size(); ++k) hooks.parameters[k] = &kept_input_->parameters[k];
    }
    kernels::emit_eager_kernel(builder_, op, descs, tensors, attrs, out.desc,
                               builder_.view(out.io, out.offset, out.desc.dtype),
                               op_info(op).kind == OpKind::matmul || kept || input_kept || parameters_kept ? &hooks : nullptr);
    builder_.end_kernel(scope);
    if (kept && kept->transposed == kept->rows) kept->prefetch->x_filled = true;
    if (kept_every_tile) kept_input_->filled = true;
    if (takes_prefetch) took_prefetch(taken);
    ++kernel_count_;
    return out;
  }

  // Norm node n's result kept in SBUF for the linear after it, when a prefetch holds that linear's a^T
  // for it (plan_weight_prefetch): the identity and a PSUM ring for the transposes, allocated before
  // n's kernel (the caller frees them), and transpose_rows, which the kernel's hook (rows_computed)
  // calls on each row tile right after computing it and emitting its store, so the linear waits for
  // neither the store nor a reload. The kernel still stores its result (its other readers, and a linear
  // whose kernel cannot take the a^T, read it there). nullopt (nothing allocated) when the rows do not
  // map onto the a^T or `fits(bytes)` says the kernel would not fit beside the identity's bytes; the
  // linear then loads the stored result as a prefetched activation (lower_graph), as it does when the
  // kernel did not transpose every row (a row loop's tiles of column chunks).
  struct Prefetch;
  struct KeptRows {
    Prefetch* prefetch = nullptr;
    kernels::Tile identity;
    kernels::TilePool psum;
    int64_t row_length = 0, rows = 0, transposed = 0;  // rows transposed so far
  };
  std::optional<KeptRows> keep_rows(const Node& n, const TensorDesc& out, const std::function<bool(uint64_t)>& fits) {
    if (!keeps_rows(n)) return std::nullopt;
    const auto kept = std::find_if(prefetches_.begin(), prefetches_.end(), [&](const Prefetch& p) { return p.x_on_chip == &n; });
    if (kept == prefetches_.end() || !kept->weight.activation || out.shape.size() == 0) return std::nullopt;
    const uint16_t parts = static_cast<uint16_t>(spec_.partitions);
    const int64_t row_length = out.shape.back();
    if (row_length == 0) return std::nullopt;
    const int64_t rows = static_cast<int64_t>(out.shape.product()) / row_length, chunks = (row_length + parts - 1) / parts;
    if (out.strides != contiguous_strides(out.shape) || out.dtype != kept->weight.x.dtype ||
        kept->weight.activation->free_elements != static_cast<uint64_t>(chunks * rows))
      return std::nullopt;
    const auto aligned = [](uint64_t bytes) { return (bytes + 63) / 64 * 64; };
    const uint64_t identity_bytes = kept_identity_bytes(out.dtype);
    // Two row tiles' transposes in flight: a PSUM range of every chunk of a row tile each.
    constexpr size_t kPsumBuffers = 2;
    const uint64_t psum_bytes = kPsumBuffers * aligned(uint64_t(chunks) * parts * 4);
    if (identity_bytes > builder_.sbuf_free_bytes() || !fits(identity_bytes) || psum_bytes > builder_.psum_free_bytes())
      return std::nullopt;
    KeptRows k;
    k.prefetch = &*kept;
    // Built on GpSimd, beside the iota: a norm's first steps are the Vector engine's.
    k.identity = kept_identity(out.dtype, device::Engine::gpsimd);
    k.psum = builder_.pool("kept_transposes", DType::f32, static_cast<uint32_t>(chunks * parts), kPsumBuffers,
                           device::Memory::psum);
    k.row_length = row_length;
    k.rows = rows;
    return k;
  }

  // Rows `y` of a kept norm result, stored to `dst` (whose tensor holds the result from element `base`),
  // into the a^T. The PSUM ring's ranges are bank-aligned, a chunk's piece 128 f32 apart.
  void transpose_rows(KeptRows& k, const device::AccessPattern& y, const device::AccessPattern& dst, int64_t base,
                      const Loads* per_tile = nullptr) {
    const int64_t e0 = static_cast<int64_t>(dst.offset / dtype_size(dst.dtype)) - base;
    if (e0 % k.row_length != 0 || dst.partition_stride != k.row_length || y.partition_start != 0 ||
        y.dim_count != 1 || y.dims[0].stride != 1 || int64_t{y.dims[0].size} != k.row_length)
      return;
    transpose_to_kept(k.prefetch->weight, k.identity, y, k.psum.next().ap(), e0 / k.row_length, 0, k.row_length,
                      spec_.partitions, /*on_scalar=*/true, per_tile);
    k.transposed += y.partition_count;
  }

  // A weight prefetched for a linear ahead (plan_weight_prefetch), until the linear reads it.
  struct Prefetch {
    kernels::PrefetchedWeight weight;
    uint32_t io = 0;
    int64_t offset = 0;
    const Node* linear = nullptr;  // the node it is for
    bool emitted = false;          // its loads are in the program
    uint32_t x_io = 0;             // where the prefetched activation (weight.activation) is read from
    int64_t x_offset = 0;
    // The node whose kernel writes the activation straight into weight.activation (the linear's input is
    // its result, kept in SBUF: ActivationChain::in_sbuf), or none; x_filled once it has.
    const Node* x_on_chip = nullptr;
    bool x_filled = false;
    // The linear is the only reader of x_on_chip's result (no view, no other op, not a program result):
    // its kernel may then compute it transposed straight into the a^T and store nothing
    // (kernels::emit_linear_transposed); x_in_sbuf_only once it has, and the linear must then read it.
    bool x_read_once = false;
    bool x_in_sbuf_only = false;
    // The activation is another prefetch's tile, handed on (plan_weight_prefetch: q, k and v read one
    // activation): x_shared on the prefetch that reads it after, which loads nothing and frees it;
    // activation_handed_on on the one before, which no longer frees it.
    bool x_shared = false;
    bool activation_handed_on = false;
    // The MLP's first weight, streamed from inside the attention kernel (MlpWeight::past_attention); the
    // linear's own prefetch then takes its panels over (weight_emitted: their loads are out already).
    bool past_attention = false;
    bool weight_emitted = false;
    // Emitted only from inside the attention kernel, behind its last loads (plan_stream_past_attention):
    // the MLP's stream, and the out projection's weight on the kernels' queues.
    bool from_attention = false;
  };

  // A matmul kernel's part in the prefetch: its loads are all out before its first store, so the next
  // linear's weight loads queue there, behind them and ahead of the stores, and move while this product
  // computes; and it reads `taken`'s panels (when it is the linear they are for). The hook adds no
  // element to prefetches_ (emit_weight_prefetch marks one), so `taken` stays valid.
  void prefetch_hooks(kernels::EagerHooks& hooks, std::vector<Prefetch>::iterator taken) {
    if (pending_prefetch()) (after_loads_ ? hooks.after_loads : hooks.before_stores) = [this] { emit_weight_prefetch(); };
    if (taken == prefetches_.end()) return;
    hooks.weight = &taken->weight;
    tile_by_tile_kernels_ += taken->weight.activation && taken->weight.tile_by_tile && many_row_tiles(taken->weight.x.shape, spec_.partitions);
  }

  // The prefetch whose loads are out for this linear's weight (and input) at `operands`, if any.
  std::vector<Prefetch>::iterator find_prefetch(OpId op, std::span<const Place> operands) {
    if (op != OpId::linear || operands.size() < 2) return prefetches_.end();
    const Place &x = operands[0], &w = operands[1];
    return std::find_if(prefetches_.begin(), prefetches_.end(), [&](const Prefetch& p) {
      return p.emitted && w.io == p.io && w.offset == p.offset && w.desc.shape == p.weight.weight.shape &&
             w.desc.strides == p.weight.weight.strides && w.desc.dtype == p.weight.weight.dtype &&
             (!p.weight.activation || (x.io == p.x_io && x.offset == p.x_offset));
    });
  }

  void took_prefetch(std::vector<Prefetch>::iterator taken) {
    SIGHTLINE_ASSERT_MSG(!taken->x_in_sbuf_only || taken->weight.activation_read,
                         "a linear's input held only in SBUF was not read from there");
    if (taken->weight.activation) ++prefetched_activations_;
    if (taken->weight.panels.size() > 0) ++prefetched_weights_;
    release(*taken);
    prefetches_.erase(taken);
  }

  // A fused kernel plans its tiles on a dry run of its own builder, and its tiles must come out the same
  // in the program's: so the dry builder first gets what the program's SBUF holds between kernels, the
  // prefetched panels (and inputs), at the same addresses. Returns the dry copy of `taken` (the prefetch
  // the kernel reads), if any, for the dry run's EagerHooks::weight.
  std::optional<kernels::PrefetchedWeight> mirror_prefetches(kernels::KernelBuilder& dry, const Prefetch* taken) const {
    struct Unit {
      uint32_t offset;
      const Prefetch* owner;
      bool activation;
    };
    std::vector<Unit> units;
    // A handed-on activation is one tile, mirrored once, for the prefetch that frees it.
    for (const Prefetch& p : prefetches_) {
      if (p.weight.panels.size() > 0) units.push_back({p.weight.panels.at(0).offset, &p, false});
      if (p.weight.activation && !p.activation_handed_on) units.push_back({p.weight.activation->offset, &p, true});
    }
    std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.offset < b.offset; });
    std::optional<kernels::PrefetchedWeight> copy;
    std::vector<kernels::Tile> fillers;
    std::map<const Prefetch*, kernels::PrefetchedWeight> made;
    // A weight's panels need not be one range (the first may have gone into a hole that later ones did
    // not fit): so the dry builder first gets fillers around every tile of the prefetches and a
    // reservation of each tile's range; each unit's reservations are freed right before it is allocated,
    // so that the only free ranges below the last tile are that unit's own, which first fit fills in
    // order, as in the program.
    std::map<std::pair<const Prefetch*, bool>, std::vector<kernels::Tile>> reserved;
    {
      struct Held {
        kernels::Tile tile;
        const Prefetch* owner;
        bool activation;
      };
      std::vector<Held> tiles;
      for (const Prefetch& p : prefetches_) {
        for (size_t k = 0; k < p.weight.panels.size(); ++k) tiles.push_back({p.weight.panels.at(k), &p, false});
        if (p.weight.activation && !p.activation_handed_on) tiles.push_back({*p.weight.activation, &p, true});
      }
      if (kept_input_) {
        tiles.push_back({kept_input_->tile, nullptr, false});
        for (const kernels::Tile& t : kept_input_->parameters) tiles.push_back({t, nullptr, false});
      }
      if (kept_residual_) tiles.push_back({kept_residual_->tile, nullptr, false});
      for (const auto& [key, t] : resident_) tiles.push_back({t, nullptr, false});
      std::sort(tiles.begin(), tiles.end(), [](const Held& a, const Held& b) { return a.tile.offset < b.tile.offset; });
      // The end of the last tile allocated so far: tiles start 64-byte aligned, and one whose size is
      // not a multiple of 64 (a resident epilogue operand) leaves a gap that no free-byte count shows.
      uint32_t end = 0;
      for (const Held& h : tiles) {
        const uint32_t next = (end + 63) / 64 * 64;
        if (h.tile.offset > next)
          fillers.push_back(dry.sbuf(DType::f32, (h.tile.offset - next) / 4, 0, "between_kernels"));
        const kernels::Tile t = dry.sbuf(h.tile.dtype, h.tile.free_elements, 0, "reserved");
        SIGHTLINE_ASSERT(t.offset == h.tile.offset);
        end = t.offset + t.bytes_per_partition();
        reserved[{h.owner, h.activation}].push_back(t);
      }
    }
    for (const Unit& u : units) {
      for (const kernels::Tile& t : reserved.at({u.owner, u.activation})) dry.free(t);
      kernels::PrefetchedWeight& w = made[u.owner];
      w.weight = u.owner->weight.weight;
      if (!u.activation) {
        std::optional<kernels::PrefetchedWeight> panels =
            kernels::allocate_linear_weight(dry, w.weight, std::numeric_limits<uint64_t>::max());
        SIGHTLINE_ASSERT(panels && panels->panels.size() == u.owner->weight.panels.size());
        w.panels = panels->panels;
        for (size_t k = 0; k < w.panels.size(); ++k)
          SIGHTLINE_ASSERT_MSG(w.panels.at(k).offset == u.owner->weight.panels.at(k).offset,
                               "prefetched panel {} at {} in the dry run, {} in the program", k,
                               w.panels.at(k).offset, u.owner->weight.panels.at(k).offset);
      } else {
        const bool allocated =
            kernels::allocate_linear_activation(dry, w, u.owner->weight.x, std::numeric_limits<uint64_t>::max());
        SIGHTLINE_ASSERT(allocated && w.activation->offset == u.owner->weight.activation->offset);
        w.tile_by_tile = u.owner->weight.tile_by_tile;
      }
    }
    for (const Prefetch& p : prefetches_) {
      if (!p.activation_handed_on) continue;
      const auto owner = std::find_if(prefetches_.begin(), prefetches_.end(), [&](const Prefetch& o) {
        return o.x_shared && !o.activation_handed_on && o.weight.activation &&
               o.weight.activation->offset == p.weight.activation->offset;
      });
      SIGHTLINE_ASSERT_MSG(owner != prefetches_.end(), "a handed-on activation at {} has no prefetch that reads it",
                           p.weight.activation->offset);
      kernels::PrefetchedWeight& w = made[&p];
      w.weight = p.weight.weight;
      w.activation = made.at(&*owner).activation;
      w.x = p.weight.x;
      w.tile_by_tile = p.weight.tile_by_tile;
    }
    for (const kernels::Tile& t : fillers) dry.free(t);  // the kept norm input's reservation stays, as the tile does
    SIGHTLINE_ASSERT(dry.sbuf_free_bytes() == builder_.sbuf_free_bytes());
    if (taken) copy = made.at(taken);
    return copy;
  }

  // Weight prefetch across kernel boundaries. A linear's weight is a program argument, which nothing in
  // the program writes, so it can be loaded into SBUF while the kernel before the linear runs: a DMA
  // queue runs its transfers in order, and the weight loads emitted with the linear would start only
  // once the previous kernel's stores are through. Before lowering node `i` of `graph`, when the next
  // node that emits a kernel is a linear whose weight is an argument (an aten::linear, or a matmul
  // epilogue group of one: linear_inputs) and node `i` is an op lowered by kernel() or a matmul epilogue
  // group, the weight's SBUF panels are allocated (so node i's kernel plans around them) if they take
  // at most 1/kPrefetchShare of the free SBUF (1/2 with PrefetchBudget::half: prefetch_share_); node i's
  // kernel emits their loads before its first store when it is a matmul, else they are emitted before it.
  // The linear then reads them (EagerHooks::weight) and frees them. An epilogue group plans its tiles on a
  // dry run, which gets the same panels first (mirror_prefetches), so its tiles come out as they will in
  // the program. A row loop (fused.rows: a user's RMSNorm) right before the linear plans no weight
  // panels, only the hand-over of its result into the linear's a^T (keepable, below): a weight stream
  // emitted before the loop would hold up the loop's own transfers. Whether the program keeps its
  // prefetches is decided by lower() on the cost model (the comment above lower()): plan_weight_prefetch
  // does nothing when prefetch_ is off.
  static constexpr uint64_t kPrefetchShare = 4;

  // The next node after node j that emits a kernel (past inputs, deferred nodes, views and the copies
  // an attention stores into), or none.
  static std::optional<size_t> next_kernel(const Graph& graph, size_t j, const std::vector<bool>& deferred,
                                           const std::set<size_t>& planned_stores) {
    for (size_t k = j + 1; k < graph.nodes.size(); ++k) {
      const Node& m = graph.nodes[k];
      if (m.kind == NodeKind::input || deferred[k] || (m.kind == NodeKind::op && op_info(m.op).is_view) ||
          planned_stores.count(k))
        continue;
      return k;
    }
    return std::nullopt;
  }

  static bool is_norm(const Node& n) {
    return (n.kind == NodeKind::op && (n.op == OpId::layer_norm || n.op == OpId::rms_norm)) ||
           (n.kind == NodeKind::fused && n.fusion == FusionKind::rows);
  }

  // MlpWeight::past_attention, at attention node `at`: when the kernels after it are a linear (the out
  // projection), a norm and a linear whose weight is a program argument (the MLP's first), that weight's
  // panels are allocated now, within half the free SBUF (the attention plans around them), and the
  // attention kernel emits their loads behind its last loads (EagerHooks::after_loads) on the upper half
  // of the queues. Every kernel's transfers from there to that linear go on the lower half
  // (kernel_queue_map), so none queues behind the stream; the linear's own prefetch, planned in the
  // kernel before it, takes the panels over and adds its input. The out projection's weight, when no
  // prefetch has it yet, is loaded there too, right behind the stream's, on the lower half: ahead of
  // the attention's stores, which it holds back a little, and ready when the projection starts instead
  // of loading at half the bandwidth in its own kernel (Llama small bf16 at batch 1: 402.9 -> 395.2 us;
  // ahead of the stream on every queue, 416.6). Why the attention: its loads are few and early, its
  // stores come late, and until the MLP the kernels move little (a layer's weights but the MLP's are a
  // quarter of them in Llama, a third in ESM-2). The upper half streams at half the HBM bandwidth while
  // the lower half is busy; lower() keeps the rule only where the program is faster.
  static constexpr uint64_t kStreamShare = 2;

  bool plan_stream_past_attention(const Graph& graph, size_t at, const std::vector<Place>& values,
                                  const std::vector<bool>& deferred, const std::set<size_t>& planned_stores) {
    if (!stream_past_attention_ || !prefetch_ ||
        std::any_of(prefetches_.begin(), prefetches_.end(), [](const Prefetch& p) { return p.past_attention; }))
      return false;
    const std::optional<size_t> out = next_kernel(graph, at, deferred, planned_stores);
    if (!out || !linear_inputs(graph.nodes[*out])) return false;
    const std::optional<size_t> norm = next_kernel(graph, *out, deferred, planned_stores);
    if (!norm || !is_norm(graph.nodes[*norm])) return false;
    const std::optional<size_t> first = next_kernel(graph, *norm, deferred, planned_stores);
    if (!first || !linear_inputs(graph.nodes[*first])) return false;
    // The weight of linear node `l` as a prefetch emitted from the attention kernel, if it is a program
    // argument whose panels fit half the free SBUF.
    const auto from_attention = [&](size_t l) -> std::optional<Prefetch> {
      const size_t w = linear_inputs(graph.nodes[l])->second;
      if (graph.nodes[w].kind != NodeKind::input || !argument_ios_.count(values[w].io)) return std::nullopt;
      const Place& weight = values[w];
      std::optional<kernels::PrefetchedWeight> panels =
          kernels::allocate_linear_weight(builder_, weight.desc, builder_.sbuf_free_bytes() / kStreamShare);
      if (!panels) return std::nullopt;
      panels->tile_by_tile = tile_by_tile_;
      Prefetch p{std::move(*panels), weight.io, weight.offset, &graph.nodes[l], false};
      p.from_attention = true;
      return p;
    };
    std::optional<Prefetch> stream = from_attention(*first);
    if (!stream) return false;
    stream->past_attention = true;
    prefetches_.push_back(std::move(*stream));
    const bool out_taken = std::any_of(prefetches_.begin(), prefetches_.end(),
                                       [&](const Prefetch& p) { return p.linear == &graph.nodes[*out]; });
    if (!out_taken) {
      if (std::optional<Prefetch> o = from_attention(*out)) prefetches_.push_back(std::move(*o));
    }
    return true;
  }

  // The stream past the attention is in flight: emitted, and not yet read by the linear being lowered.
  bool stream_in_flight() const {
    return std::any_of(prefetches_.begin(), prefetches_.end(),
                       [&](const Prefetch& p) { return p.past_attention && p.emitted && p.linear != current_; });
  }

  // KernelBuilder::set_queue_order mappings: the kernels' transfers onto the lower half of the queues while
  // a stream past the attention is in flight (else none), the stream's onto the upper half.
  std::vector<uint32_t> kernel_queue_map() const {
    if (!stream_in_flight()) return {};
    std::vector<uint32_t> map(spec_.dma.queues);
    const uint32_t half = std::max<uint32_t>(1, spec_.dma.queues / 2);
    for (uint32_t q = 0; q < map.size(); ++q) map[q] = q % half;
    return map;
  }
  std::vector<uint32_t> stream_queue_map() const {
    std::vector<uint32_t> map(spec_.dma.queues);
    const uint32_t half = spec_.dma.queues / 2, upper = spec_.dma.queues - half;
    for (uint32_t q = 0; q < map.size(); ++q) map[q] = half + q % upper;
    return map;
  }

  void plan_weight_prefetch(const Graph& graph, size_t i, const std::vector<Place>& values,
                            const std::vector<bool>& deferred, const std::set<size_t>& planned_stores,
                            const std::set<size_t>& attention_nodes) {
    const Node& at = graph.nodes[i];
    const bool at_epilogue = at.kind == NodeKind::fused && at.fusion == FusionKind::matmul_epilogue;
    const bool at_rows = at.kind == NodeKind::fused && at.fusion == FusionKind::rows;
    if (!prefetch_ || !(at_epilogue || at_rows || (at.kind == NodeKind::op && !op_info(at.op).is_view))) return;
    // One weight ahead: beside node i's own (when it is a linear that reads one), none other pending.
    for (const Prefetch& p : prefetches_) {
      if (p.linear != &at && !p.past_attention) return;
    }
    // The linear the next kernel is, or (PrefetchReach::past_compute_bound) the one after at most
    // kMaxCrossed kernels between: compute-bound ones, and DMA-bound ones only when node i's kernel is a
    // matmul (the loads then go out inside it, at its first store or behind its loads, and stream under
    // its Tensor-engine time), but for a DMA-bound attention kernel, whose q, k and v loads would queue
    // behind the stream (Llama small f32: 922.9 us crossing it, 914.7 not). Emitted before a DMA-bound
    // node i, the weight's stream would hold up that kernel's transfers and the DMA-bound ones after it
    // (Llama bf16's residual add and rms_norm before the q projection). A prefetch started that far
    // ahead also takes the linear right after that one (plan_second_prefetch).
    const bool inside_matmul = at_epilogue || (at.kind == NodeKind::op && op_info(at.op).kind == OpKind::matmul);
    const Node* next = nullptr;
    // The time the kernels between node i and the linear hide a stream in (their Tensor-engine time
    // beyond their traffic, estimate_kernel) from the last that starts a prefetch of its own (not an
    // attention kernel, which plans none), if any.
    std::optional<double> nearer_ns;
    int crossed = 0;
    size_t before_linear = i;  // the last node before the linear that emits a kernel
    for (size_t j = i + 1; j < graph.nodes.size(); ++j) {
      const Node& m = graph.nodes[j];
      if (m.kind == NodeKind::input || deferred[j] || (m.kind == NodeKind::op && op_info(m.op).is_view)) continue;
      if (reach_ == PrefetchReach::past_compute_bound && planned_stores.count(j)) continue;
      if (linear_inputs(m)) {
        next = &m;
        break;
      }
      if (reach_ != PrefetchReach::past_compute_bound || crossed == kMaxCrossed) return;
      const KernelEstimate e = estimate_kernel(graph, j, deferred);
      if (e.tensor_ns <= e.dma_ns && (!inside_matmul || attention_nodes.count(j))) return;
      // What a stream started in this kernel moves without holding up its own traffic: its
      // Tensor-engine time beyond that traffic (none for a DMA-bound kernel).
      const double ns = std::max(0.0, e.tensor_ns - e.dma_ns);
      if (nearer_ns) *nearer_ns += ns;
      if (!attention_nodes.count(j)) nearer_ns = ns;
      ++crossed;
      before_linear = j;
    }
    if (!next) return;
    const std::optional<std::pair<size_t, size_t>> linear = linear_inputs(*next);
    const size_t w = linear->second;
    if (graph.nodes[w].kind != NodeKind::input || !argument_ios_.count(values[w].io)) return;
    const Place& weight = values[w];
    // Started ahead of kernels that hide the weight's whole transfer, the prefetch hides no more than
    // started in the last of them (whose own plan_weight_prefetch then starts it).
    if (nearer_ns && hbm_ns(meta_bytes(graph.nodes[w].meta)) <= *nearer_ns) return;
    const uint64_t free = builder_.sbuf_free_bytes(), budget = free / prefetch_share_;
    // A row loop emits no weight stream of its own ahead of it: emitted before the loop, it would hold
    // up the loop's own transfers (Llama bf16, 128 tokens: 551.9 against 623.8 us). A loop that reads
    // its rows from SBUF (the matmul epilogue before it left them there: plan_kept_input) loads only
    // its invariant operands (a norm's weight row) before its first tile; it emits the stream after
    // them, at its first tile's rows_computed call (row_group), behind nothing but that tile's store.
    const bool rows_in_sbuf = at_rows && kept_input_ && kept_input_->reader == &at && kept_input_->filled;
    std::optional<kernels::PrefetchedWeight> panels;
    bool weight_emitted = false;
    if (const auto s = std::find_if(prefetches_.begin(), prefetches_.end(),
                                    [&](const Prefetch& p) { return p.past_attention && p.linear == next; });
        s != prefetches_.end()) {
      // The weight streams from the attention kernel already: this prefetch adds its input.
      panels = std::move(s->weight);
      weight_emitted = true;
      prefetches_.erase(s);
    } else if (!at_rows || rows_in_sbuf) {
      panels = kernels::allocate_linear_weight(builder_, weight.desc, budget);
    }
    // A weight too large to prefetch still lets the linear read its input kept in SBUF (below): a
    // prefetch of no panels, only the activation.
    const Node& before = graph.nodes[before_linear];
    const bool keepable = linear->first == before_linear &&
                          ((chain_groups_ && before.kind == NodeKind::fused &&
                            before.fusion == FusionKind::matmul_epilogue && !epilogue_has_views(*before.body)) ||
                           (chain_norms_ && keeps_rows(before)));
    if (!panels && !keepable) return;
    if (!panels) panels = kernels::PrefetchedWeight{weight.desc, {}, std::nullopt, {}};
    Prefetch p{std::move(*panels), weight.io, weight.offset, next, false};
    p.weight.tile_by_tile = tile_by_tile_;
    p.weight_emitted = weight_emitted;
    // The linear's input too when it was made before node i (whose kernel cannot write it), as q, k and v
    // read one activation: then the linear waits for nothing of the kernel before it.
    const size_t x = linear->first;
    // The input already held as an a^T by the prefetch of node i's own linear (k after q, v after k: they
    // read one activation, the norm's result): handed on, so this linear reads the same tile and nothing
    // loads it again from HBM, where its loads would queue behind node i's stores.
    const auto holder = std::find_if(prefetches_.begin(), prefetches_.end(), [&](const Prefetch& h) {
      const std::optional<std::pair<size_t, size_t>> in = linear_inputs(*h.linear);
      return h.linear == &at && h.weight.activation && !h.activation_handed_on && in && in->first == x &&
             h.weight.x.shape == values[x].desc.shape && h.weight.x.dtype == values[x].desc.dtype &&
             h.weight.weight.shape[1] == p.weight.weight.shape[1];
    });
    if (share_activations_ && x < i && holder != prefetches_.end()) {
      ++shared_activations_;
      p.weight.activation = holder->weight.activation;
      p.weight.x = holder->weight.x;
      p.x_io = values[x].io;
      p.x_offset = values[x].offset;
      p.x_shared = true;
      holder->activation_handed_on = true;
    } else if (x < i && kernels::allocate_linear_activation(builder_, p.weight, values[x].desc,
                                                            budget - (free - builder_.sbuf_free_bytes()))) {
      p.x_io = values[x].io;
      p.x_offset = values[x].offset;
    } else if (const Node& made = graph.nodes[x];
               keepable &&
               kernels::allocate_linear_activation(builder_, p.weight, TensorDesc::contiguous(made.meta.dtype, made.meta.shape),
                                                   budget)) {
      // The linear reads the result of the matmul epilogue group (or the norm) right before it: the
      // group's epilogue writes it into the a^T straight from its result tiles (epilogue_group; a norm's
      // kernel from its row tiles, norm_kernel), so the linear neither waits for the group's stores nor
      // reloads them. It takes a budget of its own beside the weight's: it stands for the group's result,
      // which its kernel holds in SBUF tile by tile anyway.
      p.x_on_chip = &made;
      p.x_read_once = std::find(graph.outputs.begin(), graph.outputs.end(), static_cast<int>(x)) == graph.outputs.end() &&
                      std::all_of(graph.nodes.begin(), graph.nodes.end(), [&](const Node& m) {
                        return &m == next || std::find(m.inputs.begin(), m.inputs.end(), static_cast<int>(x)) == m.inputs.end();
                      }) &&
                      std::count(next->inputs.begin(), next->inputs.end(), static_cast<int>(x)) == 1;
    } else if (p.weight.panels.size() == 0) {
      return;  // nothing to prefetch
    }
    if (crossed > 0) prefetched_ahead_.push_back(fmt::format("{}>{}", i, next - graph.nodes.data()));
    prefetches_.push_back(std::move(p));
    if (inside_matmul && crossed > 0) plan_second_prefetch(graph, static_cast<size_t>(next - graph.nodes.data()), values, deferred, planned_stores);
    if (!inside_matmul && !rows_in_sbuf) emit_weight_prefetch();
  }

  // A second weight ahead, from the same matmul kernel as a prefetch started past kernels between
  // (plan_weight_prefetch): the weight of the linear right after linear `first`, when its stream takes
  // longer than `first`'s Tensor-engine time (by the cost model), which would otherwise be all it
  // streams under (it is planned at `first`, one ahead). Llama's v projection is 1 MB and short; q's
  // 4 MB weight then streams from the down projection's kernel across the RMSNorm, in HBM time the
  // Tensor engine spends on the down projection's last panels (Llama small f32: 914.7 -> 909.3 us).
  // ESM-2's q and k are alike in size, and the rule leaves them one ahead.
  void plan_second_prefetch(const Graph& graph, size_t first, const std::vector<Place>& values,
                            const std::vector<bool>& deferred, const std::set<size_t>& planned_stores) {
    const std::optional<size_t> after = next_kernel(graph, first, deferred, planned_stores);
    if (!after || !linear_inputs(graph.nodes[*after])) return;
    const Node* next = &graph.nodes[*after];
    const size_t w = linear_inputs(*next)->second;
    if (graph.nodes[w].kind != NodeKind::input || !argument_ios_.count(values[w].io)) return;
    if (hbm_ns(meta_bytes(graph.nodes[w].meta)) <= estimate_kernel(graph, first, deferred).tensor_ns) return;
    const Place& weight = values[w];
    const uint64_t budget = builder_.sbuf_free_bytes() / kPrefetchShare;
    std::optional<kernels::PrefetchedWeight> panels = kernels::allocate_linear_weight(builder_, weight.desc, budget);
    if (!panels) return;
    prefetched_ahead_.push_back(fmt::format("{}>>{}", first, next - graph.nodes.data()));
    panels->tile_by_tile = tile_by_tile_;
    prefetches_.push_back(Prefetch{std::move(*panels), weight.io, weight.offset, next, false});
  }

  // Where result tile `y` (SBUF) of a matmul kernel, stored to `d` (HBM, its offset within the result of
  // shape `meta`), lies in the kept `rows` (kept_input_'s or kept_residual_'s: row tile t at columns
  // [t * cols, (t + 1) * cols)); nullopt when the tile is not a run of columns of rows from partition 0
  // whose first row is a multiple of the partitions.
  std::optional<device::AccessPattern> kept_rows_of(const kernels::Tile& rows, const device::AccessPattern& y,
                                                    const device::AccessPattern& d, const TensorMeta& meta) const {
    const int64_t row_length = meta.shape.back(), parts = spec_.partitions;
    const int64_t e0 = static_cast<int64_t>(d.offset / dtype_size(d.dtype));
    if (row_length == 0 || y.partition_start != 0 || d.dim_count != 1 || d.dims[0].stride != 1 ||
        e0 % row_length + d.dims[0].size > row_length || e0 / row_length % parts != 0 || d.partition_stride != row_length)
      return std::nullopt;
    return rows.region(0, y.partition_count,
                                    static_cast<uint32_t>(e0 / row_length / parts * row_length + e0 % row_length),
                                    y.dims[0].size);
  }

  // The input of matmul epilogue group `g` (an index into g.inputs) that holds value `v` when only the
  // binary ops of its epilogue read it, each as its operand beside the chain value, element for element
  // (`meta` is v's and the group's result's shape and dtype); -1 otherwise.
  static int epilogue_operand_input(const Node& g, int v, const TensorMeta& meta) {
    if (g.kind != NodeKind::fused || g.fusion != FusionKind::matmul_epilogue || epilogue_has_views(*g.body) ||
        g.meta.shape != meta.shape || g.meta.dtype != meta.dtype)
      return -1;
    int found = -1;
    for (size_t j = 0; j < g.inputs.size(); ++j) {
      if (g.inputs[j] != v) continue;
      if (found >= 0) return -1;
      found = static_cast<int>(j);
    }
    if (found < 0) return -1;
    const Graph& body = *g.body;
    bool read = false;
    for (size_t b = 0; b < body.nodes.size(); ++b) {
      const Node& in = body.nodes[b];
      if (in.kind != NodeKind::input || in.input_index != found) continue;
      if (in.meta.shape != meta.shape) return -1;
      for (const Node& m : body.nodes) {
        if (m.kind != NodeKind::op || std::find(m.inputs.begin(), m.inputs.end(), static_cast<int>(b)) == m.inputs.end())
          continue;
        if (op_info(m.op).kind == OpKind::matmul || !op_is_binary_elementwise(m.op) || m.inputs.size() != 2 ||
            m.inputs[0] == m.inputs[1])
          return -1;
        read = true;
      }
    }
    return read ? found : -1;
  }

  // The rows of kept_input_ after its norm read them, kept for the later matmul epilogue group whose
  // binary op reads them as its operand (ResidualStream::kept).
  struct ResidualInSbuf {
    const Node* reader = nullptr;
    kernels::Tile tile;
    int operand = -1;  // the reader's input that holds them
  };
  // Node i, a norm, reads kept_input_'s rows: with ResidualStream::kept, when the first node after it
  // that reads the group's result is a matmul epilogue group whose binary op takes it as its operand
  // (the residual add of the out projection, or of the MLP's last linear), the rows stay allocated for
  // that group (kept_residual_, its tile set once the norm is lowered), which reads them there.
  std::optional<ResidualInSbuf> residual_reader(const Graph& graph, size_t i) const {
    if (!keep_residuals_ || kept_residual_) return std::nullopt;
    const Node& writer = *kept_input_->writer;
    const int v = static_cast<int>(&writer - graph.nodes.data());
    for (size_t j = i + 1; j < graph.nodes.size(); ++j) {
      const Node& m = graph.nodes[j];
      if (std::find(m.inputs.begin(), m.inputs.end(), v) == m.inputs.end()) continue;
      const int operand = epilogue_operand_input(m, v, writer.meta);
      if (operand < 0) return std::nullopt;
      return ResidualInSbuf{&m, kernels::Tile{}, operand};
    }
    return std::nullopt;
  }

  // A matmul epilogue group whose result the next kernel, a norm, reads (ESM-2's out projection or FC2
  // with its residual add, then layer_norm): with ActivationChain::norms_in_sbuf an SBUF tile for every
  // row tile of that result is allocated before the group (its dry run sees it: mirror_prefetches), the
  // group's epilogue copies each result tile there beside its store, and the norm reads its rows from
  // there instead of waiting for the store and loading them again. The group still stores its result (the
  // residual add after the norm reads it). Taken only within the prefetch's share of the free SBUF. The
  // norm is layer_norm, rms_norm, or a row loop (Llama's RMSNorm as the user wrote it) whose first input
  // is the group's result (RowsInSbuf); a result tile may be a run of columns of its rows (a row longer
  // than a PSUM bank: Llama's 1024 f32), copied to the same columns of the kept rows. The reader may also
  // be a matmul epilogue group whose binary op takes the result as its operand element for element
  // (Llama's up projection times silu(gate_proj(x))): its epilogue reads each operand tile there instead
  // of loading it (epilogue_group; `operand` is the reader's input that holds it).
  void plan_kept_input(const Graph& graph, size_t i, const std::vector<bool>& deferred, const std::vector<Place>& values) {
    if (!chain_norms_ || kept_input_) return;
    const Node& n = graph.nodes[i];
    const bool group = n.kind == NodeKind::fused && n.fusion == FusionKind::matmul_epilogue && !epilogue_has_views(*n.body);
    const bool matmul = n.kind == NodeKind::op && op_info(n.op).kind == OpKind::matmul;
    if (!group && !matmul) return;
    const Node* next = nullptr;
    for (size_t j = i + 1; j < graph.nodes.size() && !next; ++j) {
      const Node& m = graph.nodes[j];
      if (m.kind == NodeKind::input || deferred[j] || (m.kind == NodeKind::op && op_info(m.op).is_view)) continue;
      next = &m;
    }
    // A norm: the built-in ops, or a row loop (a user's RMSNorm, fused.rows) whose first input is the
    // group's result; the loop reads the kept rows when its tiles are whole rows (RowsInSbuf), else loads
    // them from where the group stored them.
    const bool norm_op = next && next->kind == NodeKind::op && (next->op == OpId::layer_norm || next->op == OpId::rms_norm);
    const bool row_loop = next && next->kind == NodeKind::fused && next->fusion == FusionKind::rows && row_loop_fits(*next);
    const int operand = next ? epilogue_operand_input(*next, static_cast<int>(i), n.meta) : -1;
    if (n.meta.shape.size() == 0 || !(operand >= 0 || (group && (norm_op || row_loop) && !next->inputs.empty() &&
                                                                next->inputs[0] == static_cast<int>(i))))
      return;
    const int64_t cols = n.meta.shape.back(), parts = spec_.partitions;
    if (cols == 0) return;
    const int64_t tiles = (static_cast<int64_t>(n.meta.shape.product()) / cols + parts - 1) / parts;
    const uint64_t bytes = static_cast<uint64_t>(tiles * cols) * dtype_size(n.meta.dtype);
    if (bytes > builder_.sbuf_free_bytes() / kPrefetchShare) return;
    kept_input_ = KeptInput{&n, next, builder_.sbuf(n.meta.dtype, static_cast<uint32_t>(tiles * cols), 0, "kept_norm_input"),
                            false, {}, operand, {}};
    // A row loop's inputs that are one row for every row (its weight: a program argument of the loop's
    // columns, at its position among the body's inputs) are loaded here whether or not the group emits
    // a prefetch: the group's own loads wait behind one short row each, and the loop's first tile no
    // longer waits for its weight behind the group's stores (Llama small bf16 at batch 4 977.5 -> 964.4
    // us, at batch 1 461.0 -> 456.0; at 32 tokens 739.3 -> 740.9).
    if (row_loop) {
      size_t position = 0;
      for (const Node& b : next->body->nodes) {
        if (b.kind != NodeKind::input) continue;
        const int v = next->inputs[static_cast<size_t>(b.input_index)];
        const size_t at = position++;
        if (v == static_cast<int>(i) || v == kNoValue || graph.nodes[static_cast<size_t>(v)].kind != NodeKind::input ||
            !argument_ios_.count(values[static_cast<size_t>(v)].io))
          continue;
        const Place& w = values[static_cast<size_t>(v)];
        if (w.desc.shape.size() != 1 || w.desc.shape[0] != cols) continue;
        // Its instructions are those of the loop's first op that reads it, as the loop's own load's.
        const int input_node = static_cast<int>(&b - next->body->nodes.data());
        const auto reader = std::find_if(next->body->nodes.begin(), next->body->nodes.end(), [&](const Node& m) {
          return m.kind == NodeKind::op && std::find(m.inputs.begin(), m.inputs.end(), input_node) != m.inputs.end();
        });
        if (reader == next->body->nodes.end()) continue;
        const kernels::Tile t = builder_.sbuf(w.desc.dtype, static_cast<uint32_t>(cols), 0, "kept_norm_parameter");
        builder_.set_source_op(op_name(reader->op));
        builder_.load_broadcast(t.ap(), kernels::hbm_pattern(builder_.view(w.io, w.offset, w.desc.dtype), w.desc.dtype, 0, 1, 0,
                                                             {{static_cast<uint32_t>(cols), static_cast<int32_t>(w.desc.strides[0])}}));
        kept_input_->parameters.push_back(t);
        kept_input_->row_invariants.emplace_back(at, t);
      }
      return;
    }
    // The norm's weight and bias, program arguments, broadcast into SBUF here when the group's kernel is
    // to emit a weight's prefetch (plan_weight_prefetch ran before): ahead of it and of the group's own
    // loads, so that the norm does not wait behind that stream for them (without one, loaded first they
    // would only delay the group's own loads).
    const size_t parameters = next->inputs.size() - 1;
    bool loadable = norm_op && parameters <= 2 && pending_prefetch();
    for (size_t k = 1; loadable && k <= parameters; ++k) {
      const int v = next->inputs[k];
      loadable = v != kNoValue && graph.nodes[static_cast<size_t>(v)].kind == NodeKind::input &&
                 argument_ios_.count(values[static_cast<size_t>(v)].io) &&
                 values[static_cast<size_t>(v)].desc.shape.size() == 1 &&
                 values[static_cast<size_t>(v)].desc.shape[0] == cols;
    }
    if (!loadable) return;
    for (size_t k = 1; k <= parameters; ++k) {
      const Place& w = values[static_cast<size_t>(next->inputs[k])];
      const kernels::Tile t = builder_.sbuf(w.desc.dtype, static_cast<uint32_t>(cols), 0, "kept_norm_parameter");
      builder_.set_source_op(op_name(next->op));
      builder_.load_broadcast(t.ap(), kernels::hbm_pattern(builder_.view(w.io, w.offset, w.desc.dtype), w.desc.dtype, 0, 1, 0,
                                                           {{static_cast<uint32_t>(cols), static_cast<int32_t>(w.desc.strides[0])}}));
      kept_input_->parameters.push_back(t);
    }
  }

  // A DMA-bound node's kernel moves its bytes for as long as it runs; a compute-bound one's traffic
  // moves under its Tensor-engine time. The cost model's figures for node j of `graph` before it is
  // lowered, from the graph's metas: its HBM traffic (its output and inputs; a deferred input, made on
  // chip inside the kernel, by its own inputs) at the rate dma_rate_bytes_per_ns gives every queue
  // moving HBM bytes at once, and its matmuls' instructions (tensor_ns).
  struct KernelEstimate {
    double dma_ns = 0, tensor_ns = 0;
  };
  static constexpr int kMaxCrossed = 2;

  static uint64_t meta_bytes(const TensorMeta& meta) {
    return dtype_size(meta.dtype) * static_cast<uint64_t>(meta.shape.product());
  }

  double hbm_ns(uint64_t bytes) const {
    const int queues = static_cast<int>(spec_.dma.queues);
    return double(bytes) / (queues * device::dma_rate_bytes_per_ns(spec_, true, queues));
  }

  // The Tensor-engine time of node n's matmuls (an op's, or a fused group's), as the matmul
  // instructions a kernel would issue for them: [..., M, K] x [K, N] as tiles of K over the partitions,
  // M over the array's columns and N over the moving free size, each timed by compute_instruction_ns
  // (whose initiation-interval floor makes small heads cost more than their flops).
  double tensor_ns(const Graph& g, const Node& n) const {
    if (n.kind == NodeKind::fused && n.body) {
      double ns = 0;
      for (const Node& m : n.body->nodes) ns += tensor_ns(*n.body, m);
      return ns;
    }
    if (n.kind != NodeKind::op || op_info(n.op).kind != OpKind::matmul || n.inputs.empty() || n.inputs[0] < 0)
      return 0;
    const TensorMeta& a = g.nodes[static_cast<size_t>(n.inputs[0])].meta;
    if (a.shape.size() < 2 || n.meta.shape.size() < 2) return 0;
    const auto ceil = [](int64_t x, int64_t y) { return static_cast<double>((x + y - 1) / y); };
    const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), cols = n.meta.shape.back();
    double batch = 1;
    for (size_t d = 0; d + 2 < static_cast<size_t>(n.meta.shape.size()); ++d) batch *= double(n.meta.shape[d]);
    const int64_t kp = std::min<int64_t>(k, spec_.partitions), mc = std::min<int64_t>(m, spec_.tensor.array_cols),
                  nc = std::min<int64_t>(cols, spec_.tensor.moving_free_max);
    const DType dt = a.dtype;
    const double one = device::compute_instruction_ns(
        spec_, device::matmul(device::psum(0, static_cast<uint16_t>(mc), 0, DType::f32, {static_cast<uint32_t>(nc)}),
                              device::sbuf(0, static_cast<uint16_t>(kp), 0, dt, {static_cast<uint32_t>(mc)}),
                              device::sbuf(0, static_cast<uint16_t>(kp), 0, dt, {static_cast<uint32_t>(nc)}), true));
    return batch * ceil(k, spec_.partitions) * ceil(m, spec_.tensor.array_cols) *
           ceil(cols, spec_.tensor.moving_free_max) * one;
  }

  KernelEstimate estimate_kernel(const Graph& graph, size_t j, const std::vector<bool>& deferred) const {
    const Node& n = graph.nodes[j];
    uint64_t bytes = meta_bytes(n.meta);
    double tensor = 0;
    std::set<size_t> seen;
    std::vector<size_t> made{j};  // node j and the deferred nodes its kernel makes on chip
    while (!made.empty()) {
      const size_t k = made.back();
      made.pop_back();
      tensor += tensor_ns(graph, graph.nodes[k]);
      for (const int v : graph.nodes[k].inputs) {
        if (v == kNoValue || !seen.insert(static_cast<size_t>(v)).second) continue;
        if (deferred[static_cast<size_t>(v)])
          made.push_back(static_cast<size_t>(v));
        else
          bytes += meta_bytes(graph.nodes[static_cast<size_t>(v)].meta);
      }
    }
    return {hbm_ns(bytes), tensor};
  }

  // The graph values a linear reads as (x, weight): an aten::linear node's, or a matmul epilogue group's
  // whose matmul is a linear of two of the group's inputs; nullopt for any other node.
  static std::optional<std::pair<size_t, size_t>> linear_inputs(const Node& n) {
    if (n.kind == NodeKind::op) {
      if (n.op != OpId::linear || n.inputs.size() < 2) return std::nullopt;
      return std::pair<size_t, size_t>{static_cast<size_t>(n.inputs[0]), static_cast<size_t>(n.inputs[1])};
    }
    if (n.kind != NodeKind::fused || n.fusion != FusionKind::matmul_epilogue || !n.body) return std::nullopt;
    const Graph& body = *n.body;
    const auto mm = std::find_if(body.nodes.begin(), body.nodes.end(), [](const Node& m) { return m.kind == NodeKind::op; });
    if (mm == body.nodes.end() || mm->op != OpId::linear || mm->inputs.size() < 2) return std::nullopt;
    auto group_input = [&](int v) -> std::optional<size_t> {
      if (v < 0) return std::nullopt;
      const Node& in = body.nodes[static_cast<size_t>(v)];
      if (in.kind != NodeKind::input || in.input_index < 0 || static_cast<size_t>(in.input_index) >= n.inputs.size())
        return std::nullopt;
      return static_cast<size_t>(n.inputs[static_cast<size_t>(in.input_index)]);
    };
    const std::optional<size_t> x = group_input(mm->inputs[0]), w = group_input(mm->inputs[1]);
    if (!x || !w) return std::nullopt;
    return std::pair<size_t, size_t>{*x, *w};
  }

  void release(const auto& p) {  // a Prefetch (declared with the members below)
    builder_.free(p.weight.panels);
    if (p.weight.activation && !p.activation_handed_on) builder_.free(*p.weight.activation);
  }

  // A stream past the attention is emitted only from inside the attention kernel (streaming_).
  bool pending_prefetch() const {
    return std::any_of(prefetches_.begin(), prefetches_.end(),
                       [&](const Prefetch& p) { return !p.emitted && (!p.from_attention || streaming_); });
  }

  // The loads are the linear's (its weight, its input), whichever kernel they go out in; the kernel's
  // own instructions after them keep its op.
  void emit_weight_prefetch() {
    const std::string kernel_op(builder_.source_op());
    builder_.set_source_op(op_name(OpId::linear));
    // While a stream past the attention is in flight, every other transfer keeps to the lower queues.
    for (Prefetch& p : prefetches_) {
      if (p.emitted || (p.from_attention && !streaming_)) continue;
      std::vector<uint32_t> order = kernel_queue_map();
      if (order.empty() && queues_ != PrefetchQueues::from_first) order = prefetch_queue_order();
      builder_.set_queue_order(p.past_attention ? stream_queue_map() : order);
      if (p.weight.panels.size() > 0 && !p.weight_emitted)
        kernels::prefetch_linear_weight(builder_, p.weight, builder_.view(p.io, p.offset, p.weight.weight.dtype));
      if (p.weight.activation && !p.x_on_chip && !p.x_shared) {
        kernels::prefetch_linear_activation(builder_, p.weight, builder_.view(p.x_io, p.x_offset, p.weight.x.dtype));
      }
      p.emitted = true;
      if (p.past_attention) ++streamed_past_attention_;
    }
    builder_.set_queue_order(kernel_order_.empty() ? kernel_queue_map() : kernel_order_);
    if (!kernel_op.empty()) builder_.set_source_op(kernel_op);
  }

  // The queues for a prefetch's pieces, which go round robin from the first (PrefetchQueues): from_last
  // the highest first, since a kernel's round-robin loads start at queue 0; idlest by the modeled time of
  // the transfers that the kernels since the one before the current node put on each queue
  // (KernelBuilder::dma_queue_ns), ties to the higher queue.
  std::vector<uint32_t> prefetch_queue_order() const {
    if (queues_ == PrefetchQueues::idlest) return idlest_queue_order();
    std::vector<uint32_t> order(spec_.dma.queues);
    for (uint32_t q = 0; q < order.size(); ++q) order[q] = static_cast<uint32_t>(order.size() - 1 - q);
    return order;
  }

  std::vector<uint32_t> idlest_queue_order() const {
    const std::vector<double> ns = builder_.dma_queue_ns(previous_kernel_start_);
    std::vector<uint32_t> order(ns.size());
    for (uint32_t q = 0; q < order.size(); ++q) order[q] = static_cast<uint32_t>(order.size() - 1 - q);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ns[a] < ns[b]; });
    return order;
  }

  const device::Spec& spec_;
  kernels::KernelBuilder builder_;
  bool prefetch_ = true;  // plan_weight_prefetch runs (lower() keeps the fastest program)
  bool after_loads_ = false;  // a matmul kernel emits the prefetch behind all its loads, not at its first store
  PrefetchQueues queues_ = PrefetchQueues::from_first;
  bool idle_queues_ = false;  // every kernel's queues through idlest_queue_order (lower()'s `kernel_queues`)
  PrefetchReach reach_ = PrefetchReach::next_kernel;  // how far ahead a prefetch starts (plan_weight_prefetch)
  std::vector<uint32_t> kernel_order_;  // the current kernel's queue order (empty: none)  // where a prefetch's pieces go (prefetch_queue_order)
  std::vector<size_t> kernel_start_, previous_kernel_start_;  // the DMA queues' lengths as the current / previous node began
  std::map<DType, Constants> constants_;
  std::vector<uint32_t> scratch_ios_;
  int kernel_count_ = 0;
  int epilogues_ = 0;                       // matmul epilogues applied to the result tiles on chip
  int attentions_ = 0;                      // softmax(q k^T ...) v lowered as one attention kernel
  int attention_stores_ = 0;                // of those, stored straight into a permute's contiguous copy
  int grouped_kv_attentions_ = 0;           // of those, reading k and v from their key/value heads
  std::map<size_t, int> unmade_copies_;     // repeat_kv copies not made (find_repeat_copies): repeat dim
  std::vector<std::string> attention_store_fallbacks_;  // why the others kept their copy (attention_store)
  int prefetched_weights_ = 0;              // linears that read their weight prefetched (plan_weight_prefetch)
  int prefetched_activations_ = 0;          // ... and their input too
  int kept_activations_ = 0;                // ... of those, the result of the kernel before, kept in SBUF
  int transposed_linears_ = 0;              // ... of those, a linear's computed transposed into it
  // A linear's input may be the kernel before's result kept in SBUF (ActivationChain): a matmul epilogue
  // group's, a norm's.
  bool chain_groups_ = false, chain_norms_ = false;
  // "i>j" for each prefetch node i's kernel started for the linear at node j past kernels between
  // (PrefetchReach::past_compute_bound; the metadata's "compiled.prefetched_ahead")
  std::vector<std::string> prefetched_ahead_;
  std::vector<Prefetch> prefetches_;  // weights prefetched for linears ahead, until they read them
  // A matmul epilogue group's result kept in SBUF for the norm right after it (plan_kept_input): row
  // tile t at columns [t * cols, (t + 1) * cols) of `tile`; filled once the group's kernel wrote it.
  struct KeptInput {
    const Node* writer = nullptr;
    const Node* reader = nullptr;
    kernels::Tile tile;
    bool filled = false;
    std::vector<kernels::Tile> parameters;  // the norm's weight (and bias), loaded (plan_kept_input)
    int operand = -1;  // a matmul epilogue reader's input that holds the result (its binary op's operand)
    // A row loop reader's invariant inputs (its position among the loop's inputs) among `parameters`.
    std::vector<std::pair<size_t, kernels::Tile>> row_invariants;
  };
  std::optional<KeptInput> kept_input_;
  std::optional<ResidualInSbuf> kept_residual_;  // (residual_reader)
  std::optional<ResidualInSbuf> residual_after_norm_;  // while the norm that reads kept_input_ is lowered
  int kept_residuals_ = 0;  // epilogues that read their operand there ("compiled.kept_residuals")
  int streamed_past_attention_ = 0;  // MLP weights streamed from an attention kernel (MlpWeight::past_attention)
  const bool tile_by_tile_;     // PreloadedOrder::tiles
  int tile_by_tile_kernels_ = 0;  // linears that took an a^T so ("compiled.tile_by_tile")
  // Epilogue operands kept in SBUF to the end of the program (view_epilogue_group), by what they hold:
  // the source tensor and dtypes, the partitions and elements, the free dims and each row's offset.
  std::map<std::vector<int64_t>, kernels::Tile> resident_;
  std::set<uint32_t> argument_ios_;   // the program's arguments: inputs nothing in it writes
  int row_loops_ = 0;                       // fused.rows groups emitted as one row loop
  int kept_norm_inputs_ = 0;  // row loops that read their input where the matmul epilogue before left it
  int kept_operands_ = 0;     // matmul epilogues that read an operand where the matmul kernel before left it
  const bool share_activations_;  // a prefetched a^T handed on to the next linear of the same input
  const bool keep_residuals_;     // ResidualStream::kept
  const bool stream_past_attention_;  // MlpWeight::past_attention
  const uint64_t prefetch_share_;     // a prefetch's weight takes at most 1/prefetch_share_ of the free SBUF
  const Node* current_ = nullptr;     // the node whose kernel is being lowered (a linear reading a stream)
  bool streaming_ = false;            // emit_weight_prefetch emits the stream past the attention now
  int shared_activations_ = 0;    // ... so handed on
  std::vector<std::string> row_fallbacks_;  // why the others were lowered op by op
  std::vector<std::string> epilogue_fallbacks_;  // why view-level epilogues were lowered op by op
};

bool parse_index(std::string_view text, std::string_view prefix, int& index) {
  if (!text.starts_with(prefix) || text.size() == prefix.size()) return false;
  const std::string_view digits = text.substr(prefix.size());
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  return error == std::errc() && end == digits.data() + digits.size();
}

}  // namespace

std::optional<std::pair<int64_t, TensorDesc>> apply_view_desc(OpId op, const OpAttrs& at, int64_t offset,
                                                             const TensorDesc& desc) {
  const Tensor x = view_of(Place{0, offset, desc});
  auto of = [](const Tensor& v) {
    return std::pair<int64_t, TensorDesc>{v.offset(), {v.dtype(), v.shape(), v.strides()}};
  };
  switch (op) {
    case OpId::view:
    case OpId::reshape: {
      const Dims shape = view_meta::infer_view_shape(at.dims, x.numel(), op_name(op), x.shape());
      const std::optional<Dims> strides = view_meta::view_strides(x, shape);
      if (!strides) return std::nullopt;
      return std::pair<int64_t, TensorDesc>{offset, {desc.dtype, shape, *strides}};
    }
    case OpId::transpose:
      return of(view_meta::transpose(x, static_cast<int>(at.dim), static_cast<int>(at.dim1)));
    case OpId::permute:
      return of(view_meta::permute(x, at.dims));
    case OpId::slice:
      return of(view_meta::slice(x, static_cast<int>(at.dim), at.start, at.end, at.step));
    case OpId::expand:
      return of(view_meta::expand(x, at.dims));
    case OpId::unsqueeze:
      return of(view_meta::unsqueeze(x, static_cast<int>(at.dim)));
    case OpId::squeeze:
      return of(view_meta::squeeze(x, static_cast<int>(at.dim)));
    case OpId::select:
      return of(view_meta::select(x, static_cast<int>(at.dim), at.start));
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a view op", op_name(op));
  return std::nullopt;
}

// Each long-epilogue group bubbles up past the plain matmuls right before it that it does not read. The
// fusion puts such a group where its last op was, after the projections the user wrote after it (Llama's
// and ESM-2's v after q and k), so the kernel before the attention was the one with the long tail.
Graph emission_order(const Graph& graph) {
  auto plain_matmul = [](const Node& n) {
    return n.kind == NodeKind::op && (n.op == OpId::linear || n.op == OpId::matmul);
  };
  auto long_epilogue = [](const Node& n) {
    return n.kind == NodeKind::fused && n.fusion == FusionKind::matmul_epilogue && epilogue_has_views(*n.body);
  };
  std::vector<size_t> order(graph.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  bool moved = false;
  for (size_t k = 1; k < order.size(); ++k) {
    for (size_t j = k; j > 0; --j) {
      const Node& b = graph.nodes[order[j]];
      const Node& a = graph.nodes[order[j - 1]];
      if (!long_epilogue(b) || !plain_matmul(a)) break;
      if (std::find(b.inputs.begin(), b.inputs.end(), static_cast<int>(order[j - 1])) != b.inputs.end()) break;
      std::swap(order[j], order[j - 1]);
      moved = true;
    }
  }
  return moved ? renumbered(graph, order) : graph;
}

// The weight prefetch moves loads ahead of the linear into the kernel before it. That takes the
// weight off the linear's path, but the loads then sit in that kernel's DMA queues ahead of its own
// transfers and stores (pieces of stream_min_piece_bytes on the first few queues: 256 x 256 bf16 is
// 1.4 us on each of 4 of trn2's 16, where the linear would spread its own weight loads over all 16)
// and delay what waits for those, and their panels shrink the SBUF that kernel plans with; which wins
// depends on the whole program's overlap, which only a run of it shows. A matmul kernel before the
// linear can take the loads at its first store, ahead of the later panels of its own b (which the next
// weight then delays), or behind all its loads (the next weight then starts later); which is faster
// depends on the program too. So the rule is measured, not guessed: the program is lowered with the
// prefetch and, when it prefetched any weight, without it and with the loads behind the kernels' own,
// each is timed on a timing-only run of the cost model (device::timing_only_ns), and the fastest is
// kept (a tie keeps the one without: fewer SBUF panels held across kernels; then the first-store
// placement). Each placement is also lowered with the prefetch's pieces on other queues
// (PrefetchQueues: from the highest, or the idlest by the kernels' transfers so far), since a weight
// of a few pieces from queue 0 crowds the queues the kernel before it loads on; ties keep queue 0
// first. Placements and chains that do not depend on one another are timed concurrently (the same
// choice on any number of threads). Then the fastest placement that prefetches (even when the program
// without the prefetch is faster so far) is lowered with each kernel's transfers on the idlest queues,
// and with the prefetch started past kernels between (PrefetchReach::past_compute_bound: in ESM-2, the
// out projection's weight from the v projection's kernel across the attention, a q projection's from
// the matmul kernel before its layer_norm; in Llama, the v and q projections' from the down
// projection's kernel across the RMSNorm), and with the results of matmul epilogue groups and norms kept
// in SBUF for the linears after them (ActivationChain; ESM-2's FC1 -> FC2, computed transposed into FC2's
// a^T; the chain of every kept result also with the other kernel queues and prefetch placement), each
// kept when faster. The prefetch
// therefore never makes a program slower than without it, nor the reach or the chain.
device::Executable lower(const Graph& graph_in, const device::Spec& spec, const std::string& name,
                         const LowerOptions& options) {
  const Graph ordered = emission_order(graph_in);
  const Graph& graph = ordered;
  if (options.prefetch != WeightPrefetch::best) return Lowerer(spec, name, options).run(graph);
  auto lowered = [&](const LowerOptions& o) { return Lowerer(spec, name, o).run(graph); };
  device::Executable best = lowered({.prefetch = WeightPrefetch::always});
  const auto count = std::find_if(best.metadata.begin(), best.metadata.end(),
                                  [](const auto& kv) { return kv.first == "compiled.prefetched_weights"; });
  const bool prefetched = count != best.metadata.end() && count->second != "0";
  double best_ns = device::timing_only_ns(spec, best);
  // Candidates that do not depend on one another are lowered and timed at once, over the thread pool
  // (each builds its own program and times it on its own core; nothing is shared), then compared in
  // the order below, so the choice is the same on any number of threads.
  struct Timed {
    device::Executable exe;
    double ns = 0;
    LowerOptions how;
  };
  // A candidate whose program cannot be built (sightline::Error: what it keeps in SBUF leaves a kernel
  // no room) is no candidate: it times as never faster, and the program kept says how many there were
  // ("compiled.candidates_not_built"). The first program above keeps nothing on chip across kernels but
  // the prefetches, which take their share of the free SBUF only.
  size_t not_built = 0;
  auto lower_each = [&](const std::vector<LowerOptions>& candidates) {
    std::vector<Timed> timed(candidates.size());
    std::vector<std::exception_ptr> errors(candidates.size());
    std::vector<char> failed(candidates.size(), 0);
    parallel_for(0, static_cast<int64_t>(candidates.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        Timed& t = timed[static_cast<size_t>(i)];
        t.how = candidates[static_cast<size_t>(i)];
        try {
          t.exe = lowered(t.how);
          t.ns = device::timing_only_ns(spec, t.exe);
        } catch (const Error&) {
          t.ns = std::numeric_limits<double>::infinity();
          failed[static_cast<size_t>(i)] = 1;
        } catch (...) {
          errors[static_cast<size_t>(i)] = std::current_exception();
        }
      }
    });
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    not_built += static_cast<size_t>(std::count(failed.begin(), failed.end(), 1));
    return timed;
  };
  // Strictly faster replaces; a tie keeps the program already kept (the earlier in the order below).
  LowerOptions best_how{.prefetch = WeightPrefetch::always};
  auto keep_if_faster = [&](Timed& other) {
    if (other.ns < best_ns && !(other.exe == best)) {
      best = std::move(other.exe);
      best_ns = other.ns;
      best_how = other.how;
    }
  };
  // The fastest placement that prefetches (the first program's when nothing was prefetched), on which
  // the later steps build even where the program without the prefetch is faster so far: they (the
  // kept chains above all) need one, and may then beat it (ESM-2 t12 at 128 tokens).
  WeightPrefetch placed_p = WeightPrefetch::always;
  PrefetchQueues placed_q = PrefetchQueues::from_first;
  double placed_ns = best_ns;
  if (prefetched) {
    Timed with{std::move(best), best_ns, best_how};
    std::vector<LowerOptions> candidates = {{.prefetch = WeightPrefetch::never}};
    for (const PrefetchQueues q : {PrefetchQueues::from_first, PrefetchQueues::from_last, PrefetchQueues::idlest}) {
      for (const WeightPrefetch p : {WeightPrefetch::always, WeightPrefetch::after_loads}) {
        if (p == WeightPrefetch::always && q == PrefetchQueues::from_first) continue;  // `with`
        candidates.push_back({.prefetch = p, .queues = q});
      }
    }
    std::vector<Timed> timed = lower_each(candidates);
    for (size_t i = 1; i < candidates.size(); ++i) {
      if (timed[i].ns < placed_ns)
        placed_ns = timed[i].ns, placed_p = candidates[i].prefetch, placed_q = candidates[i].queues;
    }
    best = std::move(timed[0].exe);
    best_ns = timed[0].ns;
    best_how = timed[0].how;
    keep_if_faster(with);
    for (size_t i = 1; i < candidates.size(); ++i) keep_if_faster(timed[i]);
  }
  // That placement with every kernel's transfers on the queues the kernels before left idlest.
  Timed idle;
  idle.how = {.prefetch = placed_p, .queues = placed_q, .kernel_queues = KernelQueues::idlest};
  idle.exe = lowered(idle.how);
  idle.ns = device::timing_only_ns(spec, idle.exe);
  const KernelQueues placed_k = idle.ns < placed_ns ? KernelQueues::idlest : KernelQueues::from_first;
  const KernelQueues other_k = placed_k == KernelQueues::idlest ? KernelQueues::from_first : KernelQueues::idlest;
  keep_if_faster(idle);
  // Then, on the same placement, the prefetch started past compute-bound kernels (PrefetchReach), and
  // the results of matmul epilogue groups and norms kept in SBUF for the linears after them, or only
  // the norms' (ActivationChain). When the program prefetches weights, each chain on either reach: a
  // kept norm makes the kernel it is a cheaper one to stream weights across, so which reach is faster
  // can turn with the chain (Llama small f32: the reach alone is slower, with the chain faster).
  // Without weight prefetches (t33_650M's weights are too large) the reach moves little, and two
  // lowerings more would cost compile() a third of its time there. A program with nothing kept is the
  // same one as before and is not taken again. The chain of every kept result (in_sbuf) is also timed
  // with the kernels' transfers on the other queue choice and with the other prefetch placement: they
  // were chosen on the program that keeps nothing, and keeping moves the transfers that the queues and
  // the placement order (ESM-2 t6_8M at 32 tokens 317.5 -> 295.4 us with the other queue choice, Llama
  // small bf16 at batch 1 519.3 -> 511.3 with the other placement; four lowerings more, about a third
  // more of compile()'s time for ESM-2 t12 at batch 4).
  std::vector<LowerOptions> variants;
  for (const PrefetchReach r : {PrefetchReach::next_kernel, PrefetchReach::past_compute_bound}) {
    for (const ActivationChain c : {ActivationChain::through_hbm, ActivationChain::in_sbuf, ActivationChain::norms_in_sbuf}) {
      if (r == PrefetchReach::next_kernel && c == ActivationChain::through_hbm) continue;  // timed above
      if (r == PrefetchReach::past_compute_bound && c != ActivationChain::through_hbm && !prefetched) continue;
      variants.push_back({.prefetch = placed_p, .queues = placed_q, .kernel_queues = placed_k, .reach = r, .chain = c});
      if (prefetched && c == ActivationChain::in_sbuf) {
        const WeightPrefetch other =
            placed_p == WeightPrefetch::always ? WeightPrefetch::after_loads : WeightPrefetch::always;
        variants.push_back({.prefetch = other, .queues = placed_q, .kernel_queues = placed_k, .reach = r, .chain = c});
        variants.push_back({.prefetch = placed_p, .queues = placed_q, .kernel_queues = other_k, .reach = r,
                            .chain = c});
      }
    }
  }
  std::vector<Timed> timed = lower_each(variants);
  for (Timed& t : timed) keep_if_faster(t);
  // Last, the fastest program so far with its linears that are handed their input in SBUF computing
  // their result tiles one after the other (PreloadedOrder): faster where their epilogues and stores
  // hold the Tensor engine back (ESM-2 at batch 4), slower where the weight still streams in while they
  // run. One lowering more, of the program kept; the same program when no linear takes its input so.
  // Not lowered when no linear has more than one row tile (Llama or ESM-2 at batch 1 and up to 128
  // tokens, t33_650M among them): its program would be the same.
  const auto linear_of_many_rows = [&](const Graph& g, const Node& n) {
    return n.kind == NodeKind::op && n.op == OpId::linear && !n.inputs.empty() && n.inputs[0] != kNoValue &&
           many_row_tiles(g.nodes[static_cast<size_t>(n.inputs[0])].meta.shape, spec.partitions);
  };
  const bool many_rows = std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) {
    if (n.kind == NodeKind::fused && n.fusion == FusionKind::matmul_epilogue)
      return std::any_of(n.body->nodes.begin(), n.body->nodes.end(),
                         [&](const Node& b) { return linear_of_many_rows(*n.body, b); });
    return linear_of_many_rows(graph, n);
  });
  // Each step below lowers the program kept once more with one choice changed (`change`), and keeps it
  // where faster; best_how then carries that choice into the steps after it.
  auto try_on_kept = [&](auto&& change) {
    Timed t;
    t.how = best_how;
    change(t.how);
    try {
      t.exe = lowered(t.how);
      t.ns = device::timing_only_ns(spec, t.exe);
      keep_if_faster(t);
    } catch (const Error&) {
      ++not_built;
    }
  };
  if (many_rows) try_on_kept([](LowerOptions& o) { o.order = PreloadedOrder::tiles; });
  // Last, the program kept once more with a prefetched a^T handed on to the next linear that reads the
  // same input (k and v reading q's: SharedInput::handed_on), kept where faster. Not in the search
  // above: the shared tile stays allocated across the kernels between, which leaves their prefetches less
  // room and turns the choices there (searched with it, ESM-2 t12 at batch 1 was 968.9 us against 962.3
  // without; on the program kept, 960.8), and one lowering more costs less than a second search
  // (Llama small bf16 at batch 4 958.5 -> 937.0 us either way). Only where two linears read one input:
  // elsewhere the program would be the same.
  if (Lowerer::linears_share_an_input(graph)) try_on_kept([](LowerOptions& o) { o.shared = SharedInput::handed_on; });
  // Last, the program kept once more with the rows a norm read in SBUF kept there for the residual add
  // that reads them later (ResidualStream::kept), kept where faster. Only where the program keeps a
  // norm's input (ActivationChain other than through_hbm): elsewhere it would be the same program. Like
  // the hand-over, the rows stay allocated across the kernels between, so it is tried on the program
  // kept rather than searched with.
  if (best_how.chain != ActivationChain::through_hbm)
    try_on_kept([](LowerOptions& o) { o.residual = ResidualStream::kept; });
  // Last, the program kept once more with each weight's prefetch allowed half the free SBUF
  // (PrefetchBudget::half), kept where faster: a larger weight then streams one ahead (Llama's 5.8 MB
  // gate projection while its up projection computes), and the kernels between plan with less SBUF.
  // Tried on the program kept, like the kept tiles above (searched with every placement, it doubled the
  // lowerings for 2% on Llama small f32 at batch 1); only where a weight was prefetched.
  if (prefetched) try_on_kept([](LowerOptions& o) { o.budget = PrefetchBudget::half; });
  // Last, the program kept once more with the MLP's first weight streamed from inside the attention
  // kernel (MlpWeight::past_attention), kept where faster: it changes which queues every kernel between
  // takes, so it is tried on the program kept. Only where a weight was prefetched and an attention is
  // lowered as one kernel: elsewhere the program would be the same.
  const bool attention = std::any_of(best.metadata.begin(), best.metadata.end(), [](const auto& kv) {
    return kv.first == "compiled.fused_attention" && kv.second != "0";
  });
  if (prefetched && attention) try_on_kept([](LowerOptions& o) { o.mlp = MlpWeight::past_attention; });
  if (not_built > 0) best.metadata.emplace_back("compiled.candidates_not_built", fmt::format("{}", not_built));
  return best;
}

std::vector<IoBinding> io_bindings(const device::Executable& exe) {
  std::vector<IoBinding> bindings;
  for (const device::IoTensor& io : exe.io) {
    IoBinding b;
    const bool known = (io.kind == device::IoKind::input && parse_index(io.name, "arg", b.index)) ||
                       (io.kind == device::IoKind::output && parse_index(io.name, "out", b.index)) ||
                       (io.kind == device::IoKind::scratch && parse_index(io.name, "scratch", b.index)) ||
                       (io.kind == device::IoKind::input && io.name.starts_with("const_"));
    SIGHTLINE_CHECK(
        known,
        "executable '{}': I/O tensor '{}' is not one a compiled program declares (arg<i>, out<i>, "
        "const_<dtype>, scratch<i>); it was not made by compile()'s lowering",
        exe.name, io.name);
    b.role = io.kind == device::IoKind::output    ? IoRole::result
             : io.kind == device::IoKind::scratch ? IoRole::scratch
             : io.name.starts_with("const_")      ? IoRole::constants
                                                  : IoRole::argument;
    bindings.push_back(b);
  }
  return bindings;
}

std::vector<double> constant_values(const device::Executable& exe, const device::IoTensor& io) {
  const std::string key = fmt::format("{}{}", kConstantsPrefix, io.name);
  for (const auto& [k, text] : exe.metadata) {
    if (k != key) continue;
    std::vector<double> values;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find(',', begin);
      if (end == std::string::npos) end = text.size();
      values.push_back(std::stod(text.substr(begin, end - begin)));
      begin = end + 1;
    }
    SIGHTLINE_CHECK(static_cast<int64_t>(values.size()) == (io.shape.empty() ? 1 : io.shape[0]),
                    "executable '{}': metadata '{}' lists {} values for I/O tensor '{}' of shape [{}]",
                    exe.name, key, values.size(), io.name, fmt::join(io.shape, ", "));
    return values;
  }
  fail("executable '{}': no metadata '{}' gives the values of I/O tensor '{}'", exe.name, key, io.name);
}

}  // namespace sightline::compiler
