#include "formats/neff.h"

#include "formats/binary_io.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "formats/output_dir.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace {

using device::AccessPattern;
using device::Executable;
using device::Instruction;

constexpr char kMagic[8] = {'S', 'L', 'N', 'E', 'F', 'F', '\r', '\n'};
// Limits that keep a hostile file from asking for absurd allocations before the bytes run out.
constexpr uint32_t kMaxString = 1u << 20;
constexpr uint32_t kMaxRank = 8;
constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;  // FNV-1a 64
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

static_assert(std::endian::native == std::endian::little,
              "the NEFF codec writes host order; add swaps for BE");

// The payload's fields in order, to a sink: appended to a vector (the file) or folded straight into the
// FNV-1a hash (the name), so naming an executable never materializes its bytes.
struct VectorSink {
  std::vector<uint8_t> out;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
};

struct HashSink {
  uint64_t h = kFnvOffsetBasis;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    uint64_t x = h;
    for (size_t i = 0; i < n; ++i) x = (x ^ b[i]) * kFnvPrime;
    h = x;
  }
};

template <typename Sink>
class Writer {
 public:
  template <typename T>
  void put(T v) {
    sink.bytes(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    sink.bytes(s.data(), s.size());
  }
  void put_ap(const AccessPattern& ap) {
    // Field by field (the struct has padding), in the file's order.
    put(static_cast<uint8_t>(ap.memory));
    put(static_cast<uint8_t>(ap.dtype));
    put(ap.dim_count);
    put(ap.partition_start);
    put(ap.partition_count);
    put(ap.tensor);
    put(ap.partition_stride);
    put(ap.offset);
    for (const auto& d : ap.dims) {
      put(d.size);
      put(d.stride);
    }
  }
  void put_instruction(const Instruction& in) {
    put(static_cast<uint8_t>(in.opcode));
    put(in.func);
    put(in.flags);
    put_ap(in.dst);
    put_ap(in.src0);
    put_ap(in.src1);
    put_ap(in.aux);
    put(in.imm0);
    put(in.imm1);
    put(static_cast<uint32_t>(in.waits.size()));
    for (const auto& w : in.waits) {
      put(w.semaphore);
      put(w.value);
    }
    put(static_cast<uint32_t>(in.updates.size()));
    for (const auto& u : in.updates) {
      put(u.semaphore);
      put(u.delta);
    }
    put(in.source_op);
  }
  void put_stream(const std::vector<Instruction>& s) {
    put(static_cast<uint32_t>(s.size()));
    for (const auto& in : s) put_instruction(in);
  }
  Sink sink;
};

class Reader : public ByteReader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& origin, size_t base)
      : ByteReader("NEFF", bytes, origin, base) {}

  template <typename E>
  E get_enum(int count, const char* what) {
    const size_t at = pos_;
    const uint8_t v = get<uint8_t>(what);
    if (v >= count) error_at(at, "{} is {}, valid values are 0..{}", what, v, count - 1);
    return static_cast<E>(v);
  }

  // A count of items each at least `min_item_bytes` long: rejected if the rest of the file cannot hold them.
  uint32_t get_count(size_t min_item_bytes, const char* what) {
    const size_t at = pos_;
    const uint32_t n = get<uint32_t>(what);
    if (uint64_t{n} * min_item_bytes > bytes_.size() - pos_) {
      error_at(at, "{} says {} entries of at least {} bytes, but only {} bytes follow", what, n,
               min_item_bytes, bytes_.size() - pos_);
    }
    return n;
  }

  std::string get_string(const char* what) {
    const size_t at = pos_;
    const uint32_t n = get<uint32_t>(what);
    if (n > kMaxString) error_at(at, "{} length {} exceeds the {} byte limit", what, n, kMaxString);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  AccessPattern get_ap() {
    AccessPattern ap;
    ap.memory = get_enum<device::Memory>(device::kMemoryCount, "operand memory");
    ap.dtype = get_enum<DType>(kDTypeCount, "operand dtype");
    const size_t at = pos_;
    ap.dim_count = get<uint8_t>("operand dim count");
    if (ap.dim_count > 4) error_at(at, "operand dim count is {}, at most 4", ap.dim_count);
    ap.partition_start = get<uint16_t>("operand partition start");
    ap.partition_count = get<uint16_t>("operand partition count");
    ap.tensor = get<uint32_t>("operand tensor index");
    ap.partition_stride = get<int64_t>("operand partition stride");
    ap.offset = get<uint64_t>("operand offset");
    for (auto& d : ap.dims) {
      d.size = get<uint32_t>("operand dim size");
      d.stride = get<int32_t>("operand dim stride");
    }
    return ap;
  }

  Instruction get_instruction() {
    Instruction in;
    {
      // An opcode past the table is most likely an instruction a newer build added (the table only
      // grows at its end), not damage: say so, and what to do.
      const size_t at = pos_;
      const uint8_t v = get<uint8_t>("opcode");
      if (v >= device::kOpcodeCount) {
        fail("NEFF '{}': the instruction at byte offset {} has opcode {}, which this build does not know (it "
             "knows 0..{}, {} the last); the file was most likely written by a newer sightline with more "
             "instructions (if no newer build wrote it, the file is corrupt): read it with that version, or rebuild the "
             "executable with this one",
             origin_, base_ + at, v, device::kOpcodeCount - 1,
             device::opcode_name(static_cast<device::Opcode>(device::kOpcodeCount - 1)));
      }
      in.opcode = static_cast<device::Opcode>(v);
    }
    const size_t func_at = pos_;
    in.func = get<uint8_t>("function");
    const bool activation = in.opcode == device::Opcode::activate;
    const int funcs = activation ? device::kActFuncCount : device::kAluOpCount;
    if (in.func >= funcs)
      error_at(func_at, "function {} of {}, valid values are 0..{}", in.func, device::opcode_name(in.opcode),
               funcs - 1);
    const size_t flags_at = pos_;
    in.flags = get<uint8_t>("flags");
    if (in.flags & ~device::kKnownFlags) {
      error_at(flags_at, "flags 0x{:02x} of {} set bits this build does not define (it knows 0x{:02x}); a newer "
               "sightline may have written it: read it with that version, or rebuild the executable with this one",
               in.flags, device::opcode_name(in.opcode), device::kKnownFlags);
    }
    in.dst = get_ap();
    in.src0 = get_ap();
    in.src1 = get_ap();
    in.aux = get_ap();
    in.imm0 = get<float>("immediate 0");
    in.imm1 = get<float>("immediate 1");
    in.waits.resize(get_count(6, "semaphore wait count"));
    for (auto& w : in.waits) {
      w.semaphore = get<uint16_t>("wait semaphore");
      w.value = get<uint32_t>("wait value");
    }
    in.updates.resize(get_count(6, "semaphore update count"));
    for (auto& u : in.updates) {
      u.semaphore = get<uint16_t>("update semaphore");
      u.delta = get<int32_t>("update delta");
    }
    in.source_op = get<uint32_t>("source op index");
    return in;
  }

  size_t size() const { return bytes_.size(); }
};

