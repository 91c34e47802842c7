// compile(): guards on the input signature, the per-function cache of compiled programs, and calls.
#include "sightline/compile.h"

#include <atomic>
#include <map>
#include <mutex>
#include <span>

#include <fmt/format.h>

#include "compiler/capture.h"
#include "sightline/host_clock.h"
#include "compiler/device_program.h"
#include "compiler/execute.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "neuron/neuron.h"
#include "sightline/backend.h"
#include "sightline/profiler/record.h"

namespace sightline {
namespace {


// A compiled program: the optimized graph for one input signature and, for arguments on a neuron
// device, its device executable (null when the graph could not be lowered: it is replayed eagerly).
struct Program {
  compiler::Graph graph;
  std::shared_ptr<const compiler::DeviceProgram> device;
  profiler::NameId region_name = 0;  // "Torch-Compiled Region: <frame>/<compile>", as torch names it
};

// What one signature compiled to: one Program, or, with graph breaks, a Program per graph and the eager
// ops between them over the function's values (compiler::CapturedFunction).
struct CompiledSignature {
  std::vector<Program> graphs;
  bool has_breaks = false;
  compiler::CapturedFunction steps;      // with breaks: the order, values and eager ops (graphs moved out)
  std::vector<profiler::NameId> break_names;  // "Graph Break: <op>", per eager step
  CompileReport report;
};

// torch numbers compiled frames in the order they are first compiled, and each frame's compilations
// (one per guard signature) from 0; its profiler row is "Torch-Compiled Region: frame/compile".
std::atomic<int> g_next_frame_id{0};

// The guard key: every argument's dtype, shape and device ("f32[4, 8]@cpu|bf16[8]@neuron:0").
std::string signature_of(const std::vector<Tensor>& inputs) {
  std::string key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    SIGHTLINE_CHECK(t.defined(), "compiled function: argument {} is an undefined tensor", i);
    if (i > 0) key += '|';
    key += fmt::format("{}{}@{}", dtype_name(t.dtype()), t.shape(), t.device());
  }
  return key;
}

Device common_device(const std::vector<Tensor>& inputs) {
  if (inputs.empty()) return Device::cpu();
  const Device device = inputs[0].device();
  for (size_t i = 1; i < inputs.size(); ++i) {
    SIGHTLINE_CHECK(inputs[i].device() == device,
                    "compiled function: argument 0 is on {} but argument {} on {}; move all arguments to one "
                    "device with .to(device)",
                    device, i, inputs[i].device());
  }
  return device;
}

bool is_neuron(const Device& device) { return device.to_string().starts_with("neuron"); }

// The disk cache key: what decides the executable, and not the core it runs on (any core loads it).
std::string device_cache_key(const compiler::Graph& graph, std::span<const TensorMeta> inputs,
                             const device::Spec& spec, Autocast autocast) {
  std::string key = fmt::format("lowering {}\nspec {}\n", compiler::kLoweringVersion, spec.identity());
  // Keys of programs without autocast are unchanged, so their disk cache entries stay valid.
  if (autocast != Autocast::none) key += fmt::format("autocast {}\n", autocast_name(autocast));
  key += "guards";
  for (const TensorMeta& t : inputs) key += fmt::format(" {}{}", dtype_name(t.dtype), t.shape);
  return key + "\n" + compiler::dump(graph);
}

// The profiler row of a compiled call: device work queued inside carries its correlation id.
class CompiledRegionScope {
 public:
  explicit CompiledRegionScope(profiler::NameId name)
      : handle_(profiler::record_scope_begin(profiler::EventKind::user_annotation, name)) {}
  ~CompiledRegionScope() { profiler::record_scope_end(handle_); }
  CompiledRegionScope(const CompiledRegionScope&) = delete;
  CompiledRegionScope& operator=(const CompiledRegionScope&) = delete;

 private:
  profiler::ScopeHandle handle_;
};

}  // namespace

std::string_view autocast_name(Autocast autocast) {
  switch (autocast) {
    case Autocast::none:
      return "none";
    case Autocast::matmul_bf16:
      return "matmul_bf16";
  }
  return "?";
}

