// Each pass on small graphs, with the verifier run after every pass.
#include <gtest/gtest.h>

#include "compiler/capture.h"
#include "compiler/passes.h"
#include "compiler/rewrite.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

Graph capture_fn(const TensorListFunction& fn, std::vector<TensorMeta> metas) {
  return capture_graph(fn, metas, Device::cpu());
}

// The optimized graph, with the verifier run after every pass (optimize does) and the pass names seen.
Graph optimized(const Graph& g, std::vector<std::string>* passes = nullptr, const CompileOptions& options = {}) {
  return optimize(
      g,
      [&](std::string_view pass, const Graph& after) {
        verify(after, pass);
        if (passes) passes->emplace_back(pass);
      },
      options);
}

int count_ops(const Graph& g, OpId op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::op && node.op == op;
  return n;
}

TEST(Passes, PipelineRunsEveryPassInOrder) {
  const Graph g = capture_fn([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; },
                             {{{4}, DType::f32}});
  std::vector<std::string> seen;
  optimized(g, &seen);
  EXPECT_EQ(seen, (std::vector<std::string>{"dead_code", "fold_constants", "fuse_epilogues", "fuse_rows",
                                            "choose_layout"}));
  seen.clear();
  optimized(g, &seen, CompileOptions{.substitute_builtins = true});
  EXPECT_EQ(seen, (std::vector<std::string>{"dead_code", "fold_constants", "recognize_builtins",
                                            "fuse_epilogues", "fuse_rows", "choose_layout"}));
}

TEST(Passes, DeadCodeIsRemoved) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        (void)exp(in[0]);  // computed, never returned
        return std::vector<Tensor>{in[0] + in[0]};
      },
      {{{4}, DType::f32}});
  EXPECT_EQ(count_ops(g, OpId::exp), 1);
  const Graph clean = eliminate_dead_code(g);
  verify(clean, "dead_code");
  EXPECT_EQ(count_ops(clean, OpId::exp), 0);
}

TEST(Passes, ScalarIdentitiesAndChainsFold) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor& x = in[0];
        return std::vector<Tensor>{((x * 1.0 + 0.0) * 2.0 * 3.0 + 1.0 - 0.5) / 1.0, pow(x, 2.0), -(-x)};
      },
      {{{4, 8}, DType::f32}});
  const Graph folded = fold_constants(g);
  verify(folded, "fold_constants");
  EXPECT_EQ(dump(folded),
            "graph(%0: f32[4, 8]) {\n"
            "  %1: f32[4, 8] = aten::mul(%0, 6)\n"
            "  %2: f32[4, 8] = aten::add(%1, 0.5)\n"
            "  %3: f32[4, 8] = aten::mul(%0, %0)\n"
            "  return %2, %3, %0\n"
            "}\n");
}

TEST(Passes, FoldingNeverChangesADtype) {
  // i32 * 1.5 is f32: the `* 1` after it must not fold x into an i32 result.
  const Graph g =
      capture_fn([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] + 0.5) * 1.0}; },
                 {{{4}, DType::i32}});
  const Graph folded = fold_constants(g);
  verify(folded, "fold_constants");
  EXPECT_EQ(folded.nodes[static_cast<size_t>(folded.outputs[0])].meta.dtype, DType::f32);
  EXPECT_EQ(count_ops(folded, OpId::add), 1);
}

TEST(Passes, NaiveRmsNormStaysTheUsersOpsInOneRowGroup) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{testing::naive_rms_norm(in[0], in[1])};
      },
      {{{6, 130}, DType::f32}, {{130}, DType::f32}});
  EXPECT_EQ(dump(optimized(g)),
            "graph(%0: f32[6, 130], %1: f32[130]) {\n"
            "  %2: f32[6, 130] = fused.rows(%0, %1) layout(p=[0], f=[1]) {\n"
            "    graph(%0: f32[6, 130], %1: f32[130]) {\n"
            "      %2: f32[6, 130] = aten::mul(%0, %0)\n"
            "      %3: f32[6, 1] = aten::mean(%2) {dims=[-1], keepdim=true}\n"
            "      %4: f32[6, 1] = aten::add(%3, 1e-06)\n"
            "      %5: f32[6, 1] = aten::rsqrt(%4)\n"
            "      %6: f32[6, 130] = aten::mul(%0, %5)\n"
            "      %7: f32[6, 130] = aten::mul(%6, %1)\n"
            "      return %7\n"
            "    }\n"
            "  }\n"
            "  return %2\n"
            "}\n");
}

