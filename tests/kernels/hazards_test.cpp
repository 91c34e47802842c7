// The hazard tracker's interval index against the plain list it replaced: on random instruction streams
// over overlapping, nested and identical regions in every memory, both give every instruction the same
// waits and updates (so every executable, and every modeled time, is the same). HBM rows of one pitch
// with gaps between them (issue 19: a matmul result stored in column pieces) are told apart in both.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "device/validate.h"
#include "sightline/kernels/hazards.h"

namespace sightline::kernel_tests {
namespace {

using device::AccessPattern;
using device::Memory;

// The previous implementation: every access of a memory (or HBM tensor) in one list, scanned whole.
class ListTracker {
 public:
  explicit ListTracker(uint32_t streams)
      : streams_(streams), issued_(streams, 0), known_(streams, std::vector<uint32_t>(streams, 0)),
        history_(streams) {}

  void track(device::Instruction& in, uint32_t stream) {
    const bool accumulates = in.opcode == device::Opcode::matmul && (in.flags & device::kFlagAccumulate);
    const std::pair<const AccessPattern*, bool> operands[] = {
        {&in.src0, false}, {&in.src1, false}, {&in.dst, true}, {&in.aux, true}};
    std::vector<uint32_t> needed(streams_, 0);
    for (const auto& [ap, write] : operands) {
      if (!ap->present()) continue;
      const Region r = region_of(*ap);
      need(r, write, needed);
      if (write && accumulates) need(r, false, needed);
    }
    std::vector<uint32_t>& known = known_[stream];
    for (uint32_t t = 0; t < streams_; ++t) {
      if (t == stream || needed[t] <= known[t]) needed[t] = 0;
    }
    for (uint32_t t = 0; t < streams_; ++t) {
      if (needed[t] == 0) continue;
      for (uint32_t u = 0; u < streams_; ++u) {
        if (u != t && needed[u] != 0 && history_[u][needed[u] - 1][t] >= needed[t]) {
          needed[t] = 0;
          break;
        }
      }
    }
    for (uint32_t t = 0; t < streams_; ++t) {
      if (needed[t] == 0) continue;
      in.waits.push_back({static_cast<uint16_t>(t), needed[t]});
      known[t] = std::max(known[t], needed[t]);
      const std::vector<uint32_t>& learned = history_[t][needed[t] - 1];
      for (uint32_t u = 0; u < streams_; ++u) known[u] = std::max(known[u], learned[u]);
    }
    const uint32_t count = ++issued_[stream];
    known[stream] = count - 1;
    history_[stream].push_back(known);
    in.updates.push_back({static_cast<uint16_t>(stream), 1});
    for (const auto& [ap, write] : operands) {
      if (!ap->present()) continue;
      const Region r = region_of(*ap);
      if (!write || accumulates) record(r, stream, count, false);
      if (write) record(r, stream, count, true);
    }
  }

 private:
  struct Region {
    Memory memory = Memory::none;
    uint32_t tensor = 0, partition_begin = 0, partition_end = 0;
    int64_t byte_begin = 0, byte_end = 0;
    int64_t row_stride = 0, row_bytes = 0;  // HBM rows with gaps between them (0: one dense range)
    bool overlaps(const Region& o) const {
      if (!(partition_begin < o.partition_end && o.partition_begin < partition_end && byte_begin < o.byte_end &&
            o.byte_begin < byte_end)) {
        return false;
      }
      if (row_stride == 0 || row_stride != o.row_stride) return true;
      const int64_t shift = ((o.byte_begin - byte_begin) % row_stride + row_stride) % row_stride;
      return shift < row_bytes || row_stride - shift < o.row_bytes;
    }
    bool contains(const Region& o) const {
      if (!(partition_begin <= o.partition_begin && o.partition_end <= partition_end &&
            byte_begin <= o.byte_begin && o.byte_end <= byte_end)) {
        return false;
      }
      if (row_stride == 0) return true;
      if (o.row_stride != row_stride) return false;
      const int64_t shift = ((o.byte_begin - byte_begin) % row_stride + row_stride) % row_stride;
      return shift + o.row_bytes <= row_bytes;
    }
    bool operator==(const Region&) const = default;
  };
  struct Access {
    Region region;
    uint32_t stream = 0, count = 0;
    bool write = false;
  };

