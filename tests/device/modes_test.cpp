// Functional and timing-only runs model the same times; computing in place on the memories gives the
// results a copy through scratch rows would.
#include <cstring>
#include <random>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "sightline/error.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

using testing::Harness;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void expect_same_records(const RunResult& a, const RunResult& b) {
  EXPECT_EQ(a.duration_ns, b.duration_ns);
  EXPECT_EQ(a.cycles, b.cycles);
  EXPECT_EQ(a.busy_ns, b.busy_ns);
  EXPECT_EQ(a.hbm_bytes, b.hbm_bytes);
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    EXPECT_EQ(a.records[i].start_ns, b.records[i].start_ns) << i;
    EXPECT_EQ(a.records[i].end_ns, b.records[i].end_ns) << i;
    EXPECT_EQ(a.records[i].semaphore_wait_ns, b.records[i].semaphore_wait_ns) << i;
  }
}

TEST(DeviceModes, FunctionalAndTimingOnlyModelTheSameTimes) {
  const Spec spec = Spec::builtin("trn2");
  Core core(spec);
  const uint32_t rows = 300, cols = 1000;
  const Executable norm = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  const std::vector<float> x = random_values(size_t{rows} * cols, 1);
  const std::vector<uint64_t> io{core.hbm_allocate(x.size() * 4), core.hbm_allocate(x.size() * 4)};
  core.hbm_write(io[0], x.data(), x.size() * 4);
  expect_same_records(core.run(norm, io, {.functional = true}), core.run(norm, io, {.functional = false}));

  const Executable mm = testing::matmul_program(256, 256, 384);
  const std::vector<float> a = random_values(256 * 256, 2), b = random_values(256 * 384, 3);
  const std::vector<uint64_t> mm_io{core.hbm_allocate(a.size() * 4), core.hbm_allocate(b.size() * 4),
                                    core.hbm_allocate(256 * 384 * 4)};
  core.hbm_write(mm_io[0], a.data(), a.size() * 4);
  core.hbm_write(mm_io[1], b.data(), b.size() * 4);
  expect_same_records(core.run(mm, mm_io, {.functional = true}), core.run(mm, mm_io, {.functional = false}));
}

// Runs the m x k x n matmul program on random operands and checks its result is the same bits as the
// serial p-i-j sum: PSUM accumulates one 128-row K tile per matmul instruction, in K order.
void expect_matmul_is_serial_sum(uint32_t m, uint32_t k, uint32_t n, uint32_t seed) {
  Core core(Spec::builtin("trn2"));
  const Executable exe = testing::matmul_program(m, k, n);
  const std::vector<float> a_t = random_values(size_t{k} * m, seed), b = random_values(size_t{k} * n, seed + 1);
  const std::vector<uint64_t> io{core.hbm_allocate(a_t.size() * 4), core.hbm_allocate(b.size() * 4),
                                 core.hbm_allocate(size_t{m} * n * 4)};
  core.hbm_write(io[0], a_t.data(), a_t.size() * 4);
  core.hbm_write(io[1], b.data(), b.size() * 4);
  core.run(exe, io);
  std::vector<float> c(size_t{m} * n);
  core.hbm_read(io[2], c.data(), c.size() * 4);
  std::vector<float> want(size_t{m} * n, 0.0f);
  for (uint32_t p = 0; p < k; ++p) {
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) want[size_t{i} * n + j] += a_t[size_t{p} * m + i] * b[size_t{p} * n + j];
    }
  }
  ASSERT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0);
}

// The blocked matmul adds in the same order as a plain p-i-j loop: the result is the same bits.
TEST(DeviceModes, MatmulIsExactlyTheSerialSum) {
  expect_matmul_is_serial_sum(256, 256, 130, 4);  // n not a multiple of the matmul's column block
}

// A narrow stationary operand (m below 128, as a model's 32 tokens are) is split over threads by
// columns; tails of rows (m not a multiple of 4) and of columns (n not a multiple of a vector block) are
// the scalar loop's. Every result is the same bits as the serial p-i-j sum, accumulated over K tiles.
TEST(DeviceModes, NarrowMatmulIsExactlyTheSerialSum) {
  for (const auto& [m, n] : {std::pair<uint32_t, uint32_t>{32, 512}, {32, 130}, {37, 512}, {20, 33}, {3, 200},
                             {32, 16}, {64, 257}}) {
    SCOPED_TRACE(fmt::format("m {}, n {}", m, n));
    expect_matmul_is_serial_sum(m, 256, n, 8);
  }
}

