#include "sightline/device/isa.h"

#include <algorithm>

#include "sightline/error.h"

namespace sightline::device {
namespace {

AccessPattern contiguous(Memory memory, uint16_t partition_start, uint16_t partition_count,
                         uint64_t byte_offset, DType dtype, std::initializer_list<uint32_t> sizes) {
  AccessPattern ap;
  ap.memory = memory;
  ap.dtype = dtype;
  ap.partition_start = partition_start;
  ap.partition_count = partition_count;
  ap.offset = byte_offset;
  ap.dim_count = static_cast<uint8_t>(std::min<size_t>(sizes.size(), 4));
  // Row-major strides: the innermost dim is contiguous.
  int64_t stride = 1;
  std::vector<uint32_t> dims(sizes);
  for (int i = ap.dim_count - 1; i >= 0; --i) {
    ap.dims[i] = FreeDim{dims[i], static_cast<int32_t>(stride)};
    stride *= dims[i];
  }
  return ap;
}

Instruction make(Opcode op, uint8_t func, const AccessPattern& dst, const AccessPattern& a) {
  Instruction in;
  in.opcode = op;
  in.func = func;
  in.dst = dst;
  in.src0 = a;
  return in;
}

}  // namespace

std::string_view engine_name(Engine e) {
  switch (e) {
    case Engine::tensor:
      return "tensor";
    case Engine::vector:
      return "vector";
    case Engine::scalar:
      return "scalar";
    case Engine::gpsimd:
      return "gpsimd";
    case Engine::dma:
      return "dma";
  }
  return "?";
}

std::string_view memory_name(Memory m) {
  switch (m) {
    case Memory::none:
      return "none";
    case Memory::hbm:
      return "HBM";
    case Memory::sbuf:
      return "SBUF";
    case Memory::psum:
      return "PSUM";
  }
  return "?";
}

std::string_view opcode_name(Opcode op) {
  switch (op) {
#define SIGHTLINE_ISA_NAME(name, text) \
  case Opcode::name:                 \
    return text;
    SIGHTLINE_OPCODE_TABLE(SIGHTLINE_ISA_NAME)
#undef SIGHTLINE_ISA_NAME
  }
  return "?";
}

std::string_view alu_op_name(AluOp op) {
  switch (op) {
#define SIGHTLINE_ISA_NAME(name, text) \
  case AluOp::name:                 \
    return text;
    SIGHTLINE_ALU_OP_TABLE(SIGHTLINE_ISA_NAME)
#undef SIGHTLINE_ISA_NAME
  }
  return "?";
}

std::string_view act_func_name(ActFunc op) {
  switch (op) {
#define SIGHTLINE_ISA_NAME(name, text) \
  case ActFunc::name:                 \
    return text;
    SIGHTLINE_ACT_FUNC_TABLE(SIGHTLINE_ISA_NAME)
#undef SIGHTLINE_ISA_NAME
  }
  return "?";
}

Engine opcode_engine(Opcode op) {
  switch (op) {
    case Opcode::matmul:
      return Engine::tensor;
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::tensor_reduce:
    case Opcode::bn_stats:
    case Opcode::tensor_copy:
    case Opcode::tensor_scan:
    case Opcode::max8:
    case Opcode::find_index8:
      return Engine::vector;
    case Opcode::activate:
      return Engine::scalar;
    case Opcode::iota:
    case Opcode::partition_all_reduce:
      return Engine::gpsimd;
    case Opcode::dma_copy:
    case Opcode::dma_gather:
      return Engine::dma;
  }
  return Engine::dma;
}

bool opcode_runs_on(Opcode op, Engine e) {
  if (e == opcode_engine(op)) return true;
  return e == Engine::gpsimd && (op == Opcode::tensor_tensor || op == Opcode::tensor_scalar);
}

AccessPattern sbuf(uint16_t partition_start, uint16_t partition_count, uint64_t byte_offset, DType dtype,
                   std::initializer_list<uint32_t> sizes) {
  return contiguous(Memory::sbuf, partition_start, partition_count, byte_offset, dtype, sizes);
}

AccessPattern psum(uint16_t partition_start, uint16_t partition_count, uint64_t byte_offset, DType dtype,
                   std::initializer_list<uint32_t> sizes) {
  return contiguous(Memory::psum, partition_start, partition_count, byte_offset, dtype, sizes);
}

AccessPattern hbm(uint32_t tensor, uint64_t byte_offset, uint16_t partition_count, int64_t partition_stride,
                  DType dtype, std::initializer_list<uint32_t> sizes) {
  AccessPattern ap = contiguous(Memory::hbm, 0, partition_count, byte_offset, dtype, sizes);
  ap.tensor = tensor;
  ap.partition_stride = partition_stride;
  return ap;
}

Instruction matmul(const AccessPattern& dst_psum, const AccessPattern& stationary,
                   const AccessPattern& moving, bool accumulate) {
  Instruction in = make(Opcode::matmul, 0, dst_psum, stationary);
  in.src1 = moving;
  in.flags = accumulate ? kFlagAccumulate : 0;
  return in;
}

namespace {

// The flag that puts an elementwise instruction on `on`: the Vector engine (none) or GpSimd.
uint8_t engine_flag(Opcode op, Engine on) {
  SIGHTLINE_CHECK(on == Engine::vector || on == Engine::gpsimd, "{} runs on the Vector or GpSimd engine, not {}",
                  opcode_name(op), engine_name(on));
  return on == Engine::gpsimd ? kFlagGpSimd : 0;
}

}  // namespace

Instruction tensor_tensor(AluOp op, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b,
                          Engine on) {
  Instruction in = make(Opcode::tensor_tensor, static_cast<uint8_t>(op), dst, a);
  in.src1 = b;
  in.flags = engine_flag(in.opcode, on);
  return in;
}

Instruction tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a, float scalar,
                          bool reverse, Engine on) {
  Instruction in = make(Opcode::tensor_scalar, static_cast<uint8_t>(op), dst, a);
  in.imm0 = scalar;
  in.flags = static_cast<uint8_t>((reverse ? kFlagReverse : 0) | engine_flag(in.opcode, on));
  return in;
}

