// Simulator speed, each figure beside its anchor measured in the same run.
//
//   * BM_RmsNormFunctional: functional + timing simulation of the RMSNorm-style program of
//     tests/device/test_programs.h. Every iteration times one Core::run and, separately, one memcpy of
//     the same number of bytes (the tensor in, the tensor out), so the two interleave and share the
//     machine's state. Counters: sim_GBps (HBM bytes read + written per second of simulation),
//     memcpy_GBps (bytes read + written per second of memcpy), ratio_to_memcpy (sim / memcpy; the aim
//     is >= 0.5). The benchmark's own time is the simulation's (manual time). One run before the
//     timed ones faults in the output tensor's pages, as the anchor's buffers are faulted in before it
//     is timed. cpu_ratio_to_memcpy is the same ratio from the thread's CPU time (the program runs on
//     the calling thread), which a machine loaded by other work moves much less than wall time.
//   * BM_RmsNormTimingOnly: timing-only simulation, instructions_per_s (aim: >= 10M).
//   * BM_ValidateRmsNorm: validate_executable of the same program, the check a runtime makes once per
//     loaded executable and core (Runtime validates at an executable's first run on a core). The runs
//     above are checked once before their loop and run with RunOptions::validated, as the runtime runs
//     them; this is that check's own cost.
//   * BM_MatmulFunctional/M/K/N: the tiled f32 matmul program; sim_GFLOPs of simulated matmul work per
//     second of wall time (the matmul uses the CPU backend's thread pool, so CPU time of one thread would
//     flatter it), cpu_GFLOPs the same per second of the process's CPU time (all threads), cpu_x_memcpy
//     that CPU time over the CPU time of a memcpy of the operands' bytes in the same iteration.
//     32/5120/512 is an ESM-2 650M feed-forward weight at 32 tokens: 40 matmuls of a [128, 32] stationary
//     x^T tile and a [128, 512] moving W^T tile, accumulating.
//   * BM_DmaTransposedLoad/ROWS/COLS/TILE/PARTS: DMAs that read an HBM [ROWS, COLS] tensor transposed,
//     each TILE rows of PARTS columns into PARTS partitions (4-byte elements, strided), beside a memcpy of
//     the same bytes. /5120/1280/512/16 is how the compiled linears load a [5120, 1280] f32 weight as
//     W^T (ESM-2 650M's intermediate dense): 800 DMAs of 32 KiB.
#include <chrono>
#include <cstring>
#include <ctime>
#include <random>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "device/test_programs.h"
#include "device/validate.h"

namespace sightline::device {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// CPU time of every thread of the process: the functional matmul runs on the thread pool.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<float> random_values(size_t n) {
  std::vector<float> x(n);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(gen);
  return x;
}

