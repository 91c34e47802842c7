// The one rule of time, tested end to end: what the simulator does in wall time never reaches a
// timestamp. The RMSNorm study's profiles are the same on a loaded and an idle machine, its tables
// match golden files byte for byte, and device work the trace cannot honestly show is left out and
// said so.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <cctype>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/trace_json.h"
#include "formats/manifest.h"
#include "neuron/neuron.h"
#include "neuron/profiling.h"
#include "sightline/profiler/profile.h"
#include "sightline/compile.h"
#include "sightline/sightline.h"
#include "study_util.h"

using namespace sightline;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using test::rms_norm_naive;

fs::path fresh_dir(const std::string& name) { return test::fresh_dir("modeled", name); }

struct Study {
  std::string table;
  std::string dir;
};

// One variant of the study as examples/rmsnorm runs it: four steps, schedule wait 2, warmup 1,
// active 1, the table sorted by self device time. `sync` false leaves out neuron::synchronize().
template <typename Fn>
Study profile_study(const fs::path& out, Fn&& fn, bool sync = true) {
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = out.string();
  cfg->capture_enabled_for_nc = "0";
  auto exporter = std::make_shared<neuron::NeuronProfiler>(cfg);
  Study result;
  profiler::ProfileOptions options;
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&, exporter](profiler::profile& p) { result.dir = exporter->export_trace(p); };
  options.record_shapes = true;
  options.experimental_config = cfg;
  profiler::profile prof(options);
  prof.start();
  for (int step = 0; step < 4; ++step) {
    fn();
    if (sync) neuron::synchronize();
    prof.step();
  }
  prof.stop();
  profiler::TableOptions table;
  table.sort_by = "self_privateuse1_time_total";
  table.row_limit = 12;
  result.table = prof.key_averages().table(table);
  return result;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// What may differ between two runs of the same program: the wall-clock base (every timestamp moves by
// one offset), the process and thread ids, the output path, and the runtime's sequence numbers (they
// count on for the life of the process). Ids are renamed in order of first appearance, so that the
// links between events (flows, correlation, external ids) must still be the same.
class Normalizer {
 public:
  explicit Normalizer(std::string dir) : dir_(std::move(dir)) {}

  // `text` is trace.json: its "ts" are microseconds with three decimals, read here exactly (as
  // integer nanoseconds) because a double cannot hold them to the nanosecond.
  json trace(const std::string& text) {
    // "ts":<int>.<3 digits> becomes "ts":<int><3 digits> (std::regex is avoided: GCC 12 warns inside it
    // under the sanitizer builds).
    std::string exact;
    exact.reserve(text.size());
    const std::string key = "\"ts\":";
    size_t copied = 0;
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + key.size())) {
      size_t dot = at + key.size();
      while (dot < text.size() && (std::isdigit(static_cast<unsigned char>(text[dot])) || text[dot] == '-')) ++dot;
      if (dot + 4 > text.size() || text[dot] != '.') continue;
      exact.append(text, copied, dot - copied);
      exact.append(text, dot + 1, 3);
      copied = dot + 4;
    }
    exact.append(text, copied);
    json t = json::parse(exact);
    t.erase("baseTimeNanoseconds");
    t.erase("traceName");
    int64_t base = INT64_MAX;
    for (const json& e : t["traceEvents"]) {
      if (e.contains("ts")) base = std::min(base, e["ts"].get<int64_t>());
    }
    for (json& e : t["traceEvents"]) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<int64_t>() - base;
      walk(e);
    }
    return t;
  }

  json system_trace(json t) {
    int64_t base = INT64_MAX;
    for (const json& e : t["events"]) base = std::min(base, e["timestamp"].get<int64_t>());
    for (json& e : t["events"]) {
      e["timestamp"] = e["timestamp"].get<int64_t>() - base;
      walk(e);
    }
    return t;
  }

 private:
  void walk(json& node) {
    if (node.is_object()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        const std::string& key = it.key();
        if (it->is_number_integer() && (key == "pid" || key == "tid" || key == "thread")) {
          *it = rename(threads_, it->get<int64_t>());
        } else if (it->is_number_integer() &&
                   (key == "id" || key == "correlation" || key == "External id" || key == "sequence")) {
          *it = rename(ids_, it->get<int64_t>());
        } else {
          walk(*it);
        }
      }
    } else if (node.is_array()) {
      for (json& child : node) walk(child);
    } else if (node.is_string()) {
      std::string s = node.get<std::string>();
      const std::string pid = fmt::format("/{}/", ::getpid());
      for (size_t at = s.find(pid); at != std::string::npos; at = s.find(pid)) s.replace(at, pid.size(), "/PID/");
      for (size_t at = s.find(dir_); at != std::string::npos; at = s.find(dir_)) s.replace(at, dir_.size(), "DIR");
      node = s;
    }
  }
  static int64_t rename(std::map<int64_t, int64_t>& names, int64_t v) {
    return names.emplace(v, static_cast<int64_t>(names.size())).first->second;
  }

  std::string dir_;
  std::map<int64_t, int64_t> threads_, ids_;
};

