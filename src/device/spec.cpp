#include "sightline/device/spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sightline/error.h"

// The built-in spec files, embedded at build time (builtin_specs.cpp, generated from specs/*.json), so
// that an installed or relocated library needs no source tree.
namespace sightline::device::builtin_specs {
extern const char* const kTrn2;
extern const char* const kTrn1;
}  // namespace sightline::device::builtin_specs

namespace sightline::device {
namespace {

using nlohmann::json;

// Reads leaves {"value", "source"} by dotted path and remembers which ones it read, so that a
// misspelled field in a user's file is reported instead of silently ignored.
class SpecReader {
 public:
  SpecReader(const json& root, const std::string& origin) : root_(root), origin_(origin) {}

  const json& leaf(const std::string& path) {
    const json* node = &root_;
    size_t begin = 0;
    while (begin <= path.size()) {
      const size_t dot = std::min(path.find('.', begin), path.size());
      const std::string key = path.substr(begin, dot - begin);
      if (!node->is_object() || !node->contains(key)) {
        fail("device spec '{}': missing field '{}'", origin_, path);
      }
      node = &(*node)[key];
      begin = dot + 1;
    }
    if (!node->is_object() || !node->contains("value") || !node->contains("source")) {
      fail("device spec '{}': field '{}' must be an object {{\"value\": ..., \"source\": \"...\"}}", origin_,
           path);
    }
    const json& source = (*node)["source"];
    if (!source.is_string() || source.get<std::string>().empty()) {
      fail(
          "device spec '{}': field '{}' needs a non-empty \"source\" string saying where the value comes "
          "from",
          origin_, path);
    }
    if (node->size() != 2)
      fail("device spec '{}': field '{}' has keys other than value and source", origin_, path);
    read_.insert(path);
    return (*node)["value"];
  }

  double positive(const std::string& path) {
    const json& v = leaf(path);
    if (!v.is_number() || !(v.get<double>() > 0)) {
      fail("device spec '{}': field '{}' must be a positive number, got {}", origin_, path, v.dump());
    }
    return v.get<double>();
  }

  double non_negative(const std::string& path) {
    const json& v = leaf(path);
    if (!v.is_number() || !(v.get<double>() >= 0)) {
      fail("device spec '{}': field '{}' must be a number >= 0, got {}", origin_, path, v.dump());
    }
    return v.get<double>();
  }

  uint64_t count(const std::string& path, uint64_t min, uint64_t max) {
    const json& v = leaf(path);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<uint64_t>() < min ||
        v.get<uint64_t>() > max) {
      fail("device spec '{}': field '{}' must be an integer in [{}, {}], got {}", origin_, path, min, max,
           v.dump());
    }
    return v.get<uint64_t>();
  }

  std::string text(const std::string& path) {
    const json& v = leaf(path);
    if (!v.is_string() || v.get<std::string>().empty()) {
      fail("device spec '{}': field '{}' must be a non-empty string, got {}", origin_, path, v.dump());
    }
    return v.get<std::string>();
  }

  // Every leaf in the file must have been read.
  void reject_unknown() const { reject_unknown(root_, ""); }

 private:
  void reject_unknown(const json& node, const std::string& prefix) const {
    for (const auto& [key, child] : node.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (read_.count(path)) continue;
      if (child.is_object() && !child.contains("value")) {
        reject_unknown(child, path);
        continue;
      }
      fail("device spec '{}': unknown field '{}' (see specs/trn2.json for the schema)", origin_, path);
    }
  }

  const json& root_;
  const std::string& origin_;
  std::set<std::string> read_;
};

EngineSpec read_engine(SpecReader& r, const std::string& name, bool has_accumulate) {
  EngineSpec e;
  e.clock_ghz = r.positive(name + ".clock_ghz");
  e.elements_per_cycle_32bit = r.positive(name + ".elements_per_cycle_32bit");
  e.elements_per_cycle_16bit = r.positive(name + ".elements_per_cycle_16bit");
  e.static_overhead_cycles = static_cast<uint32_t>(r.count(name + ".static_overhead_cycles", 0, 1u << 20));
  if (has_accumulate) {
    e.accumulate_extra_cycles =
        static_cast<uint32_t>(r.count(name + ".accumulate_extra_cycles", 0, 1u << 20));
  }
  return e;
}

}  // namespace

