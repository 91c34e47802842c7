// Functional execution: computes what one instruction does to the core's memories.
//
// Operands are processed a partition row at a time. An f32 operand whose row is one contiguous,
// aligned run is computed on in place; others are read into float32 scratch rows (converting from the
// operand dtype) and written back with round-to-nearest-even conversion. Either way the results are
// the same bits. Reads check the written-ness map; writes set it. Same-dtype DMA copies move raw bytes,
// one memcpy per descriptor row when both sides are contiguous.
// Used by Core::run; the instruction must already have passed validate_executable.
#pragma once

#include <initializer_list>
#include <vector>

#include "sightline/device/executable.h"
#include "device/memory.h"
#include "sightline/device/spec.h"

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
    uint8_t* data = nullptr;         // element (partition 0, free index 0)
    WrittenMap* written = nullptr;   // written-ness of the memory `data` lies in
    uint64_t written_base = 0;       // position of `data` in `written`
    int64_t partition_stride = 0;
    int64_t sizes[4] = {1, 1, 1, 1};
    int64_t strides[4] = {0, 0, 0, 0};  // bytes
    uint32_t partitions = 0;
    uint32_t elements = 0;  // per partition
    DType dtype = DType::f32;
    OnChipMemory* chip = nullptr;  // null for HBM
    uint32_t first_partition = 0;
    uint64_t offset = 0;  // bytes into the partition or the tensor
    int64_t extent_min = 0, extent_max = 0;  // bytes a partition row touches, relative to its start
    bool contiguous = false;  // a partition row is one run of elements * dtype size bytes
    bool direct = false;      // contiguous f32 at 4-byte aligned addresses: computed on in place
    const char* name = "";
    uint32_t tensor = 0;
  };

 private:
  View view(const AccessPattern& ap, const char* name) const;
  void check(const View& v, uint32_t p, int64_t byte, int64_t bytes) const;
  void mark(const View& v, uint32_t p, int64_t byte, int64_t bytes) const;
  // The same for n elements `stride` bytes apart (one strided run).
  void check_strided(const View& v, uint32_t p, int64_t byte, int64_t stride, int64_t n) const;
  void mark_strided(const View& v, uint32_t p, int64_t byte, int64_t stride, int64_t n) const;
  void load(const View& v, uint32_t p, float* out) const;
  void store(const View& v, uint32_t p, const float* in) const;
  // Row p of v as f32: the memory itself for direct views (after checking it was written), else
  // `scratch` filled by load().
  const float* load_f32(const View& v, uint32_t p, float* scratch) const;
  // Where to compute row p of v: the memory itself for direct views that `inputs` do not partly
  // overlap, else `scratch`; commit() then converts (if scratch) and marks the row written.
  float* target(const View& v, uint32_t p, float* scratch, std::initializer_list<const float*> inputs,
                size_t n) const;
  void commit(const View& v, uint32_t p, const float* computed) const;
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
  bool transpose_rows(const View& src, const View& dst);
  void gather(const Instruction& in);
  // tensor_scan, max8, find_index8 (functional_scan.cpp).
  void scan(const Instruction& in);
  void top_values(const Instruction& in);
  void find_indices(const Instruction& in);

  const Executable& exe_;
  OnChipMemory& sbuf_;
  OnChipMemory& psum_;
  std::vector<HbmMemory::Span> io_;
  std::vector<float> a_, b_, c_, d_;
  std::vector<const float*> st_rows_, mv_rows_;  // matmul operand rows
  std::vector<float*> out_rows_;
  std::vector<uint8_t> bytes_;
};

}  // namespace sightline::device
