// Graph breaks: an op the graph cannot hold (topk, two outputs) splits a compiled function into the graph
// before it, the op run eagerly, and the graph after it, as torch.compile does; explain() reports them,
// fullgraph makes the break an error with the same reason, and the results are the eager run's.
// count_flops() captures the same way, breaks included, and runs nothing.
#include <cstring>

#include <gtest/gtest.h>

#include "device_runs.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/compile.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"

namespace sightline {
namespace {

const Device kCore0 = Device::parse("neuron:0");

// mul, silu | topk | softmax, mean, mul, add: the second graph reads the topk values and a value of the
// first graph (h).
std::vector<Tensor> scores_then_topk(const std::vector<Tensor>& in) {
  const Tensor h = silu(in[0] * in[1]);
  const TopkResult top = topk(h, 4, -1);
  const Tensor y = softmax(top.values, -1) * mean(h, {-1}, true) + 1.0;
  return {y, top.indices};
}

std::vector<Tensor> args_on(const Device& device) {
  Generator g(7);
  return {randn({130, 96}, {}, &g).to(device), randn({96}, {}, &g).to(device)};
}

// Bit for bit: same shape, dtype and bytes.
void expect_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor a = got.to(Device::cpu()).contiguous(), b = want.to(Device::cpu()).contiguous();
  EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << what;
}

TEST(GraphBreak, TopkSplitsTheFunctionIntoTwoGraphsAndOneEagerOp) {
  const auto args = args_on(Device::cpu());
  const CompiledFunction compiled = compile(TensorListFunction(&scores_then_topk));
  const CompileReport report = compiled.explain(args);
  EXPECT_EQ(report.graph_count, 2);
  EXPECT_EQ(report.graph_break_count, 1);
  ASSERT_EQ(report.breaks.size(), 1u);
  EXPECT_EQ(report.breaks[0].op, "aten::topk");
  EXPECT_EQ(report.breaks[0].op_index, 2);  // after mul and silu
  EXPECT_EQ(report.breaks[0].graph, 1);     // one graph runs before it
  EXPECT_NE(report.breaks[0].reason.find("returns 2 tensors"), std::string::npos) << report.breaks[0].reason;
  EXPECT_NE(report.to_string().find("Graph Count: 2\nGraph Break Count: 1\n"), std::string::npos)
      << report.to_string();
  // The dump lists the graphs and the break in running order.
  const std::string dump = compiled.graph_dump(args);
  const size_t g0 = dump.find("# graph 0\n"), brk = dump.find("# graph break 0: aten::topk"),
               g1 = dump.find("# graph 1\n");
  ASSERT_NE(g0, std::string::npos) << dump;
  ASSERT_NE(brk, std::string::npos) << dump;
  ASSERT_NE(g1, std::string::npos) << dump;
  EXPECT_LT(g0, brk);
  EXPECT_LT(brk, g1);
  // On the cpu each graph is replayed with eager ops: the results are the eager run's, bit for bit.
  const auto got = compiled(args), want = scores_then_topk(args);
  ASSERT_EQ(got.size(), 2u);
  expect_identical(got[0], want[0], "values after the break");
  expect_identical(got[1], want[1], "topk indices");
  // explain() compiled the signature: both calls find it.
  (void)compiled(args);
  EXPECT_EQ(compiled.stats().compilations, 1);
  EXPECT_EQ(compiled.stats().cache_hits, 2);
}

TEST(GraphBreak, FullgraphFailsWithTheSameReason) {
  const auto args = args_on(Device::cpu());
  const CompileReport report = compile(TensorListFunction(&scores_then_topk)).explain(args);
  ASSERT_EQ(report.breaks.size(), 1u);
  CompileOptions options;
  options.fullgraph = true;
  const CompiledFunction strict = compile(TensorListFunction(&scores_then_topk), options);
  try {
    (void)strict(args);
    FAIL() << "fullgraph compiled a function with a graph break";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("graph break at aten::topk"), std::string::npos) << message;
    EXPECT_NE(message.find(report.breaks[0].reason), std::string::npos) << message;
  }
}

TEST(GraphBreak, NoBreakIsOneGraph) {
  const auto args = args_on(Device::cpu());
  const CompiledFunction compiled = compile([](const Tensor& x, const Tensor& w) { return silu(x * w); });
  const CompileReport report = compiled.explain(args);
  EXPECT_EQ(report.graph_count, 1);
  EXPECT_EQ(report.graph_break_count, 0);
  EXPECT_EQ(report.op_count, 2);
  EXPECT_TRUE(report.breaks.empty());
}

TEST(GraphBreak, BreakFirstAndLastMakesOnlyTheGraphsThatHaveOps) {
  // topk on an argument first: no graph before it; nothing after the last one but its outputs.
  const auto args = args_on(Device::cpu());
  const CompiledFunction compiled = compile(TensorListFunction([](const std::vector<Tensor>& in) {
    const TopkResult a = topk(in[0], 3, 0, /*largest=*/false);
    const TopkResult b = topk(exp(a.values), 2, -1);
    return std::vector<Tensor>{b.values, b.indices, a.indices};
  }));
  const CompileReport report = compiled.explain(args);
  EXPECT_EQ(report.graph_count, 1);  // exp
  EXPECT_EQ(report.graph_break_count, 2);
  const auto got = compiled(args);
  const TopkResult a = topk(args[0], 3, 0, false);
  const TopkResult b = topk(exp(a.values), 2, -1);
  expect_identical(got[0], b.values, "second topk values");
  expect_identical(got[1], b.indices, "second topk indices");
  expect_identical(got[2], a.indices, "first topk indices");
}

