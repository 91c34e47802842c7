// Fused groups that keep their intermediates on chip. Row groups lowered as one row loop: eager results
// on a neuron core for awkward shapes and dtypes (with and without stages), HBM traffic of exactly the group's inputs and output,
// less device time than the op-by-op kernels, column chunks for long elementwise rows, i32 mask inputs
// with the op-by-op bits, and the documented op-by-op fallback for row-wide groups whose rows do not fit
// SBUF. Matmul epilogues applied
// to the result tiles: eager results, only the result written to HBM, all four in the decoder block.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "device/cost_model.h"
#include "neuron/neuron.h"
#include "device_runs.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

using testing::executions_of;
using testing::expect_close;
using testing::naive_layer_norm;
using ::testing::HasSubstr;

const Device kCore0 = Device::parse("neuron:0");

// x * sigmoid(x) * y: a sigmoid, its product with x and a gate, a three-op row group.
std::vector<Tensor> gated(const std::vector<Tensor>& a) { return {a[0] * sigmoid(a[0]) * a[1]}; }

// A normalization that is not a built-in: centre each row, scale by its largest magnitude, weight.
std::vector<Tensor> max_norm(const std::vector<Tensor>& a) {
  const Tensor centred = a[0] - mean(a[0], {-1}, true);
  return {centred / (amax(abs(centred), {-1}, true) + 1e-3) * a[1]};
}

// Per-row scalar inputs, a scalar operand on the left, softmax and a sum inside one group.
std::vector<Tensor> scaled_softmax(const std::vector<Tensor>& a) {
  const Tensor p = softmax((a[0] - a[1]) * 0.5, -1);
  return {p * reciprocal(sum(exp(a[0] * 0.25), {-1}, true)) + a[1]};
}

// The textbook softmax and layer_norm: the row loop puts the steps either engine can run on the less
// loaded one and cuts the steps into stages where the engine changes (schedule, stage_bounds in
// compiler/row_kernel.cpp), interleaved across row tiles.
std::vector<Tensor> naive_softmax(const std::vector<Tensor>& a) {
  const Tensor e = exp(a[0] - amax(a[0], {-1}, true));
  return {e / sum(e, {-1}, true)};
}

// Scalar affine chains the activations absorb (sigmoid(x * 0.5 - 1), rsqrt(mean * 2 + 1)), a row mean
// of a scaled row (mean of x * 3), and a square whose row only its mean reads.
std::vector<Tensor> affine_activations(const std::vector<Tensor>& a) {
  const Tensor& x = a[0];
  return {sigmoid(x * 0.5 - 1.0) * rsqrt(mean(x * x, {-1}, true) * 2.0 + 1.0) + mean(x * 3.0, {-1}, true)};
}

std::vector<Tensor> naive_rms_norm(const std::vector<Tensor>& a) { return {testing::naive_rms_norm(a[0], a[1])}; }

struct Program {
  const char* name;
  std::vector<Tensor> (*fn)(const std::vector<Tensor>&);
  // Argument shapes for a [rows, cols] row space.
  std::vector<Dims> (*shapes)(int64_t rows, int64_t cols);
};

const Program kPrograms[] = {
    {"gated", &gated,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}, {r, c}};
     }},
    {"max_norm", &max_norm,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}, {c}};
     }},
    {"scaled_softmax", &scaled_softmax,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}, {r, 1}};
     }},
    {"naive_softmax", &naive_softmax,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}};
     }},
    {"naive_layer_norm", &naive_layer_norm,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}, {c}, {c}};
     }},
    {"naive_rms_norm", &naive_rms_norm,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}, {c}};
     }},
    {"affine_activations", &affine_activations,
     [](int64_t r, int64_t c) {
       return std::vector<Dims>{{r, c}};
     }},
};

