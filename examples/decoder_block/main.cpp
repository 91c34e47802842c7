// A transformer decoder block on a simulated NeuronCore, eager vs compile(), profiled side by side.
//
//   RMSNorm -> q/k/v linear -> softmax attention -> output projection -> residual
//           -> RMSNorm -> SiLU-gated MLP -> residual
//
//   eager     every op is its own executable and its own launch
//   compiled  compile(decoder_block): the optimized graph lowered to ONE executable, one launch a call
//
// Each variant runs four steps under profiler::profile (schedule wait=2, warmup=1, active=1: the first
// steps build and load executables), prints its key_averages table and writes a profile directory.
// A comparison of the active steps, from the runtime's events, closes the run.
//
// The default size is a Llama-style block at a realistic width that still simulates quickly: batch 1,
// seq 256, d_model 1024, 8 heads of 128, SwiGLU MLP 2816 (8/3 x d_model rounded up to a multiple of
// 256, as Llama does). Both variants compute their results for real, so the printed max |eager -
// compiled| compares them; eager + compiled take about 15 s on a 2-core host. Other sizes by flag:
//
//   decoder_block --batch 2 --seq 64 --model 128 --heads 4 --hidden 256 --out profiles
//
// --autocast compiles with CompileOptions::autocast = matmul_bf16 (bf16 matmul operands, f32
// accumulation, the rest f32: what whole-graph Neuron compilation does by default).
#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "sightline/host_clock.h"
#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/compile.h"
#include "sightline/sightline.h"

#include "decoder_block.h"

using namespace sightline;
using examples::decoder_args;
using examples::decoder_block;
using examples::Dimensions;

namespace {

// What one profiled variant gives the comparison: the device side of its active step (one definition,
// neuron::TraceSummary), the step on the host clock, and where its profile went.
struct DeviceCost : neuron::TraceSummary {
  double host_ms = 0;
  std::string output_dir;
};

using BlockFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Profiles four steps of `fn` (the active one is the fourth) and prints its table.
DeviceCost profile_variant(const std::string& name, const BlockFn& fn, const std::vector<Tensor>& args,
                           const std::string& out_dir, int row_limit, Tensor& result) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = out_dir + "/" + name;
  cfg->capture_enabled_for_nc = "0";
  neuron::NeuronProfiler exporter(cfg);
  std::string written;
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&](profiler::profile& p) { written = exporter.export_trace(p); };
  options.experimental_config = cfg;
  profiler::profile prof(options);
  double active_host_ms = 0;
  prof.start();
  for (int step = 0; step < 4; ++step) {
    const int64_t t0 = host_clock::now_ns();
    result = fn(args)[0];
    neuron::synchronize();
    if (step == 3) active_host_ms = static_cast<double>(host_clock::now_ns() - t0) / 1e6;
    prof.step();
  }
  prof.stop();
  fmt::print("\n== {} ==\n", name);
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
  CLI::App app{"A decoder block on a simulated NeuronCore: eager ops vs one compiled executable, profiled"};
  Dimensions dims;
  std::string spec = "trn2", out_dir = "profiles", cache_dir;
  int row_limit = 10;
  bool timing_only = false, autocast = false;
  app.add_option("--batch", dims.batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--seq", dims.seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--model", dims.model, "model width (a multiple of --heads)")->check(CLI::PositiveNumber);
  app.add_option("--heads", dims.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--hidden", dims.hidden, "MLP width")->check(CLI::PositiveNumber);
  app.add_option("--spec", spec, "device spec: trn2, trn1 or a spec JSON file");
  app.add_option("--out", out_dir, "directory that receives one profile directory per variant");
  app.add_option("--cache-dir", cache_dir, "disk cache of compiled executables (default: memory only)");
  app.add_option("--row-limit", row_limit, "rows of each key_averages table");
  app.add_flag("--timing-only", timing_only,
               "simulate timing only: the same modeled times, results are not computed (much faster)");
  app.add_flag("--autocast", autocast,
               "compile with bf16 matmul operands and f32 accumulation (CompileOptions::autocast = matmul_bf16)");
  CLI11_PARSE(app, argc, argv);

  try {
    SIGHTLINE_CHECK(dims.model % dims.heads == 0, "--model {} is not a multiple of --heads {}", dims.model,
                    dims.heads);
    neuron::Options options;
    options.spec = spec;
    options.functional = !timing_only;
    neuron::configure(options);
    const int64_t wall_start = host_clock::wall_now_ns();
    const Device device = Device::parse("neuron:0");
    const std::vector<Tensor> args = decoder_args(dims, device);
    fmt::print(
        "decoder block: batch {}, seq {}, model {}, heads {}, MLP {} (f32{}) on {} ({}); profiles go to {}/\n",
        dims.batch, dims.seq, dims.model, dims.heads, dims.hidden,
        autocast ? "; compiled with autocast matmul_bf16" : "", device, neuron::device_info().spec_name, out_dir);

    const int64_t heads = dims.heads;
    const BlockFn eager = [heads](const std::vector<Tensor>& a) { return decoder_block(a, heads); };
    CompileOptions compile_options;
    compile_options.cache_dir = cache_dir;
    compile_options.autocast = autocast ? Autocast::matmul_bf16 : Autocast::none;
    const CompiledFunction compiled = compile(eager, compile_options);
    const BlockFn compiled_fn = [&compiled](const std::vector<Tensor>& a) { return compiled(a); };

    Tensor eager_result, compiled_result;
    const DeviceCost e = profile_variant("eager", eager, args, out_dir, row_limit, eager_result);
    const DeviceCost c = profile_variant("compiled", compiled_fn, args, out_dir, row_limit, compiled_result);

    fmt::print("\n== eager vs compiled (the active step of each profile) ==\n");
    fmt::print("  {:<9} {:>10} {:>15} {:>15} {:>10}\n", "variant", "executions", "device busy us",
               "device span us", "host ms*");
    for (const auto& [name, cost] : {std::pair{"eager", e}, std::pair{"compiled", c}}) {
      fmt::print("  {:<9} {:>10} {:>15.1f} {:>15.1f} {:>10.2f}\n", name, cost.executions, cost.busy_us,
                 cost.span_us, cost.host_ms);
    }
    fmt::print("  * the active step on the modeled host clock, synchronize() included\n");
    fmt::print("  eager / compiled device span: {:.2f}x\n", e.span_us / c.span_us);
    if (timing_only) {
      fmt::print("  results not computed (--timing-only): modeled times are the same as a functional run\n");
    } else {
      fmt::print("  max |eager - compiled| = {:.3g}\n", amax(abs(eager_result - compiled_result)).item());
    }
    const CompileStats stats = compiled.stats();
    fmt::print("  compile(): {} compilation(s), {} lowered, {} from the disk cache, {} device call(s)\n",
               stats.compilations, stats.lowerings, stats.disk_cache_hits, stats.device_calls);
    fmt::print("\nMeasured, not modeled: simulated in {:.2f} s of wall time (eager {:.2f} s, compiled {:.2f} s); the "
               "whole run took {:.2f} s.\n",
               static_cast<double>(neuron::simulation_wall_ns()) / 1e9, e.simulation_ms / 1e3,
               c.simulation_ms / 1e3, static_cast<double>(host_clock::wall_now_ns() - wall_start) / 1e9);
    fmt::print("\nProfiles written:\n  {}\n  {}\n", e.output_dir, c.output_dir);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
