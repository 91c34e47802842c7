// The simulated memories: written-ness at 2-byte granules, O(1) forgetting, pooled HBM blocks, and an
// allocator that rejects sizes it cannot hold.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/interval_set.h"
#include "device/memory.h"
#include "sightline/error.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

using ::testing::HasSubstr;

TEST(DeviceMemory, WrittenMapIsExactPerGranule) {
  WrittenMap map(4096);
  EXPECT_EQ(map.first_unwritten(0, 4096), 0u);
  map.mark(2, 6);  // two granules
  EXPECT_EQ(map.first_unwritten(2, 6), 6u);
  EXPECT_EQ(map.first_unwritten(0, 6), 0u);
  EXPECT_EQ(map.first_unwritten(2, 8), 6u);
  // Across 64-bit words and 1 KiB blocks.
  map.mark(100, 3000);
  EXPECT_EQ(map.first_unwritten(100, 3000), 3000u);
  EXPECT_EQ(map.first_unwritten(100, 3002), 3000u);
  EXPECT_EQ(map.first_unwritten(98, 3000), 98u);
  EXPECT_EQ(map.first_unwritten(1500, 1500), 1500u);  // empty range
  map.mark(4094, 4096);
  EXPECT_EQ(map.first_unwritten(4094, 4096), 4096u);
  map.forget_all();
  EXPECT_EQ(map.first_unwritten(100, 3000), 100u);
  map.mark(1030, 1034);  // a block written after forgetting starts clean
  EXPECT_EQ(map.first_unwritten(1024, 1040), 1024u);
  EXPECT_EQ(map.first_unwritten(1030, 1040), 1034u);
}

// Marks that cover whole 1 KiB blocks are stored in bulk, the blocks at either end word by word: every
// way a range can start and end (inside a word, at a word or block boundary, in one word, in one block,
// across many) is checked against a plain model of one flag per granule, across forget_all() calls.
TEST(DeviceMemory, WrittenMapMatchesAGranuleModel) {
  constexpr uint64_t kBytes = 6 * 1024 + 6;  // not a whole number of words or blocks
  WrittenMap map(kBytes);
  std::vector<bool> model(kBytes / 2);
  const auto model_first = [&](uint64_t begin, uint64_t end) {
    for (uint64_t g = begin / 2; g * 2 < end; ++g) {
      if (!model[g]) return std::max(begin, g * 2);
    }
    return end;
  };
  // Edges: block and word boundaries and their neighbours.
  const std::vector<uint64_t> edges = {0, 1, 2, 126, 127, 128, 130, 1022, 1023, 1024, 1025, 1026, 1150,
                                       2048, 3070, 3072, 4096, 5120, 6144, 6150, kBytes - 1, kBytes};
  uint64_t seed = 12345;
  const auto next = [&](uint64_t n) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return (seed >> 33) % n;
  };
  const auto pick = [&]() { return next(3) == 0 ? next(kBytes + 1) : edges[next(edges.size())]; };
  for (int round = 0; round < 4000; ++round) {
    if (next(200) == 0) {
      map.forget_all();
      std::fill(model.begin(), model.end(), false);
    }
    uint64_t a = pick(), b = pick();
    if (a > b) std::swap(a, b);
    if (next(2) == 0) {
      map.mark(a, b);
      for (uint64_t g = a / 2; a < b && g * 2 < b; ++g) model[g] = true;  // an empty range marks nothing
    }
    uint64_t c = pick(), d = pick();
    if (c > d) std::swap(c, d);
    ASSERT_EQ(map.first_unwritten(c, d), model_first(c, d)) << "round " << round << " [" << c << ", " << d << ")";
    ASSERT_EQ(map.first_unwritten(a, b), a < b ? model_first(a, b) : b) << "round " << round;
  }
}

