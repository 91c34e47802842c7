// Fuzz target for the NTFF loader: any input must either parse or throw sightline::Error; never crash,
// hang, or allocate without bound. Built with -fsanitize=fuzzer under clang; the g++ build replays
// deterministic mutations through the same entry point (ntff_fuzz_replay_test.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/ntff.h"
#include "sightline/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    const auto trace = sightline::formats::ntff_parse(bytes);
    // Whatever parses must serialize back to the same bytes.
    if (sightline::formats::ntff_serialize(trace).size() != size) __builtin_trap();
  } catch (const sightline::Error&) {
  }
  // The checksum rejects almost every mutation; feed the payload decoder directly too, with an execution
  // count taken from the input so that large and small counts are both tried.
  try {
    const uint32_t executions = size == 0 ? 0 : data[0] % 8;
    const auto trace = sightline::formats::ntff_parse_payload(bytes, executions);
    (void)sightline::formats::ntff_dump(trace);
    // A payload that decodes re-encodes: the reader accepts only what the writer can write.
    (void)sightline::formats::ntff_serialize(trace);
  } catch (const sightline::Error&) {
  }
  return 0;
}
