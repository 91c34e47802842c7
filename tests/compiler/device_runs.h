// What the neuron runtime did while a test function ran, for the compiler's device tests.
#pragma once

#include <cstdint>
#include <vector>

#include "neuron/neuron.h"

namespace sightline::compiler::testing {

// The device duration of each execution on the runtime's cores while `fn` ran.
template <typename Fn>
std::vector<int64_t> executions_of(Fn&& fn) {
  runtime::Runtime& rt = neuron::runtime();
  neuron::synchronize();
  runtime::CaptureOptions capture_options;
  capture_options.enabled = true;
  rt.set_capture(capture_options);
  fn();
  neuron::synchronize();
  const runtime::Captured captured = rt.drain();
  rt.set_capture({});
  std::vector<int64_t> durations;
  for (const runtime::Event& e : captured.events) {
    if (e.kind == runtime::RuntimeEventKind::exec_running) durations.push_back(e.end_ns - e.start_ns);
  }
  return durations;
}

}  // namespace sightline::compiler::testing
