// A profile output directory loaded for analysis: manifest, executables, instruction traces and the
// framework trace, every file validated by its reader in formats/.
//
//   analysis::ProfileDir profile = analysis::profile_dir_load("profiles/fused");
//   for (const analysis::TracedExecutable& t : profile.traced)
//     fmt::print("{}: {} executions\n", t.executable->name, t.trace.executions.size());
//
// Every problem with the directory (missing, incomplete export, corrupt file, bad JSON) is a
// sightline::Error that names the file and what to do; the CLI maps it to exit code 2.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sightline/device/executable.h"
#include "formats/manifest.h"
#include "formats/ntff.h"
#include "sightline/profiler/events.h"

namespace sightline::analysis {

// Called while a large file is read: bytes done out of bytes total (for a progress bar).
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

// One executable together with its instruction trace on one captured core.
struct TracedExecutable {
  std::shared_ptr<const device::Executable> executable;
  formats::NtffTrace trace;
  std::string ntff_file;  // file name inside the directory
  int rank = 0;           // the rank that ran it: the file's rank in a merged profile, else the profile's
};

struct ProfileDir {
  std::string path;
  formats::Manifest manifest;
  std::map<uint64_t, std::shared_ptr<const device::Executable>> executables;  // by NEFF hash
  std::vector<TracedExecutable> traced;  // NTFF files, in manifest order
  std::optional<profiler::CollectedTrace> trace;  // trace.json, when the directory has one

  // The ranks of its traced executables, ascending: one for a profile of one process, every merged rank's
  // for a merged profile (sightline merge).
  std::vector<int> ranks() const;
};

struct ProfileDirOptions {
  bool load_trace_json = true;
  ProgressCallback progress{};
};

// Loads and validates the directory `path`. Throws sightline::Error for a missing directory, a
// directory without manifest.json (an export that did not finish), and any file its reader refuses.
ProfileDir profile_dir_load(const std::string& path, const ProfileDirOptions& options = {});

}  // namespace sightline::analysis
