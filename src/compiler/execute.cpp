#include "compiler/execute.h"

#include "sightline/backend.h"

namespace sightline::compiler {

std::vector<Tensor> run_eager(const Graph& graph, std::span<const Tensor> inputs) {
  SIGHTLINE_ASSERT_MSG(static_cast<int>(inputs.size()) == graph.input_count(), "{} inputs for a graph of {}",
                       inputs.size(), graph.input_count());
  // Each intermediate is released after its last use, so replay holds no more memory than eager code.
  std::vector<size_t> last_use(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (int v : graph.nodes[i].inputs) {
      if (v != kNoValue) last_use[static_cast<size_t>(v)] = i;
    }
  }
  for (int v : graph.outputs) last_use[static_cast<size_t>(v)] = graph.nodes.size();
  std::vector<Tensor> values(graph.nodes.size());
  std::vector<Tensor> operands;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.kind == NodeKind::input) {
      values[i] = inputs[static_cast<size_t>(n.input_index)];
      continue;
    }
    operands.clear();
    for (int v : n.inputs) operands.push_back(v == kNoValue ? Tensor() : values[static_cast<size_t>(v)]);
    if (n.kind == NodeKind::fused) {
      values[i] = run_eager(*n.body, operands).front();
    } else {
      values[i] = dispatch(n.op, operands, n.attrs);
    }
    for (int v : n.inputs) {
      if (v != kNoValue && last_use[static_cast<size_t>(v)] == i) values[static_cast<size_t>(v)] = Tensor();
    }
  }
  std::vector<Tensor> results;
  results.reserve(graph.outputs.size());
  for (int v : graph.outputs) results.push_back(values[static_cast<size_t>(v)]);
  return results;
}

}  // namespace sightline::compiler
