#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "kernels/eager.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/profiler/record.h"
#include "sightline/backend.h"

namespace sightline {
namespace neuron {
namespace {

struct State {
  std::mutex mutex;
  Options options;
  std::unique_ptr<runtime::Runtime> rt;
  // Eager executables by kernel key, per core (an executable is loaded on each core that runs it).
  std::unordered_map<std::string, runtime::ExecutableId> cache;
  size_t built = 0;
};

State& state() {
  static State* s = new State();  // never destroyed: tensors may be released during static destruction
  return *s;
}

device::Spec load_spec(const std::string& name) {
  if (name.find('/') != std::string::npos || name.find(".json") != std::string::npos) {
    return device::Spec::load(name);
  }
  return device::Spec::builtin(name);
}

// The cores the runtime starts with: Options::cores, or every core of Options::chips chips.
int configured_cores(const Options& options, const device::Spec& spec) {
  if (options.cores > 0) return options.cores;
  return static_cast<int>(spec.cores_per_instance) * std::max(1, options.chips);
}

// A device allocation: the storage's backend context.
struct Allocation {
  int core;
  uint64_t address;
};

Allocation& allocation_of(const Storage& s) { return *static_cast<Allocation*>(s.backend_context()); }

uint64_t address_of(const Tensor& t) {
  const Allocation& a = allocation_of(*t.storage());
  return a.address + static_cast<uint64_t>(t.offset()) * t.element_size();
}

kernels::TensorDesc desc_of(const Tensor& t) { return {t.dtype(), t.shape(), t.strides()}; }

// Elementwise kernels take each operand in elementwise_operand_dtype (the output's, a comparison's
// result_type, bool for a mask), as the CPU reference computes; a promoted operand is cast on the
// device first, as its own op.
bool casts_inputs(OpId op) {
  return op_is_binary_elementwise(op) || op_is_select(op) || (op_is_unary_elementwise(op) && op != OpId::fill);
}

void eager_kernel(const OpCall& call, Tensor& out) {
  const int core = out.device().index;
  std::vector<Tensor> inputs;
  inputs.reserve(call.inputs.size() + 1);
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    if (!t.defined()) {
      // Kernels see only defined inputs, in order; layer_norm's weight is the one optional input
      // followed by another (the bias), so a missing weight becomes ones to keep positions unambiguous.
      if (call.op == OpId::layer_norm && i == 1 && call.inputs.size() > 2 && call.inputs[2].defined()) {
        inputs.push_back(ones({call.inputs[0].shape().back()}, TensorOptions(call.inputs[0].dtype(), out.device())));
      }
      continue;
    }
    const DType operand_dtype = elementwise_operand_dtype(call, i, out.dtype());
    inputs.push_back(casts_inputs(call.op) && t.dtype() != operand_dtype ? t.to(operand_dtype) : t);
  }
  OpAttrs attrs = call.attrs;
  if (op_is_binary_elementwise(call.op) && attrs.has_scalar) {
    // The host scalar becomes a 0-dim device tensor: a host-to-device copy of its own.
    const DType scalar_dtype = elementwise_operand_dtype(call, 1, out.dtype());
    inputs.push_back(full({}, attrs.scalar, TensorOptions(scalar_dtype, Device::cpu())).to(out.device()));
    attrs.has_scalar = false;
  }
  std::vector<kernels::TensorDesc> descs;
  for (const Tensor& t : inputs) descs.push_back(desc_of(t));
  const kernels::TensorDesc out_desc = desc_of(out);
  std::vector<kernels::TensorDesc> more_descs;  // topk's indices
  for (const Tensor& t : call.more_outputs) more_descs.push_back(desc_of(t));
  runtime::Runtime& rt = runtime();
  std::string key = fmt::format("{}|core{}", kernels::eager_kernel_key(call.op, descs, attrs, out_desc), core);
  for (const kernels::TensorDesc& d : more_descs) key += fmt::format("|out{}{}/{}", dtype_name(d.dtype), d.shape, d.strides);
  runtime::ExecutableId id;
  {
    State& s = state();
    std::lock_guard lock(s.mutex);
    auto it = s.cache.find(key);
    if (it == s.cache.end()) {
      auto exe = std::make_shared<device::Executable>(
          kernels::build_eager_kernel(call.op, descs, attrs, out_desc, rt.spec(), more_descs));
      it = s.cache.emplace(key, rt.load(core, std::move(exe))).first;
      ++s.built;
    }
    id = it->second;
  }
  std::vector<uint64_t> io;
  for (const Tensor& t : inputs) io.push_back(address_of(t));
  io.push_back(address_of(out));
  for (const Tensor& t : call.more_outputs) io.push_back(address_of(t));
  rt.execute_schedule(core, id, std::move(io), profiler::current_correlation_id());
}

class NeuronBackend final : public Backend {
 public:
  NeuronBackend() : Backend("neuron") {
    register_profiling();
    // The modeled host clock charges host work by the spec's host costs, on the host side of every
    // program, CPU-only ones included. The runtime installs them again from the spec it starts with;
    // a spec that cannot be read here is reported there, at the first use of a device.
    try {
      runtime::install_host_costs(load_spec(state().options.spec));
    } catch (const Error&) {
    }
    for (const OpInfo& info : kOpTable) {
      if (!info.is_view && info.id != OpId::copy) kernels[static_cast<size_t>(info.id)] = &eager_kernel;
    }
  }