Spec Spec::parse(std::string_view json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too large
    fail("device spec '{}': not valid JSON: {}", origin, e.what());
  }
  if (!root.is_object()) fail("device spec '{}': the top level must be a JSON object", origin);

  SpecReader r(root, origin);
  Spec s;
  s.path = origin;
  s.content_hash = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (const char c : json_text) s.content_hash = (s.content_hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  s.name = r.text("name");
  s.core_version = r.text("core_version");
  s.cores_per_instance = static_cast<uint32_t>(r.count("cores_per_instance", 1, 1024));
  s.base_clock_ghz = r.positive("base_clock_ghz");
  // Partition counts are bounded by what the instruction encoding holds (16-bit partition fields).
  s.partitions = static_cast<uint32_t>(r.count("partitions", 1, 4096));
  s.sbuf_bytes_per_partition = static_cast<uint32_t>(r.count("sbuf.bytes_per_partition", 1, 1u << 30));
  s.psum_bytes_per_partition = static_cast<uint32_t>(r.count("psum.bytes_per_partition", 1, 1u << 30));
  s.psum_banks = static_cast<uint32_t>(r.count("psum.banks", 1, 1024));
  s.access_overhead_cycles = static_cast<uint32_t>(r.count("access_overhead_cycles", 0, 1u << 20));

  s.tensor.clock_ghz = r.positive("tensor.clock_ghz");
  s.tensor.array_rows = static_cast<uint32_t>(r.count("tensor.array_rows", 1, 4096));
  s.tensor.array_cols = static_cast<uint32_t>(r.count("tensor.array_cols", 1, 4096));
  s.tensor.moving_free_max = static_cast<uint32_t>(r.count("tensor.moving_free_max", 1, 1u << 20));
  s.tensor.mm_init_interval_cycles =
      static_cast<uint32_t>(r.count("tensor.mm_init_interval_cycles", 0, 1u << 20));
  s.tensor.fp32_cost_factor = static_cast<uint32_t>(r.count("tensor.fp32_cost_factor", 1, 64));

  s.vector = read_engine(r, "vector", false);
  s.scalar = read_engine(r, "scalar", true);
  s.gpsimd = read_engine(r, "gpsimd", false);

  s.dma.queues = static_cast<uint32_t>(r.count("dma.queues", 1, 255));
  s.dma.fixed_cost_ns = r.non_negative("dma.fixed_cost_ns");
  s.dma.transfer_slots = static_cast<uint32_t>(r.count("dma.transfer_slots", 1, 16));
  s.dma.queue_bytes_per_ns = r.positive("dma.queue_bytes_per_ns");
  s.hbm.capacity_bytes = r.count("hbm.capacity_bytes", 1, uint64_t{1} << 50);
  s.hbm.bytes_per_ns = r.positive("hbm.bytes_per_ns");

  s.runtime.submission_ns = r.non_negative("runtime.submission_ns");
  s.runtime.executable_switch_ns = r.non_negative("runtime.executable_switch_ns");
  s.runtime.completion_ns = r.non_negative("runtime.completion_ns");
  s.runtime.first_load_ns = r.non_negative("runtime.first_load_ns");
  s.host.framework_op_ns = r.non_negative("host.framework_op_ns");
  s.host.runtime_call_ns = r.non_negative("host.runtime_call_ns");
  s.host.allocation_ns = r.non_negative("host.allocation_ns");
  s.host.copy_bytes_per_ns = r.positive("host.copy_bytes_per_ns");
  // Optional: a user's spec written before collectives has none, and cannot run them.
  if (root.contains("collective")) {
    s.collective.link_bytes_per_ns = r.positive("collective.link_bytes_per_ns");
    s.collective.step_latency_ns = r.non_negative("collective.step_latency_ns");
    // Optional within it: a spec without them has no links between chips (one chip per instance).
    if (root["collective"].contains("chips_per_instance")) {
      s.collective.chips_per_instance = static_cast<uint32_t>(r.count("collective.chips_per_instance", 1, 1024));
      s.collective.chip_link_bytes_per_ns = r.positive("collective.chip_link_bytes_per_ns");
      s.collective.chip_step_latency_ns = r.non_negative("collective.chip_step_latency_ns");
    }
  }
  r.reject_unknown();

  SIGHTLINE_CHECK(s.psum_bytes_per_partition % s.psum_banks == 0,
                  "device spec '{}': psum.bytes_per_partition ({}) must be a multiple of psum.banks ({})",
                  origin, s.psum_bytes_per_partition, s.psum_banks);
  SIGHTLINE_CHECK(s.tensor.array_rows <= s.partitions,
                  "device spec '{}': tensor.array_rows ({}) cannot exceed partitions ({})", origin,
                  s.tensor.array_rows, s.partitions);
  SIGHTLINE_CHECK(
      s.tensor.array_cols <= s.partitions,
      "device spec '{}': tensor.array_cols ({}) cannot exceed partitions ({}): matmul outputs one "
      "PSUM partition per stationary column",
      origin, s.tensor.array_cols, s.partitions);
  SIGHTLINE_CHECK(
      uint64_t{s.tensor.moving_free_max} * 4 <= s.psum_bank_bytes(),
      "device spec '{}': tensor.moving_free_max ({}) fp32 results must fit one PSUM bank ({} bytes)", origin,
      s.tensor.moving_free_max, s.psum_bank_bytes());
  return s;
}

Spec Spec::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "device spec '{}': cannot open the file (built-in specs: trn2, trn1)", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

Spec Spec::builtin(std::string_view name) {
  if (name != "trn2" && name != "trn1") {
    fail(
        "unknown built-in device spec '{}'; built-in specs are: trn2 (NeuronCore-v3, default), trn1 "
        "(NeuronCore-v2), or pass a spec file path to Spec::load",
        name);
  }
  return parse(name == "trn2" ? builtin_specs::kTrn2 : builtin_specs::kTrn1, "builtin:" + std::string(name));
}

std::string Spec::identity() const { return fmt::format("{}:{:016x}", name, content_hash); }

}  // namespace sightline::device