TEST(Passes, NaiveRmsNormBecomesTheBuiltinWhenSubstituting) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{testing::naive_rms_norm(in[0], in[1])};
      },
      {{{6, 130}, DType::f32}, {{130}, DType::f32}});
  const Graph out = optimized(g, nullptr, CompileOptions{.substitute_builtins = true});
  EXPECT_EQ(dump(out),
            "graph(%0: f32[6, 130], %1: f32[130]) {\n"
            "  %2: f32[6, 130] = aten::rms_norm(%0, %1) {eps=1e-06} layout(p=[0], f=[1])\n"
            "  return %2\n"
            "}\n");
}

// The naive layer_norm holds an RMSNorm of the centred x; the whole layer_norm is substituted (weight
// and bias absorbed), never the RMSNorm part with the mean, centring and affine steps left around it.
TEST(Passes, NaiveLayerNormBecomesTheWholeBuiltinWhenSubstituting) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Graph g = capture_fn(&testing::naive_layer_norm, {{{6, 130}, dtype}, {{130}, dtype}, {{130}, dtype}});
    const Graph out = optimized(g, nullptr, CompileOptions{.substitute_builtins = true});
    const std::string t(dtype_name(dtype));
    EXPECT_EQ(dump(out), "graph(%0: " + t + "[6, 130], %1: " + t + "[130], %2: " + t +
                             "[130]) {\n"
                             "  %3: " + t + "[6, 130] = aten::layer_norm(%0, %1, %2) {eps=1e-05} layout(p=[0], f=[1])\n"
                             "  return %3\n"
                             "}\n");
    EXPECT_EQ(count_ops(out, OpId::rms_norm), 0);
  }
  // Without the bias, the weight is still absorbed; without the centring, the RMSNorm rule stands.
  const Graph no_bias = capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor c = in[0] - mean(in[0], {-1}, true);
        return std::vector<Tensor>{c * rsqrt(mean(c * c, {-1}, true) + 1e-5) * in[1]};
      },
      {{{6, 130}, DType::f32}, {{130}, DType::f32}});
  const Graph ln = optimized(no_bias, nullptr, CompileOptions{.substitute_builtins = true});
  EXPECT_EQ(count_ops(ln, OpId::layer_norm), 1);
  EXPECT_EQ(count_ops(ln, OpId::rms_norm), 0);
  EXPECT_EQ(count_ops(ln, OpId::mul), 0);
  // x - mean over another dim is not a layer_norm: the RMSNorm of it stays.
  const Graph other_dim = capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor c = in[0] - mean(in[0], {0}, true);
        return std::vector<Tensor>{c * rsqrt(mean(c * c, {-1}, true) + 1e-5)};
      },
      {{{6, 130}, DType::f32}});
  const Graph rms = optimized(other_dim, nullptr, CompileOptions{.substitute_builtins = true});
  const std::string text = dump(rms);  // the RMSNorm sits in the row group with the centring
  EXPECT_NE(text.find("aten::rms_norm"), std::string::npos) << text;
  EXPECT_EQ(text.find("aten::layer_norm"), std::string::npos) << text;
}

TEST(Passes, ManualSoftmaxBecomesOneRowGroup) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor e = exp(in[0] - amax(in[0], {-1}, true));
        return std::vector<Tensor>{e / sum(e, {-1}, true)};
      },
      {{{3, 7, 20}, DType::f32}});
  const Graph out = optimized(g);
  ASSERT_EQ(out.nodes.size(), 2u) << dump(out);
  const Node& group = out.nodes[1];
  EXPECT_EQ(group.kind, NodeKind::fused);
  EXPECT_EQ(group.fusion, FusionKind::rows);
  EXPECT_EQ(group.body->nodes.size(), 6u);  // input, amax, sub, exp, sum, div
  EXPECT_EQ(group.layout.partition_dims, Dims({0, 1}));
  EXPECT_EQ(group.layout.free_dims, Dims({2}));
}

