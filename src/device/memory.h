// Host memory standing for a core's HBM, SBUF and PSUM, with written-ness tracking.
//
// Every 2-byte granule of simulated memory has one written bit (the shadow is 1/16 of the data), so
// that reading a tile no instruction (or host copy) wrote is a sightline::Error instead of a silently
// stale value. Every dtype is 2 or 4 bytes wide, so for aligned operands the tracking is exact; a write
// that covers part of a granule marks the whole granule. The bits live in 1 KiB-of-data blocks that
// carry a generation stamp: forgetting every write (on-chip memory at the start of an execution, a
// reused HBM block) bumps one counter instead of clearing memory.
// Used by Core; the runtime reaches HBM through Core's allocate/free/write/read.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace sightline::device {

// How a buffer gets its host memory. kMapped: from ZeroedBuffer::kMappedBytes on, an anonymous mapping
// of its own, page aligned (so cache-line aligned for the DMAs' copies: calloc's 16-byte header cost the
// functional RMSNorm f32[4096, 4096] 0.49x memcpy against 0.55x), unmapped when freed; kHeap: calloc.
// Simulated HBM uses kMapped, on-chip memory kHeap.
//
// In 4 KiB pages, not huge ones. Huge pages made a tensor that DMAs stream through again and again only
// 2-3% faster (the same RMSNorm in a loop: 0.555-0.568x memcpy against 0.545-0.554x), and on virtual
// machines whose host takes back the guest's freed memory they cost far more to touch first: the guest
// hands out exactly the freed 2 MiB blocks for huge pages, and faulting them back in ran at 0.32 GB/s
// against 2.25 GB/s in 4 KiB pages on this project's 2-core VMs. ESM-2 650M's 2.6 GB of weights took
// 8 s more system time per run in huge pages.
enum class HostPages { kHeap, kMapped };

// Zero-filled host buffer: either way untouched pages cost nothing until written (a 24 MiB SBUF).
struct ZeroedBuffer {
  static constexpr uint64_t kMappedBytes = uint64_t{2} << 20;
  struct Free {
    uint64_t mapped;  // bytes mapped (0: from calloc; a default-made deleter value-initializes it to 0)
    void operator()(void* p) const;
  };
  std::unique_ptr<uint8_t, Free> bytes;
  uint64_t size = 0;

  explicit ZeroedBuffer(uint64_t n = 0, HostPages pages = HostPages::kHeap);
  uint8_t* data() const { return bytes.get(); }
};

// Which bytes of a region were written since the last forget_all().
//
//   WrittenMap map(4096);
//   map.mark(0, 256);
//   map.first_unwritten(0, 512);   // 256
//   map.forget_all();              // O(1)
class WrittenMap {
 public:
  static constexpr uint64_t kGranuleBytes = 2;
  static constexpr uint64_t kBlockWords = 8;  // 512 granules = 1 KiB of data per generation stamp

  explicit WrittenMap(uint64_t bytes = 0, HostPages pages = HostPages::kHeap);

  // Marks [begin, end) written (every granule it touches).
  void mark(uint64_t begin, uint64_t end);
  // The first byte of [begin, end) in a granule nobody wrote, or `end` when all of it was written.
  uint64_t first_unwritten(uint64_t begin, uint64_t end) const;
  // The same for `count` elements of `width` bytes at begin, begin + stride, ... (a strided run):
  // mark_strided marks them, first_unwritten_strided returns the index of the first element not
  // entirely written, or `count`. `stride` may be negative; every element must lie inside the map.
  void mark_strided(uint64_t begin, int64_t stride, uint64_t count, uint64_t width);
  uint64_t first_unwritten_strided(uint64_t begin, int64_t stride, uint64_t count, uint64_t width) const;
  // Whether each of `count` ranges [begin + i * stride, + bytes) is entirely written: the index of the
  // first that is not, or `count`. One call for the rows of a block a transposing load reads; a range
  // within one or two words is tested inline. `stride` may be negative; every range must lie inside.
  uint64_t first_unwritten_rows(uint64_t begin, int64_t stride, uint64_t count, uint64_t bytes) const;
  void forget_all();
  // Host bytes the map itself takes: 1/16 of the data for the bits, 1/256 for the stamps, and
  // kFixedBytes for the ranges it remembers whatever its size.
  uint64_t shadow_bytes() const { return words_count_ * 8 + blocks_count_ * 4 + kFixedBytes; }

 private:
  // Ranges marked since the last forget_all() (widened to whole granules), the most recent kRecent of
  // them: marks only ever add written bits until forget_all(), so a check of a range inside one of
  // these needs no look at the bits. A tile that a DMA loads and then two instructions read, row by
  // row, is checked this way instead of scanning the same 1 KiB of bits per 16 KiB row three times.
  // Only mark() writes them (a check stays a read: const callers may run on several threads). Only
  // ranges of kRememberBytes and more are remembered and looked up: a shorter one is a few words of bits
  // to scan, cheaper than the look-up, and short ranges (a row's statistic) would push the rows out.
  struct Range {
    uint64_t begin = 0, end = 0;
    uint32_t generation = 0;  // 0: never current
  };
  static constexpr uint32_t kRecent = 32;
  static constexpr uint64_t kRememberBytes = 4096;

 public:
  static constexpr uint64_t kFixedBytes = sizeof(Range) * kRecent;

 private:
  void remember(uint64_t begin, uint64_t end);
  bool known_written(uint64_t begin, uint64_t end) const;
  // first_unwritten() by the bits alone.
  uint64_t scan_unwritten(uint64_t begin, uint64_t end) const;

