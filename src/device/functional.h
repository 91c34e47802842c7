// Functional execution: computes what one instruction does to the core's memories.
//
// Operands are processed a partition row at a time. An f32 operand whose row is one contiguous,
// aligned run is computed on in place; others are read into float32 scratch rows (converting from the
// operand dtype) and written back with round-to-nearest-even conversion. Either way the results are
// the same bits. Reads check the written-ness map; writes set it. Same-dtype DMA copies move raw bytes,
// one memcpy per descriptor row when both sides are contiguous.
//
// run() executes a whole issue order. Instructions whose every on-chip operand starts at the same
// partition and whose partition rows are independent of each other (element-wise work, activations,
// reductions along the free dimension, DMAs that keep a row a row) are run in groups lane by lane:
// partition row c of every instruction of the group, in issue order, then row c + 1. On-chip rows of
// different partitions are different bytes, and a group holds no two instructions whose HBM ranges
// overlap where either writes, so every byte sees the same writes in the same order as one instruction
// after another: the results and written-ness are the same bits. A tile that is loaded, computed on
// and stored is then touched while its row is in the cache instead of once per whole-buffer pass.
// Errors are those of the one-after-another order (same instruction, same row; see run_group).
// Used by Core::run; the instructions must already have passed validate_executable.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#include "sightline/error.h"

#include "sightline/device/executable.h"
#include "device/interval_set.h"
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

  // The effect of execute() on each of `order` in turn. On an error, calls
  // on_error(position in `order`, error), which must throw.
  using ErrorHandler = std::function<void(size_t position, const Error& error)>;
  void run(std::span<const Instruction* const> order, const ErrorHandler& on_error);

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

  // One instruction prepared to run a partition row at a time (see run()).
  struct Step {
    const Instruction* in = nullptr;
    View v[4];                 // operands in the order the row functions use them
    uint32_t first = 0;        // on-chip partition of row 0
    uint32_t rows = 0;         // partition rows
    size_t position = 0;       // in the issue order
    bool stream = false;       // a DMA into HBM with streaming stores (fenced after the group)
  };
  struct HbmRange {
    uintptr_t begin = 0, end = 0;  // host bytes, widened to written-ness granules
    bool write = false;
  };
  // Fills `step` when `in` runs a partition row at a time (false: matmul, cross-partition work,
  // gathers, scans, transposing DMAs).
  bool make_step(const Instruction& in, Step& step) const;
  // Whether `step` can join a lane-by-lane group: every on-chip operand starts at one partition (set
  // as step.first) and at least one is on chip; appends the host ranges of its HBM operands.
  bool lane_aligned(Step& step, std::vector<HbmRange>& ranges) const;
  void run_row(const Step& step, uint32_t p);
  void reserve_scratch(const Step& step);
  // Runs group_ lane by lane and empties it.
  void run_group(const ErrorHandler& on_error);

  void elementwise_row(const Step& s, uint32_t p);
  void reduce_row(const Step& s, uint32_t p);
  void stats_row(const Step& s, uint32_t p);
  void activation_row(const Step& s, uint32_t p);
  void iota_row(const Step& s, uint32_t p);
  void dma_row(const Step& s, uint32_t p);
  bool transposes(const View& src, const View& dst) const;

  void all_reduce(const Instruction& in);
  void matmul_run(const Instruction& in);
  // A same-dtype DMA that transposes() moves blocks of partitions at a time.
  void transpose_rows(const View& src, const View& dst);
  void gather(const Instruction& in);
  // tensor_scan, max8, find_index8 (functional_scan.cpp).
  void scan(const Instruction& in);
  void top_values(const Instruction& in);
  void find_indices(const Instruction& in);

  const Executable& exe_;
  OnChipMemory& sbuf_;
  OnChipMemory& psum_;
  std::vector<HbmMemory::Span> io_;

 public:
  // The executor's buffers, which a caller that runs program after program keeps from one executor to
  // the next (Core does): a group of a thousand steps is most of a MiB, and allocated afresh each run it
  // came back as new pages to fault in (about 300 faults per RMSNorm run) and copies as it grew.
  struct Workspace {
    std::vector<float> a, b, c;
    std::vector<const float*> st_rows, mv_rows;  // matmul operand rows
    std::vector<float*> out_rows;
    std::vector<uint8_t> bytes;
    std::vector<int64_t> dst_runs;  // a transposing DMA's destination runs (byte offsets in a row)
    std::vector<Step> group;
    // The HBM ranges the group's members read and write: whether a range overlaps any of them is a
    // look-up, not a pass over every range of the group.
    IntervalSet group_reads, group_writes;
    std::vector<HbmRange> step_ranges;
    std::vector<std::pair<uint32_t, uint32_t>> lanes;  // [first, end) lanes of each group member
  };
  FunctionalExecutor(const Executable& exe, OnChipMemory& sbuf, OnChipMemory& psum,
                     std::vector<HbmMemory::Span> io, Workspace& workspace);
  // (Not copyable: the members below refer to the executor's own workspace.)
  FunctionalExecutor(const FunctionalExecutor&) = delete;
  FunctionalExecutor& operator=(const FunctionalExecutor&) = delete;

 private:
  Workspace own_;  // used when the caller keeps no workspace
  Workspace& ws_;
  // Short names for the workspace's members.
  std::vector<float>&a_ = ws_.a, &b_ = ws_.b, &c_ = ws_.c;
  std::vector<const float*>&st_rows_ = ws_.st_rows, &mv_rows_ = ws_.mv_rows;
  std::vector<float*>& out_rows_ = ws_.out_rows;
  std::vector<uint8_t>& bytes_ = ws_.bytes;
  std::vector<int64_t>& dst_runs_ = ws_.dst_runs;
  std::vector<Step>& group_ = ws_.group;
  IntervalSet &group_reads_ = ws_.group_reads, &group_writes_ = ws_.group_writes;
  std::vector<HbmRange>& step_ranges_ = ws_.step_ranges;
  std::vector<std::pair<uint32_t, uint32_t>>& lanes_ = ws_.lanes;
};

}  // namespace sightline::device
