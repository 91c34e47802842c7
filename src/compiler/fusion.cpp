// Dead code elimination, the two fusions (matmul epilogues, row groups), layout choice and the pipeline.
#include <algorithm>

#include "compiler/passes.h"
#include "compiler/rewrite.h"

namespace sightline::compiler {
namespace {

bool same_meta(const TensorMeta& a, const TensorMeta& b) { return a.shape == b.shape && a.dtype == b.dtype; }

// Replaces every group of two or more nodes by one fused node at the position of the group's root (its
// last node). Valid when every non-root member is used only inside its group: then no value outside
// the group depends on a member but the root, and the external inputs are all defined before the root.
Graph outline_groups(const Graph& graph, const std::vector<int>& group_of, const std::vector<int>& roots,
                     FusionKind kind) {
  std::vector<std::vector<int>> members(roots.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (group_of[i] >= 0) members[static_cast<size_t>(group_of[i])].push_back(static_cast<int>(i));
  }
  Graph out;
  std::vector<int> remap(graph.nodes.size(), kNoValue);
  auto mapped = [&](int v) {
    if (v == kNoValue) return kNoValue;
    SIGHTLINE_ASSERT_MSG(remap[static_cast<size_t>(v)] != kNoValue, "value %{} used outside its fused group",
                         v);
    return remap[static_cast<size_t>(v)];
  };
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int group = group_of[i];
    if (group < 0 || members[static_cast<size_t>(group)].size() < 2) {
      Node n = graph.nodes[i];
      for (int& v : n.inputs) v = mapped(v);
      remap[i] = out.add(std::move(n));
      continue;
    }
    if (roots[static_cast<size_t>(group)] != static_cast<int>(i)) continue;  // emitted with its root
    const std::vector<int>& group_members = members[static_cast<size_t>(group)];
    std::vector<int> externals;
    for (int m : group_members) {
      for (int v : graph.nodes[static_cast<size_t>(m)].inputs) {
        if (v == kNoValue || group_of[static_cast<size_t>(v)] == group) continue;
        if (std::find(externals.begin(), externals.end(), v) == externals.end()) externals.push_back(v);
      }
    }
    auto body = std::make_shared<Graph>();
    std::vector<int> inner(graph.nodes.size(), kNoValue);
    for (size_t k = 0; k < externals.size(); ++k) {
      inner[static_cast<size_t>(externals[k])] = body->add(
          make_input_node(static_cast<int>(k), graph.nodes[static_cast<size_t>(externals[k])].meta));
    }
    for (int m : group_members) {
      Node n = graph.nodes[static_cast<size_t>(m)];
      n.layout = {};
      for (int& v : n.inputs) {
        if (v != kNoValue) v = inner[static_cast<size_t>(v)];
      }
      inner[static_cast<size_t>(m)] = body->add(std::move(n));
    }
    body->outputs = {inner[i]};
    Node fused;
    fused.kind = NodeKind::fused;
    fused.fusion = kind;
    fused.meta = graph.nodes[i].meta;
    for (int v : externals) fused.inputs.push_back(mapped(v));
    fused.body = std::move(body);
    remap[i] = out.add(std::move(fused));
  }
  for (int v : graph.outputs) out.outputs.push_back(mapped(v));
  return out;
}

// ---- matmul epilogues ----

bool is_activation(OpId op) {
  return op == OpId::relu || op == OpId::gelu || op == OpId::silu || op == OpId::sigmoid || op == OpId::tanh;
}

// Whether `user` is an op on the matmul chain's value `value` that keeps its shape and dtype and that a
// result tile can apply: an activation, add/sub/mul/div with a scalar or with another tensor (a bias, a
// residual, a gate), or softmax / log_softmax along the last dim (attention's scores: applied on chip
// when the matmul's result tiles hold whole rows, else the group is lowered op by op).
bool is_epilogue(const Graph& g, const Node& user, int value) {
  if (user.kind != NodeKind::op || !same_meta(user.meta, g.nodes[static_cast<size_t>(value)].meta))
    return false;
  if (is_activation(user.op)) return true;
  if (user.op == OpId::softmax || user.op == OpId::log_softmax) {
    const int rank = user.meta.shape.size();
    return rank >= 1 && (user.attrs.dim == -1 || user.attrs.dim == rank - 1);
  }
  const bool arithmetic =
      user.op == OpId::add || user.op == OpId::sub || user.op == OpId::mul || user.op == OpId::div;
  if (!arithmetic) return false;
  if (user.attrs.has_scalar) return true;
  return user.inputs[0] != user.inputs[1];
}

// An op the view-level extension of an epilogue may hold: a view, cat, or an elementwise op that a
// result tile can apply (negation, an activation, add / sub / mul / div).
bool is_view_epilogue_op(const Node& n) {
  if (n.kind != NodeKind::op) return false;
  switch (n.op) {
    case OpId::view:
    case OpId::reshape:
    case OpId::permute:
    case OpId::transpose:
    case OpId::slice:
    case OpId::unsqueeze:
    case OpId::squeeze:
    case OpId::cat:
    case OpId::neg:
    case OpId::add:
    case OpId::sub:
    case OpId::mul:
    case OpId::div:
      return true;
    default:
      return is_activation(n.op);
  }
}

// Extends a matmul's epilogue chain `chain` over the views of its result: the ops after it that read the
// group (views, cat, elementwise ops, with other operands from outside it: rotary's cos and sin) up to
// one root, a compute op whose value is the only one of the group read outside it and that has as many
// elements as the matmul's result (a necessary condition for it to map back to the result's layout;
// the lowering resolves the views and falls back op by op where they do not map). Returns the group in
// graph order, or an empty vector when no such extension exists.
std::vector<int> view_epilogue(const Graph& g, const std::vector<int>& chain, const std::vector<int>& group_of,
                               const std::vector<int>& uses, const std::vector<std::vector<int>>& users) {
  const size_t n = g.nodes.size();
  const Node& mm = g.nodes[static_cast<size_t>(chain.front())];
  std::vector<char> member(n, 0), reach(n, 0);
  for (int v : chain) member[static_cast<size_t>(v)] = reach[static_cast<size_t>(v)] = 1;
  std::vector<int> candidates;
  for (size_t i = static_cast<size_t>(chain.back()) + 1; i < n; ++i) {
    const Node& node = g.nodes[i];
    bool reads_group = false, reads_reach = false;
    for (int v : node.inputs) {
      if (v == kNoValue) continue;
      if (member[static_cast<size_t>(v)]) reads_group = true;
      else if (reach[static_cast<size_t>(v)]) reads_reach = true;
    }
    // An input outside the group that depends on it would make the fused node depend on itself.
    if (reads_group && !reads_reach && group_of[i] == -1 && is_view_epilogue_op(node) &&
        node.meta.dtype == mm.meta.dtype) {
      member[i] = 1;
      candidates.push_back(static_cast<int>(i));
    }
    if (reads_group || reads_reach) reach[i] = 1;
  }
  for (auto r = candidates.rbegin(); r != candidates.rend(); ++r) {
    const Node& root = g.nodes[static_cast<size_t>(*r)];
    if (op_info(root.op).is_view || root.meta.shape.product() != mm.meta.shape.product()) continue;
    // The group: the chain and the candidates the root depends on.
    std::vector<char> in(n, 0);
    in[static_cast<size_t>(*r)] = 1;
    for (int i = *r; i >= chain.front(); --i) {
      if (!in[static_cast<size_t>(i)]) continue;
      for (int v : g.nodes[static_cast<size_t>(i)].inputs) {
        if (v != kNoValue && member[static_cast<size_t>(v)]) in[static_cast<size_t>(v)] = 1;
      }
    }
    std::vector<int> group;
    bool valid = true;
    for (int i = chain.front(); i <= *r && valid; ++i) {
      if (!in[static_cast<size_t>(i)]) continue;
      group.push_back(i);
      if (i == *r) continue;
      const std::vector<int>& u = users[static_cast<size_t>(i)];
      valid = uses[static_cast<size_t>(i)] == static_cast<int>(u.size()) &&
              std::all_of(u.begin(), u.end(), [&](int x) { return in[static_cast<size_t>(x)] != 0; });
    }
    // Chain members are in the group by construction (the root depends on the chain's end).
    if (valid && std::all_of(chain.begin(), chain.end(), [&](int v) { return in[static_cast<size_t>(v)] != 0; }))
      return group;
  }
  return {};
}

}  // namespace

