#include "sightline/kernels/builder.h"

#include <algorithm>
#include <cmath>

#include "device/cost_model.h"
#include "device/validate.h"
#include "kernels/dma_rule.h"
#include "sightline/error.h"

namespace sightline::kernels {

using device::Engine;
using device::Instruction;

AccessPattern Tile::rows(uint16_t p) const {
  return region(0, p, 0, free_elements);
}

AccessPattern Tile::region(uint16_t p0, uint16_t p, uint32_t f0, uint32_t f) const {
  SIGHTLINE_CHECK(uint32_t{p0} + p <= partitions && p > 0,
                  "tile region: partitions [{}, {}) do not fit the tile's {} partitions", p0, p0 + p,
                  partitions);
  SIGHTLINE_CHECK(uint64_t{f0} + f <= free_elements && f > 0,
                  "tile region: elements [{}, {}) do not fit the tile's {} elements per partition", f0,
                  f0 + f, free_elements);
  AccessPattern ap;
  ap.memory = memory;
  ap.dtype = dtype;
  ap.partition_start = p0;
  ap.partition_count = p;
  ap.offset = offset + uint64_t{f0} * dtype_size(dtype);
  ap.dim_count = 1;
  ap.dims[0] = {f, 1};
  return ap;
}

AccessPattern Tile::shaped(uint16_t p, std::initializer_list<uint32_t> sizes) const {
  SIGHTLINE_CHECK(sizes.size() >= 1 && sizes.size() <= 4, "tile shape: 1 to 4 free dims, got {}",
                  sizes.size());
  AccessPattern ap = rows(p);
  uint64_t total = 1;
  for (uint32_t s : sizes) total *= s;
  SIGHTLINE_CHECK(total <= free_elements, "tile shape: {} elements per partition but the tile has {}", total,
                  free_elements);
  ap.dim_count = static_cast<uint8_t>(sizes.size());
  int64_t stride = 1;
  int d = static_cast<int>(sizes.size()) - 1;
  for (auto it = std::rbegin(sizes); it != std::rend(sizes); ++it, --d) {
    ap.dims[static_cast<size_t>(d)] = {*it, static_cast<int32_t>(stride)};
    stride *= *it;
  }
  return ap;
}

AccessPattern hbm_pattern(uint32_t tensor, DType dtype, int64_t element_offset, uint16_t partitions,
                          int64_t partition_stride, std::initializer_list<device::FreeDim> free) {
  SIGHTLINE_CHECK(free.size() <= 4, "hbm_pattern: at most 4 free dims, got {}", free.size());
  SIGHTLINE_CHECK(element_offset >= 0, "hbm_pattern: negative element offset {}", element_offset);
  AccessPattern ap;
  ap.memory = Memory::hbm;
  ap.dtype = dtype;
  ap.tensor = tensor;
  ap.partition_start = 0;
  ap.partition_count = partitions;
  ap.partition_stride = partition_stride;
  ap.offset = static_cast<uint64_t>(element_offset) * dtype_size(dtype);
  ap.dim_count = static_cast<uint8_t>(free.size());
  size_t d = 0;
  for (const device::FreeDim& f : free) ap.dims[d++] = f;
  return ap;
}

Tile TilePool::next() {
  SIGHTLINE_CHECK(!tiles_.empty(), "TilePool::next on an empty pool");
  const Tile t = tiles_[cursor_];
  cursor_ = (cursor_ + 1) % tiles_.size();
  return t;
}

KernelBuilder::KernelBuilder(const device::Spec& spec, std::string name)
    : spec_(spec), hazards_(device::kComputeEngineCount + spec.dma.queues) {
  exe_.name = std::move(name);
  exe_.semaphore_count = hazards_.stream_count();
  sbuf_.capacity = spec.sbuf_bytes_per_partition;
  sbuf_.free_ranges.push_back({0, sbuf_.capacity});
  psum_.capacity = spec.psum_bytes_per_partition;
  psum_.free_ranges.push_back({0, psum_.capacity});
  exe_.metadata.emplace_back("builder", "sightline::kernels::KernelBuilder");
}

uint32_t KernelBuilder::add_io(std::string name, DType dtype, std::vector<int64_t> shape,
                               device::IoKind kind) {
  for (int64_t d : shape) SIGHTLINE_CHECK(d >= 0, "I/O tensor '{}': negative dim {}", name, d);
  exe_.io.push_back({std::move(name), dtype, std::move(shape), kind});
  return static_cast<uint32_t>(exe_.io.size() - 1);
}

uint32_t KernelBuilder::input(std::string name, DType dtype, std::vector<int64_t> shape) {
  return add_io(std::move(name), dtype, std::move(shape), device::IoKind::input);
}

uint32_t KernelBuilder::output(std::string name, DType dtype, std::vector<int64_t> shape) {
  return add_io(std::move(name), dtype, std::move(shape), device::IoKind::output);
}

void KernelBuilder::set_source_op(std::string_view name) {
  const auto it = std::find(exe_.source_ops.begin(), exe_.source_ops.end(), name);
  if (it != exe_.source_ops.end()) {
    source_op_ = static_cast<uint32_t>(it - exe_.source_ops.begin());
    return;
  }
  exe_.source_ops.emplace_back(name);
  source_op_ = static_cast<uint32_t>(exe_.source_ops.size() - 1);
}

KernelBuilder::Allocator& KernelBuilder::allocator(Memory memory) {
  SIGHTLINE_CHECK(memory == Memory::sbuf || memory == Memory::psum, "tiles live in SBUF or PSUM, not {}",
                  device::memory_name(memory));
  return memory == Memory::sbuf ? sbuf_ : psum_;
}

const KernelBuilder::Allocator& KernelBuilder::allocator(Memory memory) const {
  return memory == Memory::sbuf ? sbuf_ : psum_;
}

uint32_t KernelBuilder::free_bytes(Memory memory) const {
  uint32_t n = 0;
  for (const Range& r : allocator(memory).free_ranges) n += r.end - r.begin;
  return n;
}

Tile KernelBuilder::allocate(Memory memory, DType dtype, uint32_t free_elements, uint16_t partitions,
                             std::string_view name) {
  Allocator& a = allocator(memory);
  if (partitions == 0) partitions = static_cast<uint16_t>(spec_.partitions);
  SIGHTLINE_CHECK(partitions <= spec_.partitions, "tile '{}': {} partitions requested but the {} core has {}",
                  name, partitions, spec_.name, spec_.partitions);
  SIGHTLINE_CHECK(free_elements > 0, "tile '{}': a tile needs at least one element per partition", name);
  const uint64_t bytes = uint64_t{free_elements} * dtype_size(dtype);
  // PSUM tiles start on a bank boundary; SBUF tiles on 64 bytes so tiles never share a DMA burst.
  const uint32_t align = memory == Memory::psum ? spec_.psum_bank_bytes() : 64;
  for (size_t i = 0; i < a.free_ranges.size(); ++i) {
    Range& r = a.free_ranges[i];
    const uint32_t begin = (r.begin + align - 1) / align * align;
    if (begin >= r.end || r.end - begin < bytes) continue;
    const Range taken{begin, begin + static_cast<uint32_t>(bytes)};
    const Range after{taken.end, r.end};
    const bool keep_before = begin > r.begin;
    if (keep_before) {
      r.end = begin;
    } else {
      a.free_ranges.erase(a.free_ranges.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (after.end > after.begin) {
      a.free_ranges.insert(a.free_ranges.begin() + static_cast<std::ptrdiff_t>(keep_before ? i + 1 : i),
                           after);
    }
    Tile t{memory, dtype, partitions, taken.begin, free_elements, next_tile_id_++};
    a.live.push_back({t.id, taken});
    return t;
  }
  uint32_t largest = 0;
  for (const Range& r : a.free_ranges) largest = std::max(largest, r.end - r.begin);
  fail(
      "{} overflow: tile '{}' needs {} bytes per partition ({} x {}), but only {} of the {} bytes per "
      "partition are free (largest free range {}, {} tiles live); free tiles or use smaller ones",
      device::memory_name(memory), name, bytes, free_elements, dtype_name(dtype), free_bytes(memory),
      a.capacity, largest, a.live.size());
}

TilePool KernelBuilder::pool(std::string_view name, DType dtype, uint32_t free_elements, size_t count,
                             Memory memory) {
  SIGHTLINE_CHECK(count >= 1, "tile pool '{}' needs at least one buffer", name);
  TilePool p;
  for (size_t i = 0; i < count; ++i) p.tiles_.push_back(allocate(memory, dtype, free_elements, 0, name));
  return p;
}

void KernelBuilder::free(const Tile& tile) {
  Allocator& a = allocator(tile.memory);
  const auto it =
      std::find_if(a.live.begin(), a.live.end(), [&](const auto& l) { return l.first == tile.id; });
  SIGHTLINE_CHECK(it != a.live.end(), "free: tile {} is not allocated (freed twice?)", tile.id);
  const Range r = it->second;
  a.live.erase(it);
  auto pos = std::lower_bound(a.free_ranges.begin(), a.free_ranges.end(), r,
                              [](const Range& x, const Range& y) { return x.begin < y.begin; });
  pos = a.free_ranges.insert(pos, r);
  // Coalesce with the neighbours.
  if (pos + 1 != a.free_ranges.end() && pos->end == (pos + 1)->begin) {
    pos->end = (pos + 1)->end;
    a.free_ranges.erase(pos + 1);
  }
  if (pos != a.free_ranges.begin() && (pos - 1)->end == pos->begin) {
    (pos - 1)->end = pos->end;
    a.free_ranges.erase(pos);
  }
}

void KernelBuilder::free(const TilePool& pool) {
  for (const Tile& t : pool.tiles_) free(t);
}

int KernelBuilder::next_queue() {
  const int q = static_cast<int>(queue_cursor_);
  queue_cursor_ = (queue_cursor_ + 1) % spec_.dma.queues;
  return q;
}

uint32_t KernelBuilder::view(uint32_t tensor, int64_t element_offset, DType dtype) {
  SIGHTLINE_CHECK(tensor < exe_.io.size(), "view: I/O tensor {} is not declared ({} are)", tensor, exe_.io.size());
  SIGHTLINE_CHECK(element_offset >= 0, "view: negative element offset {}", element_offset);
  if (element_offset == 0) return tensor;
  views_.push_back({tensor, static_cast<uint64_t>(element_offset) * dtype_size(dtype)});
  return kFirstView + static_cast<uint32_t>(views_.size() - 1);
}

void KernelBuilder::resolve_view(AccessPattern& ap) const {
  if (ap.memory != Memory::hbm || ap.tensor < kFirstView) return;
  const size_t index = ap.tensor - kFirstView;
  SIGHTLINE_CHECK(index < views_.size(), "kernel '{}': HBM tensor {} is neither declared nor a view", exe_.name,
                  ap.tensor);
  ap.tensor = views_[index].tensor;
  ap.offset += views_[index].byte_offset;
}

KernelBuilder::KernelScope KernelBuilder::begin_kernel() {
  const KernelScope scope{next_tile_id_, queue_cursor_};
  queue_cursor_ = 0;
  return scope;
}

void KernelBuilder::end_kernel(const KernelScope& scope) {
  for (const Memory memory : {Memory::sbuf, Memory::psum}) {
    std::vector<Tile> owned;
    for (const auto& [id, range] : allocator(memory).live) {
      if (id >= scope.first_tile_id) owned.push_back({memory, DType::f32, 0, 0, 0, id});
    }
    for (const Tile& t : owned) free(t);
  }
  queue_cursor_ = scope.queue_cursor;
}

std::vector<size_t> KernelBuilder::dma_queue_lengths() const {
  std::vector<size_t> lengths(spec_.dma.queues, 0);
  for (size_t q = 0; q < exe_.dma_queues.size() && q < lengths.size(); ++q) lengths[q] = exe_.dma_queues[q].size();
  return lengths;
}

std::vector<double> KernelBuilder::dma_queue_ns(const std::vector<size_t>& since) const {
  std::vector<double> ns(spec_.dma.queues, 0.0);
  for (size_t q = 0; q < exe_.dma_queues.size() && q < ns.size(); ++q) {
    const std::vector<Instruction>& queue = exe_.dma_queues[q];
    for (size_t i = q < since.size() ? since[q] : 0; i < queue.size(); ++i) {
      ns[q] += spec_.dma.fixed_cost_ns +
               static_cast<double>(std::max(queue[i].dst.bytes(), queue[i].src0.bytes())) / spec_.dma.queue_bytes_per_ns;
    }
  }
  return ns;
}

void KernelBuilder::set_queue_order(std::vector<uint32_t> order) {
  if (!order.empty()) {
    SIGHTLINE_CHECK(order.size() == spec_.dma.queues &&
                        std::all_of(order.begin(), order.end(), [&](uint32_t q) { return q < spec_.dma.queues; }),
                    "set_queue_order: the order must name one of the {} core's {} DMA queues for each of them",
                    spec_.name, spec_.dma.queues);
  }
  queue_order_ = std::move(order);
}

void KernelBuilder::emit(Instruction in, int dma_queue) {
  SIGHTLINE_CHECK(!built_, "kernel '{}': emit after build()", exe_.name);
  for (AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux}) resolve_view(*ap);
  if (in.source_op == device::kNoSourceOp) in.source_op = source_op_;
  if (in.engine() == Engine::dma) {
    if (dma_queue < 0) dma_queue = next_queue();
    SIGHTLINE_CHECK(static_cast<uint32_t>(dma_queue) < spec_.dma.queues,
                    "DMA queue {} does not exist; the {} core has queues 0..{}", dma_queue, spec_.name,
                    spec_.dma.queues - 1);
    if (!queue_order_.empty()) dma_queue = static_cast<int>(queue_order_[static_cast<size_t>(dma_queue)]);
    hazards_.track(in, HazardTracker::queue_stream(static_cast<uint32_t>(dma_queue)));
    if (exe_.dma_queues.size() <= static_cast<size_t>(dma_queue)) exe_.dma_queues.resize(dma_queue + 1);
    exe_.dma_queues[static_cast<size_t>(dma_queue)].push_back(std::move(in));
    return;
  }
  hazards_.track(in, HazardTracker::engine_stream(in.engine()));
  exe_.stream(in.engine()).push_back(std::move(in));
}

void KernelBuilder::dma(const AccessPattern& dst, const AccessPattern& src) {
  emit(device::dma_copy(dst, src));
}

uint64_t stream_min_piece_bytes(const device::Spec& spec) {
  // docs/hardware-model.md §1.4, "How a transfer is split": a queue hides the fixed cost of its other
  // slots' transfers behind one transfer's data only when that data takes at least F / (slots - 1).
  const uint32_t hiding = spec.dma.transfer_slots > 1 ? spec.dma.transfer_slots - 1 : 1;
  const double bytes = spec.dma.fixed_cost_ns / hiding * spec.dma.queue_bytes_per_ns;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(bytes)));
}

