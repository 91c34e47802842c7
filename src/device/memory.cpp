#include "device/memory.h"

#include <cstring>

#include "sightline/error.h"

namespace sightline::device {

ZeroedBuffer::ZeroedBuffer(uint64_t n) : size(n) {
  if (n == 0) return;
  bytes.reset(static_cast<uint8_t*>(std::calloc(n, 1)));
  SIGHTLINE_CHECK(bytes != nullptr,
                  "host out of memory: cannot allocate {} bytes for simulated device memory", n);
}

OnChipMemory::OnChipMemory(uint32_t partitions, uint32_t bytes_per_partition)
    : partitions_(partitions),
      bytes_per_partition_(bytes_per_partition),
      mem_(uint64_t{partitions} * bytes_per_partition),
      dirty_end_(partitions, 0) {}

void OnChipMemory::reset() {
  for (uint32_t p = 0; p < partitions_; ++p) {
    if (dirty_end_[p] == 0) continue;
    std::memset(written(p), 0, dirty_end_[p]);
    dirty_end_[p] = 0;
  }
}

uint64_t HbmMemory::allocate(uint64_t bytes) {
  SIGHTLINE_CHECK(bytes > 0, "HBM allocation of 0 bytes; ask for at least 1 byte");
  const uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard lock(mutex_);
  uint64_t cursor = 0;
  uint64_t largest_gap = 0;
  for (const auto& [address, block] : blocks_) {
    const uint64_t gap = address - cursor;
    if (gap >= size) break;
    largest_gap = std::max(largest_gap, gap);
    cursor = address + block.size;
  }
  const auto next = blocks_.lower_bound(cursor);
  const uint64_t limit = next == blocks_.end() ? capacity_ : next->first;
  if (limit - cursor < size) {
    largest_gap = std::max(largest_gap, limit - cursor);
    fail(
        "HBM exhausted: asked for {} bytes ({} aligned), {} bytes free of {} (largest free block {} bytes); "
        "free device tensors or use a spec with more HBM",
        bytes, size, capacity_ - used_, capacity_, largest_gap);
  }
  blocks_.emplace(cursor, Block{size, std::make_unique<TrackedBytes>(size)});
  used_ += size;
  return cursor;
}

void HbmMemory::free(uint64_t address) {
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(address);
  SIGHTLINE_CHECK(it != blocks_.end(), "HBM free of address {:#x}, which is not the start of an allocation",
                  address);
  used_ -= it->second.size;
  blocks_.erase(it);
}

HbmMemory::Span HbmMemory::span(uint64_t address, uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(address);
  SIGHTLINE_CHECK(it != blocks_.begin(), "HBM address {:#x} is not inside any allocation", address);
  --it;
  const uint64_t offset = address - it->first;
  SIGHTLINE_CHECK(offset < it->second.size && bytes <= it->second.size - offset,
                  "HBM range [{:#x}, {:#x}) leaves the allocation [{:#x}, {:#x})", address, address + bytes,
                  it->first, it->first + it->second.size);
  return {it->second.bytes->data.data() + offset, it->second.bytes->written.data() + offset};
}

void HbmMemory::write(uint64_t address, const void* src, uint64_t bytes) {
  const Span s = span(address, bytes);
  std::memcpy(s.data, src, bytes);
  std::memset(s.written, 1, bytes);
}

void HbmMemory::read(uint64_t address, void* dst, uint64_t bytes) const {
  const Span s = span(address, bytes);
  const void* hole = std::memchr(s.written, 0, bytes);
  SIGHTLINE_CHECK(hole == nullptr, "HBM read of [{:#x}, {:#x}): byte {:#x} was never written", address,
                  address + bytes,
                  address + static_cast<uint64_t>(static_cast<const uint8_t*>(hole) - s.written));
  std::memcpy(dst, s.data, bytes);
}

}  // namespace sightline::device
