// Chrome trace export rate for a one-million-event trace (half host ops with a launch each, half
// device executions), written to a temporary file; and the key_averages table over the same trace.
// The export carries two anchors from the same run: x_memcpy (its time over a memcpy of the file's
// bytes) and x_write (over a plain write(2) of those bytes, already formatted, in 1 MiB pieces to a
// new file in the same directory, then close: the filesystem's write bandwidth at the moment, printed
// as write_GBps). Each export replaces the previous file, as a trace handler that writes one path does.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <benchmark/benchmark.h>

#include "anchors.h"

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

double since_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

// A plain write(2) of `text` to a new file at `path`, in 1 MiB pieces, then close; best of three, in
// nanoseconds (0 when the file cannot be written).
double write_file_ns(const std::string& text, const std::string& path) {
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    std::filesystem::remove(path);
    const auto start = std::chrono::steady_clock::now();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 0;
    for (std::size_t at = 0; at < text.size(); at += std::size_t{1} << 20) {
      const std::size_t n = std::min(text.size() - at, std::size_t{1} << 20);
      if (::write(fd, text.data() + at, n) != static_cast<ssize_t>(n)) break;
    }
    ::close(fd);
    best = std::min(best, since_ns(start));
  }
  std::filesystem::remove(path);
  return best;
}

void BM_export_chrome_trace_1m(benchmark::State& state) {
  const CollectedTrace& trace = shared_trace();
  const auto path = (std::filesystem::temp_directory_path() / "sightline_bench_trace.json").string();
  double ns = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    export_chrome_trace(trace, path);
    ns += since_ns(start);
  }
  ns /= static_cast<double>(state.iterations());
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  state.counters["bytes"] = static_cast<double>(text.size());
  bench::report_against_memcpy(state, ns, text.size());
  const double write_ns = write_file_ns(text, path + ".anchor");
  state.counters["write_GBps"] = static_cast<double>(text.size()) / write_ns;
  state.counters["x_write"] = ns / write_ns;
  std::filesystem::remove(path);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.events.size()));
}
// Real time: the file is written by a second thread while the first formats.
BENCHMARK(BM_export_chrome_trace_1m)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// The same document formatted into memory only (no file): the formatting's own rate.
void BM_format_chrome_trace_1m(benchmark::State& state) {
  const CollectedTrace& trace = shared_trace();
  std::size_t bytes = 0;
  double ns = 0;
  for (auto _ : state) {
    bytes = 0;
    const auto start = std::chrono::steady_clock::now();
    JsonWriter json([&bytes](std::string_view piece) { bytes += piece.size(); }, 1 << 20);
    write_chrome_trace(trace, json, {});
    ns += since_ns(start);
  }
  bench::report_against_memcpy(state, ns / static_cast<double>(state.iterations()), bytes);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.events.size()));
}
BENCHMARK(BM_format_chrome_trace_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

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
