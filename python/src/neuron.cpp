// The neuron device and its profiling (include/sightline/neuron.h), and the host clock
// (include/sightline/host_clock.h). synchronize() and export_trace() release the GIL.
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "bindings.h"
#include "sightline/host_clock.h"
#include "sightline/neuron.h"
#include "sightline/profiler/profile.h"

namespace sightline::python {

void init_neuron(py::module_& m) {
  py::module_ n = m.def_submodule("neuron", "the simulated NeuronCore device and its profiling");
  n.def(
      "configure",
      [](const std::string& spec, int cores, size_t queue_capacity, bool functional) {
        neuron::configure(
            {.spec = spec, .cores = cores, .queue_capacity = queue_capacity, .functional = functional});
      },
      py::kw_only(), py::arg("spec") = "trn2", py::arg("cores") = 0, py::arg("queue_capacity") = 64,
      py::arg("functional") = true);
  n.def("synchronize", &neuron::synchronize, py::call_guard<py::gil_scoped_release>());

  py::class_<neuron::DeviceInfo>(n, "DeviceInfo")
      .def_readonly("spec_name", &neuron::DeviceInfo::spec_name)
      .def_readonly("core_version", &neuron::DeviceInfo::core_version)
      .def_readonly("cores", &neuron::DeviceInfo::cores)
      .def_readonly("hbm_bytes_per_core", &neuron::DeviceInfo::hbm_bytes_per_core)
      .def_readonly("hbm_bytes_per_ns", &neuron::DeviceInfo::hbm_bytes_per_ns)
      .def_readonly("functional", &neuron::DeviceInfo::functional)
      .def_readonly("tensor_flops_per_ns", &neuron::DeviceInfo::tensor_flops_per_ns)
      .def_readonly("tensor_fp32_flops_per_ns", &neuron::DeviceInfo::tensor_fp32_flops_per_ns)
      .def("__repr__", [](const neuron::DeviceInfo& d) {
        return "DeviceInfo(spec_name='" + d.spec_name + "', core_version='" + d.core_version +
               "', cores=" + std::to_string(d.cores) + ", functional=" + (d.functional ? "True" : "False") + ")";
      });
  n.def("device_info", &neuron::device_info, py::call_guard<py::gil_scoped_release>());
  n.def("memory_allocated", &neuron::memory_allocated, py::arg("core") = 0);
  n.def("memory_free", &neuron::memory_free, py::arg("core") = 0);
  n.def("simulation_wall_ns", &neuron::simulation_wall_ns);

  py::enum_<neuron::ProfileMode>(n, "ProfileMode")
      .value("DEVICE", neuron::ProfileMode::DEVICE)
      .value("RUNTIME", neuron::ProfileMode::RUNTIME);

  py::class_<neuron::NeuronConfig, profiler::ExperimentalConfig, std::shared_ptr<neuron::NeuronConfig>>(
      n, "NeuronConfig")
      .def(py::init([](const std::vector<neuron::ProfileMode>& modes, const std::string& capture_enabled_for_nc,
                       bool correlate_device_time, const std::string& profile_output_dir, size_t max_events_per_nc) {
             auto cfg = std::make_shared<neuron::NeuronConfig>();
             cfg->modes = modes;
             cfg->capture_enabled_for_nc = capture_enabled_for_nc;
             cfg->correlate_device_time = correlate_device_time;
             cfg->profile_output_dir = profile_output_dir;
             cfg->max_events_per_nc = max_events_per_nc;
             return cfg;
           }),
           py::kw_only(),
           py::arg("modes") = std::vector<neuron::ProfileMode>{neuron::ProfileMode::DEVICE, neuron::ProfileMode::RUNTIME},
           py::arg("capture_enabled_for_nc") = "0", py::arg("correlate_device_time") = true,
           py::arg("profile_output_dir") = "profile_output", py::arg("max_events_per_nc") = size_t{1'000'000})
      .def_readwrite("modes", &neuron::NeuronConfig::modes)
      .def_readwrite("capture_enabled_for_nc", &neuron::NeuronConfig::capture_enabled_for_nc)
      .def_readwrite("correlate_device_time", &neuron::NeuronConfig::correlate_device_time)
      .def_readwrite("profile_output_dir", &neuron::NeuronConfig::profile_output_dir)
      .def_readwrite("max_events_per_nc", &neuron::NeuronConfig::max_events_per_nc)
      .def("has", &neuron::NeuronConfig::has, py::arg("mode"));

  py::class_<neuron::NeuronProfiler>(n, "NeuronProfiler")
      .def(py::init<std::shared_ptr<const neuron::NeuronConfig>>(), py::arg("config"))
      .def("export_trace", &neuron::NeuronProfiler::export_trace, py::arg("prof"),
           py::call_guard<py::gil_scoped_release>());

  py::class_<neuron::TraceSummary>(n, "TraceSummary")
      .def_readonly("executions", &neuron::TraceSummary::executions)
      .def_readonly("copies_in", &neuron::TraceSummary::copies_in)
      .def_readonly("busy_us", &neuron::TraceSummary::busy_us)
      .def_readonly("span_us", &neuron::TraceSummary::span_us)
      .def_readonly("overhead_us", &neuron::TraceSummary::overhead_us)
      .def_readonly("hbm_mb", &neuron::TraceSummary::hbm_mb)
      .def_readonly("not_completed", &neuron::TraceSummary::not_completed)
      .def_readonly("earlier_steps", &neuron::TraceSummary::earlier_steps)
      .def_readonly("simulation_ms", &neuron::TraceSummary::simulation_ms)
      .def_readonly("host_clock", &neuron::TraceSummary::host_clock)
      .def("__repr__", [](const neuron::TraceSummary& s) {
        return "TraceSummary(executions=" + std::to_string(s.executions) +
               ", copies_in=" + std::to_string(s.copies_in) + ", busy_us=" + std::to_string(s.busy_us) +
               ", span_us=" + std::to_string(s.span_us) + ", hbm_mb=" + std::to_string(s.hbm_mb) + ")";
      });
  n.def("last_trace_summary", &neuron::last_trace_summary);

  py::module_ h = m.def_submodule("host_clock", "the host timeline: modeled (default) or measured");
  h.def("set_mode", [](const std::string& mode) { host_clock::set_mode(host_clock::parse_mode(mode)); },
        py::arg("mode"));
  h.def("mode", [] { return std::string(host_clock::mode_name(host_clock::mode())); });
  h.def("now_ns", &host_clock::now_ns);
  h.def("wall_now_ns", &host_clock::wall_now_ns);
  h.def("blocked_ns", &host_clock::blocked_ns);
}

}  // namespace sightline::python