Graph optimized(const Program& program, const std::vector<Dims>& shapes, DType dtype) {
  std::vector<TensorMeta> metas;
  for (const Dims& s : shapes) metas.push_back({s, dtype});
  return optimize(capture_graph(program.fn, metas, Device::cpu()));
}

std::string metadata(const device::Executable& exe, const std::string& key) {
  for (const auto& [k, v] : exe.metadata) {
    if (k == key) return v;
  }
  return {};
}

bool has_fallback(const device::Executable& exe) {
  for (const auto& [k, v] : exe.metadata) {
    if (k.starts_with("compiled.row_group_fallback")) return true;
  }
  return false;
}

int count_fused_rows(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.kind == NodeKind::fused && node.fusion == FusionKind::rows;
  return n;
}

// Bytes the program's DMA moves to and from HBM, as the simulator counts them.
uint64_t hbm_bytes(const device::Executable& exe) {
  uint64_t bytes = 0;
  for (const auto& queue : exe.dma_queues) {
    for (const device::Instruction& in : queue) {
      const device::Traffic t = device::instruction_traffic(in);
      bytes += t.hbm_read + t.hbm_written;
    }
  }
  for (const auto& engine : exe.engines) {
    for (const device::Instruction& in : engine) {
      const device::Traffic t = device::instruction_traffic(in);
      EXPECT_EQ(t.hbm_read + t.hbm_written, 0u) << "an engine instruction touches HBM";
    }
  }
  return bytes;
}

bool has_scratch(const device::Executable& exe) {
  for (const IoBinding& b : io_bindings(exe)) {
    if (b.role == IoRole::scratch) return true;
  }
  return false;
}

struct Case {
  int64_t rows, cols;
  DType dtype;
};

class RowLoop : public ::testing::TestWithParam<Case> {};

TEST_P(RowLoop, MatchesEagerAsOneLoopWithoutScratch) {
  const Case c = GetParam();
  Generator g(31);
  for (const Program& program : kPrograms) {
    SCOPED_TRACE(program.name);
    const std::vector<Dims> shapes = program.shapes(c.rows, c.cols);
    const Graph graph = optimized(program, shapes, c.dtype);
    ASSERT_EQ(count_fused_rows(graph), 1) << dump(graph);
    const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "rows");
    EXPECT_EQ(metadata(exe, "compiled.row_loops"), "1");
    EXPECT_FALSE(has_fallback(exe));
    EXPECT_FALSE(has_scratch(exe)) << "intermediates went through HBM";

    std::vector<Tensor> args;
    for (const Dims& s : shapes)
      args.push_back(randn(s, TensorOptions(c.dtype, Device::cpu()), &g).to(kCore0));
    const Tensor expected = program.fn(args)[0];
    const Tensor actual = compile(program.fn)(args)[0];
    EXPECT_EQ(actual.dtype(), c.dtype);
    const double tol = c.dtype == DType::f32 ? 1e-4 : 3e-2;  // bf16: eager rounds every intermediate
    expect_close(actual, expected, tol, tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RowLoop,
                         ::testing::Values(Case{130, 300, DType::f32}, Case{1, 7, DType::f32},
                                           Case{257, 1024, DType::f32}, Case{130, 300, DType::bf16},
                                           Case{1, 7, DType::bf16}, Case{257, 1024, DType::bf16}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return std::to_string(param.param.rows) + "x" + std::to_string(param.param.cols) +
                                  "_" + std::string(dtype_name(param.param.dtype));
                         });

TEST(RowLoopTraffic, GatedSiluMovesItsInputsAndOutputOnce) {
  const int64_t rows = 257, cols = 1024;
  const device::Executable exe = lower(optimized(kPrograms[0], {{rows, cols}, {rows, cols}}, DType::f32),
                                       device::Spec::builtin("trn2"), "gated");
  const uint64_t tensor = static_cast<uint64_t>(rows * cols) * 4;
  EXPECT_EQ(hbm_bytes(exe), 3 * tensor);  // x, y in; the result out
}

TEST(RowLoopTraffic, CustomNormMovesItsInputsAndOutputOnce) {
  const int64_t rows = 300, cols = 512;
  const device::Spec spec = device::Spec::builtin("trn2");
  const device::Executable exe =
      lower(optimized(kPrograms[1], {{rows, cols}, {cols}}, DType::bf16), spec, "max_norm");
  const uint64_t tensor = static_cast<uint64_t>(rows * cols) * 2;
  // x in and the result out once; the weight row once, broadcast onto every partition by one DMA.
  EXPECT_EQ(hbm_bytes(exe), 2 * tensor + static_cast<uint64_t>(cols) * 2 * spec.partitions);
}

TEST(RowLoopTraffic, LongElementwiseRowsAreCutIntoChunks) {
  // 100000 f32 per row is more than a partition of SBUF for x, y and the result: the loop cuts the row.
  const int64_t rows = 3, cols = 100000;
  const Graph graph = optimized(kPrograms[0], {{rows, cols}, {rows, cols}}, DType::f32);
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "gated_long");
  EXPECT_EQ(metadata(exe, "compiled.row_loops"), "1");
  EXPECT_EQ(hbm_bytes(exe), 3 * static_cast<uint64_t>(rows * cols) * 4);
  Generator g(32);
  const std::vector<Tensor> args = {randn({rows, cols}, {}, &g).to(kCore0),
                                    randn({rows, cols}, {}, &g).to(kCore0)};
  expect_close(compile(&gated)(args)[0], gated(args)[0]);
}

