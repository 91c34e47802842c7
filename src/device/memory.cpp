#include "device/memory.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <sys/mman.h>

#include "sightline/error.h"

namespace sightline::device {

namespace {

// Zeroed bytes in a mapping of their own, page aligned. Returns null when the mapping fails.
void* map_zeroed(uint64_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Faults in the pages of a large write ahead of it, in one system call: a fresh mapping's pages are
// otherwise faulted in one at a time as the copy reaches them (a 26 MB weight: about 6,400 faults).
// MADV_POPULATE_WRITE (Linux 5.14) did 26 MB writes into fresh mappings at 2.95 GB/s against 2.1 GB/s
// faulting page by page on the project's VMs; where the kernel lacks it the copy faults as before.
void populate_for_write(uint8_t* data, uint64_t bytes) {
#ifdef MADV_POPULATE_WRITE
  constexpr uint64_t kPage = 4096, kWorthIt = uint64_t{1} << 20;
  if (bytes < kWorthIt) return;
  const uint64_t begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) / kPage * kPage;
  const uint64_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / kPage * kPage;
  if (begin < end) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace

void ZeroedBuffer::Free::operator()(void* p) const {
  if (mapped != 0) {
    munmap(p, mapped);
  } else {
    std::free(p);
  }
}

ZeroedBuffer::ZeroedBuffer(uint64_t n, HostPages pages) : size(n) {
  if (n == 0) return;
  if (pages == HostPages::kMapped && n >= kMappedBytes) {
    void* p = map_zeroed(n);
    SIGHTLINE_CHECK(p != nullptr, "host out of memory: cannot map {} bytes for simulated device memory", n);
    bytes = std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(p), Free{n});
    return;
  }
  bytes.reset(static_cast<uint8_t*>(std::calloc(n, 1)));
  SIGHTLINE_CHECK(bytes != nullptr,
                  "host out of memory: cannot allocate {} bytes for simulated device memory", n);
}

WrittenMap::WrittenMap(uint64_t bytes, HostPages pages) {
  const uint64_t granules = (bytes + kGranuleBytes - 1) / kGranuleBytes;
  words_count_ = (granules + 63) / 64;
  blocks_count_ = (words_count_ + kBlockWords - 1) / kBlockWords;
  if (blocks_count_ == 0) return;
  // Words need no initial value: a block's words are cleared when its stamp is first brought current.
  word_bytes_ = ZeroedBuffer(blocks_count_ * kBlockWords * sizeof(uint64_t), pages);
  words_ = reinterpret_cast<uint64_t*>(word_bytes_.data());
  stamps_ = std::make_unique<uint32_t[]>(blocks_count_);
}

void WrittenMap::forget_all() {
  if (++generation_ != 0) return;
  // The counter wrapped: stale stamps could look current, so reset them all once every 2^32 calls.
  std::fill_n(stamps_.get(), blocks_count_, 0u);
  for (Range& r : recent_) r = Range{};
  generation_ = 1;
}

void WrittenMap::remember(uint64_t begin, uint64_t end) {
  begin -= begin % kGranuleBytes;
  end += (kGranuleBytes - end % kGranuleBytes) % kGranuleBytes;
  // A range that touches or overlaps the last one extends it: the rows of a tensor that DMAs write one
  // after another stay one range.
  Range& last = recent_[(recent_next_ + kRecent - 1) % kRecent];
  if (last.generation == generation_ && begin <= last.end && last.begin <= end) {
    last.begin = std::min(last.begin, begin);
    last.end = std::max(last.end, end);
    return;
  }
  recent_[recent_next_] = Range{begin, end, generation_};
  recent_next_ = (recent_next_ + 1) % kRecent;
}

bool WrittenMap::known_written(uint64_t begin, uint64_t end) const {
  // Newest first: a check most often reads what was just written.
  for (uint32_t i = 1; i <= kRecent; ++i) {
    const Range& r = recent_[(recent_next_ + kRecent - i) % kRecent];
    if (r.generation == generation_ && r.begin <= begin && end <= r.end) return true;
  }
  return false;
}

void WrittenMap::mark(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  if (end - begin >= kRememberBytes) remember(begin, end);
  const uint64_t g0 = begin / kGranuleBytes, g1 = (end + kGranuleBytes - 1) / kGranuleBytes;  // [g0, g1)
  const uint64_t w0 = g0 / 64, w1 = (g1 - 1) / 64;
  const uint64_t first_mask = ~uint64_t{0} << (g0 % 64);
  const uint64_t last_mask = ~uint64_t{0} >> (63 - (g1 - 1) % 64);
  const uint64_t b0 = w0 / kBlockWords, b1 = w1 / kBlockWords;
  // One word of a current block (a row's statistic, say): set its bits, without the block loop below.
  if (w0 == w1 && stamps_[b0] == generation_) {
    words_[w0] |= first_mask & last_mask;
    return;
  }
  // Blocks [full0, full1) lie wholly inside the range: every word of them becomes all ones, stored in
  // one run (and their stamps in another) without reading what was there.
  const bool first_full = w0 % kBlockWords == 0 && first_mask == ~uint64_t{0} && (w0 != w1 || last_mask == ~uint64_t{0});
  const bool last_full = w1 % kBlockWords == kBlockWords - 1 && last_mask == ~uint64_t{0} &&
                         (w0 != w1 || first_mask == ~uint64_t{0});
  const uint64_t full0 = first_full ? b0 : b0 + 1;
  const uint64_t full1 = last_full ? b1 + 1 : b1;
  if (full0 < full1) {
    std::fill(words_ + full0 * kBlockWords, words_ + full1 * kBlockWords, ~uint64_t{0});
    std::fill(stamps_.get() + full0, stamps_.get() + full1, generation_);
  }
  // The block at either end that the range covers only in part: word by word. A stale block (nothing
  // written since forget_all) is overwritten without being read.
  const auto partial = [&](uint64_t block) {
    const uint64_t first = block * kBlockWords;
    const bool stale = stamps_[block] != generation_;
    stamps_[block] = generation_;
    for (uint64_t x = first; x < first + kBlockWords; ++x) {
      uint64_t m = 0;
      if (x >= w0 && x <= w1) m = (x == w0 ? first_mask : ~uint64_t{0}) & (x == w1 ? last_mask : ~uint64_t{0});
      words_[x] = stale ? m : words_[x] | m;
    }
  };
  if (b0 < full0) partial(b0);
  if (b1 >= full1 && !(b1 == b0 && b0 < full0)) partial(b1);  // (b1 == b0: one partial block, done above)
}

uint64_t WrittenMap::first_unwritten(uint64_t begin, uint64_t end) const {
  if (begin >= end || (end - begin >= kRememberBytes && known_written(begin, end))) return end;
  return scan_unwritten(begin, end);
}

uint64_t WrittenMap::scan_unwritten(uint64_t begin, uint64_t end) const {
  const uint64_t g0 = begin / kGranuleBytes, g1 = (end + kGranuleBytes - 1) / kGranuleBytes;
  const uint64_t w0 = g0 / 64, w1 = (g1 - 1) / 64;
  const uint64_t first_mask = ~uint64_t{0} << (g0 % 64);
  const uint64_t last_mask = ~uint64_t{0} >> (63 - (g1 - 1) % 64);
  const auto at = [&](uint64_t w, uint64_t missing) {
    const uint64_t granule = w * 64 + static_cast<uint64_t>(std::countr_zero(missing));
    return std::max(begin, granule * kGranuleBytes);
  };
  const auto current = [&](uint64_t w) { return stamps_[w / kBlockWords] == generation_; };
  if (w0 == w1) {
    if (!current(w0)) return begin;
    const uint64_t missing = ~words_[w0] & first_mask & last_mask;
    return missing != 0 ? at(w0, missing) : end;
  }
  if (!current(w0)) return begin;
  if (const uint64_t missing = ~words_[w0] & first_mask; missing != 0) return at(w0, missing);
  // The words between, a block (one stamp, one cache line of words) at a time: the words are ANDed
  // together and searched one by one only when some bit is clear.
  for (uint64_t w = w0 + 1; w < w1;) {
    const uint64_t block = w / kBlockWords;
    const uint64_t stop = std::min(w1, (block + 1) * kBlockWords);
    if (stamps_[block] != generation_) return at(w, ~uint64_t{0});
    uint64_t all = ~uint64_t{0};
    if (stop - w == kBlockWords) {
      for (uint64_t l = 0; l < kBlockWords; ++l) all &= words_[w + l];
    } else {
      for (uint64_t x = w; x < stop; ++x) all &= words_[x];
    }
    if (all != ~uint64_t{0}) {
      for (uint64_t x = w;; ++x) {
        if (words_[x] != ~uint64_t{0}) return at(x, ~words_[x]);
      }
    }
    w = stop;
  }
  if (!current(w1)) return at(w1, ~uint64_t{0});
  const uint64_t missing = ~words_[w1] & last_mask;
  return missing != 0 ? at(w1, missing) : end;
}

void WrittenMap::mark_strided(uint64_t begin, int64_t stride, uint64_t count, uint64_t width) {
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t b = begin + static_cast<uint64_t>(static_cast<int64_t>(i) * stride);
    for (uint64_t g = b / kGranuleBytes; g * kGranuleBytes < b + width; ++g) {
      const uint64_t w = g / 64, block = w / kBlockWords;
      if (stamps_[block] != generation_) {
        std::fill_n(words_ + block * kBlockWords, kBlockWords, uint64_t{0});
        stamps_[block] = generation_;
      }
      words_[w] |= uint64_t{1} << (g % 64);
    }
  }
}

uint64_t WrittenMap::first_unwritten_strided(uint64_t begin, int64_t stride, uint64_t count,
                                             uint64_t width) const {
  if (count == 0) return 0;
  const uint64_t last = begin + static_cast<uint64_t>(static_cast<int64_t>(count - 1) * stride);
  const uint64_t lo = std::min(begin, last), hi = std::max(begin, last) + width;
  if (hi - lo >= kRememberBytes && known_written(lo, hi)) return count;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t b = begin + static_cast<uint64_t>(static_cast<int64_t>(i) * stride);
    for (uint64_t g = b / kGranuleBytes; g * kGranuleBytes < b + width; ++g) {
      const uint64_t w = g / 64;
      if (stamps_[w / kBlockWords] != generation_ || (words_[w] >> (g % 64) & 1) == 0) return i;
    }
  }
  return count;
}

