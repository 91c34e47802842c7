#include "formats/output_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "formats/manifest.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kStagingTag = ".tmp-";
constexpr std::string_view kAsideTag = ".old-";
constexpr std::string_view kKeptTag = ".kept-";

// Distinguishes concurrent exports of one process (several profilers, several threads).
std::atomic<uint64_t> next_sibling_id{0};

// The `<pid>-<n>` ids of the exports running in this process: their siblings are live, never recovered.
std::mutex active_mutex;
std::set<std::string> active_ids;

void activate(const std::string& id) {
  std::lock_guard lock(active_mutex);
  active_ids.insert(id);
}

void deactivate(const std::string& id) {
  std::lock_guard lock(active_mutex);
  active_ids.erase(id);
}

fs::path sibling(const fs::path& dir, std::string_view tag, std::string_view id) {
  fs::path out = dir;
  out += fmt::format("{}{}", tag, id);
  return out;
}

// An id `<pid>-<n>` for which neither `<dir>.tmp-<id>` nor `<dir>.old-<id>` exists yet: the staging
// directory and the set-aside previous profile of one export share it, which is what recovery reads.
std::string fresh_id(const fs::path& dir) {
  for (;;) {
    std::string id = fmt::format("{}-{}", ::getpid(), next_sibling_id.fetch_add(1));
    std::error_code ec;
    if (!fs::exists(sibling(dir, kStagingTag, id), ec) && !fs::exists(sibling(dir, kAsideTag, id), ec) &&
        !fs::exists(sibling(dir, kKeptTag, id), ec)) {
      return id;
    }
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

void note(std::vector<std::string>& notes, std::string text) {
  std::fprintf(stderr, "sightline: %s\n", text.c_str());
  notes.push_back(std::move(text));
}

// A staging directory is complete when its manifest parses and every file it lists is there, non-empty
// and of the listed size. An empty file is how a full disk shows when a write error went unseen.
void validate_staging(const fs::path& staging, const fs::path& clean) {
  std::error_code ec;
  SIGHTLINE_CHECK(fs::is_regular_file(staging / kManifestFileName, ec),
                  "profile export to '{}' wrote no manifest.json; the writer must save the manifest last",
                  clean.string());
  const Manifest manifest = manifest_load(staging.string());
  for (const auto& file : manifest.files) {
    const fs::path path = staging / file.path;
    SIGHTLINE_CHECK(fs::is_regular_file(path, ec),
                    "profile export to '{}': manifest.json lists '{}', which was not written", clean.string(),
                    file.path);
    const uintmax_t size = fs::file_size(path, ec);
    SIGHTLINE_CHECK(!ec && size != 0,
                    "profile export to '{}': '{}' is empty; a write failed (disk full?); free space and "
                    "export again",
                    clean.string(), file.path);
    SIGHTLINE_CHECK(file.bytes == 0 || size == file.bytes,
                    "profile export to '{}': manifest.json gives '{}' {} bytes, the file has {}", clean.string(),
                    file.path, file.bytes, size);
  }
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kManifestFileName, ec)) return false;
  try {
    (void)manifest_load(dir.string());
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The names the exporter writes in a profile directory: manifest.json and what the manifest lists; when
// the manifest does not parse (an older or damaged one), the names the exporter uses.
bool written_by_exporter(const std::string& name, const std::set<std::string>& listed, bool manifest_valid) {
  if (name == kManifestFileName || listed.count(name) != 0) return true;
  if (manifest_valid) return false;
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return name == "trace.json" || name == "system_trace.json" || (name.rfind("neff_", 0) == 0 && ends_with(".neff")) ||
         ends_with(".ntff");
}

// A subdirectory whose every file the manifest lists (by its path from the profile directory) and that
// holds nothing else: what `sightline merge` writes for each rank.
bool only_listed_files(const fs::path& dir, const fs::path& root, const std::set<std::string>& listed) {
  std::error_code ec;
  bool any = false;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) continue;
    if (!entry.is_regular_file(ec) || listed.count(entry.path().lexically_relative(root).generic_string()) == 0) {
      return false;
    }
    any = true;
  }
  return any && !ec;
}

