// The collective engine: ring timing from the spec, exact functional results, ordering against compute
// on each core, and the events each participant records (device/collective.h, runtime/runtime.h).
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "copy_program.h"
#include "device/collective.h"
#include "runtime/runtime.h"
#include "sightline/error.h"

using namespace sightline;
using namespace sightline::runtime;
using device::CollectiveKind;
using ::testing::HasSubstr;

namespace {

RuntimeOptions cores(int n) {
  RuntimeOptions o;
  o.cores = n;
  return o;
}

std::vector<Event> of_kind(const Captured& c, RuntimeEventKind k) {
  std::vector<Event> out;
  for (const Event& e : c.events) {
    if (e.kind == k) out.push_back(e);
  }
  return out;
}

// Rank r's values: small integers, so that every sum is exact in f32 whatever the order.
std::vector<float> rank_values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 97));
  return v;
}

struct Buffers {
  std::vector<uint64_t> in, out;
};

Buffers upload(Runtime& rt, int ranks, size_t n_in, size_t n_out) {
  Buffers b;
  for (int r = 0; r < ranks; ++r) {
    b.in.push_back(rt.allocate(r, n_in * 4));
    b.out.push_back(rt.allocate(r, n_out * 4));
    const auto v = rank_values(r, n_in);
    rt.write(r, b.in.back(), v.data(), n_in * 4);
  }
  return b;
}

std::vector<float> download(Runtime& rt, int core, uint64_t address, size_t n) {
  std::vector<float> out(n);
  rt.read(core, out.data(), address, n * 4);
  return out;
}

Runtime::CollectiveRequest request(CollectiveKind kind, int ranks, const Buffers& b, uint64_t bytes) {
  Runtime::CollectiveRequest req;
  req.kind = kind;
  req.dtype = DType::f32;
  req.bytes = bytes;
  for (int r = 0; r < ranks; ++r) req.cores.push_back(r);
  req.inputs = b.in;
  req.outputs = b.out;
  return req;
}

}  // namespace

TEST(CollectiveTiming, RingStepsFromTheSpec) {
  const auto spec = device::Spec::builtin("trn2");
  const uint64_t bytes = 8ull << 20;
  const auto ar = device::ring_collective_timing(spec, CollectiveKind::all_reduce, 8, bytes);
  EXPECT_EQ(ar.steps, 14u);
  EXPECT_EQ(ar.chunk_bytes, bytes / 8);
  EXPECT_EQ(ar.bus_bytes, 2 * 7 * bytes / 8);
  EXPECT_DOUBLE_EQ(ar.duration_ns, 14 * (spec.collective.step_latency_ns +
                                         static_cast<double>(bytes / 8) / spec.collective.link_bytes_per_ns));
  const auto ag = device::ring_collective_timing(spec, CollectiveKind::all_gather, 8, bytes);
  const auto rs = device::ring_collective_timing(spec, CollectiveKind::reduce_scatter, 8, bytes);
  EXPECT_EQ(ag.steps, 7u);
  EXPECT_DOUBLE_EQ(ag.duration_ns, rs.duration_ns);
  EXPECT_DOUBLE_EQ(ar.duration_ns, ag.duration_ns + rs.duration_ns);  // all-reduce = reduce-scatter + all-gather
  EXPECT_EQ(device::ring_collective_timing(spec, CollectiveKind::all_reduce, 1, bytes).duration_ns, 0);
}

TEST(CollectiveTiming, BadSizesAndSpecsAreClearErrors) {
  const auto spec = device::Spec::builtin("trn2");
  EXPECT_THAT([&] { device::ring_collective_timing(spec, CollectiveKind::all_gather, 3, 100); },
              ::testing::ThrowsMessage<Error>(HasSubstr("do not split into 3 equal parts")));
  device::Spec none = spec;
  none.collective = {};
  EXPECT_THAT([&] { device::ring_collective_timing(none, CollectiveKind::all_reduce, 2, 64); },
              ::testing::ThrowsMessage<Error>(HasSubstr("has no collective section")));
}

