// Graph construction helpers, the verifier and the text dump.
#include "compiler/graph.h"

#include <fmt/format.h>

#include "core/view_meta.h"

namespace sightline::compiler {

std::string_view fusion_kind_name(FusionKind kind) {
  switch (kind) {
    case FusionKind::none:
      return "none";
    case FusionKind::rows:
      return "rows";
    case FusionKind::matmul_epilogue:
      return "matmul_epilogue";
  }
  return "?";
}

int Graph::input_count() const {
  int n = 0;
  while (n < static_cast<int>(nodes.size()) && nodes[static_cast<size_t>(n)].kind == NodeKind::input) ++n;
  return n;
}

int Graph::add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<int>(nodes.size()) - 1;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> counts(nodes.size(), 0);
  for (const Node& n : nodes) {
    for (int v : n.inputs) {
      if (v != kNoValue) ++counts[static_cast<size_t>(v)];
    }
  }
  for (int v : outputs) ++counts[static_cast<size_t>(v)];
  return counts;
}

std::vector<std::vector<int>> Graph::users() const {
  std::vector<std::vector<int>> result(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (int v : nodes[i].inputs) {
      if (v != kNoValue) result[static_cast<size_t>(v)].push_back(static_cast<int>(i));
    }
  }
  return result;
}

Tensor meta_tensor(const TensorMeta& meta) {
  // One shared storage without memory: shape rules read only shape, dtype and device.
  static const auto storage = std::make_shared<Storage>(Device::cpu(), 0, nullptr, nullptr, nullptr);
  return Tensor(storage, meta.dtype, meta.shape, contiguous_strides(meta.shape), 0);
}

namespace {

TensorMeta view_op_meta(OpId op, const TensorMeta& in, const OpAttrs& at) {
  const Tensor x = meta_tensor(in);
  switch (op) {
    case OpId::view:
    case OpId::reshape:
      return {view_meta::infer_view_shape(at.dims, x.numel(), op_name(op), x.shape()), in.dtype};
    case OpId::transpose:
      return {view_meta::transpose(x, static_cast<int>(at.dim), static_cast<int>(at.dim1)).shape(), in.dtype};
    case OpId::permute:
      return {view_meta::permute(x, at.dims).shape(), in.dtype};
    case OpId::slice:
      return {view_meta::slice(x, static_cast<int>(at.dim), at.start, at.end, at.step).shape(), in.dtype};
    case OpId::expand:
      return {view_meta::expand(x, at.dims).shape(), in.dtype};
    case OpId::unsqueeze:
      return {view_meta::unsqueeze(x, static_cast<int>(at.dim)).shape(), in.dtype};
    case OpId::squeeze:
      return {view_meta::squeeze(x, static_cast<int>(at.dim)).shape(), in.dtype};
    case OpId::select:
      return {view_meta::select(x, static_cast<int>(at.dim), at.start).shape(), in.dtype};
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a view op", op_name(op));
  return {};
}

}  // namespace

TensorMeta compute_meta(OpId op, std::span<const TensorMeta> input_metas, std::span<const bool> present,
                        const OpAttrs& attrs) {
  if (op_info(op).is_view) {
    SIGHTLINE_CHECK(input_metas.size() == 1 && present[0], "{}: a view op takes exactly one input",
                    op_name(op));
    return view_op_meta(op, input_metas[0], attrs);
  }
  std::vector<Tensor> inputs;
  inputs.reserve(input_metas.size());
  for (size_t i = 0; i < input_metas.size(); ++i) {
    inputs.push_back(present[i] ? meta_tensor(input_metas[i]) : Tensor());
  }
  return infer_meta(OpCall{op, inputs, attrs});
}

Graph renumbered(const Graph& graph, std::span<const size_t> order) {
  Graph out;
  std::vector<int> at(graph.nodes.size(), kNoValue);
  for (size_t i : order) {
    Node n = graph.nodes[i];
    for (int& v : n.inputs) {
      if (v != kNoValue) v = at[static_cast<size_t>(v)];
    }
    at[i] = out.add(std::move(n));
  }
  for (int v : graph.outputs) out.outputs.push_back(at[static_cast<size_t>(v)]);
  return out;
}

Node make_input_node(int index, const TensorMeta& meta) {
  Node n;
  n.kind = NodeKind::input;
  n.input_index = index;
  n.meta = meta;
  return n;
}

Node make_op_node(const Graph& graph, OpId op, std::vector<int> inputs, const OpAttrs& attrs) {
  std::vector<TensorMeta> metas;
  bool present[16] = {};
  SIGHTLINE_ASSERT(inputs.size() <= std::size(present));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int v = inputs[k];
    metas.push_back(v == kNoValue ? TensorMeta{} : graph.nodes[static_cast<size_t>(v)].meta);
    present[k] = v != kNoValue;
  }
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = attrs;
  n.meta = compute_meta(op, metas, std::span<const bool>(present, n.inputs.size()), attrs);
  return n;
}

