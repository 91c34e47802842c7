#include <array>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/device_names.h"
#include "sightline/tensor.h"

namespace sightline {
namespace {

struct Names {
  std::mutex mutex;
  std::array<std::string, kMaxBackends> names{"cpu"};
};

Names& names() {
  static Names n;
  return n;
}

}  // namespace

void set_device_type_name(std::uint8_t backend, std::string_view name) {
  SIGHTLINE_CHECK(backend < kMaxBackends, "device type id {} is out of range (at most {} backends)", backend,
                  kMaxBackends);
  Names& n = names();
  std::lock_guard lock(n.mutex);
  n.names[backend] = std::string(name);
}

Device Device::cpu() { return Device{0, 0}; }

bool Device::is_cpu() const { return backend == 0; }

std::string Device::to_string() const {
  std::string name;
  if (backend < kMaxBackends) {
    Names& n = names();
    std::lock_guard lock(n.mutex);
    name = n.names[backend];
  }
  if (name.empty()) name = fmt::format("backend#{}", backend);  // an id no backend was registered under
  if (is_cpu()) return name;
  return fmt::format("{}:{}", name, index);
}

}  // namespace sightline
