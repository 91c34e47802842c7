#include "formats/manifest.h"

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/ntff.h"
#include "sightline/error.h"

#ifndef SIGHTLINE_VERSION_STRING
#error "src/formats/CMakeLists.txt defines SIGHTLINE_VERSION_STRING from the project version"
#endif

namespace sightline::formats {
namespace {

// ordered_json keeps the schema order, so manifests diff well and read top-down.
using Json = nlohmann::ordered_json;

std::string hash_text(uint64_t hash) { return fmt::format("{:016x}", hash); }

// A strict view of one JSON object: every accessor names the JSON path of what is missing or mistyped.
class Object {
 public:
  Object(const Json& json, std::string path, const std::string& origin)
      : json_(json), path_(std::move(path)), origin_(origin) {
    if (!json_.is_object()) error("{} must be an object, found {}", path_, json_.type_name());
  }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("manifest '{}': {}", origin_, fmt::format(format, std::forward<Args>(args)...));
  }

  std::string path_of(std::string_view key) const { return fmt::format("{}.{}", path_, key); }

  const Json& at(std::string_view key) const {
    const auto it = json_.find(key);
    if (it == json_.end()) {
      error("required field {} is missing; rewrite the profile with this sightline version", path_of(key));
    }
    return *it;
  }
  bool has(std::string_view key) const { return json_.contains(key); }

  Object object(std::string_view key) const { return Object(at(key), path_of(key), origin_); }

  const Json& array(std::string_view key) const {
    const Json& v = at(key);
    if (!v.is_array()) error("{} must be an array, found {}", path_of(key), v.type_name());
    return v;
  }

  std::string string(std::string_view key) const {
    const Json& v = at(key);
    if (!v.is_string()) error("{} must be a string, found {}", path_of(key), v.type_name());
    return v.get<std::string>();
  }

  uint64_t u64(std::string_view key) const { return unsigned_of(at(key), path_of(key)); }

  uint32_t u32(std::string_view key) const {
    const uint64_t v = u64(key);
    if (v > UINT32_MAX) error("{} is {}, at most {}", path_of(key), v, UINT32_MAX);
    return static_cast<uint32_t>(v);
  }

  bool boolean(std::string_view key) const {
    const Json& v = at(key);
    if (!v.is_boolean()) error("{} must be true or false, found {}", path_of(key), v.type_name());
    return v.get<bool>();
  }

  double number(std::string_view key) const {
    const Json& v = at(key);
    if (!v.is_number()) error("{} must be a number, found {}", path_of(key), v.type_name());
    return v.get<double>();
  }

  // Device-spec values, held to the ranges device::Spec::parse enforces on a spec file: a manifest's
  // spec feeds the same arithmetic (a zero bandwidth divides, a negative clock gives negative MFU).
  double positive(std::string_view key) const {
    const double v = number(key);
    if (!(v > 0) || !std::isfinite(v)) error("{} is {}, must be a positive number", path_of(key), v);
    return v;
  }

  double non_negative(std::string_view key) const {
    const double v = number(key);
    if (!(v >= 0) || !std::isfinite(v)) error("{} is {}, must be a number >= 0", path_of(key), v);
    return v;
  }

  uint64_t u64_in(std::string_view key, uint64_t min, uint64_t max) const {
    const uint64_t v = u64(key);
    if (v < min || v > max) error("{} is {}, must be in [{}, {}]", path_of(key), v, min, max);
    return v;
  }

  uint32_t u32_in(std::string_view key, uint32_t min, uint32_t max) const {
    return static_cast<uint32_t>(u64_in(key, min, max));
  }

  uint64_t unsigned_of(const Json& v, const std::string& where) const {
    if (!v.is_number_unsigned()) {
      error("{} must be an unsigned integer, found {}", where,
            v.is_number_integer() ? "a negative integer" : v.type_name());
    }
    return v.get<uint64_t>();
  }

  uint64_t hash(std::string_view key) const {
    const std::string text = string(key);
    if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
      error("{} is \"{}\", expected 16 lowercase hex digits", path_of(key), text);
    }
    return std::stoull(text, nullptr, 16);
  }

  const std::string& path() const { return path_; }
  const std::string& origin() const { return origin_; }

 private:
  const Json& json_;
  std::string path_;
  const std::string& origin_;
};

