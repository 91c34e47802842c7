#include "device/cost_model.h"

#include <algorithm>
#include <cmath>

namespace sightline::device {
namespace {

bool is_16bit(const AccessPattern& ap) { return !ap.present() || dtype_size(ap.dtype) == 2; }

const EngineSpec& engine_spec(const Spec& spec, Engine e) {
  switch (e) {
    case Engine::vector:
      return spec.vector;
    case Engine::scalar:
      return spec.scalar;
    default:
      return spec.gpsimd;
  }
}

void add_operand(Traffic& t, const AccessPattern& ap, bool written) {
  if (!ap.present()) return;
  const uint64_t bytes = ap.bytes();
  if (ap.memory == Memory::hbm) {
    (written ? t.hbm_written : t.hbm_read) += bytes;
  } else {
    (written ? t.onchip_written : t.onchip_read) += bytes;
  }
}

}  // namespace

double compute_instruction_ns(const Spec& spec, const Instruction& in) {
  if (in.opcode == Opcode::matmul) {
    const double n = static_cast<double>(in.src1.free_elements());
    double cycles = std::max(n, static_cast<double>(spec.tensor.mm_init_interval_cycles));
    if (in.src0.dtype == DType::f32 || in.src1.dtype == DType::f32) cycles *= spec.tensor.fp32_cost_factor;
    return spec.tensor.cycles_to_ns(cycles);
  }
  const EngineSpec& e = engine_spec(spec, in.engine());
  // The operand that streams through the engine sets N: the destination for iota, the input otherwise.
  const AccessPattern& streamed = in.opcode == Opcode::iota ? in.dst : in.src0;
  const double n = static_cast<double>(streamed.free_elements());
  const bool narrow =
      is_16bit(in.dst) && is_16bit(in.src0) && (in.opcode != Opcode::tensor_tensor || is_16bit(in.src1));
  const double rate = narrow ? e.elements_per_cycle_16bit : e.elements_per_cycle_32bit;
  double inputs = in.opcode == Opcode::tensor_tensor ? 2.0 : 1.0;
  if (in.opcode == Opcode::partition_all_reduce) {
    inputs = std::max(1.0, std::ceil(std::log2(static_cast<double>(in.src0.partition_count))));
  }
  double cycles = spec.access_overhead_cycles + e.static_overhead_cycles + std::ceil(inputs * n / rate);
  if (in.opcode == Opcode::activate && in.aux.present()) cycles += e.accumulate_extra_cycles;
  return e.cycles_to_ns(cycles);
}

uint64_t dma_transfer_bytes(const Instruction& in) {
  // A gather moves the rows it picks, not the table its source pattern spans.
  if (in.opcode == Opcode::dma_gather) {
    return std::max(in.dst.bytes(), in.dst.elements() * dtype_size(in.src0.dtype)) + in.src1.bytes();
  }
  return std::max(in.src0.bytes(), in.dst.bytes());
}

bool dma_touches_hbm(const Instruction& in) {
  return in.src0.memory == Memory::hbm || in.dst.memory == Memory::hbm;
}

double dma_rate_bytes_per_ns(const Spec& spec, bool touches_hbm, int hbm_movers) {
  if (!touches_hbm) return spec.dma.queue_bytes_per_ns;
  return std::min(spec.dma.queue_bytes_per_ns, spec.hbm.bytes_per_ns / std::max(1, hbm_movers));
}

double dma_instruction_ns(const Spec& spec, const Instruction& in, int hbm_movers) {
  return spec.dma.fixed_cost_ns +
         static_cast<double>(dma_transfer_bytes(in)) / dma_rate_bytes_per_ns(spec, dma_touches_hbm(in), hbm_movers);
}

uint64_t instruction_flops(const Instruction& in) {
  switch (in.opcode) {
    case Opcode::matmul:
      return 2 * uint64_t{in.src0.partition_count} * in.src0.free_elements() * in.src1.free_elements();
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
      return in.dst.elements();
    case Opcode::tensor_reduce:
    case Opcode::partition_all_reduce:
    case Opcode::tensor_scan:
    case Opcode::max8:
    case Opcode::find_index8:
      return in.src0.elements();
    case Opcode::bn_stats:
      return 2 * in.src0.elements();  // sum and sum of squares
    case Opcode::activate:
      return in.src0.elements() * (in.aux.present() ? 2 : 1);
    case Opcode::tensor_copy:
    case Opcode::iota:
    case Opcode::dma_copy:
    case Opcode::dma_gather:
      return 0;
  }
  return 0;
}

Traffic instruction_traffic(const Instruction& in) {
  Traffic t;
  if (in.opcode == Opcode::dma_gather) {
    // The table is read only at the picked rows: as many elements as dst holds.
    t.hbm_read += in.dst.elements() * dtype_size(in.src0.dtype);
    add_operand(t, in.src1, false);
    add_operand(t, in.dst, true);
    return t;
  }
  add_operand(t, in.src0, false);
  add_operand(t, in.src1, false);
  add_operand(t, in.dst, true);
  add_operand(t, in.aux, true);
  // Accumulating matmuls read the PSUM tile they add into.
  if (in.opcode == Opcode::matmul && (in.flags & kFlagAccumulate)) add_operand(t, in.dst, false);
  return t;
}

}  // namespace sightline::device
