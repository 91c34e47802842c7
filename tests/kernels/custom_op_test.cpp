// A user-written kernel: fused y = x * sigmoid(x) built with the public kernel builder, run on a core.
#include <algorithm>

#include "kernel_test_util.h"
#include "sightline/kernels/builder.h"

namespace sightline::kernel_tests {
namespace {

using namespace sightline::kernels;

device::Executable fused_silu(const device::Spec& spec, int64_t rows, uint32_t cols) {
  KernelBuilder b(spec, "silu_fused");
  b.set_source_op("custom::silu");
  const uint32_t x = b.input("x", DType::f32, {rows, cols}), y = b.output("y", DType::f32, {rows, cols});
  TilePool in = b.pool("x", DType::f32, cols, 3), out = b.pool("y", DType::f32, cols, 3);
  for (int64_t r = 0; r < rows; r += 128) {
    const uint16_t p = static_cast<uint16_t>(std::min<int64_t>(128, rows - r));
    const Tile xt = in.next(), yt = out.next();
    b.load(xt.rows(p), hbm_rows(x, DType::f32, r * cols, p, cols, cols));
    b.activate(ActFunc::sigmoid, yt.rows(p), xt.rows(p));
    b.tensor_tensor(AluOp::multiply, yt.rows(p), yt.rows(p), xt.rows(p));
    b.store(hbm_rows(y, DType::f32, r * cols, p, cols, cols), yt.rows(p));
  }
  return b.build();
}

TEST(CustomOp, FusedSiluMatchesTheCpuReference) {
  const int64_t rows = 300;
  const uint32_t cols = 200;
  const Tensor x = random({rows, cols});
  const device::Executable exe = fused_silu(trn2(), rows, cols);
  ASSERT_EQ(exe.source_ops, std::vector<std::string>{"custom::silu"});
  device::Core core(trn2());
  const uint64_t bytes = x.nbytes();
  const uint64_t xa = core.hbm_allocate(bytes), ya = core.hbm_allocate(bytes);
  core.hbm_write(xa, x.raw_data(), bytes);
  const device::RunResult r = core.run(exe, std::vector<uint64_t>{xa, ya});
  Tensor y = empty({rows, cols});
  core.hbm_read(ya, y.raw_data(), bytes);
  expect_close(y, mul(x, sigmoid(x)), 1e-5);
  // One device execution instead of two eager ones: less device time than sigmoid then mul.
  const double eager =
      run_eager(OpId::sigmoid, {x}, {}).run.duration_ns + run_eager(OpId::mul, {x, x}, {}).run.duration_ns;
  EXPECT_LT(r.duration_ns, eager);
  for (const auto& rec : r.records) EXPECT_EQ(rec.source_op, 0u);
}

}  // namespace
}  // namespace sightline::kernel_tests
