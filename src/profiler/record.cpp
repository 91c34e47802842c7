#include "sightline/profiler/record.h"

#include "sightline/host_clock.h"

#include "profiler/huge_pages.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace sightline::profiler {
namespace {

// ---------------------------------------------------------------------------------------------
// Interned names. Id 0 is the empty name, so a zero-initialised record has a valid name.

struct NameTable {
  std::mutex mutex;
  std::deque<std::string> names{std::string()};  // a deque keeps every string at a stable address
  std::unordered_map<std::string_view, NameId> ids{{std::string_view(), 0}};
};

NameTable& name_table() {
  static auto* table = new NameTable();  // leaked: threads may intern during static destruction
  return *table;
}

// ---------------------------------------------------------------------------------------------
// Thread buffers: a singly linked list of chunks per thread. The owning thread appends to the tail
// chunk and publishes its fill count with a release store; the collector reads up to the published
// count. A chunk whose `next` is set is never touched by its owner again, so the collector may free
// it. Each chunk belongs to one session (session_state) and holds at most the records that session's
// budget granted it, which keeps the event cap exact.

constexpr std::uint32_t kChunkCapacity = 1024;
constexpr std::uint64_t kCorrelationBlock = 256;

// Record storage of released chunks, kept for the next chunks: a fresh 64 KiB array costs 16 page
// faults on first touch, several times the cost of recording into it. Up to kPooledArrays are kept.
constexpr std::size_t kPooledArrays = 1024;  // 64 MiB of records

// While a session records, a background thread keeps kPrefaultAhead fresh arrays (2 MiB) in the pool,
// faulted in, so that a session that outgrows what earlier ones gave back takes warm memory instead of
// paying the page faults on the recording thread (about 15 ns a record, half a first session's cost).
// Wall-time work off the recording threads only: it records nothing and moves no timestamp.
constexpr std::size_t kPrefaultAhead = 32;

struct ArrayPool {
  std::mutex mutex;
  std::condition_variable wake;  // the prefault thread waits on it
  std::vector<Record*> free;
  bool prefault = false;         // a session records: keep `free` stocked
  bool thread_started = false;
};

ArrayPool& array_pool() {
  static auto* pool = new ArrayPool();  // leaked: threads may record during static destruction
  return *pool;
}

void prefault_loop(ArrayPool& pool) {
  std::unique_lock lock(pool.mutex);
  for (;;) {
    pool.wake.wait(lock, [&] { return pool.prefault && pool.free.size() < kPrefaultAhead; });
    lock.unlock();
    auto* array = new Record[kChunkCapacity];
    std::memset(static_cast<void*>(array), 0, sizeof(Record) * kChunkCapacity);  // the page faults, here
    lock.lock();
    if (pool.free.size() < kPooledArrays) {
      pool.free.push_back(array);
    } else {
      delete[] array;
    }
  }
}

// Starts the prefault thread on the first session of the process (and again in a forked child, which
// has no thread of the parent's).
void set_prefault(bool on) {
  ArrayPool& pool = array_pool();
  std::lock_guard lock(pool.mutex);
  pool.prefault = on;
  if (on && !pool.thread_started) {
    static std::once_flag fork_handlers;
    std::call_once(fork_handlers, [] {
      // A fork while the prefault thread holds the lock would leave the child's copy locked forever.
      pthread_atfork([] { array_pool().mutex.lock(); }, [] { array_pool().mutex.unlock(); },
                     [] {
                       array_pool().thread_started = false;
                       array_pool().mutex.unlock();
                     });
    });
    try {
      std::thread(prefault_loop, std::ref(pool)).detach();
      pool.thread_started = true;
    } catch (const std::system_error&) {
      // No thread to spare: the recording threads fault their own pages, as without the pool.
    }
  }
  if (on) pool.wake.notify_one();
}

Record* take_array() {
  ArrayPool& pool = array_pool();
  {
    std::lock_guard lock(pool.mutex);
    if (pool.prefault && pool.free.size() <= kPrefaultAhead / 2) pool.wake.notify_one();
    if (!pool.free.empty()) {
      Record* array = pool.free.back();
      pool.free.pop_back();
      return array;
    }
  }
  return new Record[kChunkCapacity];
}

void give_back_array(Record* array) {
  if (array == nullptr) return;
  ArrayPool& pool = array_pool();
  {
    std::lock_guard lock(pool.mutex);
    if (pool.free.size() < kPooledArrays) {
      pool.free.push_back(array);
      return;
    }
  }
  delete[] array;
}

struct Chunk {
  Chunk(std::uint32_t capacity_in, std::uint32_t state)
      : records(capacity_in == 0 ? nullptr : take_array()), capacity(capacity_in), session_state(state) {}
  ~Chunk() { give_back_array(records); }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  Record* records;
  const std::uint32_t capacity;
  const std::uint32_t session_state;
  std::atomic<std::uint32_t> published{0};
  std::atomic<Chunk*> next{nullptr};
};

struct ThreadBuffer {
  ThreadBuffer() : tail(new Chunk(0, 0)), head(tail) {}

