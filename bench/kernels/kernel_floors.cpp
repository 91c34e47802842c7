// Every built-in kernel against its roofline floor, and compile() against the fused built-ins.
//
//   kernel_floors [--spec trn2]
//
// Part 1 runs each built-in's eager executable alone on a simulated core (timing only: modeled times
// are the same as a functional run) at a large shape and prints its modeled device time beside its
// floor. The floor is the op table's own cost rule (ops::op_cost: the bytes each operand is read and
// the output written once, and the op's FLOPs) against the spec's peaks (analysis::compute_roofs, the
// roofline's one definition): max(bytes / HBM bandwidth, FLOPs / Tensor roof of the operands' width)
// for matmul, bytes / HBM bandwidth for the memory-bound built-ins (their FLOPs are far below what the
// Vector, Scalar and GpSimd engines reach together). MFU is FLOPs over the Tensor roof for that time.
// The DMA bound is what the model allows any schedule when the operands start in HBM:
// max(fixed + HBM floor, 2 fixed + Tensor floor), `fixed` the spec's per-transfer DMA fixed cost. No byte
// moves before the first transfer's fixed cost has passed, and the Tensor engine's work lies between
// its first operands' arrival (at least one fixed cost in) and the last result's store, which pays one
// more fixed cost before its bytes move. Max MFU is the Tensor floor over that bound.
//
// Part 2 runs whole functions through the public API under the profiler, as a user does, and divides
// compile()'s device busy time by the fused built-in's (or, for the decoder block, by the eager
// block's), for the default compile() ("discovered": the row loop fuses the function's own ops) and
// with CompileOptions::substitute_builtins ("substituted": naive forms of built-ins replaced by them): neuron::last_trace_summary, the one definition the examples print. The decoder block's floor is
// max(weights + input + output bytes / HBM bandwidth, the block's FLOPs / Tensor fp32 roof) with the
// FLOPs summed from the profiler's with_flops rows (the op table's rule again): examples/common/roofline_floor.h,
// the definition the model examples print too.
//
// Every figure printed is modeled and deterministic; only the last line (the simulator's wall time) is
// measured.
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "analysis/roofline.h"
#include "decoder_block.h"
#include "roofline_floor.h"
#include "device/core.h"
#include "kernels/eager.h"
#include "sightline/compile.h"
#include "sightline/host_clock.h"
#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/sightline.h"