  static Region region_of(const AccessPattern& ap) {
    Region r;
    r.memory = ap.memory;
    const bool hbm = ap.memory == Memory::hbm;
    const device::ByteExtent e = device::operand_extent(ap, hbm);
    if (hbm) {
      r.tensor = ap.tensor;
      r.partition_end = 1;
    } else {
      r.partition_begin = ap.partition_start;
      r.partition_end = uint32_t{ap.partition_start} + ap.partition_count;
    }
    r.byte_begin = static_cast<int64_t>(ap.offset) + e.min;
    r.byte_end = static_cast<int64_t>(ap.offset) + e.max;
    const device::ByteExtent row = device::operand_extent(ap, false);
    const int64_t pitch = int64_t{ap.partition_stride} * static_cast<int64_t>(dtype_size(ap.dtype));
    if (hbm && ap.partition_count > 1 && row.min == 0 && pitch > row.max) {
      r.row_stride = pitch;
      r.row_bytes = row.max;
    }
    return r;
  }
  static uint64_t key(const Region& r) { return (uint64_t{static_cast<uint8_t>(r.memory)} << 32) | r.tensor; }

  void need(const Region& r, bool write, std::vector<uint32_t>& needed) const {
    const auto it = accesses_.find(key(r));
    if (it == accesses_.end()) return;
    for (const Access& a : it->second) {
      if (!write && !a.write) continue;
      if (!a.region.overlaps(r)) continue;
      needed[a.stream] = std::max(needed[a.stream], a.count);
    }
  }
  void record(const Region& r, uint32_t stream, uint32_t count, bool write) {
    std::vector<Access>& list = accesses_[key(r)];
    if (write) {
      std::erase_if(list, [&](const Access& a) { return r.contains(a.region); });
    } else {
      for (Access& a : list) {
        if (!a.write && a.stream == stream && a.region == r) {
          a.count = count;
          return;
        }
      }
    }
    list.push_back({r, stream, count, write});
  }

  uint32_t streams_;
  std::vector<uint32_t> issued_;
  std::vector<std::vector<uint32_t>> known_;
  std::vector<std::vector<std::vector<uint32_t>>> history_;
  std::map<uint64_t, std::vector<Access>> accesses_;
};

// Few distinct offsets and sizes, so identical, nested and partly overlapping regions are common.
AccessPattern random_operand(std::mt19937& rng) {
  const auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  const uint32_t sizes[] = {16, 64, 256, 1024, 8192};
  const uint32_t size = sizes[pick(5)];
  switch (pick(4)) {
    case 0: {
      const uint16_t start = static_cast<uint16_t>(32 * pick(4));
      const uint16_t count = static_cast<uint16_t>(std::min<uint32_t>(32 * (1 + pick(4)), 128 - start));
      return device::sbuf(start, count, 64 * pick(64), DType::f32, {size});
    }
    case 1: {
      const uint16_t start = static_cast<uint16_t>(64 * pick(2));
      return device::psum(start, 64, 2048 * pick(4), DType::f32, {std::min<uint32_t>(size, 512)});
    }
    default: {
      // Rows of a [128, 8192] f32 tensor, or a column block (its range spans the whole tensor).
      const uint16_t rows = static_cast<uint16_t>(1 + pick(128));
      const uint32_t cols = std::min<uint32_t>(size, 1024);
      return device::hbm(pick(3), 4 * (uint64_t{8192} * pick(64) + 1024 * pick(8)), rows, 8192, DType::f32,
                         {cols});
    }
  }
}

TEST(HazardTracker, IntervalIndexGivesTheListsWaits) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const uint32_t streams = 4 + 1 + rng() % 16;
    kernels::HazardTracker tracker(streams);
    ListTracker reference(streams);
    size_t waits = 0;
    for (int i = 0; i < 3000; ++i) {
      device::Instruction in;
      const bool mm = rng() % 4 == 0;
      in.opcode = mm ? device::Opcode::matmul : device::Opcode::tensor_tensor;
      if (mm && rng() % 2 == 0) in.flags = device::kFlagAccumulate;
      in.dst = random_operand(rng);
      if (rng() % 4 != 0) in.src0 = random_operand(rng);
      if (rng() % 2 != 0) in.src1 = random_operand(rng);
      if (rng() % 8 == 0) in.aux = random_operand(rng);
      const uint32_t stream = static_cast<uint32_t>(rng() % streams);
      device::Instruction expected = in;
      tracker.track(in, stream);
      reference.track(expected, stream);
      ASSERT_EQ(in.waits, expected.waits) << "seed " << seed << ", instruction " << i;
      ASSERT_EQ(in.updates, expected.updates) << "seed " << seed << ", instruction " << i;
      waits += in.waits.size();
    }
    EXPECT_GT(waits, 100u) << "seed " << seed << ": the streams should conflict often";
  }
}