TEST(RowLoopDeviceTime, NaiveSoftmaxAsFastAsTheBuiltIn) {
  // exp accumulates the row sum (no second Vector pass) and the division runs one tile later, so the
  // Vector engine does the same work as in the fused softmax kernel and does not wait for the Scalar one.
  Generator g(36);
  const std::vector<Tensor> args = {randn({4096, 2048}, {}, &g).to(kCore0)};
  auto compiled = compile(&naive_softmax);
  (void)compiled(args);  // compiles outside the measurement
  const std::vector<int64_t> builtin = executions_of([&] { (void)softmax(args[0], -1); });
  const std::vector<int64_t> fused = executions_of([&] { (void)compiled(args); });
  ASSERT_EQ(builtin.size(), 1u);
  ASSERT_EQ(fused.size(), 1u);
  RecordProperty("builtin_ns", std::to_string(builtin[0]));
  RecordProperty("row_loop_ns", std::to_string(fused[0]));
  // No slower: the loop's stage cuts are timed on the cost model, so its fill and drain match the kernel's.
  EXPECT_LE(fused[0], builtin[0]) << "row loop " << fused[0] << " ns, softmax " << builtin[0] << " ns";
}

// The user's RMSNorm and layer_norm, fused by the compiler from their own ops (no built-in substituted),
// take no more device time than the hand-written kernels on the same inputs.
TEST(RowLoopDeviceTime, NaiveNormalizationsAsFastAsTheBuiltIns) {
  Generator g(37);
  const std::vector<Tensor> args = {randn({4096, 2048}, {}, &g).to(kCore0), randn({2048}, {}, &g).to(kCore0),
                                    randn({2048}, {}, &g).to(kCore0)};
  auto rms = compile(&naive_rms_norm);
  auto ln = compile(&naive_layer_norm);
  (void)rms({args[0], args[1]});  // compile outside the measurement
  (void)ln(args);
  const std::vector<int64_t> rms_builtin = executions_of([&] { (void)rms_norm(args[0], args[1], 1e-6); });
  const std::vector<int64_t> rms_fused = executions_of([&] { (void)rms({args[0], args[1]}); });
  const std::vector<int64_t> ln_builtin = executions_of([&] { (void)layer_norm(args[0], args[1], args[2], 1e-5); });
  const std::vector<int64_t> ln_fused = executions_of([&] { (void)ln(args); });
  ASSERT_EQ(rms_builtin.size(), 1u);
  ASSERT_EQ(rms_fused.size(), 1u);
  ASSERT_EQ(ln_builtin.size(), 1u);
  ASSERT_EQ(ln_fused.size(), 1u);
  RecordProperty("rms_norm_builtin_ns", std::to_string(rms_builtin[0]));
  RecordProperty("rms_norm_row_loop_ns", std::to_string(rms_fused[0]));
  RecordProperty("layer_norm_builtin_ns", std::to_string(ln_builtin[0]));
  RecordProperty("layer_norm_row_loop_ns", std::to_string(ln_fused[0]));
  EXPECT_LE(rms_fused[0], rms_builtin[0]) << "row loop " << rms_fused[0] << " ns, rms_norm " << rms_builtin[0];
  // layer_norm: the row's mean and variance are one bn_stats pass (find_moments), the steps go to the
  // Vector, Scalar and GpSimd engines by the loop's placement and its stage cuts are timed on the cost
  // model (compiler/row_kernel.cpp), which finds the built-in's schedule in f32 and in bf16.
  EXPECT_LE(ln_fused[0], ln_builtin[0]) << "row loop " << ln_fused[0] << " ns, layer_norm " << ln_builtin[0];
  // bf16: the row loop keeps 16-bit rows in bf16, so the Vector engine runs at its 16-bit rate too.
  const Tensor x16 = args[0].to(DType::bf16), w16 = args[1].to(DType::bf16), b16 = args[2].to(DType::bf16);
  (void)rms({x16, w16});
  (void)ln({x16, w16, b16});
  const std::vector<int64_t> rms16_builtin = executions_of([&] { (void)rms_norm(x16, w16, 1e-6); });
  const std::vector<int64_t> rms16_fused = executions_of([&] { (void)rms({x16, w16}); });
  const std::vector<int64_t> ln16_builtin = executions_of([&] { (void)layer_norm(x16, w16, b16, 1e-5); });
  const std::vector<int64_t> ln16_fused = executions_of([&] { (void)ln({x16, w16, b16}); });
  ASSERT_EQ(rms16_fused.size(), 1u);
  ASSERT_EQ(ln16_fused.size(), 1u);
  EXPECT_LE(rms16_fused[0], rms16_builtin[0]) << "bf16 row loop " << rms16_fused[0] << " ns, rms_norm "
                                              << rms16_builtin[0];
  EXPECT_LE(ln16_fused[0], ln16_builtin[0]) << "bf16 row loop " << ln16_fused[0] << " ns, layer_norm "
                                            << ln16_builtin[0];
}

