// The one definition of device busy time, device span and a core's idle gaps (docs/analysis.md),
// shared by what the live profiler reports (neuron::last_trace_summary, which the examples print)
// and what a saved profile says (analysis::device_activity behind `sightline view`, `check` and the
// Explorer's summary), so the two cannot disagree:
//   busy   the sum of the executions' durations (nc_exec_running), over every core
//   span   the first device activity's start to the last one's end, every core and kind
//   idle   per core, the gaps between consecutive executions
//
//   profiler::DeviceTimeline timeline;
//   timeline.activity(start, end);                 // any device activity (copies, switches, loads)
//   timeline.execution(core, start, end);          // an execution (also activity)
//   int64_t busy = timeline.busy_ns(), span = timeline.span_ns();
#pragma once

#include <cstdint>
#include <vector>

namespace sightline::profiler {

// One execution on its core's host timeline.
struct ExecutionSpan {
  int core = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int rank = 0;  // in a merged profile, each rank's times are on that rank's own clock
};

// What one core's executions show, in time order.
struct CoreActivity {
  int core = 0;
  int rank = 0;  // the rank the core belongs to (a merged profile has a core 0 on every rank)
  uint64_t executions = 0;
  int64_t busy_ns = 0;         // sum of the executions' durations
  int64_t first_start_ns = 0;  // host clock ns: the first execution's start
  int64_t last_end_ns = 0;     // the latest end of an execution
  // The executions' window (first start to last end): what the idle share is a share of.
  int64_t idle_ns = 0;         // gaps between consecutive executions
  int64_t largest_gap_ns = 0;
  uint64_t switches = 0;       // nc_model_switch (left 0 here: only a trace's lanes record them)
  uint64_t first_loads = 0;    // nc_first_load (likewise)

  int64_t span_ns() const { return last_end_ns - first_start_ns; }
};

// Per core (of each rank), in rank and core order: executions, busy time, first start, last end, idle gaps and the largest one.
std::vector<CoreActivity> core_activity(std::vector<ExecutionSpan> executions);

class DeviceTimeline {
 public:
  void activity(int64_t start_ns, int64_t end_ns);
  void execution(int core, int64_t start_ns, int64_t end_ns);

  const std::vector<ExecutionSpan>& executions() const { return executions_; }
  int64_t busy_ns() const { return busy_ns_; }
  int64_t span_ns() const { return first_ns_ <= last_ns_ ? last_ns_ - first_ns_ : 0; }  // 0: no activity
  std::vector<CoreActivity> cores() const { return core_activity(executions_); }

 private:
  std::vector<ExecutionSpan> executions_;
  int64_t busy_ns_ = 0;
  int64_t first_ns_ = INT64_MAX, last_ns_ = INT64_MIN;
};

}  // namespace sightline::profiler
