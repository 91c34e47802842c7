#include "analysis/check.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/summary.h"
#include "analysis/xml.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

namespace sightline::analysis {
namespace {

namespace fs = std::filesystem;

constexpr int kBaselineVersion = 1;
constexpr std::string_view kOpPrefix = "op:";

bool is_op(std::string_view name) { return name.starts_with(kOpPrefix); }

bool is_known_metric(std::string_view name) {
  if (name == "*") return true;
  if (is_op(name)) return name.size() > kOpPrefix.size();
  const auto& totals = gate_total_names();
  return std::find(totals.begin(), totals.end(), name) != totals.end();
}

std::string known_metrics() {
  std::string out;
  for (std::string_view name : gate_total_names()) out += fmt::format("{}, ", name);
  return out + "op:<name>, op:* (every op), * (every metric)";
}

// Integers as integers; device times (fractions of a ns: device cycles) to 3 decimals, trailing zeros
// dropped; a nonzero value that would round to 0 in its shortest exact form, so that a failing delta never
// reads "0".
std::string number(double value) {
  std::string text = fmt::format("{:.3f}", value);
  while (text.ends_with('0')) text.pop_back();
  if (text.ends_with('.')) text.pop_back();
  if (text == "0" || text == "-0") return value == 0 ? "0" : fmt::format("{}", value);
  return text;
}

// The baseline file keeps every value exactly: integers as JSON integers (diffable), others in
// nlohmann's shortest round-trip form.
nlohmann::json exact(double value) {
  if (value == std::floor(value) && std::abs(value) < 9007199254740992.0) return static_cast<int64_t>(value);
  return value;
}

std::string with_unit(double value, MetricUnit unit) {
  switch (unit) {
    case MetricUnit::ns: return number(value) + " ns";
    case MetricUnit::bytes: return number(value) + " B";
    case MetricUnit::count: return number(value);
  }
  return number(value);
}

std::string signed_with_unit(double value, MetricUnit unit) {
  return fmt::format("{}{}", value > 0 ? "+" : "", with_unit(value, unit));
}

std::string delta_text(const MetricCheck& m) {
  std::string out = signed_with_unit(m.delta(), m.unit);
  if (m.baseline && *m.baseline != 0 && m.delta() != 0) out += fmt::format(" ({:+.2f}%)", 100 * m.delta() / *m.baseline);
  return out;
}

std::string value_text(const std::optional<double>& value, MetricUnit unit) {
  return value ? with_unit(*value, unit) : std::string("-");
}

std::string allowed_text(const MetricCheck& m) {
  const std::string amount = with_unit(m.allowed, m.unit);
  return m.threshold.ends_with("%") ? fmt::format("{} ({})", amount, m.threshold) : amount;
}

std::string sentence(const MetricCheck& m) {
  if (m.status == CheckStatus::regressed) {
    if (!m.baseline) return fmt::format("{} is new: {} where the baseline has none, more than the {} allowed", m.name,
                                        value_text(m.current, m.unit), allowed_text(m));
    return fmt::format("{} grew by {}, more than the {} allowed", m.name, delta_text(m), allowed_text(m));
  }
  if (m.status == CheckStatus::improved) {
    if (!m.current) return fmt::format("{} is gone (was {})", m.name, value_text(m.baseline, m.unit));
    return fmt::format("{} fell by {}", m.name, delta_text(m));
  }
  return fmt::format("{} changed by {}, within the {} allowed", m.name, delta_text(m), allowed_text(m));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot read '{}'; check the path and its permissions", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("'{}' is not valid JSON ({}); fix it or write it again", source, e.what());
  }
}

double json_number(const nlohmann::json& value, const std::string& where, const std::string& source) {
  SIGHTLINE_CHECK(value.is_number(), "'{}': {} must be a number, not {}", source, where, value.dump());
  const double v = value.get<double>();
  SIGHTLINE_CHECK(std::isfinite(v) && v >= 0, "'{}': {} must be a finite number >= 0, not {}", source, where,
                  value.dump());
  return v;
}

bool rows_before(const MetricCheck& a, const MetricCheck& b) {
  if (std::abs(a.delta()) != std::abs(b.delta())) return std::abs(a.delta()) > std::abs(b.delta());
  return a.name < b.name;
}

// The report's rows: every total, and the ops that changed (the unchanged ones are counted).
std::vector<const MetricCheck*> shown(const CheckResult& result, size_t& unchanged_ops) {
  std::vector<const MetricCheck*> rows;
  unchanged_ops = 0;
  for (const MetricCheck& m : result.metrics) {
    if (is_op(m.name) && m.delta() == 0 && m.status == CheckStatus::pass) {
      ++unchanged_ops;
    } else {
      rows.push_back(&m);
    }
  }
  return rows;
}

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|' || c == '\\' || c == '`' || c == '*' || c == '_' || c == '<') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string verdict(const CheckResult& r) {
  const size_t n = r.regressions();
  return n == 0 ? fmt::format("pass, {} metrics within their thresholds", r.metrics.size())
                : fmt::format("FAIL, {} of {} metrics regressed", n, r.metrics.size());
}

}  // namespace

const std::vector<std::string_view>& gate_total_names() {
  static const std::vector<std::string_view> names = {"device_busy", "span",     "idle",
                                                      "executions",  "switches", "hbm_bytes"};
  return names;
}

MetricUnit gate_metric_unit(std::string_view name) {
  if (name == "executions" || name == "switches") return MetricUnit::count;
  if (name == "hbm_bytes") return MetricUnit::bytes;
  return MetricUnit::ns;
}

GateMetrics gate_metrics(const ProfileDir& profile) {
  GateMetrics m;
  m.source = profile.path;
  m.device = profile.manifest.device.name;
  const Summary summary = summarize_profile(profile);
  m.totals["device_busy"] = summary.total_time_ns;
  m.totals["executions"] = static_cast<double>(summary.executions);
  m.totals["hbm_bytes"] = static_cast<double>(summary.hbm_bytes());
  if (profile.trace) {
    const DeviceActivity activity = device_activity(*profile.trace);
    m.totals["span"] = static_cast<double>(activity.span_ns);
    m.totals["idle"] = static_cast<double>(activity.idle_ns);
    m.totals["switches"] = static_cast<double>(activity.switches);
    const auto averages = profiler::key_averages(*profile.trace, {.device_name = "neuron"});
    for (const profiler::FunctionEventAvg& row : averages.rows()) {
      if (row.device_type != profiler::DeviceType::cpu || row.self_device_time_total_ns == 0) continue;
      m.ops[row.key] += static_cast<double>(row.self_device_time_total_ns);
    }
  }
  return m;
}

GateMetrics gate_metrics_load(const std::string& path) {
  std::error_code ec;
  SIGHTLINE_CHECK(fs::exists(path, ec), "'{}' does not exist; pass a profile directory or a baseline file written "
                  "by `sightline check PROFILE --write-baseline FILE`", path);
  if (fs::is_directory(path, ec)) return gate_metrics(profile_dir_load(path));
  return gate_metrics_parse_json(read_file(path), path);
}

GateMetrics gate_metrics_parse_json(const std::string& text, const std::string& source) {
  const nlohmann::json doc = parse_json(text, source);
  SIGHTLINE_CHECK(doc.is_object() && doc.contains("sightline_baseline"),
                  "'{}' is not a sightline baseline (no \"sightline_baseline\" key); write one with `sightline "
                  "check PROFILE --write-baseline FILE`", source);
  SIGHTLINE_CHECK(doc["sightline_baseline"] == kBaselineVersion,
                  "'{}' is a baseline of version {}, this sightline reads version {}; write it again", source,
                  doc["sightline_baseline"].dump(), kBaselineVersion);
  GateMetrics m;
  m.source = source;
  if (doc.contains("device")) {
    SIGHTLINE_CHECK(doc["device"].is_string(), "'{}': \"device\" must be a string", source);
    m.device = doc["device"].get<std::string>();
  }
  for (const char* section : {"totals", "ops"}) {
    SIGHTLINE_CHECK(doc.contains(section) && doc[section].is_object(), "'{}' has no \"{}\" object; write it again "
                    "with --write-baseline", source, section);
  }
  for (const auto& [name, value] : doc["totals"].items()) {
    SIGHTLINE_CHECK(is_known_metric(name) && !is_op(name) && name != "*", "'{}': unknown metric \"{}\" in "
                    "\"totals\"; known: {}", source, name, known_metrics());
    m.totals[name] = json_number(value, fmt::format("totals.{}", name), source);
  }
  for (const auto& [name, value] : doc["ops"].items()) m.ops[name] = json_number(value, "ops." + name, source);
  return m;
}

