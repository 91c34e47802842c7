// Fuzz target for the trace.json reader (analysis/trace_json): any input must either parse into a
// trace or throw sightline::Error naming what is wrong; never crash, hang, overflow or allocate
// without bound. The check that keeps nothing (trace_json_validate, what the server's upload
// validation runs) must accept exactly what parses. Built with -fsanitize=fuzzer under clang
// (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "analysis/trace_json.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string parse_error, validate_error;
  bool parsed = false, valid = false;
  try {
    const sightline::profiler::CollectedTrace trace = sightline::analysis::trace_json_parse(text, "fuzz.json");
    parsed = true;
    // What parses must also average and print, as `sightline table` does.
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
    std::fprintf(stderr, "trace_json_fuzz: parse and validate disagree:\n  parse: %s\n  validate: %s\n",
                 parse_error.c_str(), validate_error.c_str());
    __builtin_trap();
  }
  return 0;
}
