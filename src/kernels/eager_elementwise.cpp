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

std::vector<Block> collect_blocks(const LoopNest& nest, uint16_t max_partitions, uint32_t max_free) {
  std::vector<Block> blocks;
  for_each_block(nest, max_partitions, max_free, [&](const Block& blk) { blocks.push_back(blk); });
  return blocks;
}

// The streaming kernels pipeline their blocks (pipeline(), eager_internal.h): block i + 2's loads are
// emitted before block i's compute and store, into rings of three buffers.
constexpr size_t kStreamBuffers = 3;
constexpr size_t kStreamAhead = kStreamBuffers - 1;

void build_binary(EagerContext& c) {
  KernelBuilder& b = c.b;
  BinaryAlu mapped;
  SIGHTLINE_CHECK(binary_alu(c.op, mapped), "{} is not a binary elementwise op", op_name(c.op));
  const DType in_dtype[2] = {c.inputs[0].dtype, c.inputs[1].dtype};
  TilePool out_pool = b.pool("out", c.out.dtype, kStreamFree, kStreamBuffers);
  TilePool in_pool[2] = {b.pool("a", in_dtype[0], kStreamFree, kStreamBuffers),
                         b.pool("b", in_dtype[1], kStreamFree, kStreamBuffers)};
  TilePool column_pool = b.pool("column", DType::f32, 1, kStreamBuffers);
  RowCache cache[2];
  const std::vector<Block> blocks = collect_blocks(out_nest(c), b.partitions(), kStreamFree);
  // Per block, the operands' tiles; the streamed ones (own buffer per block) are loaded ahead, a
  // broadcast row (one cached tile shared by the blocks) only when its block's turn comes.
  struct Operands {
    AccessPattern tile[2];
    bool column[2] = {false, false};
  };
  std::vector<Operands> ops(blocks.size());
  auto streamed = [&](const Block& blk, int i) {
    const size_t op = static_cast<size_t>(i) + 1;
    return !(blk.partition_stride[op] == 0 && blk.partitions > 1);
  };
  auto load = [&](size_t k) {
    const Block& blk = blocks[k];
    const uint16_t p = blk.partitions;
    // An operand constant along the free axis is one scalar per partition.
    const bool column[2] = {blk.free_stride[1] == 0 && blk.free > 1, blk.free_stride[2] == 0 && blk.free > 1};
    const bool load_full[2] = {!column[0] || column[1], !column[1]};
    for (int i = 0; i < 2; ++i) {
      const uint32_t io = c.input_io[static_cast<size_t>(i)];
      const size_t op = static_cast<size_t>(i) + 1;
      ops[k].column[i] = !load_full[i];
      if (!load_full[i]) {
        const Tile t = column_pool.next();
        ops[k].tile[i] = t.column(p);
        b.load(ops[k].tile[i],
               hbm_pattern(io, in_dtype[i], blk.offset[op], p, blk.partition_stride[op], {{1, 1}}));
        continue;
      }
      if (!streamed(blk, i)) continue;
      ops[k].tile[i] = in_pool[i].next().region(0, p, 0, blk.free);
      b.load(ops[k].tile[i], block_pattern(blk, op, io, in_dtype[i]));
    }
  };
  pipeline(blocks.size(), kStreamAhead, load, [&](size_t k) {
    const Block& blk = blocks[k];
    const uint16_t p = blk.partitions;
    for (int i = 0; i < 2; ++i) {
      if (ops[k].column[i] || streamed(blk, i)) continue;
      const size_t op = static_cast<size_t>(i) + 1;
      const AccessPattern src = block_pattern(blk, op, c.input_io[static_cast<size_t>(i)], in_dtype[i]);
      RowCache& rc = cache[i];
      if (!rc.tile) rc.tile = b.sbuf(in_dtype[i], kStreamFree, 0, "row_broadcast");
      ops[k].tile[i] = rc.tile->region(0, p, 0, blk.free);
      if (!(rc.loaded == src)) {
        b.load(ops[k].tile[i], src);
        rc.loaded = src;
      }
    }
    const AccessPattern y = out_pool.next().region(0, p, 0, blk.free);
    emit_binary(b, c.op, y, {ops[k].tile[0], ops[k].column[0]}, {ops[k].tile[1], ops[k].column[1]});
    b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), y);
  });
}

void build_unary(EagerContext& c) {
  KernelBuilder& b = c.b;
  const DType in_dtype = c.inputs[0].dtype;
  ActFunc func = ActFunc::identity;
  SIGHTLINE_CHECK(unary_activation(c.op, c.attrs, func) || c.op == OpId::pow, "{} is not a unary elementwise op",
                  op_name(c.op));
  TilePool in_pool = b.pool("x", in_dtype, kStreamFree, kStreamBuffers);
  TilePool out_pool = b.pool("y", c.out.dtype, kStreamFree, kStreamBuffers);
  const std::vector<Block> blocks = collect_blocks(out_nest(c), b.partitions(), kStreamFree);
  std::vector<AccessPattern> xs(blocks.size());
  pipeline(
      blocks.size(), kStreamAhead,
      [&](size_t k) {
        xs[k] = in_pool.next().region(0, blocks[k].partitions, 0, blocks[k].free);
        b.load(xs[k], block_pattern(blocks[k], 1, c.input_io[0], in_dtype));
      },
      [&](size_t k) {
        const AccessPattern y = out_pool.next().region(0, blocks[k].partitions, 0, blocks[k].free);
        emit_unary(b, c.op, c.attrs, y, xs[k]);
        b.store(block_pattern(blocks[k], 0, c.out_io, c.out.dtype), y);
      });
}

// where / masked_fill: every operand streamed, the selection by emit_select.
void build_select(EagerContext& c) {
  KernelBuilder& b = c.b;
  TilePool out_pool = b.pool("y", c.out.dtype, kStreamFree, kStreamBuffers);
  TilePool work_pool = b.pool("picked", DType::f32, kStreamFree, 2);
  std::vector<TilePool> in_pools;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in_pools.push_back(b.pool(fmt::format("in{}", i), c.inputs[i].dtype, kStreamFree, kStreamBuffers));
  const std::vector<Block> blocks = collect_blocks(out_nest(c), b.partitions(), kStreamFree);
  std::vector<std::vector<AccessPattern>> tiles(blocks.size());
  pipeline(
      blocks.size(), kStreamAhead,
      [&](size_t k) {
        const Block& blk = blocks[k];
        for (size_t i = 0; i < c.inputs.size(); ++i) {
          tiles[k].push_back(in_pools[i].next().region(0, blk.partitions, 0, blk.free));
          b.load(tiles[k].back(), block_pattern(blk, i + 1, c.input_io[i], c.inputs[i].dtype));
        }
      },
      [&](size_t k) {
        const Block& blk = blocks[k];
        const AccessPattern picked = work_pool.next().region(0, blk.partitions, 0, blk.free);
        const AccessPattern y = out_pool.next().region(0, blk.partitions, 0, blk.free);
        emit_select(b, c.op, c.attrs, y, tiles[k], picked);
        b.store(block_pattern(blk, 0, c.out_io, c.out.dtype), y);
        tiles[k].clear();
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