std::string gate_metrics_json(const GateMetrics& m) {
  nlohmann::json doc = {{"sightline_baseline", kBaselineVersion}, {"device", m.device}};
  doc["totals"] = nlohmann::json::object();
  for (const auto& [name, value] : m.totals) doc["totals"][name] = exact(value);
  doc["ops"] = nlohmann::json::object();
  for (const auto& [name, value] : m.ops) doc["ops"][name] = exact(value);
  return doc.dump(2) + "\n";
}

Threshold Thresholds::for_metric(const std::string& name) const {
  if (auto it = by_metric.find(name); it != by_metric.end()) return it->second;
  if (is_op(name)) {
    if (auto it = by_metric.find("op:*"); it != by_metric.end()) return it->second;
  }
  if (auto it = by_metric.find("*"); it != by_metric.end()) return it->second;
  return {};
}

void thresholds_add(Thresholds& thresholds, std::string_view assignment) {
  const size_t eq = assignment.rfind('=');
  SIGHTLINE_CHECK(eq != std::string_view::npos && eq > 0, "threshold '{}' is not METRIC=AMOUNT; e.g. "
                  "device_busy=2% or op:aten::mul=100ns", assignment);
  const std::string name(assignment.substr(0, eq));
  const std::string_view amount = assignment.substr(eq + 1);
  SIGHTLINE_CHECK(is_known_metric(name), "threshold '{}' names an unknown metric '{}'; known: {}", assignment, name,
                  known_metrics());
  double value = 0;
  const auto [end, error] = std::from_chars(amount.data(), amount.data() + amount.size(), value);
  SIGHTLINE_CHECK(error == std::errc() && std::isfinite(value) && value >= 0 && end != amount.data(),
                  "threshold '{}' needs a number >= 0 after '=', e.g. {}=2%", assignment, name);
  const std::string_view suffix(end, static_cast<size_t>(amount.data() + amount.size() - end));
  Threshold t{.amount = value};
  const MetricUnit unit = name == "*" ? MetricUnit::count : gate_metric_unit(name);
  static const std::map<std::string_view, double> time_units = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  static const std::map<std::string_view, double> byte_units = {
      {"B", 1}, {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}};
  if (suffix == "%") {
    t.percent = true;
  } else if (!suffix.empty()) {
    const auto& units = unit == MetricUnit::ns ? time_units : byte_units;
    const auto it = units.find(suffix);
    SIGHTLINE_CHECK(unit != MetricUnit::count && it != units.end(), "threshold '{}': '{}' is not a unit of {}; use {}",
                    assignment, suffix, name,
                    name == "*"                 ? "a percent, or a plain number in each metric's unit"
                    : unit == MetricUnit::ns    ? "ns, us, ms, s or %"
                    : unit == MetricUnit::bytes ? "B, KiB, MiB, GiB or %"
                                                : "a plain number or %");
    t.amount *= it->second;
  }
  thresholds.by_metric[name] = t;
}

