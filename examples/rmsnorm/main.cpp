// RMSNorm three ways is the reference study of sightline (docs/architecture.md). This example runs
// the naive eager version (six ops) and the fused built-in rms_norm on the same inputs, checks that
// they agree, and reports host time per call.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "sightline/sightline.h"

using namespace sightline;

namespace {

// What a PyTorch user writes: x * rsqrt(mean(x^2, -1, keepdim) + eps) * w.
Tensor rms_norm_naive(const Tensor& x, const Tensor& w, double eps) {
  const Tensor mean_sq = mean(x * x, {-1}, /*keepdim=*/true);
  return x * rsqrt(mean_sq + eps) * w;
}

template <typename Fn>
double time_ms(int iterations, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) fn();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(end - start).count() / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RMSNorm, naive eager ops vs the fused built-in rms_norm"};
  int64_t rows = 4096, cols = 4096;
  int iterations = 5;
  std::string device_name = "cpu";
  std::string dtype_name_arg = "f32";
  app.add_option("--rows", rows, "rows of the input")->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "columns of the input (the normalized dim)")->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "timed calls of each version")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "device to run on");
  app.add_option("--dtype", dtype_name_arg, "f32, bf16 or f16");
  CLI11_PARSE(app, argc, argv);

  try {
    const Device device = Device::parse(device_name);
    const DType dtype = dtype_parse(dtype_name_arg);
    constexpr double kEps = 1e-6;
    Generator gen(0);
    const Tensor x = randn({rows, cols}, TensorOptions(dtype, device), &gen);
    const Tensor w = rand({cols}, TensorOptions(dtype, device), &gen);

    fmt::print("RMSNorm on {}{} ({}), {} timed calls each\n", dtype_name(dtype), Dims{rows, cols}, device,
               iterations);
    Tensor naive, fused;
    const double naive_ms = time_ms(iterations, [&] { naive = rms_norm_naive(x, w, kEps); });
    const double fused_ms = time_ms(iterations, [&] { fused = rms_norm(x, w, kEps); });
    const double max_diff = amax(abs(naive.to(DType::f32) - fused.to(DType::f32))).item();

    fmt::print("  {:<28} {:>10} {:>12}\n", "version", "ops/call", "host ms/call");
    fmt::print("  {:<28} {:>10} {:>12.3f}\n", "naive (eager ops)", 6, naive_ms);
    fmt::print("  {:<28} {:>10} {:>12.3f}\n", "fused (built-in rms_norm)", 1, fused_ms);
    fmt::print("  naive / fused host time: {:.2f}x; max |naive - fused| = {:.3g}\n", naive_ms / fused_ms, max_diff);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