  uint64_t words_count_ = 0;
  uint64_t blocks_count_ = 0;
  ZeroedBuffer word_bytes_;   // the words' storage (mapped for the map of a large tensor)
  uint64_t* words_ = nullptr;  // a word is meaningful only while its block's stamp is current
  std::unique_ptr<uint32_t[]> stamps_;
  uint32_t generation_ = 1;  // stamps start at 0: nothing written
  Range recent_[kRecent];
  uint32_t recent_next_ = 0;  // the slot the next range goes to
};

// Bytes of simulated memory plus their written-ness.
struct TrackedBytes {
  ZeroedBuffer data;
  WrittenMap written;

  explicit TrackedBytes(uint64_t n = 0, HostPages pages = HostPages::kHeap) : data(n, pages), written(n, pages) {}
};

// SBUF or PSUM: partitions x bytes_per_partition, partition-major, each partition's bytes row_stride()
// host bytes after the previous one's start.
//
// The host stride is not bytes_per_partition itself: SBUF and PSUM partitions are a multiple of 4 KiB
// (trn2: 192 KiB and 16 KiB), so the same byte of every partition would fall in one set of each cache
// (L1 repeats every 4 KiB, L2 every 64 or 128 KiB), and work that touches a column of partitions (a
// matmul's operands, a transposing load's 8 destination rows at a time, a tile's rows) would keep
// evicting itself. row_stride() is a whole number of cache lines and an odd one, so consecutive
// partitions start in different sets of every cache whose set count is a power of two. The padding
// after each partition is never read or written (validation keeps every access inside its partition).
class OnChipMemory {
 public:
  static constexpr uint32_t kLineBytes = 64;

  OnChipMemory(uint32_t partitions, uint32_t bytes_per_partition);

  uint8_t* data(uint32_t partition) const { return mem_.data.data() + uint64_t{partition} * row_stride_; }
  // Written-ness of the whole memory; partition p's bytes start at p * row_stride().
  WrittenMap& written() { return mem_.written; }
  uint32_t partitions() const { return partitions_; }
  uint32_t bytes_per_partition() const { return bytes_per_partition_; }
  uint64_t row_stride() const { return row_stride_; }
  // The host stride for `bytes_per_partition`: rounded up to whole lines, then to an odd number of them.
  static uint64_t row_stride_for(uint32_t bytes_per_partition);
  // Forgets every write: at the start of an execution nothing on chip is valid. O(1).
  void reset() { mem_.written.forget_all(); }

 private:
  uint32_t partitions_;
  uint32_t bytes_per_partition_;
  uint64_t row_stride_;
  TrackedBytes mem_;
};

// A core's HBM: a capacity-limited address space of allocations, each backed by host memory.
// The allocation table is thread-safe: a runtime allocates and frees from host threads while the
// core's worker runs programs that look addresses up. The bytes themselves are not locked; ordering
// between writers and readers of one allocation is the runtime's queue's job.
//
// Host backing blocks come in size classes (four per power of two) and are pooled when freed, up to
// kPoolBytes, so that a runtime that allocates and frees tensors of the same sizes again and again
// reuses memory that is already faulted in; a reused block forgets its writes in O(1). Blocks larger
// than kLargestPooledBlock are not kept (two freed 512 MiB tensors held for reuse would add 1 GiB to a
// large run's host memory, to save page faults that cost little beside the work on such a tensor).
// Blocks the pool does not keep are released after the allocation lock is dropped.
class HbmMemory {
 public:
  // Allocations are aligned so that distinct tensors never share a DMA burst.
  static constexpr uint64_t kAlignment = 64;
  static constexpr uint64_t kPoolBytes = uint64_t{1} << 30;
  static constexpr uint64_t kLargestPooledBlock = uint64_t{128} << 20;

  explicit HbmMemory(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // First fit. Throws sightline::Error with the bytes asked, free, and the largest free block.
  uint64_t allocate(uint64_t bytes);
  void free(uint64_t address);
  uint64_t capacity() const { return capacity_; }
  uint64_t used_bytes() const {
    std::lock_guard lock(mutex_);
    return used_;
  }
  uint64_t free_bytes() const { return capacity_ - used_bytes(); }
  // Host bytes held by freed blocks kept for reuse.
  uint64_t pooled_bytes() const {
    std::lock_guard lock(mutex_);
    return pooled_;
  }

  struct Span {
    uint8_t* data = nullptr;
    WrittenMap* written = nullptr;
    uint64_t offset = 0;  // of `data` inside the block `written` tracks
  };
  // The host bytes of [address, address + bytes), which must lie inside one allocation.
  Span span(uint64_t address, uint64_t bytes) const;
  // Host copies (the runtime's tensor writes and reads); reads require written bytes.
  void write(uint64_t address, const void* src, uint64_t bytes);
  void read(uint64_t address, void* dst, uint64_t bytes) const;

  // The host block size that backs an allocation of `size` aligned bytes.
  static uint64_t size_class(uint64_t size);

 private:
  struct Block {
    uint64_t size;
    std::unique_ptr<TrackedBytes> bytes;
  };
  uint64_t capacity_;
  mutable std::mutex mutex_;  // guards used_, blocks_, pool_ and pooled_
  uint64_t used_ = 0;
  std::map<uint64_t, Block> blocks_;                              // by address
  std::multimap<uint64_t, std::unique_ptr<TrackedBytes>> pool_;  // freed blocks by size class
  uint64_t pooled_ = 0;
};

}  // namespace sightline::device
