#include "analysis/perfetto.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "profiler/json_writer.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

using profiler::FunctionEvent;
using profiler::JsonWriter;

constexpr int64_t kHostPid = 1;
constexpr int64_t kFirstCorePid = 100;
// Tracks of a core's process: the hardware lane, then the compute engines, then the DMA queues.
constexpr int64_t kHardwareTid = 1;
constexpr int64_t kFirstEngineTid = 10;
constexpr int64_t kFirstQueueTid = 100;

int64_t core_pid(int core) { return kFirstCorePid + core; }

void metadata(JsonWriter& json, const char* name, int64_t pid, std::optional<int64_t> tid, const std::string& key,
              const std::string& text, std::optional<int64_t> number) {
  json.begin_object().plain_key("ph").plain_value("M").plain_key("name").value(name).plain_key("pid").value(pid);
  if (tid) json.plain_key("tid").value(*tid);
  json.plain_key("args").begin_object().key(key);
  if (number) {
    json.value(*number);
  } else {
    json.value(text);
  }
  json.end_object().end_object();
}

void track(JsonWriter& json, int64_t pid, int64_t tid, const std::string& name, int64_t sort_index) {
  metadata(json, "thread_name", pid, tid, "name", name, std::nullopt);
  metadata(json, "thread_sort_index", pid, tid, "sort_index", "", sort_index);
}

struct Flow {
  bool in = false, out = false;
  uint64_t id = 0;
};

void slice(JsonWriter& json, const std::string& name, const char* cat, int64_t pid, int64_t tid, int64_t start_ns,
           int64_t dur_ns, const Flow& flow) {
  json.begin_object().plain_key("ph").plain_value("X").plain_key("name").value(name).plain_key("cat").value(cat);
  json.plain_key("pid").value(pid).plain_key("tid").value(tid).plain_key("ts").fixed3(start_ns);
  json.plain_key("dur").fixed3(std::max<int64_t>(dur_ns, 0));
  if (flow.in || flow.out) {
    json.plain_key("bind_id").value(flow.id);
    if (flow.in) json.plain_key("flow_in").value(true);
    if (flow.out) json.plain_key("flow_out").value(true);
  }
  json.end_object();
}

}  // namespace