uint64_t OnChipMemory::row_stride_for(uint32_t bytes_per_partition) {
  const uint64_t lines = (uint64_t{bytes_per_partition} + kLineBytes - 1) / kLineBytes;
  return (lines | 1) * kLineBytes;
}

uint64_t WrittenMap::first_unwritten_rows(uint64_t begin, int64_t stride, uint64_t count, uint64_t bytes) const {
  if (bytes == 0 || count == 0) return count;
  // All the rows at once when the span from the first to the last lies in one remembered range: the
  // rows of a weight that a transposing load reads, 5 KiB apart, each in its own line of bits.
  const uint64_t last = begin + static_cast<uint64_t>(static_cast<int64_t>(count - 1) * stride);
  const uint64_t lo = std::min(begin, last), hi = std::max(begin, last) + bytes;
  if (hi - lo >= kRememberBytes && known_written(lo, hi)) return count;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t b = begin + static_cast<uint64_t>(static_cast<int64_t>(i) * stride), e = b + bytes;
    const uint64_t g0 = b / kGranuleBytes, g1 = (e + kGranuleBytes - 1) / kGranuleBytes;  // [g0, g1)
    const uint64_t w0 = g0 / 64, w1 = (g1 - 1) / 64;
    if (w1 > w0 + 1) {
      if (first_unwritten(b, e) != e) return i;
      continue;
    }
    const uint64_t first_mask = ~uint64_t{0} << (g0 % 64);
    const uint64_t last_mask = ~uint64_t{0} >> (63 - (g1 - 1) % 64);
    if (stamps_[w0 / kBlockWords] != generation_ || stamps_[w1 / kBlockWords] != generation_) return i;
    if (w0 == w1) {
      if ((~words_[w0] & first_mask & last_mask) != 0) return i;
    } else if ((~words_[w0] & first_mask) != 0 || (~words_[w1] & last_mask) != 0) {
      return i;
    }
  }
  return count;
}

