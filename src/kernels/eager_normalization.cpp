// Fused normalizations over the last dim: one pass per row tile, intermediates stay in SBUF, weight and
// bias loaded once. Loads, compute and stores overlap: the row tiles rotate over a few buffers and the
// transfers are spread over all DMA queues.
//
// Each row tile is computed by emit_rms_norm / emit_layer_norm (kernels/emit.h).
#include <algorithm>
#include <optional>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

struct RowLayout {
  std::vector<int64_t> outer;  // looped dims
  std::vector<int64_t> outer_in_strides, outer_out_strides;
  int64_t rows = 1, in_row_stride = 0, out_row_stride = 0;
  int64_t cols = 1, in_col_stride = 1, out_col_stride = 1;
};

RowLayout row_layout(const TensorDesc& in, const TensorDesc& out) {
  RowLayout l;
  const int rank = in.shape.size();
  LoopNest rows;
  rows.strides.resize(2);
  for (int d = 0; d + 1 < rank; ++d) {
    rows.sizes.push_back(in.shape[d]);
    rows.strides[0].push_back(in.strides[d]);
    rows.strides[1].push_back(out.strides[d]);
  }
  rows = rows.coalesced();
  if (!rows.sizes.empty()) {
    l.rows = rows.sizes.back();
    l.in_row_stride = rows.strides[0].back();
    l.out_row_stride = rows.strides[1].back();
    l.outer.assign(rows.sizes.begin(), rows.sizes.end() - 1);
    l.outer_in_strides.assign(rows.strides[0].begin(), rows.strides[0].end() - 1);
    l.outer_out_strides.assign(rows.strides[1].begin(), rows.strides[1].end() - 1);
  }
  l.cols = in.shape[rank - 1];
  l.in_col_stride = in.strides[rank - 1];
  l.out_col_stride = out.strides[rank - 1];
  return l;
}

// Row tiles in flight in for_each_row_tile when SBUF has room: one computing, the next loading, one more
// whose load runs ahead.
constexpr uint64_t kRowBuffers = 3;
// The statistics tiles of a row tile in flight (one 64-byte-aligned tile each: emit_rms_norm's two values,
// layer_norm's three moments), at most four of them (layer_norm's pool).
constexpr uint64_t kStatsBytes = 4 * 64;

// The SBUF one buffer of for_each_row_tile takes per partition: a row of x and one of y, each tile aligned
// to 64 bytes (KernelBuilder::allocate).
uint64_t row_buffer_bytes(DType in, DType out, uint32_t n) {
  return uint64_t{n} * (dtype_size(in) + dtype_size(out)) + 128;
}

