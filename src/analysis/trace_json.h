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
// exact nanoseconds, large files on several threads) into its typed runs, the ones the Explorer's
// index reads; each event's args are read from the mapped file only for the keys used here, and only
// the elements the runs cannot hold as typed (a field of another type or missing) come as documents,
// to be named in errors. Memory: the file mapped, the runs and the trace. Validating a file (uploads)
// streams it through formats::validate_trace_file a run of about a MiB at a time (bounded memory).
#pragma once

#include <string>
#include <string_view>

#include <vector>

#include "analysis/profile_dir.h"
#include "formats/trace_reader.h"
#include "sightline/profiler/events.h"

namespace sightline::analysis {

// Throws sightline::Error naming `path` for unreadable files, malformed JSON and events that lack
// the fields above.
profiler::CollectedTrace trace_json_load(const std::string& path, const ProgressCallback& progress = {});
profiler::CollectedTrace trace_json_parse(std::string_view text, const std::string& origin,
                                          const ProgressCallback& progress = {});

// The CollectedTrace of the runs the one reader made of `file` (formats::read_trace; with
// refuse_bad_complete_events false the bad events are named here): what trace_json_load does after
// reading, for a caller that read the runs already (the Explorer's index builds its operator table
// from the runs it indexes). Throws as trace_json_load does.
profiler::CollectedTrace trace_json_build(const std::vector<formats::TraceRun>& runs,
                                          const formats::MappedTrace& file, const std::string& origin);
// The backend name of the runs' device lanes, as trace_json_device_name gives it of their file.
std::string trace_json_runs_device_name(const std::vector<formats::TraceRun>& runs);

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
