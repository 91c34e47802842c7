// torch.profiler.schedule and the profile's action state machine, as tables.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sightline/profiler/schedule.h"
#include "sightline/error.h"

namespace sightline::profiler {
namespace {

using A = ProfilerAction;
using T = TraceAction;

std::vector<A> actions(const Schedule& sched, int steps) {
  std::vector<A> out;
  for (int step = 0; step < steps; ++step) out.push_back(sched(step));
  return out;
}

// The worked tables of the reference (§3.1).
TEST(profiler_schedule, wait1_warmup1_active2_repeat1) {
  EXPECT_EQ(actions(schedule({.wait = 1, .warmup = 1, .active = 2, .repeat = 1}), 7),
            (std::vector<A>{A::none, A::warmup, A::record, A::record_and_save, A::none, A::none, A::none}));
}

TEST(profiler_schedule, repeat2_skip_first2) {
  EXPECT_EQ(actions(schedule({.wait = 1, .warmup = 1, .active = 2, .repeat = 2, .skip_first = 2}), 12),
            (std::vector<A>{A::none, A::none, A::none, A::warmup, A::record, A::record_and_save, A::none,
                            A::warmup, A::record, A::record_and_save, A::none, A::none}));
}

TEST(profiler_schedule, skip_first_wait) {
  EXPECT_EQ(
      actions(
          schedule({.wait = 5, .warmup = 1, .active = 1, .repeat = 1, .skip_first = 2, .skip_first_wait = 1}),
          6),
      (std::vector<A>{A::none, A::none, A::warmup, A::record_and_save, A::none, A::none}));
}

TEST(profiler_schedule, no_wait_no_warmup_repeats_forever) {
  EXPECT_EQ(actions(schedule({.wait = 0, .warmup = 0, .active = 3}), 7),
            (std::vector<A>{A::record, A::record, A::record_and_save, A::record, A::record,
                            A::record_and_save, A::record}));
}

TEST(profiler_schedule, seed_workflow_wait2_warmup1_active1) {
  EXPECT_EQ(actions(schedule({.wait = 2, .warmup = 1, .active = 1, .repeat = 1}), 6),
            (std::vector<A>{A::none, A::none, A::warmup, A::record_and_save, A::none, A::none}));
}

TEST(profiler_schedule, invalid_arguments_are_errors) {
  EXPECT_THROW(schedule({.wait = 1, .warmup = 1, .active = 0}), Error);
  EXPECT_THROW(schedule({.wait = -1, .warmup = 1, .active = 1}), Error);
  EXPECT_THROW(schedule({.wait = 1, .warmup = 1, .active = 1, .repeat = -1}), Error);
  EXPECT_THROW(schedule({.wait = 1, .warmup = 1, .active = 1, .skip_first = -2}), Error);
}

TEST(profiler_schedule, default_records_every_step) {
  EXPECT_EQ(actions(default_schedule(), 3), (std::vector<A>{A::record, A::record, A::record}));
}

struct TransitionCase {
  A previous;
  A current;
  std::vector<T> expected;
  bool warns;
};

// torch.profiler.profile.action_map, all sixteen pairs (§3.2).
TEST(profiler_schedule, transition_table_matches_torch) {
  const std::vector<TransitionCase> cases = {
      {A::none, A::none, {}, false},
      {A::none, A::warmup, {T::prepare_trace}, false},
      {A::none, A::record, {T::prepare_trace, T::start_trace}, false},
      {A::none, A::record_and_save, {T::prepare_trace, T::start_trace}, false},
      {A::warmup, A::none, {T::start_trace, T::stop_trace}, true},
      {A::warmup, A::warmup, {}, false},
      {A::warmup, A::record, {T::start_trace}, false},
      {A::warmup, A::record_and_save, {T::start_trace}, false},
      {A::record, A::none, {T::stop_trace}, true},
      {A::record, A::warmup, {T::stop_trace}, true},
      {A::record, A::record, {}, false},
      {A::record, A::record_and_save, {}, false},
      {A::record_and_save, A::none, {T::stop_trace, T::trace_ready}, false},
      {A::record_and_save, A::warmup, {T::stop_trace, T::trace_ready, T::prepare_trace}, false},
      {A::record_and_save,
       A::record,
       {T::stop_trace, T::trace_ready, T::prepare_trace, T::start_trace},
       false},
      {A::record_and_save,
       A::record_and_save,
       {T::stop_trace, T::trace_ready, T::prepare_trace, T::start_trace},
       false},
  };
  for (const TransitionCase& c : cases) {
    const Transition transition = transition_actions(c.previous, c.current);
    EXPECT_EQ(transition.actions, c.expected) << to_string(c.previous) << " -> " << to_string(c.current);
    EXPECT_EQ(!transition.warning.empty(), c.warns)
        << to_string(c.previous) << " -> " << to_string(c.current);
  }
  EXPECT_EQ(transition_actions(A::warmup, A::none).warning, "Incorrect schedule: WARMUP followed by NONE");
}

TEST(profiler_schedule, exit_table_matches_torch) {
  EXPECT_TRUE(exit_actions(A::none).actions.empty());
  EXPECT_EQ(exit_actions(A::warmup).actions, (std::vector<T>{T::start_trace, T::stop_trace}));
  EXPECT_EQ(exit_actions(A::record).actions, (std::vector<T>{T::stop_trace, T::trace_ready}));
  EXPECT_EQ(exit_actions(A::record_and_save).actions, (std::vector<T>{T::stop_trace, T::trace_ready}));
}

}  // namespace
}  // namespace sightline::profiler
