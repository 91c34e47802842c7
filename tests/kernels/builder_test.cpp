// The kernel builder: tile allocation and its errors, DMA splitting, and the semaphores it inserts.
#include <gmock/gmock.h>

#include "kernel_test_util.h"
#include "kernels/dma_rule.h"
#include "sightline/kernels/builder.h"

namespace sightline::kernel_tests {
namespace {

using namespace sightline::kernels;
using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(KernelBuilder, SbufOverflowNamesTheSizes) {
  KernelBuilder b(trn2(), "overflow");
  b.sbuf(DType::f32, 50000, 0, "big");  // 200000 of 229376 bytes per partition
  const std::string message = error_of([&] { b.sbuf(DType::f32, 10000, 0, "second"); });
  EXPECT_THAT(message, HasSubstr("SBUF overflow"));
  EXPECT_THAT(message, HasSubstr("'second' needs 40000 bytes per partition"));
  EXPECT_THAT(message, HasSubstr("229376"));
}

TEST(KernelBuilder, PsumHoldsEightBankAlignedTiles) {
  KernelBuilder b(trn2(), "psum");
  for (int i = 0; i < 8; ++i) {
    const Tile t = b.psum(100);
    EXPECT_EQ(t.offset % trn2().psum_bank_bytes(), 0u);
  }
  EXPECT_THAT(error_of([&] { b.psum(1); }), HasSubstr("PSUM overflow"));
}

TEST(KernelBuilder, BadPartitionsAreErrors) {
  KernelBuilder b(trn2(), "partitions");
  EXPECT_THAT(error_of([&] { b.sbuf(DType::f32, 16, 129); }), HasSubstr("129 partitions requested"));
  const Tile t = b.sbuf(DType::f32, 16, 64);
  EXPECT_THAT(error_of([&] { (void)t.rows(65); }), HasSubstr("do not fit the tile's 64 partitions"));
  EXPECT_THAT(error_of([&] { (void)t.region(0, 4, 10, 7); }), HasSubstr("16 elements per partition"));
  // An operand past the last partition is caught when the program is validated.
  AccessPattern beyond = t.rows(64);
  beyond.partition_start = 100;
  b.tensor_scalar(AluOp::add, beyond, beyond, 1.0f);
  EXPECT_THAT(error_of([&] { b.build(); }), HasSubstr("out of range"));
}

TEST(KernelBuilder, FreedTilesAreReusedAndPoolsRotate) {
  KernelBuilder b(trn2(), "reuse");
  const uint32_t total = b.sbuf_free_bytes();
  const Tile big = b.sbuf(DType::f32, 40000);
  b.free(big);
  EXPECT_EQ(b.sbuf_free_bytes(), total);
  const Tile again = b.sbuf(DType::f32, 40000);
  EXPECT_EQ(again.offset, big.offset);
  EXPECT_THAT(error_of([&] { b.free(big); }), HasSubstr("not allocated"));
  TilePool pool = b.pool("ring", DType::f32, 128, 3);
  const Tile a = pool.next(), c = pool.next(), d = pool.next(), e = pool.next();
  EXPECT_NE(a.offset, c.offset);
  EXPECT_NE(c.offset, d.offset);
  EXPECT_EQ(a.offset, e.offset);
}

TEST(KernelBuilder, TileViews) {
  KernelBuilder b(trn2(), "views");
  const Tile t = b.sbuf(DType::bf16, 64, 32);
  const AccessPattern shaped = t.shaped(16, {4, 8});
  EXPECT_EQ(shaped.partition_count, 16u);
  EXPECT_EQ(shaped.dims[0], (device::FreeDim{4, 8}));
  EXPECT_EQ(shaped.dims[1], (device::FreeDim{8, 1}));
  const AccessPattern column = t.column(32, 5);
  EXPECT_EQ(column.offset, t.offset + 5 * 2);
  EXPECT_EQ(column.free_elements(), 1u);
  EXPECT_THAT(error_of([&] { (void)t.shaped(4, {9, 8}); }), HasSubstr("72 elements per partition"));
}

TEST(KernelBuilder, BigTransfersSpreadOverAllQueues) {
  KernelBuilder b(trn2(), "split");
  const uint32_t x = b.input("x", DType::f32, {128, 4096});
  const Tile t = b.sbuf(DType::f32, 4096);
  b.load(t.ap(), hbm_rows(x, DType::f32, 0, 128, 4096, 4096));
  const device::Executable exe = b.build();
  ASSERT_EQ(exe.dma_queues.size(), trn2().dma.queues);
  for (const auto& q : exe.dma_queues) {
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0].dst.partition_count, 128u / trn2().dma.queues);
  }
}

