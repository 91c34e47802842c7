// NTFF instruction-trace files: round trips, lossy fields within their documented bounds, naming and
// pairing with the NEFF, and rejection of every truncation and single-byte corruption.
#include <cmath>
#include <filesystem>
#include <limits>

#include <gtest/gtest.h>

#include "device/core.h"
#include "device/test_programs.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "sightline/error.h"
#include "rejects.h"

namespace sightline::formats {
namespace {

using device::Engine;
using device::InstructionRecord;
using device::Opcode;

// A record whose every field survives the format exactly: times on the 1/16 ns grid, the on-chip total
// in onchip_bytes_read, index 0.
InstructionRecord exact_record(Opcode opcode, double start_ns, double end_ns, uint8_t queue = 0) {
  InstructionRecord r;
  r.opcode = opcode;
  r.engine = device::opcode_engine(opcode);
  r.queue = queue;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.semaphore_wait_ns = 12.345f;
  r.hbm_bytes_read = r.engine == Engine::dma ? 65536 : 0;
  r.hbm_bytes_written = r.engine == Engine::dma ? 4096 : 0;
  r.onchip_bytes_read = 1u << 20;
  r.flops = r.engine == Engine::tensor ? 2u * 128 * 128 * 512 : 128 * 512;
  r.source_op = 3;
  return r;
}

bool same_record(const InstructionRecord& a, const InstructionRecord& b) {
  return a.start_ns == b.start_ns && a.end_ns == b.end_ns &&
         std::memcmp(&a.semaphore_wait_ns, &b.semaphore_wait_ns, sizeof(float)) == 0 &&
         a.hbm_bytes_read == b.hbm_bytes_read && a.hbm_bytes_written == b.hbm_bytes_written &&
         a.onchip_bytes_read == b.onchip_bytes_read && a.onchip_bytes_written == b.onchip_bytes_written &&
         a.flops == b.flops && a.source_op == b.source_op && a.index == b.index && a.engine == b.engine &&
         a.queue == b.queue && a.opcode == b.opcode;
}

NtffTrace sample() {
  NtffTrace t;
  t.neff_hash = 0x0123456789abcdefull;
  t.core = 3;
  NtffExecution first{.seq = 7, .correlation = 42, .start_ns = 1'700'000'000'123, .duration_ns = 1234.56789};
  first.records.push_back(exact_record(Opcode::dma_copy, 0, 512.0625, 15));
  first.records.push_back(exact_record(Opcode::matmul, 512.0625, 900.5));
  first.records.push_back(exact_record(Opcode::activate, 900.5, 1000));
  InstructionRecord no_source = exact_record(Opcode::tensor_tensor, 1000, 1234.5);
  no_source.source_op = device::kNoSourceOp;
  no_source.semaphore_wait_ns = 0;
  first.records.push_back(no_source);
  first.records.push_back(exact_record(Opcode::iota, 3, 3));  // zero duration
  NtffExecution second{.seq = 8, .correlation = 43, .start_ns = -5, .duration_ns = 0};
  NtffExecution third{.seq = 9, .correlation = 0, .start_ns = 1'700'000'100'000, .duration_ns = 77.25};
  third.records.push_back(exact_record(Opcode::partition_all_reduce, 1.5, 77.25));
  t.executions = {first, second, third};
  return t;
}

void expect_same(const NtffTrace& a, const NtffTrace& b) {
  EXPECT_EQ(a.neff_hash, b.neff_hash);
  EXPECT_EQ(a.core, b.core);
  ASSERT_EQ(a.executions.size(), b.executions.size());
  for (size_t i = 0; i < a.executions.size(); ++i) {
    const auto& x = a.executions[i];
    const auto& y = b.executions[i];
    EXPECT_EQ(x.seq, y.seq);
    EXPECT_EQ(x.correlation, y.correlation);
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.duration_ns, y.duration_ns);
    ASSERT_EQ(x.records.size(), y.records.size());
    for (size_t k = 0; k < x.records.size(); ++k) {
      EXPECT_TRUE(same_record(x.records[k], y.records[k])) << "execution " << i << " record " << k;
    }
  }
}

void parse(std::span<const uint8_t> bytes) { ntff_parse(bytes, "test.ntff"); }

std::string error_of(std::span<const uint8_t> bytes) { return testing::error_of(parse, bytes); }

TEST(Ntff, RecordIsAtMost32Bytes) {
  static_assert(sizeof(NtffRecord) == 32);
  const NtffTrace t = sample();
  EXPECT_EQ(ntff_serialize(t).size(),
            kNtffHeaderSize + 3 * kNtffExecutionHeaderSize + t.record_count() * kNtffRecordSize);
}

TEST(Ntff, RoundTripGivesEqualRecords) {
  const NtffTrace t = sample();
  const std::vector<uint8_t> bytes = ntff_serialize(t);
  const NtffTrace back = ntff_parse(bytes);
  expect_same(back, t);
  EXPECT_EQ(back.record_count(), 6u);
  EXPECT_EQ(ntff_serialize(back), bytes);
  for (const auto& e : back.executions) EXPECT_EQ(e.clamped_records, 0u);
}

TEST(Ntff, EmptyTraceRoundTrips) {
  NtffTrace t{.neff_hash = 1, .core = 0, .executions = {}};
  const NtffTrace back = ntff_parse(ntff_serialize(t));
  EXPECT_EQ(back.neff_hash, 1u);
  EXPECT_TRUE(back.executions.empty());
}

// Records straight from the simulator: the lossy fields stay within their documented bounds.
TEST(Ntff, SimulatorRecordsSurviveWithinDocumentedBounds) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const device::Executable exe = device::testing::rms_norm_program(spec, 256, 512, 1e-6f);
  device::Core core(spec);
  std::vector<uint64_t> addresses;
  for (const auto& t : exe.io) addresses.push_back(core.hbm_allocate(t.bytes()));
  const device::RunResult run = core.run(exe, addresses, {.functional = false, .record = true});
  ASSERT_FALSE(run.records.empty());

