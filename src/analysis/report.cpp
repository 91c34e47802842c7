#include "analysis/report.h"

#include <filesystem>

#include "analysis/collectives.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/insights.h"
#include "analysis/roofline.h"
#include "analysis/summary.h"
#include "sightline/profiler/key_averages.h"

namespace sightline::analysis {
namespace {

using Value = std::variant<uint64_t, double, std::string>;
struct Field {
  std::string key;
  Value value;
};

// One ordered list feeds both the text and the JSON, so they never disagree.
std::vector<Field> summary_fields(const ProfileDir& profile, const Summary& s, uint64_t executables) {
  std::vector<Field> f;
  f.push_back({"device", profile.manifest.device.name});
  f.push_back({"executables", executables});
  f.push_back({"executions", s.executions});
  f.push_back({"total_time_us", s.total_time_ns / 1000});
  f.push_back({"neuroncore_cycle_count", s.cycles});
  for (int e = 0; e < device::kEngineCount; ++e) {
    const std::string name(device::engine_name(static_cast<device::Engine>(e)));
    const EngineSummary& engine = s.engines[e];
    f.push_back({name + "_engine_active_time_us", engine.active_ns / 1000});
    f.push_back({name + "_engine_active_time_percent",
                 s.total_time_ns > 0 ? 100 * engine.active_ns / s.total_time_ns : 0.0});
    f.push_back({name + "_engine_instruction_time_us", engine.instruction_ns / 1000});
    f.push_back({name + "_engine_instruction_count", engine.instruction_count});
    f.push_back({name + "_engine_semaphore_wait_time_us", engine.semaphore_wait_ns / 1000});
  }
  f.push_back({"matmul_instruction_count", s.matmul_count});
  f.push_back({"hbm_read_bytes", s.hbm_read_bytes});
  f.push_back({"hbm_write_bytes", s.hbm_write_bytes});
  f.push_back({"hbm_min_bytes", s.min_hbm_bytes});
  f.push_back({"sbuf_read_bytes", s.sbuf_read_bytes});
  f.push_back({"sbuf_write_bytes", s.sbuf_write_bytes});
  f.push_back({"psum_read_bytes", s.psum_read_bytes});
  f.push_back({"psum_write_bytes", s.psum_write_bytes});
  f.push_back({"dma_active_time_us", s.dma_active_ns() / 1000});
  f.push_back({"dma_active_time_percent", s.total_time_ns > 0 ? 100 * s.dma_active_ns() / s.total_time_ns : 0.0});
  f.push_back({"dma_transfer_count", s.dma_transfer_count});
  f.push_back({"dma_transfer_total_bytes", s.dma_transfer_bytes});
  f.push_back({"dma_transfer_average_bytes", s.dma_average_bytes});
  f.push_back({"model_flops", s.model_flops});
  f.push_back({"model_flops_source", std::string(s.model_flops_from_op_table ? "op_table" : "instructions")});
  f.push_back({"hardware_flops", s.hardware_flops});
  f.push_back({"adjusted_hardware_flops", s.adjusted_hardware_flops});
  f.push_back({"instruction_flops", s.instruction_flops});
  f.push_back({"tensor_engine_peak_tflops", s.peak_flops_per_s / 1e12});
  f.push_back({"hbm_bandwidth_gbps", s.hbm_bytes_per_s / 1e9});
  f.push_back({"mfu_estimated_percent", 100 * s.mfu});
  f.push_back({"hfu_estimated_percent", 100 * s.hfu});
  f.push_back({"mbu_estimated_percent", 100 * s.mbu});
  f.push_back({"mm_arithmetic_intensity", s.mm_arithmetic_intensity});
  f.push_back({"model_arithmetic_intensity", s.model_arithmetic_intensity});
  f.push_back({"peak_flops_bandwidth_ratio", s.ridge_point});
  f.push_back({"bound", std::string(bound_name(s.bound))});
  return f;
}

std::string text_value(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return fmt::format("{}", *u);
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{:.3f}", *d);
  return std::get<std::string>(v);
}

nlohmann::json json_value(const Value& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

nlohmann::json fields_json(const std::vector<Field>& fields) {
  nlohmann::json out = nlohmann::json::object();
  for (const Field& f : fields) out[f.key] = json_value(f.value);
  return out;
}

std::vector<Field> profile_fields(const ProfileDir& profile) {
  return summary_fields(profile, summarize_profile(profile), profile.executables.size());
}

// The per-rank table of a merged profile: the columns a reader compares ranks by (every rank's whole
// summary is in the JSON).
constexpr std::array<std::string_view, 8> kRankColumns = {
    "executions", "total_time_us", "neuroncore_cycle_count", "hbm_read_bytes", "hbm_write_bytes",
    "mfu_estimated_percent", "mbu_estimated_percent", "bound"};

std::string ranks_text(const ProfileDir& profile, const RankSummaries& ranks) {
  std::string out = "\n== summary per rank (the summary above is their sum) ==\n";
  out += fmt::format("{:>4}", "rank");
  for (std::string_view column : kRankColumns) out += fmt::format("  {:>{}}", column, column.size());
  out += '\n';
  for (const RankSummary& r : ranks.ranks) {
    out += fmt::format("{:>4}", r.rank);
    for (const Field& f : summary_fields(profile, r.summary, r.executables)) {
      for (std::string_view column : kRankColumns) {
        if (f.key == column) out += fmt::format("  {:>{}}", text_value(f.value), column.size());
      }
    }
    out += '\n';
  }
  const RankSummary& slowest = ranks.ranks.at(static_cast<size_t>(
      std::find_if(ranks.ranks.begin(), ranks.ranks.end(), [&](const RankSummary& r) { return r.rank == ranks.straggler; }) -
      ranks.ranks.begin()));
  if (ranks.straggler_excess_ns > 0) {
    out += fmt::format("straggler: rank {} with {:.3f} us of device time, {:.3f} us more than rank {} (the least)\n",
                       ranks.straggler, slowest.summary.total_time_ns / 1000, ranks.straggler_excess_ns / 1000,
                       ranks.fastest);
  } else {
    out += fmt::format("straggler: none, every rank ran {:.3f} us of device time\n", slowest.summary.total_time_ns / 1000);
  }
  return out;
}

nlohmann::json ranks_json(const ProfileDir& profile, const RankSummaries& ranks) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RankSummary& r : ranks.ranks) {
    nlohmann::json row = fields_json(summary_fields(profile, r.summary, r.executables));
    row["rank"] = r.rank;
    rows.push_back(std::move(row));
  }
  return rows;
}

nlohmann::json insights_json(const std::vector<Insight>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const Insight& i : list) {
    out.push_back({{"id", i.id}, {"title", i.title}, {"evidence", i.evidence}, {"fix", i.fix},
                   {"potential_saving_us", i.potential_saving_ns / 1000}});
  }
  return out;
}

