// A custom op as a user writes it (include/sightline/kernels.h, public headers only): the fused
// y = x * sigmoid(x) kernel runs on a neuron core, matches the CPU reference, is cached per input
// signature, shows in key_averages under its own name with its device time, and is refused with a
// clear error when the kernel and the call disagree.
#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sightline/kernels.h"
#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/sightline.h"

using namespace sightline;
using namespace sightline::kernels;
using ::testing::HasSubstr;

namespace {

void silu_kernel(KernelBuilder& b, std::span<const Tensor> in) {
  const int64_t rows = in[0].shape()[0];
  const auto cols = static_cast<uint32_t>(in[0].shape()[1]);
  const uint32_t x = b.input("x", DType::f32, {rows, cols});
  const uint32_t y = b.output("y", DType::f32, {rows, cols});
  TilePool xs = b.pool("x", DType::f32, cols, 3), ys = b.pool("y", DType::f32, cols, 3);
  for (int64_t r = 0; r < rows; r += b.partitions()) {
    const auto p = static_cast<uint16_t>(std::min<int64_t>(b.partitions(), rows - r));
    const Tile xt = xs.next(), yt = ys.next();
    b.load(xt.rows(p), hbm_rows(x, DType::f32, r * cols, p, cols, cols));
    b.activate(ActFunc::sigmoid, yt.rows(p), xt.rows(p));
    b.tensor_tensor(AluOp::multiply, yt.rows(p), yt.rows(p), xt.rows(p));
    b.store(hbm_rows(y, DType::f32, r * cols, p, cols, cols), yt.rows(p));
  }
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  float m = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) m = std::max(m, std::abs(ha.data<float>()[i] - hb.data<float>()[i]));
  return m;
}

}  // namespace

TEST(CustomOp, MatchesTheCpuReferenceAndIsCachedPerSignature) {
  const neuron::CustomOp silu("custom::silu", silu_kernel);
  const Device d = Device::parse("neuron:0");
  Generator g(3);
  const Tensor x = randn({300, 200}, {}, &g);
  const std::vector<Tensor> y = silu({x.to(d)});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].device(), d);
  EXPECT_EQ(y[0].shape(), (Dims{300, 200}));
  EXPECT_LT(max_abs_diff(y[0], x * sigmoid(x)), 1e-5f);
  EXPECT_EQ(silu.cache_size(), 1u);
  (void)silu({x.to(d)});
  EXPECT_EQ(silu.cache_size(), 1u);  // same signature: the executable is reused
  (void)silu({randn({64, 200}).to(d)});
  EXPECT_EQ(silu.cache_size(), 2u);
  // A non-contiguous input is made dense first, so the kernel still reads rows.
  const Tensor xt = randn({200, 300}, {}, &g);
  EXPECT_LT(max_abs_diff(silu({xt.to(d).transpose(0, 1)})[0], xt.transpose(0, 1) * sigmoid(xt.transpose(0, 1))), 1e-5f);
}

TEST(CustomOp, IsOneDeviceOpInKeyAveragesUnderItsName) {
  const neuron::CustomOp silu("custom::silu", silu_kernel);
  const Tensor x = randn({256, 128}).to(Device::parse("neuron:0"));
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
  profiler::profile prof(options);
  prof.start();
  (void)silu({x});
  (void)(x * sigmoid(x));  // the eager composition, for comparison
  neuron::synchronize();
  prof.stop();
  std::map<std::string, profiler::FunctionEventAvg> rows;
  const profiler::KeyAverages averages = prof.key_averages();
  for (const auto& row : averages.rows()) rows[row.key] = row;
  const std::string table = averages.table({.sort_by = "self_privateuse1_time_total", .row_limit = -1});
  ASSERT_TRUE(rows.count("custom::silu")) << table;
  EXPECT_EQ(rows["custom::silu"].count, 1);
  EXPECT_GT(rows["custom::silu"].self_device_time_total_ns, 0) << table;
  EXPECT_GT(rows["custom::silu"].self_cpu_time_total_ns, 0) << table;
  // One execution reads x once and writes y once: less device time than sigmoid then mul.
  const int64_t eager = rows["aten::sigmoid"].self_device_time_total_ns + rows["aten::mul"].self_device_time_total_ns;
  EXPECT_LT(rows["custom::silu"].self_device_time_total_ns, eager) << table;
  EXPECT_EQ(rows["nc_exec_running"].count, 3) << table;
}

TEST(CustomOp, DisagreementsBetweenKernelAndCallAreNamedErrors) {
  const Device d = Device::parse("neuron:0");
  const Tensor x = randn({128, 64}).to(d);
  const neuron::CustomOp wrong_shape("custom::wrong", [](KernelBuilder& b, std::span<const Tensor>) {
    b.input("x", DType::f32, {128, 32});
    b.output("y", DType::f32, {128, 32});
  });
  try {
    (void)wrong_shape({x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("custom::wrong: input 0 is f32[128, 64] but the kernel declared 'x' as f32[128, 32]"));
  }
  const neuron::CustomOp no_output("custom::sink", [](KernelBuilder& b, std::span<const Tensor> in) {
    b.input("x", DType::f32, {in[0].shape()[0], in[0].shape()[1]});
  });
  try {
    (void)no_output({x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("custom::sink: the kernel declares no output"));
  }
  const neuron::CustomOp silu("custom::silu", silu_kernel);
  try {
    (void)silu({randn({128, 64})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("custom::silu: input 0 is on cpu; every input must be on one neuron device"));
  }
}
