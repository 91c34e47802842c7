#include <algorithm>

#include "core/checked_math.h"
#include "sightline/tensor.h"

namespace sightline {

Dims::Dims(std::initializer_list<int64_t> values) : Dims(std::span<const int64_t>(values.begin(), values.size())) {}

Dims::Dims(std::span<const int64_t> values) {
  SIGHTLINE_CHECK(values.size() <= static_cast<size_t>(kMaxDims), "a tensor has at most {} dims, got {}",
                  kMaxDims, values.size());
  std::copy(values.begin(), values.end(), v_.begin());
  n_ = static_cast<int>(values.size());
}

Dims Dims::filled(int n, int64_t value) {
  SIGHTLINE_CHECK(n >= 0 && n <= kMaxDims, "a tensor has at most {} dims, got {}", kMaxDims, n);
  Dims d;
  d.n_ = n;
  std::fill_n(d.v_.begin(), n, value);
  return d;
}

void Dims::push_back(int64_t value) {
  SIGHTLINE_CHECK(n_ < kMaxDims, "a tensor has at most {} dims", kMaxDims);
  v_[static_cast<size_t>(n_++)] = value;
}

void Dims::insert(int index, int64_t value) {
  SIGHTLINE_CHECK(n_ < kMaxDims, "a tensor has at most {} dims", kMaxDims);
  SIGHTLINE_ASSERT_MSG(index >= 0 && index <= n_, "index={} n={}", index, n_);
  for (int i = n_; i > index; --i) v_[static_cast<size_t>(i)] = v_[static_cast<size_t>(i - 1)];
  v_[static_cast<size_t>(index)] = value;
  ++n_;
}

void Dims::erase(int index) {
  SIGHTLINE_ASSERT_MSG(index >= 0 && index < n_, "index={} n={}", index, n_);
  for (int i = index; i + 1 < n_; ++i) v_[static_cast<size_t>(i)] = v_[static_cast<size_t>(i + 1)];
  --n_;
}

std::optional<int64_t> checked_numel(const Dims& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t p = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(p, d, &p)) return std::nullopt;
  }
  return p;
}

int64_t Dims::product() const {
  const std::optional<int64_t> p = checked_numel(*this);
  if (!p) {
    fail("the shape {} has more elements than a 64-bit count can hold (the product of its sizes overflows); "
         "check the sizes, one of them is far larger than intended",
         *this);
  }
  return *p;
}

bool Dims::operator==(const Dims& other) const {
  return n_ == other.n_ && std::equal(begin(), end(), other.begin());
}

std::string Dims::to_string() const { return fmt::format("[{}]", fmt::join(span(), ", ")); }

Dims contiguous_strides(const Dims& shape) {
  Dims strides = Dims::filled(shape.size(), 1);
  int64_t running = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = running;
    if (i > 0 && __builtin_mul_overflow(running, std::max<int64_t>(shape[i], 1), &running)) {
      fail("the strides of the shape {} overflow a 64-bit integer (the product of its sizes is too large); "
           "check the sizes, one of them is far larger than intended",
           shape);
    }
  }
  return strides;
}

int normalize_dim(int dim, int rank, std::string_view what) {
  const int lo = rank == 0 ? -1 : -rank;
  const int hi = rank == 0 ? 0 : rank - 1;
  SIGHTLINE_CHECK(dim >= lo && dim <= hi, "{}: dim {} is out of range for a tensor of rank {}; valid dims are {}..{}",
                  what, dim, rank, lo, hi);
  return dim < 0 ? dim + std::max(rank, 1) : dim;
}

}  // namespace sightline
