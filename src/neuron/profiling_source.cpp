// The neuron activity source: arms the runtime's capture for a trace and turns what the runtime
// recorded into profiler events (see profiling.h).
#include <algorithm>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "sightline/host_clock.h"
#include "formats/neff.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "profiler/device_time.h"
#include "profiler/lane_names.h"
#include "sightline/error.h"

namespace sightline::neuron {
namespace {

std::mutex g_capture_mutex;
std::shared_ptr<const NeuronCapture> g_last_capture;

// Ids of runtime calls and the device work they launched: one per (core, sequence number), in a
// range the profiler's own correlation ids (a counter from 1) never reach.
uint64_t launch_id(int core, uint64_t seq) {
  return (uint64_t{1} << 62) | (static_cast<uint64_t>(core) << 44) | seq;
}

uint64_t unique_host_id(uint64_t index) { return (uint64_t{3} << 62) | index; }

// The resource (thread) of a core's collective lane in the core's device process; 0 is its executions.
constexpr int64_t kCollectiveResource = 1;

}  // namespace

// The collective each cc_* event belongs to, by (core, sequence number).
CollectiveIndex::CollectiveIndex(const runtime::Captured& captured) {
  for (const runtime::CollectiveRecord& c : captured.collectives) {
    for (size_t r = 0; r < c.cores.size(); ++r) by_item_[{c.cores[r], c.seqs[r]}] = &c;
  }
  std::map<uint64_t, const runtime::CollectiveRecord*> kept;  // by runtime id: queue order
  for (const runtime::Event& e : captured.events) {
    if (e.kind != runtime::RuntimeEventKind::cc_running) continue;
    if (const runtime::CollectiveRecord* c = find(e.core, e.seq)) kept.emplace(c->id, c);
  }
  for (const auto& [id, c] : kept) {
    kept_.push_back(c);
    number_[id] = kept_.size();
  }
}

uint64_t CollectiveIndex::number(const runtime::CollectiveRecord& c) const {
  auto it = number_.find(c.id);
  return it == number_.end() ? 0 : it->second;
}

const runtime::CollectiveRecord* CollectiveIndex::find(int core, uint64_t seq) const {
  auto it = by_item_.find({core, seq});
  return it == by_item_.end() ? nullptr : it->second;
}

void add_collective_args(profiler::FunctionEvent& f, const runtime::CollectiveRecord& c, uint64_t number, int core) {
  f.args.push_back({"collective", std::string(device::collective_name(c.kind))});
  f.args.push_back({"collective id", static_cast<int64_t>(number)});
  f.args.push_back({"algorithm", std::string("ring")});
  f.args.push_back({"dtype", std::string(dtype_name(c.dtype))});
  f.args.push_back({"collective bytes", static_cast<int64_t>(c.bytes)});
  f.args.push_back({"bus bytes", static_cast<int64_t>(c.bus_bytes)});
  f.args.push_back({"group size", static_cast<int64_t>(c.cores.size())});
  for (size_t r = 0; r < c.cores.size(); ++r) {
    if (c.cores[r] == core) f.args.push_back({"rank", static_cast<int64_t>(r)});
  }
}

namespace {

profiler::EventKind device_kind(runtime::RuntimeEventKind kind) {
  switch (kind) {
    case runtime::RuntimeEventKind::exec_running: return profiler::EventKind::device_exec;
    case runtime::RuntimeEventKind::copy_in:
    case runtime::RuntimeEventKind::copy_out: return profiler::EventKind::device_memcpy;
    default: return profiler::EventKind::device_other;
  }
}

class NeuronSource final : public profiler::ActivitySource {
 public:
  explicit NeuronSource(std::shared_ptr<const NeuronConfig> config) : config_(std::move(config)) {
    SIGHTLINE_CHECK(config_->world_size >= 1 && config_->rank >= 0 && config_->rank < config_->world_size,
                    "NeuronConfig: rank {} of world_size {} is not a rank of the job; ranks are 0..world_size - 1",
                    config_->rank, config_->world_size);
  }

  std::string_view name() const override { return "neuron"; }

  void prepare() override { runtime(); }

  void start() override {
    runtime::Runtime& rt = runtime();
    runtime::CaptureOptions cap;
    cap.enabled = true;
    cap.max_events_per_core = config_->max_events_per_nc;
    cap.instruction_trace_cores.assign(static_cast<size_t>(rt.core_count()), false);
    if (config_->has(ProfileMode::DEVICE)) {
      for (int core : parse_core_list(config_->capture_enabled_for_nc, rt.core_count())) {
        cap.instruction_trace_cores[static_cast<size_t>(core)] = true;
      }
    }
    // Everything launched before the trace is simulated before capture starts (a wall-time wait, not
    // host time), so what the trace captures never depends on the simulator's pace; what of it is
    // still running in modeled time when the trace starts is counted, never attributed to the trace.
    window_start_ns_ = runtime::now_ns();
    earlier_running_ = rt.work_in_flight_at(window_start_ns_);
    rt.drain();  // nothing from before the trace
    simulation_wall_start_ns_ = rt.simulation_wall_ns();
    host_blocked_start_ns_ = host_clock::blocked_ns();
    rt.set_capture(cap);
  }

