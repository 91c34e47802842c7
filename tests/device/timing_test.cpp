// Timing-model tests: costs follow docs/hardware-model.md §1.6 with the numbers of the spec.
#include <gtest/gtest.h>

#include "device/core.h"
#include "device/cost_model.h"
#include "sightline/error.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

using testing::rms_norm_program;

constexpr uint32_t kCols = 4096;

// A program of `queues` DMA transfers, each moving rows of a [128, kCols] f32 tensor HBM -> SBUF.
Executable dma_program(uint32_t queues) {
  Executable exe;
  exe.name = "dma_copy";
  exe.io = {{"x", DType::f32, {128, kCols}, IoKind::input}};
  exe.dma_queues.resize(queues);
  const uint16_t per_queue = static_cast<uint16_t>(128 / queues);
  for (uint32_t q = 0; q < queues; ++q) {
    const uint16_t first = static_cast<uint16_t>(q * per_queue);
    exe.dma_queues[q].push_back(
        dma_copy(sbuf(first, per_queue, 0, DType::f32, {kCols}),
                 hbm(0, uint64_t{first} * kCols * 4, per_queue, kCols, DType::f32, {kCols})));
  }
  return exe;
}

RunResult run_timing(Core& core, const Executable& exe) {
  std::vector<uint64_t> addresses;
  for (const auto& t : exe.io) addresses.push_back(core.hbm_allocate(t.bytes()));
  return core.run(exe, addresses, RunOptions{.functional = false, .record = true});
}

TEST(DeviceTiming, DmaCopyTakesBytesOverBandwidthPlusFixedCost) {
  const Spec spec = Spec::builtin("trn2");
  Core core(spec);
  const double bytes = 128.0 * kCols * 4;
  // One queue: limited by the queue's bandwidth.
  const RunResult one = run_timing(core, dma_program(1));
  const double expect_one = spec.dma.fixed_cost_ns + bytes / spec.dma.queue_bytes_per_ns;
  EXPECT_NEAR(one.duration_ns, expect_one, 0.1 * expect_one);
  // Every queue: limited by the core's HBM bandwidth that the queues share.
  const RunResult all = run_timing(core, dma_program(spec.dma.queues));
  const double rate = std::min(spec.hbm.bytes_per_ns, spec.dma.queue_bytes_per_ns * spec.dma.queues);
  const double expect_all = spec.dma.fixed_cost_ns + bytes / rate;
  EXPECT_NEAR(all.duration_ns, expect_all, 0.1 * expect_all);
  EXPECT_NEAR(dma_copy_ns(spec, static_cast<uint64_t>(bytes), spec.dma.queues), expect_all, 0.1 * expect_all);
  EXPECT_EQ(all.hbm_bytes, static_cast<uint64_t>(bytes));
}

TEST(DeviceTiming, HbmBandwidthIsSharedWhenQueuesExceedIt) {
  Spec spec = Spec::builtin("trn2");
  spec.hbm.bytes_per_ns = spec.dma.queue_bytes_per_ns * 2;  // two queues saturate HBM
  Core core(spec);
  const RunResult r = run_timing(core, dma_program(8));
  const double expect = spec.dma.fixed_cost_ns + 128.0 * kCols * 4 / spec.hbm.bytes_per_ns;
  EXPECT_NEAR(r.duration_ns, expect, 0.1 * expect);
}

// The DMA model's rules, one test each, with exact expected times (docs/hardware-model.md §1.4, "The
// DMA model, reviewed"). A transfer of [8, kCols] f32 rows: 128 KiB, the size the eager kernels move.
constexpr double kRowBytes = 8.0 * kCols * 4;

Instruction load_rows(uint16_t first_partition, uint64_t hbm_row) {
  return dma_copy(sbuf(first_partition, 8, 0, DType::f32, {kCols}),
                  hbm(0, hbm_row * kCols * 4, 8, kCols, DType::f32, {kCols}));
}

Executable queues_program(const std::vector<std::vector<Instruction>>& queues) {
  Executable exe;
  exe.name = "dma_rules";
  exe.io = {{"x", DType::f32, {128, kCols}, IoKind::input}};
  exe.dma_queues = queues;
  return exe;
}

