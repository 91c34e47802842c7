#include "sightline/profiler/events.h"

#include "profiler/huge_pages.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <utility>

namespace sightline::profiler {
namespace {

// Interned names by id, looked up once per name (interned_name takes the name table's lock).
class NameCache {
 public:
  std::string_view operator()(NameId id) {
    if (id >= names_.size()) {
      names_.resize(id + 1);
      known_.resize(id + 1, 0);
    }
    if (known_[id] == 0) {
      names_[id] = interned_name(id);
      known_[id] = 1;
    }
    return names_[id];
  }

 private:
  std::vector<std::string_view> names_;
  std::vector<char> known_;
};

void fill_from_record(FunctionEvent& event, const CollectedRecord& collected, const Collection& collection,
                      NameCache& names) {
  const Record& record = collected.record;
  event.id = record.correlation_id;
  event.external_id = record.external_id;
  event.name = names(record.name);
  event.kind = record.kind;
  event.device_type = is_device_kind(record.kind) ? DeviceType::privateuse1 : DeviceType::cpu;
  event.thread = collection.threads[collected.thread].os_thread_id;
  event.device_index = record.device;
  event.resource = record.resource;
  event.start_ns = record.start_ns;
  event.end_ns = record.end_ns;
  if (collected.shapes != 0) event.input_shapes = collection.shapes[collected.shapes - 1];
  if (collected.stack != 0) event.stack = collection.stacks[collected.stack - 1];
  if (record.kind == EventKind::device_memcpy) {
    event.bytes = record.value;
  } else {
    event.flops = record.value;
  }
}

bool is_host_event(const FunctionEvent& event) { return event.device_type == DeviceType::cpu; }

// The sort key of an event: (start, -end, id, place).
struct SortKey {
  std::int64_t start;
  std::int64_t end;
  std::uint64_t id;
  // Where the event comes from: an index into Collection::records, or kBatchEvent | an index into
  // the batch events. Ordered as (records, then each batch's events): the last tie-break.
  std::uint64_t source;
};
constexpr std::uint64_t kBatchEvent = std::uint64_t{1} << 63;

bool key_less(const SortKey& a, const SortKey& b) {
  if (a.start != b.start) return a.start < b.start;
  if (a.end != b.end) return a.end > b.end;
  if (a.id != b.id) return a.id < b.id;
  return a.source < b.source;
}

// Orders one run of keys. A thread's records are appended as scopes end, so nested scopes come
// children first (post-order) and a flat sequence is already in order. Post-order becomes
// (start, -end) order in one pass: a stack of finished subtrees, each a linked list in order; an
// event adopts the subtrees on top of the stack that sort after it, which are its descendants when
// scopes nest. Anything else (partial overlaps, device work reported out of order) fails the final
// check and is sorted. The result is the one sorted order either way, since keys are unique.
void order_run(SortKey* run, std::size_t n, std::vector<SortKey>& scratch) {
  if (std::is_sorted(run, run + n, key_less)) return;
  constexpr std::size_t kNone = SIZE_MAX;
  std::vector<std::size_t> next(n, kNone);
  struct Subtree {
    std::size_t first, last;
  };
  std::vector<Subtree> stack;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t chain_first = kNone, chain_last = kNone;
    while (!stack.empty() && key_less(run[i], run[stack.back().first])) {
      const Subtree top = stack.back();
      stack.pop_back();
      next[top.last] = chain_first;
      chain_first = top.first;
      if (chain_last == kNone) chain_last = top.last;
    }
    next[i] = chain_first;
    stack.push_back({i, chain_last == kNone ? i : chain_last});
  }
  for (std::size_t s = 0; s + 1 < stack.size(); ++s) next[stack[s].last] = stack[s + 1].first;
  scratch.clear();
  scratch.reserve(n);
  for (std::size_t at = stack.empty() ? kNone : stack.front().first; at != kNone; at = next[at]) {
    scratch.push_back(run[at]);
  }
  if (scratch.size() == n && std::is_sorted(scratch.begin(), scratch.end(), key_less)) {
    std::copy(scratch.begin(), scratch.end(), run);
  } else {
    std::sort(run, run + n, key_less);
  }
}

// Orders every run, then merges them pairwise (a few runs: one per thread and per source).
void merge_runs(std::vector<SortKey>& keys, std::vector<std::size_t>& runs) {
  std::vector<SortKey> scratch;
  for (std::size_t r = 0; r + 1 < runs.size(); ++r) order_run(keys.data() + runs[r], runs[r + 1] - runs[r], scratch);
  while (runs.size() > 2) {
    scratch.resize(keys.size());
    std::vector<std::size_t> merged{0};
    for (std::size_t r = 0; r + 1 < runs.size(); r += 2) {
      const std::size_t a = runs[r], b = runs[r + 1];
      const std::size_t c = r + 2 < runs.size() ? runs[r + 2] : b;
      std::merge(keys.begin() + static_cast<std::ptrdiff_t>(a), keys.begin() + static_cast<std::ptrdiff_t>(b),
                 keys.begin() + static_cast<std::ptrdiff_t>(b), keys.begin() + static_cast<std::ptrdiff_t>(c),
                 scratch.begin() + static_cast<std::ptrdiff_t>(a), key_less);
      merged.push_back(c);
      if (c == b) break;
    }
    if (merged.back() != keys.size()) merged.push_back(keys.size());  // not reached: every run merged
    keys.swap(scratch);
    runs = std::move(merged);
  }
}

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

// Built while the events are placed in (start, -end) order, in the same pass, so that a million
// events are walked once rather than once per step.
//
// torch's EventList._populate_cpu_children: per thread, events in (start, -end) order, a stack of
// open candidates; an event is the child of the innermost candidate that fully contains it. Each
// event also gets the times it has without children or kernels (what compute_times gives a leaf),
// so that only the events named in `parents` need more.
struct TreeBuilder {
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> open_by_thread{};
  std::vector<std::int64_t>* open_list = nullptr;
  std::int64_t open_thread = 0;
  std::vector<std::size_t> same_name{};  // events whose parent has their name: merge candidates
  std::vector<std::size_t> parents{};    // events given a child or a kernel (may repeat)
  std::size_t device_events_with_op = 0;