  void stop() override {
    runtime::Runtime& rt = runtime();
    // The trace ends now in host time. The simulator may still be behind; waiting for it in wall time
    // (never host time) makes the modeled end of everything launched known, so that what had not
    // completed by the end is left out the same way on every machine.
    window_end_ns_ = runtime::now_ns();
    rt.wait_simulated();
    rt.set_capture({});
    simulation_wall_ns_ = rt.simulation_wall_ns() - simulation_wall_start_ns_;
    host_blocked_ns_ = host_clock::blocked_ns() - host_blocked_start_ns_;
  }

  profiler::ActivityBatch collect() override {
    runtime::Runtime& rt = runtime();
    auto capture = std::make_shared<NeuronCapture>();
    capture->config = config_;
    capture->captured = rt.drain();
    capture->window_start_ns = window_start_ns_;
    capture->window_end_ns = window_end_ns_;
    capture->simulation_wall_ns = simulation_wall_ns_;
    capture->host_blocked_wall_ns = host_blocked_ns_;
    capture->host_clock = std::string(host_clock::mode_name(host_clock::mode()));
    capture->functional = rt.functional();
    keep_the_window(*capture);
    capture->earlier_steps += earlier_running_;
    profiler::ActivityBatch batch = to_batch(*capture);
    const std::string backend = "neuron";
    if (capture->not_completed > 0) {
      batch.notes.push_back(fmt::format(
          "{} {} device activities launched in the trace had not completed when it stopped; they are not in the "
          "table or the trace. Call neuron::synchronize() before prof.step() or prof.stop() to include them",
          capture->not_completed, backend));
    }
    if (capture->earlier_steps > 0) {
      batch.notes.push_back(fmt::format(
          "{} {} device activities launched before the trace started (skipped or warmup steps) were still "
          "running when it started; they are not attributed to the profiled steps and are left out. Call "
          "neuron::synchronize() at the end of each step to keep steps apart",
          capture->earlier_steps, backend));
    }
    std::lock_guard lock(g_capture_mutex);
    g_last_capture = std::move(capture);
    return batch;
  }

 private:
  // Keeps what the trace can honestly show: device activities launched by a runtime call inside the
  // trace that completed (in modeled time) by its end. Anything else is counted, not shown.
  static void keep_the_window(NeuronCapture& capture) {
    auto key = [](int core, uint64_t seq) { return (static_cast<uint64_t>(core) << 48) | seq; };
    std::unordered_set<uint64_t> launched;
    for (const runtime::Event& e : capture.captured.events) {
      if (e.kind == runtime::RuntimeEventKind::execute_schedule || e.kind == runtime::RuntimeEventKind::tensor_write ||
          e.kind == runtime::RuntimeEventKind::tensor_read || e.kind == runtime::RuntimeEventKind::cc_schedule) {
        launched.insert(key(e.core, e.seq));
      }
    }
    std::unordered_set<uint64_t> left_out;
    std::vector<runtime::Event> kept;
    kept.reserve(capture.captured.events.size());
    for (const runtime::Event& e : capture.captured.events) {
      if (runtime::runtime_event_is_device(e.kind)) {
        const bool counted = e.kind == runtime::RuntimeEventKind::exec_running || e.kind == runtime::RuntimeEventKind::copy_in ||
                             e.kind == runtime::RuntimeEventKind::copy_out || e.kind == runtime::RuntimeEventKind::cc_running;
        if (!launched.contains(key(e.core, e.seq))) {
          capture.earlier_steps += counted ? 1 : 0;
          left_out.insert(key(e.core, e.seq));
          continue;
        }
        if (e.end_ns > capture.window_end_ns) {
          capture.not_completed += counted ? 1 : 0;
          left_out.insert(key(e.core, e.seq));
          continue;
        }
      }
      kept.push_back(e);
    }
    capture.captured.events = std::move(kept);
    std::erase_if(capture.captured.traces,
                  [&](const runtime::ExecutionTrace& t) { return left_out.contains(key(t.core, t.seq)); });
  }

