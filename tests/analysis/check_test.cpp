// The regression gate (analysis/check.h): thresholds, the baseline file, the verdicts and the three
// reports. The reports' golden files come from fixed metrics built here, so a change of the simulator's
// cost model cannot move them; the profile tests check what the gate says about generated profiles.
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "analysis/check.h"
#include "analysis/profile_dir.h"
#include "analysis/summary.h"
#include "analysis/xml.h"
#include "profiles.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

using namespace sightline;
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void expect_golden(const std::string& actual, const std::string& name) {
  const std::string path = std::string(SIGHTLINE_TEST_DATA_DIR) + "/" + name;
  if (std::getenv("SIGHTLINE_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << actual;
  EXPECT_EQ(actual, read_file(path)) << name << ": regenerate with SIGHTLINE_UPDATE_GOLDEN=1 after a deliberate change";
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A baseline and a run of the same program where one op got slower, one appeared, one went away.
analysis::GateMetrics fixed_baseline() {
  analysis::GateMetrics m;
  m.source = "baseline.json";
  m.device = "trn2";
  m.totals = {{"device_busy", 25335.386}, {"span", 366636}, {"idle", 341300},
              {"executions", 6},          {"switches", 6},  {"hbm_bytes", 1182724}};
  m.ops = {{"aten::mul", 15786}, {"aten::mean", 3787}, {"aten::rsqrt", 2885}, {"aten::add", 2878},
           {"aten::copy_", 1300}, {"my <op> & \"friends\" | x", 500}};
  return m;
}

analysis::GateMetrics fixed_current() {
  analysis::GateMetrics m = fixed_baseline();
  m.source = "profiles/naive";
  m.totals["device_busy"] = 27950.5;
  m.totals["span"] = 370000;
  m.totals["idle"] = 341300;
  m.totals["executions"] = 7;
  m.totals["switches"] = 6;
  m.totals["hbm_bytes"] = 1182724 - 4096;
  m.ops["aten::mul"] = 18400;
  m.ops.erase("aten::copy_");
  m.ops["aten::neg"] = 120;
  m.ops["my <op> & \"friends\" | x"] = 700;  // names are escaped in every report
  return m;
}

analysis::CheckResult fixed_check() {
  analysis::Thresholds t;
  analysis::thresholds_add(t, "span=5%");
  analysis::thresholds_add(t, "op:*=200ns");
  return analysis::check(fixed_baseline(), fixed_current(), t);
}

const analysis::MetricCheck& metric(const analysis::CheckResult& r, const std::string& name) {
  for (const analysis::MetricCheck& m : r.metrics) {
    if (m.name == name) return m;
  }
  throw std::runtime_error("no metric " + name);
}

}  // namespace

TEST(CheckThresholds, ParseUnitsAndPercents) {
  analysis::Thresholds t;
  analysis::thresholds_add(t, "device_busy=2%");
  analysis::thresholds_add(t, "span=1.5us");
  analysis::thresholds_add(t, "idle=2ms");
  analysis::thresholds_add(t, "hbm_bytes=4KiB");
  analysis::thresholds_add(t, "executions=1");
  analysis::thresholds_add(t, "op:aten::mul=100ns");
  analysis::thresholds_add(t, "op:*=250");
  EXPECT_TRUE(t.for_metric("device_busy").percent);
  EXPECT_EQ(t.for_metric("device_busy").allowed(1000), 20);
  EXPECT_EQ(t.for_metric("span").amount, 1500);
  EXPECT_EQ(t.for_metric("idle").amount, 2e6);
  EXPECT_EQ(t.for_metric("hbm_bytes").amount, 4096);
  EXPECT_EQ(t.for_metric("executions").amount, 1);
  EXPECT_EQ(t.for_metric("op:aten::mul").amount, 100);
  EXPECT_EQ(t.for_metric("op:aten::add").amount, 250);  // the op default
  EXPECT_EQ(t.for_metric("switches").amount, 0);        // unlisted: exact
  analysis::thresholds_add(t, "*=1%");
  EXPECT_TRUE(t.for_metric("switches").percent);
  EXPECT_EQ(t.for_metric("op:aten::add").amount, 250);  // op:* wins over *
}

TEST(CheckThresholds, BadThresholdsNameTheProblem) {
  analysis::Thresholds t;
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "device_busy"); }).find("METRIC=AMOUNT"), std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "busy=2%"); }).find("unknown metric 'busy'"), std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "span=-1us"); }).find("number >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "span=1KiB"); }).find("ns, us, ms, s"), std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "executions=1us"); }).find("plain number"), std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_add(t, "op:=1"); }).find("unknown metric"), std::string::npos);
  EXPECT_TRUE(t.by_metric.empty());
}