TEST(RowLoopSchedule, NaiveLayerNormTakesOneMomentsPassAndUsesGpSimd) {
  // mean(x) and mean((x - mean)^2) are one bn_stats pass per row tile (labelled with the user's mean), no
  // Scalar-engine square is left, and the placement puts binary steps on GpSimd.
  const int64_t rows = 4096, cols = 2048;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const device::Executable exe =
        lower(optimized(kPrograms[4], {{rows, cols}, {cols}, {cols}}, dtype), device::Spec::builtin("trn2"), "ln");
    int moments = 0, squares = 0;
    for (const device::Instruction& in : exe.stream(device::Engine::vector)) {
      if (in.opcode != device::Opcode::bn_stats) continue;
      ++moments;
      EXPECT_EQ(exe.source_ops[in.source_op], "aten::mean");
    }
    for (const device::Instruction& in : exe.stream(device::Engine::scalar))
      squares += in.opcode == device::Opcode::activate && in.act() == device::ActFunc::square;
    EXPECT_EQ(moments, rows / 128);
    EXPECT_EQ(squares, 0);
    EXPECT_FALSE(exe.stream(device::Engine::gpsimd).empty());
  }
}

TEST(RowLoopDeviceTime, FasterThanTheOpByOpKernels) {
  // The custom norm is six ops eagerly (mean, sub, abs, amax, add, div, mul), one loop compiled.
  Generator g(35);
  const std::vector<Tensor> args = {randn({1024, 1024}, {}, &g).to(kCore0), randn({1024}, {}, &g).to(kCore0)};
  auto compiled = compile(&max_norm);
  (void)compiled(args);  // compiles outside the measurement
  const std::vector<int64_t> eager = executions_of([&] { (void)max_norm(args); });
  const std::vector<int64_t> fused = executions_of([&] { (void)compiled(args); });
  ASSERT_EQ(fused.size(), 1u);
  ASSERT_GT(eager.size(), 1u);
  int64_t eager_total = 0;
  for (int64_t ns : eager) eager_total += ns;
  RecordProperty("eager_kernels_ns", std::to_string(eager_total));
  RecordProperty("row_loop_ns", std::to_string(fused[0]));
  EXPECT_LT(fused[0], eager_total) << "row loop " << fused[0] << " ns, " << eager.size() << " eager kernels "
                                   << eager_total << " ns";
}

