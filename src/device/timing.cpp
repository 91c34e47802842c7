#include "device/timing.h"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "device/cost_model.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// A DMA transfer a queue holds: issued, paying its fixed cost until `data_at`, then (at the head of
// its queue) moving its bytes.
struct Transfer {
  size_t index = 0;      // position in the queue's stream
  double data_at = 0;    // when its fixed cost is paid and it may start moving
  bool moving = false;
  bool hbm = false;
  double remaining = 0;  // bytes left to move
  double rate = 0;       // bytes per ns at the current sharing
  double head_since = 0;  // when it became the oldest transfer of its queue: its record's start
  size_t record = 0;      // index of its record
};

struct StreamState {
  const std::vector<Instruction>* instructions = nullptr;
  Engine engine = Engine::dma;
  uint32_t queue = 0;
  size_t next = 0;  // index of the next instruction to issue
  double ready_at = 0;  // when the stream could take its next instruction (a compute engine or a queue slot freed)
  double projected = kNever;  // its next event as of the last event-time computation
  // Compute engines: the running instruction.
  bool busy = false;
  double end_at = kNever;
  double started_at = 0;
  size_t record = 0;
  // DMA queues: the transfers it holds, oldest first; only the oldest moves bytes.
  std::vector<Transfer> transfers;

  bool is_dma() const { return engine == Engine::dma; }
  bool idle() const { return is_dma() ? transfers.empty() : !busy; }
  bool done() const { return idle() && next >= instructions->size(); }
  const Instruction& current() const { return (*instructions)[next]; }
};

class Scheduler {
 public:
  Scheduler(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record)
      : exe_(exe), spec_(spec), on_issue_(on_issue), record_(record), semaphores_(exe.semaphore_count, 0),
        slots_(std::max<uint32_t>(1, spec.dma.transfer_slots)) {
    for (int e = 0; e < kComputeEngineCount; ++e) add_stream(exe.engines[e], static_cast<Engine>(e), 0);
    for (size_t q = 0; q < exe.dma_queues.size(); ++q) {
      add_stream(exe.dma_queues[q], Engine::dma, static_cast<uint32_t>(q));
    }
    result_.instructions = exe.instruction_count();
    if (record_) result_.records.reserve(result_.instructions);
  }

  RunResult run() {
    for (;;) {
      issue_ready();
      const double t = next_event_time();
      if (t == kNever) break;
      advance(t);
      complete_due(t);
    }
    for (const auto& s : streams_) {
      if (!s.done()) deadlock();
    }
    result_.duration_ns = now_;
    result_.cycles = spec_.ns_to_cycles(now_);
    return std::move(result_);
  }

 private:
  void add_stream(const std::vector<Instruction>& instrs, Engine engine, uint32_t queue) {
    StreamState s;
    s.instructions = &instrs;
    s.engine = engine;
    s.queue = queue;
    if (engine == Engine::dma) s.transfers.reserve(slots_);
    streams_.push_back(std::move(s));
  }

  bool waits_hold(const Instruction& in) const {
    for (const auto& w : in.waits) {
      if (semaphores_[w.semaphore] < static_cast<int64_t>(w.value)) return false;
    }
    return true;
  }

  bool can_take(const StreamState& s) const {
    return s.is_dma() ? s.transfers.size() < slots_ : !s.busy;
  }

  void issue_ready() {
    bool dma_changed = false;
    for (auto& s : streams_) {
      while (can_take(s) && s.next < s.instructions->size() && waits_hold(s.current())) {
        const Instruction& in = s.current();
        on_issue_(in, s.engine, s.queue, static_cast<uint32_t>(s.next));
        // The instruction's traffic, once: its record's bytes and the run's HBM total (a sum of
        // integers, the same whether added at issue or at completion).
        const Traffic traffic = instruction_traffic(in);
        result_.hbm_bytes += traffic.hbm_read + traffic.hbm_written;
        const size_t record = record_ ? start_record(s, in, traffic) : 0;
        if (s.is_dma()) {
          Transfer t;
          t.index = s.next;
          t.data_at = now_ + spec_.dma.fixed_cost_ns;
          t.hbm = dma_touches_hbm(in);
          t.remaining = static_cast<double>(dma_transfer_bytes(in));
          t.record = record;
          t.head_since = now_;  // only read once it is the oldest
          s.transfers.push_back(t);
          dma_changed |= start_moving(s);
        } else {
          s.busy = true;
          s.started_at = now_;
          s.end_at = now_ + compute_instruction_ns(spec_, in);
          s.record = record;
        }
        ++s.next;
        s.ready_at = now_;  // a queue with a free slot takes its next transfer at once
      }
    }
    if (dma_changed) share_bandwidth();
  }

  // The queue's oldest transfer starts moving once its fixed cost is paid. Returns whether it started.
  bool start_moving(StreamState& s) {
    if (s.transfers.empty()) return false;
    Transfer& head = s.transfers.front();
    if (head.moving || head.data_at > now_) return false;
    head.moving = true;
    return true;
  }

