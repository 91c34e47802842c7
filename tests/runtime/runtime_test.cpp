#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "copy_program.h"
#include "runtime/runtime.h"
#include "sightline/error.h"

using namespace sightline;
using namespace sightline::runtime;
using ::testing::HasSubstr;

namespace {

std::vector<float> iota_values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f;
  return v;
}

std::vector<Event> of_kind(const Captured& c, RuntimeEventKind k) {
  std::vector<Event> out;
  for (const Event& e : c.events) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

RuntimeOptions two_cores() {
  RuntimeOptions o;
  o.cores = 2;
  return o;
}

}  // namespace

TEST(Runtime, WriteExecuteReadComputesTheResult) {
  Runtime rt(device::Spec::builtin("trn2"), two_cores());
  CaptureOptions cap;
  cap.enabled = true;
  cap.instruction_trace_cores = {true, false};
  rt.set_capture(cap);
  const uint32_t n = 256;
  const uint64_t bytes = 128ull * n * 4;
  const auto exe = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 3.0f)));
  const uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
  const auto host = iota_values(128 * n);
  rt.write(0, x, host.data(), bytes, /*correlation=*/11);
  const uint64_t seq = rt.execute_schedule(0, exe, {x, y}, /*correlation=*/12);
  std::vector<float> out(host.size());
  rt.read(0, out.data(), y, bytes, 13);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], host[i] * 3.0f) << i;
  EXPECT_TRUE(rt.is_completed(0, seq));

  const Captured c = rt.drain();
  const auto runs = of_kind(c, RuntimeEventKind::exec_running);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].correlation, 12u);
  EXPECT_EQ(runs[0].seq, seq);
  // The copy in is timed by the DMA model: fixed cost + bytes over the bandwidth.
  const auto copies = of_kind(c, RuntimeEventKind::copy_in);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_NEAR(static_cast<double>(copies[0].end_ns - copies[0].start_ns), device::dma_copy_ns(rt.spec(), bytes, 16), 1.0);
  EXPECT_EQ(copies[0].correlation, 11u);
  // First execution: a switch to the executable and the first-load cost come before it.
  ASSERT_EQ(of_kind(c, RuntimeEventKind::model_switch).size(), 1u);
  ASSERT_EQ(of_kind(c, RuntimeEventKind::first_load).size(), 1u);
  EXPECT_EQ(of_kind(c, RuntimeEventKind::first_load)[0].end_ns, runs[0].start_ns);
  // The device starts no earlier than submission + the submission cost, and after the copy in.
  const auto sched = of_kind(c, RuntimeEventKind::execute_schedule);
  ASSERT_EQ(sched.size(), 1u);
  EXPECT_GE(runs[0].start_ns, sched[0].start_ns + static_cast<int64_t>(rt.spec().runtime.submission_ns));
  EXPECT_GE(runs[0].start_ns, copies[0].end_ns);
  // The instruction trace of core 0 was kept and lies inside the execution.
  ASSERT_EQ(c.traces.size(), 1u);
  EXPECT_EQ(c.traces[0].result.records.size(), 3u);
  EXPECT_EQ(c.traces[0].start_ns, runs[0].start_ns);
  EXPECT_NEAR(c.traces[0].result.duration_ns, static_cast<double>(runs[0].end_ns - runs[0].start_ns), 1.0);
  // The host's read ended after the modeled completion: host and device timelines stay causal.
  const auto reads = of_kind(c, RuntimeEventKind::tensor_read);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_GE(reads[0].end_ns, runs[0].end_ns);
}

