#include "runtime/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>
#include <unordered_set>

#include <sys/syscall.h>
#include <unistd.h>

#include "sightline/host_clock.h"
#include "sightline/error.h"
#include "device/validate.h"

namespace sightline::runtime {

int64_t now_ns() { return host_clock::now_ns(); }

void install_host_costs(const device::Spec& spec) {
  host_clock::Costs costs;
  costs.framework_op_ns = static_cast<int64_t>(spec.host.framework_op_ns + 0.5);
  costs.runtime_call_ns = static_cast<int64_t>(spec.host.runtime_call_ns + 0.5);
  costs.allocation_ns = static_cast<int64_t>(spec.host.allocation_ns + 0.5);
  costs.host_copy_bytes_per_ns = spec.host.copy_bytes_per_ns;
  host_clock::set_costs(costs);
}

std::string_view runtime_event_name(RuntimeEventKind kind) {
  switch (kind) {
#define SIGHTLINE_X(kind, name, device, what) \
  case RuntimeEventKind::kind:                \
    return name;
    SIGHTLINE_RUNTIME_EVENTS(SIGHTLINE_X)
#undef SIGHTLINE_X
  }
  return "?";
}

bool runtime_event_is_device(RuntimeEventKind kind) {
  switch (kind) {
#define SIGHTLINE_X(kind, name, device, what) \
  case RuntimeEventKind::kind:                \
    return device;
    SIGHTLINE_RUNTIME_EVENTS(SIGHTLINE_X)
#undef SIGHTLINE_X
  }
  return false;
}

namespace {

// Modeled completion times of a core's items by sequence number, the oldest forgotten. Completion
// times never decrease along a core's in-order queue, so a forgotten item completed no later than
// the newest forgotten one.
class CompletionLog {
 public:
  void push(uint64_t seq, int64_t done_ns) {
    if (done_.empty()) first_seq_ = seq;
    if (!done_.empty()) done_ns = std::max(done_ns, done_.back());
    done_.push_back(done_ns);
    if (done_.size() > kKeep) {
      forgotten_done_ns_ = done_.front();
      done_.pop_front();
      ++first_seq_;
    }
  }
  int64_t at(uint64_t seq) const {
    if (done_.empty() || seq < first_seq_) return forgotten_done_ns_;
    return done_[std::min<uint64_t>(seq - first_seq_, done_.size() - 1)];
  }

 private:
  static constexpr size_t kKeep = size_t{1} << 16;
  std::deque<int64_t> done_;
  uint64_t first_seq_ = 1;
  int64_t forgotten_done_ns_ = 0;
};

}  // namespace

// One queued unit of a core's in-order work. Frees do not hold a slot of the modeled queue.
struct Runtime::Item {
  enum class Kind { write, execute, read, free, collective } kind = Kind::execute;
  uint64_t seq = 0;
  uint64_t correlation = 0;
  int64_t submitted_ns = 0;  // host time of the call that queued it
  // write / read / free
  uint64_t address = 0;
  uint64_t bytes = 0;
  std::unique_ptr<std::byte[]> staged;  // write: the host data, copied at call time (functional runs only)
  void* read_dst = nullptr;       // read: the caller's buffer (the caller waits for the item)
  // execute
  ExecutableId exe = kNoExecutable;
  std::vector<uint64_t> io;
  // collective: the operation all its ranks share, this item's rank, and when it ended
  std::shared_ptr<Collective> collective;
  int rank = 0;
  int64_t done_ns = 0;
  std::exception_ptr error;  // a failure of this item, rethrown to whoever waits for it
};

struct Runtime::CoreState {
  int index = 0;
  std::unique_ptr<device::Core> core;

  std::mutex mutex;
  std::condition_variable changed;  // queue, completion or stop
  std::deque<std::unique_ptr<Item>> queue;
  uint64_t next_seq = 1;        // sequence number of the next queued item
  uint64_t completed_seq = 0;   // every item <= this has been simulated (wall-time state)
  CompletionLog completions;    // modeled host time at which each simulated item is complete
  std::deque<uint64_t> in_flight_work;  // host side: seqs of the last queue_capacity executions/copies
  std::exception_ptr failure;   // first failure not yet reported to a waiter
  bool stop = false;