json normalized_trace(const std::string& dir) {
  return Normalizer(dir).trace(read_file(fs::path(dir) / "trace.json"));
}
json normalized_system_trace(const std::string& dir) {
  return Normalizer(dir).system_trace(json::parse(read_file(fs::path(dir) / "system_trace.json")));
}

// Two threads that burn CPU and churn memory, as a loaded machine does.
class Load {
 public:
  Load() {
    for (int i = 0; i < 2; ++i) {
      threads_.emplace_back([this, i] {
        std::vector<std::vector<char>> blocks;
        uint64_t x = static_cast<uint64_t>(i) + 1;
        while (!stop_.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 100000; ++k) x = x * 6364136223846793005ull + 1442695040888963407ull;
          blocks.emplace_back(static_cast<size_t>(1 + x % (4 << 20)), static_cast<char>(x));
          if (blocks.size() > 16) blocks.erase(blocks.begin());
        }
        sink_.fetch_add(x, std::memory_order_relaxed);
      });
    }
  }
  ~Load() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

// Golden files: tests/neuron/data/<name>. SIGHTLINE_UPDATE_GOLDEN=1 rewrites them (then review the diff).
void expect_golden(const std::string& name, const std::string& actual) {
  const fs::path path = fs::path(SIGHTLINE_TEST_DATA_DIR) / name;
  if (const char* update = std::getenv("SIGHTLINE_UPDATE_GOLDEN"); update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing; run with SIGHTLINE_UPDATE_GOLDEN=1 to write it";
  EXPECT_EQ(read_file(path), actual) << "golden " << path
                                     << " differs; if the change is intended, rerun with SIGHTLINE_UPDATE_GOLDEN=1";
}

}  // namespace

TEST(ModeledTime, TheNaiveStudyIsTheSameOnALoadedMachine) {
  const Device d = Device::parse("neuron:0");
  Generator g(11);
  const Tensor x = randn({256, 512}, {}, &g).to(d), w = rand({512}, {}, &g).to(d);
  const Study quiet = profile_study(fresh_dir("quiet"), [&] { (void)rms_norm_naive(x, w); });
  Study loaded;
  {
    const Load load;
    loaded = profile_study(fresh_dir("loaded"), [&] { (void)rms_norm_naive(x, w); });
  }
  EXPECT_EQ(quiet.table, loaded.table);
  EXPECT_THAT(quiet.table, Not(HasSubstr("simulation")));
  const json quiet_trace = normalized_trace(quiet.dir), loaded_trace = normalized_trace(loaded.dir);
  EXPECT_TRUE(quiet_trace == loaded_trace) << "trace.json differs: " << json::diff(quiet_trace, loaded_trace).dump();
  const json quiet_system = normalized_system_trace(quiet.dir), loaded_system = normalized_system_trace(loaded.dir);
  EXPECT_TRUE(quiet_system == loaded_system)
      << "system_trace.json differs: " << json::diff(quiet_system, loaded_system).dump();
  // Spans, gaps and insights, as the analysis reads them back from the two directories.
  std::string quiet_report = analysis::report_summary_text(analysis::profile_dir_load(quiet.dir));
  std::string loaded_report = analysis::report_summary_text(analysis::profile_dir_load(loaded.dir));
  for (auto* text : {&quiet_report, &loaded_report}) {
    const std::string& dir = text == &quiet_report ? quiet.dir : loaded.dir;
    for (size_t at = text->find(dir); at != std::string::npos; at = text->find(dir)) text->replace(at, dir.size(), "DIR");
    // The one measured line: how long the simulator took.
    EXPECT_THAT(*text, HasSubstr("host clock: modeled"));
    const size_t at = text->find("simulated in ");
    ASSERT_NE(at, std::string::npos);
    const size_t end = text->find(" s ", at);
    ASSERT_NE(end, std::string::npos);
    text->replace(at, end - at, "simulated in N");
  }
  EXPECT_EQ(quiet_report, loaded_report);
  const formats::Manifest m = formats::manifest_load(loaded.dir);
  EXPECT_EQ(m.timing.host_clock, "modeled");
  EXPECT_TRUE(m.timing.functional);
  EXPECT_GT(m.timing.simulation_wall_ns, 0u);  // measured, kept apart
  EXPECT_EQ(m.timing.not_completed, 0u);
  EXPECT_EQ(m.timing.earlier_steps, 0u);
}

