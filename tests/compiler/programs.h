// Tensor programs the compiler tests capture: the naive RMSNorm and a decoder block.
#pragma once

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "sightline/compile.h"
#include "sightline/ops.h"

namespace sightline::compiler::testing {

inline Tensor naive_rms_norm(const Tensor& x, const Tensor& w) {
  return x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;
}

// layer_norm(x, w, b, 1e-5) as a user writes it: {x, w, b} -> {y}.
inline std::vector<Tensor> naive_layer_norm(const std::vector<Tensor>& a) {
  const Tensor centred = a[0] - mean(a[0], {-1}, true);
  return {centred * rsqrt(mean(centred * centred, {-1}, true) + 1e-5) * a[1] + a[2]};
}

// Decoder block dimensions: model width, heads, MLP width.
struct DecoderDims {
  int64_t batch = 2, seq = 5, model = 32, heads = 4, hidden = 48;
};

// The f32 input metas of decoder_block at DecoderDims: x [batch, seq, model], norm1 [model],
// wq, wk, wv, wo [model, model], norm2 [model], w_gate, w_up [hidden, model], w_down [model, hidden].
inline std::vector<TensorMeta> decoder_block_metas() {
  const DecoderDims d;
  std::vector<TensorMeta> metas = {{{d.batch, d.seq, d.model}, DType::f32}, {{d.model}, DType::f32}};
  for (int i = 0; i < 4; ++i) metas.push_back({{d.model, d.model}, DType::f32});
  metas.push_back({{d.model}, DType::f32});
  metas.push_back({{d.hidden, d.model}, DType::f32});
  metas.push_back({{d.hidden, d.model}, DType::f32});
  metas.push_back({{d.model, d.hidden}, DType::f32});
  return metas;
}

// Arguments: x [batch, seq, model], norm1 [model], wq, wk, wv, wo [model, model], norm2 [model],
// w_gate, w_up [hidden, model], w_down [model, hidden].
inline std::vector<Tensor> decoder_block(const std::vector<Tensor>& a) {
  const Tensor& x = a[0];
  const int64_t b = x.size(0), s = x.size(1), d = x.size(2), heads = 4, dh = d / heads;
  const Tensor n1 = naive_rms_norm(x, a[1]);
  auto split_heads = [&](const Tensor& t) { return t.reshape({b, s, heads, dh}).transpose(1, 2); };
  const Tensor q = split_heads(linear(n1, a[2]));
  const Tensor k = split_heads(linear(n1, a[3]));
  const Tensor v = split_heads(linear(n1, a[4]));
  const Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
  const Tensor attn = matmul(softmax(scores, -1), v).transpose(1, 2).reshape({b, s, d});
  const Tensor h = x + linear(attn, a[5]);
  const Tensor n2 = naive_rms_norm(h, a[6]);
  const Tensor gated = silu(linear(n2, a[7])) * linear(n2, a[8]);
  return {h + linear(gated, a[9])};
}

inline std::vector<Tensor> decoder_args(const DecoderDims& dims, Generator& g) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(dims.model));
  auto weight = [&](int64_t out, int64_t in) { return randn({out, in}, {}, &g) * scale; };
  return {randn({dims.batch, dims.seq, dims.model}, {}, &g),
          rand({dims.model}, {}, &g) + 0.5,
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          weight(dims.model, dims.model),
          rand({dims.model}, {}, &g) + 0.5,
          weight(dims.hidden, dims.model),
          weight(dims.hidden, dims.model),
          weight(dims.model, dims.hidden) * 0.5};
}

// Both tensors on the cpu with the same shape, elementwise within atol + rtol * |expected|.
// ESM-2's q (examples/models/esm2): linear with bias, view / permute to [b, heads, s, dh], scaled, rotary
// with chunk. a = {x [b, s, model], w [heads * dh, model], bias, cos, sin [1, 1, s, dh]}.
inline std::vector<Tensor> esm_rotary_q(const std::vector<Tensor>& a) {
  const Tensor &x = a[0], &w = a[1], &bias = a[2], &cos = a[3], &sin = a[4];
  const int64_t b = x.size(0), s = x.size(1), dh = cos.size(-1), heads = w.size(0) / dh;
  Tensor q = linear(x, w, bias).view({b, s, heads, dh}).permute({0, 2, 1, 3});
  q = q * std::pow(static_cast<double>(dh), -0.5);
  const std::vector<Tensor> halves = chunk(q, 2, -1);
  return {q * cos + cat({-halves[1], halves[0]}, -1) * sin};
}

// Llama's k (examples/models/llama): linear without bias, view / transpose, rotate_half with slices.
// a = {x [b, s, model], w [heads * dh, model], cos, sin [1, 1, s, dh]}.
inline std::vector<Tensor> llama_rotary_k(const std::vector<Tensor>& a) {
  const Tensor &x = a[0], &w = a[1], &cos = a[2], &sin = a[3];
  const int64_t b = x.size(0), s = x.size(1), dh = cos.size(-1), half = dh / 2;
  const Tensor k = linear(x, w).view({b, s, -1, dh}).transpose(1, 2);
  return {k * cos + cat({-k.slice(-1, half, dh), k.slice(-1, 0, half)}, -1) * sin};
}

