// Shared by the examples: what the device did in a profiled step, summed from the runtime's events.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/runtime.h"

namespace sightline::examples {

// What the device did in the active step, from the runtime's events.
struct DeviceCost {
  int executions = 0;
  int copies_in = 0;
  double busy_us = 0;      // sum of nc_exec_running
  double span_us = 0;      // first to last device activity
  double overhead_us = 0;  // executable switches and first loads
  double hbm_mb = 0;
  double host_ms = 0;        // the step on the host clock (modeled by default), synchronize included
  double simulation_ms = 0;  // measured: wall time the simulator worked during the trace (never modeled)
  std::string output_dir;
};

inline DeviceCost device_cost(const runtime::Captured& c) {
  DeviceCost d;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const runtime::Event& e : c.events) {
    if (!runtime::event_kind_is_device(e.kind)) continue;
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
    const double us = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    switch (e.kind) {
      case runtime::EventKind::exec_running:
        ++d.executions;
        d.busy_us += us;
        d.hbm_mb += static_cast<double>(e.bytes) / 1e6;
        break;
      case runtime::EventKind::copy_in: ++d.copies_in; break;
      case runtime::EventKind::model_switch:
      case runtime::EventKind::first_load: d.overhead_us += us; break;
      default: break;
    }
  }
  if (first <= last) d.span_us = static_cast<double>(last - first) / 1e3;
  return d;
}

}  // namespace sightline::examples
