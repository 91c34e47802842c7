// A profile directory as one Chrome JSON trace laid out for the Perfetto UI (`sightline view DIR
// --output-format perfetto -o OUT.json`): the host threads, and per NeuronCore a process with a
// hardware track (executions, copies, switches) and one track per engine and per DMA queue holding
// the captured instructions, every track named and sorted by metadata events; flows in Perfetto's
// v2 form (bind_id, flow_in, flow_out on the slices themselves) follow each op through its runtime
// calls to its device work. docs/formats.md, "Perfetto trace", is the layout.
//
//   analysis::perfetto_json_save(analysis::profile_dir_load("profiles/naive"), "naive.perfetto.json");
#pragma once

#include <ostream>
#include <string>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

void perfetto_json_write(const ProfileDir& profile, std::ostream& out);
// Throws sightline::Error when the file cannot be written.
void perfetto_json_save(const ProfileDir& profile, const std::string& path);

}  // namespace sightline::analysis
