// The attention kernel (src/kernels/eager_attention.cpp): its heads overlap, and its values against the
// CPU reference on shapes that exercise the pipeline's rings (many heads, several query tiles and key
// chunks, masks, grouped heads, keys too many for the staged rings).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"

namespace sightline::kernel_tests {
namespace {

using device::Engine;

OpAttrs attention_attrs(double scale, bool causal = false) {
  OpAttrs attrs;
  attrs.scalar = scale;
  attrs.is_causal = causal;
  return attrs;
}

// Timing only: q, k, v [1, heads, 128, 24] f32, ESM-2's attention shape.
device::RunResult run_heads(int64_t heads) {
  const Tensor q = random({1, heads, 128, 24}), k = random({1, heads, 128, 24}), v = random({1, heads, 128, 24});
  return run_eager(OpId::scaled_dot_product_attention, {q, k, v}, attention_attrs(0.2),
                   device::RunOptions{.functional = false, .record = true})
      .run;
}

// Many small heads cost about their busiest engine's work, not a chain of latencies each: after the
// first head, whose loads, chain of engines and store nothing can hide (the one-head kernel's time),
// each further head adds at most the busiest compute engine's work per head and 25 % of it (the
// engines' chains do not pack perfectly, and items of two heads chain twice the work). Run one after
// another, as the kernel ran them before its parts were staged, each head adds its whole chain (2.3 us
// here, against 0.8 to 0.95 us of the busiest engine's work): 37.3 us for the 16 heads; staged with the
// Scalar engine the busiest (0.82 us a head), 18.0 us; balanced over the engines (0.66 us a head),
// 16.0 us; in items of two heads that share instructions (0.55 us a head), 15.0 us where the bound
// allows 15.2 us.
TEST(EagerAttention, ManySmallHeadsCostTheirBusiestEnginesWork) {
  constexpr int64_t kHeads = 16;
  const device::RunResult one = run_heads(1), many = run_heads(kHeads);
  double busiest = 0;
  for (const Engine e : {Engine::tensor, Engine::vector, Engine::scalar, Engine::gpsimd}) {
    busiest = std::max(busiest, many.busy_ns[static_cast<size_t>(e)]);
  }
  const double per_head = busiest / kHeads;
  EXPECT_LE(many.duration_ns, one.duration_ns + (kHeads - 1) * per_head * 1.25)
      << "one head " << one.duration_ns << " ns, busiest engine " << per_head << " ns per head";
  // The heads overlap: the compute engines work at once, more than one of them busy on average.
  double compute = 0;
  for (const Engine e : {Engine::tensor, Engine::vector, Engine::scalar, Engine::gpsimd}) {
    compute += many.busy_ns[static_cast<size_t>(e)];
  }
  EXPECT_GT(compute, 1.5 * many.duration_ns);
}

// The records say the same: when the first head's result has been stored, the Tensor engine has done
// the matmuls (3 per head: q k^T, P^T, P v) of more than two heads. One head after another, it had done
// the first head's and the second one's q k^T.
TEST(EagerAttention, ConsecutiveHeadsRecordsOverlap) {
  const device::RunResult r = run_heads(8);
  std::vector<const device::InstructionRecord*> stores, matmuls;
  for (const device::InstructionRecord& rec : r.records) {
    if (rec.engine == Engine::dma && rec.hbm_bytes_written > 0) stores.push_back(&rec);
    if (rec.engine == Engine::tensor) matmuls.push_back(&rec);
  }
  ASSERT_FALSE(stores.empty());
  std::sort(stores.begin(), stores.end(), [](auto* a, auto* b) { return a->end_ns < b->end_ns; });
  const double first_store_end = stores.front()->end_ns;
  int64_t before = 0;
  for (const device::InstructionRecord* m : matmuls) before += m->end_ns <= first_store_end;
  EXPECT_GT(before, 2 * 3) << "matmuls done before the first store ended: " << before;
}

// ESM-2's 20 heads of 24 f32 over 128 tokens: one head's q^T, k^T, v and output are 12 KiB each, three
// transfers of 4 KiB apiece, so loading and storing head by head issued 12 transfers per head (240),
// each paying the DMA fixed cost. Blocks of heads load q^T, k^T and v and store the output as one
// access pattern over their heads: at most 16 pieces each per block of 8 heads (blocks 8, 8, 4).
TEST(EagerAttention, BlocksOfHeadsShareTheirTransfers) {
  constexpr int64_t kHeads = 20;
  const device::RunResult one = run_heads(1), many = run_heads(kHeads);
  const auto transfers = [](const device::RunResult& r) {
    return std::count_if(r.records.begin(), r.records.end(),
                         [](const device::InstructionRecord& rec) { return rec.engine == Engine::dma; });
  };
  EXPECT_EQ(transfers(one), 12);
  EXPECT_LE(transfers(many), 2 * 4 * 16 + 4 * 12);
  // Items of two heads: the scale's evacuation and P^T's evacuation (and the mask, where there is one)
  // are one instruction for both, so the engines run fewer instructions than 20 one-head kernels (the
  // identity's two instructions aside).
  const auto compute = [](const device::RunResult& r) {
    return std::count_if(r.records.begin(), r.records.end(),
                         [](const device::InstructionRecord& rec) { return rec.engine != Engine::dma; });
  };
  EXPECT_LT(compute(many) - 2, kHeads * (compute(one) - 2));
}

// The softmax costs two passes of the scores past their evacuation: each item's maxima in one reduction
// (negated: the exps' biases), then the exp with that bias operand. No pass subtracts the max. Where the
// mask adds 0 or -inf (none, bool, causal) and the scale is positive, the exp also applies the scale: no
// pass of the scores multiplies by it, only the maxima are scaled. An additive mask is added after the
// scale, as the reference does, so there the evacuation scales and the exp's scale is 1.
TEST(EagerAttention, TheExpSubtractsTheMaxAndAppliesTheScale) {
  constexpr int64_t kHeads = 16;
  constexpr float kScale = 0.125f;
  const Tensor q = random({1, kHeads, 128, 64}), k = random({1, kHeads, 128, 64}), v = random({1, kHeads, 128, 64});
  const Tensor additive = randn({1, 1, 128, 128}, DType::f32);
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "an additive mask");
    std::vector<Tensor> inputs = {q, k, v};
    if (!causal) inputs.push_back(additive);
    const DeviceResult r =
        check_op(OpId::scaled_dot_product_attention, inputs, attention_attrs(kScale, causal), 1e-5);
    int exps = 0, reductions = 0;
    for (const auto& stream : r.exe.engines) {
      for (const device::Instruction& in : stream) {
        const bool elementwise =
            in.opcode == device::Opcode::tensor_scalar || in.opcode == device::Opcode::tensor_tensor;
        EXPECT_FALSE(elementwise &&
                     in.alu() == device::AluOp::subtract);
        if (in.opcode == device::Opcode::activate && in.act() == device::ActFunc::exp) {
          ++exps;
          EXPECT_EQ(in.flags, device::kFlagBiasOperand);
          EXPECT_EQ(in.imm0, causal ? kScale : 1.0f);
        } else if (in.opcode == device::Opcode::tensor_reduce) {
          ++reductions;
          EXPECT_EQ(in.flags, device::kFlagNegate);
          EXPECT_EQ(in.dst.free_elements(), in.src0.dims[0].size);  // one max per head of the item
        } else if (causal && in.imm0 == kScale) {
          EXPECT_LE(in.src0.free_elements(), uint64_t{kHeads}) << "only the maxima are scaled";
        }
      }
    }
    EXPECT_EQ(exps, kHeads);
    EXPECT_LT(reductions, kHeads);
  }
}

