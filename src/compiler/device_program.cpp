#include "compiler/device_program.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "device/validate.h"
#include "formats/neff.h"
#include "neuron/neuron.h"
#include "sightline/error.h"

namespace sightline::compiler {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kKeyMetadata = "compiled.key";

std::string stored_key(const device::Executable& exe) {
  for (const auto& [k, v] : exe.metadata) {
    if (k == kKeyMetadata) return v;
  }
  return "";
}

// The cached executable at `path`, or nullptr when there is none or it cannot be used (then the caller
// rebuilds it and overwrites the file).
std::shared_ptr<const device::Executable> read_entry(const fs::path& path, const std::string& key,
                                                     const device::Spec& spec) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  try {
    device::Executable exe = formats::neff_load(path.string());
    SIGHTLINE_CHECK(stored_key(exe) == key, "it holds a different program (its stored key differs)");
    device::validate_executable(exe, spec);
    io_bindings(exe);
    return std::make_shared<const device::Executable>(std::move(exe));
  } catch (const std::exception& e) {
    fmt::print(stderr, "sightline: warning: compile cache entry {} is unusable ({}); rebuilding it\n",
               path.string(), e.what());
    return nullptr;
  }
}

// Writes under a name unique to this process and write, then renames over the entry: a rename within
// one directory is atomic, so a concurrent reader sees no file, the old one or the whole new one.
void write_entry(const fs::path& path, const device::Executable& exe) {
  static std::atomic<uint64_t> writes{0};
  const fs::path temporary = path.parent_path() / fmt::format(".{}.{}.{}.tmp", path.filename().string(),
                                                              ::getpid(), writes.fetch_add(1));
  try {
    fs::create_directories(path.parent_path());
    const std::vector<uint8_t> bytes = formats::neff_serialize(exe);
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      out.close();
      SIGHTLINE_CHECK(out.good(), "writing {} failed", temporary.string());
    }
    fs::rename(temporary, path);
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    fmt::print(stderr,
               "sightline: warning: could not store the compiled program as {} ({}); it is cached in "
               "memory only\n",
               path.string(), e.what());
  }
}

// The bytes of a constants I/O tensor: each value rounded to the tensor's dtype as eager code would.
std::vector<uint8_t> constant_bytes(const device::Executable& exe, const device::IoTensor& io) {
  std::vector<uint8_t> bytes;
  for (double value : constant_values(exe, io)) {
    const Tensor element = full({}, value, TensorOptions(io.dtype, Device::cpu()));
    const auto* data = static_cast<const uint8_t*>(element.raw_data());
    bytes.insert(bytes.end(), data, data + element.element_size());
  }
  return bytes;
}

bool is_resident(IoRole role) { return role == IoRole::constants || role == IoRole::scratch; }

}  // namespace

std::string program_hash(const std::string& key) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(key.data());
  return fmt::format("{:016x}", formats::fnv1a64(std::span<const uint8_t>(bytes, key.size())));
}

std::shared_ptr<const device::Executable> obtain_executable(const Graph& graph, const std::string& key,
                                                            const std::string& cache_dir,
                                                            const device::Spec& spec, CacheOutcome& outcome) {
  const std::string hash = program_hash(key);
  const fs::path path =
      cache_dir.empty() ? fs::path() : fs::path(cache_dir) / fmt::format("compiled_{}.neff", hash);
  if (!cache_dir.empty()) {
    if (auto exe = read_entry(path, key, spec)) {
      outcome = CacheOutcome::disk_hit;
      return exe;
    }
  }
  device::Executable exe = lower(graph, spec, fmt::format("compiled_{}", hash));
  exe.metadata.emplace_back(kKeyMetadata, key);
  if (!cache_dir.empty()) write_entry(path, exe);
  outcome = CacheOutcome::lowered;
  return std::make_shared<const device::Executable>(std::move(exe));
}

DeviceProgram::DeviceProgram(std::shared_ptr<const device::Executable> exe)
    : exe_(std::move(exe)), bindings_(io_bindings(*exe_)) {}

DeviceProgram::~DeviceProgram() {
  // Frees are stream-ordered: executions still queued keep their buffers until they have run.
  for (const auto& [core, residency] : cores_) {
    for (size_t i = 0; i < bindings_.size(); ++i) {
      if (is_resident(bindings_[i].role)) neuron::runtime().free(core, residency.addresses[i]);
    }
  }
}

const DeviceProgram::Residency& DeviceProgram::resident_on(int core, uint64_t correlation) const {
  std::lock_guard lock(mutex_);
  if (auto it = cores_.find(core); it != cores_.end()) return it->second;
  runtime::Runtime& rt = neuron::runtime();
  Residency r;
  r.addresses.assign(exe_->io.size(), 0);
  std::vector<uint64_t> allocated;
  try {
    for (size_t i = 0; i < bindings_.size(); ++i) {
      if (!is_resident(bindings_[i].role)) continue;
      const device::IoTensor& io = exe_->io[i];
      // A zero-byte tensor still gets a distinct allocation, so that its binding stays valid.
      r.addresses[i] = rt.allocate(core, std::max<uint64_t>(io.bytes(), 4), correlation);
      allocated.push_back(r.addresses[i]);
      if (bindings_[i].role == IoRole::constants) {
        const std::vector<uint8_t> bytes = constant_bytes(*exe_, io);
        rt.write(core, r.addresses[i], bytes.data(), bytes.size(), correlation);
      }
    }
    r.id = rt.load(core, exe_);
  } catch (...) {
    for (uint64_t address : allocated) rt.free(core, address);
    throw;
  }
  return cores_.emplace(core, std::move(r)).first->second;
}

std::vector<Tensor> DeviceProgram::run(std::span<const Tensor> arguments, uint64_t correlation) const {
  SIGHTLINE_ASSERT(!arguments.empty());
  const Device device = arguments.front().device();
  const int core = device.index;
  const Residency& residency = resident_on(core, correlation);
  std::vector<uint64_t> addresses = residency.addresses;
  std::vector<Tensor> results;
  for (size_t i = 0; i < bindings_.size(); ++i) {
    const device::IoTensor& io = exe_->io[i];
    const size_t index = static_cast<size_t>(bindings_[i].index);
    if (bindings_[i].role == IoRole::argument) {
      SIGHTLINE_ASSERT_MSG(index < arguments.size() && arguments[index].nbytes() == io.bytes(),
                           "argument {} does not match I/O tensor '{}' of '{}'", index, io.name, exe_->name);
      addresses[i] = neuron::device_address(arguments[index]);
    } else if (bindings_[i].role == IoRole::result) {
      if (results.size() <= index) results.resize(index + 1);
      results[index] = empty(Dims(std::span<const int64_t>(io.shape)), TensorOptions(io.dtype, device));
      addresses[i] = neuron::device_address(results[index]);
    }
  }
  neuron::runtime().execute_schedule(core, residency.id, std::move(addresses), correlation);
  return results;
}

}  // namespace sightline::compiler