TEST(RowLoopFallback, RowWideGroupWhoseRowsDoNotFitIsLoweredOpByOp) {
  // Rows of 16000 f32: the group's values need more than a partition of SBUF at once, while each
  // op's own kernel (softmax: input, work row and result) still fits.
  const int64_t rows = 2, cols = 16000;
  const Graph graph = optimized(kPrograms[2], {{rows, cols}, {rows, 1}}, DType::f32);
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "softmax_long");
  EXPECT_EQ(metadata(exe, "compiled.row_loops"), "0");
  EXPECT_THAT(metadata(exe, "compiled.row_group_fallback.0"), HasSubstr("rows of 16000 elements need"));
  EXPECT_TRUE(has_scratch(exe));
  Generator g(33);
  const std::vector<Tensor> args = {randn({rows, cols}, {}, &g).to(kCore0),
                                    randn({rows, 1}, {}, &g).to(kCore0)};
  expect_close(compile(&scaled_softmax)(args)[0], scaled_softmax(args)[0]);
}

// ESM-2's token dropout and extended attention mask (examples/models/esm2): an i32 mask per row scales
// the rows, and an i32 mask as a whole row becomes an additive one; only floating steps read them. The
// masked rows of negative x are -0 in both terms, a sign the loop's products must keep.
std::vector<Tensor> integer_masks(const std::vector<Tensor>& a) {
  return {a[0] * 0.88 / (1.0 - a[1]) * a[2] + (1.0 - a[3].to(DType::f32)) * -3.0e38};
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.nbytes()};
}

// `fn` over `cpu` (rows, then masks) is one row loop that moves nothing else through HBM, with
// the bits of the per-op kernels and of the CPU reference. Returns the loop's executable.
using RowFn = std::vector<Tensor> (*)(const std::vector<Tensor>&);
device::Executable expect_one_loop_with_op_by_op_bits(RowFn fn, const std::vector<Tensor>& cpu) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : cpu) metas.push_back({t.shape(), t.dtype()});
  const Graph graph = optimize(capture_graph(fn, metas, Device::cpu()));
  EXPECT_EQ(count_fused_rows(graph), 1) << dump(graph);
  if (count_fused_rows(graph) != 1) return {};
  device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "row_loop");
  EXPECT_EQ(metadata(exe, "compiled.row_loops"), "1");
  EXPECT_FALSE(has_fallback(exe)) << metadata(exe, "compiled.row_group_fallback.0");
  EXPECT_FALSE(has_scratch(exe)) << "intermediates went through HBM";
  std::vector<Tensor> args;
  for (const Tensor& t : cpu) args.push_back(t.to(kCore0));
  const Tensor actual = compile(fn)(args)[0];
  EXPECT_EQ(bytes_of(actual), bytes_of(fn(args)[0])) << "not the op-by-op kernels' bits";
  EXPECT_EQ(bytes_of(actual), bytes_of(fn(cpu)[0])) << "not the CPU reference's bits";
  return exe;
}