void thresholds_parse_json(Thresholds& thresholds, const std::string& text, const std::string& source) {
  const nlohmann::json doc = parse_json(text, source);
  SIGHTLINE_CHECK(doc.is_object(), "'{}' must be a JSON object of metric: amount, e.g. {{\"device_busy\": \"2%\"}}",
                  source);
  for (const auto& [name, value] : doc.items()) {
    SIGHTLINE_CHECK(value.is_string() || value.is_number(), "'{}': the threshold of \"{}\" must be a string such "
                    "as \"2%\" or \"100ns\", or a number", source, name);
    const std::string amount = value.is_string() ? value.get<std::string>() : number(value.get<double>());
    try {
      thresholds_add(thresholds, name + "=" + amount);
    } catch (const Error& e) {
      fail("'{}': {}", source, e.what());
    }
  }
}

std::string_view check_status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::pass: return "ok";
    case CheckStatus::regressed: return "REGRESSED";
    case CheckStatus::improved: return "improved";
  }
  return "ok";
}

size_t CheckResult::regressions() const {
  return static_cast<size_t>(
      std::count_if(metrics.begin(), metrics.end(), [](const MetricCheck& m) { return m.status == CheckStatus::regressed; }));
}

CheckResult check(const GateMetrics& baseline, const GateMetrics& current, const Thresholds& thresholds) {
  SIGHTLINE_CHECK(baseline.device.empty() || current.device.empty() || baseline.device == current.device,
                  "the baseline '{}' was measured on the {} device spec and the profile '{}' on {}; modeled times "
                  "differ between specs, so profile on {} or write a new baseline", baseline.source, baseline.device,
                  current.source, current.device, baseline.device);
  CheckResult result;
  result.baseline_source = baseline.source;
  result.current_source = current.source;
  const auto add = [&](const std::string& name, std::optional<double> a, std::optional<double> b) {
    MetricCheck m;
    m.name = name;
    m.unit = gate_metric_unit(name);
    m.baseline = a;
    m.current = b;
    const Threshold t = thresholds.for_metric(name);
    m.allowed = t.allowed(a.value_or(0));
    m.threshold = t.percent ? number(t.amount) + "%" : number(t.amount);
    m.status = m.delta() > m.allowed ? CheckStatus::regressed
               : m.delta() < 0       ? CheckStatus::improved
                                     : CheckStatus::pass;
    result.metrics.push_back(std::move(m));
  };
  for (std::string_view name_view : gate_total_names()) {
    const std::string name(name_view);
    const auto a = baseline.totals.find(name), b = current.totals.find(name);
    const bool in_a = a != baseline.totals.end(), in_b = b != current.totals.end();
    if (!in_a && !in_b) continue;
    SIGHTLINE_CHECK(in_a && in_b, "'{}' has no {} but '{}' has; {} comes from trace.json, so profile both with the "
                    "CPU activity (or write the baseline again)", in_a ? current.source : baseline.source, name,
                    in_a ? baseline.source : current.source, name);
    add(name, a->second, b->second);
  }
  const size_t first_op = result.metrics.size();
  std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> ops;
  for (const auto& [name, ns] : baseline.ops) ops[name].first = ns;
  for (const auto& [name, ns] : current.ops) ops[name].second = ns;
  for (const auto& [name, sides] : ops) add(std::string(kOpPrefix) + name, sides.first, sides.second);
  std::stable_sort(result.metrics.begin() + static_cast<std::ptrdiff_t>(first_op), result.metrics.end(), rows_before);
  return result;
}

