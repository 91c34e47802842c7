// Runs the NTFF fuzz entry point over thousands of deterministic mutations of a valid file, so that
// builds without libFuzzer exercise the loader's error paths (under ASan/UBSan in CI).
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "formats/ntff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

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

TEST(NtffFuzzReplay, ValidFileParses) {
  const std::vector<uint8_t> bytes = seed_file();
  EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  EXPECT_NO_THROW(ntff_parse(bytes));
}

TEST(NtffFuzzReplay, MutationsNeverCrash) {
  const std::vector<uint8_t> seed = seed_file();
  const std::vector<uint8_t> payload(seed.begin() + kNtffHeaderSize, seed.end());
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
