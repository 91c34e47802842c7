// Scan and index-reduction kernels along one dim, rows of the other dims on the partitions:
//   cumsum:  per tile of rows, chunks of up to kStreamFree along the dim: tensor_scan (add) of the chunk,
//            plus the previous chunk's last column (the carry) as a per-partition scalar. The engines
//            compute in f32, so an i32 cumsum is exact while its partial sums stay within 2^24.
//   argmax:  topk's kernel with k = 1 and only the indices written (build_top, one loop for both); NaN
//            ranks above every number (max8's order), so the first NaN wins, as in torch. With k = 1 of
//            16-bit floats the indices are 16-bit (chunks of at most 2048) and GpSimd folds the chunks'
//            candidates (fold_chunks), so the Vector engine streams both passes at its 16-bit rate.
//   topk:    per chunk, max8 (the k <= 8 largest, descending) and find_index8 (their indices, equal values
//            in ascending index) give the chunk's candidates; with more than one chunk, max8 / find_index8
//            over the candidates (in chunk order, so equal values stay in ascending index) pick the top k
//            and a one-hot sum per pick its index. This is how NeuronCore topk is built from max8 rounds
//            (nki.isa.max8, nki.isa.nc_find_index8); k > 8 needs rounds that replace the values found
//            (NKI's nc_match_replace8), which this kernel does not model: it is an error on the device.
//            largest = false runs on -x and negates the values back (so a NaN ranks first there, where
//            torch puts it last).
#include <algorithm>
#include <optional>

#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

// The input's dims other than `dim`, coalesced, with the strides of the input and of the output (whose
// dim is absent when `drop_dim`).
struct RowWalk {
  int dim = 0;
  int64_t cols = 1, in_col_stride = 0, out_col_stride = 0;
  std::vector<int64_t> outer, outer_in, outer_out;
  int64_t rows = 1, in_row_stride = 0, out_row_stride = 0;
};

RowWalk row_walk(const EagerContext& c, bool drop_dim) {
  const TensorDesc& in = c.inputs[0];
  RowWalk w;
  const int rank = static_cast<int>(in.shape.size());
  w.dim = normalize_dim(static_cast<int>(c.attrs.dim), rank, op_name(c.op));
  w.cols = in.shape[w.dim];
  w.in_col_stride = in.strides[w.dim];
  w.out_col_stride = drop_dim ? 0 : c.out.strides[w.dim];
  LoopNest others;
  others.strides.resize(2);
  for (int d = 0; d < rank; ++d) {
    if (d == w.dim) continue;
    // argmax without keepdim: output dim d is input dim d, or d - 1 past the reduced one.
    const int out_d = drop_dim && !c.attrs.keepdim && d > w.dim ? d - 1 : d;
    others.sizes.push_back(in.shape[d]);
    others.strides[0].push_back(in.strides[d]);
    others.strides[1].push_back(c.out.strides[out_d]);
  }
  others = others.coalesced();
  if (!others.sizes.empty()) {
    w.rows = others.sizes.back();
    w.in_row_stride = others.strides[0].back();
    w.out_row_stride = others.strides[1].back();
    w.outer.assign(others.sizes.begin(), others.sizes.end() - 1);
    w.outer_in.assign(others.strides[0].begin(), others.strides[0].end() - 1);
    w.outer_out.assign(others.strides[1].begin(), others.strides[1].end() - 1);
  }
  return w;
}

// Calls fn(in_offset, out_offset, p) for every tile of up to `parts` rows.
template <typename Fn>
void for_each_row_tile(const RowWalk& w, uint16_t parts, Fn&& fn) {
  for_each_index(w.outer, [&](const std::vector<int64_t>& idx) {
    int64_t in_base = 0, out_base = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      in_base += idx[d] * w.outer_in[d];
      out_base += idx[d] * w.outer_out[d];
    }
    for (int64_t r0 = 0; r0 < w.rows; r0 += parts) {
      fn(in_base + r0 * w.in_row_stride, out_base + r0 * w.out_row_stride,
         static_cast<uint16_t>(std::min<int64_t>(parts, w.rows - r0)));
    }
  });
}