std::string check_text(const CheckResult& r) {
  std::string out = fmt::format("sightline check: {}\n  baseline: {}\n  profile:  {}\n\n", verdict(r),
                                r.baseline_source, r.current_source);
  size_t unchanged_ops = 0;
  const std::vector<const MetricCheck*> rows = shown(r, unchanged_ops);
  const std::vector<std::string> header = {"status", "metric", "baseline", "current", "delta", "allowed"};
  std::vector<std::vector<std::string>> cells;
  for (const MetricCheck* m : rows) {
    cells.push_back({std::string(check_status_name(m->status)), m->name, value_text(m->baseline, m->unit),
                     value_text(m->current, m->unit), delta_text(*m), allowed_text(*m)});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const std::vector<std::string>& row) {
    std::string text = " ";
    for (size_t c = 0; c < row.size(); ++c) {
      // Names and status left-aligned, numbers right-aligned.
      text += c < 2 ? fmt::format(" {:<{}}", row[c], width[c]) : fmt::format("  {:>{}}", row[c], width[c]);
    }
    while (text.ends_with(' ')) text.pop_back();
    return text + "\n";
  };
  out += line(header);
  for (const auto& row : cells) out += line(row);
  if (unchanged_ops > 0) out += fmt::format("  ({} more {} unchanged)\n", unchanged_ops, unchanged_ops == 1 ? "op" : "ops");
  bool first = true;
  for (const MetricCheck* m : rows) {
    if (m->status != CheckStatus::regressed) continue;
    out += first ? "\nregressions:\n" : "";
    first = false;
    out += fmt::format("  {}\n", sentence(*m));
  }
  return out;
}

