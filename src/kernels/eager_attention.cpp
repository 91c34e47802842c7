// scaled_dot_product_attention as one kernel: per batch and head, per tile of up to 128 queries,
//   TensorE  scores[Lq, S] = (q^T)^T @ k^T          q^T [E, Lq] and k^T [E, S] read from their strides
//   ScalarE / VectorE  scores *= scale (evacuating PSUM into an f32 SBUF row per query)
//   VectorE  scores += bias                          additive mask; -inf where a bool mask is false or
//                                                    (is_causal) where key j > query i (GpSimd iota);
//                                                    with a scale of 1, added in the evacuation
//   VectorE / ScalarE  softmax along the free axis   -max, P = exp(scores - max) with the row sum (the
//                                                    max's subtraction is the exp's bias operand)
// Where the mask adds only 0 or -inf (none, bool, causal) and the scale is positive, the scores leave
// PSUM unscaled (with the mask added on the way) and the exp applies the scale: exp(x * scale - max x
// * scale), the same bits as scaling first (rounding is monotonic), one pass of the scores fewer.
// Where an additive mask is finite by how the graph makes it (Llama's causal mask: EagerHooks::
// mask_finite) and the scale a power of two, the Tensor engine adds it (an identity matmul accumulated
// into the scores' PSUM) after q^T is scaled, and the scores never leave PSUM: the max and the exp read
// them there, the same bits with two passes fewer (Placement::mask_on_tensor).
//   TensorE  P^T chunks = P @ I (the transpose through the array), then out[Lq, Ev] += P^T^T @ v
//   ScalarE / VectorE  out = (P v) / sum             evacuating PSUM (times 1 / sum, or divided)
// so the scores and probabilities never leave SBUF/PSUM: the HBM traffic is q, k, v, the mask and the
// output, once each (k and v once per key/value head: query heads of a group reuse them). Numerics
// as the CPU reference up to rounding: scores and softmax in f32, P (the unnormalized exp, in [0, 1])
// rounded to the input dtype, P v accumulated in f32, then normalized (flash attention's order: the
// reference rounds P after the normalization, so a bf16 result differs in its last bits).
// The (head, query tile) items are software-pipelined part by part, so that many small heads cost about
// their busiest engine's work instead of a chain of latencies each, and the steps two or three engines
// can run (the scale's evacuation, the mask, the max's subtraction, the reciprocal, the evacuations of
// P^T and P v) go where the spec's costs balance the engines (build_attention). An item is one or a few
// heads whose element-wise steps are one instruction for all of them, and blocks of items share one
// transfer per operand and one store, which saves engine instructions' and transfers' fixed costs; each
// element is computed as head by head, so the bits do not change.
//
// Limits: E <= 128 (the contraction of q k^T on the partitions), Ev <= 512 (one PSUM bank) and the
// keys of one query tile in PSUM next to the transposes and the output (S <= 2560 on trn2); longer
// sequences would need a tiled (flash) schedule, and the error says to use the eager composition.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "device/cost_model.h"
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
  // The dims before the heads (batch), and each operand's head stride (0 without a head dim).
  const std::vector<int64_t> prefix(q.shape.begin(), q.shape.begin() + std::max(0, r - 3));
  const auto head_stride = [&](const auto& strides) { return r >= 3 ? strides[r - 3] : int64_t{0}; };
  const int64_t q_hs = head_stride(q.strides), k_hs = head_stride(k.strides), v_hs = head_stride(v.strides),
                o_hs = head_stride(c.out.strides), m_hs = mask ? head_stride(mask_strides) : 0;
  // The key/value head query head h reads, as loaded: one for every head where the head dim is broadcast.
  const auto kv_head = [&](int64_t h, int64_t stride) { return stride == 0 ? int64_t{0} : h / group; };

  // The work items (heads, query tile) in order, grouped in blocks of heads that share their loads and
  // their store: a block's q^T [E, heads x Lq], k^T [E, kv heads x S] and v [S, kv heads x Ev] are one
  // transfer each (one access pattern over the heads, cut by dma_split), and its output one store in
  // pieces of heads. A head's transfers alone are a few KiB (ESM-2: 24 x 128 f32, 12 KiB, three pieces
  // of 4 KiB), 12 transfers per head each paying the DMA fixed cost (docs/hardware-model.md §1.4); in
  // blocks of 8 heads, 64 per block. The blocks of one key/value block are its query tiles; the mask is
  // loaded once per distinct block (a padding mask [B, 1, 1, S] is the same for every head of a batch).
  struct QBlock {
    int64_t q_base = 0, o_base = 0;  // the first head's rows of this query tile
    uint32_t heads = 0;
    uint16_t lp = 0;
    Tile qt, y;
  };
  struct KvBlock {
    int64_t k_base = 0, v_base = 0;  // the first key/value head's
    uint32_t k_heads = 0, v_heads = 0;
    Tile kt, vt;
  };
  // An item is one or a few heads of one block (`heads`, side by side in each of its buffers), so that
  // the steps that treat every score alike (the scale's evacuation, the mask, P^T's evacuation, the
  // reciprocal) are one instruction for all of them: an engine instruction's fixed cost (about 160
  // cycles) is most of its time on a head of 128 keys.
  struct Item {
    size_t index = 0;            // its place in the kernel's items
    int64_t m_base = 0, q0 = 0;  // the mask's (the same for every head of an item)
    size_t qb = 0, kvb = 0;      // its blocks
    uint32_t heads = 1;
    uint32_t jq = 0;             // its first head's place in the query block: q^T's and the output's
    std::vector<uint32_t> jk, jv;  // per head, its key/value head's place in the key/value block
    uint32_t v_heads = 1;          // its key/value block's heads of v (v's columns: chunk, head)
    uint16_t lp = 0;
    Tile kt, vt, qt;  // the blocks' buffers
    AccessPattern m;
    // The buffers the body's parts write (taken from their rings in emit_part), which later parts read.
    Tile sp, scores, bias, stats, p, op, y;
    bool build_bias = true;  // false where an earlier item built the causal bias of this query tile
    std::vector<std::pair<Tile, Tile>> transposes;  // per chunk of keys: P^T in PSUM, then in SBUF
  };
  std::vector<Item> items;
  std::vector<QBlock> qblocks;
  std::vector<KvBlock> kvblocks;
  // The items for blocks of up to `heads_per_block` heads, items of up to `heads_per_item`.
  const auto build_items = [&](int64_t heads_per_block, int64_t heads_per_item) {
    items.clear();
    qblocks.clear();
    kvblocks.clear();
    for_each_index(prefix, [&](const std::vector<int64_t>& idx) {
      int64_t q_pre = 0, k_pre = 0, v_pre = 0, o_pre = 0, m_pre = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        q_pre += idx[d] * q.strides[d];
        k_pre += idx[d] * k.strides[d];
        v_pre += idx[d] * v.strides[d];
        o_pre += idx[d] * c.out.strides[d];
        if (mask) m_pre += idx[d] * mask_strides[d];
      }
      for (int64_t h0 = 0, n = 0; h0 < hq; h0 += n) {
        n = std::min(heads_per_block, hq - h0);
        KvBlock kb;
        kb.k_base = k_pre + kv_head(h0, k_hs) * k_hs;
        kb.v_base = v_pre + kv_head(h0, v_hs) * v_hs;
        kb.k_heads = static_cast<uint32_t>(kv_head(h0 + n - 1, k_hs) - kv_head(h0, k_hs) + 1);
        kb.v_heads = static_cast<uint32_t>(kv_head(h0 + n - 1, v_hs) - kv_head(h0, v_hs) + 1);
        // Heads of one group in blocks of their own (blocks of one head) share the previous block's.
        const bool same = !kvblocks.empty() && kvblocks.back().k_base == kb.k_base &&
                          kvblocks.back().v_base == kb.v_base && kvblocks.back().k_heads == kb.k_heads &&
                          kvblocks.back().v_heads == kb.v_heads;
        if (!same) kvblocks.push_back(kb);
        for (int64_t q0 = 0; q0 < l; q0 += lq_max) {
          QBlock qb;
          qb.q_base = q_pre + h0 * q_hs + q0 * q.strides[r - 2];
          qb.o_base = o_pre + h0 * o_hs + q0 * c.out.strides[r - 2];
          qb.heads = static_cast<uint32_t>(n);
          qb.lp = static_cast<uint16_t>(std::min<int64_t>(lq_max, l - q0));
          qblocks.push_back(qb);
          for (int64_t j = 0; j < n; j += heads_per_item) {
            Item it;
            it.index = items.size();
            it.m_base = m_pre + (h0 + j) * m_hs;
            it.q0 = q0;
            it.lp = qb.lp;
            it.qb = qblocks.size() - 1;
            it.kvb = kvblocks.size() - 1;
            it.heads = static_cast<uint32_t>(std::min(heads_per_item, n - j));
            it.jq = static_cast<uint32_t>(j);
            for (int64_t h = h0 + j; h < h0 + j + it.heads; ++h) {
              it.jk.push_back(static_cast<uint32_t>(kv_head(h, k_hs) - kv_head(h0, k_hs)));
              it.jv.push_back(static_cast<uint32_t>(kv_head(h, v_hs) - kv_head(h0, v_hs)));
            }
            it.v_heads = kvblocks.back().v_heads;
            items.push_back(it);
          }
        }
      }
    });
  };

  // One item's body is a chain of parts, each on one engine (or one of two, placed below):
  //   scores (Tensor) | scale (Scalar or Vector; Vector with the mask where the scale is 1) |
  //   mask (Vector or GpSimd) | -row max (Vector) | its scaling (Vector or GpSimd, where the exp scales) |
  //   exp with the row sum (Scalar; the max's subtraction is its bias) | 1 / sum (Scalar or GpSimd, for a
  //   Scalar evacuation of P v) |
  //   P^T (Tensor; evacuated by Vector or Scalar) | P v (Tensor, a stage later: not waiting for P^T) |
  //   evacuate P v normalized (Scalar: times 1 / sum; Vector: divided by the sum) and store (DMA)
  // Every engine runs its stream in order, so a body emitted whole keeps each engine waiting on the
  // others along the item's chain, and the items ran one after another at the chain's latency (ESM-2's
  // 20 heads of 24 over 128 keys: 2.4 us each, about twice their busiest engine's work). Each part is
  // a stage of its own, emitted one item apart (pipeline_staged()): while the Scalar engine
  // exponentiates one item, the Vector engine takes the next one's row max and the Tensor engine an
  // earlier one's P v. The loads run `ahead` items in front. The rings (allocate_rings) grow with the
  // stages their values span; where they do not fit, the body is one stage, one item behind its loads.
  // The period of items over which the evacuations of P^T are shared out (Placement::evac_on_scalar).
  constexpr size_t kEvacPeriod = 6;
  enum Part : int { kScores, kScale, kMask, kMax, kBias, kExp, kNormalize, kTranspose, kValues, kOut, kParts };
  struct Schedule {
    size_t ahead = 1;
    bool staged = false;  // every part a stage of its own; else the whole body is one stage
  };
  // Where the scores stay in PSUM (Placement::mask_on_tensor) the scale's and the mask's parts emit
  // nothing and take no stage of their own: the max, the part after them, reads the scores a stage
  // after the matmuls that made them, so that their PSUM buffers are held no longer than that.
  bool scores_in_psum = false;
  const auto stage_in = [](bool in_psum, int part) {
    const int skipped = in_psum ? (part > kScale) + (part > kMask) : 0;
    return static_cast<size_t>(part - skipped);
  };
  const auto stage_of = [&](const Schedule& sc, int part) { return sc.staged ? stage_in(scores_in_psum, part) : 0; };
  // The deepest schedule first (allocate_rings below), down to the whole body one item behind its loads.
  const std::vector<Schedule> schedules = {{4, true}, {2, true}, {1, true}, {1, false}};

  // Heads per item: the fewest that leave at most kParts items per query tile of a batch's heads. The
  // staged pipeline works on kParts items at once, so smaller items than that add no overlap, only the
  // fixed cost of their instructions, and larger ones leave its stages idle (ESM-2's 20 heads of 24
  // over 128 tokens: items of 2 heads; 4 were slower, their chain as long as the run of the pipeline).
  // At most as many as one PSUM bank holds of their scores, transposes and outputs (a matmul writes
  // within one bank), and one where the heads add different masks.
  const uint64_t bank_elements = bank / 4;
  const int64_t bank_heads = static_cast<int64_t>(bank_elements / std::max<uint64_t>({sf, lq_max, evf}));
  int64_t item_heads = m_hs != 0 ? 1 : std::clamp<int64_t>((hq + kParts - 1) / kParts, 1, std::max<int64_t>(1, bank_heads));
  // Heads per block: as many items as the loads run ahead of the deepest schedule, so that a block loads
  // while the one before it computes and the first item waits for one block's loads only (blocks of
  // all 20 heads made it wait about 3 us on ESM-2). Smaller where the rings do not fit (allocate_rings).
  int64_t block_heads = std::min<int64_t>(hq, static_cast<int64_t>(schedules.front().ahead) * item_heads);
  build_items(block_heads, item_heads);
  const bool causal = c.attrs.is_causal;
  const bool with_bias = causal || (mask && mask->dtype == DType::boolean);
  // The causal bias depends only on the query tile: built once per tile where a buffer for each fits
  // (allocate_rings), and reused by every head.
  const bool causal_bias = causal && !mask;
  const size_t query_tiles = static_cast<size_t>((l + lq_max - 1) / lq_max);
  bool bias_per_tile = false;
  const float scale = static_cast<float>(c.attrs.scalar), neg_inf = -std::numeric_limits<float>::infinity();
  // The exp applies the scale where the mask adds 0 or -inf only (none, bool, causal: they commute with a
  // positive scale) and the scale is positive (the max of the scaled scores is the scaled max): the scores
  // leave PSUM unscaled, with the mask added on the way.
  const bool scale_in_exp = scale > 0.0f && std::isfinite(scale) && !(mask && mask->dtype != DType::boolean);
  const bool bias_placed = scale_in_exp && scale != 1.0f;  // the maxima's scaling (kBias) is an instruction
  // The mask on the Tensor engine (Placement::mask_on_tensor): an additive mask of the operands' dtype
  // that the graph makes finite (EagerHooks::mask_finite) is accumulated into the scores' PSUM through
  // the identity (I^T m = m, every other product 0 times a finite element), q^T scaled first where the
  // scale is not 1, so the scores never leave PSUM: the max and the exp read them there, and neither the
  // scale's evacuation nor the mask's add is an engine pass. Only where the scale is a power of two:
  // q x s is then exact in q's dtype (whose exponent range is f32's; a subnormal q aside), every product
  // and partial sum of (q s) k^T is s times q k^T's, and PSUM adds the mask as the evacuation did
  // (s x qk + m, rounded once): the same bits.
  const bool mask_can_go_on_tensor = [&] {
    if (!mask || mask->dtype != dt || !c.hooks || !c.hooks->mask_finite) return false;
    int exponent = 0;
    return scale > 0.0f && std::isfinite(scale) && std::frexp(scale, &exponent) == 0.5f;
  }();
  const uint32_t moving_max = spec.tensor.moving_free_max;
  const uint16_t ep = static_cast<uint16_t>(e);

  // Where the parts that several engines can run go (chosen below). GpSimd's tensor_tensor /
  // tensor_scalar are the Vector engine's ALU (the same bits); an activation and a Vector copy or
  // multiply differ only on -0 (x * s + 0 gives +0, a multiply keeps -0: the values compare equal),
  // and 1 / sum then a multiply differs from a division in the last bit, within the tests' tolerances.
  struct Placement {
    Engine mask = Engine::vector, bias = Engine::vector;  // bias: the scaling of -max (kBias)
    Engine scale = Engine::scalar;  // the scores' evacuation: an activation, or a Vector multiply
    // With a scale of 1 the evacuation can add the mask (or the bias) on its way out of PSUM (Vector).
    bool mask_in_evacuation = false;
    // The normalization is deferred to the output's evacuation: P v's rows times 1 / sum on the Scalar
    // engine (the reciprocal on Scalar or GpSimd), or divided by the sum on the Vector engine.
    Engine out = Engine::scalar, reciprocal = Engine::scalar;
    // How many of every kEvacPeriod items' s_chunks evacuations of P^T each, spread evenly over the
    // items' chunks in order: a share finer than a whole item's (one chunk of 128 keys), so that the
    // Vector and Scalar engines can split the evacuations of items that have only one.
    int64_t evac_on_scalar = 0;
    bool mask_on_tensor = false;  // the mask added in PSUM, the scores read there (mask_can_go_on_tensor)
  };
  const int64_t evacuations = static_cast<int64_t>(kEvacPeriod) * s_chunks;  // of every kEvacPeriod items
  const auto evac_on_scalar = [&](const Placement& pl, size_t item, int64_t ch) {
    const int64_t j = static_cast<int64_t>(item % kEvacPeriod) * s_chunks + ch;
    return (j + 1) * pl.evac_on_scalar / evacuations > j * pl.evac_on_scalar / evacuations;
  };

  // The instructions of part `which` of item `it` from its buffers: what the kernel emits, and what
  // the placement costs. The output's store (the builder splits it) is emitted after part kOut's.
  using device::Instruction;
  Tile ident;
  // The mask's steps before its add (on the mask's engine) and what the scores add: an additive mask
  // as loaded; a bool one (true = attend) and the causal mask become an f32 bias of -inf where the
  // mask says no (iota gives j - p - q0 for query q0 + p and key j).
  const auto mask_addend = [&](std::vector<Instruction>& out, const Item& it, const Placement& pl) {
    const uint16_t lp = it.lp;
    if (mask && mask->dtype != DType::boolean) return it.m;
    const AccessPattern bias = it.bias.rows(lp);
    if (!it.build_bias) return bias;
    if (mask) {
      out.push_back(device::tensor_scalar(AluOp::keep_unless, bias, it.m, neg_inf, /*reverse=*/true, pl.mask));
    } else {
      out.push_back(device::iota(bias, static_cast<float>(-it.q0), -1.0f));
      out.push_back(device::tensor_scalar(AluOp::is_gt, bias, bias, 0.0f, false, pl.mask));  // j - i > 0
      out.push_back(device::tensor_scalar(AluOp::keep_if, bias, bias, neg_inf, /*reverse=*/true, pl.mask));
    }
    return bias;
  };
  // `ap` (one head's [p, n], one free dim) read once per head of `heads`: the same mask for each.
  const auto over_heads = [](AccessPattern ap, uint32_t heads) {
    SIGHTLINE_ASSERT(ap.dim_count == 1);
    if (heads == 1) return ap;
    ap.dims[1] = ap.dims[0];
    ap.dims[0] = device::FreeDim{heads, 0};
    ap.dim_count = 2;
    return ap;
  };
  auto part_instructions = [&](int which, const Item& it, const Placement& pl) {
    const uint16_t lp = it.lp;
    const uint32_t g = it.heads;
    // Head h's keys of the scores (PSUM: `it.sp`) or of an SBUF row tile; all heads' scores at once.
    const auto keys = [&](const Tile& t, uint32_t h) { return t.region(0, lp, h * sf, sf); };
    const auto all_scores = [&] { return it.scores.region(0, lp, 0, g * sf); };
    // stats: g exp biases (-max, times the scale where the exp applies it), then g row sums.
    const auto sum_of = [&](uint32_t h) { return it.stats.column(lp, g + h); };
    std::vector<Instruction> out;
    switch (which) {
      case kScores:  // scores = q k^T, one matmul per PSUM bank of keys (+ the mask, on the Tensor engine)
        if (pl.mask_on_tensor && scale != 1.0f) {  // the item's q^T times the scale, in place
          const AccessPattern qt = it.qt.region(0, ep, it.jq * lp, g * lp);
          out.push_back(device::tensor_scalar(AluOp::multiply, qt, qt, scale, false, Engine::gpsimd));
        }
        for (uint32_t h = 0; h < g; ++h) {
          const AccessPattern qt = it.qt.region(0, ep, (it.jq + h) * lp, lp);
          for (uint32_t n0 = 0; n0 < sf; n0 += moving_max) {
            const uint32_t nw = std::min(moving_max, sf - n0);
            const AccessPattern scores = it.sp.region(0, lp, h * sf + n0, nw);
            out.push_back(device::matmul(scores, qt, it.kt.region(0, ep, it.jk[h] * sf + n0, nw), false));
            if (pl.mask_on_tensor) {
              AccessPattern m = it.m;  // [lp, sf] from partition 0: its keys n0 .. n0 + nw
              m.offset += uint64_t{n0} * dtype_size(m.dtype);
              m.dims[0].size = nw;
              out.push_back(device::matmul(scores, ident.region(0, lp, 0, lp), m, true));
            }
          }
        }
        break;
      case kScale: {  // * scale into SBUF (f32) unless the exp applies it; + the mask on the way where it can
        if (pl.mask_on_tensor) break;
        const AccessPattern raw = it.sp.region(0, lp, 0, g * sf);
        const float by = scale_in_exp ? 1.0f : scale;
        if (pl.mask_in_evacuation) {
          const AccessPattern addend = mask_addend(out, it, pl);
          out.push_back(device::tensor_tensor(AluOp::add, all_scores(), raw, over_heads(addend, g)));
        } else if (pl.scale == Engine::scalar) {
          out.push_back(device::activate(ActFunc::identity, all_scores(), raw, by));
        } else if (by == 1.0f) {
          out.push_back(device::tensor_copy(all_scores(), raw));
        } else {
          out.push_back(device::tensor_scalar(AluOp::multiply, all_scores(), raw, by));
        }
        break;
      }
      case kMask:
        if ((mask || causal) && !pl.mask_in_evacuation && !pl.mask_on_tensor) {
          const AccessPattern addend = mask_addend(out, it, pl);
          out.push_back(
              device::tensor_tensor(AluOp::add, all_scores(), all_scores(), over_heads(addend, g), pl.mask));
        }
        break;
      case kMax: {  // the softmax along the keys, in SBUF: every head's -max at once, the exps' biases
        AccessPattern heads = pl.mask_on_tensor ? it.sp.region(0, lp, 0, g * sf) : all_scores();
        heads.dims[0] = device::FreeDim{g, static_cast<int32_t>(sf)};
        heads.dims[1] = device::FreeDim{sf, 1};
        heads.dim_count = 2;
        out.push_back(device::tensor_reduce(AluOp::max, it.stats.region(0, lp, 0, g), heads, /*negate=*/true));
        break;
      }
      case kBias:  // -max x scale, every head at once, where the exp applies the scale
        if (bias_placed) {
          const AccessPattern biases = it.stats.region(0, lp, 0, g);
          out.push_back(device::tensor_scalar(AluOp::multiply, biases, biases, scale, false, pl.bias));
        }
        break;
      case kExp:  // P = exp(scores x scale - max), unnormalized, in the input dtype; the row sum beside it
        for (uint32_t h = 0; h < g; ++h) {
          Instruction exp = device::activate(ActFunc::exp, keys(it.p, h), keys(pl.mask_on_tensor ? it.sp : it.scores, h),
                                             scale_in_exp ? scale : 1.0f, it.stats.column(lp, h));
          exp.aux = sum_of(h);
          out.push_back(exp);
        }
        break;
      case kNormalize: {  // 1 / sum, for the Scalar engine's evacuation of P v (the Vector one divides)
        const AccessPattern sums = it.stats.region(0, lp, g, g);
        if (pl.out != Engine::scalar) break;
        out.push_back(pl.reciprocal == Engine::scalar
                          ? device::activate(ActFunc::reciprocal, sums, sums)
                          : device::tensor_scalar(AluOp::divide, sums, sums, 1.0f, /*reverse=*/true, pl.reciprocal));
        break;
      }
      case kTranspose:  // per chunk of keys, P^T through the array (P @ I), evacuated to SBUF
        for (int64_t ch = 0; ch < s_chunks; ++ch) {
          const uint16_t w = static_cast<uint16_t>(std::min<int64_t>(parts, s - ch * parts));
          const Tile& tp = it.transposes[static_cast<size_t>(ch)].first;
          const Tile& pt = it.transposes[static_cast<size_t>(ch)].second;
          for (uint32_t h = 0; h < g; ++h) {
            out.push_back(device::matmul(tp.region(0, w, h * lp, lp),
                                         it.p.region(0, lp, h * sf + static_cast<uint32_t>(ch) * parts, w),
                                         ident.region(0, lp, 0, lp), false));
          }
          const AccessPattern from = tp.region(0, w, 0, g * lp), to = pt.region(0, w, 0, g * lp);
          out.push_back(evac_on_scalar(pl, it.index, ch) ? device::activate(ActFunc::identity, to, from)
                                               : device::tensor_copy(to, from));
        }
        break;
      case kValues:  // out = P v, accumulated over the chunks of keys
        for (uint32_t h = 0; h < g; ++h) {
          for (int64_t ch = 0; ch < s_chunks; ++ch) {
            const uint16_t w = static_cast<uint16_t>(std::min<int64_t>(parts, s - ch * parts));
            const AccessPattern pt = it.transposes[static_cast<size_t>(ch)].second.region(0, w, h * lp, lp);
            const uint32_t column = (static_cast<uint32_t>(ch) * it.v_heads + it.jv[h]) * evf;
            out.push_back(device::matmul(it.op.region(0, lp, h * evf, evf), pt, it.vt.region(0, w, column, evf),
                                         ch > 0));
          }
        }
        break;
      case kOut:  // evacuate P v, normalized: times 1 / sum (Scalar) or divided by the sum (Vector)
        if (pl.out != Engine::scalar && g > 1) {
          // Every head's rows divided by its sum at once: the sums read once per output column.
          AccessPattern sums = it.stats.region(0, lp, g, g);
          sums.dims[1] = device::FreeDim{evf, 0};
          sums.dim_count = 2;
          out.push_back(device::tensor_tensor(AluOp::divide, it.y.region(0, lp, it.jq * evf, g * evf),
                                              it.op.region(0, lp, 0, g * evf), sums));
          break;
        }
        for (uint32_t h = 0; h < g; ++h) {
          const AccessPattern pv = it.op.region(0, lp, h * evf, evf);
          const AccessPattern y = it.y.region(0, lp, (it.jq + h) * evf, evf);  // its head's columns of the block
          if (pl.out == Engine::scalar) {
            Instruction evacuate = device::activate(ActFunc::identity, y, pv);
            evacuate.src1 = sum_of(h);  // the per-partition scale: the reciprocal of kNormalize
            out.push_back(evacuate);
          } else {
            out.push_back(device::tensor_scalar(AluOp::divide, y, pv, sum_of(h)));
          }
        }
        break;
      default: break;
    }
    return out;
  };

  // The placement by the spec's costs (device::compute_instruction_ns), of one full item's parts: the
  // one whose items end first when run through the staged pipeline (`cost` below). The previous kernel's
  // placement (the mask and the max's scaling on the Vector engine, the evacuations of the scores and of
  // P v and the reciprocal on the Scalar engine, P^T's evacuations alternating) wins ties.
  const Placement first_placement{.evac_on_scalar = static_cast<int64_t>(kEvacPeriod) * (s_chunks / 2)};
  Placement place = first_placement;
  // Sets `place` for the items as they are (item_heads); returns its cost.
  const auto search = [&] {
    const uint16_t lp = static_cast<uint16_t>(lq_max);
    const auto tile = [&](Memory memory, DType tile_dtype, uint16_t p, uint32_t elements) {
      return Tile{memory, tile_dtype, p, 0, elements, 0};
    };
    Item probe;  // an item of the first grouping's heads
    const uint32_t g = static_cast<uint32_t>(item_heads);
    probe.lp = lp;
    probe.heads = g;
    probe.jk.assign(g, 0);
    probe.jv.assign(g, 0);
    probe.build_bias = !causal_bias;  // built once per query tile where the buffers fit, not per head
    probe.kt = tile(Memory::sbuf, dt, ep, sf);
    probe.vt = tile(Memory::sbuf, dt, parts, static_cast<uint32_t>(s_chunks) * evf);
    probe.qt = tile(Memory::sbuf, dt, ep, g * lp);
    if (mask) probe.m = tile(Memory::sbuf, mask->dtype, lp, sf).ap();
    probe.sp = tile(Memory::psum, DType::f32, lp, g * sf);
    probe.scores = tile(Memory::sbuf, DType::f32, lp, g * sf);
    probe.bias = tile(Memory::sbuf, DType::f32, lp, sf);
    probe.stats = tile(Memory::sbuf, DType::f32, lp, 2 * g);
    probe.p = tile(Memory::sbuf, dt, lp, g * sf);
    probe.op = tile(Memory::psum, DType::f32, lp, g * evf);
    probe.y = tile(Memory::sbuf, c.out.dtype, lp, g * evf);
    probe.transposes.assign(static_cast<size_t>(s_chunks), {tile(Memory::psum, DType::f32, parts, g * lp),
                                                            tile(Memory::sbuf, dt, parts, g * lp)});
    ident = tile(Memory::sbuf, dt, parts, lp);
    // The staged pipeline as the engines run it (pipeline_staged's order: at step t, part p of item t - p):
    // each engine in program order, each part after the item's part before it. A sum of the busiest
    // engine's work per item missed the chain: it put the mask's add in the scores' evacuation on ESM-2,
    // where that chain (evacuation, then the max, on the Vector engine) made the kernel longer.
    const auto cost = [&](const Placement& pl) {
      // Per item of a period (the evacuations of P^T differ among them), per part: (engine, ns) in order.
      // A share in whole chunks per item (a multiple of kEvacPeriod) gives every item the same chain.
      std::array<std::array<std::vector<std::pair<size_t, double>>, kParts>, kEvacPeriod> chains;
      const size_t periods = pl.evac_on_scalar % static_cast<int64_t>(kEvacPeriod) == 0 ? 1 : kEvacPeriod;
      for (size_t period = 0; period < periods; ++period) {
        probe.index = period;
        for (int which = 0; which < kParts; ++which) {
          for (const Instruction& in : part_instructions(which, probe, pl)) {
            chains[period][static_cast<size_t>(which)].emplace_back(static_cast<size_t>(in.engine()),
                                                               device::compute_instruction_ns(spec, in));
          }
        }
      }
      const size_t n = items.size();
      std::array<double, device::kEngineCount> engine_free{};
      std::vector<double> done(n, 0.0);  // per item, the end of its latest part
      double end = 0;
      for (size_t step = 0; step + 1 < n + kParts; ++step) {
        for (size_t part = 0; part < kParts; ++part) {
          const size_t stage = stage_in(pl.mask_on_tensor, static_cast<int>(part));
          if (stage > step) break;
          const size_t i = step - stage;
          if (i >= n) continue;
          for (const auto& [engine, ns] : chains[i % periods][part]) {
            done[i] = engine_free[engine] = std::max(engine_free[engine], done[i]) + ns;
          }
          end = std::max(end, done[i]);
        }
      }
      return end;
    };
    double best = cost(place);
    // The mask can join the evacuation only where nothing scales between them (a graph that scaled q, or
    // the exp applies the scale).
    const bool can_fuse_mask = (mask || causal) && (scale == 1.0f || scale_in_exp);
    // Where the maxima's scaling is no instruction, its engine is no choice (the first wins the tie).
    for (const Engine mask_on : {Engine::vector, Engine::gpsimd}) {
      for (const Engine bias_on : {Engine::vector, Engine::gpsimd}) {
        if (!bias_placed && bias_on != Engine::vector) continue;
        for (const Engine scale_on : {Engine::scalar, Engine::vector}) {
          for (const bool fuse : {false, true}) {
            if (fuse && (!can_fuse_mask || scale_on != Engine::vector)) continue;
            for (const Engine out_on : {Engine::scalar, Engine::vector}) {
              for (const Engine reciprocal_on : {Engine::scalar, Engine::gpsimd}) {
                if (out_on == Engine::vector && reciprocal_on != Engine::scalar) continue;  // none to place
                for (int64_t on_scalar = 0; on_scalar <= evacuations; ++on_scalar) {
                  for (const bool on_tensor : {false, true}) {
                    // On the Tensor engine the mask, the scale and their engines are no choice.
                    if (on_tensor && (!mask_can_go_on_tensor || mask_on != Engine::vector ||
                                      scale_on != Engine::scalar || fuse))
                      continue;
                    // A share of P^T's evacuations finer than whole items' chunks only with the scores in
                    // PSUM, where the Vector engine is left every PSUM read but the exps (the max, P^T, P v)
                    // and needs it: Llama small bf16 at batch 4 928.9 -> 912.6 us. Elsewhere the kernel's
                    // cost gained about 1% with it on ESM-2 t12, whose program then ran 0.3% longer (960.8
                    // -> 963.6 us): the Scalar engine busier at the kernel's end, where the next starts.
                    if (!on_tensor && on_scalar % static_cast<int64_t>(kEvacPeriod) != 0) continue;
                    const Placement pl{mask_on, bias_on, scale_on, fuse, out_on, reciprocal_on, on_scalar, on_tensor};
                    if (const double ns = cost(pl); ns < best) best = ns, place = pl;
                  }
                }
              }
            }
          }
        }
      }
    }
    return best;
  };
  double placed_ns = search();
  // With the scores in PSUM, items of more heads (up to a PSUM bank of each of their buffers) where that
  // costs less: the max and the evacuations of P^T and of P v, each one instruction for all of an item's
  // heads, then fill the Vector engine, not the exps (Llama small bf16 at batch 4: items of 4 heads
  // instead of 2, 905.6 against 912.6 us). Only there: tried on every kernel, the larger items won by
  // the kernel's cost on some whose program got slower (the decoder block 400.2 -> 402.7 us; t33_650M
  // 9661.4 -> 9640.5 the other way): the kernel's cost does not see the kernels around it.
  for (int64_t heads = item_heads * 2; place.mask_on_tensor && m_hs == 0 && heads <= std::min<int64_t>(hq, bank_heads); heads *= 2) {
    const Placement kept = place;
    const int64_t kept_item = item_heads, kept_block = block_heads;
    item_heads = heads;
    block_heads = std::min<int64_t>(hq, static_cast<int64_t>(schedules.front().ahead) * item_heads);
    build_items(block_heads, item_heads);
    place = first_placement;
    if (const double ns = search(); ns < placed_ns) {
      placed_ns = ns;
      continue;
    }
    place = kept;
    item_heads = kept_item;
    block_heads = kept_block;
    build_items(block_heads, item_heads);
    break;
  }

  scores_in_psum = place.mask_on_tensor;
  ident = b.sbuf(dt, lq_max, 0, "identity");
  // The rings of schedule `sc`, or false (nothing left allocated) when they do not fit. A ring holds at
  // least one buffer per stage its value spans: item i + 1's first part is emitted before item i's later
  // ones, so a shorter ring would hand item i the next item's data (the loads: `ahead` more). The SBUF
  // rings and the PSUM ones where the banks allow have one buffer more, so that a part does not wait for
  // the buffer a later stage of an earlier item still reads.
  TilePool kt_pool, v_pool, qt_pool, score_pool, p_pool, pt_pool, y_pool, stat_pool, mask_pool, bias_pool;
  TilePool score_psum, pt_psum, out_psum, ramp;
  auto allocate_rings = [&](const Schedule& sc, bool last) {
    const auto span = [&](int from, int to) { return stage_of(sc, to) - stage_of(sc, from) + 1; };
    const auto loaded = [&](int reader) { return sc.ahead + stage_of(sc, reader) + 1; };
    // A ring of blocks read by part `reader`: as many buffers as the most blocks among the items whose
    // loads are emitted and whose reader is not (loaded(reader) in a row; block ids count up), and one
    // more so that a block's load does not wait for the last reader of the one before it.
    const auto block_ring = [&](int reader, size_t Item::*block) {
      const size_t window = loaded(reader);
      if (block_heads == 1) return window;
      size_t most = 1;
      for (size_t i = 0; i < items.size(); ++i) {
        const size_t first = i + 1 >= window ? i + 1 - window : 0;
        most = std::max(most, items[i].*block - items[first].*block + 1);
      }
      return most + 1;
    };
    uint32_t q_heads = 1, k_heads = 1, v_heads = 1;
    for (const QBlock& qb : qblocks) q_heads = std::max(q_heads, qb.heads);
    for (const KvBlock& kb : kvblocks) k_heads = std::max(k_heads, kb.k_heads), v_heads = std::max(v_heads, kb.v_heads);
    const uint32_t g = static_cast<uint32_t>(item_heads);
    const uint32_t item_score_banks = banks_for(uint64_t(g) * sf * 4, bank);
    const uint32_t out_banks = banks_for(uint64_t(g) * evf * 4, bank);
    const auto psum_banks = [&](size_t score_ring, size_t out_ring) {
      return score_ring * item_score_banks + 2 + out_ring * out_banks;
    };
    size_t score_ring = span(kScores, place.mask_on_tensor ? kExp : kScale), out_ring = span(kValues, kOut);
    if (psum_banks(score_ring, out_ring) > spec.psum_banks) {
      SIGHTLINE_ASSERT(!last);  // one buffer of each: need_banks above
      return false;
    }
    if (psum_banks(score_ring + 1, out_ring) <= spec.psum_banks) ++score_ring;
    if (psum_banks(score_ring, out_ring + 1) <= spec.psum_banks) ++out_ring;
    std::vector<TilePool*> made;
    try {
      const auto make = [&](TilePool& pool, std::string_view pool_name, DType pool_dtype, uint32_t elements,
                            size_t count) {
        pool = b.pool(pool_name, pool_dtype, elements, count);
        made.push_back(&pool);
      };
      make(kt_pool, "k_t", dt, k_heads * sf, block_ring(kScores, &Item::kvb));
      make(v_pool, "v", dt, static_cast<uint32_t>(s_chunks) * v_heads * evf, block_ring(kValues, &Item::kvb));
      make(qt_pool, "q_t", dt, q_heads * lq_max, block_ring(kScores, &Item::qb));
      if (!place.mask_on_tensor) make(score_pool, "scores", DType::f32, g * sf, span(kScale, kExp) + 1);
      make(p_pool, "p", dt, g * sf, span(kExp, kTranspose) + 1);
      // P v reads every chunk of P^T after the last one's transpose: a buffer per chunk per stage P^T
      // spans, and one set more.
      make(pt_pool, "p_t", dt, g * lq_max, static_cast<size_t>(s_chunks) * (span(kTranspose, kValues) + 1));
      // Staged, two more outputs: the next items' results do not wait for a store's fixed cost. A block's
      // output is written by its items one after another and stored once: two more blocks.
      make(y_pool, "y", c.out.dtype, q_heads * evf,
           block_heads == 1 ? span(kOut, kOut) + 1 + (sc.staged ? 2 : 0) : 3);
      make(stat_pool, "stats", DType::f32, 2 * g, std::max<size_t>(3, span(kMax, kOut) + 1));
      if (mask) make(mask_pool, "mask", mask->dtype, sf, loaded(kMask));
      if (causal_bias) {
        try {
          bias_pool = b.pool("bias", DType::f32, sf, query_tiles);
          bias_per_tile = true;
        } catch (const Error&) {
          bias_per_tile = false;
        }
      }
      if (with_bias && !bias_per_tile) make(bias_pool, "bias", DType::f32, sf, 2);
      if (bias_per_tile) made.push_back(&bias_pool);
      // The identity's ramp last: a ring in its place would wait for the identity to be built.
      make(ramp, "ramp", DType::f32, lq_max, 1);
    } catch (const Error&) {
      if (last) throw;  // the kernel's own minimum: the builder's overflow error names what is short
      for (TilePool* pool : made) b.free(*pool);
      return false;
    }
    score_psum = b.pool("scores_psum", DType::f32, item_score_banks * static_cast<uint32_t>(bank / 4), score_ring,
                        Memory::psum);
    pt_psum = b.pool("p_t_psum", DType::f32, g * lq_max, 2, Memory::psum);
    out_psum = b.pool("out_psum", DType::f32, g * evf, out_ring, Memory::psum);
    return true;
  };
  // The deepest schedule whose rings fit, down to the whole body one item behind its loads; blocks of
  // several heads only staged (a body in one stage waits on its chain's latency, which costs more than
  // the transfers the blocks save), else blocks of half as many heads.
  Schedule sched;
  for (bool placed = false; !placed;) {
    for (size_t i = 0; i < schedules.size() && !placed; ++i) {
      if (block_heads > 1 && !schedules[i].staged) break;
      if (allocate_rings(schedules[i], block_heads == 1 && i + 1 == schedules.size())) {
        sched = schedules[i];
        placed = true;
      }
    }
    if (placed) break;
    block_heads = std::max<int64_t>(1, block_heads / 2);
    item_heads = std::min(item_heads, block_heads);
    build_items(block_heads, item_heads);
  }
  phase(AttentionPhase::values);  // the identity is for the transposes of P
  b.iota(ramp.at(0).ap(), 0.0f, -1.0f);  // i - p
  b.tensor_scalar(AluOp::is_equal, ident.ap(), ramp.at(0).ap(), 0.0f);
  b.free(ramp);

  size_t loaded_kv = SIZE_MAX, loaded_q = SIZE_MAX;
  int64_t loaded_m = -1;
  AccessPattern m_loaded;
  auto load = [&](size_t i) {
    Item& it = items[i];
    KvBlock& kb = kvblocks[it.kvb];
    QBlock& qb = qblocks[it.qb];
    // k^T [E, kv heads x S] and v [S (chunks of partitions), chunks x kv heads x Ev], once per key/value
    // block; q^T [E, heads x Lq] once per block of query tiles.
    phase(AttentionPhase::scores);
    if (it.kvb != loaded_kv) {
      kb.kt = kt_pool.next();
      b.load(kb.kt.region(0, ep, 0, kb.k_heads * sf),
             hbm_pattern(c.input_io[1], dt, kb.k_base, ep, k.strides[r - 1],
                         {{kb.k_heads, stride32(k_hs)}, {sf, stride32(k.strides[r - 2])}}));
    }
    it.kt = kb.kt;
    if (it.qb != loaded_q) {
      qb.qt = qt_pool.next();
      b.load(qb.qt.region(0, ep, 0, qb.heads * qb.lp),
             hbm_pattern(c.input_io[0], dt, qb.q_base, ep, q.strides[r - 1],
                         {{qb.heads, stride32(q_hs)}, {qb.lp, stride32(q.strides[r - 2])}}));
      loaded_q = it.qb;
    }
    it.qt = qb.qt;
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
    if (it.kvb != loaded_kv) {
      phase(AttentionPhase::values);
      kb.vt = v_pool.next();
      for (int64_t ch = 0; ch < s_chunks; ++ch) {
        const uint16_t w = static_cast<uint16_t>(std::min<int64_t>(parts, s - ch * parts));
        b.load(kb.vt.region(0, w, static_cast<uint32_t>(ch) * kb.v_heads * evf, kb.v_heads * evf),
               hbm_pattern(c.input_io[2], dt, kb.v_base + ch * parts * v.strides[r - 2], w, v.strides[r - 2],
                           {{kb.v_heads, stride32(v_hs)}, {evf, stride32(v.strides[r - 1])}}));
      }
      loaded_kv = it.kvb;
    }
    it.vt = kb.vt;
  };
  // The bias of item `it`: its query tile's (built by the tile's first item), or the ring's next.
  std::vector<bool> bias_built(query_tiles, false);
  const auto take_bias = [&](Item& it) {
    if (!bias_per_tile) {
      it.bias = bias_pool.next();
      return;
    }
    const size_t tile_index = static_cast<size_t>(it.q0 / lq_max);
    it.bias = bias_pool.at(tile_index);
    it.build_bias = !bias_built[tile_index];
    bias_built[tile_index] = true;
  };
  // Part `which` of item `it`: its buffers from their rings, the phase that labels it, its instructions.
  auto emit_part = [&](int which, Item& it) {
    constexpr AttentionPhase phase_of[kParts] = {
        AttentionPhase::scores,  AttentionPhase::scale,   AttentionPhase::mask,
        AttentionPhase::softmax, AttentionPhase::softmax, AttentionPhase::softmax,
        AttentionPhase::softmax, AttentionPhase::values,  AttentionPhase::values, AttentionPhase::values};
    switch (which) {
      case kScores: it.sp = score_psum.next(); break;
      case kScale:
        if (place.mask_on_tensor) break;
        it.scores = score_pool.next();
        if (with_bias && place.mask_in_evacuation) take_bias(it);
        break;
      case kMask:
        if (with_bias && !place.mask_in_evacuation) take_bias(it);
        break;
      case kMax: it.stats = stat_pool.next(); break;
      case kExp: it.p = p_pool.next(); break;
      case kTranspose:
        it.transposes.clear();
        for (int64_t ch = 0; ch < s_chunks; ++ch) {
          const Tile tp = pt_psum.next();
          it.transposes.emplace_back(tp, pt_pool.next());
        }
        break;
      case kValues: it.op = out_psum.next(); break;
      case kOut:  // the block's output, taken by its first item
        if (it.jq == 0) qblocks[it.qb].y = y_pool.next();
        it.y = qblocks[it.qb].y;
        break;
      default: break;
    }
    for (const Instruction& in : part_instructions(which, it, place)) {
      // With the mask on the Tensor engine, q^T's scaling is the scale's and the mask's accumulation the
      // mask's, among the scores' matmuls.
      const bool scaling = which == kScores && in.opcode == device::Opcode::tensor_scalar;
      const bool masking = which == kScores && in.opcode == device::Opcode::matmul && (in.flags & device::kFlagAccumulate);
      phase(scaling ? AttentionPhase::scale : masking ? AttentionPhase::mask : phase_of[which]);
      b.emit(in);
    }
    const QBlock& qb = qblocks[it.qb];
    if (which == kOut && it.jq + it.heads == qb.heads) {  // the block's last item: one store for all
      const auto heads_of = [&](uint32_t h0, uint32_t n) {
        return hbm_pattern(c.out_io, c.out.dtype, qb.o_base + h0 * o_hs, qb.lp, c.out.strides[r - 2],
                           {{n, stride32(o_hs)}, {evf, stride32(c.out.strides[r - 1])}});
      };
      if (qb.heads == 1) {
        b.store(heads_of(0, 1), qb.y.region(0, qb.lp, 0, evf));
      } else {
        // Pieces of whole heads, one queue each: in a [B, H, L, Ev] output their bytes do not interleave,
        // so no piece waits for another (pieces of partitions would each span every head's rows: 16
        // heads' stores ran one after another, 38 us against 15 us), and in a [B, L, H, Ev] one (the
        // permuted copy the kernel stores into) they interleave without touching and cost the same.
        const uint32_t pieces = std::min<uint32_t>(qb.heads, spec.dma.queues);
        for (uint32_t i = 0, h0 = 0; i < pieces; ++i) {
          const uint32_t n = qb.heads / pieces + (i < qb.heads % pieces ? 1 : 0);
          b.dma(heads_of(h0, n), qb.y.region(0, qb.lp, h0 * evf, n * evf));
          h0 += n;
        }
      }
    }
  };
  const size_t stages = stage_of(sched, kParts - 1) + 1;
  // A caller's transfers (EagerHooks::after_loads) go behind the last item's loads, ahead of the stores
  // still to come.
  auto load_then = [&](size_t i) {
    load(i);
    if (i + 1 == items.size() && c.hooks && c.hooks->after_loads) c.hooks->after_loads();
  };
  pipeline_staged(items.size(), sched.ahead, stages, load_then, [&](size_t st, size_t i) {
    for (int which = 0; which < kParts; ++which) {
      if (stage_of(sched, which) == st) emit_part(which, items[i]);
    }
  });
}

}  // namespace sightline::kernels
