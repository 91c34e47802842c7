#include "formats/ntff.h"

#include "formats/binary_io.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "formats/neff.h"
#include "formats/output_dir.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace {

using device::Engine;
using device::InstructionRecord;
using device::Opcode;

constexpr char kMagic[8] = {'S', 'L', 'N', 'T', 'F', 'F', '\r', '\n'};
constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();

static_assert(std::endian::native == std::endian::little,
              "the NTFF codec writes host order; add swaps for BE");
static_assert(device::kOpcodeCount <= 16, "the NTFF record keeps the opcode in 4 bits");
static_assert(device::kEngineCount <= 8, "the NTFF record keeps the engine in 3 bits");

// Bit positions inside NtffRecord::start_and_tags.
constexpr int kSourceOpShift = 36;
constexpr int kOpcodeShift = 52;
constexpr int kEngineShift = 56;
constexpr int kQueueShift = 59;

// Rounds a time >= 0 to ticks, saturating at `max`.
uint64_t to_ticks(double ns, uint64_t max) {
  const double ticks = std::floor(ns * kNtffTicksPerNs + 0.5);
  return ticks >= static_cast<double>(max) ? max : static_cast<uint64_t>(ticks);
}

using Writer = ByteWriter;

class Reader : public ByteReader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& origin, size_t base)
      : ByteReader("NTFF", bytes, origin, base) {}
};

void put_record(Writer& w, const NtffRecord& r) {
  w.put(r.start_and_tags);
  w.put(r.duration_ticks);
  w.put(r.semaphore_wait_ns);
  w.put(r.hbm_bytes_read);
  w.put(r.hbm_bytes_written);
  w.put(r.onchip_bytes);
  w.put(r.flops);
}

NtffRecord get_record(Reader& r) {
  NtffRecord rec;
  rec.start_and_tags = r.get<uint64_t>("record start and tags");
  rec.duration_ticks = r.get<uint32_t>("record duration");
  rec.semaphore_wait_ns = r.get<float>("record semaphore wait");
  rec.hbm_bytes_read = r.get<uint32_t>("record HBM bytes read");
  rec.hbm_bytes_written = r.get<uint32_t>("record HBM bytes written");
  rec.onchip_bytes = r.get<uint32_t>("record on-chip bytes");
  rec.flops = r.get<uint32_t>("record FLOPs");
  return rec;
}

// What a stored record may hold; the writer refuses the same things before they reach a file.
// Returns an empty string when valid, else what is wrong.
std::string record_problem(const NtffRecord& r) {
  const uint64_t opcode = (r.start_and_tags >> kOpcodeShift) & 0xf;
  const uint64_t engine = (r.start_and_tags >> kEngineShift) & 0x7;
  const uint64_t queue = r.start_and_tags >> kQueueShift;
  if (opcode >= device::kOpcodeCount) {
    return fmt::format("opcode {}, valid values are 0..{}", opcode, device::kOpcodeCount - 1);
  }
  if (engine >= device::kEngineCount) {
    return fmt::format("engine {}, valid values are 0..{}", engine, device::kEngineCount - 1);
  }
  const Opcode op = static_cast<Opcode>(opcode);
  if (!device::opcode_runs_on(op, static_cast<Engine>(engine))) {
    return fmt::format("{} record on the {} engine; it runs on {}", device::opcode_name(op),
                       device::engine_name(static_cast<Engine>(engine)),
                       device::engine_name(device::opcode_engine(op)));
  }
  if (static_cast<Engine>(engine) != Engine::dma && queue != 0) {
    return fmt::format("DMA queue {} on a {} record; only DMA records have a queue", queue,
                       device::engine_name(static_cast<Engine>(engine)));
  }
  if (!std::isfinite(r.semaphore_wait_ns) || r.semaphore_wait_ns < 0) {
    return fmt::format("semaphore wait {} ns; expected a finite time >= 0", r.semaphore_wait_ns);
  }
  return {};
}

// FNV-1a 64 over the header's first 56 bytes (everything but the checksum field) and then the payload,
// so a damaged hash, core or count is caught like damaged records.
constexpr size_t kChecksumOffset = 56;
uint64_t file_checksum(std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  uint64_t h = fnv1a64(header.first(kChecksumOffset));
  for (uint8_t b : payload) {
    h ^= b;
    h *= 0x100000001b3ull;  // FNV-1a 64 prime, continuing fnv1a64's state
  }
  return h;
}

