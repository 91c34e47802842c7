// Graph capture (torch's term; not the profiler's capture of a trace): run a function on proxy tensors
// and record the ops it performs as a Graph.
//
// Proxies live on the "capture" backend, registered through register_backend() like any other: its
// storage has no memory, and its kernel for every op records a node (op, inputs, attributes, the meta
// the dispatcher inferred) into the capturing thread's current graph. View ops never reach a kernel
// (the dispatcher applies them as metadata), so when a kernel meets a view of a recorded value it
// rebuilds the view as slice/permute/reshape/expand nodes from the proxy's shape, strides and offset,
// and checks that those nodes give exactly that view. Reading a proxy's value on the host (item(),
// printing, .to(cpu)) throws, naming the op that produced the value.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "compiler/graph.h"
#include "sightline/compile.h"

namespace sightline::compiler {

// Runs `fn` once on proxies with the metas of `inputs` and returns the recorded graph (dead nodes
// included). Constants the function creates (zeros, full, ...) are recorded for device `target`.
// Throws sightline::Error for what cannot be captured, with the reason and the fix, and for a graph
// break (an op the graph cannot hold), as compile(fullgraph=true) does.
Graph capture_graph(const TensorListFunction& fn, std::span<const TensorMeta> inputs, Device target);

// A function split at its graph breaks. Values are numbered over the whole function: the arguments
// first, then each recorded op's result, in the order the function produced them.
struct GraphStep {
  Graph graph;               // one graph of the function, as captured (dead nodes included)
  std::vector<int> inputs;   // the value bound to each of its input nodes
  std::vector<int> outputs;  // the value each of its outputs is
};
struct EagerStep {  // a graph break: an op run eagerly on real tensors
  OpId op = OpId::add;
  OpAttrs attrs;
  std::vector<int> inputs;   // values (kNoValue for an absent optional input)
  std::vector<int> outputs;  // one per output of the op
  GraphBreak info;
};
struct CapturedFunction {
  // Without graph breaks (the usual case): the whole function, as capture_graph returns it, and no steps.
  Graph graph;
  bool has_breaks = false;
  // With graph breaks: graphs and eager ops in the order they run; a graph with no op is left out.
  int value_count = 0;
  std::vector<int> arguments;  // the value of each argument
  std::vector<GraphStep> graphs;
  std::vector<EagerStep> eager;
  std::vector<std::pair<bool, int>> order;  // (eager?, index into graphs / eager), in running order
  std::vector<int> outputs;                 // the value of each result of the function
  int op_count = 0;                         // op nodes of the graphs as captured
  // The FLOPs of every op the function dispatched, graph breaks included, by the op table's rule
  // (op_cost: what the profiler's with_flops records for the same ops run eagerly).
  double flops = 0;
};
// capture_graph, except that with fullgraph = false an op the graph cannot hold is a graph break.
CapturedFunction capture_function(const TensorListFunction& fn, std::span<const TensorMeta> inputs, Device target,
                                  bool fullgraph);

// The device proxies report inside a captured function ("capture:0").
Device capture_device();

}  // namespace sightline::compiler