// The hazard check's interval set against a plain model of one flag per byte: after every add, the
// spans are sorted, disjoint and not touching, their union is the model's, and every overlap query
// (empty ranges, ranges touching a span's ends, ranges across several spans) answers as the model does.
TEST(DeviceMemory, IntervalSetMatchesAByteModel) {
  constexpr uintptr_t kBytes = 300;
  IntervalSet set;
  std::vector<bool> model(kBytes);
  uint64_t seed = 777;
  const auto next = [&](uint64_t n) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    return static_cast<uintptr_t>((seed >> 33) % n);
  };
  for (int round = 0; round < 6000; ++round) {
    if (next(150) == 0) {
      set.clear();
      std::fill(model.begin(), model.end(), false);
      EXPECT_TRUE(set.empty());
    }
    // Mostly short ranges, so that spans stay apart and merge a few at a time.
    uintptr_t a = next(kBytes + 1), b = next(4) == 0 ? next(kBytes + 1) : std::min(kBytes, a + next(12));
    if (a > b) std::swap(a, b);
    if (next(2) == 0) {
      set.add(a, b);
      for (uintptr_t i = a; i < b; ++i) model[i] = true;
    }
    std::vector<bool> covered(kBytes);
    uintptr_t previous_end = 0;
    for (size_t k = 0; k < set.spans().size(); ++k) {
      const IntervalSet::Span& span = set.spans()[k];
      ASSERT_LT(span.begin, span.end) << "round " << round;
      if (k > 0) {
        ASSERT_GT(span.begin, previous_end) << "round " << round << ": spans touch or overlap";
      }
      previous_end = span.end;
      for (uintptr_t i = span.begin; i < span.end; ++i) covered[i] = true;
    }
    ASSERT_EQ(covered, model) << "round " << round;
    uintptr_t c = next(kBytes + 1), d = next(3) == 0 ? next(kBytes + 1) : std::min(kBytes, c + next(8));
    if (c > d) std::swap(c, d);
    bool expected = false;
    for (uintptr_t i = c; i < d; ++i) expected = expected || model[i];
    ASSERT_EQ(set.overlaps(c, d), expected) << "round " << round << " [" << c << ", " << d << ")";
  }
}

// A check inside a range marked since the last forget_all() is answered from the recent ranges (ranges
// of 4 KiB and more); one that leaves them, or comes after forget_all(), still finds the bytes nobody
// wrote.
TEST(DeviceMemory, RecentlyMarkedRangesStillReportHoles) {
  WrittenMap map(1 << 22);
  map.mark(0, 6400);
  map.mark(12800, 19200);
  EXPECT_EQ(map.first_unwritten(10, 6390), 6390u);
  EXPECT_EQ(map.first_unwritten(64, 16000), 6400u);  // spans both ranges and the gap
  EXPECT_EQ(map.first_unwritten(9600, 16000), 9600u);
  map.mark(19200, 19200 + 4097);  // touches the last range: extends it (to the granule's end)
  EXPECT_EQ(map.first_unwritten(12800, 23298), 23298u);
  EXPECT_EQ(map.first_unwritten(12800, 23299), 23298u);
  map.mark(1, 8193);  // odd bounds: the granules [0, 8194) it touches are written
  EXPECT_EQ(map.first_unwritten(0, 8194), 8194u);
  EXPECT_EQ(map.first_unwritten(0, 8196), 8194u);
  // More disjoint ranges than are remembered: the old ones are answered from the bits.
  constexpr uint64_t kFrom = 1 << 16, kStep = 10000, kLength = 5000;
  for (uint64_t i = 0; i < 100; ++i) map.mark(kFrom + i * kStep, kFrom + i * kStep + kLength);
  for (uint64_t i = 0; i < 100; ++i) {
    const uint64_t b = kFrom + i * kStep;
    EXPECT_EQ(map.first_unwritten(b, b + kLength), b + kLength) << i;
    EXPECT_EQ(map.first_unwritten(b, b + kLength + 1), b + kLength) << i;
    EXPECT_EQ(map.first_unwritten(b - 2, b + kLength), b - 2) << i;
  }
  EXPECT_EQ(map.first_unwritten(10, 6390), 6390u);
  map.forget_all();  // the remembered ranges are forgotten with the bits
  EXPECT_EQ(map.first_unwritten(10, 6390), 10u);
  const uint64_t last = kFrom + 99 * kStep;
  EXPECT_EQ(map.first_unwritten(last, last + kLength), last);
  map.mark(0, 40000);
  EXPECT_EQ(map.first_unwritten_strided(0, 4000, 10, 4), 10u);
  EXPECT_EQ(map.first_unwritten_strided(0, 4000, 12, 4), 10u);  // element 10, at 40000, is past the mark
  EXPECT_EQ(map.first_unwritten_strided(36000, -4000, 10, 4), 10u);
  EXPECT_EQ(map.first_unwritten_strided(38000, 2, 2, 4), 2u);
  EXPECT_EQ(map.first_unwritten_strided(39996, 2, 3, 4), 1u);  // the element at 39998 ends past the mark
}

