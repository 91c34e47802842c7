#include "sightline/profiler/events.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <utility>

namespace sightline::profiler {
namespace {

FunctionEvent event_from_record(const CollectedRecord& collected, const Collection& collection,
                                std::unordered_map<NameId, std::string_view>& names) {
  const Record& record = collected.record;
  FunctionEvent event;
  event.id = record.correlation_id;
  event.external_id = record.external_id;
  auto name = names.find(record.name);
  if (name == names.end()) name = names.emplace(record.name, interned_name(record.name)).first;
  event.name = std::string(name->second);
  event.kind = record.kind;
  event.device_type = is_device_kind(record.kind) ? DeviceType::privateuse1 : DeviceType::cpu;
  event.thread = collection.threads[collected.thread].os_thread_id;
  event.device_index = record.device;
  event.resource = record.resource;
  event.start_ns = record.start_ns;
  event.end_ns = record.end_ns;
  if (collected.shapes != 0) event.input_shapes = collection.shapes[collected.shapes - 1];
  if (record.kind == EventKind::device_memcpy) {
    event.bytes = record.value;
  } else {
    event.flops = record.value;
  }
  return event;
}

bool is_host_event(const FunctionEvent& event) { return event.device_type == DeviceType::cpu; }

MemoryEvent memory_from_record(const CollectedRecord& collected, const Collection& collection) {
  const Record& record = collected.record;
  MemoryEvent memory;
  memory.ts_ns = record.start_ns;
  memory.thread = collection.threads[collected.thread].os_thread_id;
  memory.device_index = record.device;
  memory.address = record.correlation_id;
  memory.bytes = static_cast<std::int64_t>(record.value);
  memory.scope_id = record.external_id;
  memory.scope_known = true;
  if (collected.memory != 0) {
    const MemoryTotals& totals = collection.memory_totals[collected.memory - 1];
    memory.total_allocated = totals.allocated;
    memory.total_reserved = totals.reserved;
  }
  return memory;
}

// Gives each memory record its owner: the op or scope that was open when it was recorded (scope_id),
// else the innermost host event on its thread whose [start, end] holds it. The last event on the
// thread to start at or before it is that owner or nested in it, so walking up from there finds it.
void attribute_memory(std::vector<FunctionEvent>& events, std::vector<MemoryEvent>& memory) {
  if (memory.empty()) return;
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> starts_by_thread;  // in start order
  std::unordered_map<std::uint64_t, std::int64_t> scopes;  // correlation id of an op or scope -> index
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (is_host_event(events[i])) starts_by_thread[events[i].thread].push_back(static_cast<std::int64_t>(i));
    if (opens_correlation(events[i].kind) && events[i].id != 0) scopes.emplace(events[i].id, static_cast<std::int64_t>(i));
  }
  for (MemoryEvent& record : memory) {
    if (record.scope_known) {
      const auto scope = scopes.find(record.scope_id);
      if (record.scope_id == 0) continue;  // recorded outside every op and scope: no owner
      if (scope != scopes.end()) {
        record.owner = scope->second;
        FunctionEvent& owner = events[static_cast<std::size_t>(scope->second)];
        (record.device_index < 0 ? owner.self_cpu_memory_usage : owner.self_device_memory_usage) += record.bytes;
        continue;
      }
    }
    auto thread = starts_by_thread.find(record.thread);
    if (thread == starts_by_thread.end()) continue;
    const std::vector<std::int64_t>& order = thread->second;
    auto after = std::upper_bound(order.begin(), order.end(), record.ts_ns, [&](std::int64_t ts, std::int64_t index) {
      return ts < events[static_cast<std::size_t>(index)].start_ns;
    });
    if (after == order.begin()) continue;
    std::int64_t candidate = *std::prev(after);
    while (candidate >= 0 && events[static_cast<std::size_t>(candidate)].end_ns < record.ts_ns) {
      candidate = events[static_cast<std::size_t>(candidate)].parent;
    }
    record.owner = candidate;
    if (candidate < 0) continue;
    FunctionEvent& owner = events[static_cast<std::size_t>(candidate)];
    (record.device_index < 0 ? owner.self_cpu_memory_usage : owner.self_device_memory_usage) += record.bytes;
  }
}

// torch's EventList._populate_cpu_children: per thread, events in (start, -end) order, a stack of
// open candidates; an event is the child of the innermost candidate that fully contains it.
void build_cpu_tree(std::vector<FunctionEvent>& events) {
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> open_by_thread;
  for (std::size_t i = 0; i < events.size(); ++i) {
    FunctionEvent& event = events[i];
    if (!is_host_event(event)) continue;
    std::vector<std::int64_t>& open = open_by_thread[event.thread];
    while (!open.empty()) {
      FunctionEvent& candidate = events[static_cast<std::size_t>(open.back())];
      if (event.start_ns >= candidate.end_ns || event.end_ns > candidate.end_ns) {
        open.pop_back();
      } else {
        candidate.children.push_back(static_cast<std::int64_t>(i));
        event.parent = open.back();
        break;
      }
    }
    open.push_back(static_cast<std::int64_t>(i));
  }
}

// torch's EventList._remove_dup_nodes: an op whose only child has its own name (an op calling its
// own overload) is shown once; the child's children and kernels move up to it.
void merge_same_name_children(std::vector<FunctionEvent>& events) {
  std::vector<bool> removed(events.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (removed[i] || events[i].parent < 0) continue;
      FunctionEvent& child = events[i];
      FunctionEvent& parent = events[static_cast<std::size_t>(child.parent)];
      if (parent.name != child.name || parent.children.size() != 1) continue;
      parent.children = std::move(child.children);
      parent.kernels.insert(parent.kernels.end(), child.kernels.begin(), child.kernels.end());
      for (std::int64_t grandchild : parent.children) {
        events[static_cast<std::size_t>(grandchild)].parent = child.parent;
      }
      child.children.clear();
      child.kernels.clear();
      removed[i] = true;
      changed = true;
    }
  }
  if (std::find(removed.begin(), removed.end(), true) == removed.end()) return;
  std::vector<std::int64_t> new_index(events.size(), -1);
  std::vector<FunctionEvent> kept;
  kept.reserve(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (removed[i]) continue;
    new_index[i] = static_cast<std::int64_t>(kept.size());
    kept.push_back(std::move(events[i]));
  }
  auto remap = [&](std::int64_t index) { return new_index[static_cast<std::size_t>(index)]; };
  for (FunctionEvent& event : kept) {
    if (event.parent >= 0) event.parent = remap(event.parent);
    for (std::int64_t& child : event.children) child = remap(child);
    for (std::int64_t& kernel : event.kernels) kernel = remap(kernel);
  }
  events = std::move(kept);
}

