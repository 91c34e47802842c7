// The autocast pass: f32 matmuls run with bf16 operands and f32 accumulation, the rest stays f32.
#include <map>

#include "compiler/passes.h"

namespace sightline::compiler {
namespace {

Node cast_node(const Graph& graph, int value, DType dtype) {
  OpAttrs attrs;
  attrs.dtype = dtype;
  return make_op_node(graph, OpId::to_copy, {value}, attrs);
}

}  // namespace

// Each f32 matmul / linear becomes a matmul of bf16 casts of its operands that writes its f32 sum
// unrounded (OpAttrs::out_dtype = f32: the Tensor engine reads bf16, accumulates in f32 in PSUM and the
// kernel stores that f32), so no cast back is needed and the epilogues after it fuse with it:
//   matmul(to_copy(a, bf16), to_copy(b, bf16)) {out_dtype=f32}        (linear: + bias, in f32)
// A result read only by other matmuls (through views), as q, k and v are by the attention's matmuls,
// is written in bf16 instead: the consumers read it without a cast (rounding the f32 sum once, as a
// cast would). A value feeding several matmuls (a weight, the normalized activation read by q, k and
// v) is cast once.
Graph autocast_matmuls(const Graph& graph) {
  const std::vector<std::vector<int>> users = graph.users();
  std::vector<char> is_output(graph.nodes.size(), 0);
  for (int v : graph.outputs) is_output[static_cast<size_t>(v)] = 1;
  auto f32_matmul = [](const Node& n) {
    return n.kind == NodeKind::op && (n.op == OpId::matmul || n.op == OpId::linear) && n.meta.dtype == DType::f32;
  };
  // Whether value v of `graph` is read only as a matmul operand (not a bias), directly or through views.
  auto only_matmul_operand = [&](auto&& self, int v) -> bool {
    if (is_output[static_cast<size_t>(v)]) return false;
    for (int u : users[static_cast<size_t>(v)]) {
      const Node& n = graph.nodes[static_cast<size_t>(u)];
      if (n.kind == NodeKind::op && (op_info(n.op).is_view || n.op == OpId::contiguous)) {
        if (!self(self, u)) return false;
      } else if (!f32_matmul(n) || (n.inputs[0] != v && n.inputs[1] != v) ||
                 (n.inputs.size() > 2 && n.inputs[2] == v)) {
        return false;
      }
    }
    return true;
  };
  Graph out;
  std::vector<int> remap(graph.nodes.size(), kNoValue);
  std::map<int, int> bf16_of;  // value in `out` -> its bf16 cast
  auto low = [&](int value) {
    if (out.nodes[static_cast<size_t>(value)].meta.dtype == DType::bf16) return value;
    if (auto it = bf16_of.find(value); it != bf16_of.end()) return it->second;
    // Views (and contiguous copies) of a bf16 value widened to f32, as q, k and v are views of autocast
    // linears: the same views of the bf16 value, since widening and narrowing back is exact, instead of
    // a cast of the f32 copy.
    auto moves_only = [&](int v) {
      const Node& n = out.nodes[static_cast<size_t>(v)];
      return n.kind == NodeKind::op && (op_info(n.op).is_view || n.op == OpId::contiguous);
    };
    std::vector<int> views;
    int source = value;
    while (moves_only(source)) {
      views.push_back(source);
      source = out.nodes[static_cast<size_t>(source)].inputs[0];
    }
    const Node& widened = out.nodes[static_cast<size_t>(source)];
    int result = kNoValue;
    if (widened.kind == NodeKind::op && widened.op == OpId::to_copy &&
        out.nodes[static_cast<size_t>(widened.inputs[0])].meta.dtype == DType::bf16) {
      result = widened.inputs[0];
      for (auto it = views.rbegin(); it != views.rend(); ++it) {
        const Node view = out.nodes[static_cast<size_t>(*it)];
        result = out.add(make_op_node(out, view.op, {result}, view.attrs));
      }
    } else {
      result = out.add(cast_node(out, value, DType::bf16));
    }
    bf16_of.emplace(value, result);
    return result;
  };
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node n = graph.nodes[i];
    for (int& v : n.inputs) {
      if (v != kNoValue) v = remap[static_cast<size_t>(v)];
    }
    SIGHTLINE_ASSERT_MSG(n.kind != NodeKind::fused, "autocast runs before the fusions, got a fused node");
    if (!f32_matmul(n)) {
      remap[i] = out.add(std::move(n));
      continue;
    }
    std::vector<int> operands = {low(n.inputs[0]), low(n.inputs[1])};
    if (n.op == OpId::linear) operands.push_back(kNoValue);
    const bool bias = n.op == OpId::linear && n.inputs.size() > 2 && n.inputs[2] != kNoValue;
    int value = kNoValue;
    if (!bias && only_matmul_operand(only_matmul_operand, static_cast<int>(i))) {
      // bf16 for the matmuls that read it; the f32 widening is what low() recognizes (views included),
      // and it is dead once they do.
      OpAttrs attrs = n.attrs;
      attrs.out_dtype.reset();  // the operands' bf16
      const int product = out.add(make_op_node(out, n.op, std::move(operands), attrs));
      value = out.add(cast_node(out, product, DType::f32));
    } else {
      OpAttrs attrs = n.attrs;
      attrs.out_dtype = DType::f32;
      value = out.add(make_op_node(out, n.op, std::move(operands), attrs));
      if (bias) value = out.add(make_op_node(out, OpId::add, {value, n.inputs[2]}, {}));
    }
    remap[i] = value;
  }
  for (int v : graph.outputs) out.outputs.push_back(remap[static_cast<size_t>(v)]);
  return eliminate_dead_code(out);  // the f32 copies that only fed matmuls
}

}  // namespace sightline::compiler
