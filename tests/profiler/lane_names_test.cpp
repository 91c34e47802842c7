// Lane names: what the writers spell, the reader takes apart (profiler/lane_names.h).
#include <gtest/gtest.h>

#include "profiler/lane_names.h"

namespace sightline::profiler {
namespace {

TEST(profiler_lane_names, writers_and_the_reader_agree) {
  const std::string framework = lane_name("host/4242", kFrameworkSubsystem, thread_identifier(3));
  EXPECT_EQ(framework, "host/4242/framework/TID:3");
  LaneName parts = parse_lane_name(framework);
  EXPECT_EQ(parts.instance, "host");
  EXPECT_EQ(parts.pid, "4242");
  EXPECT_EQ(parts.subsystem, "framework");
  EXPECT_EQ(parts.identifier, "TID:3");
  EXPECT_EQ(parts.layer, LaneLayer::framework);
  EXPECT_EQ(parts.thread, 3);
  EXPECT_FALSE(parts.core);

  const std::string runtime = lane_name("host/4242", runtime_subsystem("neuron"), core_identifier(1));
  parts = parse_lane_name(runtime);
  EXPECT_EQ(parts.layer, LaneLayer::runtime);
  EXPECT_EQ(parts.device, "neuron");
  EXPECT_EQ(parts.core, 1);

  const std::string device = hardware_lane_name("neuron", 7);
  EXPECT_EQ(device, "neuron_hw/NC:7");
  EXPECT_NE(device.find(kHardwareLaneMark), std::string::npos);
  parts = parse_lane_name(device);
  EXPECT_EQ(parts.layer, LaneLayer::hardware);
  EXPECT_EQ(parts.device, "neuron");
  EXPECT_EQ(parts.core, 7);
  EXPECT_EQ(parts.pid, "");
  EXPECT_EQ(lane_layer_name(parts.layer), "hardware");
  EXPECT_EQ(process_layer("host/4242/neuron_rt"), LaneLayer::runtime);
  EXPECT_EQ(process_layer("host/4242/framework"), LaneLayer::framework);
  EXPECT_EQ(process_layer("neuron_hw"), LaneLayer::hardware);
}

TEST(profiler_lane_names, an_instance_may_hold_slashes_and_odd_names_are_other) {
  const LaneName parts = parse_lane_name("cluster/node-3/99/neuron_hw/NC:0");
  EXPECT_EQ(parts.instance, "cluster/node-3");
  EXPECT_EQ(parts.pid, "99");
  EXPECT_EQ(parts.layer, LaneLayer::hardware);
  // A suffix alone names no device; an identifier that is not NC:<number> names no core.
  for (const char* name : {"", "x", "_hw/NC:0", "a/b/c/_rt/NC:1"}) EXPECT_EQ(parse_lane_name(name).layer, LaneLayer::other) << name;
  for (const char* name : {"host/1/neuron_hw/NC:", "host/1/neuron_hw/NC:x", "host/1/neuron_hw/NC:1x"}) {
    EXPECT_EQ(parse_lane_name(name).layer, LaneLayer::hardware) << name;
    EXPECT_FALSE(parse_lane_name(name).core) << name;
  }
}

}  // namespace
}  // namespace sightline::profiler
