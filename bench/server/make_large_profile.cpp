// make_large_profile: writes a large, valid profile output directory for scale checks of the
// Explorer (server benchmark, browser benchmark).
//
//   make_large_profile OUT_DIR --events 1000000
//
// OUT_DIR is replaced when it holds an earlier profile; any other non-empty directory is refused.
// See large_profile.h for what the profile holds. Exit codes: 0 ok, 1 usage error, 2 failure.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <exception>

#include "large_profile.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a large profile output directory (real seed step, repeated) for Explorer scale checks."};
  std::string out_dir;
  uint64_t events = 1'000'000;
  app.add_option("out_dir", out_dir, "profile directory to write")->required();
  app.add_option("--events", events, "complete events in trace.json")->capture_default_str()->check(
      CLI::Range(uint64_t{1}, uint64_t{100'000'000}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  try {
    const auto started = std::chrono::steady_clock::now();
    const sightline::bench::LargeProfile made = sightline::bench::write_large_profile(out_dir, {.events = events});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    fmt::print("wrote {}: {} events ({} steps of {}), trace.json {:.1f} MB, in {:.1f} s\n", out_dir, made.events,
               made.steps, made.events_per_step, static_cast<double>(made.trace_bytes) / 1e6, seconds);
  } catch (const std::exception& e) {
    fmt::print(stderr, "make_large_profile: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
