// Capture: proxies record ops, views are rebuilt exactly, and what cannot be captured is an error.
#include <gtest/gtest.h>

#include "compiler/capture.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

Graph capture_unary(const std::function<Tensor(const Tensor&)>& fn, const TensorMeta& meta) {
  const TensorMeta metas[] = {meta};
  return capture_graph([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, metas,
                 Device::cpu());
}

std::string capture_error(const std::function<Tensor(const Tensor&)>& fn) {
  try {
    capture_unary(fn, {{4, 8}, DType::f32});
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Capture, RecordsOpsWithoutComputing) {
  const TensorMeta metas[] = {{{4, 8}, DType::f32}, {{8}, DType::f32}};
  const Graph g = capture_graph(
      [](const std::vector<Tensor>& in) {
        EXPECT_EQ(in[0].device(), capture_device());
        return std::vector<Tensor>{testing::naive_rms_norm(in[0], in[1])};
      },
      metas, Device::cpu());
  verify(g, "capture", VerifyOptions{.allow_dead_nodes = true});
  EXPECT_EQ(dump(g),
            "graph(%0: f32[4, 8], %1: f32[8]) {\n"
            "  %2: f32[4, 8] = aten::mul(%0, %0)\n"
            "  %3: f32[4, 1] = aten::mean(%2) {dims=[-1], keepdim=true}\n"
            "  %4: f32[4, 1] = aten::add(%3, 1e-06)\n"
            "  %5: f32[4, 1] = aten::rsqrt(%4)\n"
            "  %6: f32[4, 8] = aten::mul(%0, %5)\n"
            "  %7: f32[4, 8] = aten::mul(%6, %1)\n"
            "  return %7\n"
            "}\n");
}

TEST(Capture, RebuildsTransposeAsAViewNode) {
  const Graph g = capture_unary([](const Tensor& x) { return exp(x.transpose(0, 1)); }, {{4, 8}, DType::f32});
  verify(g, "capture");
  EXPECT_EQ(dump(g),
            "graph(%0: f32[4, 8]) {\n"
            "  %1: f32[8, 4] = aten::permute(%0) {order=[1, 0]}\n"
            "  %2: f32[8, 4] = aten::exp(%1)\n"
            "  return %2\n"
            "}\n");
}

TEST(Capture, RebuildsSplitHeadsTransposeSliceAndExpand) {
  const TensorMeta metas[] = {{{4, 8}, DType::f32}};
  const Graph g = capture_graph(
      [](const std::vector<Tensor>& in) {
        const Tensor& x = in[0];
        return std::vector<Tensor>{exp(x.reshape({4, 2, 4}).transpose(0, 1)),  // split then transpose
                                   exp(x.slice(1, 1, 8, 3).unsqueeze(0)),      // stepped slice, unit dim
                                   exp(x.slice(0, 2, 3).expand({3, 4, 8}))};   // offset and broadcast
      },
      metas, Device::cpu());
  verify(g, "capture");
  EXPECT_EQ(dump(g),
            "graph(%0: f32[4, 8]) {\n"
            "  %1: f32[4, 2, 4] = aten::reshape(%0) {shape=[4, 2, 4]}\n"
            "  %2: f32[2, 4, 4] = aten::permute(%1) {order=[1, 0, 2]}\n"
            "  %3: f32[2, 4, 4] = aten::exp(%2)\n"
            "  %4: f32[4, 3] = aten::slice(%0) {dim=1, start=1, end=8, step=3}\n"
            "  %5: f32[1, 4, 3] = aten::reshape(%4) {shape=[1, 4, 3]}\n"
            "  %6: f32[1, 4, 3] = aten::exp(%5)\n"
            "  %7: f32[1, 8] = aten::slice(%0) {dim=0, start=2, end=3, step=1}\n"
            "  %8: f32[1, 1, 8] = aten::reshape(%7) {shape=[1, 1, 8]}\n"
            "  %9: f32[3, 4, 8] = aten::expand(%8) {shape=[3, 4, 8]}\n"
            "  %10: f32[3, 4, 8] = aten::exp(%9)\n"
            "  return %3, %6, %10\n"
            "}\n");
}

// Llama's repeat_kv(k).transpose(2, 3): a transposed view of a reshape that merges two dims of the
// copied value ([1, 2, 2, 16, 64] seen as [1, 4, 64, 16]).
TEST(Capture, RebuildsATransposeOfMergedDims) {
  const TensorMeta metas[] = {{{1, 2, 16, 64}, DType::f32}};
  const Graph g = capture_graph(
      [](const std::vector<Tensor>& in) {
        const Tensor repeated = in[0].unsqueeze(2).expand({1, 2, 2, 16, 64}).reshape({1, 4, 16, 64});
        return std::vector<Tensor>{exp(repeated.transpose(2, 3))};
      },
      metas, Device::cpu());
  verify(g, "capture");
  EXPECT_EQ(dump(g),
            "graph(%0: f32[1, 2, 16, 64]) {\n"
            "  %1: f32[2, 16, 64] = aten::reshape(%0) {shape=[2, 16, 64]}\n"
            "  %2: f32[1, 2, 1, 16, 64] = aten::reshape(%1) {shape=[1, 2, 1, 16, 64]}\n"
            "  %3: f32[1, 2, 2, 16, 64] = aten::expand(%2) {shape=[1, 2, 2, 16, 64]}\n"
            "  %4: f32[1, 2, 2, 16, 64] = aten::contiguous(%3)\n"
            "  %5: f32[4, 16, 64] = aten::reshape(%4) {shape=[4, 16, 64]}\n"
            "  %6: f32[4, 64, 16] = aten::permute(%5) {order=[0, 2, 1]}\n"
            "  %7: f32[1, 4, 64, 16] = aten::reshape(%6) {shape=[1, 4, 64, 16]}\n"
            "  %8: f32[1, 4, 64, 16] = aten::exp(%7)\n"
            "  return %8\n"
            "}\n");
}

TEST(Capture, ReadingAValueOnTheHostNamesTheOp) {
  const std::string item_error = capture_error([](const Tensor& x) {
    const Tensor m = mean(x);
    if (m.item() > 0) return x * 2.0;
    return x;
  });
  EXPECT_NE(item_error.find("inside compile()"), std::string::npos) << item_error;
  EXPECT_NE(item_error.find("aten::mean"), std::string::npos) << item_error;
  EXPECT_NE(item_error.find("move it outside the compiled function"), std::string::npos) << item_error;
  const std::string print_error = capture_error([](const Tensor& x) {
    const Tensor y = exp(x);
    (void)y.to_string();
    return y;
  });
  EXPECT_NE(print_error.find("aten::exp"), std::string::npos) << print_error;
}

TEST(Capture, ClosureTensorsAndHostDataAreErrors) {
  const Tensor w = ones({8});
  const std::string closure = capture_error([&](const Tensor& x) { return x * w; });
  EXPECT_NE(closure.find("must be its arguments"), std::string::npos) << closure;
  const std::string host = capture_error([](const Tensor& x) { return x + randn({4, 8}, x.device()); });
  EXPECT_NE(host.find("pass it as an argument"), std::string::npos) << host;
  const std::string returned = capture_error([&](const Tensor&) { return w; });
  EXPECT_NE(returned.find("not computed from the function's arguments"), std::string::npos) << returned;
}

TEST(Capture, ConstantsAreMadeOnTheTargetDevice) {
  const Graph g =
      capture_unary([](const Tensor& x) { return x + ones({8}, x.device()); }, {{4, 8}, DType::f32});
  ASSERT_EQ(g.nodes[1].op, OpId::fill);
  EXPECT_EQ(g.nodes[1].attrs.device, Device::cpu());
}

TEST(Capture, ProxiesUsedAfterCaptureAreAnError) {
  Tensor leaked;
  capture_unary(
      [&](const Tensor& x) {
        leaked = x;
        return exp(x);
      },
      {{4, 8}, DType::f32});
  try {
    (void)exp(leaked);
    FAIL() << "a leaked proxy ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the function being compiled"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sightline::compiler
