// Compiled functions on a neuron core: eager results, one device execution per call, the fused
// kernel's device time, one compiled-region row in the profiler.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>

#include <fmt/format.h>

#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/profiler/profile.h"
#include "device_runs.h"
#include "programs.h"

namespace sightline {
namespace {

using compiler::testing::executions_of;
using compiler::testing::expect_close;

const Device kCore0 = Device::parse("neuron:0");

std::vector<Tensor> to_device(const std::vector<Tensor>& host) {
  std::vector<Tensor> out;
  for (const Tensor& t : host) out.push_back(t.to(kCore0));
  return out;
}

TEST(CompiledOnNeuron, RmsNormMatchesEagerInOneExecutionPerCall) {
  auto compiled = compile(&compiler::testing::naive_rms_norm);
  Generator g(21);
  for (const Dims& shape : {Dims{4, 64}, Dims{130, 200}, Dims{256, 512}}) {
    const Tensor x = randn(shape, {}, &g).to(kCore0), w = rand({shape.back()}, {}, &g).to(kCore0);
    const Tensor expected = compiler::testing::naive_rms_norm(x, w);
    Tensor actual;
    EXPECT_EQ(executions_of([&] { actual = compiled(x, w); }).size(), 1u) << shape.to_string();
    EXPECT_EQ(actual.device(), kCore0);
    expect_close(actual, expected);
  }
  const CompileStats stats = compiled.stats();
  EXPECT_EQ(stats.device_calls, 3);
  EXPECT_EQ(stats.lowerings, 3);
}

TEST(CompiledOnNeuron, DecoderBlockMatchesEagerInOneExecutionPerCall) {
  auto compiled = compile(&compiler::testing::decoder_block);
  Generator g(22);
  for (const int64_t seq : {5, 20}) {
    compiler::testing::DecoderDims dims;
    dims.seq = seq;
    const std::vector<Tensor> args = to_device(compiler::testing::decoder_args(dims, g));
    const Tensor expected = compiler::testing::decoder_block(args)[0];
    std::vector<Tensor> actual;
    for (int call = 0; call < 2; ++call) {
      EXPECT_EQ(executions_of([&] { actual = compiled(args); }).size(), 1u) << "seq " << seq;
      expect_close(actual[0], expected, 1e-4, 1e-3);
    }
  }
  EXPECT_EQ(compiled.stats().device_calls, 4);
}

// Padding for [2, heads, s, d] attention operands: the last quarter of the keys of batch 1 masked out
// with a large negative value, [2, 1, 1, s].
Tensor padding_mask(int64_t s, DType dtype) {
  std::vector<float> mask(static_cast<size_t>(2 * s), 0.0f);
  for (int64_t j = s - s / 4; j < s; ++j) mask[static_cast<size_t>(s + j)] = -1e9f;
  return from_vector(mask, {2, 1, 1, s}).to(dtype);
}

// `compiled` on `host` (moved to the device) runs as one execution, and each output matches `fn` on the
// cpu with the operands in f32, within the attention tests' tolerance for `dtype` (below).
void expect_one_execution_matching(const TensorListFunction& fn, const CompiledFunction& compiled,
                                   const std::vector<Tensor>& host, DType dtype) {
  std::vector<Tensor> reference_args;
  for (const Tensor& t : host) reference_args.push_back(t.to(DType::f32));
  const std::vector<Tensor> expected = fn(reference_args);
  std::vector<Tensor> actual;
  EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
  ASSERT_EQ(actual.size(), expected.size());
  const double tolerance = dtype == DType::f32 ? 1e-5 : 5e-2;
  for (size_t k = 0; k < actual.size(); ++k) {
    SCOPED_TRACE(fmt::format("output {}", k));
    expect_close(actual[k], expected[k], tolerance, tolerance);
  }
}

// softmax(q k^T * scale + mask) v compiles to one attention kernel (tests/compiler/lower_test.cpp);
// against the same function on the cpu reference. f32: the kernel sums q k^T and P v in f32 as the
// reference does, in another order, so it agrees to f32 rounding (1e-5 on outputs of order 1). bf16:
// the kernel keeps the scores and the softmax in f32 and rounds P once to bf16 (the reference rounds
// the scores after the matmul, the scale and the mask too: up to 3 bf16 roundings of |score| <~ 4, so
// exp(score) moves by up to ~3 * 2^-8 * 4 = 5%, averaged over the keys), hence 5e-2.
TEST(CompiledOnNeuron, FusedAttentionMatchesTheCpuReference) {
  auto attention = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{matmul(softmax(matmul(in[0], in[1].transpose(-2, -1)) * 0.2 + in[3], -1), in[2])};
  };
  auto compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(attention));
  Generator g(26);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const int64_t s : {40, 200}) {
      std::vector<Tensor> host;
      for (int i = 0; i < 3; ++i) host.push_back(randn({2, 3, s, 24}, {}, &g).to(dtype));
      host.push_back(padding_mask(s, dtype));
      std::vector<Tensor> reference_args;
      for (const Tensor& t : host) reference_args.push_back(t.to(DType::f32));
      const Tensor expected = attention(reference_args)[0];
      std::vector<Tensor> actual;
      EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
      const double tolerance = dtype == DType::f32 ? 1e-5 : 5e-2;
      expect_close(actual[0], expected, tolerance, tolerance);
    }
  }
}