// ---- verifier ----

namespace {

std::string meta_text(const TensorMeta& m) { return fmt::format("{}{}", dtype_name(m.dtype), m.shape); }

bool optional_input(OpId op, size_t index) {
  return (op == OpId::linear && index == 2) || (op == OpId::rms_norm && index == 1) ||
         (op == OpId::layer_norm && index >= 1) || (op == OpId::scaled_dot_product_attention && index == 3);
}

size_t expected_arity(const Node& n) {
  const OpInfo& info = op_info(n.op);
  if (info.arity < 0) return n.inputs.size();  // a list (cat)
  if (op_is_binary_elementwise(n.op) && n.attrs.has_scalar) return 1;
  return static_cast<size_t>(info.arity);
}

[[noreturn]] void broken(std::string_view stage, const std::string& what) {
  fail("graph verifier, after '{}': {}; the pass that ran last produced an invalid graph", stage, what);
}

void verify_graph(const Graph& g, std::string_view stage, VerifyOptions options, bool is_body) {
  const int inputs = g.input_count();
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    if (n.kind == NodeKind::input) {
      if (i >= inputs) broken(stage, fmt::format("input node %{} comes after an op node", i));
      if (n.input_index != i)
        broken(stage, fmt::format("input node %{} has argument index {}", i, n.input_index));
      continue;
    }
    std::vector<TensorMeta> metas;
    bool present[16] = {};
    if (n.inputs.size() > std::size(present)) broken(stage, fmt::format("node %{} has too many inputs", i));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int v = n.inputs[k];
      if (v == kNoValue) {
        if (n.kind != NodeKind::op || !optional_input(n.op, k)) {
          broken(stage, fmt::format("node %{} lacks its required input {}", i, k));
        }
        metas.emplace_back();
        continue;
      }
      if (v < 0 || v >= i) broken(stage, fmt::format("node %{} uses %{} before it is defined", i, v));
      metas.push_back(g.nodes[static_cast<size_t>(v)].meta);
      present[k] = true;
    }
    if (n.kind == NodeKind::op) {
      if (n.inputs.size() != expected_arity(n)) {
        broken(stage, fmt::format("node %{} ({}) has {} inputs, the op takes {}", i, op_name(n.op),
                                  n.inputs.size(), expected_arity(n)));
      }
      TensorMeta expected;
      try {
        expected = compute_meta(n.op, metas, std::span<const bool>(present, n.inputs.size()), n.attrs);
      } catch (const Error& e) {
        broken(stage, fmt::format("node %{} ({}) is ill-typed: {}", i, op_name(n.op), e.what()));
      }
      if (!(expected.shape == n.meta.shape) || expected.dtype != n.meta.dtype) {
        broken(stage, fmt::format("node %{} ({}) claims {} but its inputs give {}", i, op_name(n.op),
                                  meta_text(n.meta), meta_text(expected)));
      }
      continue;
    }
    // A fused group.
    if (is_body) broken(stage, fmt::format("node %{} nests a fused group inside a fused group", i));
    if (!n.body || n.fusion == FusionKind::none)
      broken(stage, fmt::format("fused node %{} has no body or kind", i));
    const Graph& body = *n.body;
    verify_graph(body, stage, VerifyOptions{}, true);
    if (body.input_count() != static_cast<int>(n.inputs.size())) {
      broken(stage, fmt::format("fused node %{} has {} inputs but its body takes {}", i, n.inputs.size(),
                                body.input_count()));
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const TensorMeta& inner = body.nodes[k].meta;
      if (!(inner.shape == metas[k].shape) || inner.dtype != metas[k].dtype) {
        broken(stage, fmt::format("fused node %{}: input {} is {} but the body expects {}", i, k,
                                  meta_text(metas[k]), meta_text(inner)));
      }
    }
    if (body.outputs.size() != 1)
      broken(stage, fmt::format("fused node %{} must have exactly one output", i));
    const TensorMeta& out = body.nodes[static_cast<size_t>(body.outputs[0])].meta;
    if (!(out.shape == n.meta.shape) || out.dtype != n.meta.dtype) {
      broken(stage, fmt::format("fused node %{} claims {} but its body returns {}", i, meta_text(n.meta),
                                meta_text(out)));
    }
  }
  if (g.outputs.empty() && !is_body) broken(stage, "the graph has no outputs");
  for (int v : g.outputs) {
    if (v < 0 || v >= static_cast<int>(g.nodes.size()))
      broken(stage, fmt::format("output %{} is not defined", v));
  }
  if (options.allow_dead_nodes) return;
  const std::vector<int> uses = g.use_counts();
  for (int i = inputs; i < static_cast<int>(g.nodes.size()); ++i) {
    if (uses[static_cast<size_t>(i)] == 0)
      broken(stage, fmt::format("node %{} is computed but never used", i));
  }
}

}  // namespace

