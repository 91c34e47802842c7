#include "formats/output_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "formats/manifest.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace fs = std::filesystem;
namespace {

// Distinguishes concurrent exports of one process (several profilers, several threads).
std::atomic<uint64_t> next_sibling_id{0};

// A sibling path `<dir><tag><pid>-<n>` that does not exist yet.
fs::path fresh_sibling(const fs::path& dir, std::string_view tag) {
  for (;;) {
    fs::path candidate = dir;
    candidate += fmt::format("{}{}-{}", tag, ::getpid(), next_sibling_id.fetch_add(1));
    std::error_code ec;
    if (!fs::exists(candidate, ec)) return candidate;
  }
}

// fsync of a file or a directory (a directory fsync makes the names in it durable).
void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  SIGHTLINE_CHECK(fd >= 0, "cannot open '{}' to flush it to disk: {}", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  ::close(fd);
  SIGHTLINE_CHECK(rc == 0, "flushing '{}' to disk failed: {}", path.string(), std::strerror(fsync_errno));
}

void fsync_tree(const fs::path& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) fsync_path(entry.path(), false);
    if (entry.is_directory()) fsync_path(entry.path(), true);
  }
  fsync_path(root, true);
}

void remove_quietly(const fs::path& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

}  // namespace

void write_file_durably(const fs::path& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SIGHTLINE_CHECK(fd >= 0, "cannot create '{}': {}; check that the directory exists and is writable",
                  path.string(), std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int write_errno = errno;
      ::close(fd);
      fail("writing '{}' failed after {} of {} bytes: {}", path.string(), done, bytes.size(),
           std::strerror(write_errno));
    }
    done += static_cast<size_t>(n);
  }
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  ::close(fd);
  SIGHTLINE_CHECK(rc == 0, "flushing '{}' to disk failed: {}", path.string(), std::strerror(fsync_errno));
}

bool output_dir_is_complete(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / kManifestFileName, ec)) return false;
  try {
    (void)manifest_load(dir);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void output_dir_write(const std::string& dir, const std::function<void(const fs::path&)>& fill) {
  SIGHTLINE_CHECK(!dir.empty(), "profile output directory is empty; name the directory to write");
  // Normalized, so "out/" and "out" stage next to each other rather than inside.
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path clean = target.has_filename() ? target : target.parent_path();
  const fs::path parent = clean.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  SIGHTLINE_CHECK(!ec, "cannot create '{}' for the profile output directory: {}", parent.string(),
                  ec.message());

  const bool replacing = fs::exists(clean, ec);
  if (replacing) {
    SIGHTLINE_CHECK(fs::is_directory(clean, ec),
                    "profile output path '{}' exists and is not a directory; "
                    "choose another profile_output_dir",
                    clean.string());
    SIGHTLINE_CHECK(fs::is_empty(clean, ec) || fs::exists(clean / kManifestFileName, ec),
                    "refusing to replace '{}': it is not a sightline profile directory (no manifest.json); "
                    "choose another profile_output_dir or remove it",
                    clean.string());
  }

  const fs::path staging = fresh_sibling(clean, ".tmp-");
  SIGHTLINE_CHECK(fs::create_directory(staging, ec) && !ec, "cannot create staging directory '{}': {}",
                  staging.string(), ec.message());
  try {
    fill(staging);
    SIGHTLINE_CHECK(fs::is_regular_file(staging / kManifestFileName, ec),
                    "profile export to '{}' wrote no manifest.json; the writer must save the manifest last",
                    clean.string());
    // A manifest that does not parse, or lists files that are not there, would mislead readers later.
    const Manifest manifest = manifest_load(staging.string());
    for (const auto& file : manifest.files) {
      const fs::path path = staging / file.path;
      SIGHTLINE_CHECK(fs::is_regular_file(path, ec),
                      "profile export to '{}': manifest.json lists '{}', "
                      "which was not written",
                      clean.string(), file.path);
      SIGHTLINE_CHECK(file.bytes == 0 || fs::file_size(path) == file.bytes,
                      "profile export to '{}': manifest.json gives '{}' {} bytes, the file has {}",
                      clean.string(), file.path, file.bytes, fs::file_size(path));
    }
    fsync_tree(staging);
  } catch (...) {
    remove_quietly(staging);
    throw;
  }

  fs::path aside;
  if (replacing) {
    aside = fresh_sibling(clean, ".old-");
    fs::rename(clean, aside, ec);
    if (ec) {
      remove_quietly(staging);
      fail("cannot move the previous profile '{}' aside to replace it: {}", clean.string(), ec.message());
    }
  }
  fs::rename(staging, clean, ec);
  if (ec) {
    const std::string reason = ec.message();
    if (replacing) fs::rename(aside, clean, ec);  // put the previous profile back
    remove_quietly(staging);
    fail("cannot move the finished profile '{}' into place at '{}': {}", staging.string(), clean.string(),
         reason);
  }
  fsync_path(parent, true);
  if (replacing) remove_quietly(aside);
}

}  // namespace sightline::formats