// torch's _parse_kineto_results: device work whose external id names a host op becomes one of
// that op's kernels.
void attach_device_events(std::vector<FunctionEvent>& events) {
  const auto device_events = std::count_if(events.begin(), events.end(), [](const FunctionEvent& e) {
    return !is_host_event(e) && e.external_id != 0;
  });
  if (device_events == 0) return;
  std::unordered_map<std::uint64_t, std::size_t> host_by_id;
  host_by_id.reserve(events.size() - static_cast<std::size_t>(device_events));
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (is_host_event(events[i]) && events[i].id != 0) host_by_id.emplace(events[i].id, i);
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (is_host_event(events[i]) || events[i].external_id == 0) continue;
    auto op = host_by_id.find(events[i].external_id);
    if (op != host_by_id.end()) events[op->second].kernels.push_back(static_cast<std::int64_t>(i));
  }
}

// Children come after their parent in (start, -end) order, so one backward pass sees every child
// before its parent.
void compute_times(std::vector<FunctionEvent>& events) {
  for (std::size_t i = events.size(); i-- > 0;) {
    FunctionEvent& event = events[i];
    if (!is_host_event(event)) {
      event.device_time_total_ns = event.duration_ns();
      event.self_device_time_total_ns = event.duration_ns();
      continue;
    }
    event.cpu_time_total_ns = event.duration_ns();
    std::int64_t children_cpu = 0;
    std::int64_t children_device = 0;
    for (std::int64_t child : event.children) {
      children_cpu += events[static_cast<std::size_t>(child)].cpu_time_total_ns;
      children_device += events[static_cast<std::size_t>(child)].device_time_total_ns;
    }
    std::int64_t own_device = 0;
    for (std::int64_t kernel : event.kernels)
      own_device += events[static_cast<std::size_t>(kernel)].duration_ns();
    std::int64_t children_cpu_memory = 0;
    std::int64_t children_device_memory = 0;
    for (std::int64_t child : event.children) {
      children_cpu_memory += events[static_cast<std::size_t>(child)].cpu_memory_usage;
      children_device_memory += events[static_cast<std::size_t>(child)].device_memory_usage;
    }
    event.cpu_memory_usage = event.self_cpu_memory_usage + children_cpu_memory;
    event.device_memory_usage = event.self_device_memory_usage + children_device_memory;
    event.self_cpu_time_total_ns = event.cpu_time_total_ns - children_cpu;
    event.device_time_total_ns = own_device + children_device;
    event.self_device_time_total_ns = own_device;
  }
}

}  // namespace

