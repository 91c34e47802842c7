#include <mutex>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/device_names.h"

namespace sightline {
namespace {

// Backends are registered once and never removed, so readers index `slots` without a lock once
// they have seen `count` (release/acquire).
struct Registry {
  std::array<std::unique_ptr<Backend>, kMaxBackends> slots;
  std::atomic<size_t> count{0};
  std::mutex mutex;  // serializes registration
};

Registry& raw_registry() {
  static Registry registry;
  return registry;
}

uint8_t add_backend(std::unique_ptr<Backend> b);

using BackendFactory = std::unique_ptr<Backend> (*)();

// Factories of backends linked into the program (neuron's registers from its own layer at static
// initialization) that wait for the registry's first use. Guarded by `mutex`; `started` turns true
// once the registry has been initialized, after which a factory runs at once.
struct Pending {
  std::mutex mutex;
  std::vector<BackendFactory> factories;
  bool started = false;
};

Pending& pending() {
  static Pending p;
  return p;
}

// On first use: cpu first (so that Device::cpu() is backend id 0), then every factory registered
// before this point, in registration order.
Registry& registry() {
  static const bool initialized = [] {
    add_backend(make_cpu_backend());
    std::vector<BackendFactory> factories;
    {
      Pending& p = pending();
      std::lock_guard lock(p.mutex);
      factories.swap(p.factories);
      p.started = true;
    }
    for (BackendFactory factory : factories) add_backend(factory());
    return true;
  }();
  (void)initialized;
  return raw_registry();
}

uint8_t add_backend(std::unique_ptr<Backend> b) {
  SIGHTLINE_CHECK(b != nullptr, "register_backend: null backend");
  SIGHTLINE_CHECK(b->interface_version() == Backend::kInterfaceVersion,
                  "register_backend: backend '{}' implements interface version {}, this library has version {}; "
                  "rebuild it against this sightline", b->name(), b->interface_version(), Backend::kInterfaceVersion);
  Registry& r = raw_registry();
  std::lock_guard lock(r.mutex);
  const size_t n = r.count.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    SIGHTLINE_CHECK(r.slots[i]->name() != b->name(), "register_backend: a backend named '{}' is already registered",
                    b->name());
  }
  SIGHTLINE_CHECK(n < kMaxBackends, "register_backend: at most {} backends can be registered", kMaxBackends);
  set_device_type_name(static_cast<uint8_t>(n), b->name());
  r.slots[n] = std::move(b);
  r.count.store(n + 1, std::memory_order_release);
  return static_cast<uint8_t>(n);
}

}  // namespace

uint8_t register_backend(std::unique_ptr<Backend> b) {
  registry();
  return add_backend(std::move(b));
}

void register_backend_factory(BackendFactory factory) {
  SIGHTLINE_CHECK(factory != nullptr, "register_backend_factory: null factory");
  {
    Pending& p = pending();
    std::lock_guard lock(p.mutex);
    if (!p.started) {
      p.factories.push_back(factory);
      return;
    }
  }
  register_backend(factory());
}

Backend& backend(uint8_t id) {
  Registry& r = registry();
  SIGHTLINE_CHECK(id < r.count.load(std::memory_order_acquire), "no backend with id {} is registered", id);
  return *r.slots[id];
}

Backend* find_backend(std::string_view name) {
  Registry& r = registry();
  const size_t n = r.count.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (r.slots[i]->name() == name) return r.slots[i].get();
  }
  return nullptr;
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::vector<std::string> names;
  const size_t n = r.count.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) names.push_back(r.slots[i]->name());
  return names;
}

void synchronize(Device device) { backend(device.backend).synchronize(device); }

// ---- Device::parse: names are looked up in the registry (core keeps a copy for to_string) ----

Device Device::parse(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    SIGHTLINE_CHECK(!digits.empty() && digits.size() <= 4 &&
                        digits.find_first_not_of("0123456789") == std::string_view::npos,
                    "invalid device '{}': the index after ':' must be a number, as in 'neuron:0'", text);
    index = std::stoi(std::string(digits));
  }
  Registry& r = registry();
  const size_t n = r.count.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    if (r.slots[i]->name() != name) continue;
    const int count = r.slots[i]->device_count();
    SIGHTLINE_CHECK(index < count, "invalid device '{}': backend '{}' has {} device(s), valid indices are 0..{}", text,
                    name, count, count - 1);
    return Device{static_cast<uint8_t>(i), static_cast<int16_t>(index)};
  }
  fail("unknown device '{}'; registered backends: {}", text, fmt::join(backend_names(), ", "));
}

}  // namespace sightline
