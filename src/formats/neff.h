// NEFF-like executable files: a versioned, checksummed binary serialization of device::Executable.
//
// Layering: the plain data structs (device/executable.h, device/isa.h) live in device/, which owns
// their meaning; formats/ includes those headers only (no device behaviour), so runtime, profiler and
// tools can read and write executables without pulling in the simulator.
//
// File layout, little-endian:
//   offset 0   magic "SLNEFF\r\n" (8 bytes; \r\n catches text-mode mangling)
//   offset 8   u32 format version (kNeffVersion)
//   offset 12  u32 header size (32)
//   offset 16  u64 payload size; the file is exactly header + payload
//   offset 24  u64 FNV-1a 64 checksum of the payload
//   offset 32  payload: the executable's fields in declaration order (see neff.cpp)
// The payload checksum is also the content hash that names the file: neff_<16 hex digits>.neff, the
// hash a profiler's instruction-trace file repeats in its own name to pair with it (reference §3.2).
//
//   std::string path = formats::neff_save(exe, out_dir);   // ".../neff_0123456789abcdef.neff"
//   device::Executable back = formats::neff_load(path);     // validates everything
//   fmt::print("{}", formats::neff_dump(back));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sightline/device/executable.h"

namespace sightline::formats {

// The version written. 2: the instruction flags kFlagNegate and kFlagBiasOperand (isa.h), which a
// version-1 reader would ignore, running a negated reduction or a biased activation as a plain one.
// Version-1 files hold neither and are read as they are.
inline constexpr uint32_t kNeffVersion = 2;
inline constexpr uint32_t kNeffOldestVersion = 1;  // the oldest version this build reads
inline constexpr size_t kNeffHeaderSize = 32;

// FNV-1a 64-bit over bytes.
uint64_t fnv1a64(std::span<const uint8_t> bytes);

// The whole file image.
std::vector<uint8_t> neff_serialize(const device::Executable& exe);
// Parses a file image. Throws sightline::Error naming `origin`, the byte offset and what was expected
// for truncated, corrupt, or structurally invalid input.
device::Executable neff_parse(std::span<const uint8_t> file, const std::string& origin = "<memory>");
// Decodes a payload alone, without the header and checksum gate (the fuzz target reaches the decoder
// through this). Same errors as neff_parse.
device::Executable neff_parse_payload(std::span<const uint8_t> payload,
                                      const std::string& origin = "<memory>");

// Content hash of the executable (the payload checksum) and the file name derived from it.
uint64_t neff_hash(const device::Executable& exe);
std::string neff_file_name(const device::Executable& exe);

// Writes `dir`/neff_<hash>.neff and returns its path.
std::string neff_save(const device::Executable& exe, const std::string& dir);
device::Executable neff_load(const std::string& path);

// A readable listing: I/O tensors, source ops, metadata and every instruction of every stream.
std::string neff_dump(const device::Executable& exe);

}  // namespace sightline::formats