OnChipMemory::OnChipMemory(uint32_t partitions, uint32_t bytes_per_partition)
    : partitions_(partitions),
      bytes_per_partition_(bytes_per_partition),
      row_stride_(row_stride_for(bytes_per_partition)),
      mem_(uint64_t{partitions} * row_stride_) {}

uint64_t HbmMemory::size_class(uint64_t size) {
  // Four classes per power of two: at most 25% of a block goes unused.
  if (size <= 4 * kAlignment) return (size + kAlignment - 1) / kAlignment * kAlignment;
  const uint64_t step = std::bit_floor(size) / 4;
  return (size + step - 1) / step * step;
}

uint64_t HbmMemory::allocate(uint64_t bytes) {
  SIGHTLINE_CHECK(bytes > 0, "HBM allocation of 0 bytes; ask for at least 1 byte");
  if (bytes > capacity_) {  // also keeps the alignment below from overflowing
    fail("HBM exhausted: asked for {} bytes, more than the whole HBM of {} bytes ({} bytes free); "
         "use a spec with more HBM or split the tensor",
         bytes, capacity_, free_bytes());
  }
  const uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  const uint64_t block_bytes = size_class(size);
  // Declared before the lock so that a block made here and not kept is released after unlocking.
  std::unique_ptr<TrackedBytes> backing;
  {
    std::lock_guard lock(mutex_);
    const auto pooled = pool_.find(block_bytes);
    if (pooled != pool_.end()) {
      backing = std::move(pooled->second);
      pool_.erase(pooled);
      pooled_ -= block_bytes;
    }
  }
  if (backing) {
    backing->written.forget_all();
  } else {
    backing = std::make_unique<TrackedBytes>(block_bytes, HostPages::kMapped);
  }
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
    if (block_bytes <= kLargestPooledBlock && pooled_ + block_bytes <= kPoolBytes) {
      pooled_ += block_bytes;
      pool_.emplace(block_bytes, std::move(backing));
    }
    fail(
        "HBM exhausted: asked for {} bytes ({} aligned), {} bytes free of {} (largest free block {} bytes); "
        "free device tensors or use a spec with more HBM",
        bytes, size, capacity_ - used_, capacity_, largest_gap);
  }
  blocks_.emplace(cursor, Block{size, std::move(backing)});
  used_ += size;
  return cursor;
}

