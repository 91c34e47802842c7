// The portable way to run a graph: replay it with eager ops on the inputs' backend.
//
// This is how a compiled function runs until a device lowering exists for its backend, and the
// documented fallback afterwards: every node is dispatched as the op it names (a fused group replays
// its body), so the result is the eager result of the optimized graph, on any backend.
#pragma once

#include <span>
#include <vector>

#include "compiler/graph.h"

namespace sightline::compiler {

// Runs `graph` on `inputs` (one per input node, with the metas the graph was captured for).
std::vector<Tensor> run_eager(const Graph& graph, std::span<const Tensor> inputs);

}  // namespace sightline::compiler
