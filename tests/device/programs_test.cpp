// Whole hand-written programs: a tiled matmul on the Tensor engine and an RMSNorm-style kernel.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "test_programs.h"

namespace sightline::device {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

TEST(DevicePrograms, TiledMatmul) {
  const uint32_t m = 256, k = 384, n = 320;
  Core core(Spec::builtin());
  const Executable exe = testing::matmul_program(m, k, n);
  const std::vector<float> a = random_values(m * k, 1), b = random_values(k * n, 2);
  std::vector<float> a_t(k * m);
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < k; ++j) a_t[j * m + i] = a[i * k + j];
  }
  std::vector<uint64_t> addr;
  for (const auto& t : exe.io) addr.push_back(core.hbm_allocate(t.bytes()));
  core.hbm_write(addr[0], a_t.data(), a_t.size() * 4);
  core.hbm_write(addr[1], b.data(), b.size() * 4);
  const RunResult r = core.run(exe, addr);
  std::vector<float> c(m * n);
  core.hbm_read(addr[2], c.data(), c.size() * 4);
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      double want = 0;
      for (uint32_t p = 0; p < k; ++p) want += double{a[i * k + p]} * b[p * n + j];
      ASSERT_NEAR(c[i * n + j], want, 1e-4) << i << "," << j;
    }
  }
  uint64_t flops = 0;
  for (const auto& rec : r.records) flops += rec.flops;
  EXPECT_EQ(flops, 2ull * m * k * n);
}

void check_rms_norm(const Spec& spec, uint32_t rows, uint32_t cols) {
  const float eps = 1e-6f;
  Core core(spec);
  const Executable exe = testing::rms_norm_program(spec, rows, cols, eps);
  const std::vector<float> x = random_values(size_t{rows} * cols, 3);
  const uint64_t in = core.hbm_allocate(x.size() * 4), out = core.hbm_allocate(x.size() * 4);
  core.hbm_write(in, x.data(), x.size() * 4);
  const RunResult r = core.run(exe, std::vector<uint64_t>{in, out});
  std::vector<float> y(x.size());
  core.hbm_read(out, y.data(), y.size() * 4);
  for (uint32_t row = 0; row < rows; ++row) {
    double sq = 0;
    for (uint32_t i = 0; i < cols; ++i) sq += double{x[size_t{row} * cols + i]} * x[size_t{row} * cols + i];
    const double scale = 1.0 / std::sqrt(sq / cols + eps);
    for (uint32_t i = 0; i < cols; ++i) {
      const size_t at = size_t{row} * cols + i;
      ASSERT_NEAR(y[at], x[at] * scale, 1e-5 * std::max(1.0, std::fabs(x[at] * scale))) << row << "," << i;
    }
  }
  EXPECT_EQ(r.instructions, exe.instruction_count());
  EXPECT_EQ(r.records.size(), exe.instruction_count());
}

TEST(DevicePrograms, RmsNormTrn2) { check_rms_norm(Spec::builtin("trn2"), 384, 1000); }
// Rows of 4120 bytes: the stores to HBM take the streaming copy (rows of 4 KiB and more), with rows
// that start off a 32-byte boundary and end inside one.
TEST(DevicePrograms, RmsNormTrn2WideRowsStreamedToHbm) { check_rms_norm(Spec::builtin("trn2"), 256, 1030); }
TEST(DevicePrograms, RmsNormTrn1RowsNotAMultipleOf128) { check_rms_norm(Spec::builtin("trn1"), 300, 256); }

}  // namespace
}  // namespace sightline::device