namespace {

// Below a few KiB a transfer is dominated by its fixed cost: dma_split and gather cut none smaller.
constexpr uint64_t kMinSplitPieceBytes = 4096;

// Calls piece(first, count) for the pieces [first, first + count) that cut `extent` rows of a transfer of
// `bytes` into at most one piece per queue and none below kMinSplitPieceBytes, the first `extent % n`
// pieces one row longer (dma_split and gather cut the same way).
template <typename Piece>
void for_each_piece(uint32_t queues, uint32_t extent, uint64_t bytes, const Piece& piece) {
  const uint64_t by_size = std::max<uint64_t>(1, bytes / kMinSplitPieceBytes);
  const uint32_t pieces = static_cast<uint32_t>(std::min<uint64_t>({queues, extent, by_size}));
  const uint32_t base = extent / pieces, extra = extent % pieces;
  uint32_t first = 0;
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint32_t count = base + (i < extra ? 1 : 0);
    piece(first, count);
    first += count;
  }
}

// Partitions (or, with by_partition false, elements of the outermost free dim) [first, first + count)
// of `ap`.
AccessPattern slice_pattern(AccessPattern ap, uint32_t first, uint32_t count, bool by_partition) {
  if (by_partition) {
    if (ap.memory == Memory::hbm) {
      ap.offset += static_cast<uint64_t>(static_cast<int64_t>(first) * ap.partition_stride *
                                         static_cast<int64_t>(dtype_size(ap.dtype)));
    } else {
      ap.partition_start = static_cast<uint16_t>(ap.partition_start + first);
    }
    ap.partition_count = static_cast<uint16_t>(count);
  } else {
    ap.offset += static_cast<uint64_t>(int64_t{first} * ap.dims[0].stride *
                                       static_cast<int64_t>(dtype_size(ap.dtype)));
    ap.dims[0].size = count;
  }
  return ap;
}

}  // namespace

