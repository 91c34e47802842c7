#include "profiler/memory_observer.h"

#include <cstdint>

#include "core/memory_hook.h"
#include "sightline/profiler/record.h"
#include "sightline/tensor.h"

namespace sightline::profiler {
namespace {

void on_memory(const Storage& storage, std::int64_t bytes, std::int64_t total) {
  if (!memory_requested()) return;
  const Device device = storage.device();
  const std::int16_t index = device.is_cpu() ? std::int16_t{-1} : device.index;
  const void* identity = storage.data() != nullptr ? storage.data() : storage.backend_context();
  record_memory(index, reinterpret_cast<std::uintptr_t>(identity), bytes, total, total);
}

}  // namespace

void start_memory_recording() { set_memory_observer(&on_memory); }
void stop_memory_recording() { set_memory_observer(nullptr); }

}  // namespace sightline::profiler