  // Owner thread only.
  Chunk* tail;
  std::uint32_t tail_count = 0;
  // Collector only, under the registry lock.
  Chunk* head;
  std::uint32_t head_consumed = 0;
  // Shared.
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<bool> exited{false};
  std::mutex payload_mutex;
  std::vector<std::int64_t> payload_arena;  // guarded by payload_mutex
  // with_stack: each distinct stack once, and its id by its frames joined with '\n' (payload_mutex).
  std::vector<std::vector<std::string>> stacks;
  std::unordered_map<std::string, PayloadId> stack_ids;
  // Written once at registration, before the buffer is published to the registry.
  std::int64_t os_thread_id = 0;
  std::string thread_name;
};

struct Registry {
  std::mutex mutex;
  std::vector<ThreadBuffer*> buffers;  // guarded by mutex
  std::atomic<std::uint64_t> budget_used{0};
  std::atomic<std::uint64_t> budget_limit{0};
  std::atomic<std::uint64_t> dropped_after_thread_exit{0};
};

Registry& registry() {
  static auto* instance = new Registry();  // leaked: threads may still record during exit
  return *instance;
}

std::atomic<bool> g_record_shapes{false};
std::atomic<bool> g_profile_memory{false};
std::atomic<bool> g_with_stack{false};
std::atomic<std::uint64_t> g_next_correlation_id{1};

thread_local ThreadBuffer* tls_buffer = nullptr;
thread_local bool tls_thread_exited = false;
thread_local std::uint64_t tls_current_correlation_id = 0;
thread_local std::uint64_t tls_next_id = 0;
thread_local std::uint64_t tls_id_end = 0;
thread_local std::uint32_t tls_id_session = 0;  // the session epoch the thread's id block belongs to

// Marks the thread's buffer as orphaned when the thread exits; the collector drains and frees it.
struct ThreadExitGuard {
  bool armed = false;
  ~ThreadExitGuard() {
    if (tls_buffer != nullptr) tls_buffer->exited.store(true, std::memory_order_release);
    tls_buffer = nullptr;
    tls_thread_exited = true;
  }
};
thread_local ThreadExitGuard tls_exit_guard;

ThreadBuffer* register_thread() {
  if (tls_thread_exited) return nullptr;
  auto* buffer = new ThreadBuffer();
  buffer->os_thread_id = static_cast<std::int64_t>(::gettid());
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0) buffer->thread_name = name;
  tls_exit_guard.armed = true;  // constructs the guard, so its destructor runs at thread exit
  Registry& reg = registry();
  {
    std::lock_guard lock(reg.mutex);
    reg.buffers.push_back(buffer);
  }
  tls_buffer = buffer;
  return buffer;
}

ThreadBuffer* this_thread_buffer() {
  ThreadBuffer* buffer = tls_buffer;
  return buffer != nullptr ? buffer : register_thread();
}

// Ids restart at 1 in each session, so that a profile's ids depend only on what it recorded.
std::uint64_t next_correlation_id() noexcept {
  const std::uint32_t session = detail::recording_state.load(std::memory_order_relaxed) >> 1;
  if (tls_next_id == tls_id_end || tls_id_session != session) {
    tls_id_session = session;
    tls_next_id = g_next_correlation_id.fetch_add(kCorrelationBlock, std::memory_order_relaxed);
    tls_id_end = tls_next_id + kCorrelationBlock;
  }
  return tls_next_id++;
}

enum class GrowResult { grown, over_cap, stale_session };

// Moves the owner to a fresh chunk for `state`, reserving its capacity from the session budget.
GrowResult grow(ThreadBuffer* buffer, std::uint32_t state) {
  if (detail::recording_state.load(std::memory_order_relaxed) != state) return GrowResult::stale_session;
  Registry& reg = registry();
  const std::uint64_t limit = reg.budget_limit.load(std::memory_order_relaxed);
  std::uint64_t used = reg.budget_used.load(std::memory_order_relaxed);
  std::uint64_t take = 0;
  do {
    if (used >= limit) return GrowResult::over_cap;
    take = std::min<std::uint64_t>(kChunkCapacity, limit - used);
  } while (!reg.budget_used.compare_exchange_weak(used, used + take, std::memory_order_relaxed));
  auto* chunk = new Chunk(static_cast<std::uint32_t>(take), state);
  buffer->tail->next.store(chunk, std::memory_order_release);
  buffer->tail = chunk;
  buffer->tail_count = 0;
  return GrowResult::grown;
}

