// Several host threads driving several cores at once (run under TSan in CI).
#include <thread>

#include <gtest/gtest.h>

#include "copy_program.h"
#include "runtime/runtime.h"

using namespace sightline;
using namespace sightline::runtime;

TEST(RuntimeThreads, ConcurrentSubmittersOnFourCores) {
  RuntimeOptions o;
  o.cores = 4;
  o.queue_capacity = 4;
  Runtime rt(device::Spec::builtin("trn2"), o);
  CaptureOptions cap;
  cap.enabled = true;
  cap.instruction_trace_cores = {true, true, true, true};
  rt.set_capture(cap);
  const uint32_t n = 32;
  const uint64_t bytes = 128ull * n * 4;
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const int core = t % 4;
      const auto exe = rt.load(core, std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f)));
      const uint64_t x = rt.allocate(core, bytes), y = rt.allocate(core, bytes);
      std::vector<float> host(128 * n, static_cast<float>(t)), out(128 * n);
      rt.write(core, x, host.data(), bytes);
      for (int i = 0; i < 10; ++i) rt.execute_schedule(core, exe, {x, y});
      rt.read(core, out.data(), y, bytes);
      bool good = true;
      for (float v : out) good = good && v == 2.0f * static_cast<float>(t);
      rt.free(core, x);
      rt.free(core, y);
      ok[static_cast<size_t>(t)] = good;
    });
  }
  for (auto& th : threads) th.join();
  rt.synchronize_all();
  for (int t = 0; t < 8; ++t) EXPECT_TRUE(ok[static_cast<size_t>(t)]) << t;
  const Captured c = rt.drain();
  size_t runs = 0;
  for (const Event& e : c.events) runs += e.kind == RuntimeEventKind::exec_running;
  EXPECT_EQ(runs, 80u);
  EXPECT_EQ(c.traces.size(), 80u);
  EXPECT_EQ(rt.in_flight(), 0u);
}
