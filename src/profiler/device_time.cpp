#include "profiler/device_time.h"

#include <algorithm>
#include <tuple>

namespace sightline::profiler {

std::vector<CoreActivity> core_activity(std::vector<ExecutionSpan> executions) {
  std::stable_sort(executions.begin(), executions.end(), [](const ExecutionSpan& a, const ExecutionSpan& b) {
    return std::tie(a.rank, a.core, a.start_ns) < std::tie(b.rank, b.core, b.start_ns);
  });
  std::vector<CoreActivity> out;
  for (size_t first = 0; first < executions.size();) {
    size_t last = first;
    while (last < executions.size() && executions[last].core == executions[first].core &&
           executions[last].rank == executions[first].rank) {
      ++last;
    }
    CoreActivity c;
    c.core = executions[first].core;
    c.rank = executions[first].rank;
    c.executions = last - first;
    c.first_start_ns = executions[first].start_ns;
    int64_t busy_end = executions[first].end_ns;
    c.busy_ns = executions[first].end_ns - executions[first].start_ns;
    for (size_t i = first + 1; i < last; ++i) {
      const int64_t gap = executions[i].start_ns - busy_end;
      if (gap > 0) c.idle_ns += gap, c.largest_gap_ns = std::max(c.largest_gap_ns, gap);
      busy_end = std::max(busy_end, executions[i].end_ns);
      c.busy_ns += executions[i].end_ns - executions[i].start_ns;
    }
    c.last_end_ns = busy_end;
    out.push_back(c);
    first = last;
  }
  return out;
}

void DeviceTimeline::activity(int64_t start_ns, int64_t end_ns) {
  first_ns_ = std::min(first_ns_, start_ns);
  last_ns_ = std::max(last_ns_, end_ns);
}

void DeviceTimeline::execution(int core, int64_t start_ns, int64_t end_ns) {
  activity(start_ns, end_ns);
  executions_.push_back({core, start_ns, end_ns});
  busy_ns_ += end_ns - start_ns;
}

}  // namespace sightline::profiler
