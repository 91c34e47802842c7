// Kernel builder speed (an eager cache miss pays one build; BM_BuildMatmulBf16 at llama3_8b's FFN shapes)
// and the simulation of the built-in fused
// rms_norm over [4096, 4096] f32: wall time, instructions per second, device time against the HBM floor.
// The eager bf16 matmul [n, n] x [n, n]: modeled device time, MFU (FLOPs over the Tensor engine's
// peak for that time), arithmetic intensity and HBM bytes against the minimum (each operand read
// once, the output written once); at 4096 b no longer fits SBUF and streams past each a^T block.
// Modeled figures are deterministic; the host time is only informational.
#include <random>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "device/core.h"
#include "kernels/eager.h"

namespace sightline::kernels {
namespace {

device::Executable rms_norm_kernel(const device::Spec& spec, int64_t n) {
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {n, n}),
                   w = TensorDesc::contiguous(DType::f32, {n});
  const TensorDesc inputs[] = {x, w};
  OpAttrs attrs;
  attrs.eps = 1e-6;
  return build_eager_kernel(OpId::rms_norm, inputs, attrs, x, spec);
}

void BM_BuildFusedRmsNorm(benchmark::State& state) {
  const device::Spec spec = device::Spec::builtin("trn2");
  size_t instructions = 0;
  for (auto _ : state) instructions = rms_norm_kernel(spec, state.range(0)).instruction_count();
  state.counters["instructions"] = static_cast<double>(instructions);
}

// Building the eager bf16 matmul [m, k] x [k, n]: at llama3_8b's FFN shape (32 tokens, 4096 -> 14336)
// tens of thousands of instructions, each given its semaphore waits by the hazard tracker.
void BM_BuildMatmulBf16(benchmark::State& state) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const TensorDesc inputs[] = {TensorDesc::contiguous(DType::bf16, {m, k}), TensorDesc::contiguous(DType::bf16, {k, n})};
  const TensorDesc out = TensorDesc::contiguous(DType::bf16, {m, n});
  size_t instructions = 0;
  for (auto _ : state) instructions = build_eager_kernel(OpId::matmul, inputs, OpAttrs{}, out, spec).instruction_count();
  state.counters["instructions"] = static_cast<double>(instructions);
  state.counters["instructions_per_s"] =
      benchmark::Counter(static_cast<double>(instructions), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SimulateFusedRmsNorm(benchmark::State& state) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t n = state.range(0);
  const bool functional = state.range(1) != 0;
  const device::Executable exe = rms_norm_kernel(spec, n);
  device::Core core(spec);
  std::vector<float> x(static_cast<size_t>(n * n)), w(static_cast<size_t>(n), 1.0f);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(gen);
  const std::vector<uint64_t> io{core.hbm_allocate(x.size() * 4), core.hbm_allocate(w.size() * 4),
                                 core.hbm_allocate(x.size() * 4)};
  core.hbm_write(io[0], x.data(), x.size() * 4);
  core.hbm_write(io[1], w.data(), w.size() * 4);
  device::RunResult r;
  for (auto _ : state) {
    r = core.run(exe, io, {.functional = functional, .record = true});
    // As an input only: the mutable-reference DoNotOptimize of benchmark 1.7 ("+m,r") lets GCC treat the
    // double as rewritten in a general register, and the counter read after the loop was garbage
    // (device_us 0.0025 instead of 375 in BM_RmsNormFunctional).
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
  }
  const double floor_ns = (2.0 * x.size() + w.size()) * 4 / spec.hbm.bytes_per_ns;
  state.counters["instructions_per_s"] =
      benchmark::Counter(static_cast<double>(r.instructions), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["device_us"] = r.duration_ns / 1e3;
  state.counters["hbm_floor_us"] = floor_ns / 1e3;
  state.counters["device_over_floor"] = r.duration_ns / floor_ns;
}

void BM_SimulateMatmulBf16(benchmark::State& state) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t n = state.range(0);
  const TensorDesc x = TensorDesc::contiguous(DType::bf16, {n, n});
  const TensorDesc inputs[] = {x, x};
  const device::Executable exe = build_eager_kernel(OpId::matmul, inputs, OpAttrs{}, x, spec);
  device::Core core(spec);
  const uint64_t bytes = static_cast<uint64_t>(n * n) * dtype_size(DType::bf16);
  const std::vector<uint64_t> io{core.hbm_allocate(bytes), core.hbm_allocate(bytes), core.hbm_allocate(bytes)};
  device::RunResult r;
  for (auto _ : state) {
    r = core.run(exe, io, {.functional = false, .record = false});
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double peak_flops_per_ns = 2.0 * spec.tensor.array_rows * spec.tensor.array_cols * spec.tensor.clock_ghz;
  const double min_bytes = 3.0 * static_cast<double>(bytes);
  state.counters["device_us"] = r.duration_ns / 1e3;
  state.counters["tensor_floor_us"] = flops / peak_flops_per_ns / 1e3;
  state.counters["mfu_percent"] = 100.0 * flops / peak_flops_per_ns / r.duration_ns;
  state.counters["hbm_over_min"] = static_cast<double>(r.hbm_bytes) / min_bytes;
  state.counters["flop_per_hbm_byte"] = flops / static_cast<double>(r.hbm_bytes);
  state.counters["ridge_flop_per_byte"] = peak_flops_per_ns / spec.hbm.bytes_per_ns;
  state.counters["instructions"] = static_cast<double>(r.instructions);
}

BENCHMARK(BM_BuildFusedRmsNorm)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildMatmulBf16)->Args({32, 4096, 14336})->Args({32, 14336, 4096})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateFusedRmsNorm)->Args({4096, 1})->Args({4096, 0})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateMatmulBf16)->Arg(1024)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sightline::kernels

BENCHMARK_MAIN();
