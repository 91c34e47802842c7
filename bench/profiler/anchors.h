// The anchor the profiler's figures are printed against, measured in the same run: memcpy between
// two buffers that are already faulted in (the machine's copy bandwidth at the moment, which on a
// shared machine moves with its load as much as the figure beside it does).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

namespace sightline::profiler::bench {

// Nanoseconds to memcpy `bytes` (best of three, each into the same warm destination).
inline double memcpy_ns(std::size_t bytes) {
  static std::vector<char> source, destination;
  if (source.size() < bytes) {
    source.assign(bytes, 1);
    destination.assign(bytes, 0);
  }
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(destination.data(), source.data(), bytes);
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Sets the counters that put `ns` (the time of what was measured, for `bytes` of its output) beside
// a memcpy of those bytes: memcpy_GBps and x_memcpy (ns over memcpy's ns).
inline void report_against_memcpy(benchmark::State& state, double ns, std::size_t bytes) {
  const double copy_ns = memcpy_ns(bytes);
  state.counters["memcpy_GBps"] = static_cast<double>(bytes) / copy_ns;
  state.counters["x_memcpy"] = ns / copy_ns;
}

}  // namespace sightline::profiler::bench
