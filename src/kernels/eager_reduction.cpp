// Reduction eager kernels: sum / mean / amax over any dims, softmax and log_softmax over one dim.
#include <algorithm>
#include <array>
#include <functional>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

// The input's dims split into kept (the output's, in order) and reduced ones.
struct ReductionSplit {
  LoopNest kept;     // operands: input, output
  LoopNest reduced;  // operand: input
  int64_t reduced_count = 1;
};

ReductionSplit split_dims(const TensorDesc& in, const TensorDesc& out,
                          const std::array<bool, kMaxDims>& reduce, bool keepdim) {
  ReductionSplit s;
  s.kept.strides.resize(2);
  s.reduced.strides.resize(1);
  int out_dim = 0;
  for (int d = 0; d < in.shape.size(); ++d) {
    if (reduce[static_cast<size_t>(d)]) {
      s.reduced.sizes.push_back(in.shape[d]);
      s.reduced.strides[0].push_back(in.strides[d]);
      s.reduced_count *= in.shape[d];
      if (keepdim) ++out_dim;
      continue;
    }
    s.kept.sizes.push_back(in.shape[d]);
    s.kept.strides[0].push_back(in.strides[d]);
    s.kept.strides[1].push_back(out.strides[out_dim++]);
  }
  s.kept = s.kept.coalesced();
  s.reduced = s.reduced.coalesced();
  return s;
}

}  // namespace

