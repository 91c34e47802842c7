// compile(): guards on the input signature, the per-function cache of compiled programs, and calls.
#include "sightline/compile.h"

#include <atomic>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "compiler/capture.h"
#include "sightline/host_clock.h"
#include "compiler/device_program.h"
#include "compiler/execute.h"
#include "compiler/passes.h"
#include "neuron/neuron.h"
#include "sightline/profiler/record.h"

namespace sightline {
namespace {

// Bumped whenever the lowering changes what it emits for a graph, so that disk cache entries written by
// an older lowering are rebuilt instead of run.
constexpr int kLoweringVersion = 3;  // 3: aten::gelu without {approximate=tanh} is the erf form

// A compiled program: the optimized graph for one input signature and, for arguments on a neuron
// device, its device executable (null when the graph could not be lowered: it is replayed eagerly).
struct Program {
  compiler::Graph graph;
  std::shared_ptr<const compiler::DeviceProgram> device;
  profiler::NameId region_name = 0;  // "Torch-Compiled Region: <frame>/<compile>", as torch names it
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
std::string device_cache_key(const compiler::Graph& graph, const std::vector<Tensor>& inputs,
                             const device::Spec& spec, Autocast autocast) {
  std::string key = fmt::format("lowering {}\nspec {}\n", kLoweringVersion, spec.identity());
  // Keys of programs without autocast are unchanged, so their disk cache entries stay valid.
  if (autocast != Autocast::none) key += fmt::format("autocast {}\n", autocast_name(autocast));
  key += "guards";
  for (const Tensor& t : inputs) key += fmt::format(" {}{}", dtype_name(t.dtype()), t.shape());
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
  std::map<std::string, std::shared_ptr<const Program>> programs;
  CompileStats stats;

  std::shared_ptr<const Program> program_for(const std::vector<Tensor>& inputs, bool is_call) {
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
    compiler::Graph graph = compiler::capture_graph(fn, metas, device);
    if (options.optimize) {
      graph = compiler::optimize(std::move(graph), {}, options);
    } else {
      graph = compiler::eliminate_dead_code(graph);
      if (options.autocast == Autocast::matmul_bf16) graph = compiler::autocast_matmuls(graph);
    }
    std::shared_ptr<const compiler::DeviceProgram> device_program;
    compiler::CacheOutcome outcome = compiler::CacheOutcome::lowered;
    if (is_neuron(device)) device_program = lower_for_device(graph, inputs, device, outcome);
    std::lock_guard lock(mutex);
    const auto region = profiler::intern(fmt::format("Torch-Compiled Region: {}/{}", frame_id, programs.size()));
    auto program = std::make_shared<const Program>(Program{std::move(graph), std::move(device_program), region});
    auto [it, inserted] = programs.emplace(key, program);
    if (inserted) {  // a racing thread may have compiled the same signature first
      ++stats.compilations;
      if (program->device && outcome == compiler::CacheOutcome::disk_hit) ++stats.disk_cache_hits;
      if (program->device && outcome == compiler::CacheOutcome::lowered) ++stats.lowerings;
    }
    return it->second;
  }

  // The device program of `graph`, or null (after a warning) when the graph holds an op the device
  // cannot run: the documented fallback is the eager replay, which gives the same results.
  std::shared_ptr<const compiler::DeviceProgram> lower_for_device(const compiler::Graph& graph,
                                                                  const std::vector<Tensor>& inputs,
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

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) const {
  const std::shared_ptr<const Program> program = state_->program_for(inputs, true);
  const CompiledRegionScope scope(program->region_name);
  host_clock::charge_framework_op();  // the call itself: guard check and launch, like one framework op
  std::vector<Tensor> bound;
  bound.reserve(inputs.size());
  for (const Tensor& t : inputs) bound.push_back(t.contiguous());
  if (!program->device) return compiler::run_eager(program->graph, bound);
  std::vector<Tensor> results = program->device->run(bound, profiler::current_correlation_id());
  std::lock_guard lock(state_->mutex);
  ++state_->stats.device_calls;
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
  return compiler::dump(state_->program_for(inputs, false)->graph);
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
