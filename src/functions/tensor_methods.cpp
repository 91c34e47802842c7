// Factories. Tensors are allocated by the backend of their device; random and arange tensors are
// generated on the host and copied, so a seed gives the same values on every device (the
// cross-backend tests rely on it).
#include <algorithm>
#include <cmath>
#include <vector>

#include "sightline/backend.h"

namespace sightline {

Tensor full(const Dims& shape, double value, TensorOptions options) {
  OpAttrs attrs;
  attrs.dims = shape;
  attrs.dtype = options.dtype;
  attrs.device = options.device;
  attrs.scalar = value;
  attrs.has_scalar = true;
  return dispatch(OpId::fill, {}, attrs);
}

Tensor zeros(const Dims& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Dims& shape, TensorOptions options) { return full(shape, 1.0, options); }

namespace {

// Fills a host f32 buffer with `make()` values and converts it to the requested dtype and device.
template <typename Make>
Tensor generate(const Dims& shape, TensorOptions options, Make&& make) {
  Tensor host = empty(shape, TensorOptions(options.dtype, Device::cpu()));
  dtype_visit(options.dtype, [&]<typename T>() {
    T* p = host.data<T>();
    for (int64_t i = 0, n = host.numel(); i < n; ++i) p[i] = from_float<T>(static_cast<float>(make(i)));
  });
  return host.to(options.device);
}

}  // namespace

Tensor arange(double start, double end, double step, TensorOptions options) {
  SIGHTLINE_CHECK(step != 0, "arange: step must be non-zero");
  SIGHTLINE_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
                  "arange: start, end and step must be finite, got {}, {}, {}", start, end, step);
  const double count = std::ceil((end - start) / step);
  SIGHTLINE_CHECK(count >= 0, "arange: the range [{}, {}) with step {} is empty in the wrong direction", start, end,
                  step);
  return generate({static_cast<int64_t>(count)}, options,
                  [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor arange(int64_t end, TensorOptions options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor rand(const Dims& shape, TensorOptions options, Generator* generator) {
  Generator& g = generator ? *generator : default_generator();
  return generate(shape, options, [&](int64_t) { return g.next_uniform(); });
}

Tensor randn(const Dims& shape, TensorOptions options, Generator* generator) {
  SIGHTLINE_CHECK(dtype_is_floating(options.dtype), "randn: needs a floating dtype, got {}", options.dtype);
  Generator& g = generator ? *generator : default_generator();
  Tensor host = empty(shape, TensorOptions(options.dtype, Device::cpu()));
  const auto n = static_cast<size_t>(host.numel());
  if (options.dtype == DType::f32) {
    g.fill_normal(host.data<float>(), n);
  } else {
    dtype_visit(options.dtype, [&]<typename T>() {
      T* p = host.data<T>();
      std::vector<float> block(std::min<size_t>(n, 4096));
      for (size_t i = 0; i < n; i += block.size()) {
        const size_t m = std::min(block.size(), n - i);
        g.fill_normal(block.data(), m);
        for (size_t j = 0; j < m; ++j) p[i + j] = from_float<T>(block[j]);
      }
    });
  }
  return host.to(options.device);
}

Tensor normal(double mean, double std, const Dims& shape, TensorOptions options, Generator* generator) {
  SIGHTLINE_CHECK(dtype_is_floating(options.dtype), "normal: needs a floating dtype, got {}", options.dtype);
  SIGHTLINE_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0,
                  "normal: mean must be finite and std finite and >= 0, got mean {} and std {}", mean, std);
  Generator& g = generator ? *generator : default_generator();
  Tensor host = empty(shape, TensorOptions(DType::f32, Device::cpu()));
  g.fill_normal(host.data<float>(), static_cast<size_t>(host.numel()), static_cast<float>(std));
  if (mean != 0.0) host = host + mean;
  return host.to(options.dtype).to(options.device);
}

Tensor from_vector(std::span<const float> values, const Dims& shape, DType dtype) {
  SIGHTLINE_CHECK(static_cast<int64_t>(values.size()) == shape.product(),
                  "from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape,
                  shape.product());
  return generate(shape, TensorOptions(dtype), [&](int64_t i) { return values[static_cast<size_t>(i)]; });
}

Tensor from_vector(std::span<const int32_t> values, const Dims& shape) {
  SIGHTLINE_CHECK(static_cast<int64_t>(values.size()) == shape.product(),
                  "from_vector: {} values do not fill shape {} ({} elements)", values.size(), shape,
                  shape.product());
  Tensor t = empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

}  // namespace sightline
