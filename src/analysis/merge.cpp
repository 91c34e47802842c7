#include "analysis/merge.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/manifest.h"
#include "formats/output_dir.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Flow and correlation ids stay distinct per rank: the rank goes in bits 54-59, which no id the profiler
// or the neuron source hands out uses (docs/formats.md).
constexpr int kRankIdShift = 54;
constexpr int kMaxRanks = 64;

struct RankTrace {
  int rank = 0;
  int world_size = 1;
  std::string dir;
  formats::Manifest manifest;
  json trace;
  int64_t base_shift_ns = 0;  // onto rank 0's baseTimeNanoseconds
};

// trace.json times are microseconds with three decimals; the shifts are done in integer nanoseconds, so
// that a merged time is exact (a double sum of host-clock microseconds near 5e12 is off by up to a
// nanosecond, differently in every run as the clock's origin moves). The parsed double is within half a
// nanosecond of the written decimal, and long double keeps that while scaling, so rounding recovers it.
int64_t to_ns(double us) { return static_cast<int64_t>(std::llround(static_cast<long double>(us) * 1000.0L)); }
// The double nearest ns / 1000, which the JSON writer prints as the shortest decimal that reads back as
// it: the three-decimal microseconds.
double to_us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

json read_trace(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "sightline merge: cannot read {}; each argument must be a profile directory with trace.json",
                  path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("sightline merge: {} is not valid JSON: {}", path.string(), e.what());
  }
}

// End of each collective (by id) and start of the first ProfilerStep, on the rank's own clock (ns).
struct Marks {
  std::map<int64_t, int64_t> collective_end;
  std::optional<std::pair<std::string, int64_t>> first_step;
};

Marks marks_of(const json& trace) {
  Marks m;
  for (const json& e : trace.at("traceEvents")) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const std::string name = e.value("name", "");
    const int64_t ts = to_ns(e.value("ts", 0.0)), dur = to_ns(e.value("dur", 0.0));
    if (name == "cc_running" && e.contains("args") && e["args"].contains("collective id")) {
      const int64_t id = e["args"]["collective id"].get<int64_t>();
      auto [it, fresh] = m.collective_end.try_emplace(id, ts + dur);
      if (!fresh) it->second = std::max(it->second, ts + dur);
    } else if (name.starts_with("ProfilerStep#") && (!m.first_step || ts < m.first_step->second)) {
      m.first_step = {name, ts};
    }
  }
  return m;
}

uint64_t rank_id(uint64_t id, int rank) { return id ^ (static_cast<uint64_t>(rank) << kRankIdShift); }

void shift_event(json& e, const RankTrace& r, int64_t shift_ns) {
  if (e.contains("ts") && e["ts"].is_number()) e["ts"] = to_us(to_ns(e["ts"].get<double>()) + shift_ns);
  if (e.contains("pid") && e["pid"].is_number_integer()) e["pid"] = r.rank * kMergedRankPidStride + e["pid"].get<int64_t>();
  if (r.rank == 0) {
    // rank 0 keeps its ids; only its lane names get the prefix
  } else if (e.contains("id") && e["id"].is_number_unsigned()) {
    e["id"] = rank_id(e["id"].get<uint64_t>(), r.rank);
  }
  if (!e.contains("args") || !e["args"].is_object()) return;
  json& args = e["args"];
  if (r.rank != 0) {
    for (const char* key : {"External id", "correlation"}) {
      if (args.contains(key) && args[key].is_number_unsigned()) args[key] = rank_id(args[key].get<uint64_t>(), r.rank);
    }
  }
  const std::string name = e.value("name", "");
  if ((name == "process_name" || name == "thread_name") && args.contains("name") && args["name"].is_string()) {
    args["name"] = fmt::format("rank{}/{}", r.rank, args["name"].get<std::string>());
  }
  if ((name == "process_sort_index" || name == "thread_sort_index") && args.contains("sort_index") &&
      args["sort_index"].is_number_integer() && name == "process_sort_index") {
    args["sort_index"] = args["sort_index"].get<int64_t>() + 100 * r.rank;
  }
}

}  // namespace