TEST(DeviceMemory, StridedRunsAreTrackedPerElement) {
  WrittenMap map(1 << 16);
  map.mark_strided(64, 400, 100, 4);  // a column of f32 with rows 400 bytes apart
  EXPECT_EQ(map.first_unwritten_strided(64, 400, 100, 4), 100u);
  EXPECT_EQ(map.first_unwritten(64, 68), 68u);
  EXPECT_EQ(map.first_unwritten(68, 70), 68u);  // between elements: unwritten
  EXPECT_EQ(map.first_unwritten_strided(64, 400, 101, 4), 100u);
  EXPECT_EQ(map.first_unwritten_strided(66, 400, 100, 4), 0u);  // half of each element
  EXPECT_EQ(map.first_unwritten_strided(64 + 99 * 400, -400, 100, 2), 100u);
  map.mark_strided(40000, 0, 5, 2);  // stride 0: one element
  EXPECT_EQ(map.first_unwritten(40000, 40002), 40002u);
  map.forget_all();
  EXPECT_EQ(map.first_unwritten_strided(64, 400, 100, 4), 0u);
}

TEST(DeviceMemory, ShadowIsAtMostAnEighthOfTheData) {
  for (uint64_t bytes : {uint64_t{1} << 10, uint64_t{24} << 20, uint64_t{64} << 20}) {
    const WrittenMap map(bytes);
    EXPECT_LE((map.shadow_bytes() - WrittenMap::kFixedBytes) * 8, bytes) << bytes;
    if (bytes >= (uint64_t{1} << 20)) {
      EXPECT_LE(map.shadow_bytes() * 8, bytes) << bytes;
    }
  }
}

// Mapped buffers (simulated HBM of 2 MiB and more) are page aligned, zeroed and whole; heap ones
// (on-chip memory, short tensors) come from calloc, as zeroed.
TEST(DeviceMemory, ZeroedBuffersAreZeroedWhereverTheirMemoryComesFrom) {
  constexpr uint64_t kBytes = (uint64_t{3} << 20) + 12345;  // not a multiple of a page
  for (const HostPages pages : {HostPages::kHeap, HostPages::kMapped}) {
    ZeroedBuffer buffer(kBytes, pages);
    ASSERT_NE(buffer.data(), nullptr);
    EXPECT_EQ(buffer.size, kBytes);
    if (pages == HostPages::kMapped) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 4096, 0u);
    }
    for (const uint64_t at : {uint64_t{0}, kBytes / 2, kBytes - 1}) EXPECT_EQ(buffer.data()[at], 0) << at;
    std::memset(buffer.data(), 0x5a, kBytes);  // every byte is ours to write
    EXPECT_EQ(buffer.data()[kBytes - 1], 0x5a);
  }
}

TEST(DeviceMemory, HbmRejectsSizesThatOverflow) {
  HbmMemory hbm(uint64_t{1} << 30);
  for (uint64_t bytes : {UINT64_MAX, UINT64_MAX - 62, (uint64_t{1} << 30) + 1}) {
    try {
      hbm.allocate(bytes);
      FAIL() << "allocate(" << bytes << ") succeeded";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("HBM exhausted"));
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(bytes)));
    }
  }
  EXPECT_EQ(hbm.used_bytes(), 0u);
  EXPECT_EQ(hbm.allocate(64), 0u);  // the table was left as it was
}

