// Simulator speed: wall time to simulate the RMSNorm-style kernel over a [4096, 4096] f32 tensor
// (64 MiB in, 64 MiB out), functional + timing, and the instructions simulated per second.
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "device/test_programs.h"

namespace sightline::device {
namespace {

void run_rms_norm(benchmark::State& state, bool functional) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = static_cast<uint32_t>(state.range(0)), cols = static_cast<uint32_t>(state.range(1));
  Core core(spec);
  const Executable exe = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  std::vector<float> x(size_t{rows} * cols);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(gen);
  const uint64_t in = core.hbm_allocate(x.size() * 4), out = core.hbm_allocate(x.size() * 4);
  core.hbm_write(in, x.data(), x.size() * 4);
  const std::vector<uint64_t> bindings{in, out};
  RunResult r;
  for (auto _ : state) {
    r = core.run(exe, bindings, RunOptions{.functional = functional, .record = true});
    benchmark::DoNotOptimize(r.duration_ns);
  }
  const double floor_ns = 2.0 * x.size() * 4 / spec.hbm.bytes_per_ns;
  state.counters["instructions"] = static_cast<double>(r.instructions);
  state.counters["instructions_per_s"] =
      benchmark::Counter(static_cast<double>(r.instructions), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["device_us"] = r.duration_ns / 1e3;
  state.counters["hbm_floor_us"] = floor_ns / 1e3;
  state.counters["device_over_floor"] = r.duration_ns / floor_ns;
}

void BM_RmsNormFunctionalAndTiming(benchmark::State& state) { run_rms_norm(state, true); }
void BM_RmsNormTimingOnly(benchmark::State& state) { run_rms_norm(state, false); }

BENCHMARK(BM_RmsNormFunctionalAndTiming)->Args({4096, 4096})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RmsNormTimingOnly)->Args({4096, 4096})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sightline::device

BENCHMARK_MAIN();