TEST(ModeledTime, GoldenTablesOfTheThreeVariants) {
  const Device d = Device::parse("neuron:0");
  Generator g(3);
  const Tensor x = randn({256, 384}, {}, &g).to(d), w = rand({384}, {}, &g).to(d);
  auto compiled = compile(rms_norm_naive);
  const Study naive = profile_study(fresh_dir("g_naive"), [&] { (void)rms_norm_naive(x, w); });
  const Study fused = profile_study(fresh_dir("g_fused"), [&] { (void)rms_norm(x, w, 1e-6); });
  const Study comp = profile_study(fresh_dir("g_compiled"), [&] { (void)compiled(x, w); });
  expect_golden("modeled_naive_table.txt", naive.table);
  expect_golden("modeled_fused_table.txt", fused.table);
  expect_golden("modeled_compiled_table.txt", comp.table);
  // The host side reads like torch's: ops carry their modeled host cost, the step's CPU total is the
  // modeled step, the compiled call is one Torch-Compiled Region row.
  EXPECT_THAT(naive.table, HasSubstr("aten::mul"));
  EXPECT_THAT(comp.table, HasSubstr("Torch-Compiled Region: 0/0"));
}

TEST(ModeledTime, DeviceWorkNotCompleteAtStopIsLeftOutAndSaid) {
  const Device d = Device::parse("neuron:0");
  Generator g(4);
  const Tensor x = randn({512, 512}, {}, &g).to(d), w = rand({512}, {}, &g).to(d);
  neuron::synchronize();
  testing::internal::CaptureStderr();
  const Study s = profile_study(fresh_dir("nosync"), [&] { (void)rms_norm(x, w, 1e-6); }, /*sync=*/false);
  const std::string warnings = testing::internal::GetCapturedStderr();
  neuron::synchronize();
  // The active step's execution ends after the trace stops (the host only queued it), and the warmup
  // step's execution, launched before the trace, runs inside it: neither is shown as this step's.
  EXPECT_THAT(warnings, HasSubstr("had not completed when it stopped"));
  EXPECT_THAT(warnings, HasSubstr("launched before the trace started"));
  EXPECT_THAT(s.table, HasSubstr("had not completed when it stopped"));
  EXPECT_THAT(s.table, Not(HasSubstr("nc_exec_running")));  // no device time is claimed for the step
  const formats::Manifest m = formats::manifest_load(s.dir);
  EXPECT_EQ(m.timing.not_completed, 1u);
  EXPECT_EQ(m.timing.earlier_steps, 3u);  // steps 0, 1 and 2 each queued one execution, none finished
  const json trace = json::parse(read_file(fs::path(s.dir) / "trace.json"));
  ASSERT_TRUE(trace.contains("sightlineNotes"));
  EXPECT_THAT(trace["sightlineNotes"][0].get<std::string>(), HasSubstr("neuron::synchronize()"));
  // The CLI's table, read back from trace.json, says the same.
  const profiler::CollectedTrace reread = analysis::trace_json_load((fs::path(s.dir) / "trace.json").string());
  EXPECT_EQ(reread.notes.size(), 2u);
}
