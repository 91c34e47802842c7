// Fuzz target for the NEFF loader: any input must either parse or throw sightline::Error; never crash,
// hang, or allocate without bound. Built with -fsanitize=fuzzer under clang; the g++ build replays
// deterministic mutations through the same entry point (neff_fuzz_replay_test.cpp).
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/neff.h"
#include "sightline/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    const auto exe = sightline::formats::neff_parse(bytes);
    // Whatever parses must serialize back to the same bytes.
    if (sightline::formats::neff_serialize(exe).size() != size) __builtin_trap();
  } catch (const sightline::Error&) {
  }
  // The checksum rejects almost every mutation; feed the payload decoder directly too.
  try {
    (void)sightline::formats::neff_dump(sightline::formats::neff_parse_payload(bytes));
  } catch (const sightline::Error&) {
  }
  return 0;
}
