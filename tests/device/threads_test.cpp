// The core from several threads the way the runtime uses it: host threads allocate, write, read and
// free HBM while the core's worker runs programs (whose matmuls use the CPU backend's thread pool).
// CI runs this executable under ThreadSanitizer (label "threads").
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/memory.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

TEST(DeviceThreads, HbmAllocationsFromManyThreads) {
  HbmMemory hbm(uint64_t{1} << 30);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&hbm, t] {
      std::vector<uint8_t> in(4096 * (t + 1), static_cast<uint8_t>(t)), out(in.size());
      for (int i = 0; i < 200; ++i) {
        const uint64_t a = hbm.allocate(in.size());
        hbm.write(a, in.data(), in.size());
        hbm.read(a, out.data(), out.size());
        EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
        hbm.free(a);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(hbm.used_bytes(), 0u);
}

TEST(DeviceThreads, RunWhileAnotherThreadAllocates) {
  Core core(Spec::builtin("trn2"));
  const uint32_t m = 256, k = 256, n = 256;
  const Executable exe = testing::matmul_program(m, k, n);
  std::vector<float> a(size_t{k} * m), b(size_t{k} * n);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : a) v = dist(gen);
  for (auto& v : b) v = dist(gen);
  const std::vector<uint64_t> io{core.hbm_allocate(a.size() * 4), core.hbm_allocate(b.size() * 4),
                                 core.hbm_allocate(size_t{m} * n * 4)};
  core.hbm_write(io[0], a.data(), a.size() * 4);
  core.hbm_write(io[1], b.data(), b.size() * 4);
  std::thread host([&core] {
    std::vector<uint8_t> bytes(1 << 16, 1);
    for (int i = 0; i < 100; ++i) {
      const uint64_t t = core.hbm_allocate(bytes.size());
      core.hbm_write(t, bytes.data(), bytes.size());
      core.hbm_free(t);
    }
  });
  std::vector<float> first(size_t{m} * n), again(first.size());
  core.run(exe, io);
  core.hbm_read(io[2], first.data(), first.size() * 4);
  core.run(exe, io);
  core.hbm_read(io[2], again.data(), again.size() * 4);
  host.join();
  EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * 4), 0);
}

}  // namespace
}  // namespace sightline::device