// The attention's result permuted to [b, s, heads, dh] and copied contiguous, as the models' context
// (tests/compiler/lower_test.cpp: the kernel stores into the copy, which is no kernel of its own), and
// a result read twice (the copy runs as its own kernel), against the cpu reference; the tolerances of
// the test above.
TEST(CompiledOnNeuron, AttentionStoredIntoThePermutedCopyMatchesTheCpuReference) {
  for (const bool twice : {false, true}) {
    auto attention = [twice](const std::vector<Tensor>& in) {
      const Tensor y = matmul(softmax(matmul(in[0], in[1].transpose(-2, -1)) * 0.2 + in[3], -1), in[2]);
      const int64_t b = y.shape()[0], s = y.shape()[2];
      const Tensor context = y.permute({0, 2, 1, 3}).contiguous().view({b, s, -1});
      return twice ? std::vector<Tensor>{context, y} : std::vector<Tensor>{context};
    };
    auto compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(attention));
    Generator g(28);
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const int64_t s : {40, 200}) {
        std::vector<Tensor> host;
        for (int i = 0; i < 3; ++i) host.push_back(randn({2, 3, s, 24}, {}, &g).to(dtype));
        host.push_back(padding_mask(s, dtype));
        expect_one_execution_matching(attention, compiled, host, dtype);
      }
    }
  }
}

// Grouped-query attention, k and v repeated to the query heads (HF Llama's repeat_kv): the kernel reads
// the key/value heads in place of the copies (tests/compiler/lower_test.cpp); with the repeated k also
// returned (its copy made), and with a head dim of 160, which the kernel does not take (the copies made
// after all, the ops run one by one). Against the cpu reference, with FusedAttentionMatchesTheCpuReference's
// tolerances.
TEST(CompiledOnNeuron, GroupedQueryAttentionMatchesTheCpuReference) {
  Generator g(29);
  for (const bool also_return_k : {false, true}) {
    for (const auto& [dtype, d] : {std::pair<DType, int64_t>{DType::f32, 24}, {DType::bf16, 24}, {DType::f32, 160}}) {
      auto fn = [also_return_k](const std::vector<Tensor>& in) { return compiler::testing::grouped_attention(in, also_return_k); };
      auto compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(fn));
      const int64_t s = 40;
      const std::vector<TensorMeta> metas = compiler::testing::grouped_attention_metas(8, 2, s, d, dtype);
      std::vector<Tensor> host;
      for (size_t i = 0; i < 3; ++i) host.push_back(randn(metas[i].shape, {}, &g).to(dtype));
      host.push_back(padding_mask(s, dtype));
      SCOPED_TRACE(fmt::format("{} d {}{}", dtype_name(dtype), d, also_return_k ? ", k returned" : ""));
      expect_one_execution_matching(fn, compiled, host, dtype);
    }
  }
}