void HbmMemory::free(uint64_t address) {
  std::unique_ptr<TrackedBytes> released;  // destroyed (unmapped) after the lock is dropped
  std::lock_guard lock(mutex_);
  const auto it = blocks_.find(address);
  SIGHTLINE_CHECK(it != blocks_.end(), "HBM free of address {:#x}, which is not the start of an allocation",
                  address);
  used_ -= it->second.size;
  const uint64_t block_bytes = it->second.bytes->data.size;
  if (block_bytes <= kLargestPooledBlock && pooled_ + block_bytes <= kPoolBytes) {
    pooled_ += block_bytes;
    pool_.emplace(block_bytes, std::move(it->second.bytes));
  } else {
    released = std::move(it->second.bytes);
  }
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
  return {it->second.bytes->data.data() + offset, &it->second.bytes->written, offset};
}

void HbmMemory::write(uint64_t address, const void* src, uint64_t bytes) {
  const Span s = span(address, bytes);
  populate_for_write(s.data, bytes);
  std::memcpy(s.data, src, bytes);
  s.written->mark(s.offset, s.offset + bytes);
}

void HbmMemory::read(uint64_t address, void* dst, uint64_t bytes) const {
  const Span s = span(address, bytes);
  const uint64_t hole = s.written->first_unwritten(s.offset, s.offset + bytes);
  SIGHTLINE_CHECK(hole == s.offset + bytes, "HBM read of [{:#x}, {:#x}): byte {:#x} was never written",
                  address, address + bytes, address + (hole - s.offset));
  std::memcpy(dst, s.data, bytes);
}

}  // namespace sightline::device
