// Host cost of dispatching a tiny op, and CPU reference throughput next to memcpy measured in the
// same run. bytes_per_second counts bytes read plus bytes written for every benchmark, so the
// ratios to BM_Memcpy are apples to apples (memcpy reads N and writes N bytes).
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "sightline/sightline.h"

using namespace sightline;

namespace {

constexpr int64_t kElements = 16 << 20;  // 16M f32 = 64 MiB per tensor

void BM_DispatchTinyAdd(benchmark::State& state) {
  const Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.storage().get());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DispatchTinyAdd);

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> src(static_cast<size_t>(kElements), 1.0f), dst(static_cast<size_t>(kElements));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4 * 2);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

// Seeded normals: Generator::fill_normal (randn's path, a block of pairs at a time) beside the same
// values drawn one next_normal() call each, in the same run; items are values, 4 bytes written each.
void BM_NextNormalLoop(benchmark::State& state) {
  std::vector<float> out(static_cast<size_t>(kElements));
  Generator g(1);
  for (auto _ : state) {
    for (float& v : out) v = static_cast<float>(g.next_normal());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}
BENCHMARK(BM_NextNormalLoop)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_FillNormal(benchmark::State& state) {
  std::vector<float> out(static_cast<size_t>(kElements));
  Generator g(1);
  for (auto _ : state) {
    g.fill_normal(out.data(), out.size());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
}
BENCHMARK(BM_FillNormal)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AddF32(benchmark::State& state) {
  const Tensor a = rand({kElements}), b = rand({kElements});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.storage().get());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4 * 3);
}
BENCHMARK(BM_AddF32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MulScalarF32(benchmark::State& state) {
  const Tensor a = rand({kElements});
  for (auto _ : state) {
    Tensor c = mul(a, 2.0);
    benchmark::DoNotOptimize(c.storage().get());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4 * 2);
}
BENCHMARK(BM_MulScalarF32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SumAllF32(benchmark::State& state) {
  const Tensor a = rand({kElements});
  for (auto _ : state) {
    Tensor s = sum(a);
    benchmark::DoNotOptimize(s.storage().get());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}
BENCHMARK(BM_SumAllF32)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MeanRowsF32(benchmark::State& state) {
  const Tensor a = rand({4096, 4096});
  for (auto _ : state) {
    Tensor s = mean(a, {-1}, true);
    benchmark::DoNotOptimize(s.storage().get());
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}
BENCHMARK(BM_MeanRowsF32)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