// Removes a set-aside previous profile: the files the exporter wrote go (the manifest last); anything else
// (a user's notes, a subdirectory) is never deleted: the directory is kept as `<dir>.kept-<id>` and a note
// says so.
void retire_previous(const fs::path& aside, const fs::path& clean, std::string_view id,
                     std::vector<std::string>& notes) {
  std::error_code ec;
  std::set<std::string> listed;
  bool manifest_valid = false;
  try {
    for (const auto& file : manifest_load(aside.string()).files) listed.insert(file.path);
    manifest_valid = true;
  } catch (const Error&) {
  }
  std::vector<std::string> foreign;
  bool has_manifest = false;
  for (const auto& entry : fs::directory_iterator(aside, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && written_by_exporter(name, listed, manifest_valid)) {
      if (name == kManifestFileName) {
        has_manifest = true;
      } else {
        fs::remove(entry.path(), ec);
      }
    } else if (entry.is_directory(ec) && only_listed_files(entry.path(), aside, listed)) {
      fs::remove_all(entry.path(), ec);  // a merged profile's rank<r>/ folder of listed NEFF/NTFF files
    } else {
      foreign.push_back(name);
    }
  }
  if (has_manifest) fs::remove(aside / kManifestFileName, ec);
  if (foreign.empty()) {
    fs::remove(aside, ec);
    return;
  }
  std::sort(foreign.begin(), foreign.end());
  const fs::path kept = sibling(clean, kKeptTag, id);
  fs::rename(aside, kept, ec);
  note(notes, fmt::format("'{}' held {} file(s) the profiler did not write ({}); they were kept in '{}' "
                          "when the profile was replaced; move them where you want them",
                          clean.string(), foreign.size(), fmt::join(foreign, ", "), (ec ? aside : kept).string()));
}

// A leftover sibling `<dir>.tmp-<pid>-<n>` or `<dir>.old-<pid>-<n>` of an export that is no longer
// running (a killed process): `id` is `<pid>-<n>`.
struct Leftover {
  fs::path path;
  bool staging = false;  // .tmp- (else .old-)
  std::string id;
};

bool export_is_running(std::string_view id) {
  const size_t dash = id.find('-');
  long pid = 0;
  const auto [end, err] = std::from_chars(id.data(), id.data() + dash, pid);
  if (err != std::errc() || end != id.data() + dash || pid <= 0) return false;
  if (pid == ::getpid()) {
    std::lock_guard lock(active_mutex);
    return active_ids.count(std::string(id)) != 0;
  }
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

bool is_id(std::string_view s) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i != dash && (s[i] < '0' || s[i] > '9')) return false;
  }
  return true;
}

// For a sibling name `<dir><tag><pid>-<n>` with one of `tags`: the tag's index and where it starts.
struct SiblingName {
  size_t tag = 0;
  size_t at = 0;
};
std::optional<SiblingName> parse_sibling_name(std::string_view file, std::span<const std::string_view> tags) {
  for (size_t t = 0; t < tags.size(); ++t) {
    const size_t at = file.rfind(tags[t]);
    if (at != std::string_view::npos && at != 0 && is_id(file.substr(at + tags[t].size()))) return SiblingName{t, at};
  }
  return std::nullopt;
}

constexpr std::string_view kRecoveredTags[] = {kStagingTag, kAsideTag};

std::vector<Leftover> find_leftovers(const fs::path& clean) {
  std::vector<Leftover> out;
  const std::string name = clean.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(clean.parent_path(), ec)) {
    const std::string file = entry.path().filename().string();
    const auto parsed = parse_sibling_name(file, kRecoveredTags);
    if (!parsed || std::string_view(file).substr(0, parsed->at) != name) continue;
    const std::string_view id = std::string_view(file).substr(parsed->at + kRecoveredTags[parsed->tag].size());
    if (!entry.is_directory(ec) || export_is_running(id)) continue;
    out.push_back({entry.path(), parsed->tag == 0, std::string(id)});
  }
  std::sort(out.begin(), out.end(), [](const Leftover& a, const Leftover& b) { return a.path < b.path; });
  return out;
}

std::vector<std::string> recover(const fs::path& clean) {
  std::vector<std::string> notes;
  std::error_code ec;
  std::vector<Leftover> leftovers = find_leftovers(clean);
  if (leftovers.empty()) return notes;
  std::set<std::string> asides;
  for (const Leftover& l : leftovers) {
    if (!l.staging) asides.insert(l.id);
  }
  // A kill between the two renames leaves no <dir>: the new profile (staging validated and fsynced before
  // the previous one was set aside) goes into place; failing that, the previous one goes back.
  if (!fs::exists(clean, ec)) {
    for (const Leftover& l : leftovers) {
      if (l.staging && asides.count(l.id) != 0 && is_complete(l.path)) {
        fs::rename(l.path, clean, ec);
        if (!ec) note(notes, fmt::format("recovered the profile '{}' from '{}', left by an export that was "
                                         "interrupted while replacing it",
                                         clean.string(), l.path.string()));
        break;
      }
    }
  }
  if (!fs::exists(clean, ec)) {
    for (const Leftover& l : leftovers) {
      if (!l.staging && is_complete(l.path)) {
        fs::rename(l.path, clean, ec);
        if (!ec) note(notes, fmt::format("restored the previous profile '{}' from '{}', left by an export "
                                         "that was interrupted while replacing it",
                                         clean.string(), l.path.string()));
        break;
      }
    }
  }
  for (const Leftover& l : leftovers) {
    if (!fs::exists(l.path, ec)) continue;  // moved into place above
    if (l.staging) {
      remove_quietly(l.path);  // an unfinished export: only the exporter writes in a staging directory
    } else {
      retire_previous(l.path, clean, l.id, notes);
    }
  }
  if (!notes.empty()) {
    try {
      fsync_path(clean.parent_path(), true);
    } catch (const Error&) {
    }
  }
  return notes;
}

