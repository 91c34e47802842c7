// Recording from 8 threads at once: exact counts, unique ids, the cap, and sessions that start
// and stop while threads record. Run under TSan in CI (label "threads").
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sightline/profiler/record.h"

namespace sightline::profiler {
namespace {

constexpr int kThreads = 8;

TEST(profiler_record_threads, eight_threads_exact_counts) {
  constexpr int kOpsPerThread = 20'000;
  static const NameId op_name = intern("aten::mul");
  static const NameId launch_name = intern("nrta_execute_schedule");
  recording_start({.max_events = 10'000'000});
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int i = 0; i < kOpsPerThread; ++i) {
        ScopeHandle op = record_op_begin(op_name);
        ScopeHandle launch = record_scope_begin(EventKind::runtime, launch_name);
        record_scope_end(launch);
        record_op_end(op);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  recording_stop();
  const Collection collection = recording_collect();

  EXPECT_EQ(collection.dropped, 0u);
  ASSERT_EQ(collection.records.size(), std::size_t(kThreads) * kOpsPerThread * 2);
  std::map<std::int64_t, int> per_thread;
  std::set<std::uint64_t> ids;
  std::map<std::uint64_t, std::uint64_t> launch_parent;
  std::set<std::uint64_t> op_ids;
  for (const CollectedRecord& collected : collection.records) {
    ++per_thread[collection.threads[collected.thread].os_thread_id];
    EXPECT_TRUE(ids.insert(collected.record.correlation_id).second);
    if (collected.record.kind == EventKind::cpu_op) op_ids.insert(collected.record.correlation_id);
    if (collected.record.kind == EventKind::runtime) {
      launch_parent[collected.record.correlation_id] = collected.record.external_id;
    }
  }
  EXPECT_EQ(per_thread.size(), std::size_t(kThreads));
  for (const auto& [tid, count] : per_thread) EXPECT_EQ(count, kOpsPerThread * 2) << "thread " << tid;
  for (const auto& [launch, op] : launch_parent) EXPECT_TRUE(op_ids.count(op)) << "launch " << launch;
}

TEST(profiler_record_threads, cap_counts_every_drop_across_threads) {
  constexpr int kPerThread = 5'000;
  constexpr std::uint64_t kCap = 12'345;
  recording_start({.max_events = kCap});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kPerThread; ++i) record_complete({.name = 1, .start_ns = i, .end_ns = i + 1});
    });
  }
  for (std::thread& thread : threads) thread.join();
  recording_stop();
  const Collection collection = recording_collect();
  EXPECT_LE(collection.records.size(), kCap);
  EXPECT_EQ(collection.records.size() + collection.dropped, std::uint64_t(kThreads) * kPerThread);
}

TEST(profiler_record_threads, sessions_start_and_stop_while_threads_record) {
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> attempted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      static const NameId name = intern("aten::relu");
      while (!done.load()) {
        ScopeHandle op = record_op_begin(name);
        record_op_end(op);
        attempted.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::uint64_t collected = 0;
  for (int session = 0; session < 20; ++session) {
    recording_start({.max_events = 50'000});
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    recording_stop();
    const Collection collection = recording_collect();
    EXPECT_LE(collection.records.size(), 50'000u);
    for (const CollectedRecord& record : collection.records) {
      EXPECT_LE(record.record.start_ns, record.record.end_ns);
    }
    collected += collection.records.size();
  }
  done.store(true);
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(collected, attempted.load());
  (void)recording_collect();
}

}  // namespace
}  // namespace sightline::profiler
