// Profiles RMSNorm on the neuron device with nothing but the installed public headers: the table goes
// to stdout, the profile directory to argv[1].
#include <cstdio>
#include <memory>
#include <string>

#include <sightline/compile.h>
#include <sightline/neuron.h>
#include <sightline/profiler.h>
#include <sightline/sightline.h>

using namespace sightline;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer PROFILE_DIR\n");
    return 2;
  }
  try {
    neuron::configure({.spec = "trn2"});  // built into the library: no spec file is needed
    const Device device = Device::parse("neuron:0");
    Generator gen(0);
    const Tensor x = randn({256, 512}, DType::f32, &gen).to(device);
    const Tensor w = rand({512}, DType::f32, &gen).to(device);
    auto naive = [](const Tensor& a, const Tensor& b) { return a * rsqrt(mean(a * a, {-1}, true) + 1e-6) * b; };
    auto compiled = compile(naive);

    auto cfg = std::make_shared<neuron::NeuronConfig>();
    cfg->profile_output_dir = argv[1];
    neuron::NeuronProfiler exporter(cfg);
    profiler::ProfileOptions options;
    options.schedule = profiler::schedule({.wait = 1, .warmup = 1, .active = 1});
    options.on_trace_ready = exporter.callback();
    options.experimental_config = cfg;
    profiler::profile prof(options);
    prof.start();
    for (int step = 0; step < 3; ++step) {
      profiler::record_function scope("rmsnorm_step");
      Tensor eager = naive(x, w);
      Tensor fused = compiled(x, w);
      neuron::synchronize();
      prof.step();
    }
    prof.stop();
    std::printf("%s", prof.key_averages().table({.sort_by = "self_privateuse1_time_total", .row_limit = 8}).c_str());
    const neuron::TraceSummary s = neuron::last_trace_summary();
    std::printf("executions %d, device busy %.1f us, span %.1f us, host clock %s, on %s\n", s.executions, s.busy_us,
                s.span_us, s.host_clock.c_str(), neuron::device_info().spec_name.c_str());
    return s.executions == 7 ? 0 : 1;  // six eager ops and one compiled call
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
