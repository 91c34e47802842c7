// The cpu backend: the reference kernels. The registry registers it first, on its first use, so
// that Device::cpu() is backend id 0.
#pragma once

#include <memory>

#include "sightline/backend.h"

namespace sightline {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace sightline
