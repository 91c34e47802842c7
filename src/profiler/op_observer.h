// Records every dispatched op as a framework event (aten::mul, ...) while a profile with the CPU
// activity is tracing. The dispatcher's observer slot is filled only during a trace, so an
// unprofiled program pays one relaxed atomic load per op.
#pragma once

namespace sightline::profiler {

struct OpRecordingOptions {
  bool with_flops = false;  // attach each op's FLOP count (the op table's cost rule)
};

void start_op_recording(const OpRecordingOptions& options);
void stop_op_recording();

}  // namespace sightline::profiler
