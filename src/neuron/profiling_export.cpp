// NeuronProfiler::export_trace: the profile output directory (docs/formats.md).
#include <filesystem>
#include <map>
#include <set>

#include "formats/manifest.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "formats/output_dir.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "profiler/chrome_trace.h"
#include "profiler/json_writer.h"
#include "sightline/error.h"

namespace sightline::neuron {
namespace {

namespace fs = std::filesystem;

// The runtime's system trace, one JSON object per event in the style of the Neuron runtime's
// system-trace events (docs/hardware-model.md §2.4), with absolute wall-clock ns timestamps.
void write_system_trace(const fs::path& path, const NeuronCapture& capture, const profiler::CollectedTrace& trace) {
  std::string text;
  {
    profiler::JsonWriter json([&](std::string_view piece) { text.append(piece); });
    json.begin_object();
    json.key("format").value("sightline-system-trace").key("version").value(1);
    json.key("events").begin_array(true);
    uint64_t id = 0;
    const int64_t offset = trace.wall_clock_at_window_start_ns - trace.window_start_ns;
    runtime::Runtime& rt = runtime();
    std::map<runtime::ExecutableId, std::string> neff_names;  // hashing an executable once, not per event
    for (const runtime::Event& e : capture.captured.events) {
      json.begin_object();
      json.key("id").value(++id);
      json.key("name").value(runtime::runtime_event_name(e.kind));
      json.key("group").value(fmt::format("{}-nc-{:03d}", runtime::runtime_event_is_device(e.kind) ? "hw" : "nrt",
                                          e.core));
      json.key("timestamp").value(e.start_ns + offset);
      json.key("duration").value(e.end_ns - e.start_ns);
      json.key("type").value(static_cast<int>(e.kind));
      json.key("nc").value(static_cast<int>(e.core));
      if (e.thread != 0) json.key("thread").value(static_cast<int64_t>(e.thread));
      if (e.correlation != 0) json.key("correlation").value(e.correlation);
      if (e.seq != 0) json.key("sequence").value(e.seq);
      if (e.bytes != 0) json.key("bytes").value(e.bytes);
      if (e.executable != runtime::kNoExecutable) {
        auto [name, fresh] = neff_names.try_emplace(e.executable);
        if (fresh) name->second = formats::neff_file_name(*rt.executable(e.executable));
        json.key("neff").value(name->second);
      }
      json.end_object();
    }
    json.end_array();
    json.end_object();
    json.flush();
  }
  formats::write_file_durably(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

uint64_t file_bytes(const fs::path& path) { return static_cast<uint64_t>(fs::file_size(path)); }

}  // namespace

NeuronProfiler::NeuronProfiler(std::shared_ptr<const NeuronConfig> config) : config_(std::move(config)) {
  SIGHTLINE_CHECK(config_ != nullptr, "NeuronProfiler needs a NeuronConfig");
  register_profiling();
}

std::function<void(profiler::profile&)> NeuronProfiler::callback() {
  return [this](profiler::profile& prof) { export_trace(prof); };
}

std::string NeuronProfiler::export_trace(profiler::profile& prof) {
  const profiler::CollectedTrace& trace = prof.trace();
  const auto capture = last_capture();
  SIGHTLINE_CHECK(capture != nullptr,
                  "NeuronProfiler::export_trace: the profile captured no neuron activity; include "
                  "ProfilerActivity::PrivateUse1 in its activities and pass the NeuronConfig as experimental_config");
  // A schedule with repeat > 1 produces several traces: the first goes to the configured directory,
  // later ones next to it with a suffix.
  const std::string dir = exports_ == 0 ? config_->profile_output_dir
                                        : fmt::format("{}_{}", config_->profile_output_dir, exports_);
  ++exports_;
  runtime::Runtime& rt = runtime();

  formats::output_dir_write(dir, [&](const fs::path& staging) {
    formats::Manifest manifest;
    manifest.created_utc = formats::manifest_now_utc();
    for (ProfileMode mode : config_->modes) manifest.modes.emplace_back(profile_mode_name(mode));
    if (config_->has(ProfileMode::DEVICE)) {
      for (int core : parse_core_list(config_->capture_enabled_for_nc, rt.core_count())) {
        manifest.captured_cores.push_back(static_cast<uint32_t>(core));
      }
    }
    manifest.device = rt.spec();

    profiler::ChromeTraceOptions options;
    options.device_name = "neuron";
    options.trace_name = dir;
    options.system_lanes = true;
    profiler::export_chrome_trace(trace, (staging / "trace.json").string(), options);
    manifest.files.push_back({formats::ManifestFileKind::trace, "trace.json", {}, {}, file_bytes(staging / "trace.json")});
    for (const profiler::FunctionEvent& e : trace.events) {
      if (e.kind == profiler::EventKind::cpu_op || e.kind == profiler::EventKind::user_annotation) {
        ++manifest.events.framework;
      } else if (e.kind == profiler::EventKind::runtime) {
        ++manifest.events.runtime;
      } else if (e.kind == profiler::EventKind::device_exec) {
        ++manifest.events.hardware;
      }
    }
    manifest.dropped.framework = trace.dropped;
    manifest.timing.host_clock = capture->host_clock;
    manifest.timing.functional = capture->functional;
    manifest.timing.simulation_wall_ns = static_cast<uint64_t>(std::max<int64_t>(capture->simulation_wall_ns, 0));
    manifest.timing.host_blocked_wall_ns = static_cast<uint64_t>(std::max<int64_t>(capture->host_blocked_wall_ns, 0));
    manifest.timing.not_completed = capture->not_completed;
    manifest.timing.earlier_steps = capture->earlier_steps;
    const CollectiveIndex collectives(capture->captured);
    if (!collectives.kept().empty() || config_->world_size > 1) {
      formats::ManifestDistributed d;
      d.rank = static_cast<uint32_t>(config_->rank);
      d.world_size = static_cast<uint32_t>(config_->world_size);
      d.collectives = collectives.kept().size();
      std::set<uint32_t> cores;
      for (const runtime::CollectiveRecord* c : collectives.kept()) {
        for (int core : c->cores) cores.insert(static_cast<uint32_t>(core));
      }
      d.collective_cores.assign(cores.begin(), cores.end());
      d.link_bytes_per_ns = rt.spec().collective.link_bytes_per_ns;
      d.step_latency_ns = rt.spec().collective.step_latency_ns;
      manifest.distributed = d;
    }

    if (config_->has(ProfileMode::RUNTIME)) {
      write_system_trace(staging / "system_trace.json", *capture, trace);
      manifest.files.push_back({formats::ManifestFileKind::system_trace, "system_trace.json", {}, {},
                                file_bytes(staging / "system_trace.json")});
    }

    // Every executable that ran gets its NEFF; every (executable, captured core) its NTFF.
    std::set<runtime::ExecutableId> ran;
    for (const runtime::Event& e : capture->captured.events) {
      if (e.kind == runtime::RuntimeEventKind::exec_running) ran.insert(e.executable);
    }
    std::map<std::pair<runtime::ExecutableId, int>, formats::NtffTrace> traces;
    for (const runtime::ExecutionTrace& t : capture->captured.traces) {
      ran.insert(t.executable);
      auto& ntff = traces[{t.executable, t.core}];
      ntff.core = static_cast<uint32_t>(t.core);
      ntff.executions.push_back({t.seq, t.correlation, t.start_ns, t.result.duration_ns, t.result.records, 0});
    }
    std::set<uint64_t> written_neffs;
    std::map<runtime::ExecutableId, uint64_t> hashes;
    for (runtime::ExecutableId id : ran) {
      const auto exe = rt.executable(id);
      const uint64_t hash = formats::neff_hash(*exe);
      hashes[id] = hash;
      if (!written_neffs.insert(hash).second) continue;
      const fs::path path = formats::neff_save(*exe, staging.string());
      manifest.files.push_back({formats::ManifestFileKind::neff, path.filename().string(), hash, {}, file_bytes(path)});
    }
    for (auto& [key, ntff] : traces) {
      const uint64_t hash = hashes.at(key.first);
      ntff.neff_hash = hash;
      manifest.events.instruction_records += ntff.record_count();
      const fs::path path = formats::ntff_save(ntff, staging.string());
      manifest.files.push_back(
          {formats::ManifestFileKind::ntff, path.filename().string(), hash, ntff.core, file_bytes(path)});
    }
    for (size_t core = 0; core < capture->captured.dropped_events_per_core.size(); ++core) {
      const uint64_t events = capture->captured.dropped_events_per_core[core];
      const uint64_t executions = capture->captured.dropped_traces_per_core[core];
      if (events || executions) manifest.dropped.per_core.push_back({static_cast<uint32_t>(core), events, executions});
    }
    // Written with every write and the flush checked (a full disk is an error, never a short manifest).
    const std::string text = formats::manifest_serialize(manifest);
    formats::write_file_durably(staging / formats::kManifestFileName,
                                std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  });
  return dir;
}

}  // namespace sightline::neuron
