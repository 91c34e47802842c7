// The Explorer server over a one-million-event profile (issue #6: time to first frame under 3 s):
// indexing trace.json, the first window the UI asks for (every lane, the whole time range, 1600 px)
// serialized as the HTTP body, and the two together as a cold open.
#include <unistd.h>

#include <filesystem>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "large_profile.h"
#include "server/profile_index.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kEvents = 1'000'000;
constexpr uint32_t kWidthPx = 1600;

// Generated once per process, removed at exit.
const fs::path& large_profile_dir() {
  struct Generated {
    fs::path root = fs::temp_directory_path() / fmt::format("sightline_server_bench_{}", ::getpid());
    fs::path dir = root / "large";
    Generated() {
      fs::create_directories(root);
      bench::write_large_profile(dir, {.events = kEvents});
    }
    ~Generated() {
      std::error_code ignored;
      fs::remove_all(root, ignored);
    }
  };
  static const Generated generated;
  return generated.dir;
}

std::string first_frame(const ProfileIndex& index) {
  const nlohmann::json lanes = index.lanes_json();
  const nlohmann::json window = index.window({.start_us = lanes["start"].get<double>(),
                                              .end_us = lanes["end"].get<double>(),
                                              .lanes = {},
                                              .width_px = kWidthPx});
  return lanes.dump() + window.dump();
}

void BM_profile_index_load_1m(benchmark::State& state) {
  const fs::path& dir = large_profile_dir();
  size_t events = 0;
  for (auto _ : state) {
    auto index = ProfileIndex::load(dir, {}, {.first_view_bytes = 0});  // the whole file
    events = index->events().size();
    benchmark::DoNotOptimize(index);
  }
  state.counters["events"] = static_cast<double>(events);
  state.counters["trace_MB"] = static_cast<double>(fs::file_size(dir / "trace.json")) / 1e6;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(events));
}
BENCHMARK(BM_profile_index_load_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_window_full_zoom_out_1m(benchmark::State& state) {
  const auto index = ProfileIndex::load(large_profile_dir(), {}, {.first_view_bytes = 0});
  size_t bytes = 0;
  for (auto _ : state) {
    const std::string body = first_frame(*index);
    bytes = body.size();
    benchmark::DoNotOptimize(body.data());
  }
  state.counters["body_KB"] = static_cast<double>(bytes) / 1e3;
}
BENCHMARK(BM_window_full_zoom_out_1m)->Unit(benchmark::kMillisecond)->Iterations(10);

// What the server answers first: the first view's partial index (FirstViewOptions' defaults; the
// background indexing is cancelled when the index is dropped).
void BM_cold_open_to_first_frame_1m(benchmark::State& state) {
  const fs::path& dir = large_profile_dir();
  for (auto _ : state) {
    auto index = ProfileIndex::load(dir, {}, FirstViewOptions{});
    benchmark::DoNotOptimize(first_frame(*index).size());
  }
}
BENCHMARK(BM_cold_open_to_first_frame_1m)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace sightline::server
BENCHMARK_MAIN();
