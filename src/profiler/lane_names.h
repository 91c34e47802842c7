// Lane names of the traces sightline writes: instance/PID/subsystem/identifier (docs/formats.md,
// docs/hardware-model.md §4.2). Host threads are "<prefix>/framework/TID:k", the runtime calls made
// for core k "<prefix>/<device>_rt/NC:k", the device activity of core k "<prefix>/<device>_hw/NC:k";
// a device shown as a process is "<device>_hw/NC:k". The one place that spells them: the Chrome
// trace exporter and the device activity sources write them with these functions, and trace.json's
// reader and the Explorer's server (which hands the parts to the UI) read them with parse_lane_name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sightline::profiler {

enum class LaneLayer { framework, runtime, hardware, other };

// "framework", "runtime", "hardware", "other".
std::string_view lane_layer_name(LaneLayer layer);

inline constexpr std::string_view kFrameworkSubsystem = "framework";
inline constexpr std::string_view kRuntimeSuffix = "_rt";   // of a runtime subsystem: "neuron_rt"
inline constexpr std::string_view kHardwareSuffix = "_hw";  // of a hardware subsystem: "neuron_hw"
// What every hardware lane name holds, for a cheap scan of a file's text before parsing it.
inline constexpr std::string_view kHardwareLaneMark = "_hw/NC:";
std::string runtime_subsystem(std::string_view device);   // "<device>_rt"
std::string hardware_subsystem(std::string_view device);  // "<device>_hw"
std::string thread_identifier(int index);                 // "TID:<index>"
std::string core_identifier(int core);                    // "NC:<core>"
// A device's core as a process and a lane of the trace: "<device>_hw/NC:<core>".
std::string hardware_lane_name(std::string_view device, int core);
// The lane of a core's collectives (the chip's collective engine working for that core), in the core's
// process beside its executions: "<device>_hw/CC:<core>".
std::string collective_lane_name(std::string_view device, int core);
// "<subsystem>/<identifier>", or "<prefix>/<subsystem>/<identifier>" with a prefix (instance/PID).
std::string lane_name(std::string_view prefix, std::string_view subsystem, std::string_view identifier);

// The parts of a lane name, read from the right: the identifier is the last part, the subsystem the
// one before, the PID the one before that and the instance all that precedes (it may hold '/').
// Parts a short name lacks are empty. The views point into the parsed name.
struct LaneName {
  std::string_view instance, pid, subsystem, identifier;
  LaneLayer layer = LaneLayer::other;
  std::string_view device;      // runtime and hardware lanes: "neuron" of "neuron_rt", "neuron_hw"
  std::optional<int> core;      // an identifier "NC:<core>" (or "CC:<core>", the core's collective lane)
  bool collective = false;      // an identifier "CC:<core>"
  std::optional<int> thread;    // an identifier "TID:<index>"
};
LaneName parse_lane_name(std::string_view name);

// The layer of a subsystem ("framework", "neuron_rt", "neuron_hw"), and of a process name, which ends
// in its subsystem ("host/4242/neuron_rt").
LaneLayer subsystem_layer(std::string_view subsystem);
LaneLayer process_layer(std::string_view process_name);

}  // namespace sightline::profiler
