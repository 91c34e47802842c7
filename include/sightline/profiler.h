// sightline's profiler: torch.profiler's API, schedule, table and trace, for every backend.
//
//   #include <sightline/profiler.h>
//   #include <sightline/neuron.h>
//   using namespace sightline;
//
//   profiler::ProfileOptions options;
//   options.activities = {profiler::ProfilerActivity::CPU, profiler::ProfilerActivity::PrivateUse1};
//   options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
//   options.record_shapes = true;
//   profiler::profile prof(options);
//   prof.start();
//   for (int step = 0; step < 4; ++step) {
//     profiler::record_function scope("model_inference");   // a user scope, like torch's
//     Tensor y = x * x;
//     neuron::synchronize();                               // device work is asynchronous
//     prof.step();
//   }
//   prof.stop();
//   fmt::print("{}", prof.key_averages().table({.sort_by = "self_privateuse1_time_total", .row_limit = 10}));
//   prof.export_chrome_trace("trace.json");                // opens in Perfetto
//
// The pieces, each in its own header under sightline/profiler/:
//   profile.h       profile, ProfileOptions, record_function, rename_privateuse1_backend
//   schedule.h      schedule(wait, warmup, active, repeat, skip_first), ProfilerAction
//   activity.h      ProfilerActivity, ExperimentalConfig, activity sources (how a backend plugs in)
//   key_averages.h  KeyAverages, TableOptions, FunctionEventAvg: torch's key_averages() table
//   events.h        CollectedTrace, FunctionEvent: the trace as data
//   record.h        the recording API (scopes, complete events) that backends and runtimes emit into
// Times in a profile are modeled (docs/host-model.md): the same on every machine and every run.
#pragma once

#include "sightline/profiler/activity.h"
#include "sightline/profiler/events.h"
#include "sightline/profiler/key_averages.h"
#include "sightline/profiler/profile.h"
#include "sightline/profiler/record.h"
#include "sightline/profiler/schedule.h"