void append(const Record& record) noexcept {
  ThreadBuffer* buffer = this_thread_buffer();
  if (buffer == nullptr) {
    registry().dropped_after_thread_exit.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Chunk* chunk = buffer->tail;
  if (buffer->tail_count == chunk->capacity || chunk->session_state != record.session_state) {
    const GrowResult result = grow(buffer, record.session_state);
    if (result == GrowResult::over_cap) buffer->dropped.fetch_add(1, std::memory_order_relaxed);
    if (result != GrowResult::grown) return;
    chunk = buffer->tail;
  }
  chunk->records[buffer->tail_count] = record;
  chunk->published.store(++buffer->tail_count, std::memory_order_release);
}

// Decodes one payload written by record_shapes_payload: [inputs, (rank, dims...)...]. Returns false
// when the id does not point at a whole payload (it belongs to a discarded session).
bool decode_shapes(const std::vector<std::int64_t>& arena, PayloadId id,
                   std::vector<std::vector<std::int64_t>>& out) {
  std::size_t at = id - 1;
  if (id == 0 || at >= arena.size()) return false;
  const std::int64_t inputs = arena[at++];
  for (std::int64_t i = 0; i < inputs; ++i) {
    if (at >= arena.size()) return false;
    const auto rank = static_cast<std::size_t>(arena[at++]);
    if (rank > arena.size() - at) return false;
    out.emplace_back(arena.begin() + static_cast<std::ptrdiff_t>(at),
                     arena.begin() + static_cast<std::ptrdiff_t>(at + rank));
    at += rank;
  }
  return true;
}

// Walks every buffer, frees finished chunks and buffers of exited threads, and hands the records
// of session `wanted_state` to `out` (nullptr: discard them). Registry lock held by the caller.
void drain_locked(Registry& reg, std::uint32_t wanted_state, Collection* out) {
  if (out != nullptr) {
    // Sized once: a million records are 80 MB, and growing by doubling would copy and fault in
    // most of it again. Owners may publish more meanwhile; this is only the first guess.
    std::size_t pending = 0;
    for (ThreadBuffer* buffer : reg.buffers) {
      std::uint32_t consumed = buffer->head_consumed;
      for (Chunk* chunk = buffer->head; chunk != nullptr; chunk = chunk->next.load(std::memory_order_acquire)) {
        const std::uint32_t published = chunk->published.load(std::memory_order_acquire);
        if (chunk->session_state == wanted_state && published > consumed) pending += published - consumed;
        consumed = 0;
      }
    }
    out->records.reserve(out->records.size() + pending);
    detail::advise_huge_pages(out->records.data(), out->records.capacity() * sizeof(CollectedRecord));
  }
  std::vector<ThreadBuffer*> alive;
  for (ThreadBuffer* buffer : reg.buffers) {
    const bool exited = buffer->exited.load(std::memory_order_acquire);
    const auto thread_index = out != nullptr ? static_cast<std::uint32_t>(out->threads.size()) : 0;
    if (out != nullptr) out->threads.push_back({buffer->os_thread_id, buffer->thread_name});
    const std::size_t first_record = out != nullptr ? out->records.size() : 0;
    for (;;) {
      Chunk* chunk = buffer->head;
      Chunk* next = chunk->next.load(std::memory_order_acquire);  // read before `published`
      const std::uint32_t published = chunk->published.load(std::memory_order_acquire);
      if (out != nullptr && chunk->session_state == wanted_state) {
        for (std::uint32_t i = buffer->head_consumed; i < published; ++i) {
          out->records.push_back({chunk->records[i], thread_index, 0, 0, 0});
        }
      }
      buffer->head_consumed = published;
      if (next == nullptr) break;
      delete chunk;
      buffer->head = next;
      buffer->head_consumed = 0;
    }
    {
      std::lock_guard lock(buffer->payload_mutex);
      if (out != nullptr) {
        // The thread's stacks that this session's records use, each copied once.
        std::vector<std::uint32_t> stack_index(buffer->stacks.size(), 0);
        for (std::size_t i = first_record; i < out->records.size(); ++i) {
          CollectedRecord& collected = out->records[i];
          if (const PayloadId stack = collected.record.stack; stack != 0 && stack <= stack_index.size()) {
            if (stack_index[stack - 1] == 0) {
              out->stacks.push_back(buffer->stacks[stack - 1]);
              stack_index[stack - 1] = static_cast<std::uint32_t>(out->stacks.size());
            }
            collected.stack = stack_index[stack - 1];
          }
          if (collected.record.kind == EventKind::memory) {
            const std::size_t at = collected.record.payload - 1;
            if (collected.record.payload != 0 && at + 1 < buffer->payload_arena.size()) {
              out->memory_totals.push_back({buffer->payload_arena[at], buffer->payload_arena[at + 1]});
              collected.memory = static_cast<std::uint32_t>(out->memory_totals.size());
            }
            continue;
          }
          std::vector<std::vector<std::int64_t>> shapes;
          if (collected.record.payload != 0 &&
              decode_shapes(buffer->payload_arena, collected.record.payload, shapes)) {
            out->shapes.push_back(std::move(shapes));
            collected.shapes = static_cast<std::uint32_t>(out->shapes.size());
          }
        }
      }
      buffer->payload_arena.clear();
      buffer->stacks.clear();
      buffer->stack_ids.clear();
    }
    const std::uint64_t dropped = buffer->dropped.exchange(0, std::memory_order_relaxed);
    if (out != nullptr) out->dropped += dropped;
    if (exited) {
      delete buffer->head;
      delete buffer;
    } else {
      alive.push_back(buffer);
    }
  }
  reg.buffers = std::move(alive);
}

}  // namespace

