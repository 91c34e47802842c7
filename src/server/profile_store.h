// A directory of profile output directories, as the Explorer server sees it: one profile per
// subdirectory, addressed by its name. Names are checked before any file is touched, so a request
// cannot reach outside the root (no separators, no "..", no hidden names, no symlink escapes).
// Each profile is indexed once, on first use, and kept in memory.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/profile_index.h"

namespace sightline::server {

class ProfileStore {
 public:
  explicit ProfileStore(std::filesystem::path root);

  const std::filesystem::path& root() const { return root_; }
  nlohmann::json list() const;
  std::shared_ptr<const ProfileIndex> open(std::string_view name);
  void remove(std::string_view name);

  // The directory of profile `name`; throws RequestError(400) for a name that could leave the root.
  std::filesystem::path profile_path(std::string_view name) const;

 private:
  std::filesystem::path root_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const ProfileIndex>, std::less<>> cache_;
};

}  // namespace sightline::server