Graph eliminate_dead_code(const Graph& graph) {
  std::vector<char> live(graph.nodes.size(), 0);
  for (int v : graph.outputs) live[static_cast<size_t>(v)] = 1;
  for (size_t i = graph.nodes.size(); i-- > 0;) {
    if (graph.nodes[i].kind == NodeKind::input) live[i] = 1;
    if (!live[i]) continue;
    for (int v : graph.nodes[i].inputs) {
      if (v != kNoValue) live[static_cast<size_t>(v)] = 1;
    }
  }
  std::vector<size_t> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (live[i]) kept.push_back(i);
  }
  return renumbered(graph, kept);
}

Graph fold_constants(const Graph& graph) {
  return eliminate_dead_code(apply_rewrites(graph, constant_folding_rules()));
}

Graph recognize_builtins(const Graph& graph) {
  return eliminate_dead_code(apply_rewrites(graph, builtin_recognition_rules()));
}

Graph fuse_matmul_epilogues(const Graph& graph) {
  const std::vector<int> uses = graph.use_counts();
  const std::vector<std::vector<int>> users = graph.users();
  std::vector<int> group_of(graph.nodes.size(), -1);
  std::vector<std::vector<int>> chains;  // per group, its nodes in chain order
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.kind != NodeKind::op || (n.op != OpId::matmul && n.op != OpId::linear)) continue;
    const int group = static_cast<int>(chains.size());
    chains.push_back({static_cast<int>(i)});
    group_of[i] = group;
    int chain_end = static_cast<int>(i);
    // Follow the chain while its value has exactly one use, by an epilogue op: no other consumer needs
    // an intermediate, so the whole chain runs while the matmul result is still on chip.
    while (uses[static_cast<size_t>(chain_end)] == 1 && users[static_cast<size_t>(chain_end)].size() == 1) {
      const int user = users[static_cast<size_t>(chain_end)][0];
      if (!is_epilogue(graph, graph.nodes[static_cast<size_t>(user)], chain_end)) break;
      // An op joining two matmul chains (SwiGLU's gate * up) goes to the later chain, with the rest of
      // the earlier chain from it on; the earlier chain then ends at the value feeding the join.
      if (const int earlier = group_of[static_cast<size_t>(user)]; earlier != -1) {
        std::vector<int>& other = chains[static_cast<size_t>(earlier)];
        other.erase(std::find(other.begin(), other.end(), user), other.end());
      }
      group_of[static_cast<size_t>(user)] = group;
      chains.back().push_back(user);
      chain_end = user;
    }
  }
  // Then each chain whose value goes on through views (the heads of a projection: view, permute, rotary)
  // takes the ops on those views that map back to the matmul's result, once every chain is settled.
  for (size_t group = 0; group < chains.size(); ++group) {
    const std::vector<int> extended = view_epilogue(graph, chains[group], group_of, uses, users);
    for (int v : extended) group_of[static_cast<size_t>(v)] = static_cast<int>(group);
    if (!extended.empty()) chains[group] = extended;
  }
  std::vector<int> roots;
  for (const std::vector<int>& chain : chains) roots.push_back(chain.back());
  return outline_groups(graph, group_of, roots, FusionKind::matmul_epilogue);
}

