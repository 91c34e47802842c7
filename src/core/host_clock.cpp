#include "sightline/host_clock.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "sightline/error.h"

namespace sightline::host_clock {
namespace {

std::atomic<Mode> g_mode{Mode::modeled};
// Bumped by set_mode: a thread whose epoch differs starts its timeline anew.
std::atomic<uint32_t> g_epoch{1};
// The latest modeled time any thread has published (where a new thread's timeline starts).
std::atomic<int64_t> g_frontier{0};
std::atomic<int64_t> g_blocked_ns{0};

std::mutex g_costs_mutex;
Costs g_costs;
// Read on every op: copies that readers load without the lock.
std::atomic<int64_t> g_framework_op_ns{0};
std::atomic<double> g_copy_bytes_per_ns{0};

struct ThreadClock {
  uint32_t epoch = 0;
  int64_t modeled_ns = 0;  // modeled mode: the thread's time
  int64_t offset_ns = 0;   // measured mode: steady clock minus this is the thread's time
  int64_t frozen_ns = 0;   // measured mode, inside an Unmodeled scope: the time the clock stands at
  int unmodeled_depth = 0;
};
thread_local ThreadClock tls_clock;

int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void publish(int64_t t) noexcept {
  int64_t seen = g_frontier.load(std::memory_order_relaxed);
  while (seen < t && !g_frontier.compare_exchange_weak(seen, t, std::memory_order_relaxed)) {
  }
}

ThreadClock& thread_clock() noexcept {
  ThreadClock& c = tls_clock;
  const uint32_t epoch = g_epoch.load(std::memory_order_acquire);
  if (c.epoch != epoch) {
    c.epoch = epoch;
    c.modeled_ns = g_frontier.load(std::memory_order_relaxed);
    c.offset_ns = 0;
  }
  return c;
}

}  // namespace

std::string_view mode_name(Mode mode) { return mode == Mode::modeled ? "modeled" : "measured"; }

Mode parse_mode(std::string_view text) {
  if (text == "modeled") return Mode::modeled;
  if (text == "measured") return Mode::measured;
  fail("host clock '{}' is not known; use 'modeled' (host costs from the device spec, reproducible) or "
       "'measured' (this process's real host time minus simulator work)", text);
}

void set_mode(Mode mode) {
  g_mode.store(mode, std::memory_order_relaxed);
  g_frontier.store(mode == Mode::modeled ? 0 : steady_ns(), std::memory_order_relaxed);
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
}

Mode mode() { return g_mode.load(std::memory_order_relaxed); }

void set_costs(const Costs& costs) {
  SIGHTLINE_CHECK(costs.framework_op_ns >= 0 && costs.runtime_call_ns >= 0 && costs.allocation_ns >= 0 &&
                      costs.host_copy_bytes_per_ns >= 0,
                  "host costs must not be negative (framework_op_ns {}, runtime_call_ns {}, allocation_ns {}, "
                  "host_copy_bytes_per_ns {})",
                  costs.framework_op_ns, costs.runtime_call_ns, costs.allocation_ns, costs.host_copy_bytes_per_ns);
  std::lock_guard lock(g_costs_mutex);
  g_costs = costs;
  g_framework_op_ns.store(costs.framework_op_ns, std::memory_order_relaxed);
  g_copy_bytes_per_ns.store(costs.host_copy_bytes_per_ns, std::memory_order_relaxed);
}

Costs costs() {
  std::lock_guard lock(g_costs_mutex);
  return g_costs;
}

int64_t copy_ns(uint64_t bytes) noexcept {
  const double rate = g_copy_bytes_per_ns.load(std::memory_order_relaxed);
  if (rate <= 0 || bytes == 0) return 0;
  return static_cast<int64_t>(static_cast<double>(bytes) / rate + 0.5);
}

void charge_framework_op() noexcept { advance(g_framework_op_ns.load(std::memory_order_relaxed)); }

int64_t now_ns() noexcept {
  ThreadClock& c = thread_clock();
  if (g_mode.load(std::memory_order_relaxed) == Mode::modeled) return c.modeled_ns;
  // Inside an Unmodeled scope the clock stands still at the scope's start.
  if (c.unmodeled_depth > 0) return c.frozen_ns;
  return steady_ns() - c.offset_ns;
}

void advance(int64_t ns) noexcept {
  if (ns <= 0 || g_mode.load(std::memory_order_relaxed) != Mode::modeled) return;
  ThreadClock& c = thread_clock();
  c.modeled_ns += ns;
  publish(c.modeled_ns);
}

int64_t wait_until(int64_t t) noexcept {
  ThreadClock& c = thread_clock();
  if (g_mode.load(std::memory_order_relaxed) == Mode::modeled) {
    if (t <= c.modeled_ns) return 0;
    const int64_t waited = t - c.modeled_ns;
    c.modeled_ns = t;
    publish(t);
    return waited;
  }
  const int64_t now = c.unmodeled_depth > 0 ? c.frozen_ns : steady_ns() - c.offset_ns;
  if (t <= now) return 0;
  c.offset_ns -= t - now;  // jump forward: the modeled device finished after the real wait ended
  if (c.unmodeled_depth > 0) c.frozen_ns = t;
  return t - now;
}

Unmodeled::Unmodeled() noexcept {
  ThreadClock& c = thread_clock();
  outermost_ = c.unmodeled_depth++ == 0;
  if (outermost_) {
    wall_start_ns_ = steady_ns();
    c.frozen_ns = wall_start_ns_ - c.offset_ns;
  }
}

Unmodeled::~Unmodeled() {
  ThreadClock& c = thread_clock();
  --c.unmodeled_depth;
  if (!outermost_) return;
  const int64_t spent = steady_ns() - wall_start_ns_;
  c.offset_ns += spent;
  g_blocked_ns.fetch_add(spent, std::memory_order_relaxed);
}

int64_t blocked_ns() noexcept { return g_blocked_ns.load(std::memory_order_relaxed); }

int64_t wall_now_ns() noexcept { return steady_ns(); }

}  // namespace sightline::host_clock