std::string check_junit(const CheckResult& r) {
  const size_t failures = r.regressions();
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"sightline check\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n",
                     r.metrics.size(), failures);
  out += fmt::format("  <testsuite name=\"sightline check\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
                     "skipped=\"0\">\n", r.metrics.size(), failures);
  out += "    <properties>\n";
  out += fmt::format("      <property name=\"baseline\" value=\"{}\"/>\n", xml_escape(r.baseline_source));
  out += fmt::format("      <property name=\"profile\" value=\"{}\"/>\n", xml_escape(r.current_source));
  out += "    </properties>\n";
  for (const MetricCheck& m : r.metrics) {
    const std::string classname = is_op(m.name) ? "sightline.check.op" : "sightline.check.total";
    const std::string name = is_op(m.name) ? m.name.substr(kOpPrefix.size()) : m.name;
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\"", classname, xml_escape(name));
    if (m.status != CheckStatus::regressed) {
      out += "/>\n";
      continue;
    }
    out += fmt::format(">\n      <failure type=\"regression\" message=\"{}\">baseline {}, current {}, delta {}, "
                       "allowed {}</failure>\n    </testcase>\n", xml_escape(sentence(m)),
                       xml_escape(value_text(m.baseline, m.unit)), xml_escape(value_text(m.current, m.unit)),
                       xml_escape(delta_text(m)), xml_escape(allowed_text(m)));
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string check_markdown(const CheckResult& r) {
  std::string out = fmt::format("### sightline check: {}\n\nBaseline {}, profile {}. Modeled device time: the "
                                "same program gives the same numbers on every machine.\n\n", verdict(r),
                                markdown_cell(r.baseline_source), markdown_cell(r.current_source));
  out += "| status | metric | baseline | current | delta | allowed |\n|---|---|---:|---:|---:|---:|\n";
  size_t unchanged_ops = 0;
  for (const MetricCheck* m : shown(r, unchanged_ops)) {
    const std::string status(check_status_name(m->status));
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", m->status == CheckStatus::regressed ? "**" + status + "**" : status,
                       markdown_cell(m->name), value_text(m->baseline, m->unit), value_text(m->current, m->unit),
                       markdown_cell(delta_text(*m)), markdown_cell(allowed_text(*m)));
  }
  if (unchanged_ops > 0) out += fmt::format("\n{} more {} unchanged.\n", unchanged_ops, unchanged_ops == 1 ? "op" : "ops");
  return out;
}

}  // namespace sightline::analysis