Json engine_json(const device::EngineSpec& e) {
  return Json{{"clock_ghz", e.clock_ghz},
              {"elements_per_cycle_32bit", e.elements_per_cycle_32bit},
              {"elements_per_cycle_16bit", e.elements_per_cycle_16bit},
              {"static_overhead_cycles", e.static_overhead_cycles},
              {"accumulate_extra_cycles", e.accumulate_extra_cycles}};
}

device::EngineSpec engine_of(const Object& o) {
  device::EngineSpec e;
  e.clock_ghz = o.positive("clock_ghz");
  e.elements_per_cycle_32bit = o.positive("elements_per_cycle_32bit");
  e.elements_per_cycle_16bit = o.positive("elements_per_cycle_16bit");
  e.static_overhead_cycles = o.u32_in("static_overhead_cycles", 0, 1u << 20);
  e.accumulate_extra_cycles = o.u32_in("accumulate_extra_cycles", 0, 1u << 20);
  return e;
}

Json device_json(const device::Spec& s) {
  Json j;
  j["name"] = s.name;
  j["core_version"] = s.core_version;
  j["cores_per_instance"] = s.cores_per_instance;
  j["base_clock_ghz"] = s.base_clock_ghz;
  j["partitions"] = s.partitions;
  j["sbuf_bytes_per_partition"] = s.sbuf_bytes_per_partition;
  j["psum_bytes_per_partition"] = s.psum_bytes_per_partition;
  j["psum_banks"] = s.psum_banks;
  j["access_overhead_cycles"] = s.access_overhead_cycles;
  j["tensor"] = Json{{"clock_ghz", s.tensor.clock_ghz},
                     {"array_rows", s.tensor.array_rows},
                     {"array_cols", s.tensor.array_cols},
                     {"moving_free_max", s.tensor.moving_free_max},
                     {"mm_init_interval_cycles", s.tensor.mm_init_interval_cycles},
                     {"fp32_cost_factor", s.tensor.fp32_cost_factor}};
  j["vector"] = engine_json(s.vector);
  j["scalar"] = engine_json(s.scalar);
  j["gpsimd"] = engine_json(s.gpsimd);
  j["dma"] = Json{{"queues", s.dma.queues},
                  {"fixed_cost_ns", s.dma.fixed_cost_ns},
                  {"transfer_slots", s.dma.transfer_slots},
                  {"queue_bytes_per_ns", s.dma.queue_bytes_per_ns}};
  j["hbm"] = Json{{"capacity_bytes", s.hbm.capacity_bytes}, {"bytes_per_ns", s.hbm.bytes_per_ns}};
  j["runtime"] = Json{{"submission_ns", s.runtime.submission_ns},
                      {"executable_switch_ns", s.runtime.executable_switch_ns},
                      {"completion_ns", s.runtime.completion_ns},
                      {"first_load_ns", s.runtime.first_load_ns}};
  // A spec read from a manifest written before the host model has no host costs: write none back.
  if (s.host.copy_bytes_per_ns > 0) {
    j["host"] = Json{{"framework_op_ns", s.host.framework_op_ns},
                     {"runtime_call_ns", s.host.runtime_call_ns},
                     {"allocation_ns", s.host.allocation_ns},
                     {"copy_bytes_per_ns", s.host.copy_bytes_per_ns}};
  }
  return j;
}

