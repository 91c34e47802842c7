// compile(): capture a tensor function into a graph, optimize it, and run it as one compiled program.
//
//   using namespace sightline;
//   auto rms = compile([](const Tensor& x, const Tensor& w) {
//     return x * rsqrt(mean(x * x, {-1}, /*keepdim=*/true) + 1e-6) * w;   // naive RMSNorm, 6 ops
//   });
//   Tensor y = rms(x, w);   // first call for f32[4096, 4096], f32[4096] on neuron:0: capture + compile
//   Tensor z = rms(x, w);   // same signature: the compiled program runs again (a guard hit)
//   fmt::print("{}", rms.graph_dump({x, w}));   // the optimized graph: one fused.rows group of the 6 ops
//
// On the first call for an input signature (each argument's shape, dtype and device: the guards) the
// function runs once on proxy tensors that record its ops into a graph and do no device work. The graph
// is optimized (dead code, scalar constant folding, matmul epilogue and row fusion, layout choice, and
// with CompileOptions::substitute_builtins the recognition of built-in fused ops; see
// src/compiler/passes.h) and cached under the signature; later calls with that signature run the
// cached program, a new signature compiles again. Arguments are made
// contiguous before they are bound, so any strides share one program.
//
// Running on a neuron device: the optimized graph is lowered to ONE device executable
// (src/compiler/lower.h), loaded once per core, and every call is one runtime execution, shown in
// key_averages as one "CompiledFunction" row that carries the execution's device time. Executables are
// cached in memory per signature and, with CompileOptions::cache_dir, on disk across processes. On other
// backends the optimized graph is replayed with eager ops (fused groups run their ops one after the
// other); so is a neuron graph that holds an op without a device kernel, after a warning on stderr
// naming it.
//
// Graph breaks, as torch.compile makes them: an op the graph cannot hold (one of several outputs, such
// as topk) splits the function there. The ops before it are one compiled graph, the op runs eagerly,
// and the ops after it are another graph; the results are those of the eager run. explain() reports
// the graphs and each break with its reason and op (torch._dynamo.explain); each eager op of a call runs
// inside a "Graph Break: <op>" scope of the profile's framework lane. CompileOptions::fullgraph makes a
// break an error with the same reason, as torch.compile(fullgraph=True).
//
// What cannot be captured is an error (sightline::Error), never a silent wrong result:
//   * reading a tensor's value on the host inside the function (item(), to_string(), .to(cpu), a branch
//     on data): the message names the op that produced the value; move the read outside;
//   * tensors from the enclosing scope (not arguments): pass them as arguments;
//   * tensors made from host data inside the function (randn, from_vector, .to(device)): pass them in.
// Python-style control flow on shapes is fine (shapes are guarded). Inside the function tensors report
// the device "capture:0"; constants made with zeros/ones/full on x.device() run on the real device.
// The function must be pure: it runs only on the first call of each signature.
#pragma once

#include <concepts>
#include <type_traits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/tensor.h"

