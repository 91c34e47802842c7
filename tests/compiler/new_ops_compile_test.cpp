// compile() of the ops issue #18 added (erf, gelu in both forms, sin, cos, rsub, comparisons) on a
// neuron core: the graph keeps each op as captured, the fused paths (matmul epilogue, row loop) and the
// op-by-op path all lower them, and the one execution matches the CPU reference.
#include <gtest/gtest.h>

#include "device_runs.h"
#include "programs.h"

namespace sightline {
namespace {

using compiler::testing::executions_of;
using compiler::testing::expect_close;

const Device kCore0 = Device::parse("neuron:0");

std::vector<Tensor> new_ops(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor& t = in[2];
  return {
      gelu(linear(x, w)),                             // matmul epilogue, exact gelu
      gelu(linear(x, w), "tanh") + x.slice(1, 0, 16),  // matmul epilogue, tanh gelu
      x * cos(t) + rsub(x, 2.0) * sin(t),             // one row loop: sin, cos, rsub with a scalar
      1.0 - erf(x),                                   // rsub of a scalar on the left
      rsub(x, t),                                     // rsub of two tensors: t - x
      lt(x, t),                                       // a comparison: bool, op by op in the program
      ge(exp(x), 0.25),                               // with a host scalar, after a row-fusable op
      where(gt(t, 0.0), x, 1.0 - x),                  // a select between two tensors
      masked_fill(x * 2.0, lt(t, 0.0), -1e4),         // the attention mask's fill
      chunk(x, 2, -1)[1] * t.select(1, 3).unsqueeze(1),  // views: a chunk and a selected column
  };
}

std::vector<Tensor> args_for(Generator& g) {
  return {randn({130, 32}, {}, &g), randn({16, 32}, {}, &g), randn({130, 32}, {}, &g)};
}

TEST(CompiledNewOps, GraphKeepsTheOpsAndTheirForms) {
  Generator g(31);
  auto compiled = compile(&new_ops);
  const std::string dump = compiled.graph_dump(args_for(g));
  EXPECT_NE(dump.find("aten::gelu("), std::string::npos) << dump;
  EXPECT_NE(dump.find("{approximate=tanh}"), std::string::npos) << dump;
  EXPECT_NE(dump.find("aten::rsub("), std::string::npos) << dump;
  EXPECT_NE(dump.find("aten::erf("), std::string::npos) << dump;
  EXPECT_NE(dump.find("aten::sin("), std::string::npos) << dump;
  EXPECT_NE(dump.find("aten::cos("), std::string::npos) << dump;
  EXPECT_NE(dump.find("bool[130, 32] = aten::lt("), std::string::npos) << dump;
  EXPECT_EQ(dump.find("aten::neg("), std::string::npos) << "1.0 - t is one aten::rsub, not neg + add\n" << dump;
}

TEST(CompiledNewOps, OneExecutionMatchesTheCpuReference) {
  Generator g(32);
  const std::vector<Tensor> host = args_for(g);
  const std::vector<Tensor> expected = new_ops(host);
  std::vector<Tensor> dev;
  for (const Tensor& t : host) dev.push_back(t.to(kCore0));
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimized" : "op by op");
    auto compiled = compile(&new_ops, CompileOptions{.optimize = optimize});
    std::vector<Tensor> actual;
    EXPECT_EQ(executions_of([&] { actual = compiled(dev); }).size(), 1u);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      SCOPED_TRACE(i);
      expect_close(actual[i], expected[i], 1e-4, 1e-4);
    }
  }
}

// Attention as the models call it: heads as transposed views of the projections, the fused op with a
// bool mask, causal with a scale, and grouped-query (one key/value head for two query heads).
std::vector<Tensor> attention_ops(const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &wq = in[1], &wk = in[2], &wv = in[3], &m = in[4];
  auto heads = [](const Tensor& t, int64_t h) { return t.view({1, 40, h, 16}).transpose(1, 2); };
  const Tensor q = heads(linear(x, wq), 2), k = heads(linear(x, wk), 2), v = heads(linear(x, wv), 2);
  const Tensor k1 = heads(linear(x, wk.slice(0, 0, 16)), 1), v1 = heads(linear(x, wv.slice(0, 16, 32)), 1);
  return {
      scaled_dot_product_attention(q, k, v, gt(m, 0.0)),
      scaled_dot_product_attention(q, k, v, {}, true, 0.3).transpose(1, 2).reshape({40, 32}) + x,
      scaled_dot_product_attention(q, k1, v1, m * 0.5, false, std::nullopt, true),
  };
}

std::vector<Tensor> attention_args(Generator& g) {
  return {randn({40, 32}, {}, &g), randn({32, 32}, {}, &g), randn({32, 32}, {}, &g), randn({32, 32}, {}, &g),
          randn({40, 40}, {}, &g)};
}

TEST(CompiledNewOps, AttentionIsOneFusedOpInTheProgram) {
  Generator g(33);
  const std::vector<Tensor> host = attention_args(g);
  auto compiled = compile(&attention_ops);
  const std::string dump = compiled.graph_dump(host);
  EXPECT_NE(dump.find("aten::scaled_dot_product_attention("), std::string::npos) << dump;
  EXPECT_NE(dump.find("is_causal=true"), std::string::npos) << dump;
  EXPECT_EQ(dump.find("aten::softmax("), std::string::npos) << dump;
  const std::vector<Tensor> expected = attention_ops(host);
  std::vector<Tensor> dev;
  for (const Tensor& t : host) dev.push_back(t.to(kCore0));
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimized" : "op by op");
    auto program = compile(&attention_ops, CompileOptions{.optimize = optimize});
    std::vector<Tensor> actual;
    EXPECT_EQ(executions_of([&] { actual = program(dev); }).size(), 1u);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      SCOPED_TRACE(i);
      expect_close(actual[i], expected[i], 1e-4, 1e-4);
    }
  }
}

// cumsum and argmax (the scan and index instructions) inside a compiled program, after a row-fusable op.
std::vector<Tensor> scan_ops(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  return {cumsum(x * 2.0, 1), argmax(exp(x), 1), cumsum(gt(x, 0.0), 0), argmax(x, 0, true)};
}

TEST(CompiledNewOps, CumsumAndArgmaxLowerIntoTheProgram) {
  Generator g(34);
  const std::vector<Tensor> host = {randn({130, 40}, {}, &g)};
  auto compiled = compile(&scan_ops);
  const std::string dump = compiled.graph_dump(host);
  EXPECT_NE(dump.find("aten::cumsum("), std::string::npos) << dump;
  EXPECT_NE(dump.find("i32[130] = aten::argmax("), std::string::npos) << dump;
  const std::vector<Tensor> expected = scan_ops(host);
  const std::vector<Tensor> dev = {host[0].to(kCore0)};
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimized" : "op by op");
    auto program = compile(&scan_ops, CompileOptions{.optimize = optimize});
    std::vector<Tensor> actual;
    EXPECT_EQ(executions_of([&] { actual = program(dev); }).size(), 1u);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      SCOPED_TRACE(i);
      expect_close(actual[i], expected[i], 1e-4, 1e-4);
    }
  }
}

}  // namespace
}  // namespace sightline
