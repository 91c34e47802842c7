// manifest.json: what a profile output directory holds and how it was captured.
//
// The manifest is written last (see formats/output_dir.h): a directory without a valid manifest is an
// incomplete export and readers refuse it. It names the capture (modes, cores), the device spec the
// times were modeled with, how many events were recorded and dropped, and every other file with its
// pairing hash (docs/hardware-model.md §3.2). docs/formats.md has the schema table.
//
//   Manifest m;                                   // sightline version and format version preset
//   m.created_utc = manifest_now_utc();
//   m.modes = {"framework", "runtime", "device_instructions"};
//   m.captured_cores = {0};
//   m.device = device::Spec::builtin("trn2");
//   m.events = {.framework = 120, .runtime = 40, .hardware = 20, .instruction_records = 4000};
//   m.dropped.per_core = {{.core = 0, .events = 0, .executions = 0}};
//   m.files = {{ManifestFileKind::trace, "trace.json"},
//              {ManifestFileKind::neff, "neff_0123456789abcdef.neff", 0x0123456789abcdef},
//              {ManifestFileKind::ntff, "0123456789abcdef_instid_0_vnc_0.ntff", 0x0123456789abcdef, 0}};
//   manifest_save(m, dir);                        // dir/manifest.json
//   Manifest back = manifest_load(dir);           // strict: version, required fields, pairing
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/device/spec.h"

namespace sightline::formats {

inline constexpr int kManifestVersion = 1;
inline constexpr std::string_view kManifestFileName = "manifest.json";

// The sightline release that wrote a file (the CMake project version).
std::string sightline_version_string();
// The current UTC time as ISO 8601 to the second, "2026-01-31T12:34:56Z".
std::string manifest_now_utc();

enum class ManifestFileKind { trace, system_trace, neff, ntff };
std::string_view manifest_file_kind_name(ManifestFileKind kind);  // "trace", "system_trace", "neff", "ntff"

struct ManifestFile {
  ManifestFileKind kind = ManifestFileKind::trace;
  std::string path;                   // relative to the directory, '/'-separated, no ".."
  std::optional<uint64_t> neff_hash;  // neff and ntff: the pairing hash (written as 16 hex digits)
  std::optional<uint32_t> core;       // ntff: the captured core
  uint64_t bytes = 0;                 // file size; 0 when the writer did not measure it

  bool operator==(const ManifestFile&) const = default;
};

struct ManifestEventCounts {
  uint64_t framework = 0;            // host-side op and user-scope events
  uint64_t runtime = 0;              // runtime API events (neuron_rt lanes)
  uint64_t hardware = 0;             // device executions (neuron_hw lanes)
  uint64_t instruction_records = 0;  // per-instruction records, all NTFF files together

  bool operator==(const ManifestEventCounts&) const = default;
};

// Events lost to buffer caps (max_events_per_nc, recording buffers): never silent.
struct ManifestDroppedCore {
  uint32_t core = 0;
  uint64_t events = 0;      // runtime and hardware events dropped on this core
  uint64_t executions = 0;  // executions whose instruction trace was dropped on this core

  bool operator==(const ManifestDroppedCore&) const = default;
};
struct ManifestDropped {
  uint64_t framework = 0;  // host-side events dropped
  std::vector<ManifestDroppedCore> per_core;

  uint64_t total() const;  // framework + every core's events and executions; written as "total"
  bool operator==(const ManifestDropped&) const = default;
};

// Which clocks the profile's numbers come from, and what the simulator cost (measured, never part of
// any timestamp). Older manifests have no "timing" object: the defaults below stand for "unknown".
struct ManifestTiming {
  std::string host_clock;             // "modeled" or "measured"; empty when the writer did not say
  bool functional = true;             // false: timing-only simulation, results were not computed
  uint64_t simulation_wall_ns = 0;    // wall time the simulator's workers spent during the trace
  uint64_t host_blocked_wall_ns = 0;  // wall time host threads waited for the simulator
  uint64_t not_completed = 0;         // device activities of the step still running at trace stop (left out)
  uint64_t earlier_steps = 0;         // device activities launched before the trace (left out)

  bool operator==(const ManifestTiming&) const = default;
};

// A merged profile's rank and the folder of the directory that holds its NEFF and NTFF files.
struct ManifestRank {
  uint32_t rank = 0;
  std::string folder;  // one path component, "rank<r>" as sightline merge names it

  bool operator==(const ManifestRank&) const = default;
};

// Which rank of a job the profile is, and the collectives it ran (written when it ran collectives or is
// one rank of several; older manifests and single-core profiles have none).
struct ManifestDistributed {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t collectives = 0;               // collectives in the trace (each once, however many cores)
  std::vector<uint32_t> collective_cores; // cores that took part in them
  double link_bytes_per_ns = 0;           // the spec's ring link bandwidth (docs/hardware-model.md §1.8)
  double step_latency_ns = 0;
  std::vector<ManifestRank> ranks;        // merged profiles only (sightline merge): every rank's folder

  bool operator==(const ManifestDistributed&) const = default;
};

struct Manifest {
  int format_version = kManifestVersion;
  std::string sightline_version = sightline_version_string();
  std::string created_utc;               // ISO 8601 UTC, see manifest_now_utc
  std::vector<std::string> modes;        // capture modes, as the profiler names them
  std::vector<uint32_t> captured_cores;  // cores with device capture enabled
  device::Spec device;                   // every field but `path` is written
  ManifestEventCounts events;
  ManifestDropped dropped;
  ManifestTiming timing;
  std::optional<ManifestDistributed> distributed;
  std::vector<ManifestFile> files;  // every file of the directory except manifest.json itself
};

// JSON text (two-space indented, keys in schema order). Throws sightline::Error for a manifest that its
// reader would refuse (bad file paths, a missing pairing hash), so a bad one never reaches disk.
std::string manifest_serialize(const Manifest& manifest);
// Strict reader: unknown format_version, a missing required field or a field of the wrong type, an
// invalid file entry, or an NTFF whose paired NEFF is not listed is a sightline::Error naming `origin`
// and the JSON path. Fields it does not know are ignored (additions within a version stay readable).
Manifest manifest_parse(std::string_view json_text, const std::string& origin = "<memory>");

// The rank whose folder (ManifestDistributed::ranks) holds `file` in a merged profile; nullopt for a file
// outside every rank's folder and for a profile that is not merged.
std::optional<uint32_t> manifest_file_rank(const Manifest& manifest, const ManifestFile& file);

// Writes `dir`/manifest.json and returns its path.
std::string manifest_save(const Manifest& manifest, const std::string& dir);
// Reads `path`, either a manifest.json file or the directory holding one.
Manifest manifest_load(const std::string& path);

}  // namespace sightline::formats
