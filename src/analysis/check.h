// The regression gate: a profile's device-side metrics against a baseline, with a threshold per
// metric (`sightline check`, docs/ci-gate.md).
//
//   analysis::GateMetrics baseline = analysis::gate_metrics_load("tests/baselines/rmsnorm_naive.json");
//   analysis::GateMetrics current = analysis::gate_metrics(analysis::profile_dir_load("profiles/naive"));
//   analysis::Thresholds limits;
//   analysis::thresholds_add(limits, "device_busy=2%");        // or thresholds_parse_json(file text)
//   analysis::CheckResult result = analysis::check(baseline, current, limits);
//   std::cout << analysis::check_text(result);                 // exit 1 when result.regressed()
//
// Every metric is modeled time, counts or bytes: the same program gives the same numbers on every
// machine, so the default threshold is 0 (any increase fails). The values come from the summary code
// (summary.h: summarize_profile, device_activity) and the key_averages table; nothing is recomputed here.
// Metrics, all "more is worse":
//   device_busy   Summary::total_time_ns (sum of the captured executions' device time), ns
//   span          DeviceActivity::span_ns (first to last device activity, trace.json), ns
//   idle          DeviceActivity::idle_ns (gaps between executions), ns
//   executions    Summary::executions
//   switches      DeviceActivity::switches (nc_model_switch)
//   hbm_bytes     Summary::hbm_bytes() (read + written)
//   op:<name>     self device time of the key_averages row <name>, ns
// A baseline is a profile directory or the small JSON file gate_metrics_json writes (docs/formats.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

enum class MetricUnit { ns, count, bytes };

struct GateMetrics {
  std::string source;                    // the directory or file it came from (for the report)
  std::string device;                    // the device spec's name (trn2, ...)
  std::map<std::string, double> totals;  // by metric name; a profile without trace.json lacks span/idle/switches
  std::map<std::string, double> ops;     // self device ns by op (rows with device time only)
};

// The metric names that are not ops, in report order.
const std::vector<std::string_view>& gate_total_names();
MetricUnit gate_metric_unit(std::string_view name);  // ops are ns

GateMetrics gate_metrics(const ProfileDir& profile);
// `path` is a profile directory or a baseline JSON file; throws sightline::Error naming what is wrong.
GateMetrics gate_metrics_load(const std::string& path);
GateMetrics gate_metrics_parse_json(const std::string& text, const std::string& source);
std::string gate_metrics_json(const GateMetrics& metrics);  // the baseline file: sorted keys, one per line

// How much a metric may grow: an absolute amount in its unit, or a percent of the baseline.
struct Threshold {
  double amount = 0;
  bool percent = false;
  double allowed(double baseline) const { return percent ? baseline * amount / 100 : amount; }
};

// By metric name; "op:*" is the default for every op, "*" for every metric. Unlisted: 0.
struct Thresholds {
  std::map<std::string, Threshold> by_metric;
  Threshold for_metric(const std::string& name) const;
};

// "device_busy=2%", "op:aten::mul=100ns", "span=1.5us", "hbm_bytes=4KiB", "executions=1".
// Times take ns, us, ms or s; bytes B, KiB, MiB, GiB; counts a plain number; any metric a percent.
// Throws sightline::Error for an unknown metric, a unit that does not fit it, or a negative amount.
void thresholds_add(Thresholds& thresholds, std::string_view assignment);
// {"device_busy": "2%", "op:*": "100ns", "executions": 0}: the same values as the flags.
void thresholds_parse_json(Thresholds& thresholds, const std::string& text, const std::string& source);

enum class CheckStatus { pass, regressed, improved };
std::string_view check_status_name(CheckStatus status);  // "ok", "REGRESSED", "improved"

struct MetricCheck {
  std::string name;  // "device_busy", "op:aten::mul"
  MetricUnit unit = MetricUnit::ns;
  std::optional<double> baseline, current;  // missing: the op ran on one side only
  double allowed = 0;                       // the threshold resolved against the baseline
  std::string threshold;                    // as written ("2%", "0")
  CheckStatus status = CheckStatus::pass;

  double delta() const { return current.value_or(0) - baseline.value_or(0); }
};

struct CheckResult {
  std::string baseline_source, current_source;
  std::vector<MetricCheck> metrics;  // totals in gate_total_names order, then ops by |delta|, then name
  size_t regressions() const;
  bool regressed() const { return regressions() > 0; }
};

// Throws sightline::Error when the two were measured on different device specs.
CheckResult check(const GateMetrics& baseline, const GateMetrics& current, const Thresholds& thresholds);

std::string check_text(const CheckResult& result);      // for a terminal or a CI log
std::string check_junit(const CheckResult& result);     // JUnit XML: one testcase per metric
std::string check_markdown(const CheckResult& result);  // a table for a pull-request comment

}  // namespace sightline::analysis