inline void expect_close(const Tensor& actual, const Tensor& expected, double atol = 1e-4,
                         double rtol = 1e-4) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const Tensor a = actual.to(Device::cpu()).to(DType::f32).contiguous();
  const Tensor e = expected.to(Device::cpu()).to(DType::f32).contiguous();
  const float* pa = a.data<float>();
  const float* pe = e.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_NEAR(pa[i], pe[i], atol + rtol * std::fabs(pe[i])) << "element " << i << " of " << a.describe();
  }
}

// Linears one after another (compile()'s weight prefetch, issue 19): relu(x), three projections of it
// (two with a bias) and one of the last projection. Each linear's weight is an argument, so the kernel
// before it loads it: the relu's loads it first, each linear's kernel before its own stores.
// Arguments: x [m, k], w0 [n, k], b0 [n], w1 [n, k], b1 [n], w2 [n, k], w3 [k, n], b3 [k].
inline std::vector<Tensor> linear_chain(const std::vector<Tensor>& in) {
  const Tensor h = relu(in[0]);
  const Tensor q = linear(h, in[1], in[2]);
  const Tensor k = linear(h, in[3], in[4]);
  const Tensor v = linear(h, in[5]);
  return {q, k, linear(v, in[6], in[7])};
}

inline std::vector<TensorMeta> linear_chain_metas(int64_t m, int64_t k, int64_t n, DType dtype) {
  return {{{m, k}, dtype}, {{n, k}, dtype}, {{n}, dtype}, {{n, k}, dtype},
          {{n}, dtype},    {{n, k}, dtype}, {{k, n}, dtype}, {{k}, dtype}};
}

// ESM-2's MLP shape: relu(x) (a kernel before the first linear, which takes its weight prefetched), then
// linear(., w1, b1) -> gelu -> linear(., w2, b2) + x, both linears with a bias.
inline std::vector<Tensor> biased_mlp(const std::vector<Tensor>& in) {
  return {linear(gelu(linear(relu(in[0]), in[1], in[2])), in[3], in[4]) + in[0]};
}

inline std::vector<TensorMeta> biased_mlp_metas(int64_t m, int64_t k, int64_t n, DType dtype) {
  return {{{m, k}, dtype}, {{n, k}, dtype}, {{n}, dtype}, {{k, n}, dtype}, {{k}, dtype}};
}

// HF Llama's repeat_kv: [b, kv, s, d] -> [b, kv * n_rep, s, d] (an expand, then a reshape that copies).
inline Tensor repeat_kv(const Tensor& x, int64_t n_rep) {
  const Dims& d = x.shape();
  return x.unsqueeze(2).expand({d[0], d[1], n_rep, d[2], d[3]}).reshape({d[0], d[1] * n_rep, d[2], d[3]});
}

// Grouped-query attention as HF Llama's eager path writes it: q [b, heads, s, d], k and v [b, kv, s, d]
// repeated to the query heads, softmax(q k^T * 0.2 + mask) v. `also_return_k`: the repeated k is an
// output too (so its copy must be made).
inline std::vector<Tensor> grouped_attention(const std::vector<Tensor>& in, bool also_return_k = false) {
  const int64_t n_rep = in[0].shape()[1] / in[1].shape()[1];
  const Tensor k = repeat_kv(in[1], n_rep), v = repeat_kv(in[2], n_rep);
  const Tensor y = matmul(softmax(matmul(in[0], k.transpose(2, 3)) * 0.2 + in[3], -1), v);
  return also_return_k ? std::vector<Tensor>{y, k} : std::vector<Tensor>{y};
}

inline std::vector<TensorMeta> grouped_attention_metas(int64_t heads, int64_t kv, int64_t s, int64_t d, DType dtype) {
  return {{{2, heads, s, d}, dtype}, {{2, kv, s, d}, dtype}, {{2, kv, s, d}, dtype}, {{2, 1, 1, s}, dtype}};
}

// Llama's eager attention of bf16 q, k, v [b, h, s, e] with its causal mask made in the graph, as
// HF's create_causal_mask makes it (examples/models/llama): gt(keys, queries) of the cache positions (in[3],
// i32 [s]) cast to bf16 times bf16's finfo.min, added to the scores scaled by `scale`, softmax in f32.
// With `mask_argument` the same mask values come in as in[3] instead (bf16 [1, 1, s, s]): nothing in the
// graph then says they are finite.
// The mask itself, [1, 1, s, s] bf16, from the cache positions (i32 [s]).
inline Tensor causal_mask(const Tensor& cache_position) {
  const int64_t s = cache_position.shape()[0];
  return (gt(cache_position.reshape({1, s}), cache_position.reshape({s, 1})).to(DType::bf16) * -3.3895313892515355e38)
      .reshape({1, 1, s, s});
}

inline std::vector<Tensor> causal_attention(const std::vector<Tensor>& in, double scale, bool mask_argument = false) {
  const Tensor mask = mask_argument ? in[3] : causal_mask(in[3]);
  const Tensor scores = matmul(in[0], in[1].transpose(-2, -1)) * scale + mask;
  return {matmul(softmax(scores.to(DType::f32), -1).to(DType::bf16), in[2])};
}

inline std::vector<TensorMeta> causal_attention_metas(int64_t b, int64_t h, int64_t s, int64_t e, bool mask_argument = false) {
  std::vector<TensorMeta> metas(3, TensorMeta{{b, h, s, e}, DType::bf16});
  metas.push_back(mask_argument ? TensorMeta{{1, 1, s, s}, DType::bf16} : TensorMeta{{s}, DType::i32});
  return metas;
}

}  // namespace sightline::compiler::testing
