// The simulated NeuronCore's instruction set.
//
// A core has four compute engines (Tensor, Vector, Scalar, GpSimd) and a set of DMA queues. Each runs
// its own in-order stream of Instructions; streams synchronize only through semaphores: an
// instruction starts once every wait (semaphore >= value) holds, and on completion adds its updates.
//
// Operands are AccessPatterns over one memory space:
//   * SBUF / PSUM: `partition_start`..+`partition_count` physical partitions; `offset` is the byte
//     offset inside each partition; up to 4 free dims [size, stride in elements], outermost first.
//   * HBM: `tensor` indexes the executable's I/O tensors (bound to HBM addresses at run time);
//     `offset` is a byte offset into it; partition p starts at offset + p * partition_stride elements.
//
// Example, y[p, :] = x[p, :] * x[p, :] on 128 x 512 f32 in SBUF, then signal semaphore 0:
//   Instruction mul = tensor_tensor(AluOp::multiply, sbuf(0, 128, 0, DType::f32, {512}), x, x);
//   mul.updates.push_back({0, 1});
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "sightline/dtype.h"

namespace sightline::device {

// The compute engines (one instruction stream each), then DMA (one stream per queue).
#define SIGHTLINE_COMPUTE_ENGINE_TABLE(X) X(tensor) X(vector) X(scalar) X(gpsimd)
#define SIGHTLINE_MEMORY_TABLE(X) X(none) X(hbm) X(sbuf) X(psum)
// One-column tables (the enum and its count); also used by device/executable.h.
#define SIGHTLINE_ISA_ENUM1(name) name,
#define SIGHTLINE_ISA_COUNT1(name) +1
enum class Engine : uint8_t { SIGHTLINE_COMPUTE_ENGINE_TABLE(SIGHTLINE_ISA_ENUM1) dma };
inline constexpr int kComputeEngineCount = 0 SIGHTLINE_COMPUTE_ENGINE_TABLE(SIGHTLINE_ISA_COUNT1);
inline constexpr int kEngineCount = kComputeEngineCount + 1;

enum class Memory : uint8_t { SIGHTLINE_MEMORY_TABLE(SIGHTLINE_ISA_ENUM1) };
inline constexpr int kMemoryCount = 0 SIGHTLINE_MEMORY_TABLE(SIGHTLINE_ISA_COUNT1);

// The instruction set as X-macro tables (name, profiler name): the enums, their counts and their
// names are generated from them, so a count cannot drift from its enum.
//
// Tensor engine: matmul: dst(PSUM)[M, N] (+)= stationary(SBUF)[K, M]^T @ moving(SBUF)[K, N].
// Vector engine: tensor_tensor: dst = alu(src0, src1) (the comparison ALU ops give 1.0 or 0.0; keep_if
//   gives src0 where src1 != 0, else 0, keep_unless the reverse: the halves of a select);
//   tensor_scalar: dst = alu(src0, s), s = src1[p, 0] when src1 is set, else imm0 (flag reverse:
//   alu(s, src0)); tensor_reduce: dst[p, 0] = reduce(alu) over every free element of src0[p, :], alu add
//   or max/min; where dst has one element per index of src0's outer free dims, dst[p, j] reduces only the
//   innermost dims, at j (nki.isa.tensor_reduce's `axis`); kFlagNegate: dst = -reduce (its `negate`);
//   bn_stats: dst[p, 0] = mean, dst[p, 1] = population variance of src0[p, :]; tensor_copy:
//   dst = src0 with dtype conversion; tensor_scan: dst[p, i] = alu(dst[p, i - 1], src0[p, i]) along the
//   flat free index, dst[p, 0] = src0[p, 0], alu add, max or min (cumsum, cummax); max8: dst[p, 0..k) =
//   the k <= 8 largest values of src0[p, :] in descending order (NaN above every number), k the free size
//   of dst; find_index8: dst[p, j] = the index i of src0[p, :] holding the value src1[p, j] (NaN matches
//   NaN), equal values of src1 taking successive matches in ascending i, so max8 then find_index8 give
//   distinct indices of the top k (torch.topk's, ties in index order); a value that is not there is an
//   error. The three are one pass of src0 through the engine each.
// Scalar engine: activate: dst = func(src0 * scale + bias), scale = src1[p, 0] when set, else imm0;
//   bias = imm1; with kFlagBiasOperand, bias = src1[p, 0] and scale = imm0 (the engine adds a
//   per-partition bias vector, as nki.isa.activation's `bias`). With an `aux` operand, aux[p, 0] = sum
//   over the free axis of the results.
// GpSimd engine: iota: dst[p, i] = imm0 + imm1 * p + i (i = flat free index); partition_all_reduce:
//   dst[p, i] = reduce(alu) over q of src0[q, i], for every p in dst.
// DMA queue: dma_copy: dst = src0 with dtype conversion (HBM<->SBUF, SBUF<->SBUF, PSUM->SBUF,
//   HBM<->HBM); dma_gather: dst[p, :] = row src1[p, 0] of the table src0 (an HBM pattern whose
//   partitions are the table's rows), src1 an SBUF [p, 1] i32 tile of row indices, an index outside
//   0..rows-1 an error: what embedding lookups use.
#define SIGHTLINE_OPCODE_TABLE(X)                     \
  X(matmul, "MATMUL")                                 \
  X(tensor_tensor, "TENSOR_TENSOR")                   \
  X(tensor_scalar, "TENSOR_SCALAR")                   \
  X(tensor_reduce, "TENSOR_REDUCE")                   \
  X(bn_stats, "BN_STATS")                             \
  X(tensor_copy, "TENSOR_COPY")                       \
  X(activate, "ACTIVATE")                             \
  X(iota, "IOTA")                                     \
  X(partition_all_reduce, "PARTITION_ALL_REDUCE")     \
  X(dma_copy, "DMA_COPY")                             \
  X(dma_gather, "DMA_GATHER")                         \
  X(tensor_scan, "TENSOR_SCAN")                       \
  X(max8, "MAX8")                                     \
  X(find_index8, "FIND_INDEX8")

#define SIGHTLINE_ALU_OP_TABLE(X) \
  X(add, "add")                   \
  X(subtract, "subtract")         \
  X(multiply, "multiply")         \
  X(divide, "divide")             \
  X(max, "max")                   \
  X(min, "min")                   \
  X(pow, "pow")                   \
  X(bypass, "bypass")             \
  X(is_equal, "is_equal")         \
  X(not_equal, "not_equal")       \
  X(is_lt, "is_lt")               \
  X(is_le, "is_le")               \
  X(is_gt, "is_gt")               \
  X(is_ge, "is_ge")               \
  X(keep_if, "keep_if")           \
  X(keep_unless, "keep_unless")

#define SIGHTLINE_ACT_FUNC_TABLE(X) \
  X(identity, "identity")           \
  X(exp, "exp")                     \
  X(log, "log")                     \
  X(sqrt, "sqrt")                   \
  X(rsqrt, "rsqrt")                 \
  X(reciprocal, "reciprocal")       \
  X(tanh, "tanh")                   \
  X(sigmoid, "sigmoid")             \
  X(relu, "relu")                   \
  X(silu, "silu")                   \
  X(gelu_tanh, "gelu_tanh")         \
  X(square, "square")               \
  X(abs, "abs")                     \
  X(neg, "neg")                     \
  X(erf, "erf")                     \
  X(gelu, "gelu")                   \
  X(sin, "sin")                     \
  X(cos, "cos")

#define SIGHTLINE_ISA_ENUMERATOR(name, text) name,
#define SIGHTLINE_ISA_COUNT(name, text) +1
enum class Opcode : uint8_t { SIGHTLINE_OPCODE_TABLE(SIGHTLINE_ISA_ENUMERATOR) };
inline constexpr int kOpcodeCount = 0 SIGHTLINE_OPCODE_TABLE(SIGHTLINE_ISA_COUNT);
enum class AluOp : uint8_t { SIGHTLINE_ALU_OP_TABLE(SIGHTLINE_ISA_ENUMERATOR) };
inline constexpr int kAluOpCount = 0 SIGHTLINE_ALU_OP_TABLE(SIGHTLINE_ISA_COUNT);
enum class ActFunc : uint8_t { SIGHTLINE_ACT_FUNC_TABLE(SIGHTLINE_ISA_ENUMERATOR) };
inline constexpr int kActFuncCount = 0 SIGHTLINE_ACT_FUNC_TABLE(SIGHTLINE_ISA_COUNT);
#undef SIGHTLINE_ISA_COUNT
#undef SIGHTLINE_ISA_ENUMERATOR

// Instruction flag bits.
inline constexpr uint8_t kFlagAccumulate = 1;  // matmul: add into PSUM instead of overwriting
inline constexpr uint8_t kFlagReverse = 2;     // tensor_scalar: scalar is the left operand
// tensor_tensor / tensor_scalar: run on the GpSimd engine instead of the Vector engine. The NKI ISA
// documents both as running on either engine (`engine=` of nki.isa.tensor_tensor / tensor_scalar);
// GpSimd cannot reach PSUM (validate.cpp). Without the flag the instruction runs on its opcode's engine.
inline constexpr uint8_t kFlagGpSimd = 4;
// tensor_reduce: write the reduction times -1 ("at no additional performance cost", nki.isa.tensor_reduce,
// https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.tensor_reduce.html).
inline constexpr uint8_t kFlagNegate = 8;
// activate: src1 is the per-partition bias instead of the scale, which is imm0 (nki.isa.activation takes
// a bias vector "at no additional performance cost": softmax's exp(x - max) in one pass,
// https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.isa.activation.html).
inline constexpr uint8_t kFlagBiasOperand = 16;
// Every flag bit this build defines: a reader refuses others (a newer build's).
inline constexpr uint8_t kKnownFlags = kFlagAccumulate | kFlagReverse | kFlagGpSimd | kFlagNegate | kFlagBiasOperand;

std::string_view engine_name(Engine e);
std::string_view memory_name(Memory m);
std::string_view opcode_name(Opcode op);
std::string_view alu_op_name(AluOp op);
std::string_view act_func_name(ActFunc f);
// The engine that executes an opcode.
Engine opcode_engine(Opcode op);
// Whether an instruction of `op` may run on `e`: its opcode's engine, or GpSimd for the elementwise
// opcodes that kFlagGpSimd moves there.
bool opcode_runs_on(Opcode op, Engine e);

struct FreeDim {
  uint32_t size = 1;
  int32_t stride = 1;  // in elements

