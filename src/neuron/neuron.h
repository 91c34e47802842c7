// The neuron backend: sightline's tensors on simulated NeuronCores.
//
//   neuron::configure({.spec = "trn1"});            // optional, before first use; default trn2
//   Tensor x = randn({4096, 4096}).to(Device::parse("neuron:0"));
//   Tensor y = x * x;                               // one eager executable, queued on core 0
//   neuron::synchronize();                          // wait for every core
//
// It registers as `neuron` through the backend registry exactly like `cpu`. Each eager op builds (once,
// then cached by op, shapes, strides and dtypes) a device executable with the kernel builder and queues
// it on the tensor's core through the runtime. A host scalar combined with a device tensor (x + 1e-6)
// is copied to the device as its own visible host-to-device copy, as on real hardware.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/runtime.h"
#include "sightline/tensor.h"

namespace sightline::neuron {

struct Options {
  std::string spec = "trn2";   // a preset name (trn2, trn1) or the path of a spec JSON file
  int cores = 0;               // 0: the spec's cores per instance
  size_t queue_capacity = 64;  // per core
  bool functional = true;      // false: timing only, results are not computed
};

// Sets the options used when the runtime starts (at the first use of a neuron device). Throws once
// the runtime has started.
void configure(const Options& options);
// The runtime behind the backend, started on first call.
runtime::Runtime& runtime();
// Waits for every queued execution on every core (torch.neuron.synchronize()).
void synchronize();
// Number of distinct executables built for eager ops so far (the kernel cache size).
size_t eager_cache_size();
// The HBM address of a neuron tensor's first element: what an executable's I/O tensor binds to (the
// compiler runs whole programs on tensors the backend allocated). Throws for a tensor not on neuron.
uint64_t device_address(const Tensor& t);

}  // namespace sightline::neuron
