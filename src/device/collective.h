// device/collective: the collective engine between the NeuronCores of one chip (docs/hardware-model.md
// §1.8). All-reduce, all-gather and reduce-scatter run as a ring over the participating cores, as the
// Neuron runtime's intra-node Ring algorithm does: N - 1 steps for all-gather and reduce-scatter, 2 (N - 1)
// for all-reduce (a reduce-scatter, then an all-gather), each step moving one chunk over every ring link
// at once. The engine is the chip's CC-cores driving DMA between the cores' HBM, beside the compute
// engines, so a core computes while its collective runs (the runtime orders only what touches its buffers).
//
//   CollectiveTiming t = ring_collective_timing(spec, CollectiveKind::all_reduce, 8, 4 << 20);
//   t.duration_ns;   // 14 x (step latency + 512 KiB / link bandwidth)
//   ring_collective_compute(CollectiveKind::all_reduce, DType::f32, inputs, outputs, bytes);  // real sums
//
// Time comes from the spec only (collective.link_bytes_per_ns, collective.step_latency_ns); the functional
// result is the ring's: each chunk is summed rank by rank in ring order, rounded to the dtype at every
// step, as the partial sum is stored in the buffer's dtype between hops. Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "sightline/device/spec.h"
#include "sightline/dtype.h"

namespace sightline::device {

//   X(kind, runtime event name of the operation)
#define SIGHTLINE_COLLECTIVES(X) \
  X(all_reduce, "all_reduce")    \
  X(all_gather, "all_gather")    \
  X(reduce_scatter, "reduce_scatter")

enum class CollectiveKind : uint8_t {
#define SIGHTLINE_X(kind, name) kind,
  SIGHTLINE_COLLECTIVES(SIGHTLINE_X)
#undef SIGHTLINE_X
};
std::string_view collective_name(CollectiveKind kind);  // "all_reduce"

struct CollectiveTiming {
  double duration_ns = 0;
  uint32_t steps = 0;           // ring steps
  uint64_t chunk_bytes = 0;     // what one link carries per step (the largest chunk)
  uint64_t bus_bytes = 0;       // what each rank's link carries in all: nccl-tests' bus bandwidth numerator
  uint32_t chips = 1;           // chips the ring spans
  bool chip_hop_bounds = false; // the slowest hop, which bounds every step, is a chip-to-chip one
};

// `bytes`: the size of one rank's larger buffer: all-reduce the buffer (input = output), all-gather the
// output (ranks x input), reduce-scatter the input (ranks x output). Throws for a spec without a
// collective section, for ranks < 1 and for sizes that do not split into `ranks` equal parts where the
// operation needs them to.
CollectiveTiming ring_collective_timing(const Spec& spec, CollectiveKind kind, int ranks, uint64_t bytes);
// The ring over `cores` in that order (rank r is cores[r]; the ring's hops are cores[r] -> cores[r + 1] and
// the last back to the first). Core c is on chip c / spec.cores_per_instance; a hop between two chips runs
// on a chip-to-chip link (collective.chip_link_bytes_per_ns, chip_step_latency_ns), one within a chip on
// the chip's (link_bytes_per_ns, step_latency_ns). Every step moves a chunk over every hop at once, so the
// slowest hop bounds each step:
//   duration = steps x max over the ring's hops of (hop latency + chunk / hop bandwidth)
// Throws, beside the errors above, when the ring spans chips and the spec has no chip-to-chip links, or
// a core beyond the instance's chips.
CollectiveTiming ring_collective_timing(const Spec& spec, CollectiveKind kind, std::span<const int> cores,
                                        uint64_t bytes);

// Bytes of each rank's input and output for a collective whose larger buffer is `bytes`.
uint64_t collective_input_bytes(CollectiveKind kind, int ranks, uint64_t bytes);
uint64_t collective_output_bytes(CollectiveKind kind, int ranks, uint64_t bytes);

// Computes the collective over host buffers (one input and one output per rank, in ring order; an
// output may alias its own input only for all-reduce). Sums in f32 / bf16 / f16 / i32; all-gather copies
// any dtype.
void ring_collective_compute(CollectiveKind kind, DType dtype, std::span<const std::byte* const> inputs,
                             std::span<std::byte* const> outputs, uint64_t bytes);

}  // namespace sightline::device