// Rule 1: a transfer pays the fixed cost from its issue, then moves its bytes at the queue's peak. A
// queue holds two transfers: the second pays its fixed cost while the first moves, and starts moving
// when the first is done. A DMA record runs from when its transfer is the oldest of its queue to its end.
TEST(DeviceDmaRules, TheNextTransfersFixedCostOverlapsTheCurrentOnesData) {
  const Spec spec = Spec::builtin("trn2");
  ASSERT_EQ(spec.dma.transfer_slots, 2u);
  Core core(spec);
  const double fixed = spec.dma.fixed_cost_ns, data = kRowBytes / spec.dma.queue_bytes_per_ns;
  ASSERT_GT(data, fixed);
  const RunResult r = run_timing(core, queues_program({{load_rows(0, 0), load_rows(8, 8), load_rows(16, 16)}}));
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_NEAR(r.records[0].start_ns, 0, 1e-9);  // the queue was idle: its record shows the fixed cost
  EXPECT_NEAR(r.records[0].end_ns, fixed + data, 1e-6);
  // Issued at 0 beside the first; its fixed cost is paid by the time the first is done.
  EXPECT_NEAR(r.records[1].start_ns, fixed + data, 1e-6);
  EXPECT_NEAR(r.records[1].end_ns, fixed + 2 * data, 1e-6);
  // Issued when the first freed its slot; its fixed cost ends before the second is done.
  EXPECT_NEAR(r.records[2].end_ns, fixed + 3 * data, 1e-6);
  EXPECT_NEAR(r.duration_ns, fixed + 3 * data, 1e-6);
  EXPECT_NEAR(r.busy_ns[static_cast<int>(Engine::dma)], fixed + 3 * data, 1e-6);
}

// Transfers shorter than the fixed cost cannot hide it: with two slots, each pair of transfers takes
// one fixed cost plus one data time in the steady state.
TEST(DeviceDmaRules, SmallTransfersAreBoundByTheFixedCost) {
  const Spec spec = Spec::builtin("trn2");
  Core core(spec);
  auto small = [](uint16_t first) {  // 8 partitions x 2 KiB
    return dma_copy(sbuf(first, 8, 0, DType::f32, {512}), hbm(0, uint64_t{first} * 512 * 4, 8, 512, DType::f32, {512}));
  };
  const double fixed = spec.dma.fixed_cost_ns, data = 8.0 * 512 * 4 / spec.dma.queue_bytes_per_ns;
  ASSERT_LT(data, fixed);
  const RunResult r = run_timing(core, queues_program({{small(0), small(8), small(16), small(24)}}));
  ASSERT_EQ(r.records.size(), 4u);
  EXPECT_NEAR(r.records[0].end_ns, fixed + data, 1e-6);
  EXPECT_NEAR(r.records[1].end_ns, fixed + 2 * data, 1e-6);
  // Issued at fixed + data; it holds the queue from the second's end, the rest of its fixed cost showing.
  EXPECT_NEAR(r.records[2].start_ns, fixed + 2 * data, 1e-6);
  EXPECT_NEAR(r.records[2].end_ns, 2 * fixed + 2 * data, 1e-6);
  EXPECT_NEAR(r.records[3].end_ns, 2 * fixed + 3 * data, 1e-6);  // issued at fixed + 2 * data
}

// With one slot (a spec may say so) the fixed cost is paid serially, as queue occupancy.
TEST(DeviceDmaRules, OneSlotPaysEachFixedCostSerially) {
  Spec spec = Spec::builtin("trn2");
  spec.dma.transfer_slots = 1;
  Core core(spec);
  const double fixed = spec.dma.fixed_cost_ns, data = kRowBytes / spec.dma.queue_bytes_per_ns;
  const RunResult r = run_timing(core, queues_program({{load_rows(0, 0), load_rows(8, 8)}}));
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_NEAR(r.records[0].start_ns, 0, 1e-9);
  EXPECT_NEAR(r.records[1].start_ns, fixed + data, 1e-6);
  EXPECT_NEAR(r.duration_ns, 2 * (fixed + data), 1e-6);
}