// dst == src is computed in place; a dst that partly overlaps its source reads the source as it was.
TEST(DeviceModes, InPlaceAndOverlappingOperands) {
  const uint16_t parts = 8;
  const uint32_t n = 64;
  const std::vector<float> x = random_values(size_t{parts} * n, 6);
  {
    Harness h(Spec::builtin());
    const AccessPattern tile = h.input("x", parts, n, DType::f32, x, 0);
    h.output("y", tile);
    const auto got = h.run(tensor_scalar(AluOp::multiply, tile, tile, 2.0f));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[0][i], x[i] * 2.0f) << i;
  }
  {
    Harness h(Spec::builtin());
    const AccessPattern src = h.input("x", parts, n, DType::f32, x, 0);
    const AccessPattern shifted = sbuf(0, parts, 8, DType::f32, {n});  // two elements further on
    h.output("y", shifted);
    const auto got = h.run(tensor_copy(shifted, src));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[0][i], x[i]) << i;
  }
}

// A DMA that reads an HBM tensor column by column (blocked over partitions) lands each column in its
// partition, and a column with unwritten rows names the first of them. Column counts that are and are
// not multiples of the 8 x 8 register blocks, and row counts with a tail; large blocks are transposed in
// row slices over the thread pool (1001 x 16: the compiled linears' 16-partition weight loads, slices
// with a tail).
TEST(DeviceModes, TransposingLoad) {
  for (const auto& [rows, cols] :
       {std::pair<uint32_t, uint32_t>{300, 40}, {300, 37}, {13, 128}, {1024, 128}, {1001, 16}}) {
    SCOPED_TRACE(fmt::format("{} rows, {} columns", rows, cols));
    const std::vector<float> x = random_values(size_t{rows} * cols, 7);
    Executable exe;
    exe.name = "transpose";
    exe.io = {{"x", DType::f32, {rows, cols}, IoKind::input}, {"y", DType::f32, {cols, rows}, IoKind::output}};
    exe.semaphore_count = 1;
    exe.dma_queues.resize(1);
    AccessPattern column = hbm(0, 0, static_cast<uint16_t>(cols), 1, DType::f32, {rows});
    column.dims[0].stride = static_cast<int32_t>(cols);
    Instruction load = dma_copy(sbuf(0, static_cast<uint16_t>(cols), 0, DType::f32, {rows}), column);
    load.updates.push_back({0, 1});
    Instruction store = dma_copy(hbm(1, 0, static_cast<uint16_t>(cols), rows, DType::f32, {rows}),
                                 sbuf(0, static_cast<uint16_t>(cols), 0, DType::f32, {rows}));
    store.waits.push_back({0, 1});
    exe.dma_queues[0] = {load, store};
    Core core(Spec::builtin());
    const std::vector<uint64_t> io{core.hbm_allocate(x.size() * 4), core.hbm_allocate(x.size() * 4)};
    core.hbm_write(io[0], x.data(), x.size() * 4);
    core.run(exe, io);
    std::vector<float> y(x.size());
    core.hbm_read(io[1], y.data(), y.size() * 4);
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        ASSERT_EQ(y[size_t{c} * rows + r], x[size_t{r} * cols + c]) << r << "," << c;
      }
    }
    // Rows from `written_rows` never written; then only the last column's element of the last row.
    const uint32_t written_rows = rows * 2 / 3;
    Core partial(Spec::builtin());
    const std::vector<uint64_t> pio{partial.hbm_allocate(x.size() * 4), partial.hbm_allocate(x.size() * 4)};
    partial.hbm_write(pio[0], x.data(), size_t{written_rows} * cols * 4);
    try {
      partial.run(exe, pio);
      FAIL();
    } catch (const Error& e) {
      const std::string at = fmt::format("byte {} (partition row 0)", uint64_t{written_rows} * cols * 4);
      EXPECT_NE(std::string(e.what()).find(at), std::string::npos) << e.what();
    }
    Core last(Spec::builtin());
    const std::vector<uint64_t> lio{last.hbm_allocate(x.size() * 4), last.hbm_allocate(x.size() * 4)};
    last.hbm_write(lio[0], x.data(), (x.size() - 1) * 4);
    try {
      last.run(exe, lio);
      FAIL();
    } catch (const Error& e) {
      const std::string at = fmt::format("partition row {}", cols - 1);
      EXPECT_NE(std::string(e.what()).find(at), std::string::npos) << e.what();
    }
  }
}

