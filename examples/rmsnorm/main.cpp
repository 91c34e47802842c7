// The RMSNorm study (docs/tutorial.md): RMSNorm three ways on a simulated NeuronCore, profiled the
// way a PyTorch user profiles a model.
//
//   naive     x * rsqrt(mean(x * x, -1, keepdim) + eps) * w      six eager ops, six executables
//   fused     rms_norm(x, w, eps)                                the fused built-in: one executable
//   compiled  compile(naive)                                     captured, fused, one executable
//
// Each variant runs under profiler::profile with the schedule wait=2, warmup=1, active=1 (the first
// steps build and load executables; the active step is what the table shows), prints the
// key_averages table sorted by device time, and writes a profile output directory. A comparison of
// the variants, from the runtime's events, closes the run.
#include <algorithm>
#include <cmath>
#include <functional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sightline/host_clock.h"
#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/compile.h"
#include "sightline/sightline.h"

using namespace sightline;

namespace {

// What one profiled variant gives the comparison: the device side of its active step (one definition,
// neuron::TraceSummary), the step on the host clock, and where its profile went.
struct DeviceCost : neuron::TraceSummary {
  double host_ms = 0;
  std::string output_dir;
};

constexpr double kEps = 1e-6;

// What a PyTorch user writes: x * rsqrt(mean(x^2, -1, keepdim) + eps) * w.
Tensor rms_norm_naive(const Tensor& x, const Tensor& w) {
  const Tensor mean_sq = mean(x * x, {-1}, /*keepdim=*/true);
  return x * rsqrt(mean_sq + kEps) * w;
}

struct Variant {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
};

DeviceCost profile_variant(const Variant& v, const Tensor& x, const Tensor& w, const std::string& out_dir,
                           int row_limit, bool profile_memory) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = out_dir + "/" + v.name;
  cfg->capture_enabled_for_nc = "0";
  neuron::NeuronProfiler exporter(cfg);
  std::string written;
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&](profiler::profile& p) { written = exporter.export_trace(p); };
  options.record_shapes = true;
  options.profile_memory = profile_memory;
  options.experimental_config = cfg;
  profiler::profile prof(options);
  double active_host_ms = 0;
  prof.start();
  for (int step = 0; step < 4; ++step) {
    const int64_t t0 = host_clock::now_ns();
    Tensor y = v.fn(x, w);
    neuron::synchronize();
    if (step == 3) active_host_ms = static_cast<double>(host_clock::now_ns() - t0) / 1e6;
    prof.step();
  }
  prof.stop();
  fmt::print("\n== {} ==\n", v.name);
  profiler::TableOptions table;
  table.sort_by = "self_privateuse1_time_total";
  table.row_limit = row_limit;
  fmt::print("{}", prof.key_averages().table(table));
  DeviceCost cost;
  static_cast<neuron::TraceSummary&>(cost) = neuron::last_trace_summary();
  cost.host_ms = active_host_ms;
  cost.output_dir = written;
  return cost;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The RMSNorm study: naive eager ops, the fused built-in rms_norm and compile(naive), profiled "
               "on a simulated NeuronCore"};
  int64_t rows = 4096, cols = 4096;
  std::string dtype_arg = "f32";
  std::string spec = "trn2";
  std::string out_dir = "profiles";
  int row_limit = 12;
  bool profile_memory = false;
  bool timing_only = false;
  std::string host_clock_arg = "modeled";
  app.add_option("--rows", rows, "rows of the input")->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "columns of the input (the normalized dim)")->check(CLI::PositiveNumber);
  app.add_option("--dtype", dtype_arg, "f32, bf16 or f16");
  app.add_option("--spec", spec, "device spec: trn2, trn1 or a spec JSON file");
  app.add_option("--out", out_dir, "directory that receives one profile directory per variant");
  app.add_option("--row-limit", row_limit, "rows of each key_averages table");
  app.add_flag("--profile-memory", profile_memory,
               "record allocations and releases: CPU Mem / NEURON Mem columns and [memory] trace events");
  app.add_flag("--timing-only", timing_only,
               "simulate timing only: the same modeled times, results are not computed (much faster)");
  app.add_option("--host-clock", host_clock_arg,
                 "modeled (host costs from the spec: the same numbers on every machine) or measured (this "
                 "process's real host time minus simulator work)")
      ->check(CLI::IsMember({"modeled", "measured"}));
  CLI11_PARSE(app, argc, argv);

  try {
    neuron::Options options;
    options.spec = spec;
    options.functional = !timing_only;
    neuron::configure(options);
    host_clock::set_mode(host_clock::parse_mode(host_clock_arg));
    const int64_t wall_start = host_clock::wall_now_ns();
    const Device device = Device::parse("neuron:0");
    const DType dtype = dtype_parse(dtype_arg);
    Generator gen(0);
    const Tensor x = randn({rows, cols}, dtype, &gen).to(device);
    const Tensor w = rand({cols}, dtype, &gen).to(device);
    const neuron::DeviceInfo info = neuron::device_info();
    fmt::print("RMSNorm on {}{} on {} ({}, {}); profiles go to {}/\n", dtype_name(dtype), Dims{rows, cols}, device,
               info.spec_name, info.core_version, out_dir);

    // The compiled variant is the naive function itself: compile() captures it on the first call,
    // recognizes the RMSNorm pattern and lowers it to one device executable.
    auto compiled = compile(rms_norm_naive);
    const std::vector<Variant> variants = {
        {"naive", rms_norm_naive},
        {"fused", [](const Tensor& a, const Tensor& b) { return rms_norm(a, b, kEps); }},
        {"compiled", [&](const Tensor& a, const Tensor& b) { return compiled(a, b); }}};
    std::vector<DeviceCost> costs;
    for (const Variant& v : variants) costs.push_back(profile_variant(v, x, w, out_dir, row_limit, profile_memory));

    const double bytes = static_cast<double>(rows * cols) * 2 * static_cast<double>(dtype_size(dtype));
    const double floor_us = bytes / info.hbm_bytes_per_ns / 1e3;
    fmt::print("\n== comparison (the active step of each profile) ==\n");
    fmt::print("  {:<8} {:>10} {:>9} {:>14} {:>14} {:>13} {:>9} {:>12}\n", "variant", "executions", "copies",
               "device busy us", "device span us", "switch+load us", "HBM MB", "host ms*");
    for (size_t i = 0; i < variants.size(); ++i) {
      const DeviceCost& c = costs[i];
      fmt::print("  {:<8} {:>10} {:>9} {:>14.1f} {:>14.1f} {:>13.1f} {:>9.1f} {:>12.2f}\n", variants[i].name,
                 c.executions, c.copies_in, c.busy_us, c.span_us, c.overhead_us, c.hbm_mb, c.host_ms);
    }
    fmt::print("  * the active step on the {} host clock, synchronize() included\n", host_clock_arg);
    fmt::print("  HBM floor of one RMSNorm (input + output bytes / {} B/ns): {:.1f} us; fused busy = {:.2f}x the "
               "floor\n", info.hbm_bytes_per_ns, floor_us, costs[1].busy_us / floor_us);
    fmt::print("  naive / fused device span: {:.2f}x; compiled / fused device busy: {:.3f}x\n",
               costs[0].span_us / costs[1].span_us, costs[2].busy_us / costs[1].busy_us);
    if (timing_only) {
      fmt::print("  results not computed (--timing-only): modeled times are the same as a functional run\n");
    } else {
      // One step a statement: each result replaces the tensor it came from, so beside x and the
      // reference at most two full-size tensors are alive (a nested expression would hold all of its
      // temporaries until its end: at 32768 x 4096 f32, 512 MiB each).
      const Tensor reference = rms_norm(x, w, kEps).to(DType::f32);
      auto max_diff = [&](Tensor y) {
        y = y.to(DType::f32);
        y = y - reference;
        y = abs(y);
        return amax(y).item();
      };
      const double naive_diff = max_diff(rms_norm_naive(x, w));
      const double compiled_diff = max_diff(compiled(x, w));
      fmt::print("  max |naive - fused| = {:.3g}; max |compiled - fused| = {:.3g}\n", naive_diff, compiled_diff);
    }
    std::string simulated;
    for (size_t i = 0; i < variants.size(); ++i) {
      simulated += fmt::format("{}{} {:.2f} s", i ? ", " : "", variants[i].name, costs[i].simulation_ms / 1e3);
    }
    fmt::print("\nMeasured, not modeled: simulated in {:.2f} s of wall time ({}); the whole run took {:.2f} s.\n",
               static_cast<double>(neuron::simulation_wall_ns()) / 1e9, simulated,
               static_cast<double>(host_clock::wall_now_ns() - wall_start) / 1e9);
    fmt::print("\nProfiles written:\n");
    for (const DeviceCost& c : costs) fmt::print("  {}\n", c.output_dir);
    fmt::print("Open trace.json of a profile in https://ui.perfetto.dev (Open trace file) to follow the lanes.\n");
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
