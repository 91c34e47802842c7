// The cpu backend: host memory and the reference kernels. It registers like any other backend.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/guard.h"
#include "backend/cpu/kernels.h"

namespace sightline {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also enough for any vector width we target
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;

std::atomic<bool> g_guarded{false};
std::atomic<uint64_t> g_violations{0};

// Large blocks are kept for reuse after release: an eager program allocates the same big shapes
// over and over, and a fresh mmap'd block costs a page fault per 4 KiB on first touch, more than the
// op itself for a simple elementwise kernel. Blocks are rounded to 2 MiB and the cache is bounded.
class BlockCache {
 public:
  static constexpr size_t kMinCachedBytes = size_t{1} << 20;
  static constexpr size_t kGranule = size_t{2} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  static size_t round(size_t nbytes) { return (nbytes + kGranule - 1) / kGranule * kGranule; }

  void* take(size_t rounded) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i].size == rounded) {
        void* p = blocks_[i].data;
        cached_ -= rounded;
        blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
        return p;
      }
    }
    return nullptr;
  }

  void give(void* data, size_t rounded) {
    std::vector<void*> evicted;
    {
      std::lock_guard lock(mutex_);
      blocks_.push_back({data, rounded});
      cached_ += rounded;
      while (cached_ > kMaxCachedBytes) {  // oldest first
        evicted.push_back(blocks_.front().data);
        cached_ -= blocks_.front().size;
        blocks_.erase(blocks_.begin());
      }
    }
    for (void* p : evicted) std::free(p);
  }

  ~BlockCache() {
    for (const Block& b : blocks_) std::free(b.data);
  }

 private:
  struct Block {
    void* data;
    size_t size;
  };
  std::mutex mutex_;
  std::vector<Block> blocks_;
  size_t cached_ = 0;
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: storages may outlive static destruction
  return *cache;
}

// Small blocks (tensors up to 4 KiB, and the shared_ptr control blocks of every Storage) come from
// a per-thread cache of freed blocks by size class, so that a tiny op's output costs no malloc:
// malloc, aligned_alloc and free were over a third of a dispatched 1-element op. A block freed on
// another thread joins that thread's cache (blocks are plain aligned_alloc memory, freeable
// anywhere); each class keeps at most kMaxCached blocks per thread, and a thread's cache is freed
// when the thread exits.
class SmallBlocks {
 public:
  static constexpr size_t kClasses = 7;  // 64, 128, ..., 4096 bytes
  static constexpr size_t kMaxBytes = kAlignment << (kClasses - 1);
  static constexpr size_t kMaxCached = 64;

  static size_t class_of(size_t nbytes) {
    size_t c = 0;
    while ((kAlignment << c) < nbytes) ++c;
    return c;
  }
  static size_t bytes_of(size_t c) { return kAlignment << c; }

  void* take(size_t c) {
    Free*& head = heads_[c];
    if (head == nullptr) {
      void* fresh = std::aligned_alloc(kAlignment, bytes_of(c));
      if (fresh == nullptr) throw std::bad_alloc();
      return fresh;
    }
    Free* block = head;
    head = block->next;
    --counts_[c];
    return block;
  }

  void give(void* p, size_t c) {
    if (counts_[c] >= kMaxCached) {
      std::free(p);
      return;
    }
    auto* block = static_cast<Free*>(p);
    block->next = heads_[c];
    heads_[c] = block;
    ++counts_[c];
  }

  ~SmallBlocks();

 private:
  struct Free {
    Free* next;
  };
  Free* heads_[kClasses] = {};
  size_t counts_[kClasses] = {};
};

// Under AddressSanitizer every block is malloc'd and freed, so that a use after free is still caught.
// gcc defines __SANITIZE_ADDRESS__; clang (the fuzz build) only answers __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIGHTLINE_CPU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(SIGHTLINE_CPU_ASAN)
constexpr bool kCacheSmallBlocks = false;
#else
constexpr bool kCacheSmallBlocks = true;
#endif

// Plain data, so it stays readable after the cache's destructor ran at thread exit.
thread_local bool t_small_blocks_gone = false;
thread_local SmallBlocks t_small_blocks;

SmallBlocks::~SmallBlocks() {
  t_small_blocks_gone = true;
  for (size_t c = 0; c < kClasses; ++c) {
    while (heads_[c] != nullptr) {
      Free* next = heads_[c]->next;
      std::free(heads_[c]);
      heads_[c] = next;
    }
  }
}

void* take_small(size_t c) {
  if (t_small_blocks_gone) {
    void* p = std::aligned_alloc(kAlignment, SmallBlocks::bytes_of(c));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  return t_small_blocks.take(c);
}

void give_small(void* p, size_t c) {
  if (t_small_blocks_gone) {
    std::free(p);
  } else {
    t_small_blocks.give(p, c);
  }
}

// The allocator of Storage's shared_ptr control block.
template <typename T>
struct SmallBlockAllocator {
  using value_type = T;
  SmallBlockAllocator() = default;
  template <typename U>
  SmallBlockAllocator(const SmallBlockAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > SmallBlocks::kMaxBytes || alignof(T) > kAlignment) return std::allocator<T>().allocate(n);
    return static_cast<T*>(take_small(SmallBlocks::class_of(bytes)));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > SmallBlocks::kMaxBytes || alignof(T) > kAlignment) {
      std::allocator<T>().deallocate(p, n);
      return;
    }
    give_small(p, SmallBlocks::class_of(bytes));
  }
  template <typename U>
  bool operator==(const SmallBlockAllocator<U>&) const {
    return true;
  }
};

