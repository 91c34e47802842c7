// Tiled matmul and linear on the Tensor engine against the CPU reference.
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "device/cost_model.h"
#include "kernel_test_util.h"

namespace sightline::kernel_tests {
namespace {

TEST(EagerMatmul, TwoDimensionalPartialTiles) {
  // M, K, N all cross tile boundaries: 2 stationary tiles, 2 K tiles, 2 moving tiles.
  const DeviceResult r = check_op(OpId::matmul, {random({130, 200}), random({200, 600})}, {}, 1e-4);
  EXPECT_GT(r.exe.stream(device::Engine::tensor).size(), 0u);
}

TEST(EagerMatmul, OneDimensionalAndBatchedOperands) {
  check_op(OpId::matmul, {random({70}), random({70, 30})}, {}, 1e-4);
  check_op(OpId::matmul, {random({30, 70}), random({70})}, {}, 1e-4);
  check_op(OpId::matmul, {random({70}), random({70})}, {}, 1e-4);
  check_op(OpId::matmul, {random({2, 3, 40, 50}), random({50, 30})}, {}, 1e-4);
  check_op(OpId::matmul, {random({3, 40, 50}), random({1, 50, 20})}, {}, 1e-4);
  check_op(OpId::matmul, {random({2, 1, 9, 20}), random({3, 20, 7})}, {}, 1e-4);
}

TEST(EagerMatmul, TransposedOperandsAndDtypes) {
  check_op(OpId::matmul, {random({60, 140}).transpose(0, 1), random({90, 60}).transpose(0, 1)}, {}, 1e-4);
  check_op(OpId::matmul, {random({64, 256}, DType::bf16), random({256, 64}, DType::bf16)}, {}, 3e-2);
  check_op(OpId::matmul, {random_ints({20, 30}, 6), random_ints({30, 10}, 6)}, {}, 0);
}

// bf16 operands and an f32 result (OpAttrs::out_dtype, what autocast uses): the Tensor engine's f32
// sum leaves PSUM unrounded. Device and CPU add the same products in f32, so they agree far inside
// bf16's rounding, and the result keeps bits that the bf16 result rounds away.
TEST(EagerMatmul, Bf16OperandsWithAnF32Result) {
  OpAttrs f32_result;
  f32_result.out_dtype = DType::f32;
  const std::vector<std::vector<Tensor>> cases = {
      {random({130, 200}, DType::bf16), random({200, 600}, DType::bf16)},    // partial tiles, 2 panels
      {random({300, 700}, DType::bf16), random({700, 1100}, DType::bf16)},   // resident, 6 K tiles
      {random({3, 40, 50}, DType::bf16), random({1, 50, 20}, DType::bf16)},  // batched
      {random({70}, DType::bf16), random({70, 30}, DType::bf16)}};
  for (const std::vector<Tensor>& operands : cases) {
    const DeviceResult r = check_op(OpId::matmul, operands, f32_result, 1e-5);
    ASSERT_EQ(r.out.dtype(), DType::f32);
    const Tensor rounded = dispatch(OpId::matmul, operands, {}).to(DType::f32);
    EXPECT_GT(amax(abs(sub(r.out.to(Device::cpu()), rounded))).item(), 0.0)
        << "the f32 result should keep bits the bf16 one rounds away";
  }
  const DeviceResult r = check_op(
      OpId::linear, {random({2, 70, 150}, DType::bf16), random({40, 150}, DType::bf16), random({40}, DType::bf16)},
      f32_result, 1e-5);
  EXPECT_EQ(r.out.dtype(), DType::f32);
  // Only a wider float result than 16-bit operands: anything else says what is accepted.
  OpAttrs narrowing;
  narrowing.out_dtype = DType::bf16;
  try {
    const std::vector<Tensor> f32_operands = {random({4, 8}), random({8, 4})};
    dispatch(OpId::matmul, f32_operands, narrowing);
    ADD_FAILURE() << "an f32 matmul with out_dtype bf16 should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out_dtype f32 takes bf16 or f16 operands"), std::string::npos) << e.what();
  }
}

TEST(EagerLinear, WithAndWithoutBias) {
  check_op(OpId::linear, {random({2, 70, 150}), random({40, 150}), random({40})}, {}, 1e-4);
  check_op(OpId::linear, {random({130, 33}), random({520, 33})}, {}, 1e-4);
  check_op(OpId::linear, {random({33}), random({9, 33}), random({9})}, {}, 1e-4);
}

// A trn2 core with `sbuf_kib` KiB of SBUF per partition: small enough that modest operands no longer
// fit, so the blocked and streaming schedules run at sizes the CPU reference checks quickly.
device::Spec trn2_with_sbuf(uint32_t sbuf_kib) {
  device::Spec spec = trn2();
  spec.sbuf_bytes_per_partition = sbuf_kib * 1024;
  return spec;
}

uint64_t bytes_of(const Tensor& t) { return static_cast<uint64_t>(t.nbytes()); }

