// Lowering: one executable per graph, its I/O roles, source ops kept per instruction, NEFF round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "device/timing.h"
#include "device/core.h"
#include "device/cost_model.h"
#include "formats/neff.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

using ::testing::HasSubstr;

Graph optimized(const TensorListFunction& fn, const std::vector<TensorMeta>& metas,
                const CompileOptions& options = {}) {
  return optimize(capture_graph(fn, metas, Device::cpu()), {}, options);
}

Graph rms_norm_graph(int64_t rows, int64_t cols, const CompileOptions& options = {}) {
  return optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{testing::naive_rms_norm(in[0], in[1])};
      },
      {{{rows, cols}, DType::f32}, {{cols}, DType::f32}}, options);
}

std::string metadata(const device::Executable& exe, const std::string& key) {
  for (const auto& [k, v] : exe.metadata) {
    if (k == key) return v;
  }
  return {};
}

Graph decoder_graph() {
  const std::vector<TensorMeta> metas = testing::decoder_block_metas();
  return optimized(&testing::decoder_block, metas);
}

// decoder_block at batch 1 and 128 tokens in bf16: d_model `d`, an MLP of `hidden`.
Graph bf16_decoder_layer(int64_t d, int64_t hidden) {
  std::vector<TensorMeta> metas = {{{1, 128, d}, DType::bf16}, {{d}, DType::bf16}};
  for (int i = 0; i < 4; ++i) metas.push_back({{d, d}, DType::bf16});
  metas.push_back({{d}, DType::bf16});
  metas.push_back({{hidden, d}, DType::bf16});
  metas.push_back({{hidden, d}, DType::bf16});
  metas.push_back({{d, hidden}, DType::bf16});
  return optimized(&testing::decoder_block, metas);
}

std::vector<IoRole> roles_of(const device::Executable& exe) {
  std::vector<IoRole> roles;
  for (const IoBinding& b : io_bindings(exe)) roles.push_back(b.role);
  return roles;
}

template <typename F>
void for_each_instruction(const device::Executable& exe, F&& f) {
  for (const auto& stream : exe.engines) {
    for (const auto& in : stream) f(in);
  }
  for (const auto& queue : exe.dma_queues) {
    for (const auto& in : queue) f(in);
  }
}

TEST(Lowering, NaiveRmsNormIsOneRowLoopLabelledWithTheUsersOps) {
  // x * rsqrt(mean(x * x, -1, keepdim) + eps) * w: the compiler fuses these ops itself, so every
  // instruction carries one of them, never the built-in's name.
  const device::Executable exe = lower(rms_norm_graph(130, 200), device::Spec::builtin("trn2"), "rms");
  EXPECT_EQ(roles_of(exe), (std::vector<IoRole>{IoRole::argument, IoRole::argument, IoRole::result}));
  EXPECT_EQ(metadata(exe, "compiled.row_loops"), "1");
  const std::set<std::string> users_ops = {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"};
  for (const std::string& op : exe.source_ops) EXPECT_TRUE(users_ops.contains(op)) << op;
  size_t instructions = 0;
  for_each_instruction(exe, [&](const device::Instruction& in) {
    ASSERT_LT(in.source_op, exe.source_ops.size());
    EXPECT_TRUE(users_ops.contains(exe.source_ops[in.source_op])) << exe.source_ops[in.source_op];
    ++instructions;
  });
  EXPECT_GT(instructions, 0u);
}

TEST(Lowering, SubstitutedRmsNormIsTheFusedKernelAlone) {
  const device::Executable exe = lower(rms_norm_graph(130, 200, CompileOptions{.substitute_builtins = true}),
                                       device::Spec::builtin("trn2"), "rms");
  EXPECT_EQ(roles_of(exe), (std::vector<IoRole>{IoRole::argument, IoRole::argument, IoRole::result}));
  EXPECT_EQ(exe.source_ops, std::vector<std::string>{"aten::rms_norm"});
  EXPECT_GT(exe.instruction_count(), 0u);
}

TEST(Lowering, DecoderBlockIsOneProgramWithScratchAndSourceOps) {
  const device::Executable exe = lower(decoder_graph(), device::Spec::builtin("trn2"), "decoder");
  const std::vector<IoRole> roles = roles_of(exe);
  EXPECT_EQ(std::count(roles.begin(), roles.end(), IoRole::argument), 10);
  EXPECT_EQ(std::count(roles.begin(), roles.end(), IoRole::result), 1);
  EXPECT_GT(std::count(roles.begin(), roles.end(), IoRole::scratch), 5);
  // The attention scale is a host scalar: one constants tensor holds it.
  ASSERT_EQ(std::count(roles.begin(), roles.end(), IoRole::constants), 1);
  for (size_t i = 0; i < exe.io.size(); ++i) {
    if (roles[i] == IoRole::constants) {
      EXPECT_EQ(constant_values(exe, exe.io[i]).size(), 1u);
    }
  }
  const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
  for (const char* op : {"aten::mean", "aten::rsqrt", "aten::linear", "aten::matmul", "aten::mul",
                         "aten::softmax", "aten::add", "aten::silu"}) {
    EXPECT_TRUE(ops.contains(op)) << op;
  }
  // The attention stores its result straight into the permuted context: no copy kernel.
  EXPECT_FALSE(ops.contains("aten::contiguous"));
  EXPECT_FALSE(ops.contains("aten::rms_norm")) << "the naive RMSNorm was replaced by the built-in";
  for_each_instruction(
      exe, [&](const device::Instruction& in) { EXPECT_LT(in.source_op, exe.source_ops.size()); });
}

// softmax(q k^T * scale + mask) v, as a user writes it: one attention kernel (the scores never reach
// HBM), every instruction labelled with the user's op (no aten::scaled_dot_product_attention).
Graph attention_graph(bool masked, DType dtype) {
  const int64_t b = 2, h = 3, s = 40, e = 24;
  std::vector<TensorMeta> metas = {{{b, h, s, e}, dtype}, {{b, h, s, e}, dtype}, {{b, h, s, e}, dtype}};
  if (masked) metas.push_back({{b, 1, 1, s}, dtype});
  return optimized(
      [masked](const std::vector<Tensor>& in) {
        Tensor scores = matmul(in[0], in[1].transpose(-2, -1)) * 0.2;
        if (masked) scores = scores + in[3];
        return std::vector<Tensor>{matmul(softmax(scores, -1), in[2])};
      },
      metas);
}

// Llama's bf16 eager attention, softmax(scores.to(f32)).to(bf16) @ v (examples/models/llama): the
// casts and the softmax are a row group of their own after the scores' epilogue.
Graph cast_attention_graph(int64_t e = 24) {
  const int64_t b = 2, h = 3, s = 40;
  const std::vector<TensorMeta> metas = {{{b, h, s, e}, DType::bf16}, {{b, h, s, e}, DType::bf16},
                                         {{b, h, s, e}, DType::bf16}, {{b, 1, s, s}, DType::bf16}};
  return optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor scores = matmul(in[0], in[1].transpose(-2, -1)) * 0.2 + in[3];
        return std::vector<Tensor>{matmul(softmax(scores.to(DType::f32), -1).to(DType::bf16), in[2])};
      },
      metas);
}

TEST(Lowering, AttentionWithAnF32SoftmaxOfBf16ScoresIsOneKernel) {
  const device::Executable exe = lower(cast_attention_graph(), device::Spec::builtin("trn2"), "attention");
  EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1");
  EXPECT_EQ(metadata(exe, "compiled.kernels"), "1");
  const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
  EXPECT_EQ(ops, (std::set<std::string>{"aten::matmul", "aten::mul", "aten::add", "aten::softmax"}));
  // A head dim the kernel does not take (over 128): the epilogue, the row group and the matmul, op by op.
  const device::Executable wide = lower(cast_attention_graph(160), device::Spec::builtin("trn2"), "attention");
  EXPECT_EQ(metadata(wide, "compiled.fused_attention"), "0");
  EXPECT_EQ(metadata(wide, "compiled.kernels"), "3");
  // A row group that is not exactly the casts and the softmax (here a scale after the softmax) stays
  // the scores' epilogue, its row group and the matmul.
  const int64_t b = 2, h = 3, s = 40, e = 24;
  const Graph other = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor scores = matmul(in[0], in[1].transpose(-2, -1));
        return std::vector<Tensor>{matmul((softmax(scores.to(DType::f32), -1) * 0.5).to(DType::bf16), in[2])};
      },
      {{{b, h, s, e}, DType::bf16}, {{b, h, s, e}, DType::bf16}, {{b, h, s, e}, DType::bf16}});
  const device::Executable unmatched = lower(other, device::Spec::builtin("trn2"), "attention");
  EXPECT_EQ(metadata(unmatched, "compiled.fused_attention"), "0");
}

// Llama's causal mask, made in the graph (a bool cast to bf16 times finfo.min: finite by construction),
// goes through the Tensor engine: an identity matmul accumulates it into each head's scores in PSUM,
// with q^T times the power-of-two scale (1 / sqrt(64)) on GpSimd first, so the scores never leave PSUM
// (the exps read them there) and no engine pass scales or masks them. The same mask as an argument
// (its values unknown: a -inf in it would poison the identity's products), or a scale that is not a
// power of two (1 / sqrt(24)), keeps the evacuation and the add.
TEST(Lowering, AFiniteMaskIsAddedOnTheTensorEngine) {
  const device::Spec spec = device::Spec::builtin("trn2");
  struct Counts {
    int tensor_mask = 0, engine_mask = 0, q_scaling = 0, exps = 0, exps_from_psum = 0, scale_evacuations = 0;
    int maxima = 0;  // one row max instruction per item, for all of its heads
  };
  const int64_t b = 4, h = 16;  // Llama small's heads at batch 4
  const auto counts_of = [&](int64_t e, bool mask_argument) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(e));
    const Graph graph = optimized(
        [&](const std::vector<Tensor>& in) { return testing::causal_attention(in, scale, mask_argument); },
        testing::causal_attention_metas(b, h, 128, e, mask_argument));
    const device::Executable exe = lower(graph, spec, "attention");
    EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1");
    Counts n;
    for_each_instruction(exe, [&](const device::Instruction& in) {
      const std::string& op = exe.source_ops.at(in.source_op);
      if (op == "aten::add" && in.opcode == device::Opcode::matmul) {
        ++n.tensor_mask;
        EXPECT_TRUE(in.flags & device::kFlagAccumulate);
      }
      if (op == "aten::add" && in.opcode == device::Opcode::tensor_tensor) ++n.engine_mask;
      // q^T times the scale, in place (the mask's own multiply by finfo.min is another tensor_scalar).
      if (op == "aten::mul" && in.opcode == device::Opcode::tensor_scalar && in.imm0 == static_cast<float>(scale) &&
          in.dst == in.src0)
        ++n.q_scaling;
      if (op == "aten::mul" && in.opcode == device::Opcode::activate && in.src0.memory == device::Memory::psum)
        ++n.scale_evacuations;
      if (in.opcode == device::Opcode::tensor_reduce) ++n.maxima;
      if (in.opcode == device::Opcode::activate && in.act() == device::ActFunc::exp) {
        ++n.exps;
        n.exps_from_psum += in.src0.memory == device::Memory::psum;
      }
    });
    return n;
  };
  const Counts on_tensor = counts_of(64, false);
  EXPECT_EQ(on_tensor.tensor_mask, b * h) << "one accumulation per head";
  EXPECT_EQ(on_tensor.engine_mask, 0);
  EXPECT_GT(on_tensor.q_scaling, 0);
  EXPECT_EQ(on_tensor.scale_evacuations, 0);
  EXPECT_EQ(on_tensor.exps, b * h);
  EXPECT_EQ(on_tensor.exps_from_psum, on_tensor.exps);
  // The max, P^T's and P v's evacuations are one instruction per item: with the exps alone on the Scalar
  // engine, items of 4 heads (a PSUM bank of their scores) cost less than the 2 the pipeline's depth asks.
  EXPECT_EQ(on_tensor.maxima, b * h / 4);
  for (const auto& [e, mask_argument] : {std::pair<int64_t, bool>{64, true}, {24, false}}) {
    SCOPED_TRACE(fmt::format("head dim {}{}", e, mask_argument ? ", the mask an argument" : ""));
    const Counts on_engines = counts_of(e, mask_argument);
    EXPECT_EQ(on_engines.tensor_mask, 0);
    EXPECT_GT(on_engines.engine_mask, 0);
    EXPECT_EQ(on_engines.q_scaling, 0);
    EXPECT_EQ(on_engines.exps_from_psum, 0);
  }
}

TEST(Lowering, AttentionIsOneKernelLabelledWithTheUsersOps) {
  for (const bool masked : {false, true}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const device::Executable exe = lower(attention_graph(masked, dtype), device::Spec::builtin("trn2"), "attention");
      EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1") << masked << dtype_name(dtype);
      EXPECT_EQ(metadata(exe, "compiled.kernels"), "1") << masked << dtype_name(dtype);
      const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
      std::set<std::string> expected = {"aten::matmul", "aten::mul", "aten::softmax"};
      if (masked) expected.insert("aten::add");
      EXPECT_EQ(ops, expected) << masked << dtype_name(dtype);
    }
  }
  const device::Executable decoder = lower(decoder_graph(), device::Spec::builtin("trn2"), "decoder");
  EXPECT_EQ(metadata(decoder, "compiled.fused_attention"), "1");
}

