// A directory of profile output directories, as the Explorer server sees it: one profile per
// subdirectory, addressed by its name. Names are checked before any file is touched, so a request
// cannot reach outside the root (no separators, no "..", no hidden names, no symlink escapes).
// Each profile is indexed once, on first use, and kept in memory, as is its analysis (summary,
// roofline); deleting or uploading a profile drops what was kept for that name.
//
//   ProfileStore store("profiles");
//   nlohmann::json listing = store.list();
//   nlohmann::json summary = store.summary("fused");          // summary-json + "roofline"
//   nlohmann::json diff = store.compare("naive", "fused");    // compare_json + names and totals
//   store.upload("mine", {{"manifest.json", text}, {"trace.json", trace}, ...});
//
// Uploads take one of two shapes: a whole profile directory (manifest.json and trace.json plus the
// files the manifest lists), or an executable + instruction-trace pair (exactly one neff_<hash>.neff
// and its <hash>_instid_0_vnc_<k>.ntff), around which the store builds a profile directory: a
// trace.json with one nc_exec_running event per captured execution on the core's neuron_hw lane
// (each naming its NEFF and sequence, so the device view opens), and a manifest. Such a profile
// shows the device: executions, the instruction timeline, summary metrics and the roofline; it has
// no framework or runtime lanes, no flows and no operator table, and its device spec is the one
// named at upload (trn2 unless told), since a NEFF does not record it.
//
// An upload is written as every profile directory is, through formats::OutputDirStaging (the one writer:
// a staging sibling `<root>/<name>.tmp-<pid>-<n>`, never listed, the manifest as the completion marker,
// every file and the directory fsynced, the same recovery of what a killed server left), validated with
// the formats/ readers, analysis::profile_dir_load's checks and the index, and only then renamed into
// place in one step that refuses to replace anything. A failed upload leaves nothing behind and never
// touches an existing profile. The server streams a request's parts into the staging directory as they
// arrive (begin_upload, UploadStaging, finish_upload), so receiving holds one chunk in memory rather
// than the upload:
//
//   auto staging = store.begin_upload("mine");      // 400 bad name, 409 taken: before any byte is read
//   staging->begin_file("run/trace.json");          // 400 for a name a profile does not hold
//   staging->append(chunk);                         // as many times as the bytes come
//   nlohmann::json stored = store.finish_upload(std::move(staging));
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/profile_dir.h"
#include "formats/output_dir.h"
#include "server/profile_index.h"


namespace sightline::server {

// One uploaded file: its name as the client sent it (a leading folder is dropped) and its bytes.
struct UploadFile {
  std::string name;
  std::string content;
};

// Files of an upload being received, in a staging directory that is removed unless the upload is
// stored (ProfileStore::finish_upload).
class UploadStaging {
 public:
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;

  // Starts the next file, named as the client sent it (a leading folder is dropped). Throws
  // RequestError(400) for a name a profile directory does not hold or one sent twice.
  void begin_file(std::string_view sent_name);
  // Appends to the file begun last. Throws RequestError(500) when the disk refuses.
  void append(std::string_view bytes);
  uint64_t bytes() const { return bytes_; }

 private:
  friend class ProfileStore;
  UploadStaging(const std::filesystem::path& target, std::string name);
  // Runs a step of the writer; its error (a disk's refusal) becomes RequestError(500).
  template <class Step>
  void on_disk(Step&& step);

  formats::OutputDirStaging staging_;
  std::string name_;                // the profile's name
  std::vector<std::string> files_;  // names inside the directory, in arrival order
  uint64_t bytes_ = 0;
};

struct UploadOptions {
  std::string device = "trn2";  // spec of an executable + instruction-trace pair (builtin name)
};

// The most rows one query answer holds: a larger answer is refused with a message asking for a LIMIT.
inline constexpr std::size_t kMaxQueryRows = 100'000;
// The longest one query may run before it is stopped (wall time).
inline constexpr double kMaxQuerySeconds = 10;

class ProfileStore {
 public:
  explicit ProfileStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  nlohmann::json list() const;
  std::shared_ptr<const ProfileIndex> open(std::string_view name);
  void remove(std::string_view name);

  // `sightline view NAME --output-format summary-json` plus "roofline": {"peak_flops_per_s",
  // "hbm_bytes_per_s", "ridge_point", "points": [{"kind": "executable"|"op", "name", "intensity",
  // "achieved_flops_per_s", "attainable_flops_per_s", "bound", "efficiency", "time_us",
  // "executions", "flops", "hbm_bytes"}]}. Throws RequestError(422) for a profile analysis refuses.
  nlohmann::json summary(std::string_view name);
  // `sightline query NAME "SQL"`: {"columns": [...], "rows": [[...], ...]} from the profile's SQLite
  // database (docs/formats.md, "SQLite export"; built into NAME/profile.sqlite on first use and
  // rebuilt when the profile is newer), read-only, without ATTACH, at most kMaxQueryRows rows and
  // kMaxQuerySeconds.
  // Throws RequestError: 400 for SQL that fails (SQLite's message), 422 when the database cannot be
  // built.
  nlohmann::json query(std::string_view name, const std::string& sql);
  // analysis::compare_json of the two profiles with "a"/"b" set to the names, plus "total_a_us" and
  // "total_b_us".
  nlohmann::json compare(std::string_view a, std::string_view b);

  // Stores a new profile `name` from uploaded files (see the header comment). Returns {"uploaded",
  // "files", "bytes"}. Throws RequestError: 400 for a bad name or a malformed upload (naming the file
  // and the problem), 409 when the name is taken.
  nlohmann::json upload(std::string_view name, std::vector<UploadFile> files, const UploadOptions& options = {});
  // The same in steps, for bytes that arrive over time (see the header comment).
  std::unique_ptr<UploadStaging> begin_upload(std::string_view name);
  nlohmann::json finish_upload(std::unique_ptr<UploadStaging> staging, const UploadOptions& options = {});

  // The directory of profile `name`; throws RequestError(400) for a name that could leave the root.
  std::filesystem::path profile_path(std::string_view name) const;

 private:

  // The analysis of profile `name` with its trace.json (compare), loaded once and kept.
  std::shared_ptr<const analysis::ProfileDir> analysis(std::string_view name);
  // Loads it afresh; without the trace, only the manifest, executables and instruction traces.
  // Throws RequestError: 404 for no such profile, 422 for one analysis refuses.
  analysis::ProfileDir load_analysis(std::string_view name, bool with_trace) const;
  void forget(std::string_view name);  // drops what is cached for `name`; caller holds mutex_
  // Bumped by forget(): a load that started before a delete or upload is not cached after it.
  uint64_t generation_of(std::string_view name);
  uint64_t generation_of_locked(std::string_view name) const;

  std::filesystem::path root_;
  std::mutex mutex_;
  std::mutex query_mutex_;  // serializes building profile.sqlite caches
  std::map<std::string, std::shared_ptr<const ProfileIndex>, std::less<>> cache_;
  std::map<std::string, std::shared_ptr<const analysis::ProfileDir>, std::less<>> analyses_;
  std::map<std::string, std::shared_ptr<const nlohmann::json>, std::less<>> summaries_;
  std::map<std::string, uint64_t, std::less<>> generations_;
};

}  // namespace sightline::server