// The (row tile, chunk) items a scan kernel software-pipelines: item i is chunk i % chunks of row
// tile i / chunks, its x loaded into xs[i] ahead of its compute (pipeline(), eager_internal.h).
struct RowTile {
  int64_t in_base, out_base;
  uint16_t p;
};
struct ChunkItems {
  ChunkItems(const RowWalk& walk, uint16_t parts, uint32_t chunk_cols, uint32_t chunk_count)
      : w(walk), chunk(chunk_cols), chunks(chunk_count) {
    for_each_row_tile(walk, parts, [&](int64_t in_base, int64_t out_base, uint16_t p) {
      tiles.push_back({in_base, out_base, p});
    });
    xs.resize(tiles.size() * chunks);
  }
  size_t size() const { return xs.size(); }
  const RowTile& tile(size_t i) const { return tiles[i / chunks]; }
  // The first column of item i's chunk and its width.
  std::pair<int64_t, uint32_t> span(size_t i) const {
    const int64_t j0 = int64_t{static_cast<uint32_t>(i % chunks)} * chunk;
    return {j0, static_cast<uint32_t>(std::min<int64_t>(chunk, w.cols - j0))};
  }
  void load(EagerContext& c, TilePool& pool, size_t i) {
    const RowTile& t = tile(i);
    const auto [j0, f] = span(i);
    xs[i] = pool.next().region(0, t.p, 0, f);
    c.b.load(xs[i], hbm_pattern(c.input_io[0], c.inputs[0].dtype, t.in_base + j0 * w.in_col_stride, t.p,
                                w.in_row_stride, {{f, static_cast<int32_t>(w.in_col_stride)}}));
  }

  const RowWalk& w;
  uint32_t chunk, chunks;
  std::vector<RowTile> tiles;
  std::vector<AccessPattern> xs;
};

}  // namespace

void build_cumsum(EagerContext& c) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  const RowWalk w = row_walk(c, false);
  if (w.cols == 0 || c.out.shape.product() == 0) return;
  const uint32_t chunk = static_cast<uint32_t>(std::min<int64_t>(w.cols, kStreamFree));
  const uint32_t chunks = static_cast<uint32_t>((w.cols + chunk - 1) / chunk);
  // An f32 result is scanned straight into the tile that is stored; another dtype is scanned in f32
  // and converted by a copy.
  const bool direct = c.out.dtype == DType::f32;
  TilePool x_pool = b.pool("x", in.dtype, chunk, 3), y_pool;
  if (!direct) y_pool = b.pool("y", DType::f32, chunk, 3);
  TilePool out_pool = b.pool("out", c.out.dtype, chunk, 3);
  // Software pipeline over (row tile, chunk) items, loads two items ahead (pipeline(), eager_internal.h).
  ChunkItems items(w, b.partitions(), chunk, chunks);
  AccessPattern carry;
  pipeline(
      items.size(), 2, [&](size_t i) { items.load(c, x_pool, i); },
      [&](size_t i) {
        const RowTile& t = items.tile(i);
        const auto [j0, f] = items.span(i);
        if (j0 == 0) carry = AccessPattern{};
        const Tile ot = out_pool.next(), yt = direct ? ot : y_pool.next();
        const AccessPattern y = yt.region(0, t.p, 0, f), o = ot.region(0, t.p, 0, f);
        b.emit(device::tensor_scan(AluOp::add, y, items.xs[i]));
        if (carry.present()) b.tensor_scalar(AluOp::add, y, y, carry);
        carry = yt.region(0, t.p, f - 1, 1);
        if (!direct) b.copy(o, y);
        b.store(hbm_pattern(c.out_io, c.out.dtype, t.out_base + j0 * w.out_col_stride, t.p, w.out_row_stride,
                            {{f, static_cast<int32_t>(w.out_col_stride)}}),
                o);
      });
}

