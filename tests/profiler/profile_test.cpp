// The profile session: schedule-driven traces, on_trace_ready, step markers, misuse errors, and
// device events from an activity source.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sightline/host_clock.h"
#include "sightline/profiler/profile.h"
#include "sightline/error.h"

namespace sightline::profiler {
namespace {

// An op with 1 us of host work on the (modeled) host clock, as dispatch would charge it.
void fake_op(const char* name) {
  ScopeHandle op = record_op_begin(intern(name));
  host_clock::advance(1000);
  record_op_end(op);
}

std::vector<std::string> event_names(const CollectedTrace& trace) {
  std::vector<std::string> names;
  for (const FunctionEvent& event : trace.events) names.push_back(event.name);
  return names;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(profiler_profile, misuse_is_a_clear_error) {
  profile prof;
  EXPECT_THROW(prof.step(), Error);
  EXPECT_THROW(prof.stop(), Error);
  EXPECT_THROW((void)prof.key_averages(), Error);
  prof.start();
  EXPECT_THROW(prof.start(), Error);
  profile other;
  EXPECT_THROW(other.start(), Error);
  prof.stop();
  EXPECT_THROW(prof.step(), Error);
  EXPECT_THROW(profile({.activities = {}}), Error);
}

TEST(profiler_profile, trace_ready_fires_when_leaving_record_and_save) {
  std::vector<std::int64_t> fired_at_step;
  std::vector<std::vector<std::string>> traces;
  profile prof({.schedule = schedule({.wait = 1, .warmup = 1, .active = 2, .repeat = 1}),
                .on_trace_ready = [&](profile& p) {
                  fired_at_step.push_back(p.step_num());
                  traces.push_back(event_names(p.trace()));
                }});
  prof.start();
  for (int step = 0; step < 6; ++step) {
    fake_op(("op_at_step_" + std::to_string(step)).c_str());
    prof.step();
  }
  prof.stop();
  ASSERT_EQ(fired_at_step, (std::vector<std::int64_t>{4}));  // inside the step() that left step 3
  const std::vector<std::string>& names = traces[0];
  EXPECT_FALSE(contains(names, "op_at_step_1"));  // warmup: not kept
  EXPECT_TRUE(contains(names, "op_at_step_2"));
  EXPECT_TRUE(contains(names, "op_at_step_3"));
  EXPECT_FALSE(contains(names, "op_at_step_4"));
  EXPECT_TRUE(contains(names, "ProfilerStep#2"));
  EXPECT_TRUE(contains(names, "ProfilerStep#3"));
  EXPECT_FALSE(contains(names, "ProfilerStep#1"));
  const std::string table = prof.key_averages().table("count", -1);
  EXPECT_NE(table.find("ProfilerStep*"), std::string::npos);
}

TEST(profiler_profile, repeat_fires_once_per_cycle_and_keeps_the_last) {
  int fired = 0;
  profile prof({.schedule = schedule({.wait = 0, .warmup = 1, .active = 1, .repeat = 2}),
                .on_trace_ready = [&](profile&) { ++fired; }});
  prof.start();
  for (int step = 0; step < 6; ++step) {
    fake_op(("cycle_op_" + std::to_string(step)).c_str());
    prof.step();
  }
  prof.stop();
  EXPECT_EQ(fired, 2);
  const std::vector<std::string> names = event_names(prof.trace());
  EXPECT_TRUE(contains(names, "cycle_op_3"));
  EXPECT_FALSE(contains(names, "cycle_op_1"));
}

TEST(profiler_profile, without_schedule_records_until_stop_without_step_markers) {
  int fired = 0;
  {
    profile prof({.on_trace_ready = [&](profile& p) {
      ++fired;
      EXPECT_FALSE(contains(event_names(p.trace()), "ProfilerStep#0"));
      EXPECT_TRUE(contains(event_names(p.trace()), "aten::exp"));
    }});
    prof.start();
    fake_op("aten::exp");
    prof.step();
  }  // the destructor stops it
  EXPECT_EQ(fired, 1);
}

TEST(profiler_profile, record_function_nests_ops_and_shapes_group_rows) {
  profile prof({.record_shapes = true});
  prof.start();
  {
    record_function scope("model_inference");
    for (int i = 0; i < 3; ++i) {
      const std::vector<std::int64_t> dims = {i < 2 ? 4 : 8, 4};
      const std::vector<ShapeView> inputs = {ShapeView(dims), ShapeView(dims)};
      ScopeHandle op = record_op_begin(intern("aten::mul"), record_shapes_payload(inputs));
      host_clock::advance(1000);
      record_op_end(op);
    }
  }
  prof.stop();
  const CollectedTrace& trace = prof.trace();
  ASSERT_EQ(trace.events.size(), 4u);
  EXPECT_EQ(trace.events[0].name, "model_inference");
  EXPECT_EQ(trace.events[0].kind, EventKind::user_annotation);
  EXPECT_EQ(trace.events[0].children.size(), 3u);
  EXPECT_EQ(trace.events[1].parent, 0);
  EXPECT_EQ(trace.events[0].self_cpu_time_total_ns,
            trace.events[0].cpu_time_total_ns - trace.events[1].cpu_time_total_ns -
                trace.events[2].cpu_time_total_ns - trace.events[3].cpu_time_total_ns);
  EXPECT_EQ(prof.key_averages(false).rows().size(), 2u);
  const KeyAverages grouped = prof.key_averages(true);
  EXPECT_EQ(grouped.rows().size(), 3u);
  EXPECT_NE(grouped.table().find("[[4, 4], [4, 4]]"), std::string::npos);
}

// A device backend in miniature: it is told when the trace starts and stops, and hands over one
// execution per launch it saw, linked to the launching op.
struct FakeDevice {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> launches;  // (runtime correlation, op id)
  int started = 0;
  int stopped = 0;
};

class FakeDeviceSource final : public ActivitySource {
 public:
  explicit FakeDeviceSource(FakeDevice& device) : device_(device) {}
  std::string_view name() const override { return "fake_device"; }
  void start() override { ++device_.started; }
  void stop() override { ++device_.stopped; }
  ActivityBatch collect() override {
    ActivityBatch batch;
    std::int64_t t = now_ns();
    for (const auto& [correlation, op] : device_.launches) {
      FunctionEvent event;
      event.name = "nc_exec_running";
      event.kind = EventKind::device_exec;
      event.device_type = DeviceType::privateuse1;
      event.device_index = 0;
      event.id = correlation;
      event.external_id = op;
      event.start_ns = t;
      event.end_ns = t + 5000;
      t += 6000;
      batch.events.push_back(event);
    }
    batch.devices.push_back({0, "NC 0", "NEURON 0", 5000000});
    return batch;
  }

 private:
  FakeDevice& device_;
};

TEST(profiler_profile, activity_source_events_are_attributed_to_their_op) {
  FakeDevice device;
  const ActivitySourceRegistration registration = register_activity_source(
      {"fake_device", ProfilerActivity::PrivateUse1,
       [&device](const ActivitySourceConfig&) { return std::make_unique<FakeDeviceSource>(device); }});
  EXPECT_THROW(register_activity_source({"fake_device", ProfilerActivity::PrivateUse1,
                                         [](const ActivitySourceConfig&) { return nullptr; }}),
               Error);
  rename_privateuse1_backend("neuron");
  profile prof;
  prof.start();
  for (int i = 0; i < 3; ++i) {
    ScopeHandle op = record_op_begin(intern("aten::mul"));
    ScopeHandle launch = record_scope_begin(EventKind::runtime, intern("nrta_execute_schedule"));
    device.launches.emplace_back(launch.correlation_id, current_correlation_id());
    record_scope_end(launch);
    record_op_end(op);
  }
  prof.stop();
  unregister_activity_source(registration);
  EXPECT_EQ(device.started, 1);
  EXPECT_EQ(device.stopped, 1);

  const KeyAverages averages = prof.key_averages();
  const std::string table = averages.table("self_neuron_time_total", -1);
  EXPECT_NE(table.find("Self NEURON time total: 15.000us"), std::string::npos) << table;
  for (const FunctionEventAvg& row : averages.rows()) {
    if (row.key == "aten::mul") {
      EXPECT_EQ(row.self_device_time_total_ns, 15'000);
    }
    if (row.key == "nrta_execute_schedule") {
      EXPECT_EQ(row.self_device_time_total_ns, 0);
    }
  }

  const std::filesystem::path path = std::filesystem::temp_directory_path() / "sightline_profile_trace.json";
  prof.export_chrome_trace(path.string());
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  int flows = 0;
  for (const auto& event : trace["traceEvents"]) flows += event["ph"] == "f" ? 1 : 0;
  EXPECT_EQ(flows, 3);
  std::filesystem::remove(path);
}

TEST(profiler_profile, device_only_activity_keeps_device_events) {
  profile prof({.activities = {ProfilerActivity::PrivateUse1}});
  prof.start();
  fake_op("aten::sub");
  record_complete({.name = intern("nc_exec_running"),
                   .kind = EventKind::device_exec,
                   .device = 0,
                   .start_ns = now_ns(),
                   .end_ns = now_ns() + 10});
  prof.stop();
  const std::vector<std::string> names = event_names(prof.trace());
  EXPECT_EQ(names, (std::vector<std::string>{"nc_exec_running"}));
}

}  // namespace
}  // namespace sightline::profiler