  // Worker-only state (modeled timeline of the core).
  int64_t device_free_ns = 0;
  ExecutableId last_exe = kNoExecutable;
  std::unordered_set<ExecutableId> loaded_once;
  // The executables whose instructions passed validate_executable against this core's spec (at their
  // first execution here); a loaded executable is const and never replaced, so the check holds after.
  std::unordered_set<ExecutableId> validated;
  // The collective engine's timeline on this core, and the buffers of its collectives: work queued after
  // a collective waits for it only when it touches one of them (until done_ns).
  struct CollectiveBuffer {
    uint64_t begin = 0, end = 0;
    int64_t done_ns = 0;
  };
  int64_t collective_free_ns = 0;
  std::vector<CollectiveBuffer> collective_buffers;
  // The latest end of a collective whose buffers overlap [begin, begin + bytes), or `t`.
  int64_t after_collectives(int64_t t, uint64_t begin, uint64_t bytes) const {
    for (const CollectiveBuffer& b : collective_buffers) {
      if (begin < b.end && b.begin < begin + bytes) t = std::max(t, b.done_ns);
    }
    return t;
  }

  std::thread thread;
};

// A collective that every participating core's worker meets in its queue: the last to arrive times it
// and computes it; the others wait (in wall time) for it.
struct Runtime::Collective {
  CollectiveRequest request;
  uint64_t id = 0;
  std::mutex mutex;
  std::condition_variable done_changed;
  int arrived = 0;
  bool done = false;
  std::vector<int64_t> ready_ns;
  std::vector<uint64_t> seqs;
  device::CollectiveTiming timing;
  int64_t start_ns = 0, end_ns = 0;
  std::exception_ptr error;
};

Runtime::Runtime(device::Spec spec, RuntimeOptions options) : spec_(std::move(spec)), options_(options) {
  const int n = options_.cores > 0 ? options_.cores : static_cast<int>(spec_.cores_per_instance);
  SIGHTLINE_CHECK(n >= 1 && n <= 1024, "runtime: core count must be 1..1024, got {}", n);
  SIGHTLINE_CHECK(options_.queue_capacity >= 1, "runtime: queue capacity must be at least 1");
  install_host_costs(spec_);
  host_events_per_core_.assign(static_cast<size_t>(n), 0);
  device_events_per_core_.assign(static_cast<size_t>(n), 0);
  captured_.dropped_events_per_core.assign(static_cast<size_t>(n), 0);
  captured_.dropped_traces_per_core.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<CoreState>();
    c->index = i;
    c->core = std::make_unique<device::Core>(spec_);
    cores_.push_back(std::move(c));
  }
  for (auto& c : cores_) {
    CoreState* state = c.get();
    state->thread = std::thread([this, state] { worker(*state); });
  }
}

Runtime::~Runtime() {
  for (auto& c : cores_) {
    {
      std::lock_guard lock(c->mutex);
      c->stop = true;
    }
    c->changed.notify_all();
  }
  for (auto& c : cores_) c->thread.join();
}

Runtime::CoreState& Runtime::core_state(int core) const {
  SIGHTLINE_CHECK(core >= 0 && core < core_count(), "runtime: core {} does not exist; this instance has cores 0..{}",
                  core, core_count() - 1);
  return *cores_[static_cast<size_t>(core)];
}

