// The compiler's graph IR: a list of nodes in topological order, where a value is the index of the node
// that produces it.
//
//   graph(%0: f32[8, 64], %1: f32[64]) {
//     %2: f32[8, 64] = aten::mul(%0, %0)
//     %3: f32[8, 1] = aten::mean(%2) {dims=[-1], keepdim=true}
//     ...
//     return %7
//   }
//
// A node is a graph input, one op of the op table (op, input values, attributes, output meta), or a
// fused group: a node whose body is a graph of its own, run as one unit (the lowering turns it into one
// device executable; the eager fallback replays its body). Invariants, checked by verify(): inputs come
// first; every value is defined before it is used; every op node's meta is what infer_meta (or the view
// rules) computes from its inputs; fused bodies have one output whose meta is the node's; every node
// reaches an output (unless the caller allows dead nodes, as in a freshly captured graph).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "sightline/ops.h"

namespace sightline::compiler {

inline constexpr int kNoValue = -1;  // an absent optional input (linear's bias, rms_norm's weight)

enum class NodeKind : uint8_t { input, op, fused };

// Why a fused group exists; it decides how the group is lowered.
enum class FusionKind : uint8_t {
  none,
  rows,             // elementwise ops and last-dim reductions over one row space, kept on chip
  matmul_epilogue,  // a matmul/linear and the elementwise ops on its result (bias, activation, residual)
};
std::string_view fusion_kind_name(FusionKind kind);

// Which dims of a node's iteration space map to the 128 partitions (flattened, tiled by 128) and which
// run along the free axis of each partition. Empty until the layout pass runs.
struct Layout {
  Dims partition_dims;
  Dims free_dims;
  bool chosen = false;
};

struct Graph;

struct Node {
  NodeKind kind = NodeKind::op;
  OpId op = OpId::add;                   // kind == op
  std::vector<int> inputs;               // value ids (node indices), kNoValue for an absent optional input
  OpAttrs attrs;                         // kind == op
  TensorMeta meta;                       // the output
  int input_index = -1;                  // kind == input: the position in the caller's argument list
  FusionKind fusion = FusionKind::none;  // kind == fused
  std::shared_ptr<const Graph> body;     // kind == fused: inputs map to `inputs`, one output
  Layout layout;
};

struct Graph {
  std::vector<Node> nodes;  // topological order; input nodes first
  std::vector<int> outputs;

  int input_count() const;
  int add(Node node);  // appends and returns the new value id
  // For each value, how many times it is used: by node inputs and by the graph outputs.
  std::vector<int> use_counts() const;
  // For each value, the nodes that use it (a node appears once per use).
  std::vector<std::vector<int>> users() const;
};

// The nodes `order` names, in that order (each after the nodes it reads), with every value id and the
// outputs renumbered to the new positions: a reordering, or a subset that every output and every kept
// node's inputs are in.
Graph renumbered(const Graph& graph, std::span<const size_t> order);

Node make_input_node(int index, const TensorMeta& meta);
// An op node whose meta is computed from the metas of its inputs in `graph` (throws as the op would).
Node make_op_node(const Graph& graph, OpId op, std::vector<int> inputs, const OpAttrs& attrs);
// The meta an op node produces from these input metas, by the op table's rules (views included).
TensorMeta compute_meta(OpId op, std::span<const TensorMeta> input_metas, std::span<const bool> present,
                        const OpAttrs& attrs);

// A tensor that carries only metadata (no memory), for shape rules; never pass it to a kernel.
Tensor meta_tensor(const TensorMeta& meta);

struct VerifyOptions {
  bool allow_dead_nodes = false;  // a freshly captured graph may compute values nobody returns
};
// Throws sightline::Error naming the broken invariant, the node and `stage` (the pass that ran last).
void verify(const Graph& graph, std::string_view stage, VerifyOptions options = {});

// The stable text form (golden files compare it byte for byte): one node per line, bodies indented.
std::string dump(const Graph& graph);
// The attributes an op reads, as " {name=value, ...}" (empty when it reads none); scalars of
// tensor-scalar ops print as operands instead.
std::string format_attrs(OpId op, const OpAttrs& attrs);

}  // namespace sightline::compiler
