// RMSNorm three ways is the reference study of sightline (docs/architecture.md). This example runs
// the naive eager version (six ops) and the fused built-in rms_norm on the same inputs on a device,
// checks both against each other, and reports what the runtime's events say each one cost on the
// device: executions, device time, HBM traffic, launch overhead and the idle gaps between executions.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "neuron/neuron.h"
#include "sightline/sightline.h"

using namespace sightline;

namespace {

// What a PyTorch user writes: x * rsqrt(mean(x^2, -1, keepdim) + eps) * w.
Tensor rms_norm_naive(const Tensor& x, const Tensor& w, double eps) {
  const Tensor mean_sq = mean(x * x, {-1}, /*keepdim=*/true);
  return x * rsqrt(mean_sq + eps) * w;
}

struct DeviceCost {
  int executions = 0;
  int copies_in = 0;
  double busy_us = 0;      // sum of nc_exec_running
  double span_us = 0;      // first device activity to last
  double overhead_us = 0;  // executable switches and first loads
  double hbm_mb = 0;
};

DeviceCost summarize(const runtime::Captured& c) {
  DeviceCost d;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const runtime::Event& e : c.events) {
    if (!runtime::event_kind_is_device(e.kind)) continue;
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
    const double us = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    switch (e.kind) {
      case runtime::EventKind::exec_running:
        ++d.executions;
        d.busy_us += us;
        d.hbm_mb += static_cast<double>(e.bytes) / 1e6;
        break;
      case runtime::EventKind::copy_in: ++d.copies_in; break;
      case runtime::EventKind::model_switch:
      case runtime::EventKind::first_load: d.overhead_us += us; break;
      default: break;
    }
  }
  if (first <= last) d.span_us = static_cast<double>(last - first) / 1e3;
  return d;
}

// Runs `fn` once to warm up (build and load executables), then once with the runtime capturing.
template <typename Fn>
DeviceCost measure(runtime::Runtime& rt, Fn&& fn) {
  fn();
  neuron::synchronize();
  runtime::CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  fn();
  neuron::synchronize();
  rt.set_capture({});
  return summarize(rt.drain());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RMSNorm on a simulated NeuronCore: naive eager ops vs the fused built-in rms_norm"};
  int64_t rows = 4096, cols = 4096;
  std::string device_name = "neuron:0";
  std::string dtype_arg = "f32";
  std::string spec = "trn2";
  app.add_option("--rows", rows, "rows of the input")->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "columns of the input (the normalized dim)")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "neuron:N");
  app.add_option("--dtype", dtype_arg, "f32, bf16 or f16");
  app.add_option("--spec", spec, "device spec: trn2, trn1 or a spec JSON file");
  CLI11_PARSE(app, argc, argv);

  try {
    neuron::Options options;
    options.spec = spec;
    neuron::configure(options);
    const Device device = Device::parse(device_name);
    SIGHTLINE_CHECK(!device.is_cpu(), "--device must be a neuron device, got {}", device);
    const DType dtype = dtype_parse(dtype_arg);
    constexpr double kEps = 1e-6;
    Generator gen(0);
    const Tensor x = randn({rows, cols}, dtype, &gen).to(device);
    const Tensor w = rand({cols}, dtype, &gen).to(device);
    runtime::Runtime& rt = neuron::runtime();

    fmt::print("RMSNorm on {}{} on {} ({}, {})\n", dtype_name(dtype), Dims{rows, cols}, device, rt.spec().name,
               rt.spec().core_version);
    Tensor naive, fused;
    const DeviceCost n = measure(rt, [&] { naive = rms_norm_naive(x, w, kEps); });
    const DeviceCost f = measure(rt, [&] { fused = rms_norm(x, w, kEps); });
    const double max_diff = amax(abs(naive.to(DType::f32) - fused.to(DType::f32))).item();

    const double bytes = static_cast<double>(rows * cols) * 2 * static_cast<double>(dtype_size(dtype));
    const double floor_us = bytes / rt.spec().hbm.bytes_per_ns / 1e3;
    fmt::print("  {:<26} {:>10} {:>10} {:>14} {:>14} {:>12} {:>10}\n", "version", "executions", "copies in",
               "device busy us", "device span us", "switch+load", "HBM MB");
    for (const auto& [name, d] : {std::pair{"naive (eager ops)", n}, std::pair{"fused (built-in rms_norm)", f}}) {
      fmt::print("  {:<26} {:>10} {:>10} {:>14.1f} {:>14.1f} {:>12.1f} {:>10.1f}\n", name, d.executions, d.copies_in,
                 d.busy_us, d.span_us, d.overhead_us, d.hbm_mb);
    }
    fmt::print("  HBM floor of the fused kernel (in + out bytes / {} B/ns): {:.1f} us; fused is {:.2f}x the floor\n",
               rt.spec().hbm.bytes_per_ns, floor_us, f.busy_us / floor_us);
    fmt::print("  naive / fused device span: {:.2f}x; max |naive - fused| = {:.3g}\n", n.span_us / f.span_us, max_diff);
    return 0;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
