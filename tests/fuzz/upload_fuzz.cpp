// Fuzz target for the Explorer server's upload validator (server/profile_store): the input is an
// upload, a sequence of files each written as [name length: 1 byte][name][content length: 4 bytes,
// little-endian][content] (the last content may be cut short: it takes what is left). Any upload
// must be stored or refused with RequestError; one that is stored must open in every reader of
// profiles (the server's index, analysis::profile_dir_load, the summary), since validation
// promises that, and is then deleted. Built with -fsanitize=fuzzer under clang (scripts/fuzz.sh);
// tests/fuzz/corpus/upload_fuzz holds a whole profile directory and an executable + trace pair.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "analysis/profile_dir.h"
#include "server/profile_index.h"
#include "server/profile_store.h"
#include "sightline/error.h"

namespace {

namespace fs = std::filesystem;
using sightline::server::RequestError;

sightline::server::ProfileStore& store() {
  static const fs::path root = [] {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path made = base / ("sightline_upload_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(made);
    std::atexit([] { std::error_code ignored; fs::remove_all(root, ignored); });
    return made;
  }();
  static sightline::server::ProfileStore profiles(root);
  return profiles;
}

std::vector<sightline::server::UploadFile> files_of(const uint8_t* data, size_t size) {
  std::vector<sightline::server::UploadFile> files;
  size_t at = 0;
  while (at < size && files.size() < 16) {
    const size_t name_length = data[at++];
    if (size - at < name_length) break;
    sightline::server::UploadFile file;
    file.name.assign(reinterpret_cast<const char*>(data + at), name_length);
    at += name_length;
    size_t length = 0;
    for (int i = 0; i < 4 && at < size; ++i) length |= static_cast<size_t>(data[at++]) << (8 * i);
    length = std::min(length, size - at);
    file.content.assign(reinterpret_cast<const char*>(data + at), length);
    at += length;
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sightline::server::ProfileStore& profiles = store();
  try {
    (void)profiles.upload("fuzz", files_of(data, size));
  } catch (const RequestError&) {
    return 0;  // refused, naming why
  }
  // Stored: every reader must open it.
  const fs::path dir = profiles.profile_path("fuzz");
  try {
    (void)sightline::server::ProfileIndex::load(dir);
    (void)sightline::analysis::profile_dir_load(dir.string());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "upload_fuzz: an upload was stored that a reader refuses: %s\n", error.what());
    __builtin_trap();
  }
  try {
    (void)profiles.summary("fuzz");
  } catch (const RequestError&) {  // analysis may refuse to summarize (422), naming why
  }
  profiles.remove("fuzz");
  return 0;
}
