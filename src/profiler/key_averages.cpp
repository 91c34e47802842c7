#include "sightline/profiler/key_averages.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <span>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "profiler/json_writer.h"
#include "sightline/error.h"

namespace sightline::profiler {
namespace {

// format_shapes over any contiguous list of shapes (an event keeps them in a CompactVector).
std::string format_shape_list(std::span<const std::vector<std::int64_t>> shapes) {
  std::string out = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    if (i != 0) out += ", ";
    fmt::format_to(std::back_inserter(out), "[{}]", fmt::join(shapes[i], ", "));
  }
  out += "]";
  return out;
}


constexpr std::int64_t kColumnWidth = 12;  // torch's DEFAULT_COLUMN_WIDTH
constexpr std::int64_t kSpacing = 2;       // torch's SPACING_SIZE: two spaces after every column

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string uppercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// torch's _rewrite_name(with_wildcard=True): every step marker shares one row.
std::string row_key(const std::string& name) {
  constexpr std::string_view step_prefix = "ProfilerStep#";
  if (name.rfind(step_prefix, 0) == 0) return "ProfilerStep*";
  return name;
}

double us(std::int64_t ns) { return double(ns) / 1000.0; }
double us(double ns) { return ns / 1000.0; }

using SortValue = std::function<double(const FunctionEventAvg&)>;

SortValue sort_value(std::string_view sort_by, std::string_view device_name) {
  std::string key = lowercase(sort_by);
  replace_all(key, "cuda", "device");
  replace_all(key, "xpu", "device");
  replace_all(key, "privateuse1", "device");
  if (!device_name.empty()) replace_all(key, lowercase(device_name), "device");
  static const std::map<std::string, SortValue, std::less<>> values = {
      {"self_cpu_time_total", [](const FunctionEventAvg& e) { return double(e.self_cpu_time_total_ns); }},
      {"cpu_time_total", [](const FunctionEventAvg& e) { return double(e.cpu_time_total_ns); }},
      {"cpu_time", [](const FunctionEventAvg& e) { return e.cpu_time_avg_ns(); }},
      {"self_device_time_total",
       [](const FunctionEventAvg& e) { return double(e.self_device_time_total_ns); }},
      {"device_time_total", [](const FunctionEventAvg& e) { return double(e.device_time_total_ns); }},
      {"device_time", [](const FunctionEventAvg& e) { return e.device_time_avg_ns(); }},
      {"count", [](const FunctionEventAvg& e) { return double(e.count); }},
      {"flops", [](const FunctionEventAvg& e) { return double(e.flops); }},
      {"cpu_memory_usage", [](const FunctionEventAvg& e) { return double(e.cpu_memory_usage); }},
      {"self_cpu_memory_usage", [](const FunctionEventAvg& e) { return double(e.self_cpu_memory_usage); }},
      {"device_memory_usage", [](const FunctionEventAvg& e) { return double(e.device_memory_usage); }},
      {"self_device_memory_usage",
       [](const FunctionEventAvg& e) { return double(e.self_device_memory_usage); }},
  };
  auto found = values.find(key);
  if (found == values.end()) {
    fail(
        "unknown sort key '{}' for the key_averages table; valid keys: self_cpu_time_total, cpu_time_total, "
        "cpu_time, self_device_time_total, device_time_total, device_time, count, flops, cpu_memory_usage, "
        "self_cpu_memory_usage, device_memory_usage, self_device_memory_usage (in device keys 'device' may "
        "be spelled cuda, xpu, privateuse1 or {})",
        sort_by, lowercase(device_name));
  }
  return found->second;
}

// Builds the format torch's add_column() builds: every cell right-aligned in its width (Source
// Location left-aligned), then two spaces.
struct Layout {
  std::vector<std::int64_t> widths;
  std::vector<bool> left_aligned;
  std::int64_t line_length = -kSpacing;

  void add_column(std::int64_t width, bool left = false) {
    widths.push_back(width);
    left_aligned.push_back(left);
    line_length += width + kSpacing;
  }
  std::string separator() const {
    std::string line;
    for (std::int64_t width : widths) {
      line.append(static_cast<std::size_t>(width), '-');
      line.append(static_cast<std::size_t>(kSpacing), ' ');
    }
    return line;
  }
  std::string row(const std::vector<std::string>& cells) const {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (left_aligned[i]) {
        fmt::format_to(std::back_inserter(line), "{:<{}}", cells[i], widths[i]);
      } else {
        fmt::format_to(std::back_inserter(line), "{:>{}}", cells[i], widths[i]);
      }
      line.append(static_cast<std::size_t>(kSpacing), ' ');
    }
    return line;
  }
};

