// Matmul and linear on the Tensor engine.
//
// out[m, n] = sum_k a[m, k] * b[k, n], tiled as the systolic array wants it: K on partitions (up to
// 128 rows of the array), the stationary operand a^T[k, m] with m <= 128 (array columns = output
// partitions), the moving operand b[k, n] with n <= 512 (one PSUM bank of f32), accumulating over K
// tiles in PSUM. The DMA reads a^T straight from a's strides. Linear adds its bias as one more
// accumulation step: ones[1, m]^T @ bias[1, n].
#include <algorithm>
#include <optional>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

struct Operand {
  uint32_t io = 0;
  DType dtype = DType::f32;
  int64_t offset = 0;
  int64_t outer_stride = 0;  // a: between rows m; b: between columns n; out: between rows m
  int64_t inner_stride = 0;  // a: along k; b: along k; out: along n
};

struct Gemm {
  Operand a, b, out;
  std::optional<Operand> bias;  // inner_stride along n
  int64_t m = 0, n = 0, k = 0;
};

class GemmEmitter {
 public:
  explicit GemmEmitter(KernelBuilder& b, DType a_dtype, DType b_dtype, DType out_dtype, bool with_bias)
      : b_(b),
        parts_(b.partitions()),
        moving_max_(b.spec().tensor.moving_free_max),
        stationary_(b.pool("stationary", a_dtype, parts_, 3)),
        moving_(b.pool("moving", b_dtype, moving_max_, 3)),
        result_(b.pool("result", out_dtype, moving_max_, 2)),
        acc_(b.pool("acc", DType::f32, moving_max_, 2, Memory::psum)) {
    if (with_bias) {
      ones_ = b.sbuf(a_dtype, parts_, 1, "ones");
      b.iota(ones_->ap(), 0.0f, 0.0f);
      b.activate(ActFunc::identity, ones_->ap(), ones_->ap(), 0.0f, 1.0f);
      bias_ = b.pool("bias", b_dtype, moving_max_, 2);
    }
  }

  void emit(const Gemm& g) {
    for (int64_t m0 = 0; m0 < g.m; m0 += parts_) {
      const uint16_t mp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.m - m0));
      for (int64_t n0 = 0; n0 < g.n; n0 += moving_max_) {
        const uint32_t np = static_cast<uint32_t>(std::min<int64_t>(moving_max_, g.n - n0));
        const AccessPattern psum = acc_.next().region(0, mp, 0, np);
        bool accumulate = false;
        for (int64_t k0 = 0; k0 < g.k; k0 += parts_) {
          const uint16_t kp = static_cast<uint16_t>(std::min<int64_t>(parts_, g.k - k0));
          const AccessPattern st = stationary_.next().region(0, kp, 0, mp);
          b_.dma_split(
              st, hbm_pattern(g.a.io, g.a.dtype, g.a.offset + m0 * g.a.outer_stride + k0 * g.a.inner_stride,
                              kp, g.a.inner_stride, {{mp, static_cast<int32_t>(g.a.outer_stride)}}));
          const AccessPattern mv = moving_.next().region(0, kp, 0, np);
          b_.dma_split(
              mv, hbm_pattern(g.b.io, g.b.dtype, g.b.offset + k0 * g.b.inner_stride + n0 * g.b.outer_stride,
                              kp, g.b.inner_stride, {{np, static_cast<int32_t>(g.b.outer_stride)}}));
          b_.matmul(psum, st, mv, accumulate);
          accumulate = true;
        }
        if (g.bias) {
          const AccessPattern bias = bias_.next().region(0, 1, 0, np);
          b_.dma(bias, hbm_pattern(g.bias->io, g.bias->dtype, g.bias->offset + n0 * g.bias->inner_stride, 1,
                                   0, {{np, static_cast<int32_t>(g.bias->inner_stride)}}));
          b_.matmul(psum, ones_->region(0, 1, 0, mp), bias, accumulate);
          accumulate = true;
        }
        const AccessPattern y = result_.next().region(0, mp, 0, np);
        if (!accumulate) {
          // K == 0: the product is all zeros.
          b_.iota(y, 0.0f, 0.0f);
          b_.tensor_scalar(AluOp::multiply, y, y, 0.0f);
        } else if (evacuations_++ % 2 == 0) {
          b_.copy(y, psum);  // alternate VectorE and ScalarE so evacuation keeps up with TensorE
        } else {
          b_.activate(ActFunc::identity, y, psum);
        }
        b_.store(hbm_pattern(g.out.io, g.out.dtype,
                             g.out.offset + m0 * g.out.outer_stride + n0 * g.out.inner_stride, mp,
                             g.out.outer_stride, {{np, static_cast<int32_t>(g.out.inner_stride)}}),
                 y);
      }
    }
  }

 private:
  KernelBuilder& b_;
  uint16_t parts_;
  uint32_t moving_max_;
  TilePool stationary_, moving_, result_, acc_, bias_;
  std::optional<Tile> ones_;
  uint64_t evacuations_ = 0;
};

}  // namespace