void KernelBuilder::dma_split(const AccessPattern& dst, const AccessPattern& src) {
  SIGHTLINE_CHECK(dst.partition_count == src.partition_count && dst.free_elements() == src.free_elements(),
                  "dma: dst [{}, {}] and src [{}, {}] differ in shape", dst.partition_count,
                  dst.free_elements(), src.partition_count, src.free_elements());
  // No piece below kMinSplitPieceBytes. Pieces of stream_min_piece_bytes() would keep a stream of
  // transfers at the queues' peak, but they make a transfer alone on the queues slower
  // (docs/hardware-model.md §1.4, "How a transfer is split").
  // Split along partitions, or along the outermost free dim of a single-partition transfer, provided
  // both sides agree on that dim's size.
  const bool by_partition = dst.partition_count > 1;
  uint32_t extent = dst.partition_count;
  if (!by_partition) {
    if (dst.dim_count == 0 || src.dim_count == 0 || dst.dims[0].size != src.dims[0].size) {
      dma(dst, src);
      return;
    }
    extent = dst.dims[0].size;
  }
  for_each_piece(spec_.dma.queues, extent, std::max(dst.bytes(), src.bytes()), [&](uint32_t first, uint32_t count) {
    emit(device::dma_copy(slice_pattern(dst, first, count, by_partition),
                          slice_pattern(src, first, count, by_partition)));
  });
}

