// Fuzz target for the manifest reader (formats/manifest): any input must either parse or throw
// sightline::Error naming the field; what parses must serialize, and the text must read back to itself.
// Built with -fsanitize=fuzzer under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/manifest.h"
#include "sightline/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sightline::formats::Manifest manifest;
  try {
    manifest = sightline::formats::manifest_parse(text, "fuzz/manifest.json");
  } catch (const sightline::Error&) {
    return 0;
  }
  try {
    const std::string text_once = sightline::formats::manifest_serialize(manifest);
    const std::string text_twice =
        sightline::formats::manifest_serialize(sightline::formats::manifest_parse(text_once, "fuzz/again.json"));
    if (text_once != text_twice) __builtin_trap();
  } catch (const sightline::Error&) {
    __builtin_trap();  // the writer refuses only what the reader would refuse
  }
  return 0;
}
