// scaled_dot_product_attention as one kernel: per batch and head, per tile of up to 128 queries,
//   TensorE  scores[Lq, S] = (q^T)^T @ k^T          q^T [E, Lq] and k^T [E, S] read from their strides
//   ScalarE  scores *= scale (evacuating PSUM into an f32 SBUF row per query)
//   VectorE  scores += bias                          additive mask; -inf where a bool mask is false or
//                                                    (is_causal) where key j > query i (GpSimd iota)
//   VectorE / ScalarE  softmax along the free axis   max, subtract, exp with the row sum, 1 / sum
//   TensorE  P^T chunks = P @ I (the transpose through the array), then out[Lq, Ev] += P^T^T @ v
// so the scores and probabilities never leave SBUF/PSUM: the HBM traffic is q, k, v, the mask and the
// output, once each (k and v once per key/value head: query heads of a group reuse them). Numerics
// as the CPU reference: scores and softmax in f32, P rounded to the input dtype, P v accumulated in f32.
//
// Limits: E <= 128 (the contraction of q k^T on the partitions), Ev <= 512 (one PSUM bank) and the
// keys of one query tile in PSUM next to the transposes and the output (S <= 2560 on trn2); longer
// sequences would need a tiled (flash) schedule, and the error says to use the eager composition.
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

int32_t stride32(int64_t stride) {
  SIGHTLINE_CHECK(stride >= std::numeric_limits<int32_t>::min() && stride <= std::numeric_limits<int32_t>::max(),
                  "aten::scaled_dot_product_attention: the stride {} does not fit a DMA access pattern (32-bit "
                  "element strides); make the operand contiguous first",
                  stride);
  return static_cast<int32_t>(stride);
}

uint32_t banks_for(uint64_t bytes, uint64_t bank) { return static_cast<uint32_t>((bytes + bank - 1) / bank); }

}  // namespace

std::optional<std::string> attention_unsupported(const device::Spec& spec, const TensorDesc& q, const TensorDesc& k,
                                                 const TensorDesc& v) {
  const int r = static_cast<int>(q.shape.size());
  if (r < 2 || k.shape.size() != q.shape.size() || v.shape.size() != q.shape.size()) return "q, k and v ranks differ";
  const int64_t e = q.shape[r - 1], s = k.shape[r - 2], ev = v.shape[r - 1];
  if (e > spec.partitions || e > spec.tensor.array_rows) return "the head dim exceeds the Tensor engine's rows";
  if (ev > spec.tensor.moving_free_max) return "the value head dim exceeds one PSUM bank";
  if (s <= 0) return "no key positions";
  const uint64_t bank = spec.psum_bank_bytes();
  if (banks_for(uint64_t(s) * 4, bank) + 2 + banks_for(uint64_t(ev) * 4, bank) > spec.psum_banks) {
    return "one query tile's scores do not fit PSUM";
  }
  return std::nullopt;
}

