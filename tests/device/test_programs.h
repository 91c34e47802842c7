// Hand-written device programs shared by the device tests and benchmarks: a harness that stages
// host data into HBM and SBUF around one instruction, a tiled matmul and an RMSNorm-style kernel.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "device/core.h"

namespace sightline::device::testing {

// Copies `values` (float) into a host buffer of `dtype` elements.
inline std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    dtype_visit(dtype, [&]<typename T>() {
      T v;
      if constexpr (std::is_same_v<T, int32_t>) {
        v = static_cast<int32_t>(values[i]);
      } else {
        v = T(values[i]);
      }
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    });
  }
  return out;
}

inline std::vector<float> decode(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    dtype_visit(dtype, [&]<typename T>() {
      T v;
      std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
      out[i] = static_cast<float>(v);
    });
  }
  return out;
}

// One-instruction programs: inputs are DMA'd HBM -> SBUF on queue 0 (semaphore 0), the instruction under
// test waits for them and signals semaphore 1, and each output is DMA'd SBUF -> HBM after it.
class Harness {
 public:
  explicit Harness(Spec spec) : core_(std::move(spec)) {
    exe_.name = "harness";
    exe_.semaphore_count = 2;
    exe_.dma_queues.resize(1);
  }

  // Stages `values` as [partitions, free] of `dtype` at `sbuf_offset`; returns the SBUF operand.
  AccessPattern input(const std::string& name, uint16_t partitions, uint32_t free, DType dtype,
                      const std::vector<float>& values, uint64_t sbuf_offset) {
    const uint32_t index = add_io(name, partitions, free, dtype, IoKind::input);
    host_inputs_.push_back({index, encode(values, dtype)});
    AccessPattern on_chip = sbuf(0, partitions, sbuf_offset, dtype, {free});
    Instruction load = dma_copy(on_chip, hbm(index, 0, partitions, free, dtype, {free}));
    load.updates.push_back({0, 1});
    exe_.dma_queues[0].push_back(load);
    ++loads_;
    return on_chip;
  }

  // Declares an output read back from `on_chip` (an SBUF operand of contiguous [partitions, free]).
  void output(const std::string& name, const AccessPattern& on_chip) {
    const uint32_t free = static_cast<uint32_t>(on_chip.free_elements());
    const uint32_t index = add_io(name, on_chip.partition_count, free, on_chip.dtype, IoKind::output);
    outputs_.push_back(index);
    Instruction store =
        dma_copy(hbm(index, 0, on_chip.partition_count, free, on_chip.dtype, {free}), on_chip);
    store.waits.push_back({1, 1});
    stores_.push_back(store);
  }

  // Runs `in` (waits and updates added here) and returns each output as floats.
  std::vector<std::vector<float>> run(Instruction in, RunResult* result = nullptr) {
    in.waits.push_back({0, loads_});
    in.updates.push_back({1, 1});
    exe_.stream(in.engine()).push_back(in);
    for (auto& s : stores_) exe_.dma_queues[0].push_back(s);
    std::vector<uint64_t> addresses;
    for (const auto& t : exe_.io) addresses.push_back(core_.hbm_allocate(t.bytes()));
    for (const auto& [index, bytes] : host_inputs_)
      core_.hbm_write(addresses[index], bytes.data(), bytes.size());
    RunResult r = core_.run(exe_, addresses);
    if (result) *result = r;
    std::vector<std::vector<float>> out;
    for (uint32_t index : outputs_) {
      std::vector<uint8_t> bytes(exe_.io[index].bytes());
      core_.hbm_read(addresses[index], bytes.data(), bytes.size());
      out.push_back(decode(bytes, exe_.io[index].dtype));
    }
    return out;
  }

  Core& core() { return core_; }
  Executable& executable() { return exe_; }

 private:
  uint32_t add_io(const std::string& name, uint16_t partitions, uint32_t free, DType dtype, IoKind kind) {
    exe_.io.push_back({name, dtype, {partitions, free}, kind});
    return static_cast<uint32_t>(exe_.io.size() - 1);
  }