// Grouped-query attention (HF Llama's repeat_kv of k and v before the scores): the kernel reads each
// query head's key/value head in place (query head h, key/value head h / n_rep), so the two repeat
// copies are not made: one kernel instead of three, and no instruction labelled aten::contiguous. A
// repeated k that is also returned keeps its copy (and so v's, as the kernel reads both or neither), and a
// head dim the kernel does not take (160) makes both copies before the ops run one by one.
TEST(Lowering, GroupedQueryAttentionReadsTheKeyValueHeadsInPlace) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<TensorMeta> metas = testing::grouped_attention_metas(8, 2, 40, 24, dtype);
    const device::Executable exe =
        lower(optimized([](const std::vector<Tensor>& in) { return testing::grouped_attention(in); }, metas), spec,
              "gqa");
    EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1") << dtype_name(dtype);
    EXPECT_EQ(metadata(exe, "compiled.grouped_kv_attention"), "1") << dtype_name(dtype);
    EXPECT_EQ(metadata(exe, "compiled.kernels"), "1") << dtype_name(dtype);
    EXPECT_EQ(std::count(exe.source_ops.begin(), exe.source_ops.end(), "aten::contiguous"), 0) << dtype_name(dtype);

    const device::Executable returned = lower(
        optimized([](const std::vector<Tensor>& in) { return testing::grouped_attention(in, true); }, metas), spec,
        "gqa_k_returned");
    EXPECT_EQ(metadata(returned, "compiled.fused_attention"), "1") << dtype_name(dtype);
    EXPECT_EQ(metadata(returned, "compiled.grouped_kv_attention"), "") << dtype_name(dtype);
    // Both copies, the attention, and the returned view's copy into its output.
    EXPECT_EQ(metadata(returned, "compiled.kernels"), "4") << dtype_name(dtype);
  }
  // Repeated along the keys (a dim inserted after them): not the grouped-query layout, so the copies stay.
  // (Reading the unrepeated keys would give the same numbers here, duplicated keys splitting their weight
  // evenly, which is why this is checked on the program and not against the cpu.)
  const device::Executable keys = lower(
      optimized(
          [](const std::vector<Tensor>& in) {
            auto repeat_keys = [](const Tensor& x) {
              const Dims& d = x.shape();
              return x.unsqueeze(3).expand({d[0], d[1], d[2], 2, d[3]}).reshape({d[0], d[1], d[2] * 2, d[3]});
            };
            return std::vector<Tensor>{
                matmul(softmax(matmul(in[0], repeat_keys(in[1]).transpose(2, 3)) * 0.2, -1), repeat_keys(in[2]))};
          },
          {{{2, 4, 40, 24}, DType::f32}, {{2, 4, 20, 24}, DType::f32}, {{2, 4, 20, 24}, DType::f32}}),
      spec, "keys_repeated");
  EXPECT_EQ(metadata(keys, "compiled.fused_attention"), "1");
  EXPECT_EQ(metadata(keys, "compiled.grouped_kv_attention"), "");
  const device::Executable wide = lower(
      optimized([](const std::vector<Tensor>& in) { return testing::grouped_attention(in); },
                testing::grouped_attention_metas(4, 2, 40, 160, DType::f32)),
      spec, "gqa_wide_heads");
  EXPECT_EQ(metadata(wide, "compiled.fused_attention"), "0");
  EXPECT_EQ(metadata(wide, "compiled.grouped_kv_attention"), "");
  EXPECT_GE(std::count(wide.source_ops.begin(), wide.source_ops.end(), "aten::contiguous"), 1);
}

// The attention's result permuted back to [b, s, heads, dh] and copied contiguous (the models'
// context before the output projection): the kernel stores each head's rows at their place in the
// copy (a pitch of heads * dh), and the copy is no kernel of its own. `tail` picks the chain.
Graph attention_out_graph(int tail, DType dtype = DType::f32) {
  const int64_t b = 2, h = 3, s = 40, e = 24;
  const std::vector<TensorMeta> metas = {{{b, h, s, e}, dtype}, {{b, h, s, e}, dtype}, {{b, h, s, e}, dtype}};
  return optimized(
      [tail](const std::vector<Tensor>& in) {
        const Tensor y = matmul(softmax(matmul(in[0], in[1].transpose(-2, -1)) * 0.2, -1), in[2]);
        switch (tail) {
          // The context then feeds a kernel, as the output projection (a view returned is copied out).
          case 0: return std::vector<Tensor>{exp(y.permute({0, 2, 1, 3}).contiguous().view({2, 40, 72}))};
          case 1: return std::vector<Tensor>{exp(y.transpose(1, 2).contiguous().reshape({2, 40, -1}))};
          // A slice between the permute and the copy (not a dim reorder): falls back.
          case 2: return std::vector<Tensor>{exp(y.permute({0, 2, 1, 3}).slice(1, 0, 20).contiguous())};
          default: return std::vector<Tensor>{y.permute({0, 2, 1, 3}).contiguous(), y};  // read twice
        }
      },
      metas);
}

TEST(Lowering, AttentionStoresStraightIntoThePermutedContiguousCopy) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const int tail : {0, 1}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const device::Executable exe = lower(attention_out_graph(tail, dtype), spec, "attention");
      EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1") << tail << dtype_name(dtype);
      EXPECT_EQ(metadata(exe, "compiled.attention_output_stores"), "1") << tail << dtype_name(dtype);
      // The attention and the exp: no copy between them.
      EXPECT_EQ(metadata(exe, "compiled.kernels"), "2") << tail << dtype_name(dtype);
      const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
      EXPECT_EQ(ops, (std::set<std::string>{"aten::matmul", "aten::mul", "aten::softmax", "aten::exp"})) << tail;
    }
  }
  const device::Executable decoder = lower(decoder_graph(), spec, "decoder");
  EXPECT_EQ(metadata(decoder, "compiled.attention_output_stores"), "1");
  // The store keeps each partition's bytes (dh elements) and only moves its pitch; per-packet costs are
  // not modeled (docs/hardware-model.md §1.4), so on the cost model it takes what the plain attention's
  // contiguous store takes: no shape makes it slower than the copy it replaces, which reads and writes
  // the whole result again.
  const Graph plain = optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{matmul(softmax(matmul(in[0], in[1].transpose(-2, -1)) * 0.2, -1), in[2])};
      },
      {{{2, 3, 40, 24}, DType::f32}, {{2, 3, 40, 24}, DType::f32}, {{2, 3, 40, 24}, DType::f32}});
  const auto attention_ns = [&](const Graph& graph) {
    const device::Executable exe = lower(graph, spec, "attention");
    const auto none = [](const device::Instruction&, device::Engine, uint32_t, uint32_t) {};
    const device::RunResult run = device::simulate(exe, spec, none, /*record=*/true);
    double end = 0;  // the attention kernel's last instruction (the exp after it is not in `plain`)
    for (const device::InstructionRecord& r : run.records) {
      const bool exp = r.source_op != device::kNoSourceOp && exe.source_ops[r.source_op] == "aten::exp";
      if (!exp) end = std::max(end, r.end_ns);
    }
    return end;
  };
  EXPECT_EQ(attention_ns(attention_out_graph(0)), attention_ns(plain));
}

TEST(Lowering, AttentionOutputStoreFallsBackWithTheReason) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const device::Executable scaled = lower(attention_out_graph(2), spec, "attention");
  EXPECT_EQ(metadata(scaled, "compiled.fused_attention"), "1");
  EXPECT_EQ(metadata(scaled, "compiled.attention_output_stores"), "0");
  EXPECT_THAT(metadata(scaled, "compiled.attention_output_fallback.0"), HasSubstr("more than reorder")) << "a slice";
  EXPECT_EQ(metadata(scaled, "compiled.kernels"), "3");
  const device::Executable twice = lower(attention_out_graph(3), spec, "attention");
  EXPECT_EQ(metadata(twice, "compiled.attention_output_stores"), "0");
  EXPECT_THAT(metadata(twice, "compiled.attention_output_fallback.0"), HasSubstr("returned"));
  EXPECT_EQ(metadata(twice, "compiled.kernels"), "2");  // the attention, then the copy
}

// Each linear's weight is loaded by the kernel before it when its panels take at most a quarter of the
// free SBUF (480 x 480 f32: 4 K tiles x 480 x 4 B = 7.5 KiB per partition), and by the linear itself
// when they do not (2048 x 2048 f32: 128 KiB; bf16: 64 KiB, of 224 KiB): the fallback.
TEST(Lowering, LinearWeightsArePrefetchedWithinTheSbufBudget) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const device::Executable small =
        lower(optimized(&testing::linear_chain, testing::linear_chain_metas(128, 480, 480, dtype)),
              device::Spec::builtin("trn2"), "linears");
    EXPECT_EQ(metadata(small, "compiled.prefetched_weights"), "4") << dtype_name(dtype);
    // k's and v's input (relu(x), made before q's and k's kernels) too; q's and the last one's input is
    // the kernel before them's output.
    EXPECT_EQ(metadata(small, "compiled.prefetched_activations"), "2") << dtype_name(dtype);
    // One 128-row tile per linear. In f32 its bias is added in the evacuation (a Vector add, 0.6 us),
    // not by a ones^T @ bias matmul (0.8 us, as much as a K tile's); in bf16 that matmul costs 0.2 us,
    // less than the add's extra time over a copy, so the two biased linears keep it (3 tiles each: the
    // last tile in column halves). The cost model's figures, fold_bias_into_evacuation.
    int bias_steps = 0;
    for_each_instruction(small, [&](const device::Instruction& in) {
      if (in.opcode == device::Opcode::matmul && in.src0.partition_count == 1) ++bias_steps;
    });
    EXPECT_EQ(bias_steps, dtype == DType::f32 ? 0 : 6) << dtype_name(dtype);
    const device::Executable large =
        lower(optimized(&testing::linear_chain, testing::linear_chain_metas(32, 2048, 2048, dtype)),
              device::Spec::builtin("trn2"), "linears");
    EXPECT_EQ(metadata(large, "compiled.prefetched_weights"), "0") << dtype_name(dtype);
    EXPECT_EQ(metadata(large, "compiled.prefetched_activations"), "0") << dtype_name(dtype);
  }
}

// The program's modeled duration alone on one core, timing only.
double run_ns(const device::Executable& exe) { return device::timing_only_ns(device::Spec::builtin("trn2"), exe); }

// lower() keeps the weight prefetch only where the cost model times the program faster with it. The
// linear chain above at 128 rows: with 256 x 256 bf16 weights the prefetched loads from queue 0, queued
// in the kernel before each linear ahead of its stores, cost more than they save; with 480 x 480 f32
// weights (4 K tiles per linear) they win.
TEST(Lowering, WeightPrefetchIsKeptOnlyWhereItIsFaster) {
  const device::Spec spec = device::Spec::builtin("trn2");
  struct Case {
    int64_t k;
    DType dtype;
    bool wins;
  };
  for (const Case& c : {Case{256, DType::bf16, false}, Case{480, DType::f32, true}}) {
    const Graph g = optimized(&testing::linear_chain, testing::linear_chain_metas(128, c.k, c.k, c.dtype));
    const device::Executable with = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always});
    const device::Executable without = lower(g, spec, "linears", {.prefetch = WeightPrefetch::never});
    const device::Executable best = lower(g, spec, "linears");
    EXPECT_EQ(metadata(with, "compiled.prefetched_weights"), "4") << c.k;
    EXPECT_EQ(metadata(without, "compiled.prefetched_weights"), "0") << c.k;
    const double on = run_ns(with), off = run_ns(without);
    EXPECT_EQ(on < off, c.wins) << c.k << ": " << on << " ns with, " << off << " ns without";
    // Placed on other queues (PrefetchQueues) the 256 x 256 bf16 prefetch wins too (its few pieces no
    // longer queue behind the kernel before's loads on the first queues), and lower() keeps it.
    EXPECT_EQ(metadata(best, "compiled.prefetched_weights"), "4") << c.k;
    EXPECT_LT(run_ns(best), std::min(on, off)) << c.k;
  }
  // The decoder block: never slower than without the prefetch.
  const Graph decoder = decoder_graph();
  EXPECT_LE(run_ns(lower(decoder, spec, "decoder")),
            run_ns(lower(decoder, spec, "decoder", {.prefetch = WeightPrefetch::never})));
}

