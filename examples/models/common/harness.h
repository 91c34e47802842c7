// What the model examples (esm2, llama) share: the command line, the parameters (seeded random or
// loaded by their HuggingFace names from a safetensors checkpoint), the profiled run of one variant and
// the comparison of the variants. Public headers only, as a user of the installed SDK writes it.
//
// A variant is a function of tensors (inputs, then every parameter in the model's order) that returns
// the model's output, so that compile() captures the whole forward pass with the weights as inputs.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sightline/compile.h"
#include "sightline/host_clock.h"
#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/safetensors.h"
#include "sightline/sightline.h"

#include "../../common/roofline_floor.h"

namespace models {

using namespace sightline;

// The flags both models take.
struct RunOptions {
  std::string config;
  int64_t tokens = 32;
  int64_t batch = 1;
  std::string variant = "all";  // eager, sdpa, compiled or all
  std::string dtype = "f32";
  std::string device = "neuron:0";
  std::string spec = "trn2";
  std::string out_dir;
  std::vector<std::string> weights;  // .safetensors files (the shards of one checkpoint); none: seeded random
  std::string save_weights;  // write the parameters used to this .safetensors file, by their HF names
  int row_limit = 12;
  bool timing_only = false;
  bool check_cpu = false;  // compare every variant's output with the eager model on cpu
  std::string capture_cores = "0";  // NeuronConfig::capture_enabled_for_nc of every profile
  // NeuronConfig::max_events_per_nc of every profile. Larger than TorchNeuron's 1M default: an 8B
  // model's eager step records more instructions than that on one core, and a profile that drops
  // events counts fewer executions than ran.
  size_t max_events = 4'000'000;
  int rank = 0;                     // this process's rank and the job's ranks (torchrun's RANK, WORLD_SIZE)
  int world_size = 1;