void release_small(Storage& s) { give_small(s.data(), reinterpret_cast<size_t>(s.backend_context())); }

void release_cached(Storage& s) { block_cache().give(s.data(), reinterpret_cast<size_t>(s.backend_context())); }

void release_guarded(Storage& s) {
  unsigned char* base = static_cast<unsigned char*>(s.data()) - kGuardBytes;
  const size_t rounded = reinterpret_cast<size_t>(s.backend_context());
  bool ok = true;
  for (size_t i = 0; i < kGuardBytes; ++i) ok = ok && base[i] == kGuardByte;
  for (size_t i = kGuardBytes + s.nbytes(); i < rounded + 2 * kGuardBytes; ++i) ok = ok && base[i] == kGuardByte;
  if (!ok) g_violations.fetch_add(1, std::memory_order_relaxed);
  std::free(base);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend("cpu") {
    using namespace cpu;
    for (OpId op : {OpId::add, OpId::sub, OpId::rsub, OpId::mul, OpId::div, OpId::maximum, OpId::minimum})
      set(op, &binary_kernel);
    for (const OpInfo& info : kOpTable) {
      if (op_is_comparison(info.id)) set(info.id, &compare_kernel);
      if (op_is_select(info.id)) set(info.id, &select_kernel);
    }
    for (const OpInfo& info : kOpTable) {
      if (op_is_unary_elementwise(info.id)) set(info.id, &unary_kernel);
    }
    set(OpId::fill, &fill_kernel);
    set(OpId::to_copy, &to_copy_kernel);
    set(OpId::contiguous, &contiguous_kernel);
    for (OpId op : {OpId::sum, OpId::mean, OpId::amax}) set(op, &reduce_kernel);
    for (OpId op : {OpId::softmax, OpId::log_softmax}) set(op, &softmax_kernel);
    set(OpId::matmul, &matmul_kernel);
    set(OpId::linear, &linear_kernel);
    set(OpId::rms_norm, &rms_norm_kernel);
    set(OpId::layer_norm, &layer_norm_kernel);
    set(OpId::cat, &cat_kernel);
    set(OpId::embedding, &embedding_kernel);
    set(OpId::scaled_dot_product_attention, &attention_kernel);
    set(OpId::cumsum, &cumsum_kernel);
    set(OpId::argmax, &argmax_kernel);
    set(OpId::topk, &topk_kernel);
  }

  std::shared_ptr<Storage> allocate(Device device, size_t nbytes) override {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    if (g_guarded.load(std::memory_order_relaxed)) {
      auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlignment, rounded + 2 * kGuardBytes));
      if (base == nullptr) throw std::bad_alloc();
      std::memset(base, kGuardByte, rounded + 2 * kGuardBytes);
      std::memset(base + kGuardBytes, 0xFF, nbytes);
      return std::make_shared<Storage>(device, nbytes, base + kGuardBytes, &release_guarded,
                                       reinterpret_cast<void*>(rounded));
    }
    if (nbytes >= BlockCache::kMinCachedBytes) {
      const size_t block = BlockCache::round(nbytes);
      void* data = block_cache().take(block);
      if (data == nullptr) data = std::aligned_alloc(kAlignment, block);
      if (data == nullptr) throw std::bad_alloc();
      return std::make_shared<Storage>(device, nbytes, data, &release_cached, reinterpret_cast<void*>(block));
    }
    if (kCacheSmallBlocks && rounded <= SmallBlocks::kMaxBytes) {
      const size_t size_class = SmallBlocks::class_of(rounded);
      void* data = take_small(size_class);
      try {
        return std::allocate_shared<Storage>(SmallBlockAllocator<Storage>(), device, nbytes, data, &release_small,
                                             reinterpret_cast<void*>(size_class));
      } catch (...) {
        give_small(data, size_class);
        throw;
      }
    }
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) throw std::bad_alloc();
    return std::make_shared<Storage>(device, nbytes, data, [](Storage& s) { std::free(s.data()); }, nullptr);
  }

  void copy_from_host(const Storage& dst, size_t dst_offset, const void* src, size_t nbytes) override {
    std::memcpy(static_cast<char*>(dst.data()) + dst_offset, src, nbytes);
  }

  void copy_to_host(void* dst, const Storage& src, size_t src_offset, size_t nbytes) override {
    std::memcpy(dst, static_cast<const char*>(src.data()) + src_offset, nbytes);
  }

 private:
  void set(OpId op, Kernel k) { kernels[static_cast<size_t>(op)] = k; }
};

}  // namespace

namespace cpu {
void set_guarded_allocations(bool on) { g_guarded.store(on); }
uint64_t guard_violations() { return g_violations.load(); }
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace sightline
