// The decoder block of examples/decoder_block, as one definition shared by the example and the
// kernel-floor bench (bench/kernels/kernel_floors.cpp): a Llama-style block written the way a PyTorch
// user writes it (the naive RMSNorm, softmax attention, a SiLU-gated MLP), and seeded arguments.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "sightline/sightline.h"

namespace sightline::examples {

struct Dimensions {
  int64_t batch = 1, seq = 256, model = 1024, heads = 8, hidden = 2816;
};

inline Tensor rms_norm_naive(const Tensor& x, const Tensor& w) {
  return x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;
}

// Arguments: x [batch, seq, model], norm1 [model], wq, wk, wv, wo [model, model], norm2 [model],
// w_gate, w_up [hidden, model], w_down [model, hidden].
inline std::vector<Tensor> decoder_block(const std::vector<Tensor>& a, int64_t heads) {
  const Tensor& x = a[0];
  const int64_t b = x.size(0), s = x.size(1), d = x.size(2), dh = d / heads;
  const Tensor n1 = rms_norm_naive(x, a[1]);
  auto split_heads = [&](const Tensor& t) { return t.reshape({b, s, heads, dh}).transpose(1, 2); };
  const Tensor q = split_heads(linear(n1, a[2])), k = split_heads(linear(n1, a[3])),
               v = split_heads(linear(n1, a[4]));
  const Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
  const Tensor attn = matmul(softmax(scores, -1), v).transpose(1, 2).reshape({b, s, d});
  const Tensor h = x + linear(attn, a[5]);
  const Tensor n2 = rms_norm_naive(h, a[6]);
  return {h + linear(silu(linear(n2, a[7])) * linear(n2, a[8]), a[9])};
}

inline std::vector<Tensor> decoder_args(const Dimensions& dims, Device device) {
  Generator g(0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dims.model));
  auto weight = [&](int64_t out, int64_t in) { return (randn({out, in}, {}, &g) * scale).to(device); };
  return {randn({dims.batch, dims.seq, dims.model}, {}, &g).to(device),
          (rand({dims.model}, {}, &g) + 0.5).to(device),
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          (rand({dims.model}, {}, &g) + 0.5).to(device),
          weight(dims.hidden, dims.model),
          weight(dims.hidden, dims.model),
          weight(dims.model, dims.hidden)};
}

}  // namespace sightline::examples