TEST(DeviceMemory, LargeHbmBlocksAreReleasedNotPooled) {
  HbmMemory hbm(uint64_t{4} << 30);
  const uint64_t small = HbmMemory::kLargestPooledBlock, large = 2 * HbmMemory::kLargestPooledBlock;
  hbm.free(hbm.allocate(large));
  EXPECT_EQ(hbm.pooled_bytes(), 0u);
  hbm.free(hbm.allocate(small));
  EXPECT_EQ(hbm.pooled_bytes(), HbmMemory::size_class(small));
}

TEST(DeviceMemory, ReusedHbmBlocksForgetTheirWrites) {
  HbmMemory hbm(uint64_t{1} << 30);
  const uint64_t bytes = 1 << 20;
  const uint64_t a = hbm.allocate(bytes);
  std::vector<uint8_t> data(bytes, 7);
  hbm.write(a, data.data(), bytes);
  hbm.free(a);
  EXPECT_EQ(hbm.pooled_bytes(), HbmMemory::size_class(bytes));
  const uint64_t b = hbm.allocate(bytes);  // the same block comes back
  EXPECT_EQ(hbm.pooled_bytes(), 0u);
  try {
    hbm.read(b, data.data(), bytes);
    FAIL() << "read of a reused, unwritten block succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("never written"));
  }
  hbm.write(b, data.data(), 6);
  try {
    hbm.read(b, data.data(), 8);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("byte 0x6 was never written"));
  }
}

TEST(DeviceMemory, SizeClassesWasteAtMostAQuarter) {
  for (uint64_t size = 64; size < (uint64_t{1} << 34); size = size * 3 / 2 + 64) {
    const uint64_t aligned = (size + 63) / 64 * 64;
    const uint64_t block = HbmMemory::size_class(aligned);
    EXPECT_GE(block, aligned);
    EXPECT_LE(block, aligned + aligned / 4 + 64) << aligned;
  }
}

// A bf16 row written for its first 3 elements and read for 4: the error names the exact byte.
TEST(DeviceMemory, PartlyWrittenRowsNameTheFirstUnwrittenByte) {
  testing::Harness h(Spec::builtin());
  Executable& exe = h.executable();
  exe.semaphore_count = 1;
  Instruction fill = iota(sbuf(0, 4, 0, DType::bf16, {3}), 0, 1);
  fill.updates.push_back({0, 1});
  Instruction read = tensor_copy(sbuf(0, 4, 64, DType::bf16, {4}), sbuf(0, 4, 0, DType::bf16, {4}));
  read.waits.push_back({0, 1});
  exe.stream(Engine::gpsimd).push_back(fill);
  exe.stream(Engine::vector).push_back(read);
  try {
    h.core().run(exe, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("SBUF partition 0 byte 6"));
  }
}