// Shared skeleton: per row tile i, `stage(s, i, x, y, p)` for s = 0 .. stages - 1 computes y from x;
// loads and stores around them. The stages of neighbouring tiles are interleaved (pipeline_staged,
// eager_internal.h), so only stage 0 may read x. With fewer buffers than stages a tile's stages run
// back to back. `after_first_load` runs right after the first tile's load is emitted: the parameters
// load there, so that on every DMA queue x, which the first compute step needs, moves before them.
// `in_place`: the stages may write y over x (they read no x after writing y), and x kept in SBUF
// (EagerHooks::input_rows, unless input_rows_read_later) is then computed in place: a y buffer of its own
// would take SBUF that the kernel before may still be storing its result tiles from, so that the first
// step writing y would wait for those stores (ESM-2 t12's layer_norms at batch 4: 2852.6 -> 2836.5 us).
template <typename Stage, typename AfterFirstLoad>
void for_each_row_tile(EagerContext& c, const RowLayout& l, size_t stages, bool in_place, Stage&& stage,
                       AfterFirstLoad&& after_first_load) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  const uint32_t n = static_cast<uint32_t>(l.cols);
  const uint64_t per_buffer = row_buffer_bytes(in.dtype, c.out.dtype, n);
  const uint64_t room = b.sbuf_free_bytes();
  SIGHTLINE_CHECK(per_buffer <= room,
                  "{}: rows of {} elements need {} bytes per partition, more than the {} SBUF has free; "
                  "normalize shorter rows",
                  op_name(c.op), n, per_buffer, room);
  const size_t buffers = static_cast<size_t>(std::min<uint64_t>(kRowBuffers, room / per_buffer));
  // Tile i's y reuses tile i - y_buffers's, stored in step i - y_buffers + stages - 1: one buffer more
  // than the stages leaves a step for that store to drain.
  const uint64_t y_bytes = uint64_t{n} * dtype_size(c.out.dtype);
  const bool overlap = stages == 1 || (buffers == 3 && per_buffer * 3 + y_bytes * (stages - 2) <= room);
  const size_t y_buffers = stages == 1 || !overlap ? buffers : stages + 1;
  TilePool x_pool = b.pool("x", in.dtype, n, buffers), y_pool = b.pool("y", c.out.dtype, n, y_buffers);
  const bool over_kept_x =
      in_place && c.hooks && c.hooks->input_rows && !c.hooks->input_rows_read_later && c.out.dtype == in.dtype;
  // Software pipeline: the loads of the next buffers-1 tiles are emitted before the current tile's
  // compute and store, so no DMA queue holds a load behind a store that waits for compute.
  struct RowTile {
    int64_t in_offset, out_offset;
    uint16_t p;
  };
  std::vector<RowTile> tiles;
  const uint16_t parts = b.partitions();
  for_each_index(l.outer, [&](const std::vector<int64_t>& idx) {
    int64_t in_base = 0, out_base = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      in_base += idx[d] * l.outer_in_strides[d];
      out_base += idx[d] * l.outer_out_strides[d];
    }
    for (int64_t r0 = 0; r0 < l.rows; r0 += parts) {
      tiles.push_back({in_base + r0 * l.in_row_stride, out_base + r0 * l.out_row_stride,
                       static_cast<uint16_t>(std::min<int64_t>(parts, l.rows - r0))});
    }
  });
  std::vector<AccessPattern> loaded(tiles.size()), outputs(tiles.size());
  auto run_stage = [&](size_t st, size_t i) {
    stage(st, i, loaded[i], outputs[i], tiles[i].p);
    if (st + 1 < stages) return;
    const AccessPattern dst = hbm_pattern(c.out_io, c.out.dtype, tiles[i].out_offset, tiles[i].p, l.out_row_stride,
                                          {{n, static_cast<int32_t>(l.out_col_stride)}});
    b.store(dst, outputs[i]);
    if (c.hooks && c.hooks->rows_computed) c.hooks->rows_computed(outputs[i], dst);
  };
  // A load may only run ahead into a buffer no earlier tile still uses; only stage 0 reads x.
  pipeline_staged(
      tiles.size(), buffers - 1, overlap ? stages : 1,
      [&](size_t i) {
        if (c.hooks && c.hooks->input_rows) {
          loaded[i] = c.hooks->input_rows->region(0, tiles[i].p, static_cast<uint32_t>(i * n), n);
        } else {
          loaded[i] = x_pool.next().rows(tiles[i].p);
          b.load(loaded[i], hbm_pattern(c.input_io[0], in.dtype, tiles[i].in_offset, tiles[i].p, l.in_row_stride,
                                        {{n, static_cast<int32_t>(l.in_col_stride)}}));
        }
        if (i == 0) after_first_load();
      },
      [&](size_t st, size_t i) {
        if (!overlap) {
          outputs[i] = over_kept_x ? loaded[i] : y_pool.next().rows(tiles[i].p);
          for (size_t s = 0; s < stages; ++s) run_stage(s, i);
          return;
        }
        if (st == 0) outputs[i] = over_kept_x ? loaded[i] : y_pool.next().rows(tiles[i].p);
        run_stage(st, i);
      });
}

// A [n] parameter broadcast to every partition (KernelBuilder::load_broadcast): allocated before the row
// tiles' buffers, loaded once (load_parameter) after the first row tile's load.
std::optional<Tile> allocate_parameter(EagerContext& c, size_t input, uint32_t n, const char* name) {
  if (input >= c.inputs.size()) return std::nullopt;
  if (c.hooks && c.hooks->parameters[input - 1]) return *c.hooks->parameters[input - 1];  // loaded already
  return c.b.sbuf(c.inputs[input].dtype, n, 0, name);
}

void load_parameter(EagerContext& c, size_t input, const std::optional<Tile>& tile) {
  if (!tile || (c.hooks && c.hooks->parameters[input - 1])) return;
  const TensorDesc& t = c.inputs[input];
  c.b.load_broadcast(tile->ap(), hbm_pattern(c.input_io[input], t.dtype, 0, 1, 0,
                                             {{tile->free_elements, static_cast<int32_t>(t.strides[0])}}));
}

