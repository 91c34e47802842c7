// The rotary / scaling chain on a projection's head views fused into the projection's matmul epilogue
// (compiler/view_epilogue.h): one kernel per projection, every instruction labelled with the user's op,
// results against the cpu reference; a chain whose views do not map falls back op by op, with its reason.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "compiler/view_epilogue.h"
#include "neuron/neuron.h"
#include "device_runs.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

using testing::executions_of;
using testing::expect_close;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

const Device kCore0 = Device::parse("neuron:0");

// Rows rolled by one (cat of row slices): the pieces are other rows of the result than the places they
// take, which a partition cannot reach.
std::vector<Tensor> rolled_rows(const std::vector<Tensor>& a) {
  const Tensor y = linear(a[0], a[1]);
  const int64_t s = y.size(0);
  return {cat({y.slice(0, 1, s), y.slice(0, 0, 1)}, 0) * 2.0};
}

struct Case {
  const char* name;
  Fn fn;
  bool bias;
  int64_t batch, seq, model, heads, dh;
};

std::vector<Case> cases() {
  return {
      {"esm_q", &testing::esm_rotary_q, true, 1, 40, 64, 5, 24},
      {"esm_q_batch", &testing::esm_rotary_q, true, 2, 100, 96, 4, 24},
      {"llama_k", &testing::llama_rotary_k, false, 1, 40, 64, 4, 32},
      // q of 10 heads of 64: 640 columns, which the matmul kernel stores as panels of 512 and 128.
      {"llama_q_panels", &testing::llama_rotary_k, false, 2, 70, 64, 10, 64},
  };
}

std::vector<Tensor> args_of(const Case& c, DType dtype, Generator& g) {
  const int64_t n = c.heads * c.dh;
  std::vector<Tensor> a = {randn({c.batch, c.seq, c.model}, {}, &g), randn({n, c.model}, {}, &g) * 0.2};
  if (c.bias) a.push_back(randn({n}, {}, &g));
  a.push_back(randn({1, 1, c.seq, c.dh}, {}, &g));
  a.push_back(randn({1, 1, c.seq, c.dh}, {}, &g));
  for (Tensor& t : a) t = t.to(dtype);
  return a;
}

std::vector<TensorMeta> metas_of(const std::vector<Tensor>& args) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : args) metas.push_back({t.shape(), t.dtype()});
  return metas;
}

std::string metadata(const device::Executable& exe, const std::string& key) {
  for (const auto& [k, v] : exe.metadata) {
    if (k == key) return v;
  }
  return {};
}

TEST(RotaryEpilogue, IsOneKernelLabelledWithTheUsersOps) {
  Generator g(41);
  for (const Case& c : cases()) {
    const Graph graph = optimize(capture_graph(c.fn, metas_of(args_of(c, DType::f32, g)), Device::cpu()));
    const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), c.name);
    // The projection with its epilogue, then the copy of the returned [b, heads, s, dh] view of the
    // stored [b, s, heads * dh] result into the contiguous result (a model's attention reads the view).
    EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << c.name;
    EXPECT_EQ(metadata(exe, "compiled.kernels"), "2") << c.name;
    EXPECT_EQ(metadata(exe, "compiled.epilogue_fallback.0"), "") << c.name;
    // rotate_half's cat is read once, by the multiply with sin: no copy, the multiply runs on each of its
    // pieces where it lies (plan_view_epilogue), so no instruction is the cat's.
    const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
    EXPECT_EQ(ops, (std::set<std::string>{"aten::linear", "aten::mul", "aten::add", "aten::neg", "aten::contiguous"}))
        << c.name;
  }
}

TEST(RotaryEpilogue, MatchesTheCpuReference) {
  Generator g(42);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const Case& c : cases()) {
      const std::vector<Tensor> host = args_of(c, dtype, g);
      std::vector<Tensor> reference_args, device_args;
      for (const Tensor& t : host) {
        reference_args.push_back(t.to(DType::f32));
        device_args.push_back(t.to(kCore0));
      }
      const Tensor expected = c.fn(reference_args)[0];
      auto compiled = compile(c.fn);
      std::vector<Tensor> actual;
      EXPECT_EQ(executions_of([&] { actual = compiled(device_args); }).size(), 1u) << c.name;
      // f32: the same operations in the same order as the reference, the matmul's sum in another order.
      // bf16: each op of the chain rounds to bf16, as eager bf16 ops do; the reference computes in f32.
      const double tolerance = dtype == DType::f32 ? 1e-5 : 5e-2;
      expect_close(actual[0], expected, tolerance, tolerance);
    }
  }
}

