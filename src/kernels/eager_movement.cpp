// Movement eager kernels: strided copies and casts (contiguous, to_copy), cat, and the embedding
// gather (indirect DMA; a one-hot matmul on the Tensor engine for tables too tall for one pattern).
#include <algorithm>
#include <cmath>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

// DMA blocks may be large: a transfer moves whole blocks, and dma_split spreads them over the queues.
constexpr uint32_t kCopyFree = 16384;

// Float -> i32 with truncation toward zero (the CPU reference's cast) from engines that round to
// nearest: y = round(x), then step y one toward zero where it rounded away (|y| > |x|). For |x| >= 1
// the gap |y| - |x| is a multiple of an ulp >= 2^-23 and for |x| < 1 at least 2^-24, so scaling it by
// 2^24 and clamping to [0, 1] gives exactly the step. NaN ends as 0 and out-of-range values saturate,
// as in the reference.
void truncate_to_i32(KernelBuilder& b, const AccessPattern& out_i32, const AccessPattern& x, const Tile& t0,
                     const Tile& t1, uint16_t p, uint32_t f) {
  const AccessPattern y = t0.region(0, p, 0, f), gap = t1.region(0, p, 0, f);
  b.copy(out_i32, x);  // round to nearest
  b.copy(y, out_i32);  // back to f32
  b.activate(ActFunc::abs, gap, x);
  b.activate(ActFunc::abs, out_i32, y);  // |y| (exact in i32 range)
  b.tensor_tensor(AluOp::subtract, gap, out_i32, gap);
  b.tensor_scalar(AluOp::multiply, gap, gap, 16777216.0f);
  b.tensor_scalar(AluOp::max, gap, gap, 0.0f);
  b.tensor_scalar(AluOp::min, gap, gap, 1.0f);
  b.tensor_scalar(AluOp::max, out_i32, y, -1.0f);  // sign(y) for an integer y: clamp to [-1, 1]
  b.tensor_scalar(AluOp::min, out_i32, out_i32, 1.0f);
  b.tensor_tensor(AluOp::multiply, gap, gap, out_i32);
  b.tensor_tensor(AluOp::subtract, out_i32, y, gap);
}

}  // namespace

void copy_tensor(EagerContext& c, uint32_t dst_io, DType dst_dtype, int64_t dst_offset,
                 const std::vector<int64_t>& dst_strides, uint32_t src_io, DType src_dtype,
                 const std::vector<int64_t>& src_strides, const Dims& shape) {
  KernelBuilder& b = c.b;
  LoopNest nest;
  nest.sizes.assign(shape.begin(), shape.end());
  nest.strides = {dst_strides, src_strides};
  const bool truncating = dst_dtype == DType::i32 && dtype_is_floating(src_dtype);
  if (!truncating) {
    for_each_block(nest, b.partitions(), kCopyFree, [&](const Block& blk) {
      AccessPattern dst = block_pattern(blk, 0, dst_io, dst_dtype);
      dst.offset += static_cast<uint64_t>(dst_offset) * dtype_size(dst_dtype);
      b.dma_split(dst, block_pattern(blk, 1, src_io, src_dtype));
    });
    return;
  }
  TilePool in = b.pool("x", src_dtype, kStreamFree, 2), out = b.pool("y", DType::i32, kStreamFree, 2);
  const Tile t0 = b.sbuf(DType::f32, kStreamFree, 0, "rounded"),
             t1 = b.sbuf(DType::f32, kStreamFree, 0, "gap");
  for_each_block(nest, b.partitions(), kStreamFree, [&](const Block& blk) {
    const AccessPattern x = in.next().region(0, blk.partitions, 0, blk.free);
    const AccessPattern y = out.next().region(0, blk.partitions, 0, blk.free);
    b.load(x, block_pattern(blk, 1, src_io, src_dtype));
    truncate_to_i32(b, y, x, t0, t1, blk.partitions, blk.free);
    AccessPattern dst = block_pattern(blk, 0, dst_io, dst_dtype);
    dst.offset += static_cast<uint64_t>(dst_offset) * dtype_size(dst_dtype);
    b.store(dst, y);
  });
}