bool record_is_clamped(const NtffRecord& r) {
  return (r.start_and_tags & kNtffMaxStartTicks) == kNtffMaxStartTicks || r.duration_ticks == kMaxU32 ||
         r.onchip_bytes == kMaxU32;
}

}  // namespace

NtffRecord ntff_encode_record(const InstructionRecord& record, bool& clamped) {
  const auto opcode = static_cast<uint64_t>(record.opcode);
  const auto engine = static_cast<uint64_t>(record.engine);
  SIGHTLINE_CHECK(opcode < device::kOpcodeCount && engine < device::kEngineCount,
                  "NTFF: instruction record with opcode {} / engine {} outside the instruction set", opcode,
                  engine);
  uint64_t source_op = kNtffNoSourceOp;
  if (record.source_op != device::kNoSourceOp) {
    SIGHTLINE_CHECK(record.source_op < kNtffNoSourceOp,
                    "NTFF: source op index {} does not fit; the format stores indices 0..{} (split the "
                    "executable's source-op table or raise kNtffVersion with a wider field)",
                    record.source_op, kNtffNoSourceOp - 1);
    source_op = record.source_op;
  }
  SIGHTLINE_CHECK(record.queue <= kNtffMaxQueue,
                  "NTFF: DMA queue {} does not fit; the format stores queues 0..{}", record.queue,
                  kNtffMaxQueue);
  SIGHTLINE_CHECK(std::isfinite(record.semaphore_wait_ns) && record.semaphore_wait_ns >= 0,
                  "NTFF: instruction record with semaphore wait {} ns; expected a finite time >= 0",
                  record.semaphore_wait_ns);

  SIGHTLINE_CHECK(std::isfinite(record.start_ns) && std::isfinite(record.end_ns) && record.start_ns >= 0 &&
                      record.end_ns >= record.start_ns,
                  "NTFF: instruction record from {} to {} ns; expected finite times with 0 <= start <= end",
                  record.start_ns, record.end_ns);

  NtffRecord r;
  // Start and end are rounded independently so that end_ns survives as well as start_ns does.
  const uint64_t start = to_ticks(record.start_ns, kNtffMaxStartTicks);
  const uint64_t end = to_ticks(record.end_ns, std::numeric_limits<uint64_t>::max() / 2);
  const uint64_t duration = std::min<uint64_t>(end > start ? end - start : 0, kMaxU32);
  r.start_and_tags = start | source_op << kSourceOpShift | opcode << kOpcodeShift | engine << kEngineShift |
                     uint64_t{record.queue} << kQueueShift;
  r.duration_ticks = static_cast<uint32_t>(duration);
  r.semaphore_wait_ns = record.semaphore_wait_ns;
  r.hbm_bytes_read = record.hbm_bytes_read;
  r.hbm_bytes_written = record.hbm_bytes_written;
  const uint64_t onchip = uint64_t{record.onchip_bytes_read} + record.onchip_bytes_written;
  r.onchip_bytes = static_cast<uint32_t>(std::min<uint64_t>(onchip, kMaxU32));
  r.flops = record.flops;
  const std::string problem = record_problem(r);
  SIGHTLINE_CHECK(problem.empty(), "NTFF: cannot store instruction record: {}", problem);
  // A field at its maximum counts as clamped, so that re-encoding a decoded record reports the same
  // clamp and parse -> serialize stays byte-exact.
  clamped = record_is_clamped(r);
  return r;
}

InstructionRecord ntff_decode_record(const NtffRecord& r) {
  InstructionRecord out;
  const uint64_t start = r.start_and_tags & kNtffMaxStartTicks;
  out.start_ns = static_cast<double>(start) / kNtffTicksPerNs;
  out.end_ns = static_cast<double>(start + r.duration_ticks) / kNtffTicksPerNs;
  out.semaphore_wait_ns = r.semaphore_wait_ns;
  out.hbm_bytes_read = r.hbm_bytes_read;
  out.hbm_bytes_written = r.hbm_bytes_written;
  out.onchip_bytes_read = r.onchip_bytes;
  out.onchip_bytes_written = 0;
  out.flops = r.flops;
  const auto source_op = static_cast<uint32_t>((r.start_and_tags >> kSourceOpShift) & 0xffff);
  out.source_op = source_op == kNtffNoSourceOp ? device::kNoSourceOp : source_op;
  out.index = 0;
  out.opcode = static_cast<Opcode>((r.start_and_tags >> kOpcodeShift) & 0xf);
  out.engine = static_cast<Engine>((r.start_and_tags >> kEngineShift) & 0x7);
  out.queue = static_cast<uint8_t>(r.start_and_tags >> kQueueShift);
  return out;
}