void build_matmul(EagerContext& c) {
  const TensorDesc& a = c.inputs[0];
  const TensorDesc& bt = c.inputs[1];
  const int ra = a.shape.size(), rb = bt.shape.size();
  SIGHTLINE_CHECK(ra >= 1 && rb >= 1, "aten::matmul: both operands need at least 1 dim, got {} and {}",
                  a.shape, bt.shape);
  Gemm g;
  g.k = a.shape[ra - 1];
  g.m = ra >= 2 ? a.shape[ra - 2] : 1;
  g.n = rb >= 2 ? bt.shape[rb - 1] : 1;
  g.a = {c.input_io[0], a.dtype, 0, ra >= 2 ? a.strides[ra - 2] : 0, a.strides[ra - 1]};
  g.b = {c.input_io[1], bt.dtype, 0, rb >= 2 ? bt.strides[rb - 1] : 0, bt.strides[rb >= 2 ? rb - 2 : 0]};
  const int ro = c.out.shape.size();
  const int64_t out_n_stride = rb >= 2 ? c.out.strides[ro - 1] : 0;
  const int64_t out_m_stride = ra >= 2 ? c.out.strides[ro - (rb >= 2 ? 2 : 1)] : 0;
  g.out = {c.out_io, c.out.dtype, 0, out_m_stride, out_n_stride};
  // Batch dims: broadcast a's and b's leading dims against the output's.
  const int batch_rank = ro - (ra >= 2 ? 1 : 0) - (rb >= 2 ? 1 : 0);
  Dims batch_shape;
  for (int d = 0; d < batch_rank; ++d) batch_shape.push_back(c.out.shape[d]);
  auto batch_strides = [&](const TensorDesc& t, int matrix_dims) {
    TensorDesc lead{t.dtype, {}, {}};
    for (int d = 0; d + matrix_dims < t.shape.size(); ++d) {
      lead.shape.push_back(t.shape[d]);
      lead.strides.push_back(t.strides[d]);
    }
    return broadcast_strides(lead, batch_shape);
  };
  LoopNest batch;
  batch.sizes.assign(batch_shape.begin(), batch_shape.end());
  batch.strides = {batch_strides(a, std::min(ra, 2)), batch_strides(bt, std::min(rb, 2)),
                   std::vector<int64_t>(c.out.strides.begin(), c.out.strides.begin() + batch_rank)};
  batch = batch.coalesced();
  GemmEmitter emitter(c.b, a.dtype, bt.dtype, c.out.dtype, false);
  for_each_index(batch.sizes, [&](const std::vector<int64_t>& idx) {
    Gemm at = g;
    for (size_t d = 0; d < idx.size(); ++d) {
      at.a.offset += idx[d] * batch.strides[0][d];
      at.b.offset += idx[d] * batch.strides[1][d];
      at.out.offset += idx[d] * batch.strides[2][d];
    }
    emitter.emit(at);
  });
}

void build_linear(EagerContext& c) {
  const TensorDesc& x = c.inputs[0];
  const TensorDesc& w = c.inputs[1];
  const int rx = x.shape.size(), ro = c.out.shape.size();
  SIGHTLINE_CHECK(w.shape.size() == 2, "aten::linear: weight must be [out_features, in_features], got {}",
                  w.shape);
  Gemm g;
  g.k = x.shape[rx - 1];
  g.n = w.shape[0];
  // b[k, n] = weight[n, k]: along k the weight's inner stride, between columns n its row stride.
  g.b = {c.input_io[1], w.dtype, 0, w.strides[0], w.strides[1]};
  if (c.inputs.size() > 2) g.bias = Operand{c.input_io[2], c.inputs[2].dtype, 0, 0, c.inputs[2].strides[0]};
  LoopNest rows;
  rows.strides.resize(2);
  for (int d = 0; d + 1 < rx; ++d) {
    rows.sizes.push_back(x.shape[d]);
    rows.strides[0].push_back(x.strides[d]);
    rows.strides[1].push_back(c.out.strides[d]);
  }
  rows = rows.coalesced();
  const size_t rank = rows.sizes.size();
  g.m = rank ? rows.sizes.back() : 1;
  g.a = {c.input_io[0], x.dtype, 0, rank ? rows.strides[0].back() : 0, x.strides[rx - 1]};
  g.out = {c.out_io, c.out.dtype, 0, rank ? rows.strides[1].back() : 0, c.out.strides[ro - 1]};
  const std::vector<int64_t> outer =
      rank ? std::vector<int64_t>(rows.sizes.begin(), rows.sizes.end() - 1) : std::vector<int64_t>{};
  GemmEmitter emitter(c.b, x.dtype, w.dtype, c.out.dtype, g.bias.has_value());
  for_each_index(outer, [&](const std::vector<int64_t>& idx) {
    Gemm at = g;
    for (size_t d = 0; d < idx.size(); ++d) {
      at.a.offset += idx[d] * rows.strides[0][d];
      at.out.offset += idx[d] * rows.strides[1][d];
    }
    emitter.emit(at);
  });
}

}  // namespace sightline::kernels
