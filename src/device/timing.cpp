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

struct StreamState {
  const std::vector<Instruction>* instructions = nullptr;
  Engine engine = Engine::dma;
  uint32_t queue = 0;
  size_t next = 0;  // index of the next instruction to issue
  bool busy = false;
  double ready_at = 0;     // when the stream became free for its next instruction
  double end_at = kNever;  // compute: completion time; DMA: end of the fixed-cost phase
  // DMA data phase.
  bool moving = false;
  bool hbm = false;
  double remaining = 0;  // bytes left to move
  double rate = 0;       // bytes per ns at the current sharing
  size_t record = 0;     // index of the running instruction's record
  double started_at = 0;
  double projected = kNever;  // completion of the current phase as of the last event-time computation

  bool done() const { return !busy && next >= instructions->size(); }
  const Instruction& current() const { return (*instructions)[next]; }
};

class Scheduler {
 public:
  Scheduler(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record)
      : exe_(exe), spec_(spec), on_issue_(on_issue), record_(record), semaphores_(exe.semaphore_count, 0) {
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
    streams_.push_back(s);
  }

  bool waits_hold(const Instruction& in) const {
    for (const auto& w : in.waits) {
      if (semaphores_[w.semaphore] < static_cast<int64_t>(w.value)) return false;
    }
    return true;
  }

  void issue_ready() {
    bool dma_changed = false;
    for (auto& s : streams_) {
      if (s.busy || s.next >= s.instructions->size()) continue;
      const Instruction& in = s.current();
      if (!waits_hold(in)) continue;
      on_issue_(in, s.engine, s.queue, static_cast<uint32_t>(s.next));
      s.busy = true;
      s.started_at = now_;
      if (s.engine == Engine::dma) {
        s.end_at = now_ + spec_.dma.fixed_cost_ns;
        s.moving = false;
        s.hbm = dma_touches_hbm(in);
        s.remaining = static_cast<double>(dma_transfer_bytes(in));
        dma_changed = true;
      } else {
        s.end_at = now_ + compute_instruction_ns(spec_, in);
      }
      if (record_) s.record = start_record(s, in);
    }
    if (dma_changed) share_bandwidth();
  }

  size_t start_record(const StreamState& s, const Instruction& in) {
    InstructionRecord r;
    r.start_ns = now_;
    r.semaphore_wait_ns = static_cast<float>(now_ - s.ready_at);
    const Traffic t = instruction_traffic(in);
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
    for (const auto& s : streams_) hbm_movers += (s.busy && s.moving && s.hbm) ? 1 : 0;
    const double hbm_share = hbm_movers ? spec_.hbm.bytes_per_ns / hbm_movers : kNever;
    for (auto& s : streams_) {
      if (s.busy && s.moving) s.rate = std::min(spec_.dma.queue_bytes_per_ns, s.hbm ? hbm_share : kNever);
    }
  }

  double finish_time(const StreamState& s) const {
    if (!s.busy) return kNever;
    if (s.engine == Engine::dma && s.moving) return now_ + s.remaining / s.rate;
    return s.end_at;
  }

  double next_event_time() {
    double t = kNever;
    for (auto& s : streams_) {
      s.projected = finish_time(s);
      t = std::min(t, s.projected);
    }
    return t;
  }

  void advance(double t) {
    const double dt = t - now_;
    for (auto& s : streams_) {
      if (s.busy && s.moving) s.remaining = std::max(0.0, s.remaining - s.rate * dt);
    }
    now_ = t;
  }

  void complete_due(double t) {
    bool dma_changed = false;
    for (auto& s : streams_) {
      if (!s.busy) continue;
      // Compare the projected time, not the bytes left: rounding can leave crumbs of a byte.
      if (s.projected > t) continue;
      if (s.engine == Engine::dma && !s.moving) {
        s.moving = true;  // fixed cost paid: start moving bytes
        dma_changed = true;
        continue;
      }
      dma_changed |= s.engine == Engine::dma;
      finish(s);
    }
    if (dma_changed) share_bandwidth();
  }

  void finish(StreamState& s) {
    const Instruction& in = s.current();
    for (const auto& u : in.updates) semaphores_[u.semaphore] += u.delta;
    const int engine = static_cast<int>(s.engine);
    if (record_) result_.records[s.record].end_ns = now_;
    result_.busy_ns[engine] += now_ - s.started_at;
    const Traffic t = instruction_traffic(in);
    result_.hbm_bytes += t.hbm_read + t.hbm_written;
    s.busy = false;
    s.moving = false;
    s.end_at = kNever;
    s.ready_at = now_;
    ++s.next;
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
  std::vector<StreamState> streams_;
  double now_ = 0;
  RunResult result_;
};

}  // namespace

RunResult simulate(const Executable& exe, const Spec& spec, const IssueCallback& on_issue, bool record) {
  return Scheduler(exe, spec, on_issue, record).run();
}

}  // namespace sightline::device