// The number of row tiles of a layout: rows in blocks of `partitions`, per index of the outer dims.
int64_t row_tile_count(const RowLayout& l, uint16_t partitions) {
  int64_t count = (l.rows + partitions - 1) / partitions;
  for (int64_t s : l.outer) count *= s;
  return count;
}

// layer_norm of a single row tile ([p <= 128, n]): there is no neighbouring tile for the stages to
// overlap with, so a tile's chain of engines (centring, scaling, weight, bias, store) would run end to
// end. After the moments and the centring of the whole row, the scaling, the affine steps and the store
// run on column halves instead: the Scalar engine scales the second half while the Vector engine
// multiplies the first by the weight, GpSimd adds the bias to the first half while the Vector engine
// does the second, and the first half's store pays its fixed cost while the second is computed. The
// same instructions per element, in the same order, as the staged kernel: the same bits. Each half
// computes rstd again (emit_layer_norm_scale does it with the scaling), 134 ns of Scalar work at
// [128, 480] f32; ESM-2 t12_35M compiled at 128 tokens, whose layer_norms are one tile each, goes
// from 1674.4 to 1670.3 us with the halves (1699.3 us with the parameters loaded ahead of x).
void layer_norm_one_tile(EagerContext& c, const RowLayout& l, const std::optional<Tile>& weight,
                         const std::optional<Tile>& bias, float eps) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  const uint32_t n = static_cast<uint32_t>(l.cols);
  const uint16_t p = static_cast<uint16_t>(l.rows);
  const Tile y = b.sbuf(c.out.dtype, n, 0, "y");
  const Tile stats = b.sbuf(DType::f32, 3, 0, "moments");
  const bool kept = c.hooks && c.hooks->input_rows;  // x already in SBUF (EagerHooks::input_rows)
  const Tile x = kept ? *c.hooks->input_rows : b.sbuf(in.dtype, n, 0, "x");
  if (!kept) {
    b.load(x.rows(p), hbm_pattern(c.input_io[0], in.dtype, 0, p, l.in_row_stride,
                                  {{n, static_cast<int32_t>(l.in_col_stride)}}));
  }
  load_parameter(c, 1, weight);
  load_parameter(c, 2, bias);
  emit_layer_norm_center(b, y.rows(p), x.region(0, p, 0, n), stats, p);
  const uint32_t half = (n + 1) / 2;
  for (uint32_t c0 = 0; c0 < n; c0 += half) {
    const uint32_t cols = std::min(half, n - c0);
    const AccessPattern yc = y.region(0, p, c0, cols);
    emit_layer_norm_scale(b, yc, stats, p, eps);
    emit_layer_norm_affine(b, yc, weight ? weight->region(0, p, c0, cols) : AccessPattern{},
                           bias ? bias->region(0, p, c0, cols) : AccessPattern{});
    b.store(hbm_pattern(c.out_io, c.out.dtype, c0 * l.out_col_stride, p, l.out_row_stride,
                        {{cols, static_cast<int32_t>(l.out_col_stride)}}),
            yc);
  }
  if (c.hooks && c.hooks->rows_computed) {
    c.hooks->rows_computed(y.rows(p), hbm_pattern(c.out_io, c.out.dtype, 0, p, l.out_row_stride,
                                                  {{n, static_cast<int32_t>(l.out_col_stride)}}));
  }
}

}  // namespace

uint64_t normalization_sbuf_bytes(std::span<const TensorDesc> inputs, const TensorDesc& out) {
  if (inputs.empty() || out.shape.empty()) return 0;
  const uint32_t n = static_cast<uint32_t>(out.shape.back());
  uint64_t bytes = kRowBuffers * row_buffer_bytes(inputs[0].dtype, out.dtype, n) + kStatsBytes;
  for (size_t i = 1; i < inputs.size(); ++i) bytes += (uint64_t{n} * dtype_size(inputs[i].dtype) + 63) / 64 * 64;
  return bytes;
}