uint32_t Runtime::thread_index() {
  // The OS thread id, the same id the profiler's host events carry, so runtime calls land on the
  // lane of the thread that made them.
  thread_local const auto tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

void Runtime::record(const Event& e) {
  if (!capturing_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(capture_mutex_);
  if (!capture_.enabled) return;
  const auto core = static_cast<size_t>(e.core);
  // The host's calls and the device's work arrive from different threads, in an order that depends on
  // the simulator's pace: each has its own budget, so what is kept never depends on that order
  // (CaptureOptions::max_events_per_core).
  uint64_t& count = runtime_event_is_device(e.kind) ? device_events_per_core_[core] : host_events_per_core_[core];
  if (count >= capture_.max_events_per_core) {
    ++captured_.dropped_events_per_core[core];
    return;
  }
  ++count;
  captured_.events.push_back(e);
}

void Runtime::record_trace(ExecutionTrace&& t) {
  std::lock_guard lock(capture_mutex_);
  const auto core = static_cast<size_t>(t.core);
  if (!capture_.enabled || core >= capture_.instruction_trace_cores.size() || !capture_.instruction_trace_cores[core]) {
    return;
  }
  if (device_events_per_core_[core] + t.result.records.size() > capture_.max_events_per_core) {
    ++captured_.dropped_traces_per_core[core];
    return;
  }
  device_events_per_core_[core] += t.result.records.size();
  captured_.traces.push_back(std::move(t));
}

void Runtime::set_capture(const CaptureOptions& options) {
  std::lock_guard lock(capture_mutex_);
  capture_ = options;
  capture_.instruction_trace_cores.resize(cores_.size(), false);
  capturing_.store(options.enabled, std::memory_order_release);
}

Captured Runtime::drain() {
  std::lock_guard lock(capture_mutex_);
  Captured out = std::move(captured_);
  // Host calls and the cores' workers record in whatever order the threads ran; the profile must not
  // depend on it. Order by modeled time, then by what the event is.
  std::sort(out.events.begin(), out.events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.start_ns, a.end_ns, a.core, a.seq, a.kind, a.thread) <
           std::tie(b.start_ns, b.end_ns, b.core, b.seq, b.kind, b.thread);
  });
  std::sort(out.collectives.begin(), out.collectives.end(),
            [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.id < b.id; });
  std::sort(out.traces.begin(), out.traces.end(), [](const ExecutionTrace& a, const ExecutionTrace& b) {
    return std::tie(a.core, a.seq) < std::tie(b.core, b.seq);
  });
  captured_ = Captured{};
  captured_.dropped_events_per_core.assign(cores_.size(), 0);
  captured_.dropped_traces_per_core.assign(cores_.size(), 0);
  std::fill(host_events_per_core_.begin(), host_events_per_core_.end(), 0);
  std::fill(device_events_per_core_.begin(), device_events_per_core_.end(), 0);
  return out;
}

ExecutableId Runtime::load(int core, std::shared_ptr<const device::Executable> exe) {
  SIGHTLINE_CHECK(exe != nullptr, "runtime: load of a null executable");
  core_state(core);
  const int64_t t0 = now_ns();
  ExecutableId id;
  {
    std::lock_guard lock(executables_mutex_);
    id = static_cast<ExecutableId>(executables_.size());
    executables_.push_back(std::move(exe));
  }
  host_clock::advance(host_clock::costs().runtime_call_ns);
  record({RuntimeEventKind::load, static_cast<int16_t>(core), thread_index(), t0, now_ns(), 0, 0, 0, id});
  return id;
}

std::shared_ptr<const device::Executable> Runtime::executable(ExecutableId id) const {
  std::lock_guard lock(executables_mutex_);
  SIGHTLINE_CHECK(id < executables_.size(), "runtime: no executable with id {}", id);
  return executables_[id];
}

uint64_t Runtime::allocate(int core, uint64_t bytes, uint64_t correlation) {
  CoreState& c = core_state(core);
  const int64_t t0 = now_ns();
  uint64_t address;
  try {
    // Backing simulated HBM with host memory is the simulator's work, not the host's.
    const host_clock::Unmodeled simulator;
    address = c.core->hbm_allocate(bytes);
  } catch (const Error& e) {
    fail("device memory exhausted on neuron core {}: {} Free tensors you no longer need, or use smaller shapes",
         core, e.what());
  }
  host_clock::advance(host_clock::costs().allocation_ns);
  record({RuntimeEventKind::allocate, static_cast<int16_t>(core), thread_index(), t0, now_ns(), correlation, 0, bytes,
          kNoExecutable});
  return address;
}

uint64_t Runtime::free_bytes(int core) const { return core_state(core).core->hbm_free_bytes(); }

void Runtime::free(int core, uint64_t address) {
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::free;
  item->address = address;
  enqueue(core_state(core), std::move(item), 0);
}

uint64_t Runtime::enqueue(CoreState& c, std::unique_ptr<Item> item, uint64_t correlation) {
  item->correlation = correlation;
  const bool work = item->kind != Item::Kind::free;
  std::unique_lock lock(c.mutex);
  if (work && c.in_flight_work.size() >= options_.queue_capacity) {
    // Modeled back-pressure: the oldest of the last queue_capacity items must have completed in
    // modeled time. Learning when it completes may take a wall-time wait for the simulator (which
    // also bounds the host memory staged writes hold); only the modeled part is host time.
    const uint64_t oldest = c.in_flight_work.front();
    c.in_flight_work.pop_front();
    int64_t done;
    {
      const host_clock::Unmodeled simulator;
      c.changed.wait(lock, [&] { return c.completed_seq >= oldest; });
      done = c.completions.at(oldest);
    }
    const int64_t t0 = now_ns();
    if (done > t0) {
      lock.unlock();
      host_clock::wait_until(done);
      record({RuntimeEventKind::queue_full_wait, static_cast<int16_t>(c.index), thread_index(), t0, now_ns(), correlation,
              oldest, 0, kNoExecutable});
      lock.lock();
    }
  }
  item->submitted_ns = now_ns();
  const uint64_t seq = item->seq = c.next_seq++;
  if (work) c.in_flight_work.push_back(seq);
  c.queue.push_back(std::move(item));
  lock.unlock();
  c.changed.notify_all();
  return seq;
}

