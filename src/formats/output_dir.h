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
// How: the callback fills a fresh sibling `<dir>.tmp-<pid>-<n>`; every file in it and the directory itself
// are fsynced; the manifest must be present and valid; then the staging directory is renamed to `<dir>`.
// If `<dir>` already exists it is first renamed aside to `<dir>.old-<pid>-<n>` and removed only after the
// new directory is in place (if that rename fails, the old one is moved back). When the callback throws
// or any step fails, the staging directory is removed and the error propagates: no `<dir>`, no temporary.
//
// Safety: an existing `<dir>` is replaced only when it is empty or holds a manifest.json (an earlier
// profile); anything else is refused, so a mistyped path cannot delete unrelated files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

namespace sightline::formats {

// Builds `dir` atomically from what `fill` writes into the staging directory it is given. The callback
// must write manifest.json (formats/manifest.h). Throws sightline::Error naming the path and the step that
// failed; rethrows what `fill` throws after removing the staging directory.
void output_dir_write(const std::string& dir, const std::function<void(const std::filesystem::path&)>& fill);

// True when `dir` is a directory holding a manifest.json that manifest_load accepts. A directory without
// one is an export that did not finish (or not a profile at all) and readers should refuse it.
bool output_dir_is_complete(const std::string& dir);

// Writes `bytes` to `path` and fsyncs it (for callers that want durability outside output_dir_write).
void write_file_durably(const std::filesystem::path& path, std::span<const uint8_t> bytes);

}  // namespace sightline::formats
