// Tensor: a typed, strided view over a Storage that lives on one device.
//
//   using namespace sightline;
//   Tensor x = randn({4096, 4096});                 // f32 on cpu
//   Tensor w = ones({4096}).to(Device::parse("neuron:0"));
//   Tensor y = x.transpose(0, 1).slice(0, 0, 128);  // views share storage, no copy
//   Tensor z = y.contiguous().to(DType::bf16);
//   fmt::print("{}\n", z.to_string());
//
// Nouns: a Storage is a block of bytes on one device; a Tensor is (storage, dtype,
// shape, strides, offset). Views copy the metadata and share the storage. Ops on tensors are free
// functions declared in ops.h; they go through the dispatcher (backend.h) to the backend that owns the
// tensors' device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "sightline/dtype.h"
#include "sightline/error.h"

namespace sightline {

inline constexpr int kMaxDims = 8;

// A small fixed-capacity list of dimension sizes or strides (no heap allocation on the dispatch path).
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  explicit Dims(std::span<const int64_t> values);
  static Dims filled(int n, int64_t value);

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return v_[static_cast<size_t>(i)]; }
  int64_t operator[](int i) const { return v_[static_cast<size_t>(i)]; }
  int64_t back() const { return v_[static_cast<size_t>(n_ - 1)]; }
  void push_back(int64_t value);
  void insert(int index, int64_t value);
  void erase(int index);
  const int64_t* begin() const { return v_.data(); }
  const int64_t* end() const { return v_.data() + n_; }
  int64_t* begin() { return v_.data(); }
  int64_t* end() { return v_.data() + n_; }
  std::span<const int64_t> span() const { return {v_.data(), static_cast<size_t>(n_)}; }
  int64_t product() const;
  bool operator==(const Dims& other) const;

  std::string to_string() const;  // "[4096, 4096]"

 private:
  std::array<int64_t, kMaxDims> v_{};
  int n_ = 0;
};

// A device is a registered backend plus an index: "cpu", "neuron:0". Backend ids come from the
// backend registry (backend.h); the cpu backend is simply the first one registered.
// How many backends the registry holds (register_backend refuses more); Device::backend indexes them.
inline constexpr size_t kMaxBackends = 16;

struct Device {
  uint8_t backend = 0;
  int16_t index = 0;

  static Device cpu();
  // Parses "cpu", "neuron", "neuron:1". Throws, listing the registered backends, on an unknown name.
  static Device parse(std::string_view text);
  std::string to_string() const;
  bool is_cpu() const;
  bool operator==(const Device& o) const = default;
};

// A block of bytes owned by one device's backend. For a non-cpu device `data` is backend-private
// (it may point at simulated device memory): only that backend's kernels and copy functions touch it.
// A storage with a release function owns real memory: it counts in memory_allocated() while it lives,
// and a profile with profile_memory records its allocation and release.
class Storage {
 public:
  using Release = void (*)(Storage& self);
  Storage(Device device, size_t nbytes, void* data, Release release, void* backend_context);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  size_t nbytes() const { return nbytes_; }
  void* data() const { return data_; }
  void* backend_context() const { return context_; }

 private:
  Device device_;
  size_t nbytes_;
  void* data_;
  Release release_;
  void* context_;
  bool counted_ = false;
};