TEST(Passes, RowFusionKeepsValuesUsedOutsideTheGroup) {
  // `e` is returned as well, so it must stay a value of the outer graph.
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor e = exp(in[0]);
        return std::vector<Tensor>{e, e / sum(e, {-1}, true)};
      },
      {{{4, 8}, DType::f32}});
  const Graph out = optimized(g);
  EXPECT_EQ(out.nodes[static_cast<size_t>(out.outputs[0])].op, OpId::exp);
  EXPECT_EQ(out.nodes[static_cast<size_t>(out.outputs[1])].kind, NodeKind::fused);
}

TEST(Passes, MatmulEpilogueTakesBiasActivationAndResidual) {
  const Graph g = capture_fn(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{gelu(linear(in[0], in[1]) + in[2]) + in[0]};
      },
      {{{5, 16}, DType::f32}, {{16, 16}, DType::f32}, {{16}, DType::f32}});
  const Graph out = optimized(g);
  EXPECT_EQ(dump(out),
            "graph(%0: f32[5, 16], %1: f32[16, 16], %2: f32[16]) {\n"
            "  %3: f32[5, 16] = fused.matmul_epilogue(%0, %1, %2) layout(p=[0], f=[1]) {\n"
            "    graph(%0: f32[5, 16], %1: f32[16, 16], %2: f32[16]) {\n"
            "      %3: f32[5, 16] = aten::linear(%0, %1, _)\n"
            "      %4: f32[5, 16] = aten::add(%3, %2)\n"
            "      %5: f32[5, 16] = aten::gelu(%4)\n"
            "      %6: f32[5, 16] = aten::add(%5, %0)\n"
            "      return %6\n"
            "    }\n"
            "  }\n"
            "  return %3\n"
            "}\n");
}

// SwiGLU recorded in the order Python evaluates it (gate, silu, up, gate * up) and in the order C++
// compilers often do (up first). The join `gate * up` goes to the chain that reaches it last, and the
// other chain ends before it (this used to abort in outline_groups for the gate-first order, because
// the earlier chain kept the join as its root).
TEST(Passes, TwoMatmulChainsMeetingAtOneOpGoToTheLaterChain) {
  const std::vector<TensorMeta> metas = {{{4, 8}, DType::f32}, {{8, 8}, DType::f32}, {{8, 8}, DType::f32}};
  const Graph gate_first = optimized(capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor gate = silu(linear(in[0], in[1]));
        const Tensor up = linear(in[0], in[2]);
        return std::vector<Tensor>{gate * up};
      },
      metas));
  const Graph up_first = optimized(capture_fn(
      [](const std::vector<Tensor>& in) {
        const Tensor up = linear(in[0], in[2]);
        const Tensor gate = silu(linear(in[0], in[1]));
        return std::vector<Tensor>{gate * up};
      },
      metas));
  auto fused_count = [](const Graph& g) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.kind == NodeKind::fused;
    return n;
  };
  // Gate first: [linear, silu] and [linear, mul]. Up first: a plain linear and [linear, silu, mul].
  EXPECT_EQ(fused_count(gate_first), 2) << dump(gate_first);
  EXPECT_EQ(count_ops(gate_first, OpId::linear), 0) << dump(gate_first);
  EXPECT_EQ(fused_count(up_first), 1) << dump(up_first);
  EXPECT_EQ(count_ops(up_first, OpId::linear), 1) << dump(up_first);
}

TEST(Passes, ColumnReductionsPutTheKeptDimOnPartitions) {
  const Graph g =
      capture_fn([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0], {0})}; },
                 {{{300, 20}, DType::f32}});
  const Graph out = optimized(g);
  EXPECT_EQ(out.nodes[1].layout.partition_dims, Dims({1}));
  EXPECT_EQ(out.nodes[1].layout.free_dims, Dims({0}));
}

TEST(Passes, RuleTablesAreNamed) {
  EXPECT_GE(constant_folding_rules().size(), 5u);
  for (const RewriteRule& rule : builtin_recognition_rules()) EXPECT_FALSE(rule.name.empty());
}

}  // namespace
}  // namespace sightline::compiler