namespace sightline {

// Mixed precision, as whole-graph Neuron compilation does by default (neuronx-cc --auto-cast matmult
// --auto-cast-type bf16; docs/architecture.md, section 10):
//   none         every op computes in the dtype the function gives it
//   matmul_bf16  f32 matmul / linear (and the matmul of every fused group the compiler makes from them)
//                read bf16 operands and accumulate in f32; the result is rounded to bf16 and widened
//                back, so every other op, and every value the function returns, stays f32
enum class Autocast : uint8_t { none, matmul_bf16 };
std::string_view autocast_name(Autocast autocast);  // "none", "matmul_bf16"
// Parses "none" / "matmul_bf16" (also "bf16"); throws sightline::Error naming the accepted values.
Autocast autocast_parse(std::string_view name);

struct CompileOptions {
  bool optimize = true;  // false: run the captured graph as recorded (to compare against the passes)
  // Directory of the disk cache of device executables (created when missing); empty: memory only.
  // Several processes may share it; an unreadable entry is rebuilt with a warning.
  std::string cache_dir = {};
  // Applied even with optimize = false (it is the program's numerics, not an optimization); part of the
  // executable's cache key.
  Autocast autocast = Autocast::none;
  // true: a graph break is an error (sightline::Error) with its reason, as torch.compile(fullgraph=True);
  // false: the function is split into graphs around the ops the graph cannot hold.
  bool fullgraph = false;
  // true: the recognize_builtins pass replaces the naive forms of built-in fused ops (the RMSNorm chain
  // -> aten::rms_norm, x * sigmoid(x) -> aten::silu), whose hand-written kernels then run and label the
  // instructions. false (the default): the fusions compile the function's own ops, and every instruction
  // keeps the name of the op it comes from. bench/kernels/kernel_floors prints both.
  bool substitute_builtins = false;
};

// One graph break: the op that runs eagerly and why the graph cannot hold it.
struct GraphBreak {
  std::string op;      // "aten::topk"
  std::string reason;  // the text fullgraph's error carries
  int op_index = 0;    // which op of the function it is (0: the first op it dispatched)
  int graph = 0;       // how many graphs run before it
};

// What compile() made of a function for one signature, as torch._dynamo.explain reports it.
struct CompileReport {
  int graph_count = 0;        // compiled graphs (no empty ones: a break as the first op makes none before it)
  int graph_break_count = 0;  // eager ops between them
  int op_count = 0;           // ops of the graphs as captured (before the passes), eager ops excluded
  std::vector<GraphBreak> breaks;
  // "Graph Count: 2\nGraph Break Count: 1\nOp Count: 6\nBreak Reasons:\n  1. aten::topk (op 2 of the function;
  // graphs before it: 1): aten::topk returns 2 tensors and a graph node has one output\n"
  std::string to_string() const;
};

struct CompileStats {
  int64_t compilations = 0;  // signatures captured and compiled (guard misses)
  int64_t calls = 0;
  int64_t cache_hits = 0;  // calls that found a compiled program for their signature
  int64_t lowerings = 0;        // device executables built by lowering (not found in the disk cache)
  int64_t disk_cache_hits = 0;  // device executables read from CompileOptions::cache_dir
  int64_t device_calls = 0;     // calls that ran as one device execution
};

struct CompiledFunctionState;

// The callable compile() returns; copies share one cache of compiled programs. Thread-safe.
class CompiledFunction {
 public:
  explicit CompiledFunction(std::shared_ptr<CompiledFunctionState> state) : state_(std::move(state)) {}

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  // For functions of one to three tensors that return one tensor.
  Tensor operator()(const Tensor& a) const;
  Tensor operator()(const Tensor& a, const Tensor& b) const;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) const;

  CompileStats stats() const;
  // The optimized graph for the signature of `inputs`, compiling it if needed (the golden-file format);
  // with graph breaks, each graph and each break in order.
  std::string graph_dump(const std::vector<Tensor>& inputs) const;
  // The graphs and graph breaks for the signature of `inputs`, compiling it if needed.
  CompileReport explain(const std::vector<Tensor>& inputs) const;

 private:
  std::shared_ptr<CompiledFunctionState> state_;
};

using TensorListFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The FLOPs one call of `fn` on tensors like `inputs` costs by the op table's rule: what a profile with
// with_flops counts for the aten ops that call dispatches, counted as compile() captures the function,
// on proxies of the inputs' shapes and dtypes. Nothing runs and no device is touched, so a model's FLOPs
// cost no simulation (torch: FlopCounterMode under FakeTensorMode). Graph breaks are counted like the
// rest; a function that reads a value on the host (item(), .to(cpu)) throws, as compile() does.
double count_flops(const TensorListFunction& fn, const std::vector<Tensor>& inputs);

// `arity` is the number of arguments the function takes, or -1 for any (checked on every call).
CompiledFunction compile(TensorListFunction fn, CompileOptions options = {}, int arity = -1);

template <typename F>
requires std::is_invocable_r_v<Tensor, F, const Tensor&> CompiledFunction
compile(F fn, CompileOptions options = {}) {
  return compile(
      TensorListFunction([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }),
      options, 1);
}

template <typename F>
requires std::is_invocable_r_v<Tensor, F, const Tensor&, const Tensor&> CompiledFunction
compile(F fn, CompileOptions options = {}) {
  return compile(TensorListFunction(
                     [fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0], in[1])}; }),
                 options, 2);
}

template <typename F>
requires std::is_invocable_r_v<Tensor, F, const Tensor&, const Tensor&, const Tensor&> CompiledFunction
compile(F fn, CompileOptions options = {}) {
  return compile(TensorListFunction([fn](const std::vector<Tensor>& in) {
                   return std::vector<Tensor>{fn(in[0], in[1], in[2])};
                 }),
                 options, 3);
}

}  // namespace sightline
