// with_stack: the call stack of the thread that records an op or a record_function scope, from the
// provider the embedding installed (set_stack_provider in sightline/profiler/profile.h).
#pragma once

#include "sightline/profiler/record.h"

namespace sightline::profiler {

// The current thread's stack stored in its side table (record_stack_payload), or 0 when the session
// does not record stacks, no provider is installed, the provider saw no frames or failed. Never
// throws: a failing provider costs the event its stack, not the event.
PayloadId capture_stack() noexcept;

}  // namespace sightline::profiler
