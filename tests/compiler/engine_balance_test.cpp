// The placement of a matmul epilogue's steps over the engines (compiler/engine_balance.h): the
// schedule's modeled time against the Vector engine alone, its order against the steps' dependences,
// and no step moved off its fastest engine where nothing waits for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "compiler/engine_balance.h"

namespace sightline::compiler {
namespace {

// A rotary embedding's steps on one f32 tile of 480 columns (ESM-2's q, heads of 24), ns on the Vector
// engine and GpSimd by the trn2 rates: the scale, the negated half (an activation), the cat's two
// copies, q * cos, rotated * sin and their sum.
std::vector<EpilogueStepCost> rotary(bool gpsimd) {
  auto both = [&](double vector, double on_gpsimd) { return Loads{vector, kCannot, gpsimd ? on_gpsimd : kCannot}; };
  return {
      {both(417, 333), {}},         // 0: q * scale (a per-row scalar)
      {{kCannot, 333, kCannot}, {0}},  // 1: -q[half:]
      {both(583, 667), {1, 0}},     // 2: cat(-q[half:], q[:half])
      {both(667, 933), {2}},        // 3: rotated * sin
      {both(667, 933), {0}},        // 4: q * cos
      {both(667, 933), {3, 4}},     // 5: the sum, into the result tile
  };
}

TEST(EngineBalance, AnEpilogueLongerThanItsMatmulsSharesItsStepsWithGpSimd) {
  const double tensor_ns = 3200, evacuation_ns = 667;
  const EpilogueSchedule alone = schedule_epilogue(rotary(false), tensor_ns, evacuation_ns, 5, 8);
  const EpilogueSchedule shared = schedule_epilogue(rotary(true), tensor_ns, evacuation_ns, 5, 8);
  // The Vector engine alone: 3.67 us of steps and evacuation per tile, after the last group's matmuls.
  EXPECT_GT(alone.ns, 5 * tensor_ns + 5 * 3000);
  EXPECT_LT(shared.ns, alone.ns - 4000);
  int moved = 0;
  for (int e : shared.engine) moved += e == kOnGpSimd;
  EXPECT_GT(moved, 0);
  // Every step after the steps it follows, and q * cos (ready first) before the cat that waits for -q.
  for (const EpilogueSchedule* s : {&alone, &shared}) {
    std::vector<size_t> position(s->order.size());
    for (size_t i = 0; i < s->order.size(); ++i) position[s->order[i]] = i;
    const std::vector<EpilogueStepCost> steps = rotary(true);
    for (size_t k = 0; k < steps.size(); ++k) {
      for (size_t a : steps[k].after) EXPECT_LT(position[a], position[k]) << "step " << k << " after " << a;
    }
  }
  EXPECT_LT(std::find(alone.order.begin(), alone.order.end(), 4u) - alone.order.begin(),
            std::find(alone.order.begin(), alone.order.end(), 2u) - alone.order.begin());
  // The same schedule every time.
  const EpilogueSchedule again = schedule_epilogue(rotary(true), tensor_ns, evacuation_ns, 5, 8);
  EXPECT_EQ(again.engine, shared.engine);
  EXPECT_EQ(again.order, shared.order);
  EXPECT_EQ(again.ns, shared.ns);
}

TEST(EngineBalance, StepsNothingWaitsForStayOnTheirFastestEngine) {
  // One cheap step per tile behind long matmuls with two banks: the Tensor engine paces the kernel
  // wherever the step runs, so it stays on the Vector engine.
  const std::vector<EpilogueStepCost> steps = {{{667, kCannot, 933}, {}}};
  const EpilogueSchedule s = schedule_epilogue(steps, 20000, 667, 16, 2);
  EXPECT_EQ(s.engine, std::vector<int>{kOnVector});
  EXPECT_EQ(s.order, std::vector<size_t>{0});
  // 16 tiles of 20 us of matmuls, then the last tile's evacuation and step.
  EXPECT_DOUBLE_EQ(s.ns, 16 * 20000.0 + 667 + 667);
}

}  // namespace
}  // namespace sightline::compiler
