// profile_memory: [memory] records, their attribution to ops, the memory columns of the table (byte
// for byte), the trace's [memory] events and their round trip, and real tensors on cpu and neuron.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/trace_json.h"
#include "neuron/neuron.h"
#include "profiler/chrome_trace.h"
#include "sightline/profiler/key_averages.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"
#include "golden.h"
#include "synthetic.h"

namespace sightline::profiler {
namespace {

using testing::device_event;
using testing::expect_golden;
using testing::read_golden;
using testing::host_event;
using testing::kUs;

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;

MemoryEvent memory_at(std::int64_t ts_us, std::int64_t bytes, int device = -1, std::uint64_t address = 0x1000) {
  MemoryEvent memory;
  memory.ts_ns = ts_us * kUs;
  memory.thread = 1;
  memory.device_index = device;
  memory.address = address;
  memory.bytes = bytes;
  memory.total_allocated = memory.total_reserved = std::max<std::int64_t>(bytes, 0);
  return memory;
}

CollectedTrace trace_with_memory(std::vector<FunctionEvent> events, std::vector<MemoryEvent> memory) {
  ActivityBatch batch;
  batch.events = std::move(events);
  batch.memory = std::move(memory);
  std::vector<ActivityBatch> batches;
  batches.push_back(std::move(batch));
  TraceWindow window;
  window.end_ns = 100'000 * kUs;
  window.wall_clock_at_start_ns = 1'700'000'000'000'000'000;
  window.profile_memory = true;
  return build_trace(Collection{}, std::move(batches), window);
}

// One step of a small model: linear allocates its output (host) inside addmm and a device buffer;
// relu allocates in place of nothing but frees the linear's temporary; the step ends by releasing
// outputs outside any op (the "[memory]" row).
CollectedTrace model_trace() {
  return trace_with_memory(
      {
          host_event("model_inference", 0, 1000, 1, EventKind::user_annotation),
          host_event("aten::linear", 10, 360, 2),
          host_event("aten::addmm", 20, 320, 3),
          host_event("nrta_execute_schedule", 100, 300, 4, EventKind::runtime, 3),
          device_event("nc_exec_running", 310, 500, 4, 3),
          host_event("aten::linear", 400, 750, 5),
          host_event("aten::addmm", 410, 710, 6),
          host_event("aten::relu", 760, 860, 7),
      },
      {
          memory_at(30, 4 * kKiB),            // addmm #1 output (host)
          memory_at(40, 2 * kMiB, 0, 0x10),   // addmm #1 device buffer
          memory_at(350, 512),                // linear #1 itself, after addmm
          memory_at(420, 4 * kKiB),           // addmm #2 output
          memory_at(800, -4 * kKiB),          // relu frees the first output
          memory_at(900, 1536 * kMiB, 0, 0x20),  // inside model_inference only
          memory_at(1200, -4 * kKiB),         // released after the step: no op owns it
          memory_at(1300, -2 * kMiB, 0, 0x10),
      });
}

std::map<std::string, FunctionEventAvg> rows_by_key(const KeyAverages& averages) {
  std::map<std::string, FunctionEventAvg> rows;
  for (const FunctionEventAvg& row : averages.rows()) rows[row.key] = row;
  return rows;
}

TEST(profiler_memory, records_only_when_asked_with_their_totals) {
  auto session = [](bool profile_memory) {
    recording_start({.profile_memory = profile_memory});
    EXPECT_EQ(memory_requested(), profile_memory);
    ScopeHandle op = record_op_begin(intern("aten::empty"));
    record_memory(-1, 0xabc, 256, 1256, 4096);
    record_op_end(op);
    record_memory(2, 0xdef, -64, 0, 0);
    recording_stop();
    return recording_collect();
  };
  const Collection off = session(false);
  ASSERT_EQ(off.records.size(), 1u);
  EXPECT_FALSE(off.profile_memory);

  const Collection on = session(true);
  EXPECT_TRUE(on.profile_memory);
  ASSERT_EQ(on.records.size(), 3u);
  const CollectedRecord& alloc = on.records[0];
  EXPECT_EQ(alloc.record.kind, EventKind::memory);
  EXPECT_EQ(alloc.record.correlation_id, 0xabcu);
  EXPECT_EQ(static_cast<std::int64_t>(alloc.record.value), 256);
  EXPECT_EQ(alloc.record.device, -1);
  ASSERT_NE(alloc.memory, 0u);
  EXPECT_EQ(on.memory_totals[alloc.memory - 1].allocated, 1256);
  EXPECT_EQ(on.memory_totals[alloc.memory - 1].reserved, 4096);

  const CollectedTrace trace = build_trace(on, {}, {});
  ASSERT_EQ(trace.memory.size(), 2u);
  EXPECT_TRUE(trace.profile_memory);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.memory[0].owner, 0);  // inside aten::empty
  EXPECT_EQ(trace.memory[1].owner, -1);
  EXPECT_EQ(trace.memory[1].bytes, -64);
  EXPECT_EQ(trace.memory[1].device_index, 2);
  EXPECT_EQ(trace.events[0].self_cpu_memory_usage, 256);
}

TEST(profiler_memory, usage_is_inclusive_up_the_tree_and_self_excludes_children) {
  const CollectedTrace trace = model_trace();
  const auto rows = rows_by_key(key_averages(trace, {.device_name = "neuron"}));
  EXPECT_EQ(rows.at("aten::addmm").cpu_memory_usage, 8 * kKiB);
  EXPECT_EQ(rows.at("aten::addmm").self_cpu_memory_usage, 8 * kKiB);
  EXPECT_EQ(rows.at("aten::addmm").device_memory_usage, 2 * kMiB);
  EXPECT_EQ(rows.at("aten::linear").cpu_memory_usage, 8 * kKiB + 512);
  EXPECT_EQ(rows.at("aten::linear").self_cpu_memory_usage, 512);
  EXPECT_EQ(rows.at("aten::linear").self_device_memory_usage, 0);
  EXPECT_EQ(rows.at("aten::relu").self_cpu_memory_usage, -4 * kKiB);
  EXPECT_EQ(rows.at("model_inference").cpu_memory_usage, 4 * kKiB + 512);
  EXPECT_EQ(rows.at("model_inference").self_device_memory_usage, 1536 * kMiB);
  EXPECT_EQ(rows.at("model_inference").device_memory_usage, 1536 * kMiB + 2 * kMiB);
  // Released outside every op: one [memory] row with two calls, one per device.
  EXPECT_EQ(rows.at("[memory]").count, 2);
  EXPECT_EQ(rows.at("[memory]").cpu_memory_usage, -4 * kKiB);
  EXPECT_EQ(rows.at("[memory]").device_memory_usage, -2 * kMiB);
  EXPECT_EQ(rows.at("[memory]").cpu_time_total_ns, 0);
}

TEST(profiler_memory, golden_table_with_memory_columns) {
  const KeyAverages averages = key_averages(model_trace(), {.device_name = "neuron"});
  expect_golden("memory_neuron_model.txt", averages.table("self_cpu_memory_usage", -1));
  // The device spellings of the memory keys sort the same way.
  EXPECT_EQ(averages.table("device_memory_usage", -1), averages.table("cuda_memory_usage", -1));
  EXPECT_EQ(averages.table("self_device_memory_usage", -1), averages.table("self_privateuse1_memory_usage", -1));
  EXPECT_EQ(averages.table("self_device_memory_usage", -1), averages.table("self_neuron_memory_usage", -1));
}

TEST(profiler_memory, device_memory_columns_need_a_device_allocation) {
  const CollectedTrace host_only = trace_with_memory({host_event("aten::add", 0, 10, 1)}, {memory_at(5, 100)});
  const std::string table = key_averages(host_only, {.device_name = "neuron"}).table();
  EXPECT_NE(table.find("       CPU Mem  Self CPU Mem    # of Calls  \n"), std::string::npos) << table;
  EXPECT_EQ(table.find("NEURON Mem"), std::string::npos);
  EXPECT_NE(table.find("         100 B         100 B             1  \n"), std::string::npos) << table;
  // Without profile_memory there are no memory columns at all.
  const std::string plain = key_averages(testing::make_trace({host_event("aten::add", 0, 10, 1)}), {}).table();
  EXPECT_EQ(plain.find("CPU Mem"), std::string::npos);
}

TEST(profiler_memory, memory_is_formatted_as_torch_does) {
  EXPECT_EQ(format_memory(0), "0 B");
  EXPECT_EQ(format_memory(1023), "1023 B");
  EXPECT_EQ(format_memory(-1023), "-1023 B");
  EXPECT_EQ(format_memory(1024), "1.00 KB");
  EXPECT_EQ(format_memory(-1536), "-1.50 KB");
  EXPECT_EQ(format_memory(4 * kMiB), "4.00 MB");
  EXPECT_EQ(format_memory(3 * 1024 * kMiB / 2), "1.50 GB");
}

TEST(profiler_memory, trace_carries_torch_memory_events_and_reads_back_to_the_same_table) {
  const CollectedTrace trace = model_trace();
  for (bool system_lanes : {false, true}) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / fmt::format("sightline_memory_{}_{}.json", ::getpid(), system_lanes);
    export_chrome_trace(trace, path.string(), {.device_name = "neuron", .system_lanes = system_lanes});
    std::ifstream file(path);
    const nlohmann::json parsed = nlohmann::json::parse(file);
    EXPECT_EQ(parsed.at("profile_memory"), true);
    std::vector<nlohmann::json> memory;
    for (const nlohmann::json& event : parsed.at("traceEvents")) {
      if (event.value("name", "") == "[memory]") memory.push_back(event);
    }
    ASSERT_EQ(memory.size(), trace.memory.size());
    const nlohmann::json& device_alloc = memory[1];
    EXPECT_EQ(device_alloc.at("ph"), "i");
    EXPECT_EQ(device_alloc.at("cat"), "cpu_instant_event");
    EXPECT_EQ(device_alloc.at("s"), "t");
    EXPECT_EQ(device_alloc.at("args").at("Bytes"), 2 * kMiB);
    EXPECT_EQ(device_alloc.at("args").at("Addr"), 0x10);
    EXPECT_EQ(device_alloc.at("args").at("Device Type"), 20);  // c10::DeviceType::PrivateUse1
    EXPECT_EQ(device_alloc.at("args").at("Device Id"), 0);
    EXPECT_EQ(memory[0].at("args").at("Device Type"), 0);
    EXPECT_EQ(memory[0].at("args").at("Device Id"), -1);
    EXPECT_EQ(memory[0].at("args").at("Total Allocated"), 4 * kKiB);

    const CollectedTrace loaded = analysis::trace_json_load(path.string());
    std::filesystem::remove(path);
    EXPECT_TRUE(loaded.profile_memory);
    const std::string live = key_averages(trace, {.device_name = "neuron"}).table("self_cpu_memory_usage", -1);
    EXPECT_EQ(key_averages(loaded, {.device_name = "neuron"}).table("self_cpu_memory_usage", -1), live)
        << (system_lanes ? "system lanes" : "kineto lanes");
  }
}

