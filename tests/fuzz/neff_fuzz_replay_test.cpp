// Runs the NEFF fuzz entry point over thousands of deterministic mutations of a valid file, so that
// builds without libFuzzer exercise the loader's error paths (under ASan/UBSan in CI).
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/binary_mutations.h"
#include "device/test_programs.h"
#include "formats/neff.h"

namespace sightline::formats {
namespace {

std::vector<uint8_t> seed_file() { return neff_serialize(device::testing::matmul_program(256, 256, 128)); }

TEST(NeffFuzzReplay, ValidFileParses) {
  const std::vector<uint8_t> bytes = seed_file();
  EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  EXPECT_NO_THROW(neff_parse(bytes));
}

TEST(NeffFuzzReplay, MutationsNeverCrash) { fuzz_testing::replay_mutations(seed_file(), kNeffHeaderSize); }

}  // namespace
}  // namespace sightline::formats