// Smallest encoded instruction: 3 bytes of opcode/func/flags, 4 operands, 2 immediates, 2 counts, source op.
constexpr size_t kOperandBytes = 3 + 2 + 2 + 4 + 8 + 8 + 4 * 8;
constexpr size_t kMinInstructionBytes = 3 + 4 * kOperandBytes + 8 + 4 + 4 + 4;

template <typename Sink>
void write_payload(const Executable& exe, Writer<Sink>& w) {
  w.put_string(exe.name);
  w.put(static_cast<uint32_t>(exe.io.size()));
  for (const auto& t : exe.io) {
    w.put_string(t.name);
    w.put(static_cast<uint8_t>(t.dtype));
    w.put(static_cast<uint8_t>(t.kind));
    w.put(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.put(d);
  }
  w.put(static_cast<uint32_t>(exe.source_ops.size()));
  for (const auto& s : exe.source_ops) w.put_string(s);
  w.put(exe.semaphore_count);
  for (const auto& s : exe.engines) w.put_stream(s);
  w.put(static_cast<uint32_t>(exe.dma_queues.size()));
  for (const auto& q : exe.dma_queues) w.put_stream(q);
  w.put(static_cast<uint32_t>(exe.metadata.size()));
  for (const auto& [k, v] : exe.metadata) {
    w.put_string(k);
    w.put_string(v);
  }
}

std::vector<uint8_t> payload_of(const Executable& exe) {
  Writer<VectorSink> w;
  write_payload(exe, w);
  return std::move(w.sink.out);
}

// Cross-references the decoder can check without a device spec.
void check_references(Reader& r, const Executable& exe, const Instruction& in, size_t at,
                      device::Engine stream) {
  if (in.engine() != stream) {
    r.error_at(at, "{} instruction in the {} stream", device::opcode_name(in.opcode),
               device::engine_name(stream));
  }
  for (const auto& w : in.waits) {
    if (w.semaphore >= exe.semaphore_count) {
      r.error_at(at, "waits on semaphore {} of {}", w.semaphore, exe.semaphore_count);
    }
  }
  for (const auto& u : in.updates) {
    if (u.semaphore >= exe.semaphore_count) {
      r.error_at(at, "updates semaphore {} of {}", u.semaphore, exe.semaphore_count);
    }
  }
  if (in.source_op != device::kNoSourceOp && in.source_op >= exe.source_ops.size()) {
    r.error_at(at, "source op index {} of {} source ops", in.source_op, exe.source_ops.size());
  }
  for (const AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux}) {
    if (ap->memory == device::Memory::hbm && ap->tensor >= exe.io.size()) {
      r.error_at(at, "operand names I/O tensor {} of {}", ap->tensor, exe.io.size());
    }
  }
}