void Runtime::write(int core, uint64_t address, const void* src, uint64_t bytes, uint64_t correlation) {
  CoreState& c = core_state(core);
  const int64_t t0 = now_ns();
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::write;
  item->address = address;
  item->bytes = bytes;
  // Timing-only runs never write the data to the device (see run_item), so they stage nothing; the
  // modeled cost of staging is the same either way. Not zero-filled first: the copy writes every byte.
  if (options_.functional) {
    item->staged = std::make_unique_for_overwrite<std::byte[]>(bytes);
    std::memcpy(item->staged.get(), src, bytes);
  }
  host_clock::advance(host_clock::costs().runtime_call_ns + host_clock::copy_ns(bytes));
  const uint64_t seq = enqueue(c, std::move(item), correlation);
  record({RuntimeEventKind::tensor_write, static_cast<int16_t>(core), thread_index(), t0, now_ns(), correlation, seq, bytes,
          kNoExecutable});
}

void Runtime::read(int core, void* dst, uint64_t address, uint64_t bytes, uint64_t correlation) {
  CoreState& c = core_state(core);
  const int64_t t0 = now_ns();
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::read;
  item->address = address;
  item->bytes = bytes;
  item->read_dst = dst;
  host_clock::advance(host_clock::costs().runtime_call_ns);
  const uint64_t seq = enqueue(c, std::move(item), correlation);
  wait_for(c, seq, correlation);
  host_clock::advance(host_clock::copy_ns(bytes));  // out of the DMA buffer into the caller's memory
  record({RuntimeEventKind::tensor_read, static_cast<int16_t>(core), thread_index(), t0, now_ns(), correlation, seq, bytes,
          kNoExecutable});
}

uint64_t Runtime::execute_schedule(int core, ExecutableId exe, std::vector<uint64_t> io_addresses,
                                   uint64_t correlation) {
  CoreState& c = core_state(core);
  {
    const auto e = executable(exe);
    SIGHTLINE_CHECK(io_addresses.size() == e->io.size(),
                    "runtime: executable '{}' has {} I/O tensors but {} addresses were bound", e->name, e->io.size(),
                    io_addresses.size());
  }
  const int64_t t0 = now_ns();
  host_clock::advance(host_clock::costs().runtime_call_ns);
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::execute;
  item->exe = exe;
  item->io = std::move(io_addresses);
  const uint64_t seq = enqueue(c, std::move(item), correlation);
  record({RuntimeEventKind::execute_schedule, static_cast<int16_t>(core), thread_index(), t0, now_ns(), correlation, seq, 0,
          exe});
  return seq;
}

bool Runtime::is_completed(int core, uint64_t seq) {
  // Complete at this host time, whatever the simulator's pace.
  return completion_ns(core, seq) <= now_ns();
}

int64_t Runtime::simulated_completion(CoreState& c, uint64_t seq) {
  const host_clock::Unmodeled simulator;
  std::unique_lock lock(c.mutex);
  c.changed.wait(lock, [&] { return c.completed_seq >= seq; });
  return c.completions.at(seq);
}

int64_t Runtime::completion_ns(int core, uint64_t seq) {
  CoreState& c = core_state(core);
  {
    std::lock_guard lock(c.mutex);
    SIGHTLINE_CHECK(seq < c.next_seq, "runtime: core {} has queued no item with sequence number {} (last is {})",
                    core, seq, c.next_seq - 1);
  }
  return simulated_completion(c, seq);
}

void Runtime::wait_for(CoreState& c, uint64_t seq, uint64_t correlation) {
  const int64_t done = simulated_completion(c, seq);
  std::exception_ptr failure;
  {
    std::lock_guard lock(c.mutex);
    failure = std::exchange(c.failure, nullptr);
  }
  const int64_t t0 = now_ns();
  host_clock::wait_until(done);
  record({RuntimeEventKind::exec_wait, static_cast<int16_t>(c.index), thread_index(), t0, now_ns(), correlation, seq, 0,
          kNoExecutable});
  if (failure) std::rethrow_exception(failure);
}