uint64_t NtffTrace::record_count() const {
  uint64_t n = 0;
  for (const auto& e : executions) n += e.records.size();
  return n;
}

std::vector<uint8_t> ntff_serialize(const NtffTrace& trace) {
  SIGHTLINE_CHECK(trace.executions.size() <= kMaxU32, "NTFF: {} executions; the format stores at most {}",
                  trace.executions.size(), kMaxU32);
  Writer payload;
  for (const auto& e : trace.executions) {
    SIGHTLINE_CHECK(e.records.size() <= kMaxU32, "NTFF: execution seq {} has {} records; at most {}", e.seq,
                    e.records.size(), kMaxU32);
    SIGHTLINE_CHECK(std::isfinite(e.duration_ns) && e.duration_ns >= 0,
                    "NTFF: execution seq {} has duration {} ns; expected a finite time >= 0", e.seq,
                    e.duration_ns);
    std::vector<NtffRecord> records;
    records.reserve(e.records.size());
    uint32_t clamped_records = 0;
    for (const auto& rec : e.records) {
      bool clamped = false;
      records.push_back(ntff_encode_record(rec, clamped));
      clamped_records += clamped;
    }
    payload.put(e.seq);
    payload.put(e.correlation);
    payload.put(e.start_ns);
    payload.put(e.duration_ns);
    payload.put(static_cast<uint32_t>(records.size()));
    payload.put(clamped_records);
    for (const auto& r : records) put_record(payload, r);
  }
  Writer w;
  for (char c : kMagic) w.put(c);
  w.put(kNtffVersion);
  w.put(static_cast<uint32_t>(kNtffHeaderSize));
  w.put(trace.neff_hash);
  w.put(trace.core);
  w.put(static_cast<uint32_t>(trace.executions.size()));
  w.put(trace.record_count());
  w.put(static_cast<uint32_t>(kNtffRecordSize));
  w.put(kNtffTicksPerNs);
  w.put(static_cast<uint64_t>(payload.out.size()));
  w.put(file_checksum(w.out, payload.out));
  SIGHTLINE_ASSERT(w.out.size() == kNtffHeaderSize);
  w.out.insert(w.out.end(), payload.out.begin(), payload.out.end());
  return std::move(w.out);
}

NtffTrace ntff_parse_payload(std::span<const uint8_t> payload, uint32_t execution_count,
                             const std::string& origin) {
  Reader r(payload, origin, kNtffHeaderSize);
  if (uint64_t{execution_count} * kNtffExecutionHeaderSize > payload.size()) {
    fail("NTFF '{}': truncated at byte offset {}: {} executions need at least {} bytes, the payload holds {}",
         origin, kNtffHeaderSize, execution_count, uint64_t{execution_count} * kNtffExecutionHeaderSize,
         payload.size());
  }
  NtffTrace trace;
  trace.executions.resize(execution_count);
  for (auto& e : trace.executions) {
    e.seq = r.get<uint64_t>("execution seq");
    e.correlation = r.get<uint64_t>("execution correlation id");
    e.start_ns = r.get<int64_t>("execution host start ns");
    const size_t duration_at = r.pos();
    e.duration_ns = r.get<double>("execution duration ns");
    if (!std::isfinite(e.duration_ns) || e.duration_ns < 0) {
      r.error_at(duration_at, "execution duration {} ns; expected a finite time >= 0", e.duration_ns);
    }
    const size_t count_at = r.pos();
    const uint32_t count = r.get<uint32_t>("execution record count");
    const size_t clamped_at = r.pos();
    const uint32_t clamped = r.get<uint32_t>("execution clamped record count");
    if (uint64_t{count} * kNtffRecordSize > r.left()) {
      fail(
          "NTFF '{}': truncated at byte offset {}: execution seq {} says {} records ({} bytes), {} bytes "
          "follow",
          origin, kNtffHeaderSize + count_at, e.seq, count, uint64_t{count} * kNtffRecordSize, r.left());
    }
    e.records.resize(count);
    uint32_t clamped_seen = 0;
    for (auto& rec : e.records) {
      const size_t at = r.pos();
      const NtffRecord stored = get_record(r);
      const std::string problem = record_problem(stored);
      if (!problem.empty()) r.error_at(at, "{}", problem);
      clamped_seen += record_is_clamped(stored);
      rec = ntff_decode_record(stored);
    }
    if (clamped != clamped_seen) {
      r.error_at(clamped_at, "execution seq {} says {} clamped records, its records hold {}", e.seq, clamped,
                 clamped_seen);
    }
    e.clamped_records = clamped;
  }
  if (r.left() != 0) r.error_at(r.pos(), "{} unexpected bytes after the last execution", r.left());
  return trace;
}

