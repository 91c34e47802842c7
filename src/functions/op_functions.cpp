// The op functions of ops.h and the Tensor methods that are ops: each builds its attributes and goes
// through dispatch(), so every op is seen by the observer hooks (and so by the profiler).
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "sightline/backend.h"

namespace sightline {
namespace {

Tensor unary(OpId op, const Tensor& x) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {x};
  return dispatch(op, inputs, kNoAttrs);
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {a, b};
  return dispatch(op, inputs, kNoAttrs);
}

Tensor binary_scalar(OpId op, const Tensor& a, double b) {
  OpAttrs attrs;
  attrs.scalar = b;
  attrs.has_scalar = true;
  const Tensor inputs[] = {a};
  return dispatch(op, inputs, attrs);
}

Tensor reduction(OpId op, const Tensor& x, const Dims& dims, bool keepdim) {
  OpAttrs attrs;
  attrs.dims = dims;
  attrs.keepdim = keepdim;
  const Tensor inputs[] = {x};
  return dispatch(op, inputs, attrs);
}

Tensor along_dim(OpId op, const Tensor& x, int64_t dim) {
  OpAttrs attrs;
  attrs.dim = dim;
  const Tensor inputs[] = {x};
  return dispatch(op, inputs, attrs);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(OpId::add, a, b); }
Tensor add(const Tensor& a, double b) { return binary_scalar(OpId::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(OpId::sub, a, b); }
Tensor sub(const Tensor& a, double b) { return binary_scalar(OpId::sub, a, b); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {cond, a, b};
  return dispatch(OpId::where, inputs, kNoAttrs);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  OpAttrs attrs;
  attrs.scalar = value;
  const Tensor inputs[] = {x, mask};
  return dispatch(OpId::masked_fill, inputs, attrs);
}

Tensor rsub(const Tensor& a, const Tensor& b) { return binary(OpId::rsub, a, b); }
Tensor rsub(const Tensor& a, double b) { return binary_scalar(OpId::rsub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::mul, a, b); }
Tensor mul(const Tensor& a, double b) { return binary_scalar(OpId::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpId::div, a, b); }
Tensor div(const Tensor& a, double b) { return binary_scalar(OpId::div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpId::eq, a, b); }
Tensor eq(const Tensor& a, double b) { return binary_scalar(OpId::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpId::ne, a, b); }
Tensor ne(const Tensor& a, double b) { return binary_scalar(OpId::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpId::lt, a, b); }
Tensor lt(const Tensor& a, double b) { return binary_scalar(OpId::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpId::le, a, b); }
Tensor le(const Tensor& a, double b) { return binary_scalar(OpId::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpId::gt, a, b); }
Tensor gt(const Tensor& a, double b) { return binary_scalar(OpId::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpId::ge, a, b); }
Tensor ge(const Tensor& a, double b) { return binary_scalar(OpId::ge, a, b); }

Tensor neg(const Tensor& x) { return unary(OpId::neg, x); }
Tensor abs(const Tensor& x) { return unary(OpId::abs, x); }
Tensor exp(const Tensor& x) { return unary(OpId::exp, x); }
Tensor log(const Tensor& x) { return unary(OpId::log, x); }
Tensor sqrt(const Tensor& x) { return unary(OpId::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(OpId::rsqrt, x); }
Tensor reciprocal(const Tensor& x) { return unary(OpId::reciprocal, x); }
Tensor pow(const Tensor& x, double exponent) { return binary_scalar(OpId::pow, x, exponent); }
Tensor tanh(const Tensor& x) { return unary(OpId::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(OpId::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(OpId::relu, x); }
Tensor silu(const Tensor& x) { return unary(OpId::silu, x); }
Tensor gelu(const Tensor& x, std::string_view approximate) {
  OpAttrs attrs;
  attrs.approximate = gelu_approximate_parse(approximate);
  const Tensor inputs[] = {x};
  return dispatch(OpId::gelu, inputs, attrs);
}
Tensor erf(const Tensor& x) { return unary(OpId::erf, x); }
Tensor sin(const Tensor& x) { return unary(OpId::sin, x); }
Tensor cos(const Tensor& x) { return unary(OpId::cos, x); }

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) { return reduction(OpId::sum, x, dims, keepdim); }
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) { return reduction(OpId::mean, x, dims, keepdim); }
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) { return reduction(OpId::amax, x, dims, keepdim); }
Tensor softmax(const Tensor& x, int64_t dim) { return along_dim(OpId::softmax, x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return along_dim(OpId::log_softmax, x, dim); }
Tensor cumsum(const Tensor& x, int64_t dim) { return along_dim(OpId::cumsum, x, dim); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  OpAttrs attrs;
  attrs.dim = dim;
  attrs.keepdim = keepdim;
  const Tensor inputs[] = {x};
  return dispatch(OpId::argmax, inputs, attrs);
}
TopkResult topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  OpAttrs attrs;
  attrs.dim = dim;
  attrs.k = k;
  attrs.largest = largest;
  attrs.sorted = sorted;
  const Tensor inputs[] = {x};
  std::vector<Tensor> outputs = dispatch_outputs(OpId::topk, inputs, attrs);
  return {std::move(outputs[0]), std::move(outputs[1])};
}

Tensor matmul(const Tensor& a, const Tensor& b) { return binary(OpId::matmul, a, b); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {x, weight, bias};
  return dispatch(OpId::linear, inputs, kNoAttrs);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  OpAttrs attrs;
  attrs.eps = eps;
  const Tensor inputs[] = {x, weight};
  return dispatch(OpId::rms_norm, inputs, attrs);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  OpAttrs attrs;
  attrs.eps = eps;
  const Tensor inputs[] = {x, weight, bias};
  return dispatch(OpId::layer_norm, inputs, attrs);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, bool is_causal, std::optional<double> scale,
                                    bool enable_gqa) {
  OpAttrs attrs;
  attrs.is_causal = is_causal;
  attrs.enable_gqa = enable_gqa;
  // torch's default: 1 / sqrt(E), E the query's last dim.
  const double e = query.defined() && query.dim() >= 1 ? static_cast<double>(query.shape().back()) : 1.0;
  attrs.scalar = scale ? *scale : 1.0 / std::sqrt(e);
  const Tensor inputs[] = {query, key, value, attn_mask};
  return dispatch(OpId::scaled_dot_product_attention, inputs, attrs);
}

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  OpAttrs attrs;
  attrs.dim = dim;
  return dispatch(OpId::cat, tensors, attrs);
}

Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim) {
  return cat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) { return binary(OpId::embedding, weight, indices); }

