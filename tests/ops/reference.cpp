#include "reference.h"

#include <cmath>
#include <limits>

namespace sightline::testing {

Ref to_ref(const Tensor& t) {
  Ref r{t.shape(), {}};
  const Tensor h = t.to(Device::cpu()).contiguous();
  r.v.resize(static_cast<size_t>(h.numel()));
  dtype_visit(h.dtype(), [&]<typename T>() {
    const T* p = h.data<T>();
    for (size_t i = 0; i < r.v.size(); ++i) r.v[i] = to_double(p[i]);
  });
  return r;
}

int64_t flat_index(const Dims& shape, const Dims& index) {
  int64_t f = 0;
  for (int i = 0; i < shape.size(); ++i) f = f * shape[i] + index[i];
  return f;
}

Dims unravel(const Dims& shape, int64_t flat) {
  Dims idx = Dims::filled(shape.size(), 0);
  for (int i = shape.size() - 1; i >= 0; --i) {
    idx[i] = shape[i] == 0 ? 0 : flat % shape[i];
    flat = shape[i] == 0 ? 0 : flat / shape[i];
  }
  return idx;
}

namespace {

// Index into `shape` (right-aligned, size-1 dims broadcast) from an index of `out`.
int64_t broadcast_index(const Dims& shape, const Dims& out, const Dims& idx) {
  Dims sub = Dims::filled(shape.size(), 0);
  const int lead = out.size() - shape.size();
  for (int i = 0; i < shape.size(); ++i) sub[i] = shape[i] == 1 ? 0 : idx[i + lead];
  return flat_index(shape, sub);
}

}  // namespace

Ref ref_binary(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Ref r{broadcast_shapes(a.shape, b.shape, "ref"), {}};
  r.v.resize(static_cast<size_t>(r.shape.product()));
  for (size_t i = 0; i < r.v.size(); ++i) {
    const Dims idx = unravel(r.shape, static_cast<int64_t>(i));
    r.v[i] = f(a.v[static_cast<size_t>(broadcast_index(a.shape, r.shape, idx))],
               b.v[static_cast<size_t>(broadcast_index(b.shape, r.shape, idx))]);
  }
  return r;
}

Ref ref_unary(const Ref& a, const std::function<double(double)>& f) {
  Ref r = a;
  for (double& x : r.v) x = f(x);
  return r;
}

Ref ref_reduce(const Ref& a, const Dims& dims, bool keepdim, int kind) {
  std::vector<bool> red(static_cast<size_t>(a.shape.size()), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + a.shape.size() : d)] = true;
  Dims kept_shape;  // keepdim layout
  for (int i = 0; i < a.shape.size(); ++i) kept_shape.push_back(red[static_cast<size_t>(i)] ? 1 : a.shape[i]);
  const int64_t out_n = kept_shape.product();
  std::vector<double> acc(static_cast<size_t>(out_n), kind == 2 ? -INFINITY : 0.0);
  std::vector<int64_t> count(static_cast<size_t>(out_n), 0);
  for (size_t i = 0; i < a.v.size(); ++i) {
    Dims idx = unravel(a.shape, static_cast<int64_t>(i));
    for (int d = 0; d < idx.size(); ++d) {
      if (red[static_cast<size_t>(d)]) idx[d] = 0;
    }
    const auto o = static_cast<size_t>(flat_index(kept_shape, idx));
    acc[o] = kind == 2 ? std::max(acc[o], a.v[i]) : acc[o] + a.v[i];
    ++count[o];
  }
  if (kind == 1) {
    for (size_t o = 0; o < acc.size(); ++o) acc[o] /= static_cast<double>(count[o]);
  }
  Ref r{{}, acc};
  for (int i = 0; i < a.shape.size(); ++i) {
    if (!red[static_cast<size_t>(i)]) r.shape.push_back(a.shape[i]);
    else if (keepdim) r.shape.push_back(1);
  }
  return r;
}

