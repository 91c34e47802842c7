// Analysis figures that are right by construction (issue 19): the op table's FLOPs on logical shapes,
// one case per kind of op; MFU, HFU and MBU against hand-computed values on programs whose times are
// known exactly; and the property that no utilisation exceeds 100% on any built-in kernel.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/profile_dir.h"
#include "analysis/roofline.h"
#include "analysis/summary.h"
#include "device/core.h"
#include "kernels/eager.h"
#include "profiles.h"
#include "sightline/sightline.h"

namespace sightline {
namespace {

OpCost cost_of(OpId op, std::vector<Tensor> inputs, const OpAttrs& attrs = {}) {
  const OpCall call{op, inputs, attrs};
  const TensorMeta meta = infer_meta(call);
  return op_cost(call, zeros(meta.shape, meta.dtype));
}

// ---- FLOPs and bytes: the op table's rule on the shapes the op sees (views resolved) ----

TEST(AnalysisFigures, ElementwiseFlopsAreOnePerOutputElement) {
  const Tensor a = ones({64, 32}), row = ones({32});
  EXPECT_EQ(cost_of(OpId::add, {a, a}).flops, 64 * 32);
  // A broadcast operand: still one FLOP per output element; bytes count what each operand is read as.
  const OpCost broadcast = cost_of(OpId::mul, {a, row});
  EXPECT_EQ(broadcast.flops, 64 * 32);
  EXPECT_EQ(broadcast.bytes, (64 * 32 + 32 + 64 * 32) * 4.0);
  EXPECT_EQ(cost_of(OpId::exp, {a}).flops, 64 * 32);
  // bf16 halves the bytes, not the FLOPs.
  const Tensor h = ones({64, 32}, DType::bf16);
  EXPECT_EQ(cost_of(OpId::add, {h, h}).bytes, 3 * 64 * 32 * 2.0);
  EXPECT_EQ(cost_of(OpId::add, {h, h}).flops, 64 * 32);
}

TEST(AnalysisFigures, ReductionFlopsArePerInputElement) {
  const Tensor a = ones({64, 32});
  OpAttrs last;
  last.dims = {-1};
  EXPECT_EQ(cost_of(OpId::sum, {a}, last).flops, 64 * 32);
  EXPECT_EQ(cost_of(OpId::sum, {a}, last).bytes, (64 * 32 + 64) * 4.0);
  EXPECT_EQ(cost_of(OpId::amax, {a}, last).flops, 64 * 32);
}

TEST(AnalysisFigures, MatmulFlopsAreTwiceMnkOnTheLogicalShapes) {
  const Tensor a = ones({64, 32}), b = ones({32, 16});
  EXPECT_EQ(cost_of(OpId::matmul, {a, b}).flops, 2.0 * 64 * 16 * 32);
  // Batched, and broadcast over the batch.
  const Tensor ba = ones({4, 64, 32}), bb = ones({4, 32, 16});
  EXPECT_EQ(cost_of(OpId::matmul, {ba, bb}).flops, 2.0 * 4 * 64 * 16 * 32);
  EXPECT_EQ(cost_of(OpId::matmul, {ba, b}).flops, 2.0 * 4 * 64 * 16 * 32);
  // A transposed view: K is the view's last dim (32), not its storage's.
  const Tensor stored = ones({32, 64});
  EXPECT_EQ(cost_of(OpId::matmul, {stored.transpose(0, 1), b}).flops, 2.0 * 64 * 16 * 32);
  // Matrix-vector and a dot product.
  EXPECT_EQ(cost_of(OpId::matmul, {a, ones({32})}).flops, 2.0 * 64 * 32);
  EXPECT_EQ(cost_of(OpId::matmul, {ones({32}), ones({32})}).flops, 2.0 * 32);
  // linear: x [M, K] @ weight [N, K]^T, plus one add per output element for the bias.
  const Tensor x = ones({8, 32}), w = ones({16, 32}), bias = ones({16});
  EXPECT_EQ(cost_of(OpId::linear, {x, w, Tensor()}).flops, 2.0 * 8 * 16 * 32);
  EXPECT_EQ(cost_of(OpId::linear, {x, w, bias}).flops, 2.0 * 8 * 16 * 32 + 8 * 16);
}

TEST(AnalysisFigures, NormalizationsCountPerInputElementAndViewsCostNothing) {
  const Tensor x = ones({64, 32}), w = ones({32}), b = ones({32});
  OpAttrs eps;
  eps.eps = 1e-6;
  const OpInfo& rms = op_info(OpId::rms_norm);
  EXPECT_EQ(cost_of(OpId::rms_norm, {x, w}, eps).flops, double(rms.flops_per_element) * 64 * 32);
  EXPECT_GT(rms.flops_per_element, 0);
  EXPECT_EQ(cost_of(OpId::layer_norm, {x, w, b}, eps).flops,
            double(op_info(OpId::layer_norm).flops_per_element) * 64 * 32);
  OpAttrs last;
  last.dim = -1;
  EXPECT_EQ(cost_of(OpId::softmax, {x}, last).flops, double(op_info(OpId::softmax).flops_per_element) * 64 * 32);
  // A view moves no data and does no arithmetic.
  OpAttrs t;
  t.dim = 0;
  t.dim1 = 1;
  const Tensor view_in[] = {x};
  const OpCost view = op_cost(OpCall{OpId::transpose, view_in, t}, x.transpose(0, 1));
  EXPECT_EQ(view.flops, 0);
  EXPECT_EQ(view.bytes, 0);
  // Making it contiguous moves it (read once, written once) without arithmetic.
  const OpCost copy = cost_of(OpId::contiguous, {x.transpose(0, 1)});
  EXPECT_EQ(copy.flops, 0);
  EXPECT_EQ(copy.bytes, 2 * 64 * 32 * 4.0);
}

// ---- MFU, HFU, MBU on programs whose times are known exactly ----

analysis::Summary summarize_run(const device::Spec& spec, const device::Executable& exe) {
  device::Core core(spec);
  std::vector<uint64_t> io;
  for (const device::IoTensor& t : exe.io) io.push_back(core.hbm_allocate(t.bytes()));
  const device::RunResult r = core.run(exe, io, {.functional = false, .record = true});
  formats::NtffExecution execution;
  execution.duration_ns = r.duration_ns;
  execution.records = r.records;
  analysis::SummaryBuilder builder(spec);
  builder.add(exe, execution);
  return builder.finish(exe.name);
}

// Back-to-back matmuls on one stationary, N = 512 moving columns: each costs exactly N Tensor-engine
// cycles (docs/hardware-model.md §1.6), in which the 128x128 array does 2 * 128 * 128 * N FLOPs, which
// is the peak. With nothing else in the program, HFU is exactly 100%.
device::Executable matmul_only(DType dtype, int count) {
  device::Executable exe;
  exe.name = "matmuls";
  for (int i = 0; i < count; ++i) {
    exe.stream(device::Engine::tensor)
        .push_back(device::matmul(device::psum(0, 128, 0, DType::f32, {512}), device::sbuf(0, 128, 0, dtype, {128}),
                                  device::sbuf(0, 128, 1024, dtype, {512}), i > 0));
  }
  return exe;
}

TEST(AnalysisFigures, BackToBackBf16MatmulsAreExactlyPeakHfu) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const analysis::Summary s = summarize_run(spec, matmul_only(DType::bf16, 8));
  const double flops = 8 * 2.0 * 128 * 128 * 512;
  EXPECT_DOUBLE_EQ(s.hardware_flops, flops);
  EXPECT_NEAR(s.total_time_ns, 8 * 512 / spec.tensor.clock_ghz, 1e-6);
  EXPECT_NEAR(s.peak_flops_per_s, 2.0 * 128 * 128 * spec.tensor.clock_ghz * 1e9, 1);
  EXPECT_NEAR(s.hfu, 1.0, 1e-9);
  EXPECT_EQ(s.mbu, 0);
  EXPECT_EQ(s.hbm_bytes(), 0u);
}

TEST(AnalysisFigures, Fp32MatmulsTakeFourTimesLongerSoTheirHfuIsAQuarter) {
  const device::Spec spec = device::Spec::builtin("trn2");
  const analysis::Summary s = summarize_run(spec, matmul_only(DType::f32, 8));
  EXPECT_NEAR(s.total_time_ns, 8 * 512 * spec.tensor.fp32_cost_factor / spec.tensor.clock_ghz, 1e-6);
  EXPECT_NEAR(s.hfu, 1.0 / spec.tensor.fp32_cost_factor, 1e-9);
  EXPECT_DOUBLE_EQ(s.adjusted_hardware_flops, s.hardware_flops * spec.tensor.fp32_cost_factor);
}

// One 128 KiB transfer on one queue: fixed cost, then the bytes at the queue's peak; MBU is the bytes
// over that time over the core's HBM bandwidth.
TEST(AnalysisFigures, OneTransferMbuIsItsBytesOverTimeOverBandwidth) {
  const device::Spec spec = device::Spec::builtin("trn2");
  device::Executable exe;
  exe.name = "one_load";
  exe.io = {{"x", DType::f32, {8, 4096}, device::IoKind::input}};
  exe.dma_queues.resize(1);
  exe.dma_queues[0].push_back(device::dma_copy(device::sbuf(0, 8, 0, DType::f32, {4096}),
                                               device::hbm(0, 0, 8, 4096, DType::f32, {4096})));
  const analysis::Summary s = summarize_run(spec, exe);
  const double bytes = 8.0 * 4096 * 4;
  const double time_ns = spec.dma.fixed_cost_ns + bytes / spec.dma.queue_bytes_per_ns;
  EXPECT_NEAR(s.total_time_ns, time_ns, 1e-6);
  EXPECT_EQ(s.hbm_bytes(), static_cast<uint64_t>(bytes));
  EXPECT_NEAR(s.mbu, bytes / time_ns / spec.hbm.bytes_per_ns, 1e-12);
  EXPECT_EQ(s.hfu, 0);
}

// ---- no utilisation above 100% ----

void expect_within_physics(const analysis::Summary& s, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_GE(s.mfu, 0);
  EXPECT_LE(s.mfu, 1.0 + 1e-9);
  EXPECT_GE(s.hfu, 0);
  EXPECT_LE(s.hfu, 1.0 + 1e-9);
  EXPECT_GE(s.mbu, 0);
  EXPECT_LE(s.mbu, 1.0 + 1e-9);
  for (const analysis::EngineSummary& e : s.engines) EXPECT_LE(e.active_ns, s.total_time_ns + 1e-6);
}

struct KernelCase {
  OpId op;
  std::vector<kernels::TensorDesc> inputs;
  OpAttrs attrs{};
};

TEST(AnalysisFigures, NoBuiltInKernelExceedsAnyPeak) {
  const device::Spec spec = device::Spec::builtin("trn2");
  auto dense = [](DType d, Dims shape) { return kernels::TensorDesc::contiguous(d, shape); };
  std::vector<KernelCase> cases;
  OpAttrs eps;
  eps.eps = 1e-5;
  OpAttrs last;
  last.dim = -1;
  OpAttrs sum_last;
  sum_last.dims = {-1};
  for (DType d : {DType::f32, DType::bf16}) {
    for (Dims shape : {Dims{1, 7}, Dims{128, 512}, Dims{300, 1000}}) {
      const int64_t cols = shape.back();
      cases.push_back({OpId::add, {dense(d, shape), dense(d, shape)}});
      cases.push_back({OpId::mul, {dense(d, shape), dense(d, {cols})}});
      cases.push_back({OpId::exp, {dense(d, shape)}});
      cases.push_back({OpId::gelu, {dense(d, shape)}});
      cases.push_back({OpId::softmax, {dense(d, shape)}, last});
      cases.push_back({OpId::sum, {dense(d, shape)}, sum_last});
      cases.push_back({OpId::rms_norm, {dense(d, shape), dense(d, {cols})}, eps});
      cases.push_back({OpId::layer_norm, {dense(d, shape), dense(d, {cols}), dense(d, {cols})}, eps});
    }
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {128, 128, 128}, {129, 200, 513},
                           {512, 512, 512}, {256, 1024, 64}}) {
      cases.push_back({OpId::matmul, {dense(d, {m, k}), dense(d, {k, n})}});
    }
  }
  for (const KernelCase& c : cases) {
    std::vector<Tensor> metas;
    for (const kernels::TensorDesc& t : c.inputs) metas.push_back(zeros(t.shape, t.dtype));
    const TensorMeta meta = infer_meta(OpCall{c.op, metas, c.attrs});
    const device::Executable exe =
        kernels::build_eager_kernel(c.op, c.inputs, c.attrs, dense(meta.dtype, meta.shape), spec);
    std::string what = std::string(op_name(c.op));
    for (const kernels::TensorDesc& t : c.inputs) what += fmt::format(" {}{}", dtype_name(t.dtype), t.shape);
    expect_within_physics(summarize_run(spec, exe), what);
  }
}

TEST(AnalysisFigures, NoProfileOrRooflinePointExceedsAnyPeak) {
  const test_profiles::Generated& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused, &g.matmul}) {
    const analysis::ProfileDir dir = analysis::profile_dir_load(p->dir);
    expect_within_physics(analysis::summarize_profile(dir), p->dir);
    const analysis::Roofline roof = analysis::roofline(dir);
    for (const auto* points : {&roof.executables, &roof.ops}) {
      for (const analysis::RooflinePoint& point : *points) {
        SCOPED_TRACE(point.name);
        EXPECT_LE(point.efficiency, 1.0 + 1e-9);
        EXPECT_LE(point.achieved_flops_per_s, point.attainable_flops_per_s * (1 + 1e-9));
      }
    }
  }
}

}  // namespace
}  // namespace sightline