TEST(RotaryEpilogue, RowsAViewMovesFallBackWithTheReason) {
  Generator g(43);
  const std::vector<Tensor> host = {randn({40, 32}, {}, &g), randn({48, 32}, {}, &g)};
  const Graph graph = optimize(capture_graph(Fn(&rolled_rows), metas_of(host), Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "rolled");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "0");
  EXPECT_NE(metadata(exe, "compiled.epilogue_fallback.0").find("aten::cat"), std::string::npos)
      << metadata(exe, "compiled.epilogue_fallback.0");
  const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
  EXPECT_TRUE(ops.contains("aten::cat"));
  auto compiled = compile(Fn(&rolled_rows));
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  expect_close(compiled(device_args)[0], rolled_rows(host)[0], 1e-5, 1e-5);
}

// The scaled q returned too: a value read outside the group can only be its root, so the epilogue
// stops at the scale and the rotary ops after it run op by op; both results as on the cpu.
TEST(RotaryEpilogue, AValueReadOutsideEndsTheGroup) {
  auto fn = [](const std::vector<Tensor>& a) {
    const Tensor &x = a[0], &cos = a[2], &sin = a[3];
    const int64_t b = x.size(0), s = x.size(1), dh = cos.size(-1), half = dh / 2;
    const Tensor q = linear(x, a[1]).view({b, s, -1, dh}).transpose(1, 2) * 0.5;
    return std::vector<Tensor>{q * cos + cat({-q.slice(-1, half, dh), q.slice(-1, 0, half)}, -1) * sin, q};
  };
  Generator g(44);
  const Case c{"scaled", Fn(fn), false, 1, 40, 64, 4, 32};
  const std::vector<Tensor> host = args_of(c, DType::f32, g);
  const Graph graph = optimize(capture_graph(c.fn, metas_of(host), Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), c.name);
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1");
  auto compiled = compile(c.fn);
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  const std::vector<Tensor> actual = compiled(device_args), expected = c.fn(host);
  ASSERT_EQ(actual.size(), 2u);
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i], 1e-5, 1e-5);
}

// A value of the group read twice by one op (the projection squared): a group the chain fusion does not
// make, resolved by the same plan (both operands and the result at the same positions of the tile).
// A cat stays a copy where its reader cannot run on its pieces in place: the last op (it writes the
// result tile, which a piece comes from at other positions: rotate_half(y) * sin returned as is), a cat
// read by two ops, and a product of two cats (the op runs on one cat's pieces). Each program keeps its
// cat's copies and computes what the cpu does.
TEST(RotaryEpilogue, CatsThatCannotBeReadInPlaceAreCopied) {
  const auto rotated = [](const Tensor& y) {
    const int64_t h = y.size(-1) / 2;
    return cat({-y.slice(-1, h, 2 * h), y.slice(-1, 0, h)}, -1);
  };
  const std::vector<Fn> fns = {
      [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{rotated(linear(a[0], a[1])) * a[2]}; },
      [&](const std::vector<Tensor>& a) {
        const Tensor r = rotated(linear(a[0], a[1]));
        return std::vector<Tensor>{r * a[2] + r};
      },
      [&](const std::vector<Tensor>& a) {
        const Tensor y = linear(a[0], a[1]);
        const int64_t h = y.size(-1) / 2;
        return std::vector<Tensor>{rotated(y) * cat({y.slice(-1, h, 2 * h), y.slice(-1, 0, h)}, -1) + y};
      },
  };
  Generator g(46);
  for (size_t f = 0; f < fns.size(); ++f) {
    const std::vector<Tensor> host = {randn({2, 30, 32}, {}, &g), randn({48, 32}, {}, &g), randn({30, 48}, {}, &g)};
    const Graph graph = optimize(capture_graph(fns[f], metas_of(host), Device::cpu()));
    const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "rotated");
    EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1") << f;
    EXPECT_EQ(metadata(exe, "compiled.epilogue_fallback.0"), "") << f;
    const std::set<std::string> ops(exe.source_ops.begin(), exe.source_ops.end());
    EXPECT_TRUE(ops.contains("aten::cat")) << f;
    auto compiled = compile(fns[f]);
    std::vector<Tensor> device_args;
    for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
    expect_close(compiled(device_args)[0], fns[f](host)[0], 1e-5, 1e-5);
  }
}