void BM_RmsNormFunctional(benchmark::State& state) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = static_cast<uint32_t>(state.range(0)), cols = static_cast<uint32_t>(state.range(1));
  Core core(spec);
  const Executable exe = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  validate_executable(exe, spec);  // once, as the runtime checks a loaded executable
  const std::vector<float> x = random_values(size_t{rows} * cols);
  const uint64_t bytes = x.size() * 4;
  const uint64_t in = core.hbm_allocate(bytes), out = core.hbm_allocate(bytes);
  core.hbm_write(in, x.data(), bytes);
  const std::vector<uint64_t> bindings{in, out};
  // The anchor copies the same bytes between two host buffers that are already faulted in.
  std::vector<uint8_t> from(bytes, 1), to(bytes, 2);
  RunResult r = core.run(exe, bindings, RunOptions{.functional = true, .record = true, .validated = true});
  double sim_s = 0, memcpy_s = 0, sim_cpu_s = 0, memcpy_cpu_s = 0;
  for (auto _ : state) {
    Clock::time_point t0 = Clock::now();
    double c0 = thread_cpu_seconds();
    r = core.run(exe, bindings, RunOptions{.functional = true, .record = true, .validated = true});
    const double run_s = seconds_since(t0);
    sim_cpu_s += thread_cpu_seconds() - c0;
    // As an input only: the mutable-reference DoNotOptimize of benchmark 1.7 ("+m,r") lets GCC treat the
    // double as rewritten in a general register, and the counter read after the loop was garbage
    // (device_us 0.0025 instead of 375 in BM_RmsNormFunctional).
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
    t0 = Clock::now();
    c0 = thread_cpu_seconds();
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::ClobberMemory();
    memcpy_cpu_s += thread_cpu_seconds() - c0;
    memcpy_s += seconds_since(t0);
    sim_s += run_s;
    state.SetIterationTime(run_s);
  }
  const double iterations = static_cast<double>(state.iterations());
  const double sim_gbps = static_cast<double>(r.hbm_bytes) * iterations / sim_s / 1e9;
  const double memcpy_gbps = 2.0 * static_cast<double>(bytes) * iterations / memcpy_s / 1e9;
  state.counters["sim_GBps"] = sim_gbps;
  state.counters["memcpy_GBps"] = memcpy_gbps;
  state.counters["ratio_to_memcpy"] = sim_gbps / memcpy_gbps;
  state.counters["cpu_ratio_to_memcpy"] =
      (static_cast<double>(r.hbm_bytes) / sim_cpu_s) / (2.0 * static_cast<double>(bytes) / memcpy_cpu_s);
  state.counters["instructions"] = static_cast<double>(r.instructions);
  state.counters["device_us"] = r.duration_ns / 1e3;
}

void BM_RmsNormTimingOnly(benchmark::State& state) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = static_cast<uint32_t>(state.range(0)), cols = static_cast<uint32_t>(state.range(1));
  Core core(spec);
  const Executable exe = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  validate_executable(exe, spec);  // once, as the runtime checks a loaded executable
  const uint64_t bytes = uint64_t{rows} * cols * 4;
  const std::vector<uint64_t> bindings{core.hbm_allocate(bytes), core.hbm_allocate(bytes)};
  RunResult r;
  for (auto _ : state) {
    r = core.run(exe, bindings, RunOptions{.functional = false, .record = true, .validated = true});
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
  }
  state.counters["instructions"] = static_cast<double>(r.instructions);
  state.counters["instructions_per_s"] =
      benchmark::Counter(static_cast<double>(r.instructions), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["device_us"] = r.duration_ns / 1e3;
}

