// Fuzz target for the one reader of trace.json (formats/trace_reader) and its two consumers.
// The analysis reader (analysis/trace_json): any input must parse into a trace or throw
// sightline::Error naming what is wrong; what parses must average and print, as `sightline table`
// does; the check that keeps nothing (trace_json_validate) must accept exactly what parses, with the
// same error. The Explorer server's index (server/profile_index): any input must load or be refused
// with RequestError; what loads must answer the queries the Explorer makes (as JSON the server can
// send); and the upload validator's streaming check (validate_trace_file, with runs cut every few
// bytes so that every input is cut many times) must accept exactly what the index loads,
// sequentially and on two threads. Never a crash, hang, overflow or unbounded allocation. Built
// with -fsanitize=fuzzer under clang (scripts/fuzz.sh); a g++ replay runs the seed corpus
// (trace_reader_fuzz_replay_test).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "analysis/trace_json.h"
#include "sightline/device/spec.h"
#include "formats/manifest.h"
#include "sightline/profiler/key_averages.h"
#include "server/profile_index.h"
#include "sightline/error.h"

namespace {

namespace fs = std::filesystem;
using sightline::server::RequestError;

// A profile directory whose trace.json each input replaces (the manifest is written once).
const fs::path& profile_dir() {
  static const fs::path dir = [] {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path made = base / ("sightline_trace_reader_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(made);
    sightline::formats::Manifest manifest;
    manifest.created_utc = "2026-01-01T00:00:00Z";
    manifest.device = sightline::device::Spec::builtin("trn2");
    manifest.files = {{sightline::formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, 0}};
    sightline::formats::manifest_save(manifest, made.string());
    std::atexit([] { std::error_code ignored; fs::remove_all(profile_dir(), ignored); });
    return made;
  }();
  return dir;
}

[[noreturn]] void disagree(const char* what, const std::string& detail) {
  std::fprintf(stderr, "trace_reader_fuzz: %s: %s\n", what, detail.c_str());
  __builtin_trap();
}

// The analysis reader: parse and the check that keeps nothing agree, error for error.
void check_analysis_reader(std::string_view text) {
  std::string parse_error, validate_error;
  bool parsed = false, valid = false;
  try {
    const sightline::profiler::CollectedTrace trace = sightline::analysis::trace_json_parse(text, "fuzz.json");
    parsed = true;
    (void)sightline::profiler::key_averages(trace, {}).table();
  } catch (const sightline::Error& error) {
    parse_error = error.what();
  }
  try {
    sightline::analysis::trace_json_validate(text, "fuzz.json");
    valid = true;
  } catch (const sightline::Error& error) {
    validate_error = error.what();
  }
  if (parsed != valid || parse_error != validate_error) {
    disagree("the analysis reader's parse and validate disagree", parse_error + " / " + validate_error);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_analysis_reader(std::string_view(reinterpret_cast<const char*>(data), size));
  const fs::path trace = profile_dir() / "trace.json";
  {
    std::ofstream out(trace, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::string load_error, parallel_error, validate_error;
  bool loaded = false, loaded_in_parallel = false, valid = false;
  try {
    sightline::server::IndexOptions sequential;
    sequential.parallel_parse_bytes = SIZE_MAX;
    const auto index = sightline::server::ProfileIndex::load(profile_dir(), sequential);
    loaded = true;
    // What the Explorer asks of a loaded profile; answers must be JSON the server can send.
    (void)index->lanes_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    sightline::server::WindowQuery everything;
    everything.start_us = -1e9;
    everything.end_us = 1e18;
    everything.width_px = 200;
    (void)index->window(everything).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)index->search("a", 20).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    for (uint32_t id = 0; id < index->events().size() && id < 8; ++id) {
      (void)index->event_details(id).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    try {
      (void)index->key_averages();
    } catch (const RequestError&) {  // the analysis reader refuses what the index reads (422)
    }
  } catch (const RequestError& error) {
    load_error = error.what();
  }
  try {
    sightline::server::IndexOptions parallel;
    parallel.parallel_parse_bytes = 1;
    parallel.bytes_per_thread = 1;
    parallel.threads = 2;
    parallel.bytes_per_run = 16;
    (void)sightline::server::ProfileIndex::load(profile_dir(), parallel);
    loaded_in_parallel = true;
  } catch (const RequestError& error) {
    parallel_error = error.what();
  }
  try {
    sightline::server::validate_trace_file(trace, "fuzz/trace.json", 8);
    valid = true;
  } catch (const RequestError& error) {
    validate_error = error.what();
  }
  if (loaded != loaded_in_parallel) disagree("sequential and parallel loads disagree", load_error + parallel_error);
  if (loaded != valid) disagree("the upload validator and the index disagree", load_error + validate_error);
  return 0;
}