TEST(RotaryEpilogue, AValueReadTwiceByOneOp) {
  auto fn = [](const std::vector<Tensor>& a) {
    const Tensor y = linear(a[0], a[1]);
    return std::vector<Tensor>{y * y};
  };
  Generator g(45);
  const std::vector<Tensor> host = {randn({2, 30, 32}, {}, &g), randn({48, 32}, {}, &g)};
  const Graph graph = optimize(capture_graph(Fn(fn), metas_of(host), Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "square");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1");
  EXPECT_EQ(metadata(exe, "compiled.kernels"), "1");
  auto compiled = compile(Fn(fn));
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  expect_close(compiled(device_args)[0], fn(host)[0], 1e-5, 1e-5);
}

// Llama's q and k projections of one layer rotated by the same cos and sin tables, 128 tokens (one row
// tile): q's 1024 f32 columns come as two result tiles, k's 256 as one. Every tile reads the same rows
// of the tables, so each table is loaded once into SBUF for the whole program (view_epilogue_group's
// resident operands) and both kernels read it there: the program reads each table's bytes once. Both
// results as on the cpu.
TEST(RotaryEpilogue, TablesEveryTileReadsAlikeLoadOnceForTheProgram) {
  auto fn = [](const std::vector<Tensor>& a) {
    const Tensor &x = a[0], &cos = a[3], &sin = a[4];
    return std::vector<Tensor>{testing::llama_rotary_k({x, a[1], cos, sin})[0],
                               testing::llama_rotary_k({x, a[2], cos, sin})[0]};
  };
  Generator g(46);
  const int64_t s = 128, model = 256, dh = 64;
  const std::vector<Tensor> host = {randn({1, s, model}, {}, &g), randn({16 * dh, model}, {}, &g) * 0.1,
                                    randn({4 * dh, model}, {}, &g) * 0.1, randn({1, 1, s, dh}, {}, &g),
                                    randn({1, 1, s, dh}, {}, &g)};
  const Graph graph = optimize(capture_graph(Fn(fn), metas_of(host), Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), "q_and_k");
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "2");
  uint64_t cos_bytes = 0, sin_bytes = 0;
  for (const auto& queue : exe.dma_queues) {
    for (const device::Instruction& in : queue) {
      if (in.src0.memory != device::Memory::hbm) continue;
      if (exe.io[in.src0.tensor].name == "arg3") cos_bytes += in.src0.bytes();
      if (exe.io[in.src0.tensor].name == "arg4") sin_bytes += in.src0.bytes();
    }
  }
  EXPECT_EQ(cos_bytes, static_cast<uint64_t>(s * dh * 4));
  EXPECT_EQ(sin_bytes, static_cast<uint64_t>(s * dh * 4));
  auto compiled = compile(Fn(fn));
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  const std::vector<Tensor> actual = compiled(device_args), expected = fn(host);
  ASSERT_EQ(actual.size(), 2u);
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i], 1e-5, 1e-5);
}

// ESM-2 t12's scaled and rotated q at batch 4 (512 rows, 20 heads of 24): on the Vector engine alone a
// result tile's eight steps (the evacuation, the scale, the two halves' copies, two products and the
// sum) outlast its matmuls. The epilogue's schedule (engine_balance.h) moves some of them to GpSimd,
// where they carry the user's ops; the result as on the cpu.
TEST(RotaryEpilogue, ManyTilesShareTheirStepsWithGpSimd) {
  Generator g(47);
  const Case c{"esm_q_batch4", &testing::esm_rotary_q, true, 4, 128, 480, 20, 24};
  const std::vector<Tensor> host = args_of(c, DType::f32, g);
  const Graph graph = optimize(capture_graph(c.fn, metas_of(host), Device::cpu()));
  const device::Executable exe = lower(graph, device::Spec::builtin("trn2"), c.name);
  EXPECT_EQ(metadata(exe, "compiled.fused_epilogues"), "1");
  std::set<std::string> on_gpsimd;
  for (const device::Instruction& in : exe.engines[static_cast<size_t>(device::Engine::gpsimd)]) {
    if (in.source_op < exe.source_ops.size()) on_gpsimd.insert(exe.source_ops[in.source_op]);
  }
  // (GpSimd also builds the linear's bias rows, as without the epilogue.)
  EXPECT_TRUE(on_gpsimd.contains("aten::mul") || on_gpsimd.contains("aten::add") || on_gpsimd.contains("aten::cat"));
  EXPECT_FALSE(on_gpsimd.contains("aten::neg"));  // an activation: the Scalar engine's
  auto compiled = compile(c.fn);
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  expect_close(compiled(device_args)[0], c.fn(host)[0], 1e-5, 1e-5);
}

