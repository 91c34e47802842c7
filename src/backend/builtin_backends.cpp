#include "backend/builtin_backends.h"

namespace sightline {

std::vector<std::unique_ptr<Backend>> builtin_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  backends.push_back(make_neuron_backend());
  return backends;
}

}  // namespace sightline