// lower() picks the prefetch placement and the kernels' queues on the program that keeps nothing in
// SBUF, then times the kept chain (ActivationChain::in_sbuf) on them; keeping moves the transfers those
// choices order, so the chain is also timed with the other kernel queues and the other placement. On
// ESM-2's MLP shape at 128 rows (FC1 -> GELU -> FC2 kept in SBUF), the chain is fastest with every
// kernel's transfers on the idlest queues, which the program without it does not choose: lower() keeps
// a program as fast as the chain on its fastest placement of all, in f32 and bf16.
TEST(Lowering, TheKeptChainIsTimedOnTheQueuesAndPlacementThatSuitIt) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Graph g = optimized(&testing::biased_mlp, testing::biased_mlp_metas(128, 320, 1280, dtype));
    double fastest = std::numeric_limits<double>::infinity();
    for (const WeightPrefetch p : {WeightPrefetch::always, WeightPrefetch::after_loads}) {
      for (const PrefetchQueues q : {PrefetchQueues::from_first, PrefetchQueues::from_last, PrefetchQueues::idlest}) {
        for (const KernelQueues k : {KernelQueues::from_first, KernelQueues::idlest}) {
          for (const PrefetchReach r : {PrefetchReach::next_kernel, PrefetchReach::past_compute_bound}) {
            const device::Executable chained = lower(g, spec, "mlp", {.prefetch = p, .queues = q, .kernel_queues = k,
                                                                      .reach = r, .chain = ActivationChain::in_sbuf});
            ASSERT_EQ(metadata(chained, "compiled.kept_activations"), "1");
            fastest = std::min(fastest, run_ns(chained));
          }
        }
      }
    }
    const device::Executable best = lower(g, spec, "mlp");
    EXPECT_EQ(metadata(best, "compiled.kept_activations"), "1") << dtype_name(dtype);
    EXPECT_LE(run_ns(best), fastest) << dtype_name(dtype);
  }
}

// PrefetchReach::past_compute_bound: a linear's weight prefetch starts in the kernel before it, or
// across a kernel between when that kernel is compute-bound (by the cost model's estimates: its matmul
// instructions' Tensor-engine time over its HBM traffic at the DMA rate) or the prefetch goes out
// inside a matmul kernel (the first node's), and the weight's transfer takes longer than the kernel
// between hides (its Tensor-engine time beyond its traffic; it would otherwise hide it all). Between a first kernel (linear(x, w1), or x * x: a
// DMA-bound kernel the loads go out before) and linear(y, w2): an independent 512 x 256 x 512 f32
// matmul (compute-bound) or an add of two 512 x 512 tensors (DMA-bound). The decision is pinned as
// which node the prefetch starts at ("compiled.prefetched_ahead": "<node>><linear>").
TEST(Lowering, WeightPrefetchStartsPastComputeBoundKernelsOrInsideAMatmul) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const auto graph = [](bool first_linear, bool compute_bound, int64_t n) {
    return optimized(
        [=](const std::vector<Tensor>& in) {
          const Tensor y = first_linear ? linear(in[0], in[1]) : in[0] * in[0];
          const Tensor between = compute_bound ? matmul(in[3], in[4]) : in[3] + in[4];
          return std::vector<Tensor>{linear(y, in[2]), between};
        },
        {{{128, n}, DType::f32},
         {{n, n}, DType::f32},
         {{n, n}, DType::f32},
         {{512, compute_bound ? 256 : 512}, DType::f32},
         {{compute_bound ? 256 : 512, 512}, DType::f32}});
  };
  // The kernel nodes: the first, the one between, the linear.
  const auto kernels = [](const Graph& g) {
    std::vector<size_t> at;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.kind == NodeKind::fused || (n.kind == NodeKind::op && !op_info(n.op).is_view)) at.push_back(i);
    }
    return at;
  };
  const auto ahead = [&](const Graph& g) {
    return metadata(lower(g, spec, "reach", {.prefetch = WeightPrefetch::always,
                                             .reach = PrefetchReach::past_compute_bound}),
                    "compiled.prefetched_ahead");
  };
  const auto first_to_linear = [&](const Graph& g) {
    const std::vector<size_t> k = kernels(g);
    EXPECT_EQ(k.size(), 3u);
    return k.size() == 3 ? fmt::format("{}>{}", k[0], k[2]) : std::string("?");
  };
  // The estimates the rule reads, from the Spec's cost functions: the matmul between is compute-bound;
  // w2 takes longer to load than either kernel between, a 256 x 256 one less than the matmul's
  // Tensor-engine time beyond its traffic.
  const double rate = spec.dma.queues * device::dma_rate_bytes_per_ns(spec, true, static_cast<int>(spec.dma.queues));
  const double one = device::compute_instruction_ns(
      spec, device::matmul(device::psum(0, 128, 0, DType::f32, {512}), device::sbuf(0, 128, 0, DType::f32, {128}),
                           device::sbuf(0, 128, 0, DType::f32, {512}), true));
  const double matmul_tensor = 4 * 2 * one, matmul_dma = (512.0 * 256 * 2 + 512.0 * 512) * 4 / rate;
  const double add_dma = 3 * 512.0 * 512 * 4 / rate;
  ASSERT_GT(matmul_tensor, matmul_dma);
  ASSERT_GT(1024.0 * 1024 * 4 / rate, std::max(matmul_tensor, add_dma));
  ASSERT_LT(256.0 * 256 * 4 / rate, matmul_tensor - matmul_dma);
  for (const bool first_linear : {true, false}) {
    const Graph compute = graph(first_linear, true, 1024);
    EXPECT_EQ(ahead(compute), first_to_linear(compute)) << first_linear;
    // A weight the kernel between hides: the prefetch starts there, not ahead of it.
    EXPECT_EQ(ahead(graph(first_linear, true, 256)), "") << first_linear;
  }
  // A DMA-bound kernel between: crossed from inside the linear's kernel, not from before the mul.
  const Graph after_linear = graph(true, false, 1024);
  EXPECT_EQ(ahead(after_linear), first_to_linear(after_linear));
  const Graph after_mul = graph(false, false, 1024);
  EXPECT_EQ(kernels(after_mul).size(), 3u);
  EXPECT_EQ(ahead(after_mul), "");
  // PrefetchReach::next_kernel (the default) starts none ahead and does not report them.
  const device::Executable next = lower(graph(true, true, 1024), spec, "reach", {.prefetch = WeightPrefetch::always});
  EXPECT_TRUE(std::none_of(next.metadata.begin(), next.metadata.end(),
                           [](const auto& kv) { return kv.first == "compiled.prefetched_ahead"; }));
}

// Two linears whose results take a residual add in their matmul epilogues, back to back (the second
// reads the first's result), as a transformer's projections are. The second's weight is loaded while
// the first kernel runs (the prefetch across kernels takes epilogue groups on either side), so its stream
// follows the first weight's instead of queueing behind the first kernel's stores. A bound from the
// model (docs/hardware-model.md §1.4, §1.6): the first kernel as timed alone, plus the second weight at
// HBM bandwidth, plus what of the second kernel cannot overlap that stream (loading the first result as
// a^T over every queue, F plus its data at the queues' rate; the second product's Tensor-engine time;
// its store, the same). lower()'s choice meets it. (Before the kernels cut their loads and stores by
// the stream rule, stream_min_piece_bytes, only the prefetch met it: without it the second weight queued
// behind the first kernel's few large stores. With stream-rule pieces the plain lowering streams the
// second weight as well, 26.5 us vs 31.8 us before, and is the faster of the two here.)
TEST(Lowering, BackToBackEpilogueLinearsStreamTheirWeights) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t m = 128, k = 1024;
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor h = linear(in[0], in[1]) + in[0];
        return std::vector<Tensor>{linear(h, in[2]) + h};
      },
      {{{m, k}, DType::bf16}, {{k, k}, DType::bf16}, {{k, k}, DType::bf16}});
  const device::Executable with = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always});
  const device::Executable without = lower(g, spec, "linears", {.prefetch = WeightPrefetch::never});
  const device::Executable best = lower(g, spec, "linears");
  EXPECT_EQ(metadata(with, "compiled.fused_epilogues"), "2");
  EXPECT_EQ(metadata(with, "compiled.prefetched_weights"), "1");
  EXPECT_EQ(metadata(without, "compiled.prefetched_weights"), "0");
  const Graph one = optimized(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], in[1]) + in[0]}; },
      {{{m, k}, DType::bf16}, {{k, k}, DType::bf16}});
  const double first = run_ns(lower(one, spec, "linear"));
  const double f = spec.dma.fixed_cost_ns, all_queues = spec.dma.queues * spec.dma.queue_bytes_per_ns;
  const double weight = double(k) * k * 2, activation = double(m) * k * 2;
  const uint32_t cols = spec.tensor.moving_free_max;
  const double matmul = device::compute_instruction_ns(
      spec, device::matmul(device::psum(0, 128, 0, DType::f32, {cols}), device::sbuf(0, 128, 0, DType::bf16, {128}),
                           device::sbuf(0, 128, 0, DType::bf16, {cols}), true));
  const double tensor = double(k / spec.partitions) * double(k / cols) * matmul;
  const double bound = first + weight / spec.hbm.bytes_per_ns + (f + activation / all_queues) + tensor +
                       (f + activation / all_queues);
  const double on = run_ns(with), off = run_ns(without);
  std::printf("two epilogue linears: %.1f ns with the prefetch, %.1f ns without, bound %.1f ns (first alone %.1f)\n",
              on, off, bound, first);
  EXPECT_LE(std::min(on, off), bound);
  EXPECT_LE(run_ns(best), bound);
  // lower() keeps the fastest of the prefetch's placements (and of its queues: the other placements of
  // each).
  double fastest = off;
  for (const WeightPrefetch p : {WeightPrefetch::always, WeightPrefetch::after_loads}) {
    for (const PrefetchQueues q : {PrefetchQueues::from_first, PrefetchQueues::from_last, PrefetchQueues::idlest}) {
      fastest = std::min(fastest, run_ns(lower(g, spec, "linears", {.prefetch = p, .queues = q})));
    }
  }
  // ... then that one with each kernel's transfers on the queues left idlest (KernelQueues), if faster.
  EXPECT_LE(run_ns(best), fastest);
}

// Bytes DMA'd out of a program's scratch tensors (intermediates that went through HBM).
uint64_t scratch_loads(const device::Executable& exe) {
  uint64_t bytes = 0;
  for (const auto& queue : exe.dma_queues) {
    for (const device::Instruction& in : queue) {
      if (in.src0.memory == device::Memory::hbm && exe.io[in.src0.tensor].kind == device::IoKind::scratch)
        bytes += in.src0.bytes();
    }
  }
  return bytes;
}

// Every output's bytes after a functional run of `exe` on the same inputs each time (16-bit floats: the
// top half of an f32), and its modeled time in `ns`.
std::vector<std::vector<uint8_t>> run_outputs(const device::Spec& spec, const device::Executable& exe, double* ns) {
  device::Core core(spec);
  std::vector<uint64_t> addresses;
  uint32_t seed = 1;
  for (const device::IoTensor& t : exe.io) {
    addresses.push_back(core.hbm_allocate(std::max<uint64_t>(t.bytes(), 1)));
    if (t.kind != device::IoKind::input) continue;
    std::vector<float> values(t.bytes() / dtype_size(t.dtype));
    if (t.name.starts_with("const_")) {
      const std::vector<double> c = constant_values(exe, t);
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(c[i]);
    } else {
      for (float& v : values) {
        seed = seed * 1664525u + 1013904223u;
        v = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
      }
    }
    std::vector<uint8_t> bytes(t.bytes());
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &values[i], 4);
      if (dtype_size(t.dtype) == 2) {
        const uint16_t half = static_cast<uint16_t>(bits >> 16);
        std::memcpy(bytes.data() + 2 * i, &half, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &bits, 4);
      }
    }
    core.hbm_write(addresses.back(), bytes.data(), t.bytes());
  }
  *ns = core.run(exe, addresses, {.functional = true, .record = false}).duration_ns;
  std::vector<std::vector<uint8_t>> out;
  for (size_t k = 0; k < exe.io.size(); ++k) {
    if (exe.io[k].kind != device::IoKind::output) continue;
    out.emplace_back(exe.io[k].bytes());
    core.hbm_read(addresses[k], out.back().data(), exe.io[k].bytes());
  }
  return out;
}

// Runs `faster` and `slower` functionally: the same `outputs` outputs, bit for bit, `faster`'s modeled time
// the same as its timing-only run, and lower than `slower`'s. Returns both modeled times.
std::pair<double, double> expect_same_outputs_and_faster(const device::Spec& spec, const device::Executable& faster,
                                                         const device::Executable& slower, size_t outputs) {
  double faster_ns = 0, slower_ns = 0;
  const auto a = run_outputs(spec, faster, &faster_ns), b = run_outputs(spec, slower, &slower_ns);
  EXPECT_EQ(a.size(), outputs);
  EXPECT_EQ(a, b);
  EXPECT_EQ(faster_ns, run_ns(faster));
  EXPECT_LT(faster_ns, slower_ns);
  return {faster_ns, slower_ns};
}

