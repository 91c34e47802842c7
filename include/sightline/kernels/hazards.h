// Dependency tracking for the kernel builder: which instruction of which stream last read and wrote
// every byte range, and the semaphore waits a new instruction needs.
//
// Streams are the compute engines (0..3, by device::Engine) and the DMA queues (4 + queue). Stream s
// owns semaphore s, which every instruction of s increments on completion, so "the i-th instruction
// of s (1-based) is done" reads "semaphore s >= i". A stream runs in order, so it never waits on
// itself. A wait also makes known everything the awaited instruction knew when it issued, so waits
// implied transitively are left out.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sightline/device/isa.h"

namespace sightline::kernels {

class HazardTracker {
 public:
  explicit HazardTracker(uint32_t stream_count);

  static uint32_t engine_stream(device::Engine engine) { return static_cast<uint32_t>(engine); }
  static uint32_t queue_stream(uint32_t queue) { return device::kComputeEngineCount + queue; }
  uint32_t stream_count() const { return stream_count_; }

  // Adds to `in` the waits its operands need and its own semaphore update, then records its accesses.
  void track(device::Instruction& in, uint32_t stream);

 private:
  struct Region {
    device::Memory memory = device::Memory::none;
    uint32_t tensor = 0;
    uint32_t partition_begin = 0, partition_end = 0;
    int64_t byte_begin = 0, byte_end = 0;
    // HBM rows: the range is rows of `row_bytes` (or less) every `row_stride` bytes from byte_begin, as a
    // pattern's partitions over a tensor's rows. 0: one dense range. Two patterns over the same rows
    // (a matmul's result stored in column pieces) interleave without touching.
    int64_t row_stride = 0, row_bytes = 0;

    bool overlaps(const Region& o) const {
      if (!(partition_begin < o.partition_end && o.partition_begin < partition_end && byte_begin < o.byte_end &&
            o.byte_begin < byte_end)) {
        return false;
      }
      if (row_stride == 0 || row_stride != o.row_stride) return true;
      // Same row pitch: the rows touch iff one's row start, taken within the other's row, falls inside it.
      const int64_t shift = ((o.byte_begin - byte_begin) % row_stride + row_stride) % row_stride;
      return shift < row_bytes || row_stride - shift < o.row_bytes;
    }
    bool contains(const Region& o) const {
      if (!(partition_begin <= o.partition_begin && o.partition_end <= partition_end && byte_begin <= o.byte_begin &&
            o.byte_end <= byte_end)) {
        return false;
      }
      if (row_stride == 0) return true;
      // Rows with gaps between them contain only rows of the same pitch that sit inside them.
      if (o.row_stride != row_stride) return false;
      const int64_t shift = ((o.byte_begin - byte_begin) % row_stride + row_stride) % row_stride;
      return shift + o.row_bytes <= row_bytes;
    }
    bool operator==(const Region&) const = default;
  };
  struct Access {
    Region region;
    uint32_t stream = 0;
    uint32_t count = 0;  // the semaphore value that says the access is done
    bool write = false;
  };

  // One memory (or HBM tensor)'s accesses, reads and writes apart, each by the length class of its byte
  // range (class k: lengths below 2^k) and then by its first byte. An access overlapping [b, e) of class k
  // starts in (b - 2^k, e), so a lookup visits only the accesses near the range it asks about. Each class
  // is a vector sorted by first byte (equal starts in the order recorded): lookups walk contiguous
  // memory. As red-black trees, their allocations and pointer walks were about half of compile() for
  // ESM-2 650M; as vectors, moving the tail on insert and erase is about an eighth of it.
  static constexpr int kLengthClasses = 64;
  using ByStart = std::vector<Access>;
  struct Side {
    std::array<ByStart, kLengthClasses> by_class;
    uint64_t occupied = 0;  // bit k: by_class[k] is not empty
  };
  struct Bucket {
    Side reads, writes;
  };

  static Region region_of(const device::AccessPattern& ap);
  static uint64_t bucket_key(const Region& r) {
    return (uint64_t{static_cast<uint8_t>(r.memory)} << 32) | r.tensor;
  }
  static int length_class(const Region& r);
  void need(const Region& r, bool write, std::vector<uint32_t>& needed) const;
  void record(const Region& r, uint32_t stream, uint32_t count, bool write);
  const uint32_t* history(uint32_t stream, uint32_t count) const {  // knowledge of instruction `count` of `stream`
    return history_[stream].data() + size_t{count - 1} * stream_count_;
  }

  uint32_t stream_count_;
  std::vector<uint32_t> issued_;                 // instructions emitted per stream
  std::vector<std::vector<uint32_t>> known_;     // known_[s][t]: count of t that s knows done
  std::vector<std::vector<uint32_t>> history_;   // per stream, stream_count_ counts per emitted instruction
  std::unordered_map<uint64_t, Bucket> accesses_;  // by memory (and HBM tensor)
  std::vector<uint32_t> needed_;                 // scratch of track()
};

}  // namespace sightline::kernels
