// upload_rss: the peak memory of storing one upload in the Explorer's profile store, as the server
// does it: the files are streamed into a staging directory a MiB at a time (what the HTTP handler
// does as parts arrive), then finish_upload validates them and moves them into place. Prints the
// peak resident memory of the validation step, above what the process held before it (VmHWM, reset
// through /proc/self/clear_refs), next to the upload's size.
//
//   upload_rss PROFILE_DIR          # e.g. one written by make_large_profile --events 1000000
//
// Exit codes: 0 ok, 1 usage error, 2 failure. docs/security.md lists figures measured with it.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/profile_store.h"

namespace {

namespace fs = std::filesystem;

// A field of /proc/self/status in KiB ("VmHWM", "VmRSS").
uint64_t status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

bool reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear.flush());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: upload_rss PROFILE_DIR\n");
    return 1;
  }
  const fs::path source = argv[1];
  const fs::path root = fs::temp_directory_path() / fmt::format("sightline_upload_rss_{}", ::getpid());
  try {
    fs::create_directories(root);
    sightline::server::ProfileStore store(root);
    auto staging = store.begin_upload("measured");
    uint64_t bytes = 0;
    std::vector<char> chunk(size_t{1} << 20);
    for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
      if (!entry.is_regular_file()) continue;
      staging->begin_file(entry.path().filename().string());
      std::ifstream in(entry.path(), std::ios::binary);
      while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
        staging->append(std::string_view(chunk.data(), static_cast<size_t>(in.gcount())));
        bytes += static_cast<uint64_t>(in.gcount());
      }
    }
    const uint64_t before_kib = status_kib("VmRSS");
    const bool reset = reset_peak();
    const auto started = std::chrono::steady_clock::now();
    store.finish_upload(std::move(staging));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const uint64_t peak_kib = status_kib("VmHWM");
    fmt::print("upload of {:.1f} MB: validation peak {:.1f} MB above the {:.1f} MB held before ({:.2f}x the upload), "
               "{:.1f} s{}\n",
               static_cast<double>(bytes) / 1e6, static_cast<double>(peak_kib - std::min(peak_kib, before_kib)) * 1024 / 1e6,
               static_cast<double>(before_kib) * 1024 / 1e6,
               static_cast<double>(peak_kib - std::min(peak_kib, before_kib)) * 1024 / static_cast<double>(bytes),
               seconds, reset ? "" : " (peak not reset: /proc/self/clear_refs refused; includes the process's own)");
  } catch (const std::exception& e) {
    fmt::print(stderr, "upload_rss: error: {}\n", e.what());
    fs::remove_all(root);
    return 2;
  }
  fs::remove_all(root);
  return 0;
}