std::vector<Instruction> get_stream(Reader& r, const Executable& exe, device::Engine engine) {
  std::vector<Instruction> s(r.get_count(kMinInstructionBytes, "instruction count"));
  for (auto& in : s) {
    const size_t at = r.pos();
    in = r.get_instruction();
    check_references(r, exe, in, at, engine);
  }
  return s;
}

}  // namespace

uint64_t fnv1a64(std::span<const uint8_t> bytes) {
  HashSink h;
  h.bytes(bytes.data(), bytes.size());
  return h.h;
}

std::vector<uint8_t> neff_serialize(const Executable& exe) {
  const std::vector<uint8_t> payload = payload_of(exe);
  Writer<VectorSink> w;
  w.sink.out.reserve(kNeffHeaderSize + payload.size());
  for (char c : kMagic) w.put(c);
  w.put(kNeffVersion);
  w.put(static_cast<uint32_t>(kNeffHeaderSize));
  w.put(static_cast<uint64_t>(payload.size()));
  w.put(fnv1a64(payload));
  w.sink.bytes(payload.data(), payload.size());
  return std::move(w.sink.out);
}

Executable neff_parse_payload(std::span<const uint8_t> payload, const std::string& origin) {
  Reader r(payload, origin, kNeffHeaderSize);
  Executable exe;
  exe.name = r.get_string("executable name");
  exe.io.resize(r.get_count(10, "I/O tensor count"));
  for (auto& t : exe.io) {
    t.name = r.get_string("I/O tensor name");
    t.dtype = r.get_enum<DType>(kDTypeCount, "I/O tensor dtype");
    t.kind = r.get_enum<device::IoKind>(device::kIoKindCount, "I/O tensor kind");
    const size_t at = r.pos();
    const uint32_t rank = r.get<uint32_t>("I/O tensor rank");
    if (rank > kMaxRank) r.error_at(at, "I/O tensor rank {} exceeds {}", rank, kMaxRank);
    t.shape.resize(rank);
    for (auto& d : t.shape) {
      const size_t dim_at = r.pos();
      d = r.get<int64_t>("I/O tensor dim");
      if (d < 0 || d > (int64_t{1} << 40)) r.error_at(dim_at, "I/O tensor dim {} outside [0, 2^40]", d);
    }
  }
  exe.source_ops.resize(r.get_count(4, "source op count"));
  for (auto& s : exe.source_ops) s = r.get_string("source op name");
  const size_t semaphores_at = r.pos();
  exe.semaphore_count = r.get<uint32_t>("semaphore count");
  if (exe.semaphore_count > 65536) {
    r.error_at(semaphores_at, "{} semaphores; ids are 16-bit, so at most 65536", exe.semaphore_count);
  }
  for (int e = 0; e < device::kComputeEngineCount; ++e) {
    exe.engines[e] = get_stream(r, exe, static_cast<device::Engine>(e));
  }
  exe.dma_queues.resize(r.get_count(4, "DMA queue count"));
  for (auto& q : exe.dma_queues) q = get_stream(r, exe, device::Engine::dma);
  exe.metadata.resize(r.get_count(8, "metadata count"));
  for (auto& [k, v] : exe.metadata) {
    k = r.get_string("metadata key");
    v = r.get_string("metadata value");
  }
  if (r.pos() != r.size())
    r.error_at(r.pos(), "{} unexpected bytes after the last field", r.size() - r.pos());
  return exe;
}