// first_unwritten_rows answers what a first_unwritten per row would: rows inside one word, across two,
// and wider, with positive and negative strides, holes of one granule, and blocks never written.
TEST(DeviceMemory, RowsOfAStridedBlockAreCheckedLikeOneRangeEach) {
  WrittenMap map(1 << 21);
  for (uint64_t b = 0; b < (1 << 19); b += 4096) map.mark(b, b + 3000);  // 3000 of every 4096 bytes
  const uint64_t hole = 600000 + 5120 * 50 + 40;  // one granule left out of a written stretch
  map.mark(600000, hole);
  map.mark(hole + 2, 600000 + 5120 * 120);
  for (const uint64_t bytes : {uint64_t{2}, uint64_t{56}, uint64_t{120}, uint64_t{130}, uint64_t{256}, uint64_t{1000}}) {
    for (const int64_t stride : {int64_t{4096}, int64_t{5120}, int64_t{-4096}, int64_t{6}}) {
      for (const uint64_t start : {uint64_t{0}, uint64_t{62}, uint64_t{126}, uint64_t{400000}, uint64_t{600000}}) {
        const uint64_t begin = stride < 0 ? start + 100 * 4096 : start;
        const uint64_t count = 100;
        uint64_t want = count;
        for (uint64_t i = 0; i < count && want == count; ++i) {
          const uint64_t b = begin + static_cast<uint64_t>(static_cast<int64_t>(i) * stride);
          if (map.first_unwritten(b, b + bytes) != b + bytes) want = i;
        }
        EXPECT_EQ(map.first_unwritten_rows(begin, stride, count, bytes), want)
            << bytes << " bytes, stride " << stride << ", from " << begin;
      }
    }
  }
  // Rows whose whole span lies in one remembered range (after the hole), forwards and backwards.
  EXPECT_EQ(map.first_unwritten_rows(600000 + 5120 * 51, 5120, 60, 1000), 60u);
  EXPECT_EQ(map.first_unwritten_rows(600000 + 5120 * 110, -5120, 60, 1000), 60u);
  EXPECT_EQ(map.first_unwritten_rows(600000 + 5120 * 100, -5120, 60, 1000), 50u);  // reaches the hole
  // Fully written rows, then one granule missing in row 7.
  WrittenMap rows(1 << 16);
  rows.mark(0, 1 << 16);
  EXPECT_EQ(rows.first_unwritten_rows(10, 512, 100, 60), 100u);
  rows.forget_all();
  for (uint64_t i = 0; i < 100; ++i) {
    if (i != 7) rows.mark(10 + i * 512, 10 + i * 512 + 60);
  }
  rows.mark(10 + 7 * 512, 10 + 7 * 512 + 40);
  EXPECT_EQ(rows.first_unwritten_rows(10, 512, 100, 60), 7u);
  EXPECT_EQ(rows.first_unwritten_rows(10, 512, 7, 60), 7u);
  EXPECT_EQ(rows.first_unwritten_rows(10, 512, 100, 0), 100u);
}

// On-chip partitions lie an odd number of cache lines apart on the host, at least bytes_per_partition,
// so that the same byte of consecutive partitions falls in different cache sets; written-ness follows
// the same stride, and a hole in a partition other than the first is still named by partition and byte.
TEST(DeviceMemory, OnChipPartitionsAreAnOddNumberOfLinesApart) {
  for (const uint32_t bytes : {229376u, 16384u, 4096u, 100u, 64u, 1u}) {
    const uint64_t stride = OnChipMemory::row_stride_for(bytes);
    EXPECT_GE(stride, bytes) << bytes;
    EXPECT_EQ(stride % OnChipMemory::kLineBytes, 0u) << bytes;
    EXPECT_EQ(stride / OnChipMemory::kLineBytes % 2, 1u) << bytes;
    EXPECT_LT(stride, uint64_t{bytes} + 2 * OnChipMemory::kLineBytes) << bytes;
  }
  OnChipMemory memory(4, 16384);
  EXPECT_EQ(memory.data(1) - memory.data(0), static_cast<std::ptrdiff_t>(memory.row_stride()));
  EXPECT_EQ(memory.row_stride(), 16384u + 64u);

  testing::Harness h(Spec::builtin());
  Executable& exe = h.executable();
  exe.semaphore_count = 1;
  // Partitions 0..3 written in full, partition 4 only up to byte 40.
  Instruction fill = iota(sbuf(0, 4, 0, DType::f32, {16}), 0, 1);
  fill.updates.push_back({0, 1});
  Instruction part = iota(sbuf(4, 1, 0, DType::f32, {10}), 0, 1);
  part.updates.push_back({0, 1});
  Instruction read = tensor_copy(sbuf(0, 5, 128, DType::f32, {16}), sbuf(0, 5, 0, DType::f32, {16}));
  read.waits.push_back({0, 2});
  exe.stream(Engine::gpsimd).push_back(fill);
  exe.stream(Engine::gpsimd).push_back(part);
  exe.stream(Engine::vector).push_back(read);
  try {
    h.core().run(exe, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("SBUF partition 4 byte 40"));
  }
}

}  // namespace
}  // namespace sightline::device
