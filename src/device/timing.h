// The discrete-event scheduler: runs the engine streams and DMA queues of an Executable in modeled time.
//
// Each stream issues its instructions in order; an instruction issues when its stream is idle and all its
// semaphore waits hold, and its updates apply when it completes. Compute instructions take the time the
// cost model gives. A DMA transfer first pays the fixed cost, then moves its bytes at the queue bandwidth;
// transfers in their data phase that touch HBM share the core's HBM bandwidth equally, and the rates are
// recomputed whenever a transfer starts or ends (a fluid model). Ties are broken by stream order, so the
// schedule is deterministic.
#pragma once

#include <functional>

#include "device/core.h"

namespace sightline::device {

// Called when an instruction issues, before time advances; may throw to abort the run.
using IssueCallback = std::function<void(const Instruction&, Engine, uint32_t queue, uint32_t index)>;

// Throws sightline::Error on a deadlock (streams waiting on semaphores nothing will raise).
RunResult simulate(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record);

}  // namespace sightline::device