TEST(EagerMatmul, ResidentOperandsCrossHbmOnce) {
  // M, K, N are not multiples of 128 / 512: 3 row tiles, 5 full K tiles + 60 rows, 3 panels.
  for (DType dtype : {DType::bf16, DType::f32}) {
    const Tensor a = random({300, 700}, dtype), b = random({700, 1100}, dtype);
    const DeviceResult r = check_op(OpId::matmul, {a, b}, {}, dtype == DType::bf16 ? 3e-2 : 1e-4);
    // Both operands fit trn2's SBUF: every byte of a and b is read once and the output written once.
    EXPECT_EQ(r.run.hbm_bytes, bytes_of(a) + bytes_of(b) + bytes_of(r.out)) << dtype_name(dtype);
  }
}

TEST(EagerMatmul, BlocksWhenOperandsDoNotFitSbuf) {
  const Tensor a = random({520, 300}), b = random({300, 1100});
  const uint64_t minimum = bytes_of(a) + bytes_of(b) + 520 * 1100 * 4;
  const uint64_t row_tiles = (520 + 127) / 128;
  // 40 KiB: all of b stays resident, a^T in blocks of rows: still the minimum traffic.
  DeviceResult r = check_op(OpId::matmul, {a, b}, {}, 1e-4, trn2_with_sbuf(40));
  EXPECT_EQ(r.run.hbm_bytes, minimum);
  // 36 KiB: b's panels stream past each a^T block (256 rows), so b is read once per block: more than
  // once, and fewer times than once per 128-row tile (what a schedule without reuse reads).
  r = check_op(OpId::matmul, {a, b}, {}, 1e-4, trn2_with_sbuf(36));
  EXPECT_GT(r.run.hbm_bytes, minimum);
  EXPECT_LT(r.run.hbm_bytes, minimum + (row_tiles - 1) * bytes_of(b));
  // 20 KiB: not even one block fits; the streaming schedule still computes the right product.
  r = check_op(OpId::matmul, {a, b}, {}, 1e-4, trn2_with_sbuf(20));
  EXPECT_GT(r.run.hbm_bytes, minimum + (row_tiles - 1) * bytes_of(b));
}

TEST(EagerMatmul, BatchedAndTransposedOperandsWithResidentSchedule) {
  check_op(OpId::matmul, {random({3, 200, 300}, DType::bf16), random({300, 600}, DType::bf16)}, {}, 3e-2);
  check_op(OpId::matmul, {random({2, 200, 300}, DType::bf16), random({2, 300, 600}, DType::bf16)}, {}, 3e-2);
  check_op(OpId::matmul, {random({300, 260}).transpose(0, 1), random({700, 300}).transpose(0, 1)}, {}, 1e-4,
           trn2_with_sbuf(40));
}

TEST(EagerLinear, BiasWithBlockedOperands) {
  // 224 KiB: everything resident; 44: b resident, x^T in blocks; 38: b's panels stream past each
  // block; 24: the streaming fallback. The bias is one more accumulation step in every schedule.
  for (uint32_t kib : {224u, 44u, 38u, 24u}) {
    check_op(OpId::linear, {random({2, 150, 260}), random({1100, 260}), random({1100})}, {}, 1e-4,
             trn2_with_sbuf(kib));
  }
}

// A product of few rows runs weight-stationary (eager_matmul.cpp, weight_stationary_cost): each
// 128-column block of b is the stationary operand and a^T the moving one, so a K tile's matmul streams
// the rows instead of the panel's columns, and one transpose per block brings y^T back to y. The result
// is the CPU reference's; the Tensor engine's busy time is below what the activation-stationary matmuls
// alone would take (every K tile of every panel streaming its columns), transposes included. Only where
// the Tensor engine bounds a panel: bf16 [32, 2048] panels take 5.8 us to cross HBM, longer than their
// matmuls either way (3.4 us activation-stationary), so that product keeps the activation-stationary
// schedule.
TEST(EagerLinear, FewRowsRunWeightStationary) {
  struct Case {
    DType dtype;
    int64_t m, n, k;
    bool bias;
    bool weight_stationary;
  };
  // 1144 columns: two panels of 512 (four blocks each) and one of 120 (a partial block); K = 1280: ten K
  // tiles; 700: a partial K tile. 64 rows: the Tensor engine's minimum initiation interval.
  for (const Case& c : {Case{DType::f32, 32, 1144, 1280, true, true}, Case{DType::f32, 64, 1024, 700, false, true},
                        Case{DType::bf16, 32, 1024, 2048, true, false}}) {
    SCOPED_TRACE(fmt::format("{} [{}, {}] x [{}, {}]^T", dtype_name(c.dtype), c.m, c.k, c.n, c.k));
    std::vector<Tensor> inputs = {random({c.m, c.k}, c.dtype), random({c.n, c.k}, c.dtype)};
    if (c.bias) inputs.push_back(random({c.n}, c.dtype));
    const DeviceResult r = check_op(OpId::linear, inputs, {}, c.dtype == DType::bf16 ? 3e-2 : 1e-4);
    const int64_t k_tiles = (c.k + 127) / 128, blocks = (c.n + 127) / 128;
    int64_t stationary_weight = 0, transposes = 0;
    for (const device::Instruction& in : r.exe.stream(device::Engine::tensor)) {
      // src0 is the stationary operand, src1 the moving one: a weight block times a^T ...
      if (in.src1.dims[0].size == static_cast<uint32_t>(c.m) && in.src1.dtype == c.dtype &&
          in.src1.partition_count != in.src1.dims[0].size)
        ++stationary_weight;
      // ... or y^T times the identity ([w, w]), into the rows of y.
      if (in.src0.dtype == DType::f32 && in.src0.dims[0].size == static_cast<uint32_t>(c.m) &&
          in.dst.partition_count == c.m && in.src1.partition_count == in.src1.dims[0].size &&
          in.src1.partition_count == in.src0.partition_count)
        ++transposes;
    }
    EXPECT_EQ(stationary_weight, c.weight_stationary ? k_tiles * blocks : 0);
    EXPECT_EQ(transposes, c.weight_stationary ? blocks : 0);
    double activation_stationary = 0;
    for (int64_t n0 = 0; n0 < c.n; n0 += 512) {
      const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(512, c.n - n0));
      activation_stationary +=
          double(k_tiles) * device::compute_instruction_ns(
                                trn2(), device::matmul(device::psum(0, static_cast<uint16_t>(c.m), 0, DType::f32, {np}),
                                                       device::sbuf(0, 128, 0, c.dtype, {static_cast<uint32_t>(c.m)}),
                                                       device::sbuf(0, 128, 0, c.dtype, {np}), true));
    }
    if (c.weight_stationary) {
      EXPECT_LT(r.run.busy_ns[static_cast<size_t>(device::Engine::tensor)], activation_stationary);
    } else {
      EXPECT_NEAR(r.run.busy_ns[static_cast<size_t>(device::Engine::tensor)], activation_stationary, 1e-6);
    }
  }
}