void KernelBuilder::load(const AccessPattern& tile, const AccessPattern& hbm) {
  if (hbm.memory == Memory::hbm && hbm.partition_stride == 0 && hbm.partition_count > 1 &&
      tile.memory == Memory::sbuf && tile.partition_count == hbm.partition_count) {
    AccessPattern row = hbm;
    row.partition_count = 1;
    load_broadcast(tile, row);
    return;
  }
  dma_split(tile, hbm);
}

namespace {

AccessPattern first_partition(AccessPattern ap) {
  ap.partition_count = 1;
  return ap;
}

// `row` read once per partition of `tile`: the stride-0 source of path (a).
AccessPattern broadcast_source(AccessPattern row, uint16_t partitions) {
  row.partition_stride = 0;
  row.partition_count = partitions;
  return row;
}

}  // namespace

bool KernelBuilder::broadcast_row_on_chip(const AccessPattern& tile, const AccessPattern& row) const {
  if (tile.memory != Memory::sbuf || tile.partition_count <= 1 || !dtype_is_floating(tile.dtype)) return false;
  // Each path's modeled latency alone on an idle core. (a) at its fastest, whatever split its caller
  // emits: one piece per queue (fewer when there are fewer partitions), all moving at once and sharing
  // the HBM bandwidth; the piece of the most partitions sets the time. (The time each path keeps the
  // queues busy was tried as the cost instead: it sends 128-element rows on chip too, which ESM-2 t12
  // at one sequence of 128 tokens gains from (1474.5 -> 1468.2 us) and at four loses (3607.9 -> 3647.5),
  // their copies waiting behind attention's GpSimd work.)
  const uint32_t pieces = std::min<uint32_t>(spec_.dma.queues, tile.partition_count);
  const uint16_t piece_partitions = static_cast<uint16_t>((tile.partition_count + pieces - 1) / pieces);
  AccessPattern piece_dst = tile;
  piece_dst.partition_count = piece_partitions;
  const double dma_ns = device::dma_instruction_ns(
      spec_, device::dma_copy(piece_dst, broadcast_source(row, piece_partitions)), static_cast<int>(pieces));
  // (b): the row alone, then the GpSimd instruction that copies it to every partition.
  const double on_chip_ns =
      device::dma_instruction_ns(spec_, device::dma_copy(first_partition(tile), row), 1) +
      device::compute_instruction_ns(spec_, device::partition_all_reduce(device::AluOp::multiply, tile,
                                                                         first_partition(tile)));
  return on_chip_ns < dma_ns;
}

