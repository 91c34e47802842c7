// Storage lifetime: the accounting behind memory_allocated() and, through the memory observer the
// profiler installs (core/memory_hook.h), the [memory] records of profile_memory. Every backend's
// allocation passes through here, so one place covers them all.
#include <array>
#include <atomic>
#include <cstdint>

#include "core/memory_hook.h"
#include "sightline/tensor.h"

namespace sightline {
namespace {

// Live bytes per (backend, device index). Backends are few and registered at start; indices beyond
// the table are not counted (memory_allocated reports 0 for them).
constexpr size_t kMaxIndices = 256;
std::array<std::atomic<int64_t>, kMaxBackends * kMaxIndices> g_allocated{};

std::atomic<int64_t>* counter(Device device) {
  if (device.backend >= kMaxBackends || device.index < 0 || static_cast<size_t>(device.index) >= kMaxIndices) {
    return nullptr;
  }
  return &g_allocated[device.backend * kMaxIndices + static_cast<size_t>(device.index)];
}

std::atomic<MemoryObserver> g_memory_observer{nullptr};

void record(const Storage& storage, int64_t bytes, int64_t total) {
  if (MemoryObserver observer = g_memory_observer.load(std::memory_order_acquire)) observer(storage, bytes, total);
}

}  // namespace

void set_memory_observer(MemoryObserver observer) noexcept {
  g_memory_observer.store(observer, std::memory_order_release);
}

Storage::Storage(Device device, size_t nbytes, void* data, Release release, void* backend_context)
    : device_(device), nbytes_(nbytes), data_(data), release_(release), context_(backend_context) {
  if (release_ == nullptr) return;  // no memory of its own (a traced proxy, a borrowed view)
  std::atomic<int64_t>* live = counter(device_);
  if (live == nullptr) return;
  counted_ = true;
  const auto bytes = static_cast<int64_t>(nbytes_);
  const int64_t total = live->fetch_add(bytes, std::memory_order_relaxed) + bytes;
  record(*this, bytes, total);
}

Storage::~Storage() {
  if (counted_) {
    const auto bytes = static_cast<int64_t>(nbytes_);
    const int64_t total = counter(device_)->fetch_sub(bytes, std::memory_order_relaxed) - bytes;
    record(*this, -bytes, total);
  }
  if (release_) release_(*this);
}

int64_t memory_allocated(Device device) {
  std::atomic<int64_t>* live = counter(device);
  return live == nullptr ? 0 : live->load(std::memory_order_relaxed);
}

}  // namespace sightline
