// Host memory standing for a core's HBM, SBUF and PSUM, with written-ness tracking.
//
// Every byte has a shadow byte that says whether it was ever written, so that reading a tile no
// instruction (or host copy) wrote is a sightline::Error instead of a silently stale value.
// Used by Core; the runtime reaches HBM through Core's allocate/free/write/read.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace sightline::device {

// Zero-filled host buffer from calloc: large buffers come from the OS as untouched zero pages, so a
// 28 MiB SBUF shadow costs nothing until written.
struct ZeroedBuffer {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> bytes;
  uint64_t size = 0;

  explicit ZeroedBuffer(uint64_t n = 0);
  uint8_t* data() const { return bytes.get(); }
};

// A bytes buffer plus its written-ness shadow.
struct TrackedBytes {
  ZeroedBuffer data;
  ZeroedBuffer written;  // 1 where written

  explicit TrackedBytes(uint64_t n = 0) : data(n), written(n) {}
};

// SBUF or PSUM: partitions x bytes_per_partition, partition-major.
class OnChipMemory {
 public:
  OnChipMemory(uint32_t partitions, uint32_t bytes_per_partition);

  uint8_t* data(uint32_t partition) const {
    return mem_.data.data() + uint64_t{partition} * bytes_per_partition_;
  }
  uint8_t* written(uint32_t partition) const {
    return mem_.written.data() + uint64_t{partition} * bytes_per_partition_;
  }
  uint32_t partitions() const { return partitions_; }
  uint32_t bytes_per_partition() const { return bytes_per_partition_; }
  // Records that [0, end) of `partition` may hold written bytes, so that reset() clears only that.
  void note_written_end(uint32_t partition, uint64_t end) {
    if (end > dirty_end_[partition]) dirty_end_[partition] = static_cast<uint32_t>(end);
  }
  // Forgets every write: at the start of an execution nothing on chip is valid.
  void reset();

 private:
  uint32_t partitions_;
  uint32_t bytes_per_partition_;
  TrackedBytes mem_;
  std::vector<uint32_t> dirty_end_;
};

// A core's HBM: a capacity-limited address space of allocations, each backed by host memory.
// The allocation table is thread-safe: a runtime allocates and frees from host threads while the
// core's worker runs programs that look addresses up. The bytes themselves are not locked; ordering
// between writers and readers of one allocation is the runtime's queue's job.
class HbmMemory {
 public:
  // Allocations are aligned so that distinct tensors never share a DMA burst.
  static constexpr uint64_t kAlignment = 64;

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

  struct Span {
    uint8_t* data;
    uint8_t* written;
  };
  // The host bytes of [address, address + bytes), which must lie inside one allocation.
  Span span(uint64_t address, uint64_t bytes) const;
  // Host copies (the runtime's tensor writes and reads); reads require written bytes.
  void write(uint64_t address, const void* src, uint64_t bytes);
  void read(uint64_t address, void* dst, uint64_t bytes) const;

 private:
  struct Block {
    uint64_t size;
    std::unique_ptr<TrackedBytes> bytes;
  };
  uint64_t capacity_;
  mutable std::mutex mutex_;  // guards used_ and blocks_
  uint64_t used_ = 0;
  std::map<uint64_t, Block> blocks_;  // by address
};

}  // namespace sightline::device
