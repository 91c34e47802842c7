// Placing a tile's steps over the Vector, Scalar and GpSimd engines, by the rates the simulator charges.
//
// A fused loop runs the same steps on every tile; several of them may run on more than one engine (a
// binary elementwise op on Vector or GpSimd, a scaling on the Scalar engine too). Each engine runs its
// instructions in order, so the busiest one sets the pace of the loop. The row loop (row_kernel.cpp) and
// the matmul epilogue with views (lower.cpp, rotary embeddings) both place their steps here:
//
//   Loads fixed{};                                     // the steps with one engine, ns per tile
//   fixed[kOnVector] += engine_ns(spec, spec.vector, cols, 1, dtype);
//   std::vector<Choice> choices = {{k, {engine_ns(spec, spec.vector, cols, 2, dtype), kCannot,
//                                       engine_ns(spec, spec.gpsimd, cols, 2, dtype)}}};
//   std::vector<int> engine = place(choices, fixed, engine_of, tiles, pace_floor);
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <vector>

#include "sightline/device/spec.h"
#include "sightline/dtype.h"

namespace sightline::compiler {

// A step's time on an engine for one tile, by the rule the simulator charges (src/device/cost_model.h):
// access and static overhead + inputs * elements / rate cycles, plus the accumulate cycles of an
// activation that sums its row. Partitions run in parallel, so the row length decides.
double engine_ns(const device::Spec& spec, const device::EngineSpec& e, double elements, int inputs, DType dtype,
                 bool accumulate = false);

// The engines a step may run on, as indices into Loads.
inline constexpr int kOnVector = 0, kOnScalar = 1, kOnGpSimd = 2;
inline constexpr double kCannot = std::numeric_limits<double>::infinity();
using Loads = std::array<double, 3>;  // ns per tile on the Vector, Scalar and GpSimd engines

struct Choice {
  size_t k;  // the step
  Loads ns;  // its time on each engine, kCannot where it cannot run
};

// Places the steps that more than one engine can run (`choices`, in step order) beside the `fixed` loads,
// for a loop of `tiles` tiles. The tiles pipeline across the engines (each engine works on its own
// tile), so the busiest engine sets the pace of all but one tile, and the last tile's chain of steps, at
// most the sum of their times, drains after it: the placement minimizing
// (tiles - 1) x max(the busiest engine's work per tile, `pace_floor`) + the work of all engines, then the
// one whose steps change engine fewest times in step order (fewer pipeline stages). A loop of one tile
// thus runs each step on its fastest engine, and a long loop balances the engines. `engine_of` holds
// the engine of every running step with one engine (-1 for the others), indexed by step. Exhaustive up
// to 8 choices (3^8 placements), else longest first onto the engine that ends least loaded (list
// scheduling); both deterministic. Returns each choice's engine.
std::vector<int> place(const std::vector<Choice>& choices, const Loads& fixed, std::vector<int> engine_of,
                       double tiles, double pace_floor);

// A matmul epilogue's steps, applied to each result tile between its evacuation from PSUM and its store.
// Unlike a row loop's stages, a tile's steps are emitted together (the matmul kernel calls the epilogue
// once per tile), so an engine that waits for another engine's step of this tile cannot work on the
// next tile meanwhile: both the engines and the order of the steps decide how long a tile holds up the
// Tensor engine.
struct EpilogueStepCost {
  Loads ns;                   // its time per tile on each engine, kCannot where it cannot run
  std::vector<size_t> after;  // the earlier steps it must follow (it reads or overwrites what they write)
};
struct EpilogueSchedule {
  std::vector<int> engine;    // each step's engine (kOnVector, kOnScalar, kOnGpSimd)
  std::vector<size_t> order;  // the order to emit a tile's steps in
  double ns = 0;              // the modeled time of `tiles` tiles
};
// The engines and the emission order of `steps` for a matmul kernel of `tiles` result tiles, each taking
// `tensor_ns` of the Tensor engine and `evacuation_ns` of the Vector engine (PSUM into the tile's SBUF
// buffer) before its steps. Each placement (exhaustive up to 8 steps with a choice of engine, else every
// step on its fastest engine) orders a tile's steps by list scheduling (the ready step that can start
// first, ties in step order), and is timed over the tiles with every engine running in order and
// `buffers` PSUM banks and result buffers in rotation (a tile's matmuls wait for the evacuation, and its
// evacuation for the store, of the tile `buffers` before; tiles accumulate in groups of half the banks,
// done together, as the matmul kernel's resident schedule runs them). The fastest wins; ties go to the
// placement with the fewest steps off their fastest engine.
EpilogueSchedule schedule_epilogue(const std::vector<EpilogueStepCost>& steps, double tensor_ns,
                                   double evacuation_ns, size_t tiles, size_t buffers);

}  // namespace sightline::compiler
