// Per-instruction costs of the simulated core (docs/hardware-model.md §1.6), every number from the Spec.
//
//   * Vector / Scalar / GpSimd: access overhead + static overhead + inputs * N / rate cycles, where N is
//     the free size per partition, inputs is 2 for tensor_tensor and 1 otherwise, and rate is the
//     engine's elements per partition per cycle for the operand width. Partitions run in parallel, so
//     using fewer than all partitions saves nothing. An activation that accumulates adds its
//     accumulate cycles. A cross-partition reduction walks a tree of log2(partitions) steps.
//   * Tensor: the initiation interval max(N, mm_init_interval) cycles for moving free size N, times
//     fp32_cost_factor when an operand is fp32 (the engine is deeply pipelined, so II is the cost).
//   * DMA: fixed cost, then the bytes at the queue's bandwidth; queues touching HBM at the same time
//     share the core's HBM bandwidth equally (the scheduler applies the sharing, see timing.h).
#pragma once

#include <cstdint>

#include "sightline/device/isa.h"
#include "sightline/device/spec.h"

namespace sightline::device {

// Duration of a compute-engine instruction in ns (not for dma_copy).
double compute_instruction_ns(const Spec& spec, const Instruction& in);
// Bytes a dma_copy moves (the larger of what it reads and what it writes, after dtype conversion).
uint64_t dma_transfer_bytes(const Instruction& in);
// Whether a dma_copy reads or writes HBM (and so shares the HBM bandwidth).
bool dma_touches_hbm(const Instruction& in);
// The rate (bytes per ns) a moving transfer gets while `hbm_movers` transfers (itself among them when it
// touches HBM) move HBM bytes: its queue's peak, capped by an equal share of the core's HBM bandwidth.
// What the timing model gives every moving transfer.
double dma_rate_bytes_per_ns(const Spec& spec, bool touches_hbm, int hbm_movers);
// Duration of a dma_copy (or dma_gather) that pays its fixed cost and then moves its bytes at
// dma_rate_bytes_per_ns(spec, it touches HBM, hbm_movers) throughout: alone on its queue, with
// `hbm_movers` HBM transfers (itself included) moving over the same time.
double dma_instruction_ns(const Spec& spec, const Instruction& in, int hbm_movers = 1);
// Floating-point operations the instruction performs (matmul: 2*K*M*N; elementwise: one per element).
uint64_t instruction_flops(const Instruction& in);

struct Traffic {
  uint64_t hbm_read = 0, hbm_written = 0, onchip_read = 0, onchip_written = 0;
};
// Bytes the instruction reads and writes, split HBM vs on-chip (SBUF + PSUM).
Traffic instruction_traffic(const Instruction& in);

}  // namespace sightline::device