Autocast autocast_parse(std::string_view name) {
  if (name == "none") return Autocast::none;
  if (name == "matmul_bf16" || name == "bf16") return Autocast::matmul_bf16;
  fail("compile(): unknown autocast '{}'; accepted: none, matmul_bf16 (matmuls with bf16 operands and f32 "
       "accumulation, the rest f32)", name);
}

struct CompiledFunctionState {
  TensorListFunction fn;
  CompileOptions options;
  int arity = -1;
  int frame_id = g_next_frame_id.fetch_add(1, std::memory_order_relaxed);
  std::mutex mutex;  // guards the fields below
  std::map<std::string, std::shared_ptr<const CompiledSignature>> programs;
  CompileStats stats;

  // The passes and the lowering of one captured graph; `region` names its profiler row.
  Program compile_graph(compiler::Graph graph, std::span<const TensorMeta> metas, const Device& device,
                        profiler::NameId region, compiler::CacheOutcome& outcome) const {
    if (options.optimize) {
      graph = compiler::optimize(std::move(graph), {}, options);
    } else {
      graph = compiler::eliminate_dead_code(graph);
      if (options.autocast == Autocast::matmul_bf16) graph = compiler::autocast_matmuls(graph);
    }
    std::shared_ptr<const compiler::DeviceProgram> device_program;
    if (is_neuron(device)) device_program = lower_for_device(graph, metas, device, outcome);
    return Program{std::move(graph), std::move(device_program), region};
  }

  std::shared_ptr<const CompiledSignature> program_for(const std::vector<Tensor>& inputs, bool is_call) {
    SIGHTLINE_CHECK(arity < 0 || static_cast<int>(inputs.size()) == arity,
                    "compiled function: it takes {} tensor argument(s), got {}", arity, inputs.size());
    const std::string key = signature_of(inputs);
    const Device device = common_device(inputs);
    {
      std::lock_guard lock(mutex);
      if (is_call) ++stats.calls;
      if (auto it = programs.find(key); it != programs.end()) {
        if (is_call) ++stats.cache_hits;
        return it->second;
      }
    }
    // Compile outside the lock: capturing runs user code, which may call other compiled functions.
    std::vector<TensorMeta> metas;
    for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
    compiler::CapturedFunction captured = compiler::capture_function(fn, metas, device, options.fullgraph);
    auto compiled = std::make_shared<CompiledSignature>();
    int lowered = 0, disk_hits = 0;
    auto count = [&](const Program& p, compiler::CacheOutcome outcome) {
      if (p.device && outcome == compiler::CacheOutcome::disk_hit) ++disk_hits;
      if (p.device && outcome == compiler::CacheOutcome::lowered) ++lowered;
    };
    size_t compile_index = 0;
    {
      std::lock_guard lock(mutex);
      compile_index = programs.size();
    }
    const auto region =
        profiler::intern(fmt::format("Torch-Compiled Region: {}/{}", frame_id, compile_index));
    compiled->report.op_count = captured.op_count;
    if (!captured.has_breaks) {
      compiler::CacheOutcome outcome = compiler::CacheOutcome::lowered;
      compiled->graphs.push_back(compile_graph(std::move(captured.graph), metas, device, region, outcome));
      count(compiled->graphs.back(), outcome);
      compiled->report.graph_count = 1;
    } else {
      compiled->has_breaks = true;
      for (size_t g = 0; g < captured.graphs.size(); ++g) {
        std::vector<TensorMeta> graph_metas;
        for (const compiler::Node& node : captured.graphs[g].graph.nodes) {
          if (node.kind == compiler::NodeKind::input) graph_metas.push_back(node.meta);
        }
        // The graphs after a break are new frames, as torch's resume functions are.
        const auto name = g == 0 ? region
                                 : profiler::intern(fmt::format("Torch-Compiled Region: {}/0",
                                                                g_next_frame_id.fetch_add(1, std::memory_order_relaxed)));
        compiler::CacheOutcome outcome = compiler::CacheOutcome::lowered;
        compiled->graphs.push_back(
            compile_graph(std::move(captured.graphs[g].graph), graph_metas, device, name, outcome));
        count(compiled->graphs.back(), outcome);
      }
      for (const compiler::EagerStep& e : captured.eager) {
        compiled->break_names.push_back(profiler::intern(fmt::format("Graph Break: {}", e.info.op)));
        compiled->report.breaks.push_back(e.info);
      }
      compiled->report.graph_count = static_cast<int>(captured.graphs.size());
      compiled->report.graph_break_count = static_cast<int>(captured.eager.size());
      compiled->steps = std::move(captured);
    }
    std::lock_guard lock(mutex);
    auto [it, inserted] = programs.emplace(key, compiled);
    if (inserted) {  // a racing thread may have compiled the same signature first
      ++stats.compilations;
      stats.disk_cache_hits += disk_hits;
      stats.lowerings += lowered;
    }
    return it->second;
  }