void build_reduction(EagerContext& c) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  std::array<bool, kMaxDims> reduce{};
  if (c.attrs.dims.empty()) reduce.fill(true);
  for (int64_t d : c.attrs.dims)
    reduce[static_cast<size_t>(normalize_dim(static_cast<int>(d), in.shape.size(), op_name(c.op)))] = true;
  const ReductionSplit s = split_dims(in, c.out, reduce, c.attrs.keepdim);
  const AluOp alu = reduction_alu(c.op);
  const uint16_t parts = b.partitions();
  const Tile acc = b.sbuf(DType::f32, 1, 0, "acc");
  TilePool partial = b.pool("partial", DType::f32, 1, 3);
  TilePool data = b.pool("x", in.dtype, kStreamFree, 3);
  auto finish = [&](const AccessPattern& value, const AccessPattern& dst) {
    emit_reduce_finish(b, c.op, value, s.reduced_count);
    b.dma(dst, value);
  };
  // One [p, f] block of the input, reduced into acc rows [0, p); a row tile's first block resets acc
  // and its last one writes the result. The blocks are pipelined: block i + 2 is loaded before block
  // i is reduced (pipeline(), eager_internal.h).
  struct ReduceBlock {
    int64_t offset = 0, pstride = 0, fstride = 0;
    uint16_t p = 1;
    uint32_t f = 1;
    bool first = false;
    int64_t out_offset = -1;  // the last block of a row tile: where its result goes
  };
  std::vector<ReduceBlock> blocks;
  std::vector<AccessPattern> xs;
  auto run_blocks = [&](const std::function<void(const ReduceBlock&)>& finish_row) {
    xs.assign(blocks.size(), AccessPattern{});
    pipeline(
        blocks.size(), 2,
        [&](size_t i) {
          const ReduceBlock& k = blocks[i];
          xs[i] = data.next().region(0, k.p, 0, k.f);
          b.load(xs[i], hbm_pattern(c.input_io[0], in.dtype, k.offset, k.p, k.pstride,
                                    {{k.f, static_cast<int32_t>(k.fstride)}}));
        },
        [&](size_t i) {
          const ReduceBlock& k = blocks[i];
          if (k.first) b.iota(acc.column(k.p), reduction_identity(alu), 0.0f);
          const AccessPattern part = partial.next().column(k.p);
          b.reduce(alu, part, xs[i]);
          b.tensor_tensor(alu, acc.column(k.p), acc.column(k.p), part);
          if (k.out_offset >= 0) finish_row(k);
        });
  };
  if (s.kept.sizes.empty()) {
    // A full reduction: any block layout works, every partition holds a partial result; then one
    // cross-partition reduction on GpSimd.
    b.iota(acc.column(parts), reduction_identity(alu), 0.0f);
    for_each_block(s.reduced, parts, kStreamFree, [&](const Block& blk) {
      blocks.push_back({.offset = blk.offset[0], .pstride = blk.partition_stride[0],
                        .fstride = blk.free_stride[0], .p = blk.partitions, .f = blk.free});
    });
    run_blocks([](const ReduceBlock&) {});
    const Tile total = b.sbuf(DType::f32, 1, 1, "total");
    b.partition_all_reduce(alu, total.column(1), acc.column(parts));
    finish(total.column(1), hbm_pattern(c.out_io, c.out.dtype, 0, 1, 0, {{1, 1}}));
    return;
  }
  // Kept dims on partitions (the innermost kept dim), reduced dims along the free axis.
  const size_t kept_rank = s.kept.sizes.size();
  const int64_t rows = s.kept.sizes.back();
  const std::vector<int64_t> outer_kept(s.kept.sizes.begin(), s.kept.sizes.end() - 1);
  const int64_t in_row_stride = s.kept.strides[0].back(), out_row_stride = s.kept.strides[1].back();
  const size_t reduced_rank = s.reduced.sizes.size();
  const int64_t cols = reduced_rank ? s.reduced.sizes.back() : 1;
  const int64_t col_stride = reduced_rank ? s.reduced.strides[0].back() : 0;
  const std::vector<int64_t> outer_reduced =
      reduced_rank ? std::vector<int64_t>(s.reduced.sizes.begin(), s.reduced.sizes.end() - 1)
                   : std::vector<int64_t>{};
  for_each_index(outer_kept, [&](const std::vector<int64_t>& ki) {
    int64_t in_base = 0, out_base = 0;
    for (size_t d = 0; d + 1 < kept_rank; ++d) {
      in_base += ki[d] * s.kept.strides[0][d];
      out_base += ki[d] * s.kept.strides[1][d];
    }
    for (int64_t r0 = 0; r0 < rows; r0 += parts) {
      const uint16_t p = static_cast<uint16_t>(std::min<int64_t>(parts, rows - r0));
      const size_t row_first = blocks.size();
      for_each_index(outer_reduced, [&](const std::vector<int64_t>& ri) {
        int64_t off = in_base + r0 * in_row_stride;
        for (size_t d = 0; d + 1 < reduced_rank; ++d) off += ri[d] * s.reduced.strides[0][d];
        for (int64_t c0 = 0; c0 < cols; c0 += kStreamFree) {
          const uint32_t f = static_cast<uint32_t>(std::min<int64_t>(kStreamFree, cols - c0));
          blocks.push_back({.offset = off + c0 * col_stride, .pstride = in_row_stride, .fstride = col_stride,
                            .p = p, .f = f});
        }
      });
      if (blocks.size() == row_first) {  // nothing to reduce: the result is the identity
        b.iota(acc.column(p), reduction_identity(alu), 0.0f);
        const Tile result = partial.next();
        b.copy(result.column(p), acc.column(p));
        finish(result.column(p),
               hbm_pattern(c.out_io, c.out.dtype, out_base + r0 * out_row_stride, p, out_row_stride, {{1, 1}}));
        continue;
      }
      blocks[row_first].first = true;
      blocks.back().out_offset = out_base + r0 * out_row_stride;
    }
  });
  run_blocks([&](const ReduceBlock& k) {
    const Tile result = partial.next();
    b.copy(result.column(k.p), acc.column(k.p));
    finish(result.column(k.p),
           hbm_pattern(c.out_io, c.out.dtype, k.out_offset, k.p, out_row_stride, {{1, 1}}));
  });
}

