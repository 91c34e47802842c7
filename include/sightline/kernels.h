// Custom ops written as device kernels (what NKI is for Trainium): write the kernel with the tile-level
// kernel builder (sightline/kernels/builder.h), wrap it in a CustomOp, and call it on neuron tensors
// like any op. The profiler shows it under its own name, with its runtime calls and its instructions
// on the engines, exactly as it shows the built-in ops.
//
//   #include <sightline/kernels.h>
//   using namespace sightline;
//   using namespace sightline::kernels;
//
//   // y = x * sigmoid(x), one pass over a [rows, cols] f32 tensor: one execution where eager needs two.
//   neuron::CustomOp silu("custom::silu", [](KernelBuilder& b, std::span<const Tensor> in) {
//     const int64_t rows = in[0].shape()[0];
//     const auto cols = static_cast<uint32_t>(in[0].shape()[1]);
//     const uint32_t x = b.input("x", DType::f32, {rows, cols});    // the inputs, in call order,
//     const uint32_t y = b.output("y", DType::f32, {rows, cols});   // then the outputs
//     TilePool xs = b.pool("x", DType::f32, cols, 3), ys = b.pool("y", DType::f32, cols, 3);
//     for (int64_t r = 0; r < rows; r += b.partitions()) {
//       const auto p = static_cast<uint16_t>(std::min<int64_t>(b.partitions(), rows - r));
//       const Tile xt = xs.next(), yt = ys.next();
//       b.load(xt.rows(p), hbm_rows(x, DType::f32, r * cols, p, cols, cols));
//       b.activate(ActFunc::sigmoid, yt.rows(p), xt.rows(p));                    // ScalarE
//       b.tensor_tensor(AluOp::multiply, yt.rows(p), yt.rows(p), xt.rows(p));   // VectorE waits for it
//       b.store(hbm_rows(y, DType::f32, r * cols, p, cols, cols), yt.rows(p));   // DMA waits for that
//     }
//   });
//   Tensor x = randn({300, 200}).to(Device::parse("neuron:0"));
//   Tensor y = silu({x})[0];
//
// The kernel function runs once per distinct (input shapes, dtypes, core); the executable it builds
// is validated against the device spec, loaded on the core and cached. Inputs are made contiguous
// first (a dispatched copy, visible in the profile, when one is not), so a kernel addresses them as
// dense row-major arrays.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sightline/kernels/builder.h"
#include "sightline/tensor.h"

namespace sightline::neuron {

// Writes the kernel for these inputs: declare one builder input per call input (same order, dtype
// and shape), then the outputs (and any scratch), then emit the program.
using KernelFunction = std::function<void(kernels::KernelBuilder& builder, std::span<const Tensor> inputs)>;

class CustomOp {
 public:
  // `name` is the op's name in the profiler's tables and traces, e.g. "custom::silu".
  CustomOp(std::string name, KernelFunction kernel);

  // Runs the op on neuron tensors of one core and returns its outputs (allocated on that core, in
  // the order the kernel declared them). Throws sightline::Error, naming the op and the input, for
  // inputs that are not on one neuron device or that the kernel declared differently.
  std::vector<Tensor> operator()(std::span<const Tensor> inputs) const;
  std::vector<Tensor> operator()(std::initializer_list<Tensor> inputs) const {
    return (*this)(std::span<const Tensor>(inputs.begin(), inputs.size()));
  }

  const std::string& name() const;
  // Executables built so far (one per distinct input shapes, dtypes and core).
  std::size_t cache_size() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace sightline::neuron
