// Functional execution: computes what one instruction does to the core's memories.
//
// Operands are read a partition row at a time into float32 scratch rows (converting from the operand
// dtype), computed with tight loops over contiguous rows, and written back with round-to-nearest-even
// conversion. Reads check the written-ness shadow; writes set it. Same-dtype DMA copies move raw bytes.
// Used by Core::run; the instruction must already have passed validate_executable.
#pragma once

#include <vector>

#include "device/executable.h"
#include "device/memory.h"
#include "device/spec.h"

namespace sightline::device {

class FunctionalExecutor {
 public:
  // `io` holds the host bytes of each I/O tensor, in Executable::io order.
  FunctionalExecutor(const Executable& exe, OnChipMemory& sbuf, OnChipMemory& psum,
                     std::vector<HbmMemory::Span> io);

  // Throws sightline::Error (without the instruction's location; the caller adds it) on reads of
  // never-written bytes.
  void execute(const Instruction& in);

  // A resolved operand: host pointers plus byte strides, outer dims padded to 4.
  struct View {
    uint8_t* data = nullptr;     // element (partition 0, free index 0)
    uint8_t* written = nullptr;  // its shadow byte
    int64_t partition_stride = 0;
    int64_t sizes[4] = {1, 1, 1, 1};
    int64_t strides[4] = {0, 0, 0, 0};  // bytes
    uint32_t partitions = 0;
    uint32_t elements = 0;  // per partition
    DType dtype = DType::f32;
    OnChipMemory* chip = nullptr;  // null for HBM
    uint32_t first_partition = 0;
    uint64_t offset = 0;     // bytes into the partition or the tensor
    int64_t extent_end = 0;  // one past the last byte touched in a partition, relative to `data`
    const char* name = "";
    uint32_t tensor = 0;
  };

 private:
  View view(const AccessPattern& ap, const char* name) const;
  void load(const View& v, uint32_t p, float* out) const;
  void store(const View& v, uint32_t p, const float* in) const;
  void load_bytes(const View& v, uint32_t p, uint8_t* out) const;
  void store_bytes(const View& v, uint32_t p, const uint8_t* in) const;
  [[noreturn]] void unwritten(const View& v, uint32_t p, int64_t byte) const;

  void elementwise(const Instruction& in);
  void reduce(const Instruction& in);
  void stats(const Instruction& in);
  void activation(const Instruction& in);
  void iota_fill(const Instruction& in);
  void all_reduce(const Instruction& in);
  void matmul_run(const Instruction& in);
  void dma(const Instruction& in);
  void gather(const Instruction& in);

  const Executable& exe_;
  OnChipMemory& sbuf_;
  OnChipMemory& psum_;
  std::vector<HbmMemory::Span> io_;
  std::vector<float> a_, b_, c_, d_;
  std::vector<uint8_t> bytes_;
};

}  // namespace sightline::device