// An MLP, linear(gelu(linear(x, w1, b1)), w2, b2) + x (ESM-2's shape: 480 -> 1920 -> 480, f32): with
// ActivationChain::in_sbuf the first group's kernel transposes each result tile into the second linear's
// a^T in SBUF (its weight prefetched there), so nothing loads the intermediate back from HBM; the outputs
// are the same bits and the modeled time, the same functional or timing-only, is lower. lower() keeps
// it where it is faster. An intermediate too large for the prefetch's share of SBUF (2048 rows: 120 KiB per
// partition as a^T) is not kept: the program is the one without the chain.
TEST(Lowering, MlpKeepsItsIntermediateInSbufForTheNextLinear) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const auto mlp = [](int64_t m, int64_t hidden = 1920) {
    return optimized(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{linear(gelu(linear(in[0], in[1], in[2])), in[3], in[4]) + in[0]};
        },
        {{{m, 480}, DType::f32}, {{hidden, 480}, DType::f32}, {{hidden}, DType::f32}, {{480, hidden}, DType::f32},
         {{480}, DType::f32}});
  };
  const auto lowered = [&](const Graph& g, ActivationChain chain) {
    return lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always, .chain = chain});
  };
  const auto run = [&](const device::Executable& exe, double* ns) { return run_outputs(spec, exe, ns); };
  const Graph g = mlp(128);
  const device::Executable kept = lowered(g, ActivationChain::in_sbuf);
  const device::Executable plain = lowered(g, ActivationChain::through_hbm);
  EXPECT_EQ(metadata(kept, "compiled.kept_activations"), "1");
  EXPECT_EQ(metadata(plain, "compiled.kept_activations"), "");
  EXPECT_EQ(metadata(kept, "compiled.prefetched_weights"), "1");  // w2's (w1 has no kernel before it)
  EXPECT_EQ(scratch_loads(kept), 0u);
  EXPECT_EQ(scratch_loads(plain), 128u * 1920 * 4);
  double kept_ns = 0, plain_ns = 0;
  const auto a = run(kept, &kept_ns), b = run(plain, &plain_ns);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(a[0].size(), 128u * 480 * 4);
  EXPECT_EQ(a, b);
  EXPECT_EQ(kept_ns, run_ns(kept));  // functional and timing-only: the same modeled time
  EXPECT_LT(kept_ns, plain_ns);
  std::printf("mlp 128 x 480 -> 1920 -> 480: %.1f ns kept in SBUF, %.1f ns through HBM\n", kept_ns, plain_ns);
  // lower() times the chain on the fastest placement of the prefetch and keeps whichever is faster.
  EXPECT_LE(run_ns(lower(g, spec, "mlp")), plain_ns);

  // 512 rows (four row tiles, ESM-2's batch 4: each tile's transposes go out with the next tile's) and
  // 1024 rows of a 512-wide intermediate (eight: each tile's right after it), and a 5120-wide one whose
  // second weight (75 KiB per partition) is too large to prefetch (only the a^T is handed over), and 32
  // rows (ESM-2's 32 tokens: both linears weight-stationary, each result tile transposed back before the
  // epilogue and the transposes into the a^T): kept, the same bits, whether or not it is faster.
  for (const auto& [m, hidden] : {std::pair<int64_t, int64_t>{512, 1920}, {1024, 512}, {128, 5120}, {32, 1920}}) {
    const Graph batch = mlp(m, hidden);
    const device::Executable kept_m = lowered(batch, ActivationChain::in_sbuf);
    EXPECT_EQ(metadata(kept_m, "compiled.kept_activations"), "1") << m;
    EXPECT_EQ(scratch_loads(kept_m), 0u) << m;
    EXPECT_EQ(metadata(kept_m, "compiled.prefetched_weights"), hidden == 5120 ? "0" : "1") << m;
    double ns = 0;
    const auto am = run(kept_m, &ns), bm = run(lowered(batch, ActivationChain::through_hbm), &ns);
    ASSERT_EQ(am.size(), 1u);
    ASSERT_EQ(am[0].size(), static_cast<size_t>(m) * 480 * 4);
    EXPECT_EQ(am, bm) << m;
    EXPECT_EQ(ns, run_ns(lowered(batch, ActivationChain::through_hbm))) << m;  // functional = timing-only
  }

  const Graph large = mlp(2048);
  const device::Executable fallback = lowered(large, ActivationChain::in_sbuf);
  EXPECT_EQ(metadata(fallback, "compiled.kept_activations"), "");
  EXPECT_EQ(fallback, lowered(large, ActivationChain::through_hbm));
}

// A linear handed its input in SBUF (FC2 reading FC1's result kept as its a^T, ESM-2's FFN at batch 4:
// four row tiles) with PreloadedOrder::tiles computes its result tiles one after the other: its first
// result leaves while most of its matmuls are still to run, so each tile's evacuation, residual add and
// store overlap the next tiles' matmuls, and the program is faster. With k_slices (the order of a
// kernel that loads its operands) every tile's last K step comes at the end. The same bits either way,
// functional and timing-only the same modeled time; lower() keeps the faster.
TEST(Lowering, ALinearHandedItsInputInSbufComputesItsTilesOneAfterTheOther) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(gelu(linear(in[0], in[1], in[2])), in[3], in[4]) + in[0]};
      },
      {{{512, 480}, DType::f32}, {{1920, 480}, DType::f32}, {{1920}, DType::f32}, {{480, 1920}, DType::f32},
       {{480}, DType::f32}});
  const auto lowered = [&](PreloadedOrder order) {
    return lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::in_sbuf,
                                  .order = order});
  };
  const device::Executable tiles = lowered(PreloadedOrder::tiles), slices = lowered(PreloadedOrder::k_slices);
  EXPECT_EQ(metadata(tiles, "compiled.kept_activations"), "1");
  EXPECT_EQ(metadata(tiles, "compiled.tile_by_tile"), "1");  // FC2 (FC1 loads its own input)
  EXPECT_EQ(metadata(slices, "compiled.tile_by_tile"), "");
  // Tensor-engine instructions that start once the first store into the program's result has: FC2's
  // (it alone writes the result, and FC1's transposes into its a^T come before its first matmul).
  const auto after_first_store = [&](const device::Executable& exe) {
    device::Core core(spec);
    std::vector<uint64_t> addresses;
    for (const device::IoTensor& t : exe.io) addresses.push_back(core.hbm_allocate(std::max<uint64_t>(t.bytes(), 1)));
    const device::RunResult r = core.run(exe, addresses, {.functional = false});
    double first_store = std::numeric_limits<double>::infinity();
    for (const device::InstructionRecord& rec : r.records) {
      if (rec.engine != device::Engine::dma) continue;
      const device::Instruction& in = exe.dma_queues[rec.queue][rec.index];
      if (in.dst.memory == device::Memory::hbm && exe.io[in.dst.tensor].kind == device::IoKind::output)
        first_store = std::min(first_store, rec.start_ns);
    }
    size_t later = 0;
    for (const device::InstructionRecord& rec : r.records) later += rec.engine == device::Engine::tensor && rec.start_ns >= first_store;
    EXPECT_EQ(r.duration_ns, run_ns(exe));
    return later;
  };
  // FC2: 4 row tiles x 15 K steps. Tile by tile, the first store follows the first tile's, so the other
  // three tiles' matmuls come after it (less the few that run during its evacuation); K slice by K
  // slice, only some of the tiles' last K steps.
  const size_t tiles_later = after_first_store(tiles), slices_later = after_first_store(slices);
  EXPECT_GT(tiles_later, 2u * 15);
  EXPECT_LT(slices_later, 4u);
  const auto [tiles_ns, slices_ns] = expect_same_outputs_and_faster(spec, tiles, slices, 1);
  std::printf("mlp 512 x 480 -> 1920 -> 480, FC2 handed its input: %.1f ns tile by tile (%zu matmuls after the first "
              "store), %.1f ns K slice by K slice (%zu)\n",
              tiles_ns, tiles_later, slices_ns, slices_later);
  EXPECT_LE(run_ns(lower(g, spec, "mlp")), tiles_ns);
}

// ESM-2's FFN after its layer_norm: linear(gelu(linear(layer_norm(x), w1, b1)), w2, b2) + x, f32, 480 ->
// 1920 -> 480. With ActivationChain::in_sbuf, FC1 is handed its input (the norm's result) and its weight in
// SBUF, and only FC2 reads its result: FC1 then computes that result transposed, 128 of its columns at a
// time with its weight's block stationary, straight into FC2's a^T (kernels::emit_linear_transposed): no
// transposes, no result tiles, nothing stored. The outputs are the same bits as with FC1's result going
// through HBM (ActivationChain::norms_in_sbuf), and the program is faster, at one row tile and at four,
// f32 and bf16 (whose row-major kernel adds the bias as an accumulation step: the same f32 sum).
// A second reader of FC1's result (here an output) keeps it on the row-major path, transposes and store.
TEST(Lowering, ALinearOnlyTheNextLinearReadsComputesItsResultTransposedIntoItsInput) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const auto& [m, dtype] : {std::pair{int64_t{128}, DType::f32}, std::pair{int64_t{512}, DType::f32},
                                 std::pair{int64_t{512}, DType::bf16}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<TensorMeta> metas = {{{m, 480}, dtype},  {{480}, dtype},  {{480}, dtype},
                                           {{1920, 480}, dtype}, {{1920}, dtype}, {{480, 1920}, dtype},
                                           {{480}, dtype}};
    const Graph g = optimized(
        [](const std::vector<Tensor>& in) {
          const Tensor h = layer_norm(in[0], in[1], in[2]);
          return std::vector<Tensor>{linear(gelu(linear(h, in[3], in[4])), in[5], in[6]) + in[0]};
        },
        metas);
    const auto lowered = [&](const Graph& graph, ActivationChain chain) {
      return lower(graph, spec, "ffn", {.prefetch = WeightPrefetch::always, .chain = chain});
    };
    const device::Executable transposed = lowered(g, ActivationChain::in_sbuf);
    const device::Executable through_hbm = lowered(g, ActivationChain::norms_in_sbuf);
    EXPECT_EQ(metadata(transposed, "compiled.transposed_linears"), "1") << m;
    EXPECT_EQ(metadata(transposed, "compiled.kept_activations"), "2") << m;  // the norm's result, FC1's
    EXPECT_EQ(metadata(through_hbm, "compiled.transposed_linears"), "") << m;
    // No instruction writes FC1's result to HBM, nor reads it back; FC1's matmuls multiply by no identity
    // (every Tensor-engine instruction labelled aten::linear has a weight block or x^T as its moving
    // operand of m columns, or FC2's).
    const uint64_t fc1_bytes = static_cast<uint64_t>(m) * 1920 * dtype_size(dtype);
    for (const auto& queue : transposed.dma_queues) {
      for (const device::Instruction& in : queue) {
        for (const device::AccessPattern* ap : {&in.dst, &in.src0}) {
          if (ap->memory == device::Memory::hbm) {
            EXPECT_NE(transposed.io[ap->tensor].bytes(), fc1_bytes) << m << ": FC1's result crossed HBM";
          }
        }
      }
    }
    // Tensor-engine instructions labelled aten::linear: FC1's are its weight's 128-column blocks
    // stationary against x^T's m columns, 15 blocks x 4 K tiles; the rest, FC2's, move its weight's 480
    // columns once per row tile and K tile of 1920 (the last tile's last step in column pieces), and not
    // one column more: no transpose among them.
    size_t fc1_matmuls = 0;
    uint64_t fc2_columns = 0;
    for (const device::Instruction& in : transposed.stream(device::Engine::tensor)) {
      if (transposed.source_ops.at(in.source_op) != "aten::linear") continue;
      if (in.src0.dims[0].size == 128 && in.src1.dims[0].size == static_cast<uint32_t>(m)) {
        ++fc1_matmuls;
      } else {
        fc2_columns += in.src1.dims[0].size;
      }
    }
    EXPECT_EQ(fc1_matmuls, 15u * 4) << m;
    EXPECT_EQ(fc2_columns, static_cast<uint64_t>(m / 128) * 15 * 480) << m;
    const auto [transposed_ns, through_hbm_ns] = expect_same_outputs_and_faster(spec, transposed, through_hbm, 1);
    std::printf("ffn %s %lld x 480 -> 1920 -> 480 after its layer_norm: %.1f ns with FC1 transposed into FC2's "
                "a^T, %.1f ns through HBM\n",
                std::string(dtype_name(dtype)).c_str(), static_cast<long long>(m), transposed_ns, through_hbm_ns);
    // FC1's result also returned: FC1 runs row-major, its tiles transposed into FC2's a^T and stored.
    const Graph both = optimized(
        [](const std::vector<Tensor>& in) {
          const Tensor a = gelu(linear(layer_norm(in[0], in[1], in[2]), in[3], in[4]));
          return std::vector<Tensor>{linear(a, in[5], in[6]) + in[0], a};
        },
        metas);
    const device::Executable read_twice = lowered(both, ActivationChain::in_sbuf);
    EXPECT_EQ(metadata(read_twice, "compiled.transposed_linears"), "") << m;
    EXPECT_EQ(metadata(read_twice, "compiled.kept_activations"), "2") << m;
  }
}