  Core core_;
  Executable exe_;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> host_inputs_;
  std::vector<uint32_t> outputs_;
  std::vector<Instruction> stores_;
  uint32_t loads_ = 0;
};

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) over an f32 [rows, cols] tensor (io 0 = x, io 1 = y).
// Tiles of 128 rows, double-buffered in SBUF; each tile's load and store is split over every DMA queue.
// Scalar: square with accumulate (sum of squares), then rsqrt(sum / cols + eps). Vector: multiply.
inline Executable rms_norm_program(const Spec& spec, uint32_t rows, uint32_t cols, float eps) {
  Executable exe;
  exe.name = "rms_norm_test";
  exe.io = {{"x", DType::f32, {rows, cols}, IoKind::input}, {"y", DType::f32, {rows, cols}, IoKind::output}};
  exe.source_ops = {"aten::rms_norm"};
  const uint32_t queues = spec.dma.queues;
  exe.dma_queues.resize(queues);
  // Semaphores: 0/1 loads into buffer 0/1, 2/3 stores from buffer 0/1, 4 scalar done, 5 vector done.
  exe.semaphore_count = 6;
  const uint32_t p_max = spec.partitions;
  const uint32_t tiles = (rows + p_max - 1) / p_max;
  const uint64_t row_bytes = uint64_t{cols} * 4;
  const uint64_t x_off[2] = {0, row_bytes}, y_off[2] = {2 * row_bytes, 3 * row_bytes};
  const uint64_t scratch = 4 * row_bytes, stats = 5 * row_bytes;  // stats: sum[2], rstd[2]
  uint32_t loads_done[2] = {0, 0}, stores_done[2] = {0, 0};
  std::vector<uint32_t> stores_after_tile(tiles);

  auto transfers = [&](uint32_t tile, bool load, uint32_t wait_vector, uint32_t* counter) {
    const uint32_t b = tile % 2, first_row = tile * p_max, p = std::min(p_max, rows - first_row);
    const uint32_t chunk = (p + queues - 1) / queues;
    for (uint32_t q = 0, start = 0; start < p; ++q, start += chunk) {
      const uint16_t count = static_cast<uint16_t>(std::min(chunk, p - start));
      AccessPattern on_chip =
          sbuf(static_cast<uint16_t>(start), count, load ? x_off[b] : y_off[b], DType::f32, {cols});
      AccessPattern off_chip =
          hbm(load ? 0 : 1, (uint64_t{first_row} + start) * row_bytes, count, cols, DType::f32, {cols});
      Instruction t = load ? dma_copy(on_chip, off_chip) : dma_copy(off_chip, on_chip);
      if (wait_vector) t.waits.push_back({5, wait_vector});
      t.updates.push_back({static_cast<uint16_t>(load ? b : 2 + b), 1});
      t.source_op = 0;
      exe.dma_queues[q].push_back(t);
      ++*counter;
    }
  };

  auto load = [&](uint32_t tile) {
    // Buffer tile % 2 was last read by the vector multiply of tile - 2.
    transfers(tile, true, tile >= 2 ? tile - 1 : 0, &loads_done[tile % 2]);
    const uint32_t b = tile % 2, p = std::min(p_max, rows - tile * p_max);
    const uint16_t pc = static_cast<uint16_t>(p);
    AccessPattern x = sbuf(0, pc, x_off[b], DType::f32, {cols});
    AccessPattern sum = sbuf(0, pc, stats + 4 * b, DType::f32, {1});
    AccessPattern rstd = sbuf(0, pc, stats + 8 + 4 * b, DType::f32, {1});
    Instruction square = activate(ActFunc::square, sbuf(0, pc, scratch, DType::f32, {cols}), x);
    square.aux = sum;
    square.waits.push_back({static_cast<uint16_t>(b), loads_done[b]});
    if (tile >= 2) square.waits.push_back({5, tile - 1});  // stats[b] free: read by vector of tile - 2
    square.source_op = 0;
    Instruction root = activate(ActFunc::rsqrt, rstd, sum, 1.0f / static_cast<float>(cols), eps);
    root.updates.push_back({4, 1});
    root.source_op = 0;
    exe.stream(Engine::scalar).push_back(square);
    exe.stream(Engine::scalar).push_back(root);
    Instruction mul = tensor_scalar(AluOp::multiply, sbuf(0, pc, y_off[b], DType::f32, {cols}), x, rstd);
    mul.waits.push_back({4, tile + 1});
    if (tile >= 2) mul.waits.push_back({static_cast<uint16_t>(2 + b), stores_after_tile[tile - 2]});
    mul.updates.push_back({5, 1});
    mul.source_op = 0;
    exe.stream(Engine::vector).push_back(mul);
  };
  auto store = [&](uint32_t tile) {
    transfers(tile, false, tile + 1, &stores_done[tile % 2]);
    stores_after_tile[tile] = stores_done[tile % 2];
  };

  // Per DMA queue: load 0, then (load i+1, store i): the next tile loads while this one computes.
  load(0);
  for (uint32_t tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) load(tile + 1);
    store(tile);
  }
  return exe;
}