  profiler::ActivityBatch to_batch(const NeuronCapture& capture) const {
    runtime::Runtime& rt = runtime();
    profiler::ActivityBatch batch;
    const bool runtime_mode = config_->has(ProfileMode::RUNTIME);
    uint64_t host_index = 0;
    std::vector<bool> core_seen(static_cast<size_t>(rt.core_count()), false);
    // An executable's file name hashes all its instructions: once per executable, not per event.
    std::unordered_map<runtime::ExecutableId, std::string> neff_names;
    std::vector<bool> collective_seen(static_cast<size_t>(rt.core_count()), false);
    const CollectiveIndex collectives(capture.captured);
    for (const runtime::Event& e : capture.captured.events) {
      const bool device = runtime::runtime_event_is_device(e.kind);
      if (!runtime_mode && !device) continue;
      // Stream-ordered frees are bookkeeping of the core's queue, not calls anyone waited for: they
      // stay in the runtime's system trace but are not profiler events.
      if (e.kind == runtime::RuntimeEventKind::free) continue;
      profiler::FunctionEvent f;
      f.name = std::string(runtime::runtime_event_name(e.kind));
      f.start_ns = e.start_ns;
      f.end_ns = std::max(e.end_ns, e.start_ns);
      f.device_index = e.core;
      f.bytes = e.bytes;
      const bool attributed =
          config_->correlate_device_time &&
          (e.kind == runtime::RuntimeEventKind::exec_running || e.kind == runtime::RuntimeEventKind::copy_in ||
           e.kind == runtime::RuntimeEventKind::copy_out || e.kind == runtime::RuntimeEventKind::cc_running || !device);
      f.external_id = attributed ? e.correlation : 0;
      if (device) {
        f.kind = device_kind(e.kind);
        f.device_type = profiler::DeviceType::privateuse1;
        const bool collective =
            e.kind == runtime::RuntimeEventKind::cc_running || e.kind == runtime::RuntimeEventKind::cc_barrier;
        f.resource = collective ? kCollectiveResource : 0;
        // The launch's flow ends on the work it launched (the execution, the copy, the collective); the
        // switch and load that precede an execution get ids of their own so the arrow skips them.
        const bool launched = e.kind == runtime::RuntimeEventKind::exec_running || e.kind == runtime::RuntimeEventKind::copy_in ||
                              e.kind == runtime::RuntimeEventKind::copy_out || e.kind == runtime::RuntimeEventKind::cc_running;
        f.id = launched ? launch_id(e.core, e.seq) : launch_id(e.core, e.seq) ^ (uint64_t{1} << 60);
        core_seen[static_cast<size_t>(e.core)] = true;
        if (collective) collective_seen[static_cast<size_t>(e.core)] = true;
      } else {
        f.kind = profiler::EventKind::runtime;
        f.device_type = profiler::DeviceType::cpu;
        f.thread = e.thread;
        f.id = e.kind == runtime::RuntimeEventKind::execute_schedule || e.kind == runtime::RuntimeEventKind::tensor_write ||
                       e.kind == runtime::RuntimeEventKind::cc_schedule
                   ? launch_id(e.core, e.seq)
                   : unique_host_id(++host_index);
      }
      f.args.push_back({"neuron core", static_cast<int64_t>(e.core)});
      if (e.seq != 0) f.args.push_back({"sequence", static_cast<int64_t>(e.seq)});
      if (e.executable != runtime::kNoExecutable) {
        const auto exe = rt.executable(e.executable);
        f.args.push_back({"executable", exe->name});
        auto [name, fresh] = neff_names.try_emplace(e.executable);
        if (fresh) name->second = formats::neff_file_name(*exe);
        f.args.push_back({"neff", name->second});
      }
      if (const runtime::CollectiveRecord* c = collectives.find(e.core, e.seq)) {
        add_collective_args(f, *c, collectives.number(*c), e.core);
      }
      batch.events.push_back(std::move(f));
    }
    for (size_t core = 0; core < core_seen.size(); ++core) {
      if (!core_seen[core]) continue;
      const int c = static_cast<int>(core);
      batch.devices.push_back({c, profiler::hardware_lane_name("neuron", c), fmt::format("neuron:{}", c),
                               5'000'000 + c});
      batch.resources.push_back({c, 0, profiler::hardware_lane_name("neuron", c), 0});
      if (collective_seen[core]) {
        batch.resources.push_back({c, kCollectiveResource, profiler::collective_lane_name("neuron", c), kCollectiveResource});
      }
    }
    // distributedInfo: a process that ran collectives or is one rank of several says which it is; others
    // keep Kineto's default for a process that is not distributed.
    if (!collectives.kept().empty() || config_->world_size > 1) {
      batch.distributed = profiler::DistributedInfo{"neuron", config_->rank, config_->world_size};
    }
    for (uint64_t d : capture.captured.dropped_events_per_core) batch.dropped += d;
    for (uint64_t d : capture.captured.dropped_traces_per_core) batch.dropped += d;
    return batch;
  }