  // The device program of `graph`, or null (after a warning) when the graph holds an op the device
  // cannot run: the documented fallback is the eager replay, which gives the same results.
  std::shared_ptr<const compiler::DeviceProgram> lower_for_device(const compiler::Graph& graph,
                                                                  std::span<const TensorMeta> inputs,
                                                                  const Device& device,
                                                                  compiler::CacheOutcome& outcome) const {
    const device::Spec& spec = neuron::runtime().spec();
    try {
      return std::make_shared<const compiler::DeviceProgram>(compiler::obtain_executable(
          graph, device_cache_key(graph, inputs, spec, options.autocast), options.cache_dir, spec, outcome));
    } catch (const Error& e) {
      fmt::print(stderr, "sightline: warning: a compiled function runs op by op on {}: its graph cannot be "
                 "lowered to one executable ({})\n", device, e.what());
      return nullptr;
    }
  }
};

namespace {

// One graph of a call: its profiler row, then one device execution (or the eager replay).
std::vector<Tensor> run_graph(const Program& program, const std::vector<Tensor>& bound) {
  const CompiledRegionScope scope(program.region_name);
  host_clock::charge_framework_op();  // the call itself: guard check and launch, like one framework op
  if (!program.device) return compiler::run_eager(program.graph, bound);
  return program.device->run(bound, profiler::current_correlation_id());
}

// A call of a function with graph breaks: each graph and eager op in turn, over the function's values.
std::vector<Tensor> run_with_breaks(const CompiledSignature& compiled, const std::vector<Tensor>& bound) {
  const compiler::CapturedFunction& steps = compiled.steps;
  std::vector<Tensor> values(static_cast<size_t>(steps.value_count));
  for (size_t i = 0; i < steps.arguments.size(); ++i) values[static_cast<size_t>(steps.arguments[i])] = bound[i];
  std::vector<Tensor> operands;
  for (const auto& [is_eager, index] : steps.order) {
    operands.clear();
    if (is_eager) {
      const compiler::EagerStep& e = steps.eager[static_cast<size_t>(index)];
      for (int v : e.inputs) operands.push_back(v == compiler::kNoValue ? Tensor() : values[static_cast<size_t>(v)]);
      const CompiledRegionScope scope(compiled.break_names[static_cast<size_t>(index)]);
      std::vector<Tensor> results = op_info(e.op).outputs == 1 ? std::vector<Tensor>{dispatch(e.op, operands, e.attrs)}
                                                               : dispatch_outputs(e.op, operands, e.attrs);
      for (size_t j = 0; j < e.outputs.size(); ++j) values[static_cast<size_t>(e.outputs[j])] = std::move(results[j]);
      continue;
    }
    const compiler::GraphStep& g = steps.graphs[static_cast<size_t>(index)];
    for (int v : g.inputs) operands.push_back(values[static_cast<size_t>(v)].contiguous());
    std::vector<Tensor> results = run_graph(compiled.graphs[static_cast<size_t>(index)], operands);
    for (size_t j = 0; j < g.outputs.size(); ++j) values[static_cast<size_t>(g.outputs[j])] = std::move(results[j]);
  }
  std::vector<Tensor> results;
  for (int v : steps.outputs) results.push_back(values[static_cast<size_t>(v)]);
  return results;
}

}  // namespace

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) const {
  const std::shared_ptr<const CompiledSignature> compiled = state_->program_for(inputs, true);
  std::vector<Tensor> bound;
  bound.reserve(inputs.size());
  bool on_device = true;
  for (const Program& p : compiled->graphs) on_device = on_device && p.device != nullptr;
  if (!compiled->has_breaks) {
    const Program& program = compiled->graphs.front();
    const CompiledRegionScope scope(program.region_name);
    host_clock::charge_framework_op();  // the call itself: guard check and launch, like one framework op
    for (const Tensor& t : inputs) bound.push_back(t.contiguous());
    if (!program.device) return compiler::run_eager(program.graph, bound);
    std::vector<Tensor> results = program.device->run(bound, profiler::current_correlation_id());
    std::lock_guard lock(state_->mutex);
    ++state_->stats.device_calls;
    return results;
  }
  for (const Tensor& t : inputs) bound.push_back(t.contiguous());
  std::vector<Tensor> results = run_with_breaks(*compiled, bound);
  if (on_device && !compiled->graphs.empty()) {
    std::lock_guard lock(state_->mutex);
    ++state_->stats.device_calls;
  }
  return results;
}

