// The rewrite engine: (pattern, replacement) rules applied to each node, in topological order, until
// none applies.
//
// A rule names the op it matches and a function that inspects the node (whose inputs are already
// rewritten, so patterns see the rewritten producers) and returns a replacement: an existing value
// (the node is an identity) or a new node (it may add helper nodes first through the context). The
// engine keeps only replacements with exactly the original meta, so a rule cannot change a result's
// shape or dtype, and the graph it returns still contains the dead leftovers (run dead_code after).
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "compiler/graph.h"

namespace sightline::compiler {

struct RewriteContext {
  Graph& graph;  // the graph being built; inputs of the node under rewrite index into it
  const Node& producer(int value) const { return graph.nodes[static_cast<size_t>(value)]; }
  bool is_op(int value, OpId op) const {
    return value != kNoValue && producer(value).kind == NodeKind::op && producer(value).op == op;
  }
};

struct Replacement {
  int alias = kNoValue;      // the node computes this existing value
  std::optional<Node> node;  // or this node instead
  static Replacement value(int v) { return {v, std::nullopt}; }
  static Replacement with(Node n) { return {kNoValue, std::move(n)}; }
};

struct RewriteRule {
  std::string_view name;
  OpId op;
  std::optional<Replacement> (*apply)(RewriteContext& ctx, const Node& node);
};

Graph apply_rewrites(const Graph& graph, std::span<const RewriteRule> rules);

// The tables the passes use (exposed for tests that apply one table alone).
std::span<const RewriteRule> constant_folding_rules();
std::span<const RewriteRule> builtin_recognition_rules();

}  // namespace sightline::compiler