  int device_count() const override {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (s.rt) return s.rt->core_count();
    return configured_cores(s.options, load_spec(s.options.spec));
  }

  std::shared_ptr<Storage> allocate(Device device, size_t nbytes) override {
    runtime::Runtime& rt = runtime();
    const int core = device.index;
    // Zero-byte tensors still get a distinct (one element) allocation so that bindings stay valid.
    const uint64_t address = rt.allocate(core, std::max<uint64_t>(nbytes, 4), profiler::current_correlation_id());
    auto* a = new Allocation{core, address};
    return std::make_shared<Storage>(
        device, nbytes, nullptr,
        [](Storage& s) {
          auto* alloc = static_cast<Allocation*>(s.backend_context());
          runtime().free(alloc->core, alloc->address);
          delete alloc;
        },
        a);
  }

  void copy_from_host(const Storage& dst, size_t dst_offset, const void* src, size_t nbytes) override {
    const Allocation& a = allocation_of(dst);
    runtime().write(a.core, a.address + dst_offset, src, nbytes, profiler::current_correlation_id());
  }

  void copy_to_host(void* dst, const Storage& src, size_t src_offset, size_t nbytes) override {
    const Allocation& a = allocation_of(src);
    runtime().read(a.core, dst, a.address + src_offset, nbytes, profiler::current_correlation_id());
  }

  void synchronize(Device device) override { runtime().synchronize(device.index); }
};

}  // namespace

void configure(const Options& options) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  SIGHTLINE_CHECK(!s.rt, "neuron::configure must be called before the first use of a neuron device");
  const device::Spec spec = load_spec(options.spec);
  runtime::install_host_costs(spec);  // also checks the spec now, not at first use
  SIGHTLINE_CHECK(options.chips >= 0 && static_cast<uint32_t>(std::max(1, options.chips)) <= spec.collective.chips_per_instance,
                  "neuron::configure: {} chips asked, but device spec '{}' has {} chip(s) per instance "
                  "(collective.chips_per_instance); ask for 1 to {}",
                  options.chips, spec.name, spec.collective.chips_per_instance, spec.collective.chips_per_instance);
  s.options = options;
}

runtime::Runtime& runtime() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.rt) {
    runtime::RuntimeOptions o;
    const device::Spec spec = load_spec(s.options.spec);
    o.cores = configured_cores(s.options, spec);
    o.queue_capacity = s.options.queue_capacity;
    o.functional = s.options.functional;
    s.rt = std::make_unique<runtime::Runtime>(load_spec(s.options.spec), o);
  }
  return *s.rt;
}

void synchronize() { runtime().synchronize_all(); }

DeviceInfo device_info() {
  runtime::Runtime& rt = runtime();
  const device::Spec& spec = rt.spec();
  return {spec.name, spec.core_version, rt.core_count(), spec.hbm.capacity_bytes, spec.hbm.bytes_per_ns,
          rt.functional(), spec.tensor.peak_flops_per_ns(), spec.tensor.peak_flops_per_ns(/*fp32=*/true)};
}

uint64_t memory_free(int core) { return runtime().free_bytes(core); }

uint64_t memory_allocated(int core) { return runtime().spec().hbm.capacity_bytes - runtime().free_bytes(core); }

int64_t simulation_wall_ns() { return runtime().simulation_wall_ns(); }

size_t eager_cache_size() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.built;
}

uint64_t device_address(const Tensor& t) {
  SIGHTLINE_CHECK(t.defined() && t.device().to_string().starts_with("neuron"),
                  "neuron::device_address: the tensor is {}, not on a neuron device; move it with .to()",
                  t.defined() ? "on " + t.device().to_string() : std::string("undefined"));
  return address_of(t);
}

std::unique_ptr<Backend> make_backend() { return std::make_unique<NeuronBackend>(); }

}  // namespace neuron
}  // namespace sightline