namespace {

Tensor single_result(std::vector<Tensor> results) {
  SIGHTLINE_CHECK(
      results.size() == 1,
      "compiled function: it returns {} tensors; call it with a std::vector<Tensor> to get them all",
      results.size());
  return std::move(results.front());
}

}  // namespace

Tensor CompiledFunction::operator()(const Tensor& a) const {
  return single_result((*this)(std::vector<Tensor>{a}));
}
Tensor CompiledFunction::operator()(const Tensor& a, const Tensor& b) const {
  return single_result((*this)(std::vector<Tensor>{a, b}));
}
Tensor CompiledFunction::operator()(const Tensor& a, const Tensor& b, const Tensor& c) const {
  return single_result((*this)(std::vector<Tensor>{a, b, c}));
}

CompileStats CompiledFunction::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

std::string CompiledFunction::graph_dump(const std::vector<Tensor>& inputs) const {
  const std::shared_ptr<const CompiledSignature> compiled = state_->program_for(inputs, false);
  if (!compiled->has_breaks) return compiler::dump(compiled->graphs.front().graph);
  std::string text;
  for (const auto& [is_eager, index] : compiled->steps.order) {
    if (is_eager) {
      const compiler::EagerStep& e = compiled->steps.eager[static_cast<size_t>(index)];
      text += fmt::format("# graph break {}: {}{} (op {}): {}\n", index, e.info.op, compiler::format_attrs(e.op, e.attrs),
                          e.info.op_index, e.info.reason);
    } else {
      text += fmt::format("# graph {}\n{}", index, compiler::dump(compiled->graphs[static_cast<size_t>(index)].graph));
    }
  }
  return text;
}

CompileReport CompiledFunction::explain(const std::vector<Tensor>& inputs) const {
  return state_->program_for(inputs, false)->report;
}

std::string CompileReport::to_string() const {
  std::string text = fmt::format("Graph Count: {}\nGraph Break Count: {}\nOp Count: {}\n", graph_count,
                                 graph_break_count, op_count);
  if (!breaks.empty()) text += "Break Reasons:\n";
  for (size_t i = 0; i < breaks.size(); ++i) {
    text += fmt::format("  {}. {} (op {} of the function; graphs before it: {}): {}\n", i + 1, breaks[i].op,
                        breaks[i].op_index, breaks[i].graph, breaks[i].reason);
  }
  return text;
}

double count_flops(const TensorListFunction& fn, const std::vector<Tensor>& inputs) {
  SIGHTLINE_CHECK(fn != nullptr, "count_flops(): the function is empty");
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
  return compiler::capture_function(fn, metas, common_device(inputs), false).flops;
}

CompiledFunction compile(TensorListFunction fn, CompileOptions options, int arity) {
  SIGHTLINE_CHECK(fn != nullptr, "compile(): the function is empty");
  auto state = std::make_shared<CompiledFunctionState>();
  state->fn = std::move(fn);
  state->options = options;
  state->arity = arity;
  return CompiledFunction(std::move(state));
}

}  // namespace sightline