// Rule 2: queues run in parallel, so their fixed costs overlap; the core's HBM bandwidth is split
// equally between the transfers moving HBM bytes.
TEST(DeviceDmaRules, QueuesOverlapTheirFixedCostsAndShareHbmEqually) {
  Spec spec = Spec::builtin("trn2");
  spec.hbm.bytes_per_ns = spec.dma.queue_bytes_per_ns;  // one queue alone saturates HBM
  Core core(spec);
  const RunResult r = run_timing(core, queues_program({{load_rows(0, 0)}, {load_rows(8, 8)}}));
  EXPECT_NEAR(r.duration_ns, spec.dma.fixed_cost_ns + 2 * kRowBytes / spec.hbm.bytes_per_ns, 1e-6);
}

// Rule 3: when a transfer finishes, the others get its share at once.
TEST(DeviceDmaRules, BandwidthIsReSharedWhenATransferFinishes) {
  Spec spec = Spec::builtin("trn2");
  spec.hbm.bytes_per_ns = spec.dma.queue_bytes_per_ns;
  Core core(spec);
  const double bw = spec.hbm.bytes_per_ns, fixed = spec.dma.fixed_cost_ns;
  // Queue 0 moves 128 KiB, queue 1 moves 256 KiB (two row blocks in one descriptor).
  const Instruction big = dma_copy(sbuf(8, 16, 0, DType::f32, {kCols}), hbm(0, 8ull * kCols * 4, 16, kCols, DType::f32, {kCols}));
  const RunResult r = run_timing(core, queues_program({{load_rows(0, 0)}, {big}}));
  ASSERT_EQ(r.records.size(), 2u);
  // Both move at bw/2 until the small one is done (it moved kRowBytes); the big one then has kRowBytes
  // left and moves it at the full bandwidth.
  EXPECT_NEAR(r.records[0].end_ns, fixed + 2 * kRowBytes / bw, 1e-6);
  EXPECT_NEAR(r.records[1].end_ns, fixed + 3 * kRowBytes / bw, 1e-6);
}

// Rule 4: a queue in its fixed-cost phase moves nothing and takes no share of HBM; an on-chip transfer
// (SBUF to SBUF) never takes one.
TEST(DeviceDmaRules, OnlyTransfersMovingHbmBytesShareHbm) {
  Spec spec = Spec::builtin("trn2");
  spec.hbm.bytes_per_ns = spec.dma.queue_bytes_per_ns;
  Core core(spec);
  const Instruction onchip =
      dma_copy(sbuf(16, 8, 0, DType::f32, {kCols}), sbuf(24, 8, 0, DType::f32, {kCols}));
  const RunResult r = run_timing(core, queues_program({{load_rows(0, 0)}, {onchip}}));
  ASSERT_EQ(r.records.size(), 2u);
  const double alone = spec.dma.fixed_cost_ns + kRowBytes / spec.dma.queue_bytes_per_ns;
  EXPECT_NEAR(r.records[0].end_ns, alone, 1e-6);
  EXPECT_NEAR(r.records[1].end_ns, alone, 1e-6);
  EXPECT_EQ(r.hbm_bytes, static_cast<uint64_t>(kRowBytes));
}

TEST(DeviceTiming, TwoInputVectorCostsAboutTwiceOneInput) {
  const Spec spec = Spec::builtin("trn2");
  AccessPattern a = sbuf(0, 128, 0, DType::f32, {kCols});
  AccessPattern b = sbuf(0, 128, kCols * 4, DType::f32, {kCols});
  AccessPattern out = sbuf(0, 128, 2 * kCols * 4, DType::f32, {kCols});
  const double two = compute_instruction_ns(spec, tensor_tensor(AluOp::add, out, a, b));
  const double one = compute_instruction_ns(spec, tensor_scalar(AluOp::add, out, a, 1.0f));
  EXPECT_GT(two / one, 1.8);
  EXPECT_LT(two / one, 2.1);
  // N cycles at the engine's clock, for N > 128, plus the static overheads.
  const double cycles = spec.access_overhead_cycles + spec.vector.static_overhead_cycles +
                        kCols / spec.vector.elements_per_cycle_32bit;
  EXPECT_NEAR(one, cycles / spec.vector.clock_ghz, 1e-6);
}

