// core/host_clock: the host timeline every layer reads its timestamps from.
//
//   host_clock::set_mode(host_clock::Mode::modeled);       // the default
//   const int64_t t0 = host_clock::now_ns();
//   host_clock::advance(host_clock::costs().framework_op_ns);   // one framework op's host cost
//   host_clock::wait_until(device_done_ns);                 // the host blocks on the device
//   { host_clock::Unmodeled sim; simulate(); }              // simulator work: never host time
//
// The one rule of time (docs/architecture.md): nothing the simulator does in wall time appears in
// modeled time. Two modes:
//
// - modeled (default): each host thread has its own timeline, which moves only by explicit costs
//   (advance: framework dispatch, runtime calls, copy setup, all from the device spec's `host`
//   section) and by waits for modeled device completion (wait_until). Wall time never enters it, so a
//   profile is the same bit for bit on a loaded and an idle machine. A thread starts at the latest
//   time any thread had published when it first reads the clock (deterministic for one host thread,
//   and for threads started at points the program orders).
// - measured: the process's steady clock minus the time this thread spent inside Unmodeled scopes
//   (waiting for the simulator's worker, building simulated memory), plus the forward jumps of
//   wait_until when the modeled device finishes after the host's real wait. For profiling the
//   runtime itself.
//
// Both modes are monotonic per thread. The clock knows no device: whoever owns a spec installs the
// host costs (the neuron backend does, from its spec).
#pragma once

#include <cstdint>
#include <string_view>

namespace sightline::host_clock {

enum class Mode : uint8_t { modeled, measured };
std::string_view mode_name(Mode mode);  // "modeled", "measured"
// Parses "modeled" / "measured"; throws sightline::Error naming the accepted values otherwise.
Mode parse_mode(std::string_view text);

// Process-wide. Switching mode resets every thread's timeline to the new mode's origin on its next
// read, so switch between profiles, not inside one.
void set_mode(Mode mode);
Mode mode();

// Host costs of the modeled clock, in ns (the device spec's `host` section, each with its source).
struct Costs {
  int64_t framework_op_ns = 0;       // one dispatched framework op (aten::*): dispatch and shape logic
  int64_t runtime_call_ns = 0;       // one runtime API call that queues work (execute, write, read, load)
  int64_t allocation_ns = 0;         // one device allocation (nrt_dma_mem_alloc)
  double host_copy_bytes_per_ns = 0; // host memory copies: staging a host-to-device write, CPU kernels
};
void set_costs(const Costs& costs);
Costs costs();

// Modeled time of `bytes` copied by the host at host_copy_bytes_per_ns (0 when no rate is set).
int64_t copy_ns(uint64_t bytes) noexcept;
// advance() by one framework op's cost (the dispatcher calls it for every op; lock-free).
void charge_framework_op() noexcept;

// This thread's host time in ns.
int64_t now_ns() noexcept;
// Host work of `ns` on this thread (modeled mode only; measured time passes by itself).
void advance(int64_t ns) noexcept;
// The host waits for something that completes at host time `t` (a modeled device completion).
// Returns how long the host waited (0 when t has passed).
int64_t wait_until(int64_t t) noexcept;

// Wall time spent inside an Unmodeled scope is not host time: in measured mode it is subtracted,
// in modeled mode it never counted. Nested scopes count once. The total is kept per process as
// the simulator's cost seen by the host (blocked_ns).
class Unmodeled {
 public:
  Unmodeled() noexcept;
  ~Unmodeled();
  Unmodeled(const Unmodeled&) = delete;
  Unmodeled& operator=(const Unmodeled&) = delete;

 private:
  int64_t wall_start_ns_ = 0;
  bool outermost_ = false;
};

// Wall time host threads spent inside Unmodeled scopes, over the whole process (measured numbers,
// reported apart from modeled time).
int64_t blocked_ns() noexcept;

// The process's steady clock in ns, for measured figures (the simulator's speed); never a timestamp
// of a profile event.
int64_t wall_now_ns() noexcept;

}  // namespace sightline::host_clock