// Real tensors: every op's output is an allocation inside that op; intermediates that die at the end
// of the statement are released outside any op.
TEST(profiler_memory, real_cpu_and_neuron_tensors) {
  const Device device = Device::parse("neuron:0");
  const Tensor x = ones({64, 32});  // 8 KiB
  const Tensor xd = x.to(device);
  const std::int64_t host_before = memory_allocated(Device::cpu());
  const std::int64_t device_before = memory_allocated(device);
  profile prof({.profile_memory = true});
  prof.start();
  Tensor y = (x * 2.0) + 1.0;       // two host outputs; the product dies outside any op
  Tensor yd = xd * 3.0;             // one device output
  EXPECT_EQ(memory_allocated(Device::cpu()), host_before + 2 * 8 * kKiB - 8 * kKiB);
  EXPECT_EQ(memory_allocated(device), device_before + 8 * kKiB);
  yd = Tensor();
  neuron::synchronize();
  prof.stop();

  const KeyAverages averages = prof.key_averages();
  const auto rows = rows_by_key(averages);
  ASSERT_TRUE(rows.count("aten::mul")) << averages.table();
  // Each mul allocated one 8 KiB output, on the host for x and on the device for xd. The device mul
  // also made its scalar operand: a 4-byte host tensor (its child aten::fill_) copied to a 4-byte
  // device tensor (its child aten::copy_), both released before it returned. So its totals are the
  // outputs, and its self usage is the outputs minus the scalar's releases its children do not own.
  constexpr std::int64_t kScalar = 4;
  EXPECT_EQ(rows.at("aten::mul").count, 2);
  EXPECT_EQ(rows.at("aten::mul").cpu_memory_usage, 8 * kKiB);
  EXPECT_EQ(rows.at("aten::mul").device_memory_usage, 8 * kKiB);
  EXPECT_EQ(rows.at("aten::mul").self_cpu_memory_usage, 8 * kKiB - kScalar);
  EXPECT_EQ(rows.at("aten::mul").self_device_memory_usage, 8 * kKiB - kScalar);
  EXPECT_EQ(rows.at("aten::fill_").self_cpu_memory_usage, kScalar);
  EXPECT_EQ(rows.at("aten::copy_").self_device_memory_usage, kScalar);
  EXPECT_EQ(rows.at("aten::add").self_cpu_memory_usage, 8 * kKiB);
  ASSERT_TRUE(rows.count("[memory]")) << averages.table();
  EXPECT_EQ(rows.at("[memory]").cpu_memory_usage, -8 * kKiB);    // x * 2 released
  EXPECT_EQ(rows.at("[memory]").device_memory_usage, -8 * kKiB);  // yd released
  const std::string table = averages.table("self_cpu_memory_usage", -1);
  EXPECT_NE(table.find("  NEURON Mem  Self NEURON Mem"), std::string::npos) << table;
  // Totals follow the allocator: the last host record leaves what y holds on top of the baseline.
  const CollectedTrace& trace = prof.trace();
  ASSERT_FALSE(trace.memory.empty());
  std::int64_t last_host_total = -1;
  for (const MemoryEvent& memory : trace.memory) {
    if (memory.device_index < 0) last_host_total = memory.total_allocated;
  }
  EXPECT_EQ(last_host_total, host_before + 8 * kKiB);
  EXPECT_EQ(y.numel(), 64 * 32);
}

}  // namespace
}  // namespace sightline::profiler
