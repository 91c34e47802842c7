// The neuron device under the profiler: the RMSNorm workflow at a small size, end to end.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/manifest.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "formats/output_dir.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"
#include "study_util.h"

using namespace sightline;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using test::rms_norm_naive;

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("profiling", name); }

struct Profiled {
  std::string table;
  std::string dir;
  const profiler::CollectedTrace* trace = nullptr;
};

// Profiles four steps of `fn` with the study's schedule (wait 2, warmup 1, active 1).
template <typename Fn>
Profiled run_profiled(const std::string& out, Fn&& fn, std::unique_ptr<profiler::profile>& keep) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = out;
  cfg->capture_enabled_for_nc = "0";
  auto exporter = std::make_shared<neuron::NeuronProfiler>(cfg);
  Profiled result;
  profiler::ProfileOptions options;
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&, exporter](profiler::profile& p) { result.dir = exporter->export_trace(p); };
  options.record_shapes = true;
  options.experimental_config = cfg;
  keep = std::make_unique<profiler::profile>(options);
  keep->start();
  for (int step = 0; step < 4; ++step) {
    fn();
    neuron::synchronize();
    keep->step();
  }
  keep->stop();
  profiler::TableOptions table;
  table.sort_by = "self_privateuse1_time_total";
  table.row_limit = -1;
  result.table = keep->key_averages().table(table);
  result.trace = &keep->trace();
  return result;
}

}  // namespace

TEST(NeuronProfiling, NaiveRmsNormShowsEveryOpWithDeviceTimeAndTheEpsCopy) {
  const Device d = Device::parse("neuron:0");
  Generator g(5);
  const Tensor x = randn({256, 384}, {}, &g).to(d), w = rand({384}, {}, &g).to(d);
  std::unique_ptr<profiler::profile> prof;
  const fs::path dir = fresh_dir("naive");
  const Profiled p = run_profiled(dir.string(), [&] { (void)rms_norm_naive(x, w); }, prof);

  // key_averages: the framework ops with their device time.
  const auto averages = prof->key_averages();
  std::map<std::string, const profiler::FunctionEventAvg*> rows;
  for (const auto& row : averages.rows()) rows[row.key] = &row;
  ASSERT_TRUE(rows.count("aten::mul")) << p.table;
  EXPECT_EQ(rows["aten::mul"]->count, 3);
  for (const char* op : {"aten::mul", "aten::mean", "aten::add", "aten::rsqrt", "aten::copy_"}) {
    ASSERT_TRUE(rows.count(op)) << op << "\n" << p.table;
    EXPECT_GT(rows[op]->self_device_time_total_ns, 0) << op << "\n" << p.table;
  }
  EXPECT_EQ(rows["nc_exec_running"]->count, 6);
  EXPECT_THAT(p.table, HasSubstr("Self NEURON time total:"));

  // The output directory: complete, with a manifest that lists paired NEFF/NTFF files.
  ASSERT_EQ(p.dir, dir.string());
  ASSERT_TRUE(formats::output_dir_is_complete(p.dir));
  const formats::Manifest m = formats::manifest_load((dir / "manifest.json").string());
  EXPECT_EQ(m.device.name, "trn2");
  EXPECT_EQ(m.events.hardware, 6u);
  int neffs = 0, ntffs = 0;
  for (const auto& f : m.files) {
    ASSERT_TRUE(fs::exists(dir / f.path)) << f.path;
    if (f.kind == formats::ManifestFileKind::neff) {
      ++neffs;
      EXPECT_EQ(formats::neff_hash(formats::neff_load((dir / f.path).string())), *f.neff_hash);
    }
    if (f.kind == formats::ManifestFileKind::ntff) {
      ++ntffs;
      const formats::NtffTrace t = formats::ntff_load((dir / f.path).string());
      EXPECT_EQ(t.neff_hash, *f.neff_hash);
      EXPECT_TRUE(fs::exists(dir / formats::ntff_paired_neff_file_name(t.neff_hash)));
      ASSERT_FALSE(t.executions.empty());
      EXPECT_GT(t.executions[0].records.size(), 0u);
    }
  }
  EXPECT_EQ(neffs, 6);  // x*x, mean, + eps, rsqrt, x * [256,1], * w[384]: six distinct executables
  EXPECT_EQ(ntffs, 6);
  fs::remove_all(dir);
}

