// A large, valid profile output directory for the Explorer's scale checks (issue #6: open a
// one-million-event profile quickly).
//
//   bench::LargeProfile made = bench::write_large_profile(out_dir, {.events = 1'000'000});
//   fmt::print("{} events, {} steps\n", made.events, made.steps);
//
// How: one real step of a small decoder-like workload (RMSNorm, a projection matmul, softmax, a
// residual add; on two cores) runs on the simulated device under the profiler with the Neuron
// profiling config, so its executables, instruction traces and events are the real thing. That
// step's collected events are then repeated, shifted in time and with fresh correlation ids, until
// the trace holds the requested number of events, and the result goes through the real exporter
// (system-trace lanes: framework, neuron_rt and neuron_hw per core, with fwd and ac2g flows) into
// an atomically written directory with the seed step's NEFF and NTFF files and a manifest.
// Every repeated step's hardware events name the seed's executables, so the device view of any of
// them shows the seed step's instruction trace (the sequence numbers repeat).
#pragma once

#include <cstdint>
#include <filesystem>

namespace sightline::bench {

struct LargeProfileOptions {
  uint64_t events = 1'000'000;  // complete ("X") events in trace.json, exactly
};

struct LargeProfile {
  uint64_t events = 0;           // complete events written
  uint64_t steps = 0;            // repetitions of the seed step (the last one may be partial)
  uint64_t events_per_step = 0;  // events of one seed step
  uint64_t trace_bytes = 0;      // size of trace.json
};

// Writes the profile directory `dir` (replacing an earlier profile there; refusing any other
// non-empty directory, as formats::output_dir_write does). Throws sightline::Error on failure.
LargeProfile write_large_profile(const std::filesystem::path& dir, const LargeProfileOptions& options);

}  // namespace sightline::bench