fs::path clean_path(const std::string& dir) {
  // Normalized, so "out/" and "out" stage next to each other rather than inside.
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  return target.has_filename() ? target : target.parent_path();
}

// Writes all of `bytes` at the file's offset; 0 or the errno (ENOSPC for a write that wrote nothing).
int write_all(int fd, std::string_view bytes, uint64_t& written) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? ENOSPC : errno;
    bytes.remove_prefix(static_cast<size_t>(n));
    written += static_cast<uint64_t>(n);
  }
  return 0;
}

// The refusals of output_dir_write before anything is written: what is at `clean` may be replaced.
void check_replaceable(const fs::path& clean) {
  std::error_code ec;
  if (!fs::exists(clean, ec)) return;
  SIGHTLINE_CHECK(fs::is_directory(clean, ec),
                  "profile output path '{}' exists and is not a directory; choose another profile_output_dir",
                  clean.string());
  SIGHTLINE_CHECK(fs::is_empty(clean, ec) || fs::exists(clean / kManifestFileName, ec),
                  "refusing to replace '{}': it is not a sightline profile directory (no manifest.json); "
                  "choose another profile_output_dir or remove it",
                  clean.string());
}

}  // namespace

void write_file_durably(const fs::path& path, std::span<const uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SIGHTLINE_CHECK(fd >= 0, "cannot create '{}': {}; check that the directory exists and is writable",
                  path.string(), std::strerror(errno));
  uint64_t done = 0;
  const int write_errno = write_all(fd, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), done);
  if (write_errno != 0) {
    ::close(fd);
    fail("writing '{}' failed after {} of {} bytes: {}; free space or choose another directory", path.string(),
         done, bytes.size(), std::strerror(write_errno));
  }
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  const int close_rc = ::close(fd);
  const int close_errno = errno;
  SIGHTLINE_CHECK(rc == 0, "flushing '{}' to disk failed: {}", path.string(), std::strerror(fsync_errno));
  SIGHTLINE_CHECK(close_rc == 0, "closing '{}' failed: {}", path.string(), std::strerror(close_errno));
}

bool output_dir_is_complete(const std::string& dir) {
  if (dir.empty()) return false;
  const fs::path clean = clean_path(dir);
  if (is_complete(clean)) return true;
  // Opening a profile recovers what an interrupted replace left (a read-only store simply stays as it is).
  try {
    (void)recover(clean);
  } catch (const std::exception&) {
    return false;
  }
  return is_complete(clean);
}

std::vector<std::string> output_dir_recover(const std::string& dir) {
  SIGHTLINE_CHECK(!dir.empty(), "profile output directory is empty; name the directory to recover");
  return recover(clean_path(dir));
}

std::vector<std::string> output_dir_recover_all(const std::string& parent) {
  SIGHTLINE_CHECK(!parent.empty(), "the directory of profiles is empty; name the directory to recover");
  const fs::path root = fs::absolute(fs::path(parent)).lexically_normal();
  std::set<std::string> profiles;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string file = entry.path().filename().string();
    if (const auto parsed = parse_sibling_name(file, kRecoveredTags)) profiles.insert(file.substr(0, parsed->at));
  }
  std::vector<std::string> notes;
  for (const std::string& profile : profiles) {
    for (std::string& text : recover(root / profile)) notes.push_back(std::move(text));
  }
  return notes;
}

bool output_dir_is_sibling_name(std::string_view name) {
  constexpr std::string_view kTags[] = {kStagingTag, kAsideTag, kKeptTag};
  return parse_sibling_name(name, kTags).has_value();
}