// The same with several column blocks per partition (partition p reads columns p, p + P, p + 2P, ...:
// one strided run per block, as a weight tile of two or more 128-column blocks is read): the runs land
// one after another in the partition, or `gap` elements apart (a destination made of runs), and a hole
// is named as a row-by-row copy names it (partition first, then run).
TEST(DeviceModes, TransposingLoadOfColumnBlocks) {
  for (const auto& [rows, partitions, blocks, gap] :
       {std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>{300, 40, 2, 0}, {37, 13, 3, 0}, {256, 64, 2, 0},
        {9, 8, 4, 0}, {256, 64, 2, 16}, {37, 13, 3, 5}}) {
    SCOPED_TRACE(fmt::format("{} rows, {} partitions, {} blocks, gap {}", rows, partitions, blocks, gap));
    const uint32_t cols = partitions * blocks;
    const std::vector<float> x = random_values(size_t{rows} * cols, 11);
    Executable exe;
    exe.name = "transpose_blocks";
    exe.io = {{"x", DType::f32, {rows, cols}, IoKind::input},
              {"y", DType::f32, {partitions, blocks * rows}, IoKind::output}};
    exe.semaphore_count = 1;
    exe.dma_queues.resize(1);
    AccessPattern columns = hbm(0, 0, static_cast<uint16_t>(partitions), 1, DType::f32, {blocks, rows});
    columns.dims[0].stride = static_cast<int32_t>(partitions);
    columns.dims[1].stride = static_cast<int32_t>(cols);
    AccessPattern tile = sbuf(0, static_cast<uint16_t>(partitions), 0, DType::f32, {blocks, rows});
    tile.dims[0].stride = static_cast<int32_t>(rows + gap);
    Instruction load = dma_copy(tile, columns);
    load.updates.push_back({0, 1});
    Instruction store = dma_copy(hbm(1, 0, static_cast<uint16_t>(partitions), blocks * rows, DType::f32,
                                     {blocks * rows}),
                                 tile);
    store.waits.push_back({0, 1});
    exe.dma_queues[0] = {load, store};
    const uint64_t y_bytes = uint64_t{partitions} * blocks * rows * 4;
    Core core(Spec::builtin());
    const std::vector<uint64_t> io{core.hbm_allocate(x.size() * 4), core.hbm_allocate(y_bytes)};
    core.hbm_write(io[0], x.data(), x.size() * 4);
    core.run(exe, io);
    std::vector<float> y(y_bytes / 4);
    core.hbm_read(io[1], y.data(), y_bytes);
    for (uint32_t p = 0; p < partitions; ++p) {
      for (uint32_t b = 0; b < blocks; ++b) {
        for (uint32_t r = 0; r < rows; ++r) {
          ASSERT_EQ(y[(size_t{p} * blocks + b) * rows + r], x[size_t{r} * cols + b * partitions + p])
              << p << "," << b << "," << r;
        }
      }
    }
    // Rows from `written_rows` never written: partition 0's first run meets the hole first.
    const uint32_t written_rows = rows * 2 / 3;
    Core partial(Spec::builtin());
    const std::vector<uint64_t> pio{partial.hbm_allocate(x.size() * 4), partial.hbm_allocate(y_bytes)};
    partial.hbm_write(pio[0], x.data(), size_t{written_rows} * cols * 4);
    try {
      partial.run(exe, pio);
      FAIL();
    } catch (const Error& e) {
      const std::string at = fmt::format("byte {} (partition row 0)", uint64_t{written_rows} * cols * 4);
      EXPECT_NE(std::string(e.what()).find(at), std::string::npos) << e.what();
    }
    // Only the last element unwritten: the last partition's last run, last row.
    Core last(Spec::builtin());
    const std::vector<uint64_t> lio{last.hbm_allocate(x.size() * 4), last.hbm_allocate(y_bytes)};
    last.hbm_write(lio[0], x.data(), (x.size() - 1) * 4);
    try {
      last.run(exe, lio);
      FAIL();
    } catch (const Error& e) {
      const std::string at = fmt::format("byte {} (partition row {})", (x.size() - 1) * 4, partitions - 1);
      EXPECT_NE(std::string(e.what()).find(at), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sightline::device