// A norm feeding a linear (ESM-2's layer_norm before FC1, Llama's rms_norm before its projections):
// with ActivationChain::norms_in_sbuf (and in_sbuf) the norm's kernel transposes each row tile into the
// linear's a^T in SBUF right after computing it, so the linear neither waits for the norm's store nor
// loads it back; the norm still stores its result, which a second reader (here an output) reads. The
// outputs are the same bits, the modeled time the same functional or timing-only, and at ESM-2's shape
// lower, where norms_in_sbuf is timed among the placements, keeps it where it is faster.
TEST(Lowering, NormKeepsItsResultInSbufForTheNextLinear) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const auto lowered = [&](const Graph& g, ActivationChain chain) {
    return lower(g, spec, "norm_linear", {.prefetch = WeightPrefetch::always, .chain = chain});
  };
  const auto run = [&](const device::Executable& exe, double* ns) { return run_outputs(spec, exe, ns); };
  // ESM-2's FC1: gelu(linear(layer_norm(x), w1, b1)), 480 -> 1920, f32, at 128 rows (one row tile) and
  // 512 (four); the norm's result also returned, so its store stays.
  for (const int64_t m : {int64_t{128}, int64_t{512}}) {
    const Graph g = optimized(
        [](const std::vector<Tensor>& in) {
          const Tensor h = layer_norm(in[0], in[1], in[2]);
          return std::vector<Tensor>{gelu(linear(h, in[3], in[4])), h};
        },
        {{{m, 480}, DType::f32}, {{480}, DType::f32}, {{480}, DType::f32}, {{1920, 480}, DType::f32},
         {{1920}, DType::f32}});
    const device::Executable kept = lowered(g, ActivationChain::norms_in_sbuf);
    const device::Executable plain = lowered(g, ActivationChain::through_hbm);
    EXPECT_EQ(metadata(kept, "compiled.kept_activations"), "1") << m;
    EXPECT_EQ(metadata(plain, "compiled.kept_activations"), "") << m;
    EXPECT_EQ(metadata(kept, "compiled.prefetched_weights"), "1") << m;
    EXPECT_EQ(metadata(plain, "compiled.prefetched_activations"), "0") << m;
    // The linear reads no output back either: the norm's result went to out1, which only it stores.
    uint64_t out1_loads = 0;
    for (const auto& queue : kept.dma_queues) {
      for (const device::Instruction& in : queue) {
        if (in.src0.memory == device::Memory::hbm && kept.io[in.src0.tensor].kind == device::IoKind::output)
          out1_loads += in.src0.bytes();
      }
    }
    EXPECT_EQ(out1_loads, 0u) << m;
    double kept_ns = 0, plain_ns = 0;
    const auto a = run(kept, &kept_ns), b = run(plain, &plain_ns);
    ASSERT_EQ(a.size(), 2u);
    EXPECT_EQ(a, b) << m;
    EXPECT_EQ(kept_ns, run_ns(kept)) << m;  // functional and timing-only: the same modeled time
    EXPECT_LT(kept_ns, plain_ns) << m;
    std::printf("layer_norm %lld x 480 -> linear 1920: %.1f ns kept in SBUF, %.1f ns through HBM\n",
                static_cast<long long>(m), kept_ns, plain_ns);
    EXPECT_LE(run_ns(lower(g, spec, "norm_linear")), plain_ns) << m;
  }
  // rms_norm (bf16, 256 rows of 512) into a linear without bias, its result read only by it: kept, the
  // same bits, and the norm's store is the only write of its scratch value, which nothing loads.
  const Graph r = optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(rms_norm(in[0], in[1]), in[2])};
      },
      {{{256, 512}, DType::bf16}, {{512}, DType::bf16}, {{1024, 512}, DType::bf16}});
  const device::Executable kept = lowered(r, ActivationChain::norms_in_sbuf);
  EXPECT_EQ(metadata(kept, "compiled.kept_activations"), "1");
  EXPECT_EQ(scratch_loads(kept), 0u);
  const device::Executable plain = lowered(r, ActivationChain::through_hbm);
  EXPECT_EQ(scratch_loads(plain), 256u * 512 * 2);
  double kept_ns = 0, plain_ns = 0;
  const auto a = run(kept, &kept_ns), b = run(plain, &plain_ns);
  EXPECT_EQ(a, b);
  EXPECT_EQ(kept_ns, run_ns(kept));
  EXPECT_LT(kept_ns, plain_ns);

  // ESM-2's out projection with its residual add, the layer_norm, FC1 and the residual add after it: the
  // projection's epilogue also copies each result tile into SBUF for the norm, which loads nothing, and
  // the norm's result goes on into FC1's a^T; only FC1's residual add reads the sum back from scratch.
  for (const int64_t m : {int64_t{128}, int64_t{512}}) {
    const Graph e = optimized(
        [](const std::vector<Tensor>& in) {
          const Tensor h = linear(in[0], in[1], in[2]) + in[0];
          return std::vector<Tensor>{linear(layer_norm(h, in[3], in[4]), in[5], in[6]) + h};
        },
        {{{m, 480}, DType::f32}, {{480, 480}, DType::f32}, {{480}, DType::f32}, {{480}, DType::f32},
         {{480}, DType::f32}, {{480, 480}, DType::f32}, {{480}, DType::f32}});
    const device::Executable kept_e = lowered(e, ActivationChain::norms_in_sbuf);
    const device::Executable plain_e = lowered(e, ActivationChain::through_hbm);
    EXPECT_EQ(metadata(kept_e, "compiled.kept_activations"), "1") << m;
    EXPECT_EQ(scratch_loads(kept_e), static_cast<uint64_t>(m) * 480 * 4) << m;
    EXPECT_EQ(scratch_loads(plain_e), 3 * static_cast<uint64_t>(m) * 480 * 4) << m;
    double kept_e_ns = 0, plain_e_ns = 0;
    const auto ke = run(kept_e, &kept_e_ns), pe = run(plain_e, &plain_e_ns);
    EXPECT_EQ(ke, pe) << m;
    EXPECT_EQ(kept_e_ns, run_ns(kept_e)) << m;
    EXPECT_LT(kept_e_ns, plain_e_ns) << m;
    // FC1's weight prefetched from the out projection's kernel, past the norm: the norm's weight and bias
    // then load ahead of that stream, into SBUF before the projection (plan_kept_input). The same bits.
    const device::Executable reach_e =
        lower(e, spec, "norm_linear",
              {.prefetch = WeightPrefetch::always, .reach = PrefetchReach::past_compute_bound,
               .chain = ActivationChain::norms_in_sbuf});
    EXPECT_NE(metadata(reach_e, "compiled.prefetched_ahead"), "") << m;
    double reach_ns = 0;
    EXPECT_EQ(run(reach_e, &reach_ns), pe) << m;
    EXPECT_EQ(reach_ns, run_ns(reach_e)) << m;
  }

  // The user's RMSNorm (f32, one row loop of its own ops, as Llama's) between two linears: the first
  // linear's kernel prefetches the second's weight past the loop (a row loop plans no prefetch of its
  // own: PrefetchReach::past_compute_bound), and the loop transposes each row tile into its a^T the same
  // way.
  const Graph u = optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(testing::naive_rms_norm(linear(in[0], in[3]), in[1]), in[2])};
      },
      {{{128, 512}, DType::f32}, {{512}, DType::f32}, {{1024, 512}, DType::f32}, {{512, 512}, DType::f32}});
  const auto reaching = [&](ActivationChain chain) {
    return lower(u, spec, "norm_linear", {.prefetch = WeightPrefetch::always,
                                          .reach = PrefetchReach::past_compute_bound, .chain = chain});
  };
  const device::Executable kept_loop = reaching(ActivationChain::norms_in_sbuf);
  const device::Executable plain_loop = reaching(ActivationChain::through_hbm);
  EXPECT_EQ(metadata(kept_loop, "compiled.row_loops"), "1");
  EXPECT_EQ(metadata(kept_loop, "compiled.kept_activations"), "1");
  // The loop reads the first linear's result from scratch either way; only without the chain does the
  // second linear load the loop's.
  EXPECT_EQ(scratch_loads(kept_loop), 128u * 512 * 4);
  EXPECT_EQ(scratch_loads(plain_loop), 2u * 128 * 512 * 4);
  const auto c = run(kept_loop, &kept_ns), d = run(plain_loop, &plain_ns);
  EXPECT_EQ(c, d);
  EXPECT_EQ(kept_ns, run_ns(kept_loop));
  EXPECT_LT(kept_ns, plain_ns);
}

// A matmul epilogue's tensor operand (a residual) for its first tiles: with several row tiles and
// operands the kernel loads itself, loaded behind those loads (right before the first evacuation, for
// every tile its buffers hold), so that the first matmuls do not wait behind it; with one row tile,
// ahead of them, since the only tile's epilogue comes right after its matmuls. Either way the program
// reads nothing unwritten.
TEST(Lowering, EpilogueOperandsOfManyRowTilesLoadBehindTheMatmulsOwn) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const int64_t m : {int64_t{128}, int64_t{512}}) {
    const Graph g = optimized(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], in[1], in[2]) + in[3]}; },
        {{{m, 480}, DType::f32}, {{480, 480}, DType::f32}, {{480}, DType::f32}, {{m, 480}, DType::f32}});
    const device::Executable exe = lower(g, spec, "residual", {.prefetch = WeightPrefetch::never});
    ASSERT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << m;
    // Per queue, whether a load of the residual (input 3) comes before the queue's last load of x.
    const auto io_of = [&](const std::string& name) {
      for (size_t i = 0; i < exe.io.size(); ++i) {
        if (exe.io[i].name == name) return i;
      }
      ADD_FAILURE() << name;
      return size_t{0};
    };
    const size_t x = io_of("arg0"), residual = io_of("arg3");
    bool residual_ahead = false;
    for (const auto& queue : exe.dma_queues) {
      std::optional<size_t> first_residual, last_x;
      for (size_t k = 0; k < queue.size(); ++k) {
        if (queue[k].src0.memory != device::Memory::hbm) continue;
        if (queue[k].src0.tensor == residual && !first_residual) first_residual = k;
        if (queue[k].src0.tensor == x) last_x = k;
      }
      residual_ahead |= first_residual && last_x && *first_residual < *last_x;
    }
    EXPECT_EQ(residual_ahead, m == 128) << m;
    double ns = 0;
    EXPECT_EQ(run_outputs(spec, exe, &ns).size(), 1u) << m;  // no read of memory nothing wrote
    EXPECT_EQ(ns, run_ns(exe)) << m;
  }
}

// ESM-2's out projection with its residual add, the layer_norm and FC1 with its residual, f32, at batch 4
// (512 rows: four row tiles).
Graph out_projection_norm_fc1() {
  return optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor h = linear(in[0], in[1], in[2]) + in[0];
        return std::vector<Tensor>{linear(layer_norm(h, in[3], in[4]), in[5], in[6]) + h};
      },
      {{{512, 480}, DType::f32}, {{480, 480}, DType::f32}, {{480}, DType::f32}, {{480}, DType::f32},
       {{480}, DType::f32}, {{480, 480}, DType::f32}, {{480}, DType::f32}});
}

// The identity a kept norm's transposes multiply by is built on GpSimd when the norm's kernel starts,
// behind the epilogue's copies of the result tiles there. The norm's first Vector step must not wait for
// it: built through a ramp tile freed right away, its hole went to the norm's own tiles, whose first write
// then waited for GpSimd to finish reading the ramp (1 us per norm, 24 us in ESM-2 t12 at batch 4). Nor
// may its first write wait for the projection's stores (the norm computes over its kept rows in place).
TEST(Lowering, AKeptNormWaitsNeitherForItsIdentityNorForTheStoresBeforeIt) {
  const device::Spec spec = device::Spec::builtin("trn2");
  // ESM-2's out projection with its residual add, the layer_norm, FC1: batch 4, FC1's weight prefetched
  // past the norm, whose weight and bias then load ahead (as lower() picks for ESM-2).
  const Graph e = out_projection_norm_fc1();
  const device::Executable exe =
      lower(e, spec, "norm_linear",
            {.prefetch = WeightPrefetch::always, .reach = PrefetchReach::past_compute_bound,
             .chain = ActivationChain::norms_in_sbuf});
  ASSERT_EQ(metadata(exe, "compiled.kept_norm_inputs"), "1");
  ASSERT_EQ(metadata(exe, "compiled.kept_activations"), "1");
  device::Core core(spec);
  std::vector<uint64_t> addresses;
  for (const device::IoTensor& t : exe.io) addresses.push_back(core.hbm_allocate(std::max<uint64_t>(t.bytes(), 1)));
  const device::RunResult r = core.run(exe, addresses, {.functional = false});
  double identity_end = 0, first_norm_step = std::numeric_limits<double>::infinity();
  for (const device::InstructionRecord& rec : r.records) {
    if (rec.engine == device::Engine::dma) continue;
    const device::Instruction& in = exe.engines[static_cast<size_t>(rec.engine)][rec.index];
    const std::string& op = exe.source_ops.at(rec.source_op);
    if (rec.engine == device::Engine::gpsimd && in.opcode == device::Opcode::tensor_scalar &&
        in.alu() == device::AluOp::is_equal)
      identity_end = std::max(identity_end, rec.end_ns);
    if (op == "aten::layer_norm" && in.opcode == device::Opcode::bn_stats)
      first_norm_step = std::min(first_norm_step, rec.start_ns);
  }
  ASSERT_GT(identity_end, 0.0);
  ASSERT_LT(first_norm_step, std::numeric_limits<double>::infinity());
  EXPECT_LT(first_norm_step, identity_end);
  // And it computes over the kept rows in place: its result's stores read the SBUF the projection's
  // copies of its result tiles (GpSimd's 1 * x) wrote, not a y buffer of its own, which would take SBUF
  // the projection may still be storing its result tiles from (its first write would wait for those).
  uint64_t kept_begin = std::numeric_limits<uint64_t>::max(), kept_end = 0, stores = 0, inside = 0;
  for (const device::Instruction& in : exe.stream(device::Engine::gpsimd)) {
    if (exe.source_ops.at(in.source_op) == "aten::add" && in.opcode == device::Opcode::tensor_scalar) {
      kept_begin = std::min(kept_begin, in.dst.offset);
      kept_end = std::max(kept_end, in.dst.offset + in.dst.bytes() / in.dst.partition_count);
    }
  }
  for (const auto& queue : exe.dma_queues) {
    for (const device::Instruction& in : queue) {
      if (exe.source_ops.at(in.source_op) != "aten::layer_norm" || in.src0.memory != device::Memory::sbuf ||
          in.dst.memory != device::Memory::hbm)
        continue;
      ++stores;
      inside += in.src0.offset >= kept_begin && in.src0.offset + in.src0.bytes() / in.src0.partition_count <= kept_end;
    }
  }
  EXPECT_GT(stores, 0u);
  EXPECT_EQ(inside, stores);
  std::printf("the norm's first bn_stats at %.1f ns, its identity built by %.1f ns\n", first_norm_step, identity_end);
}