// ---- row groups ----

namespace {

int normalized(int64_t dim, int rank) { return static_cast<int>(dim < 0 ? dim + rank : dim); }

// A row space: the leading dims (rows, flattened onto partitions) and the row length (0: not known yet).
struct RowSpace {
  Dims lead;
  int64_t cols = 0;
};

bool is_row_reduction(const Node& n, const Graph& g) {
  if (n.op != OpId::sum && n.op != OpId::mean && n.op != OpId::amax) return false;
  const int rank = g.nodes[static_cast<size_t>(n.inputs[0])].meta.shape.size();
  return n.attrs.keepdim && n.attrs.dims.size() == 1 && rank >= 1 &&
         normalized(n.attrs.dims[0], rank) == rank - 1;
}

bool is_row_op(const Node& n, const Graph& g) {
  if (n.kind != NodeKind::op || n.meta.shape.size() < 1 || n.inputs.empty()) return false;
  const OpInfo& info = op_info(n.op);
  // A comparison writes bool and compares in its operands' dtype: op by op, not in a row loop's f32 tiles.
  // A select reads its mask as an engine reads a bool tile (0 or 1), as its per-op kernel does: a row step
  // (row_kernel.cpp refuses one whose tiles are not full rows, but for masked_fill's mask).
  if (op_is_comparison(n.op)) return false;
  if (info.kind == OpKind::elementwise) return true;
  if (n.op == OpId::softmax || n.op == OpId::log_softmax) {
    return normalized(n.attrs.dim, n.meta.shape.size()) == n.meta.shape.size() - 1;
  }
  return info.kind == OpKind::normalization || is_row_reduction(n, g);
}

bool same_lead(const Dims& shape, const Dims& lead) {
  if (shape.size() != lead.size() + 1) return false;
  for (int d = 0; d < lead.size(); ++d) {
    if (shape[d] != lead[d]) return false;
  }
  return true;
}

// Whether a row op fits the row space (shape [lead..., cols] or [lead..., 1]); learns cols if unknown.
bool fits_row_space(const Node& n, const Graph& g, RowSpace& space) {
  const Dims& out = n.meta.shape;
  int64_t cols = space.cols;
  auto accept_last = [&](int64_t last, bool may_be_one) {
    if (may_be_one && last == 1) return true;
    if (cols == 0) cols = last;
    return last == cols;
  };
  if (!same_lead(out, space.lead)) return false;
  if (is_row_reduction(n, g)) {
    const Dims& in = g.nodes[static_cast<size_t>(n.inputs[0])].meta.shape;
    if (!same_lead(in, space.lead) || !accept_last(in.back(), false)) return false;
  } else if (!accept_last(out.back(), true)) {
    return false;
  }
  space.cols = cols;
  return true;
}

RowSpace row_space_of(const Node& root) {
  RowSpace space;
  for (int d = 0; d + 1 < root.meta.shape.size(); ++d) space.lead.push_back(root.meta.shape[d]);
  return space;
}

}  // namespace