void Runtime::synchronize(int core) {
  CoreState& c = core_state(core);
  uint64_t last;
  {
    std::lock_guard lock(c.mutex);
    last = c.next_seq - 1;
    if (last == 0) return;
  }
  wait_for(c, last, 0);
}

void Runtime::synchronize_all() {
  for (int i = 0; i < core_count(); ++i) synchronize(i);
}

void Runtime::wait_simulated() {
  for (int i = 0; i < core_count(); ++i) {
    CoreState& c = *cores_[static_cast<size_t>(i)];
    uint64_t last;
    {
      std::lock_guard lock(c.mutex);
      last = c.next_seq - 1;
    }
    if (last > 0) simulated_completion(c, last);
  }
}

uint64_t Runtime::work_in_flight_at(int64_t t) {
  wait_simulated();
  uint64_t n = 0;
  for (const auto& c : cores_) {
    std::lock_guard lock(c->mutex);
    // At most queue_capacity executions and copies can be in flight once the last one was queued,
    // and in_flight_work holds the last queue_capacity of them.
    for (const uint64_t seq : c->in_flight_work) n += c->completions.at(seq) > t ? 1 : 0;
  }
  return n;
}

int64_t Runtime::simulation_wall_ns() const { return simulation_wall_ns_.load(std::memory_order_relaxed); }

uint64_t Runtime::in_flight() const {
  uint64_t n = 0;
  for (const auto& c : cores_) {
    std::lock_guard lock(c->mutex);
    n += c->next_seq - 1 - c->completed_seq;
  }
  return n;
}

void Runtime::worker(CoreState& c) {
  for (;;) {
    std::unique_ptr<Item> item;
    {
      std::unique_lock lock(c.mutex);
      c.changed.wait(lock, [&] { return c.stop || !c.queue.empty(); });
      if (c.queue.empty()) return;  // stop requested and nothing left
      // The item stays visible in the queue (for capacity) until it has run.
      item = std::move(c.queue.front());
      c.queue.pop_front();
    }
    std::exception_ptr error;
    const int64_t wall_start = host_clock::wall_now_ns();
    try {
      run_item(c, *item);
    } catch (...) {
      error = std::current_exception();
    }
    simulation_wall_ns_.fetch_add(host_clock::wall_now_ns() - wall_start, std::memory_order_relaxed);
    {
      std::lock_guard lock(c.mutex);
      c.completed_seq = item->seq;
      // A free completes with the work before it; everything else is visible to the host after the
      // completion notification.
      const bool work = item->kind != Item::Kind::free;
      const int64_t done = std::max(c.device_free_ns, item->done_ns) +
                           (work ? static_cast<int64_t>(spec_.runtime.completion_ns) : 0);
      c.completions.push(item->seq, std::max(done, item->submitted_ns));
      if (error && !c.failure) c.failure = error;
    }
    c.changed.notify_all();
  }
}