// tensor_tensor / tensor_scalar with kFlagGpSimd run in the GpSimd stream at GpSimd's rate and clock,
// beside the Vector engine rather than after it.
TEST(DeviceTiming, ElementwiseOnGpSimdRunsAtGpSimdRatesBesideVector) {
  const Spec spec = Spec::builtin("trn2");
  AccessPattern a = sbuf(0, 128, 0, DType::bf16, {kCols});
  AccessPattern b = sbuf(0, 128, kCols * 2, DType::bf16, {kCols});
  AccessPattern out = sbuf(0, 128, 2 * kCols * 2, DType::bf16, {kCols});
  AccessPattern out2 = sbuf(0, 128, 3 * kCols * 2, DType::bf16, {kCols});
  const Instruction on_gpsimd = tensor_tensor(AluOp::add, out, a, b, Engine::gpsimd);
  ASSERT_EQ(on_gpsimd.engine(), Engine::gpsimd);
  const double cycles = spec.access_overhead_cycles + spec.gpsimd.static_overhead_cycles +
                        2.0 * kCols / spec.gpsimd.elements_per_cycle_16bit;
  EXPECT_NEAR(compute_instruction_ns(spec, on_gpsimd), cycles / spec.gpsimd.clock_ghz, 1e-6);
  const Instruction scalar_on_gpsimd = tensor_scalar(AluOp::multiply, out, a, 2.0f, false, Engine::gpsimd);
  EXPECT_EQ(scalar_on_gpsimd.engine(), Engine::gpsimd);
  EXPECT_NE(scalar_on_gpsimd.flags & kFlagGpSimd, 0);
  // The flag means nothing on other opcodes: their engine stays their opcode's.
  Instruction copy = tensor_copy(out, a);
  copy.flags = kFlagGpSimd;
  EXPECT_EQ(copy.engine(), Engine::vector);

  Executable exe;
  exe.name = "vector_and_gpsimd";
  exe.stream(Engine::vector).push_back(tensor_tensor(AluOp::add, out2, a, b));
  exe.stream(Engine::gpsimd).push_back(on_gpsimd);
  Core core(Spec::builtin());
  const RunResult r = core.run(exe, {}, RunOptions{.functional = false, .record = true});
  ASSERT_EQ(r.records.size(), 2u);
  for (const auto& rec : r.records) EXPECT_EQ(rec.start_ns, 0) << "both engines start at once";
}

TEST(DeviceTiming, MatmulInitiationIntervalAndFp32Factor) {
  const Spec spec = Spec::builtin("trn2");
  auto mm = [&](DType t, uint32_t n) {
    return compute_instruction_ns(spec, matmul(psum(0, 128, 0, DType::f32, {n}), sbuf(0, 128, 0, t, {128}),
                                               sbuf(0, 128, 1024, t, {n}), false));
  };
  EXPECT_NEAR(mm(DType::bf16, 512), 512 / spec.tensor.clock_ghz, 1e-9);
  EXPECT_DOUBLE_EQ(mm(DType::bf16, 16), mm(DType::bf16, 64));  // II floor
  EXPECT_DOUBLE_EQ(mm(DType::f32, 512), 4 * mm(DType::bf16, 512));
}

TEST(DeviceTiming, IndependentEnginesOverlap) {
  Executable exe;
  exe.name = "overlap";
  AccessPattern v = sbuf(0, 128, 0, DType::f32, {kCols});
  AccessPattern s = sbuf(0, 128, kCols * 4, DType::f32, {kCols});
  AccessPattern g = sbuf(0, 128, 2 * kCols * 4, DType::f32, {kCols});
  exe.stream(Engine::gpsimd).push_back(iota(g, 0, 1));
  exe.stream(Engine::vector).push_back(tensor_copy(v, s));
  exe.stream(Engine::scalar).push_back(activate(ActFunc::exp, s, g));
  Core core(Spec::builtin());
  const RunResult r = core.run(exe, {}, RunOptions{.functional = false});
  ASSERT_EQ(r.records.size(), 3u);
  double sum = 0;
  for (const auto& rec : r.records) sum += rec.end_ns - rec.start_ns;
  EXPECT_LT(r.duration_ns, 0.6 * sum);
  for (const auto& rec : r.records) EXPECT_EQ(rec.start_ns, 0);
}

