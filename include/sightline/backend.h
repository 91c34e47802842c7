// Backends and dispatch (the PrivateUse1-style extension point).
//
// A backend is a small object with four required slots — allocate, copy from host, copy to host,
// synchronize — and an array of kernels indexed by OpId. It registers by name at run time; `cpu` is
// simply the first backend registered, and `neuron` registers exactly the same way. Dispatch of an op
// is: infer the output meta from the op table, allocate the output on the inputs' device, and call
// `kernels[op]` — one array load, no string lookup.
//
//   struct MyBackend : sightline::Backend {
//     MyBackend() : Backend("mydev") { kernels[int(OpId::add)] = &my_add; }
//     std::shared_ptr<Storage> allocate(Device d, size_t n) override;
//     void copy_from_host(const Storage&, size_t, const void*, size_t) override;
//     void copy_to_host(void*, const Storage&, size_t, size_t) override;
//   };
//   register_backend(std::make_unique<MyBackend>());
//   Tensor x = ones({4}, Device::parse("mydev:0"));
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/ops.h"
#include "sightline/tensor.h"

namespace sightline {

// A kernel writes the result of `call` into `out`, which the dispatcher allocated on the backend's
// device with the shape and dtype of infer_meta(call). Inputs may be non-contiguous and broadcast. An op
// of several outputs (topk) writes the others into call.more_outputs, allocated the same way.
using Kernel = void (*)(const OpCall& call, Tensor& out);

class Backend {
 public:
  // Bump when a slot is added; a backend built against another version is refused at registration.
  static constexpr int kInterfaceVersion = 1;

  explicit Backend(std::string name) : name_(std::move(name)) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return name_; }
  virtual int interface_version() const { return kInterfaceVersion; }
  virtual int device_count() const { return 1; }

  // Required: memory of the device, reached from the host only through these copies.
  virtual std::shared_ptr<Storage> allocate(Device device, size_t nbytes) = 0;
  virtual void copy_from_host(const Storage& dst, size_t dst_offset, const void* src, size_t nbytes) = 0;
  virtual void copy_to_host(void* dst, const Storage& src, size_t src_offset, size_t nbytes) = 0;
  // Optional: wait until all work queued on `device` is done. Default: work is synchronous.
  virtual void synchronize(Device device) { (void)device; }

  // Kernels by OpId; a null slot means the backend lacks the op (dispatch then names those that have it).
  std::array<Kernel, 64> kernels{};

 private:
  std::string name_;
};
static_assert(kOpCount <= 64, "grow Backend::kernels");

// Registers a backend and returns its id (the Device::backend of its devices). Names are unique.
uint8_t register_backend(std::unique_ptr<Backend> backend);
// Registers the backend `factory` makes the first time the registry is used (or at once, when it
// already has been), after cpu. For a backend linked into the program that must exist before the
// program's first tensor without anyone calling it: neuron registers this way from a static
// initializer of its own layer.
void register_backend_factory(std::unique_ptr<Backend> (*factory)());
// The backend with this id or name; find_backend returns nullptr for an unknown name.
Backend& backend(uint8_t id);
Backend* find_backend(std::string_view name);
std::vector<std::string> backend_names();
// Waits for all queued work on a device (no-op for synchronous backends).
void synchronize(Device device);

// Observer hooks around every dispatched op, for the profiler. When none is installed the cost is
// one relaxed atomic load per op. `before` returns an opaque token passed back to `after`.
struct DispatchObserver {
  uint64_t (*before)(const OpCall& call, void* user) = nullptr;
  void (*after)(const OpCall& call, const Tensor& out, uint64_t token, void* user) = nullptr;
  void* user = nullptr;
};
// Installs (or, with nullptr, removes) the observer. The object must outlive its installation.
void set_dispatch_observer(const DispatchObserver* observer);

// Runs one op: the path every op function in ops.h takes.
Tensor dispatch(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);
// Runs an op of any number of outputs (op_info(op).outputs) and returns them all, in order; the observer
// sees one op, with output 0 as its `out`. dispatch() of such an op is an error naming this function.
std::vector<Tensor> dispatch_outputs(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);

}  // namespace sightline
