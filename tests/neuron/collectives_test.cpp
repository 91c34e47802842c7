// Collectives and tensor parallelism through the public API, and the profiles they give: each core's
// collective lane, distributedInfo and the manifest (neuron.h, parallel.h).
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/manifest.h"
#include "sightline/device/spec.h"
#include "sightline/neuron.h"
#include "sightline/parallel.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"
#include "collective_util.h"
#include "study_util.h"

using namespace sightline;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using test::core;
using test::read_json;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(a.to(Device::cpu()).to(DType::f32) - b.to(Device::cpu()).to(DType::f32))).item();
}

}  // namespace

TEST(Collectives, MatchTheCpuOnEveryRank) {
  Generator gen(3);
  const Tensor a = randn({64, 48}, {}, &gen), b = randn({64, 48}, {}, &gen);
  const std::vector<Tensor> sums = neuron::all_reduce({a.to(core(0)), b.to(core(1))});
  ASSERT_EQ(sums.size(), 2u);
  for (const Tensor& s : sums) EXPECT_EQ(max_abs_diff(s, a + b), 0.0);  // two ranks: one rounding, as a + b
  const std::vector<Tensor> gathered = neuron::all_gather({a.to(core(0)), b.to(core(1))}, 1);
  for (const Tensor& g : gathered) EXPECT_EQ(max_abs_diff(g, cat({a, b}, 1)), 0.0);
  const std::vector<Tensor> scattered = neuron::reduce_scatter({a.to(core(0)), b.to(core(1))}, 0);
  EXPECT_EQ(max_abs_diff(scattered[0], (a + b).slice(0, 0, 32)), 0.0);
  EXPECT_EQ(max_abs_diff(scattered[1], (a + b).slice(0, 32, 64)), 0.0);
}

TEST(Collectives, BadShardsAreClearErrors) {
  const Tensor a = ones({4, 4});
  EXPECT_THAT([&] { neuron::all_reduce({a.to(core(0)), a.to(core(0))}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("each rank must be a different core")));
  EXPECT_THAT([&] { neuron::all_reduce({a.to(core(0)), ones({4, 5}).to(core(1))}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("one shape and dtype")));
  EXPECT_THAT([&] { neuron::all_reduce({a, a.to(core(1))}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("must be on a neuron core")));
  EXPECT_THAT([&] { neuron::all_reduce({ones({2}, DType::boolean).to(core(0)), ones({2}, DType::boolean).to(core(1))}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot sum bool tensors")));
  EXPECT_THAT([&] { neuron::reduce_scatter({ones({3, 4}).to(core(0)), ones({3, 4}).to(core(1))}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("does not divide into 2 ranks")));
}

TEST(TensorParallel, ColumnThenRowParallelMatchesOneCore) {
  Generator gen(5);
  const Tensor x = randn({8, 64}, {}, &gen), w1 = randn({96, 64}, {}, &gen) * 0.1, w2 = randn({64, 96}, {}, &gen) * 0.1;
  const Tensor expected = linear(silu(linear(x.to(core(0)), w1.to(core(0)))), w2.to(core(0)));
  const std::vector<Device> tp = parallel::devices(2);
  std::vector<Tensor> h = parallel::column_parallel_linear(parallel::replicate(x, tp), parallel::shard(w1, 0, tp));
  for (Tensor& t : h) t = silu(t);
  const std::vector<Tensor> y = parallel::row_parallel_linear(h, parallel::shard(w2, 1, tp));
  for (const Tensor& t : y) EXPECT_LT(max_abs_diff(t, expected), 1e-5);
  const std::vector<Tensor> gathered =
      parallel::column_parallel_linear(parallel::replicate(x, tp), parallel::shard(w1, 0, tp), {}, true);
  EXPECT_LT(max_abs_diff(gathered[1], linear(x, w1)), 1e-5);
  EXPECT_THAT([&] { parallel::shard(w1, 1, parallel::devices(3)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("does not split into 3 equal shards")));
}

TEST(TensorParallel, ProfilesShowCollectiveLanesAndRanks) {
  const fs::path root = test::fresh_dir("collectives", "ranks");
  Generator gen(9);
  const Tensor x = randn({128, 128}, {}, &gen), w = randn({128, 128}, {}, &gen) * 0.1;
  const std::vector<Device> tp = parallel::devices(2);
  const std::vector<Tensor> xs = parallel::replicate(x, tp), ws = parallel::shard(w, 1, tp);
  // Rank 1 does more work before each collective on core 1: core 0 waits for it.
  auto step = [&](int extra) {
    std::vector<Tensor> part = {xs[0].slice(1, 0, 64).contiguous(), xs[1].slice(1, 64, 128).contiguous()};
    for (int i = 0; i < extra; ++i) part[1] = part[1] * 1.0;
    parallel::row_parallel_linear(part, ws);
  };
  const std::string dir0 = test::profile_steps(root / "rank0", 0, 2, [&] { step(3); });
  const std::string dir1 = test::profile_steps(root / "rank1", 1, 2, [&] { step(6); });

  const nlohmann::json trace = read_json(fs::path(dir0) / "trace.json");
  EXPECT_EQ(trace["distributedInfo"]["backend"], "neuron");
  EXPECT_EQ(trace["distributedInfo"]["rank"], 0);
  EXPECT_EQ(trace["distributedInfo"]["world_size"], 2);
  std::set<std::string> lanes;
  int running = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("name", "") == "thread_name") lanes.insert(e["args"]["name"].get<std::string>());
    if (e.value("name", "") == "cc_running") {
      ++running;
      EXPECT_EQ(e["tid"].get<int64_t>(), 1'000'000 + e["args"]["device"].get<int64_t>());
      EXPECT_EQ(e["args"]["collective"], "all_reduce");
      EXPECT_EQ(e["args"]["group size"], 2);
    }
  }
  EXPECT_EQ(running, 2);  // one all-reduce in the active step, on both cores
  bool cc0 = false, cc1 = false;
  for (const std::string& l : lanes) cc0 = cc0 || l.ends_with("neuron_hw/CC:0"), cc1 = cc1 || l.ends_with("neuron_hw/CC:1");
  EXPECT_TRUE(cc0 && cc1);

  const formats::Manifest m = formats::manifest_load(dir1);
  ASSERT_TRUE(m.distributed.has_value());
  EXPECT_EQ(m.distributed->rank, 1u);
  EXPECT_EQ(m.distributed->collectives, 1u);
  EXPECT_EQ(m.distributed->collective_cores, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(m.distributed->link_bytes_per_ns, device::Spec::builtin("trn2").collective.link_bytes_per_ns);

}