// torch's trim_path: a frame wider than the column keeps its end, its first three characters
// replaced by "...".
std::string trim_frame(const std::string& frame, std::int64_t width) {
  if (std::int64_t(frame.size()) <= width) return frame;
  std::string kept = frame.substr(frame.size() - std::size_t(width));
  if (kept.size() > 3) kept.replace(0, 3, "...");
  return kept;
}

// torch's auto_scale_flops: the unit is picked from the smallest positive value.
std::pair<double, std::string> flops_scale(std::uint64_t smallest) {
  static const char* const headers[] = {"FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"};
  const double log_flops = std::max(0.0, std::min(std::log10(double(smallest)) / 3.0, 5.0));
  const auto index = static_cast<std::size_t>(log_flops);
  return {std::pow(10.0, std::floor(log_flops) * -3.0), headers[index]};
}

}  // namespace

std::string format_time_us(double time_us, std::string_view unit) {
  constexpr double us_in_second = 1000.0 * 1000.0;
  constexpr double us_in_ms = 1000.0;
  if (unit == "s") return fmt::format("{:.3f}s", time_us / us_in_second);
  if (unit == "ms") return fmt::format("{:.3f}ms", time_us / us_in_ms);
  if (unit == "us") return fmt::format("{:.3f}us", time_us);
  if (time_us >= us_in_second) return fmt::format("{:.3f}s", time_us / us_in_second);
  if (time_us >= us_in_ms) return fmt::format("{:.3f}ms", time_us / us_in_ms);
  return fmt::format("{:.3f}us", time_us);
}

std::string format_time_share(double time, double total) {
  if (total == 0) return "NaN";
  return fmt::format("{:.2f}%", time * 100.0 / total);
}

std::string format_memory(std::int64_t bytes) {
  constexpr double kb = 1024.0;
  constexpr double mb = 1024.0 * kb;
  constexpr double gb = 1024.0 * mb;
  const double value = double(bytes);
  const double magnitude = std::abs(value);
  if (magnitude >= gb) return fmt::format("{:.2f} GB", value / gb);
  if (magnitude >= mb) return fmt::format("{:.2f} MB", value / mb);
  if (magnitude >= kb) return fmt::format("{:.2f} KB", value / kb);
  return fmt::format("{} B", bytes);
}


std::string format_shapes(const std::vector<std::vector<std::int64_t>>& shapes) { return format_shape_list(shapes); }

KeyAverages::KeyAverages(std::vector<FunctionEventAvg> rows, std::string device_name, bool with_flops,
                         std::uint64_t dropped_events, bool profile_memory)
    : rows_(std::move(rows)),
      device_name_(std::move(device_name)),
      with_flops_(with_flops),
      dropped_events_(dropped_events),
      profile_memory_(profile_memory) {}

std::string KeyAverages::table(std::string_view sort_by, std::int64_t row_limit) const {
  TableOptions options;
  options.sort_by = std::string(sort_by);
  options.row_limit = row_limit;
  return table(options);
}

std::vector<const FunctionEventAvg*> KeyAverages::selected_rows(const TableOptions& options) const {
  std::vector<const FunctionEventAvg*> events;
  for (const FunctionEventAvg& row : rows_) events.push_back(&row);
  if (!options.sort_by.empty()) {
    const SortValue value = sort_value(options.sort_by, device_name_);
    std::stable_sort(events.begin(), events.end(), [&](const FunctionEventAvg* a, const FunctionEventAvg* b) {
      return value(*a) > value(*b);
    });
  }
  std::vector<const FunctionEventAvg*> selected;
  for (const FunctionEventAvg* event : events) {
    if (std::int64_t(selected.size()) == options.row_limit) break;
    if (options.top_level_events_only && event->has_cpu_parent) continue;
    if (options.only_rows_with_device_time && event->device_time_total_ns <= 0) continue;
    selected.push_back(event);
  }
  return selected;
}

