// The profiler (include/sightline/profiler.h and profiler/*.h): profile, schedule, record_function,
// key_averages and its table. The Python layer (sightline/profiler.py) subclasses _Profile for torch's
// keyword arguments and the context manager; on_trace_ready receives that Python object.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "sightline/profiler.h"

namespace sightline::python {
namespace {

using namespace sightline::profiler;

// A Python object owned by C++ state that may be released without the GIL.
std::shared_ptr<py::object> hold(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// A schedule as Python sees it: callable on a step number, like torch.profiler.schedule's result.
struct PySchedule {
  Schedule fn;
  ProfilerAction operator()(std::int64_t step) const { return fn(step); }
};

Schedule schedule_from(const py::object& value) {
  if (value.is_none()) return {};
  if (py::isinstance<PySchedule>(value)) return value.cast<PySchedule>().fn;
  if (!PyCallable_Check(value.ptr())) throw py::type_error("schedule must be callable: step -> ProfilerAction");
  // Any callable step -> ProfilerAction, as torch accepts.
  auto held = hold(value);
  return [held](std::int64_t step) {
    py::gil_scoped_acquire gil;
    return (*held)(step).cast<ProfilerAction>();
  };
}

// with_stack: the Python frames of the thread that dispatches an op, innermost first, as torch writes
// them ("file(line): function"), leaving out the frames of the sightline package itself so that the
// first frame is the user's call site. Ops run with the GIL released; it is re-acquired here, only on
// threads that have run Python (a C++ worker thread has no frames and must not wait for the GIL).
std::vector<std::string>& package_prefixes() {
  static auto* prefixes = new std::vector<std::string>();  // set once at import, before any profile
  return *prefixes;
}

void python_stack(std::vector<std::string>& frames) {
  constexpr std::size_t kMaxFrames = 128;
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return;
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && frames.size() < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* function = PyUnicode_AsUTF8(code->co_name);
    if (file == nullptr || function == nullptr) PyErr_Clear();
    const std::string_view file_name = file != nullptr ? file : "<unknown>";
    bool ours = false;
    for (const std::string& prefix : package_prefixes()) ours = ours || file_name.starts_with(prefix);
    if (!ours) {
      std::string& text = frames.emplace_back(file_name);
      text += '(';
      text += std::to_string(PyFrame_GetLineNumber(frame));
      text += "): ";
      text += function != nullptr ? function : "<unknown>";
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
}

profile* make_profile(const std::vector<ProfilerActivity>& activities, const py::object& schedule,
                      const py::object& on_trace_ready, bool record_shapes, bool profile_memory, bool with_flops,
                      bool with_stack, std::shared_ptr<ExperimentalConfig> experimental_config,
                      std::uint64_t max_events) {
  ProfileOptions options;
  options.activities = activities;
  options.schedule = schedule_from(schedule);
  if (!on_trace_ready.is_none()) {
    if (!PyCallable_Check(on_trace_ready.ptr())) throw py::type_error("on_trace_ready must be callable");
    auto held = hold(on_trace_ready);
    // The callback gets the Python profile object (the existing wrapper of `p`).
    options.on_trace_ready = [held](profile& p) {
      py::gil_scoped_acquire gil;
      (*held)(py::cast(&p, py::return_value_policy::reference));
    };
  }
  options.record_shapes = record_shapes;
  options.profile_memory = profile_memory;
  options.with_flops = with_flops;
  options.with_stack = with_stack;
  options.experimental_config = std::move(experimental_config);
  options.max_events = max_events;
  return new profile(std::move(options));
}

TableOptions table_options(const py::object& sort_by, std::int64_t row_limit, std::int64_t max_src_column_width,
                           std::int64_t max_name_column_width, std::int64_t max_shapes_column_width,
                           const py::object& header,
                           bool top_level_events_only, const py::object& time_unit,
                           bool only_rows_with_device_time) {
  TableOptions options;
  if (!sort_by.is_none()) options.sort_by = sort_by.cast<std::string>();
  options.row_limit = row_limit;
  options.max_name_column_width = max_name_column_width;
  options.max_shapes_column_width = max_shapes_column_width;
  options.max_src_column_width = max_src_column_width;
  if (!header.is_none()) options.header = header.cast<std::string>();
  options.top_level_events_only = top_level_events_only;
  if (!time_unit.is_none()) options.time_unit = time_unit.cast<std::string>();
  options.only_rows_with_device_time = only_rows_with_device_time;
  return options;
}

// torch's FunctionEventAvg reports times in microseconds.
double us(std::int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

void init_profiler(py::module_& m) {
  py::enum_<ProfilerActivity>(m, "ProfilerActivity")
      .value("CPU", ProfilerActivity::CPU)
      .value("PrivateUse1", ProfilerActivity::PrivateUse1);
  py::enum_<ProfilerAction>(m, "ProfilerAction")
      .value("NONE", ProfilerAction::none)
      .value("WARMUP", ProfilerAction::warmup)
      .value("RECORD", ProfilerAction::record)
      .value("RECORD_AND_SAVE", ProfilerAction::record_and_save);

  py::class_<PySchedule>(m, "Schedule").def("__call__", &PySchedule::operator(), py::arg("step"));
  m.def(
      "schedule",
      [](std::int64_t wait, std::int64_t warmup, std::int64_t active, std::int64_t repeat, std::int64_t skip_first,
         std::int64_t skip_first_wait) {
        return PySchedule{schedule({.wait = wait,
                                    .warmup = warmup,
                                    .active = active,
                                    .repeat = repeat,
                                    .skip_first = skip_first,
                                    .skip_first_wait = skip_first_wait})};
      },
      py::kw_only(), py::arg("wait"), py::arg("warmup"), py::arg("active"), py::arg("repeat") = 0,
      py::arg("skip_first") = 0, py::arg("skip_first_wait") = 0);

  py::class_<ExperimentalConfig, std::shared_ptr<ExperimentalConfig>>(m, "ExperimentalConfig");

  py::class_<FunctionEventAvg>(m, "FunctionEventAvg")
      .def_readonly("key", &FunctionEventAvg::key)
      .def_readonly("count", &FunctionEventAvg::count)
      .def_readonly("is_user_annotation", &FunctionEventAvg::is_user_annotation)
      .def_property_readonly("device_type",
                             [](const FunctionEventAvg& r) {
                               return r.device_type == DeviceType::cpu ? "cpu" : "privateuseone";
                             })
      .def_readonly("cpu_time_total_ns", &FunctionEventAvg::cpu_time_total_ns)
      .def_readonly("self_cpu_time_total_ns", &FunctionEventAvg::self_cpu_time_total_ns)
      .def_readonly("device_time_total_ns", &FunctionEventAvg::device_time_total_ns)
      .def_readonly("self_device_time_total_ns", &FunctionEventAvg::self_device_time_total_ns)
      .def_property_readonly("cpu_time_total", [](const FunctionEventAvg& r) { return us(r.cpu_time_total_ns); })
      .def_property_readonly("self_cpu_time_total",
                             [](const FunctionEventAvg& r) { return us(r.self_cpu_time_total_ns); })
      .def_property_readonly("device_time_total",
                             [](const FunctionEventAvg& r) { return us(r.device_time_total_ns); })
      .def_property_readonly("self_device_time_total",
                             [](const FunctionEventAvg& r) { return us(r.self_device_time_total_ns); })
      .def_property_readonly("cpu_time", [](const FunctionEventAvg& r) { return r.cpu_time_avg_ns() / 1e3; })
      .def_property_readonly("device_time", [](const FunctionEventAvg& r) { return r.device_time_avg_ns() / 1e3; })
      .def_readonly("flops", &FunctionEventAvg::flops)
      .def_readonly("cpu_memory_usage", &FunctionEventAvg::cpu_memory_usage)
      .def_readonly("self_cpu_memory_usage", &FunctionEventAvg::self_cpu_memory_usage)
      .def_readonly("device_memory_usage", &FunctionEventAvg::device_memory_usage)
      .def_readonly("self_device_memory_usage", &FunctionEventAvg::self_device_memory_usage)
      .def_readonly("input_shapes", &FunctionEventAvg::input_shapes)
      .def_readonly("stack", &FunctionEventAvg::stack)
      .def("__repr__", [](const FunctionEventAvg& r) {
        return "<FunctionEventAvg key=" + r.key + " count=" + std::to_string(r.count) +
               " self_cpu_time_total_ns=" + std::to_string(r.self_cpu_time_total_ns) +
               " self_device_time_total_ns=" + std::to_string(r.self_device_time_total_ns) + ">";
      });

  py::class_<KeyAverages>(m, "KeyAverages")
      .def(
          "table",
          [](const KeyAverages& k, const py::object& sort_by, std::int64_t row_limit,
             std::int64_t max_src_column_width, std::int64_t max_name_column_width,
             std::int64_t max_shapes_column_width, const py::object& header, bool top_level_events_only,
             const py::object& time_unit, bool only_rows_with_device_time) {
            return k.table(table_options(sort_by, row_limit, max_src_column_width, max_name_column_width,
                                         max_shapes_column_width, header, top_level_events_only, time_unit,
                                         only_rows_with_device_time));
          },
          // torch's order: sort_by, row_limit, max_src_column_width, ...
          py::arg("sort_by") = py::none(), py::arg("row_limit") = 100, py::arg("max_src_column_width") = 75,
          py::arg("max_name_column_width") = 55, py::arg("max_shapes_column_width") = 80,
          py::arg("header") = py::none(), py::arg("top_level_events_only") = false, py::arg("time_unit") = py::none(),
          py::arg("only_rows_with_device_time") = false)
      // The same rows as data (docs/formats.md): torch's column names, times in integer ns.
      .def(
          "to_csv",
          [](const KeyAverages& k, const py::object& sort_by, std::int64_t row_limit, bool top_level_events_only,
             bool only_rows_with_device_time) {
            return k.to_csv(table_options(sort_by, row_limit, 75, 55, 80, py::none(), top_level_events_only, py::none(),
                                          only_rows_with_device_time));
          },
          py::arg("sort_by") = py::none(), py::arg("row_limit") = 100, py::arg("top_level_events_only") = false,
          py::arg("only_rows_with_device_time") = false)
      .def(
          "to_json",
          [](const KeyAverages& k, const py::object& sort_by, std::int64_t row_limit, bool top_level_events_only,
             bool only_rows_with_device_time) {
            return k.to_json(table_options(sort_by, row_limit, 75, 55, 80, py::none(), top_level_events_only, py::none(),
                                           only_rows_with_device_time));
          },
          py::arg("sort_by") = py::none(), py::arg("row_limit") = 100, py::arg("top_level_events_only") = false,
          py::arg("only_rows_with_device_time") = false)
      .def_property_readonly("device_name", &KeyAverages::device_name)
      .def_property_readonly("dropped_events", &KeyAverages::dropped_events)
      .def_property_readonly("notes", &KeyAverages::notes)
      .def("rows", &KeyAverages::rows)
      .def("__len__", [](const KeyAverages& k) { return k.rows().size(); })
      .def("__getitem__",
           [](const KeyAverages& k, py::ssize_t i) {
             const auto n = static_cast<py::ssize_t>(k.rows().size());
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("key_averages index out of range");
             return k.rows()[static_cast<size_t>(i)];
           })
      .def("__str__", [](const KeyAverages& k) { return k.table(); });

  py::class_<profile>(m, "_Profile")
      .def(py::init(&make_profile), py::arg("activities"), py::arg("schedule"), py::arg("on_trace_ready"),
           py::arg("record_shapes"), py::arg("profile_memory"), py::arg("with_flops"), py::arg("with_stack"),
           py::arg("experimental_config"), py::arg("max_events"))
      .def("start", &profile::start, py::call_guard<py::gil_scoped_release>())
      .def("stop", &profile::stop, py::call_guard<py::gil_scoped_release>())
      .def("step", &profile::step, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("running", &profile::running)
      .def_property_readonly("step_num", &profile::step_num)
      .def_property_readonly("current_action", &profile::current_action)
      .def("key_averages", &profile::key_averages, py::arg("group_by_input_shape") = false,
           py::arg("group_by_stack_n") = 0)
      .def("export_stacks", &profile::export_stacks, py::arg("path"), py::arg("metric") = "self_cpu_time_total",
           py::call_guard<py::gil_scoped_release>())
      .def("export_chrome_trace", &profile::export_chrome_trace, py::arg("path"),
           py::call_guard<py::gil_scoped_release>())
      .def("_events", [](const profile& p) {
        // The last trace's events as dicts (name, kind, device, times in ns), for tests and scripts.
        py::list out;
        for (const FunctionEvent& e : p.trace().events) {
          py::dict d;
          d["name"] = e.name;
          d["device_type"] = e.device_type == DeviceType::cpu ? "cpu" : "privateuseone";
          d["is_user_annotation"] = e.is_user_annotation();
          d["device_index"] = e.device_index;
          d["start_ns"] = e.start_ns;
          d["end_ns"] = e.end_ns;
          d["input_shapes"] = e.input_shapes.to_vector();
          d["stack"] = e.stack.to_vector();
          d["parent"] = e.parent;
          out.append(d);
        }
        return out;
      });

  // record_function as a context manager: the C++ scope lives from __enter__ to __exit__.
  struct PyRecordFunction {
    std::string name;
    std::optional<record_function> scope;
  };
  py::class_<PyRecordFunction>(m, "_RecordFunction")
      .def(py::init([](std::string name) { return new PyRecordFunction{std::move(name), std::nullopt}; }),
           py::arg("name"))
      .def_readonly("name", &PyRecordFunction::name)
      .def("__enter__",
           [](PyRecordFunction& r) -> PyRecordFunction& {
             if (r.scope) throw py::value_error("record_function(\"" + r.name + "\") is already open");
             r.scope.emplace(r.name);
             return r;
           },
           py::return_value_policy::reference_internal)
      .def("__exit__", [](PyRecordFunction& r, const py::args&) {
        r.scope.reset();
        return false;
      });

  // The package's own directory (its frames are left out of stacks); installs the stack provider.
  m.def("_set_stack_package_dirs", [](std::vector<std::string> dirs) {
    package_prefixes() = std::move(dirs);
    set_stack_provider(&python_stack);
  });

  m.def("rename_privateuse1_backend", &rename_privateuse1_backend, py::arg("name"));
  m.def("privateuse1_backend_name", &privateuse1_backend_name);
  m.def("format_time_us", &format_time_us, py::arg("time_us"), py::arg("unit") = "");
}

}  // namespace sightline::python
