// Runs the NEFF fuzz entry point over thousands of deterministic mutations of a valid file, so that
// builds without libFuzzer exercise the loader's error paths (under ASan/UBSan in CI).
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "device/test_programs.h"
#include "formats/neff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace sightline::formats {
namespace {

std::vector<uint8_t> seed_file() { return neff_serialize(device::testing::matmul_program(256, 256, 128)); }

void mutate(std::vector<uint8_t>& bytes, std::mt19937& gen) {
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
    default: {  // a large count or length where a field starts
      const size_t p = at();
      for (size_t i = p; i < std::min(bytes.size(), p + 4); ++i) bytes[i] = 0xff;
    }
  }
}

TEST(NeffFuzzReplay, ValidFileParses) {
  const std::vector<uint8_t> bytes = seed_file();
  EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  EXPECT_NO_THROW(neff_parse(bytes));
}

TEST(NeffFuzzReplay, MutationsNeverCrash) {
  const std::vector<uint8_t> seed = seed_file();
  const std::vector<uint8_t> payload(seed.begin() + kNeffHeaderSize, seed.end());
  std::mt19937 gen(20260101);
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> bytes = (i % 2) ? payload : seed;
    const int rounds = 1 + i % 4;
    for (int r = 0; r < rounds && !bytes.empty(); ++r) mutate(bytes, gen);
    ASSERT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  }
}

}  // namespace
}  // namespace sightline::formats
