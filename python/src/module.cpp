// sightline._sightline: the C++ core of the sightline Python package. The torch-like names live in
// the pure-Python layer (python/sightline/); this module binds the public C++ API as it is.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "sightline/error.h"

namespace py = pybind11;

PYBIND11_MODULE(_sightline, m) {
  m.doc() = "sightline's C++ core: tensors, the op table, compile(), the profiler and the neuron device";
  // sightline::Error (a user error: bad shapes, dtypes, devices, files) becomes sightline.Error, a
  // RuntimeError as torch raises for the same mistakes, with the C++ message unchanged.
  py::register_exception<sightline::Error>(m, "Error", PyExc_RuntimeError);
  sightline::python::init_tensor(m);
  sightline::python::init_ops(m);
  sightline::python::init_compile(m);
  sightline::python::init_profiler(m);
  sightline::python::init_neuron(m);
}
