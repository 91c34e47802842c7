// The cost of recording one framework op event (begin + end, one record) with the profiler off and
// on, from one thread and from several; the cost of a device-side complete event; and what
// profile_memory adds to a tensor's allocation and release (a host tensor created and dropped).
// Single-threaded figures carry x_memcpy: their time over a memcpy, in the same run, of the bytes
// they produce (64 per record, sizeof(FunctionEvent) per collected event).
#include <chrono>

#include <benchmark/benchmark.h>

#include "anchors.h"

#include "profiler/memory_observer.h"
#include "sightline/host_clock.h"
#include "sightline/profiler/events.h"
#include "sightline/profiler/record.h"
#include "sightline/sightline.h"

namespace sightline::profiler {
namespace {

const NameId kMul = intern("aten::mul");

void BM_op_event_off(benchmark::State& state) {
  recording_stop();
  for (auto _ : state) {
    ScopeHandle op = record_op_begin(kMul);
    record_op_end(op);
    benchmark::DoNotOptimize(op);
  }
}
BENCHMARK(BM_op_event_off);

double since_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

void BM_op_event_on(benchmark::State& state) {
  if (state.thread_index() == 0) recording_start({.max_events = 1ull << 40});
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ScopeHandle op = record_op_begin(kMul);
    record_op_end(op);
  }
  const double ns = since_ns(start);
  if (state.thread_index() == 0) {
    recording_stop();
    state.counters["dropped"] = static_cast<double>(recording_collect().dropped);
    if (state.threads() == 1) {
      bench::report_against_memcpy(state, ns, static_cast<std::size_t>(state.iterations()) * sizeof(Record));
    }
  }
}
// Drained every so often by the next run's start; iterations are capped to bound memory.
BENCHMARK(BM_op_event_on)->Iterations(2'000'000);

// The same in a session that follows another of the same size (a schedule's repeat, the study's
// next variant): record storage comes back from the pool instead of fresh pages.
void BM_op_event_on_warm(benchmark::State& state) {
  const auto events = static_cast<std::uint64_t>(state.max_iterations);
  recording_start({.max_events = 1ull << 40});
  for (std::uint64_t i = 0; i < events; ++i) {
    ScopeHandle op = record_op_begin(kMul);
    record_op_end(op);
  }
  recording_stop();
  (void)recording_collect();
  recording_start({.max_events = 1ull << 40});
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ScopeHandle op = record_op_begin(kMul);
    record_op_end(op);
  }
  const double ns = since_ns(start);
  recording_stop();
  state.counters["dropped"] = static_cast<double>(recording_collect().dropped);
  bench::report_against_memcpy(state, ns, static_cast<std::size_t>(state.iterations()) * sizeof(Record));
}
BENCHMARK(BM_op_event_on_warm)->Iterations(1'000'000);

// Collect a stopped session of 1M op events into a trace (what a profile does when a trace ends:
// drain the thread buffers, build the events, sort them, build the op tree); per event.
void BM_collect_1m(benchmark::State& state) {
  constexpr int kEvents = 1'000'000;
  double ns = 0, collect_ns = 0, build_ns = 0;
  for (auto _ : state) {
    state.PauseTiming();
    recording_start({.max_events = 1ull << 40});
    for (int i = 0; i < kEvents; ++i) {
      ScopeHandle op = record_op_begin(kMul);
      host_clock::advance(1000);  // as dispatch charges an op on the modeled host clock
      record_op_end(op);
    }
    recording_stop();
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    {
      Collection collected = recording_collect();
      const auto built = std::chrono::steady_clock::now();
      CollectedTrace trace = build_trace(collected, {}, {0, 1, 0, true, false, false});
      benchmark::DoNotOptimize(trace);
      const auto freed = std::chrono::steady_clock::now();
      collect_ns += std::chrono::duration<double, std::nano>(built - start).count();
      build_ns += std::chrono::duration<double, std::nano>(freed - built).count();
    }
    ns += since_ns(start);
  }
  state.counters["collect_ns_per_event"] = collect_ns / state.iterations() / kEvents;
  state.counters["build_ns_per_event"] = build_ns / state.iterations() / kEvents;
  state.SetItemsProcessed(state.iterations() * kEvents);
  state.counters["event_bytes"] = static_cast<double>(sizeof(FunctionEvent));  // the anchor's bytes per event
  bench::report_against_memcpy(state, ns / static_cast<double>(state.iterations()),
                               std::size_t{kEvents} * sizeof(FunctionEvent));
}
BENCHMARK(BM_collect_1m)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_op_event_on)->Iterations(1'000'000)->Threads(4);

void BM_op_and_runtime_events_on(benchmark::State& state) {
  static const NameId launch = intern("nrta_execute_schedule");
  recording_start({.max_events = 1ull << 40});
  for (auto _ : state) {
    ScopeHandle op = record_op_begin(kMul);
    ScopeHandle call = record_scope_begin(EventKind::runtime, launch);
    record_scope_end(call);
    record_op_end(op);
  }
  recording_stop();
  (void)recording_collect();
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_op_and_runtime_events_on)->Iterations(1'000'000);

void BM_device_complete_event_on(benchmark::State& state) {
  static const NameId exec = intern("nc_exec_running");
  recording_start({.max_events = 1ull << 40});
  std::int64_t t = 0;
  for (auto _ : state) {
    record_complete(
        {.name = exec, .kind = EventKind::device_exec, .device = 0, .start_ns = t, .end_ns = t + 10});
    ++t;
  }
  recording_stop();
  (void)recording_collect();
}
BENCHMARK(BM_device_complete_event_on)->Iterations(2'000'000);

// A 4 KiB host tensor allocated and released: the allocator's own cost plus, with profile_memory,
// two [memory] records. Compare the two runs: the difference is the recording cost.
void BM_tensor_alloc_free(benchmark::State& state) {
  const bool profile_memory = state.range(0) != 0;
  recording_start({.max_events = 1ull << 40, .profile_memory = profile_memory});
  start_memory_recording();  // what a profile session with profile_memory installs
  for (auto _ : state) {
    Tensor t = empty({1024});
    benchmark::DoNotOptimize(t.storage().get());
  }
  stop_memory_recording();
  recording_stop();
  state.counters["records"] = static_cast<double>(recording_collect().records.size());
  state.SetLabel(profile_memory ? "profile_memory on" : "profile_memory off");
}
BENCHMARK(BM_tensor_alloc_free)->Arg(0)->Arg(1)->Iterations(1'000'000);

void BM_clock(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(now_ns());
}
BENCHMARK(BM_clock);

}  // namespace
}  // namespace sightline::profiler

BENCHMARK_MAIN();
