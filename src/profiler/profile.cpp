#include "sightline/profiler/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "profiler/chrome_trace.h"
#include "profiler/memory_observer.h"
#include "profiler/op_observer.h"
#include "profiler/stack.h"
#include "sightline/error.h"

namespace sightline::profiler {
namespace {

std::atomic<const profile*> g_running_profile{nullptr};

bool wants(const std::vector<ProfilerActivity>& activities, ProfilerActivity activity) {
  return std::find(activities.begin(), activities.end(), activity) != activities.end();
}

std::int64_t wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void warn(std::string_view message) {
  std::fprintf(stderr, "sightline profiler warning: %.*s\n", int(message.size()), message.data());
}

}  // namespace

profile::profile(ProfileOptions options) : options_(std::move(options)) {
  SIGHTLINE_CHECK(
      !options_.activities.empty(),
      "a profile needs at least one activity: ProfilerActivity::CPU and/or ProfilerActivity::PrivateUse1");
  record_steps_ = static_cast<bool>(options_.schedule);
  schedule_ = record_steps_ ? options_.schedule : default_schedule();
}

profile::~profile() {
  if (!running_) return;
  try {
    stop();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sightline profiler: error while stopping a profile in its destructor: %s\n",
                 error.what());
  }
}

void profile::start() {
  SIGHTLINE_CHECK(!running_,
                  "profile.start() called on a profile that is already running; call stop() first");
  const profile* expected = nullptr;
  SIGHTLINE_CHECK(g_running_profile.compare_exchange_strong(expected, this),
                  "another profile is already running; stop it before starting a new one");
  running_ = true;
  try {
    step_num_ = 0;
    current_action_ = schedule_(step_num_);
    run(transition_actions(ProfilerAction::none, current_action_));
    open_step_marker();
  } catch (...) {
    running_ = false;
    g_running_profile.store(nullptr);
    throw;
  }
}

void profile::step() {
  SIGHTLINE_CHECK(running_,
                  "profile.step() called outside a running profile; call start() before step() and "
                  "stop() after the last one");
  close_step_marker();
  const ProfilerAction previous = current_action_;
  ++step_num_;
  current_action_ = schedule_(step_num_);
  run(transition_actions(previous, current_action_));
  open_step_marker();
}

void profile::stop() {
  SIGHTLINE_CHECK(running_, "profile.stop() called on a profile that is not running");
  // The session ends even when on_trace_ready throws.
  struct EndSession {
    profile* self;
    ~EndSession() {
      self->running_ = false;
      g_running_profile.store(nullptr);
    }
  } end_session{this};
  close_step_marker();
  run(exit_actions(current_action_));
}

void profile::run(const Transition& transition) {
  if (!transition.warning.empty()) warn(transition.warning);
  for (TraceAction action : transition.actions) {
    switch (action) {
      case TraceAction::prepare_trace: prepare_trace(); break;
      case TraceAction::start_trace: start_trace(); break;
      case TraceAction::stop_trace: stop_trace(); break;
      case TraceAction::trace_ready:
        if (options_.on_trace_ready) options_.on_trace_ready(*this);
        break;
    }
  }
}

ActivitySourceConfig profile::source_config() const {
  return {options_.activities, options_.experimental_config, options_.record_shapes, options_.profile_memory,
          options_.with_flops};
}

void profile::prepare_trace() {
  sources_ = create_activity_sources(source_config());
  for (auto& source : sources_) source->prepare();
}

void profile::start_trace() {
  window_start_ns_ = now_ns();
  window_wall_start_ns_ = wall_clock_ns();
  recording_start({options_.max_events, options_.record_shapes, options_.profile_memory, options_.with_stack});
  if (wants(options_.activities, ProfilerActivity::CPU)) start_op_recording({options_.with_flops});
  if (options_.profile_memory) start_memory_recording();
  tracing_ = true;
  for (auto& source : sources_) source->start();
}

void profile::stop_trace() {
  if (!tracing_) return;
  tracing_ = false;
  stop_op_recording();
  stop_memory_recording();
  recording_stop();
  for (auto& source : sources_) source->stop();
  const std::int64_t window_end_ns = now_ns();
  Collection collection = recording_collect();
  std::vector<ActivityBatch> batches;
  for (auto& source : sources_) batches.push_back(source->collect());
  sources_.clear();
  TraceWindow window{window_start_ns_, window_end_ns, window_wall_start_ns_,
                     wants(options_.activities, ProfilerActivity::CPU),
                     wants(options_.activities, ProfilerActivity::PrivateUse1), options_.profile_memory};
  trace_ = build_trace(collection, std::move(batches), window);
  for (const std::string& note : trace_->notes) warn(note);
  if (trace_->dropped > 0) {
    // Host records are capped by ProfileOptions::max_events, each activity source's events by its own
    // cap (the neuron source's NeuronConfig::max_events_per_nc, per core): name the one that was reached.
    const std::uint64_t host = collection.dropped, device = trace_->dropped - collection.dropped;
    std::string where;
    if (host > 0) where = fmt::format("{} host records (ProfileOptions::max_events = {})", host, options_.max_events);
    if (device > 0) {
      where += fmt::format("{}{} device events (the activity source's cap: NeuronConfig::max_events_per_nc)",
                           where.empty() ? "" : ", ", device);
    }
    warn(fmt::format("{} events were dropped because an event cap was reached: {}", trace_->dropped, where));
  }
}

void profile::open_step_marker() {
  if (!record_steps_ || !recording_enabled()) return;
  step_marker_ =
      record_scope_begin(EventKind::user_annotation, intern(fmt::format("ProfilerStep#{}", step_num_)));
}

void profile::close_step_marker() { record_scope_end(step_marker_); }

const CollectedTrace& profile::trace() const {
  SIGHTLINE_CHECK(trace_.has_value(),
                  "the profile has no finished trace yet: a trace completes when the schedule "
                  "leaves its active steps or when stop() is called");
  return *trace_;
}

KeyAverages profile::key_averages(bool group_by_input_shape, std::int64_t group_by_stack_n) const {
  return profiler::key_averages(trace(), {.group_by_input_shape = group_by_input_shape,
                                          .device_name = privateuse1_backend_name(),
                                          .with_flops = options_.with_flops,
                                          .group_by_stack_n = group_by_stack_n});
}

void profile::export_stacks(const std::string& path, std::string_view metric) const {
  SIGHTLINE_CHECK(options_.with_stack, "export_stacks() needs a profile recorded with with_stack=True");
  profiler::export_stacks(trace(), path, metric);
}

void profile::export_chrome_trace(const std::string& path) const {
  profiler::export_chrome_trace(trace(), path, {privateuse1_backend_name(), path});
}

record_function::record_function(std::string_view name) {
  if (!recording_enabled()) return;
  const PayloadId stack = capture_stack();
  scope_ = record_scope_begin(EventKind::user_annotation, intern(name));
  scope_.stack = stack;
}

record_function::record_function(NameId name) {
  const PayloadId stack = capture_stack();
  scope_ = record_scope_begin(EventKind::user_annotation, name);
  scope_.stack = stack;
}

}  // namespace sightline::profiler