namespace {

// f16 holds every integer up to 2048 exactly: the widest chunk whose 16-bit indices are exact.
constexpr uint32_t kF16ExactIndices = 2048;
constexpr uint32_t kFoldColumns = 7;

// The argmax of a row tile from its chunks' candidates (k = 1): the value `cand` [p, chunks] and the
// index within its chunk `where` [p, chunks] (f16) of each chunk's first largest. On GpSimd, chunk by
// chunk in order: chunk j wins when its value ranks above the best so far (NaN above every number, as
// max8; equal values keep the earlier chunk, so ties give the lowest index, as torch). Returns the f32
// index [p, 1] in `fold`; `value`, when given, receives the largest value's place (topk's values).
AccessPattern fold_chunks(KernelBuilder& b, const Tile& fold, const Tile& cand, const Tile& where, uint16_t p,
                          uint32_t chunks, uint32_t chunk, AccessPattern* value) {
  const Engine g = Engine::gpsimd;
  const AccessPattern best_a = fold.column(p, 0), best_b = fold.column(p, 1), index = fold.column(p, 2),
                      sel = fold.column(p, 3), global = fold.column(p, 4), t = fold.column(p, 5),
                      u = fold.column(p, 6);
  b.tensor_scalar(AluOp::bypass, index, where.column(p, 0), 0.0f, false, g);
  AccessPattern best = cand.column(p, 0);
  for (uint32_t j = 1; j < chunks; ++j) {
    const AccessPattern v = cand.column(p, j);
    // sel = v > best, or v is NaN and best is not (is_gt is false with a NaN operand).
    b.tensor_tensor(AluOp::is_gt, sel, v, best, g);
    b.tensor_tensor(AluOp::not_equal, t, v, v, g);
    b.tensor_tensor(AluOp::is_equal, u, best, best, g);
    b.tensor_tensor(AluOp::multiply, t, t, u, g);
    b.tensor_tensor(AluOp::add, sel, sel, t, g);
    // index += sel * (j * chunk + where_j - index): integers below 2^24, exact in f32.
    b.tensor_scalar(AluOp::add, global, where.column(p, j), static_cast<float>(int64_t{j} * chunk), false, g);
    b.tensor_tensor(AluOp::subtract, global, global, index, g);
    b.tensor_tensor(AluOp::multiply, global, global, sel, g);
    b.tensor_tensor(AluOp::add, index, index, global, g);
    if (j + 1 == chunks && !value) break;
    // best = sel ? v : best, by selection (exact, a NaN kept as NaN).
    const AccessPattern next = (j % 2 == 1) ? best_a : best_b;
    b.tensor_tensor(AluOp::keep_if, next, v, sel, g);
    b.tensor_tensor(AluOp::keep_unless, t, best, sel, g);
    b.tensor_tensor(AluOp::add, next, next, t, g);
    best = next;
  }
  if (value) *value = best;
  return index;
}

// The k <= 8 largest along the dim and their indices, one loop for topk (values and indices) and argmax
// (k = 1, the indices only, the dim dropped unless keepdim): `values_io` is the values' output or
// absent, `indices` / `indices_io` the indices' output.
void build_top(EagerContext& c, uint32_t kk, bool largest, std::optional<uint32_t> values_io, const TensorDesc& indices,
               uint32_t indices_io, bool drop_dim) {
  KernelBuilder& b = c.b;
  const TensorDesc& in = c.inputs[0];
  const RowWalk w = row_walk(c, drop_dim);
  if (kk == 0 || w.cols == 0 || indices.shape.product() == 0) return;
  // The largest 16-bit floats are some of them, so they are kept in their dtype (exact): max8 then runs
  // at the Vector engine's 16-bit rate, twice the 32-bit one (as softmax's row max, emit.cpp).
  const DType value_dtype = dtype_is_floating(in.dtype) && dtype_size(in.dtype) == 2 ? in.dtype : DType::f32;
  // k = 1 of 16-bit floats: find_index8 writes 16-bit indices (NKI's nc_find_index8 writes uint16 or
  // uint32 [A13]), so that it too streams at the 16-bit rate (cost_model.cpp: every operand 16-bit);
  // the simulator's 16-bit integer stand-in is f16, exact up to 2048, so chunks are at most 2048 wide,
  // and GpSimd folds the chunks' candidates (fold_chunks below), leaving the Vector engine the two
  // streaming passes per chunk. Without it argmax bf16 is Vector-bound at the 32-bit rate (issue 19).
  const bool index16 = kk == 1 && value_dtype != DType::f32;
  const uint32_t max_chunk = index16 ? kF16ExactIndices : kStreamFree;
  // Chunks of equal size, so that each holds at least k elements.
  const uint32_t chunks = static_cast<uint32_t>((w.cols + max_chunk - 1) / max_chunk);
  const uint32_t chunk = static_cast<uint32_t>((w.cols + chunks - 1) / chunks);
  SIGHTLINE_CHECK(w.cols - int64_t{chunks - 1} * chunk >= kk, "{}: rows of {} split into chunks of {} leave "
                  "fewer than k = {} in the last", op_name(c.op), w.cols, chunk, kk);
  const bool negate = !largest;
  // Loads run `ahead` items ahead. A row tile's store waits for its fold on GpSimd, and the DMA queue
  // holds every later load behind it: with index16 the loads run up to two row tiles of chunks ahead (at
  // most 8 chunks of 2048, 32 KiB of a partition for bf16), so that the fold's wait falls on loads not
  // yet needed.
  const size_t ahead = index16 ? std::min<size_t>(2 * size_t{std::max<uint32_t>(chunks, 2)}, 8) : 2;
  TilePool x_pool = b.pool("x", in.dtype, chunk, static_cast<uint32_t>(ahead + 1));
  TilePool cand_pool = b.pool("cand_value", value_dtype, chunks * kk, 2);
  TilePool where_pool = b.pool("cand_index", index16 ? DType::f16 : DType::f32, chunks * kk, 2);
  TilePool fold_pool;
  if (index16) fold_pool = b.pool("fold", DType::f32, kFoldColumns, 2);
  TilePool pick_pool = b.pool("pick", value_dtype, kk, 2), pos_pool = b.pool("pick_pos", DType::f32, kk, 2);
  TilePool value_pool, index_pool = b.pool("indices", DType::i32, kk, 3);
  if (values_io) value_pool = b.pool("values", c.out.dtype, kk, 3);
  Tile cand_ids, onehot;
  if (chunks > 1 && !index16) {
    cand_ids = b.sbuf(DType::f32, chunks * kk, 0, "cand_ids");
    b.iota(cand_ids.ap(), 0.0f, 0.0f);  // 0, 1, ... along the free axis on every partition
    onehot = b.sbuf(DType::f32, chunks * kk, 0, "onehot");
  }
  // Software pipeline over (row tile, chunk) items: the chunk loads run two items ahead (pipeline(),
  // eager_internal.h), so no DMA queue holds a load behind the previous tile's store.
  ChunkItems items(w, b.partitions(), chunk, chunks);
  Tile cand, where;
  pipeline(
      items.size(), ahead, [&](size_t i) { items.load(c, x_pool, i); },
      [&](size_t i) {
        const RowTile& t = items.tile(i);
        const uint16_t p = t.p;
        const uint32_t j = static_cast<uint32_t>(i % chunks);
        const int64_t j0 = items.span(i).first;
        if (j == 0) cand = cand_pool.next(), where = where_pool.next();
        const AccessPattern& x = items.xs[i];
        if (negate) b.tensor_scalar(AluOp::multiply, x, x, -1.0f);
        const AccessPattern value = cand.region(0, p, j * kk, kk), index = where.region(0, p, j * kk, kk);
        b.emit(device::max8(value, x));
        b.emit(device::find_index8(index, x, value));
        if (!index16 && j0 > 0) b.tensor_scalar(AluOp::add, index, index, static_cast<float>(j0));
        if (j + 1 < chunks) return;
        AccessPattern values = cand.region(0, p, 0, kk), positions = where.region(0, p, 0, kk);
        if (index16) {
          positions = fold_chunks(b, fold_pool.next(), cand, where, p, chunks, chunk, values_io ? &values : nullptr);
        } else if (chunks > 1) {
          // The top k of the candidates, then the index each came from by a one-hot sum.
          values = pick_pool.next().region(0, p, 0, kk);
          const Tile pos = pos_pool.next();
          b.emit(device::max8(values, cand.rows(p)));
          b.emit(device::find_index8(pos.region(0, p, 0, kk), cand.rows(p), values));
          for (uint32_t r = 0; r < kk; ++r) {
            b.tensor_scalar(AluOp::is_equal, onehot.rows(p), cand_ids.rows(p), pos.column(p, r));
            b.tensor_tensor(AluOp::multiply, onehot.rows(p), onehot.rows(p), where.rows(p));
            b.reduce(AluOp::add, pos.column(p, r), onehot.rows(p));
          }
          positions = pos.region(0, p, 0, kk);
        }
        AccessPattern vo;
        if (values_io) {
          if (negate) b.tensor_scalar(AluOp::multiply, values, values, -1.0f);
          vo = value_pool.next().region(0, p, 0, kk);
          b.copy(vo, values);
        }
        const AccessPattern io = index_pool.next().region(0, p, 0, kk);
        if (index16) {
          b.tensor_scalar(AluOp::bypass, io, positions, 0.0f, false, Engine::gpsimd);
        } else {
          b.copy(io, positions);
        }
        if (values_io) {
          b.store(hbm_pattern(*values_io, c.out.dtype, t.out_base, p, w.out_row_stride,
                              {{kk, static_cast<int32_t>(w.out_col_stride)}}),
                  vo);
        }
        b.store(hbm_pattern(indices_io, DType::i32, t.out_base, p, w.out_row_stride,
                            {{kk, static_cast<int32_t>(w.out_col_stride)}}),
                io);
      });
}

}  // namespace

void build_argmax(EagerContext& c) {
  build_top(c, 1, /*largest=*/true, std::nullopt, c.out, c.out_io, /*drop_dim=*/true);
}

void build_topk(EagerContext& c) {
  SIGHTLINE_CHECK(c.more_out.size() == 1 && c.more_out_io.size() == 1, "aten::topk: needs the indices output");
  const TensorDesc& idx = c.more_out[0];
  SIGHTLINE_CHECK(idx.shape == c.out.shape && idx.strides == c.out.strides,
                  "aten::topk: the values {} and indices {} must have one layout", c.out.shape, idx.shape);
  const int64_t k = c.attrs.k;
  SIGHTLINE_CHECK(k <= 8,
                  "aten::topk on the device: k = {} but the Vector engine's max8 finds at most 8 per pass (rounds "
                  "that replace the found values are not modeled); use k <= 8, or run topk on cpu", k);
  if (k <= 0) return;
  build_top(c, static_cast<uint32_t>(k), c.attrs.largest, c.out_io, idx, c.more_out_io[0], /*drop_dim=*/false);
}

}  // namespace sightline::kernels
