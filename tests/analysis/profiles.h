// Profiles the analysis and tools tests read: generated here, in the test, from small programs on
// neuron:0 under the profiler (no binary fixtures in the repository). The simulator is deterministic,
// so every device-side number of these profiles is the same on every run.
//
//   const test_profiles::Generated& p = test_profiles::generate();
//   analysis::ProfileDir fused = analysis::profile_dir_load(p.fused.dir);
//   EXPECT_EQ(p.fused.live_table, saved_table);   // the live key_averages table of that profile
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"

namespace test_profiles {

namespace fs = std::filesystem;
using namespace sightline;

// The sort key and limit every test uses for the key_averages table.
inline constexpr const char* kSortBy = "self_neuron_time_total";

struct Profiled {
  std::string dir;
  std::string live_table;  // prof.key_averages().table({kSortBy, all rows}) of the live profile
  std::string live_csv;    // to_csv and to_json with the same options
  std::string live_json;
};

struct Generated {
  fs::path root;
  Profiled naive, fused, matmul;
  Profiled slower;  // naive with one more aten::mul: the deliberate regression the gate tests check
};

// Four steps under the tutorial's schedule (wait 2, warmup 1, active 1): the active step is saved.
inline Profiled profile_steps(const fs::path& dir, const std::function<void()>& step_fn) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = dir.string();
  cfg->capture_enabled_for_nc = "0";
  auto exporter = std::make_shared<neuron::NeuronProfiler>(cfg);
  Profiled result;
  profiler::ProfileOptions options;
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&result, exporter](profiler::profile& p) { result.dir = exporter->export_trace(p); };
  options.record_shapes = true;
  options.experimental_config = cfg;
  profiler::profile prof(options);
  prof.start();
  for (int step = 0; step < 4; ++step) {
    step_fn();
    neuron::synchronize();
    prof.step();
  }
  prof.stop();
  profiler::TableOptions table;
  table.sort_by = kSortBy;
  table.row_limit = -1;
  result.live_table = prof.key_averages().table(table);
  result.live_csv = prof.key_averages().to_csv(table);
  result.live_json = prof.key_averages().to_json(table);
  return result;
}

// Generated once per test process.
inline const Generated& generate() {
  static const Generated generated = [] {
    Generated g;
    g.root = fs::temp_directory_path() / fmt::format("sightline_analysis_{}", ::getpid());
    fs::remove_all(g.root);
    fs::create_directories(g.root);
    const Device d = Device::parse("neuron:0");
    Generator gen(11);
    const Tensor x = randn({256, 512}, {}, &gen).to(d), w = rand({512}, {}, &gen).to(d);
    g.naive = profile_steps(g.root / "naive", [&] { (void)(x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w); });
    g.fused = profile_steps(g.root / "fused", [&] { (void)rms_norm(x, w, 1e-6); });
    g.slower = profile_steps(g.root / "slower", [&] { (void)(x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w * w); });
    // Large enough that its arithmetic intensity clears trn2's ridge point (~217 FLOP per HBM byte).
    const Tensor a = randn({1024, 1024}, {}, &gen).to(DType::bf16).to(d);
    const Tensor b = randn({1024, 1024}, {}, &gen).to(DType::bf16).to(d);
    g.matmul = profile_steps(g.root / "matmul", [&] { (void)matmul(a, b); });
    return g;
  }();
  return generated;
}

}  // namespace test_profiles
