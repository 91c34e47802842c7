// CompileOptions::autocast = matmul_bf16: which dtypes the optimized graph holds, accuracy against
// the f32 reference by a derived bound, the device against the CPU, the cache key, modeled device time
// and the source ops the instructions carry.
#include <unistd.h>

#include <cmath>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "device_runs.h"
#include "neuron/neuron.h"
#include "programs.h"

namespace sightline {
namespace {

using compiler::Graph;
using compiler::Node;
using compiler::NodeKind;
using ::testing::HasSubstr;

const Device kCore0 = Device::parse("neuron:0");

// bf16 keeps 8 significant bits: round to nearest is off by at most u = 2^-8 relative; f32 by 2^-24.
constexpr double kBf16Unit = 1.0 / 256.0;
constexpr double kF32Unit = 1.0 / (1 << 24);

Graph decoder_graph(Autocast autocast) {
  const std::vector<TensorMeta> metas = compiler::testing::decoder_block_metas();
  return compiler::optimize(compiler::capture_graph(&compiler::testing::decoder_block, metas, Device::cpu()), {},
                            CompileOptions{.autocast = autocast});
}

// Calls f(node, graph) for every node of `graph` and of the fused bodies in it.
template <typename F>
void for_each_node(const Graph& graph, F&& f) {
  for (const Node& n : graph.nodes) {
    f(n, graph);
    if (n.kind == NodeKind::fused) for_each_node(*n.body, f);
  }
}

TEST(Autocast, MatmulsReadBf16AndEverythingElseStaysF32) {
  const Graph g = decoder_graph(Autocast::matmul_bf16);
  int matmuls = 0, f32_results = 0, casts_to_bf16 = 0, widenings = 0;
  for_each_node(g, [&](const Node& n, const Graph& owner) {
    if (n.kind != NodeKind::op) return;
    const bool matmul = n.op == OpId::matmul || n.op == OpId::linear;
    const bool narrowing = n.op == OpId::to_copy && n.meta.dtype == DType::bf16;
    const bool view_of_bf16 =
        (op_info(n.op).is_view || n.op == OpId::contiguous) && n.meta.dtype == DType::bf16;
    if (matmul) {
      ++matmuls;
      for (int v : n.inputs) {
        if (v != compiler::kNoValue) {
          EXPECT_EQ(owner.nodes[static_cast<size_t>(v)].meta.dtype, DType::bf16);
        }
      }
      if (n.meta.dtype == DType::f32) {
        ++f32_results;
        EXPECT_EQ(n.attrs.out_dtype, DType::f32);
      } else {
        EXPECT_EQ(n.meta.dtype, DType::bf16);
      }
    } else if (narrowing) {
      ++casts_to_bf16;
    } else if (!view_of_bf16) {
      if (n.op == OpId::to_copy) ++widenings;
      EXPECT_EQ(n.meta.dtype, DType::f32) << op_name(n.op) << " left f32";
    }
  });
  EXPECT_EQ(matmuls, 9);  // q, k, v, scores, attention @ v, output projection, gate, up, down
  // Casts: the normalized activation shared by q/k/v and its three weights, the softmax, the output
  // projection's weight, the one shared by gate/up and their weights, the gated product and w_down. The
  // scores read q and k, attention @ v reads v, and the output projection reads the attention, all as
  // views of bf16 matmul results, without a cast.
  EXPECT_EQ(casts_to_bf16, 4 + 1 + 1 + 3 + 2);
  // The scores, the output projection, gate, up and down write their f32 sums (out_dtype f32) for the
  // f32 ops after them; q, k, v and attention @ v, read only by matmuls, write bf16. No cast widens.
  EXPECT_EQ(f32_results, 5);
  EXPECT_EQ(widenings, 0);
  for (int v : g.outputs) EXPECT_EQ(g.nodes[static_cast<size_t>(v)].meta.dtype, DType::f32);

  for_each_node(decoder_graph(Autocast::none), [](const Node& n, const Graph&) {
    EXPECT_EQ(n.meta.dtype, DType::f32);
  });
}

TEST(Autocast, NamesParseAndBadNamesSayWhatIsAccepted) {
  EXPECT_EQ(autocast_parse("matmul_bf16"), Autocast::matmul_bf16);
  EXPECT_EQ(autocast_parse("bf16"), Autocast::matmul_bf16);
  EXPECT_EQ(autocast_parse(autocast_name(Autocast::none)), Autocast::none);
  try {
    autocast_parse("fp8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown autocast 'fp8'; accepted: none, matmul_bf16"));
  }
}

// Per element, |y_autocast - y| <= (3u + 4u^2 + 3 K e) (|A| |B|)_ij with u the bf16 and e the f32 unit
// roundoff: the operands' rounding moves each product by at most (2u + u^2)|a b|, both sums accumulate in
// f32 (at most K e sum|a b| each, the standard bound), and a bf16 result's rounding adds u of a value
// at most (1 + 2u + u^2)(1 + K e) sum|a b| (an f32 result, OpAttrs::out_dtype, does without it). The 1% on
// top covers |A| |B| itself being an f32 sum.
void expect_within_matmul_bound(const Tensor& actual, const Tensor& reference, const Tensor& a, const Tensor& b,
                                int64_t k) {
  const double u = kBf16Unit, ke = static_cast<double>(k) * kF32Unit;
  const double factor = (3 * u + 4 * u * u + 3 * ke) * 1.01;
  const Tensor magnitude = matmul(abs(a), abs(b)).contiguous();
  const Tensor y = actual.to(Device::cpu()).contiguous(), r = reference.contiguous();
  const float *py = y.data<float>(), *pr = r.data<float>(), *pm = magnitude.data<float>();
  double worst = 0, err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double err = std::fabs(static_cast<double>(py[i]) - pr[i]);
    ASSERT_LE(err, factor * pm[i]) << "element " << i;
    worst = std::max(worst, err / (factor * pm[i]));
    err2 += err * err;
    ref2 += static_cast<double>(pr[i]) * pr[i];
  }
  const double relative = std::sqrt(err2 / ref2);
  // bf16 really ran (f32 would be ~1e-7), and well inside the per-element bound's 3u.
  EXPECT_GT(relative, 1e-4);
  EXPECT_LT(relative, 3 * u);
  fmt::print("autocast matmul K={}: relative error {:.3g} (Frobenius), worst element at {:.2f} of its bound\n", k,
             relative, worst);
}