void perfetto_json_write(const ProfileDir& profile, std::ostream& out) {
  JsonWriter json([&out](std::string_view piece) { out.write(piece.data(), static_cast<std::streamsize>(piece.size())); });
  json.begin_object().plain_key("displayTimeUnit").plain_value("ns").plain_key("traceEvents").begin_array(true);
  const std::vector<FunctionEvent> no_events;
  const std::vector<FunctionEvent>& events = profile.trace ? profile.trace->events : no_events;

  // Flows: each op's chain, the op first, then its runtime calls and device work in time order, all
  // bound by the op's correlation id (a slice has one bind_id in the v2 form, so one chain per op).
  std::map<uint64_t, std::vector<const FunctionEvent*>> chains;
  for (const FunctionEvent& e : events) {
    const bool op = e.kind == profiler::EventKind::cpu_op;
    const bool downstream = e.kind == profiler::EventKind::runtime || profiler::is_device_kind(e.kind);
    if (op && e.id != 0) chains[e.id].insert(chains[e.id].begin(), &e);
    if (downstream && e.external_id != 0) chains[e.external_id].push_back(&e);
  }
  std::map<const FunctionEvent*, Flow> flows;
  for (auto& [id, chain] : chains) {
    if (chain.size() < 2 || chain.front()->kind != profiler::EventKind::cpu_op) continue;
    std::stable_sort(chain.begin() + 1, chain.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
    for (size_t k = 0; k < chain.size(); ++k) flows[chain[k]] = {k > 0, k + 1 < chain.size(), id};
  }
  const auto flow_of = [&](const FunctionEvent& e) {
    const auto it = flows.find(&e);
    return it == flows.end() ? Flow{} : it->second;
  };

  // The host: one process, a track per thread, in the trace's thread order.
  metadata(json, "process_name", kHostPid, std::nullopt, "name", "host", std::nullopt);
  metadata(json, "process_sort_index", kHostPid, std::nullopt, "sort_index", "", 0);
  std::map<int64_t, int64_t> host_tracks;  // OS thread id -> sort index
  if (profile.trace) {
    for (const profiler::HostThread& t : profile.trace->threads) {
      host_tracks.emplace(t.os_thread_id, static_cast<int64_t>(host_tracks.size()));
      track(json, kHostPid, t.os_thread_id, t.name.empty() ? fmt::format("thread {}", t.os_thread_id) : t.name,
            host_tracks.at(t.os_thread_id));
    }
  }
  for (const FunctionEvent& e : events) {
    if (profiler::is_device_kind(e.kind) || e.kind == profiler::EventKind::memory) continue;
    if (host_tracks.emplace(e.thread, static_cast<int64_t>(host_tracks.size())).second) {
      track(json, kHostPid, e.thread, fmt::format("thread {}", e.thread), host_tracks.at(e.thread));
    }
    const char* cat = e.kind == profiler::EventKind::runtime ? "runtime"
                      : e.kind == profiler::EventKind::user_annotation ? "user_annotation"
                                                                        : "cpu_op";
    slice(json, e.name, cat, kHostPid, e.thread, e.start_ns, e.duration_ns(), flow_of(e));
  }

  // The device: a process per core, its hardware track, then its engines and DMA queues.
  std::map<int, std::map<int64_t, std::string>> core_tracks;  // core -> tid -> name
  for (const FunctionEvent& e : events) {
    if (profiler::is_device_kind(e.kind)) core_tracks[e.device_index][kHardwareTid] = "hardware";
  }
  const auto in_trace = executions_in_trace(profile);
  for (const TracedExecutable& traced : profile.traced) {
    for (const formats::NtffExecution& run : traced.trace.executions) {
      if (!in_trace.contains(&run)) continue;
      for (const device::InstructionRecord& r : run.records) {
        const int64_t tid = r.engine == device::Engine::dma ? kFirstQueueTid + r.queue
                                                            : kFirstEngineTid + static_cast<int64_t>(r.engine);
        core_tracks[int(traced.trace.core)].emplace(
            tid, r.engine == device::Engine::dma ? fmt::format("DMA queue {}", r.queue)
                                                 : fmt::format("{} engine", device::engine_name(r.engine)));
      }
    }
  }
  for (const auto& [core, tracks] : core_tracks) {
    metadata(json, "process_name", core_pid(core), std::nullopt, "name", fmt::format("NeuronCore {}", core),
             std::nullopt);
    metadata(json, "process_sort_index", core_pid(core), std::nullopt, "sort_index", "", 1 + core);
    for (const auto& [tid, name] : tracks) track(json, core_pid(core), tid, name, tid);
  }
  for (const FunctionEvent& e : events) {
    if (!profiler::is_device_kind(e.kind)) continue;
    slice(json, e.name, "device", core_pid(e.device_index), kHardwareTid, e.start_ns, e.duration_ns(), flow_of(e));
  }
  // Instructions, placed on the trace's clock by their execution's nc_exec_running (device ns from its
  // start, rounded to whole ns: Chrome JSON timestamps are microseconds with three decimals).
  for (const TracedExecutable& traced : profile.traced) {
    const device::Executable& exe = *traced.executable;
    for (const formats::NtffExecution& run : traced.trace.executions) {
      const auto found = in_trace.find(&run);
      if (found == in_trace.end()) continue;
      const int64_t base = found->second->start_ns;
      for_each_record(exe, run, [&](const device::InstructionRecord& r, const device::Instruction& in) {
        const int64_t tid = r.engine == device::Engine::dma ? kFirstQueueTid + r.queue
                                                            : kFirstEngineTid + static_cast<int64_t>(r.engine);
        const int64_t start = base + std::llround(r.start_ns), end = base + std::llround(r.end_ns);
        slice(json, std::string(device::opcode_name(in.opcode)), "instruction", core_pid(int(traced.trace.core)), tid,
              start, end - start, {});
      });
    }
  }
  json.end_array().end_object();
  json.flush();
  out << "\n";
}

void perfetto_json_save(const ProfileDir& profile, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SIGHTLINE_CHECK(out.good(), "cannot write '{}'; check that its directory exists and is writable", path);
  perfetto_json_write(profile, out);
  out.close();
  SIGHTLINE_CHECK(out.good(), "cannot write '{}' (disk full?)", path);
}

}  // namespace sightline::analysis
