// The recording API on one thread: names, scopes, correlation, payloads, caps and sessions.
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "sightline/host_clock.h"
#include "sightline/profiler/record.h"

namespace sightline::profiler {
namespace {

Collection record_session(const RecordingOptions& options, const auto& body) {
  recording_start(options);
  body();
  recording_stop();
  return recording_collect();
}

TEST(profiler_record, names_are_interned_once) {
  const NameId mul = intern("aten::mul");
  EXPECT_EQ(intern("aten::mul"), mul);
  EXPECT_NE(intern("aten::add"), mul);
  EXPECT_EQ(interned_name(mul), "aten::mul");
  EXPECT_EQ(intern(""), 0u);
}

TEST(profiler_record, nothing_is_recorded_when_off) {
  recording_stop();
  (void)recording_collect();
  EXPECT_FALSE(recording_enabled());
  ScopeHandle scope = record_op_begin(intern("aten::mul"));
  EXPECT_FALSE(scope.active());
  EXPECT_EQ(current_correlation_id(), 0u);
  record_scope_end(scope);
  record_complete({.name = intern("nc_exec_running"), .start_ns = 1, .end_ns = 2});
  EXPECT_EQ(new_correlation_id(), 0u);
  EXPECT_TRUE(recording_collect().records.empty());
}

TEST(profiler_record, scopes_carry_correlation_to_what_runs_inside) {
  static const NameId mul = intern("aten::mul");
  static const NameId launch = intern("nrta_execute_schedule");
  static const NameId exec = intern("nc_exec_running");
  std::uint64_t op_id = 0;
  const Collection collection = record_session({}, [&] {
    ScopeHandle op = record_op_begin(mul, 0, 42);
    op_id = op.correlation_id;
    EXPECT_EQ(current_correlation_id(), op_id);
    ScopeHandle call = record_scope_begin(EventKind::runtime, launch);
    EXPECT_EQ(call.external_id, op_id);
    EXPECT_EQ(current_correlation_id(), op_id);  // runtime calls do not open a correlation
    record_complete({.name = exec,
                     .kind = EventKind::device_exec,
                     .device = 1,
                     .resource = 3,
                     .start_ns = 100,
                     .end_ns = 200,
                     .correlation_id = call.correlation_id,
                     .external_id = call.external_id});
    record_scope_end(call);
    record_op_end(op);
    EXPECT_EQ(current_correlation_id(), 0u);
  });
  ASSERT_EQ(collection.records.size(), 3u);
  EXPECT_EQ(collection.dropped, 0u);
  const Record& device = collection.records[0].record;
  const Record& runtime = collection.records[1].record;
  const Record& op = collection.records[2].record;
  EXPECT_EQ(device.kind, EventKind::device_exec);
  EXPECT_EQ(device.device, 1);
  EXPECT_EQ(device.resource, 3);
  EXPECT_EQ(device.correlation_id, runtime.correlation_id);
  EXPECT_EQ(device.external_id, op_id);
  EXPECT_EQ(runtime.external_id, op_id);
  EXPECT_EQ(op.correlation_id, op_id);
  EXPECT_EQ(op.value, 42u);
  EXPECT_EQ(op.name, mul);
  EXPECT_LE(op.start_ns, runtime.start_ns);
  EXPECT_LE(runtime.end_ns, op.end_ns);
  ASSERT_EQ(collection.threads.size() > collection.records[2].thread, true);
  EXPECT_EQ(collection.threads[collection.records[2].thread].os_thread_id,
            static_cast<std::int64_t>(::gettid()));
}

TEST(profiler_record, nested_ops_restore_the_enclosing_correlation) {
  const Collection collection = record_session({}, [] {
    ScopeHandle outer = record_scope_begin(EventKind::user_annotation, intern("block"));
    ScopeHandle inner = record_op_begin(intern("aten::add"));
    EXPECT_EQ(current_correlation_id(), inner.correlation_id);
    record_op_end(inner);
    EXPECT_EQ(current_correlation_id(), outer.correlation_id);
    record_scope_end(outer);
  });
  EXPECT_EQ(collection.records.size(), 2u);
}

TEST(profiler_record, shapes_are_recorded_only_when_asked) {
  const std::array<std::int64_t, 2> matrix = {128, 64};
  const std::array<std::int64_t, 1> vector = {128};
  const std::array<ShapeView, 3> inputs = {ShapeView(matrix), ShapeView(vector), ShapeView()};
  const Collection with_shapes = record_session({.record_shapes = true}, [&] {
    ASSERT_TRUE(shapes_requested());
    ScopeHandle op = record_op_begin(intern("aten::addmm"), record_shapes_payload(inputs));
    record_op_end(op);
  });
  ASSERT_EQ(with_shapes.records.size(), 1u);
  ASSERT_NE(with_shapes.records[0].shapes, 0u);
  EXPECT_EQ(with_shapes.shapes[with_shapes.records[0].shapes - 1],
            (std::vector<std::vector<std::int64_t>>{{128, 64}, {128}, {}}));

  const Collection without = record_session({}, [&] {
    EXPECT_FALSE(shapes_requested());
    EXPECT_EQ(record_shapes_payload(inputs), 0u);
  });
  EXPECT_TRUE(without.shapes.empty());
}

TEST(profiler_record, the_cap_drops_and_counts) {
  for (std::uint64_t cap : {1000ull, 2500ull, 1024ull}) {
    const Collection collection = record_session({.max_events = cap}, [] {
      for (int i = 0; i < 3000; ++i) record_complete({.name = 1, .start_ns = i, .end_ns = i + 1});
    });
    EXPECT_EQ(collection.records.size(), cap);
    EXPECT_EQ(collection.dropped, 3000 - cap);
  }
}

TEST(profiler_record, a_session_keeps_only_its_own_records) {
  ScopeHandle straddling;
  recording_start({});
  record_complete({.name = 1, .start_ns = 1, .end_ns = 2});
  straddling = record_op_begin(intern("aten::straddle"));
  recording_stop();
  const Collection first = recording_collect();
  EXPECT_EQ(first.records.size(), 1u);

  recording_start({});
  record_op_end(straddling);  // opened in the previous session: not part of this one
  record_complete({.name = 2, .start_ns = 3, .end_ns = 4});
  recording_stop();
  record_complete({.name = 3, .start_ns = 5, .end_ns = 6});  // after stop: ignored
  const Collection second = recording_collect();
  ASSERT_EQ(second.records.size(), 1u);
  EXPECT_EQ(second.records[0].record.name, 2u);
  EXPECT_EQ(current_correlation_id(), 0u);
}

TEST(profiler_record, threads_that_exited_are_drained) {
  std::int64_t worker_tid = 0;
  const Collection collection = record_session({}, [&] {
    std::thread worker([&] {
      worker_tid = static_cast<std::int64_t>(::gettid());
      for (int i = 0; i < 10; ++i) record_complete({.name = 1, .start_ns = i, .end_ns = i + 1});
    });
    worker.join();
  });
  ASSERT_EQ(collection.records.size(), 10u);
  EXPECT_EQ(collection.threads[collection.records[0].thread].os_thread_id, worker_tid);
}

TEST(profiler_record, clock_is_the_host_clock) {
  // Modeled (the default): time moves only by modeled host work and waits, never by itself.
  const std::int64_t a = now_ns();
  EXPECT_EQ(now_ns(), a);
  host_clock::advance(1500);
  EXPECT_EQ(now_ns(), a + 1500);
  EXPECT_EQ(host_clock::wait_until(a + 1000), 0);  // already past
  EXPECT_EQ(host_clock::wait_until(a + 4000), 2500);
  EXPECT_EQ(now_ns(), a + 4000);
  // Measured: the steady clock, monotonic, minus what Unmodeled scopes spent.
  host_clock::set_mode(host_clock::Mode::measured);
  const std::int64_t wall0 = host_clock::wall_now_ns();
  const std::int64_t m0 = now_ns();
  {
    const host_clock::Unmodeled simulator;
    const std::int64_t inside = now_ns();
    EXPECT_GE(inside, m0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(now_ns(), inside);  // the clock stands still while the simulator works
  }
  const std::int64_t m1 = now_ns();
  const std::int64_t wall1 = host_clock::wall_now_ns();
  EXPECT_LE(m1 - m0, wall1 - wall0 - 20'000'000);  // the 20 ms sleep is not host time
  EXPECT_GT(now_ns(), 0);
  host_clock::set_mode(host_clock::Mode::modeled);
}

}  // namespace
}  // namespace sightline::profiler