device::Spec device_of(const Object& o) {
  device::Spec s;
  s.name = o.string("name");
  s.core_version = o.string("core_version");
  s.cores_per_instance = o.u32_in("cores_per_instance", 1, 1024);
  s.base_clock_ghz = o.positive("base_clock_ghz");
  s.partitions = o.u32_in("partitions", 1, 4096);
  s.sbuf_bytes_per_partition = o.u32_in("sbuf_bytes_per_partition", 1, 1u << 30);
  s.psum_bytes_per_partition = o.u32_in("psum_bytes_per_partition", 1, 1u << 30);
  s.psum_banks = o.u32_in("psum_banks", 1, 1024);
  s.access_overhead_cycles = o.u32_in("access_overhead_cycles", 0, 1u << 20);
  const Object tensor = o.object("tensor");
  s.tensor.clock_ghz = tensor.positive("clock_ghz");
  s.tensor.array_rows = tensor.u32_in("array_rows", 1, 4096);
  s.tensor.array_cols = tensor.u32_in("array_cols", 1, 4096);
  s.tensor.moving_free_max = tensor.u32_in("moving_free_max", 1, 1u << 20);
  s.tensor.mm_init_interval_cycles = tensor.u32_in("mm_init_interval_cycles", 0, 1u << 20);
  s.tensor.fp32_cost_factor = tensor.u32_in("fp32_cost_factor", 1, 64);
  s.vector = engine_of(o.object("vector"));
  s.scalar = engine_of(o.object("scalar"));
  s.gpsimd = engine_of(o.object("gpsimd"));
  const Object dma = o.object("dma");
  s.dma.queues = dma.u32_in("queues", 1, 255);
  s.dma.fixed_cost_ns = dma.non_negative("fixed_cost_ns");
  // Manifests written before the field existed were modeled with one slot per queue.
  s.dma.transfer_slots = dma.has("transfer_slots") ? dma.u32_in("transfer_slots", 1, 16) : 1;
  s.dma.queue_bytes_per_ns = dma.positive("queue_bytes_per_ns");
  const Object hbm = o.object("hbm");
  s.hbm.capacity_bytes = hbm.u64_in("capacity_bytes", 1, uint64_t{1} << 50);
  s.hbm.bytes_per_ns = hbm.positive("bytes_per_ns");
  const Object runtime = o.object("runtime");
  s.runtime.submission_ns = runtime.non_negative("submission_ns");
  s.runtime.executable_switch_ns = runtime.non_negative("executable_switch_ns");
  s.runtime.completion_ns = runtime.non_negative("completion_ns");
  s.runtime.first_load_ns = runtime.non_negative("first_load_ns");
  // The cross-field rules of device::Spec::parse.
  if (s.psum_bytes_per_partition % s.psum_banks != 0) {
    o.error("{} ({}) must be a multiple of {} ({})", o.path_of("psum_bytes_per_partition"),
            s.psum_bytes_per_partition, o.path_of("psum_banks"), s.psum_banks);
  }
  if (s.tensor.array_rows > s.partitions || s.tensor.array_cols > s.partitions) {
    o.error("{}.array_rows/array_cols ({}, {}) cannot exceed {} ({})", o.path_of("tensor"), s.tensor.array_rows,
            s.tensor.array_cols, o.path_of("partitions"), s.partitions);
  }
  if (uint64_t{s.tensor.moving_free_max} * 4 > s.psum_bank_bytes()) {
    o.error("{}.moving_free_max ({}) fp32 results must fit one PSUM bank ({} bytes)", o.path_of("tensor"),
            s.tensor.moving_free_max, s.psum_bank_bytes());
  }
  if (o.has("host")) {  // written since the modeled host clock; older manifests have no host costs
    const Object host = o.object("host");
    s.host.framework_op_ns = host.non_negative("framework_op_ns");
    s.host.runtime_call_ns = host.non_negative("runtime_call_ns");
    s.host.allocation_ns = host.non_negative("allocation_ns");
    s.host.copy_bytes_per_ns = host.positive("copy_bytes_per_ns");
  }
  return s;
}

std::optional<ManifestFileKind> file_kind_of(std::string_view name) {
  for (auto kind : {ManifestFileKind::trace, ManifestFileKind::system_trace, ManifestFileKind::neff,
                    ManifestFileKind::ntff}) {
    if (manifest_file_kind_name(kind) == name) return kind;
  }
  return std::nullopt;
}