TableCells KeyAverages::table_cells(const TableOptions& options) const {
  TableCells table;
  if (rows_.empty()) return table;
  // Column widths, which columns appear and the % denominators cover every row, printed or not.
  std::vector<const FunctionEventAvg*> events;
  for (const FunctionEventAvg& row : rows_) events.push_back(&row);
  const std::vector<const FunctionEventAvg*> printed_rows = selected_rows(options);
  const bool has_device_time = std::any_of(events.begin(), events.end(), [](const FunctionEventAvg* e) {
    return e->self_device_time_total_ns > 0;
  });
  const bool has_input_shapes = std::any_of(
      events.begin(), events.end(), [](const FunctionEventAvg* e) { return !e->input_shapes.empty(); });
  std::int64_t name_width = 0;
  std::int64_t shapes_width = 0;
  for (const FunctionEventAvg* event : events) {
    name_width = std::max<std::int64_t>(name_width, std::int64_t(event->key.size()) + 4);
    shapes_width =
        std::max<std::int64_t>(shapes_width, std::int64_t(format_shape_list(event->input_shapes).size()) + 4);
  }
  name_width = std::min(name_width, options.max_name_column_width);
  shapes_width = std::min(shapes_width, options.max_shapes_column_width);
  // Source Location: only rows grouped by stack carry one (group_by_stack_n > 0).
  std::int64_t source_width = 0;
  for (const FunctionEventAvg* event : events) {
    for (const std::string& frame : event->stack)
      source_width = std::max<std::int64_t>(source_width, std::int64_t(frame.size()) + 4);
  }
  const bool has_stack = source_width > 0;
  source_width = std::min(source_width, options.max_src_column_width);

  const std::string device = uppercase(device_name_);
  std::vector<std::string>& headers = table.headers;
  headers = {"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"};
  if (has_device_time) {
    for (std::string text : {"Self {}", "Self {} %", "{} total", "{} time avg"}) {
      replace_all(text, "{}", device);
      headers.push_back(text);
    }
  }
  const bool has_device_memory = profile_memory_ && std::any_of(events.begin(), events.end(), [](const auto* e) {
    return e->self_device_memory_usage > 0;
  });
  if (profile_memory_) {
    headers.push_back("CPU Mem");
    headers.push_back("Self CPU Mem");
    if (has_device_memory) {
      headers.push_back(device + " Mem");
      headers.push_back("Self " + device + " Mem");
    }
  }
  headers.push_back("# of Calls");
  auto add_column = [&table](std::int64_t width, bool left = false) {
    table.widths.push_back(width);
    table.left_aligned.push_back(left);
  };
  add_column(name_width);
  for (std::size_t i = 1; i < headers.size(); ++i) add_column(kColumnWidth);
  if (has_input_shapes) {
    headers.push_back("Input Shapes");
    add_column(shapes_width);
  }
  std::uint64_t smallest_flops = 0;
  for (const FunctionEventAvg* event : events) {
    if (event->flops > 0 && (smallest_flops == 0 || event->flops < smallest_flops))
      smallest_flops = event->flops;
  }
  const bool show_flops = with_flops_ && smallest_flops > 0;
  std::pair<double, std::string> flops_unit{1.0, ""};
  if (show_flops) {
    flops_unit = flops_scale(smallest_flops);
    headers.push_back("Total " + flops_unit.second);
    add_column(kColumnWidth);
  }
  // Last, in the header as in the rows (torch names it before the FLOPs column but prints its cells
  // after them, which misaligns the two when both are shown).
  if (has_stack) {
    headers.push_back("Source Location");
    add_column(source_width, /*left=*/true);
  }

  // Denominators cover every row, printed or not. Device time is summed over device rows only:
  // op rows repeat their kernels' time, as torch's table does.
  std::int64_t sum_self_cpu = 0;
  std::int64_t sum_self_device = 0;
  for (const FunctionEventAvg* event : events) {
    sum_self_cpu += event->self_cpu_time_total_ns;
    if (event->device_type == DeviceType::privateuse1 && !event->is_user_annotation) {
      sum_self_device += event->self_device_time_total_ns;
    }
  }

  const std::string& unit = options.time_unit;
  for (const FunctionEventAvg* event : printed_rows) {
    std::string name = event->key;
    const std::int64_t max_name = options.max_name_column_width;
    if (std::int64_t(name.size()) >= max_name - 3)
      name = name.substr(0, std::size_t(std::max<std::int64_t>(0, max_name - 3))) + "...";
    std::vector<std::string> cells = {
        name,
        format_time_share(double(event->self_cpu_time_total_ns), double(sum_self_cpu)),
        format_time_us(us(event->self_cpu_time_total_ns), unit),
        format_time_share(double(event->cpu_time_total_ns), double(sum_self_cpu)),
        format_time_us(us(event->cpu_time_total_ns), unit),
        format_time_us(us(event->cpu_time_avg_ns()), unit),
    };
    if (has_device_time) {
      cells.push_back(format_time_us(us(event->self_device_time_total_ns), unit));
      cells.push_back(format_time_share(double(event->self_device_time_total_ns), double(sum_self_device)));
      cells.push_back(format_time_us(us(event->device_time_total_ns), unit));
      cells.push_back(format_time_us(us(event->device_time_avg_ns()), unit));
    }
    if (profile_memory_) {
      cells.push_back(format_memory(event->cpu_memory_usage));
      cells.push_back(format_memory(event->self_cpu_memory_usage));
      if (has_device_memory) {
        cells.push_back(format_memory(event->device_memory_usage));
        cells.push_back(format_memory(event->self_device_memory_usage));
      }
    }
    cells.push_back(std::to_string(event->count));
    if (has_input_shapes)
      cells.push_back(format_shape_list(event->input_shapes).substr(0, std::size_t(shapes_width)));
    if (show_flops) {
      cells.push_back(event->flops == 0 ? std::string("--")
                                        : fmt::format("{:8.3f}", double(event->flops) * flops_unit.first));
    }
    std::vector<std::string> frames;
    if (has_stack) {
      // The first frame in the row, each further frame on a row of its own.
      cells.push_back(event->stack.empty() ? std::string() : trim_frame(event->stack.front(), source_width));
      for (std::size_t f = 1; f < event->stack.size(); ++f) frames.push_back(trim_frame(event->stack[f], source_width));
    }
    table.rows.push_back(std::move(cells));
    table.frames.push_back(std::move(frames));
  }
  table.footer.push_back("Self CPU time total: " + format_time_us(us(sum_self_cpu), unit));
  if (has_device_time)
    table.footer.push_back(fmt::format("Self {} time total: {}", device, format_time_us(us(sum_self_device), unit)));
  if (dropped_events_ > 0) {
    table.footer.push_back(fmt::format(
        "Dropped events: {} (the profiler's event cap was reached; raise max_events to keep them)",
        dropped_events_));
  }
  for (const std::string& note : notes_) table.footer.push_back("Note: " + note);
  table.has_stack = has_stack;
  return table;
}

