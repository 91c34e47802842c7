// scaled_dot_product_attention, computed as torch's math path computes it for inference: per batch
// and head, scores = (q k^T) * scale + bias in f32 (bias: the additive mask, -inf where a bool mask is
// false or, with is_causal, where key j > query i), P = softmax(scores) in f32, rounded to the input
// dtype (the matmul operand torch's `softmax(...).to(q.dtype)` gives), out = P v accumulated in f32 and
// rounded once to the output dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided_loop.h"
#include "core/parallel.h"

namespace sightline::cpu {
namespace {

float round_to(DType dtype, float x) {
  if (dtype == DType::bf16) return bf16_bits_to_float(float_to_bf16_bits(x));
  if (dtype == DType::f16) return f16_bits_to_float(float_to_f16_bits(x));
  return x;
}

}  // namespace

void attention_kernel(const OpCall& call, Tensor& out) {
  const Tensor q = contiguous_as(call.inputs[0], DType::f32);
  const Tensor k = contiguous_as(call.inputs[1], DType::f32);
  const Tensor v = contiguous_as(call.inputs[2], DType::f32);
  const Tensor& mask_in = call.inputs.size() > 3 ? call.inputs[3] : Tensor();
  const int r = q.dim();
  const int64_t l = q.shape()[r - 2], e = q.shape()[r - 1], s = k.shape()[r - 2], ev = v.shape()[r - 1];
  // Batch-and-head rows of q; k and v may have fewer heads (enable_gqa): group = Hq / Hkv.
  int64_t outer = 1;
  for (int d = 0; d + 2 < r; ++d) outer *= q.shape()[d];
  const int64_t hq = r >= 3 ? q.shape()[r - 3] : 1, hkv = r >= 3 ? k.shape()[r - 3] : 1;
  const int64_t group = hq / hkv;
  // The bias, broadcast to the scores' shape [..., L, S] (f32).
  Tensor bias;
  if (mask_in.defined()) {
    Dims scores = q.shape();
    scores[r - 1] = s;
    bias = empty(scores, DType::f32);
    copy_strided(mask_in, bias);
    if (mask_in.dtype() == DType::boolean) {
      float* b = bias.data<float>();
      for (int64_t i = 0; i < bias.numel(); ++i) b[i] = b[i] != 0.0f ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  const bool causal = call.attrs.is_causal;
  const float scale = static_cast<float>(call.attrs.scalar);
  const DType p_dtype = call.inputs[0].dtype();
  Tensor yd = empty(out.shape(), DType::f32);
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>();
  const float* bd = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = yd.data<float>();
  parallel_for(0, outer, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(s));
    std::vector<float> acc(static_cast<size_t>(ev));
    for (int64_t o = begin; o < end; ++o) {
      const int64_t batch = o / hq, head = o % hq;
      const int64_t kv = batch * hkv + head / group;
      const float* kb = kd + kv * s * e;
      const float* vb = vd + kv * s * ev;
      for (int64_t i = 0; i < l; ++i) {
        const float* qi = qd + (o * l + i) * e;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < s; ++j) {
          float dot = 0.0f;
          for (int64_t t = 0; t < e; ++t) dot += qi[t] * kb[j * e + t];
          float x = dot * scale;
          if (bd) x += bd[(o * l + i) * s + j];
          if (causal && j > i) x = -std::numeric_limits<float>::infinity();
          row[static_cast<size_t>(j)] = x;
          mx = std::max(mx, x);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < s; ++j) {
          const float x = std::exp(row[static_cast<size_t>(j)] - mx);
          row[static_cast<size_t>(j)] = x;
          sum += x;
        }
        const float inv = 1.0f / sum;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < s; ++j) {
          const float pj = round_to(p_dtype, row[static_cast<size_t>(j)] * inv);
          for (int64_t t = 0; t < ev; ++t) acc[static_cast<size_t>(t)] += pj * vb[j * ev + t];
        }
        std::copy(acc.begin(), acc.end(), yp + (o * l + i) * ev);
      }
    }
  });
  copy_strided(yd, out);
}

}  // namespace sightline::cpu