  void add(std::vector<FunctionEvent>& events, std::size_t i) {
    FunctionEvent& event = events[i];
    if (!is_host_event(event)) {
      event.device_time_total_ns = event.duration_ns();
      event.self_device_time_total_ns = event.duration_ns();
      if (event.external_id != 0) ++device_events_with_op;
      return;
    }
    event.cpu_time_total_ns = event.duration_ns();
    event.self_cpu_time_total_ns = event.duration_ns();
    if (open_list == nullptr || event.thread != open_thread) {  // one map lookup per change of thread
      open_list = &open_by_thread[event.thread];
      open_thread = event.thread;
    }
    std::vector<std::int64_t>& open = *open_list;
    while (!open.empty()) {
      FunctionEvent& candidate = events[static_cast<std::size_t>(open.back())];
      if (event.start_ns >= candidate.end_ns || event.end_ns > candidate.end_ns) {
        open.pop_back();
      } else {
        if (candidate.children.empty()) parents.push_back(static_cast<std::size_t>(open.back()));
        candidate.children.push_back(static_cast<std::int64_t>(i));
        event.parent = open.back();
        if (candidate.name == event.name) same_name.push_back(i);
        break;
      }
    }
    open.push_back(static_cast<std::int64_t>(i));
  }
};

// torch's EventList._remove_dup_nodes: an op whose only child has its own name (an op calling its
// own overload) is shown once; the child's children and kernels move up to it. Only the candidates
// (in index order) can merge: a merge gives the removed child's children a parent of the child's
// name, so whether an event has its parent's name never changes. Returns whether any event was
// removed (indices then changed).
bool merge_same_name_children(std::vector<FunctionEvent>& events, const std::vector<std::size_t>& candidates) {
  if (candidates.empty()) return false;
  std::vector<bool> removed(events.size(), false);
  bool changed = true;
  bool any = false;
  while (changed) {
    changed = false;
    for (std::size_t i : candidates) {
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
      any = true;
    }
  }
  if (!any) return false;
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
  return true;
}

// torch's _parse_kineto_results: device work whose external id names a host op becomes one of
// that op's kernels. The ops given kernels are added to `parents`.
void attach_device_events(std::vector<FunctionEvent>& events, std::size_t device_events,
                          std::vector<std::size_t>& parents) {
  if (device_events == 0) return;
  std::unordered_map<std::uint64_t, std::size_t> host_by_id;
  host_by_id.reserve(events.size() - std::min(events.size(), device_events));
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (is_host_event(events[i]) && events[i].id != 0) host_by_id.emplace(events[i].id, i);
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (is_host_event(events[i]) || events[i].external_id == 0) continue;
    auto op = host_by_id.find(events[i].external_id);
    if (op == host_by_id.end()) continue;
    events[op->second].kernels.push_back(static_cast<std::int64_t>(i));
    parents.push_back(op->second);
  }
}