void build_copy(EagerContext& c) {
  const TensorDesc& in = c.inputs[0];
  SIGHTLINE_CHECK(in.shape == c.out.shape, "{}: input {} and output {} shapes differ", op_name(c.op),
                  in.shape, c.out.shape);
  copy_tensor(c, c.out_io, c.out.dtype, 0, std::vector<int64_t>(c.out.strides.begin(), c.out.strides.end()),
              c.input_io[0], in.dtype, std::vector<int64_t>(in.strides.begin(), in.strides.end()), in.shape);
}

void build_cat(EagerContext& c) {
  SIGHTLINE_CHECK(!c.inputs.empty(), "aten::cat: expected a non-empty list of tensors");
  const int dim = normalize_dim(static_cast<int>(c.attrs.dim), c.out.shape.size(), "aten::cat");
  int64_t position = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TensorDesc& in = c.inputs[i];
    if (in.shape.product() > 0) {
      copy_tensor(c, c.out_io, c.out.dtype, position * c.out.strides[dim],
                  std::vector<int64_t>(c.out.strides.begin(), c.out.strides.end()), c.input_io[i], in.dtype,
                  std::vector<int64_t>(in.strides.begin(), in.strides.end()), in.shape);
    }
    position += in.shape[dim];
  }
}

namespace {

// out[t, :] = onehot(ids)[t, :] @ weight, accumulated over 128-row chunks of the table.
void build_embedding_onehot(EagerContext& c) {
  KernelBuilder& b = c.b;
  const TensorDesc& weight = c.inputs[0];
  const TensorDesc& indices = c.inputs[1];
  const int64_t vocab = weight.shape[0], width = weight.shape[1];
  const uint16_t parts = b.partitions();
  const uint32_t moving_max = b.spec().tensor.moving_free_max;
  if (vocab == 0 || width == 0) return;
  // Row v0 + p of the vocabulary chunk starting at v0, one column per chunk.
  const int64_t chunks = (vocab + parts - 1) / parts;
  SIGHTLINE_CHECK(chunks <= 4096,
                  "aten::embedding: a vocabulary of {} rows is too large for the one-hot "
                  "gather (at most {})",
                  vocab, 4096 * int64_t{parts});
  const Tile row_ids = b.sbuf(DType::f32, static_cast<uint32_t>(chunks), 0, "row_ids");
  for (int64_t v = 0; v < chunks; ++v) {
    b.iota(row_ids.column(parts, static_cast<uint32_t>(v)), static_cast<float>(v * parts), 1.0f);
  }
  const DType onehot_dtype = weight.dtype == DType::i32 ? DType::f32 : weight.dtype;
  TilePool ids = b.pool("ids", DType::f32, parts, 2), diff = b.pool("diff", DType::f32, parts, 2);
  TilePool onehot = b.pool("onehot", onehot_dtype, parts, 2);
  TilePool rows = b.pool("weight", weight.dtype, moving_max, 3),
           out = b.pool("out", c.out.dtype, moving_max, 2);
  TilePool acc = b.pool("acc", DType::f32, moving_max, 2, Memory::psum);
  // Token blocks: up to `parts` tokens along one strided dim of the indices.
  LoopNest tokens;
  tokens.sizes.assign(indices.shape.begin(), indices.shape.end());
  const Dims out_token_strides = [&] {
    Dims s;
    for (int d = 0; d + 1 < c.out.shape.size(); ++d) s.push_back(c.out.strides[d]);
    return s;
  }();
  tokens.strides = {std::vector<int64_t>(out_token_strides.begin(), out_token_strides.end()),
                    std::vector<int64_t>(indices.strides.begin(), indices.strides.end())};
  const int64_t out_width_stride = c.out.strides[c.out.shape.size() - 1];
  for_each_block(tokens, 1, parts, [&](const Block& blk) {
    const uint32_t t = blk.free;
    const Tile id_tile = ids.next();
    // Every partition sees all token ids of the block (partition stride 0); the DMA casts to f32.
    b.load(id_tile.region(0, parts, 0, t), hbm_pattern(c.input_io[1], DType::i32, blk.offset[1], parts, 0,
                                                       {{t, static_cast<int32_t>(blk.free_stride[1])}}));
    for (int64_t d0 = 0; d0 < width; d0 += moving_max) {
      const uint32_t n = static_cast<uint32_t>(std::min<int64_t>(moving_max, width - d0));
      const AccessPattern psum = acc.next().region(0, static_cast<uint16_t>(t), 0, n);
      for (int64_t v = 0; v < chunks; ++v) {
        const uint16_t vp = static_cast<uint16_t>(std::min<int64_t>(parts, vocab - v * parts));
        // onehot[r, j] = relu(1 - |id_j - row_r|): 1 where the id names row r, else 0 (ids are integers).
        const AccessPattern dt = diff.next().region(0, vp, 0, t), oh = onehot.next().region(0, vp, 0, t);
        b.tensor_scalar(AluOp::subtract, dt, id_tile.region(0, vp, 0, t),
                        row_ids.region(0, vp, static_cast<uint32_t>(v), 1));
        b.activate(ActFunc::abs, dt, dt);
        b.activate(ActFunc::relu, oh, dt, -1.0f, 1.0f);
        const AccessPattern w = rows.next().region(0, vp, 0, n);
        b.load(w, hbm_pattern(c.input_io[0], weight.dtype,
                              v * parts * weight.strides[0] + d0 * weight.strides[1], vp, weight.strides[0],
                              {{n, static_cast<int32_t>(weight.strides[1])}}));
        b.matmul(psum, oh, w, v > 0);
      }
      const AccessPattern y = out.next().region(0, static_cast<uint16_t>(t), 0, n);
      b.copy(y, psum);
      b.store(
          hbm_pattern(c.out_io, c.out.dtype, blk.offset[0] + d0 * out_width_stride, static_cast<uint16_t>(t),
                      blk.free_stride[0], {{n, static_cast<int32_t>(out_width_stride)}}),
          y);
    }
  });
}

}  // namespace