// What is wrong with a file entry, or an empty string. Shared by the writer and the reader.
std::string file_problem(const ManifestFile& f) {
  if (f.path.empty()) return "an empty path";
  if (f.path.front() == '/' || f.path.find('\\') != std::string::npos) {
    return fmt::format("path \"{}\" is not relative with '/' separators", f.path);
  }
  for (const auto& part : std::filesystem::path(f.path)) {
    if (part == ".." || part == ".") return fmt::format("path \"{}\" has a '.' or '..' component", f.path);
  }
  if (f.path == kManifestFileName) return "manifest.json lists itself";
  const bool hashed = f.kind == ManifestFileKind::neff || f.kind == ManifestFileKind::ntff;
  if (hashed != f.neff_hash.has_value()) {
    return fmt::format("{} file \"{}\" {} a neff_hash", manifest_file_kind_name(f.kind), f.path,
                       hashed ? "needs" : "must not have");
  }
  if ((f.kind == ManifestFileKind::ntff) != f.core.has_value()) {
    return fmt::format("{} file \"{}\" {} a core", manifest_file_kind_name(f.kind), f.path,
                       f.kind == ManifestFileKind::ntff ? "needs" : "must not have");
  }
  const std::string name = std::filesystem::path(f.path).filename().string();
  if (f.kind == ManifestFileKind::neff && name != ntff_paired_neff_file_name(*f.neff_hash)) {
    return fmt::format("neff file \"{}\" is not named {} after its hash", f.path,
                       ntff_paired_neff_file_name(*f.neff_hash));
  }
  if (f.kind == ManifestFileKind::ntff && name != ntff_file_name(*f.neff_hash, *f.core)) {
    return fmt::format("ntff file \"{}\" is not named {} after its hash and core", f.path,
                       ntff_file_name(*f.neff_hash, *f.core));
  }
  return {};
}

// What is wrong with a merged rank's entry (given the ranks before it in `d`), or an empty string.
std::string rank_problem(const ManifestRank& r, const ManifestDistributed& d) {
  if (r.rank >= d.world_size) return fmt::format("rank {} is not below the world size {}", r.rank, d.world_size);
  if (r.folder.empty() || r.folder == "." || r.folder == ".." || r.folder.find_first_of("/\\") != std::string::npos) {
    return fmt::format("folder \"{}\" is not one path component", r.folder);
  }
  for (const ManifestRank& other : d.ranks) {
    if (&other == &r) break;
    if (other.rank == r.rank || other.folder == r.folder) {
      return fmt::format("rank {} or folder \"{}\" is listed twice", r.rank, r.folder);
    }
  }
  return {};
}

// Directory-level rules: unique paths, every NTFF's executable listed.
std::string files_problem(const std::vector<ManifestFile>& files) {
  std::set<std::string> paths;
  std::set<uint64_t> neffs;
  for (const auto& f : files) {
    if (!paths.insert(f.path).second) return fmt::format("\"{}\" is listed twice", f.path);
    if (f.kind == ManifestFileKind::neff) neffs.insert(*f.neff_hash);
  }
  for (const auto& f : files) {
    if (f.kind == ManifestFileKind::ntff && !neffs.contains(*f.neff_hash)) {
      return fmt::format("ntff file \"{}\" pairs with {}, which is not listed", f.path,
                         ntff_paired_neff_file_name(*f.neff_hash));
    }
  }
  return {};
}

}  // namespace

std::string sightline_version_string() { return SIGHTLINE_VERSION_STRING; }

std::string manifest_now_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string_view manifest_file_kind_name(ManifestFileKind kind) {
  switch (kind) {
    case ManifestFileKind::trace:
      return "trace";
    case ManifestFileKind::system_trace:
      return "system_trace";
    case ManifestFileKind::neff:
      return "neff";
    case ManifestFileKind::ntff:
      return "ntff";
  }
  SIGHTLINE_ASSERT_MSG(false, "manifest file kind {}", static_cast<int>(kind));
}

uint64_t ManifestDropped::total() const {
  uint64_t n = framework;
  for (const auto& c : per_core) n += c.events + c.executions;
  return n;
}

