// What the collective tests share: a profile of four steps written as one rank of a job.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sightline/neuron.h"
#include "sightline/profiler/profile.h"
#include "sightline/sightline.h"

namespace sightline::test {

inline sightline::Device core(int k) { return sightline::Device::parse("neuron:" + std::to_string(k)); }

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// Profiles four steps (wait 2, warmup 1, active 1) of `fn` into `dir` as rank `rank` of `world`, capturing
// cores 0 and 1; returns the directory written.
template <typename Fn>
std::string profile_steps(const std::filesystem::path& dir, int rank, int world, Fn&& fn) {
  using namespace sightline;
  auto cfg = std::make_shared<neuron::NeuronConfig>();
  cfg->profile_output_dir = dir.string();
  cfg->capture_enabled_for_nc = "0,1";
  cfg->rank = rank;
  cfg->world_size = world;
  neuron::NeuronProfiler exporter(cfg);
  std::string written;
  profiler::ProfileOptions options;
  options.schedule = profiler::schedule({.wait = 2, .warmup = 1, .active = 1});
  options.on_trace_ready = [&](profiler::profile& p) { written = exporter.export_trace(p); };
  options.experimental_config = cfg;
  profiler::profile prof(options);
  prof.start();
  for (int step = 0; step < 4; ++step) {
    fn();
    neuron::synchronize();
    prof.step();
  }
  prof.stop();
  return written;
}

}  // namespace sightline::test
