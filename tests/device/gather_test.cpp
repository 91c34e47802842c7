// The indirect DMA gather (dma_gather): functional rows, cost, errors, NEFF round trip.
#include <gtest/gtest.h>

#include <vector>

#include "device/core.h"
#include "device/cost_model.h"
#include "formats/neff.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

constexpr uint32_t kRows = 40, kWidth = 24, kTokens = 9;

// ids[kTokens] (i32) -> SBUF on queue 0, then gather table rows straight into out (HBM) on queue 1.
Executable gather_program() {
  Executable exe;
  exe.name = "gather";
  exe.io = {{"table", DType::f32, {kRows, kWidth}, IoKind::input},
            {"ids", DType::i32, {kTokens}, IoKind::input},
            {"out", DType::f32, {kTokens, kWidth}, IoKind::output}};
  exe.semaphore_count = 1;
  exe.dma_queues.resize(2);
  const AccessPattern ids = sbuf(0, kTokens, 0, DType::i32, {1});
  Instruction load = dma_copy(ids, hbm(1, 0, kTokens, 1, DType::i32, {1}));
  load.updates.push_back({0, 1});
  Instruction gather = dma_gather(hbm(2, 0, kTokens, kWidth, DType::f32, {kWidth}),
                                  hbm(0, 0, kRows, kWidth, DType::f32, {kWidth}), ids);
  gather.waits.push_back({0, 1});
  exe.dma_queues[0].push_back(load);
  exe.dma_queues[1].push_back(gather);
  return exe;
}

std::vector<float> run_gather(const Executable& exe, const std::vector<int32_t>& ids,
                              RunResult* result = nullptr) {
  Core core(Spec::builtin("trn2"));
  std::vector<float> table(kRows * kWidth);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.5f;
  const uint64_t t = core.hbm_allocate(table.size() * 4), x = core.hbm_allocate(ids.size() * 4),
                 y = core.hbm_allocate(kTokens * kWidth * 4);
  core.hbm_write(t, table.data(), table.size() * 4);
  core.hbm_write(x, ids.data(), ids.size() * 4);
  const RunResult r = core.run(exe, std::vector<uint64_t>{t, x, y});
  if (result) *result = r;
  std::vector<float> out(kTokens * kWidth);
  core.hbm_read(y, out.data(), out.size() * 4);
  return out;
}

TEST(DeviceGather, CopiesThePickedRowsAndCostsOnlyThem) {
  const std::vector<int32_t> ids = {3, 0, 39, 3, 17, 5, 5, 22, 1};
  RunResult r;
  const std::vector<float> out = run_gather(gather_program(), ids, &r);
  for (uint32_t tok = 0; tok < kTokens; ++tok) {
    for (uint32_t j = 0; j < kWidth; ++j) {
      ASSERT_EQ(out[tok * kWidth + j], static_cast<float>(ids[tok] * kWidth + j) * 0.5f) << tok << "," << j;
    }
  }
  const Executable exe = gather_program();
  const Instruction& g = exe.dma_queues[1][0];
  EXPECT_EQ(dma_transfer_bytes(g), uint64_t{kTokens} * kWidth * 4 + kTokens * 4);
  const Traffic t = instruction_traffic(g);
  EXPECT_EQ(t.hbm_read, uint64_t{kTokens} * kWidth * 4);  // the picked rows, not the whole table
  EXPECT_EQ(t.hbm_written, uint64_t{kTokens} * kWidth * 4);
  EXPECT_EQ(r.records.back().opcode, Opcode::dma_gather);
}

TEST(DeviceGather, OutOfRangeIndexIsAnError) {
  const std::vector<int32_t> ids = {3, 0, 40, 3, 17, 5, 5, 22, 1};
  try {
    run_gather(gather_program(), ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 40, outside the table's rows 0..39"), std::string::npos)
        << e.what();
  }
}

TEST(DeviceGather, ValidationNamesWrongOperands) {
  Executable exe = gather_program();
  exe.dma_queues[1][0].src1.dtype = DType::f32;
  EXPECT_THROW(run_gather(exe, std::vector<int32_t>(kTokens, 0)), Error);
  exe = gather_program();
  exe.dma_queues[1][0].dst.dims[0].size = kWidth - 1;
  EXPECT_THROW(run_gather(exe, std::vector<int32_t>(kTokens, 0)), Error);
  exe = gather_program();
  exe.dma_queues[1][0].src0 = sbuf(0, 1, 0, DType::f32, {kWidth});
  EXPECT_THROW(run_gather(exe, std::vector<int32_t>(kTokens, 0)), Error);
}

TEST(DeviceGather, NeffRoundTrip) {
  const Executable exe = gather_program();
  const Executable back = formats::neff_parse(formats::neff_serialize(exe));
  EXPECT_EQ(back, exe);
  EXPECT_NE(formats::neff_dump(back).find("DMA_GATHER"), std::string::npos);
}

}  // namespace
}  // namespace sightline::device