// Llama's q, k and v as the user writes them: the projections, then the rotary embedding of q and k.
// The fusion puts each rotated projection where its last op is, after v's plain linear; the lowering
// emits both before v (emission_order), so that the rotary steps of k's last tiles overlap v's matmuls.
// The graph is otherwise the same, and the results are as on the cpu.
TEST(RotaryEpilogue, RotatedProjectionsAreEmittedBeforeAPlainOneAheadOfThem) {
  auto fn = [](const std::vector<Tensor>& a) {
    const Tensor &x = a[0], &cos = a[4], &sin = a[5];
    const int64_t b = x.size(0), s = x.size(1), dh = cos.size(-1), half = dh / 2;
    const Tensor q = linear(x, a[1]).view({b, s, -1, dh}).transpose(1, 2);
    const Tensor k = linear(x, a[2]).view({b, s, -1, dh}).transpose(1, 2);
    const Tensor v = linear(x, a[3]);
    auto rotate = [&](const Tensor& t) {
      return t * cos + cat({-t.slice(-1, half, dh), t.slice(-1, 0, half)}, -1) * sin;
    };
    return std::vector<Tensor>{rotate(q), rotate(k), v};
  };
  Generator g(48);
  const int64_t s = 128, model = 256, dh = 64;
  const std::vector<Tensor> host = {randn({1, s, model}, {}, &g), randn({4 * dh, model}, {}, &g) * 0.1,
                                    randn({4 * dh, model}, {}, &g) * 0.1, randn({4 * dh, model}, {}, &g) * 0.1,
                                    randn({1, 1, s, dh}, {}, &g), randn({1, 1, s, dh}, {}, &g)};
  const Graph graph = optimize(capture_graph(Fn(fn), metas_of(host), Device::cpu()));
  auto projections = [](const Graph& gr) {
    std::vector<std::string> kinds;  // "rotated" or "plain", in node order
    for (const Node& n : gr.nodes) {
      if (n.kind == NodeKind::fused && n.fusion == FusionKind::matmul_epilogue) kinds.push_back("rotated");
      if (n.kind == NodeKind::op && n.op == OpId::linear) kinds.push_back("plain");
    }
    return kinds;
  };
  ASSERT_EQ(projections(graph), (std::vector<std::string>{"plain", "rotated", "rotated"}));
  const Graph ordered = emission_order(graph);
  verify(ordered, "emission_order");
  EXPECT_EQ(projections(ordered), (std::vector<std::string>{"rotated", "rotated", "plain"}));
  EXPECT_EQ(ordered.nodes.size(), graph.nodes.size());
  // Nothing to move: the same graph.
  const Graph again = emission_order(ordered);
  EXPECT_EQ(projections(again), projections(ordered));
  auto compiled = compile(Fn(fn));
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  const std::vector<Tensor> actual = compiled(device_args), expected = fn(host);
  ASSERT_EQ(actual.size(), 3u);
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i], 1e-5, 1e-5);
}

TEST(RotaryEpilogue, ColumnWindowsCutPatternsAtTheirBlocks) {
  // Heads of 64 split at their halves: a window of whole heads keeps every head's half.
  const RowPattern half{32, {{10, 64}, {32, 1}}};
  int64_t first = -1;
  const std::optional<RowPattern> panel = restrict_to_columns(half, 640, 512, 128, &first);
  ASSERT_TRUE(panel);
  EXPECT_EQ(first, 8);
  EXPECT_EQ(panel->offset, 32);
  EXPECT_EQ(panel->dims[0].size, 2u);
  EXPECT_EQ(panel->dims[1].size, 32u);
  // A window that cuts a head does not map.
  EXPECT_FALSE(restrict_to_columns(half, 640, 0, 96));
  // The whole row is the pattern itself.
  EXPECT_EQ(restrict_to_columns(half, 640, 0, 640)->dims[0].size, 10u);
}

}  // namespace
}  // namespace sightline::compiler