  bool operator==(const FreeDim&) const = default;
};

struct AccessPattern {
  Memory memory = Memory::none;
  DType dtype = DType::f32;
  uint8_t dim_count = 0;  // free dims used, 0..4; 0 means a single element per partition
  uint16_t partition_start = 0;
  uint16_t partition_count = 0;
  uint32_t tensor = 0;           // HBM only: I/O tensor index
  int64_t partition_stride = 0;  // HBM only: elements between consecutive partitions
  uint64_t offset = 0;           // bytes: into the partition (SBUF/PSUM) or the tensor (HBM)
  std::array<FreeDim, 4> dims{};

  bool present() const { return memory != Memory::none; }
  // Elements per partition (product of the free sizes).
  uint64_t free_elements() const {
    uint64_t n = 1;
    for (int i = 0; i < dim_count; ++i) n *= dims[i].size;
    return n;
  }
  uint64_t elements() const { return free_elements() * partition_count; }
  uint64_t bytes() const { return elements() * dtype_size(dtype); }

  bool operator==(const AccessPattern&) const = default;
};

// On-chip operand: `partitions` partitions from `start`, contiguous free dims `sizes` (outermost first).
AccessPattern sbuf(uint16_t partition_start, uint16_t partition_count, uint64_t byte_offset, DType dtype,
                   std::initializer_list<uint32_t> sizes);
AccessPattern psum(uint16_t partition_start, uint16_t partition_count, uint64_t byte_offset, DType dtype,
                   std::initializer_list<uint32_t> sizes);
// HBM operand over I/O tensor `tensor`: partition p starts `byte_offset` bytes plus p * partition_stride
// elements into the tensor and holds contiguous free dims `sizes`.
AccessPattern hbm(uint32_t tensor, uint64_t byte_offset, uint16_t partition_count, int64_t partition_stride,
                  DType dtype, std::initializer_list<uint32_t> sizes);

struct SemaphoreWait {
  uint16_t semaphore = 0;
  uint32_t value = 0;  // start once semaphore >= value

