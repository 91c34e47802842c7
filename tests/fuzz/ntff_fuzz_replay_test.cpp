// Runs the NTFF fuzz entry point over thousands of deterministic mutations of a valid file, so that
// builds without libFuzzer exercise the loader's error paths (under ASan/UBSan in CI).
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/binary_mutations.h"
#include "formats/ntff.h"

namespace sightline::formats {
namespace {

device::InstructionRecord record(device::Opcode opcode, double start_ns, double end_ns, uint8_t queue) {
  device::InstructionRecord r;
  r.opcode = opcode;
  r.engine = device::opcode_engine(opcode);
  r.queue = r.engine == device::Engine::dma ? queue : 0;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.semaphore_wait_ns = static_cast<float>(start_ns / 4);
  r.hbm_bytes_read = 4096;
  r.onchip_bytes_read = 512;
  r.flops = 1000;
  r.source_op = queue % 3 == 0 ? device::kNoSourceOp : queue;
  return r;
}

std::vector<uint8_t> seed_file() {
  NtffTrace t{.neff_hash = 0x395760075800974ull, .core = 1, .executions = {}};
  for (uint64_t e = 0; e < 3; ++e) {
    NtffExecution x{
        .seq = e, .correlation = 100 + e, .start_ns = 1000 * static_cast<int64_t>(e), .duration_ns = 800.5};
    for (int i = 0; i < 12; ++i) {
      const auto opcode = static_cast<device::Opcode>(i % device::kOpcodeCount);
      x.records.push_back(record(opcode, i * 50.25, i * 50.25 + 40.0625, static_cast<uint8_t>(i)));
    }
    t.executions.push_back(std::move(x));
  }
  return ntff_serialize(t);
}

TEST(NtffFuzzReplay, ValidFileParses) {
  const std::vector<uint8_t> bytes = seed_file();
  EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  EXPECT_NO_THROW(ntff_parse(bytes));
}

TEST(NtffFuzzReplay, MutationsNeverCrash) { fuzz_testing::replay_mutations(seed_file(), kNtffHeaderSize); }

}  // namespace
}  // namespace sightline::formats