Instruction tensor_scalar(AluOp op, const AccessPattern& dst, const AccessPattern& a,
                          const AccessPattern& per_partition_scalar, bool reverse, Engine on) {
  Instruction in = make(Opcode::tensor_scalar, static_cast<uint8_t>(op), dst, a);
  in.src1 = per_partition_scalar;
  in.flags = static_cast<uint8_t>((reverse ? kFlagReverse : 0) | engine_flag(in.opcode, on));
  return in;
}

Instruction tensor_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src, bool negate) {
  Instruction in = make(Opcode::tensor_reduce, static_cast<uint8_t>(op), dst, src);
  if (negate) in.flags = kFlagNegate;
  return in;
}

Instruction bn_stats(const AccessPattern& dst, const AccessPattern& src) {
  return make(Opcode::bn_stats, 0, dst, src);
}

Instruction tensor_copy(const AccessPattern& dst, const AccessPattern& src) {
  return make(Opcode::tensor_copy, 0, dst, src);
}

Instruction activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                     float bias) {
  Instruction in = make(Opcode::activate, static_cast<uint8_t>(func), dst, src);
  in.imm0 = scale;
  in.imm1 = bias;
  return in;
}

Instruction activate(ActFunc func, const AccessPattern& dst, const AccessPattern& src, float scale,
                     const AccessPattern& per_partition_bias) {
  Instruction in = make(Opcode::activate, static_cast<uint8_t>(func), dst, src);
  in.imm0 = scale;
  in.src1 = per_partition_bias;
  in.flags = kFlagBiasOperand;
  return in;
}

Instruction iota(const AccessPattern& dst, float base, float partition_step) {
  Instruction in = make(Opcode::iota, 0, dst, AccessPattern{});
  in.imm0 = base;
  in.imm1 = partition_step;
  return in;
}

Instruction partition_all_reduce(AluOp op, const AccessPattern& dst, const AccessPattern& src) {
  return make(Opcode::partition_all_reduce, static_cast<uint8_t>(op), dst, src);
}

Instruction dma_copy(const AccessPattern& dst, const AccessPattern& src) {
  return make(Opcode::dma_copy, 0, dst, src);
}

Instruction dma_gather(const AccessPattern& dst, const AccessPattern& table,
                       const AccessPattern& row_indices) {
  Instruction in = make(Opcode::dma_gather, 0, dst, table);
  in.src1 = row_indices;
  return in;
}

Instruction tensor_scan(AluOp op, const AccessPattern& dst, const AccessPattern& src) {
  return make(Opcode::tensor_scan, static_cast<uint8_t>(op), dst, src);
}

Instruction max8(const AccessPattern& dst, const AccessPattern& src) { return make(Opcode::max8, 0, dst, src); }

Instruction find_index8(const AccessPattern& dst, const AccessPattern& src, const AccessPattern& values) {
  Instruction in = make(Opcode::find_index8, 0, dst, src);
  in.src1 = values;
  return in;
}

}  // namespace sightline::device
