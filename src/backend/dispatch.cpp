// The dispatcher: observer hooks, output allocation, and one array load to find the kernel.
#include <vector>

#include "sightline/host_clock.h"
#include "backend/view_ops.h"
#include "sightline/backend.h"

namespace sightline {
namespace {

std::atomic<const DispatchObserver*> g_observer{nullptr};

[[noreturn]] void missing_kernel(OpId op, Device device) {
  std::vector<std::string> have;
  for (const std::string& name : backend_names()) {
    const Backend* b = find_backend(name);
    if (b->kernels[static_cast<size_t>(op)] != nullptr) have.push_back(name);
  }
  fail("{} is not implemented for device {}; it is only available for these backends: [{}]", op_name(op), device,
       fmt::join(have, ", "));
}

// Copies between devices through the backends' copy slots (staging through the host when neither
// side is the host).
void copy_across_devices(const Tensor& src, Tensor& dst) {
  const Tensor dense = src.contiguous();
  const size_t nbytes = dense.nbytes();
  const size_t src_off = static_cast<size_t>(dense.offset()) * dense.element_size();
  const size_t dst_off = static_cast<size_t>(dst.offset()) * dst.element_size();
  if (dense.device().is_cpu()) {
    backend(dst.device().backend).copy_from_host(*dst.storage(), dst_off, dense.raw_data(), nbytes);
  } else if (dst.device().is_cpu()) {
    backend(dense.device().backend).copy_to_host(dst.raw_data(), *dense.storage(), src_off, nbytes);
  } else {
    std::vector<std::byte> staging(nbytes);
    backend(dense.device().backend).copy_to_host(staging.data(), *dense.storage(), src_off, nbytes);
    backend(dst.device().backend).copy_from_host(*dst.storage(), dst_off, staging.data(), nbytes);
  }
}

Device op_device(const OpCall& call) {
  if (call.inputs.empty() || !call.inputs[0].defined()) return call.attrs.device;
  const Device device = call.inputs[0].device();
  if (call.op == OpId::copy) return device;
  for (size_t i = 1; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    SIGHTLINE_CHECK(!t.defined() || t.device() == device,
                    "{}: inputs are on different devices ({} for input 0, {} for input {}); move them to one device "
                    "with .to(device)", op_name(call.op), device, t.device(), i);
  }
  return device;
}

Tensor run(const OpCall& call) {
  // The op's own host cost on the modeled host clock (framework dispatch, shape logic); what it
  // calls (allocation, runtime calls, copies) adds its own.
  host_clock::charge_framework_op();
  const OpInfo& info = op_info(call.op);
  if (info.is_view) return apply_view_op(call);
  const Device device = op_device(call);
  const TensorMeta meta = infer_meta(call);
  if (call.op == OpId::copy) {
    Tensor out = empty(meta.shape, TensorOptions(meta.dtype, call.attrs.device));
    copy_across_devices(call.inputs[0], out);
    return out;
  }
  const Kernel kernel = backend(device.backend).kernels[static_cast<size_t>(call.op)];
  if (kernel == nullptr) missing_kernel(call.op, device);
  Tensor out = empty(meta.shape, TensorOptions(meta.dtype, device));
  size_t more_bytes = 0;
  for (size_t i = 0; i < call.more_outputs.size(); ++i) {
    const TensorMeta m = infer_meta(call, static_cast<int>(i) + 1);
    call.more_outputs[i] = empty(m.shape, TensorOptions(m.dtype, device));
    more_bytes += call.more_outputs[i].nbytes();
  }
  kernel(call, out);
  // A host kernel is host work: modeled as its output streamed through host memory.
  if (device.is_cpu()) host_clock::advance(host_clock::copy_ns(out.nbytes() + more_bytes));
  return out;
}

Tensor observed_run(const OpCall& call) {
  const DispatchObserver* observer = g_observer.load(std::memory_order_acquire);
  if (observer == nullptr) return run(call);
  const uint64_t token = observer->before ? observer->before(call, observer->user) : 0;
  Tensor out;
  try {
    out = run(call);
  } catch (...) {
    // Close the observer's scope even on error so that its nesting stays balanced.
    if (observer->after) observer->after(call, out, token, observer->user);
    throw;
  }
  if (observer->after) observer->after(call, out, token, observer->user);
  return out;
}

}  // namespace

void set_dispatch_observer(const DispatchObserver* observer) { g_observer.store(observer, std::memory_order_release); }

Tensor dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  SIGHTLINE_CHECK(op_info(op).outputs == 1, "{} returns {} tensors; run it with dispatch_outputs()", op_name(op),
                  op_info(op).outputs);
  return observed_run(OpCall{op, inputs, attrs});
}

std::vector<Tensor> dispatch_outputs(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  std::vector<Tensor> outputs(static_cast<size_t>(op_info(op).outputs));
  const OpCall call{op, inputs, attrs, std::span<Tensor>(outputs).subspan(1)};
  outputs[0] = observed_run(call);
  return outputs;
}

}  // namespace sightline
