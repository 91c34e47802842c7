// The simulated NeuronCore: memories plus an executor that runs an Executable.
//
// Core::run does two things:
//   * timing: a deterministic discrete-event simulation of the per-engine in-order streams and the
//     DMA queues, gated by semaphore waits, with the cost rules of docs/hardware-model.md §1.6 and the
//     numbers of the Spec (see device/cost_model.h); it records the order instructions issue in;
//   * functional: each instruction really computes its result on host memory standing for the
//     core's HBM, SBUF and PSUM, in float32 with round-to-nearest-even conversion to the operand dtypes.
// The functional result is that of the issue order, one instruction after another (FunctionalExecutor
// runs independent rows in another order with the same bits), so a program whose semaphores are right
// computes the same result whatever the costs are. The timing reads no data.
//
//   Core core(Spec::builtin("trn2"));
//   uint64_t x = core.hbm_allocate(bytes), y = core.hbm_allocate(bytes);
//   core.hbm_write(x, host_x.data(), bytes);
//   RunResult r = core.run(exe, std::vector<uint64_t>{x, y});   // bindings in exe.io order
//   core.hbm_read(y, host_y.data(), bytes);
//   fmt::print("{} ns, {} instructions\n", r.duration_ns, r.records.size());
//
// Thread compatibility: a Core has no global state; one thread at a time may use a given Core.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sightline/device/executable.h"
#include "device/functional.h"
#include "device/memory.h"
#include "sightline/device/spec.h"

namespace sightline::device {

// What one executed instruction did and when: what the profiler records per instruction.
// Times are device time in ns from the start of the execution.
struct InstructionRecord {
  double start_ns = 0;
  double end_ns = 0;
  float semaphore_wait_ns = 0;  // ready to issue (stream free) until its semaphore waits held
  uint32_t hbm_bytes_read = 0;
  uint32_t hbm_bytes_written = 0;
  uint32_t onchip_bytes_read = 0;  // SBUF + PSUM
  uint32_t onchip_bytes_written = 0;
  uint32_t flops = 0;
  uint32_t source_op = kNoSourceOp;  // index into Executable::source_ops
  uint32_t index = 0;                // position in its stream
  Engine engine = Engine::dma;
  uint8_t queue = 0;  // DMA queue (DMA records only)
  Opcode opcode = Opcode::dma_copy;
};
static_assert(sizeof(InstructionRecord) <= 64,
              "instruction records must stay small: the profiler stores many");

struct RunOptions {
  bool functional = true;  // false: timing only (no data is read or written)
  bool record = true;      // false: skip per-instruction records
  // true: the caller has checked `exe` with validate_executable against this core's spec and not changed
  // it since, so run() does not check its instructions again (the bindings it still checks). A runtime
  // checks an executable once, as Neuron's checks a NEFF when it loads it, not at every execution: on a
  // 1,120-instruction RMSNorm the check was a third of a timing-only run. An executable that was not
  // checked must not run with it: the functional model trusts what the check guarantees.
  bool validated = false;
};

struct RunResult {
  double duration_ns = 0;  // first issue to last completion
  uint64_t cycles = 0;     // duration in Spec::base_clock_ghz cycles
  uint64_t instructions = 0;
  std::array<double, kEngineCount> busy_ns{};  // per engine; DMA sums its queues
  uint64_t hbm_bytes = 0;                      // read + written
  std::vector<InstructionRecord> records;      // in issue order
};

class Core {
 public:
  explicit Core(Spec spec);

  const Spec& spec() const { return spec_; }

  uint64_t hbm_allocate(uint64_t bytes) { return hbm_.allocate(bytes); }
  void hbm_free(uint64_t address) { hbm_.free(address); }
  uint64_t hbm_free_bytes() const { return hbm_.free_bytes(); }
  void hbm_write(uint64_t address, const void* src, uint64_t bytes) { hbm_.write(address, src, bytes); }
  void hbm_read(uint64_t address, void* dst, uint64_t bytes) const { hbm_.read(address, dst, bytes); }

  // Validates `exe` against the spec (unless RunOptions::validated) and the bindings (one HBM address per
  // exe.io entry, each inside an allocation large enough for the tensor), then simulates it. Throws sightline::Error for invalid
  // programs (bad operands, overflows, deadlocks) and reads of unwritten memory.
  RunResult run(const Executable& exe, std::span<const uint64_t> io_addresses,
                const RunOptions& options = {});

 private:
  Spec spec_;
  HbmMemory hbm_;
  OnChipMemory sbuf_;
  OnChipMemory psum_;
  // The functional model's buffers, kept from run to run (their pages stay faulted in).
  FunctionalExecutor::Workspace functional_workspace_;
};

// The modeled duration of `exe` run alone on an idle core of `spec`, timing only, each I/O tensor at a
// fresh HBM address: exact, the same on every machine. What the kernels and the compiler time their
// candidate schedules and programs with.
double timing_only_ns(const Spec& spec, const Executable& exe);

// Modeled time of one host<->HBM copy of `bytes` spread over `queues` DMA queues (runtime copies).
double dma_copy_ns(const Spec& spec, uint64_t bytes, uint32_t queues);

}  // namespace sightline::device