  NtffTrace t{.neff_hash = neff_hash(exe), .core = 0, .executions = {}};
  t.executions.push_back(
      {.seq = 1, .correlation = 2, .start_ns = 3, .duration_ns = run.duration_ns, .records = run.records});
  const NtffTrace back = ntff_parse(ntff_serialize(t));
  ASSERT_EQ(back.executions.at(0).records.size(), run.records.size());
  EXPECT_EQ(back.executions[0].duration_ns, run.duration_ns);
  const double half_tick = 0.5 / kNtffTicksPerNs;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const auto& a = run.records[i];
    const auto& b = back.executions[0].records[i];
    EXPECT_LE(std::abs(a.start_ns - b.start_ns), half_tick) << i;
    EXPECT_LE(std::abs(a.end_ns - b.end_ns), half_tick) << i;
    EXPECT_EQ(a.semaphore_wait_ns, b.semaphore_wait_ns);
    EXPECT_EQ(a.hbm_bytes_read, b.hbm_bytes_read);
    EXPECT_EQ(a.hbm_bytes_written, b.hbm_bytes_written);
    EXPECT_EQ(uint64_t{a.onchip_bytes_read} + a.onchip_bytes_written, b.onchip_bytes_read);
    EXPECT_EQ(b.onchip_bytes_written, 0u);
    EXPECT_EQ(a.flops, b.flops);
    EXPECT_EQ(a.source_op, b.source_op);
    EXPECT_EQ(a.engine, b.engine);
    EXPECT_EQ(a.queue, b.queue);
    EXPECT_EQ(a.opcode, b.opcode);
  }
  EXPECT_NE(ntff_dump(back, &exe).find(exe.source_ops.at(0)), std::string::npos);
}