TEST(Runtime, RepeatedExecutionsSkipSwitchAndLoadButDifferentOnesPayTheSwitch) {
  Runtime rt(device::Spec::builtin("trn2"), two_cores());
  CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  const uint32_t n = 64;
  const uint64_t bytes = 128ull * n * 4;
  const auto a = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f, "a")));
  const auto b = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f, "b")));
  const uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
  const auto host = iota_values(128 * n);
  rt.write(0, x, host.data(), bytes);
  for (ExecutableId e : std::vector<ExecutableId>{a, a, a, b, a}) rt.execute_schedule(0, e, {x, y});
  rt.synchronize(0);
  const Captured c = rt.drain();
  EXPECT_EQ(of_kind(c, RuntimeEventKind::exec_running).size(), 5u);
  EXPECT_EQ(of_kind(c, RuntimeEventKind::model_switch).size(), 3u);  // a, b, a
  EXPECT_EQ(of_kind(c, RuntimeEventKind::first_load).size(), 2u);    // a, b
  // Executions never overlap on a core, and the same program takes the same device time.
  const auto runs = of_kind(c, RuntimeEventKind::exec_running);
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_GE(runs[i].start_ns, runs[i - 1].end_ns);
    EXPECT_EQ(runs[i].end_ns - runs[i].start_ns, runs[0].end_ns - runs[0].start_ns);
  }
}

TEST(Runtime, ExhaustedDeviceMemoryNamesAskedAndFree) {
  Runtime rt(device::Spec::builtin("trn2"), two_cores());
  const uint64_t free_before = rt.free_bytes(1);
  try {
    (void)rt.allocate(1, free_before + 1);
    FAIL() << "allocation beyond capacity succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device memory exhausted on neuron core 1"));
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(free_before + 1)));
  }
  EXPECT_EQ(rt.free_bytes(1), free_before);  // nothing was lost
  const uint64_t a = rt.allocate(1, 1 << 20);
  EXPECT_LT(rt.free_bytes(1), free_before);
  rt.free(1, a);
  rt.synchronize(1);
  EXPECT_EQ(rt.free_bytes(1), free_before);
}

TEST(Runtime, BadBindingsAndCoresAreErrors) {
  Runtime rt(device::Spec::builtin("trn2"), two_cores());
  const auto exe = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(64, 2.0f)));
  EXPECT_THROW((void)rt.execute_schedule(0, exe, {1}), Error);
  EXPECT_THROW((void)rt.allocate(5, 16), Error);
  // An execution whose program reads memory nobody wrote fails, and the waiter sees the error.
  const uint64_t x = rt.allocate(0, 128 * 64 * 4), y = rt.allocate(0, 128 * 64 * 4);
  rt.execute_schedule(0, exe, {x, y});
  EXPECT_THROW(rt.synchronize(0), Error);
  rt.synchronize(0);  // reported once; the core keeps working
}

// The runtime checks an executable's instructions at its first execution on a core, and runs them
// unchecked after (RunOptions::validated); one that fails the check fails every time, never runs.
TEST(Runtime, AnInvalidExecutableFailsItsCheckAtEveryExecution) {
  Runtime rt(device::Spec::builtin("trn2"), two_cores());
  device::Executable bad = test_programs::scale_program(64, 2.0f);
  bad.stream(device::Engine::vector)[0].dst.offset = uint64_t{1} << 30;  // past a partition's bytes
  const auto exe = rt.load(0, std::make_shared<device::Executable>(std::move(bad)));
  const uint64_t x = rt.allocate(0, 128 * 64 * 4), y = rt.allocate(0, 128 * 64 * 4);
  const std::vector<float> host(128 * 64, 1.0f);
  rt.write(0, x, host.data(), host.size() * 4);
  for (int attempt = 0; attempt < 2; ++attempt) {
    rt.execute_schedule(0, exe, {x, y});
    try {
      rt.synchronize(0);
      ADD_FAILURE() << "attempt " << attempt << ": the invalid executable ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
    }
  }
  // A valid executable on the same core still runs.
  const auto good = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(64, 2.0f)));
  rt.execute_schedule(0, good, {x, y});
  rt.synchronize(0);
  std::vector<float> out(host.size());
  rt.read(0, out.data(), y, out.size() * 4);
  EXPECT_EQ(out[0], 2.0f);
}

namespace {

// What a runtime with these options captures, at most `max_events` per core and stream, of a write and
// `executions` runs of one [128, n] scale program on core 0.
Captured capped_scale_loop(RuntimeOptions o, size_t max_events, uint32_t n, int executions, bool traces = false) {
  Runtime rt(device::Spec::builtin("trn2"), o);
  CaptureOptions cap;
  cap.enabled = true;
  cap.max_events_per_core = max_events;
  cap.instruction_trace_cores = {traces, false};
  rt.set_capture(cap);
  const uint64_t bytes = 128ull * n * 4;
  const auto exe = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f)));
  const uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
  const auto host = iota_values(128 * n);
  rt.write(0, x, host.data(), bytes);
  for (int i = 0; i < executions; ++i) rt.execute_schedule(0, exe, {x, y});
  rt.synchronize(0);
  return rt.drain();
}

}  // namespace