  std::vector<std::string> variants() const {
    if (variant == "all") return {"eager", "sdpa", "compiled"};
    return {variant};
  }
};

inline void add_run_flags(CLI::App& app, RunOptions& o, const std::vector<std::string>& configs) {
  app.add_option("--config", o.config, "model configuration")->check(CLI::IsMember(configs));
  app.add_option("--tokens", o.tokens, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--variant", o.variant, "eager, sdpa (fused attention), compiled, or all")
      ->check(CLI::IsMember({"eager", "sdpa", "compiled", "all"}));
  app.add_option("--dtype", o.dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--device", o.device, "neuron:0, or cpu (the reference backend: tables without device time)");
  app.add_option("--spec", o.spec, "device spec: trn2, trn1 or a spec JSON file");
  app.add_option("--out", o.out_dir, "directory that receives one profile directory per variant");
  app.add_option("--weights", o.weights,
                 "a HuggingFace .safetensors checkpoint, or all the shards of a sharded one (default: seeded random "
                 "weights)");
  app.add_option("--save-weights", o.save_weights,
                 "write the parameters the run uses to a .safetensors file under their HF checkpoint names");
  app.add_option("--row-limit", o.row_limit, "rows of each key_averages table");
  app.add_option("--max-events", o.max_events,
                 "events each profile keeps per core, of the host's runtime calls and of the device's events with "
                 "their instruction records (NeuronConfig::max_events_per_nc); the rest are counted as dropped")
      ->check(CLI::PositiveNumber);
  app.add_flag("--timing-only", o.timing_only,
               "simulate timing only: the same modeled times, results are not computed (much faster)");
  // torchrun's environment is the default, read here at the program's edge.
  if (const char* rank = std::getenv("RANK")) o.rank = std::atoi(rank);
  if (const char* world = std::getenv("WORLD_SIZE")) o.world_size = std::atoi(world);
  app.add_option("--rank", o.rank, "this process's rank in the job, recorded in its profiles (default: $RANK or 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", o.world_size, "ranks in the job (default: $WORLD_SIZE or 1); merge the ranks' "
                 "profiles with `sightline merge`")
      ->check(CLI::PositiveNumber);
  app.add_flag("--check-cpu", o.check_cpu,
               "also run the eager model on cpu with the same weights and compare each variant's output with it "
               "(exit status 2 when a difference exceeds the dtype's tolerance)");
}

// One parameter of a model: its HuggingFace name and shape.
struct Parameter {
  std::string name;
  Dims shape;
  enum class Init { normal, ones, zeros } init = Init::normal;
};

// The parameters on `device` in `dtype`, in the order of `params`. From the checkpoint when `weights`
// names one (each tensor found by its HF name in whichever of the files holds it, with `prefix` tried
// first: "esm." for an EsmForMaskedLM checkpoint; its shape checked, converted to `dtype`); otherwise seeded random, as HF's _init_weights
// draws them (normal with std 0.02 for matrices and embeddings, ones and zeros for the norms). With
// timing_only no value is ever read, so the tensors are allocated and left unwritten.
inline std::vector<Tensor> load_parameters(const std::vector<Parameter>& params, const RunOptions& o, Device device,
                                           DType dtype, const std::string& prefix, std::string& source) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  if (!o.weights.empty()) {
    std::vector<safetensors::File> files;
    for (const std::string& path : o.weights) files.push_back(safetensors::File::open(path));
    bool prefixed = false;
    for (const safetensors::File& f : files) prefixed = prefixed || (!prefix.empty() && f.find(prefix + params.front().name));
    for (const Parameter& p : params) {
      const std::string name = prefixed ? prefix + p.name : p.name;
      const safetensors::File* holder = &files.front();  // none holds it: its load() names the nearest names
      for (const safetensors::File& f : files) {
        if (f.find(name) != nullptr) holder = &f;
      }
      SIGHTLINE_CHECK(files.size() == 1 || holder->find(name) != nullptr,
                      "no tensor named \"{}\" in any of the {} checkpoint files ({})", name, files.size(),
                      fmt::join(o.weights, ", "));
      out.push_back(holder->load(name, p.shape).to(dtype).to(device));
    }
    source = fmt::format("weights from {} ({} tensors{})", fmt::join(o.weights, ", "), params.size(),
                         prefixed ? fmt::format(", names prefixed '{}'", prefix) : "");
    return out;
  }
  if (o.timing_only && !device.is_cpu()) {
    for (const Parameter& p : params) out.push_back(empty(p.shape, {dtype, device}));
    source = "weights left unwritten (--timing-only computes no values)";
    return out;
  }
  Generator gen(0);
  for (const Parameter& p : params) {
    switch (p.init) {
      case Parameter::Init::normal: out.push_back(normal(0.0, 0.02, p.shape, {dtype, device}, &gen)); break;
      case Parameter::Init::ones: out.push_back(ones(p.shape, dtype).to(device)); break;
      case Parameter::Init::zeros: out.push_back(zeros(p.shape, dtype).to(device)); break;
    }
  }
  source = "seeded random weights (no --weights checkpoint given; HF's _init_weights: normal std 0.02, norms 1/0)";
  return out;
}

// --save-weights: the parameters as a checkpoint of the HF model class whose names carry `prefix`
// (EsmForMaskedLM's "esm.", LlamaForCausalLM's "model."), which --weights reads back.
inline void save_parameters(const std::vector<Parameter>& params, const std::vector<Tensor>& values,
                            const std::string& prefix, const RunOptions& o) {
  SIGHTLINE_CHECK(!o.timing_only, "--save-weights needs the parameters' values: drop --timing-only");
  std::vector<safetensors::NamedTensor> named;
  for (size_t i = 0; i < params.size(); ++i) {
    named.emplace_back(prefix + params[i].name, values[i].to(Device::cpu()).contiguous());
  }
  const std::vector<std::pair<std::string, std::string>> metadata = {{"format", "pt"}};
  safetensors::save(o.save_weights, named, metadata);
  fmt::print("saved {} parameters to {}\n", named.size(), o.save_weights);
}

inline int64_t parameter_count(const std::vector<Parameter>& params) {
  int64_t n = 0;
  for (const Parameter& p : params) n += p.shape.product();
  return n;
}

// "649.4M", "7.50B".
inline std::string parameter_text(int64_t n) {
  const auto x = static_cast<double>(n);
  return x >= 1e9 ? fmt::format("{:.2f}B", x / 1e9) : fmt::format("{:.1f}M", x / 1e6);
}

using ModelFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// What one profiled variant gives the comparison: the device side of its active step (one definition,
// neuron::TraceSummary), its executable switches (the table's nc_model_switch row), the step on the
// host clock, where its profile went, and its output.
struct VariantResult : neuron::TraceSummary {
  std::string name;
  int64_t switches = 0;
  double host_ms = 0;
  double first_call_s = 0;  // measured: wall time of the first step (builds executables; compile() captures and lowers)
  uint64_t dropped_events = 0;  // the profile's event cap was reached: its figures miss what was dropped
  std::string output_dir;
  Tensor output;
  bool has_device = false;
};

// Profiles four steps of `fn` under the schedule wait=2, warmup=1, active=1 (the first steps build and
// load executables; the active step is what the table shows), prints its key_averages table and writes
// the profile directory <out_dir>/<name>.
inline VariantResult profile_variant(const std::string& name, const ModelFn& fn, const std::vector<Tensor>& args,
                                     const RunOptions& o, Device device) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = o.out_dir + "/" + name;
  cfg->capture_enabled_for_nc = o.capture_cores;
  cfg->max_events_per_nc = o.max_events;
  cfg->rank = o.rank;
  cfg->world_size = o.world_size;
  neuron::NeuronProfiler exporter(cfg);
  std::string written;
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&](profiler::profile& p) { written = exporter.export_trace(p); };
  options.experimental_config = cfg;
  profiler::profile prof(options);
  VariantResult r;
  r.name = name;
  prof.start();
  for (int step = 0; step < 4; ++step) {
    const int64_t t0 = host_clock::now_ns(), wall0 = host_clock::wall_now_ns();
    r.output = fn(args)[0];
    if (!device.is_cpu()) neuron::synchronize();
    if (step == 0) r.first_call_s = static_cast<double>(host_clock::wall_now_ns() - wall0) / 1e9;
    if (step == 3) r.host_ms = static_cast<double>(host_clock::now_ns() - t0) / 1e6;
    prof.step();
  }
  prof.stop();
  fmt::print("\n== {} ==\n", name);
  profiler::TableOptions table;
  table.sort_by = device.is_cpu() ? "self_cpu_time_total" : "self_privateuse1_time_total";
  table.row_limit = o.row_limit;
  const profiler::KeyAverages averages = prof.key_averages();
  fmt::print("{}", averages.table(table));
  r.dropped_events = averages.dropped_events();
  for (const profiler::FunctionEventAvg& row : averages.rows()) {
    if (row.key == "nc_model_switch") r.switches += row.count;
  }
  if (!device.is_cpu()) {
    static_cast<neuron::TraceSummary&>(r) = neuron::last_trace_summary();
    r.has_device = true;
  }
  r.output_dir = written;
  return r;
}