nlohmann::json point_json(const RooflinePoint& p) {
  return {{"name", p.name},           {"executions", p.executions},
          {"flops", p.flops},         {"hbm_bytes", p.hbm_bytes},
          {"time_us", p.time_ns / 1000}, {"intensity", p.intensity},
          {"achieved_flops_per_s", p.achieved_flops_per_s}, {"attainable_flops_per_s", p.attainable_flops_per_s},
          {"efficiency", p.efficiency}, {"bound", bound_name(p.bound)}, {"roof", p.roof},
          {"compute_roof_flops_per_s", p.compute_roof_flops_per_s}};
}

nlohmann::json roofs_json(const Roofline& roof) {
  nlohmann::json roofs = nlohmann::json::array();
  for (const Roof& r : roof.roofs) roofs.push_back({{"name", r.name}, {"flops_per_s", r.flops_per_s}});
  return roofs;
}

}  // namespace

std::string report_summary_text(const ProfileDir& profile) {
  const std::vector<Field> fields = profile_fields(profile);
  size_t width = 0;
  for (const Field& f : fields) width = std::max(width, f.key.size());
  std::string out = "== summary (all captured executions) ==\n";
  for (const Field& f : fields) out += fmt::format("{:<{}}  {}\n", f.key, width, text_value(f.value));
  if (profile.ranks().size() > 1) out += ranks_text(profile, summarize_ranks(profile));
  out += "\n== roofline (HBM level) ==\n";
  const Roofline roof = roofline(profile);
  for (const RooflinePoint& p : roof.ops) {
    const std::string ceiling = p.roof.empty() ? std::string("no compute")
                                               : fmt::format("compute ceiling {:.3f} GFLOP/s ({} binds)",
                                                             p.compute_roof_flops_per_s / 1e9, p.roof);
    out += fmt::format("op {}: {:.3f} FLOP/B, achieved {:.3f} GFLOP/s, attainable {:.3f} GFLOP/s, {:.1f}% "
                       "efficiency, {}; {}\n", p.name, p.intensity, p.achieved_flops_per_s / 1e9,
                       p.attainable_flops_per_s / 1e9, 100 * p.efficiency, bound_name(p.bound), ceiling);
  }
  out += "\n== insights (ranked by potential saving) ==\n";
  const std::vector<Insight> list = insights(profile);
  if (list.empty()) out += "none: no rule fired\n";
  int rank = 0;
  for (const Insight& i : list) {
    out += fmt::format("{}. [{}] {}\n   evidence: {}\n   fix: {}\n", ++rank, i.id, i.title, i.evidence, i.fix);
  }
  if (const auto& distributed = profile.manifest.distributed; distributed && distributed->collectives > 0) {
    out += '\n';
    out += collective_summary_text(collective_summary(
                      {{static_cast<int>(distributed->rank), (std::filesystem::path(profile.path) / "trace.json").string()}},
                      distributed->link_bytes_per_ns));
  }
  const formats::ManifestTiming& timing = profile.manifest.timing;
  if (!timing.host_clock.empty()) {
    // Which clock the times above come from, and the simulator's own cost, measured and kept apart.
    out += fmt::format("\n== clocks ==\nhost clock: {}; device: modeled{}\n", timing.host_clock,
                       timing.functional ? "" : " (timing-only simulation: results were not computed)");
    out += fmt::format("simulated in {:.3f} s of wall time (measured, not part of any time above)\n",
                       static_cast<double>(timing.simulation_wall_ns) / 1e9);
    if (timing.not_completed + timing.earlier_steps > 0) {
      out += fmt::format("left out: {} device activities not complete at trace stop, {} launched before the trace "
                         "(call neuron::synchronize() at the end of each step)\n",
                         timing.not_completed, timing.earlier_steps);
    }
  }
  return out;
}

