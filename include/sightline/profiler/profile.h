// The profiling session, shaped like torch.profiler.profile, and record_function scopes.
//
//   using namespace sightline::profiler;
//   profile prof({.activities = {ProfilerActivity::CPU, ProfilerActivity::PrivateUse1},
//                 .schedule = schedule({.wait = 2, .warmup = 1, .active = 1}),
//                 .on_trace_ready = [](profile& p) { p.export_chrome_trace("trace.json"); },
//                 .record_shapes = true});
//   prof.start();
//   for (int i = 0; i < 4; ++i) {
//     record_function scope("model_inference");
//     run_model();
//     prof.step();
//   }
//   prof.stop();
//   std::cout << prof.key_averages().table("self_privateuse1_time_total", 10);
//
// start() and step() follow torch's schedule state machine (schedule.h): the trace is started and
// stopped on the steps the schedule says, and on_trace_ready runs inside the step() that leaves a
// RECORD_AND_SAVE step, or inside stop(). With a schedule, every step is wrapped in a
// "ProfilerStep#N" annotation. The destructor stops a running profile. One profile runs at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/profiler/activity.h"
#include "sightline/profiler/events.h"
#include "sightline/profiler/key_averages.h"
#include "sightline/profiler/record.h"
#include "sightline/profiler/schedule.h"

namespace sightline::profiler {

class profile;

struct ProfileOptions {
  std::vector<ProfilerActivity> activities = {ProfilerActivity::CPU, ProfilerActivity::PrivateUse1};
  Schedule schedule{};  // empty: record from start() to stop(), without ProfilerStep markers
  std::function<void(profile&)> on_trace_ready{};
  bool record_shapes = false;
  bool profile_memory = false;
  bool with_flops = false;
  // Record the call stack of each op and record_function scope, as the installed stack provider
  // (set_stack_provider) reports it; the Python package installs one that reports Python frames.
  bool with_stack = false;
  std::shared_ptr<const ExperimentalConfig> experimental_config{};
  std::uint64_t max_events = 4'000'000;  // host records kept per trace; the rest are dropped, counted
};

class profile {
 public:
  explicit profile(ProfileOptions options = {});
  ~profile();
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;

  // Throws sightline::Error when this profile already runs or another one does.
  void start();
  // Throws sightline::Error when the profile is not running.
  void stop();
  // Ends the current step and moves the schedule on. Throws sightline::Error outside start()/stop().
  void step();

  bool running() const { return running_; }
  std::int64_t step_num() const { return step_num_; }
  ProfilerAction current_action() const { return current_action_; }
  const ProfileOptions& options() const { return options_; }

  // The last completed trace. Throws sightline::Error before any trace completed.
  const CollectedTrace& trace() const;
  // group_by_stack_n > 0 groups rows by the first n frames of their stacks too (with_stack).
  KeyAverages key_averages(bool group_by_input_shape = false, std::int64_t group_by_stack_n = 0) const;
  void export_chrome_trace(const std::string& path) const;
  // torch's export_stacks: the trace's stacks in flamegraph's collapsed format (export_stacks in
  // key_averages.h). Throws sightline::Error without with_stack or on an unknown metric.
  void export_stacks(const std::string& path, std::string_view metric = "self_cpu_time_total") const;

 private:
  void run(const Transition& transition);
  void prepare_trace();
  void start_trace();
  void stop_trace();
  void open_step_marker();
  void close_step_marker();
  ActivitySourceConfig source_config() const;

  ProfileOptions options_;
  Schedule schedule_;
  bool record_steps_ = false;
  bool running_ = false;
  bool tracing_ = false;
  std::int64_t step_num_ = 0;
  ProfilerAction current_action_ = ProfilerAction::none;
  ScopeHandle step_marker_;
  std::vector<std::unique_ptr<ActivitySource>> sources_;
  std::int64_t window_start_ns_ = 0;
  std::int64_t window_wall_start_ns_ = 0;
  std::optional<CollectedTrace> trace_;
};

// with_stack's source of call stacks. A profile recorded with with_stack calls the provider on the
// recording thread at every op and record_function scope; it appends the thread's frames, innermost
// first, each as torch.profiler writes them: "file(line): function". The Python package installs a
// provider that walks the Python frames (re-acquiring the GIL, only on threads that run Python).
// Without one, as in a plain C++ program, events carry no stack. The provider must be thread-safe
// and may throw (the event then has no stack); nullptr removes it.
using StackProvider = void (*)(std::vector<std::string>& frames);
void set_stack_provider(StackProvider provider);

// A named user scope (torch.profiler.record_function): shows as a user_annotation event and a row
// in key_averages, and is the correlation parent of the work launched inside it.
class record_function {
 public:
  // Interns the name only when a profile is recording; in hot loops prefer the NameId overload.
  explicit record_function(std::string_view name);
  explicit record_function(NameId name);
  ~record_function() { record_scope_end(scope_); }
  record_function(const record_function&) = delete;
  record_function& operator=(const record_function&) = delete;

 private:
  ScopeHandle scope_;
};

}  // namespace sightline::profiler