std::string KeyAverages::table(const TableOptions& options) const {
  const TableCells cells = table_cells(options);
  if (cells.headers.empty()) return "";
  Layout layout;
  for (std::size_t i = 0; i < cells.widths.size(); ++i) layout.add_column(cells.widths[i], cells.left_aligned[i]);

  std::string out;
  auto append = [&out](const std::string& line) {
    out += line;
    out += '\n';
  };
  const std::string separator = layout.separator();
  if (options.header) {
    append(std::string(static_cast<std::size_t>(layout.line_length), '='));
    append(*options.header);
  }
  if (options.top_level_events_only) {
    append(std::string(static_cast<std::size_t>(layout.line_length), '='));
    append("This report only display top-level ops statistics");
  }
  append(separator);
  append(layout.row(cells.headers));
  append(separator);
  for (std::size_t r = 0; r < cells.rows.size(); ++r) {
    append(layout.row(cells.rows[r]));
    if (!cells.has_stack) continue;
    // Each further frame on a row of its own, then a blank row.
    std::vector<std::string> frame_cells(cells.headers.size());
    for (const std::string& frame : cells.frames[r]) {
      frame_cells.back() = frame;
      append(layout.row(frame_cells));
    }
    frame_cells.back().clear();
    append(layout.row(frame_cells));
  }
  append(separator);
  for (const std::string& line : cells.footer) append(line);
  return out;
}

namespace {

// The data formats' columns, in order (docs/formats.md). input_shapes only when grouped by shape.
const char* const kTimeColumns[] = {"cpu_time_total_ns", "self_cpu_time_total_ns", "device_time_total_ns",
                                    "self_device_time_total_ns"};
const char* const kMemoryColumns[] = {"cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage",
                                      "self_device_memory_usage"};

std::array<std::int64_t, 4> times(const FunctionEventAvg& row) {
  return {row.cpu_time_total_ns, row.self_cpu_time_total_ns, row.device_time_total_ns,
          row.self_device_time_total_ns};
}

std::array<std::int64_t, 4> memory(const FunctionEventAvg& row) {
  return {row.cpu_memory_usage, row.self_cpu_memory_usage, row.device_memory_usage, row.self_device_memory_usage};
}

const char* device_type_name(DeviceType type) { return type == DeviceType::cpu ? "cpu" : "privateuse1"; }

// RFC 4180: a field with a comma, quote, CR or LF is quoted, and its quotes doubled.
void append_csv_field(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += field;
    return;
  }
  out += '"';
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

}  // namespace

