// The backends compiled into the library, registered (in this order) the first time the registry is
// used: cpu first, so that Device::cpu() is backend id 0. Each is registered through the same
// register_backend() a user's backend calls.
#pragma once

#include <memory>
#include <vector>

#include "sightline/backend.h"

namespace sightline {

std::unique_ptr<Backend> make_cpu_backend();
// Defined by the neuron layer (src/neuron/), which sits above the runtime and the kernel builder;
// the registry only needs its factory.
std::unique_ptr<Backend> make_neuron_backend();
// The built-in backends in registration order.
std::vector<std::unique_ptr<Backend>> builtin_backends();

}  // namespace sightline
