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
#include <vector>

namespace sightline::formats {

struct OutputDirResult {
  // What the export did besides writing `dir` (a recovered interrupted export, a user's files kept aside),
  // one sentence each; also printed on stderr.
  std::vector<std::string> notes;
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

// Writes `bytes` to `path` and fsyncs it, every write, the fsync and the close checked: a full disk is an
// error naming the path, never a short file. NEFF, NTFF and the exporter's files are written with it.
void write_file_durably(const std::filesystem::path& path, std::span<const uint8_t> bytes);

}  // namespace sightline::formats
