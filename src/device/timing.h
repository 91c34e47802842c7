// The discrete-event scheduler: runs the engine streams and DMA queues of an Executable in modeled time.
//
// Each stream issues its instructions in order; an instruction issues when its stream can take it and all
// its semaphore waits hold, and its updates apply when it completes. A compute engine runs one
// instruction at a time, for the time the cost model gives. A DMA queue holds up to
// Spec::dma.transfer_slots transfers: each pays the fixed cost from its issue, and the oldest, once its
// fixed cost is paid, moves its bytes at the queue bandwidth, so the next transfer's fixed cost overlaps
// the current one's data (docs/hardware-model.md §1.4). A DMA record runs from when its transfer is the
// oldest of its queue (its issue, or the previous transfer's end) to its end: the part of the fixed cost
// the queue could not hide, then the data. Transfers moving HBM bytes share the core's HBM bandwidth
// equally, and the rates are recomputed whenever a transfer starts or ends (a fluid model). Ties are
// broken by stream order, so the schedule is deterministic.
#pragma once

#include <functional>

#include "device/core.h"

namespace sightline::device {

// Called when an instruction issues, before time advances; may throw to abort the run.
using IssueCallback = std::function<void(const Instruction&, Engine, uint32_t queue, uint32_t index)>;

// Throws sightline::Error on a deadlock (streams waiting on semaphores nothing will raise).
RunResult simulate(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record);

}  // namespace sightline::device
