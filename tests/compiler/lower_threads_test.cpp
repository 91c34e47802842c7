// compiler::lower() times its candidate programs concurrently over the thread pool (each lowering
// builds its own program and times it on its own core). Run under ThreadSanitizer by the "threads"
// label: the candidates share only the graph and the spec, read-only.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "core/parallel.h"
#include "device/core.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

// ESM-2 t12's MLP (a prefetched weight, so six placements are timed at once, then two activation
// chains), and at 32 tokens (weight-stationary linears). The choice is the same program every time,
// with or without the pool (lower() called from inside a parallel region runs its candidates in turn),
// and no slower than lowering without the prefetch.
TEST(LowerThreads, CandidatesTimedConcurrentlyGiveTheSameProgram) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const int64_t m : {128, 32}) {
    SCOPED_TRACE(m);
    const std::vector<TensorMeta> metas = testing::biased_mlp_metas(m, 480, 1920, DType::f32);
    const Graph g = optimize(capture_graph(&testing::biased_mlp, metas, Device::cpu()));
    const device::Executable first = lower(g, spec, "mlp");
    const device::Executable again = lower(g, spec, "mlp");
    EXPECT_EQ(first, again);
    std::optional<device::Executable> in_turn;
    // Two items on a pool of two threads: one of them lowers while the other returns at once.
    parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (i == 0) in_turn = lower(g, spec, "mlp");
      }
    });
    ASSERT_TRUE(in_turn.has_value());
    EXPECT_EQ(first, *in_turn);
    EXPECT_LE(device::timing_only_ns(spec, first),
              device::timing_only_ns(spec, lower(g, spec, "mlp", {.prefetch = WeightPrefetch::never})));
  }
}

}  // namespace
}  // namespace sightline::compiler
