// Registers the neuron backend from the layer that owns it: the registry (backend/) knows nothing of
// neuron. Nothing refers to this file, so the library's umbrella target links its archive whole
// (src/CMakeLists.txt, WHOLE_ARCHIVE): its static initializer then runs in every program. Its
// priority runs it before the static initializers of the program's own files (a test's global
// `Device::parse("neuron:0")`, say), whatever the link order; the registry builds the backend on its
// first use, right after cpu.
#include "neuron/neuron.h"

namespace {

struct Registrar {
  Registrar() { sightline::register_backend_factory(&sightline::neuron::make_backend); }
};

// 101 is the first priority left to programs (0-100 belong to the implementation).
const Registrar kRegistrar __attribute__((init_priority(101)));

}  // namespace
