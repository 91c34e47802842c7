// The profiler schedule, as torch.profiler.schedule defines it, and the state machine that a
// profile runs on every step().
//
//   auto sched = schedule({.wait = 2, .warmup = 1, .active = 1, .repeat = 1});
//   sched(0) == ProfilerAction::none;  sched(2) == ProfilerAction::warmup;
//   sched(3) == ProfilerAction::record_and_save;  sched(4) == ProfilerAction::none;
//
// The profile moves from the action of step n-1 to the action of step n and runs
// transition_actions(previous, current): prepare the trace, start it, stop it, and hand it to
// on_trace_ready. exit_actions(previous) is what stop() runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace sightline::profiler {

enum class ProfilerAction { none = 0, warmup = 1, record = 2, record_and_save = 3 };

std::string_view to_string(ProfilerAction action);

struct ScheduleOptions {
  std::int64_t wait = 0;
  std::int64_t warmup = 0;
  std::int64_t active = 1;
  std::int64_t repeat = 0;           // cycles to run; 0 cycles until the profile stops
  std::int64_t skip_first = 0;       // steps ignored before the first cycle
  std::int64_t skip_first_wait = 0;  // non-zero: the first cycle starts without its wait phase
};

using Schedule = std::function<ProfilerAction(std::int64_t step)>;

// torch.profiler.schedule. Throws sightline::Error on negative counts or active <= 0; warns on
// stderr when warmup == 0, as torch does.
Schedule schedule(const ScheduleOptions& options);

// The schedule a profile uses when given none: record every step.
Schedule default_schedule();

enum class TraceAction { prepare_trace, start_trace, stop_trace, trace_ready };

std::string_view to_string(TraceAction action);

struct Transition {
  std::vector<TraceAction> actions{};
  std::string_view warning{};  // torch's "Incorrect schedule: ..." message, empty when none
};

// What step() does when the action moves from `previous` to `current` (torch's action_map).
Transition transition_actions(ProfilerAction previous, ProfilerAction current);

// What stop() does when the last step's action was `previous`.
Transition exit_actions(ProfilerAction previous);

}  // namespace sightline::profiler
