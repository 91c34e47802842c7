#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace sightline {
namespace {

thread_local bool t_in_parallel = false;

// One pause of a spin-wait: cheap for the core's other hyperthread, and no system call.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or about kSpinNs have passed; returns done()'s last value. The simulator issues
// many small parallel jobs (one per matmul instruction) a few microseconds apart: sleeping on a futex
// between them cost a wake-up system call and a reschedule per job, 14% of a functional ESM-2 run's CPU
// time. A bounded spin keeps a burst of jobs free of system calls and gives the core back soon after.
template <class Done>
bool spin_until(const Done& done) {
  constexpr int64_t kSpinNs = 50'000;
  if (done()) return true;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    spin_pause();
    if (done()) return true;
    if (i % 64 == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::nanoseconds(kSpinNs)) return false;
  }
}

class Pool {
 public:
  Pool() {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 1; i < hw; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs chunks of the job on all threads; returns when every chunk is done.
  bool try_run(int64_t begin, int64_t end, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock owner(owner_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    fn_ = &fn;
    begin_ = begin;
    end_ = end;
    chunk_ = chunk;
    next_.store(begin, std::memory_order_relaxed);
    active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    bool sleepers = false;
    {
      // Under the mutex, so that a worker about to sleep either sees the new generation or is counted in
      // sleepers_ (and is woken below). Spinning workers see it without a system call.
      std::lock_guard lock(mutex_);
      generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      sleepers = sleepers_ > 0;
    }
    if (sleepers) wake_.notify_all();
    run_chunks();
    const auto all_done = [this] { return active_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(all_done)) {
      std::unique_lock lock(mutex_);
      owner_waiting_ = true;
      done_.wait(lock, all_done);
      owner_waiting_ = false;
    }
    fn_ = nullptr;
    return true;
  }

 private:
  void run_chunks() {
    t_in_parallel = true;
    for (;;) {
      const int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
      if (b >= end_) break;
      (*fn_)(b, std::min(end_, b + chunk_));
    }
    t_in_parallel = false;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      const auto job = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      if (!spin_until(job)) {
        std::unique_lock lock(mutex_);
        ++sleepers_;
        wake_.wait(lock, [&] { return stop_ || job(); });
        --sleepers_;
        if (stop_) return;
      }
      seen = generation_.load(std::memory_order_acquire);
      run_chunks();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The last worker out: the owner may be asleep (it checks and sleeps under the mutex).
        bool waiting = false;
        {
          std::lock_guard lock(mutex_);
          waiting = owner_waiting_;
        }
        if (waiting) done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex owner_;  // one parallel job at a time
  std::mutex mutex_;  // guards sleepers_, owner_waiting_, stop_, and each change of generation_
  std::condition_variable wake_, done_;
  // The job: written by the owner before it publishes a new generation (release), read by workers after
  // they see it (acquire).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};           // workers that have not finished the current job
  std::atomic<uint64_t> generation_{0};  // one more per job
  int sleepers_ = 0;                     // workers asleep on wake_
  bool owner_waiting_ = false;           // the owner asleep on done_
  bool stop_ = false;
};

// Never destroyed: threads that outlive static destruction (the neuron runtime's workers, which are
// never joined either) may still be inside parallel_for when the program exits; destroying the pool
// then would stop its workers under them and the exit would hang waiting for their chunks.
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

int thread_count() { return pool().size(); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (t_in_parallel || n <= grain || pool().size() == 1) {
    fn(begin, end);
    return;
  }
  // A few chunks per thread balance uneven rows without much scheduling overhead.
  const int64_t chunks = std::min<int64_t>(n / grain, int64_t{4} * pool().size());
  const int64_t chunk = (n + chunks - 1) / chunks;
  if (!pool().try_run(begin, end, chunk, fn)) fn(begin, end);
}

}  // namespace sightline