Graph fuse_rows(const Graph& graph) {
  const std::vector<int> uses = graph.use_counts();
  const std::vector<std::vector<int>> users = graph.users();
  std::vector<int> group_of(graph.nodes.size(), -1);
  std::vector<int> roots;
  const int first_op = graph.input_count();
  // Roots are taken from the end: a group grows backwards over producers whose every use is inside it.
  for (int r = static_cast<int>(graph.nodes.size()) - 1; r >= first_op; --r) {
    const Node& root = graph.nodes[static_cast<size_t>(r)];
    if (group_of[static_cast<size_t>(r)] >= 0 || !is_row_op(root, graph)) continue;
    RowSpace space = row_space_of(root);
    if (!fits_row_space(root, graph, space)) continue;
    const int group = static_cast<int>(roots.size());
    roots.push_back(r);
    group_of[static_cast<size_t>(r)] = group;
    for (int p = r - 1; p >= first_op; --p) {
      const Node& candidate = graph.nodes[static_cast<size_t>(p)];
      const std::vector<int>& p_users = users[static_cast<size_t>(p)];
      if (group_of[static_cast<size_t>(p)] >= 0 || p_users.empty() ||
          uses[static_cast<size_t>(p)] != static_cast<int>(p_users.size()) || !is_row_op(candidate, graph)) {
        continue;
      }
      const bool used_only_inside = std::all_of(
          p_users.begin(), p_users.end(), [&](int u) { return group_of[static_cast<size_t>(u)] == group; });
      RowSpace widened = space;
      if (!used_only_inside || !fits_row_space(candidate, graph, widened)) continue;
      space = widened;
      group_of[static_cast<size_t>(p)] = group;
    }
  }
  return outline_groups(graph, group_of, roots, FusionKind::rows);
}

