#include "sightline/profiler/schedule.h"

#include <cstdio>

#include "sightline/error.h"

namespace sightline::profiler {

std::string_view to_string(ProfilerAction action) {
  switch (action) {
    case ProfilerAction::none: return "NONE";
    case ProfilerAction::warmup: return "WARMUP";
    case ProfilerAction::record: return "RECORD";
    case ProfilerAction::record_and_save: return "RECORD_AND_SAVE";
  }
  return "?";
}

std::string_view to_string(TraceAction action) {
  switch (action) {
    case TraceAction::prepare_trace: return "prepare_trace";
    case TraceAction::start_trace: return "start_trace";
    case TraceAction::stop_trace: return "stop_trace";
    case TraceAction::trace_ready: return "trace_ready";
  }
  return "?";
}

Schedule schedule(const ScheduleOptions& options) {
  SIGHTLINE_CHECK(options.wait >= 0 && options.warmup >= 0 && options.active > 0 && options.repeat >= 0 &&
                      options.skip_first >= 0 && options.skip_first_wait >= 0,
                  "invalid profiler schedule arguments: wait={} warmup={} active={} repeat={} skip_first={}; "
                  "wait, warmup, repeat and skip_first must be >= 0 and active > 0",
                  options.wait, options.warmup, options.active, options.repeat, options.skip_first);
  if (options.warmup == 0) {
    std::fprintf(stderr,
                 "sightline profiler warning: profiler won't be using warmup, this can skew "
                 "profiler results\n");
  }
  return [options](std::int64_t step) {
    if (step < options.skip_first) return ProfilerAction::none;
    step -= options.skip_first;
    if (options.skip_first_wait != 0) step += options.wait;
    const std::int64_t cycle = options.wait + options.warmup + options.active;
    if (options.repeat > 0 && step / cycle >= options.repeat) return ProfilerAction::none;
    const std::int64_t in_cycle = step % cycle;
    if (in_cycle < options.wait) return ProfilerAction::none;
    if (in_cycle < options.wait + options.warmup) return ProfilerAction::warmup;
    if (in_cycle < cycle - 1) return ProfilerAction::record;
    return ProfilerAction::record_and_save;
  };
}

Schedule default_schedule() {
  return [](std::int64_t) { return ProfilerAction::record; };
}

Transition transition_actions(ProfilerAction previous, ProfilerAction current) {
  using A = ProfilerAction;
  using T = TraceAction;
  const bool current_records = current == A::record || current == A::record_and_save;
  switch (previous) {
    case A::none:
      if (current == A::warmup) return {{T::prepare_trace}, {}};
      if (current_records) return {{T::prepare_trace, T::start_trace}, {}};
      return {};
    case A::warmup:
      if (current == A::none) {
        return {{T::start_trace, T::stop_trace}, "Incorrect schedule: WARMUP followed by NONE"};
      }
      if (current_records) return {{T::start_trace}, {}};
      return {};
    case A::record:
      if (current == A::none) return {{T::stop_trace}, "Incorrect schedule: RECORD followed by NONE"};
      if (current == A::warmup) return {{T::stop_trace}, "Incorrect schedule: RECORD followed by WARMUP"};
      return {};
    case A::record_and_save:
      if (current == A::none) return {{T::stop_trace, T::trace_ready}, {}};
      if (current == A::warmup) return {{T::stop_trace, T::trace_ready, T::prepare_trace}, {}};
      return {{T::stop_trace, T::trace_ready, T::prepare_trace, T::start_trace}, {}};
  }
  return {};
}

Transition exit_actions(ProfilerAction previous) {
  using T = TraceAction;
  switch (previous) {
    case ProfilerAction::none: return {};
    case ProfilerAction::warmup: return {{T::start_trace, T::stop_trace}, {}};
    case ProfilerAction::record:
    case ProfilerAction::record_and_save: return {{T::stop_trace, T::trace_ready}, {}};
  }
  return {};
}

}  // namespace sightline::profiler