TEST(Ntff, SaturatedFieldsClampAndAreCounted) {
  NtffTrace t{.neff_hash = 5, .core = 0, .executions = {}};
  NtffExecution e{.seq = 1, .correlation = 1, .start_ns = 0, .duration_ns = 1e10};
  InstructionRecord late = exact_record(Opcode::tensor_copy, 5e9, 5e9 + 10);  // past 4.29 s
  InstructionRecord long_one = exact_record(Opcode::dma_copy, 0, 3e8, 2);     // 300 ms > 268 ms
  InstructionRecord busy = exact_record(Opcode::tensor_copy, 1, 2);
  busy.onchip_bytes_read = busy.onchip_bytes_written = 3'000'000'000u;
  e.records = {late, long_one, busy, exact_record(Opcode::bn_stats, 1, 2)};
  t.executions.push_back(e);
  const std::vector<uint8_t> bytes = ntff_serialize(t);
  const NtffTrace back = ntff_parse(bytes);
  const auto& r = back.executions.at(0);
  EXPECT_EQ(r.clamped_records, 3u);
  EXPECT_EQ(r.records[0].start_ns, static_cast<double>(kNtffMaxStartTicks) / kNtffTicksPerNs);
  EXPECT_EQ(r.records[1].end_ns - r.records[1].start_ns,
            static_cast<double>(std::numeric_limits<uint32_t>::max()) / kNtffTicksPerNs);
  EXPECT_EQ(r.records[2].onchip_bytes_read, std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(ntff_serialize(back), bytes);  // the clamp count survives a re-serialization
  EXPECT_NE(ntff_dump(back).find("3 clamped"), std::string::npos);
}

TEST(Ntff, UnrepresentableRecordsAreRefused) {
  auto refused = [](InstructionRecord r, const char* expected) {
    NtffTrace t{.neff_hash = 5, .core = 0, .executions = {}};
    t.executions.push_back({.seq = 1, .correlation = 1, .start_ns = 0, .duration_ns = 10, .records = {r}});
    try {
      ntff_serialize(t);
      ADD_FAILURE() << "accepted; expected an error mentioning " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  InstructionRecord r = exact_record(Opcode::dma_copy, 0, 1, 32);
  refused(r, "DMA queue 32");
  r = exact_record(Opcode::tensor_copy, 0, 1);
  r.source_op = 0xffff;
  refused(r, "source op index 65535");
  r = exact_record(Opcode::tensor_copy, 0, 1);
  r.engine = Engine::scalar;
  refused(r, "runs on vector");
  r = exact_record(Opcode::tensor_copy, 0, 1);
  r.engine = Engine::gpsimd;  // only tensor_tensor and tensor_scalar may run there
  refused(r, "runs on vector");
  r = exact_record(Opcode::tensor_copy, 0, 1);
  r.queue = 1;
  refused(r, "only DMA records have a queue");
  refused(exact_record(Opcode::tensor_copy, 5, 4), "0 <= start <= end");
  refused(exact_record(Opcode::tensor_copy, -1, 4), "0 <= start <= end");
  r = exact_record(Opcode::tensor_copy, 0, 1);
  r.semaphore_wait_ns = std::numeric_limits<float>::quiet_NaN();
  refused(r, "semaphore wait");
}

// tensor_tensor and tensor_scalar may run on GpSimd (kFlagGpSimd): their records keep that engine.
TEST(Ntff, ElementwiseRecordsOnGpSimdRoundTrip) {
  NtffTrace t{.neff_hash = 5, .core = 0, .executions = {}};
  NtffExecution e{.seq = 1, .correlation = 1, .start_ns = 0, .duration_ns = 10};
  for (Opcode op : {Opcode::tensor_tensor, Opcode::tensor_scalar}) {
    InstructionRecord r = exact_record(op, 0, 1);
    r.engine = Engine::gpsimd;
    e.records.push_back(r);
  }
  t.executions.push_back(e);
  const NtffTrace back = ntff_parse(ntff_serialize(t));
  expect_same(back, t);
  EXPECT_EQ(back.executions[0].records[0].engine, Engine::gpsimd);
}

TEST(Ntff, FileNamesPairWithTheNeff) {
  const device::Executable exe = device::testing::matmul_program(128, 128, 64);
  const uint64_t hash = neff_hash(exe);
  EXPECT_EQ(ntff_paired_neff_file_name(hash), neff_file_name(exe));
  EXPECT_EQ(ntff_file_name(0x395760075800974ull, 0), "0395760075800974_instid_0_vnc_0.ntff");
  EXPECT_EQ(ntff_file_name(hash, 12), fmt::format("{:016x}_instid_0_vnc_12.ntff", hash));

  const auto parsed = ntff_parse_file_name(ntff_file_name(hash, 12));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->neff_hash, hash);
  EXPECT_EQ(parsed->core, 12u);
  for (const char* other :
       {"0395760075800974_instid_0_vnc_.ntff", "0395760075800974_instid_0_vnc_01.ntff",
        "0395760075800974_instid_1_vnc_0.ntff", "0395760075800974_instid_0_vnc_0.neff",
        "0395760075800974_instid_0_vnc_4294967296.ntff", "neff_0395760075800974.neff",
        "039576007580097G_instid_0_vnc_0.ntff", "0395760075800974_instid_0_vnc_0x.ntff"}) {
    EXPECT_FALSE(ntff_parse_file_name(other).has_value()) << other;
  }

  const auto dir = std::filesystem::temp_directory_path() / "sightline_ntff_test";
  std::filesystem::create_directories(dir);
  NtffTrace t = sample();
  t.neff_hash = hash;
  const std::string path = ntff_save(t, dir.string());
  EXPECT_EQ(std::filesystem::path(path).filename().string(), ntff_file_name(hash, t.core));
  expect_same(ntff_load(path), t);
  const std::string neff_path = neff_save(exe, dir.string());
  EXPECT_EQ(std::filesystem::path(neff_path).filename().string(), ntff_paired_neff_file_name(t.neff_hash));
  std::filesystem::remove_all(dir);
}

TEST(Ntff, DumpListsExecutionsAndRecordsAndChecksThePairing) {
  const NtffTrace t = sample();
  const std::string dump = ntff_dump(t);
  EXPECT_NE(dump.find("pairs with neff_0123456789abcdef.neff, core 3, 3 executions, 6 records"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("execution seq 7 correlation 42"), std::string::npos) << dump;
  EXPECT_NE(dump.find("dma15"), std::string::npos) << dump;
  EXPECT_NE(dump.find("MATMUL"), std::string::npos) << dump;
  EXPECT_NE(dump.find("#3"), std::string::npos) << dump;
  const device::Executable other = device::testing::matmul_program(128, 128, 64);
  EXPECT_THROW(ntff_dump(t, &other), Error);
}

TEST(Ntff, EveryTruncationIsRejected) {
  testing::expect_every_truncation_rejected(parse, ntff_serialize(sample()), "test.ntff");
}

TEST(Ntff, EverySingleByteCorruptionIsRejected) {
  testing::expect_every_byte_corruption_rejected(parse, ntff_serialize(sample()));
}

TEST(Ntff, ErrorsSayWhereAndWhat) {
  std::vector<uint8_t> bytes = ntff_serialize(sample());
  std::vector<uint8_t> bad = bytes;
  bad[8] = 9;  // version
  EXPECT_NE(error_of(bad).find("byte offset 8: format version 9, this build reads version 1"),
            std::string::npos)
      << error_of(bad);
  bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(error_of(bad).find("not a sightline instruction trace file"), std::string::npos);
  bad = bytes;
  bad[40] = 16;  // record size
  EXPECT_NE(error_of(bad).find("byte offset 40: record size 16, expected 32"), std::string::npos);
  bad = bytes;
  bad.push_back(0);
  EXPECT_NE(error_of(bad).find("corrupt at byte offset 48: header says"), std::string::npos) << error_of(bad);

  // Past the checksum gate, the payload decoder names the record's offset and the bad field.
  std::vector<uint8_t> payload(bytes.begin() + kNtffHeaderSize, bytes.end());
  const size_t first_record = kNtffExecutionHeaderSize;
  payload[first_record + 6] = static_cast<uint8_t>(payload[first_record + 6] | 0xf0);  // opcode bits 52..55
  try {
    ntff_parse_payload(payload, 3, "p.ntff");
    ADD_FAILURE() << "bad opcode accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("corrupt at byte offset {}: opcode 15", kNtffHeaderSize + first_record)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      ntff_load((std::filesystem::temp_directory_path() / "sightline_no_such_dir" / "x.ntff").string()),
      Error);
}

}  // namespace
}  // namespace sightline::formats
