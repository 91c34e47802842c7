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
#include <vector>

#include "compiler/graph.h"
#include "sightline/compile.h"

namespace sightline::compiler {

// Runs `fn` once on proxies with the metas of `inputs` and returns the recorded graph (dead nodes
// included). Constants the function creates (zeros, full, ...) are recorded for device `target`.
// Throws sightline::Error for what cannot be captured, with the reason and the fix.
Graph capture_graph(const TensorListFunction& fn, std::span<const TensorMeta> inputs, Device target);

// The device proxies report inside a captured function ("capture:0").
Device capture_device();

}  // namespace sightline::compiler