void build_embedding(EagerContext& c) {
  KernelBuilder& b = c.b;
  const TensorDesc& weight = c.inputs[0];
  const TensorDesc& indices = c.inputs[1];
  SIGHTLINE_CHECK(weight.shape.size() == 2 && indices.dtype == DType::i32,
                  "aten::embedding: weight must be 2-D and indices i32, got {} and {}", weight.shape,
                  dtype_name(indices.dtype));
  const int64_t vocab = weight.shape[0], width = weight.shape[1];
  // A gather's table pattern has one partition per row, counted in 16 bits.
  if (vocab > 65535) return build_embedding_onehot(c);
  if (vocab == 0 || width == 0) return;
  const uint16_t parts = b.partitions();
  TilePool ids = b.pool("ids", DType::i32, 1, 4);
  LoopNest tokens;
  tokens.sizes.assign(indices.shape.begin(), indices.shape.end());
  std::vector<int64_t> out_token_strides(c.out.strides.begin(), c.out.strides.end() - 1);
  tokens.strides = {out_token_strides, std::vector<int64_t>(indices.strides.begin(), indices.strides.end())};
  const int64_t out_width_stride = c.out.strides[c.out.shape.size() - 1];
  for_each_block(tokens, 1, parts, [&](const Block& blk) {
    const uint16_t t = static_cast<uint16_t>(blk.free);
    const AccessPattern id_tile = ids.next().column(t);
    b.dma(id_tile, hbm_pattern(c.input_io[1], DType::i32, blk.offset[1], t, blk.free_stride[1], {{1, 1}}));
    // Rows go straight from the table to the output (HBM to HBM), in chunks that keep transfers moderate.
    for (int64_t d0 = 0; d0 < width; d0 += kStreamFree) {
      const uint32_t n = static_cast<uint32_t>(std::min<int64_t>(kStreamFree, width - d0));
      const AccessPattern table =
          hbm_pattern(c.input_io[0], weight.dtype, d0 * weight.strides[1], static_cast<uint16_t>(vocab),
                      weight.strides[0], {{n, static_cast<int32_t>(weight.strides[1])}});
      const AccessPattern dst =
          hbm_pattern(c.out_io, c.out.dtype, blk.offset[0] + d0 * out_width_stride, t, blk.free_stride[0],
                      {{n, static_cast<int32_t>(out_width_stride)}});
      b.gather(dst, table, id_tile);
    }
  });
}

}  // namespace sightline::kernels
