#include "profiler/stack.h"

#include <atomic>
#include <string>
#include <vector>

#include "sightline/profiler/profile.h"

namespace sightline::profiler {
namespace {

std::atomic<StackProvider> g_provider{nullptr};

}  // namespace

void set_stack_provider(StackProvider provider) { g_provider.store(provider, std::memory_order_release); }

PayloadId capture_stack() noexcept {
  if (!stacks_requested()) return 0;
  const StackProvider provider = g_provider.load(std::memory_order_acquire);
  if (provider == nullptr) return 0;
  thread_local std::vector<std::string> frames;  // reused: its strings keep their capacity
  try {
    frames.clear();
    provider(frames);
    return record_stack_payload(frames);
  } catch (...) {
    return 0;
  }
}

}  // namespace sightline::profiler
