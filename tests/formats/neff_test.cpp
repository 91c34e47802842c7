#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "device/test_programs.h"
#include "formats/neff.h"
#include "sightline/error.h"
#include "rejects.h"

namespace sightline::formats {
namespace {

device::Executable sample() {
  device::Executable exe = device::testing::rms_norm_program(device::Spec::builtin(), 130, 64, 1e-6f);
  exe.metadata = {{"builder", "test"}, {"kernel", "rms_norm"}};
  // Exercise every operand field: a strided, multi-dim operand and a per-partition scalar.
  device::Instruction in =
      device::tensor_scalar(device::AluOp::divide, device::sbuf(0, 8, 64, DType::bf16, {2, 3, 4}),
                            device::sbuf(8, 8, 0, DType::bf16, {2, 3, 4}), 2.5f, true);
  in.dst.dims[1].stride = -7;
  in.waits.push_back({5, 9});
  in.updates.push_back({4, -2});
  exe.stream(device::Engine::vector).push_back(in);
  return exe;
}

void parse(std::span<const uint8_t> bytes) { neff_parse(bytes, "test.neff"); }

std::string error_of(std::span<const uint8_t> bytes) { return testing::error_of(parse, bytes); }

TEST(Neff, RoundTripIsEqualAndHashStable) {
  const device::Executable exe = sample();
  const std::vector<uint8_t> bytes = neff_serialize(exe);
  const device::Executable back = neff_parse(bytes);
  EXPECT_EQ(back, exe);
  EXPECT_EQ(neff_hash(back), neff_hash(exe));
  EXPECT_EQ(neff_serialize(back), bytes);
  // The name's hash is folded while walking the executable; it is FNV-1a of the payload as written,
  // and the checksum the header stores.
  EXPECT_EQ(neff_hash(exe), fnv1a64(std::span(bytes).subspan(kNeffHeaderSize)));
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + 24, sizeof(stored));
  EXPECT_EQ(neff_hash(exe), stored);