// `loads` loads of [128, cols] f32 rows into their own tiles, each cut into `pieces` partition ranges
// (0: as dma_split cuts them); returns the modeled time.
double load_stream_ns(uint32_t loads, uint32_t cols, uint32_t pieces) {
  KernelBuilder b(trn2(), "stream");
  const uint32_t x = b.input("x", DType::f32, {loads * 128, cols});
  for (uint32_t i = 0; i < loads; ++i) {
    const Tile t = b.sbuf(DType::f32, cols);
    const int64_t offset = int64_t{i} * 128 * cols;
    if (pieces == 0) {
      b.load(t.ap(), hbm_rows(x, DType::f32, offset, 128, cols, cols));
      continue;
    }
    const uint16_t rows = static_cast<uint16_t>(128 / pieces);
    for (uint32_t p = 0; p < pieces; ++p) {
      b.dma(t.region(static_cast<uint16_t>(p * rows), rows, 0, cols),
            hbm_rows(x, DType::f32, offset + int64_t{p} * rows * cols, rows, cols, cols));
    }
  }
  const device::Executable exe = b.build();
  device::Core core(trn2());
  std::vector<uint64_t> addresses;
  for (const auto& t : exe.io) addresses.push_back(core.hbm_allocate(t.bytes()));
  return core.run(exe, addresses, device::RunOptions{.functional = false}).duration_ns;
}

// docs/hardware-model.md §1.4, "How a transfer is split": a piece's data must take at least the fixed
// cost over the queue's other slots to hide the next transfer's fixed cost. A stream cut into pieces of
// stream_min_piece_bytes() is as fast as any split of it, while dma_split's 4 KiB pieces are not; a
// transfer alone on the queues, though, is fastest over all of them.
TEST(KernelBuilder, StreamPiecesHideTheFixedCostAndLonePiecesDoNot) {
  const device::DmaSpec& dma = trn2().dma;
  const uint64_t piece = stream_min_piece_bytes(trn2());
  EXPECT_GE(double(piece) / dma.queue_bytes_per_ns, dma.fixed_cost_ns / (dma.transfer_slots - 1));
  EXPECT_LT(double(piece - 1) / dma.queue_bytes_per_ns, dma.fixed_cost_ns / (dma.transfer_slots - 1));
  for (const uint32_t cols : {64u, 256u, 1024u}) {  // 32 KiB, 128 KiB and 512 KiB per load
    const uint64_t bytes = uint64_t{128} * cols * 4;
    const uint32_t rule = static_cast<uint32_t>(std::clamp<uint64_t>(bytes / piece, 1, dma.queues));
    const double by_rule = load_stream_ns(16, cols, rule);
    for (const uint32_t pieces : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u}) {
      EXPECT_LE(by_rule, load_stream_ns(16, cols, pieces) + 1e-6) << cols << " columns, " << pieces << " pieces";
    }
  }
  // dma_split cuts a 32 KiB load into 8 pieces of 4 KiB, which pay the fixed cost about once per two.
  EXPECT_GT(load_stream_ns(16, 64, 0), 2 * load_stream_ns(16, 64, 1));
  // Alone, a 64 KiB load is faster in 16 pieces than in the stream rule's 2.
  EXPECT_LT(load_stream_ns(1, 128, 16), load_stream_ns(1, 128, 2));
}

// y = exp(x) * 2 over `tiles` row tiles of [128, cols] that all reuse one buffer: every stage runs on a
// different engine or queue, and each load overwrites the tile the previous store still reads.
device::Executable single_buffer_program(uint32_t tiles, uint32_t cols) {
  KernelBuilder b(trn2(), "single_buffer");
  const uint32_t x = b.input("x", DType::f32, {tiles * 128, cols});
  const uint32_t y = b.output("y", DType::f32, {tiles * 128, cols});
  const Tile t = b.sbuf(DType::f32, cols);
  for (uint32_t i = 0; i < tiles; ++i) {
    const int64_t offset = int64_t{i} * 128 * cols;
    b.dma(t.ap(), hbm_rows(x, DType::f32, offset, 128, cols, cols));
    b.activate(ActFunc::exp, t.ap(), t.ap());
    b.tensor_scalar(AluOp::multiply, t.ap(), t.ap(), 2.0f);
    b.dma(hbm_rows(y, DType::f32, offset, 128, cols, cols), t.ap());
  }
  return b.build();
}

