// The roofline floor of a whole function (a model's forward pass, a decoder block): the least device
// time any schedule needs, max(HBM floor, Tensor-engine floor), shared by the model examples
// (examples/models), the decoder block and bench/kernels/kernel_floors, so all three print the same
// definition. Public headers only.
//
//   HBM floor     the bytes that must cross HBM once: every argument (weights, inputs) read once and
//                 the outputs written once, over the core's HBM bandwidth (neuron::DeviceInfo)
//   Tensor floor  the function's FLOPs, the op table's rule on every op it dispatches (what the
//                 profiler's with_flops reports), at the Tensor engine's peak for the operands' width
//                 (device::TensorEngineSpec::peak_flops_per_ns)
//
//   const double flops = count_flops(model, args);   // sightline/compile.h: counted on proxies, nothing runs
//   const examples::Floor floor = examples::roofline_floor(examples::bytes_of(args) + out.nbytes(), flops, dtype);
//   fmt::print("floor: {}\n", floor.text());   // max(HBM ... us for ... MB ...; Tensor fp32 ... us ...) = ... us
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sightline/neuron.h"
#include "sightline/profiler.h"
#include "sightline/sightline.h"

namespace sightline::examples {

struct Floor {
  double hbm_bytes = 0;
  double flops = 0;
  double hbm_us = 0;
  double tensor_us = 0;
  std::string tensor_roof;  // "Tensor fp32" or "Tensor bf16"
  double us() const { return std::max(hbm_us, tensor_us); }
  // "max(HBM 147.8 us for 53.5 MB of weights, input and output; Tensor fp32 348.6 us for 6.85 GFLOP) = 348.6 us"
  std::string text(const std::string& bytes_are = "weights, input and output") const {
    return fmt::format("max(HBM {:.1f} us for {:.1f} MB of {}; {} {:.1f} us for {:.2f} GFLOP) = {:.1f} us", hbm_us,
                       hbm_bytes / 1e6, bytes_are, tensor_roof, tensor_us, flops / 1e9, us());
  }
};

// The floor of `hbm_bytes` and `flops` on the configured device; the Tensor roof is fp32's for f32
// matmul operands, the 16-bit one otherwise.
inline Floor roofline_floor(double hbm_bytes, double flops, DType matmul_dtype) {
  const neuron::DeviceInfo info = neuron::device_info();
  const bool fp32 = matmul_dtype == DType::f32;
  Floor f;
  f.hbm_bytes = hbm_bytes;
  f.flops = flops;
  f.hbm_us = hbm_bytes / info.hbm_bytes_per_ns / 1e3;
  f.tensor_us = flops / (fp32 ? info.tensor_fp32_flops_per_ns : info.tensor_flops_per_ns) / 1e3;
  f.tensor_roof = fp32 ? "Tensor fp32" : fmt::format("Tensor {}", dtype_name(matmul_dtype));
  return f;
}

inline double bytes_of(const std::vector<Tensor>& tensors) {
  double bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<double>(t.nbytes());
  return bytes;
}

// The FLOPs of every aten op a profiled stretch dispatched (the op table's rule, the with_flops column):
// the same count as count_flops() of the function that stretch called.
inline double aten_flops(const profiler::KeyAverages& averages) {
  double flops = 0;
  for (const profiler::FunctionEventAvg& row : averages.rows()) {
    if (row.key.rfind("aten::", 0) == 0) flops += static_cast<double>(row.flops);
  }
  return flops;
}

}  // namespace sightline::examples
