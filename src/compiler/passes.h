// The optimization passes and the pipeline that runs them, verifying the graph after each one.
//
//   dead_code           drop nodes whose values reach no output
//   fold_constants      scalar identities and chains: x * 1, x + 0, (x * a) * b -> x * (a*b),
//                       pow(x, 2) -> x*x
//   recognize_builtins  (CompileOptions::substitute_builtins only) naive forms of built-in fused ops:
//                       the RMSNorm chain -> rms_norm, the layer_norm chain -> layer_norm (whole, not
//                       the RMSNorm of the centred x), x * sigmoid(x) -> silu; off by default, so the
//                       fusions below compile the user's own ops
//   autocast            (CompileOptions::autocast = matmul_bf16 only) f32 matmul/linear operands cast
//                       to bf16, the result widened back to f32 (autocast.cpp); before the fusions, so
//                       the matmul of every fused group the compiler emits reads bf16
//   fuse_epilogues      a matmul/linear and the elementwise ops on its result (bias, activation, residual),
//                       then on to the views of that result and the ops on them (a projection's heads:
//                       view, permute, slice, cat, neg, mul, add with cos / sin) up to one root
//   fuse_rows           elementwise ops and last-dim reductions over one row space -> one group on chip
//   choose_layout       which dims of each node map to the 128 partitions
//
// The first three are (pattern, replacement) tables applied by one rewrite engine (rewrite.h); the
// fusions partition the graph into groups and outline each group as a fused node (fusion.cpp).
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "compiler/graph.h"
#include "sightline/compile.h"

namespace sightline::compiler {

Graph eliminate_dead_code(const Graph& graph);
Graph fold_constants(const Graph& graph);
Graph recognize_builtins(const Graph& graph);
Graph autocast_matmuls(const Graph& graph);
Graph fuse_matmul_epilogues(const Graph& graph);
Graph fuse_rows(const Graph& graph);
Graph choose_layout(const Graph& graph);

struct Pass {
  std::string_view name;
  Graph (*run)(const Graph&);
};
// The passes compile() can run, in order: every pass of the list above (the pipeline for
// substitute_builtins = true, autocast = none).
std::span<const Pass> default_pipeline();

// Runs the pipeline `options` ask for (options.optimize is the caller's), verifying after every pass (a
// broken invariant throws, naming the pass); `after_pass` sees each intermediate graph (tests dump
// them). recognize_builtins runs only with options.substitute_builtins; with Autocast::matmul_bf16 the
// autocast pass runs where recognize_builtins does, after it.
using PassObserver = std::function<void(std::string_view pass, const Graph& graph)>;
Graph optimize(Graph graph, const PassObserver& after_pass = {}, const CompileOptions& options = {});

}  // namespace sightline::compiler