Ref ref_softmax(const Ref& a, int dim, bool log_form) {
  if (dim < 0) dim += a.shape.size();
  Ref r = a;
  const int64_t n = a.shape[dim];
  for (size_t i = 0; i < a.v.size(); ++i) {
    Dims idx = unravel(a.shape, static_cast<int64_t>(i));
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) {
      idx[dim] = j;
      m = std::max(m, a.v[static_cast<size_t>(flat_index(a.shape, idx))]);
    }
    for (int64_t j = 0; j < n; ++j) {
      idx[dim] = j;
      s += std::exp(a.v[static_cast<size_t>(flat_index(a.shape, idx))] - m);
    }
    r.v[i] = log_form ? a.v[i] - m - std::log(s) : std::exp(a.v[i] - m) / s;
  }
  return r;
}

Ref ref_matmul(const Ref& a0, const Ref& b0) {
  Ref a = a0, b = b0;
  const bool av = a.shape.size() == 1, bv = b.shape.size() == 1;
  if (av) a.shape.insert(0, 1);
  if (bv) b.shape.push_back(1);
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
  Dims ba, bb;
  for (int i = 0; i + 2 < a.shape.size(); ++i) ba.push_back(a.shape[i]);
  for (int i = 0; i + 2 < b.shape.size(); ++i) bb.push_back(b.shape[i]);
  const Dims batch = broadcast_shapes(ba, bb, "ref");
  Ref r;
  r.shape = batch;
  r.shape.push_back(m);
  r.shape.push_back(n);
  r.v.assign(static_cast<size_t>(r.shape.product()), 0.0);
  for (int64_t bi = 0; bi < batch.product(); ++bi) {
    const Dims bidx = unravel(batch, bi);
    const int64_t oa = broadcast_index(ba, batch, bidx) * m * k, ob = broadcast_index(bb, batch, bidx) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += a.v[static_cast<size_t>(oa + i * k + p)] * b.v[static_cast<size_t>(ob + p * n + j)];
        }
        r.v[static_cast<size_t>((bi * m + i) * n + j)] = s;
      }
    }
  }
  if (bv) r.shape.erase(r.shape.size() - 1);
  if (av) r.shape.erase(r.shape.size() - (bv ? 1 : 2));
  return r;
}

Ref ref_rms_norm(const Ref& x, const Ref* w, double eps) {
  Ref r = x;
  const int64_t n = x.shape.back();
  for (size_t row = 0; row * static_cast<size_t>(n) < x.v.size(); ++row) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x.v[row * static_cast<size_t>(n) + static_cast<size_t>(i)] * x.v[row * static_cast<size_t>(n) + static_cast<size_t>(i)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      double& v = r.v[row * static_cast<size_t>(n) + static_cast<size_t>(i)];
      v = v * inv * (w ? w->v[static_cast<size_t>(i)] : 1.0);
    }
  }
  return r;
}

Ref ref_layer_norm(const Ref& x, const Ref* w, const Ref* b, double eps) {
  Ref r = x;
  const auto n = static_cast<size_t>(x.shape.back());
  for (size_t row = 0; row * n < x.v.size(); ++row) {
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; ++i) s += x.v[row * n + i];
    const double mu = s / static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) ss += (x.v[row * n + i] - mu) * (x.v[row * n + i] - mu);
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (size_t i = 0; i < n; ++i) {
      double v = (x.v[row * n + i] - mu) * rstd;
      if (w) v *= w->v[i];
      if (b) v += b->v[i];
      r.v[row * n + i] = v;
    }
  }
  return r;
}

Ref round_to(const Ref& r, DType dtype) {
  Ref out = r;
  for (double& v : out.v) {
    switch (dtype) {
      case DType::bf16: v = bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v))); break;
      case DType::f16: v = f16_bits_to_float(float_to_f16_bits(static_cast<float>(v))); break;
      case DType::f32: v = static_cast<float>(v); break;
      case DType::i32: break;
      case DType::boolean: v = v != 0 ? 1 : 0; break;
    }
  }
  return out;
}

}  // namespace sightline::testing