// A ring over the cores of several chips: each step is bounded by its slowest hop, by hand from the spec
// figures (docs/hardware-model.md §1.8). trn1: 2 cores per chip, so 4 cores 0-3 are chips 0 and 1, with
// hops 0->1 and 2->3 inside a chip (205 B/ns) and 1->2, 3->0 over NeuronLink (96 B/ns): the chip link
// bounds. trn2: 8 cores per chip, 16 cores over 2 chips: the chip link (320 B/ns) beats the in-chip
// hop (181 B/ns), which bounds, as on one chip.
TEST(CollectiveTiming, TheSlowestHopOfARingOverChipsBoundsEveryStep) {
  const auto trn1 = device::Spec::builtin("trn1");
  ASSERT_EQ(trn1.cores_per_instance, 2u);
  EXPECT_EQ(trn1.collective.chips_per_instance, 16u);
  const uint64_t bytes = 4 * 96 * 205 * 64;  // chunks of 96 x 205 x 64 bytes: whole nanoseconds on both links
  const std::vector<int> two_chips = {0, 1, 2, 3};
  const auto t = device::ring_collective_timing(trn1, CollectiveKind::all_reduce, two_chips, bytes);
  EXPECT_EQ(t.steps, 6u);
  EXPECT_EQ(t.chips, 2u);
  EXPECT_TRUE(t.chip_hop_bounds);
  // 6 steps x (1500 ns + 1,259,520 B / 96 B/ns = 13,120 ns) = 87,720 ns
  EXPECT_EQ(t.chunk_bytes, 1'259'520u);
  EXPECT_DOUBLE_EQ(t.duration_ns, 6 * (1500.0 + 13'120.0));
  // The same cores on one chip's links only: 6 x (1500 + 1,259,520 / 205 = 6,144) = 45,864 ns.
  EXPECT_DOUBLE_EQ(device::ring_collective_timing(trn1, CollectiveKind::all_reduce, 4, bytes).duration_ns,
                   6 * (1500.0 + 6'144.0));
  // One core per chip (cores 0, 2, 4): every hop crosses chips.
  const std::vector<int> spread = {0, 2, 4};
  const auto g = device::ring_collective_timing(trn1, CollectiveKind::all_gather, spread, 3 * 96 * 1000);
  EXPECT_EQ(g.chips, 3u);
  EXPECT_DOUBLE_EQ(g.duration_ns, 2 * (1500.0 + 1000.0));  // 2 steps x (1500 + 96,000 B / 96 B/ns)

  const auto trn2 = device::Spec::builtin("trn2");
  std::vector<int> sixteen(16);
  std::iota(sixteen.begin(), sixteen.end(), 0);
  const uint64_t big = 16 * 181 * 320 * 8;  // chunks of 463,360 bytes
  const auto u = device::ring_collective_timing(trn2, CollectiveKind::reduce_scatter, sixteen, big);
  EXPECT_EQ(u.chips, 2u);
  EXPECT_FALSE(u.chip_hop_bounds);
  // 15 steps x (1500 + 463,360 / 181 = 2,560) = 60,900 ns; the NeuronLink hop would take 1500 + 1,448.
  EXPECT_DOUBLE_EQ(u.duration_ns, 15 * (1500.0 + 2'560.0));
}

TEST(CollectiveTiming, ARingOverChipsNeedsChipLinks) {
  device::Spec old = device::Spec::builtin("trn2");
  old.collective.chips_per_instance = 1;  // what a spec written before chip links reads as
  old.collective.chip_link_bytes_per_ns = 0;
  const std::vector<int> cores = {6, 7, 8, 9};
  EXPECT_THAT([&] { device::ring_collective_timing(old, CollectiveKind::all_reduce, cores, 4096); },
              ::testing::ThrowsMessage<Error>(HasSubstr("core 8 is beyond the 1 chip(s) of 8 cores")));
  old.collective.chips_per_instance = 2;
  EXPECT_THAT([&] { device::ring_collective_timing(old, CollectiveKind::all_reduce, cores, 4096); },
              ::testing::ThrowsMessage<Error>(HasSubstr("span 2 chips, but device spec 'trn2' has no chip-to-chip links")));
  // Within one chip it still runs, as before.
  const std::vector<int> one_chip = {4, 5, 6, 7};
  EXPECT_GT(device::ring_collective_timing(old, CollectiveKind::all_reduce, one_chip, 4096).duration_ns, 0);
}

// 16 cores of two trn2 chips in one process: exact sums on every rank, timed by the ring over both chips.
TEST(Collective, AllReduceOverTwoChipsIsExactAndTimedByTheRing) {
  const int ranks = 16;
  const size_t n = 16 * 64;
  Runtime rt(device::Spec::builtin("trn2"), cores(ranks));
  CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  const Buffers b = upload(rt, ranks, n, n);
  rt.collective(request(CollectiveKind::all_reduce, ranks, b, n * 4));
  std::vector<float> expected(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const auto v = rank_values(r, n);
    for (size_t i = 0; i < n; ++i) expected[i] += v[i];
  }
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(download(rt, r, b.out[r], n), expected) << "rank " << r;
  const Captured c = rt.drain();
  ASSERT_EQ(c.collectives.size(), 1u);
  std::vector<int> all(16);
  std::iota(all.begin(), all.end(), 0);
  const auto timing = device::ring_collective_timing(rt.spec(), CollectiveKind::all_reduce, all, n * 4);
  EXPECT_EQ(timing.chips, 2u);
  for (const Event& e : of_kind(c, RuntimeEventKind::cc_running)) {
    EXPECT_EQ(e.end_ns - e.start_ns, static_cast<int64_t>(timing.duration_ns + 0.5));
  }
}

TEST(Collective, AllReduceIsExactOnEveryRankAndTimedByTheRing) {
  const int ranks = 4;
  const size_t n = 128 * 64;
  Runtime rt(device::Spec::builtin("trn2"), cores(ranks));
  CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  const Buffers b = upload(rt, ranks, n, n);
  const auto seqs = rt.collective(request(CollectiveKind::all_reduce, ranks, b, n * 4));
  ASSERT_EQ(seqs.size(), 4u);
  std::vector<float> expected(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const auto v = rank_values(r, n);
    for (size_t i = 0; i < n; ++i) expected[i] += v[i];
  }
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(download(rt, r, b.out[r], n), expected) << "rank " << r;

  const Captured c = rt.drain();
  const auto running = of_kind(c, RuntimeEventKind::cc_running);
  ASSERT_EQ(running.size(), 4u);
  ASSERT_EQ(c.collectives.size(), 1u);
  const CollectiveRecord& rec = c.collectives[0];
  EXPECT_EQ(rec.cores, (std::vector<int>{0, 1, 2, 3}));
  const auto timing = device::ring_collective_timing(rt.spec(), CollectiveKind::all_reduce, ranks, n * 4);
  for (const Event& e : running) {
    EXPECT_EQ(e.start_ns, rec.start_ns);  // lined up on every core
    EXPECT_EQ(e.end_ns - e.start_ns, static_cast<int64_t>(timing.duration_ns + 0.5));
    EXPECT_EQ(e.seq, rec.seqs[static_cast<size_t>(e.core)]);
  }
  EXPECT_EQ(of_kind(c, RuntimeEventKind::cc_schedule).size(), 4u);
}

TEST(Collective, AllGatherAndReduceScatter) {
  const int ranks = 2;
  const size_t n = 1000;
  Runtime rt(device::Spec::builtin("trn1"), cores(ranks));
  {
    const Buffers b = upload(rt, ranks, n, n * ranks);
    rt.collective(request(CollectiveKind::all_gather, ranks, b, n * ranks * 4));
    std::vector<float> expected = rank_values(0, n);
    const auto second = rank_values(1, n);
    expected.insert(expected.end(), second.begin(), second.end());
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(download(rt, r, b.out[r], n * ranks), expected);
  }
  {
    const Buffers b = upload(rt, ranks, n, n / ranks);
    rt.collective(request(CollectiveKind::reduce_scatter, ranks, b, n * 4));
    const auto a = rank_values(0, n), c = rank_values(1, n);
    for (int r = 0; r < ranks; ++r) {
      const auto got = download(rt, r, b.out[r], n / ranks);
      for (size_t i = 0; i < n / ranks; ++i) ASSERT_EQ(got[i], a[r * n / ranks + i] + c[r * n / ranks + i]) << r << " " << i;
    }
  }
}

TEST(Collective, BfloatSumsFollowTheRingOrder) {
  // Three ranks of bf16: chunk c is summed starting at rank c + 1, rounding to bf16 at every hop.
  const std::vector<float> values = {1.0f, 0.00390625f, 0.00390625f};  // 1 + 2^-8 + 2^-8
  std::vector<std::vector<bf16>> in(3, std::vector<bf16>(3));
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 3; ++i) in[r][i] = bf16(values[static_cast<size_t>(r)]);
  }
  std::vector<std::vector<bf16>> out(3, std::vector<bf16>(3));
  std::vector<const std::byte*> ip;
  std::vector<std::byte*> op;
  for (int r = 0; r < 3; ++r) {
    ip.push_back(reinterpret_cast<const std::byte*>(in[r].data()));
    op.push_back(reinterpret_cast<std::byte*>(out[r].data()));
  }
  device::ring_collective_compute(CollectiveKind::all_reduce, DType::bf16, ip, op, 3 * 2);
  // chunk 0: r1 + r2 + r0 = 2^-7 + 1 = 1.0078125 (exact); chunk 1: r2 + r0 = 1 (rounds), + r1 = 1;
  // chunk 2: r0 + r1 = 1, + r2 = 1.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(static_cast<float>(out[r][0]), 1.0078125f);
    EXPECT_EQ(static_cast<float>(out[r][1]), 1.0f);
    EXPECT_EQ(static_cast<float>(out[r][2]), 1.0f);
  }
}

TEST(Collective, StartsWhenTheLastPeerIsReadyAndOverlapsIndependentCompute) {
  const int ranks = 2;
  const uint32_t n = 512;
  const uint64_t bytes = 128ull * n * 4;
  Runtime rt(device::Spec::builtin("trn2"), cores(ranks));
  CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  const auto scale = std::make_shared<device::Executable>(test_programs::scale_program(n, 2.0f));
  const auto exe0 = rt.load(0, scale), exe1 = rt.load(1, scale);
  std::vector<uint64_t> x, y, z, w;
  for (int r = 0; r < ranks; ++r) {
    w.push_back(rt.allocate(r, bytes));
    x.push_back(rt.allocate(r, bytes));
    y.push_back(rt.allocate(r, bytes));
    z.push_back(rt.allocate(r, bytes));
    const auto v = rank_values(r, 128 * n);
    rt.write(r, x[r], v.data(), bytes);
  }
  // Core 0 computes twice before the collective, core 1 once: core 1 waits at the barrier.
  rt.execute_schedule(0, exe0, {x[0], z[0]});
  rt.execute_schedule(0, exe0, {x[0], z[0]});
  rt.execute_schedule(1, exe1, {x[1], z[1]});
  Runtime::CollectiveRequest req;
  req.kind = CollectiveKind::all_reduce;
  req.bytes = bytes;
  req.cores = {0, 1};
  req.inputs = {x[0], x[1]};
  req.outputs = {y[0], y[1]};
  rt.collective(req);
  // After it: one execution on core 0 independent of its buffers, one that reads its output.
  rt.execute_schedule(0, exe0, {z[0], w[0]});
  rt.execute_schedule(1, exe1, {y[1], z[1]});
  rt.synchronize_all();
  const Captured c = rt.drain();
  ASSERT_EQ(c.collectives.size(), 1u);
  const CollectiveRecord& rec = c.collectives[0];
  EXPECT_EQ(rec.start_ns, std::max(rec.ready_ns[0], rec.ready_ns[1]));
  EXPECT_GT(rec.ready_ns[0], rec.ready_ns[1]);
  const auto barrier = of_kind(c, RuntimeEventKind::cc_barrier);
  ASSERT_EQ(barrier.size(), 1u);
  EXPECT_EQ(barrier[0].core, 1);
  EXPECT_EQ(barrier[0].end_ns, rec.start_ns);
  const auto runs = of_kind(c, RuntimeEventKind::exec_running);
  const Event* independent = nullptr;
  const Event* dependent = nullptr;
  for (const Event& e : runs) {
    if (e.core == 0 && e.start_ns >= rec.ready_ns[0]) independent = &e;
    if (e.core == 1 && e.start_ns >= rec.start_ns) dependent = &e;
  }
  ASSERT_NE(independent, nullptr);
  ASSERT_NE(dependent, nullptr);
  EXPECT_LT(independent->start_ns, rec.end_ns);  // compute overlaps the collective
  EXPECT_GE(dependent->start_ns, rec.end_ns);    // the consumer waits for it
}

TEST(Collective, TimingOnlyGivesTheSameTimes) {
  auto run = [](bool functional) {
    RuntimeOptions o = cores(2);
    o.functional = functional;
    Runtime rt(device::Spec::builtin("trn2"), o);
    CaptureOptions cap;
    cap.enabled = true;
    rt.set_capture(cap);
    const Buffers b = upload(rt, 2, 4096, 4096);
    rt.collective(request(CollectiveKind::all_reduce, 2, b, 4096 * 4));
    rt.synchronize_all();
    // The host clock runs on across runtimes: times relative to the first event.
    std::vector<std::pair<int64_t, int64_t>> times;
    const Captured c = rt.drain();
    for (const Event& e : c.events) times.emplace_back(e.start_ns - c.events[0].start_ns, e.end_ns - c.events[0].start_ns);
    return times;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(Collective, RequestsAreChecked) {
  Runtime rt(device::Spec::builtin("trn2"), cores(2));
  const Buffers b = upload(rt, 2, 64, 64);
  Runtime::CollectiveRequest req = request(CollectiveKind::all_reduce, 2, b, 64 * 4);
  req.cores = {1, 1};
  EXPECT_THAT([&] { rt.collective(req); }, ::testing::ThrowsMessage<Error>(HasSubstr("lists core 1 twice")));
  req.cores = {0, 1};
  req.outputs.pop_back();
  EXPECT_THAT([&] { rt.collective(req); }, ::testing::ThrowsMessage<Error>(HasSubstr("one input and one output per core")));
}