std::string report_summary_json(const ProfileDir& profile) {
  nlohmann::json out = fields_json(profile_fields(profile));
  if (profile.ranks().size() > 1) {
    const RankSummaries ranks = summarize_ranks(profile);
    out["ranks"] = ranks_json(profile, ranks);
    out["straggler"] = {{"rank", ranks.straggler}, {"fastest_rank", ranks.fastest},
                        {"excess_us", ranks.straggler_excess_ns / 1000}};
  }
  out["insights"] = insights_json(insights(profile));
  return out.dump(2) + "\n";
}

std::string report_json(const ProfileDir& profile) {
  nlohmann::json out;
  out["path"] = profile.path;
  out["summary"] = fields_json(profile_fields(profile));
  out["executables"] = nlohmann::json::array();
  for (const TracedExecutable& traced : profile.traced) {
    nlohmann::json entry = fields_json(summary_fields(profile, summarize_traced(profile, traced), profile.executables.size()));
    entry["name"] = traced.executable->name;
    entry["ntff"] = traced.ntff_file;
    entry["core"] = traced.trace.core;
    if (profile.ranks().size() > 1) entry["rank"] = traced.rank;
    out["executables"].push_back(std::move(entry));
  }
  const Roofline roof = roofline(profile);
  out["roofline"] = {{"device", roof.device}, {"peak_flops_per_s", roof.peak_flops_per_s},
                     {"hbm_bytes_per_s", roof.hbm_bytes_per_s}, {"ridge_point", roof.ridge_point},
                     {"roofs", roofs_json(roof)}};
  out["roofline"]["executables"] = nlohmann::json::array();
  for (const RooflinePoint& p : roof.executables) out["roofline"]["executables"].push_back(point_json(p));
  out["roofline"]["ops"] = nlohmann::json::array();
  for (const RooflinePoint& p : roof.ops) out["roofline"]["ops"].push_back(point_json(p));
  out["insights"] = insights_json(insights(profile));
  if (profile.trace) {
    out["key_averages"] = nlohmann::json::array();
    const profiler::KeyAverages averages = profiler::key_averages(*profile.trace, {.device_name = "neuron"});
    for (const auto& row : averages.rows()) {
      out["key_averages"].push_back({{"name", row.key}, {"count", row.count},
                                     {"self_cpu_time_total_us", row.self_cpu_time_total_ns / 1000.0},
                                     {"cpu_time_total_us", row.cpu_time_total_ns / 1000.0},
                                     {"self_device_time_total_us", row.self_device_time_total_ns / 1000.0},
                                     {"device_time_total_us", row.device_time_total_ns / 1000.0}});
    }
  }
  return out.dump(2) + "\n";
}

}  // namespace sightline::analysis
