#include "analysis/collectives.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/merge.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot read {}: no such file (a profile directory holds trace.json)", path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", path, e.what());
  }
}

int64_t integer_arg(const json& args, const char* key, int64_t fallback) {
  auto it = args.find(key);
  return it != args.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

struct Arrival {
  double arrival_ns = 0;
  bool from_barrier = false;
};

}  // namespace

CollectiveSummary collective_summary(const std::vector<std::pair<int, std::string>>& traces, double link_bytes_per_ns) {
  CollectiveSummary s;
  s.link_bytes_per_ns = link_bytes_per_ns;
  std::map<std::pair<int, int>, CollectiveLane> lanes;
  std::map<std::pair<int, int>, std::pair<double, double>> extent;  // first start, last end
  std::map<uint64_t, std::map<std::pair<int, int>, Arrival>> arrivals;  // by collective id
  std::map<uint64_t, std::pair<double, uint64_t>> once;              // duration, bus bytes
  for (const auto& [rank, path] : traces) {
    const json root = read_json(path);
    const json& events = root.at("traceEvents");
    for (const json& e : events) {
      if (!e.is_object() || e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      if (name != "cc_running" && name != "cc_exec_barrier" && name != "nc_exec_running") continue;
      static const json kNoArgs = json::object();
      const json& args = e.contains("args") ? e["args"] : kNoArgs;
      const int core = static_cast<int>(integer_arg(args, "device", -1));
      if (core < 0) continue;
      const int64_t pid = e.value("pid", int64_t{0});
      const int job_rank = rank + static_cast<int>(pid / kMergedRankPidStride);
      const std::pair<int, int> key{job_rank, core};
      const double start = e.value("ts", 0.0) * 1e3, dur = e.value("dur", 0.0) * 1e3;
      CollectiveLane& lane = lanes[key];
      lane.rank = job_rank, lane.core = core;
      auto [it, fresh] = extent.try_emplace(key, start, start + dur);
      if (!fresh) it->second = {std::min(it->second.first, start), std::max(it->second.second, start + dur)};
      if (name == "nc_exec_running") {
        lane.busy_ns += dur;
        continue;
      }
      const auto id = static_cast<uint64_t>(integer_arg(args, "collective id", 0));
      if (id == 0) continue;
      Arrival& a = arrivals[id][key];
      if (name == "cc_exec_barrier") {
        a = {start, true};
        continue;
      }
      ++lane.collectives;
      lane.active_ns += dur;
      if (!a.from_barrier) a.arrival_ns = start;
      auto [o, first] = once.try_emplace(id, dur, static_cast<uint64_t>(integer_arg(args, "bus bytes", 0)));
      if (!first) o->second.first = std::max(o->second.first, dur);
    }
  }
  for (const auto& [id, by_lane] : arrivals) {
    double first = 1e300, last = -1e300;
    std::pair<int, int> straggler{};
    for (const auto& [key, a] : by_lane) {
      first = std::min(first, a.arrival_ns);
      if (a.arrival_ns > last) last = a.arrival_ns, straggler = key;
    }
    for (const auto& [key, a] : by_lane) {
      CollectiveLane& lane = lanes[key];
      lane.wait_ns += last - a.arrival_ns;
      lane.late_ns += a.arrival_ns - first;
    }
    if (last > first) ++lanes[straggler].last_arrivals;
  }
  for (auto& [key, lane] : lanes) {
    const auto& [first, last] = extent[key];
    lane.span_ns = last - first;
    s.active_ns += lane.active_ns;
    s.wait_ns += lane.wait_ns;
    if (lane.collectives > 0) s.lanes.push_back(lane);
  }
  s.collectives = static_cast<int>(once.size());
  for (const auto& [id, o] : once) {
    s.collective_time_ns += o.first;
    s.bus_bytes += o.second;
  }
  if (s.collective_time_ns > 0) s.bus_bytes_per_ns = static_cast<double>(s.bus_bytes) / s.collective_time_ns;
  return s;
}

std::string collective_summary_text(const CollectiveSummary& s) {
  std::string out = "== collectives ==\n";
  if (s.empty()) return out + "none: no collective ran\n";
  out += fmt::format("collectives: {} (ring), {:.1f} us each on average; active {:.1f} us over {} cores (cc_running); "
                     "waiting for peers {:.1f} us\n",
                     s.collectives, s.collective_time_ns / 1e3 / s.collectives, s.active_ns / 1e3, s.lanes.size(),
                     s.wait_ns / 1e3);
  out += fmt::format("achieved bus bandwidth: {:.1f} GB/s of the {:.1f} GB/s link peak ({:.1f}%)\n",
                     s.bus_bytes_per_ns, s.link_bytes_per_ns,
                     s.link_bytes_per_ns > 0 ? 100 * s.bus_bytes_per_ns / s.link_bytes_per_ns : 0.0);
  out += fmt::format("  {:>4} {:>4} {:>11} {:>10} {:>10} {:>10} {:>11} {:>13} {:>10}\n", "rank", "core", "collectives",
                     "active us", "wait us", "busy us", "span us", "last arrivals", "late us");
  for (const CollectiveLane& l : s.lanes) {
    out += fmt::format("  {:>4} {:>4} {:>11} {:>10.1f} {:>10.1f} {:>10.1f} {:>11.1f} {:>13} {:>10.1f}\n", l.rank, l.core,
                       l.collectives, l.active_ns / 1e3, l.wait_ns / 1e3, l.busy_ns / 1e3, l.span_ns / 1e3,
                       l.last_arrivals, l.late_ns / 1e3);
  }
  const CollectiveLane* straggler = nullptr;
  for (const CollectiveLane& l : s.lanes) {
    if (l.last_arrivals > 0 && (!straggler || l.last_arrivals > straggler->last_arrivals)) straggler = &l;
  }
  if (straggler) {
    out += fmt::format("straggler: rank {} core {} reached {} of {} collectives last\n", straggler->rank,
                       straggler->core, straggler->last_arrivals, s.collectives);
  }
  return out;
}

}  // namespace sightline::analysis
