// Activity sources: how a device backend adds its own events to a profile without the profiler
// knowing the device (the shape of Kineto's IActivityProfiler / IActivityProfilerSession pair).
//
// A backend registers a factory once; every profile that asks for the source's activity creates one
// source object per trace and drives it: prepare (warmup), start, synchronize + stop, collect.
//
//   class NeuronSource final : public ActivitySource {
//     std::string_view name() const override { return "neuron"; }
//     void start() override { ... }                   // arm device capture
//     void stop() override { ... }
//     ActivityBatch collect() override { ... }        // device events, lanes, own drop counts
//   };
//   static const ActivitySourceRegistration registered = register_activity_source(
//       {"neuron", ProfilerActivity::PrivateUse1,
//        [](const ActivitySourceConfig& config) { return std::make_unique<NeuronSource>(config); }});
//
// Device work recorded with record_complete() (record.h) needs no source: sources are for events a
// backend gathers its own way (a per-core trace buffer, a hardware counter dump).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/profiler/events.h"

namespace sightline::profiler {

enum class ProfilerActivity { CPU, PrivateUse1 };

// Backend-specific options (NeuronConfig derives from it); sources dynamic_cast to their own type.
struct ExperimentalConfig {
  virtual ~ExperimentalConfig() = default;
};

struct ActivitySourceConfig {
  std::vector<ProfilerActivity> activities{};
  std::shared_ptr<const ExperimentalConfig> experimental_config{};
  bool record_shapes = false;
  bool profile_memory = false;
  bool with_flops = false;
};

class ActivitySource {
 public:
  virtual ~ActivitySource() = default;
  virtual std::string_view name() const = 0;
  // Warmup: arm whatever takes time to set up, without keeping events yet.
  virtual void prepare() {}
  virtual void start() = 0;
  // Ends the trace at the current host time. It does not wait for the device in host time: work of the
  // trace that is not complete at that time is left out of collect(), and said so in its notes (as a
  // real device profile has no record of what had not finished).
  virtual void stop() = 0;
  // The events of the trace between start() and stop(); called once, after stop().
  virtual ActivityBatch collect() = 0;
};

using ActivitySourceFactory = std::function<std::unique_ptr<ActivitySource>(const ActivitySourceConfig&)>;

struct ActivitySourceSpec {
  std::string name{};
  ProfilerActivity activity = ProfilerActivity::PrivateUse1;
  ActivitySourceFactory factory{};
};

// A handle on a registration; the source stays registered until unregister_activity_source().
struct ActivitySourceRegistration {
  std::uint64_t id = 0;
};

// Registers a source (thread-safe). Throws sightline::Error on an empty name or factory, or a name
// already registered.
ActivitySourceRegistration register_activity_source(ActivitySourceSpec spec);
void unregister_activity_source(ActivitySourceRegistration registration);

// One new source per registered factory whose activity is in config.activities (a factory may
// return nullptr to opt out).
std::vector<std::unique_ptr<ActivitySource>> create_activity_sources(const ActivitySourceConfig& config);

// The PrivateUse1 backend's name (torch.utils.rename_privateuse1_backend): it names the device
// columns of the table ("neuron" -> "Self NEURON") and the device lanes of the trace.
void rename_privateuse1_backend(std::string name);
std::string privateuse1_backend_name();

}  // namespace sightline::profiler