  const auto dir = std::filesystem::temp_directory_path() / "sightline_neff_test";
  std::filesystem::create_directories(dir);
  const std::string path = neff_save(exe, dir.string());
  EXPECT_EQ(std::filesystem::path(path).filename().string(), neff_file_name(exe));
  EXPECT_EQ(neff_file_name(exe), fmt::format("neff_{:016x}.neff", neff_hash(exe)));
  EXPECT_EQ(neff_load(path), exe);
  std::filesystem::remove_all(dir);
}

// An elementwise instruction moved to GpSimd is read back in the GpSimd stream with its flag.
TEST(Neff, ElementwiseOnGpSimdRoundTrips) {
  device::Executable exe;
  exe.name = "gpsimd_add";
  const device::AccessPattern t = device::sbuf(0, 128, 0, DType::bf16, {64});
  exe.stream(device::Engine::gpsimd)
      .push_back(device::tensor_tensor(device::AluOp::add, t, t, t, device::Engine::gpsimd));
  const device::Executable back = neff_parse(neff_serialize(exe));
  EXPECT_EQ(back, exe);
  ASSERT_EQ(back.stream(device::Engine::gpsimd).size(), 1u);
  EXPECT_EQ(back.stream(device::Engine::gpsimd)[0].engine(), device::Engine::gpsimd);
}

TEST(Neff, DifferentProgramsHaveDifferentHashes) {
  device::Executable a = sample(), b = sample();
  b.stream(device::Engine::vector).back().imm0 = 3.0f;
  EXPECT_NE(neff_hash(a), neff_hash(b));
}

TEST(Neff, EveryTruncationIsRejected) {
  testing::expect_every_truncation_rejected(parse, neff_serialize(sample()), "test.neff");
}

TEST(Neff, EverySingleByteCorruptionIsRejected) {
  testing::expect_every_byte_corruption_rejected(parse, neff_serialize(sample()));
}

TEST(Neff, ErrorsSayWhereAndWhat) {
  std::vector<uint8_t> bytes = neff_serialize(sample());
  std::string e = error_of(std::span(bytes).first(10));
  EXPECT_NE(e.find("header"), std::string::npos) << e;
  bytes[8] = 9;
  e = error_of(bytes);
  EXPECT_NE(e.find("byte offset 8"), std::string::npos) << e;
  EXPECT_NE(e.find("version 9"), std::string::npos) << e;
  // A payload that passes the checksum but names an opcode that does not exist.
  const std::vector<uint8_t> good = neff_serialize(sample());
  std::vector<uint8_t> payload(good.begin() + kNeffHeaderSize, good.end());
  payload.push_back(0);
  e.clear();
  try {
    neff_parse_payload(payload, "p");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("unexpected bytes"), std::string::npos) << e;
}

// An opcode past this build's table is reported as written by a newer version, with what to do, not as
// damage (the checksum holds: the writer meant it).
TEST(Neff, AnOpcodeFromANewerBuildSaysSo) {
  device::Executable exe = sample();
  exe.stream(device::Engine::vector).back().opcode = static_cast<device::Opcode>(device::kOpcodeCount);
  const std::string e = error_of(neff_serialize(exe));
  EXPECT_NE(e.find(fmt::format("has opcode {}, which this build does not know (it knows 0..{}, FIND_INDEX8 the last)",
                               device::kOpcodeCount, device::kOpcodeCount - 1)),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("written by a newer sightline"), std::string::npos) << e;
  EXPECT_NE(e.find("read it with that version, or rebuild the executable with this one"), std::string::npos) << e;
}

// The negate and bias-operand flags round trip and are dumped; bits no build defines are refused as a
// newer build's, like an opcode; a version-1 file (the format before those flags) is read, a version
// past this build's is refused with what to do.
TEST(Neff, InstructionFlagsAndVersions) {
  device::Executable exe;
  exe.name = "softmax_row";
  const device::AccessPattern x = device::sbuf(0, 128, 0, DType::f32, {64}),
                              max = device::sbuf(0, 128, 256, DType::f32, {1});
  exe.stream(device::Engine::vector).push_back(device::tensor_reduce(device::AluOp::max, max, x, true));
  exe.stream(device::Engine::scalar).push_back(device::activate(device::ActFunc::exp, x, x, 0.5f, max));
  std::vector<uint8_t> bytes = neff_serialize(exe);
  EXPECT_EQ(neff_parse(bytes), exe);
  const std::string text = neff_dump(exe);
  EXPECT_NE(text.find("TENSOR_REDUCE max"), std::string::npos) << text;
  EXPECT_NE(text.find(" negate"), std::string::npos) << text;
  EXPECT_NE(text.find(" bias=src1"), std::string::npos) << text;

  bytes[8] = 1;  // the version is outside the checksummed payload
  EXPECT_EQ(neff_parse(bytes), exe);
  bytes[8] = static_cast<uint8_t>(kNeffVersion + 1);
  std::string e = error_of(bytes);
  EXPECT_NE(e.find(fmt::format("format version {}, this build reads versions 1 to {} (a newer sightline wrote it",
                               kNeffVersion + 1, kNeffVersion)),
            std::string::npos)
      << e;

  exe.stream(device::Engine::scalar).back().flags |= 0x80;
  e = error_of(neff_serialize(exe));
  EXPECT_NE(e.find("flags 0x90 of ACTIVATE set bits this build does not define (it knows 0x1f)"), std::string::npos)
      << e;
}

TEST(Neff, DumpListsEverything) {
  const std::string text = neff_dump(sample());
  for (const char* part : {"executable 'rms_norm_test'", "neff_", "x f32 [130, 64]", "aten::rms_norm",
                           "stream scalar", "ACTIVATE square", "stream dma queue 0", "DMA_COPY", "wait(S[",
                           "update(S[", "builder = test", "TENSOR_SCALAR divide", "reverse"}) {
    EXPECT_NE(text.find(part), std::string::npos) << "missing " << part << " in\n" << text;
  }
}

}  // namespace
}  // namespace sightline::formats
