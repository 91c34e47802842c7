// What the collectives of a profile cost, per core and across ranks: read from the device lanes of
// trace.json (cc_running, cc_exec_barrier and nc_exec_running events; docs/analysis.md).
//
//   CollectiveSummary s = collective_summary({{0, "profiles/llama/eager/trace.json"}}, 181.0);
//   s.active_ns;               // cc_running summed over the cores
//   s.bus_bytes_per_ns;        // achieved bus bandwidth, against s.link_bytes_per_ns
//   s.lanes[i].wait_ns;        // how long core i waited for its slowest peer
//
// A lane is one core of one rank. A collective is matched across lanes by its id (each trace numbers
// its collectives from 1 in queue order; ranks that profiled the same steps agree), and a
// lane's arrival is when it was ready for it (the start of its barrier, else of the collective). In
// one process the cores' waits are their barriers; across processes (a merged profile, clocks aligned
// on the collectives) the wait is estimated as the last arrival minus the lane's own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sightline::analysis {

struct CollectiveLane {
  int rank = 0;
  int core = 0;
  int collectives = 0;
  double active_ns = 0;       // cc_running
  double wait_ns = 0;         // waiting for the slowest peer (see above)
  double busy_ns = 0;         // nc_exec_running
  double span_ns = 0;         // first to last device activity of the lane
  int last_arrivals = 0;      // collectives this lane was the last to reach (a straggler)
  double late_ns = 0;         // summed lateness against the first lane to arrive
};

struct CollectiveSummary {
  int collectives = 0;             // distinct (rank group, id)
  double active_ns = 0;            // cc_running over every lane
  double wait_ns = 0;              // waits over every lane
  double collective_time_ns = 0;   // each collective's duration, once
  uint64_t bus_bytes = 0;          // each collective's bus bytes, once
  double bus_bytes_per_ns = 0;     // bus_bytes / collective_time_ns
  double link_bytes_per_ns = 0;    // the spec's link peak
  std::vector<CollectiveLane> lanes;  // by rank, then core
  bool empty() const { return collectives == 0; }
};

// `traces`: (rank, trace.json path) of each rank; a merged trace.json is one entry whose events carry
// their rank in args (sightline merge writes "rank of job"). Throws sightline::Error for unreadable files.
CollectiveSummary collective_summary(const std::vector<std::pair<int, std::string>>& traces, double link_bytes_per_ns);

// The per-lane table and the totals, as `sightline view` and `sightline merge` print them.
std::string collective_summary_text(const CollectiveSummary& s);

}  // namespace sightline::analysis