  size_t start_record(const StreamState& s, const Instruction& in, const Traffic& t) {
    InstructionRecord r;
    r.start_ns = now_;
    r.semaphore_wait_ns = static_cast<float>(now_ - s.ready_at);
    r.hbm_bytes_read = static_cast<uint32_t>(t.hbm_read);
    r.hbm_bytes_written = static_cast<uint32_t>(t.hbm_written);
    r.onchip_bytes_read = static_cast<uint32_t>(std::min<uint64_t>(t.onchip_read, UINT32_MAX));
    r.onchip_bytes_written = static_cast<uint32_t>(std::min<uint64_t>(t.onchip_written, UINT32_MAX));
    r.flops = static_cast<uint32_t>(std::min<uint64_t>(instruction_flops(in), UINT32_MAX));
    r.source_op = in.source_op;
    r.index = static_cast<uint32_t>(s.next);
    r.engine = s.engine;
    r.queue = static_cast<uint8_t>(s.queue);
    r.opcode = in.opcode;
    result_.records.push_back(r);
    return result_.records.size() - 1;
  }

  // Transfers moving HBM bytes split the core's HBM bandwidth equally; none exceeds its queue's peak.
  void share_bandwidth() {
    int hbm_movers = 0;
    for (const auto& s : streams_) {
      if (!s.transfers.empty() && s.transfers.front().moving && s.transfers.front().hbm) ++hbm_movers;
    }
    for (auto& s : streams_) {
      if (s.transfers.empty() || !s.transfers.front().moving) continue;
      Transfer& t = s.transfers.front();
      t.rate = dma_rate_bytes_per_ns(spec_, t.hbm, hbm_movers);
    }
  }

  double event_time(const StreamState& s) const {
    if (!s.is_dma()) return s.busy ? s.end_at : kNever;
    if (s.transfers.empty()) return kNever;
    const Transfer& head = s.transfers.front();
    return head.moving ? now_ + head.remaining / head.rate : head.data_at;
  }

  double next_event_time() {
    double t = kNever;
    for (auto& s : streams_) {
      s.projected = event_time(s);
      t = std::min(t, s.projected);
    }
    return t;
  }

  void advance(double t) {
    const double dt = t - now_;
    for (auto& s : streams_) {
      if (s.transfers.empty() || !s.transfers.front().moving) continue;
      Transfer& head = s.transfers.front();
      head.remaining = std::max(0.0, head.remaining - head.rate * dt);
    }
    now_ = t;
  }

  void complete_due(double t) {
    bool dma_changed = false;
    for (auto& s : streams_) {
      // Compare the projected time, not the bytes left: rounding can leave crumbs of a byte.
      if (s.idle() || s.projected > t) continue;
      if (!s.is_dma()) {
        finish_compute(s);
        continue;
      }
      dma_changed = true;
      if (!s.transfers.front().moving) {
        start_moving(s);  // fixed cost paid: start moving bytes
        continue;
      }
      finish_transfer(s);
      start_moving(s);  // the next transfer may have paid its fixed cost already
    }
    if (dma_changed) share_bandwidth();
  }

  void complete(const Instruction& in, Engine engine, double started_at, size_t record) {
    for (const auto& u : in.updates) semaphores_[u.semaphore] += u.delta;
    if (record_) result_.records[record].end_ns = now_;
    result_.busy_ns[static_cast<int>(engine)] += now_ - started_at;
  }

  void finish_compute(StreamState& s) {
    complete(s.instructions->at(s.next - 1), s.engine, s.started_at, s.record);
    s.busy = false;
    s.end_at = kNever;
    s.ready_at = now_;
  }

  void finish_transfer(StreamState& s) {
    const Transfer head = s.transfers.front();
    s.transfers.erase(s.transfers.begin());
    complete((*s.instructions)[head.index], Engine::dma, head.head_since, head.record);
    if (s.transfers.size() + 1 == slots_) s.ready_at = now_;  // the queue was full: a slot is free now
    if (s.transfers.empty()) return;
    // The next transfer holds the queue from now: its record starts here, with whatever is left of its
    // fixed cost, so the records of one queue never overlap and a queue's busy time is their sum.
    Transfer& next = s.transfers.front();
    next.head_since = now_;
    if (record_) result_.records[next.record].start_ns = now_;
  }

  [[noreturn]] void deadlock() const {
    std::string blocked;
    for (const auto& s : streams_) {
      if (s.done()) continue;
      const Instruction& in = s.current();
      const std::string stream =
          s.engine == Engine::dma ? fmt::format("dma queue {}", s.queue) : std::string(engine_name(s.engine));
      for (const auto& w : in.waits) {
        if (semaphores_[w.semaphore] < static_cast<int64_t>(w.value)) {
          blocked +=
              fmt::format("; {} instruction {} ({}) waits for semaphore {} >= {} but it is {}", stream,
                          s.next, opcode_name(in.opcode), w.semaphore, w.value, semaphores_[w.semaphore]);
          break;
        }
      }
    }
    fail("executable '{}' deadlocks at {} ns: no instruction can issue and none is running{}", exe_.name,
         now_, blocked);
  }

  const Executable& exe_;
  const Spec& spec_;
  const IssueCallback& on_issue_;
  bool record_;
  std::vector<int64_t> semaphores_;
  uint32_t slots_;
  std::vector<StreamState> streams_;
  double now_ = 0;
  RunResult result_;
};

}  // namespace

RunResult simulate(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record) {
  return Scheduler(exe, spec, on_issue, record).run();
}

}  // namespace sightline::device