void build_rms_norm(EagerContext& c) {
  KernelBuilder& b = c.b;
  const RowLayout l = row_layout(c.inputs[0], c.out);
  if (l.cols == 0 || l.rows == 0) return;
  const uint32_t n = static_cast<uint32_t>(l.cols);
  // The weight loads ahead of x here. Loaded after x's first tile, as layer_norm's parameters are, it
  // takes the bf16 [4096, 4096] kernel from 195.1 to 192.4 us, and then compile()'s row loop for the
  // naive RMSNorm, which tests/compiler/row_fusion_test.cpp holds to this built-in's time, trails it
  // (100.2 against 98.7 us); the row loop is where that change would start.
  const std::optional<Tile> weight = allocate_parameter(c, 1, n, "weight");
  load_parameter(c, 1, weight);
  TilePool stats = b.pool("rms", DType::f32, 2, 3);
  const float eps = static_cast<float>(c.attrs.eps);
  for_each_row_tile(
      c, l, 1, /*in_place=*/false,  // emit_rms_norm squares x into y, then reads x
      [&](size_t, size_t, const AccessPattern& x, const AccessPattern& y, uint16_t p) {
        emit_rms_norm(b, y, x, weight ? weight->rows(p) : AccessPattern{}, stats.next(), p, n, eps);
      },
      [] {});
}

void build_layer_norm(EagerContext& c) {
  KernelBuilder& b = c.b;
  const RowLayout l = row_layout(c.inputs[0], c.out);
  if (l.cols == 0 || l.rows == 0) return;
  const uint32_t n = static_cast<uint32_t>(l.cols);
  // The defined inputs arrive in call order: with two of them the second is the weight.
  const std::optional<Tile> weight = allocate_parameter(c, 1, n, "weight");
  const std::optional<Tile> bias = allocate_parameter(c, 2, n, "bias");
  const float eps = static_cast<float>(c.attrs.eps);
  if (row_tile_count(l, b.partitions()) == 1) {
    layer_norm_one_tile(c, l, weight, bias, eps);
    return;
  }
  const AccessPattern w = weight ? weight->ap() : AccessPattern{}, bi = bias ? bias->ap() : AccessPattern{};
  auto rows = [](AccessPattern ap, uint16_t p) {
    if (ap.present()) ap.partition_count = p;
    return ap;
  };
  std::vector<Tile> stats_of;
  // Three stages a tile apart (emit_layer_norm splits the work over the Vector, Scalar and GpSimd
  // engines), so that each engine works on a neighbouring tile while the next engine of a tile's chain
  // finishes. Within a stage a tile's steps still run one after another across engines, so the split
  // keeps each stage's chain short. For 16-bit x, x - mean runs on GpSimd: the moments and the centring
  // (Vector, GpSimd) | rsqrt and the scaling (Scalar) | the weight and the bias (Vector, GpSimd), whose
  // longest chain is the affine one, 5.9 us per bf16 [128, 4096] tile against 5.8 us of HBM time (the
  // normalization in one stage would chain Vector, GpSimd and Scalar: 7.7 us). For f32 x - mean stays on
  // Vector and that affine chain would take 11.3 us: the normalization (Vector, Scalar; 8.2 us) | the
  // weight (Vector) | the bias (GpSimd).
  TilePool stats = b.pool("moments", DType::f32, 3, 4);
  const bool narrow = dtype_size(c.inputs[0].dtype) == 2;
  for_each_row_tile(c, l, 3, /*in_place=*/true, [&](size_t st, size_t i, const AccessPattern& x, const AccessPattern& y, uint16_t p) {
    if (st == 0) {
      if (stats_of.size() <= i) stats_of.resize(i + 1);
      stats_of[i] = stats.next();
      if (narrow) {
        emit_layer_norm_center(b, y, x, stats_of[i], p);
      } else {
        emit_layer_norm_normalize(b, y, x, stats_of[i], p, eps);
      }
    } else if (narrow) {
      if (st == 1) {
        emit_layer_norm_scale(b, y, stats_of[i], p, eps);
      } else {
        emit_layer_norm_affine(b, y, rows(w, p), rows(bi, p));
      }
    } else {
      emit_layer_norm_affine(b, y, st == 1 ? rows(w, p) : AccessPattern{}, st == 2 ? rows(bi, p) : AccessPattern{});
    }
  }, [&] {
    load_parameter(c, 1, weight);
    load_parameter(c, 2, bias);
  });
}

}  // namespace sightline::kernels