// ESM-2's out projection with its residual add, the layer_norm and FC1 at batch 4 (four row tiles), the
// norm reading the projection's result tiles in SBUF and writing FC1's a^T there. The norm's own steps
// keep the Vector engine the busiest, so its transposes' copies out of PSUM all go to the Scalar engine;
// and the projection's evacuations on Vector are the tail the norm waits behind, so its residual adds go
// where the spec's costs say they finish first, some of them to GpSimd (which holds only the copies for
// the norm). The outputs are the bits of the program that keeps nothing in SBUF, where every add runs on
// the Vector engine.
TEST(Lowering, AKeptNormAndTheEpilogueBeforeItSpreadTheirWorkOverTheEngines) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph e = out_projection_norm_fc1();
  const auto lowered = [&](ActivationChain chain) {
    return lower(e, spec, "norm_linear", {.prefetch = WeightPrefetch::always,
                                          .reach = PrefetchReach::past_compute_bound, .chain = chain});
  };
  const device::Executable kept = lowered(ActivationChain::norms_in_sbuf), plain = lowered(ActivationChain::through_hbm);
  ASSERT_EQ(metadata(kept, "compiled.kept_norm_inputs"), "1");
  ASSERT_EQ(metadata(kept, "compiled.kept_activations"), "1");
  // Per engine, the instructions of each op: the norm's PSUM copies, the residual adds.
  const auto count = [](const device::Executable& exe, device::Engine engine, const char* op, device::Opcode opcode) {
    size_t n = 0;
    for (const device::Instruction& in : exe.stream(engine)) {
      n += exe.source_ops.at(in.source_op) == op && in.opcode == opcode && in.src0.memory == device::Memory::psum;
    }
    return n;
  };
  const auto adds = [](const device::Executable& exe, device::Engine engine) {
    size_t n = 0;
    for (const device::Instruction& in : exe.stream(engine)) {
      n += exe.source_ops.at(in.source_op) == "aten::add" && in.opcode == device::Opcode::tensor_tensor;
    }
    return n;
  };
  EXPECT_EQ(count(kept, device::Engine::vector, "aten::layer_norm", device::Opcode::tensor_copy), 0u);
  // Per row tile, K tiles 0 and 1 in one copy, 2, and 3 (96 columns) on its own: every element once.
  EXPECT_EQ(count(kept, device::Engine::scalar, "aten::layer_norm", device::Opcode::activate), 4u * 3);
  uint64_t copied = 0;
  for (const device::Instruction& in : kept.stream(device::Engine::scalar)) {
    if (kept.source_ops.at(in.source_op) == "aten::layer_norm" && in.src0.memory == device::Memory::psum)
      copied += in.src0.elements();
  }
  EXPECT_EQ(copied, 512u * 480);
  EXPECT_GT(adds(kept, device::Engine::gpsimd), 0u);
  EXPECT_GT(adds(kept, device::Engine::vector), adds(kept, device::Engine::gpsimd));
  EXPECT_EQ(adds(plain, device::Engine::gpsimd), 0u);
  double kept_ns = 0, plain_ns = 0;
  EXPECT_EQ(run_outputs(spec, kept, &kept_ns), run_outputs(spec, plain, &plain_ns));
  EXPECT_EQ(kept_ns, run_ns(kept));
  std::printf("out projection + norm + FC1 at 512 rows: %zu of %zu residual adds on GpSimd; %.1f ns kept, %.1f through HBM\n",
              adds(kept, device::Engine::gpsimd), adds(kept, device::Engine::gpsimd) + adds(kept, device::Engine::vector),
              kept_ns, plain_ns);
}

// Llama's residual block as the user writes it: the out projection with its residual add (a matmul
// epilogue group), the user's RMSNorm (a row loop of its own ops), the next projection and its residual.
// With ActivationChain::norms_in_sbuf the group copies each result tile into SBUF for the loop, which
// then loads nothing, and the loop hands its result on into the projection's a^T (a row loop plans that
// hand-over itself, and streams the projection's weight: plan_weight_prefetch); only the last residual add reads
// the sum back. At 1024 f32 columns each result tile is half a row (one PSUM bank), copied into its half
// of the kept rows; bf16 at 256 rows is two row tiles. The same bits as through HBM, the same modeled
// time functional or timing-only, and faster; lower() keeps it where it is faster.
TEST(Lowering, RowLoopNormReadsTheEpiloguesResultInSbuf) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const auto run = [&](const device::Executable& exe, double* ns) { return run_outputs(spec, exe, ns); };
  for (const auto& [m, dtype] : {std::pair<int64_t, DType>{128, DType::f32}, {256, DType::bf16}}) {
    const Graph g = optimized(
        [](const std::vector<Tensor>& in) {
          const Tensor h = linear(in[0], in[1]) + in[0];
          return std::vector<Tensor>{linear(testing::naive_rms_norm(h, in[2]), in[3]) + h};
        },
        {{{m, 1024}, dtype}, {{1024, 1024}, dtype}, {{1024}, dtype}, {{1024, 1024}, dtype}});
    const auto lowered = [&](ActivationChain chain) {
      return lower(g, spec, "residual_norm", {.prefetch = WeightPrefetch::always, .chain = chain});
    };
    const device::Executable kept = lowered(ActivationChain::norms_in_sbuf);
    const device::Executable plain = lowered(ActivationChain::through_hbm);
    EXPECT_EQ(metadata(kept, "compiled.row_loops"), "1") << m;
    EXPECT_EQ(metadata(kept, "compiled.kept_norm_inputs"), "1") << m;
    EXPECT_EQ(metadata(kept, "compiled.kept_activations"), "1") << m;
    EXPECT_EQ(metadata(plain, "compiled.kept_norm_inputs"), "") << m;
    EXPECT_EQ(metadata(plain, "compiled.kept_activations"), "") << m;
    const uint64_t value_bytes = static_cast<uint64_t>(m) * 1024 * dtype_size(dtype);
    EXPECT_EQ(scratch_loads(kept), value_bytes) << m;      // the last residual add's h
    EXPECT_EQ(scratch_loads(plain), 3 * value_bytes) << m;  // and the loop's h, the projection's x
    double kept_ns = 0, plain_ns = 0;
    const auto a = run(kept, &kept_ns), b = run(plain, &plain_ns);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(a[0].size(), value_bytes);
    EXPECT_EQ(a, b) << m;
    EXPECT_EQ(kept_ns, run_ns(kept)) << m;  // functional and timing-only: the same modeled time
    EXPECT_LT(kept_ns, plain_ns) << m;
    std::printf("residual + RMSNorm row loop + linear, %lld x 1024 %s: %.1f ns kept in SBUF, %.1f ns through HBM\n",
                static_cast<long long>(m), std::string(dtype_name(dtype)).c_str(), kept_ns, plain_ns);
    EXPECT_LE(run_ns(lower(g, spec, "residual_norm")), plain_ns) << m;
  }
}

// The same block at 512 bf16 rows (four row tiles, Llama small at batch 4), the loop's rows and its
// result both in SBUF. Each row tile's transposes into the projection's a^T go out one tile late
// (RowsComputed): on the Scalar engine, which runs the loop's sums of squares and rsqrt, the first copy
// out of PSUM comes after the second tile's rsqrt, so the engines work on the next tile while the
// transposes wait for this one. The copies go to the Vector or the Scalar engine, whichever the loop's
// own work per tile leaves less loaded, so both take some, and the loop places its own steps knowing
// them (GpSimd takes the weight's multiply). Its weight row is loaded ahead of the group before it
// (plan_kept_input), so the loop loads nothing, and it streams the projection's weight from its first
// tile (plan_weight_prefetch), where a loop that loads its rows does not. The same bits as through
// HBM, and faster.
TEST(Lowering, RowLoopNormHandsItsTilesOnOneTileLateAndStreamsTheNextWeight) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor h = linear(in[0], in[1]) + in[0];
        return std::vector<Tensor>{linear(testing::naive_rms_norm(h, in[2]), in[3]) + h};
      },
      {{{512, 1024}, DType::bf16}, {{1024, 1024}, DType::bf16}, {{1024}, DType::bf16}, {{1024, 1024}, DType::bf16}});
  const auto lowered = [&](ActivationChain chain) {
    return lower(g, spec, "residual_norm", {.prefetch = WeightPrefetch::always, .chain = chain});
  };
  const device::Executable kept = lowered(ActivationChain::norms_in_sbuf);
  const device::Executable plain = lowered(ActivationChain::through_hbm);
  ASSERT_EQ(metadata(kept, "compiled.kept_norm_inputs"), "1");
  ASSERT_EQ(metadata(kept, "compiled.kept_activations"), "1");
  EXPECT_EQ(metadata(kept, "compiled.prefetched_weights"), "1");  // the projection's, from the loop
  EXPECT_EQ(metadata(plain, "compiled.prefetched_weights"), "0");
  const auto op_index = [&](const device::Executable& exe, std::string_view name) {
    const auto it = std::find(exe.source_ops.begin(), exe.source_ops.end(), name);
    return it == exe.source_ops.end() ? device::kNoSourceOp : static_cast<uint32_t>(it - exe.source_ops.begin());
  };
  const uint32_t rsqrt = op_index(kept, "aten::rsqrt");
  ASSERT_NE(rsqrt, device::kNoSourceOp);
  size_t rsqrts_before_first_copy = 0;
  for (const device::Instruction& in : kept.stream(device::Engine::scalar)) {
    if (in.src0.memory == device::Memory::psum && in.dst.memory == device::Memory::sbuf &&
        in.source_op != op_index(kept, "aten::linear"))
      break;
    rsqrts_before_first_copy += in.source_op == rsqrt;
  }
  EXPECT_GE(rsqrts_before_first_copy, 2u);
  // The transposes' copies out of PSUM (labelled with the norm's last op, as its result) on each engine.
  const auto copies_on = [&](device::Engine e) {
    size_t n = 0;
    for (const device::Instruction& in : kept.stream(e))
      n += in.src0.memory == device::Memory::psum && in.source_op == op_index(kept, "aten::mul");
    return n;
  };
  EXPECT_GT(copies_on(device::Engine::vector), 0u);
  EXPECT_GT(copies_on(device::Engine::scalar), 0u);
  EXPECT_EQ(copies_on(device::Engine::vector) + copies_on(device::Engine::scalar), 4u * 4);  // 4 runs a tile
  // The loop placed its own steps beside those copies: GpSimd, which cannot copy out of PSUM, takes the
  // weight's multiply (a tensor_tensor per tile).
  size_t gpsimd_products = 0;
  for (const device::Instruction& in : kept.stream(device::Engine::gpsimd))
    gpsimd_products += in.opcode == device::Opcode::tensor_tensor && in.source_op == op_index(kept, "aten::mul");
  EXPECT_EQ(gpsimd_products, 4u);
  // The loop's weight row (arg2) was loaded before the group's kernel: on its queue no store of the
  // group's result comes before it.
  size_t weight_loads = 0;
  for (const auto& queue : kept.dma_queues) {
    bool stored = false;
    for (const device::Instruction& in : queue) {
      if (in.dst.memory == device::Memory::hbm && kept.io[in.dst.tensor].kind == device::IoKind::scratch) stored = true;
      if (in.src0.memory == device::Memory::hbm && kept.io[in.src0.tensor].name == "arg2") {
        ++weight_loads;
        EXPECT_FALSE(stored);
      }
    }
  }
  EXPECT_EQ(weight_loads, 1u);  // the loop reads that row, and loads none of its own
  // The projection's weight streamed from the loop is the projection's: its loads carry aten::linear.
  size_t projection_loads = 0;
  for (const auto& queue : kept.dma_queues) {
    for (const device::Instruction& in : queue) {
      if (in.src0.memory != device::Memory::hbm || kept.io[in.src0.tensor].name != "arg3") continue;
      ++projection_loads;
      EXPECT_EQ(in.source_op, op_index(kept, "aten::linear"));
    }
  }
  EXPECT_GT(projection_loads, 0u);
  const auto [kept_ns, plain_ns] = expect_same_outputs_and_faster(spec, kept, plain, 1);
  std::printf("residual + RMSNorm row loop + linear, 512 x 1024 bf16: %.1f ns kept in SBUF, %.1f ns through HBM\n",
              kept_ns, plain_ns);
}

