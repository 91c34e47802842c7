#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace sightline {
namespace {

thread_local bool t_in_parallel = false;

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
    {
      std::lock_guard lock(mutex_);
      fn_ = &fn;
      begin_ = begin;
      end_ = end;
      chunk_ = chunk;
      next_.store(begin, std::memory_order_relaxed);
      active_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    run_chunks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return active_ == 0; });
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
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      run_chunks();
      {
        std::lock_guard lock(mutex_);
        --active_;
      }
      done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex owner_;  // one parallel job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
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