NtffTrace ntff_parse(std::span<const uint8_t> file, const std::string& origin) {
  if (file.size() < kNtffHeaderSize) {
    fail("NTFF '{}': truncated: {} bytes, the header alone is {} bytes", origin, file.size(),
         kNtffHeaderSize);
  }
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    fail(
        "NTFF '{}': corrupt at byte offset 0: magic is not \"SLNTFF\\r\\n\"; not a sightline instruction "
        "trace file",
        origin);
  }
  Reader header(file.first(kNtffHeaderSize), origin, 0);
  (void)header.get<uint64_t>("magic");
  const uint32_t version = header.get<uint32_t>("version");
  if (version != kNtffVersion) {
    fail("NTFF '{}': corrupt at byte offset 8: format version {}, this build reads version {}", origin,
         version, kNtffVersion);
  }
  const uint32_t header_size = header.get<uint32_t>("header size");
  if (header_size != kNtffHeaderSize) {
    fail("NTFF '{}': corrupt at byte offset 12: header size {}, expected {}", origin, header_size,
         kNtffHeaderSize);
  }
  const uint64_t neff_hash = header.get<uint64_t>("NEFF hash");
  const uint32_t core = header.get<uint32_t>("core index");
  const uint32_t execution_count = header.get<uint32_t>("execution count");
  const uint64_t record_count = header.get<uint64_t>("record count");
  const uint32_t record_size = header.get<uint32_t>("record size");
  if (record_size != kNtffRecordSize) {
    fail("NTFF '{}': corrupt at byte offset 40: record size {}, expected {}", origin, record_size,
         kNtffRecordSize);
  }
  const uint32_t ticks_per_ns = header.get<uint32_t>("ticks per ns");
  if (ticks_per_ns != kNtffTicksPerNs) {
    fail("NTFF '{}': corrupt at byte offset 44: {} time ticks per ns, expected {}", origin, ticks_per_ns,
         kNtffTicksPerNs);
  }
  const uint64_t payload_size = header.get<uint64_t>("payload size");
  const uint64_t checksum = header.get<uint64_t>("checksum");
  const uint64_t actual = file.size() - kNtffHeaderSize;
  if (payload_size != actual) {
    fail("NTFF '{}': {} at byte offset 48: header says {} payload bytes, the file holds {}", origin,
         payload_size > actual ? "truncated" : "corrupt", payload_size, actual);
  }
  const auto payload = file.subspan(kNtffHeaderSize);
  const uint64_t hash = file_checksum(file, payload);
  if (hash != checksum) {
    fail(
        "NTFF '{}': corrupt: checksum {:016x} of the header and payload does not match {:016x} stored at "
        "byte "
        "offset 56",
        origin, hash, checksum);
  }
  NtffTrace trace = ntff_parse_payload(payload, execution_count, origin);
  if (trace.record_count() != record_count) {
    fail("NTFF '{}': corrupt at byte offset 32: header says {} records, the executions hold {}", origin,
         record_count, trace.record_count());
  }
  trace.neff_hash = neff_hash;
  trace.core = core;
  return trace;
}

std::string ntff_file_name(uint64_t neff_hash, uint32_t core) {
  return fmt::format("{:016x}_instid_0_vnc_{}.ntff", neff_hash, core);
}

