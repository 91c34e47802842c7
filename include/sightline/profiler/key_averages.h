// key_averages() and its table, laid out byte for byte as torch.profiler prints them.
//
//   KeyAverages averages = key_averages(trace, {.device_name = "neuron"});
//   std::cout << averages.table({.sort_by = "self_neuron_time_total", .row_limit = 10});
//
// Rows group events by (name, device type, user-annotation flag) and, with group_by_input_shape,
// by input shapes and, with group_by_stack_n, by the first frames of their stacks (a left-aligned
// Source Location column, one frame per line); ProfilerStep#N events share the row "ProfilerStep*". Columns: Name, Self CPU %,
// Self CPU, CPU total %, CPU total, CPU time avg, then Self <DEV>, Self <DEV> %, <DEV> total,
// <DEV> time avg when some row has device time, CPU Mem, Self CPU Mem (and <DEV> Mem, Self <DEV> Mem
// when some row allocated device memory) with profile_memory, # of Calls, Input Shapes when grouped
// by shape, and Total <unit>FLOPs with with_flops. <DEV> is the upper-cased backend name ("NEURON").
// Memory released or allocated outside every op is the row "[memory]", as in torch.
//
// The same rows as data: averages.to_csv(options) and averages.to_json(options) (docs/formats.md,
// "key_averages as CSV and JSON"): torch's FunctionEventAvg attribute names, times as exact integer
// nanoseconds in columns whose names end in _ns, rows in the order and number table(options) prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sightline/profiler/events.h"

namespace sightline::profiler {

// One row of key_averages (torch's FunctionEventAvg). Times in nanoseconds.
struct FunctionEventAvg {
  std::string key{};
  DeviceType device_type = DeviceType::cpu;
  bool is_user_annotation = false;
  bool has_cpu_parent = false;  // the first event of the row had a CPU parent
  std::int64_t count = 0;
  std::int64_t cpu_time_total_ns = 0;
  std::int64_t self_cpu_time_total_ns = 0;
  std::int64_t device_time_total_ns = 0;
  std::int64_t self_device_time_total_ns = 0;
  std::uint64_t flops = 0;
  std::int64_t cpu_memory_usage = 0;  // bytes; with profile_memory
  std::int64_t self_cpu_memory_usage = 0;
  std::int64_t device_memory_usage = 0;
  std::int64_t self_device_memory_usage = 0;
  std::vector<std::vector<std::int64_t>> input_shapes{};  // empty unless grouped by input shape
  std::vector<std::string> stack{};  // the first group_by_stack_n frames, innermost first; else empty

  double cpu_time_avg_ns() const { return count == 0 ? 0.0 : double(cpu_time_total_ns) / double(count); }
  double device_time_avg_ns() const {
    return count == 0 ? 0.0 : double(device_time_total_ns) / double(count);
  }
};

struct TableOptions {
  // A FunctionEventAvg attribute, sorted descending and stable: self_cpu_time_total, cpu_time_total,
  // cpu_time, self_device_time_total, device_time_total, device_time, count, flops, cpu_memory_usage,
  // self_cpu_memory_usage, device_memory_usage, self_device_memory_usage; "cuda", "xpu",
  // "privateuse1" and the backend's own name stand for "device". Empty: registration order.
  std::string sort_by{};
  std::int64_t row_limit = 100;  // negative: all rows
  std::int64_t max_name_column_width = 55;
  std::int64_t max_shapes_column_width = 80;
  std::int64_t max_src_column_width = 75;
  std::optional<std::string> header{};
  bool top_level_events_only = false;
  std::string time_unit{};                  // "", "s", "ms" or "us"
  bool only_rows_with_device_time = false;  // keep rows whose device time total is > 0
};

// What table(options) prints, cell by cell: the header and each selected row's cells exactly as the
// text holds them (untrimmed of padding), so that another view of the table (the Explorer's) shows the
// same bytes. Empty when there are no rows.
struct TableCells {
  std::vector<std::string> headers{};
  std::vector<std::int64_t> widths{};  // each column's width in the text
  std::vector<bool> left_aligned{};
  std::vector<std::vector<std::string>> rows{};    // selected_rows(options), in order
  std::vector<std::vector<std::string>> frames{};  // per row: its stack frames after the first, trimmed
  std::vector<std::string> footer{};               // the lines under the closing separator
  bool has_stack = false;                          // the last column is Source Location
};

class KeyAverages {
 public:
  KeyAverages(std::vector<FunctionEventAvg> rows, std::string device_name, bool with_flops,
              std::uint64_t dropped_events, bool profile_memory = false);