// One host event's times from its children's and kernels' (a step of compute_times).
void compute_host_times(std::vector<FunctionEvent>& events, FunctionEvent& event) {
  event.cpu_time_total_ns = event.duration_ns();
  std::int64_t children_cpu = 0;
  std::int64_t children_device = 0;
  std::int64_t children_cpu_memory = 0;
  std::int64_t children_device_memory = 0;
  for (std::int64_t child : event.children) {
    const FunctionEvent& c = events[static_cast<std::size_t>(child)];
    children_cpu += c.cpu_time_total_ns;
    children_device += c.device_time_total_ns;
    children_cpu_memory += c.cpu_memory_usage;
    children_device_memory += c.device_memory_usage;
  }
  std::int64_t own_device = 0;
  for (std::int64_t kernel : event.kernels) own_device += events[static_cast<std::size_t>(kernel)].duration_ns();
  event.cpu_memory_usage = event.self_cpu_memory_usage + children_cpu_memory;
  event.device_memory_usage = event.self_device_memory_usage + children_device_memory;
  event.self_cpu_time_total_ns = event.cpu_time_total_ns - children_cpu;
  event.device_time_total_ns = own_device + children_device;
  event.self_device_time_total_ns = own_device;
}

// When no event has memory and none was merged away, every event already has its leaf times
// (TreeBuilder) and only the parents need computing: children have larger indices, so going
// through the parents from the last sees every child before its parent.
void compute_parent_times(std::vector<FunctionEvent>& events, std::vector<std::size_t>& parents) {
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  for (std::size_t k = parents.size(); k-- > 0;) compute_host_times(events, events[parents[k]]);
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
    compute_host_times(events, event);
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

  // (start, -end) as torch sorts; on a modeled host clock a scope and the one op inside it can share
  // both ends, so ties go by id: ids are handed out as scopes open, and runtime and device ids come
  // from ranges above every op's, so the enclosing scope comes first and becomes the parent. The
  // last tie-break is the event's place in (records, then each batch's events), as a stable sort.
  auto record_kept = [&](const CollectedRecord& collected) {
    return collected.record.kind != EventKind::memory && wanted(is_device_kind(collected.record.kind));
  };
  auto record_key = [](const CollectedRecord& collected, std::size_t i) {
    const Record& r = collected.record;
    return SortKey{r.start_ns, r.end_ns, r.correlation_id, i};
  };
  // Often (one thread of sequential ops, a trace read back from its file) everything is in order
  // already: then events are built straight from the sources, with no keys at all.
  bool in_order = true;
  std::size_t kept = 0;
  {
    SortKey previous{};
    auto see = [&](const SortKey& key) {
      if (kept != 0 && !key_less(previous, key)) in_order = false;
      previous = key;
      ++kept;
    };
    // The memory records are taken in the same walk over the records (each is read once here).
    for (std::size_t i = 0; i < collection.records.size(); ++i) {
      const CollectedRecord& collected = collection.records[i];
      if (collected.record.kind == EventKind::memory) {
        if (window.include_cpu) trace.memory.push_back(memory_from_record(collected, collection));
      } else if (record_kept(collected)) {
        see(record_key(collected, i));
      }
    }
    std::uint64_t b = 0;
    for (const ActivityBatch& batch : batches) {
      for (const FunctionEvent& event : batch.events) {
        if (wanted(event.device_type != DeviceType::cpu)) see({event.start_ns, event.end_ns, event.id, kBatchEvent | b++});
      }
    }
  }

  NameCache names;
  TreeBuilder tree;
  trace.events.reserve(kept);
  detail::advise_huge_pages(trace.events.data(), kept * sizeof(FunctionEvent));
  auto add_record = [&](const CollectedRecord& collected) {
    fill_from_record(trace.events.emplace_back(), collected, collection, names);
    tree.add(trace.events, trace.events.size() - 1);
  };
  auto add_batch_event = [&](FunctionEvent& event) {
    trace.events.push_back(std::move(event));
    tree.add(trace.events, trace.events.size() - 1);
  };
  if (in_order) {
    for (const CollectedRecord& collected : collection.records) {
      if (record_kept(collected)) add_record(collected);
    }
    for (ActivityBatch& batch : batches) {
      for (FunctionEvent& event : batch.events) {
        if (wanted(event.device_type != DeviceType::cpu)) add_batch_event(event);
      }
    }
  } else {
    // Each thread's records and each batch are ordered on their own as small keys (usually in O(n):
    // see order_run), merged, and only then turned into events, each written once in its place.
    std::vector<SortKey> keys;
    std::vector<std::size_t> runs;  // start of each run in keys; runs.back() == keys.size()
    std::vector<FunctionEvent*> batch_events;
    keys.reserve(kept);
    detail::advise_huge_pages(keys.data(), keys.capacity() * sizeof(SortKey));
    std::uint32_t run_thread = UINT32_MAX;
    for (std::size_t i = 0; i < collection.records.size(); ++i) {
      const CollectedRecord& collected = collection.records[i];
      if (!record_kept(collected)) continue;
      if (collected.thread != run_thread || runs.empty()) {
        runs.push_back(keys.size());
        run_thread = collected.thread;
      }
      keys.push_back(record_key(collected, i));
    }
    for (ActivityBatch& batch : batches) {
      bool run_open = false;
      for (FunctionEvent& event : batch.events) {
        if (!wanted(event.device_type != DeviceType::cpu)) continue;
        if (!run_open) runs.push_back(keys.size());
        run_open = true;
        keys.push_back({event.start_ns, event.end_ns, event.id, kBatchEvent | batch_events.size()});
        batch_events.push_back(&event);
      }
    }
    runs.push_back(keys.size());
    merge_runs(keys, runs);
    for (const SortKey& key : keys) {
      if ((key.source & kBatchEvent) == 0) {
        add_record(collection.records[key.source]);
      } else {
        add_batch_event(*batch_events[key.source & ~kBatchEvent]);
      }
    }
  }
  for (ActivityBatch& batch : batches) {
    std::move(batch.devices.begin(), batch.devices.end(), std::back_inserter(trace.devices));
    std::move(batch.resources.begin(), batch.resources.end(), std::back_inserter(trace.resources));
    if (window.include_cpu) std::move(batch.memory.begin(), batch.memory.end(), std::back_inserter(trace.memory));
    trace.dropped += batch.dropped;
    for (std::string& note : batch.notes) trace.notes.push_back(std::move(note));
    if (batch.distributed) trace.distributed = *batch.distributed;
  }
  attach_device_events(trace.events, tree.device_events_with_op, tree.parents);
  const bool merged = merge_same_name_children(trace.events, tree.same_name);
  std::stable_sort(trace.memory.begin(), trace.memory.end(),
                   [](const MemoryEvent& a, const MemoryEvent& b) { return a.ts_ns < b.ts_ns; });
  attribute_memory(trace.events, trace.memory);
  if (merged || !trace.memory.empty()) {
    compute_times(trace.events);
  } else {
    compute_parent_times(trace.events, tree.parents);
  }
  return trace;
}

}  // namespace sightline::profiler