void Runtime::run_item(CoreState& c, Item& item) {
  const auto core = static_cast<int16_t>(c.index);
  const uint32_t no_thread = 0;
  switch (item.kind) {
    case Item::Kind::free:
      c.core->hbm_free(item.address);
      record({RuntimeEventKind::free, core, no_thread, c.device_free_ns, c.device_free_ns, 0, item.seq, 0, kNoExecutable});
      return;
    case Item::Kind::collective:
      run_collective(c, item);
      return;
    case Item::Kind::write: {
      const int64_t start = c.after_collectives(std::max(item.submitted_ns, c.device_free_ns), item.address, item.bytes);
      const auto dur = static_cast<int64_t>(device::dma_copy_ns(spec_, item.bytes, spec_.dma.queues));
      // Timing-only: no result is computed, so the data is never needed on the device.
      if (options_.functional) c.core->hbm_write(item.address, item.staged.get(), item.bytes);
      c.device_free_ns = start + dur;
      record({RuntimeEventKind::copy_in, core, no_thread, start, start + dur, item.correlation, item.seq, item.bytes,
              kNoExecutable});
      return;
    }
    case Item::Kind::read: {
      const int64_t start = c.after_collectives(std::max(item.submitted_ns, c.device_free_ns), item.address, item.bytes);
      const auto dur = static_cast<int64_t>(device::dma_copy_ns(spec_, item.bytes, spec_.dma.queues));
      if (options_.functional) {
        c.core->hbm_read(item.address, item.read_dst, item.bytes);
      } else {
        std::memset(item.read_dst, 0xff, item.bytes);  // not computed: NaN in every float dtype
      }
      c.device_free_ns = start + dur;
      record({RuntimeEventKind::copy_out, core, no_thread, start, start + dur, item.correlation, item.seq, item.bytes,
              kNoExecutable});
      return;
    }
    case Item::Kind::execute: {
      const auto exe = executable(item.exe);
      // The sync point: when the device starts, on the host timeline (see the header).
      int64_t t = std::max(item.submitted_ns + static_cast<int64_t>(spec_.runtime.submission_ns), c.device_free_ns);
      // An execution that reads or writes a collective's buffers waits for that collective.
      for (size_t i = 0; i < item.io.size() && !c.collective_buffers.empty(); ++i) {
        t = c.after_collectives(t, item.io[i], exe->io[i].bytes());
      }
      if (c.last_exe != item.exe) {
        const auto dur = static_cast<int64_t>(spec_.runtime.executable_switch_ns);
        record({RuntimeEventKind::model_switch, core, no_thread, t, t + dur, item.correlation, item.seq, 0, item.exe});
        t += dur;
        c.last_exe = item.exe;
      }
      if (c.loaded_once.insert(item.exe).second) {
        const auto dur = static_cast<int64_t>(spec_.runtime.first_load_ns);
        record({RuntimeEventKind::first_load, core, no_thread, t, t + dur, item.correlation, item.seq, 0, item.exe});
        t += dur;
      }
      if (!c.validated.count(item.exe)) {
        device::validate_executable(*exe, c.core->spec());
        c.validated.insert(item.exe);
      }
      device::RunOptions run_options;
      run_options.functional = options_.functional;
      run_options.validated = true;
      {
        std::lock_guard lock(capture_mutex_);
        const auto idx = static_cast<size_t>(c.index);
        run_options.record = capture_.enabled && idx < capture_.instruction_trace_cores.size() &&
                             capture_.instruction_trace_cores[idx];
      }
      device::RunResult result = c.core->run(*exe, item.io, run_options);
      const auto dur = static_cast<int64_t>(result.duration_ns + 0.5);
      c.device_free_ns = t + dur;
      record({RuntimeEventKind::exec_running, core, no_thread, t, t + dur, item.correlation, item.seq, result.hbm_bytes,
              item.exe});
      if (run_options.record) record_trace({core, item.seq, item.correlation, item.exe, t, std::move(result)});
      return;
    }
  }
}

std::vector<uint64_t> Runtime::collective(const CollectiveRequest& request) {
  const std::string_view what = device::collective_name(request.kind);
  const size_t n = request.cores.size();
  SIGHTLINE_CHECK(n >= 1 && request.inputs.size() == n && request.outputs.size() == n,
                  "runtime: collective {} needs one input and one output per core; got {} cores, {} inputs, {} outputs",
                  what, n, request.inputs.size(), request.outputs.size());
  for (size_t r = 0; r < n; ++r) {
    core_state(request.cores[r]);
    for (size_t s = 0; s < r; ++s) {
      SIGHTLINE_CHECK(request.cores[s] != request.cores[r],
                      "runtime: collective {} lists core {} twice; each rank must be a different core", what,
                      request.cores[r]);
    }
  }
  auto op = std::make_shared<Collective>();
  op->request = request;
  op->ready_ns.assign(n, 0);
  op->seqs.assign(n, 0);
  op->timing = device::ring_collective_timing(spec_, request.kind, request.cores, request.bytes);  // checks sizes
  std::vector<uint64_t> seqs;
  std::lock_guard order(collectives_mutex_);
  op->id = next_collective_id_++;
  for (size_t r = 0; r < n; ++r) {
    CoreState& c = core_state(request.cores[r]);
    const int64_t t0 = now_ns();
    host_clock::advance(host_clock::costs().runtime_call_ns);
    auto item = std::make_unique<Item>();
    item->kind = Item::Kind::collective;
    item->collective = op;
    item->rank = static_cast<int>(r);
    const uint64_t seq = enqueue(c, std::move(item), request.correlation);
    record({RuntimeEventKind::cc_schedule, static_cast<int16_t>(c.index), thread_index(), t0, now_ns(),
            request.correlation, seq, request.bytes, kNoExecutable});
    seqs.push_back(seq);
  }
  return seqs;
}