TEST(Runtime, FullQueueAppliesBackPressure) {
  RuntimeOptions o = two_cores();
  o.queue_capacity = 1;
  const Captured c = capped_scale_loop(o, 8, 2048, 20);
  // More events happened than the cap allows: the rest are counted, not lost silently. The host's calls
  // and the device's work each keep 8.
  EXPECT_EQ(c.events.size(), 16u);
  EXPECT_GT(c.dropped_events_per_core[0], 0u);
}

// What a capped capture keeps never depends on the simulator's pace: the host's calls and the device's
// events (with its instruction records) each keep their own first events. With one shared budget, the
// mix kept depended on how far the simulator's thread had run ahead of the caller in wall time.
TEST(Runtime, CappedCaptureKeepsTheSameEventsWhateverTheSimulatorsPace) {
  // Functional simulation computes every value (slow), timing only none (fast): the same modeled times,
  // a different pace of the simulator's thread against the caller's.
  auto capture = [](bool functional, bool traces) {
    RuntimeOptions o = two_cores();
    o.functional = functional;
    return capped_scale_loop(o, 40, 256, 60, traces);
  };
  // The kept events of one stream, their times from the capture's first event (the modeled host clock
  // runs on from one runtime to the next).
  auto kept = [](const Captured& c, bool device) {
    std::vector<std::tuple<RuntimeEventKind, uint64_t, int64_t, int64_t>> out;
    int64_t origin = std::numeric_limits<int64_t>::max();
    for (const Event& e : c.events) origin = std::min(origin, e.start_ns);
    for (const Event& e : c.events) {
      if (runtime_event_is_device(e.kind) == device) {
        out.emplace_back(e.kind, e.seq, e.start_ns - origin, e.end_ns - origin);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  for (const bool traces : {false, true}) {
    const Captured a = capture(true, traces), b = capture(false, traces);
    ASSERT_GT(a.dropped_events_per_core[0], 0u);
    EXPECT_EQ(a.dropped_events_per_core, b.dropped_events_per_core);
    EXPECT_EQ(a.dropped_traces_per_core, b.dropped_traces_per_core);
    EXPECT_EQ(kept(a, false), kept(b, false));
    EXPECT_EQ(kept(a, true), kept(b, true));
    EXPECT_EQ(kept(a, false).size(), 40u);  // the host's first 40 calls
    ASSERT_EQ(a.traces.size(), b.traces.size());
    for (size_t i = 0; i < a.traces.size(); ++i) EXPECT_EQ(a.traces[i].seq, b.traces[i].seq);
    EXPECT_EQ(a.traces.empty(), !traces);
  }
}

namespace {

// The device timeline of an ESM-sized eager loop (hundreds of executions of a few executables, a
// write and a read now and then), run through a runtime with these options.
std::vector<Event> eager_loop_device_events(RuntimeOptions options, int executions, int* queue_full_waits = nullptr) {
  Runtime rt(device::Spec::builtin("trn2"), options);
  CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  const uint32_t n = 512;
  const uint64_t bytes = 128ull * n * 4;
  std::vector<ExecutableId> exes;
  for (const char* name : {"q", "k", "v", "o"}) {
    exes.push_back(rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 1.5f, name))));
  }
  const uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
  const auto host = iota_values(128 * n);
  std::vector<float> out(host.size());
  rt.write(0, x, host.data(), bytes);
  for (int i = 0; i < executions; ++i) {
    rt.execute_schedule(0, exes[static_cast<size_t>(i) % exes.size()], {x, y});
    if (i % 97 == 0) rt.write(0, x, host.data(), bytes);
  }
  rt.read(0, out.data(), y, bytes);
  rt.synchronize_all();
  std::vector<Event> device;
  for (const Event& e : rt.drain().events) {
    if (runtime_event_is_device(e.kind)) device.push_back(e);
    if (queue_full_waits != nullptr && e.kind == RuntimeEventKind::queue_full_wait) ++*queue_full_waits;
  }
  return device;
}

int64_t span_of(const std::vector<Event>& events) {
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const Event& e : events) {
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
  }
  return last - first;
}