TEST(NeuronProfiling, TraceJsonLinksEveryHardwareExecutionToItsFrameworkOp) {
  const Device d = Device::parse("neuron:0");
  Generator g(6);
  const Tensor x = randn({130, 200}, {}, &g).to(d), w = rand({200}, {}, &g).to(d);
  std::unique_ptr<profiler::profile> prof;
  const fs::path dir = fresh_dir("flows");
  const Profiled p = run_profiled(dir.string(), [&] { (void)rms_norm_naive(x, w); }, prof);
  std::ifstream in(dir / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(in);  // strict: throws on malformed JSON
  std::map<std::pair<int64_t, int64_t>, std::string> lane_names;
  std::map<int64_t, std::string> process_names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lane_names[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
  }
  // Flows: s/f pairs by (cat, id). fwd: framework op -> runtime call; ac2g: runtime call -> hardware.
  std::map<std::pair<std::string, uint64_t>, std::pair<std::string, std::string>> flows;  // lane of s, lane of f
  std::map<std::pair<std::string, uint64_t>, std::string> flow_end_ts;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "s" && e["ph"] != "f") continue;
    const std::string lane = lane_names[{e["pid"], e["tid"]}];
    auto& f = flows[{e["cat"], e["id"]}];
    (e["ph"] == "s" ? f.first : f.second) = lane;
    if (e["ph"] == "f") flow_end_ts[{e["cat"], e["id"]}] = e["ts"].dump();
  }
  int executions = 0;
  std::set<uint64_t> launch_ids;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string lane = lane_names[{e["pid"], e["tid"]}];
    if (e["name"] == "nc_exec_running") {
      ++executions;
      EXPECT_THAT(lane, HasSubstr("/neuron_hw/NC:0"));
      ASSERT_TRUE(e["args"].contains("External id"));
      const uint64_t corr = e["args"]["correlation"];
      const auto ac2g = flows.find({"ac2g", corr});
      ASSERT_NE(ac2g, flows.end()) << "execution not reachable from its runtime call";
      EXPECT_THAT(ac2g->second.first, HasSubstr("/neuron_rt/NC:0"));
      EXPECT_THAT(ac2g->second.second, HasSubstr("/neuron_hw/NC:0"));
      const std::string end_ts = flow_end_ts[std::make_pair(std::string("ac2g"), corr)];
      EXPECT_EQ(end_ts, e["ts"].dump()) << "the launch's arrow must end on the execution";
      launch_ids.insert(corr);
    }
  }
  EXPECT_EQ(executions, 6);
  // Each launch's runtime call is reached from a framework lane.
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["name"] != "nrta_execute_schedule") continue;
    const uint64_t id = e["args"]["correlation"];
    if (!launch_ids.count(id)) continue;
    bool reached = false;
    for (const auto& [key, lanes] : flows) {
      if (key.first == "fwd" && lanes.second.find("/neuron_rt/NC:0") != std::string::npos &&
          lanes.first.find("/framework/TID:") != std::string::npos) {
        reached = true;
      }
    }
    EXPECT_TRUE(reached);
  }
  bool framework = false;
  for (const auto& [pid, name] : process_names) framework = framework || name.ends_with("/framework");
  EXPECT_TRUE(framework);
  fs::remove_all(dir);
}

TEST(NeuronProfiling, FusedRmsNormIsOneDeviceOp) {
  const Device d = Device::parse("neuron:0");
  Generator g(7);
  const Tensor x = randn({256, 384}, {}, &g).to(d), w = rand({384}, {}, &g).to(d);
  std::unique_ptr<profiler::profile> prof;
  const fs::path dir = fresh_dir("fused");
  const Profiled p = run_profiled(dir.string(), [&] { (void)rms_norm(x, w, 1e-6); }, prof);
  const auto averages = prof->key_averages();
  int device_ops = 0;
  for (const auto& row : averages.rows()) {
    if (row.key.starts_with("aten::") && row.self_device_time_total_ns > 0) ++device_ops;
  }
  EXPECT_EQ(device_ops, 1) << p.table;
  fs::remove_all(dir);
}

TEST(NeuronProfiling, CoreListsAreValidated) {
  EXPECT_EQ(neuron::parse_core_list("0,1,2-5", 8), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(neuron::parse_core_list("3, 1,1", 8), (std::vector<int>{1, 3}));
  for (const char* bad : {"", "a", "9", "3-1", "1,,2", "-1"}) {
    try {
      (void)neuron::parse_core_list(bad, 8);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("capture_enabled_for_nc")) << bad;
      EXPECT_THAT(e.what(), HasSubstr("cores 0..7 exist")) << bad;
    }
  }
}
