// Synthetic events for profiler tests: traces built from hand-written times, so tables and traces
// are deterministic.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sightline/profiler/events.h"

namespace sightline::profiler::testing {

constexpr std::int64_t kUs = 1000;  // nanoseconds per microsecond

inline FunctionEvent host_event(std::string name, std::int64_t start_us, std::int64_t end_us,
                                std::uint64_t id, EventKind kind = EventKind::cpu_op,
                                std::uint64_t external_id = 0) {
  FunctionEvent event;
  event.name = std::move(name);
  event.kind = kind;
  event.id = id;
  event.external_id = external_id != 0 ? external_id : id;
  event.thread = 1;
  event.start_ns = start_us * kUs;
  event.end_ns = end_us * kUs;
  return event;
}

inline FunctionEvent device_event(std::string name, std::int64_t start_us, std::int64_t end_us,
                                  std::uint64_t correlation_id, std::uint64_t external_id,
                                  EventKind kind = EventKind::device_exec) {
  FunctionEvent event;
  event.name = std::move(name);
  event.kind = kind;
  event.device_type = DeviceType::privateuse1;
  event.device_index = 0;
  event.id = correlation_id;
  event.external_id = external_id;
  event.start_ns = start_us * kUs;
  event.end_ns = end_us * kUs;
  return event;
}

inline CollectedTrace make_trace(std::vector<FunctionEvent> events) {
  ActivityBatch batch;
  batch.events = std::move(events);
  std::vector<ActivityBatch> batches;
  batches.push_back(std::move(batch));
  TraceWindow window;
  window.start_ns = 0;
  window.end_ns = 100'000 * kUs;
  window.wall_clock_at_start_ns = 1'700'000'000'000'000'000;
  return build_trace(Collection{}, std::move(batches), window);
}

}  // namespace sightline::profiler::testing