Executable neff_parse(std::span<const uint8_t> file, const std::string& origin) {
  if (file.size() < kNeffHeaderSize) {
    fail("NEFF '{}': truncated: {} bytes, the header alone is {} bytes", origin, file.size(),
         kNeffHeaderSize);
  }
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    fail(
        "NEFF '{}': corrupt at byte offset 0: magic is not \"SLNEFF\\r\\n\"; not a sightline executable file",
        origin);
  }
  Reader header(file.first(kNeffHeaderSize), origin, 0);
  (void)header.get<uint64_t>("magic");
  const uint32_t version = header.get<uint32_t>("version");
  if (version < kNeffOldestVersion || version > kNeffVersion) {
    fail("NEFF '{}': corrupt at byte offset 8: format version {}, this build reads versions {} to {}{}", origin,
         version, kNeffOldestVersion, kNeffVersion,
         version > kNeffVersion ? " (a newer sightline wrote it: read it with that version, or rebuild the "
                                  "executable with this one)"
                                : "");
  }
  const uint32_t header_size = header.get<uint32_t>("header size");
  if (header_size != kNeffHeaderSize) {
    fail("NEFF '{}': corrupt at byte offset 12: header size {}, expected {}", origin, header_size,
         kNeffHeaderSize);
  }
  const uint64_t payload_size = header.get<uint64_t>("payload size");
  const uint64_t checksum = header.get<uint64_t>("checksum");
  const uint64_t actual = file.size() - kNeffHeaderSize;
  if (payload_size != actual) {
    fail("NEFF '{}': {} at byte offset 16: header says {} payload bytes, the file holds {}", origin,
         payload_size > actual ? "truncated" : "corrupt", payload_size, actual);
  }
  const auto payload = file.subspan(kNeffHeaderSize);
  const uint64_t hash = fnv1a64(payload);
  if (hash != checksum) {
    fail("NEFF '{}': corrupt: payload checksum {:016x} does not match {:016x} stored at byte offset 24",
         origin, hash, checksum);
  }
  return neff_parse_payload(payload, origin);
}

uint64_t neff_hash(const Executable& exe) {
  Writer<HashSink> w;
  write_payload(exe, w);
  return w.sink.h;
}

std::string neff_file_name(const Executable& exe) { return fmt::format("neff_{:016x}.neff", neff_hash(exe)); }

std::string neff_save(const Executable& exe, const std::string& dir) {
  const std::vector<uint8_t> bytes = neff_serialize(exe);
  uint64_t hash = 0;  // the header's checksum (offset 24) is the payload's hash
  std::memcpy(&hash, bytes.data() + 24, sizeof(hash));
  const std::string path = (std::filesystem::path(dir) / fmt::format("neff_{:016x}.neff", hash)).string();
  // Every write, the flush and the close checked: a full disk is an error, never a short file.
  write_file_durably(path, bytes);
  return path;
}

Executable neff_load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot open NEFF file '{}'", path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return neff_parse(bytes, path);
}

}  // namespace sightline::formats
