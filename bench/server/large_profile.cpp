#include "large_profile.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/manifest.h"
#include "formats/output_dir.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "profiler/chrome_trace.h"
#include "sightline/profiler/profile.h"
#include "runtime/runtime.h"
#include "sightline/error.h"
#include "sightline/sightline.h"

namespace sightline::bench {
namespace {

namespace fs = std::filesystem;

struct Seed {
  profiler::CollectedTrace trace;  // the recorded step, as the profiler collected it
  fs::path dir;                    // its exported profile directory (NEFF, NTFF, manifest)
};

// One step of a small decoder-like layer on two cores, recorded under the Neuron profiler.
Seed record_seed_step(const fs::path& seed_dir) {
  const int cores = neuron::runtime().core_count();
  auto config = std::make_shared<neuron::NeuronConfig>();
  config->profile_output_dir = seed_dir.string();
  config->capture_enabled_for_nc = cores > 1 ? "0,1" : "0";
  auto exporter = std::make_shared<neuron::NeuronProfiler>(config);

  Seed seed;
  seed.dir = seed_dir;
  profiler::ProfileOptions options;
  options.schedule = profiler::schedule({.wait = 0, .warmup = 1, .active = 1});
  options.on_trace_ready = [&seed, exporter](profiler::profile& p) {
    exporter->export_trace(p);
    seed.trace = p.trace();
  };
  options.record_shapes = true;
  options.with_flops = true;
  options.experimental_config = config;

  const Device first = Device::parse("neuron:0");
  const Device second = Device::parse(cores > 1 ? "neuron:1" : "neuron:0");
  Generator gen(6);
  const Tensor x0 = randn({128, 256}, {}, &gen).to(first), w0 = rand({256}, {}, &gen).to(first);
  const Tensor proj0 = randn({256, 256}, {}, &gen).to(first);
  const Tensor x1 = randn({128, 256}, {}, &gen).to(second), w1 = rand({256}, {}, &gen).to(second);
  const Tensor proj1 = randn({256, 256}, {}, &gen).to(second);
  auto layer = [](const Tensor& x, const Tensor& w, const Tensor& proj, bool fused) {
    profiler::record_function scope(fused ? "decoder_layer_fused" : "decoder_layer");
    Tensor h;
    {
      profiler::record_function norm("rms_norm");
      h = fused ? rms_norm(x, w, 1e-6) : x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;
    }
    const Tensor scores = softmax(matmul(h, proj), -1);
    return x + scores;
  };

  profiler::profile prof(options);
  prof.start();
  for (int step = 0; step < 2; ++step) {
    (void)layer(x0, w0, proj0, false);
    (void)layer(x1, w1, proj1, true);
    neuron::synchronize();
    prof.step();
  }
  prof.stop();
  SIGHTLINE_CHECK(!seed.trace.events.empty(), "the seed step recorded no events");
  return seed;
}

// The seed step repeated until `events` events: copy k is shifted by k step lengths and gets its own
// correlation and external ids (one fresh id per distinct seed id, so launches still pair up).
profiler::CollectedTrace repeat_step(const profiler::CollectedTrace& seed, uint64_t events, uint64_t& steps) {
  const uint64_t per_step = seed.events.size();
  steps = (events + per_step - 1) / per_step;
  const int64_t span = std::max<int64_t>(seed.window_end_ns - seed.window_start_ns, 1);
  std::unordered_map<uint64_t, uint64_t> id_index;  // seed id -> 1 + its rank among distinct ids
  for (const profiler::FunctionEvent& e : seed.events) {
    for (uint64_t id : {e.id, e.external_id}) {
      if (id != 0) id_index.emplace(id, id_index.size() + 1);
    }
  }
  const uint64_t ids_per_step = id_index.size();
  profiler::ActivityBatch batch;
  batch.events.reserve(events);
  batch.devices = seed.devices;
  batch.resources = seed.resources;
  for (uint64_t copy = 0; copy < steps; ++copy) {
    for (const profiler::FunctionEvent& e : seed.events) {
      if (batch.events.size() == events) break;
      profiler::FunctionEvent out = e;
      out.parent = -1;
      out.children.clear();
      out.kernels.clear();
      const int64_t shift = static_cast<int64_t>(copy) * span;
      out.start_ns += shift;
      out.end_ns += shift;
      if (out.id != 0) out.id = copy * ids_per_step + id_index.at(e.id);
      if (out.external_id != 0) out.external_id = copy * ids_per_step + id_index.at(e.external_id);
      if (out.name.starts_with("ProfilerStep#")) out.name = fmt::format("ProfilerStep#{}", copy + 1);
      batch.events.push_back(std::move(out));
    }
  }
  std::vector<profiler::ActivityBatch> batches;
  batches.push_back(std::move(batch));
  profiler::CollectedTrace trace =
      profiler::build_trace(profiler::Collection{}, std::move(batches),
                            {seed.window_start_ns, seed.window_start_ns + static_cast<int64_t>(steps) * span,
                             seed.wall_clock_at_window_start_ns});
  trace.threads = seed.threads;
  return trace;
}

fs::path unique_seed_dir() {
  static std::atomic<uint64_t> counter{0};
  return fs::temp_directory_path() / fmt::format("sightline_large_profile_seed_{}_{}", ::getpid(), counter++);
}

}  // namespace

LargeProfile write_large_profile(const fs::path& dir, const LargeProfileOptions& options) {
  SIGHTLINE_CHECK(options.events > 0, "a large profile needs at least one event; pass --events N with N > 0");
  const fs::path seed_dir = unique_seed_dir();
  struct Cleanup {
    fs::path path;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } cleanup{seed_dir};
  const Seed seed = record_seed_step(seed_dir);
  const formats::Manifest seed_manifest = formats::manifest_load(seed_dir.string());

  LargeProfile made;
  made.events_per_step = seed.trace.events.size();
  const profiler::CollectedTrace trace = repeat_step(seed.trace, options.events, made.steps);
  made.events = trace.events.size();

  formats::output_dir_write(dir.string(), [&](const fs::path& staging) {
    formats::Manifest manifest = seed_manifest;
    manifest.created_utc = formats::manifest_now_utc();
    manifest.events = {};
    manifest.files.clear();
    profiler::ChromeTraceOptions export_options;
    export_options.device_name = "neuron";
    export_options.trace_name = dir.filename().string();
    export_options.system_lanes = true;
    profiler::export_chrome_trace(trace, (staging / "trace.json").string(), export_options);
    made.trace_bytes = fs::file_size(staging / "trace.json");
    manifest.files.push_back({formats::ManifestFileKind::trace, "trace.json", {}, {}, made.trace_bytes});
    for (const profiler::FunctionEvent& e : trace.events) {
      if (e.kind == profiler::EventKind::cpu_op || e.kind == profiler::EventKind::user_annotation) {
        ++manifest.events.framework;
      } else if (e.kind == profiler::EventKind::runtime) {
        ++manifest.events.runtime;
      } else if (e.kind == profiler::EventKind::device_exec) {
        ++manifest.events.hardware;
      }
    }
    // The seed's executables and instruction traces, as they were exported. Its system trace covers
    // one step only, so it is not carried over.
    for (const formats::ManifestFile& file : seed_manifest.files) {
      if (file.kind != formats::ManifestFileKind::neff && file.kind != formats::ManifestFileKind::ntff) continue;
      fs::copy_file(seed_dir / file.path, staging / file.path);
      manifest.files.push_back(file);
    }
    manifest.events.instruction_records = seed_manifest.events.instruction_records;
    formats::manifest_save(manifest, staging.string());
  });
  return made;
}

}  // namespace sightline::bench
