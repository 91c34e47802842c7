// The Perfetto trace (analysis/perfetto.h), structurally: it parses, every slice's process and track
// are named and sorted, the device has its own tracks, and the v2 flows chain each op to its device work.
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/perfetto.h"
#include "analysis/profile_dir.h"
#include "profiles.h"

using namespace sightline;
using nlohmann::json;

namespace {

json perfetto_of(const test_profiles::Profiled& p) {
  std::ostringstream out;
  analysis::perfetto_json_write(analysis::profile_dir_load(p.dir), out);
  return json::parse(out.str());  // strict
}

}  // namespace

TEST(PerfettoTrace, EveryTrackIsNamedAndSorted) {
  const json doc = perfetto_of(test_profiles::generate().naive);
  std::map<int64_t, std::string> processes;
  std::set<int64_t> process_sorted;
  std::map<std::pair<int64_t, int64_t>, std::string> tracks;
  std::set<std::pair<int64_t, int64_t>> track_sorted;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "M") continue;
    const int64_t pid = e["pid"];
    if (e["name"] == "process_name") processes[pid] = e["args"]["name"];
    if (e["name"] == "process_sort_index") process_sorted.insert(pid);
    if (e["name"] == "thread_name") tracks[{pid, e["tid"].get<int64_t>()}] = e["args"]["name"];
    if (e["name"] == "thread_sort_index") track_sorted.insert({pid, e["tid"].get<int64_t>()});
  }
  size_t slices = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++slices;
    const std::pair<int64_t, int64_t> at{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()};
    ASSERT_TRUE(processes.contains(at.first)) << e.dump();
    ASSERT_TRUE(tracks.contains(at)) << e.dump();
    EXPECT_TRUE(process_sorted.contains(at.first)) << e.dump();
    EXPECT_TRUE(track_sorted.contains(at)) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
  }
  EXPECT_GT(slices, 100u);
  // The device is its own process, apart from the host, with a hardware track, the engines and DMA queues.
  EXPECT_EQ(processes.at(1), "host");
  EXPECT_EQ(processes.at(100), "NeuronCore 0");
  EXPECT_EQ(tracks.at({100, 1}), "hardware");
  EXPECT_EQ(tracks.at({100, 11}), "vector engine");
  EXPECT_EQ(tracks.at({100, 100}), "DMA queue 0");
}

TEST(PerfettoTrace, InstructionsSitOnTheirEngineTracks) {
  const auto& p = test_profiles::generate().naive;
  const analysis::ProfileDir profile = analysis::profile_dir_load(p.dir);
  uint64_t records = 0;
  for (const analysis::TracedExecutable& t : profile.traced) records += t.trace.record_count();
  const json doc = perfetto_of(p);
  uint64_t instructions = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "instruction") {
      ++instructions;
      EXPECT_EQ(e["pid"], 100);
      EXPECT_GE(e["tid"].get<int64_t>(), 10);
    }
  }
  EXPECT_EQ(instructions, records);
}

TEST(PerfettoTrace, FlowsChainEachOpToItsDeviceWork) {
  const json doc = perfetto_of(test_profiles::generate().naive);
  std::map<uint64_t, std::vector<const json*>> chains;
  for (const json& e : doc["traceEvents"]) {
    if (e.contains("bind_id")) chains[e["bind_id"].get<uint64_t>()].push_back(&e);
  }
  ASSERT_FALSE(chains.empty());
  size_t executions_reached = 0;
  for (const auto& [id, chain] : chains) {
    ASSERT_GE(chain.size(), 2u) << id;
    // The op starts the chain (flow_out only); every later slice is entered, and all but the last go on.
    const json& head = *chain.front();
    EXPECT_EQ(head["cat"], "cpu_op") << head.dump();
    EXPECT_FALSE(head.value("flow_in", false)) << head.dump();
    EXPECT_TRUE(head.value("flow_out", false)) << head.dump();
    for (size_t k = 1; k < chain.size(); ++k) {
      EXPECT_TRUE((*chain[k]).value("flow_in", false)) << chain[k]->dump();
      EXPECT_EQ((*chain[k]).value("flow_out", false), k + 1 < chain.size()) << chain[k]->dump();
      EXPECT_GE((*chain[k])["ts"].get<double>(), (*chain[k - 1])["ts"].get<double>()) << chain[k]->dump();
      if ((*chain[k])["name"] == "nc_exec_running") ++executions_reached;
    }
  }
  EXPECT_EQ(executions_reached, 6u);  // every execution of the naive RMSNorm has its op
}