// C[m, n] = sum_k A[m, k] B[k, n], f32, with io 0 = A^T as [K, M], io 1 = B as [K, N], io 2 = C as [M, N].
// K a multiple of 128, M a multiple of 128 or below 128 (one output tile of M rows, as a model's 32
// tokens are), N <= 512. All of A^T and B are loaded into SBUF first.
inline Executable matmul_program(uint32_t m, uint32_t k, uint32_t n) {
  Executable exe;
  exe.name = "matmul_test";
  exe.io = {{"a_t", DType::f32, {k, m}, IoKind::input},
            {"b", DType::f32, {k, n}, IoKind::input},
            {"c", DType::f32, {m, n}, IoKind::output}};
  exe.source_ops = {"aten::mm"};
  exe.semaphore_count = 3;  // 0 loads, 1 matmul groups done, 2 PSUM evacuated
  exe.dma_queues.resize(2);
  const uint32_t kt = k / 128, mt = m < 128 ? 1 : m / 128;
  const uint16_t tile = static_cast<uint16_t>(std::min<uint32_t>(m, 128));  // output rows of a tile
  const uint64_t a_bytes = uint64_t{m} * 4, b_base = uint64_t{kt} * a_bytes,
                 c_base = b_base + uint64_t{kt} * n * 4;
  for (uint32_t t = 0; t < kt; ++t) {
    Instruction la = dma_copy(sbuf(0, 128, t * a_bytes, DType::f32, {m}),
                              hbm(0, t * 128ull * a_bytes, 128, m, DType::f32, {m}));
    Instruction lb = dma_copy(sbuf(0, 128, b_base + t * n * 4ull, DType::f32, {n}),
                              hbm(1, t * 128ull * n * 4, 128, n, DType::f32, {n}));
    la.updates.push_back({0, 1});
    lb.updates.push_back({0, 1});
    exe.dma_queues[0].push_back(la);
    exe.dma_queues[1].push_back(lb);
  }
  for (uint32_t i = 0; i < mt; ++i) {
    const uint64_t bank = i * 2048ull;  // one PSUM bank per output tile
    for (uint32_t t = 0; t < kt; ++t) {
      AccessPattern stationary = sbuf(0, 128, t * a_bytes + i * 128ull * 4, DType::f32, {tile});
      AccessPattern moving = sbuf(0, 128, b_base + t * n * 4ull, DType::f32, {n});
      Instruction mm = matmul(psum(0, tile, bank, DType::f32, {n}), stationary, moving, t > 0);
      if (i == 0 && t == 0) mm.waits.push_back({0, 2 * kt});
      if (t + 1 == kt) mm.updates.push_back({1, 1});
      mm.source_op = 0;
      exe.stream(Engine::tensor).push_back(mm);
    }
    Instruction evacuate = tensor_copy(sbuf(0, tile, c_base + i * n * 4ull, DType::f32, {n}),
                                       psum(0, tile, bank, DType::f32, {n}));
    evacuate.waits.push_back({1, i + 1});
    evacuate.updates.push_back({2, 1});
    exe.stream(Engine::vector).push_back(evacuate);
    Instruction out = dma_copy(hbm(2, i * 128ull * n * 4, tile, n, DType::f32, {n}),
                               sbuf(0, tile, c_base + i * n * 4ull, DType::f32, {n}));
    out.waits.push_back({2, i + 1});
    exe.dma_queues[1].push_back(out);
  }
  return exe;
}

}  // namespace sightline::device::testing