// A linear's weight prefetched ahead of its kernel is a stream of loads with nothing behind them to
// wait for, so it goes in pieces of at least stream_min_piece_bytes (docs/hardware-model.md §1.4):
// timed alone (timing only), no slower than the same K tiles loaded with dma_split's 4 KiB floor or in
// one transfer per K tile. 480 x 480 f32 (ESM-2 t12_35M's projections) and 2048 x 512 bf16.
double weight_load_ns(DType dtype, int64_t n, int64_t k, int how) {  // 0: prefetch, 1: dma_split, 2: whole
  kernels::KernelBuilder b(trn2(), "weight");
  const kernels::TensorDesc w = kernels::TensorDesc::contiguous(dtype, {n, k});
  const uint32_t io = b.input("w", dtype, {n, k});
  const std::optional<kernels::PrefetchedWeight> p =
      kernels::allocate_linear_weight(b, w, std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(p.has_value());
  if (how == 0) {
    kernels::prefetch_linear_weight(b, *p, io);
  } else {
    const uint32_t panel = static_cast<uint32_t>(std::min<int64_t>(n, 512));
    for (int64_t n0 = 0; n0 < n; n0 += panel) {
      const kernels::Tile& t = p->panels.at(static_cast<size_t>(n0 / panel));
      for (int64_t k0 = 0; k0 < k; k0 += 128) {
        const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(128, k - k0));
        const device::AccessPattern dst = t.region(0, kp, static_cast<uint32_t>(k0 / 128) * panel, panel);
        const device::AccessPattern src =
            kernels::hbm_pattern(io, dtype, n0 * k + k0, kp, 1, {{panel, static_cast<int32_t>(k)}});
        if (how == 1) {
          b.dma_split(dst, src);
        } else {
          b.dma(dst, src);
        }
      }
    }
  }
  const device::Executable exe = b.build();
  device::Core core(trn2());
  std::vector<uint64_t> addresses;
  for (const auto& t : exe.io) addresses.push_back(core.hbm_allocate(t.bytes()));
  return core.run(exe, addresses, device::RunOptions{.functional = false}).duration_ns;
}

// Measured (trn2): f32 480 x 480 3993.4 ns prefetched, 4467.0 ns by dma_split, 11985.2 ns in one
// transfer per K tile; bf16 2048 x 512 7093.2, 13658.7 and 7093.2 ns (its K tiles of 128 KiB spread over
// the 16 queues one each, which is what the rule gives too).
TEST(EagerMatmul, PrefetchedWeightLoadsInStreamPieces) {
  for (const auto& [dtype, n, k] : {std::tuple<DType, int64_t, int64_t>{DType::f32, 480, 480}, {DType::bf16, 2048, 512}}) {
    const double prefetch = weight_load_ns(dtype, n, k, 0), split = weight_load_ns(dtype, n, k, 1),
                 whole = weight_load_ns(dtype, n, k, 2);
    std::printf("%s %lldx%lld: prefetch %.1f ns, dma_split %.1f ns, one transfer per K tile %.1f ns\n",
                std::string(dtype_name(dtype)).c_str(), static_cast<long long>(n), static_cast<long long>(k), prefetch,
                split, whole);
    EXPECT_LE(prefetch, split + 1e-6) << dtype_name(dtype);
    EXPECT_LE(prefetch, whole + 1e-6) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace sightline::kernel_tests