// A mask per row (every third row 0) and one per element (every seventh 1), as i32.
std::pair<Tensor, Tensor> masks_of(int64_t rows, int64_t cols) {
  std::vector<int32_t> row_mask, full_mask;
  for (int64_t r = 0; r < rows; ++r) row_mask.push_back(r % 3 != 0);
  for (int64_t i = 0; i < rows * cols; ++i) full_mask.push_back(static_cast<int32_t>(i % 7 == 0));
  return {from_vector(row_mask, {rows, 1}), from_vector(full_mask, {rows, cols})};
}

TEST(RowLoopIntegerInputs, GroupReadingI32MasksIsOneLoopWithTheOpByOpBits) {
  const int64_t rows = 130, cols = 300;
  Generator g(34);
  const auto [row_mask, full_mask] = masks_of(rows, cols);
  expect_one_loop_with_op_by_op_bits(&integer_masks,
                                     {randn({rows, cols}, {}, &g), rand({rows, 1}, {}, &g) * 0.5, row_mask, full_mask});
}

// Llama's causal mask (examples/models/llama: a bool mask cast to f32, 1 - it, times the dtype's lowest)
// and a bool mask per row scaling the rows: only floating steps read them. An engine reads a bool tile
// as 0 or 1, as the per-op kernels do, so the group is one loop with their bits.
std::vector<Tensor> bool_masks(const std::vector<Tensor>& a) {
  return {a[0] * a[1].to(DType::f32) + (1.0 - a[2].to(DType::f32)) * -3.0e38};
}

TEST(RowLoopIntegerInputs, GroupReadingBoolMasksIsOneLoopWithTheOpByOpBits) {
  const int64_t rows = 130, cols = 300;
  Generator g(35);
  const auto [row_mask, full_mask] = masks_of(rows, cols);
  expect_one_loop_with_op_by_op_bits(
      &bool_masks, {randn({rows, cols}, {}, &g), row_mask.to(DType::boolean), full_mask.to(DType::boolean)});
}

// ESM-2's token dropout (examples/models/esm2): masked_fill by a bool mask per row (the masked tokens),
// then the rows scaled; a where by a mask per element; the masked rows filled again with a value other
// than 0. Each select is a row step (kernels::emit_select: with one mask value per row, the mask is each
// row's scalar), so the group is one loop with the per-op kernels' bits; an infinite x in a masked place
// comes out as the value.
std::vector<Tensor> masked_fills(const std::vector<Tensor>& a) {
  const Tensor dropped = masked_fill(a[0], a[1], 0.0) * 0.88 / (1.0 - a[2]);
  return {masked_fill(where(a[3], a[0] * 2.0, dropped), a[1], -2.5)};
}

TEST(RowLoopIntegerInputs, MaskedFillByARowOrAnElementMaskIsOneLoopWithTheOpByOpBits) {
  const int64_t rows = 130, cols = 300;
  Generator g(36);
  const auto [row_mask, full_mask] = masks_of(rows, cols);
  const Tensor r = randn({rows, cols}, {}, &g).contiguous();
  std::vector<float> x(static_cast<const float*>(r.raw_data()), static_cast<const float*>(r.raw_data()) + rows * cols);
  x[0] = std::numeric_limits<float>::infinity();         // row 0: a masked token
  x[cols + 5] = -std::numeric_limits<float>::infinity();  // row 1: not masked, nor is its element 5
  // The rows whose row_mask is 0 (every third) are the masked tokens.
  expect_one_loop_with_op_by_op_bits(&masked_fills, {from_vector(x, {rows, cols}), eq(row_mask, 0.0),
                                                     rand({rows, 1}, {}, &g) * 0.5, full_mask.to(DType::boolean)});
}

