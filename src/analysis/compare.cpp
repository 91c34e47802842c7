#include "analysis/compare.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/summary.h"
#include "sightline/profiler/key_averages.h"

namespace sightline::analysis {
namespace {

struct Side {
  double time_ns = 0;
  int64_t count = 0;
};
using Sides = std::map<std::string, std::pair<Side, Side>>;
using Order = std::vector<std::string>;  // first appearance, A before B

void note(Sides& sides, Order& order, const std::string& name, bool in_b, double time_ns, int64_t count) {
  auto [it, inserted] = sides.try_emplace(name);
  if (inserted) order.push_back(name);
  Side& side = in_b ? it->second.second : it->second.first;
  side.time_ns += time_ns;
  side.count += count;
}

void executables(const ProfileDir& profile, bool in_b, Sides& sides, Order& order) {
  for (const TracedExecutable& traced : profile.traced) {
    double time = 0;
    for (const formats::NtffExecution& e : traced.trace.executions) time += e.duration_ns;
    note(sides, order, traced.executable->name, in_b, time, static_cast<int64_t>(traced.trace.executions.size()));
  }
}

void ops(const ProfileDir& profile, bool in_b, Sides& sides, Order& order) {
  if (!profile.trace) return;
  const auto averages = profiler::key_averages(*profile.trace, {.device_name = "neuron"});
  for (const profiler::FunctionEventAvg& row : averages.rows()) {
    if (row.device_type != profiler::DeviceType::cpu || row.self_device_time_total_ns == 0) continue;
    note(sides, order, row.key, in_b, double(row.self_device_time_total_ns), row.count);
  }
}

void engines(const Summary& summary, bool in_b, Sides& sides, Order& order) {
  for (int e = 0; e < device::kEngineCount; ++e) {
    note(sides, order, std::string(device::engine_name(static_cast<device::Engine>(e))), in_b,
         summary.engines[e].active_ns, static_cast<int64_t>(summary.engines[e].instruction_count));
  }
}

void append(std::vector<Delta>& out, const char* kind, const Sides& sides, const Order& order) {
  for (const std::string& name : order) {
    const auto& [a, b] = sides.at(name);
    Delta d{.kind = kind, .name = name, .time_a_ns = a.time_ns, .time_b_ns = b.time_ns, .count_a = a.count,
            .count_b = b.count};
    d.status = b.count == 0 && a.count > 0 ? DeltaStatus::removed
               : a.count == 0 && b.count > 0 ? DeltaStatus::added
                                             : DeltaStatus::changed;
    out.push_back(std::move(d));
  }
}

int rank_class(const Delta& d) {
  if (d.kind == std::string_view("executable") && d.status == DeltaStatus::removed) return 0;
  if (d.kind == std::string_view("executable") && d.status == DeltaStatus::added) return 1;
  return 2;
}

}  // namespace

std::string_view delta_status_name(DeltaStatus status) {
  switch (status) {
    case DeltaStatus::removed: return "removed";
    case DeltaStatus::added: return "added";
    case DeltaStatus::changed: return "changed";
  }
  return "changed";
}

Comparison compare(const ProfileDir& a, const ProfileDir& b) {
  Comparison c;
  c.a = a.path;
  c.b = b.path;
  const Summary sa = summarize_profile(a), sb = summarize_profile(b);
  c.total_a_ns = sa.total_time_ns;
  c.total_b_ns = sb.total_time_ns;
  Sides exe_sides, op_sides, engine_sides;
  Order exe_order, op_order, engine_order;
  executables(a, false, exe_sides, exe_order);
  executables(b, true, exe_sides, exe_order);
  ops(a, false, op_sides, op_order);
  ops(b, true, op_sides, op_order);
  engines(sa, false, engine_sides, engine_order);
  engines(sb, true, engine_sides, engine_order);
  append(c.ranked, "executable", exe_sides, exe_order);
  append(c.ranked, "op", op_sides, op_order);
  append(c.ranked, "engine", engine_sides, engine_order);
  std::stable_sort(c.ranked.begin(), c.ranked.end(), [](const Delta& x, const Delta& y) {
    if (rank_class(x) != rank_class(y)) return rank_class(x) < rank_class(y);
    return std::abs(x.delta_ns()) > std::abs(y.delta_ns());
  });
  return c;
}

std::string compare_text(const Comparison& c) {
  std::string out = fmt::format("A: {}\nB: {}\ndevice time (sum of executions): {:.3f} us -> {:.3f} us ({})\n\n", c.a,
                                c.b, c.total_a_ns / 1000, c.total_b_ns / 1000,
                                c.total_b_ns > 0 ? fmt::format("{:.2f}x less", c.total_a_ns / c.total_b_ns) : "n/a");
  out += fmt::format("{:>4}  {:<10}  {:<40}  {:<7}  {:>8}  {:>8}  {:>13}  {:>13}  {:>13}\n", "rank", "kind", "name",
                     "status", "count A", "count B", "time A (us)", "time B (us)", "delta (us)");
  int rank = 0;
  for (const Delta& d : c.ranked) {
    out += fmt::format("{:>4}  {:<10}  {:<40}  {:<7}  {:>8}  {:>8}  {:>13.3f}  {:>13.3f}  {:>+13.3f}\n", ++rank, d.kind,
                       d.name.size() > 40 ? d.name.substr(0, 37) + "..." : d.name, delta_status_name(d.status),
                       d.count_a, d.count_b, d.time_a_ns / 1000, d.time_b_ns / 1000, d.delta_ns() / 1000);
  }
  return out;
}

std::string compare_json(const Comparison& c) {
  nlohmann::json out = {{"a", c.a}, {"b", c.b}, {"total_time_a_ns", c.total_a_ns}, {"total_time_b_ns", c.total_b_ns}};
  out["ranked"] = nlohmann::json::array();
  for (const Delta& d : c.ranked) {
    out["ranked"].push_back({{"kind", d.kind}, {"name", d.name}, {"status", delta_status_name(d.status)},
                             {"count_a", d.count_a}, {"count_b", d.count_b}, {"time_a_ns", d.time_a_ns},
                             {"time_b_ns", d.time_b_ns}, {"delta_ns", d.delta_ns()}});
  }
  return out.dump(2) + "\n";
}

}  // namespace sightline::analysis