void KernelBuilder::load_broadcast(const AccessPattern& tile, const AccessPattern& row, const DmaEmitter& dma) {
  SIGHTLINE_CHECK(row.memory == Memory::hbm && row.partition_count == 1,
                  "load_broadcast: the row must be an HBM pattern of one partition, not {}", row.partition_count);
  SIGHTLINE_CHECK(tile.memory == Memory::sbuf && tile.free_elements() == row.free_elements(),
                  "load_broadcast: the tile must be SBUF with the row's {} elements per partition, not {}",
                  row.free_elements(), tile.free_elements());
  auto transfer = [&](const AccessPattern& dst, const AccessPattern& src) {
    if (dma) {
      dma(dst, src);
    } else {
      dma_split(dst, src);
    }
  };
  if (!broadcast_row_on_chip(tile, row)) {
    transfer(tile, broadcast_source(row, tile.partition_count));
    return;
  }
  // The row lands in the tile's first partition; the all-reduce reads it (every read of an instruction
  // comes before its writes) and writes 1 * x to every partition, the first included.
  const AccessPattern first = first_partition(tile);
  transfer(first, row);
  partition_all_reduce(device::AluOp::multiply, tile, first);
}

void KernelBuilder::gather(const AccessPattern& dst, const AccessPattern& table,
                           const AccessPattern& row_indices) {
  // Cut by rows as dma_split cuts a copy, one piece per queue: each piece gathers a slice of the rows
  // (its indices and its destinations; the table whole, of which it moves only the rows it picks), so
  // the queues move the rows in parallel instead of one queue moving them all (an embedding of 128
  // tokens x 480 f32 took 12 us on one queue, 2 us over 16).
  if (dst.partition_count <= 1) {
    emit(device::dma_gather(dst, table, row_indices));
    return;
  }
  for_each_piece(spec_.dma.queues, dst.partition_count, dst.bytes(), [&](uint32_t first, uint32_t count) {
    emit(device::dma_gather(slice_pattern(dst, first, count, true), table,
                            slice_pattern(row_indices, first, count, true)));
  });
}

