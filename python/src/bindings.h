// The pieces of the extension module sightline._sightline, one init function per public header it
// binds. Only public headers (include/sightline/) are included anywhere under python/src.
#pragma once

#include <cstdint>
#include <vector>

#include <pybind11/pybind11.h>

#include "sightline/tensor.h"

namespace sightline::python {

namespace py = pybind11;

void init_tensor(py::module_& m);    // tensor.h, dtype.h: Tensor, DType, Device, Generator, factories
void init_ops(py::module_& m);       // ops.h, backend.h: the op table and its functions
void init_compile(py::module_& m);   // compile.h
void init_profiler(py::module_& m);  // profiler.h and profiler/*.h
void init_neuron(py::module_& m);    // neuron.h, host_clock.h

// A shape or a list of dims from a Python int or a sequence of ints (torch accepts both).
Dims dims_from(const py::handle& value, const char* what);
// The same from *args: f(2, 3) and f((2, 3)) alike.
Dims dims_from_args(const py::args& args, const char* what);

}  // namespace sightline::python

// Dims arguments accept an int or a sequence of ints (a Python tuple comes back).
namespace pybind11::detail {
template <>
struct type_caster<sightline::Dims> {
  PYBIND11_TYPE_CASTER(sightline::Dims, const_name("Sequence[int]"));
  bool load(handle src, bool /*convert*/) {
    if (isinstance<int_>(src)) {
      value = sightline::Dims{src.cast<int64_t>()};
      return true;
    }
    if (!isinstance<sequence>(src) || isinstance<str>(src)) return false;
    const auto seq = reinterpret_borrow<sequence>(src);
    for (auto item : seq) {
      if (!isinstance<int_>(item)) return false;
    }
    value = sightline::python::dims_from(src, "shape");
    return true;
  }
  static handle cast(const sightline::Dims& dims, return_value_policy /*policy*/, handle /*parent*/) {
    tuple out(static_cast<size_t>(dims.size()));
    for (int i = 0; i < dims.size(); ++i) out[static_cast<size_t>(i)] = dims[i];
    return out.release();
  }
};
}  // namespace pybind11::detail
