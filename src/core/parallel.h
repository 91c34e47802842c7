// A small persistent thread pool, in the bottom layer because the CPU reference kernels and the
// simulator's functional model both use it. parallel_for splits [begin, end) in chunks of at least
// `grain` over the machine's cores; the calling thread takes part. Calls from inside a parallel
// region, or while another thread owns the pool, run inline (never deadlock).
#pragma once

#include <cstdint>
#include <functional>

namespace sightline {

int thread_count();
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace sightline