void BM_ValidateRmsNorm(benchmark::State& state) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = static_cast<uint32_t>(state.range(0)), cols = static_cast<uint32_t>(state.range(1));
  const Executable exe = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  for (auto _ : state) validate_executable(exe, spec);
  state.counters["instructions"] = static_cast<double>(exe.instruction_count());
  state.counters["instructions_per_s"] = benchmark::Counter(static_cast<double>(exe.instruction_count()),
                                                            benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulFunctional(benchmark::State& state) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t m = static_cast<uint32_t>(state.range(0)), k = static_cast<uint32_t>(state.range(1)),
                 n = static_cast<uint32_t>(state.range(2));
  Core core(spec);
  const Executable exe = testing::matmul_program(m, k, n);
  const std::vector<float> a = random_values(size_t{k} * m), b = random_values(size_t{k} * n);
  const uint64_t a_addr = core.hbm_allocate(a.size() * 4), b_addr = core.hbm_allocate(b.size() * 4),
                 c_addr = core.hbm_allocate(uint64_t{m} * n * 4);
  core.hbm_write(a_addr, a.data(), a.size() * 4);
  core.hbm_write(b_addr, b.data(), b.size() * 4);
  const std::vector<uint64_t> bindings{a_addr, b_addr, c_addr};
  // The anchor: a memcpy of the operands' bytes between host buffers already faulted in, timed in
  // the process's CPU time as the run is (every thread of the pool counts).
  const uint64_t bytes = (a.size() + b.size()) * 4;
  std::vector<uint8_t> from(bytes, 1), to(bytes, 2);
  double run_cpu_s = 0, memcpy_cpu_s = 0;
  for (auto _ : state) {
    double c0 = process_cpu_seconds();
    RunResult r = core.run(exe, bindings, RunOptions{.functional = true, .record = false});
    run_cpu_s += process_cpu_seconds() - c0;
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
    c0 = process_cpu_seconds();
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::ClobberMemory();
    memcpy_cpu_s += process_cpu_seconds() - c0;
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["sim_GFLOPs"] = benchmark::Counter(2.0 * m * k * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpu_GFLOPs"] = 2.0 * m * k * n * iterations / run_cpu_s / 1e9;
  state.counters["cpu_ms"] = run_cpu_s / iterations * 1e3;
  state.counters["cpu_x_memcpy"] = run_cpu_s / memcpy_cpu_s;
}

// A transposing load: partition p of the SBUF tile takes column p of an HBM [rows, 128] f32 tensor
// (one 4-byte element every 512 bytes), the access pattern a matmul uses to bring a^T on chip. With a
// wider tensor ([rows, cols], cols a multiple of 128) one DMA per 128-column block reads it all, as a
// weight W[out, in] is brought on chip as W^T tiles (ESM-2 650M: in = 1280 or 5120).
void BM_DmaTransposedLoad(benchmark::State& state) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = static_cast<uint32_t>(state.range(0)), cols = static_cast<uint32_t>(state.range(1));
  const uint32_t tile = static_cast<uint32_t>(state.range(2)), parts = static_cast<uint32_t>(state.range(3));
  Core core(spec);
  Executable exe;
  exe.name = "transposed_load";
  exe.io = {{"x", DType::f32, {rows, cols}, IoKind::input}};
  exe.dma_queues.resize(1);
  for (uint32_t row = 0; row < rows; row += tile) {
    for (uint32_t block = 0; block < cols / parts; ++block) {
      AccessPattern column =
          hbm(0, (uint64_t{row} * cols + uint64_t{block} * parts) * 4, parts, 1, DType::f32, {tile});
      column.dims[0].stride = static_cast<int32_t>(cols);
      exe.dma_queues[0].push_back(dma_copy(sbuf(0, parts, 0, DType::f32, {tile}), column));
    }
  }
  const std::vector<float> x = random_values(size_t{rows} * cols);
  const uint64_t bytes = x.size() * 4;
  const std::vector<uint64_t> bindings{core.hbm_allocate(bytes)};
  core.hbm_write(bindings[0], x.data(), bytes);
  std::vector<uint8_t> from(bytes, 1), to(bytes, 2);
  double sim_s = 0, memcpy_s = 0;
  for (auto _ : state) {
    Clock::time_point t0 = Clock::now();
    RunResult r = core.run(exe, bindings, RunOptions{.functional = true, .record = false});
    const double run_s = seconds_since(t0);
    benchmark::DoNotOptimize(std::as_const(r.duration_ns));
    t0 = Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::ClobberMemory();
    memcpy_s += seconds_since(t0);
    sim_s += run_s;
    state.SetIterationTime(run_s);
  }
  const double iterations = static_cast<double>(state.iterations());
  const double sim_gbps = 2.0 * static_cast<double>(bytes) * iterations / sim_s / 1e9;
  const double memcpy_gbps = 2.0 * static_cast<double>(bytes) * iterations / memcpy_s / 1e9;
  state.counters["sim_GBps"] = sim_gbps;
  state.counters["memcpy_GBps"] = memcpy_gbps;
  state.counters["ratio_to_memcpy"] = sim_gbps / memcpy_gbps;
}

BENCHMARK(BM_RmsNormFunctional)->Args({4096, 4096})->Args({512, 512})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RmsNormTimingOnly)->Args({4096, 4096})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ValidateRmsNorm)->Args({4096, 4096})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulFunctional)->Args({1024, 1024, 512})->Args({32, 5120, 512})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DmaTransposedLoad)
    ->Args({16384, 128, 16384, 128})
    ->Args({4096, 5120, 4096, 128})
    ->Args({5120, 1280, 512, 16})
    ->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sightline::device

BENCHMARK_MAIN();
