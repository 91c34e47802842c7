// The analysis layer on profiles generated in the test (tests/analysis/profiles.h): summary metrics,
// roofline verdicts, compare ranking, saved key_averages == live, and the summary-text golden file.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "analysis/compare.h"
#include "analysis/insights.h"
#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/roofline.h"
#include "analysis/summary.h"
#include "analysis/trace_json.h"
#include "profiles.h"
#include "sightline/profiler/key_averages.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"

using namespace sightline;

namespace {

// The device-side sections of summary-text (summary and roofline); the insights section is left out
// of the golden file because idle gaps are measured on the host clock.
std::string device_sections(const std::string& text) {
  return text.substr(0, text.find("\n== insights"));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(AnalysisSummary, FusedRmsNormIsMemoryBoundWithHighMbu) {
  const analysis::ProfileDir fused = analysis::profile_dir_load(test_profiles::generate().fused.dir);
  const analysis::Summary s = analysis::summarize_profile(fused);
  EXPECT_EQ(s.executions, 1u);
  EXPECT_EQ(s.bound, analysis::Bound::memory);
  // Measured: 36% MBU at this small size, with DMA active the whole execution (the per-transfer
  // fixed cost, not HBM bandwidth, limits it); the test pins "DMA-limited", not a number.
  EXPECT_GT(s.mbu, 0.3) << "MBU " << s.mbu;
  EXPECT_GT(s.dma_active_ns(), 0.9 * s.total_time_ns);
  EXPECT_LT(s.model_arithmetic_intensity, s.ridge_point);
  // The fused kernel reads x twice (statistics pass, then normalize pass): 1.25x the minimum.
  EXPECT_LE(s.hbm_bytes(), s.min_hbm_bytes * 3 / 2);
  // Active time is a union, so it never exceeds the instruction time or the total time.
  for (const analysis::EngineSummary& e : s.engines) {
    EXPECT_LE(e.active_ns, e.instruction_ns + 1e-6);
    EXPECT_LE(e.active_ns, s.total_time_ns + 1e-6);
  }
  const analysis::Roofline roof = analysis::roofline(fused);
  ASSERT_FALSE(roof.ops.empty());
  EXPECT_EQ(roof.ops[0].bound, analysis::Bound::memory);
}

// The issue asks for "compute-bound with high MFU". Measured on the eager bf16 matmul kernel at
// [1024,1024]x[1024,1024]: it re-reads its operand tiles from HBM (~23 MB against a 6 MB minimum), so
// its intensity (93 FLOP/B) is below trn2's ridge (217) and MFU is ~8%. The analysis reports that
// honestly: the test pins that the verdict follows intensity vs ridge and that the insights name why.
TEST(AnalysisSummary, LargeBf16MatmulIsComputeBoundWithHighMfu) {
  const analysis::ProfileDir mm = analysis::profile_dir_load(test_profiles::generate().matmul.dir);
  const analysis::Summary s = analysis::summarize_profile(mm);
  EXPECT_DOUBLE_EQ(s.model_flops, 2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(s.hardware_flops, s.model_flops);
  EXPECT_NEAR(s.mm_arithmetic_intensity, s.hardware_flops / double(s.hbm_bytes()), 1e-9);
  EXPECT_NEAR(s.mfu, s.model_flops / (s.peak_flops_per_s * s.total_time_ns * 1e-9), 1e-12);
  // The kernel keeps a^T and b resident in SBUF: each operand crosses HBM once and the output once,
  // so the traffic is the minimum (3 x 2 MiB) and the intensity 2*1024^3 / 6 MiB = 341 FLOP/B, on the
  // compute side of trn2's ridge (78.6 TFLOPS / 362 GB/s = 217 FLOP/B).
  EXPECT_LE(double(s.hbm_bytes()), 1.05 * double(s.min_hbm_bytes)) << analysis::report_summary_text(mm);
  EXPECT_GT(s.mm_arithmetic_intensity, s.ridge_point);
  EXPECT_EQ(s.bound, analysis::Bound::compute) << analysis::report_summary_text(mm);
  // Measured 77.2% (35.4 us for 27.3 us of Tensor-engine work at peak; the rest is the start-up load
  // and the last stores); threshold 70%. Before the resident schedule it was 7.9%.
  EXPECT_GT(s.mfu, 0.70) << analysis::report_summary_text(mm);
  const analysis::Roofline roof = analysis::roofline(mm);
  ASSERT_FALSE(roof.executables.empty());
  const analysis::RooflinePoint& point = roof.executables[0];
  EXPECT_EQ(point.bound, analysis::Bound::compute);
  EXPECT_GT(point.intensity, roof.ridge_point);
  // On the compute side the attainable rate is the compute roof itself.
  EXPECT_DOUBLE_EQ(point.attainable_flops_per_s, roof.peak_flops_per_s);
  EXPECT_NE(analysis::roofline_svg(roof).find("ridge"), std::string::npos);
  for (const analysis::Insight& i : analysis::insights(mm)) EXPECT_NE(i.id, "excess_hbm") << i.id;
}

// Issue 19: the eager decoder's attention matmul reads q and k^T through strides, so its NEFF declares
// them as flat storage ([262144]); taking that as K made MFU 413%.
TEST(AnalysisSummary, MatmulFlopsNeverTakeAFlatOperandAsTheContraction) {
  device::Executable exe;
  exe.source_ops = {"aten::matmul"};
  auto io = [&](std::vector<int64_t> shape, device::IoKind kind) {
    exe.io.push_back({"t", DType::f32, std::move(shape), kind});
  };
  io({262144}, device::IoKind::input);
  io({262144}, device::IoKind::input);
  io({1, 8, 256, 256}, device::IoKind::output);
  EXPECT_FALSE(analysis::op_table_flops(exe));  // neither operand says K: the instructions' count is used
  exe.io[1].shape = {1, 8, 128, 256};  // b contiguous: K = 128 from it
  EXPECT_EQ(analysis::op_table_flops(exe), 2.0 * 128 * 8 * 256 * 256);
  exe.io[0].shape = {1, 8, 256, 128};
  EXPECT_EQ(analysis::op_table_flops(exe), 2.0 * 128 * 8 * 256 * 256);
  exe.io[0].shape = {1, 8, 256, 64};  // operands that disagree on K
  EXPECT_FALSE(analysis::op_table_flops(exe));
  exe.source_ops = {"aten::linear"};  // x [M, K] @ weight [N, K]^T + bias
  exe.io = {};
  io({256, 1024}, device::IoKind::input);
  io({4096, 1024}, device::IoKind::input);
  io({4096}, device::IoKind::input);
  io({256, 4096}, device::IoKind::output);
  EXPECT_EQ(analysis::op_table_flops(exe), (2.0 * 1024 + 1) * 256 * 4096);
}

TEST(AnalysisCompare, NaiveVsFusedRanksTheRemovedExecutionsFirst) {
  const auto& g = test_profiles::generate();
  const analysis::ProfileDir naive = analysis::profile_dir_load(g.naive.dir);
  const analysis::ProfileDir fused = analysis::profile_dir_load(g.fused.dir);
  const analysis::Comparison diff = analysis::compare(naive, fused);
  const size_t removed = naive.traced.size();  // every naive executable is gone in the fused profile
  ASSERT_GT(diff.ranked.size(), removed);
  for (size_t i = 0; i < removed; ++i) {
    EXPECT_EQ(diff.ranked[i].kind, "executable") << analysis::compare_text(diff);
    EXPECT_EQ(diff.ranked[i].status, analysis::DeltaStatus::removed) << analysis::compare_text(diff);
  }
  EXPECT_EQ(diff.ranked[removed].status, analysis::DeltaStatus::added);
  EXPECT_GT(diff.total_a_ns, diff.total_b_ns);
}

TEST(AnalysisInsights, NaiveRmsNormSuggestsFusing) {
  const analysis::ProfileDir naive = analysis::profile_dir_load(test_profiles::generate().naive.dir);
  const std::vector<analysis::Insight> list = analysis::insights(naive);
  ASSERT_FALSE(list.empty());
  bool fuse = false;
  for (const analysis::Insight& i : list) fuse = fuse || i.id == "tiny_executions" || i.id == "idle_gaps";
  EXPECT_TRUE(fuse) << analysis::report_summary_text(naive);
  for (size_t i = 1; i < list.size(); ++i) EXPECT_GE(list[i - 1].potential_saving_ns, list[i].potential_saving_ns);
}

// Where every execution was captured, the captured executions' activity is the trace's, figure for
// figure: the idle_gaps insight reads the same numbers from either population.
TEST(AnalysisInsights, CapturedActivityIsTheTraceLanesWhenEveryExecutionWasCaptured) {
  const analysis::ProfileDir naive = analysis::profile_dir_load(test_profiles::generate().naive.dir);
  ASSERT_TRUE(naive.trace.has_value());
  const std::vector<analysis::CoreActivity> captured = analysis::core_activity(analysis::captured_executions(naive));
  const std::vector<analysis::CoreActivity> lanes = analysis::device_activity(*naive.trace).cores;
  ASSERT_EQ(captured.size(), lanes.size());
  for (size_t c = 0; c < lanes.size(); ++c) {
    EXPECT_EQ(captured[c].core, lanes[c].core);
    EXPECT_EQ(captured[c].executions, lanes[c].executions);
    EXPECT_EQ(captured[c].busy_ns, lanes[c].busy_ns);
    EXPECT_EQ(captured[c].idle_ns, lanes[c].idle_ns);
    EXPECT_EQ(captured[c].largest_gap_ns, lanes[c].largest_gap_ns);
    EXPECT_EQ(captured[c].span_ns(), lanes[c].span_ns());
  }
}

// One population (issue 17): a trace.json that holds more executions than were captured (here the
// naive profile's own executions repeated after its end, as a capture limit leaves them) changes no
// insight; each counts the executions the summary metrics count.
TEST(AnalysisInsights, InsightsCountTheExecutionsTheMetricsCount) {
  analysis::ProfileDir naive = analysis::profile_dir_load(test_profiles::generate().naive.dir);
  ASSERT_TRUE(naive.trace.has_value());
  const std::vector<analysis::Insight> before = analysis::insights(naive);
  const uint64_t executions = analysis::summarize_profile(naive).executions;
  std::vector<profiler::FunctionEvent> repeated;
  int64_t end = 0;
  for (const profiler::FunctionEvent& e : naive.trace->events) end = std::max(end, e.end_ns);
  for (int copy = 1; copy <= 100; ++copy) {
    for (const profiler::FunctionEvent& e : naive.trace->events) {
      if (e.name != "nc_exec_running") continue;
      profiler::FunctionEvent more = e;
      more.start_ns += copy * end, more.end_ns += copy * end;
      repeated.push_back(more);
    }
  }
  ASSERT_FALSE(repeated.empty());
  naive.trace->events.insert(naive.trace->events.end(), repeated.begin(), repeated.end());
  ASSERT_GT(analysis::device_activity(*naive.trace).executions, executions);
  const std::vector<analysis::Insight> after = analysis::insights(naive);
  ASSERT_EQ(after.size(), before.size());
  bool counted = false;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].evidence, before[i].evidence);
    if (after[i].id == "idle_gaps" || after[i].id == "tiny_executions") {
      counted = true;
      const std::string text = after[i].title + ": " + after[i].evidence;
      EXPECT_NE(text.find(fmt::format("{} executions", executions)), std::string::npos) << text;
    }
  }
  EXPECT_TRUE(counted) << analysis::report_summary_text(naive);
  // And a profile read without its trace.json has the same insights: they never needed it.
  const analysis::ProfileDir without = analysis::profile_dir_load(naive.path, {.load_trace_json = false});
  const std::vector<analysis::Insight> untraced = analysis::insights(without);
  ASSERT_EQ(untraced.size(), before.size());
  for (size_t i = 0; i < untraced.size(); ++i) EXPECT_EQ(untraced[i].evidence, before[i].evidence);
}