void build_attention(EagerContext& c) {
  KernelBuilder& b = c.b;
  const device::Spec& spec = b.spec();
  const TensorDesc &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const std::optional<TensorDesc> mask = c.inputs.size() > 3 ? std::optional(c.inputs[3]) : std::nullopt;
  const int r = static_cast<int>(q.shape.size());
  const int64_t l = q.shape[r - 2], e = q.shape[r - 1], s = k.shape[r - 2], ev = v.shape[r - 1];
  if (c.out.shape.product() == 0) return;
  const DType dt = q.dtype;
  const uint16_t parts = b.partitions();
  auto phase = [&](AttentionPhase p) {
    if (c.hooks && c.hooks->attention_phase) c.hooks->attention_phase(p);
  };
  constexpr std::string_view name = "aten::scaled_dot_product_attention";
  SIGHTLINE_CHECK(e <= parts && e <= spec.tensor.array_rows,
                  "{}: a head dim of {} exceeds the {} rows q k^T contracts over on the Tensor engine; split the "
                  "heads or use the eager composition (matmul, softmax, matmul)",
                  name, e, std::min<uint32_t>(parts, spec.tensor.array_rows));
  SIGHTLINE_CHECK(ev <= spec.tensor.moving_free_max,
                  "{}: a value head dim of {} exceeds one PSUM bank of outputs ({}); use the eager composition", name,
                  ev, spec.tensor.moving_free_max);
  SIGHTLINE_CHECK(s > 0, "{}: no key positions (S = 0): the softmax of an empty row is undefined", name);
  const uint64_t bank = spec.psum_bank_bytes();
  const uint32_t score_banks = banks_for(uint64_t(s) * 4, bank);
  const uint32_t need_banks = score_banks + 2 + banks_for(uint64_t(ev) * 4, bank);
  SIGHTLINE_CHECK(need_banks <= spec.psum_banks,
                  "{}: {} keys need {} PSUM banks for one query tile's scores next to the transposes and the "
                  "output, more than the {} there are; use the eager composition (matmul, softmax, matmul) for "
                  "sequences this long",
                  name, s, need_banks, spec.psum_banks);
  const uint32_t sf = static_cast<uint32_t>(s), evf = static_cast<uint32_t>(ev);
  const int64_t s_chunks = (s + parts - 1) / parts;
  const uint32_t lq_max = static_cast<uint32_t>(std::min<int64_t>(parts, std::min<int64_t>(l, spec.tensor.array_cols)));

  // Strides: leading dims of q, out and (broadcast) of the mask; k and v by head group.
  const int64_t hq = r >= 3 ? q.shape[r - 3] : 1, hkv = r >= 3 ? k.shape[r - 3] : 1;
  const int64_t group = std::max<int64_t>(1, hq / std::max<int64_t>(hkv, 1));
  Dims scores_shape = q.shape;
  scores_shape[r - 1] = s;
  const std::vector<int64_t> mask_strides = mask ? broadcast_strides(*mask, scores_shape) : std::vector<int64_t>{};
  const std::vector<int64_t> outer(q.shape.begin(), q.shape.begin() + (r - 2));

  // Tiles: the per-head operands double buffered, the identity for the transposes once.
  TilePool kt_pool = b.pool("k_t", dt, sf, 2), v_pool = b.pool("v", dt, static_cast<uint32_t>(s_chunks) * evf, 2);
  TilePool qt_pool = b.pool("q_t", dt, lq_max, 2);
  TilePool score_pool = b.pool("scores", DType::f32, sf, 2), p_pool = b.pool("p", dt, sf, 2);
  TilePool pt_pool = b.pool("p_t", dt, lq_max, 2), y_pool = b.pool("y", c.out.dtype, evf, 2);
  TilePool stat_pool = b.pool("stats", DType::f32, 2, 3);
  TilePool mask_pool, bias_pool;
  const bool causal = c.attrs.is_causal;
  if (mask) mask_pool = b.pool("mask", mask->dtype, sf, 2);
  if (causal || (mask && mask->dtype == DType::boolean)) bias_pool = b.pool("bias", DType::f32, sf, 2);
  phase(AttentionPhase::values);  // the identity is for the transposes of P
  const Tile ident = b.sbuf(dt, lq_max, 0, "identity");
  {
    const Tile ramp = b.sbuf(DType::f32, lq_max, 0, "ramp");
    b.iota(ramp.ap(), 0.0f, -1.0f);  // i - p
    b.tensor_scalar(AluOp::is_equal, ident.ap(), ramp.ap(), 0.0f);
    b.free(ramp);
  }
  TilePool score_psum = b.pool("scores_psum", DType::f32, score_banks * static_cast<uint32_t>(bank / 4), 1,
                               Memory::psum);
  TilePool pt_psum = b.pool("p_t_psum", DType::f32, lq_max, 2, Memory::psum);
  TilePool out_psum = b.pool("out_psum", DType::f32, evf, 1, Memory::psum);
  const float scale = static_cast<float>(c.attrs.scalar), neg_inf = -std::numeric_limits<float>::infinity();
  const uint32_t moving_max = spec.tensor.moving_free_max;

  // The work items (head, query tile) in order, each's loads emitted one item ahead of its compute and
  // store (pipeline(): a DMA queue runs in order, so the next head's loads must not queue behind this
  // head's store). k^T and v are loaded once per key/value head, the mask once per distinct block
  // (a padding mask [B, 1, 1, S] is the same for every head of a batch).
  struct Item {
    int64_t q_base = 0, k_base = 0, v_base = 0, m_base = 0, o_base = 0, q0 = 0;
    uint16_t lp = 0;
    Tile kt, vt;
    AccessPattern qt, m;
  };
  std::vector<Item> items;
  for_each_index(outer, [&](const std::vector<int64_t>& idx) {
    Item it;
    for (size_t d = 0; d < idx.size(); ++d) {
      const int64_t kv_index = static_cast<int>(d) == r - 3 ? idx[d] / group : idx[d];
      it.q_base += idx[d] * q.strides[d];
      it.k_base += kv_index * k.strides[d];
      it.v_base += kv_index * v.strides[d];
      it.o_base += idx[d] * c.out.strides[d];
      if (mask) it.m_base += idx[d] * mask_strides[d];
    }
    for (int64_t q0 = 0; q0 < l; q0 += lq_max) {
      it.q0 = q0;
      it.lp = static_cast<uint16_t>(std::min<int64_t>(lq_max, l - q0));
      items.push_back(it);
    }
  });
  int64_t loaded_k = -1, loaded_v = -1, loaded_m = -1;
  Tile kt, vt;
  AccessPattern m_loaded;
  const uint16_t ep = static_cast<uint16_t>(e);
  auto load = [&](size_t i) {
    Item& it = items[i];
    // k^T [E, S] and v [S (chunks of partitions), Ev], once per key/value head.
    phase(AttentionPhase::scores);
    if (it.k_base != loaded_k) {
      kt = kt_pool.next();
      b.load(kt.region(0, ep, 0, sf),
             hbm_pattern(c.input_io[1], dt, it.k_base, ep, k.strides[r - 1], {{sf, stride32(k.strides[r - 2])}}));
      loaded_k = it.k_base;
    }
    it.kt = kt;
    it.qt = qt_pool.next().region(0, ep, 0, it.lp);
    b.load(it.qt, hbm_pattern(c.input_io[0], dt, it.q_base + it.q0 * q.strides[r - 2], ep, q.strides[r - 1],
                              {{it.lp, stride32(q.strides[r - 2])}}));
    if (mask) {
      phase(AttentionPhase::mask);
      const int64_t m_offset = it.m_base + it.q0 * mask_strides[r - 2];
      if (m_offset != loaded_m || m_loaded.partition_count != it.lp) {
        m_loaded = mask_pool.next().rows(it.lp);
        b.load(m_loaded, hbm_pattern(c.input_io[3], mask->dtype, m_offset, it.lp, mask_strides[r - 2],
                                     {{sf, stride32(mask_strides[r - 1])}}));
        loaded_m = m_offset;
      }
      it.m = m_loaded;
    }
    if (it.v_base != loaded_v) {
      phase(AttentionPhase::values);
      vt = v_pool.next();
      for (int64_t ch = 0; ch < s_chunks; ++ch) {
        const uint16_t w = static_cast<uint16_t>(std::min<int64_t>(parts, s - ch * parts));
        b.load(vt.region(0, w, static_cast<uint32_t>(ch) * evf, evf),
               hbm_pattern(c.input_io[2], dt, it.v_base + ch * parts * v.strides[r - 2], w, v.strides[r - 2],
                           {{evf, stride32(v.strides[r - 1])}}));
      }
      loaded_v = it.v_base;
    }
    it.vt = vt;
  };
  auto body = [&](size_t i) {
    const Item& it = items[i];
    const uint16_t lp = it.lp;
    const int64_t q0 = it.q0;
    // scores = q k^T, one matmul per PSUM bank of keys, then * scale into SBUF (f32).
    phase(AttentionPhase::scores);
    const Tile sp = score_psum.next();
    for (uint32_t n0 = 0; n0 < sf; n0 += moving_max) {
      const uint32_t nw = std::min(moving_max, sf - n0);
      b.matmul(sp.region(0, lp, n0, nw), it.qt, it.kt.region(0, ep, n0, nw), false);
    }
    const AccessPattern scores = score_pool.next().rows(lp);
    phase(AttentionPhase::scale);
    b.activate(ActFunc::identity, scores, sp.region(0, lp, 0, sf), scale);
    phase(AttentionPhase::mask);
    if (mask) {
      if (mask->dtype == DType::boolean) {
        const AccessPattern bias = bias_pool.next().rows(lp);
        b.tensor_scalar(AluOp::keep_unless, bias, it.m, neg_inf, /*reverse=*/true);  // -inf where false
        b.tensor_tensor(AluOp::add, scores, scores, bias);
      } else {
        b.tensor_tensor(AluOp::add, scores, scores, it.m);
      }
    } else if (causal) {
      // j - i > 0 masks: iota gives j - p - q0 for query q0 + p and key j.
      const AccessPattern bias = bias_pool.next().rows(lp);
      b.iota(bias, static_cast<float>(-q0), -1.0f);
      b.tensor_scalar(AluOp::is_gt, bias, bias, 0.0f);
      b.tensor_scalar(AluOp::keep_if, bias, bias, neg_inf, /*reverse=*/true);  // -inf where masked
      b.tensor_tensor(AluOp::add, scores, scores, bias);
    }
    // The softmax along the keys, in SBUF.
    phase(AttentionPhase::softmax);
    const Tile st = stat_pool.next();
    const AccessPattern row_max = st.column(lp, 0), row_sum = st.column(lp, 1);
    b.reduce(AluOp::max, row_max, scores);
    b.tensor_scalar(AluOp::subtract, scores, scores, row_max);
    b.activate(ActFunc::exp, scores, scores, 1.0f, 0.0f, row_sum);
    b.activate(ActFunc::reciprocal, row_sum, row_sum);
    const Tile p = p_pool.next();
    b.tensor_scalar(AluOp::multiply, p.rows(lp), scores, row_sum);
    // out = P v: per chunk of keys, P^T through the array (P @ I), then accumulate.
    phase(AttentionPhase::values);
    const Tile op = out_psum.next();
    const AccessPattern acc = op.region(0, lp, 0, evf);
    for (int64_t ch = 0; ch < s_chunks; ++ch) {
      const uint16_t w = static_cast<uint16_t>(std::min<int64_t>(parts, s - ch * parts));
      const uint32_t j0 = static_cast<uint32_t>(ch) * parts;
      const Tile tp = pt_psum.next();
      b.matmul(tp.region(0, w, 0, lp), p.region(0, lp, j0, w), ident.region(0, lp, 0, lp), false);
      const AccessPattern pt = pt_pool.next().region(0, w, 0, lp);
      if (ch % 2 == 0) {
        b.copy(pt, tp.region(0, w, 0, lp));  // alternate VectorE and ScalarE for the evacuations
      } else {
        b.activate(ActFunc::identity, pt, tp.region(0, w, 0, lp));
      }
      b.matmul(acc, pt, it.vt.region(0, w, static_cast<uint32_t>(ch) * evf, evf), ch > 0);
    }
    const AccessPattern y = y_pool.next().rows(lp);
    b.activate(ActFunc::identity, y, acc);
    b.store(hbm_pattern(c.out_io, c.out.dtype, it.o_base + q0 * c.out.strides[r - 2], lp, c.out.strides[r - 2],
                        {{evf, stride32(c.out.strides[r - 1])}}),
            y);
  };
  // Every ring above holds two buffers: one item ahead.
  pipeline(items.size(), 1, load, body);
}

}  // namespace sightline::kernels