// Bytes held by the live storages of `device` (torch.cuda.memory_allocated): what tensors use, not
// what a backend's allocator keeps cached.
int64_t memory_allocated(Device device);

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}  // NOLINT(google-explicit-constructor): zeros({2}, DType::i32)
  TensorOptions(Device d) : device(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor; defined() is false
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int64_t size(int dim) const;  // negative dims count from the end
  int dim() const { return shape_.size(); }
  int64_t numel() const { return shape_.product(); }
  int64_t offset() const { return offset_; }  // in elements
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }

  // Raw element pointer (storage + offset). Only for cpu tensors: other devices' memory is reached
  // through copies (to()), never through host pointers.
  template <typename T>
  T* data() const {
    check_host_access();
    return static_cast<T*>(storage_->data()) + offset_;
  }
  void* raw_data() const;

  // ---- views (share storage) ----
  Tensor view(const Dims& shape) const;     // one dim may be -1; needs compatible strides
  Tensor reshape(const Dims& shape) const;  // a view when possible, a copy otherwise
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(const Dims& order) const;
  Tensor slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(const Dims& shape) const;  // broadcast size-1 dims (stride 0); -1 keeps a size
  Tensor unsqueeze(int dim) const;
  Tensor squeeze(int dim) const;
  Tensor select(int dim, int64_t index) const;  // x[..., index, ...]: the dim is dropped (aten::select)

  // ---- copies ----
  Tensor contiguous() const;  // this tensor if already contiguous
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor clone() const;

  // The single value of a one-element tensor, converted to double (copies to host first).
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }

  // PyTorch-like printing: "tensor([[1.0000, 2.0000], ...], dtype=bf16, device='neuron:0')".
  std::string to_string() const;

  // Shape/dtype/device summary used in error messages: "f32[4096, 4096] on neuron:0".
  std::string describe() const;

 private:
  void check_host_access() const;

  std::shared_ptr<Storage> storage_;
  Dims shape_;
  Dims strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
};

// Contiguous row-major strides for a shape.
Dims contiguous_strides(const Dims& shape);
// Normalizes a possibly negative dim against a rank, with an error naming the op.
int normalize_dim(int dim, int rank, std::string_view what);

// ---- factories ----

// A seedable random generator (splitmix64 seeding xoshiro256**); the same seed gives the same
// tensors on every platform. The global generator is seeded with manual_seed().
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed);
  uint64_t next_u64();
  double next_uniform();  // [0, 1)
  double next_normal();   // standard normal (Box-Muller)
  // The next n values of the normal sequence as floats: out[i] is static_cast<float>(next_normal()) of
  // the i-th call, and the generator ends in the state those n calls leave; drawn a block of pairs at
  // a time (the log, sine and cosine vectorized). With `scale`, each float is multiplied by it in float
  // arithmetic as it is written (out[i] * scale, one rounding; 1 leaves the values as they are).
  void fill_normal(float* out, size_t n, float scale = 1.0f);

  // The whole state (torch: Generator.get_state / set_state): the xoshiro256** words and the spare
  // normal that next_normal returns next, if any. set_state refuses all-zero words, the one state
  // xoshiro256** never leaves.
  struct State {
    std::array<uint64_t, 4> words{};
    double spare_normal = 0;
    bool has_spare = false;
  };
  State get_state() const;
  void set_state(const State& state);

 private:
  std::array<uint64_t, 4> s_{};
  double spare_normal_ = 0;
  bool has_spare_ = false;
};
Generator& default_generator();
void manual_seed(uint64_t seed);

Tensor empty(const Dims& shape, TensorOptions options = {});
Tensor zeros(const Dims& shape, TensorOptions options = {});
Tensor ones(const Dims& shape, TensorOptions options = {});
Tensor full(const Dims& shape, double value, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {});
Tensor rand(const Dims& shape, TensorOptions options = {}, Generator* generator = nullptr);   // U[0,1)
Tensor randn(const Dims& shape, TensorOptions options = {}, Generator* generator = nullptr);  // N(0,1)
// N(mean, std^2) (torch.normal(mean, std, size), HF's weight init normal_(0, 0.02)): the values of
// randn(shape, f32) * std + mean in f32 arithmetic, bit for bit, drawn in one pass (the scaling is done
// as each value is written), then converted to options.dtype.
Tensor normal(double mean, double std, const Dims& shape, TensorOptions options = {}, Generator* generator = nullptr);
// A cpu tensor holding a copy of `values`, converted to `dtype`.
Tensor from_vector(std::span<const float> values, const Dims& shape, DType dtype = DType::f32);
Tensor from_vector(std::span<const int32_t> values, const Dims& shape);

}  // namespace sightline

template <>
struct fmt::formatter<sightline::Dims> : fmt::formatter<std::string_view> {
  auto format(const sightline::Dims& d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.to_string(), ctx);
  }
};
template <>
struct fmt::formatter<sightline::Device> : fmt::formatter<std::string_view> {
  auto format(const sightline::Device& d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(d.to_string(), ctx);
  }
};
template <>
struct fmt::formatter<sightline::DType> : fmt::formatter<std::string_view> {
  auto format(sightline::DType t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(sightline::dtype_name(t), ctx);
  }
};
