// NTFF-like instruction-trace files: the per-instruction device trace of one (executable, captured core)
// pair, in a compact, versioned, checksummed binary.
//
// Naming and pairing (docs/hardware-model.md §3.2): the file is `<hash>_instid_0_vnc_<core>.ntff`, where
// <hash> is the 16 hex digit content hash of the executable (formats::neff_hash), so it pairs with the
// executable file `neff_<hash>.neff` of the same directory. One file holds every captured execution of
// that executable on that core, in submission order.
//
//   NtffTrace trace{.neff_hash = neff_hash(exe), .core = 0};
//   trace.executions.push_back({.seq = 7, .correlation = 42, .start_ns = host_ns,
//                               .duration_ns = run.duration_ns, .records = run.records});
//   std::string path = formats::ntff_save(trace, out_dir);   // ".../0123456789abcdef_instid_0_vnc_0.ntff"
//   NtffTrace back = formats::ntff_load(path);                // validates everything
//   fmt::print("{}", formats::ntff_dump(back, &exe));         // names source ops from the paired NEFF
//
// File layout, little-endian:
//   offset 0   magic "SLNTFF\r\n" (8 bytes; \r\n catches text-mode mangling)
//   offset 8   u32 format version (kNtffVersion)
//   offset 12  u32 header size (64)
//   offset 16  u64 NEFF content hash of the paired executable
//   offset 24  u32 core index
//   offset 28  u32 execution count
//   offset 32  u64 record count, all executions together
//   offset 40  u32 record size (32)
//   offset 44  u32 time ticks per ns (16)
//   offset 48  u64 payload size; the file is exactly header + payload
//   offset 56  u64 FNV-1a 64 checksum of header bytes 0..55 followed by the payload
//   offset 64  payload: per execution a 40-byte block header, then its records (32 bytes each)
//     execution block: u64 seq, u64 correlation id, i64 host ns of device time 0,
//                      f64 device duration ns, u32 record count, u32 clamped record count
//     record: see NtffRecord below.
// docs/formats.md has the same tables.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "device/core.h"
#include "sightline/device/executable.h"