TEST(EagerAttention, ManyHeadsMatchTheCpuReference) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor q = random({2, 12, 128, 24}, dtype), k = random({2, 12, 128, 24}, dtype),
                 v = random({2, 12, 128, 24}, dtype);
    const double tol = dtype == DType::f32 ? 1e-5 : 3e-2;
    check_op(OpId::scaled_dot_product_attention, {q, k, v}, attention_attrs(0.2), tol);
    // A padding mask [B, 1, 1, S] (loaded once per batch), a bool mask [L, S] and the causal mask.
    const Tensor pad = where(gt(randn({2, 1, 1, 128}), 1.0), full({}, -1e30, DType::f32), zeros({}, DType::f32));
    check_op(OpId::scaled_dot_product_attention, {q, k, v, pad.to(dtype)}, attention_attrs(0.2), tol);
    const Tensor keep = ge(randn({128, 128}), -0.5);
    check_op(OpId::scaled_dot_product_attention, {q, k, v, keep}, attention_attrs(0.2), tol);
    check_op(OpId::scaled_dot_product_attention, {q, k, v}, attention_attrs(0.2, true), tol);
    // A mask of its own per head (items of one head) and heads that fill no whole block or item.
    const Tensor per_head = randn({2, 12, 128, 128}, DType::f32).to(dtype);
    check_op(OpId::scaled_dot_product_attention, {q, k, v, per_head}, attention_attrs(0.2), tol);
    const Tensor q7 = random({1, 7, 128, 24}, dtype), k7 = random({1, 7, 128, 24}, dtype),
                 v7 = random({1, 7, 128, 24}, dtype);
    check_op(OpId::scaled_dot_product_attention, {q7, k7, v7, pad.slice(0, 0, 1).to(dtype)}, attention_attrs(0.2),
             tol);
  }
}

// Two query tiles and three key chunks per head with grouped heads (k and v loaded once per group), keys
// that take two PSUM banks per query tile (1024: the staged rings' least buffers fill PSUM), and keys so
// many (2560, five banks) that the staged rings do not fit PSUM and the kernel falls back to the whole
// body one item behind its loads.
TEST(EagerAttention, QueryTilesKeyChunksGroupsAndLongSequencesMatchTheCpuReference) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const double tol = dtype == DType::f32 ? 1e-5 : 3e-2;
    const Tensor q = random({1, 4, 200, 64}, dtype), k = random({1, 2, 300, 64}, dtype),
                 v = random({1, 2, 300, 40}, dtype);
    OpAttrs gqa = attention_attrs(0.125, true);
    gqa.enable_gqa = true;
    check_op(OpId::scaled_dot_product_attention, {q, k, v}, gqa, tol);
    for (const int64_t keys : {1024, 2560}) {
      const Tensor lq = random({1, 2, 130, 128}, dtype), lk = random({1, 2, keys, 128}, dtype),
                   lv = random({1, 2, keys, 96}, dtype);
      check_op(OpId::scaled_dot_product_attention, {lq, lk, lv}, attention_attrs(0.05), tol);
    }
  }
}

}  // namespace
}  // namespace sightline::kernel_tests
