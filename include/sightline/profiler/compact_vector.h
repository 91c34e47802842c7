// A vector that is one pointer wide: what a FunctionEvent keeps its input shapes, stack, args,
// children and kernels in. Most events have none of them (an op without record_shapes, a leaf), and a
// collected trace writes a million events into fresh memory, so an empty list costs 8 bytes instead of
// std::vector's 24 (the size and capacity live in the heap block, in front of the elements).
//
//   CompactVector<std::int64_t> children;      // empty: a null pointer, no allocation
//   children.push_back(3);
//   for (std::int64_t child : children) ...;   // begin()/end() are plain pointers
//   std::vector<std::int64_t> copy = children.to_vector();
//
// It keeps std::vector's names and meaning for what it has (size, empty, operator[], push_back,
// emplace_back, insert at the end, clear, comparison), so a reader of the event's fields reads it as a
// vector. Elements are moved when the block grows, as std::vector does for nothrow-movable ones.
#pragma once

#include <algorithm>
#include <cstddef>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace sightline::profiler {

template <class T>
class CompactVector {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  CompactVector() noexcept = default;
  CompactVector(std::initializer_list<T> values) { append(values.begin(), values.end()); }
  CompactVector(const std::vector<T>& values) { append(values.begin(), values.end()); }  // NOLINT: reads as a vector
  CompactVector(const CompactVector& other) { append(other.begin(), other.end()); }
  CompactVector(CompactVector&& other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
  ~CompactVector() { release(); }

  CompactVector& operator=(const CompactVector& other) {
    if (this != &other) {
      CompactVector copy(other);
      swap(copy);
    }
    return *this;
  }
  CompactVector& operator=(CompactVector&& other) noexcept {
    if (this != &other) {
      release();
      block_ = std::exchange(other.block_, nullptr);
    }
    return *this;
  }
  CompactVector& operator=(std::initializer_list<T> values) { return *this = CompactVector(values); }
  CompactVector& operator=(const std::vector<T>& values) { return *this = CompactVector(values); }

  void swap(CompactVector& other) noexcept { std::swap(block_, other.block_); }

  size_type size() const noexcept { return block_ == nullptr ? 0 : block_->size; }
  size_type capacity() const noexcept { return block_ == nullptr ? 0 : block_->capacity; }
  bool empty() const noexcept { return size() == 0; }

  T* data() noexcept { return block_ == nullptr ? nullptr : elements(block_); }
  const T* data() const noexcept { return block_ == nullptr ? nullptr : elements(block_); }
  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size(); }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size(); }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  T& operator[](size_type i) noexcept { return data()[i]; }
  const T& operator[](size_type i) const noexcept { return data()[i]; }
  T& front() noexcept { return data()[0]; }
  const T& front() const noexcept { return data()[0]; }
  T& back() noexcept { return data()[size() - 1]; }
  const T& back() const noexcept { return data()[size() - 1]; }

  void reserve(size_type wanted) {
    if (wanted > capacity()) grow(wanted);
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size() == capacity()) {
      // The new element is made in the new block before the old ones move, so that an argument that
      // refers to an element (v.push_back(v[0])) is still alive when it is read, as with std::vector.
      Block* fresh = allocate(std::max<size_type>(4, 2 * capacity()));
      T* slot = elements(fresh) + size();
      try {
        ::new (static_cast<void*>(slot)) T(std::forward<Args>(args)...);
      } catch (...) {
        ::operator delete(static_cast<void*>(fresh), kAlign);
        throw;
      }
      move_into(fresh);
      ++block_->size;
      return *slot;
    }
    T* slot = elements(block_) + block_->size;
    ::new (static_cast<void*>(slot)) T(std::forward<Args>(args)...);
    ++block_->size;
    return *slot;
  }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }

  // Inserts [first, last) at `position`, which must be end(): the only place the events append to.
  template <class InputIt>
  iterator insert(const_iterator position, InputIt first, InputIt last) {
    const auto at = static_cast<size_type>(position - begin());
    append(first, last);
    return begin() + at;
  }

  void clear() noexcept {
    if (block_ == nullptr) return;
    std::destroy(elements(block_), elements(block_) + block_->size);
    block_->size = 0;
  }

  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  friend bool operator==(const CompactVector& a, const CompactVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const CompactVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // The header, padded so that the elements that follow it are aligned.
  struct alignas(std::max(alignof(T), alignof(std::uint32_t))) Block {
    std::uint32_t size;
    std::uint32_t capacity;
  };
  static constexpr std::size_t kHeader = (sizeof(Block) + alignof(T) - 1) / alignof(T) * alignof(T);
  static constexpr std::align_val_t kAlign{alignof(Block)};

  static T* elements(Block* block) noexcept {
    return std::launder(reinterpret_cast<T*>(reinterpret_cast<char*>(block) + kHeader));
  }
  static const T* elements(const Block* block) noexcept {
    return std::launder(reinterpret_cast<const T*>(reinterpret_cast<const char*>(block) + kHeader));
  }

  template <class InputIt>
  void append(InputIt first, InputIt last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<InputIt>::iterator_category>) {
      const auto n = static_cast<size_type>(std::distance(first, last));
      if (n == 0) return;
      reserve(size() + n);
    }
    for (; first != last; ++first) emplace_back(*first);
  }

  static Block* allocate(size_type capacity) {
    if (capacity > UINT32_MAX) throw std::length_error("CompactVector: more than 2^32 - 1 elements");
    auto* block = static_cast<Block*>(::operator new(kHeader + capacity * sizeof(T), kAlign));
    block->size = 0;
    block->capacity = static_cast<std::uint32_t>(capacity);
    return block;
  }

  // Moves the elements into `fresh` (allocated, empty) and makes it this vector's block.
  void move_into(Block* fresh) noexcept {
    static_assert(std::is_nothrow_move_constructible_v<T>, "elements move when the block grows");
    if (block_ != nullptr) {
      T* from = elements(block_);
      std::uninitialized_move(from, from + block_->size, elements(fresh));
      fresh->size = block_->size;
      release();
    }
    block_ = fresh;
  }

  void grow(size_type wanted) { move_into(allocate(wanted)); }

  void release() noexcept {
    if (block_ == nullptr) return;
    std::destroy(elements(block_), elements(block_) + block_->size);
    ::operator delete(static_cast<void*>(block_), kAlign);
    block_ = nullptr;
  }

  Block* block_ = nullptr;
};

}  // namespace sightline::profiler