void verify(const Graph& graph, std::string_view stage, VerifyOptions options) {
  verify_graph(graph, stage, options, false);
}

// ---- dump ----

std::string format_attrs(OpId op, const OpAttrs& a) {
  switch (op) {
    case OpId::sum:
    case OpId::mean:
    case OpId::amax:
      return fmt::format(" {{dims={}, keepdim={}}}", a.dims, a.keepdim);
    case OpId::argmax:
      return fmt::format(" {{dim={}, keepdim={}}}", a.dim, a.keepdim);
    case OpId::topk:  // a graph break's op (the graph holds none)
      return fmt::format(" {{k={}, dim={}, largest={}, sorted={}}}", a.k, a.dim, a.largest, a.sorted);
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::cumsum:
    case OpId::cat:
    case OpId::unsqueeze:
    case OpId::squeeze:
      return fmt::format(" {{dim={}}}", a.dim);
    case OpId::rms_norm:
    case OpId::layer_norm:
      return fmt::format(" {{eps={}}}", a.eps);
    case OpId::to_copy:
      return fmt::format(" {{dtype={}}}", dtype_name(a.dtype));
    case OpId::matmul:
    case OpId::linear:  // an unset out_dtype (the operands') prints nothing
      return a.out_dtype ? fmt::format(" {{out_dtype={}}}", dtype_name(*a.out_dtype)) : std::string();
    case OpId::scaled_dot_product_attention:
      return fmt::format(" {{scale={}, is_causal={}, enable_gqa={}}}", a.scalar, a.is_causal, a.enable_gqa);
    case OpId::fill:
      return fmt::format(" {{value={}}}", a.scalar);
    case OpId::view:
    case OpId::reshape:
    case OpId::expand:
      return fmt::format(" {{shape={}}}", a.dims);
    case OpId::permute:
      return fmt::format(" {{order={}}}", a.dims);
    case OpId::transpose:
      return fmt::format(" {{dim0={}, dim1={}}}", a.dim, a.dim1);
    case OpId::slice:
      return fmt::format(" {{dim={}, start={}, end={}, step={}}}", a.dim, a.start, a.end, a.step);
    case OpId::select:
      return fmt::format(" {{dim={}, index={}}}", a.dim, a.start);
    case OpId::gelu:  // the default (exact) form prints nothing
      return a.approximate == GeluApproximate::none
                 ? std::string()
                 : fmt::format(" {{approximate={}}}", gelu_approximate_name(a.approximate));
    default:
      return "";
  }
}

namespace {

std::string operand_list(const Node& n) {
  std::string text;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (k > 0) text += ", ";
    text += n.inputs[k] == kNoValue ? std::string("_") : fmt::format("%{}", n.inputs[k]);
  }
  if (n.kind == NodeKind::op &&
      (n.attrs.has_scalar && (op_is_binary_elementwise(n.op) || n.op == OpId::pow))) {
    text += fmt::format(", {}", n.attrs.scalar);
  }
  return text;
}

std::string layout_text(const Layout& layout) {
  if (!layout.chosen) return "";
  return fmt::format(" layout(p={}, f={})", layout.partition_dims, layout.free_dims);
}

void dump_into(const Graph& g, const std::string& indent, std::string& out) {
  std::string header;
  const int inputs = g.input_count();
  for (int i = 0; i < inputs; ++i) {
    if (i > 0) header += ", ";
    header += fmt::format("%{}: {}", i, meta_text(g.nodes[static_cast<size_t>(i)].meta));
  }
  out += fmt::format("{}graph({}) {{\n", indent, header);
  for (int i = inputs; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    const std::string name = n.kind == NodeKind::fused ? fmt::format("fused.{}", fusion_kind_name(n.fusion))
                                                       : std::string(op_name(n.op));
    const std::string attrs = n.kind == NodeKind::op ? format_attrs(n.op, n.attrs) : std::string();
    out += fmt::format("{}  %{}: {} = {}({}){}{}", indent, i, meta_text(n.meta), name, operand_list(n), attrs,
                       layout_text(n.layout));
    if (n.kind == NodeKind::fused) {
      out += " {\n";
      dump_into(*n.body, indent + "    ", out);
      out += fmt::format("{}  }}", indent);
    }
    out += "\n";
  }
  std::string results;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    if (k > 0) results += ", ";
    results += fmt::format("%{}", g.outputs[k]);
  }
  out += fmt::format("{}  return {}\n{}}}\n", indent, results, indent);
}

}  // namespace

std::string dump(const Graph& graph) {
  std::string out;
  dump_into(graph, "", out);
  return out;
}

}  // namespace sightline::compiler