TEST(Autocast, CpuMatmulIsWithinTheBf16OperandBound) {
  Generator g(41);
  const int64_t k = 256;
  const Tensor a = randn({64, k}, {}, &g), b = randn({k, 48}, {}, &g);
  auto fn = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
  const CompiledFunction compiled = compile(fn, CompileOptions{.autocast = Autocast::matmul_bf16});
  const Tensor actual = compiled(a, b);
  EXPECT_EQ(actual.dtype(), DType::f32);
  expect_within_matmul_bound(actual, matmul(a, b), a, b, k);
}

TEST(Autocast, DeviceMatmulIsWithinTheBf16OperandBound) {
  Generator g(42);
  const int64_t k = 384;  // three 128-row K tiles accumulated in PSUM
  const Tensor a = randn({130, k}, {}, &g), b = randn({k, 200}, {}, &g);
  auto fn = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
  const CompiledFunction compiled = compile(fn, CompileOptions{.autocast = Autocast::matmul_bf16});
  const Tensor actual = compiled(a.to(kCore0), b.to(kCore0));
  EXPECT_EQ(compiled.stats().device_calls, 1);
  EXPECT_EQ(actual.dtype(), DType::f32);
  expect_within_matmul_bound(actual, matmul(a, b), a, b, k);
}

// The whole decoder block: the autocast program against the f32 eager reference, and the device
// against the CPU running the same autocast graph.
TEST(Autocast, DecoderBlockOnDeviceMatchesTheCpuAndTheF32Reference) {
  Generator g(43);
  compiler::testing::DecoderDims dims;
  dims.seq = 20;
  const std::vector<Tensor> host = compiler::testing::decoder_args(dims, g);
  std::vector<Tensor> device_args;
  for (const Tensor& t : host) device_args.push_back(t.to(kCore0));
  const CompileOptions options{.autocast = Autocast::matmul_bf16};
  const CompiledFunction on_cpu = compile(&compiler::testing::decoder_block, options);
  const CompiledFunction on_device = compile(&compiler::testing::decoder_block, options);
  const Tensor cpu = on_cpu(host)[0];
  const Tensor dev = on_device(device_args)[0].to(Device::cpu());
  EXPECT_EQ(on_device.stats().device_calls, 1);
  const Tensor reference = compiler::testing::decoder_block(host)[0];
  // Both backends accumulate each K tile in f32 but in their own order, so a sum near a bf16 rounding
  // boundary may round to the neighbouring bf16 value (2u apart) on one of them; everything after the
  // last matmul is f32. 4u relative covers one such step and its propagation through the residual.
  compiler::testing::expect_close(dev, cpu, 4 * kBf16Unit, 4 * kBf16Unit);
  const auto relative = [&](const Tensor& t) {
    return std::sqrt(sum((t - reference) * (t - reference)).item() / sum(reference * reference).item());
  };
  // Each output sums the residual x (exact) and two projections whose inputs went through up to four
  // bf16 matmuls, each within 3u of its |A||B|; 12u bounds the chain (softmax and RMSNorm only rescale).
  EXPECT_LT(relative(dev), 12 * kBf16Unit);
  EXPECT_GT(relative(dev), 1e-5);
  fmt::print("decoder block, autocast vs f32: relative error {:.3g} on the device, {:.3g} on the CPU\n",
             relative(dev), relative(cpu));
}

