#include "compiler/view_epilogue.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "compiler/lower.h"
#include "kernels/layout.h"

namespace sightline::compiler {
namespace {

using kernels::TensorDesc;

// A value of the group: element i is result element offset + sum(i_d * strides_d) of buffer `buffer`.
struct Map {
  int buffer = 0;
  int64_t offset = 0;
  Dims shape, strides;
};

// One operand's strides over an op's output index space: a value of the group (result element space)
// or a tensor loaded from HBM (broadcast strides), or a scalar.
struct Walk {
  EpilogueOperand::Kind kind = EpilogueOperand::Kind::value;
  int buffer = 0;
  int64_t offset = 0;
  Dims strides;
  int input = -1;
  double scalar = 0;
};

// The op's output positions and its operands' walks as tile patterns; else why they do not map.
std::optional<std::string> resolve(const Map& out, std::span<const Walk> walks, int64_t rows, int64_t cols,
                                   RowPattern& out_at, std::vector<EpilogueOperand>& operands) {
  const int rank = out.shape.size();
  if (out.offset / cols != 0 || out.offset < 0) return "a value starts past the result's first row";
  for (const Walk& w : walks) {
    if (w.kind == EpilogueOperand::Kind::value && (w.offset / cols != 0 || w.offset < 0))
      return "an operand starts past the result's first row";
  }
  struct Dim {
    int64_t size, out;
    std::vector<int64_t> op;
  };
  std::vector<Dim> row_dims, col_dims;
  for (int d = 0; d < rank; ++d) {
    if (out.shape[d] == 1) continue;
    Dim dim{out.shape[d], out.strides[d], {}};
    for (const Walk& w : walks) dim.op.push_back(w.kind == EpilogueOperand::Kind::scalar ? 0 : w.strides[d]);
    const int64_t s = out.strides[d];
    if (s > 0 && s % cols == 0) {
      for (size_t k = 0; k < walks.size(); ++k) {
        if (walks[k].kind == EpilogueOperand::Kind::value && dim.op[k] != s)
          return "an operand's rows are not the result's rows (a view moves data across partitions)";
      }
      row_dims.push_back(dim);
    } else if (s > 0 && s < cols) {
      for (size_t k = 0; k < walks.size(); ++k) {
        if (walks[k].kind == EpilogueOperand::Kind::value && (dim.op[k] < 0 || dim.op[k] >= cols))
          return "an operand's dim steps across rows where the result's steps along one";
      }
      col_dims.push_back(dim);
    } else {
      return fmt::format("a view's dim of stride {} spans rows and columns of the [{}, {}] result", s, rows, cols);
    }
  }
  // The rows: every row of the result once, in order, so that partition p of a tile is the same row for
  // every operand.
  std::sort(row_dims.begin(), row_dims.end(), [](const Dim& a, const Dim& b) { return a.out < b.out; });
  int64_t expect = 1;
  for (const Dim& d : row_dims) {
    if (d.out / cols != expect) return "a view takes some of the result's rows, or reorders them";
    expect *= d.size;
  }
  if (expect != rows) return "a view takes some of the result's rows, or reorders them";
  // The free dims, outermost first, merged where every operand walks them contiguously.
  std::sort(col_dims.begin(), col_dims.end(), [](const Dim& a, const Dim& b) { return a.out > b.out; });
  std::vector<Dim> merged;
  for (const Dim& d : col_dims) {
    if (!merged.empty()) {
      Dim& o = merged.back();
      bool contiguous = o.out == d.out * d.size;
      for (size_t k = 0; k < d.op.size() && contiguous; ++k) contiguous = o.op[k] == d.op[k] * d.size;
      if (contiguous) {
        o = {o.size * d.size, d.out, d.op};
        continue;
      }
    }
    merged.push_back(d);
  }
  if (merged.size() > 4) return fmt::format("{} free dims (an instruction takes 4)", merged.size());
  auto reach = [&](int64_t offset, auto stride_of) {
    int64_t r = offset % cols;
    for (const Dim& d : merged) r += (d.size - 1) * stride_of(d);
    return r;
  };
  if (reach(out.offset, [](const Dim& d) { return d.out; }) >= cols) return "a value wraps past a result row";
  out_at.offset = out.offset % cols;
  out_at.dims.clear();
  for (const Dim& d : merged) out_at.dims.push_back({static_cast<uint32_t>(d.size), static_cast<int32_t>(d.out)});
  operands.clear();
  for (size_t k = 0; k < walks.size(); ++k) {
    const Walk& w = walks[k];
    EpilogueOperand o;
    o.kind = w.kind;
    o.scalar = w.scalar;
    if (w.kind == EpilogueOperand::Kind::value) {
      if (reach(w.offset, [&](const Dim& d) { return d.op[k]; }) >= cols) return "an operand wraps past a result row";
      o.buffer = w.buffer;
      o.at.offset = w.offset % cols;
      for (const Dim& d : merged)
        o.at.dims.push_back({static_cast<uint32_t>(d.size), static_cast<int32_t>(d.op[k])});
    } else if (w.kind == EpilogueOperand::Kind::tensor) {
      // Loaded compactly: the dims it does not broadcast along, row-major; stride 0 along the others.
      o.input = w.input;
      o.hbm_base = w.offset;
      uint32_t loaded = 1;
      for (auto d = merged.rbegin(); d != merged.rend(); ++d) {
        if (d->op[k] == 0) continue;
        loaded *= static_cast<uint32_t>(d->size);
      }
      o.loaded = loaded;
      uint32_t step = 1;
      std::vector<device::FreeDim> at(merged.size());
      for (size_t i = merged.size(); i-- > 0;) {
        const Dim& d = merged[i];
        at[i] = {static_cast<uint32_t>(d.size), d.op[k] == 0 ? 0 : static_cast<int32_t>(step)};
        if (d.op[k] != 0) step *= static_cast<uint32_t>(d.size);
      }
      o.at.dims = at;
      for (const Dim& d : merged) {
        if (d.op[k] != 0) o.hbm.push_back({static_cast<uint32_t>(d.size), static_cast<int32_t>(d.op[k])});
      }
      if (o.hbm.size() > 4) return "a tensor operand loads over more than 4 free dims";
      for (const Dim& d : row_dims) {
        o.row_sizes.push_back(d.size);
        o.row_steps.push_back(d.out / cols);
        o.row_hbm_strides.push_back(d.op[k]);
      }
    }
    operands.push_back(std::move(o));
  }
  return std::nullopt;
}

int normalized(int64_t dim, int rank) { return static_cast<int>(dim < 0 ? dim + rank : dim); }

// Whether `m` holds every element of the [rows, cols] result once, element i at offset sum(i_d * s_d).
bool is_whole_result(const Map& m, int64_t rows, int64_t cols) {
  if (m.offset != 0 || m.shape.product() != rows * cols) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int d = 0; d < m.shape.size(); ++d) {
    if (m.shape[d] != 1) dims.emplace_back(m.strides[d], m.shape[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

}  // namespace

std::optional<RowPattern> restrict_to_columns(const RowPattern& at, int64_t cols, int64_t c0, int64_t width,
                                              int64_t* first) {
  if (first) *first = 0;
  if (c0 == 0 && width == cols) return at;
  if (at.dims.empty()) return std::nullopt;
  const int64_t block = at.dims[0].stride;
  int64_t inner = at.offset;
  for (size_t i = 1; i < at.dims.size(); ++i) inner += (at.dims[i].size - 1) * int64_t{at.dims[i].stride};
  // Each block must lie inside one window-aligned stretch of `block` columns.
  if (block <= 0 || c0 % block != 0 || width % block != 0 || inner >= block) return std::nullopt;
  const int64_t k0 = c0 / block, k1 = std::min<int64_t>((c0 + width) / block, at.dims[0].size);
  RowPattern out = at;
  out.dims[0].size = static_cast<uint32_t>(std::max<int64_t>(0, k1 - k0));
  if (first) *first = k0;
  return out;
}

bool epilogue_has_views(const Graph& body) {
  const std::vector<int> uses = body.use_counts();
  for (size_t i = 0; i < body.nodes.size(); ++i) {
    const Node& n = body.nodes[i];
    if (n.kind != NodeKind::op) continue;
    if (op_info(n.op).is_view || n.op == OpId::cat || uses[i] > 1) return true;
  }
  return false;
}

std::variant<ViewEpiloguePlan, std::string> plan_view_epilogue(const Graph& body,
                                                               std::span<const TensorDesc> inputs) {
  size_t first = 0;
  while (first < body.nodes.size() && body.nodes[first].kind != NodeKind::op) ++first;
  if (first == body.nodes.size() || op_info(body.nodes[first].op).kind != OpKind::matmul)
    return std::string("the group does not start with a matmul");
  const Node& mm = body.nodes[first];
  const DType dtype = mm.meta.dtype;
  if (mm.meta.shape.size() == 0 || !dtype_is_floating(dtype)) return std::string("the matmul's result is not a floating tensor");
  ViewEpiloguePlan plan;
  plan.cols = mm.meta.shape.back();
  plan.rows = mm.meta.shape.product() / plan.cols;
  std::vector<std::optional<Map>> maps(body.nodes.size());
  maps[first] = Map{0, 0, mm.meta.shape, contiguous_strides(mm.meta.shape)};
  const int root = body.outputs.front();
  // A cat read once, by a binary op that reads it once and is not the last op (rotate_half's cat times
  // sin): not copied. The op runs once per piece instead, on the piece where it lies and the other
  // operand's same positions, and writes its result there (the same bits: a cat only moves values).
  // `pieces[i]` holds such a cat's pieces: its input's map, and where the piece starts along the cat's
  // dim and its size.
  const std::vector<int> uses = body.use_counts();
  struct Piece {
    Map source;
    int64_t start = 0, size = 0;
  };
  std::vector<std::vector<Piece>> pieces(body.nodes.size());
  std::vector<int> cat_dim(body.nodes.size(), -1);
  const auto elided = [&](size_t i) {
    const Node& n = body.nodes[i];
    if (n.kind != NodeKind::op || n.op != OpId::cat || uses[i] != 1 || static_cast<int>(i) == root) return false;
    for (size_t j = i + 1; j < body.nodes.size(); ++j) {
      const Node& r = body.nodes[j];
      const auto reads = std::count(r.inputs.begin(), r.inputs.end(), static_cast<int>(i));
      if (reads == 0) continue;
      // Not the last op: it writes the result tile, which the pieces may come from at other positions.
      if (r.kind != NodeKind::op || reads != 1 || static_cast<int>(j) == root || r.inputs.size() != 2 ||
          r.attrs.has_scalar || r.meta.shape != n.meta.shape ||
          !(r.op == OpId::add || r.op == OpId::sub || r.op == OpId::mul || r.op == OpId::div))
        return false;
      // Its other operand no cat: it runs on one cat's pieces.
      const int other = r.inputs[0] == static_cast<int>(i) ? r.inputs[1] : r.inputs[0];
      return other == kNoValue || body.nodes[static_cast<size_t>(other)].kind != NodeKind::op ||
             body.nodes[static_cast<size_t>(other)].op != OpId::cat;
    }
    return false;
  };
  for (size_t i = first + 1; i < body.nodes.size(); ++i) {
    const Node& n = body.nodes[i];
    const std::string name(op_name(n.op));
    if (n.kind != NodeKind::op) return fmt::format("{}: a nested group", name);
    if (n.meta.dtype != dtype) return fmt::format("{} changes the dtype", name);
    auto map_of = [&](int v) -> const Map* {
      return v == kNoValue ? nullptr : maps[static_cast<size_t>(v)] ? &*maps[static_cast<size_t>(v)] : nullptr;
    };
    if (op_info(n.op).is_view) {
      const Map* in = map_of(n.inputs[0]);
      if (!in) return fmt::format("{} of a tensor outside the group", name);
      const std::optional<std::pair<int64_t, TensorDesc>> v =
          apply_view_desc(n.op, n.attrs, in->offset, TensorDesc{dtype, in->shape, in->strides});
      if (!v) return fmt::format("{} needs a copy of its input", name);
      maps[i] = Map{in->buffer, v->first, v->second.shape, v->second.strides};
      continue;
    }
    const bool elide = elided(i);
    const int buffer = static_cast<int>(i) == root ? 0 : elide ? -1 : plan.buffers++;
    EpilogueStep step;
    step.node = &n;
    step.buffer = buffer;
    auto value_walk = [](const Map& m) {
      Walk w;
      w.buffer = m.buffer;
      w.offset = m.offset;
      w.strides = m.strides;
      return w;
    };
    if (n.op == OpId::cat) {
      const int rank = n.meta.shape.size();
      const int d = normalized(n.attrs.dim, rank);
      std::vector<const Map*> parts;
      for (int v : n.inputs) {
        const Map* m = map_of(v);
        if (!m) return fmt::format("{} of a tensor outside the group", name);
        if (!parts.empty() && m->strides != parts.front()->strides)
          return fmt::format("{} of values laid out differently", name);
        parts.push_back(m);
      }
      // The pieces, where they are along `d`, must tile the output's extent: the output then takes those
      // positions, and each piece is copied into its place there.
      const int64_t stride = parts.front()->strides[d];
      int64_t base = parts.front()->offset;
      for (const Map* m : parts) base = std::min(base, m->offset);
      std::vector<std::pair<int64_t, int64_t>> spans;  // (start along d, size)
      for (const Map* m : parts) {
        if (stride == 0 || (m->offset - base) % stride != 0) return fmt::format("{}: its pieces do not tile one value", name);
        spans.emplace_back((m->offset - base) / stride, m->shape[d]);
      }
      std::vector<std::pair<int64_t, int64_t>> sorted = spans;
      std::sort(sorted.begin(), sorted.end());
      int64_t at = 0;
      for (const auto& [start, size] : sorted) {
        if (start != at) return fmt::format("{}: its pieces do not tile one value", name);
        at += size;
      }
      if (at != n.meta.shape[d]) return fmt::format("{}: its pieces do not tile one value", name);
      const Map out{buffer, base, n.meta.shape, parts.front()->strides};
      if (elide) {
        int64_t start = 0;
        for (const Map* m : parts) {
          pieces[i].push_back({*m, start, m->shape[d]});
          start += m->shape[d];
        }
        cat_dim[i] = d;
        maps[i] = out;
        continue;
      }
      int64_t cum = 0;
      for (const Map* m : parts) {
        Map piece = out;
        piece.offset = base + cum * stride;
        piece.shape[d] = m->shape[d];
        cum += m->shape[d];
        RowPattern piece_at;
        std::vector<EpilogueOperand> ops;
        const Walk walks[] = {value_walk(*m)};
        if (auto why = resolve(piece, walks, plan.rows, plan.cols, piece_at, ops)) return fmt::format("{}: {}", name, *why);
        step.pieces.push_back(piece_at);
        step.operands.push_back(ops.front());
      }
      // The whole output's pattern (for the root check and for readers).
      maps[i] = out;
    } else if (op_is_unary_elementwise(n.op) || op_is_binary_elementwise(n.op)) {
      const bool binary = op_is_binary_elementwise(n.op);
      if (binary && n.op != OpId::add && n.op != OpId::sub && n.op != OpId::mul && n.op != OpId::div)
        return fmt::format("{} is not an epilogue op", name);
      const Map* like = nullptr;
      std::vector<Walk> walks;
      for (int v : n.inputs) {
        if (const Map* m = map_of(v)) {
          if (m->shape != n.meta.shape) return fmt::format("{}: a value of the group broadcasts", name);
          if (!like) like = m;
          walks.push_back(value_walk(*m));
          continue;
        }
        const Node& in = body.nodes[static_cast<size_t>(v)];
        if (in.kind != NodeKind::input) return fmt::format("{} reads a value computed before the matmul", name);
        const TensorDesc& desc = inputs[static_cast<size_t>(in.input_index)];
        if (desc.dtype != dtype) return fmt::format("{}: an operand of another dtype", name);
        Walk w;
        w.kind = EpilogueOperand::Kind::tensor;
        w.input = in.input_index;
        const std::vector<int64_t> bs = kernels::broadcast_strides(desc, n.meta.shape);
        w.strides = Dims(std::span<const int64_t>(bs));
        walks.push_back(w);
      }
      if (binary && n.attrs.has_scalar) {
        Walk w;
        w.kind = EpilogueOperand::Kind::scalar;
        w.scalar = n.attrs.scalar;
        walks.push_back(w);
      }
      if (!like) return fmt::format("{} reads no value of the group", name);
      maps[i] = Map{buffer, like->offset, n.meta.shape, like->strides};
      // A cat it reads that was not copied: one step per piece, the other operands at the same positions.
      const auto cat = std::find_if(n.inputs.begin(), n.inputs.end(), [&](int v) {
        return v != kNoValue && !pieces[static_cast<size_t>(v)].empty();
      });
      if (cat != n.inputs.end()) {
        const size_t c = static_cast<size_t>(*cat), k_cat = static_cast<size_t>(cat - n.inputs.begin());
        const int d = cat_dim[c];
        for (const Piece& pc : pieces[c]) {
          Map out = *maps[i];
          out.offset += pc.start * out.strides[d];
          out.shape[d] = pc.size;
          std::vector<Walk> piece_walks = walks;
          for (size_t k = 0; k < piece_walks.size(); ++k) {
            Walk& w = piece_walks[k];
            if (k == k_cat) {
              w = value_walk(pc.source);
            } else if (w.kind != EpilogueOperand::Kind::scalar) {
              w.offset += pc.start * w.strides[d];
            }
          }
          EpilogueStep piece_step;
          piece_step.node = &n;
          piece_step.buffer = buffer;
          if (auto why = resolve(out, piece_walks, plan.rows, plan.cols, piece_step.out, piece_step.operands))
            return fmt::format("{}: {}", name, *why);
          plan.steps.push_back(std::move(piece_step));
        }
        continue;
      }
      if (auto why = resolve(*maps[i], walks, plan.rows, plan.cols, step.out, step.operands))
        return fmt::format("{}: {}", name, *why);
    } else {
      return fmt::format("{} is not an epilogue op", name);
    }
    if (n.op == OpId::cat) {
      std::vector<EpilogueOperand> unused;
      if (auto why = resolve(*maps[i], {}, plan.rows, plan.cols, step.out, unused)) return fmt::format("{}: {}", name, *why);
    }
    plan.steps.push_back(std::move(step));
  }
  const Map* result = maps[static_cast<size_t>(root)] ? &*maps[static_cast<size_t>(root)] : nullptr;
  if (!result || plan.steps.empty() || plan.steps.back().node != &body.nodes[static_cast<size_t>(root)])
    return std::string("the group's value is not computed by its last op");
  if (!is_whole_result(*result, plan.rows, plan.cols))
    return std::string("the group's value does not cover the matmul's result once");
  // The last op writes the result tile: it may read that tile only where it writes (each of its steps,
  // one per piece of a cat it reads).
  for (const EpilogueStep& last : plan.steps) {
    if (last.node != plan.steps.back().node) continue;
    for (const EpilogueOperand& o : last.operands) {
      const bool same = o.at.offset == last.out.offset && o.at.dims == last.out.dims && last.pieces.empty();
      if (o.kind == EpilogueOperand::Kind::value && o.buffer == 0 && !same)
        return std::string("the last op reads the result tile at other positions than it writes");
    }
  }
  plan.offset = result->offset;
  plan.strides = result->strides;
  return plan;
}

}  // namespace sightline::compiler
