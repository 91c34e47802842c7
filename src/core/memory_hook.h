// The one place the profiler hears of device memory: every counted Storage allocation and release
// (core/storage.cpp) calls the installed observer, so core needs nothing from the layers above it.
// The profiler installs its observer while a profile records (profiler/op_observer.cpp); with none
// installed an allocation pays one relaxed atomic load.
#pragma once

#include <cstdint>

namespace sightline {

class Storage;

// `bytes` > 0 for an allocation, < 0 for a release; `total` is the device's live bytes after it.
using MemoryObserver = void (*)(const Storage& storage, std::int64_t bytes, std::int64_t total);

// Installs (or, with nullptr, removes) the observer.
void set_memory_observer(MemoryObserver observer) noexcept;

}  // namespace sightline
