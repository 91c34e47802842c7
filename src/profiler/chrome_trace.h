// The Chrome trace exporter: writes a CollectedTrace in Kineto's JSON layout (torch.profiler's
// export_chrome_trace), which opens in Perfetto and chrome://tracing and loads in HTA.
//
//   export_chrome_trace(trace, "out/trace.json", {.device_name = "neuron"});
//
// Layout: {"schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit",
// "baseTimeNanoseconds", "traceEvents", "traceName"}. Host events are ph "X" on pid = process,
// tid = OS thread; device events on pid = device index, tid = device lane; 'M' events name and sort
// every lane (devices sort after the host, at 5000000 + index); each device event carries the
// "External id" of its framework op and the "correlation" of its launch, and one ac2g flow
// (ph "s" on the launch, ph "f" with "bp": "e" on the first device event it caused) links them.
// ts and dur are microseconds with three decimals, relative to baseTimeNanoseconds. With
// profile_memory, each allocation and release is a "[memory]" instant event (ph "i", cat
// "cpu_instant_event") on its thread's lane with torch's args (Total Reserved, Total Allocated, Bytes,
// Addr, Device Type, Device Id), and the top level says "profile_memory": true.
#pragma once

#include <string>

#include "sightline/profiler/events.h"
#include "profiler/json_writer.h"

namespace sightline::profiler {

struct ChromeTraceOptions {
  std::string device_name = "privateuseone";  // names device lanes that no source named
  std::string trace_name{};                   // "traceName"; export_chrome_trace uses the path
  // The system-trace layout of the Neuron tools instead of Kineto's: lanes named
  // instance/PID/subsystem/identifier — ".../framework/TID:k" for host threads,
  // ".../<device>_rt/NC:k" for runtime calls made for core k (runtime events with a device index),
  // ".../<device>_hw/NC:k" for device activity — and a flow from each framework op to the runtime
  // calls it made, next to the flow from a runtime call to the device work it launched.
  bool system_lanes = false;
  std::string instance{};  // the instance part of lane names; empty: the host name
  // Threads that format the events of a large trace (this one among them; the bytes are the same for
  // any count); 0: the machine's cores, at most 4. A trace under two blocks of events uses one.
  unsigned format_threads = 0;
};

// Writes the trace document into `json` (which must be empty) and flushes it.
void write_chrome_trace(const CollectedTrace& trace, JsonWriter& json, const ChromeTraceOptions& options);

// Writes the trace to `path` atomically: to "<path>.tmp" first, renamed on success, so an
// interrupted export never leaves a file that looks complete. Throws sightline::Error on I/O errors.
void export_chrome_trace(const CollectedTrace& trace, const std::string& path,
                         ChromeTraceOptions options = {});

}  // namespace sightline::profiler
