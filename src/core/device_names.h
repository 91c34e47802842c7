// The names of the registered device types, kept in the bottom layer so that Device::to_string
// (and every error message that names a device) needs nothing above core. The backend registry
// (backend/registry.cpp) writes a name here when it registers a backend, before the backend's id is
// published; id 0 is always "cpu", the first backend registered.
#pragma once

#include <cstdint>
#include <string_view>

namespace sightline {

void set_device_type_name(std::uint8_t backend, std::string_view name);

}  // namespace sightline