// The comparison of the variants' active steps, one row each.
inline void print_comparison(const std::vector<VariantResult>& results, const RunOptions& o) {
  fmt::print("\n== comparison (the active step of each profile) ==\n");
  fmt::print("  {:<9} {:>10} {:>15} {:>15} {:>9} {:>14} {:>10}\n", "variant", "executions", "device busy us",
             "device span us", "switches", "switch+load us", "host ms*");
  for (const VariantResult& r : results) {
    fmt::print("  {:<9} {:>10} {:>15.1f} {:>15.1f} {:>9} {:>14.1f} {:>10.2f}\n", r.name, r.executions, r.busy_us,
               r.span_us, r.switches, r.overhead_us, r.host_ms);
  }
  fmt::print("  * the active step on the modeled host clock, synchronize() included\n");
  for (const VariantResult& r : results) {
    if (r.dropped_events > 0) {
      fmt::print("  {}: INCOMPLETE, {} events dropped at the cap of {} per core: its row misses them; run again "
                 "with a larger --max-events\n",
                 r.name, r.dropped_events, o.max_events);
    }
  }
  bool collectives = false;
  for (const VariantResult& r : results) collectives = collectives || r.collectives > 0;
  if (collectives) {
    fmt::print("  {:<9} {:>11} {:>18} {:>17}\n", "variant", "collectives", "collective us**", "barrier wait us");
    for (const VariantResult& r : results) {
      fmt::print("  {:<9} {:>11} {:>18.1f} {:>17.1f}\n", r.name, r.collectives, r.collective_us, r.collective_wait_us);
    }
    fmt::print("  ** cc_running summed over the cores; device busy and span count every core's executions\n");
  }
  const VariantResult* eager = nullptr;
  for (const VariantResult& r : results) {
    if (r.name == "eager") eager = &r;
  }
  if (eager != nullptr) {
    for (const VariantResult& r : results) {
      if (&r != eager && r.span_us > 0) {
        fmt::print("  eager / {} device span: {:.2f}x\n", r.name, eager->span_us / r.span_us);
      }
    }
  }
  if (o.timing_only) {
    fmt::print("  results not computed (--timing-only): modeled times are the same as a functional run\n");
  }
}