// Two DMA writes of one HBM tensor on different queues: the second waits for the first exactly when
// their bytes meet. Rows of the same pitch that interleave without touching (a result stored in column
// pieces) need no wait; every pair whose bytes do meet must (checked byte by byte).
TEST(HazardTracker, InterleavedRowsWaitOnlyWhenTheirBytesMeet) {
  const uint32_t pitch = 64;  // f32 elements per tensor row
  auto store = [&](uint64_t first_row, uint16_t rows, uint32_t col, uint32_t cols, uint32_t step) {
    device::Instruction in;
    in.opcode = device::Opcode::dma_copy;
    in.dst = device::hbm(0, 4 * (first_row * pitch + col), rows, int64_t{step} * pitch, DType::f32,
                         {cols});
    in.src0 = device::sbuf(0, rows, 0, DType::f32, {cols});
    return in;
  };
  auto bytes_of = [&](const device::Instruction& in) {
    std::vector<bool> set(4 * pitch * 256, false);
    const AccessPattern& d = in.dst;
    for (uint32_t p = 0; p < d.partition_count; ++p) {
      for (uint32_t c = 0; c < d.dims[0].size * 4; ++c) set[d.offset + 4 * uint64_t{p} * d.partition_stride + c] = true;
    }
    return set;
  };
  auto waits_after = [&](const device::Instruction& first, device::Instruction second) {
    kernels::HazardTracker tracker(device::kComputeEngineCount + 2);
    device::Instruction a = first;
    tracker.track(a, kernels::HazardTracker::queue_stream(0));
    tracker.track(second, kernels::HazardTracker::queue_stream(1));
    return !second.waits.empty();
  };
  // Column halves of the same 128 rows: no wait; the same columns, or one column in common: a wait.
  EXPECT_FALSE(waits_after(store(0, 128, 0, 32, 1), store(0, 128, 32, 32, 1)));
  EXPECT_TRUE(waits_after(store(0, 128, 0, 32, 1), store(0, 128, 31, 32, 1)));
  EXPECT_TRUE(waits_after(store(0, 128, 0, 32, 1), store(64, 8, 0, 64, 1)));
  std::mt19937 rng(7);
  int disjoint = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
    const uint32_t step_a = 1 + pick(2), step_b = pick(4) == 0 ? 1 + pick(3) : step_a;
    const uint32_t cols_a = 1 + pick(pitch), cols_b = 1 + pick(pitch);
    const device::Instruction a =
        store(pick(64), static_cast<uint16_t>(1 + pick(64)), pick(pitch - cols_a + 1), cols_a, step_a);
    const device::Instruction b =
        store(pick(64), static_cast<uint16_t>(1 + pick(64)), pick(pitch - cols_b + 1), cols_b, step_b);
    const std::vector<bool> sa = bytes_of(a), sb = bytes_of(b);
    bool meet = false;
    for (size_t k = 0; k < sa.size() && !meet; ++k) meet = sa[k] && sb[k];
    if (meet) {
      EXPECT_TRUE(waits_after(a, b)) << "pair " << i;
    } else if (!waits_after(a, b)) {
      ++disjoint;
    }
  }
  EXPECT_GT(disjoint, 100) << "interleaved rows that do not touch should often run without a wait";
}

}  // namespace
}  // namespace sightline::kernel_tests
