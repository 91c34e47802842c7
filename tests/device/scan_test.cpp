// The Vector engine's scan and index instructions (tensor_scan, max8, find_index8): values, ties and
// NaN, the validation errors, the cost rule, and the NEFF round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "device/core.h"
#include "device/cost_model.h"
#include "device/validate.h"
#include "formats/neff.h"
#include "sightline/error.h"
#include "sightline/kernels/builder.h"

namespace sightline::device {
namespace {

constexpr uint16_t kRows = 3;
constexpr uint32_t kCols = 10, kTop = 3;

// x [3, 10] -> cumsum [3, 10], top values [3, 3], their indices [3, 3] (i32).
Executable scan_program() {
  static const Spec spec = Spec::builtin("trn2");  // the builder keeps a reference
  kernels::KernelBuilder b(spec, "scan");
  const uint32_t x = b.input("x", DType::f32, {kRows, kCols});
  const uint32_t sums = b.output("sums", DType::f32, {kRows, kCols});
  const uint32_t top = b.output("top", DType::f32, {kRows, kTop});
  const uint32_t index = b.output("index", DType::i32, {kRows, kTop});
  const kernels::Tile xt = b.sbuf(DType::f32, kCols), st = b.sbuf(DType::f32, kCols), tt = b.sbuf(DType::f32, kTop),
                      it = b.sbuf(DType::i32, kTop);
  b.load(xt.rows(kRows), kernels::hbm_rows(x, DType::f32, 0, kRows, kCols, kCols));
  b.emit(tensor_scan(AluOp::add, st.rows(kRows), xt.rows(kRows)));
  b.emit(max8(tt.rows(kRows), xt.rows(kRows)));
  b.emit(find_index8(it.rows(kRows), xt.rows(kRows), tt.rows(kRows)));
  b.store(kernels::hbm_rows(sums, DType::f32, 0, kRows, kCols, kCols), st.rows(kRows));
  b.store(kernels::hbm_rows(top, DType::f32, 0, kRows, kTop, kTop), tt.rows(kRows));
  b.store(kernels::hbm_rows(index, DType::i32, 0, kRows, kTop, kTop), it.rows(kRows));
  return b.build();
}

TEST(DeviceScan, ScanTopValuesAndTheirIndices) {
  const std::vector<float> x = {
      1, 2, 3, 4, 5, 6, 7, 8, 9, 10,          // increasing
      5, 1, 5, -3, 5, 0, 2, 2, 1, 0,          // a three-way tie at the top: distinct indices, in order
      0, NAN, 4, 9, -1, NAN, 3, 2, 1, 0.5f};  // NaN ranks above every number
  Core core(Spec::builtin("trn2"));
  const uint64_t xa = core.hbm_allocate(x.size() * 4), sa = core.hbm_allocate(x.size() * 4),
                 ta = core.hbm_allocate(kRows * kTop * 4), ia = core.hbm_allocate(kRows * kTop * 4);
  core.hbm_write(xa, x.data(), x.size() * 4);
  core.run(scan_program(), std::vector<uint64_t>{xa, sa, ta, ia});
  std::vector<float> sums(x.size()), top(kRows * kTop);
  std::vector<int32_t> index(kRows * kTop);
  core.hbm_read(sa, sums.data(), sums.size() * 4);
  core.hbm_read(ta, top.data(), top.size() * 4);
  core.hbm_read(ia, index.data(), index.size() * 4);
  for (uint32_t r = 0; r < kRows; ++r) {
    float acc = 0;
    for (uint32_t i = 0; i < kCols; ++i) {
      acc += x[r * kCols + i];
      if (std::isnan(acc)) {
        EXPECT_TRUE(std::isnan(sums[r * kCols + i])) << r << "," << i;
      } else {
        EXPECT_EQ(sums[r * kCols + i], acc) << r << "," << i;
      }
    }
  }
  EXPECT_EQ(std::vector<float>(top.begin(), top.begin() + 6), (std::vector<float>{10, 9, 8, 5, 5, 5}));
  EXPECT_TRUE(std::isnan(top[6]) && std::isnan(top[7]));
  EXPECT_EQ(top[8], 9.0f);
  EXPECT_EQ(index, (std::vector<int32_t>{9, 8, 7, 0, 2, 4, 1, 5, 3}));
}

TEST(DeviceScan, ValidationNamesTheLimits) {
  Executable exe = scan_program();
  for (Instruction& in : exe.stream(Engine::vector)) {
    if (in.opcode == Opcode::max8) in.dst.dims[0].size = 9;
  }
  std::string error;
  try {
    validate_executable(exe, Spec::builtin("trn2"));
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, ::testing::HasSubstr("dst must be [3, k] with 1 <= k <= 8 and k <= src0's free size 10, got [3, 9]"));
}

TEST(DeviceScan, OnePassCostAndNeffRoundTrip) {
  const Spec spec = Spec::builtin("trn2");
  const AccessPattern src = sbuf(0, 128, 0, DType::f32, {4096}), column = sbuf(0, 128, 32768, DType::f32, {1});
  const double reduce_ns = compute_instruction_ns(spec, tensor_reduce(AluOp::max, column, src));
  EXPECT_EQ(compute_instruction_ns(spec, max8(column, src)), reduce_ns);
  EXPECT_EQ(compute_instruction_ns(spec, find_index8(column, src, column)), reduce_ns);
  EXPECT_EQ(compute_instruction_ns(spec, tensor_scan(AluOp::add, src, src)), reduce_ns);
  const Executable exe = scan_program();
  EXPECT_EQ(formats::neff_parse(formats::neff_serialize(exe)), exe);
}

}  // namespace
}  // namespace sightline::device