TEST(Autocast, IsPartOfTheExecutableCacheKey) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("sightline_autocast_cache_{}", ::getpid());
  fs::remove_all(dir);
  Generator g(44);
  const Tensor a = randn({32, 64}, {}, &g).to(kCore0), b = randn({64, 16}, {}, &g).to(kCore0);
  auto fn = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
  const CompiledFunction plain = compile(fn, CompileOptions{.cache_dir = dir.string()});
  plain(a, b);
  const CompiledFunction cast = compile(fn, CompileOptions{.cache_dir = dir.string(), .autocast = Autocast::matmul_bf16});
  cast(a, b);
  EXPECT_EQ(cast.stats().disk_cache_hits, 0);  // the f32 program's entry is not reused
  EXPECT_EQ(cast.stats().lowerings, 1);
  const CompiledFunction again = compile(fn, CompileOptions{.cache_dir = dir.string(), .autocast = Autocast::matmul_bf16});
  again(a, b);
  EXPECT_EQ(again.stats().disk_cache_hits, 1);
  fs::remove_all(dir);
}

TEST(Autocast, DecoderBlockDeviceTimeDrops) {
  Generator g(45);
  compiler::testing::DecoderDims dims;
  // Enough tokens per weight byte, and work per token, for the Tensor engine to matter: the weights are
  // arguments, cast on every call, so at few tokens the casts' HBM traffic outweighs the bf16 matmul
  // rate. At d_model 256 the f32 program now overlaps its epilogues with its matmuls well enough
  // (PreloadedOrder) to be as fast: 175.1 us against 181.1 us.
  dims.batch = 4;
  dims.seq = 256;
  dims.model = 512;
  dims.hidden = 1024;
  std::vector<Tensor> args;
  for (const Tensor& t : compiler::testing::decoder_args(dims, g)) args.push_back(t.to(kCore0));
  int64_t ns[2] = {};
  for (const Autocast autocast : {Autocast::none, Autocast::matmul_bf16}) {
    const CompiledFunction fn = compile(&compiler::testing::decoder_block, CompileOptions{.autocast = autocast});
    fn(args);  // load
    const std::vector<int64_t> runs = compiler::testing::executions_of([&] { fn(args); });
    ASSERT_EQ(runs.size(), 1u);
    ns[autocast == Autocast::none ? 0 : 1] = runs[0];
  }
  fmt::print("decoder block [4, 256, 512] device time: f32 {} ns, autocast matmul_bf16 {} ns ({:.2f}x)\n", ns[0],
             ns[1], static_cast<double>(ns[0]) / static_cast<double>(ns[1]));
  EXPECT_LT(ns[1], ns[0]);
}

// The instructions keep the user's ops: the Tensor-engine work is aten::linear / aten::matmul, and the
// only source op autocast adds is the casts' aten::_to_copy.
TEST(Autocast, InstructionsCarryTheUsersOps) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const device::Executable plain = compiler::lower(decoder_graph(Autocast::none), spec, "decoder");
  const device::Executable cast = compiler::lower(decoder_graph(Autocast::matmul_bf16), spec, "decoder");
  const std::set<std::string> before(plain.source_ops.begin(), plain.source_ops.end());
  std::set<std::string> after(cast.source_ops.begin(), cast.source_ops.end());
  for (const std::string& op : before) EXPECT_TRUE(after.contains(op)) << op;
  after.erase("aten::_to_copy");
  for (const std::string& op : after) EXPECT_TRUE(before.contains(op)) << op;
  int matmul_instructions = 0;
  for (const auto& stream : cast.engines) {
    for (const device::Instruction& in : stream) {
      if (in.opcode != device::Opcode::matmul) continue;
      ++matmul_instructions;
      const std::string& op = cast.source_ops.at(in.source_op);
      EXPECT_TRUE(op == "aten::linear" || op == "aten::matmul") << op;
    }
  }
  EXPECT_GT(matmul_instructions, 0);
}

}  // namespace
}  // namespace sightline
