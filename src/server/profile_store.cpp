#include "server/profile_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "formats/manifest.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxNameLength = 200;

bool is_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '+' || c == '@';
}

// Directories the atomic writer leaves while it works (docs/formats.md, "Atomicity").
bool is_staging_name(std::string_view name) {
  return name.find(".tmp-") != std::string_view::npos || name.find(".old-") != std::string_view::npos;
}

json manifest_summary(const formats::Manifest& manifest) {
  uint64_t bytes = 0;
  for (const formats::ManifestFile& file : manifest.files) bytes += file.bytes;
  return {{"created_utc", manifest.created_utc},
          {"sightline_version", manifest.sightline_version},
          {"device", manifest.device.name},
          {"core_version", manifest.device.core_version},
          {"modes", manifest.modes},
          {"captured_cores", manifest.captured_cores},
          {"events",
           {{"framework", manifest.events.framework},
            {"runtime", manifest.events.runtime},
            {"hardware", manifest.events.hardware},
            {"instruction_records", manifest.events.instruction_records}}},
          {"dropped", manifest.dropped.total()},
          {"files", manifest.files.size()},
          {"bytes", bytes}};
}

}  // namespace

ProfileStore::ProfileStore(fs::path root) {
  std::error_code error;
  root_ = fs::canonical(root, error);
  if (error || !fs::is_directory(root_)) {
    throw RequestError(400, fmt::format("profile root '{}' is not a readable directory", root.string()));
  }
}

fs::path ProfileStore::profile_path(std::string_view name) const {
  const bool valid = !name.empty() && name.size() <= kMaxNameLength && name.front() != '.' &&
                     std::all_of(name.begin(), name.end(), is_name_character);
  if (!valid) {
    throw RequestError(400,
                       fmt::format("'{}' is not a profile name: use letters, digits and -_.+@, not starting "
                                   "with a dot",
                                   name));
  }
  const fs::path path = root_ / std::string(name);
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(path, error);
  if (error || resolved.parent_path() != root_) {
    throw RequestError(403, fmt::format("profile '{}' resolves outside the profile root", name));
  }
  return path;
}

json ProfileStore::list() const {
  json profiles = json::array();
  std::vector<fs::path> directories;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.front() == '.' || is_staging_name(name) || !entry.is_directory()) continue;
    directories.push_back(entry.path());
  }
  std::sort(directories.begin(), directories.end());
  for (const fs::path& directory : directories) {
    const std::string name = directory.filename().string();
    if (!fs::exists(directory / formats::kManifestFileName)) continue;
    json profile = {{"name", name}};
    try {
      profile["manifest"] = manifest_summary(formats::manifest_load(directory.string()));
      profile["ok"] = true;
    } catch (const std::exception& failure) {
      profile["ok"] = false;
      profile["error"] = failure.what();
    }
    profiles.push_back(std::move(profile));
  }
  return {{"root", root_.filename().string()}, {"profiles", profiles}};
}

std::shared_ptr<const ProfileIndex> ProfileStore::open(std::string_view name) {
  const fs::path path = profile_path(name);
  std::lock_guard lock(mutex_);
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  auto index = ProfileIndex::load(path);
  cache_.emplace(std::string(name), index);
  return index;
}

void ProfileStore::remove(std::string_view name) {
  const fs::path path = profile_path(name);
  std::lock_guard lock(mutex_);
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  if (fs::is_symlink(path) || !fs::exists(path / formats::kManifestFileName)) {
    throw RequestError(
        409, fmt::format("'{}' is not a profile directory (no manifest.json); not deleting it", name));
  }
  std::error_code error;
  fs::remove_all(path, error);
  if (error)
    throw RequestError(409, fmt::format("profile '{}' could not be deleted: {}", name, error.message()));
  if (auto it = cache_.find(name); it != cache_.end()) cache_.erase(it);
}

}  // namespace sightline::server