void KernelBuilder::tensor_tensor(AluOp op, const AccessPattern& dst, const AccessPattern& a,
                                  const AccessPattern& b, Engine on) {
  emit(device::tensor_tensor(op, dst, a, b, on));
}

void KernelBuilder::tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a, float scalar,
                                  bool reverse, Engine on) {
  emit(device::tensor_scalar(op, dst, a, scalar, reverse, on));
}

void KernelBuilder::tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a,
                                  const AccessPattern& per_partition, bool reverse, Engine on) {
  emit(device::tensor_scalar(op, dst, a, per_partition, reverse, on));
}

void KernelBuilder::reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src, bool negate) {
  emit(device::tensor_reduce(op, dst, src, negate));
}

void KernelBuilder::bn_stats(const AccessPattern& dst, const AccessPattern& src) {
  emit(device::bn_stats(dst, src));
}

void KernelBuilder::copy(const AccessPattern& dst, const AccessPattern& src) {
  emit(device::tensor_copy(dst, src));
}

void KernelBuilder::activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                             float bias, const AccessPattern& accumulate,
                             const AccessPattern& scale_per_partition) {
  Instruction in = device::activate(func, dst, src, scale, bias);
  in.aux = accumulate;
  in.src1 = scale_per_partition;
  emit(std::move(in));
}

void KernelBuilder::activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                             const AccessPattern& bias_per_partition, const AccessPattern& accumulate) {
  Instruction in = device::activate(func, dst, src, scale, bias_per_partition);
  in.aux = accumulate;
  emit(std::move(in));
}

void KernelBuilder::iota(const AccessPattern& dst, float base, float partition_step) {
  emit(device::iota(dst, base, partition_step));
}

void KernelBuilder::partition_all_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src) {
  emit(device::partition_all_reduce(op, dst, src));
}

void KernelBuilder::matmul(const AccessPattern& psum, const AccessPattern& stationary,
                           const AccessPattern& moving, bool accumulate) {
  emit(device::matmul(psum, stationary, moving, accumulate));
}

device::Executable KernelBuilder::build() {
  SIGHTLINE_CHECK(!built_, "kernel '{}': build() called twice", exe_.name);
  built_ = true;
  device::validate_executable(exe_, spec_);
  return std::move(exe_);
}

}  // namespace sightline::kernels