void Runtime::run_collective(CoreState& c, Item& item) {
  Collective& op = *item.collective;
  const CollectiveRequest& req = op.request;
  const int ranks = static_cast<int>(req.cores.size());
  const auto r = static_cast<size_t>(item.rank);
  // Ready when the work queued before it on this core has run and the core's collective engine is free;
  // a collective is launched like an execution.
  const int64_t ready = std::max({item.submitted_ns + static_cast<int64_t>(spec_.runtime.submission_ns),
                                  c.device_free_ns, c.collective_free_ns});
  {
    std::unique_lock lock(op.mutex);
    op.ready_ns[r] = ready;
    op.seqs[r] = item.seq;
    if (++op.arrived == ranks) {
      // Every core has reached it, so everything queued before it on every core has run: its inputs are
      // final, and no core touches its buffers until it is done.
      try {
        op.start_ns = *std::max_element(op.ready_ns.begin(), op.ready_ns.end());
        op.end_ns = op.start_ns + static_cast<int64_t>(op.timing.duration_ns + 0.5);
        if (options_.functional) {
          const uint64_t in_bytes = device::collective_input_bytes(req.kind, ranks, req.bytes);
          const uint64_t out_bytes = device::collective_output_bytes(req.kind, ranks, req.bytes);
          std::vector<std::vector<std::byte>> in(static_cast<size_t>(ranks)), out(static_cast<size_t>(ranks));
          std::vector<const std::byte*> in_ptrs;
          std::vector<std::byte*> out_ptrs;
          for (size_t k = 0; k < in.size(); ++k) {
            const device::Core& core = *core_state(req.cores[k]).core;
            in[k].resize(in_bytes);
            out[k].resize(out_bytes);
            core.hbm_read(req.inputs[k], in[k].data(), in_bytes);
            in_ptrs.push_back(in[k].data());
            out_ptrs.push_back(out[k].data());
          }
          device::ring_collective_compute(req.kind, req.dtype, in_ptrs, out_ptrs, req.bytes);
          for (size_t k = 0; k < out.size(); ++k) {
            core_state(req.cores[k]).core->hbm_write(req.outputs[k], out[k].data(), out_bytes);
          }
        }
      } catch (...) {
        op.error = std::current_exception();
      }
      op.done = true;
      op.done_changed.notify_all();
    } else {
      op.done_changed.wait(lock, [&] { return op.done; });
    }
  }
  const auto core = static_cast<int16_t>(c.index);
  c.collective_free_ns = op.end_ns;
  item.done_ns = op.end_ns;
  std::erase_if(c.collective_buffers, [&](const CoreState::CollectiveBuffer& b) { return b.done_ns <= c.device_free_ns; });
  c.collective_buffers.push_back(
      {req.inputs[r], req.inputs[r] + device::collective_input_bytes(req.kind, ranks, req.bytes), op.end_ns});
  c.collective_buffers.push_back(
      {req.outputs[r], req.outputs[r] + device::collective_output_bytes(req.kind, ranks, req.bytes), op.end_ns});
  if (op.error) std::rethrow_exception(op.error);
  if (op.start_ns > ready) {
    record({RuntimeEventKind::cc_barrier, core, 0, ready, op.start_ns, req.correlation, item.seq, 0, kNoExecutable});
  }
  record({RuntimeEventKind::cc_running, core, 0, op.start_ns, op.end_ns, req.correlation, item.seq, req.bytes,
          kNoExecutable});
  if (r == 0 && capturing_.load(std::memory_order_acquire)) {
    CollectiveRecord rec;
    rec.id = op.id;
    rec.kind = req.kind;
    rec.dtype = req.dtype;
    rec.bytes = req.bytes;
    rec.bus_bytes = op.timing.bus_bytes;
    rec.cores = req.cores;
    {
      std::lock_guard lock(op.mutex);
      rec.seqs = op.seqs;
      rec.ready_ns = op.ready_ns;
    }
    rec.start_ns = op.start_ns;
    rec.end_ns = op.end_ns;
    rec.correlation = req.correlation;
    std::lock_guard lock(capture_mutex_);
    if (capture_.enabled) captured_.collectives.push_back(std::move(rec));
  }
}

}  // namespace sightline::runtime