std::string KeyAverages::to_csv(const TableOptions& options) const {
  const std::vector<const FunctionEventAvg*> selected = selected_rows(options);
  std::vector<std::string> header = {"key", "device_type", "count"};
  header.insert(header.end(), std::begin(kTimeColumns), std::end(kTimeColumns));
  header.insert(header.end(), std::begin(kMemoryColumns), std::end(kMemoryColumns));
  header.emplace_back("flops");
  if (group_by_input_shape_) header.emplace_back("input_shapes");
  if (group_by_stack_n_ > 0) header.emplace_back("stack");
  header.emplace_back("is_user_annotation");
  std::string out = fmt::format("{}\r\n", fmt::join(header, ","));
  for (const FunctionEventAvg* row : selected) {
    append_csv_field(out, row->key);
    fmt::format_to(std::back_inserter(out), ",{},{},{},{},{}", device_type_name(row->device_type), row->count,
                   fmt::join(times(*row), ","), fmt::join(memory(*row), ","), row->flops);
    if (group_by_input_shape_) {
      out += ',';
      append_csv_field(out, format_shapes(row->input_shapes));
    }
    if (group_by_stack_n_ > 0) {
      out += ',';
      append_csv_field(out, fmt::format("{}", fmt::join(row->stack, ";")));
    }
    out += row->is_user_annotation ? ",true\r\n" : ",false\r\n";
  }
  return out;
}

