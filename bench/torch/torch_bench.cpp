// sightline beside libtorch (Debian's libtorch-dev, 1.13) in one process: the host cost of a
// dispatched 1-element add, what recording it with each profiler adds, collecting 1M recorded
// events, and writing them as a Chrome trace. Built only where libtorch is installed
// (bench/torch/CMakeLists.txt); read the lines in pairs (sightline_* next to torch_*): the ratios
// of bench/README.md are taken from one run of this binary.
//
// torch's side uses its legacy profiler (torch.autograd.profiler.profile(use_kineto=False)): Debian
// builds libtorch without Kineto. Its events are RECORD_FUNCTION scopes; sightline's are the
// dispatcher's op events under profiler::profile.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <benchmark/benchmark.h>

#include "profiler/chrome_trace.h"
#include "sightline/host_clock.h"
#include "sightline/profiler/events.h"
#include "sightline/profiler/profile.h"
#include "sightline/profiler/record.h"
#include "sightline/sightline.h"

namespace {

namespace sp = sightline::profiler;
namespace tp = torch::autograd::profiler;

constexpr int kEvents = 1'000'000;

// ---------------------------------------------------------------------------------------------
// Dispatch of a 1-element add (host cost: dispatch, shape logic, output allocation, kernel).

void BM_sightline_tiny_add(benchmark::State& state) {
  const sightline::Tensor a = sightline::ones({1}), b = sightline::ones({1});
  for (auto _ : state) {
    sightline::Tensor c = sightline::add(a, b);
    benchmark::DoNotOptimize(c.storage().get());
  }
}
BENCHMARK(BM_sightline_tiny_add);

void BM_torch_tiny_add(benchmark::State& state) {
  const at::Tensor a = at::ones({1}), b = at::ones({1});
  for (auto _ : state) {
    at::Tensor c = at::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_torch_tiny_add);

// torch without autograd bookkeeping (torch.inference_mode()), nearer to what sightline does.
void BM_torch_tiny_add_inference_mode(benchmark::State& state) {
  c10::InferenceMode guard;
  const at::Tensor a = at::ones({1}), b = at::ones({1});
  for (auto _ : state) {
    at::Tensor c = at::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_torch_tiny_add_inference_mode);

// ---------------------------------------------------------------------------------------------
// The same add while each profiler records it: the difference to the lines above is the cost of
// recording one op event.

void BM_sightline_tiny_add_profiled(benchmark::State& state) {
  const sightline::Tensor a = sightline::ones({1}), b = sightline::ones({1});
  sp::profile prof({.activities = {sp::ProfilerActivity::CPU}, .max_events = std::uint64_t{1} << 32});
  prof.start();
  for (auto _ : state) {
    sightline::Tensor c = sightline::add(a, b);
    benchmark::DoNotOptimize(c.storage().get());
  }
  prof.stop();  // after the loop: not timed
}
BENCHMARK(BM_sightline_tiny_add_profiled)->Iterations(1'000'000);

void BM_torch_tiny_add_profiled(benchmark::State& state) {
  const at::Tensor a = at::ones({1}), b = at::ones({1});
  tp::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  for (auto _ : state) {
    at::Tensor c = at::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  (void)tp::disableProfilerLegacy();  // after the loop: not timed
}
BENCHMARK(BM_torch_tiny_add_profiled)->Iterations(1'000'000);

// ---------------------------------------------------------------------------------------------
// Stop and collect 1M recorded op events (untimed recording, timed collection and its release).

void record_sightline_events() {
  static const sp::NameId mul = sp::intern("aten::mul");
  sp::recording_start({.max_events = std::uint64_t{1} << 32});
  for (int i = 0; i < kEvents; ++i) {
    sp::ScopeHandle op = sp::record_op_begin(mul);
    sightline::host_clock::advance(1000);
    sp::record_op_end(op);
  }
  sp::recording_stop();
}

void BM_sightline_collect_1m(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    record_sightline_events();
    state.ResumeTiming();
    benchmark::DoNotOptimize(sp::build_trace(sp::recording_collect(), {}, {0, 1, 0, true, false, false}));
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_sightline_collect_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

void record_torch_events() {
  tp::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  for (int i = 0; i < kEvents; ++i) {
    RECORD_FUNCTION("aten::mul", std::vector<c10::IValue>());
  }
}

void BM_torch_collect_1m(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    record_torch_events();
    state.ResumeTiming();
    benchmark::DoNotOptimize(tp::disableProfilerLegacy());
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_torch_collect_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

// ---------------------------------------------------------------------------------------------
// Write the 1M collected events as a Chrome trace file.

void BM_sightline_export_1m(benchmark::State& state) {
  record_sightline_events();
  const sp::CollectedTrace trace = sp::build_trace(sp::recording_collect(), {}, {0, 1, 0, true, false, false});
  const auto path = (std::filesystem::temp_directory_path() / "sightline_torch_bench_sightline.json").string();
  for (auto _ : state) sp::export_chrome_trace(trace, path);
  state.counters["bytes"] = static_cast<double>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * kEvents);
}
BENCHMARK(BM_sightline_export_1m)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_torch_export_1m(benchmark::State& state) {
  record_torch_events();
  tp::thread_event_lists lists = tp::disableProfilerLegacy();
  std::vector<tp::LegacyEvent*> events;
  for (auto& list : lists) {
    for (auto& event : list) events.push_back(&event);
  }
  const auto path = (std::filesystem::temp_directory_path() / "sightline_torch_bench_torch.json").string();
  for (auto _ : state) {
    std::ofstream out(path);
    tp::writeProfilerEventsToStream(out, events);
  }
  state.counters["bytes"] = static_cast<double>(std::filesystem::file_size(path));
  state.counters["legacy_events"] = static_cast<double>(events.size());  // a push and a pop per scope
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * kEvents);  // per recorded op, as sightline's
}
BENCHMARK(BM_torch_export_1m)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
