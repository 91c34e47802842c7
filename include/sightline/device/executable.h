// An Executable: one device program for one core (what a NEFF holds on real hardware).
//
// Plain data, no behaviour beyond small accessors, so that formats/neff (a leaf layer) can serialize it
// by including this header only. The kernel builder fills it; Core::run executes it; the profiler reads
// its source-op table and metadata to label the per-instruction records.
//
//   Executable exe;
//   exe.name = "rms_norm_4096x4096_f32";
//   exe.io = {{"x", DType::f32, {4096, 4096}, IoKind::input}, {"y", DType::f32, {4096, 4096},
//   IoKind::output}}; exe.source_ops = {"aten::rms_norm"}; exe.semaphore_count = 4;
//   exe.dma_queues.resize(16);
//   exe.dma_queues[0].push_back(dma_copy(sbuf(0, 128, 0, DType::f32, {4096}), hbm(0, 0, 128, 4096, ...)));
//   exe.stream(Engine::scalar).push_back(...);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sightline/device/isa.h"
#include "sightline/dtype.h"

namespace sightline::device {

// scratch: device memory the program uses between its steps (a compiled program's intermediates); the
// caller binds an HBM buffer of the declared size and neither fills nor reads it.
#define SIGHTLINE_IO_KIND_TABLE(X) X(input) X(output) X(scratch)
enum class IoKind : uint8_t { SIGHTLINE_IO_KIND_TABLE(SIGHTLINE_ISA_ENUM1) };
inline constexpr int kIoKindCount = 0 SIGHTLINE_IO_KIND_TABLE(SIGHTLINE_ISA_COUNT1);

struct IoTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  IoKind kind = IoKind::input;

  uint64_t bytes() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
  }
  bool operator==(const IoTensor&) const = default;
};

struct Executable {
  std::string name;
  std::vector<IoTensor> io;
  std::vector<std::string> source_ops;  // names of the framework ops instructions come from
  uint32_t semaphore_count = 0;         // semaphores 0..count-1, all zero when a run starts
  // One in-order stream per compute engine, indexed by Engine (tensor, vector, scalar, gpsimd).
  std::array<std::vector<Instruction>, kComputeEngineCount> engines;
  // One in-order stream of dma_copy descriptors per DMA queue; at most Spec::dma.queues queues.
  std::vector<std::vector<Instruction>> dma_queues;
  // Free-form key/value metadata for tools and the profiler (builder, kernel parameters, ...).
  std::vector<std::pair<std::string, std::string>> metadata;

  std::vector<Instruction>& stream(Engine e) { return engines[static_cast<size_t>(e)]; }
  const std::vector<Instruction>& stream(Engine e) const { return engines[static_cast<size_t>(e)]; }

  size_t instruction_count() const {
    size_t n = 0;
    for (const auto& s : engines) n += s.size();
    for (const auto& q : dma_queues) n += q.size();
    return n;
  }
  bool operator==(const Executable&) const = default;
};

}  // namespace sightline::device