// Llama's q, k and v projections of one RMSNorm's result (512 bf16 rows, Llama small's shapes): q's a^T
// is the norm's hand-over (ActivationChain::norms_in_sbuf), and with SharedInput::handed_on q's prefetch
// hands that tile on to k's, and k's to v's ("compiled.shared_activations"), so no projection loads the
// norm's result back from HBM, where k's and v's loads would queue behind q's and k's stores. The same
// bits as the program that prefetches nothing, functional and timing-only the same modeled time; lower()
// keeps it (its last candidate) where faster.
TEST(Lowering, TheProjectionsOfOneInputShareItsPrefetchedTranspose) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor n = testing::naive_rms_norm(in[0], in[1]);
        return std::vector<Tensor>{linear(n, in[2]), linear(n, in[3]), linear(n, in[4])};
      },
      {{{512, 1024}, DType::bf16}, {{1024}, DType::bf16}, {{1024, 1024}, DType::bf16}, {{256, 1024}, DType::bf16},
       {{256, 1024}, DType::bf16}});
  const auto lowered = [&](SharedInput shared) {
    return lower(g, spec, "qkv", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::norms_in_sbuf,
                                  .shared = shared});
  };
  const device::Executable shared = lowered(SharedInput::handed_on);
  EXPECT_EQ(metadata(lowered(SharedInput::loaded), "compiled.shared_activations"), "");
  const device::Executable plain = lower(g, spec, "qkv", {.prefetch = WeightPrefetch::never});
  EXPECT_EQ(metadata(shared, "compiled.shared_activations"), "2");
  EXPECT_EQ(metadata(shared, "compiled.kept_activations"), "1");  // q's, from the norm
  EXPECT_EQ(metadata(plain, "compiled.shared_activations"), "");
  EXPECT_EQ(scratch_loads(shared), 0u);  // the norm's result is read by no load
  EXPECT_EQ(scratch_loads(plain), 3u * 512 * 1024 * 2);
  const double shared_ns = expect_same_outputs_and_faster(spec, shared, plain, 3).first;
  const device::Executable best = lower(g, spec, "qkv");
  EXPECT_LE(run_ns(best), shared_ns);
  EXPECT_EQ(metadata(best, "compiled.shared_activations"), "2");
}

// Llama's MLP as the user writes it, down_proj(silu(gate_proj(x)) * up_proj(x)): the up projection is
// a linear by itself, and the gate projection's matmul epilogue (silu, then times up) reads its result
// element for element. With ActivationChain::norms_in_sbuf the up projection's kernel copies each
// result tile into SBUF beside its store, and the gate's epilogue reads its operand tiles there instead
// of loading them (plan_kept_input: "compiled.kept_epilogue_operands"), so the DMA queues carry neither
// those loads nor their wait behind the down projection's weight stream. The same bits as through HBM,
// the same modeled time functional or timing-only, and faster; lower() keeps it where it is faster.
TEST(Lowering, TheGatedMlpReadsTheUpProjectionInSbuf) {
  const device::Spec spec = device::Spec::builtin("trn2");
  for (const auto& [m, dtype] : {std::pair<int64_t, DType>{128, DType::f32}, {512, DType::bf16}}) {
    const int64_t d = 512, inter = 1408;
    const Graph g = optimized(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{linear(silu(linear(in[0], in[1])) * linear(in[0], in[2]), in[3])};
        },
        {{{m, d}, dtype}, {{inter, d}, dtype}, {{inter, d}, dtype}, {{d, inter}, dtype}});
    const auto lowered = [&](ActivationChain chain) {
      return lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always, .chain = chain});
    };
    const device::Executable kept = lowered(ActivationChain::norms_in_sbuf);
    const device::Executable plain = lowered(ActivationChain::through_hbm);
    EXPECT_EQ(metadata(kept, "compiled.kept_epilogue_operands"), "1") << m;
    EXPECT_EQ(metadata(plain, "compiled.kept_epilogue_operands"), "") << m;
    const uint64_t up_bytes = static_cast<uint64_t>(m * inter) * dtype_size(dtype);
    EXPECT_EQ(scratch_loads(plain) - scratch_loads(kept), up_bytes) << m;
    const auto [kept_ns, plain_ns] = expect_same_outputs_and_faster(spec, kept, plain, 1);
    std::printf("gated MLP %lld x %lld -> %lld %s: %.1f ns with up in SBUF, %.1f ns through HBM\n",
                static_cast<long long>(m), static_cast<long long>(d), static_cast<long long>(inter),
                std::string(dtype_name(dtype)).c_str(), kept_ns, plain_ns);
    EXPECT_LE(run_ns(lower(g, spec, "mlp")), plain_ns) << m;
  }
}

// The residual stream of a pre-norm block: y = linear(a, w0) + x, a norm of y, two linears, and y added
// back in the last one's epilogue. The norm reads y where the first group's epilogue copied it in SBUF
// (ActivationChain::norms_in_sbuf); with ResidualStream::kept those rows stay there for the residual add,
// which loads nothing (y's bytes fewer from HBM), so the layer_norm must not compute over them (it
// does where they are its alone: at 512 rows, four tiles). Both norms, Llama's RMSNorm as a user
// writes it (a row loop) and the built-in layer_norm, at one and four row tiles: the same bits.
TEST(Lowering, TheResidualStreamStaysInSbufForTheAddAfterTheNorm) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t d = 256;
  for (const bool layer_norm_block : {false, true}) {
    for (const int64_t m : {128, 512}) {
      SCOPED_TRACE(fmt::format("{} at {} rows", layer_norm_block ? "layer_norm" : "RMSNorm", m));
      const Graph g = optimized(
          [layer_norm_block](const std::vector<Tensor>& in) {
            const Tensor y = linear(in[0], in[1]) + in[2];
            const Tensor h = layer_norm_block ? layer_norm(y, in[5], in[6], 1e-5) : testing::naive_rms_norm(y, in[5]);
            return std::vector<Tensor>{linear(gelu(linear(h, in[3])), in[4]) + y};
          },
          {{{m, d}, DType::f32}, {{d, d}, DType::f32}, {{m, d}, DType::f32}, {{4 * d, d}, DType::f32},
           {{d, 4 * d}, DType::f32}, {{d}, DType::f32}, {{d}, DType::f32}});
      const auto lowered = [&](ResidualStream residual) {
        return lower(g, spec, "block", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::norms_in_sbuf,
                                        .residual = residual});
      };
      const device::Executable kept = lowered(ResidualStream::kept), loaded = lowered(ResidualStream::loaded);
      EXPECT_EQ(metadata(kept, "compiled.kept_residuals"), "1");
      EXPECT_EQ(metadata(loaded, "compiled.kept_residuals"), "");
      EXPECT_EQ(metadata(kept, "compiled.kept_norm_inputs"), "1");
      EXPECT_EQ(scratch_loads(loaded) - scratch_loads(kept), static_cast<uint64_t>(m * d) * 4);
      const auto [kept_ns, loaded_ns] = expect_same_outputs_and_faster(spec, kept, loaded, 1);
      std::printf("residual kept %lld x %lld: %.1f ns, loaded: %.1f ns\n", static_cast<long long>(m),
                  static_cast<long long>(d), kept_ns, loaded_ns);
    }
  }
}

// Llama small's f32 MLP at 512 rows after its RMSNorm, its up projection kept in SBUF for the gate's
// epilogue and the gate's result for the down projection's a^T (ActivationChain::in_sbuf): the kept
// tiles leave the gate's matmul kernel no room for its weight panels, so that program cannot be built
// (an SBUF overflow, asked for by name). lower() drops such a candidate, keeps the fastest of those it
// could build, and says how many it dropped.
TEST(Lowering, ACandidateThatDoesNotFitIsDropped) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor n = testing::naive_rms_norm(in[0], in[1]);
        return std::vector<Tensor>{linear(silu(linear(n, in[2])) * linear(n, in[3]), in[4]) + in[0]};
      },
      {{{512, 1024}, DType::f32}, {{1024}, DType::f32}, {{2816, 1024}, DType::f32}, {{2816, 1024}, DType::f32},
       {{1024, 2816}, DType::f32}});
  EXPECT_THROW(lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::in_sbuf}),
               Error);
  const device::Executable best = lower(g, spec, "mlp");
  EXPECT_NE(metadata(best, "compiled.candidates_not_built"), "");
  EXPECT_LE(run_ns(best), run_ns(lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always})));
}

// Llama's layer boundary: the down projection with its residual add, the user's RMSNorm, then the v
// projection (1 MB of f32 weight, short) and the q projection (4 MB). With the prefetch started past
// kernels, the down projection's kernel streams v's weight across the norm and q's behind it (a second
// weight ahead: q's stream outlasts v's Tensor-engine time), where one ahead would start q's only in
// v's kernel. The same bits as without, the same modeled time functional or timing-only, and faster.
TEST(Lowering, APrefetchPastKernelsTakesTheNextLinearsWeightToo) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor h = linear(in[0], in[1]) + in[2];
        const Tensor n = testing::naive_rms_norm(h, in[3]);
        return std::vector<Tensor>{linear(n, in[4]), linear(n, in[5]), h};
      },
      {{{128, 2816}, DType::f32}, {{1024, 2816}, DType::f32}, {{128, 1024}, DType::f32}, {{1024}, DType::f32},
       {{256, 1024}, DType::f32}, {{1024, 1024}, DType::f32}});
  const auto lowered = [&](PrefetchReach reach) {
    return lower(g, spec, "layer_boundary", {.prefetch = WeightPrefetch::always, .reach = reach,
                                             .chain = ActivationChain::norms_in_sbuf});
  };
  const device::Executable ahead = lowered(PrefetchReach::past_compute_bound);
  const device::Executable next = lowered(PrefetchReach::next_kernel);
  // "i>j": node i's kernel prefetches linear j's weight past kernels between; "j>>k": and linear k's,
  // the one right after linear j.
  const std::string reach = metadata(ahead, "compiled.prefetched_ahead");
  const size_t second = reach.find(">>");
  ASSERT_NE(second, std::string::npos) << reach;
  const size_t first = reach.find('>');
  ASSERT_LT(first, second) << reach;
  EXPECT_EQ(reach.substr(first + 1, reach.find(',') - first - 1), reach.substr(reach.find(',') + 1, second - reach.find(',') - 1))
      << reach;  // the second prefetch follows the linear the first is for
  EXPECT_EQ(metadata(ahead, "compiled.prefetched_weights"), "2");
  const auto [ahead_ns, next_ns] = expect_same_outputs_and_faster(spec, ahead, next, 3);
  std::printf("down + RMSNorm + v + q, 128 tokens f32: %.1f ns with both weights from the down projection, %.1f ns one ahead\n",
              ahead_ns, next_ns);
}

// A decoder layer at batch 1 (bf16, 128 tokens, d 512, an MLP of 1536): with MlpWeight::past_attention
// the attention kernel streams the weight of the MLP's first linear after the norm (the up projection:
// the gate's kernel multiplies silu(gate) by its result) behind its last loads, on the upper half of the
// DMA queues, and the out projection's weight right behind it on the lower half, where every kernel's
// transfers go until the up projection, which takes the panels over. The same bits as
// without, the same modeled time functional or timing-only, and faster: the attention half of the layer
// moves the MLP's first weight while it computes. lower() keeps it where faster.
TEST(Lowering, TheMlpsFirstWeightStreamsPastTheAttention) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = bf16_decoder_layer(512, 1536);
  const auto lowered = [&](MlpWeight mlp) {
    return lower(g, spec, "layer", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::norms_in_sbuf,
                                    .mlp = mlp});
  };
  const device::Executable streamed = lowered(MlpWeight::past_attention), one_ahead = lowered(MlpWeight::one_ahead);
  EXPECT_EQ(metadata(streamed, "compiled.streamed_past_attention"), "1");
  EXPECT_EQ(metadata(one_ahead, "compiled.streamed_past_attention"), "");
  // The out projection's weight is prefetched too (from the attention kernel); one ahead, it is not.
  EXPECT_EQ(std::stoi(metadata(streamed, "compiled.prefetched_weights")),
            std::stoi(metadata(one_ahead, "compiled.prefetched_weights")) + 1);
  // The queues each weight's loads take: arg5 the out projection's, arg8 the up projection's.
  const auto queues_of = [](const device::Executable& exe, const std::string& arg) {
    uint32_t io = 0;
    for (uint32_t i = 0; i < exe.io.size(); ++i) {
      if (exe.io[i].name == arg) io = i;
    }
    std::set<size_t> queues;
    for (size_t q = 0; q < exe.dma_queues.size(); ++q) {
      for (const device::Instruction& in : exe.dma_queues[q]) {
        if (in.src0.memory == device::Memory::hbm && in.src0.tensor == io) queues.insert(q);
      }
    }
    return queues;
  };
  const size_t half = spec.dma.queues / 2;
  const std::set<size_t> up = queues_of(streamed, "arg8"), out = queues_of(streamed, "arg5");
  ASSERT_FALSE(up.empty());
  ASSERT_FALSE(out.empty());
  EXPECT_GE(*up.begin(), half);
  EXPECT_LT(*out.rbegin(), half);
  EXPECT_LT(*queues_of(one_ahead, "arg8").begin(), half);  // without the stream: every queue
  const auto [streamed_ns, one_ahead_ns] = expect_same_outputs_and_faster(spec, streamed, one_ahead, 1);
  std::printf("decoder layer, batch 1, 128 tokens bf16: %.1f ns with the up projection's weight streamed past the "
              "attention, %.1f ns one ahead\n",
              streamed_ns, one_ahead_ns);
  EXPECT_LE(run_ns(lower(g, spec, "layer")), run_ns(one_ahead));
}

