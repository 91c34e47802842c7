// Rows broadcast to every partition (KernelBuilder::load_broadcast): the stride-0 DMA or the row once
// and a GpSimd copy, chosen by the cost model; the same bits either way, and kernels that load their
// parameters through it (layer_norm, linear with a folded bias) match the CPU reference on both paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "kernel_test_util.h"
#include "sightline/kernels/builder.h"

namespace sightline::kernel_tests {
namespace {

using namespace sightline::kernels;

// trn2 with a GpSimd engine so slow that the on-chip copy never pays: every broadcast is the DMA.
device::Spec slow_gpsimd() {
  device::Spec spec = trn2();
  spec.gpsimd.clock_ghz /= 1000;
  return spec;
}

bool on_chip(const device::Spec& spec, DType dtype, uint32_t n, uint16_t partitions = 128) {
  KernelBuilder b(spec, "choice");
  const uint32_t row = b.input("row", dtype, {n});
  const Tile t = b.sbuf(dtype, n, 0, "t");
  return b.broadcast_row_on_chip(t.rows(partitions), hbm_pattern(row, dtype, 0, 1, 0, {{n, 1}}));
}

size_t all_reduces(const device::Executable& exe) {
  size_t count = 0;
  for (const device::Instruction& in : exe.stream(device::Engine::gpsimd)) {
    count += in.opcode == device::Opcode::partition_all_reduce;
  }
  return count;
}

// DMA transfers that read HBM with a partition stride of 0 onto several partitions.
size_t broadcast_dmas(const device::Executable& exe) {
  size_t count = 0;
  for (const auto& queue : exe.dma_queues) {
    for (const device::Instruction& in : queue) {
      count += in.src0.memory == device::Memory::hbm && in.src0.partition_stride == 0 && in.src0.partition_count > 1;
    }
  }
  return count;
}

TEST(LoadBroadcast, EachPathIsChosenWhereItsModeledCostIsLower) {
  // A short row: the broadcast DMA's bytes are few, and the on-chip path pays a second instruction.
  EXPECT_FALSE(on_chip(trn2(), DType::f32, 16));
  EXPECT_FALSE(on_chip(trn2(), DType::f32, 64));
  // A long row: 128 reads of it cost more HBM time than one read and a GpSimd pass.
  EXPECT_TRUE(on_chip(trn2(), DType::f32, 4096));
  EXPECT_TRUE(on_chip(trn2(), DType::bf16, 4096));
  // The same long row where GpSimd is slow, or where HBM and the queues are fast: the DMA.
  EXPECT_FALSE(on_chip(slow_gpsimd(), DType::f32, 4096));
  device::Spec fast_dma = trn2();
  fast_dma.dma.queue_bytes_per_ns *= 100;
  fast_dma.hbm.bytes_per_ns *= 100;
  EXPECT_FALSE(on_chip(fast_dma, DType::f32, 4096));
  // One partition is no broadcast; integers do not pass exactly through the f32 copy.
  EXPECT_FALSE(on_chip(trn2(), DType::f32, 4096, 1));
  EXPECT_FALSE(on_chip(trn2(), DType::i32, 4096));
}

// row [n] -> every partition of a [128, n] tile (load_broadcast) -> out [128, n].
device::Executable broadcast_program(const device::Spec& spec, DType dtype, uint32_t n) {
  KernelBuilder b(spec, "broadcast");
  const uint32_t row = b.input("row", dtype, {n});
  const uint32_t out = b.output("out", dtype, {128, n});
  const Tile t = b.sbuf(dtype, n, 0, "t");
  b.load_broadcast(t.ap(), hbm_pattern(row, dtype, 0, 1, 0, {{n, 1}}));
  b.store(hbm_rows(out, dtype, 0, 128, n, n), t.ap());
  return b.build();
}

Tensor run_broadcast(const device::Spec& spec, const Tensor& row) {
  const uint32_t n = static_cast<uint32_t>(row.numel());
  const device::Executable exe = broadcast_program(spec, row.dtype(), n);
  device::Core core(spec);
  Tensor out = empty({128, n}, row.dtype());
  const uint64_t ra = core.hbm_allocate(row.nbytes()), oa = core.hbm_allocate(out.nbytes());
  core.hbm_write(ra, row.raw_data(), row.nbytes());
  core.run(exe, std::vector<uint64_t>{ra, oa});
  core.hbm_read(oa, out.raw_data(), out.nbytes());
  return out;
}

TEST(LoadBroadcast, BothPathsCopyTheRowsBitsToEveryPartition) {
  const uint32_t n = 4096;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    // Values a multiply could alter if it were not an exact copy: signed zero, infinities, NaN, and
    // (f32) a subnormal.
    Tensor specials = random({n}).to(dtype).contiguous();
    const float values[] = {-0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
    for (size_t i = 0; i < std::size(values); ++i) {
      const Tensor v = from_vector(std::span<const float>(&values[i], 1), {1}).to(dtype);
      std::memcpy(static_cast<char*>(specials.raw_data()) + i * specials.element_size(), v.raw_data(),
                  specials.element_size());
    }
    const device::Executable chip = broadcast_program(trn2(), dtype, n), dma = broadcast_program(slow_gpsimd(), dtype, n);
    ASSERT_EQ(all_reduces(chip), 1u);
    EXPECT_EQ(broadcast_dmas(chip), 0u);
    EXPECT_EQ(all_reduces(dma), 0u);
    EXPECT_GT(broadcast_dmas(dma), 0u);
    for (const bool chip_path : {true, false}) {
      const Tensor out = run_broadcast(chip_path ? trn2() : slow_gpsimd(), specials);
      for (int64_t p = 0; p < 128; ++p) {
        ASSERT_EQ(std::memcmp(static_cast<const char*>(out.raw_data()) + p * specials.nbytes(), specials.raw_data(),
                              specials.nbytes()),
                  0)
            << dtype_name(dtype) << " partition " << p << (chip_path ? " on chip" : " by DMA");
      }
    }
  }
}

// `op` on both paths: each matches the CPU reference, the two device results are the same bits, and
// the kernel took the path meant (a GpSimd copy on trn2, broadcast DMAs only with a slow GpSimd).
void check_both_paths(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs, double tol) {
  const DeviceResult chip = check_op(op, inputs, attrs, tol, trn2());
  const DeviceResult dma = check_op(op, inputs, attrs, tol, slow_gpsimd());
  EXPECT_GT(all_reduces(chip.exe), 0u);
  EXPECT_EQ(broadcast_dmas(chip.exe), 0u);
  EXPECT_EQ(all_reduces(dma.exe), 0u);
  EXPECT_GT(broadcast_dmas(dma.exe), 0u);
  ASSERT_EQ(chip.out.nbytes(), dma.out.nbytes());
  EXPECT_EQ(std::memcmp(chip.out.raw_data(), dma.out.raw_data(), chip.out.nbytes()), 0);
}

OpAttrs eps(double e) {
  OpAttrs a;
  a.eps = e;
  return a;
}

TEST(LoadBroadcast, LayerNormParametersOnBothPaths) {
  check_both_paths(OpId::layer_norm, {random({300, 2048}), random({2048}), random({2048})}, eps(1e-5), 1e-4);
  check_both_paths(OpId::layer_norm, {random({128, 4096}), random({4096}), random({4096})}, eps(1e-5), 1e-4);
  check_both_paths(OpId::layer_norm,
                   {random({200, 4096}, DType::bf16), random({4096}, DType::bf16), random({4096}, DType::bf16)},
                   eps(1e-5), 3e-2);
  check_both_paths(OpId::rms_norm, {random({300, 4096}), random({4096})}, eps(1e-6), 1e-4);
}

TEST(LoadBroadcast, LinearFoldedBiasOnBothPaths) {
  // f32 shapes whose bias the kernel adds in the evacuation (fold_bias_into_evacuation), broadcast to the
  // result tile's rows: one result tile, and ESM-2 t12's MLP up-projection over 256 tokens (two).
  check_both_paths(OpId::linear, {random({128, 256}), random({512, 256}), random({512})}, {}, 1e-4);
  check_both_paths(OpId::linear, {random({2, 128, 480}), random({1920, 480}), random({1920})}, {}, 1e-4);
}

}  // namespace
}  // namespace sightline::kernel_tests