device::RunResult run_program(const device::Executable& exe, const Tensor& x, Tensor& y) {
  device::Core core(trn2());
  const uint64_t xa = core.hbm_allocate(x.nbytes()), ya = core.hbm_allocate(y.nbytes());
  core.hbm_write(xa, x.raw_data(), x.nbytes());
  device::RunResult r = core.run(exe, std::vector<uint64_t>{xa, ya});
  core.hbm_read(ya, y.raw_data(), y.nbytes());
  return r;
}

TEST(KernelBuilder, InsertedSemaphoresOrderRacingEngines) {
  const uint32_t tiles = 4, cols = 96;
  const device::Executable exe = single_buffer_program(tiles, cols);
  const Tensor x = random({tiles * 128, cols});
  Tensor y = empty({tiles * 128, cols});
  const device::RunResult first = run_program(exe, x, y);
  expect_close(y, mul(exp(x), 2.0), 1e-5);

  // Same program, same cycles, same per-instruction timeline.
  Tensor y2 = empty({tiles * 128, cols});
  const device::RunResult second = run_program(exe, x, y2);
  EXPECT_EQ(first.cycles, second.cycles);
  ASSERT_EQ(first.records.size(), second.records.size());
  for (size_t i = 0; i < first.records.size(); ++i)
    EXPECT_EQ(first.records[i].end_ns, second.records[i].end_ns);

  // Without the waits the engines race: ScalarE reads the tile before the load wrote it.
  device::Executable racing = exe;
  for (auto& stream : racing.engines) {
    for (auto& in : stream) in.waits.clear();
  }
  for (auto& queue : racing.dma_queues) {
    for (auto& in : queue) in.waits.clear();
  }
  Tensor y3 = empty({tiles * 128, cols});
  EXPECT_THAT(error_of([&] { run_program(racing, x, y3); }),
              HasSubstr("which no instruction of this execution wrote"));
}

TEST(KernelBuilder, WaitsCoverWriteAfterReadAndSkipImpliedOnes) {
  const device::Executable exe = single_buffer_program(2, 64);
  // Two loads and two stores round-robin over queues 0..3.
  ASSERT_GE(exe.dma_queues.size(), 4u);
  const auto& load2 = exe.dma_queues[2][0];
  const auto& store1 = exe.dma_queues[1][0];
  // The second load overwrites the tile the first store reads: it waits for that store (WAR).
  ASSERT_EQ(load2.waits.size(), 1u);
  EXPECT_EQ(load2.waits[0].semaphore, 4 + 1);  // queue 1's semaphore
  EXPECT_EQ(load2.waits[0].value, 1u);
  // The store waits only for VectorE: VectorE already waited for ScalarE, which waited for the load.
  ASSERT_EQ(store1.waits.size(), 1u);
  EXPECT_EQ(store1.waits[0].semaphore, static_cast<uint16_t>(device::Engine::vector));
  // Every instruction signals its own stream's semaphore once.
  for (const auto& in : exe.stream(device::Engine::scalar)) {
    ASSERT_EQ(in.updates.size(), 1u);
    EXPECT_EQ(in.updates[0].semaphore, static_cast<uint16_t>(device::Engine::scalar));
  }
}

TEST(KernelBuilder, SourceOpsLabelInstructions) {
  KernelBuilder b(trn2(), "labels");
  const Tile t = b.sbuf(DType::f32, 8);
  b.set_source_op("aten::a");
  b.iota(t.ap(), 0, 1);
  b.set_source_op("aten::b");
  b.tensor_scalar(AluOp::add, t.ap(), t.ap(), 1.0f);
  b.set_source_op("aten::a");
  b.tensor_scalar(AluOp::add, t.ap(), t.ap(), 1.0f);
  const device::Executable exe = b.build();
  EXPECT_EQ(exe.source_ops, (std::vector<std::string>{"aten::a", "aten::b"}));
  EXPECT_EQ(exe.stream(device::Engine::gpsimd)[0].source_op, 0u);
  EXPECT_EQ(exe.stream(device::Engine::vector)[0].source_op, 1u);
  EXPECT_EQ(exe.stream(device::Engine::vector)[1].source_op, 0u);
}

}  // namespace
}  // namespace sightline::kernel_tests