std::string manifest_serialize(const Manifest& m) {
  SIGHTLINE_CHECK(m.format_version == kManifestVersion,
                  "manifest: format_version {} cannot be written; this build writes version {}",
                  m.format_version, kManifestVersion);
  Json j;
  j["format_version"] = m.format_version;
  j["sightline_version"] = m.sightline_version;
  j["created_utc"] = m.created_utc;
  j["modes"] = m.modes;
  j["captured_cores"] = m.captured_cores;
  j["device"] = device_json(m.device);
  j["events"] = Json{{"framework", m.events.framework},
                     {"runtime", m.events.runtime},
                     {"hardware", m.events.hardware},
                     {"instruction_records", m.events.instruction_records}};
  Json per_core = Json::array();
  for (const auto& c : m.dropped.per_core) {
    per_core.push_back(Json{{"core", c.core}, {"events", c.events}, {"executions", c.executions}});
  }
  j["dropped"] =
      Json{{"framework", m.dropped.framework}, {"per_core", per_core}, {"total", m.dropped.total()}};
  if (!m.timing.host_clock.empty()) {
    j["timing"] = Json{{"host_clock", m.timing.host_clock},
                     {"functional", m.timing.functional},
                     {"simulation_wall_ns", m.timing.simulation_wall_ns},
                     {"host_blocked_wall_ns", m.timing.host_blocked_wall_ns},
                     {"not_completed", m.timing.not_completed},
                     {"earlier_steps", m.timing.earlier_steps}};
  }
  if (m.distributed) {
    const ManifestDistributed& d = *m.distributed;
    j["distributed"] = Json{{"rank", d.rank},
                            {"world_size", d.world_size},
                            {"collectives", d.collectives},
                            {"collective_cores", d.collective_cores},
                            {"link_bytes_per_ns", d.link_bytes_per_ns},
                            {"step_latency_ns", d.step_latency_ns}};
    if (!d.ranks.empty()) {
      Json ranks = Json::array();
      for (const ManifestRank& r : d.ranks) {
        const std::string problem = rank_problem(r, d);
        SIGHTLINE_CHECK(problem.empty(), "manifest: cannot list rank {}: {}", r.rank, problem);
        ranks.push_back(Json{{"rank", r.rank}, {"folder", r.folder}});
      }
      j["distributed"]["ranks"] = std::move(ranks);
    }
  }
  Json files = Json::array();
  for (const auto& f : m.files) {
    const std::string problem = file_problem(f);
    SIGHTLINE_CHECK(problem.empty(), "manifest: cannot list file: {}", problem);
    Json entry{{"kind", manifest_file_kind_name(f.kind)}, {"path", f.path}};
    if (f.neff_hash) entry["neff_hash"] = hash_text(*f.neff_hash);
    if (f.core) entry["core"] = *f.core;
    entry["bytes"] = f.bytes;
    files.push_back(std::move(entry));
  }
  const std::string problem = files_problem(m.files);
  SIGHTLINE_CHECK(problem.empty(), "manifest: {}", problem);
  j["files"] = std::move(files);
  return j.dump(2) + "\n";
}

