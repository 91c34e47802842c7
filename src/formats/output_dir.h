// Atomic export of a profile output directory: an interrupted export never leaves a directory that
// looks complete.
//
//   formats::output_dir_write("profiles/step_3", [&](const std::filesystem::path& staging) {
//     write_trace_json(staging / "trace.json");
//     formats::neff_save(exe, staging.string());
//     formats::ntff_save(trace, staging.string());
//     formats::manifest_save(manifest, staging.string());   // last: it is what marks completeness
//   });
//   if (formats::output_dir_is_complete(dir)) open_in_explorer(dir);
//
// A writer whose bytes arrive over time (the Explorer server's uploads) takes the same steps one at a
// time with an OutputDirStaging, streaming each file; commit_new() never replaces anything:
//
//   formats::OutputDirStaging staging("profiles/mine", formats::OutputDirReplace::never);
//   staging.begin_file("trace.json");
//   staging.append(chunk);                        // as many times as the bytes come
//   ...                                           // the manifest last, as above
//   if (!staging.commit_new()) refuse("'mine' exists");   // else it is in place
//
// How: the callback fills a fresh sibling `<dir>.tmp-<pid>-<n>`; the manifest must be present and valid and
// every file it lists non-empty and of the listed size; every file in it and the directory itself are
// fsynced; then the staging directory is renamed to `<dir>`. If `<dir>` already exists it is first renamed
// aside to `<dir>.old-<pid>-<n>` (the same `<pid>-<n>`; if the second rename fails, the old one is moved
// back). When the callback throws or any step fails, the staging directory is removed and the error
// propagates: no `<dir>`, no temporary.
//
// Recovery: a process killed between the two renames leaves `<dir>.old-<id>` and `<dir>.tmp-<id>` and no
// `<dir>`. The next output_dir_write or output_dir_is_complete of `<dir>` moves the new profile into place
// (it was validated and fsynced before the old one was set aside), or else the old one back, removes
// staging directories of exports that are no longer running and retires the old ones as below.
//
// Safety: an existing `<dir>` is replaced only when it is empty or holds a manifest.json (an earlier
// profile); anything else is refused, so a mistyped path cannot delete unrelated files. Of a replaced
// profile only what the exporter wrote is deleted (manifest.json and the files it lists); anything else in
// it (a user's notes) is kept in `<dir>.kept-<pid>-<n>`, and a note on stderr (also returned) says where.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sightline::formats {

struct OutputDirResult {
  // What the export did besides writing `dir` (a recovered interrupted export, a user's files kept aside),
  // one sentence each; also printed on stderr.
  std::vector<std::string> notes;
};

// Whether an export may replace what is at `dir`.
enum class OutputDirReplace {
  previous_profile,  // an empty directory or an earlier profile (one with a manifest.json), as above
  never,             // nothing: commit_new() refuses when anything is at `dir`
};

// One export of `dir` in steps: the staging directory (created, with recovery first, on construction),
// files streamed into it, then commit() or commit_new(). Destroyed uncommitted, it removes the staging
// directory. Errors are sightline::Error naming the path and the step.
class OutputDirStaging {
 public:
  // With OutputDirReplace::previous_profile, refuses at once a `dir` that may not be replaced.
  explicit OutputDirStaging(const std::string& dir, OutputDirReplace replace = OutputDirReplace::previous_profile);
  ~OutputDirStaging();
  OutputDirStaging(const OutputDirStaging&) = delete;
  OutputDirStaging& operator=(const OutputDirStaging&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // where the files go
  const std::filesystem::path& target() const { return clean_; }  // `dir`, absolute and normalized

  // Streams one file `name` (a plain name inside the staging directory that is not there yet); the file
  // begun before is closed. Every write is checked: a full disk is an error naming the file.
  void begin_file(const std::string& name);
  void append(std::string_view bytes);
  void end_file();  // closes the file begun last (commit does it too)

  // The checks commit makes before anything moves: a manifest that manifest_load accepts and every file it
  // lists there, non-empty and of the listed size. Lets a caller tell a bad profile from a failing disk.
  void validate();

  // Validates (the manifest and the files it lists), fsyncs every file and the directory, and moves the
  // staging directory into place at `dir`, replacing an earlier profile as output_dir_write does.
  OutputDirResult commit();
  // The same, but nothing at `dir` is ever replaced (an atomic rename that refuses): false, the staging
  // directory kept until destruction, when something is at `dir`.
  bool commit_new();

 private:
  void prepare_commit();

  std::filesystem::path clean_;
  std::filesystem::path staging_;
  std::string id_;
  OutputDirReplace replace_;
  std::vector<std::string> notes_;  // recovery's, returned by commit()
  int fd_ = -1;
  std::filesystem::path file_;  // the file begun last
  uint64_t file_bytes_ = 0;
  bool committed_ = false;
};

// Builds `dir` atomically from what `fill` writes into the staging directory it is given. The callback
// must write manifest.json (formats/manifest.h). Throws sightline::Error naming the path and the step that
// failed; rethrows what `fill` throws after removing the staging directory.
OutputDirResult output_dir_write(const std::string& dir, const std::function<void(const std::filesystem::path&)>& fill);

// True when `dir` is a directory holding a manifest.json that manifest_load accepts. A directory without
// one is an export that did not finish (or not a profile at all) and readers should refuse it. When `dir`
// is not complete it first tries output_dir_recover (errors ignored: a read-only store stays as it is).
bool output_dir_is_complete(const std::string& dir);

// Resolves what an interrupted export of `dir` left next to it (see Recovery above) and returns the notes.
// Exports of `dir` still running (in this process or a live one) are left alone.
std::vector<std::string> output_dir_recover(const std::string& dir);

// output_dir_recover of every profile in `parent` that an interrupted export left siblings of (the
// Explorer server's root, when it opens).
std::vector<std::string> output_dir_recover_all(const std::string& parent);

// True for a name output_dir gives the siblings it leaves while it works: `<dir>.tmp-<pid>-<n>`,
// `<dir>.old-<pid>-<n>` and `<dir>.kept-<pid>-<n>`. Listings skip them; no profile may be named so.
bool output_dir_is_sibling_name(std::string_view name);

// Writes `bytes` to `path` and fsyncs it, every write, the fsync and the close checked: a full disk is an
// error naming the path, never a short file. NEFF, NTFF and the exporter's files are written with it.
void write_file_durably(const std::filesystem::path& path, std::span<const uint8_t> bytes);

}  // namespace sightline::formats
