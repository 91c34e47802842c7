#include "sightline/profiler/activity.h"

#include <algorithm>
#include <mutex>

#include "sightline/error.h"

namespace sightline::profiler {
namespace {

struct SourceRegistry {
  std::mutex mutex;
  std::uint64_t next_id = 1;
  std::vector<std::pair<std::uint64_t, ActivitySourceSpec>> specs;
  std::string backend_name = "privateuseone";
};

SourceRegistry& source_registry() {
  static auto* registry = new SourceRegistry();  // leaked: registrations run from static constructors
  return *registry;
}

}  // namespace

ActivitySourceRegistration register_activity_source(ActivitySourceSpec spec) {
  SIGHTLINE_CHECK(!spec.name.empty(), "an activity source needs a name");
  SIGHTLINE_CHECK(static_cast<bool>(spec.factory), "activity source '{}' has no factory", spec.name);
  SourceRegistry& registry = source_registry();
  std::lock_guard lock(registry.mutex);
  for (const auto& [id, existing] : registry.specs) {
    SIGHTLINE_CHECK(existing.name != spec.name,
                    "activity source '{}' is already registered; unregister it before registering it again",
                    spec.name);
  }
  const std::uint64_t id = registry.next_id++;
  registry.specs.emplace_back(id, std::move(spec));
  return {id};
}

void unregister_activity_source(ActivitySourceRegistration registration) {
  SourceRegistry& registry = source_registry();
  std::lock_guard lock(registry.mutex);
  std::erase_if(registry.specs, [&](const auto& entry) { return entry.first == registration.id; });
}

std::vector<std::unique_ptr<ActivitySource>> create_activity_sources(const ActivitySourceConfig& config) {
  std::vector<ActivitySourceFactory> factories;
  {
    SourceRegistry& registry = source_registry();
    std::lock_guard lock(registry.mutex);
    for (const auto& [id, spec] : registry.specs) {
      const auto& wanted = config.activities;
      if (std::find(wanted.begin(), wanted.end(), spec.activity) != wanted.end())
        factories.push_back(spec.factory);
    }
  }
  // Factories run outside the lock: they may take their own locks or register other sources.
  std::vector<std::unique_ptr<ActivitySource>> sources;
  for (const ActivitySourceFactory& factory : factories) {
    if (auto source = factory(config)) sources.push_back(std::move(source));
  }
  return sources;
}

void rename_privateuse1_backend(std::string name) {
  SIGHTLINE_CHECK(!name.empty(), "the PrivateUse1 backend name must not be empty");
  SourceRegistry& registry = source_registry();
  std::lock_guard lock(registry.mutex);
  registry.backend_name = std::move(name);
}

std::string privateuse1_backend_name() {
  SourceRegistry& registry = source_registry();
  std::lock_guard lock(registry.mutex);
  return registry.backend_name;
}

}  // namespace sightline::profiler
