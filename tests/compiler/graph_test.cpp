// The IR's verifier and dump.
#include <gtest/gtest.h>

#include "compiler/graph.h"

namespace sightline::compiler {
namespace {

Graph two_input_mul() {
  Graph g;
  g.add(make_input_node(0, {{4, 8}, DType::f32}));
  g.add(make_input_node(1, {{8}, DType::f32}));
  const int product = g.add(make_op_node(g, OpId::mul, {0, 1}, {}));
  g.outputs = {product};
  return g;
}

void expect_verify_error(const Graph& g, const std::string& fragment) {
  try {
    verify(g, "test");
    FAIL() << "verify accepted a broken graph";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GraphVerify, AcceptsAWellFormedGraph) { EXPECT_NO_THROW(verify(two_input_mul(), "test")); }

TEST(GraphVerify, RejectsUseBeforeDefinition) {
  Graph g = two_input_mul();
  g.nodes[2].inputs[1] = 2;
  expect_verify_error(g, "uses %2 before it is defined");
}

TEST(GraphVerify, RejectsAMetaThatDisagreesWithInferMeta) {
  Graph g = two_input_mul();
  g.nodes[2].meta.shape = {4, 9};
  expect_verify_error(g, "claims f32[4, 9] but its inputs give f32[4, 8]");
}

TEST(GraphVerify, RejectsDeadNodesUnlessAllowed) {
  Graph g = two_input_mul();
  g.add(make_op_node(g, OpId::exp, {0}, {}));
  expect_verify_error(g, "node %3 is computed but never used");
  EXPECT_NO_THROW(verify(g, "test", VerifyOptions{.allow_dead_nodes = true}));
}

TEST(GraphVerify, RejectsDanglingOutputsAndMissingInputs) {
  Graph g = two_input_mul();
  g.outputs = {7};
  expect_verify_error(g, "output %7 is not defined");
  Graph h = two_input_mul();
  h.nodes[2].inputs[1] = kNoValue;
  expect_verify_error(h, "lacks its required input 1");
}

TEST(GraphVerify, ChecksFusedBodiesAgainstTheirNode) {
  Graph g = two_input_mul();
  auto body = std::make_shared<Graph>(two_input_mul());
  Node fused;
  fused.kind = NodeKind::fused;
  fused.fusion = FusionKind::rows;
  fused.inputs = {0, 1};
  fused.meta = {{4, 8}, DType::bf16};
  fused.body = body;
  g.nodes[2] = fused;
  expect_verify_error(g, "claims bf16[4, 8] but its body returns f32[4, 8]");
}

TEST(GraphDump, PrintsOneNodePerLineWithAttributes) {
  Graph g = two_input_mul();
  OpAttrs attrs;
  attrs.dims = {-1};
  attrs.keepdim = true;
  const int m = g.add(make_op_node(g, OpId::mean, {2}, attrs));
  OpAttrs eps;
  eps.scalar = 1e-6;
  eps.has_scalar = true;
  g.outputs = {g.add(make_op_node(g, OpId::add, {m}, eps))};
  EXPECT_EQ(dump(g),
            "graph(%0: f32[4, 8], %1: f32[8]) {\n"
            "  %2: f32[4, 8] = aten::mul(%0, %1)\n"
            "  %3: f32[4, 1] = aten::mean(%2) {dims=[-1], keepdim=true}\n"
            "  %4: f32[4, 1] = aten::add(%3, 1e-06)\n"
            "  return %4\n"
            "}\n");
}

}  // namespace
}  // namespace sightline::compiler