MergeResult merge_profiles(const std::vector<std::string>& dirs, const std::string& out_dir) {
  SIGHTLINE_CHECK(dirs.size() >= 2, "sightline merge: give the profile directories of at least two ranks (got {})",
                  dirs.size());
  SIGHTLINE_CHECK(dirs.size() <= static_cast<size_t>(kMaxRanks), "sightline merge: at most {} ranks, got {}", kMaxRanks,
                  dirs.size());
  std::vector<RankTrace> ranks;
  for (size_t i = 0; i < dirs.size(); ++i) {
    RankTrace r;
    r.dir = dirs[i];
    r.manifest = formats::manifest_load(dirs[i]);
    r.trace = read_trace(fs::path(dirs[i]) / "trace.json");
    r.rank = static_cast<int>(i);
    if (r.manifest.distributed) {
      r.rank = static_cast<int>(r.manifest.distributed->rank);
      r.world_size = static_cast<int>(r.manifest.distributed->world_size);
    } else if (r.trace.contains("distributedInfo") && r.trace["distributedInfo"].value("backend", "none") != "none") {
      r.rank = r.trace["distributedInfo"].value("rank", r.rank);
      r.world_size = r.trace["distributedInfo"].value("world_size", 1);
    }
    ranks.push_back(std::move(r));
  }
  std::sort(ranks.begin(), ranks.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < ranks.size(); ++i) {
    SIGHTLINE_CHECK(ranks[i].rank != ranks[i - 1].rank,
                    "sightline merge: {} and {} are both rank {}; give one profile per rank (each process records its "
                    "rank in NeuronConfig::rank)",
                    ranks[i - 1].dir, ranks[i].dir, ranks[i].rank);
  }
  for (const RankTrace& r : ranks) {
    SIGHTLINE_CHECK(r.rank >= 0 && r.rank < kMaxRanks, "sightline merge: rank {} of {} is out of range 0..{}", r.rank,
                    r.dir, kMaxRanks - 1);
  }
  // Onto rank 0's base time, then aligned.
  const int64_t base0 = ranks.front().trace.value("baseTimeNanoseconds", int64_t{0});
  std::vector<Marks> marks;
  for (RankTrace& r : ranks) {
    r.base_shift_ns = r.trace.value("baseTimeNanoseconds", int64_t{0}) - base0;
    marks.push_back(marks_of(r.trace));
  }
  std::optional<int64_t> common;
  for (const auto& [id, end] : marks.front().collective_end) {
    bool everywhere = true;
    for (const Marks& m : marks) everywhere = everywhere && m.collective_end.contains(id);
    if (everywhere) {
      common = id;
      break;
    }
  }
  MergeResult result;
  result.dir = out_dir;
  json merged = ranks.front().trace;
  json events = json::array();
  json sources = json::array();
  for (size_t i = 0; i < ranks.size(); ++i) {
    RankTrace& r = ranks[i];
    MergedRank m;
    m.rank = r.rank;
    m.dir = r.dir;
    int64_t shift_ns = r.base_shift_ns;
    m.aligned_on = "trace start";
    if (common) {
      shift_ns = marks.front().collective_end.at(*common) - marks[i].collective_end.at(*common);
      m.aligned_on = fmt::format("collective {}", *common);
    } else if (marks.front().first_step && marks[i].first_step) {
      shift_ns = marks.front().first_step->second - marks[i].first_step->second;
      m.aligned_on = marks[i].first_step->first;
    }
    m.shift_us = to_us(shift_ns);
    for (json& e : r.trace.at("traceEvents")) {
      shift_event(e, r, shift_ns);
      events.push_back(std::move(e));
    }
    sources.push_back(json{{"rank", m.rank}, {"profile", fs::path(r.dir).lexically_normal().string()},
                           {"shift_us", m.shift_us}, {"aligned_on", m.aligned_on}});
    result.world_size = std::max({result.world_size, r.world_size, static_cast<int>(ranks.size())});
    result.ranks.push_back(m);
  }
  merged["traceEvents"] = std::move(events);
  merged["distributedInfo"] = json{{"backend", "neuron"}, {"rank", 0}, {"world_size", result.world_size}};
  merged["sightlineMerge"] = std::move(sources);
  merged["traceName"] = "merged";
  merged.erase("sightlineNotes");

  formats::Manifest manifest = ranks.front().manifest;
  manifest.created_utc = formats::manifest_now_utc();
  manifest.captured_cores.clear();  // the union of the ranks' (a core number is its rank's own)
  manifest.events = {};
  manifest.dropped = {};
  formats::ManifestDistributed distributed;
  distributed.world_size = static_cast<uint32_t>(result.world_size);
  std::set<uint32_t> cores;
  for (const RankTrace& r : ranks) {
    manifest.events.framework += r.manifest.events.framework;
    manifest.events.runtime += r.manifest.events.runtime;
    manifest.events.hardware += r.manifest.events.hardware;
    manifest.events.instruction_records += r.manifest.events.instruction_records;
    manifest.dropped.framework += r.manifest.dropped.total();
    for (uint32_t c : r.manifest.captured_cores) {
      if (std::find(manifest.captured_cores.begin(), manifest.captured_cores.end(), c) == manifest.captured_cores.end()) {
        manifest.captured_cores.push_back(c);
      }
    }
    if (r.manifest.distributed) {
      distributed.collectives += r.manifest.distributed->collectives;
      for (uint32_t c : r.manifest.distributed->collective_cores) cores.insert(c);
    }
  }
  distributed.collective_cores.assign(cores.begin(), cores.end());
  distributed.link_bytes_per_ns = manifest.device.collective.link_bytes_per_ns;
  distributed.step_latency_ns = manifest.device.collective.step_latency_ns;
  if (ranks.front().manifest.distributed) {
    distributed.link_bytes_per_ns = ranks.front().manifest.distributed->link_bytes_per_ns;
    distributed.step_latency_ns = ranks.front().manifest.distributed->step_latency_ns;
  }
  for (const RankTrace& r : ranks) {
    distributed.ranks.push_back({.rank = static_cast<uint32_t>(r.rank), .folder = fmt::format("rank{}", r.rank)});
  }
  manifest.distributed = distributed;
  const std::string text = merged.dump();
  std::sort(manifest.captured_cores.begin(), manifest.captured_cores.end());
  formats::output_dir_write(out_dir, [&](const fs::path& staging) {
    formats::write_file_durably(staging / "trace.json",
                                std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    manifest.files = {{formats::ManifestFileKind::trace, "trace.json", {}, {}, text.size()}};
    // Every rank's executables and instruction traces, under rank<r>/ (two ranks often run the same
    // executable, so the same names), each folder listed with its rank (the manifest's distributed.ranks):
    // the summary's population (analysis/summary.h).
    for (const RankTrace& r : ranks) {
      const std::string folder = fmt::format("rank{}", r.rank);
      for (const formats::ManifestFile& file : r.manifest.files) {
        if (file.kind != formats::ManifestFileKind::neff && file.kind != formats::ManifestFileKind::ntff) continue;
        formats::ManifestFile copy = file;
        copy.path = folder + "/" + fs::path(file.path).filename().string();
        std::error_code ec;
        fs::create_directories(staging / folder, ec);
        fs::copy_file(fs::path(r.dir) / file.path, staging / copy.path, ec);
        SIGHTLINE_CHECK(!ec, "sightline merge: cannot copy {} of rank {} into the merged profile: {}; check that {} "
                        "is a complete profile directory and the output has space", file.path, r.rank, ec.message(), r.dir);
        copy.bytes = fs::file_size(staging / copy.path);
        manifest.files.push_back(std::move(copy));
      }
    }
    formats::manifest_save(manifest, staging.string());
  });
  result.collectives = collective_summary({{0, (fs::path(out_dir) / "trace.json").string()}}, distributed.link_bytes_per_ns);
  return result;
}

std::string merge_report_text(const MergeResult& m) {
  std::string out = fmt::format("merged {} ranks (world size {}) into {}\n", m.ranks.size(), m.world_size, m.dir);
  for (const MergedRank& r : m.ranks) {
    out += fmt::format("  rank {}: {} shifted {:+.3f} us (aligned on {})\n", r.rank, r.dir, r.shift_us, r.aligned_on);
  }
  out += '\n';
  out += collective_summary_text(m.collectives);
  return out;
}

}  // namespace sightline::analysis