// ---- Tensor methods that are ops ----

Tensor Tensor::view(const Dims& shape) const {
  OpAttrs attrs;
  attrs.dims = shape;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::view, inputs, attrs);
}

Tensor Tensor::reshape(const Dims& shape) const {
  OpAttrs attrs;
  attrs.dims = shape;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::reshape, inputs, attrs);
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  OpAttrs attrs;
  attrs.dim = dim0;
  attrs.dim1 = dim1;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::transpose, inputs, attrs);
}

Tensor Tensor::permute(const Dims& order) const {
  OpAttrs attrs;
  attrs.dims = order;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::permute, inputs, attrs);
}

Tensor Tensor::slice(int d, int64_t start, int64_t end, int64_t step) const {
  OpAttrs attrs;
  attrs.dim = d;
  attrs.start = start;
  attrs.end = end;
  attrs.step = step;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::slice, inputs, attrs);
}

Tensor Tensor::expand(const Dims& shape) const {
  OpAttrs attrs;
  attrs.dims = shape;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::expand, inputs, attrs);
}

Tensor Tensor::unsqueeze(int d) const { return along_dim(OpId::unsqueeze, *this, d); }
Tensor Tensor::squeeze(int d) const { return along_dim(OpId::squeeze, *this, d); }

Tensor Tensor::select(int d, int64_t index) const {
  OpAttrs attrs;
  attrs.dim = d;
  attrs.start = index;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::select, inputs, attrs);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  SIGHTLINE_CHECK(x.dim() > 0, "aten::split: cannot split a 0-dim tensor");
  const int d = normalize_dim(static_cast<int>(dim), x.dim(), "aten::split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    SIGHTLINE_CHECK(s >= 0, "aten::split: split sizes must be non-negative, got {}", s);
    total += s;
  }
  SIGHTLINE_CHECK(total == x.shape()[d], "aten::split: split sizes [{}] sum to {}, but dim {} has size {}",
                  fmt::join(sizes, ", "), total, d, x.shape()[d]);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(d, start, start + s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  SIGHTLINE_CHECK(x.dim() > 0, "aten::split: cannot split a 0-dim tensor");
  const int d = normalize_dim(static_cast<int>(dim), x.dim(), "aten::split");
  const int64_t n = x.shape()[d];
  SIGHTLINE_CHECK(split_size > 0 || (split_size == 0 && n == 0), "aten::split: split_size must be positive, got {}",
                  split_size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  SIGHTLINE_CHECK(chunks > 0, "aten::chunk: chunks must be positive, got {}", chunks);
  SIGHTLINE_CHECK(x.dim() > 0, "aten::chunk: cannot chunk a 0-dim tensor");
  const int d = normalize_dim(static_cast<int>(dim), x.dim(), "aten::chunk");
  const int64_t n = x.shape()[d];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), d);
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  OpAttrs attrs;
  attrs.device = target;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::copy, inputs, attrs);
}

Tensor Tensor::to(DType target) const {
  if (dtype() == target) return *this;
  OpAttrs attrs;
  attrs.dtype = target;
  const Tensor inputs[] = {*this};
  return dispatch(OpId::to_copy, inputs, attrs);
}

double Tensor::item() const {
  SIGHTLINE_CHECK(defined() && numel() == 1, "item(): a tensor with one element is required, got {}", describe());
  const Tensor host = to(Device::cpu());
  return dtype_visit(host.dtype(), [&]<typename T>() { return to_double(*host.data<T>()); });
}

}  // namespace sightline