// Llama's bf16 attention, softmax(scores.to(f32)).to(bf16) @ v, compiles to the same one attention kernel
// (tests/compiler/lower_test.cpp), against the same function on the cpu in bf16: the cpu rounds the
// scores to bf16 after the matmul, the scale and the mask before its f32 softmax, the kernel keeps them
// in f32; both round P once to bf16. The same bf16 tolerance as above, 5e-2.
TEST(CompiledOnNeuron, FusedAttentionOfAnF32SoftmaxMatchesTheCpuReference) {
  auto attention = [](const std::vector<Tensor>& in) {
    const Tensor scores = matmul(in[0], in[1].transpose(-2, -1)) * 0.2 + in[3];
    return std::vector<Tensor>{matmul(softmax(scores.to(DType::f32), -1).to(DType::bf16), in[2])};
  };
  auto compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(attention));
  Generator g(27);
  for (const int64_t s : {40, 200}) {
    std::vector<Tensor> host;
    for (int i = 0; i < 3; ++i) host.push_back(randn({2, 3, s, 24}, {}, &g).to(DType::bf16));
    // A causal mask, as Llama's: -1e9 above the diagonal.
    std::vector<float> mask(static_cast<size_t>(s * s), 0.0f);
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = i + 1; j < s; ++j) mask[static_cast<size_t>(i * s + j)] = -1e9f;
    }
    host.push_back(from_vector(mask, {1, 1, s, s}).to(DType::bf16));
    const Tensor expected = attention(host)[0];
    std::vector<Tensor> actual;
    EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
    ASSERT_EQ(actual[0].dtype(), DType::bf16);
    expect_close(actual[0], expected, 5e-2, 5e-2);
  }
}

// Llama's attention with its causal mask made in the graph (tests/compiler/lower_test.cpp: the mask
// accumulated on the Tensor engine, q^T scaled by 1/8 first, the scores read in PSUM): against the same
// function on the cpu, with FusedAttentionOfAnF32SoftmaxMatchesTheCpuReference's tolerance; 200 tokens
// make a query tile of 72 rows, whose mask and identity are 72 partitions. At 128 tokens also bit for
// bit the same as the kernel that gets the same mask as an argument (scaled and masked on the Scalar
// engine and GpSimd): both divide P v by the sum on the Vector engine there, so what differs is only
// where the scores are scaled and masked, which gives the same bits (eager_attention.cpp).
TEST(CompiledOnNeuron, AttentionWithItsCausalMaskOnTheTensorEngineMatchesTheCpuReference) {
  auto attention = [](const std::vector<Tensor>& in) { return compiler::testing::causal_attention(in, 0.125); };
  auto compiled = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(attention));
  auto mask_argument = compile(std::function<std::vector<Tensor>(const std::vector<Tensor>&)>(
      [](const std::vector<Tensor>& in) { return compiler::testing::causal_attention(in, 0.125, true); }));
  Generator g(33);
  for (const int64_t s : {128, 200}) {
    std::vector<Tensor> host;
    for (const TensorMeta& meta : compiler::testing::causal_attention_metas(2, 8, s, 64)) {
      host.push_back(meta.dtype == DType::i32 ? arange(s, DType::i32) : randn(meta.shape, {}, &g).to(meta.dtype));
    }
    const Tensor expected = attention(host)[0];
    std::vector<Tensor> actual;
    EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
    ASSERT_EQ(actual[0].dtype(), DType::bf16);
    expect_close(actual[0], expected, 5e-2, 5e-2);
    if (s == 128) {
      std::vector<Tensor> with_mask = host;
      with_mask[3] = compiler::testing::causal_mask(host[3]);
      const Tensor other = mask_argument(to_device(with_mask))[0];
      EXPECT_EQ(amax(abs(actual[0].to(Device::cpu()).to(DType::f32) - other.to(Device::cpu()).to(DType::f32))).item(), 0.0);
    }
  }
}