TEST(GraphBreak, OnNeuronTwoExecutablesAroundTheEagerTopk) {
  const auto args = args_on(kCore0);
  // Without the passes each graph runs its ops' own kernels in one executable: the eager bits.
  CompileOptions plain;
  plain.optimize = false;
  const CompiledFunction compiled = compile(TensorListFunction(&scores_then_topk), plain);
  std::vector<Tensor> got;
  const std::vector<int64_t> runs = compiler::testing::executions_of([&] { got = compiled(args); });
  // graph 0, topk, graph 1 (the host scalar of `+ 1.0` is folded into the graph's program).
  EXPECT_EQ(runs.size(), 3u);
  EXPECT_EQ(compiled.stats().device_calls, 1);
  EXPECT_EQ(compiled.stats().lowerings, 2);
  const auto want = scores_then_topk(args);
  expect_identical(got[0], want[0], "values after the break (neuron, optimize off)");
  expect_identical(got[1], want[1], "topk indices (neuron)");
  // With the passes the graphs fuse; the results stay within f32 rounding of the eager run.
  const CompiledFunction optimized = compile(TensorListFunction(&scores_then_topk));
  const auto fused = optimized(args);
  expect_identical(fused[1], want[1], "topk indices (neuron, optimized)");
  const Tensor diff = amax(abs(fused[0] - want[0]));
  EXPECT_LE(diff.to(Device::cpu()).item(), 1e-5);
}

TEST(GraphBreak, ProfileShowsTheBreakOnTheFrameworkLane) {
  const auto args = args_on(kCore0);
  const CompiledFunction compiled = compile(TensorListFunction(&scores_then_topk));
  (void)compiled(args);  // compiles outside the profiled window
  neuron::synchronize();
  auto config = std::make_shared<neuron::NeuronConfig>();
  config->modes = {neuron::ProfileMode::RUNTIME};
  profiler::ProfileOptions options;
  options.experimental_config = config;
  profiler::profile prof(options);
  prof.start();
  for (int call = 0; call < 2; ++call) (void)compiled(args);
  neuron::synchronize();
  prof.stop();
  int regions = 0, breaks = 0, topks = 0;
  const auto averages = prof.key_averages();
  for (const auto& row : averages.rows()) {
    if (row.key.starts_with("Torch-Compiled Region: ")) {
      ++regions;
      EXPECT_EQ(row.count, 2) << row.key;
      EXPECT_GT(row.device_time_total_ns, 0) << row.key;
    }
    if (row.key == "Graph Break: aten::topk") {
      ++breaks;
      EXPECT_EQ(row.count, 2);
    }
    if (row.key == "aten::topk") {
      ++topks;
      EXPECT_EQ(row.count, 2);  // one op event per call, for both outputs
      EXPECT_GT(row.self_device_time_total_ns, 0);
    }
  }
  EXPECT_EQ(regions, 2);  // one row per graph: the graph after the break is a frame of its own
  EXPECT_EQ(breaks, 1);
  EXPECT_EQ(topks, 1);
}

// count_flops: the op table's rule on each op, by hand: linear 2*M*N*K + M*N (its bias), relu and mul
// one per output element; the transpose is a view and costs nothing.
TEST(CountFlops, IsTheOpTablesRuleOnEveryOp) {
  Generator g(3);
  const std::vector<Tensor> args = {randn({6, 16}, {}, &g), randn({16, 10}, {}, &g), randn({10}, {}, &g)};
  const TensorListFunction fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{relu(linear(in[0], in[1].transpose(0, 1), in[2])) * 2.0};
  };
  EXPECT_EQ(count_flops(fn, args), 2.0 * 6 * 10 * 16 + 60 + 60 + 60);
}

// The count is the profiler's with_flops count of the same call run eagerly, graph break (topk)
// included, and counting simulates nothing on the device.
TEST(CountFlops, EqualsTheProfilersCountOfAnEagerCallAndRunsNothing) {
  const auto args = args_on(kCore0);
  neuron::synchronize();
  const int64_t simulated = neuron::simulation_wall_ns();
  const double counted = count_flops(TensorListFunction(&scores_then_topk), args);
  EXPECT_EQ(neuron::simulation_wall_ns(), simulated);
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU};
  options.with_flops = true;
  profiler::profile prof(options);
  prof.start();
  (void)scores_then_topk(args);
  neuron::synchronize();
  prof.stop();
  double profiled = 0;
  const auto averages = prof.key_averages();
  for (const auto& row : averages.rows()) {
    if (row.key.starts_with("aten::")) profiled += static_cast<double>(row.flops);
  }
  EXPECT_GT(counted, 0);
  EXPECT_EQ(counted, profiled);
}

TEST(CountFlops, AFunctionThatReadsAValueOnTheHostIsAnError) {
  const std::vector<Tensor> args = {ones({4})};
  const TensorListFunction fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] * sum(in[0]).item()};
  };
  try {
    (void)count_flops(fn, args);
    FAIL() << "count_flops ran a function that reads a value on the host";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("item()"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sightline
