// Chrome trace export rate for a one-million-event trace (half host ops with a launch each, half
// device executions), written to a temporary file; and the key_averages table over the same trace.
#include <filesystem>

#include <benchmark/benchmark.h>

#include "profiler/chrome_trace.h"
#include "sightline/profiler/key_averages.h"

namespace sightline::profiler {
namespace {

CollectedTrace million_event_trace() {
  constexpr int kLaunches = 250'000;  // op + runtime call + execution + copy = 4 events each
  ActivityBatch batch;
  batch.events.reserve(kLaunches * 4);
  const char* names[] = {"aten::mul", "aten::mean", "aten::add", "aten::rsqrt"};
  for (int i = 0; i < kLaunches; ++i) {
    const std::int64_t t = std::int64_t(i) * 10'000;
    const auto op_id = std::uint64_t(2 * i + 1);
    const auto call_id = std::uint64_t(2 * i + 2);
    FunctionEvent op;
    op.name = names[i % 4];
    op.id = op.external_id = op_id;
    op.thread = 1;
    op.start_ns = t;
    op.end_ns = t + 5000;
    op.input_shapes = {{4096, 4096}, {4096, 4096}};
    FunctionEvent call = op;
    call.name = "nrta_execute_schedule";
    call.kind = EventKind::runtime;
    call.id = call_id;
    call.input_shapes.clear();
    call.start_ns = t + 1000;
    call.end_ns = t + 4000;
    FunctionEvent exec;
    exec.name = "nc_exec_running";
    exec.kind = EventKind::device_exec;
    exec.device_type = DeviceType::privateuse1;
    exec.device_index = 0;
    exec.id = call_id;
    exec.external_id = op_id;
    exec.start_ns = t + 4500;
    exec.end_ns = t + 9000;
    FunctionEvent copy = exec;
    copy.name = "dmem_buf_copyout";
    copy.kind = EventKind::device_memcpy;
    copy.resource = 1;
    copy.bytes = 64;
    copy.start_ns = t + 9000;
    copy.end_ns = t + 9500;
    batch.events.push_back(std::move(op));
    batch.events.push_back(std::move(call));
    batch.events.push_back(std::move(exec));
    batch.events.push_back(std::move(copy));
  }
  std::vector<ActivityBatch> batches;
  batches.push_back(std::move(batch));
  return build_trace(Collection{}, std::move(batches),
                     {0, std::int64_t(kLaunches) * 10'000, 1'700'000'000'000'000'000});
}

const CollectedTrace& shared_trace() {
  static const CollectedTrace trace = million_event_trace();
  return trace;
}

void BM_export_chrome_trace_1m(benchmark::State& state) {
  const CollectedTrace& trace = shared_trace();
  const auto path = (std::filesystem::temp_directory_path() / "sightline_bench_trace.json").string();
  for (auto _ : state) export_chrome_trace(trace, path);
  state.counters["bytes"] = static_cast<double>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.events.size()));
}
BENCHMARK(BM_export_chrome_trace_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_key_averages_table_1m(benchmark::State& state) {
  const CollectedTrace& trace = shared_trace();
  for (auto _ : state) {
    benchmark::DoNotOptimize(key_averages(trace, {.device_name = "neuron"}).table("self_neuron_time_total"));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.events.size()));
}
BENCHMARK(BM_key_averages_table_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace sightline::profiler
