// The cpu backend's thread pool under concurrent use: ops issued from several user threads at once
// (each big enough to go parallel) give the same results as when run alone. Runs under TSan in CI.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/parallel.h"
#include "sightline/sightline.h"

using namespace sightline;

TEST(CpuParallel, ConcurrentOpsFromManyThreadsMatchSerialResults) {
  Generator g(11);
  const Tensor x = randn({256, 1024}, {}, &g), w = randn({1024}, {}, &g);
  const Tensor want_norm = rms_norm(x, w);
  const double want_sum = sum(x * x).item();
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      bool good = true;
      for (int i = 0; i < 5; ++i) {
        const Tensor norm = rms_norm(x, w);
        good = good && amax(abs(norm - want_norm)).item() == 0.0;
        good = good && sum(x * x).item() == want_sum;
      }
      ok[static_cast<size_t>(t)] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[static_cast<size_t>(t)]) << "thread " << t;
}

TEST(CpuParallel, ParallelForCoversTheRangeOnceAndNests) {
  std::vector<std::atomic<int>> hits(100000);
  parallel_for(0, 100000, 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    // A nested parallel_for runs inline instead of deadlocking on the pool.
    parallel_for(0, 10, 1, [](int64_t, int64_t) {});
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}
