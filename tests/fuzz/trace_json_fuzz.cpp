// Fuzz target for the trace.json reader (analysis/trace_json): any input must either parse into a
// trace or throw sightline::Error naming what is wrong; never crash, hang, overflow or allocate
// without bound. Built with -fsanitize=fuzzer under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analysis/trace_json.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const sightline::profiler::CollectedTrace trace = sightline::analysis::trace_json_parse(text, "fuzz.json");
    // What parses must also average and print, as `sightline table` does.
    (void)sightline::profiler::key_averages(trace, {}).table();
  } catch (const sightline::Error&) {
  }
  return 0;
}