std::string ntff_paired_neff_file_name(uint64_t neff_hash) {
  return fmt::format("neff_{:016x}.neff", neff_hash);
}

std::optional<NtffName> ntff_parse_file_name(std::string_view name) {
  constexpr std::string_view kMiddle = "_instid_0_vnc_";
  constexpr std::string_view kSuffix = ".ntff";
  if (name.size() <= 16 + kMiddle.size() + kSuffix.size()) return std::nullopt;
  if (name.substr(16, kMiddle.size()) != kMiddle || !name.ends_with(kSuffix)) return std::nullopt;
  NtffName out;
  for (char c : name.substr(0, 16)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return std::nullopt;  // the writer uses lowercase hex only; anything else is another file
    }
    out.neff_hash = out.neff_hash << 4 | static_cast<uint64_t>(digit);
  }
  const std::string_view core =
      name.substr(16 + kMiddle.size(), name.size() - 16 - kMiddle.size() - kSuffix.size());
  uint64_t value = 0;
  for (char c : core) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > kMaxU32) return std::nullopt;
  }
  out.core = static_cast<uint32_t>(value);
  // Only the canonical spelling names a file (no leading zeros), so a name maps to one (hash, core).
  if (ntff_file_name(out.neff_hash, out.core) != name) return std::nullopt;
  return out;
}

std::string ntff_save(const NtffTrace& trace, const std::string& dir) {
  const std::vector<uint8_t> bytes = ntff_serialize(trace);
  const std::string path =
      (std::filesystem::path(dir) / ntff_file_name(trace.neff_hash, trace.core)).string();
  // Every write, the flush and the close checked: a full disk is an error, never a short file.
  write_file_durably(path, bytes);
  return path;
}

NtffTrace ntff_load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot open NTFF file '{}'", path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ntff_parse(bytes, path);
}

std::string ntff_dump(const NtffTrace& trace, const device::Executable* paired) {
  if (paired != nullptr) {
    const uint64_t hash = neff_hash(*paired);
    SIGHTLINE_CHECK(hash == trace.neff_hash,
                    "NTFF dump: the executable has hash {:016x}, the trace pairs with {:016x}; pass the "
                    "executable from {}",
                    hash, trace.neff_hash, ntff_paired_neff_file_name(trace.neff_hash));
  }
  std::string out =
      fmt::format("NTFF v{} {}: pairs with {}, core {}, {} executions, {} records\n", kNtffVersion,
                  ntff_file_name(trace.neff_hash, trace.core), ntff_paired_neff_file_name(trace.neff_hash),
                  trace.core, trace.executions.size(), trace.record_count());
  for (const auto& e : trace.executions) {
    out += fmt::format(
        "execution seq {} correlation {}: host start {} ns, device duration {:.3f} ns, {} records", e.seq,
        e.correlation, e.start_ns, e.duration_ns, e.records.size());
    if (e.clamped_records != 0) out += fmt::format(", {} clamped (a field saturated)", e.clamped_records);
    out += "\n";
    if (e.records.empty()) continue;
    out += fmt::format("  {:>14} {:>14} {:<8} {:<20} {:>12} {:>12} {:>12} {:>12} {:>12}  {}\n", "start ns",
                       "end ns", "engine", "opcode", "wait ns", "HBM read", "HBM write", "on-chip B", "FLOPs",
                       "source op");
    for (const auto& r : e.records) {
      std::string engine{device::engine_name(r.engine)};
      if (r.engine == Engine::dma) engine += fmt::format("{}", r.queue);
      std::string source = "-";
      if (r.source_op != device::kNoSourceOp) {
        source = paired != nullptr && r.source_op < paired->source_ops.size()
                     ? fmt::format("{} ({})", paired->source_ops[r.source_op], r.source_op)
                     : fmt::format("#{}", r.source_op);
      }
      out += fmt::format("  {:>14.4f} {:>14.4f} {:<8} {:<20} {:>12.3f} {:>12} {:>12} {:>12} {:>12}  {}\n",
                         r.start_ns, r.end_ns, engine, device::opcode_name(r.opcode), r.semaphore_wait_ns,
                         r.hbm_bytes_read, r.hbm_bytes_written,
                         uint64_t{r.onchip_bytes_read} + r.onchip_bytes_written, r.flops, source);
    }
  }
  return out;
}

}  // namespace sightline::formats