// The roofline floor of one forward pass (examples/common/roofline_floor.h: every argument read once
// and the output written once, corrected by `more_bytes`; the FLOPs of one eager call at the Tensor
// engine's peak for `dtype`), and each variant's device busy time over it. `more_bytes` is what the
// model reads beyond its arguments once each: an embedding table counts only the rows the batch
// gathers (embedding_correction), layers that share one layer's weights read them once per layer.
// The FLOPs are counted on proxies (count_flops): nothing runs, so no time is simulated for them.
inline void print_floor(const std::vector<VariantResult>& results, const ModelFn& eager,
                        const std::vector<Tensor>& args, DType dtype, double more_bytes = 0) {
  if (results.empty() || !results.front().has_device) return;
  const double flops = count_flops(eager, args);
  const double bytes =
      sightline::examples::bytes_of(args) + more_bytes + static_cast<double>(results.front().output.nbytes());
  const sightline::examples::Floor floor = sightline::examples::roofline_floor(bytes, flops, dtype);
  fmt::print("\n== floor of one forward pass (max of HBM and Tensor-engine time; device busy over it) ==\n");
  fmt::print("  floor: {}\n", floor.text("weights, inputs and output"));
  for (const VariantResult& r : results) {
    fmt::print("  {:<9} {:>10.1f} us busy = {:.2f}x the floor\n", r.name, r.busy_us, r.busy_us / floor.us());
  }
}

// An embedding lookup reads the table's rows the batch names, not the whole table: the bytes to take
// off a floor that counts `table` once.
inline double embedding_correction(const Tensor& table, const Tensor& ids) {
  const double rows = static_cast<double>(std::min(ids.numel(), table.size(0)));
  return (rows - static_cast<double>(table.size(0))) * static_cast<double>(table.nbytes()) /
         static_cast<double>(table.size(0));
}

// Tolerance of an output against the f32 cpu reference: f32 accumulates in a different order on the
// device; bf16 rounds every intermediate to 8 bits of mantissa.
inline double output_tolerance(DType dtype) { return dtype == DType::f32 ? 2e-3 : 1e-1; }

// max |output - reference| for every variant; false when one exceeds the tolerance.
inline bool check_against(const std::vector<VariantResult>& results, const Tensor& reference, DType dtype,
                          const std::string& what) {
  bool ok = true;
  const double tolerance = output_tolerance(dtype);
  const Tensor expected = reference.to(Device::cpu()).to(DType::f32);
  for (const VariantResult& r : results) {
    const double diff = amax(abs(r.output.to(Device::cpu()).to(DType::f32) - expected)).item();
    const bool pass = std::isfinite(diff) && diff <= tolerance;
    ok = ok && pass;
    fmt::print("  {:<9} max |{} - {}| = {:.3g} (tolerance {:.0e}): {}\n", r.name, r.name, what, diff, tolerance,
               pass ? "ok" : "FAILED");
  }
  return ok;
}
inline bool check_against_cpu(const std::vector<VariantResult>& results, const Tensor& reference, DType dtype) {
  fmt::print("\n== check against the eager model on cpu (f32 reference, same weights) ==\n");
  return check_against(results, reference, dtype, "cpu");
}

// The model must compile into one graph: a graph break (an op compile() cannot hold, run eagerly
// between two graphs) is a regression of the compiled variant, reported on stderr with its reasons.
inline bool compiled_whole(const CompiledFunction& compiled, const std::vector<Tensor>& args, const RunOptions& o) {
  const auto variants = o.variants();
  if (std::find(variants.begin(), variants.end(), "compiled") == variants.end()) return true;
  const CompileReport report = compiled.explain(args);
  if (report.graph_count == 1 && report.graph_break_count == 0) return true;
  fmt::print(stderr, "error: the compiled model is not one graph:\n{}", report.to_string());
  return false;
}

// The measured, never modeled, cost of the run.
inline void print_wall(const std::vector<VariantResult>& results, int64_t wall_start_ns) {
  std::string simulated;
  for (size_t i = 0; i < results.size(); ++i) {
    simulated += fmt::format("{}{} {:.2f} s", i ? ", " : "", results[i].name, results[i].simulation_ms / 1e3);
  }
  std::string first;
  for (size_t i = 0; i < results.size(); ++i) {
    first += fmt::format("{}{} {:.2f} s", i ? ", " : "", results[i].name, results[i].first_call_s);
  }
  fmt::print("\nMeasured, not modeled: simulated in {:.2f} s of wall time ({}); the whole run took {:.2f} s.\n",
             static_cast<double>(neuron::simulation_wall_ns()) / 1e9, simulated,
             static_cast<double>(host_clock::wall_now_ns() - wall_start_ns) / 1e9);
  fmt::print("First call of each variant (building its executables; compile() captures and lowers): {}.\n", first);
  fmt::print("\nProfiles written (open them with `sightline serve DIR`):\n");
  for (const VariantResult& r : results) fmt::print("  {}\n", r.output_dir);
}

}  // namespace models