// The same events at the same times, relative to each timeline's first event (the host clock goes on
// from one runtime to the next in a process).
bool same_timeline(const std::vector<Event>& a, const std::vector<Event>& b) {
  if (a.size() != b.size() || a.empty()) return a.size() == b.size();
  const int64_t a0 = a.front().start_ns, b0 = b.front().start_ns;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].start_ns - a0 != b[i].start_ns - b0 || a[i].end_ns - a0 != b[i].end_ns - b0) {
      ADD_FAILURE() << "event " << i << " (" << runtime_event_name(a[i].kind) << "): [" << a[i].start_ns - a0 << ", "
                    << a[i].end_ns - a0 << "] vs (" << runtime_event_name(b[i].kind) << ") [" << b[i].start_ns - b0
                    << ", " << b[i].end_ns - b0 << "]";
      return false;
    }
  }
  return true;
}

}  // namespace

TEST(Runtime, ABoundedQueueGivesTheSameDeviceSpanAsAnUnboundedOne) {
  // 600 executions through an 8-deep queue: the host waits (in modeled time) for queue slots, but
  // the device always has work queued, so its timeline is the unbounded queue's, and the simulator's
  // pace (which the small queue waits on in wall time) never shows.
  RuntimeOptions small;
  small.cores = 1;
  small.queue_capacity = 8;
  RuntimeOptions unbounded = small;
  unbounded.queue_capacity = size_t{1} << 40;
  int bounded_waits = 0, unbounded_waits = 0;
  const auto bounded_events = eager_loop_device_events(small, 600, &bounded_waits);
  const auto unbounded_events = eager_loop_device_events(unbounded, 600, &unbounded_waits);
  EXPECT_GT(bounded_waits, 500);  // the host really was held back by the full queue
  EXPECT_EQ(unbounded_waits, 0);
  EXPECT_EQ(span_of(bounded_events), span_of(unbounded_events));
  EXPECT_TRUE(same_timeline(bounded_events, unbounded_events));
  EXPECT_EQ(bounded_events.size(), unbounded_events.size());
}

TEST(Runtime, TimingOnlyGivesTheSameModeledTimes) {
  RuntimeOptions functional;
  functional.cores = 1;
  RuntimeOptions timing_only = functional;
  timing_only.functional = false;
  const auto computed = eager_loop_device_events(functional, 120);
  const auto timed = eager_loop_device_events(timing_only, 120);
  EXPECT_TRUE(same_timeline(computed, timed));
  // Results are not computed in timing-only mode: a read returns NaN, never stale data.
  Runtime rt(device::Spec::builtin("trn2"), timing_only);
  const uint64_t y = rt.allocate(0, 16);
  float out[4] = {1, 2, 3, 4};
  rt.read(0, out, y, sizeof(out));
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST(Runtime, HostWaitsAreModeledNotMeasured) {
  // The host's view of a read: its wait ends at the modeled completion, however long the simulator took.
  const auto run = [] {
    Runtime rt(device::Spec::builtin("trn2"), two_cores());
    CaptureOptions cap;
    cap.enabled = true;
    rt.set_capture(cap);
    const uint32_t n = 1024;
    const uint64_t bytes = 128ull * n * 4;
    const auto exe = rt.load(0, std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f)));
    const uint64_t x = rt.allocate(0, bytes), y = rt.allocate(0, bytes);
    const auto host = iota_values(128 * n);
    std::vector<float> out(host.size());
    const int64_t t0 = now_ns();
    rt.write(0, x, host.data(), bytes);
    rt.execute_schedule(0, exe, {x, y});
    rt.read(0, out.data(), y, bytes);
    std::vector<std::pair<int64_t, int64_t>> times;
    for (const Event& e : rt.drain().events) times.emplace_back(e.start_ns - t0, e.end_ns - t0);
    return times;
  };
  const auto first = run();
  const auto second = run();
  EXPECT_EQ(first, second);
  for (const auto& [start, end] : first) EXPECT_LE(start, end);
}
