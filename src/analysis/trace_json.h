// Reads a trace.json written by profiler::export_chrome_trace (either lane layout) back into the
// CollectedTrace it came from, so that key_averages of a saved profile is the live one, byte for byte.
//
//   profiler::CollectedTrace trace = analysis::trace_json_load("profiles/fused/trace.json");
//   auto averages = profiler::key_averages(trace, {.device_name = "neuron"});
//   std::cout << averages.table("self_neuron_time_total", 10);
//
// What it recovers: every 'X' event with its kind (from "cat"), host thread or device lane, start and
// end in exact nanoseconds (ts/dur are read from their decimal text, never through a double, which
// would lose the last nanosecond at three months from the base time), "External id", "correlation",
// "Input Dims", flops and bytes; the [memory] instant events of profile_memory. In the system-lane layout a runtime call sits on its core's lane; its
// host thread comes back from the "fwd" flow that links it to its framework op. The CPU tree, the
// attribution of device events and the self/total times are then rebuilt by profiler::build_trace.
// The file is read by the one trace reader (formats/trace_reader.h: simdjson On-Demand, times as
// exact nanoseconds), which hands this reader one event's document at a time, never a document of
// the whole file: memory is what the trace holds plus the text read once into a padded buffer, not
// ten times the file; validation reads runs of about a MiB (bounded memory, for uploads).
#pragma once

#include <string>
#include <string_view>

#include "analysis/profile_dir.h"
#include "sightline/profiler/events.h"

namespace sightline::analysis {

// Throws sightline::Error naming `path` for unreadable files, malformed JSON and events that lack
// the fields above.
profiler::CollectedTrace trace_json_load(const std::string& path, const ProgressCallback& progress = {});
profiler::CollectedTrace trace_json_parse(std::string_view text, const std::string& origin,
                                          const ProgressCallback& progress = {});

// Every check the two functions above make, keeping nothing: memory is one event and one buffer of
// the file whatever its size (the Explorer server validates uploads with it). Throws as they do.
void trace_json_validate_file(const std::string& path, const std::string& origin);
void trace_json_validate(std::string_view text, const std::string& origin);

// The backend name the trace's device lanes use ("neuron" for ".../neuron_hw/NC:0"), or "privateuseone":
// from the first hardware lane that a metadata event (process_name, thread_name) names, else from
// deviceProperties. Read through formats/trace_reader, so an event's own name or args never count;
// throws as that reader does for text that is not a trace.
std::string trace_json_device_name(std::string_view text);
// The same for a file, with bounded memory, read only as far as the first hardware lane.
std::string trace_json_file_device_name(const std::string& path);

}  // namespace sightline::analysis
