// compile(): compiled results equal eager results, guards pick and count programs, errors are clear.
#include <gtest/gtest.h>

#include "programs.h"

namespace sightline {
namespace {

using compiler::testing::expect_close;

TEST(Compile, RmsNormMatchesEagerOnSeveralShapes) {
  auto compiled = compile(&compiler::testing::naive_rms_norm);
  Generator g(11);
  for (const Dims& shape : {Dims{4, 64}, Dims{130, 200}, Dims{3, 5, 7}, Dims{1, 128}}) {
    const Tensor x = randn(shape, {}, &g), w = rand({shape.back()}, {}, &g);
    expect_close(compiled(x, w), compiler::testing::naive_rms_norm(x, w));
  }
  EXPECT_EQ(compiled.stats().compilations, 4);
}

TEST(Compile, DecoderBlockMatchesEager) {
  auto compiled = compile(&compiler::testing::decoder_block);
  Generator g(12);
  for (const int64_t seq : {5, 129}) {
    compiler::testing::DecoderDims dims;
    dims.seq = seq;
    const std::vector<Tensor> args = compiler::testing::decoder_args(dims, g);
    expect_close(compiled(args)[0], compiler::testing::decoder_block(args)[0], 1e-4, 1e-3);
  }
}

// SwiGLU with the gate recorded first (Python's left-to-right order) compiles and matches eager.
TEST(Compile, SwiGluInEitherRecordingOrderMatchesEager) {
  auto swiglu = [](const Tensor& x, const Tensor& wg, const Tensor& wu) {
    const Tensor gate = silu(linear(x, wg));
    const Tensor up = linear(x, wu);
    return gate * up;
  };
  auto compiled = compile(swiglu);
  Generator g(4);
  const Tensor x = randn({6, 16}, {}, &g), wg = randn({24, 16}, {}, &g), wu = randn({24, 16}, {}, &g);
  expect_close(compiled(x, wg, wu), swiglu(x, wg, wu), 1e-4, 1e-3);
}

TEST(Compile, ViewsAndBroadcastingInsideTheFunction) {
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return std::vector<Tensor>{
        matmul(x.transpose(0, 1), x),                                   // transposed operand
        exp(x.reshape({x.size(0), 2, x.size(1) / 2}).transpose(0, 1)),  // split then transpose
        x.slice(1, 1, x.size(1), 3) * in[1].slice(0, 1, x.size(1), 3),  // stepped slices, broadcast
        x.slice(0, 2, 3).expand({3, x.size(0), x.size(1)}) + x,         // explicit expand
        x.transpose(0, 1),                                              // a view as the result
    };
  };
  auto compiled = compile(fn);
  Generator g(13);
  for (const Dims& shape : {Dims{4, 8}, Dims{130, 10}}) {
    const std::vector<Tensor> args = {randn(shape, {}, &g), randn({shape[1]}, {}, &g)};
    const std::vector<Tensor> expected = fn(args), actual = compiled(args);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i]);
  }
}

TEST(Compile, NonContiguousArgumentsAndBf16) {
  auto compiled = compile([](const Tensor& x) { return softmax(x * 2.0 * 0.5, -1) + 1.0; });
  Generator g(14);
  const Tensor base = randn({7, 300}, {}, &g);
  const Tensor x = base.transpose(0, 1);  // non-contiguous argument
  expect_close(compiled(x), softmax(x, -1) + 1.0);
  const Tensor h = randn({5, 33}, DType::bf16, &g);
  expect_close(compiled(h), softmax(h * 2.0 * 0.5, -1) + 1.0, 2e-2, 2e-2);
}

TEST(Compile, GuardsHitAndMiss) {
  int traces = 0;
  auto compiled = compile([&](const Tensor& x) {
    ++traces;
    return x.size(0) > 4 ? exp(x) : x * 3.0;  // control flow on shapes is guarded
  });
  const Tensor small = ones({2, 3}), big = ones({8, 3});
  expect_close(compiled(small), small * 3.0);
  expect_close(compiled(ones({2, 3})), small * 3.0);
  expect_close(compiled(big), exp(big));
  expect_close(compiled(small.to(DType::bf16)), small * 3.0);
  expect_close(compiled(big), exp(big));
  const CompileStats stats = compiled.stats();
  EXPECT_EQ(stats.compilations, 3);
  EXPECT_EQ(traces, 3);
  EXPECT_EQ(stats.calls, 5);
  EXPECT_EQ(stats.cache_hits, 2);
}

TEST(Compile, UnoptimizedProgramsGiveTheSameResult) {
  Generator g(15);
  const std::vector<Tensor> args = compiler::testing::decoder_args({}, g);
  auto plain = compile(&compiler::testing::decoder_block, CompileOptions{.optimize = false});
  auto fused = compile(&compiler::testing::decoder_block);
  expect_close(plain(args)[0], fused(args)[0], 1e-4, 1e-3);
  EXPECT_EQ(plain.graph_dump(args).find("fused."), std::string::npos);
  EXPECT_NE(fused.graph_dump(args).find("fused.matmul_epilogue"), std::string::npos);
}

TEST(Compile, CaptureErrorsReachTheCaller) {
  auto compiled = compile([](const Tensor& x) { return mean(x).item() > 0 ? x : -x; });
  try {
    (void)compiled(ones({4}));
    FAIL() << "a data-dependent branch was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aten::mean"), std::string::npos) << e.what();
  }
  EXPECT_EQ(compiled.stats().compilations, 0);
}

TEST(Compile, ArgumentErrors) {
  auto one = compile([](const Tensor& x) { return exp(x); });
  EXPECT_THROW((void)one(std::vector<Tensor>{ones({2}), ones({2})}), Error);
  EXPECT_THROW((void)one(Tensor()), Error);
  auto pair = compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0], exp(in[0])}; });
  EXPECT_THROW((void)pair(ones({2})), Error);  // two results through the one-tensor call
  EXPECT_EQ(pair(std::vector<Tensor>{ones({2})}).size(), 2u);
}

}  // namespace
}  // namespace sightline