  std::shared_ptr<const NeuronConfig> config_;
  int64_t window_start_ns_ = 0;
  int64_t window_end_ns_ = 0;
  uint64_t earlier_running_ = 0;
  int64_t simulation_wall_start_ns_ = 0;
  int64_t simulation_wall_ns_ = 0;
  int64_t host_blocked_start_ns_ = 0;
  int64_t host_blocked_ns_ = 0;
};

}  // namespace

std::string_view profile_mode_name(ProfileMode mode) { return mode == ProfileMode::DEVICE ? "DEVICE" : "RUNTIME"; }

bool NeuronConfig::has(ProfileMode mode) const { return std::find(modes.begin(), modes.end(), mode) != modes.end(); }

std::vector<int> parse_core_list(std::string_view text, int core_count) {
  std::vector<int> cores;
  auto bad = [&](std::string_view why) {
    fail("capture_enabled_for_nc '{}' is invalid: {}; write core indices and ranges such as \"0,1,2-5\" (cores "
         "0..{} exist)", text, why, core_count - 1);
  };
  auto number = [&](std::string_view s) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string_view::npos) {
      bad(fmt::format("'{}' is not a core index", s));
    }
    const int v = std::stoi(std::string(s));
    if (v >= core_count) bad(fmt::format("core {} does not exist", v));
    return v;
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = text.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      cores.push_back(number(item));
    } else {
      const int lo = number(item.substr(0, dash)), hi = number(item.substr(dash + 1));
      if (lo > hi) bad(fmt::format("range {}-{} is backwards", lo, hi));
      for (int c = lo; c <= hi; ++c) cores.push_back(c);
    }
    pos = comma + 1;
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  return cores;
}

std::shared_ptr<const NeuronCapture> last_capture() {
  std::lock_guard lock(g_capture_mutex);
  return g_last_capture;
}

TraceSummary last_trace_summary() {
  const std::shared_ptr<const NeuronCapture> capture = last_capture();
  SIGHTLINE_CHECK(capture != nullptr,
                  "neuron::last_trace_summary: no trace has captured neuron activity yet; profile with "
                  "ProfilerActivity::PrivateUse1 (the default) and let a trace finish first");
  TraceSummary s;
  // Busy and span by the one definition a saved profile's are computed with (analysis/summary).
  profiler::DeviceTimeline timeline;
  const CollectiveIndex collectives(capture->captured);
  std::set<uint64_t> ids;
  for (const runtime::Event& e : capture->captured.events) {
    if (!runtime::runtime_event_is_device(e.kind)) continue;
    if (e.kind == runtime::RuntimeEventKind::exec_running) {
      timeline.execution(static_cast<int>(e.core), e.start_ns, e.end_ns);
    } else {
      timeline.activity(e.start_ns, e.end_ns);
    }
    const double us = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    switch (e.kind) {
      case runtime::RuntimeEventKind::exec_running:
        ++s.executions;
        s.hbm_mb += static_cast<double>(e.bytes) / 1e6;
        break;
      case runtime::RuntimeEventKind::copy_in: ++s.copies_in; break;
      case runtime::RuntimeEventKind::cc_running: {
        s.collective_us += us;
        if (const runtime::CollectiveRecord* c = collectives.find(e.core, e.seq)) ids.insert(c->id);  // kept ones
        break;
      }
      case runtime::RuntimeEventKind::cc_barrier: s.collective_wait_us += us; break;
      case runtime::RuntimeEventKind::model_switch:
      case runtime::RuntimeEventKind::first_load: s.overhead_us += us; break;
      default: break;
    }
  }
  s.busy_us = static_cast<double>(timeline.busy_ns()) / 1e3;
  s.span_us = static_cast<double>(timeline.span_ns()) / 1e3;
  s.collectives = static_cast<int>(ids.size());
  s.not_completed = capture->not_completed;
  s.earlier_steps = capture->earlier_steps;
  s.simulation_ms = static_cast<double>(capture->simulation_wall_ns) / 1e6;
  s.host_clock = capture->host_clock;
  return s;
}

void register_profiling() {
  static const bool registered = [] {
    profiler::rename_privateuse1_backend("neuron");
    profiler::register_activity_source(
        {"neuron", profiler::ProfilerActivity::PrivateUse1, [](const profiler::ActivitySourceConfig& config) {
           auto neuron_config = std::dynamic_pointer_cast<const NeuronConfig>(config.experimental_config);
           if (!neuron_config) neuron_config = std::make_shared<NeuronConfig>();
           return std::make_unique<NeuronSource>(std::move(neuron_config));
         }});
    return true;
  }();
  (void)registered;
}

}  // namespace sightline::neuron