namespace sightline {
namespace {

double roof_flops_per_ns(const device::Spec& spec, std::string_view name) {
  for (const analysis::Roof& r : analysis::compute_roofs(spec)) {
    if (r.name == name) return r.flops_per_s / 1e9;
  }
  fail("kernel_floors: the spec has no '{}' roof", name);
}

struct Case {
  std::string label;
  OpId op;
  std::vector<kernels::TensorDesc> inputs;
  OpAttrs attrs{};
};

kernels::TensorDesc dense(DType dtype, const Dims& shape) { return kernels::TensorDesc::contiguous(dtype, shape); }

// Meta-only tensors for the op table's cost rule: shapes and dtypes, never read.
Tensor meta_tensor(const kernels::TensorDesc& d) {
  static const auto storage = std::make_shared<Storage>(Device::cpu(), 0, nullptr, nullptr, nullptr);
  return Tensor(storage, d.dtype, d.shape, d.strides, 0);
}

void print_builtins(const device::Spec& spec) {
  const int64_t n = 4096;
  const DType f32 = DType::f32, bf16 = DType::bf16;
  std::vector<Case> cases;
  OpAttrs eps6;
  eps6.eps = 1e-6;
  OpAttrs eps5;
  eps5.eps = 1e-5;
  OpAttrs last;
  last.dim = -1;
  OpAttrs sum_last;
  sum_last.dims = {-1};
  for (DType dt : {f32, bf16}) {
    const std::string w = fmt::format("{}[{},{}]", dtype_name(dt), n, n);
    cases.push_back({"rms_norm " + w, OpId::rms_norm, {dense(dt, {n, n}), dense(dt, {n})}, eps6});
    cases.push_back({"layer_norm " + w, OpId::layer_norm, {dense(dt, {n, n}), dense(dt, {n}), dense(dt, {n})}, eps5});
    cases.push_back({"softmax " + w, OpId::softmax, {dense(dt, {n, n})}, last});
    cases.push_back({"add " + w, OpId::add, {dense(dt, {n, n}), dense(dt, {n, n})}});
    cases.push_back({"mul " + w, OpId::mul, {dense(dt, {n, n}), dense(dt, {n, n})}});
    cases.push_back({"exp " + w, OpId::exp, {dense(dt, {n, n})}});
    cases.push_back({"gelu " + w, OpId::gelu, {dense(dt, {n, n})}});
    cases.push_back({"sum(-1) " + w, OpId::sum, {dense(dt, {n, n})}, sum_last});
    cases.push_back({"argmax(-1) " + w, OpId::argmax, {dense(dt, {n, n})}, last});
    cases.push_back({"cumsum(-1) " + w, OpId::cumsum, {dense(dt, {n, n})}, last});
  }
  for (int64_t m : {512, 1024, 2048, 4096}) {
    cases.push_back({fmt::format("matmul bf16 {}^3", m), OpId::matmul, {dense(bf16, {m, m}), dense(bf16, {m, m})}});
  }
  cases.push_back({"matmul bf16 4096x8192 @ 8192x8192", OpId::matmul,
                   {dense(bf16, {4096, 8192}), dense(bf16, {8192, 8192})}});
  cases.push_back({"matmul f32 1024^3", OpId::matmul, {dense(f32, {1024, 1024}), dense(f32, {1024, 1024})}});

  const double hbm = spec.hbm.bytes_per_ns;
  fmt::print("== built-in kernels on {} ({}), one execution each, modeled ==\n", spec.name, spec.core_version);
  fmt::print("  {:<36} {:>12} {:>12} {:>15} {:>11} {:>7}  {:<6} {:>12} {:>11} {:>9}\n", "kernel", "device us",
             "HBM floor us", "Tensor floor us", "time/floor", "MFU %", "bound", "DMA bound us", "time/bound",
             "max MFU %");
  device::Core core(spec);
  for (const Case& c : cases) {
    std::vector<Tensor> metas;
    for (const kernels::TensorDesc& d : c.inputs) metas.push_back(meta_tensor(d));
    const OpCall call{c.op, metas, c.attrs};
    const TensorMeta out_meta = infer_meta(call);
    const kernels::TensorDesc out = dense(out_meta.dtype, out_meta.shape);
    const OpCost cost = op_cost(call, meta_tensor(out));
    const device::Executable exe = kernels::build_eager_kernel(c.op, c.inputs, c.attrs, out, spec);
    std::vector<uint64_t> io;
    for (const kernels::TensorDesc& d : c.inputs) {
      io.push_back(core.hbm_allocate(static_cast<uint64_t>(kernels::tensor_extent(d)) * dtype_size(d.dtype)));
    }
    io.push_back(core.hbm_allocate(static_cast<uint64_t>(kernels::tensor_extent(out)) * dtype_size(out.dtype)));
    const device::RunResult r = core.run(exe, io, {.functional = false, .record = false});
    for (uint64_t a : io) core.hbm_free(a);

    const bool is_matmul = c.op == OpId::matmul;
    const double hbm_floor = cost.bytes / hbm;
    const double tensor_peak =
        roof_flops_per_ns(spec, c.inputs[0].dtype == DType::f32 ? "Tensor fp32" : "Tensor bf16/fp16");
    const double tensor_floor = is_matmul ? cost.flops / tensor_peak : 0;
    const double floor = std::max(hbm_floor, tensor_floor);
    const std::string mfu = is_matmul ? fmt::format("{:.1f}", 100.0 * tensor_floor / r.duration_ns) : "";
    const double fixed = spec.dma.fixed_cost_ns;
    const double dma_bound = std::max(fixed + hbm_floor, is_matmul ? 2 * fixed + tensor_floor : 0.0);
    const std::string max_mfu = is_matmul ? fmt::format("{:.1f}", 100.0 * tensor_floor / dma_bound) : "";
    std::string line = fmt::format(
        "  {:<36} {:>12.2f} {:>12.2f} {:>15} {:>10.2f}x {:>7}  {:<6} {:>12.2f} {:>10.2f}x {:>9}", c.label,
        r.duration_ns / 1e3, hbm_floor / 1e3, is_matmul ? fmt::format("{:.2f}", tensor_floor / 1e3) : "-",
        r.duration_ns / floor, mfu, tensor_floor > hbm_floor ? "Tensor" : "HBM", dma_bound / 1e3,
        r.duration_ns / dma_bound, max_mfu);
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  }
}

// The device busy time of the fourth of four profiled calls (the first ones build and load).
struct Measured {
  double busy_us = 0;
  int executions = 0;
  double flops = 0;
};

Measured profile_busy(const std::function<void()>& call, bool with_flops = false) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->modes = {neuron::ProfileMode::RUNTIME};
  profiler::ProfileOptions options;
  options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.with_flops = with_flops;
  options.experimental_config = cfg;
  profiler::profile prof(options);
  prof.start();
  for (int step = 0; step < 4; ++step) {
    call();
    neuron::synchronize();
    prof.step();
  }
  prof.stop();
  const neuron::TraceSummary s = neuron::last_trace_summary();
  Measured m{s.busy_us, s.executions, 0};
  if (with_flops) m.flops = examples::aten_flops(prof.key_averages());
  return m;
}

Tensor rms_norm_naive(const Tensor& x, const Tensor& w) { return x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w; }

Tensor layer_norm_naive(const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor mu = mean(x, {-1}, true);
  const Tensor centered = x - mu;
  return centered * rsqrt(mean(centered * centered, {-1}, true) + 1e-5) * w + b;
}

Tensor softmax_naive(const Tensor& x) {
  const Tensor e = exp(x - amax(x, {-1}, true));
  return e / sum(e, {-1}, true);
}

void print_compiled() {
  const Device dev = Device::parse("neuron:0");
  Generator g(0);
  const int64_t rows = 4096, cols = 4096;
  const Tensor x = randn({rows, cols}, {}, &g).to(dev);
  const Tensor w = (rand({cols}, {}, &g) + 0.5).to(dev);
  const Tensor b = rand({cols}, {}, &g).to(dev);
  // Discovered: the default pipeline fuses the function's own ops. Substituted: recognize_builtins
  // replaces the naive forms it knows (the RMSNorm chain) by the built-in first.
  const CompileOptions substituted{.substitute_builtins = true};
  auto rms_compiled = compile(rms_norm_naive);
  auto rms_substituted = compile(rms_norm_naive, substituted);
  auto ln_compiled = compile(layer_norm_naive);
  auto ln_substituted = compile(layer_norm_naive, substituted);
  auto sm_compiled = compile(softmax_naive);
  auto sm_substituted = compile(softmax_naive, substituted);
  struct Pair {
    std::string label;
    std::function<void()> fused, compiled, substituted;
  };
  std::vector<Pair> pairs;
  // Both widths: a 16-bit program keeps its full-row intermediates in its dtype (as eager rounds them).
  const Tensor x16 = x.to(DType::bf16), w16 = w.to(DType::bf16), b16 = b.to(DType::bf16);
  for (const auto& [xs, ws, bs] : {std::tuple{&x, &w, &b}, std::tuple{&x16, &w16, &b16}}) {
    const Tensor &xt = *xs, &wt = *ws, &bt = *bs;
    const std::string shape = fmt::format("{}[{},{}]", dtype_name(xt.dtype()), rows, cols);
    pairs.push_back({"RMSNorm " + shape, [&] { (void)rms_norm(xt, wt, 1e-6); }, [&] { (void)rms_compiled(xt, wt); },
                     [&] { (void)rms_substituted(xt, wt); }});
    pairs.push_back({"layer_norm " + shape, [&] { (void)layer_norm(xt, wt, bt, 1e-5); },
                     [&] { (void)ln_compiled(xt, wt, bt); }, [&] { (void)ln_substituted(xt, wt, bt); }});
    pairs.push_back({"softmax " + shape, [&] { (void)softmax(xt, -1); }, [&] { (void)sm_compiled(xt); },
                     [&] { (void)sm_substituted(xt); }});
  }
  fmt::print("\n== compile(naive function) vs the fused built-in, device busy of one call, modeled ==\n");
  fmt::print("  discovered: the default compile() (the function's own ops fused); substituted: with\n"
             "  CompileOptions::substitute_builtins (naive forms of built-ins replaced by the built-in)\n");
  fmt::print("  {:<28} {:<12} {:>10} {:>14} {:>10} {:>14} {:>16}\n", "function", "compile()", "fused us",
             "fused execs", "compiled us", "compiled execs", "compiled/fused");
  for (const Pair& p : pairs) {
    const Measured fused = profile_busy(p.fused);
    for (const auto& [how, call] : {std::pair{"discovered", &p.compiled}, std::pair{"substituted", &p.substituted}}) {
      const Measured compiled = profile_busy(*call);
      fmt::print("  {:<28} {:<12} {:>10.2f} {:>14} {:>10.2f} {:>14} {:>15.3f}x\n", p.label, how, fused.busy_us,
                 fused.executions, compiled.busy_us, compiled.executions, compiled.busy_us / fused.busy_us);
    }
  }

  const examples::Dimensions dims;
  const std::vector<Tensor> args = examples::decoder_args(dims, dev);
  auto block = [&](const std::vector<Tensor>& a) { return examples::decoder_block(a, dims.heads); };
  auto block_compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(block));
  const Measured eager = profile_busy([&] { (void)block(args); }, /*with_flops=*/true);
  const Measured compiled = profile_busy([&] { (void)block_compiled(args); });
  // The output has the input's shape.
  const examples::Floor floor =
      examples::roofline_floor(examples::bytes_of(args) + static_cast<double>(args[0].nbytes()), eager.flops, DType::f32);
  fmt::print("\n== decoder block (batch {}, seq {}, d_model {}, {} heads, MLP {}, f32), modeled ==\n", dims.batch,
             dims.seq, dims.model, dims.heads, dims.hidden);
  fmt::print("  eager: {} executions, {:.1f} us busy; compiled: {} executions, {:.1f} us busy; compiled/eager "
             "{:.3f}x\n",
             eager.executions, eager.busy_us, compiled.executions, compiled.busy_us, compiled.busy_us / eager.busy_us);
  fmt::print("  floor: {}; compiled = {:.2f}x the floor\n", floor.text(), compiled.busy_us / floor.us());
}

}  // namespace
}  // namespace sightline

int main(int argc, char** argv) {
  using namespace sightline;
  CLI::App app{"Every built-in kernel's modeled time against its roofline floor; compile() against the fused "
               "built-ins"};
  std::string spec_name = "trn2";
  app.add_option("--spec", spec_name, "device spec: trn2, trn1 or a spec JSON file");
  CLI11_PARSE(app, argc, argv);
  try {
    neuron::configure({.spec = spec_name, .functional = false});
    host_clock::set_mode(host_clock::Mode::modeled);
    const int64_t wall_start = host_clock::wall_now_ns();
    const device::Spec spec = spec_name == "trn2" || spec_name == "trn1" ? device::Spec::builtin(spec_name)
                                                                         : device::Spec::load(spec_name);
    print_builtins(spec);
    print_compiled();
    fmt::print("\nMeasured, not modeled: the whole run took {:.2f} s of wall time.\n",
               static_cast<double>(host_clock::wall_now_ns() - wall_start) / 1e9);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kernel_floors: {}\n", e.what());
    return 2;
  }
  return 0;
}