// Llama small's layer at batch 1 (bf16, 128 tokens, d 1024, an MLP of 2816): the gate projection's
// weight (5.8 MB) does not fit a quarter of the SBUF left beside the up projection's prefetched panels,
// so without PrefetchBudget::half the gate's kernel loads it itself, once the up projection is done;
// with it, the up projection's kernel streams it while it computes. One weight more prefetched, the same
// bits, the same modeled time functional or timing-only, and faster. lower() keeps it where faster.
TEST(Lowering, AHalfBudgetPrefetchesTheGateProjectionDuringTheUpProjection) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = bf16_decoder_layer(1024, 2816);
  const auto lowered = [&](PrefetchBudget budget) {
    return lower(g, spec, "layer", {.prefetch = WeightPrefetch::always, .chain = ActivationChain::norms_in_sbuf,
                                    .budget = budget});
  };
  const device::Executable half = lowered(PrefetchBudget::half), quarter = lowered(PrefetchBudget::quarter);
  EXPECT_EQ(std::stoi(metadata(half, "compiled.prefetched_weights")),
            std::stoi(metadata(quarter, "compiled.prefetched_weights")) + 1);
  const auto [half_ns, quarter_ns] = expect_same_outputs_and_faster(spec, half, quarter, 1);
  std::printf("Llama small's layer, batch 1, 128 tokens bf16: %.1f ns with half the SBUF for a prefetch, %.1f ns "
              "with a quarter\n",
              half_ns, quarter_ns);
  EXPECT_LE(run_ns(lower(g, spec, "layer")), half_ns);
}

// Where the kernel before a linear emits its prefetched weight: `always` right before its first store,
// when a resident b still has panels to fetch (4 panels of 512 columns: the first two are out by then),
// so some of the next weight's pieces queue ahead of them; `after_loads` behind every load of its own.
TEST(Lowering, AfterLoadsPrefetchQueuesBehindTheKernelsOwnLoads) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        const Tensor h = relu(linear(in[0], in[1]));
        return std::vector<Tensor>{linear(h, in[2]) + in[0]};
      },
      {{{128, 1024}, DType::bf16}, {{2048, 1024}, DType::bf16}, {{1024, 2048}, DType::bf16}});
  // Whether, on some DMA queue, a load of the first weight follows a load of the second.
  auto first_weight_behind_second = [](const device::Executable& exe) {
    uint32_t w1 = 0, w2 = 0;
    for (uint32_t i = 0; i < exe.io.size(); ++i) {
      if (exe.io[i].name == "arg1") w1 = i;
      if (exe.io[i].name == "arg2") w2 = i;
    }
    for (const std::vector<device::Instruction>& queue : exe.dma_queues) {
      bool second = false;
      for (const device::Instruction& in : queue) {
        if (in.src0.memory != device::Memory::hbm) continue;
        if (in.src0.tensor == w2) second = true;
        if (in.src0.tensor == w1 && second) return true;
      }
    }
    return false;
  };
  const device::Executable at_first_store = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always});
  const device::Executable after_loads = lower(g, spec, "linears", {.prefetch = WeightPrefetch::after_loads});
  EXPECT_EQ(metadata(at_first_store, "compiled.prefetched_weights"), "1");
  EXPECT_EQ(metadata(after_loads, "compiled.prefetched_weights"), "1");
  EXPECT_TRUE(first_weight_behind_second(at_first_store));
  EXPECT_FALSE(first_weight_behind_second(after_loads));
}

// A linear whose weight arrives prefetched and whose bias is added in the evacuation (f32, 128 rows)
// reads the bias broadcast to its rows, as many bytes as a result tile per 512-column panel. ESM-2's
// MLP, 1920 columns: four panels. The next linear's weight is queued at this kernel's first store
// (WeightPrefetch::always), 3.7 MB on every queue; a panel's bias loaded when its evacuations come would
// wait behind it. So the biases of the two panels after the current one are loaded right behind its
// own: on every DMA queue, the biases of panels 1 and 2 come before any load of the second weight.
TEST(Lowering, FoldedBiasesOfLaterPanelsQueueAheadOfTheNextWeight) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const int64_t m = 128, k = 480, n = 1920;
  const Graph g = optimized(&testing::biased_mlp, testing::biased_mlp_metas(m, k, n, DType::f32));
  const device::Executable exe = lower(g, spec, "mlp", {.prefetch = WeightPrefetch::always});
  EXPECT_EQ(metadata(exe, "compiled.prefetched_weights"), "2");
  uint32_t b1 = 0, w2 = 0;
  for (uint32_t i = 0; i < exe.io.size(); ++i) {
    if (exe.io[i].name == "arg2") b1 = i;
    if (exe.io[i].name == "arg3") w2 = i;
  }
  const uint32_t panel = spec.tensor.moving_free_max;
  std::set<int64_t> panels_loaded;  // panels of b1 loaded, broadcast to the rows (partition stride 0)
  bool early_behind_weight = false;
  for (const std::vector<device::Instruction>& queue : exe.dma_queues) {
    bool weight = false;
    for (const device::Instruction& in : queue) {
      if (in.src0.memory != device::Memory::hbm) continue;
      if (in.src0.tensor == w2) weight = true;
      if (in.src0.tensor != b1) continue;
      EXPECT_EQ(in.src0.partition_stride, 0);
      const int64_t p = static_cast<int64_t>(in.src0.offset / sizeof(float)) / panel;
      panels_loaded.insert(p);
      if (weight && p >= 1 && p <= 2) early_behind_weight = true;
    }
  }
  EXPECT_EQ(panels_loaded, (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(early_behind_weight);
  // And the program lower() keeps is no slower than this one.
  EXPECT_LE(run_ns(lower(g, spec, "mlp")), run_ns(exe));
}

// Where a prefetch's pieces go (PrefetchQueues). A linear's 256 x 256 bf16 weight is a few pieces of
// stream_min_piece_bytes; the kernel before it, a 128-row linear, has put its loads on the queues
// before its first store, where the prefetch is emitted. From queue 0 the pieces take the first queues
// whatever those hold; `idlest` the queues that hold the least of the kernel before's transfers by then,
// `from_last` the highest queues. lower() times each placement and keeps the fastest.
TEST(Lowering, PrefetchedWeightGoesToTheQueuesTheKernelBeforeLeavesIdle) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const Graph g = optimized(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(relu(linear(in[0], in[1])), in[2])};
      },
      {{{128, 1024}, DType::bf16}, {{256, 1024}, DType::bf16}, {{256, 256}, DType::bf16}});
  // For each queue: whether it holds a load of the second weight, and the modeled time of the first
  // kernel's transfers ahead of it there (each its fixed cost plus its bytes at the queue's rate).
  struct Placement {
    std::vector<uint32_t> queues;  // the queues holding the second weight's loads
    std::vector<double> ahead_ns;  // per queue: the first kernel's transfers ahead of the second weight
  };
  auto placement = [&](const device::Executable& exe) {
    uint32_t w2 = 0;
    for (uint32_t i = 0; i < exe.io.size(); ++i) {
      if (exe.io[i].name == "arg2") w2 = i;
    }
    Placement p;
    p.ahead_ns.assign(spec.dma.queues, 0.0);
    for (uint32_t q = 0; q < exe.dma_queues.size(); ++q) {
      for (const device::Instruction& in : exe.dma_queues[q]) {
        if (in.src0.memory == device::Memory::hbm && in.src0.tensor == w2) {
          p.queues.push_back(q);
          break;
        }
        p.ahead_ns[q] += spec.dma.fixed_cost_ns + double(in.dst.bytes()) / spec.dma.queue_bytes_per_ns;
      }
    }
    return p;
  };
  // The most time ahead of the weight on a queue it is on, and the least on one it is not.
  auto ahead = [&](const Placement& p) {
    double on = 0, off = std::numeric_limits<double>::infinity();
    for (uint32_t q = 0; q < spec.dma.queues; ++q) {
      const bool holds = std::find(p.queues.begin(), p.queues.end(), q) != p.queues.end();
      if (holds) on = std::max(on, p.ahead_ns[q]);
      if (!holds) off = std::min(off, p.ahead_ns[q]);
    }
    return std::pair{on, off};
  };
  const device::Executable first = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always});
  const device::Executable last = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always,
                                                             .queues = PrefetchQueues::from_last});
  const device::Executable idlest = lower(g, spec, "linears", {.prefetch = WeightPrefetch::always,
                                                               .queues = PrefetchQueues::idlest});
  for (const device::Executable* exe : {&first, &last, &idlest}) {
    EXPECT_EQ(metadata(*exe, "compiled.prefetched_weights"), "1");
  }
  const Placement from_first = placement(first), from_last = placement(last), idle = placement(idlest);
  ASSERT_FALSE(from_first.queues.empty());
  EXPECT_LT(from_first.queues.size(), spec.dma.queues);  // a few pieces, not one per queue
  EXPECT_EQ(from_first.queues.front(), 0u);
  EXPECT_EQ(from_last.queues.size(), from_first.queues.size());
  EXPECT_EQ(from_last.queues.back(), spec.dma.queues - 1);
  EXPECT_NE(from_last.queues.front(), 0u);
  EXPECT_EQ(idle.queues.size(), from_first.queues.size());
  EXPECT_NE(idle.queues.front(), 0u);
  // `idlest`: none of the queues it uses holds more of the first kernel than one it leaves out.
  EXPECT_LE(ahead(idle).first, ahead(idle).second);
  EXPECT_LE(ahead(idle).first, ahead(from_first).first);
  // The same weight loads, only on other queues: the program computes the same (its instructions move
  // between queues, none is added or dropped).
  auto transfers = [](const device::Executable& exe) {
    size_t n = 0;
    for (const auto& queue : exe.dma_queues) n += queue.size();
    return n;
  };
  EXPECT_EQ(transfers(idlest), transfers(first));
  // Every kernel's transfers through the idlest order too (KernelQueues::idlest): the same transfers on
  // other queues (the order is a permutation of them).
  const device::Executable kernels_idle =
      lower(g, spec, "linears", {.prefetch = WeightPrefetch::never, .kernel_queues = KernelQueues::idlest});
  EXPECT_EQ(transfers(kernels_idle), transfers(lower(g, spec, "linears", {.prefetch = WeightPrefetch::never})));
  const double best = run_ns(lower(g, spec, "linears"));
  for (const WeightPrefetch p : {WeightPrefetch::always, WeightPrefetch::after_loads, WeightPrefetch::never}) {
    for (const PrefetchQueues q : {PrefetchQueues::from_first, PrefetchQueues::from_last, PrefetchQueues::idlest}) {
      EXPECT_LE(best, run_ns(lower(g, spec, "linears", {.prefetch = p, .queues = q})));
    }
  }
}

TEST(Lowering, ScratchTensorsSurviveANeffRoundTrip) {
  const device::Executable exe = lower(decoder_graph(), device::Spec::builtin("trn2"), "decoder");
  const device::Executable back = formats::neff_parse(formats::neff_serialize(exe));
  EXPECT_EQ(back, exe);
  EXPECT_EQ(roles_of(back), roles_of(exe));
  EXPECT_THAT(formats::neff_dump(back), HasSubstr("scratch scratch0"));
}

TEST(Lowering, ForeignExecutablesAreRejectedByName) {
  device::Executable exe = lower(rms_norm_graph(4, 64), device::Spec::builtin("trn2"), "rms");
  exe.io[0].name = std::string("x");  // a temporary: GCC 12 -Wrestrict misreads the char* assignment inlined here
  try {
    io_bindings(exe);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("I/O tensor 'x' is not one a compiled program declares"));
  }
}

}  // namespace
}  // namespace sightline::compiler
