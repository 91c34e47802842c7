#include "analysis/profile_dir.h"

#include <filesystem>
#include <set>

#include "analysis/trace_json.h"
#include "formats/neff.h"
#include "sightline/error.h"

namespace sightline::analysis {

namespace fs = std::filesystem;

std::vector<int> ProfileDir::ranks() const {
  std::set<int> seen;
  for (const TracedExecutable& t : traced) seen.insert(t.rank);
  return {seen.begin(), seen.end()};
}

ProfileDir profile_dir_load(const std::string& path, const ProfileDirOptions& options) {
  std::error_code ec;
  SIGHTLINE_CHECK(fs::exists(path, ec), "profile directory '{}' does not exist; pass the profile_output_dir "
                  "a NeuronProfiler wrote (it holds manifest.json)", path);
  SIGHTLINE_CHECK(fs::is_directory(path, ec), "'{}' is not a directory; pass a profile output directory "
                  "(use `sightline neff dump` / `sightline ntff dump` for single files)", path);
  SIGHTLINE_CHECK(fs::exists(fs::path(path) / formats::kManifestFileName, ec),
                  "'{}' has no {}: the export did not finish or this is not a profile directory; "
                  "profile again and let NeuronProfiler::export_trace complete", path,
                  formats::kManifestFileName);
  ProfileDir profile;
  profile.path = path;
  profile.manifest = formats::manifest_load(path);
  for (const formats::ManifestFile& file : profile.manifest.files) {
    const std::string file_path = (fs::path(path) / file.path).string();
    SIGHTLINE_CHECK(fs::exists(file_path, ec), "'{}' is listed in {}/manifest.json but missing; the directory "
                    "is incomplete, copy the whole profile directory again", file_path, path);
    if (file.kind == formats::ManifestFileKind::neff) {
      auto exe = std::make_shared<const device::Executable>(formats::neff_load(file_path));
      profile.executables.emplace(formats::neff_hash(*exe), std::move(exe));
    }
  }
  for (const formats::ManifestFile& file : profile.manifest.files) {
    if (file.kind != formats::ManifestFileKind::ntff) continue;
    TracedExecutable traced;
    traced.trace = formats::ntff_load((fs::path(path) / file.path).string());
    traced.ntff_file = file.path;
    traced.rank = static_cast<int>(formats::manifest_file_rank(profile.manifest, file)
                                       .value_or(profile.manifest.distributed ? profile.manifest.distributed->rank : 0));
    auto exe = profile.executables.find(traced.trace.neff_hash);
    SIGHTLINE_CHECK(exe != profile.executables.end(), "'{}/{}' pairs with {}, which the directory lacks; copy the "
                    "NEFF next to it", path, file.path, formats::ntff_paired_neff_file_name(traced.trace.neff_hash));
    traced.executable = exe->second;
    profile.traced.push_back(std::move(traced));
  }
  if (options.load_trace_json) {
    for (const formats::ManifestFile& file : profile.manifest.files) {
      if (file.kind != formats::ManifestFileKind::trace) continue;
      profile.trace = trace_json_load((fs::path(path) / file.path).string(), options.progress);
    }
  }
  return profile;
}

}  // namespace sightline::analysis
