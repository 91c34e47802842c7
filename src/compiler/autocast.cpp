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

// Each f32 matmul / linear becomes
//   to_copy(matmul(to_copy(a, bf16), to_copy(b, bf16)), f32)        (linear: + bias, in f32)
// The products accumulate in f32 (PSUM on the device, an f32 sum on the CPU), the sum is rounded to
// bf16 as the matmul writes its result and widened back, so every value outside a matmul keeps its
// f32 dtype. A value feeding several matmuls (a weight, the normalized activation read by q, k and v)
// is cast once; a matmul reading (views of) another autocast matmul's result reads its bf16 result.
Graph autocast_matmuls(const Graph& graph) {
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
    const bool f32_matmul =
        n.kind == NodeKind::op && (n.op == OpId::matmul || n.op == OpId::linear) && n.meta.dtype == DType::f32;
    if (!f32_matmul) {
      remap[i] = out.add(std::move(n));
      continue;
    }
    std::vector<int> operands = {low(n.inputs[0]), low(n.inputs[1])};
    if (n.op == OpId::linear) operands.push_back(kNoValue);
    const int product = out.add(make_op_node(out, n.op, std::move(operands), n.attrs));
    int value = out.add(cast_node(out, product, DType::f32));
    if (n.op == OpId::linear && n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      value = out.add(make_op_node(out, OpId::add, {value, n.inputs[2]}, {}));
    }
    remap[i] = value;
  }
  for (int v : graph.outputs) out.outputs.push_back(remap[static_cast<size_t>(v)]);
  return eliminate_dead_code(out);  // the f32 copies that only fed matmuls
}

}  // namespace sightline::compiler