NameId intern(std::string_view name) {
  NameTable& table = name_table();
  std::lock_guard lock(table.mutex);
  if (auto found = table.ids.find(name); found != table.ids.end()) return found->second;
  const auto id = static_cast<NameId>(table.names.size());
  const std::string& stored = table.names.emplace_back(name);
  table.ids.emplace(std::string_view(stored), id);
  return id;
}

std::string_view interned_name(NameId id) {
  NameTable& table = name_table();
  std::lock_guard lock(table.mutex);
  if (id >= table.names.size()) return {};
  return table.names[id];
}

std::int64_t now_ns() noexcept { return host_clock::now_ns(); }

ScopeHandle record_scope_begin(EventKind kind, NameId name, PayloadId payload, std::uint64_t value) noexcept {
  ScopeHandle scope;
  const std::uint32_t state = detail::recording_state.load(std::memory_order_relaxed);
  if ((state & 1u) == 0) return scope;
  scope.kind = kind;
  scope.name = name;
  scope.payload = payload;
  scope.value = value;
  scope.session_state = state;
  scope.correlation_id = next_correlation_id();
  if (opens_correlation(kind)) {
    scope.previous_correlation_id = tls_current_correlation_id;
    scope.external_id = scope.correlation_id;
    tls_current_correlation_id = scope.correlation_id;
  } else {
    scope.external_id = tls_current_correlation_id;
  }
  scope.start_ns = now_ns();
  return scope;
}

ScopeHandle record_op_begin(NameId name, PayloadId payload, std::uint64_t flops) noexcept {
  return record_scope_begin(EventKind::cpu_op, name, payload, flops);
}

void record_scope_end(ScopeHandle& scope) noexcept {
  if (!scope.active()) return;
  const std::int64_t end = now_ns();
  if (opens_correlation(scope.kind)) tls_current_correlation_id = scope.previous_correlation_id;
  if (detail::recording_state.load(std::memory_order_relaxed) == scope.session_state) {
    Record record{};
    record.start_ns = scope.start_ns;
    record.end_ns = end;
    record.correlation_id = scope.correlation_id;
    record.external_id = scope.external_id;
    record.value = scope.value;
    record.name = scope.name;
    record.payload = scope.payload;
    record.stack = scope.stack;
    record.device = -1;
    record.kind = scope.kind;
    record.session_state = scope.session_state;
    append(record);
  }
  scope.correlation_id = 0;
}

std::uint64_t current_correlation_id() noexcept { return tls_current_correlation_id; }

std::uint64_t new_correlation_id() noexcept { return recording_enabled() ? next_correlation_id() : 0; }

void record_complete(const CompleteEvent& event) noexcept {
  const std::uint32_t state = detail::recording_state.load(std::memory_order_relaxed);
  if ((state & 1u) == 0) return;
  Record record{};
  record.start_ns = event.start_ns;
  record.end_ns = event.end_ns;
  record.correlation_id = event.correlation_id;
  record.external_id = event.external_id;
  record.value = event.value;
  record.name = event.name;
  record.resource = event.resource;
  record.device = event.device;
  record.kind = event.kind;
  record.session_state = state;
  append(record);
}

bool shapes_requested() noexcept {
  return recording_enabled() && g_record_shapes.load(std::memory_order_relaxed);
}