// ---- layout ----

namespace {

// The iteration space of a node and the dims it reduces (which must stay on the free axis).
void iteration_space(const Graph& g, const Node& n, Dims& shape, Dims& reduced) {
  shape = n.meta.shape;
  reduced = {};
  const int rank = shape.size();
  if (n.kind == NodeKind::fused) {
    if (n.fusion != FusionKind::rows || rank == 0) return;
    int64_t cols = shape.back();
    for (const Node& member : n.body->nodes) {
      if (member.meta.shape.size() == rank) cols = std::max(cols, member.meta.shape.back());
    }
    shape[rank - 1] = cols;
    reduced.push_back(rank - 1);
    return;
  }
  switch (n.op) {
    case OpId::sum:
    case OpId::mean:
    case OpId::amax: {
      shape = g.nodes[static_cast<size_t>(n.inputs[0])].meta.shape;
      if (n.attrs.dims.empty()) {
        for (int d = 0; d < shape.size(); ++d) reduced.push_back(d);
      }
      for (int64_t d : n.attrs.dims) reduced.push_back(normalized(d, shape.size()));
      std::sort(reduced.begin(), reduced.end());
      return;
    }
    case OpId::softmax:
    case OpId::log_softmax:
      reduced.push_back(normalized(n.attrs.dim, rank));
      return;
    case OpId::rms_norm:
    case OpId::layer_norm:
      reduced.push_back(rank - 1);
      return;
    default:
      return;
  }
}

Layout layout_for(const Dims& shape, const Dims& reduced) {
  Layout layout;
  layout.chosen = true;
  const int rank = shape.size();
  if (reduced.empty()) {
    // Rows on partitions, the innermost (contiguous) dim along the free axis for contiguous DMA rows.
    for (int d = 0; d + 1 < rank; ++d) layout.partition_dims.push_back(d);
    if (rank == 1) layout.partition_dims.push_back(0);
    if (rank >= 2) layout.free_dims.push_back(rank - 1);
    return layout;
  }
  // Reductions run along the free axis (one VectorE pass per partition), so reduced dims are free
  // and every other dim goes to partitions, even when that makes the load strided.
  for (int d = 0; d < rank; ++d) {
    const bool is_reduced = std::find(reduced.begin(), reduced.end(), d) != reduced.end();
    (is_reduced ? layout.free_dims : layout.partition_dims).push_back(d);
  }
  return layout;
}

}  // namespace

Graph choose_layout(const Graph& graph) {
  Graph out = graph;
  for (Node& n : out.nodes) {
    if (n.kind == NodeKind::input || (n.kind == NodeKind::op && op_info(n.op).is_view)) continue;
    Dims shape, reduced;
    iteration_space(graph, n, shape, reduced);
    n.layout = layout_for(shape, reduced);
  }
  return out;
}

// ---- the pipeline ----

namespace {

constexpr Pass kPipeline[] = {
    {"dead_code", &eliminate_dead_code},
    {"fold_constants", &fold_constants},
    {"recognize_builtins", &recognize_builtins},
    {"fuse_epilogues", &fuse_matmul_epilogues},
    {"fuse_rows", &fuse_rows},
    {"choose_layout", &choose_layout},
};

}  // namespace

std::span<const Pass> default_pipeline() { return kPipeline; }

Graph optimize(Graph graph, const PassObserver& after_pass, const CompileOptions& options) {
  verify(graph, "capture", VerifyOptions{.allow_dead_nodes = true});
  auto run = [&](const Pass& pass) {
    graph = pass.run(graph);
    verify(graph, pass.name);
    if (after_pass) after_pass(pass.name, graph);
  };
  for (const Pass& pass : kPipeline) {
    const bool substitution = pass.name == "recognize_builtins";
    if (!substitution || options.substitute_builtins) run(pass);
    if (substitution && options.autocast == Autocast::matmul_bf16) run({"autocast", &autocast_matmuls});
  }
  return graph;
}

}  // namespace sightline::compiler
