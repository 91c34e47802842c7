// Deterministic byte mutations of a binary file format (NEFF, NTFF), replayed through a fuzz entry
// point so that builds without libFuzzer exercise the loader's error paths (under ASan/UBSan in CI).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace sightline::fuzz_testing {

// One mutation: a flipped bit, a random byte, a truncation, an inserted byte, or 0xff over four bytes
// (a large count or length where a field starts).
inline void mutate(std::vector<uint8_t>& bytes, std::mt19937& gen) {
  std::uniform_int_distribution<int> kind(0, 4);
  auto at = [&] { return std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(gen); };
  switch (kind(gen)) {
    case 0:
      bytes[at()] ^= static_cast<uint8_t>(1u << (gen() % 8));
      break;
    case 1:
      bytes[at()] = static_cast<uint8_t>(gen());
      break;
    case 2:
      bytes.resize(at());
      break;
    case 3:
      bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at()), static_cast<uint8_t>(gen()));
      break;
    default: {
      const size_t p = at();
      for (size_t i = p; i < std::min(bytes.size(), p + 4); ++i) bytes[i] = 0xff;
    }
  }
}

// 4000 inputs, each one to four mutations of the valid `seed` or, every other one, of its payload
// without the `header_size`-byte header (so the parser's body checks run, not only the header's); the
// entry point must return 0 for every one (a crash or sanitizer report fails the test).
inline void replay_mutations(const std::vector<uint8_t>& seed, size_t header_size) {
  const std::vector<uint8_t> payload(seed.begin() + static_cast<std::ptrdiff_t>(header_size), seed.end());
  std::mt19937 gen(20260101);
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> bytes = (i % 2) ? payload : seed;
    const int rounds = 1 + i % 4;
    for (int r = 0; r < rounds && !bytes.empty(); ++r) mutate(bytes, gen);
    ASSERT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0) << "input " << i;
  }
}

}  // namespace sightline::fuzz_testing
