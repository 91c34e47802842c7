#include "profiler/lane_names.h"

#include <charconv>

#include <fmt/format.h>

namespace sightline::profiler {
namespace {

std::optional<int> number_after(std::string_view text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return std::nullopt;
  text.remove_prefix(prefix.size());
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// Splits off the part after the last '/' (all of `rest` when there is none).
std::string_view take_last(std::string_view& rest) {
  const std::size_t slash = rest.rfind('/');
  if (slash == std::string_view::npos) {
    const std::string_view part = rest;
    rest = {};
    return part;
  }
  const std::string_view part = rest.substr(slash + 1);
  rest = rest.substr(0, slash);
  return part;
}

}  // namespace

std::string_view lane_layer_name(LaneLayer layer) {
  switch (layer) {
    case LaneLayer::framework: return "framework";
    case LaneLayer::runtime: return "runtime";
    case LaneLayer::hardware: return "hardware";
    case LaneLayer::other: return "other";
  }
  return "other";
}

std::string runtime_subsystem(std::string_view device) { return fmt::format("{}{}", device, kRuntimeSuffix); }
std::string hardware_subsystem(std::string_view device) { return fmt::format("{}{}", device, kHardwareSuffix); }
std::string thread_identifier(int index) { return fmt::format("TID:{}", index); }
std::string core_identifier(int core) { return fmt::format("NC:{}", core); }

std::string hardware_lane_name(std::string_view device, int core) {
  return lane_name({}, hardware_subsystem(device), core_identifier(core));
}

std::string collective_lane_name(std::string_view device, int core) {
  return lane_name({}, hardware_subsystem(device), fmt::format("CC:{}", core));
}

std::string lane_name(std::string_view prefix, std::string_view subsystem, std::string_view identifier) {
  if (prefix.empty()) return fmt::format("{}/{}", subsystem, identifier);
  return fmt::format("{}/{}/{}", prefix, subsystem, identifier);
}

LaneName parse_lane_name(std::string_view name) {
  LaneName parts;
  std::string_view rest = name;
  parts.identifier = take_last(rest);
  if (!rest.empty()) parts.subsystem = take_last(rest);
  if (!rest.empty()) parts.pid = take_last(rest);
  parts.instance = rest;
  parts.layer = subsystem_layer(parts.subsystem);
  if (parts.layer == LaneLayer::runtime || parts.layer == LaneLayer::hardware) {
    parts.device = parts.subsystem.substr(0, parts.subsystem.size() - kRuntimeSuffix.size());
  }
  parts.core = number_after(parts.identifier, "NC:");
  if (!parts.core) {
    parts.core = number_after(parts.identifier, "CC:");
    parts.collective = parts.core.has_value();
  }
  parts.thread = number_after(parts.identifier, "TID:");
  return parts;
}

LaneLayer subsystem_layer(std::string_view subsystem) {
  if (subsystem == kFrameworkSubsystem) return LaneLayer::framework;
  static_assert(kRuntimeSuffix.size() == kHardwareSuffix.size());
  if (subsystem.size() <= kRuntimeSuffix.size()) return LaneLayer::other;  // a suffix alone names no device
  if (subsystem.ends_with(kRuntimeSuffix)) return LaneLayer::runtime;
  if (subsystem.ends_with(kHardwareSuffix)) return LaneLayer::hardware;
  return LaneLayer::other;
}

LaneLayer process_layer(std::string_view process_name) {
  const std::size_t slash = process_name.rfind('/');
  return subsystem_layer(slash == std::string_view::npos ? process_name : process_name.substr(slash + 1));
}

}  // namespace sightline::profiler
