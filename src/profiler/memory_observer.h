// Records every counted device-memory allocation and release as a [memory] event while a profile
// with profile_memory records. Core calls the observer (core/memory_hook.h); the profile session
// installs it, so core includes nothing of the profiler.
#pragma once

namespace sightline::profiler {

void start_memory_recording();
void stop_memory_recording();

}  // namespace sightline::profiler
