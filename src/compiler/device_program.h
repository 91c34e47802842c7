// A compiled program on NeuronCores: its executable (lowered, or read from the disk cache) and, per
// core, the executable loaded once with its resident buffers (scratch and constants). A call binds
// the arguments, allocates the results and queues ONE runtime execution.
//
//   CacheOutcome outcome;
//   auto exe = obtain_executable(graph, key, options.cache_dir, neuron::runtime().spec(), outcome);
//   DeviceProgram program(exe);
//   std::vector<Tensor> results = program.run(arguments);   // arguments on neuron:<core>, contiguous
//
// Disk cache: one file per program, <cache_dir>/compiled_<hash>.neff, the hash taken over the key
// (graph dump, guards, device spec, lowering version). The key is also stored in the file, so a hash
// collision or a file from another version is rebuilt rather than run. A file is written under a
// temporary name and renamed into place, so processes compiling the same program at once each see a
// complete file; a file that does not parse (neff_load throws) is rebuilt and rewritten, with a warning.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "compiler/graph.h"
#include "compiler/lower.h"
#include "sightline/device/executable.h"
#include "sightline/device/spec.h"
#include "runtime/runtime.h"

namespace sightline::compiler {

// 16 hex digits naming a program in the caches.
std::string program_hash(const std::string& key);

enum class CacheOutcome { lowered, disk_hit };

// The executable for `graph` under `key`: read from `cache_dir` when it holds a valid entry, else
// lowered (and written there when `cache_dir` is not empty).
std::shared_ptr<const device::Executable> obtain_executable(const Graph& graph, const std::string& key,
                                                            const std::string& cache_dir,
                                                            const device::Spec& spec, CacheOutcome& outcome);

class DeviceProgram {
 public:
  explicit DeviceProgram(std::shared_ptr<const device::Executable> exe);
  ~DeviceProgram();
  DeviceProgram(const DeviceProgram&) = delete;
  DeviceProgram& operator=(const DeviceProgram&) = delete;

  const device::Executable& executable() const { return *exe_; }
  // Queues one execution on the arguments' core (the caller checked they share one neuron device and
  // are contiguous) with `correlation` as its framework correlation id; returns the results.
  std::vector<Tensor> run(std::span<const Tensor> arguments, uint64_t correlation) const;

 private:
  // The executable loaded on one core and the buffers that stay there with it.
  struct Residency {
    runtime::ExecutableId id = runtime::kNoExecutable;
    std::vector<uint64_t> addresses;  // per I/O tensor; bound per call (0) for arguments and results
  };
  const Residency& resident_on(int core, uint64_t correlation) const;

  std::shared_ptr<const device::Executable> exe_;
  std::vector<IoBinding> bindings_;
  mutable std::mutex mutex_;  // guards cores_
  mutable std::map<int, Residency> cores_;
};

}  // namespace sightline::compiler