PayloadId record_shapes_payload(std::span<const ShapeView> inputs) {
  if (!shapes_requested()) return 0;
  ThreadBuffer* buffer = this_thread_buffer();
  if (buffer == nullptr) return 0;
  std::lock_guard lock(buffer->payload_mutex);
  std::vector<std::int64_t>& arena = buffer->payload_arena;
  const std::size_t offset = arena.size();
  arena.push_back(static_cast<std::int64_t>(inputs.size()));
  for (const ShapeView& dims : inputs) {
    arena.push_back(static_cast<std::int64_t>(dims.size()));
    arena.insert(arena.end(), dims.begin(), dims.end());
  }
  return static_cast<PayloadId>(offset + 1);
}

bool stacks_requested() noexcept {
  return recording_enabled() && g_with_stack.load(std::memory_order_relaxed);
}

PayloadId record_stack_payload(std::span<const std::string> frames) {
  if (frames.empty() || !stacks_requested()) return 0;
  ThreadBuffer* buffer = this_thread_buffer();
  if (buffer == nullptr) return 0;
  std::string key;
  for (const std::string& frame : frames) {
    key += frame;
    key += '\n';
  }
  std::lock_guard lock(buffer->payload_mutex);
  const auto [found, inserted] = buffer->stack_ids.try_emplace(std::move(key), 0);
  if (inserted) {
    buffer->stacks.emplace_back(frames.begin(), frames.end());
    found->second = static_cast<PayloadId>(buffer->stacks.size());
  }
  return found->second;
}

bool memory_requested() noexcept {
  return recording_enabled() && g_profile_memory.load(std::memory_order_relaxed);
}

void record_memory(std::int16_t device, std::uint64_t address, std::int64_t bytes, std::int64_t total_allocated,
                   std::int64_t total_reserved) noexcept {
  const std::uint32_t state = detail::recording_state.load(std::memory_order_relaxed);
  if ((state & 1u) == 0 || !g_profile_memory.load(std::memory_order_relaxed)) return;
  static const NameId memory_name = intern("[memory]");
  ThreadBuffer* buffer = this_thread_buffer();
  if (buffer == nullptr) {
    registry().dropped_after_thread_exit.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  PayloadId payload = 0;
  try {
    std::lock_guard lock(buffer->payload_mutex);
    std::vector<std::int64_t>& arena = buffer->payload_arena;
    payload = static_cast<PayloadId>(arena.size() + 1);
    arena.push_back(total_allocated);
    arena.push_back(total_reserved);
  } catch (...) {
    buffer->dropped.fetch_add(1, std::memory_order_relaxed);  // out of memory for the side table
    return;
  }
  Record record{};
  record.start_ns = record.end_ns = now_ns();
  record.correlation_id = address;
  record.external_id = tls_current_correlation_id;
  record.value = static_cast<std::uint64_t>(bytes);
  record.name = memory_name;
  record.payload = payload;
  record.device = device;
  record.kind = EventKind::memory;
  record.session_state = state;
  append(record);
}

void recording_start(const RecordingOptions& options) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  drain_locked(reg, 0, nullptr);
  reg.budget_used.store(0, std::memory_order_relaxed);
  reg.budget_limit.store(options.max_events, std::memory_order_relaxed);
  reg.dropped_after_thread_exit.store(0, std::memory_order_relaxed);
  g_record_shapes.store(options.record_shapes, std::memory_order_relaxed);
  g_profile_memory.store(options.profile_memory, std::memory_order_relaxed);
  g_with_stack.store(options.with_stack, std::memory_order_relaxed);
  set_prefault(true);
  const std::uint32_t epoch = (detail::recording_state.load(std::memory_order_relaxed) >> 1) + 1;
  g_next_correlation_id.store(1, std::memory_order_relaxed);
  detail::recording_state.store((epoch << 1) | 1u, std::memory_order_release);
}

void recording_stop() {
  const std::uint32_t state = detail::recording_state.load(std::memory_order_relaxed);
  detail::recording_state.store(state & ~1u, std::memory_order_release);
  set_prefault(false);
}

Collection recording_collect() {
  Registry& reg = registry();
  Collection out;
  std::lock_guard lock(reg.mutex);
  const std::uint32_t wanted_state = detail::recording_state.load(std::memory_order_relaxed) | 1u;
  drain_locked(reg, wanted_state, &out);
  out.profile_memory = g_profile_memory.load(std::memory_order_relaxed);
  out.dropped += reg.dropped_after_thread_exit.exchange(0, std::memory_order_relaxed);
  return out;
}

}  // namespace sightline::profiler
