// compile() over a Python function (include/sightline/compile.h). The C++ compile() takes a callable
// over tensors: here that callable re-enters Python (taking the GIL) to run the user's function on the
// capture backend's proxy tensors, so the function's ops are recorded like a C++ function's. Calls
// release the GIL; capture takes it back only while the Python function runs.
#include <memory>
#include <string>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "sightline/compile.h"

namespace sightline::python {
namespace {

// The Python function and what its last capture returned: one tensor, or a tuple/list of them.
struct PyFunction {
  py::object fn;
  bool returns_single = true;
};

// Owned by the C++ compiled function, which may drop it on any thread: take the GIL to release it.
std::shared_ptr<PyFunction> hold(py::object fn) {
  return std::shared_ptr<PyFunction>(new PyFunction{std::move(fn)}, [](PyFunction* p) {
    if (!Py_IsInitialized()) return;  // at interpreter exit the object is already gone
    py::gil_scoped_acquire gil;
    delete p;
  });
}

class PyCompiledFunction {
 public:
  PyCompiledFunction(py::object fn, bool optimize, std::string cache_dir, int arity, const std::string& autocast,
                     bool fullgraph, bool substitute_builtins)
      : py_(hold(std::move(fn))),
        compiled_(compile(
            TensorListFunction([py = py_](const std::vector<Tensor>& inputs) { return call(*py, inputs); }),
            CompileOptions{.optimize = optimize,
                           .cache_dir = std::move(cache_dir),
                           .autocast = autocast_parse(autocast),
                           .fullgraph = fullgraph,
                           .substitute_builtins = substitute_builtins},
            arity)) {}

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const {
    py::gil_scoped_release release;
    return compiled_(inputs);
  }
  bool returns_single() const { return py_->returns_single; }
  CompileStats stats() const { return compiled_.stats(); }
  std::string graph_dump(const std::vector<Tensor>& inputs) const {
    py::gil_scoped_release release;
    return compiled_.graph_dump(inputs);
  }
  CompileReport explain(const std::vector<Tensor>& inputs) const {
    py::gil_scoped_release release;
    return compiled_.explain(inputs);
  }

 private:
  static std::vector<Tensor> call(PyFunction& py, const std::vector<Tensor>& inputs) {
    py::gil_scoped_acquire gil;
    py::tuple args(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) args[i] = py::cast(inputs[i]);
    const py::object result = py.fn(*args);
    if (py::isinstance<Tensor>(result)) {
      py.returns_single = true;
      return {result.cast<Tensor>()};
    }
    if (py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result)) {
      py.returns_single = false;
      std::vector<Tensor> out;
      for (const py::handle item : result) {
        if (!py::isinstance<Tensor>(item)) {
          throw py::type_error("compile(): the function must return a Tensor or a tuple of Tensors, got a " +
                               std::string(py::str(py::type::handle_of(item).attr("__name__"))) + " in its result");
        }
        out.push_back(item.cast<Tensor>());
      }
      return out;
    }
    throw py::type_error("compile(): the function must return a Tensor or a tuple of Tensors, got " +
                         std::string(py::str(py::type::handle_of(result).attr("__name__"))));
  }

  std::shared_ptr<PyFunction> py_;
  CompiledFunction compiled_;
};

}  // namespace

void init_compile(py::module_& m) {
  py::class_<CompileStats>(m, "CompileStats")
      .def_readonly("compilations", &CompileStats::compilations)
      .def_readonly("calls", &CompileStats::calls)
      .def_readonly("cache_hits", &CompileStats::cache_hits)
      .def_readonly("lowerings", &CompileStats::lowerings)
      .def_readonly("disk_cache_hits", &CompileStats::disk_cache_hits)
      .def_readonly("device_calls", &CompileStats::device_calls)
      .def("__repr__", [](const CompileStats& s) {
        return "CompileStats(compilations=" + std::to_string(s.compilations) + ", calls=" + std::to_string(s.calls) +
               ", cache_hits=" + std::to_string(s.cache_hits) + ", lowerings=" + std::to_string(s.lowerings) +
               ", disk_cache_hits=" + std::to_string(s.disk_cache_hits) +
               ", device_calls=" + std::to_string(s.device_calls) + ")";
      });
  py::class_<GraphBreak>(m, "GraphBreak")
      .def_readonly("op", &GraphBreak::op)
      .def_readonly("reason", &GraphBreak::reason)
      .def_readonly("op_index", &GraphBreak::op_index)
      .def_readonly("graph", &GraphBreak::graph)
      .def("__repr__", [](const GraphBreak& b) {
        return "GraphBreak(op=" + b.op + ", op_index=" + std::to_string(b.op_index) + ", graph=" +
               std::to_string(b.graph) + ", reason=" + b.reason + ")";
      });
  py::class_<CompileReport>(m, "CompileReport")
      .def_readonly("graph_count", &CompileReport::graph_count)
      .def_readonly("graph_break_count", &CompileReport::graph_break_count)
      .def_readonly("op_count", &CompileReport::op_count)
      .def_readonly("breaks", &CompileReport::breaks)
      .def_property_readonly("break_reasons", [](const CompileReport& r) { return r.breaks; })
      .def("__str__", &CompileReport::to_string)
      .def("__repr__", &CompileReport::to_string);
  py::class_<PyCompiledFunction>(m, "CompiledFunction")
      .def(py::init<py::object, bool, std::string, int, std::string, bool, bool>(), py::arg("fn"),
           py::arg("optimize") = true, py::arg("cache_dir") = "", py::arg("arity") = -1, py::arg("autocast") = "none",
           py::arg("fullgraph") = false, py::arg("substitute_builtins") = false)
      .def("__call__", &PyCompiledFunction::operator(), py::arg("inputs"))
      .def_property_readonly("returns_single", &PyCompiledFunction::returns_single)
      .def("stats", &PyCompiledFunction::stats)
      .def("graph_dump", &PyCompiledFunction::graph_dump, py::arg("inputs"))
      .def("explain", &PyCompiledFunction::explain, py::arg("inputs"));
}

}  // namespace sightline::python