// LlamaRMSNorm in bf16 (examples/models/llama): the row in f32, normalized, rounded back to bf16, then
// scaled by the weight; and the same without the weight, the rounding cast the result. The engines
// read bf16 as f32 and round only when they write, so neither cast is a pass of its own (the Vector
// engine's copies, two per row tile, were): x.to(f32) is x, and the normalization writes bf16.
std::vector<Tensor> llama_rms_norm(const std::vector<Tensor>& a) {
  const Tensor h = a[0].to(DType::f32);
  return {a[1] * (h * rsqrt(mean(pow(h, 2.0), {-1}, true) + 1e-5)).to(DType::bf16)};
}
std::vector<Tensor> llama_rms_norm_unweighted(const std::vector<Tensor>& a) {
  const Tensor h = a[0].to(DType::f32);
  return {(h * rsqrt(mean(pow(h, 2.0), {-1}, true) + 1e-5)).to(DType::bf16)};
}

TEST(RowLoopCasts, LlamaRmsNormInBf16CastsInNoPassOfItsOwnWithTheOpByOpBits) {
  const int64_t rows = 300, cols = 1024;
  // Rows of +-0.5, 1, 2 (in bf16 exactly): their sums of squares are exact in f32 in any order, so the
  // loop's accumulation order cannot move a bit, and what is compared is the casts' rounding.
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    const uint64_t h = (i * 2654435761u) >> 7;
    x[i] = (h % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, static_cast<int>((h >> 1) % 3) - 1);
  }
  Generator g(37);
  const std::vector<Tensor> cpu = {from_vector(x, {rows, cols}).to(DType::bf16),
                                   randn({cols}, TensorOptions(DType::bf16, Device::cpu()), &g)};
  for (const RowFn fn : {&llama_rms_norm, &llama_rms_norm_unweighted}) {
    const device::Executable exe = expect_one_loop_with_op_by_op_bits(fn, cpu);
    for (const device::Engine e : {device::Engine::vector, device::Engine::scalar, device::Engine::gpsimd}) {
      for (const device::Instruction& i : exe.stream(e)) {
        if (i.source_op != device::kNoSourceOp) {
          EXPECT_NE(exe.source_ops[i.source_op], "aten::_to_copy") << device::engine_name(e) << " casts in a pass";
        }
        EXPECT_NE(i.opcode, device::Opcode::tensor_copy) << device::engine_name(e) << " copies a row";
      }
    }
  }
}

// Where dropping a cast would let the loop's schedule fold the step before it into the activation
// after it (an immediate's add into the activation's bias, computed in f32), the cast stays: its
// rounding is part of the result. Narrowing: silu((x.to(f32) + 1).to(bf16)); widening: silu((x + 1).to(f32))
// with x + 1 a bf16 step.
std::vector<Tensor> silu_of_rounded_sum(const std::vector<Tensor>& a) {
  return {silu((a[0].to(DType::f32) + 1.0).to(DType::bf16))};
}
std::vector<Tensor> silu_of_widened_sum(const std::vector<Tensor>& a) { return {silu((a[0] + 1.0).to(DType::f32))}; }

TEST(RowLoopCasts, ACastStaysWhereDroppingItWouldFoldAwayItsRounding) {
  Generator g(38);
  const std::vector<Tensor> cpu = {randn({130, 300}, TensorOptions(DType::bf16, Device::cpu()), &g) * 4.0};
  for (const RowFn fn : {&silu_of_rounded_sum, &silu_of_widened_sum}) expect_one_loop_with_op_by_op_bits(fn, cpu);
}

}  // namespace
}  // namespace sightline::compiler