  const std::vector<FunctionEventAvg>& rows() const { return rows_; }
  const std::string& device_name() const { return device_name_; }
  std::uint64_t dropped_events() const { return dropped_events_; }
  // Printed under the table, one "Note: " line each: what the trace left out and why.
  const std::vector<std::string>& notes() const { return notes_; }
  void set_notes(std::vector<std::string> notes) { notes_ = std::move(notes); }
  // Whether the rows were grouped by input shape (adds the input_shapes column to the data formats).
  bool group_by_input_shape() const { return group_by_input_shape_; }
  void set_group_by_input_shape(bool grouped) { group_by_input_shape_ = grouped; }
  // How many frames of each event's stack the rows were grouped by (adds Source Location and the
  // stack column to the data formats when > 0).
  std::int64_t group_by_stack_n() const { return group_by_stack_n_; }
  void set_group_by_stack_n(std::int64_t frames) { group_by_stack_n_ = frames; }

  // The rows table(options) prints, in its order: sort_by, row_limit, top_level_events_only and
  // only_rows_with_device_time applied as the table applies them. Throws on an unknown sort key.
  std::vector<const FunctionEventAvg*> selected_rows(const TableOptions& options = {}) const;

  // selected_rows(options) as RFC 4180 CSV: a header line of column names, then one line per row,
  // each ending in CRLF; a field holding a comma, quote, CR or LF is quoted, its quotes doubled.
  std::string to_csv(const TableOptions& options = {}) const;
  // selected_rows(options) as one JSON object: device_name, group_by_input_shape, profile_memory,
  // with_flops, dropped_events, notes, and "rows", an array of objects with the CSV's columns as
  // keys (numbers as JSON integers, input_shapes as arrays). Ends in '\n'.
  std::string to_json(const TableOptions& options = {}) const;

  // The table text, each line ending in '\n'. Throws sightline::Error on an unknown sort key.
  std::string table(const TableOptions& options = {}) const;
  // The same table as cells (see TableCells); table(options) lays these out.
  TableCells table_cells(const TableOptions& options = {}) const;
  std::string table(std::string_view sort_by, std::int64_t row_limit = 100) const;

 private:
  std::vector<FunctionEventAvg> rows_;
  std::string device_name_;
  bool with_flops_ = false;
  std::uint64_t dropped_events_ = 0;
  bool profile_memory_ = false;
  bool group_by_input_shape_ = false;
  std::int64_t group_by_stack_n_ = 0;
  std::vector<std::string> notes_;
};

struct KeyAveragesOptions {
  bool group_by_input_shape = false;
  std::string device_name = "privateuseone";  // the PrivateUse1 backend's name
  bool with_flops = false;
  // > 0: rows also group by the first n frames of each event's stack (torch's group_by_stack_n);
  // events recorded without with_stack have no stack and group as before.
  std::int64_t group_by_stack_n = 0;
};

KeyAverages key_averages(const CollectedTrace& trace, const KeyAveragesOptions& options);

// torch's export_stacks: one line per event that has a stack and a positive metric, its frames
// outermost first joined by ';' (spaces, tabs and newlines inside a frame become '_'), a space and
// the metric in integer nanoseconds (torch writes whole microseconds, which drops events under 1 us)
// — the "collapsed" format flamegraph.pl and speedscope read. metric: self_cpu_time_total or
// self_device_time_total (cuda, xpu or privateuse1 may stand for device). Throws sightline::Error on
// another metric; export_stacks also when the file cannot be written.
std::string collapsed_stacks(const CollectedTrace& trace, std::string_view metric = "self_cpu_time_total");
void export_stacks(const CollectedTrace& trace, const std::string& path,
                   std::string_view metric = "self_cpu_time_total");

// torch's _format_time: "1.234ms", "56.000us", "2.000s"; a non-empty unit forces it.
std::string format_time_us(double time_us, std::string_view unit = {});

// torch's _format_time_share: "12.34%", "NaN" for a zero total.
std::string format_time_share(double time, double total);

// torch's _format_memory (1024-based): "1.50 GB", "12.00 MB", "4.00 KB", "512 B"; negative for releases.
std::string format_memory(std::int64_t bytes);

// Python's str() of a list of shapes: "[[128], [128, 64], [], []]".
std::string format_shapes(const std::vector<std::vector<std::int64_t>>& shapes);

}  // namespace sightline::profiler