  bool operator==(const SemaphoreWait&) const = default;
};
struct SemaphoreUpdate {
  uint16_t semaphore = 0;
  int32_t delta = 1;  // added on completion

  bool operator==(const SemaphoreUpdate&) const = default;
};

inline constexpr uint32_t kNoSourceOp = 0xffffffffu;

struct Instruction {
  Opcode opcode = Opcode::tensor_copy;
  uint8_t func = 0;  // AluOp or ActFunc, by opcode
  uint8_t flags = 0;
  AccessPattern dst, src0, src1, aux;
  float imm0 = 0, imm1 = 0;
  std::vector<SemaphoreWait> waits;
  std::vector<SemaphoreUpdate> updates;
  uint32_t source_op = kNoSourceOp;  // index into Executable::source_ops, for profiling

  Engine engine() const {
    return (flags & kFlagGpSimd) && opcode_runs_on(opcode, Engine::gpsimd) ? Engine::gpsimd : opcode_engine(opcode);
  }
  AluOp alu() const { return static_cast<AluOp>(func); }
  ActFunc act() const { return static_cast<ActFunc>(func); }

  bool operator==(const Instruction&) const = default;
};

// Constructors that fill the fields each opcode uses.
Instruction matmul(const AccessPattern& dst_psum, const AccessPattern& stationary,
                   const AccessPattern& moving, bool accumulate);
// `on` is Engine::vector (the default) or Engine::gpsimd (kFlagGpSimd).
Instruction tensor_tensor(AluOp op, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b,
                          Engine on = Engine::vector);
Instruction tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a, float scalar,
                          bool reverse = false, Engine on = Engine::vector);
Instruction tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a,
                          const AccessPattern& per_partition_scalar, bool reverse = false,
                          Engine on = Engine::vector);
Instruction tensor_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src, bool negate = false);
Instruction bn_stats(const AccessPattern& dst, const AccessPattern& src);
Instruction tensor_copy(const AccessPattern& dst, const AccessPattern& src);
Instruction activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale = 1.0f,
                     float bias = 0.0f);
// dst = func(src * scale + bias[p, 0]): the bias a per-partition column (kFlagBiasOperand).
Instruction activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                     const AccessPattern& per_partition_bias);
Instruction iota(const AccessPattern& dst, float base, float partition_step);
Instruction partition_all_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src);
Instruction dma_copy(const AccessPattern& dst, const AccessPattern& src);
Instruction dma_gather(const AccessPattern& dst, const AccessPattern& table,
                       const AccessPattern& row_indices);
Instruction tensor_scan(AluOp op, const AccessPattern& dst, const AccessPattern& src);
Instruction max8(const AccessPattern& dst, const AccessPattern& src);
Instruction find_index8(const AccessPattern& dst, const AccessPattern& src, const AccessPattern& values);

}  // namespace sightline::device