CollectedTrace build_trace(const Collection& collection, std::vector<ActivityBatch> batches,
                           const TraceWindow& window) {
  CollectedTrace trace;
  trace.window_start_ns = window.start_ns;
  trace.window_end_ns = window.end_ns;
  trace.wall_clock_at_window_start_ns = window.wall_clock_at_start_ns;
  trace.dropped = collection.dropped;
  for (const CollectedThread& thread : collection.threads) {
    trace.threads.push_back({thread.os_thread_id, thread.name});
  }
  auto wanted = [&](bool device) { return device ? window.include_device : window.include_cpu; };

  trace.profile_memory = window.profile_memory || collection.profile_memory;
  std::unordered_map<NameId, std::string_view> names;
  trace.events.reserve(collection.records.size());
  for (const CollectedRecord& collected : collection.records) {
    if (collected.record.kind == EventKind::memory) {
      if (window.include_cpu) trace.memory.push_back(memory_from_record(collected, collection));
      continue;
    }
    if (!wanted(is_device_kind(collected.record.kind))) continue;
    trace.events.push_back(event_from_record(collected, collection, names));
  }
  for (ActivityBatch& batch : batches) {
    for (FunctionEvent& event : batch.events) {
      if (wanted(event.device_type != DeviceType::cpu)) trace.events.push_back(std::move(event));
    }
    std::move(batch.devices.begin(), batch.devices.end(), std::back_inserter(trace.devices));
    std::move(batch.resources.begin(), batch.resources.end(), std::back_inserter(trace.resources));
    if (window.include_cpu) std::move(batch.memory.begin(), batch.memory.end(), std::back_inserter(trace.memory));
    trace.dropped += batch.dropped;
    for (std::string& note : batch.notes) trace.notes.push_back(std::move(note));
  }

  // (start, -end) as torch sorts; on a modeled host clock a scope and the one op inside it can share
  // both ends, so ties go by id: ids are handed out as scopes open, and runtime and device ids come
  // from ranges above every op's, so the enclosing scope comes first and becomes the parent.
  // Sorted as small keys, then moved once: an event is a few hundred bytes, a key 32.
  {
    struct Key {
      std::int64_t start, end;
      std::uint64_t id;
      std::size_t index;
    };
    std::vector<Key> keys(trace.events.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const FunctionEvent& e = trace.events[i];
      keys[i] = {e.start_ns, e.end_ns, e.id, i};
    }
    std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
      if (a.start != b.start) return a.start < b.start;
      if (a.end != b.end) return a.end > b.end;
      if (a.id != b.id) return a.id < b.id;
      return a.index < b.index;  // as a stable sort would
    });
    std::vector<FunctionEvent> sorted;
    sorted.reserve(keys.size());
    for (const Key& k : keys) sorted.push_back(std::move(trace.events[k.index]));
    trace.events = std::move(sorted);
  }
  attach_device_events(trace.events);
  build_cpu_tree(trace.events);
  merge_same_name_children(trace.events);
  std::stable_sort(trace.memory.begin(), trace.memory.end(),
                   [](const MemoryEvent& a, const MemoryEvent& b) { return a.ts_ns < b.ts_ns; });
  attribute_memory(trace.events, trace.memory);
  compute_times(trace.events);
  return trace;
}

}  // namespace sightline::profiler