void build_softmax(EagerContext& c) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  const int dim = normalize_dim(static_cast<int>(c.attrs.dim), in.shape.size(), op_name(c.op));
  const int64_t cols = in.shape.size() ? in.shape[dim] : 1;
  const int64_t in_col_stride = in.shape.size() ? in.strides[dim] : 0;
  const int64_t out_col_stride = in.shape.size() ? c.out.strides[dim] : 0;
  LoopNest others;
  others.strides.resize(2);
  for (int d = 0; d < in.shape.size(); ++d) {
    if (d == dim) continue;
    others.sizes.push_back(in.shape[d]);
    others.strides[0].push_back(in.strides[d]);
    others.strides[1].push_back(c.out.strides[d]);
  }
  others = others.coalesced();
  if (cols == 0) return;
  const uint16_t parts = b.partitions();
  // A whole row lives in SBUF: the input, an f32 work row and the output row. The inputs rotate over
  // up to three buffers and are loaded two row tiles ahead (pipeline()), so HBM reads x once and
  // writes y once while the engines work on the tiles in between.
  const uint64_t x_bytes = static_cast<uint64_t>(cols) * dtype_size(in.dtype);
  const uint64_t rest_bytes = static_cast<uint64_t>(cols) * (4 + dtype_size(c.out.dtype));
  const uint64_t room = b.sbuf_free_bytes();
  SIGHTLINE_CHECK(x_bytes + rest_bytes + 1024 <= room,
                  "{}: a row of {} elements needs {} bytes per partition, more than the {} of SBUF",
                  op_name(c.op), cols, x_bytes + rest_bytes, room);
  const size_t rest_buffers = 2 * (x_bytes + rest_bytes) + 1024 <= room ? 2 : 1;
  const size_t x_buffers = static_cast<size_t>(
      std::min<uint64_t>(3, (room - 1024 - rest_buffers * rest_bytes) / x_bytes));
  const uint32_t f = static_cast<uint32_t>(cols);
  TilePool x_pool = b.pool("x", in.dtype, f, x_buffers), work_pool = b.pool("work", DType::f32, f, rest_buffers);
  TilePool y_pool = b.pool("y", c.out.dtype, f, rest_buffers), stat_pool = b.pool("stats", DType::f32, 2, 3);
  const size_t rank = others.sizes.size();
  const int64_t rows = rank ? others.sizes.back() : 1;
  const int64_t in_row_stride = rank ? others.strides[0].back() : 0,
                out_row_stride = rank ? others.strides[1].back() : 0;
  const std::vector<int64_t> outer =
      rank ? std::vector<int64_t>(others.sizes.begin(), others.sizes.end() - 1) : std::vector<int64_t>{};
  struct RowTile {
    int64_t in_offset, out_offset;
    uint16_t p;
  };
  std::vector<RowTile> tiles;
  for_each_index(outer, [&](const std::vector<int64_t>& idx) {
    int64_t in_base = 0, out_base = 0;
    for (size_t d = 0; d + 1 < rank; ++d) {
      in_base += idx[d] * others.strides[0][d];
      out_base += idx[d] * others.strides[1][d];
    }
    for (int64_t r0 = 0; r0 < rows; r0 += parts) {
      tiles.push_back({in_base + r0 * in_row_stride, out_base + r0 * out_row_stride,
                       static_cast<uint16_t>(std::min<int64_t>(parts, rows - r0))});
    }
  });
  // Two stages per row tile as well: tile i's exp half is emitted before tile i - 1's scale half and
  // store (emit_softmax_exp / _scale), so the engines work on neighbouring tiles at once. That needs
  // two work and y rows (tile i writes its own while tile i - 1's are still read).
  const bool overlap = rest_buffers >= 2;
  struct Staged {
    AccessPattern x, work, y;
    Tile stats;
  };
  std::vector<Staged> st(tiles.size());
  auto finish = [&](size_t i) {
    emit_softmax_scale(b, c.op, st[i].y, st[i].work, st[i].stats, tiles[i].p);
    b.store(hbm_pattern(c.out_io, c.out.dtype, tiles[i].out_offset, tiles[i].p, out_row_stride,
                        {{f, static_cast<int32_t>(out_col_stride)}}),
            st[i].y);
  };
  pipeline_staged(
      tiles.size(), x_buffers - 1, overlap ? 2 : 1,
      [&](size_t i) {
        st[i].x = x_pool.next().rows(tiles[i].p);
        b.load(st[i].x, hbm_pattern(c.input_io[0], in.dtype, tiles[i].in_offset, tiles[i].p, in_row_stride,
                                    {{f, static_cast<int32_t>(in_col_stride)}}));
      },
      [&](size_t stage, size_t i) {
        if (stage == 1) {
          finish(i);
          return;
        }
        const uint16_t p = tiles[i].p;
        st[i].work = work_pool.next().rows(p);
        st[i].y = y_pool.next().rows(p);
        st[i].stats = stat_pool.next();
        emit_softmax_exp(b, c.op, st[i].y, st[i].x, st[i].work, st[i].stats, p);
        if (!overlap) finish(i);
      });
}

}  // namespace sightline::kernels