TEST(CheckThresholds, JsonFileHasTheFlagsValues) {
  analysis::Thresholds t;
  analysis::thresholds_parse_json(t, R"({"device_busy": "2%", "op:*": "100ns", "executions": 1})", "t.json");
  EXPECT_TRUE(t.for_metric("device_busy").percent);
  EXPECT_EQ(t.for_metric("op:x").amount, 100);
  EXPECT_EQ(t.for_metric("executions").amount, 1);
  EXPECT_NE(error_of([&] { analysis::thresholds_parse_json(t, "{", "t.json"); }).find("'t.json' is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { analysis::thresholds_parse_json(t, R"({"spam": "1"})", "t.json"); }).find("'t.json'"),
            std::string::npos);
}

TEST(CheckBaseline, FileRoundTripsExactly) {
  const analysis::GateMetrics m = fixed_baseline();
  const std::string text = analysis::gate_metrics_json(m);
  const analysis::GateMetrics back = analysis::gate_metrics_parse_json(text, "b.json");
  EXPECT_EQ(back.device, m.device);
  EXPECT_EQ(back.totals, m.totals);
  EXPECT_EQ(back.ops, m.ops);
  EXPECT_NE(text.find("\"executions\": 6,"), std::string::npos) << "counts are JSON integers: " << text;
  EXPECT_EQ(analysis::gate_metrics_json(back), text);
}

TEST(CheckBaseline, BadBaselineFilesNameTheProblem) {
  const auto error = [](const std::string& text) {
    return error_of([&] { analysis::gate_metrics_parse_json(text, "b.json"); });
  };
  EXPECT_NE(error("not json").find("'b.json' is not valid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"totals": {}})").find("not a sightline baseline"), std::string::npos);
  EXPECT_NE(error(R"({"sightline_baseline": 99, "totals": {}, "ops": {}})").find("version 99"), std::string::npos);
  EXPECT_NE(error(R"({"sightline_baseline": 1, "ops": {}})").find("no \"totals\""), std::string::npos);
  EXPECT_NE(error(R"({"sightline_baseline": 1, "totals": {"busy": 1}, "ops": {}})").find("unknown metric \"busy\""),
            std::string::npos);
  EXPECT_NE(error(R"({"sightline_baseline": 1, "totals": {}, "ops": {"aten::mul": -1}})").find("ops.aten::mul"),
            std::string::npos);
  EXPECT_NE(error_of([] { analysis::gate_metrics_load("/nonexistent/baseline.json"); }).find("does not exist"),
            std::string::npos);
}

TEST(CheckVerdicts, ThresholdsDecideAndOpsRankByDelta) {
  const analysis::CheckResult r = fixed_check();
  EXPECT_TRUE(r.regressed());
  EXPECT_EQ(metric(r, "device_busy").status, analysis::CheckStatus::regressed);  // exact by default
  EXPECT_EQ(metric(r, "span").status, analysis::CheckStatus::pass);              // +0.9% of 5%
  EXPECT_EQ(metric(r, "idle").status, analysis::CheckStatus::pass);
  EXPECT_EQ(metric(r, "executions").status, analysis::CheckStatus::regressed);
  EXPECT_EQ(metric(r, "hbm_bytes").status, analysis::CheckStatus::improved);
  EXPECT_EQ(metric(r, "op:aten::mul").status, analysis::CheckStatus::regressed);
  EXPECT_EQ(metric(r, "op:aten::neg").status, analysis::CheckStatus::pass);  // new, but under 200 ns
  EXPECT_EQ(metric(r, "op:aten::copy_").status, analysis::CheckStatus::improved);
  EXPECT_EQ(r.regressions(), 3u);
  // Totals in their fixed order, then ops by the size of their change.
  EXPECT_EQ(r.metrics[0].name, "device_busy");
  EXPECT_EQ(r.metrics[6].name, "op:aten::mul");
  EXPECT_EQ(r.metrics[7].name, "op:aten::copy_");
  // The same metrics pass.
  EXPECT_FALSE(analysis::check(fixed_baseline(), fixed_baseline(), {}).regressed());
}

TEST(CheckVerdicts, DifferentDeviceSpecsAreBadInput) {
  analysis::GateMetrics other = fixed_current();
  other.device = "trn1";
  EXPECT_NE(error_of([&] { analysis::check(fixed_baseline(), other, {}); }).find("trn2 device spec"),
            std::string::npos);
  analysis::GateMetrics no_trace = fixed_current();
  no_trace.totals.erase("span");
  EXPECT_NE(error_of([&] { analysis::check(fixed_baseline(), no_trace, {}); }).find("has no span"), std::string::npos);
}

TEST(CheckReports, TextJunitAndMarkdownGoldens) {
  const analysis::CheckResult r = fixed_check();
  expect_golden(analysis::check_text(r), "check_report.txt");
  expect_golden(analysis::check_junit(r), "check_report.xml");
  expect_golden(analysis::check_markdown(r), "check_report.md");
}

TEST(CheckReports, XmlEscapeCoversTextAndBothQuotes) {
  EXPECT_EQ(analysis::xml_escape(R"(a<b>&"c"'d')"), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
  EXPECT_EQ(analysis::xml_escape(std::string("tab\tnl\nbell\x07")), "tab\tnl\nbell?");
  EXPECT_EQ(analysis::xml_escape("aten::mul"), "aten::mul");
}

TEST(CheckReports, JunitParsesBackWithOneTestcasePerMetric) {
  const analysis::CheckResult r = fixed_check();
  const fs::path xml = fs::temp_directory_path() / fmt::format("sightline_check_{}.xml", ::getpid());
  std::ofstream(xml) << analysis::check_junit(r);
  // A strict XML parser (Python's expat) reads it back: counts, names (escaped op names included), failures.
  const std::string script = fmt::format(
      "import sys, xml.etree.ElementTree as E\n"
      "root = E.parse('{}').getroot()\n"
      "suite = root.find('testsuite')\n"
      "cases = suite.findall('testcase')\n"
      "failed = [c.get('name') for c in cases if c.find('failure') is not None]\n"
      "assert root.tag == 'testsuites', root.tag\n"
      "assert int(suite.get('tests')) == len(cases) == {}, (suite.get('tests'), len(cases))\n"
      "assert int(suite.get('failures')) == len(failed) == {}, failed\n"
      "assert 'my <op> & \"friends\" | x' in [c.get('name') for c in cases]\n"
      "assert failed == ['device_busy', 'executions', 'aten::mul'], failed\n",
      xml.string(), r.metrics.size(), r.regressions());
  const fs::path py = xml.string() + ".py";
  std::ofstream(py) << script;
  EXPECT_EQ(std::system(fmt::format("python3 '{}'", py.string()).c_str()), 0) << read_file(xml.string());
  fs::remove(xml);
  fs::remove(py);
}

// The gate reads the summary's numbers: one definition of each metric.
TEST(CheckProfiles, MetricsAreTheSummarys) {
  const analysis::ProfileDir naive = analysis::profile_dir_load(test_profiles::generate().naive.dir);
  const analysis::GateMetrics m = analysis::gate_metrics(naive);
  const analysis::Summary s = analysis::summarize_profile(naive);
  const analysis::DeviceActivity activity = analysis::device_activity(*naive.trace);
  EXPECT_EQ(m.totals.at("device_busy"), s.total_time_ns);
  EXPECT_EQ(m.totals.at("executions"), static_cast<double>(s.executions));
  EXPECT_EQ(m.totals.at("hbm_bytes"), static_cast<double>(s.hbm_bytes()));
  EXPECT_EQ(m.totals.at("span"), static_cast<double>(activity.span_ns));
  EXPECT_EQ(m.totals.at("idle"), static_cast<double>(activity.idle_ns));
  EXPECT_EQ(m.totals.at("switches"), static_cast<double>(activity.switches));
  EXPECT_EQ(activity.executions, s.executions);
  EXPECT_GT(activity.idle_ns, 0);  // the eager ops leave the device idle while the host dispatches
  EXPECT_LT(activity.idle_ns, activity.span_ns);
  // Per-op device time is the key_averages table's.
  const auto averages = profiler::key_averages(*naive.trace, {.device_name = "neuron"});
  for (const profiler::FunctionEventAvg& row : averages.rows()) {
    if (row.self_device_time_total_ns > 0 && row.device_type == profiler::DeviceType::cpu) {
      EXPECT_EQ(m.ops.at(row.key), static_cast<double>(row.self_device_time_total_ns)) << row.key;
    }
  }
  EXPECT_TRUE(m.ops.contains("aten::mul"));
  const analysis::DeviceActivity fused = analysis::device_activity(
      *analysis::profile_dir_load(test_profiles::generate().fused.dir).trace);
  EXPECT_EQ(fused.executions, 1u);
  EXPECT_EQ(fused.idle_ns, 0);
}

TEST(CheckProfiles, IdenticalProfilesPassAndTheBaselineFileIsTheProfile) {
  const auto& g = test_profiles::generate();
  const analysis::GateMetrics a = analysis::gate_metrics_load(g.naive.dir);
  const analysis::GateMetrics b = analysis::gate_metrics_load(g.naive.dir);
  const analysis::CheckResult same = analysis::check(a, b, {});
  EXPECT_FALSE(same.regressed()) << analysis::check_text(same);
  for (const analysis::MetricCheck& m : same.metrics) EXPECT_EQ(m.delta(), 0) << m.name;
  const analysis::GateMetrics file = analysis::gate_metrics_parse_json(analysis::gate_metrics_json(a), "naive.json");
  EXPECT_EQ(file.totals, a.totals);
  EXPECT_EQ(file.ops, a.ops);
  EXPECT_FALSE(analysis::check(file, b, {}).regressed());
}

TEST(CheckProfiles, ASlowerOpFailsTheGateNamingTheOp) {
  const auto& g = test_profiles::generate();
  const analysis::CheckResult r =
      analysis::check(analysis::gate_metrics_load(g.naive.dir), analysis::gate_metrics_load(g.slower.dir), {});
  ASSERT_TRUE(r.regressed());
  const analysis::MetricCheck& mul = metric(r, "op:aten::mul");
  EXPECT_EQ(mul.status, analysis::CheckStatus::regressed);
  EXPECT_EQ(metric(r, "executions").delta(), 1);
  EXPECT_EQ(metric(r, "device_busy").status, analysis::CheckStatus::regressed);
  // The only op that moved is the first op row, and the report says so.
  size_t first_op = 0;
  while (!r.metrics[first_op].name.starts_with("op:")) ++first_op;
  EXPECT_EQ(r.metrics[first_op].name, "op:aten::mul");
  const std::string text = analysis::check_text(r);
  EXPECT_NE(text.find("FAIL"), std::string::npos) << text;
  EXPECT_NE(text.find("op:aten::mul grew by +"), std::string::npos) << text;
  // A generous threshold lets the same change through.
  analysis::Thresholds loose;
  analysis::thresholds_add(loose, "*=100%");
  EXPECT_FALSE(analysis::check(analysis::gate_metrics_load(g.naive.dir), analysis::gate_metrics_load(g.slower.dir),
                               loose).regressed());
}