// Linears whose weights the kernels before them prefetch (128 x 480 x 480, the lowering test checks the
// count), with the bias added in the evacuation, and linears too large for it (32 x 2048 x 2048: each
// loads its own weight), against the cpu reference. f32: the kernel sums in f32 as the reference does,
// in another order over K (1e-4 for K <= 2048 and operands of order 1). bf16: each side rounds each
// linear's result once to bf16, so they differ by up to one bf16 ulp where the f32 sums straddle a
// rounding boundary, and the next linear sums those differences (2^-8 relative, hence 3e-2 / 3e-2).
TEST(CompiledOnNeuron, PrefetchedLinearsMatchTheCpuReference) {
  auto compiled = compile(&compiler::testing::linear_chain);
  Generator g(27);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{128, 480, 480}, {32, 2048, 2048}}) {
      std::vector<Tensor> host;
      for (const TensorMeta& meta : compiler::testing::linear_chain_metas(m, k, n, dtype)) {
        // Weights scaled by 1/sqrt(K) keep every result of order 1.
        const double scale = meta.shape.size() == 2 && host.size() > 0 ? 1.0 / std::sqrt(double(meta.shape[1])) : 1.0;
        host.push_back((randn(meta.shape, {}, &g) * scale).to(dtype));
      }
      const std::vector<Tensor> expected = compiler::testing::linear_chain(host);
      std::vector<Tensor> actual;
      EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
      ASSERT_EQ(actual.size(), expected.size());
      const double tolerance = dtype == DType::f32 ? 1e-4 : 3e-2;
      for (size_t i = 0; i < actual.size(); ++i) {
        SCOPED_TRACE(fmt::format("{} {}x{}x{} output {}", dtype_name(dtype), m, k, n, i));
        expect_close(actual[i], expected[i], tolerance, tolerance);
      }
    }
  }
}

// ESM-2's MLP shape in f32 (four 512-column panels, biases added in the evacuation and loaded panels
// ahead, the second weight prefetched at the first store): the device result is the CPU reference's.
TEST(CompiledOnNeuron, BiasedMlpWithBiasesLoadedAheadMatchesTheCpuReference) {
  auto compiled = compile(&compiler::testing::biased_mlp);
  Generator g(31);
  std::vector<Tensor> host;
  for (const TensorMeta& meta : compiler::testing::biased_mlp_metas(128, 480, 1920, DType::f32)) {
    const double scale = meta.shape.size() == 2 && host.size() > 0 ? 1.0 / std::sqrt(double(meta.shape[1])) : 1.0;
    host.push_back(randn(meta.shape, {}, &g) * scale);
  }
  const std::vector<Tensor> expected = compiler::testing::biased_mlp(host);
  std::vector<Tensor> actual;
  EXPECT_EQ(executions_of([&] { actual = compiled(to_device(host)); }).size(), 1u);
  ASSERT_EQ(actual.size(), 1u);
  expect_close(actual[0], expected[0], 1e-4, 1e-4);
}

TEST(CompiledOnNeuron, ViewsScalarsAndReturnedViews) {
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    return std::vector<Tensor>{
        matmul(x.transpose(0, 1), x),
        exp(x.reshape({x.size(0), 2, x.size(1) / 2}).transpose(0, 1)),
        x.slice(1, 1, x.size(1), 3) * in[1].slice(0, 1, x.size(1), 3),
        x.slice(0, 2, 3).expand({3, x.size(0), x.size(1)}) + x,
        x.transpose(0, 1),                              // a view of an argument: copied into its own result
        (x * 2.0 - 0.5).transpose(0, 1).reshape({-1}),  // a reshape that needs a copy
    };
  };
  auto compiled = compile(fn);
  Generator g(23);
  const std::vector<Tensor> args = to_device({randn({130, 10}, {}, &g), randn({10}, {}, &g)});
  const std::vector<Tensor> expected = fn(args);
  std::vector<Tensor> actual;
  EXPECT_EQ(executions_of([&] { actual = compiled(args); }).size(), 1u);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i]);
}

TEST(CompiledOnNeuron, RmsNormDeviceTimeIsTheBuiltinKernels) {
  auto compiled = compile(&compiler::testing::naive_rms_norm);
  Generator g(24);
  const Tensor x = randn({1024, 1024}, {}, &g).to(kCore0), w = rand({1024}, {}, &g).to(kCore0);
  const std::vector<int64_t> builtin = executions_of([&] { (void)rms_norm(x, w, 1e-6); });
  const std::vector<int64_t> fused = executions_of([&] { (void)compiled(x, w); });
  ASSERT_EQ(builtin.size(), 1u);
  ASSERT_EQ(fused.size(), 1u);
  RecordProperty("builtin_rms_norm_ns", std::to_string(builtin[0]));
  RecordProperty("compiled_rms_norm_ns", std::to_string(fused[0]));
  EXPECT_NEAR(static_cast<double>(fused[0]), static_cast<double>(builtin[0]),
              0.15 * static_cast<double>(builtin[0]))
      << "compiled " << fused[0] << " ns, built-in rms_norm " << builtin[0] << " ns";
}