namespace sightline::compiler {
namespace {

// linear -> gelu -> * 0.5 -> + residual: one matmul epilogue group.
std::vector<Tensor> projected(const std::vector<Tensor>& a) {
  return {gelu(linear(a[0], a[1])) * 0.5 + a[2]};
}

TEST(MatmulEpilogue, AppliedOnResultTilesWithoutAnHbmRoundTrip) {
  Generator g(34);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const int64_t rows = 130, in = 300, out = 257;
    const std::vector<TensorMeta> metas = {{{rows, in}, dtype}, {{out, in}, dtype}, {{rows, out}, dtype}};
    const Graph graph = optimize(capture_graph(&projected, metas, Device::cpu()));
    const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "projected");
    EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << dump(graph);
    EXPECT_FALSE(has_scratch(exe)) << "the matmul result went through HBM";
    uint64_t written = 0;
    for (const auto& queue : exe.dma_queues) {
      for (const device::Instruction& i : queue) written += device::instruction_traffic(i).hbm_written;
    }
    EXPECT_EQ(written, static_cast<uint64_t>(rows * out) * dtype_size(dtype));  // only the result
    const TensorOptions options(dtype, Device::cpu());
    const std::vector<Tensor> args = {randn({rows, in}, options, &g).to(kCore0),
                                      (randn({out, in}, options, &g) * 0.05).to(kCore0),
                                      randn({rows, out}, options, &g).to(kCore0)};
    const double tol = dtype == DType::f32 ? 1e-4 : 3e-2;
    expect_close(compile(&projected)(args)[0], projected(args)[0], tol, tol);
  }
}

// Attention's scores: softmax(a @ b * scale) along the last dim.
std::vector<Tensor> scores_softmax(const std::vector<Tensor>& a) { return {softmax(matmul(a[0], a[1]) * 0.125, -1)}; }

TEST(MatmulEpilogue, SoftmaxOfWholeRowTilesRunsOnChip) {
  Generator g(38);
  const int64_t rows = 130, inner = 64, cols = 200;
  const std::vector<TensorMeta> metas = {{{rows, inner}, DType::f32}, {{inner, cols}, DType::f32}};
  const Graph graph = optimize(capture_graph(&scores_softmax, metas, Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "scores");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << dump(graph);
  EXPECT_FALSE(has_scratch(exe)) << "the scores went through HBM";
  const std::vector<Tensor> args = {randn({rows, inner}, {}, &g).to(kCore0), randn({inner, cols}, {}, &g).to(kCore0)};
  expect_close(compile(&scores_softmax)(args)[0], scores_softmax(args)[0]);
}

TEST(MatmulEpilogue, SoftmaxOfRowsLongerThanATileRunsAfterTheFusedScale) {
  // 3000 columns are more than one result tile of the matmul kernel holds: the matmul and its scale
  // stay one kernel, the softmax runs after it through HBM.
  Generator g(39);
  const int64_t rows = 64, inner = 32, cols = 3000;
  const std::vector<TensorMeta> metas = {{{rows, inner}, DType::f32}, {{inner, cols}, DType::f32}};
  const Graph graph = optimize(capture_graph(&scores_softmax, metas, Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "scores_long");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << dump(graph);
  EXPECT_TRUE(has_scratch(exe));
  const std::vector<Tensor> args = {randn({rows, inner}, {}, &g).to(kCore0), randn({inner, cols}, {}, &g).to(kCore0)};
  expect_close(compile(&scores_softmax)(args)[0], scores_softmax(args)[0]);
}

// Four epilogues: the scores' (scale, softmax) is part of the fused attention kernel, the other three
// (o_proj + residual, silu * up, down + residual) run on the linears' result tiles.
TEST(MatmulEpilogue, DecoderBlockFusesItsEpiloguesAndTheAttention) {
  const std::vector<TensorMeta> metas = testing::decoder_block_metas();
  const device::Executable exe = lower(optimize(capture_graph(&testing::decoder_block, metas, Device::cpu())),
                                       device::Spec::builtin("trn2"), "decoder");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "3");
  EXPECT_EQ(metadata(exe, "compiled.fused_attention"), "1");
}

}  // namespace
}  // namespace sightline::compiler