TEST(DeviceTiming, SemaphoresOrderEngines) {
  Executable exe;
  exe.name = "ordered";
  exe.semaphore_count = 1;
  AccessPattern a = sbuf(0, 128, 0, DType::f32, {kCols});
  AccessPattern b = sbuf(0, 128, kCols * 4, DType::f32, {kCols});
  Instruction produce = iota(a, 0, 1);
  produce.updates.push_back({0, 1});
  Instruction consume = activate(ActFunc::exp, b, a);
  consume.waits.push_back({0, 1});
  exe.stream(Engine::gpsimd).push_back(produce);
  exe.stream(Engine::scalar).push_back(consume);
  Core core(Spec::builtin());
  const RunResult r = core.run(exe, {});  // functional on: the consumer reads what the producer wrote
  ASSERT_EQ(r.records.size(), 2u);
  const auto& first = r.records[0].engine == Engine::gpsimd ? r.records[0] : r.records[1];
  const auto& second = r.records[0].engine == Engine::gpsimd ? r.records[1] : r.records[0];
  EXPECT_GE(second.start_ns, first.end_ns);
  EXPECT_NEAR(second.semaphore_wait_ns, first.end_ns, 1e-3);
  EXPECT_DOUBLE_EQ(r.duration_ns, second.end_ns);
}

TEST(DeviceTiming, DeadlockIsReported) {
  Executable exe;
  exe.name = "stuck";
  exe.semaphore_count = 2;
  Instruction in = iota(sbuf(0, 1, 0, DType::f32, {4}), 0, 0);
  in.waits.push_back({1, 3});
  exe.stream(Engine::gpsimd).push_back(in);
  Core core(Spec::builtin());
  try {
    core.run(exe, {});
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("semaphore 1 >= 3"), std::string::npos) << m;
  }
}

TEST(DeviceTiming, SameProgramSameCycles) {
  const Spec spec = Spec::builtin();
  const Executable exe = rms_norm_program(spec, 512, 1024, 1e-6f);
  Core a(spec), b(spec);
  const RunResult ra = run_timing(a, exe), rb = run_timing(b, exe);
  const RunResult rc = run_timing(a, exe);
  EXPECT_EQ(ra.cycles, rb.cycles);
  EXPECT_EQ(ra.cycles, rc.cycles);
  ASSERT_EQ(ra.records.size(), rb.records.size());
  for (size_t i = 0; i < ra.records.size(); ++i) {
    EXPECT_EQ(ra.records[i].start_ns, rb.records[i].start_ns);
    EXPECT_EQ(ra.records[i].end_ns, rb.records[i].end_ns);
  }
}

TEST(DeviceTiming, FusedRmsNormIsNearItsHbmFloor) {
  const Spec spec = Spec::builtin();
  const uint32_t rows = 1024, cols = 4096;
  Core core(spec);
  const RunResult r = run_timing(core, rms_norm_program(spec, rows, cols, 1e-6f));
  const double floor_ns = 2.0 * rows * cols * 4 / spec.hbm.bytes_per_ns;
  EXPECT_GT(r.duration_ns, floor_ns);
  EXPECT_LT(r.duration_ns, 2 * floor_ns);
  EXPECT_GT(r.busy_ns[static_cast<int>(Engine::dma)], 0);
  EXPECT_GT(r.busy_ns[static_cast<int>(Engine::scalar)], 0);
}

TEST(DeviceTiming, RecordsCarryTrafficAndFlops) {
  const Spec spec = Spec::builtin();
  Core core(spec);
  const RunResult r = run_timing(core, rms_norm_program(spec, 128, 512, 1e-6f));
  uint64_t hbm_read = 0, hbm_written = 0, flops = 0;
  for (const auto& rec : r.records) {
    hbm_read += rec.hbm_bytes_read;
    hbm_written += rec.hbm_bytes_written;
    flops += rec.flops;
    EXPECT_EQ(rec.source_op, 0u);
    EXPECT_LE(rec.start_ns, rec.end_ns);
  }
  EXPECT_EQ(hbm_read, 128u * 512 * 4);
  EXPECT_EQ(hbm_written, 128u * 512 * 4);
  EXPECT_GT(flops, 128u * 512 * 2);
  EXPECT_EQ(r.cycles, spec.ns_to_cycles(r.duration_ns));
}

}  // namespace
}  // namespace sightline::device
