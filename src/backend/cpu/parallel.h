// A small persistent thread pool for the CPU reference kernels. parallel_for splits [begin, end) in
// chunks of at least `grain` over the machine's cores; the calling thread takes part. Calls from
// inside a parallel region, or while another thread owns the pool, run inline (never deadlock).
#pragma once

#include <cstdint>
#include <functional>

namespace sightline::cpu {

int thread_count();
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace sightline::cpu
