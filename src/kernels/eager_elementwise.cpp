// Elementwise eager kernels: binary ops with full broadcasting, unary activations, fill.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

LoopNest out_nest(const EagerContext& c) {
  LoopNest nest;
  nest.sizes.assign(c.out.shape.begin(), c.out.shape.end());
  nest.strides.push_back(std::vector<int64_t>(c.out.strides.begin(), c.out.strides.end()));
  for (const TensorDesc& in : c.inputs) nest.strides.push_back(broadcast_strides(in, c.out.shape));
  return nest;
}

// A broadcast operand that is the same block for every row (partition stride 0), kept in its own tile
// and loaded again only when the block changes: a row vector is loaded once, not once per row tile.
struct RowCache {
  std::optional<Tile> tile;
  AccessPattern loaded;
};

}  // namespace

void build_binary(EagerContext& c) {
  KernelBuilder& b = c.b;
  BinaryAlu mapped;
  SIGHTLINE_CHECK(binary_alu(c.op, mapped), "{} is not a binary elementwise op", op_name(c.op));
  const DType in_dtype[2] = {c.inputs[0].dtype, c.inputs[1].dtype};
  TilePool out_pool = b.pool("out", c.out.dtype, kStreamFree, 3);
  TilePool in_pool[2] = {b.pool("a", in_dtype[0], kStreamFree, 3), b.pool("b", in_dtype[1], kStreamFree, 3)};
  TilePool column_pool = b.pool("column", DType::f32, 1, 3);
  RowCache cache[2];
  for_each_block(out_nest(c), b.partitions(), kStreamFree, [&](const Block& blk) {
    const uint16_t p = blk.partitions;
    // An operand constant along the free axis is one scalar per partition.
    const bool column[2] = {blk.free_stride[1] == 0 && blk.free > 1, blk.free_stride[2] == 0 && blk.free > 1};
    const bool load_full[2] = {!column[0] || column[1], !column[1]};
    AccessPattern tile_of[2];
    for (int i = 0; i < 2; ++i) {
      const uint32_t io = c.input_io[static_cast<size_t>(i)];
      const size_t op = static_cast<size_t>(i) + 1;
      if (!load_full[i]) {
        const Tile t = column_pool.next();
        tile_of[i] = t.column(p);
        b.load(tile_of[i],
               hbm_pattern(io, in_dtype[i], blk.offset[op], p, blk.partition_stride[op], {{1, 1}}));
        continue;
      }
      const AccessPattern src = block_pattern(blk, op, io, in_dtype[i]);
      if (blk.partition_stride[op] == 0 && p > 1) {
        RowCache& rc = cache[i];
        if (!rc.tile) rc.tile = b.sbuf(in_dtype[i], kStreamFree, 0, "row_broadcast");
        tile_of[i] = rc.tile->region(0, p, 0, blk.free);
        if (!(rc.loaded == src)) {
          b.load(tile_of[i], src);
          rc.loaded = src;
        }
        continue;
      }
      tile_of[i] = in_pool[i].next().region(0, p, 0, blk.free);
      b.load(tile_of[i], src);
    }
    const AccessPattern y = out_pool.next().region(0, p, 0, blk.free);
    emit_binary(b, c.op, y, {tile_of[0], !load_full[0]}, {tile_of[1], !load_full[1]});
    b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), y);
  });
}

void build_unary(EagerContext& c) {
  KernelBuilder& b = c.b;
  const DType in_dtype = c.inputs[0].dtype;
  ActFunc func = ActFunc::identity;
  SIGHTLINE_CHECK(unary_activation(c.op, c.attrs, func) || c.op == OpId::pow, "{} is not a unary elementwise op",
                  op_name(c.op));
  TilePool in_pool = b.pool("x", in_dtype, kStreamFree, 3);
  TilePool out_pool = b.pool("y", c.out.dtype, kStreamFree, 3);
  for_each_block(out_nest(c), b.partitions(), kStreamFree, [&](const Block& blk) {
    const AccessPattern x = in_pool.next().region(0, blk.partitions, 0, blk.free);
    const AccessPattern y = out_pool.next().region(0, blk.partitions, 0, blk.free);
    b.load(x, block_pattern(blk, 1, c.input_io[0], in_dtype));
    emit_unary(b, c.op, c.attrs, y, x);
    b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), y);
  });
}

// where / masked_fill: every operand streamed, the selection by emit_select.
void build_select(EagerContext& c) {
  KernelBuilder& b = c.b;
  TilePool out_pool = b.pool("y", c.out.dtype, kStreamFree, 3);
  TilePool work_pool = b.pool("picked", DType::f32, kStreamFree, 2);
  std::vector<TilePool> in_pools;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in_pools.push_back(b.pool(fmt::format("in{}", i), c.inputs[i].dtype, kStreamFree, 3));
  for_each_block(out_nest(c), b.partitions(), kStreamFree, [&](const Block& blk) {
    const uint16_t p = blk.partitions;
    std::vector<AccessPattern> tiles;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      tiles.push_back(in_pools[i].next().region(0, p, 0, blk.free));
      b.load(tiles.back(), block_pattern(blk, i + 1, c.input_io[i], c.inputs[i].dtype));
    }
    const AccessPattern picked = work_pool.next().region(0, p, 0, blk.free);
    const AccessPattern y = out_pool.next().region(0, p, 0, blk.free);
    emit_select(b, c.op, c.attrs, y, tiles, picked);
    b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), y);
  });
}

void build_fill(EagerContext& c) {
  KernelBuilder& b = c.b;
  LoopNest nest;
  nest.sizes.assign(c.out.shape.begin(), c.out.shape.end());
  nest.strides.push_back(std::vector<int64_t>(c.out.strides.begin(), c.out.strides.end()));
  // One tile of the value, stored as many times as the output needs: iota gives written memory,
  // then 0 * i + value.
  const Tile t = b.sbuf(c.out.dtype, kStreamFree, 0, "value");
  b.iota(t.ap(), 0.0f, 0.0f);
  b.activate(ActFunc::identity, t.ap(), t.ap(), 0.0f, static_cast<float>(c.attrs.scalar));
  for_each_block(nest, b.partitions(), kStreamFree, [&](const Block& blk) {
    b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), t.region(0, blk.partitions, 0, blk.free));
  });
}

}  // namespace sightline::kernels