std::string KeyAverages::to_json(const TableOptions& options) const {
  const std::vector<const FunctionEventAvg*> selected = selected_rows(options);
  std::string out;
  JsonWriter json([&out](std::string_view piece) { out += piece; });
  json.begin_object();
  json.key("device_name").value(device_name_);
  json.key("group_by_input_shape").value(group_by_input_shape_);
  json.key("group_by_stack_n").value(group_by_stack_n_);
  json.key("profile_memory").value(profile_memory_);
  json.key("with_flops").value(with_flops_);
  json.key("dropped_events").value(dropped_events_);
  json.key("notes").begin_array();
  for (const std::string& note : notes_) json.value(note);
  json.end_array();
  json.key("rows").begin_array(true);
  for (const FunctionEventAvg* row : selected) {
    json.begin_object();
    json.key("key").value(row->key);
    json.key("device_type").value(device_type_name(row->device_type));
    json.key("count").value(row->count);
    const auto row_times = times(*row);
    for (std::size_t i = 0; i < row_times.size(); ++i) json.key(kTimeColumns[i]).value(row_times[i]);
    const auto row_memory = memory(*row);
    for (std::size_t i = 0; i < row_memory.size(); ++i) json.key(kMemoryColumns[i]).value(row_memory[i]);
    json.key("flops").value(row->flops);
    if (group_by_input_shape_) {
      json.key("input_shapes").begin_array();
      for (const std::vector<std::int64_t>& shape : row->input_shapes) {
        json.begin_array();
        for (std::int64_t size : shape) json.value(size);
        json.end_array();
      }
      json.end_array();
    }
    if (group_by_stack_n_ > 0) {
      json.key("stack").begin_array();
      for (const std::string& frame : row->stack) json.value(frame);
      json.end_array();
    }
    json.key("is_user_annotation").value(row->is_user_annotation);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  json.flush();
  out += '\n';
  return out;
}

KeyAverages key_averages(const CollectedTrace& trace, const KeyAveragesOptions& options) {
  // Memory that no op owns becomes "[memory]" events of its own (torch's top-level memory events),
  // placed among the others by time.
  std::vector<FunctionEvent> orphans;
  for (const MemoryEvent& memory : trace.memory) {
    if (memory.owner >= 0) continue;
    FunctionEvent& event = orphans.emplace_back();
    event.name = "[memory]";
    event.thread = memory.thread;
    event.start_ns = event.end_ns = memory.ts_ns;
    (memory.device_index < 0 ? event.cpu_memory_usage : event.device_memory_usage) = memory.bytes;
    (memory.device_index < 0 ? event.self_cpu_memory_usage : event.self_device_memory_usage) = memory.bytes;
  }
  std::vector<const FunctionEvent*> ordered;
  ordered.reserve(trace.events.size() + orphans.size());
  auto orphan = orphans.begin();
  for (const FunctionEvent& event : trace.events) {
    for (; orphan != orphans.end() && orphan->start_ns < event.start_ns; ++orphan) ordered.push_back(&*orphan);
    ordered.push_back(&event);
  }
  for (; orphan != orphans.end(); ++orphan) ordered.push_back(&*orphan);

  std::vector<FunctionEventAvg> rows;
  std::map<std::string, std::size_t> row_of_key;
  for (const FunctionEvent* event_pointer : ordered) {
    const FunctionEvent& event = *event_pointer;
    const std::string key_name = row_key(event.name);
    std::string group =
        fmt::format("{}\x1f{}\x1f{}", key_name, int(event.device_type), event.is_user_annotation());
    if (options.group_by_input_shape) {
      // Appended in two steps: `"\x1f" + std::string&&` trips a false -Wrestrict in GCC 12 at -O3.
      group += '\x1f';
      group += format_shape_list(event.input_shapes);
    }
    const std::size_t stack_depth = options.group_by_stack_n > 0
                                        ? std::min(event.stack.size(), std::size_t(options.group_by_stack_n))
                                        : 0;
    for (std::size_t f = 0; f < stack_depth; ++f) {
      group += '\x1e';
      group += event.stack[f];
    }
    auto [found, inserted] = row_of_key.emplace(std::move(group), rows.size());
    if (inserted) {
      FunctionEventAvg& row = rows.emplace_back();
      row.key = key_name;
      row.device_type = event.device_type;
      row.is_user_annotation = event.is_user_annotation();
      row.has_cpu_parent = event.parent >= 0;
      if (options.group_by_input_shape) row.input_shapes = event.input_shapes.to_vector();
      row.stack.assign(event.stack.begin(), event.stack.begin() + std::ptrdiff_t(stack_depth));
    }
    FunctionEventAvg& row = rows[found->second];
    row.count += 1;
    row.cpu_time_total_ns += event.cpu_time_total_ns;
    row.self_cpu_time_total_ns += event.self_cpu_time_total_ns;
    row.device_time_total_ns += event.device_time_total_ns;
    row.self_device_time_total_ns += event.self_device_time_total_ns;
    row.flops += event.flops;
    row.cpu_memory_usage += event.cpu_memory_usage;
    row.self_cpu_memory_usage += event.self_cpu_memory_usage;
    row.device_memory_usage += event.device_memory_usage;
    row.self_device_memory_usage += event.self_device_memory_usage;
  }
  KeyAverages averages(std::move(rows), options.device_name, options.with_flops, trace.dropped, trace.profile_memory);
  averages.set_notes(trace.notes);
  averages.set_group_by_input_shape(options.group_by_input_shape);
  averages.set_group_by_stack_n(std::max<std::int64_t>(0, options.group_by_stack_n));
  return averages;
}

std::string collapsed_stacks(const CollectedTrace& trace, std::string_view metric) {
  std::string key = lowercase(metric);
  for (std::string_view device : {"cuda", "xpu", "privateuse1"}) replace_all(key, device, "device");
  const bool cpu = key == "self_cpu_time_total";
  SIGHTLINE_CHECK(cpu || key == "self_device_time_total",
                  "export_stacks: unknown metric '{}'; use self_cpu_time_total or self_device_time_total (also "
                  "spelled self_cuda_time_total, self_xpu_time_total, self_privateuse1_time_total)",
                  metric);
  std::string out;
  for (const FunctionEvent& event : trace.events) {
    const std::int64_t value = cpu ? event.self_cpu_time_total_ns : event.self_device_time_total_ns;
    if (event.stack.empty() || value <= 0) continue;
    // Outermost frame first, as flamegraph.pl reads it; whitespace inside a frame becomes '_'.
    for (auto frame = event.stack.rbegin(); frame != event.stack.rend(); ++frame) {
      if (frame != event.stack.rbegin()) out += ';';
      for (char c : *frame) out += (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? '_' : c;
    }
    fmt::format_to(std::back_inserter(out), " {}\n", value);
  }
  return out;
}

void export_stacks(const CollectedTrace& trace, const std::string& path, std::string_view metric) {
  const std::string text = collapsed_stacks(trace, metric);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  SIGHTLINE_CHECK(file != nullptr, "export_stacks: cannot write '{}': {}", path, std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const bool closed = std::fclose(file) == 0;
  SIGHTLINE_CHECK(written && closed, "export_stacks: writing '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace sightline::profiler