// substitute_builtins turns the naive layer_norm into the built-in (tests/compiler/passes_test.cpp): the
// device result matches the CPU's naive ops, and the call takes the built-in kernel's device time, never
// more (issue 19: substituting only its RMSNorm made it 1.05x (f32) and 1.50x (bf16) the built-in).
TEST(CompiledOnNeuron, SubstitutedLayerNormMatchesCpuAndTakesTheBuiltinsTime) {
  auto compiled = compile(&compiler::testing::naive_layer_norm, CompileOptions{.substitute_builtins = true});
  Generator g(26);
  const std::vector<Tensor> host = {randn({300, 384}, {}, &g), rand({384}, {}, &g) + 0.5, randn({384}, {}, &g)};
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // The reference: the CPU's naive ops in f32 on the same (rounded) inputs; bf16 at the tolerance the
    // op tests hold bf16 kernels to (tests/ops/op_reference_test.cpp: 2e-2 absolute, 1.6e-2 relative).
    std::vector<Tensor> reference, dev;
    for (const Tensor& t : host) {
      reference.push_back(t.to(dtype).to(DType::f32));
      dev.push_back(t.to(dtype).to(kCore0));
    }
    const Tensor expected = compiler::testing::naive_layer_norm(reference)[0];
    Tensor actual;
    EXPECT_EQ(executions_of([&] { actual = compiled(dev)[0]; }).size(), 1u);
    EXPECT_EQ(actual.dtype(), dtype);
    if (dtype == DType::f32) {
      expect_close(actual, expected);
    } else {
      expect_close(actual, expected, 2e-2, 1.6e-2);
    }
    const std::vector<int64_t> builtin = executions_of([&] { (void)layer_norm(dev[0], dev[1], dev[2], 1e-5); });
    const std::vector<int64_t> substituted = executions_of([&] { (void)compiled(dev); });
    ASSERT_EQ(builtin.size(), 1u);
    ASSERT_EQ(substituted.size(), 1u);
    EXPECT_LE(substituted[0], builtin[0]) << "substituted " << substituted[0] << " ns, layer_norm " << builtin[0];
  }
}

TEST(CompiledOnNeuron, OneCompiledRegionRowWithDeviceTime) {
  auto compiled = compile(&compiler::testing::naive_rms_norm);
  Generator g(25);
  const Tensor x = randn({128, 256}, {}, &g).to(kCore0), w = rand({256}, {}, &g).to(kCore0);
  (void)compiled(x, w);  // compiles outside the profiled window
  neuron::synchronize();
  auto config = std::make_shared<neuron::NeuronConfig>();
  config->modes = {neuron::ProfileMode::RUNTIME};
  profiler::ProfileOptions options;
  options.experimental_config = config;
  profiler::profile prof(options);
  prof.start();
  for (int call = 0; call < 3; ++call) (void)compiled(x, w);
  neuron::synchronize();
  prof.stop();
  int compiled_rows = 0, aten_rows_with_device_time = 0;
  const auto averages = prof.key_averages();
  for (const auto& row : averages.rows()) {
    if (row.key.starts_with("Torch-Compiled Region: ") && row.key.ends_with("/0")) {  // frame/compile ids
      ++compiled_rows;
      EXPECT_EQ(row.count, 3);
      EXPECT_GT(row.device_time_total_ns, 0);
    }
    if (row.key.starts_with("aten::") && row.self_device_time_total_ns > 0) ++aten_rows_with_device_time;
  }
  EXPECT_EQ(compiled_rows, 1);
  EXPECT_EQ(aten_rows_with_device_time, 0);
}

}  // namespace
}  // namespace sightline
