// Guarded allocations for tests (llama.cpp's test-backend-ops idea): when on, every cpu allocation
// gets sentinel bytes before and after it and is pre-filled with 0xFF (a NaN pattern), and the
// sentinels are checked when the storage is released. A kernel that writes out of bounds is counted
// as a violation; one that leaves part of its output unwritten shows up as NaNs.
#pragma once

#include <cstdint>

namespace sightline::cpu {

void set_guarded_allocations(bool on);
uint64_t guard_violations();

}  // namespace sightline::cpu