Manifest manifest_parse(std::string_view json_text, const std::string& origin) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number too large
    fail("manifest '{}': not valid JSON ({}); the export was interrupted or the file was edited", origin,
         e.what());
  }
  const Object top(root, "$", origin);
  Manifest m;
  const Json& version = top.at("format_version");
  if (!version.is_number_integer() || version.get<int64_t>() != kManifestVersion) {
    top.error("format_version is {}, this build reads version {}; use the sightline release that wrote it",
              version.dump(), kManifestVersion);
  }
  m.format_version = kManifestVersion;
  m.sightline_version = top.string("sightline_version");
  m.created_utc = top.string("created_utc");
  for (const Json& mode : top.array("modes")) {
    if (!mode.is_string()) top.error("$.modes must hold strings, found {}", mode.type_name());
    m.modes.push_back(mode.get<std::string>());
  }
  for (const Json& core : top.array("captured_cores")) {
    const uint64_t c = top.unsigned_of(core, "$.captured_cores[]");
    if (c > UINT32_MAX) top.error("$.captured_cores holds {}, at most {}", c, UINT32_MAX);
    m.captured_cores.push_back(static_cast<uint32_t>(c));
  }
  m.device = device_of(top.object("device"));
  const Object events = top.object("events");
  m.events.framework = events.u64("framework");
  m.events.runtime = events.u64("runtime");
  m.events.hardware = events.u64("hardware");
  m.events.instruction_records = events.u64("instruction_records");
  const Object dropped = top.object("dropped");
  m.dropped.framework = dropped.u64("framework");
  const Json& per_core = dropped.array("per_core");
  for (size_t i = 0; i < per_core.size(); ++i) {
    const Object c(per_core[i], fmt::format("$.dropped.per_core[{}]", i), origin);
    m.dropped.per_core.push_back({c.u32("core"), c.u64("events"), c.u64("executions")});
  }
  const uint64_t total = dropped.u64("total");
  if (total != m.dropped.total()) {
    top.error("$.dropped.total is {}, but framework and per_core add up to {}", total, m.dropped.total());
  }
  if (top.has("timing")) {
    const Object timing = top.object("timing");
    m.timing.host_clock = timing.string("host_clock");
    if (m.timing.host_clock != "modeled" && m.timing.host_clock != "measured") {
      timing.error("{} is \"{}\", expected \"modeled\" or \"measured\"", timing.path_of("host_clock"),
                   m.timing.host_clock);
    }
    m.timing.functional = timing.boolean("functional");
    m.timing.simulation_wall_ns = timing.u64("simulation_wall_ns");
    m.timing.host_blocked_wall_ns = timing.u64("host_blocked_wall_ns");
    m.timing.not_completed = timing.u64("not_completed");
    m.timing.earlier_steps = timing.u64("earlier_steps");
  }
  if (top.has("distributed")) {
    const Object d = top.object("distributed");
    ManifestDistributed dist;
    dist.world_size = d.u32_in("world_size", 1, 1u << 20);
    dist.rank = d.u32_in("rank", 0, dist.world_size - 1);
    dist.collectives = d.u64("collectives");
    const Json& cores = d.array("collective_cores");
    for (size_t i = 0; i < cores.size(); ++i) {
      if (!cores[i].is_number_unsigned() || cores[i].get<uint64_t>() > 1024) {
        d.error("{}[{}] must be a core index", d.path_of("collective_cores"), i);
      }
      dist.collective_cores.push_back(cores[i].get<uint32_t>());
    }
    dist.link_bytes_per_ns = d.non_negative("link_bytes_per_ns");
    dist.step_latency_ns = d.non_negative("step_latency_ns");
    if (d.has("ranks")) {
      const Json& ranks = d.array("ranks");
      for (size_t i = 0; i < ranks.size(); ++i) {
        const Object r(ranks[i], fmt::format("{}[{}]", d.path_of("ranks"), i), origin);
        ManifestRank rank{.rank = r.u32("rank"), .folder = r.string("folder")};
        const std::string problem = rank_problem(rank, dist);
        if (!problem.empty()) r.error("{}: {}", r.path(), problem);
        dist.ranks.push_back(std::move(rank));
      }
    }
    m.distributed = dist;
  }
  const Json& files = top.array("files");
  for (size_t i = 0; i < files.size(); ++i) {
    const Object f(files[i], fmt::format("$.files[{}]", i), origin);
    ManifestFile file;
    const std::string kind = f.string("kind");
    const auto parsed_kind = file_kind_of(kind);
    if (!parsed_kind) {
      f.error("{} is \"{}\", expected one of trace, system_trace, neff, ntff", f.path_of("kind"), kind);
    }
    file.kind = *parsed_kind;
    file.path = f.string("path");
    if (f.has("neff_hash")) file.neff_hash = f.hash("neff_hash");
    if (f.has("core")) file.core = f.u32("core");
    file.bytes = f.u64("bytes");
    const std::string problem = file_problem(file);
    if (!problem.empty()) f.error("{}: {}", f.path(), problem);
    m.files.push_back(std::move(file));
  }
  const std::string problem = files_problem(m.files);
  if (!problem.empty()) top.error("$.files: {}", problem);
  return m;
}

std::optional<uint32_t> manifest_file_rank(const Manifest& manifest, const ManifestFile& file) {
  if (!manifest.distributed) return std::nullopt;
  const size_t slash = file.path.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string_view folder = std::string_view(file.path).substr(0, slash);
  for (const ManifestRank& r : manifest.distributed->ranks) {
    if (r.folder == folder) return r.rank;
  }
  return std::nullopt;
}

std::string manifest_save(const Manifest& manifest, const std::string& dir) {
  const std::string text = manifest_serialize(manifest);
  const std::string path = (std::filesystem::path(dir) / kManifestFileName).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SIGHTLINE_CHECK(out.good(), "cannot write manifest '{}': check that the directory exists and is writable",
                  path);
  out << text;
  SIGHTLINE_CHECK(out.good(), "writing manifest '{}' failed (disk full?)", path);
  return path;
}

Manifest manifest_load(const std::string& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(file)) file /= kManifestFileName;
  std::ifstream in(file, std::ios::binary);
  SIGHTLINE_CHECK(in.good(),
                  "cannot open manifest '{}': a profile directory without manifest.json is an incomplete "
                  "export; export it again",
                  file.string());
  std::stringstream text;
  text << in.rdbuf();
  return manifest_parse(text.str(), file.string());
}

}  // namespace sightline::formats
