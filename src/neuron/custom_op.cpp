// CustomOp (include/sightline/kernels.h): a user's kernel run on a neuron core the way the eager
// ops run (neuron_backend.cpp): built once per input signature and core, loaded, and executed
// through the runtime inside a framework-op scope, so the profiler attributes its runtime calls and
// device work to it by correlation id.
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "neuron/neuron.h"
#include "sightline/host_clock.h"
#include "sightline/kernels.h"
#include "sightline/profiler/record.h"

namespace sightline::neuron {

struct CustomOp::State {
  std::string name;
  KernelFunction kernel;
  profiler::NameId profiler_name = 0;
  mutable std::mutex mutex;
  struct Built {
    runtime::ExecutableId id;
    std::shared_ptr<const device::Executable> exe;
  };
  std::unordered_map<std::string, Built> cache;  // by input signature and core
};

namespace {

std::string signature(std::span<const Tensor> inputs, int core) {
  std::string key = fmt::format("core{}", core);
  for (const Tensor& t : inputs) key += fmt::format("|{}{}", dtype_name(t.dtype()), t.shape());
  return key;
}

// The executable's I/O must be the call's inputs, in order, then outputs or scratch.
void check_io(const std::string& op, const device::Executable& exe, std::span<const Tensor> inputs) {
  size_t declared_inputs = 0;
  for (const device::IoTensor& io : exe.io) declared_inputs += io.kind == device::IoKind::input;
  SIGHTLINE_CHECK(declared_inputs == inputs.size(),
                  "{}: the kernel declares {} input(s) but was called with {}; declare one builder.input() per "
                  "call input, in order", op, declared_inputs, inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const device::IoTensor& io = exe.io[i];
    SIGHTLINE_CHECK(io.kind == device::IoKind::input,
                    "{}: the kernel's I/O tensor {} ('{}') is not an input; declare the inputs first, then the outputs",
                    op, i, io.name);
    const Dims shape(std::span<const int64_t>(io.shape.data(), io.shape.size()));
    SIGHTLINE_CHECK(io.dtype == inputs[i].dtype() && shape == inputs[i].shape(),
                    "{}: input {} is {}{} but the kernel declared '{}' as {}{}", op, i, dtype_name(inputs[i].dtype()),
                    inputs[i].shape(), io.name, dtype_name(io.dtype), shape);
  }
  bool any_output = false;
  for (const device::IoTensor& io : exe.io) any_output = any_output || io.kind == device::IoKind::output;
  SIGHTLINE_CHECK(any_output, "{}: the kernel declares no output; add one with builder.output()", op);
}

}  // namespace

CustomOp::CustomOp(std::string name, KernelFunction kernel) : state_(std::make_shared<State>()) {
  SIGHTLINE_CHECK(!name.empty(), "CustomOp: the op needs a name, e.g. \"custom::silu\"");
  SIGHTLINE_CHECK(kernel != nullptr, "CustomOp '{}': the kernel function is empty", name);
  state_->name = std::move(name);
  state_->kernel = std::move(kernel);
  state_->profiler_name = profiler::intern(state_->name);
}

const std::string& CustomOp::name() const { return state_->name; }

size_t CustomOp::cache_size() const {
  std::lock_guard lock(state_->mutex);
  return state_->cache.size();
}

std::vector<Tensor> CustomOp::operator()(std::span<const Tensor> inputs) const {
  const State& s = *state_;
  SIGHTLINE_CHECK(!inputs.empty(), "{}: called with no inputs", s.name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SIGHTLINE_CHECK(inputs[i].defined(), "{}: input {} is undefined", s.name, i);
    SIGHTLINE_CHECK(inputs[i].device().to_string().starts_with("neuron") && inputs[i].device() == inputs[0].device(),
                    "{}: input {} is on {}; every input must be on one neuron device (input 0 is on {}): move it "
                    "with .to(device)", s.name, i, inputs[i].device(), inputs[0].device());
  }
  profiler::ScopeHandle scope = profiler::record_op_begin(s.profiler_name);
  std::vector<Tensor> outputs;
  try {
    // The op's own host cost, as dispatch charges every op; what it calls adds its own.
    host_clock::charge_framework_op();
    std::vector<Tensor> dense;
    dense.reserve(inputs.size());
    for (const Tensor& t : inputs) dense.push_back(t.contiguous());
    const Device device = dense[0].device();
    const int core = device.index;
    runtime::Runtime& rt = runtime();
    State::Built built;
    {
      const std::string key = signature(dense, core);
      std::lock_guard lock(s.mutex);
      auto it = s.cache.find(key);
      if (it == s.cache.end()) {
        kernels::KernelBuilder builder(rt.spec(), s.name);
        builder.set_source_op(s.name);
        s.kernel(builder, dense);
        auto exe = std::make_shared<const device::Executable>(builder.build());
        check_io(s.name, *exe, dense);
        it = state_->cache.emplace(key, State::Built{rt.load(core, exe), exe}).first;
      }
      built = it->second;
    }
    std::vector<uint64_t> io;
    std::vector<Tensor> scratch;
    for (size_t i = 0; i < built.exe->io.size(); ++i) {
      const device::IoTensor& t = built.exe->io[i];
      if (t.kind == device::IoKind::input) {
        io.push_back(device_address(dense[i]));
        continue;
      }
      const Dims shape(std::span<const int64_t>(t.shape.data(), t.shape.size()));
      Tensor buffer = empty(shape, TensorOptions(t.dtype, device));
      io.push_back(device_address(buffer));
      (t.kind == device::IoKind::output ? outputs : scratch).push_back(std::move(buffer));
    }
    rt.execute_schedule(core, built.id, std::move(io), profiler::current_correlation_id());
    // Scratch is released when `scratch` goes out of scope: the runtime orders a release after the
    // work queued before it (stream-ordered), as for any tensor.
  } catch (...) {
    profiler::record_op_end(scope);
    throw;
  }
  profiler::record_op_end(scope);
  return outputs;
}

}  // namespace sightline::neuron