TEST(AnalysisTraceJson, SavedKeyAveragesTableIsTheLiveOneByteForByte) {
  const auto& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused, &g.matmul}) {
    const profiler::CollectedTrace trace = analysis::trace_json_load(p->dir + "/trace.json");
    profiler::TableOptions table;
    table.sort_by = test_profiles::kSortBy;
    table.row_limit = -1;
    EXPECT_EQ(profiler::key_averages(trace, {.device_name = "neuron"}).table(table), p->live_table) << p->dir;
  }
}

namespace {
// A stack provider as an embedding installs one (the Python package walks its frames): here the
// number of ops dispatched so far decides the call site, so two sites alternate.
std::atomic<int> g_ops_dispatched{0};
void alternating_sites(std::vector<std::string>& frames) {
  frames.push_back(g_ops_dispatched.fetch_add(1) % 2 == 0 ? "norm.py(4): square" : "norm.py(5): scale");
  frames.push_back("main.py(10): <module>");
}
}  // namespace

// with_stack through dispatch: every framework op carries the provider's frames, and the saved
// profile groups by them to the same table as the live one.
TEST(AnalysisTraceJson, StacksOfDispatchedOpsSurviveTheTraceByteForByte) {
  profiler::set_stack_provider(&alternating_sites);
  profiler::profile prof({.activities = {profiler::ProfilerActivity::CPU}, .with_stack = true});
  prof.start();
  Tensor x = ones({64});
  for (int i = 0; i < 4; ++i) x = mul(x, x);
  prof.stop();
  profiler::set_stack_provider(nullptr);
  std::size_t ops = 0;
  for (const profiler::FunctionEvent& e : prof.trace().events) {
    if (e.kind != profiler::EventKind::cpu_op) continue;
    ++ops;
    ASSERT_EQ(e.stack.size(), 2u) << e.name;
    EXPECT_EQ(e.stack[1], "main.py(10): <module>");
  }
  EXPECT_GE(ops, 5u);
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("sightline_stacks_{}.json", ::getpid())).string();
  prof.export_chrome_trace(path);
  const profiler::CollectedTrace saved = analysis::trace_json_load(path);
  std::filesystem::remove(path);
  const std::string live = prof.key_averages(false, 2).table("self_cpu_time_total", -1);
  EXPECT_NE(live.find("Source Location"), std::string::npos);
  EXPECT_NE(live.find("norm.py(5): scale"), std::string::npos);
  EXPECT_EQ(profiler::key_averages(saved, {.group_by_stack_n = 2}).table("self_cpu_time_total", -1), live);
  EXPECT_EQ(profiler::collapsed_stacks(saved), profiler::collapsed_stacks(prof.trace()));
}

TEST(AnalysisTraceJson, MalformedJsonIsAClearError) {
  try {
    (void)analysis::trace_json_parse("{\"traceEvents\": [", "broken.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'broken.json' is not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(AnalysisReport, FusedRmsNormSummaryTextMatchesTheGoldenFile) {
  const analysis::ProfileDir fused = analysis::profile_dir_load(test_profiles::generate().fused.dir);
  const std::string actual = device_sections(analysis::report_summary_text(fused));
  const std::string golden_path = std::string(SIGHTLINE_TEST_DATA_DIR) + "/fused_rmsnorm_summary.txt";
  if (std::getenv("SIGHTLINE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden_path) << actual;
  }
  EXPECT_EQ(actual, read_file(golden_path)) << "regenerate with SIGHTLINE_UPDATE_GOLDEN=1 after a deliberate change";
}
