// key_averages tables against the reference's golden samples (byte for byte) and our own NEURON one.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sightline/profiler/key_averages.h"
#include "sightline/error.h"
#include "golden.h"
#include "synthetic.h"

namespace sightline::profiler {
namespace {

using testing::device_event;
using testing::expect_golden;
using testing::read_golden;
using testing::host_event;
using testing::make_trace;

// model_inference (1000 us) > 2x aten::linear (700) > 2x aten::addmm (600), plus 2x aten::relu (200).
CollectedTrace inference_trace() {
  return make_trace({
      host_event("model_inference", 0, 1000, 1),
      host_event("aten::linear", 10, 360, 2),
      host_event("aten::addmm", 20, 320, 3),
      host_event("aten::linear", 400, 750, 4),
      host_event("aten::addmm", 410, 710, 5),
      host_event("aten::relu", 760, 860, 6),
      host_event("aten::relu", 870, 970, 7),
  });
}

TEST(profiler_table, golden_cpu_sorted_by_self_cpu) {
  const KeyAverages averages = key_averages(inference_trace(), {});
  EXPECT_EQ(averages.table("self_cpu_time_total", 10), read_golden("cpu_self_cpu_time_total.txt"));
}

TEST(profiler_table, golden_cpu_sorted_by_cpu_total_with_row_limit) {
  const KeyAverages averages = key_averages(inference_trace(), {});
  EXPECT_EQ(averages.table("cpu_time_total", 2), read_golden("cpu_cpu_time_total_limit2.txt"));
}

// aten::mm launches 3 kernels of 2.5 ms through launchKernel; aten::add one of 1.5 ms.
CollectedTrace npu_trace() {
  return make_trace({
      host_event("aten::mm", 0, 50, 10),
      host_event("launchKernel", 10, 30, 11, EventKind::runtime, 10),
      device_event("gemm_kernel", 40, 2540, 11, 10),
      host_event("aten::mm", 100, 150, 12),
      host_event("launchKernel", 110, 130, 13, EventKind::runtime, 12),
      device_event("gemm_kernel", 2540, 5040, 13, 12),
      host_event("aten::mm", 200, 250, 14),
      host_event("launchKernel", 210, 230, 15, EventKind::runtime, 14),
      device_event("gemm_kernel", 5040, 7540, 15, 14),
      host_event("aten::add", 300, 320, 16),
      device_event("add_kernel", 7540, 9040, 16, 16),
  });
}

TEST(profiler_table, golden_renamed_privateuse1_backend) {
  const KeyAverages averages = key_averages(npu_trace(), {.device_name = "npu"});
  EXPECT_EQ(averages.table("self_privateuse1_time_total", -1), read_golden("npu_self_privateuse1.txt"));
}

TEST(profiler_table, golden_grouped_by_input_shapes) {
  std::vector<FunctionEvent> events = {
      host_event("aten::addmm", 0, 350, 1),
      host_event("aten::addmm", 400, 700, 2),
      host_event("aten::addmm", 800, 1150, 3),
  };
  const std::vector<std::vector<std::int64_t>> first = {{128}, {128, 64}, {64, 10}, {}, {}};
  const std::vector<std::vector<std::int64_t>> second = {{10}, {128, 10}, {10, 10}, {}, {}};
  events[0].input_shapes = first;
  events[1].input_shapes = second;
  events[2].input_shapes = first;
  const CollectedTrace trace = make_trace(std::move(events));
  EXPECT_EQ(key_averages(trace, {.group_by_input_shape = true}).table("cpu_time_total"),
            read_golden("cpu_input_shapes.txt"));
  // Without grouping the shapes column disappears and the three calls share one row.
  const KeyAverages plain = key_averages(trace, {});
  ASSERT_EQ(plain.rows().size(), 1u);
  EXPECT_EQ(plain.table().find("Input Shapes"), std::string::npos);
}

// One RMSNorm step run eagerly on a NeuronCore: each op is one runtime launch and one execution;
// `+ eps` also copies the host scalar to the device.
CollectedTrace neuron_trace() {
  return make_trace({
      host_event("ProfilerStep#3", 0, 400, 1, EventKind::user_annotation),
      host_event("aten::mul", 10, 60, 2),
      host_event("nrta_execute_schedule", 20, 50, 3, EventKind::runtime, 2),
      device_event("nc_exec_running", 60, 160, 3, 2),
      host_event("aten::mean", 70, 120, 4),
      host_event("nrta_execute_schedule", 80, 110, 5, EventKind::runtime, 4),
      device_event("nc_exec_running", 170, 230, 5, 4),
      host_event("aten::add", 130, 200, 6),
      host_event("nrt_tensor_write", 140, 160, 7, EventKind::runtime, 6),
      device_event("dmem_buf_copyin", 165, 168, 7, 6, EventKind::device_memcpy),
      host_event("nrta_execute_schedule", 170, 190, 8, EventKind::runtime, 6),
      device_event("nc_exec_running", 235, 255, 8, 6),
      host_event("aten::rsqrt", 210, 250, 9),
      host_event("nrta_execute_schedule", 220, 240, 10, EventKind::runtime, 9),
      device_event("nc_exec_running", 260, 280, 10, 9),
      host_event("aten::mul", 260, 300, 11),
      host_event("nrta_execute_schedule", 270, 290, 12, EventKind::runtime, 11),
      device_event("nc_exec_running", 290, 390, 12, 11),
      host_event("aten::mul", 310, 350, 13),
      host_event("nrta_execute_schedule", 320, 340, 14, EventKind::runtime, 13),
      device_event("nc_exec_running", 395, 495, 14, 13),
  });
}

TEST(profiler_table, golden_neuron_rmsnorm_step) {
  const KeyAverages averages = key_averages(neuron_trace(), {.device_name = "neuron"});
  expect_golden("neuron_rmsnorm_naive.txt", averages.table("self_neuron_time_total", -1));
  // The aliases sort the same way.
  EXPECT_EQ(averages.table("self_neuron_time_total", -1), averages.table("self_device_time_total", -1));
  EXPECT_EQ(averages.table("self_neuron_time_total", -1), averages.table("self_privateuse1_time_total", -1));
}

TEST(profiler_table, neuron_rows_carry_their_executions) {
  const KeyAverages averages = key_averages(neuron_trace(), {.device_name = "neuron"});
  std::map<std::string, const FunctionEventAvg*> rows;
  for (const FunctionEventAvg& row : averages.rows()) {
    if (row.device_type == DeviceType::cpu) rows[row.key] = &row;
  }
  ASSERT_TRUE(rows.count("aten::mul"));
  EXPECT_EQ(rows["aten::mul"]->count, 3);
  EXPECT_EQ(rows["aten::mul"]->self_device_time_total_ns, 300 * testing::kUs);
  EXPECT_EQ(rows["aten::add"]->self_device_time_total_ns, 23 * testing::kUs);  // copy + execution
  EXPECT_EQ(rows["ProfilerStep*"]->count, 1);
  EXPECT_EQ(rows["ProfilerStep*"]->self_device_time_total_ns, 0);
  EXPECT_EQ(rows["ProfilerStep*"]->device_time_total_ns, 403 * testing::kUs);
}

TEST(profiler_table, only_rows_with_device_time) {
  const KeyAverages averages = key_averages(neuron_trace(), {.device_name = "neuron"});
  TableOptions options;
  options.sort_by = "self_neuron_time_total";
  options.only_rows_with_device_time = true;
  const std::string table = averages.table(options);
  EXPECT_EQ(table.find("nrta_execute_schedule"), std::string::npos);
  EXPECT_NE(table.find("aten::rsqrt"), std::string::npos);
  EXPECT_NE(table.find("Self NEURON time total: 403.000us"), std::string::npos);
}

TEST(profiler_table, device_columns_hidden_without_device_time) {
  const std::string table = key_averages(inference_trace(), {.device_name = "neuron"}).table();
  EXPECT_EQ(table.find("NEURON"), std::string::npos);
}

TEST(profiler_table, long_names_are_cut_at_the_column_width) {
  const std::string name =
      "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>";
  std::vector<FunctionEvent> events = {host_event("aten::fill_", 0, 100, 1)};
  for (int i = 0; i < 5; ++i) events.push_back(device_event(name, 10 * i, 10 * i + 5, 100 + i, 0));
  const std::string table = key_averages(make_trace(std::move(events)), {}).table();
  const std::string separator = std::string(55, '-') + "  ------------  ";
  EXPECT_EQ(table.rfind(separator, 0), 0u);
  EXPECT_NE(table.find("\nvoid at::native::vectorized_elementwise_kernel<4, at...         0.00%  "),
            std::string::npos);
  EXPECT_NE(table.find("             5  \n"), std::string::npos);
}

TEST(profiler_table, unknown_sort_key_is_an_error_naming_valid_keys) {
  const KeyAverages averages = key_averages(inference_trace(), {.device_name = "neuron"});
  try {
    (void)averages.table("self_gpu_time");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("self_cpu_time_total"), std::string::npos);
  }
}

TEST(profiler_table, row_limit_zero_prints_no_rows_but_totals_everything) {
  const std::string table = key_averages(inference_trace(), {}).table("count", 0);
  EXPECT_EQ(table.find("aten::"), std::string::npos);
  EXPECT_NE(table.find("Self CPU time total: 1.000ms\n"), std::string::npos);
}

TEST(profiler_table, flops_column_scales_from_the_smallest_value) {
  std::vector<FunctionEvent> events = {host_event("aten::mm", 0, 10, 1), host_event("aten::add", 20, 30, 2),
                                       host_event("aten::relu", 40, 50, 3)};
  events[0].flops = 2'000'000;
  events[1].flops = 4'000;
  const KeyAverages averages = key_averages(make_trace(std::move(events)), {.with_flops = true});
  const std::string table = averages.table();
  EXPECT_NE(table.find("  Total KFLOPs  "), std::string::npos);
  EXPECT_NE(table.find("    2000.000  \n"), std::string::npos);
  EXPECT_NE(table.find("       4.000  \n"), std::string::npos);
  EXPECT_NE(table.find("          --  \n"), std::string::npos);
}

TEST(profiler_table, header_and_dropped_footer) {
  CollectedTrace trace = inference_trace();
  trace.dropped = 7;
  TableOptions options;
  options.header = "inference";
  const std::string table = key_averages(trace, {}).table(options);
  EXPECT_EQ(table.rfind(std::string(103, '=') + "\ninference\n", 0), 0u);
  EXPECT_NE(table.find("\nDropped events: 7 "), std::string::npos);
}

// The table as data (docs/formats.md): byte for byte, rows as the table orders and limits them.
TEST(profiler_table_data, golden_csv_and_json) {
  const KeyAverages averages = key_averages(neuron_trace(), {.device_name = "neuron"});
  expect_golden("neuron_rmsnorm_naive.csv", averages.to_csv({.sort_by = "self_neuron_time_total", .row_limit = -1}));
  expect_golden("neuron_rmsnorm_naive.json",
                averages.to_json({.sort_by = "self_neuron_time_total", .row_limit = -1}));
}

CollectedTrace shapes_trace() {
  std::vector<FunctionEvent> events = {
      host_event("aten::addmm", 0, 350, 1),
      host_event("aten::addmm", 400, 700, 2),
      host_event("aten::addmm", 800, 1150, 3),
  };
  events[0].input_shapes = events[2].input_shapes = {{128}, {128, 64}, {64, 10}, {}, {}};
  events[1].input_shapes = {{10}, {128, 10}, {10, 10}, {}, {}};
  return make_trace(std::move(events));
}

TEST(profiler_table_data, golden_grouped_by_input_shapes) {
  const KeyAverages averages = key_averages(shapes_trace(), {.group_by_input_shape = true});
  expect_golden("cpu_input_shapes.csv", averages.to_csv({.sort_by = "cpu_time_total"}));
  expect_golden("cpu_input_shapes.json", averages.to_json({.sort_by = "cpu_time_total"}));
  // Without grouping there is no input_shapes column.
  const KeyAverages plain = key_averages(shapes_trace(), {});
  EXPECT_EQ(plain.to_csv().find("input_shapes"), std::string::npos);
  EXPECT_EQ(plain.to_json().find("input_shapes"), std::string::npos);
}

TEST(profiler_table_data, json_round_trip_is_exact) {
  CollectedTrace trace = neuron_trace();
  // A time that is no whole number of microseconds (aten::mul, three calls).
  ASSERT_EQ(trace.events[1].name, "aten::mul");
  trace.events[1].cpu_time_total_ns += 7;
  trace.notes = {"a note"};
  const KeyAverages averages = key_averages(trace, {.device_name = "neuron"});
  const TableOptions options{.sort_by = "cpu_time_total", .row_limit = 5};
  const nlohmann::json document = nlohmann::json::parse(averages.to_json(options));
  EXPECT_EQ(document.at("device_name"), "neuron");
  EXPECT_EQ(document.at("notes"), nlohmann::json::array({"a note"}));
  const std::vector<const FunctionEventAvg*> rows = averages.selected_rows(options);
  ASSERT_EQ(rows.size(), 5u);
  ASSERT_EQ(document.at("rows").size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = document.at("rows")[i];
    const FunctionEventAvg& expected = *rows[i];
    EXPECT_EQ(row.at("key").get<std::string>(), expected.key);
    EXPECT_EQ(row.at("device_type").get<std::string>(), expected.device_type == DeviceType::cpu ? "cpu" : "privateuse1");
    EXPECT_EQ(row.at("count").get<std::int64_t>(), expected.count);
    EXPECT_EQ(row.at("cpu_time_total_ns").get<std::int64_t>(), expected.cpu_time_total_ns);
    EXPECT_EQ(row.at("self_cpu_time_total_ns").get<std::int64_t>(), expected.self_cpu_time_total_ns);
    EXPECT_EQ(row.at("device_time_total_ns").get<std::int64_t>(), expected.device_time_total_ns);
    EXPECT_EQ(row.at("self_device_time_total_ns").get<std::int64_t>(), expected.self_device_time_total_ns);
    EXPECT_EQ(row.at("cpu_memory_usage").get<std::int64_t>(), expected.cpu_memory_usage);
    EXPECT_EQ(row.at("self_cpu_memory_usage").get<std::int64_t>(), expected.self_cpu_memory_usage);
    EXPECT_EQ(row.at("device_memory_usage").get<std::int64_t>(), expected.device_memory_usage);
    EXPECT_EQ(row.at("self_device_memory_usage").get<std::int64_t>(), expected.self_device_memory_usage);
    EXPECT_EQ(row.at("flops").get<std::uint64_t>(), expected.flops);
    EXPECT_EQ(row.at("is_user_annotation").get<bool>(), expected.is_user_annotation);
  }
  bool saw_odd_time = false;
  for (const auto& row : document.at("rows")) saw_odd_time |= row.at("cpu_time_total_ns").get<std::int64_t>() % 10 == 7;
  EXPECT_TRUE(saw_odd_time);
}

TEST(profiler_table_data, rows_follow_the_table_options) {
  const KeyAverages averages = key_averages(inference_trace(), {});
  const std::string csv = averages.to_csv({.sort_by = "cpu_time_total", .row_limit = 2});
  // The header and the two rows the table prints, in its order.
  EXPECT_EQ(csv.substr(0, csv.find("\r\n")),
            "key,device_type,count,cpu_time_total_ns,self_cpu_time_total_ns,device_time_total_ns,"
            "self_device_time_total_ns,cpu_memory_usage,self_cpu_memory_usage,device_memory_usage,"
            "self_device_memory_usage,flops,is_user_annotation");
  EXPECT_NE(csv.find("\r\nmodel_inference,cpu,1,1000000,"), std::string::npos);
  EXPECT_LT(csv.find("\r\nmodel_inference,"), csv.find("\r\naten::linear,cpu,2,700000,"));
  EXPECT_EQ(csv.find("aten::relu"), std::string::npos);
  EXPECT_THROW((void)averages.to_csv({.sort_by = "no_such_key"}), Error);
  EXPECT_THROW((void)averages.to_json({.sort_by = "no_such_key"}), Error);
}

TEST(profiler_table_data, csv_quotes_commas_quotes_and_newlines) {
  const KeyAverages averages = key_averages(make_trace({
      host_event("a,\"b\"", 0, 10, 1, EventKind::user_annotation),
      host_event("two\nlines", 20, 30, 2),
      host_event("plain", 40, 50, 3),
  }), {});
  const std::string csv = averages.to_csv();
  EXPECT_NE(csv.find("\r\n\"a,\"\"b\"\"\",cpu,1,10000,10000,0,0,0,0,0,0,0,true\r\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\r\n\"two\nlines\",cpu,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\r\nplain,cpu,1,"), std::string::npos) << csv;
  const nlohmann::json document = nlohmann::json::parse(averages.to_json());
  EXPECT_EQ(document.at("rows")[0].at("key"), "a,\"b\"");
}

TEST(profiler_table_data, empty_averages_have_a_header_and_no_rows) {
  const KeyAverages averages = key_averages(CollectedTrace{}, {});
  const std::string csv = averages.to_csv();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1);
  EXPECT_TRUE(nlohmann::json::parse(averages.to_json()).at("rows").empty());
}

TEST(profiler_format, time_like_torch) {
  EXPECT_EQ(format_time_us(56.0), "56.000us");
  EXPECT_EQ(format_time_us(1234.0), "1.234ms");
  EXPECT_EQ(format_time_us(2'000'000.0), "2.000s");
  EXPECT_EQ(format_time_us(999.9996), "1000.000us");  // threshold tested before rounding
  EXPECT_EQ(format_time_us(999'999.9996), "1000.000ms");
  EXPECT_EQ(format_time_us(1500.0, "us"), "1500.000us");
  EXPECT_EQ(format_time_us(1500.0, "s"), "0.002s");
  EXPECT_EQ(format_time_share(1.0, 3.0), "33.33%");
  EXPECT_EQ(format_time_share(0.0, 0.0), "NaN");
  EXPECT_EQ(format_shapes({{128}, {128, 64}, {}, {}}), "[[128], [128, 64], [], []]");
  EXPECT_EQ(format_shapes({}), "[]");
}

}  // namespace
}  // namespace sightline::profiler
