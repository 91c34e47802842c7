// The neuron backend's internals (the public API is include/sightline/neuron.h): the runtime behind it
// and what the compiler needs of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/runtime.h"
#include "sightline/backend.h"
#include "sightline/neuron.h"
#include "sightline/tensor.h"

namespace sightline::neuron {

// The neuron backend object; neuron/register.cpp hands this factory to the registry.
std::unique_ptr<Backend> make_backend();

// The runtime behind the backend, started on first call.
runtime::Runtime& runtime();
// Number of distinct executables built for eager ops so far (the kernel cache size).
size_t eager_cache_size();
// The HBM address of a neuron tensor's first element: what an executable's I/O tensor binds to (the
// compiler runs whole programs on tensors the backend allocated). Throws for a tensor not on neuron.
uint64_t device_address(const Tensor& t);

}  // namespace sightline::neuron