namespace sightline::formats {

inline constexpr uint32_t kNtffVersion = 1;
inline constexpr size_t kNtffHeaderSize = 64;
inline constexpr size_t kNtffExecutionHeaderSize = 40;
inline constexpr size_t kNtffRecordSize = 32;
// Record times are integers of 1/16 ns (62.5 ps): well under a cycle of the fastest simulated clock
// (2.4 GHz, 417 ps), while 36 bits of start still cover 4.29 s of one execution.
inline constexpr uint32_t kNtffTicksPerNs = 16;

// One record as stored, 32 bytes. Field ranges (values beyond them saturate, i.e. clamp to the maximum,
// and the execution's `clamped_records` counts the records concerned):
//   start_and_tags bits  0..35  start, ticks from the execution's device time 0 (max 2^36-1 = 4.29 s)
//                  bits 36..51  source op index; 0xffff = none (device::kNoSourceOp); indices
//                               0..0xfffe are exact, larger ones are refused by the writer
//                  bits 52..55  opcode (device::Opcode)
//                  bits 56..58  engine (device::Engine); must be the opcode's engine
//                  bits 59..63  DMA queue 0..31 (0 for compute engines); larger ones are refused
//   duration_ticks   end - start in ticks (max 2^32-1 = 268 ms)
//   semaphore_wait_ns  float ns, bit-exact copy of InstructionRecord::semaphore_wait_ns
//   hbm_bytes_read, hbm_bytes_written, flops: exact copies (32-bit in InstructionRecord too)
//   onchip_bytes   SBUF + PSUM bytes read plus written (saturates at 2^32-1)
struct NtffRecord {
  uint64_t start_and_tags = 0;
  uint32_t duration_ticks = 0;
  float semaphore_wait_ns = 0;
  uint32_t hbm_bytes_read = 0;
  uint32_t hbm_bytes_written = 0;
  uint32_t onchip_bytes = 0;
  uint32_t flops = 0;
};
static_assert(sizeof(NtffRecord) == kNtffRecordSize, "an NTFF record is 32 bytes, no padding");
static_assert(kNtffRecordSize <= 32, "issue 4: at most 32 bytes a record");

inline constexpr uint32_t kNtffNoSourceOp = 0xffff;
inline constexpr uint32_t kNtffMaxQueue = 31;
inline constexpr uint64_t kNtffMaxStartTicks = (uint64_t{1} << 36) - 1;

// Packs one record; sets `clamped` when a field is at its maximum (a time or the on-chip byte count
// saturated). Throws sightline::Error for a record that cannot be represented at all: source op index or
// DMA queue out of range, an engine that does not execute the opcode, a queue on a compute record,
// negative or non-finite times, end before start, a negative or non-finite semaphore wait.
NtffRecord ntff_encode_record(const device::InstructionRecord& record, bool& clamped);
// The inverse, lossy on three fields (documented in docs/formats.md):
//   * start_ns / end_ns come back rounded to the nearest 1/16 ns (exact for multiples of 1/16 ns);
//   * the on-chip total comes back in onchip_bytes_read, with onchip_bytes_written = 0;
//   * index (position in its stream) is not stored and comes back 0; records keep their issue order.
device::InstructionRecord ntff_decode_record(const NtffRecord& record);

// One execution of the executable on the core.
struct NtffExecution {
  uint64_t seq = 0;          // runtime submission sequence number
  uint64_t correlation = 0;  // correlation id of the framework op that launched it
  int64_t start_ns = 0;      // host clock ns of device time 0 (the execution's sync point)
  double duration_ns = 0;    // device time, first issue to last completion (stored exactly)
  std::vector<device::InstructionRecord> records{};  // in issue order
  // Records with a saturated field. Filled by the reader; the writer counts them itself and ignores this.
  uint32_t clamped_records = 0;
};

// One file: every captured execution of one executable on one core.
struct NtffTrace {
  uint64_t neff_hash = 0;  // formats::neff_hash of the executable
  uint32_t core = 0;
  std::vector<NtffExecution> executions{};

  uint64_t record_count() const;
};

// The whole file image. Throws sightline::Error for unrepresentable records (see ntff_encode_record).
std::vector<uint8_t> ntff_serialize(const NtffTrace& trace);
// Parses a file image. Throws sightline::Error naming `origin`, the byte offset and what was expected
// for truncated, corrupt, or structurally invalid input.
NtffTrace ntff_parse(std::span<const uint8_t> file, const std::string& origin = "<memory>");
// Decodes a payload alone, without the header and checksum gate (the fuzz target reaches the decoder
// through this); `execution_count` is the header's. Same errors as ntff_parse.
NtffTrace ntff_parse_payload(std::span<const uint8_t> payload, uint32_t execution_count,
                             const std::string& origin = "<memory>");

// "<16 hex digits>_instid_0_vnc_<core>.ntff" and the name of the executable file it pairs with.
std::string ntff_file_name(uint64_t neff_hash, uint32_t core);
std::string ntff_paired_neff_file_name(uint64_t neff_hash);
// The (hash, core) of an NTFF file name (no directory), or nullopt when the name is not one.
struct NtffName {
  uint64_t neff_hash = 0;
  uint32_t core = 0;
};
std::optional<NtffName> ntff_parse_file_name(std::string_view file_name);

// Writes `dir`/<ntff_file_name> and returns its path.
std::string ntff_save(const NtffTrace& trace, const std::string& dir);
NtffTrace ntff_load(const std::string& path);

// A readable listing of every execution and record. With the paired executable, source ops are named
// (its hash must match the trace's).
std::string ntff_dump(const NtffTrace& trace, const device::Executable* paired = nullptr);

}  // namespace sightline::formats