OutputDirStaging::OutputDirStaging(const std::string& dir, OutputDirReplace replace) : replace_(replace) {
  SIGHTLINE_CHECK(!dir.empty(), "profile output directory is empty; name the directory to write");
  clean_ = clean_path(dir);
  const fs::path parent = clean_.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  SIGHTLINE_CHECK(!ec, "cannot create '{}' for the profile output directory: {}", parent.string(), ec.message());
  notes_ = recover(clean_);
  if (replace_ == OutputDirReplace::previous_profile) check_replaceable(clean_);
  id_ = fresh_id(clean_);
  staging_ = sibling(clean_, kStagingTag, id_);
  activate(id_);
  if (!fs::create_directory(staging_, ec) || ec) {
    deactivate(id_);
    fail("cannot create staging directory '{}': {}", staging_.string(), ec ? ec.message() : "it exists");
  }
}

OutputDirStaging::~OutputDirStaging() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) remove_quietly(staging_);
  deactivate(id_);
}

void OutputDirStaging::begin_file(const std::string& name) {
  end_file();
  SIGHTLINE_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                  "'{}' is not a file name inside the profile directory '{}'", name, clean_.string());
  file_ = staging_ / name;
  fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  SIGHTLINE_CHECK(fd_ >= 0, "cannot create '{}': {}; check that the directory is writable", file_.string(),
                  std::strerror(errno));
  file_bytes_ = 0;
}

void OutputDirStaging::append(std::string_view bytes) {
  SIGHTLINE_CHECK(fd_ >= 0, "bytes for the profile '{}' came before any file was begun", clean_.string());
  const int error = write_all(fd_, bytes, file_bytes_);
  if (error != 0) {
    fail("writing '{}' failed after {} bytes: {}; free space or choose another directory", file_.string(),
         file_bytes_, std::strerror(error));
  }
}

void OutputDirStaging::end_file() {
  if (fd_ < 0) return;
  // Durability comes at commit (every file and the directory fsynced); close's own errors count here.
  const int rc = ::close(std::exchange(fd_, -1));
  SIGHTLINE_CHECK(rc == 0, "closing '{}' failed: {}", file_.string(), std::strerror(errno));
}

void OutputDirStaging::validate() {
  end_file();
  // A manifest that does not parse, or lists files that are not there, would mislead readers later.
  validate_staging(staging_, clean_);
}

void OutputDirStaging::prepare_commit() {
  SIGHTLINE_CHECK(!committed_, "the profile '{}' was already committed", clean_.string());
  validate();
  fsync_tree(staging_);
}

OutputDirResult OutputDirStaging::commit() {
  SIGHTLINE_CHECK(replace_ == OutputDirReplace::previous_profile,
                  "commit() of '{}' would replace it; an export that must not replace uses commit_new()",
                  clean_.string());
  prepare_commit();
  const fs::path parent = clean_.parent_path();
  std::error_code ec;
  const bool replacing = fs::exists(clean_, ec);
  if (replacing) check_replaceable(clean_);
  OutputDirResult result;
  result.notes = std::move(notes_);
  // Two renames; a kill between them leaves `<dir>.old-<id>` and `<dir>.tmp-<id>` with the same id, which
  // the next export or open (recover) resolves by moving the new profile into place.
  const fs::path aside = sibling(clean_, kAsideTag, id_);
  if (replacing) {
    fs::rename(clean_, aside, ec);
    if (ec) fail("cannot move the previous profile '{}' aside to replace it: {}", clean_.string(), ec.message());
  }
  fs::rename(staging_, clean_, ec);
  if (ec) {
    const std::string reason = ec.message();
    if (replacing) fs::rename(aside, clean_, ec);  // put the previous profile back
    fail("cannot move the finished profile '{}' into place at '{}': {}", staging_.string(), clean_.string(),
         reason);
  }
  committed_ = true;
  fsync_path(parent, true);
  if (replacing) {
    retire_previous(aside, clean_, id_, result.notes);
    fsync_path(parent, true);
  }
  return result;
}

bool OutputDirStaging::commit_new() {
  prepare_commit();
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, clean_.c_str(), RENAME_NOREPLACE) != 0) {
    const int code = errno;
    if (code == EEXIST || code == ENOTEMPTY) return false;
    fail("cannot move the finished profile '{}' into place at '{}': {}", staging_.string(), clean_.string(),
         std::strerror(code));
  }
  committed_ = true;
  fsync_path(clean_.parent_path(), true);
  return true;
}

OutputDirResult output_dir_write(const std::string& dir, const std::function<void(const fs::path&)>& fill) {
  OutputDirStaging staging(dir);
  fill(staging.path());
  return staging.commit();
}

}  // namespace sightline::formats
