// Helpers for the kernel tests: run an eager kernel on a simulated core and compare it with the CPU
// reference computed by sightline's own ops on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "device/core.h"
#include "kernels/eager.h"
#include "sightline/backend.h"
#include "sightline/ops.h"

namespace sightline::kernel_tests {

inline const device::Spec& trn2() {
  static const device::Spec spec = device::Spec::builtin("trn2");
  return spec;
}

struct DeviceResult {
  Tensor out;
  device::RunResult run;
  device::Executable exe;
};

// Builds the eager kernel for `op` on `inputs` (cpu tensors, views allowed), runs it on a fresh core
// of `spec` (trn2 by default) with the inputs bound at their first element, and returns the output as
// a cpu tensor.
inline DeviceResult run_eager(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs,
                              const device::RunOptions& options = {}, const device::Spec& spec = trn2()) {
  const TensorMeta meta = infer_meta(OpCall{op, inputs, attrs});
  std::vector<kernels::TensorDesc> descs;
  for (const Tensor& t : inputs) {
    if (t.defined()) descs.push_back(kernels::TensorDesc::of(t));
  }
  const kernels::TensorDesc out_desc = kernels::TensorDesc::contiguous(meta.dtype, meta.shape);
  DeviceResult r;
  r.exe = kernels::build_eager_kernel(op, descs, attrs, out_desc, spec);
  device::Core core(spec);
  std::vector<uint64_t> addresses;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    const uint64_t bytes =
        static_cast<uint64_t>(std::max<int64_t>(1, kernels::tensor_extent(kernels::TensorDesc::of(t)))) *
        t.element_size();
    const uint64_t address = core.hbm_allocate(bytes);
    if (options.functional) core.hbm_write(address, t.raw_data(), bytes);
    addresses.push_back(address);
  }
  r.out = empty(meta.shape, meta.dtype);
  const uint64_t out_bytes = std::max<uint64_t>(r.out.nbytes(), 1);
  addresses.push_back(core.hbm_allocate(out_bytes));
  r.run = core.run(r.exe, addresses, options);
  if (options.functional && r.out.nbytes() > 0)
    core.hbm_read(addresses.back(), r.out.raw_data(), r.out.nbytes());
  return r;
}

inline double default_tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 2e-2;
    case DType::f16: return 4e-3;
    default: return 2e-5;
  }
}

// Elementwise |device - reference| <= tol * (1 + |reference|), with the worst index in the message.
inline void expect_close(const Tensor& device_out, const Tensor& reference, double tol) {
  ASSERT_EQ(device_out.shape(), reference.shape());
  ASSERT_EQ(device_out.dtype(), reference.dtype());
  const Tensor a = device_out.to(DType::f32).contiguous(), b = reference.to(DType::f32).contiguous();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  double worst = 0;
  int64_t worst_at = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (pa[i] == pb[i] || (std::isnan(pa[i]) && std::isnan(pb[i]))) continue;
    double err = std::fabs(double(pa[i]) - double(pb[i])) / (1.0 + std::fabs(double(pb[i])));
    if (std::isnan(err)) err = 1e30;
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
  }
  if (worst_at < 0) return;
  EXPECT_LE(worst, tol) << "worst at flat index " << worst_at << ": device " << pa[worst_at]
                        << " vs reference " << pb[worst_at];
}

// Runs `op` on the device (a core of `spec`, trn2 by default) and on the cpu and compares.
inline DeviceResult check_op(OpId op, const std::vector<Tensor>& inputs, const OpAttrs& attrs = {},
                             double tol = -1, const device::Spec& spec = trn2()) {
  DeviceResult r = run_eager(op, inputs, attrs, {}, spec);
  const Tensor reference = dispatch(op, inputs, attrs);
  expect_close(r.out, reference, tol >= 0 ? tol : default_tolerance(reference.dtype()));
  return r;
}

inline Tensor random(const Dims& shape, DType dtype = DType::f32) {
  return randn(shape).to(dtype);
}
inline Tensor random_positive(const Dims& shape, DType dtype = DType::f32) {
  return add(rand(shape), 0.1).to(dtype);
}
inline Tensor random_ints(const Dims& shape, int range = 20) {
  return sub(mul(rand(shape), double(range)), double(range / 2)).to(DType::i32);
}

}  // namespace sightline::kernel_tests
