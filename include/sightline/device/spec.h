// The simulated NeuronCore's parameters, loaded from a JSON file under specs/ (or a user's file).
//
// Every number the simulator uses lives here and comes from the spec file, where each value carries
// its source (docs/hardware-model.md section and tag). The C++ code holds no timing literal.
//
//   auto spec = sightline::device::Spec::builtin("trn2");          // NeuronCore-v3, the default
//   auto mine = sightline::device::Spec::load("my_device.json");    // same schema, user values
//   double ns = spec.vector.cycles_to_ns(4096);
//
// File schema: nested objects whose leaves are {"value": V, "source": "docs/hardware-model.md §x [Tag]"}.
// Unknown fields, missing fields, missing sources and out-of-range values are sightline::Error naming
// the field and the file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sightline::device {

// One compute engine's clock and throughput (Vector, Scalar, GpSimd).
struct EngineSpec {
  double clock_ghz = 0;
  // Elements processed per partition per cycle, by element width (the v3 VectorE is faster on 16-bit).
  double elements_per_cycle_32bit = 0;
  double elements_per_cycle_16bit = 0;
  // Fixed cycles every instruction pays (issue, small-op overhead) on top of the access overhead.
  uint32_t static_overhead_cycles = 0;
  // ScalarE only: extra cycles of an activation that also accumulates along the free axis.
  uint32_t accumulate_extra_cycles = 0;

  double cycles_to_ns(double cycles) const { return cycles / clock_ghz; }
};

struct TensorEngineSpec {
  double clock_ghz = 0;
  uint32_t array_rows = 0;  // contraction (partition) dimension of the systolic array
  uint32_t array_cols = 0;  // stationary free size (output partitions)
  uint32_t moving_free_max = 0;
  uint32_t mm_init_interval_cycles = 0;  // initiation interval floor: II = max(N, this)
  uint32_t fp32_cost_factor = 0;         // fp32 operands run this many times slower

  double cycles_to_ns(double cycles) const { return cycles / clock_ghz; }
  // The one definition of the Tensor engine's peak: rows x cols multiply-adds (2 FLOPs) per cycle
  // with 16-bit operands; fp32 operands run fp32_cost_factor times slower. The roofline's roofs, the
  // summary's MFU and the floors the examples print all read it.
  double peak_flops_per_ns(bool fp32 = false) const {
    const double peak = double(array_rows) * array_cols * 2.0 * clock_ghz;
    return fp32 && fp32_cost_factor > 0 ? peak / fp32_cost_factor : peak;
  }
};

struct DmaSpec {
  uint32_t queues = 0;            // simulated DMA queues (one per DMA engine)
  double fixed_cost_ns = 0;       // per transfer: descriptor setup + trigger-to-start latency
  uint32_t transfer_slots = 1;    // transfers a queue holds at once: one moves its bytes while the
                                  // others pay their fixed cost (docs/hardware-model.md §1.4)
  double queue_bytes_per_ns = 0;  // peak bandwidth of one queue
};

struct HbmSpec {
  uint64_t capacity_bytes = 0;  // per core
  double bytes_per_ns = 0;      // per core, shared by all DMA queues touching HBM
};

// Per-execution costs paid by the runtime (docs/hardware-model.md §2.5).
struct RuntimeCostSpec {
  double submission_ns = 0;         // launch overhead of every execution
  double executable_switch_ns = 0;  // the core last ran a different executable
  double completion_ns = 0;         // completion notification back to the host
  double first_load_ns = 0;         // first execution of an executable on a core
};

// Collectives between the cores of one chip, and between the chips of an instance over their chip-to-chip
// links (docs/hardware-model.md §1.8): a ring over the cores, each step moving one chunk per link, the
// slowest hop bounding the step. A spec without this section runs no collectives; one without the chip
// fields (chips_per_instance 1, no chip link) runs them within one chip only.
struct CollectiveSpec {
  double link_bytes_per_ns = 0;  // one ring link (core to its neighbour), per direction
  double step_latency_ns = 0;    // fixed cost of one ring step (hop latency, synchronisation)
  uint32_t chips_per_instance = 1;    // chips of the instance, each of cores_per_instance cores
  double chip_link_bytes_per_ns = 0;  // one chip-to-chip link (NeuronLink), per direction; 0: none
  double chip_step_latency_ns = 0;    // fixed cost of a ring step whose hop crosses chips
};

// Host-side costs of the modeled host clock (core/host_clock.h; derivations in docs/host-model.md).
struct HostCostSpec {
  double framework_op_ns = 0;    // one dispatched framework op
  double runtime_call_ns = 0;    // one runtime call that queues work (execute, write, read, load)
  double allocation_ns = 0;      // one device allocation
  double copy_bytes_per_ns = 0;  // host memory copies (staging writes, CPU kernels)
};

struct Spec {
  std::string name;          // "trn2", "trn1", or the user's
  std::string core_version;  // "NeuronCore-v3"
  std::string path;          // file it was loaded from, or "builtin:<name>" for a built-in spec
  uint64_t content_hash = 0;  // FNV-1a 64 of the spec's JSON text: with `name`, what identifies it
  // "trn2:0123456789abcdef": how executables and caches refer to the spec they were built for (never a
  // path of the machine that built them).
  std::string identity() const;
  uint32_t cores_per_instance = 0;
  double base_clock_ghz = 0;  // clock of the reported cycle counts
  uint32_t partitions = 0;
  uint32_t sbuf_bytes_per_partition = 0;
  uint32_t psum_bytes_per_partition = 0;
  uint32_t psum_banks = 0;
  uint32_t access_overhead_cycles = 0;
  TensorEngineSpec tensor;
  EngineSpec vector;
  EngineSpec scalar;
  EngineSpec gpsimd;
  DmaSpec dma;
  HbmSpec hbm;
  RuntimeCostSpec runtime;
  HostCostSpec host;
  CollectiveSpec collective;

  uint32_t psum_bank_bytes() const { return psum_bytes_per_partition / psum_banks; }
  uint64_t sbuf_bytes() const { return uint64_t{sbuf_bytes_per_partition} * partitions; }
  uint64_t ns_to_cycles(double ns) const { return static_cast<uint64_t>(ns * base_clock_ghz + 0.5); }

  // Loads and validates a spec file. Throws sightline::Error naming the file and the field.
  static Spec load(const std::string& path);
  // Parses spec JSON text; `origin` names it in errors.
  static Spec parse(std::string_view json_text, const std::string& origin);
  // A preset shipped in specs/: "trn2" (default) or "trn1".
  static Spec builtin(std::string_view name = "trn2");
};

}  // namespace sightline::device
