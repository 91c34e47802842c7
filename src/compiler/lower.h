// Lowering: the optimized graph of one signature -> ONE device::Executable for a NeuronCore.
//
//   device::Executable exe = lower(graph, runtime.spec(), "compiled_0123456789abcdef");
//
// Every kernel-producing node is built with the kernel builder's eager kernels (kernels/eager.h): the
// built-in fused ops the passes recognized (rms_norm, layer_norm, silu, softmax) are the real fused
// kernels. Fused groups keep their intermediates on chip:
//   fused.rows             one row-tiled loop (row_kernel.h): each input row tile loaded once into
//                          SBUF, every member op on SBUF tiles, only the group's result stored;
//   fused.matmul_epilogue  the matmul kernel, with the epilogue ops (activation, scalar, bias, residual,
//                          gate, and a softmax along the last dim when each result tile holds whole
//                          rows) applied to each result tile in SBUF before the kernel stores it; when
//                          the ops work on views of the result (a projection's heads and the rotary
//                          embedding on them), each op on the positions its view takes in the tile
//                          (view_epilogue.h), and the group's value is the stored result through the
//                          root's view.
// A group that cannot take that form (rows too long for SBUF with a row-wide op, integer steps, a
// matmul kernel whose stores are not whole row blocks) lowers its member ops one by one through HBM
// scratch tensors; the executable's metadata says how many groups were fused
// ("compiled.row_loops", "compiled.fused_epilogues") and why a row group or a view-level epilogue was
// not ("compiled.row_group_fallback.<k>", "compiled.epilogue_fallback.<k>").
//
// Every kernel is emitted straight into the program's one KernelBuilder (kernels::emit_eager_kernel
// between begin_kernel / end_kernel, its operands addressed through KernelBuilder::view; row loops
// and epilogues through the tile-level emitters of kernels/emit.h), so the builder's hazard tracking
// derives the semaphores of the whole program. A node therefore waits only for what it really reads
// or overwrites (its producers' HBM results, the SBUF/PSUM bytes an earlier node still uses), not for
// a full barrier, and independent nodes overlap on the engines. A matmul epilogue is emitted by the
// matmul kernel's hooks (kernels::EagerHooks): its operand buffers are allocated above the kernel's
// tiles, and each result tile gets the epilogue ops right before the kernel stores it; the operands
// of a tile are loaded two tiles ahead, from the tile order of a dry run of the kernel on a builder
// of its own (nothing of the dry run is emitted into the program).
//
// View ops (reshape, permute, transpose, slice, ...) emit nothing: like eager views they change the
// offset and strides through which later kernels read their source (a reshape that cannot be a view
// copies first, as eager reshape does). Host scalars of tensor-scalar ops become elements of one
// constant I/O tensor per dtype. Each instruction keeps the name of the op it comes from
// (Executable::source_ops), so a device timeline can be coloured by the original op.
//
// I/O tensors of a lowered program, by name (the runner binds them by these roles):
//   arg<i>       input    the i-th argument, contiguous
//   out<i>       output   the i-th result, contiguous, allocated by the caller on every call
//   const_<dt>   input    the program's scalar operands in dtype <dt>; their values are the metadata
//                         entry "constants.const_<dt>"; written to the device once per core
//   scratch<i>   scratch  an intermediate value in HBM; the caller binds a buffer it keeps per core
#pragma once

#include <string>
#include <vector>

#include <optional>
#include <utility>

#include "compiler/graph.h"
#include "kernels/eager.h"
#include "sightline/device/executable.h"
#include "sightline/device/spec.h"

namespace sightline::compiler {

// A view op applied to a view at element `offset` with `desc`'s shape and strides: the result's offset
// and desc, or nullopt for a reshape that needs a copy first (the rules of eager views).
std::optional<std::pair<int64_t, kernels::TensorDesc>> apply_view_desc(OpId op, const OpAttrs& attrs, int64_t offset,
                                                                       const kernels::TensorDesc& desc);

// Whether a linear's weight is loaded by the kernel before it (docs/architecture.md §10), and where in a
// matmul kernel before it the loads go: `always` right before its first store, `after_loads` behind all
// of its own loads (EagerHooks::before_stores, ::after_loads). `best` lowers the program each way and
// without the prefetch and keeps the one the cost model times fastest; the others force one (tests and
// A/B measurements).
enum class WeightPrefetch : uint8_t { best, always, after_loads, never };

// Which DMA queues a prefetch's pieces (round robin, KernelBuilder::set_queue_order) start from:
// `from_first` queue 0 up; `from_last` the highest queue down (the kernel before a linear that is not a
// matmul spreads its own loads from queue 0); `idlest` the queues the kernels since the one before the
// current node keep busy least, by the modeled time of their transfers. With WeightPrefetch::best,
// lower() times every placement with each prefetch placement and `queues` is unused.
enum class PrefetchQueues : uint8_t { from_first, from_last, idlest };

// Which DMA queues each kernel's own transfers take: `from_first` as the kernel places them (its
// round-robin transfers from queue 0); `idlest` the same placement mapped onto the queues the kernels
// since the one before it keep busy least (a kernel's first loads then do not queue behind the tail
// stores of the kernel before). With WeightPrefetch::best, lower() times the fastest placement with
// each and `kernel_queues` is unused.
enum class KernelQueues : uint8_t { from_first, idlest };

// How far ahead of a linear its weight prefetch may start: `next_kernel` only in the kernel right
// before it; `past_compute_bound` also across up to two kernels between, each compute-bound (its
// matmul instructions' Tensor-engine time, by the cost model, over its HBM traffic at the DMA rate the
// cost model gives) or, when the prefetch goes out inside a matmul kernel, any but a DMA-bound
// attention kernel; and only while the weight's transfer takes longer than the kernels between hide
// (their Tensor-engine time beyond their traffic: the nearer start hides it all otherwise). Such a
// prefetch also takes the weight of the linear right after, when that one's stream outlasts the first
// linear's Tensor-engine time. With WeightPrefetch::best, lower() times the fastest placement with it
// (and with each ActivationChain) and keeps it when faster.
enum class PrefetchReach : uint8_t { next_kernel, past_compute_bound };

// Where a linear reads its input from when that input is the result of the matmul epilogue group right
// before it (an MLP's FC1 + activation -> FC2; Llama's up * silu(gate) -> down): `through_hbm` as any
// value, stored by the group's kernel and loaded again by the linear once those stores are through;
// `in_sbuf` kept in SBUF when it fits the prefetch's share of it (as a^T, its K on partitions: the layout
// of a prefetched activation, handed over with the linear's prefetched weight, or alone when the weight
// is too large to prefetch): the group's kernel transposes each result tile, its epilogue applied,
// through the Tensor engine into that a^T, so the linear loads no activation and waits for none of the
// group's stores. The group still stores its result (a linear whose kernel cannot take the a^T loads
// it), but for a linear group of unary epilogue ops whose result only that linear reads, handed its own
// input and weight in SBUF (ESM-2's FC1 after its layer_norm): it computes its result transposed, its
// weight's blocks stationary, straight into the a^T, with no transpose and no store
// ("compiled.transposed_linears"; kernels::emit_linear_transposed). The values are the same bits either
// way. A norm's result (rms_norm, layer_norm, or a row loop
// such as a user's RMSNorm: the one before FC1, or before q) is kept the same way, its kernel transposing
// each row tile into the a^T, and so is its input when the matmul epilogue group right before it makes
// it (the group copies each result tile into SBUF beside its store; the norm loads nothing);
// `norms_in_sbuf` keeps only those, `in_sbuf` both. With WeightPrefetch::best, lower() times the fastest
// placement with each and keeps the fastest; the executable's "compiled.kept_activations" counts the
// results kept, "compiled.kept_norm_inputs" the norms that read their input kept.
enum class ActivationChain : uint8_t { through_hbm, in_sbuf, norms_in_sbuf };

// How a linear whose input arrives in SBUF with its weight's prefetch (a prefetched or kept activation)
// orders its matmuls: `k_slices` K slice by K slice over every result tile, as a kernel that loads its
// operands does (each slice of the weight feeds every tile as it lands), so every tile's epilogue and
// store come after the last slice; `tiles` each result tile's K steps in turn, so a tile's epilogue and
// store overlap the next tiles' matmuls while a weight the kernel still loads holds more of them back
// (kernels::PrefetchedWeight::tile_by_tile). With WeightPrefetch::best, lower() times the fastest
// program found with the other order and keeps the faster ("compiled.tile_by_tile" counts the linears
// of more than one row tile that ran `tiles`).
enum class PreloadedOrder : uint8_t { k_slices, tiles };

// Where the next linear reads the same input as the linear before it, which holds that input as a
// prefetched a^T (Llama's k after q, v after k): `loaded` gives it an a^T of its own, loaded from HBM
// (behind the transfers the kernels between leave on the queues); `handed_on` hands the tile on, so the
// input is not loaded again ("compiled.shared_activations"). The tile then stays allocated across those
// kernels, which leaves their prefetches less room; with WeightPrefetch::best, lower() tries it last, on
// the program it keeps, and keeps the faster.
enum class SharedInput : uint8_t { loaded, handed_on };

// Where a matmul epilogue group's result that a norm read kept in SBUF (ActivationChain: the residual
// stream, which Llama's RMSNorm and ESM-2's layer_norm read) is read again by a later matmul epilogue
// group as the operand of its binary op (the residual add of the out projection or of the MLP's last
// linear): `loaded` frees the kept rows after the norm, and that epilogue loads its operand from HBM
// (behind the weight streams and stores on the queues then); `kept` keeps them allocated across the
// kernels between, and that epilogue reads them there ("compiled.kept_residuals"). The kernels between
// then plan with less SBUF; with WeightPrefetch::best, lower() tries it last, on the program it keeps,
// and keeps the faster.
enum class ResidualStream : uint8_t { loaded, kept };

// Where the weight of an MLP's first linear (the linear right after an attention's out projection and
// the norm after that: ESM-2's FC1, Llama's gate projection) starts loading: `one_ahead` as any
// linear's, by the prefetch of a kernel shortly before it; `past_attention` from inside the attention
// kernel, behind its last loads, on the upper half of the DMA queues, while every kernel from there to
// that linear puts its transfers on the lower half, so that none of them queues behind the stream
// ("compiled.streamed_past_attention"); the out projection's weight, when nothing prefetches it, loads
// there too, right behind it on the lower half. The attention half of a layer then moves the MLP's first
// weight while it computes, at half the queues' bandwidth. With WeightPrefetch::best, lower() tries it
// last, on the program it keeps, and keeps the faster.
enum class MlpWeight : uint8_t { one_ahead, past_attention };

// How much of the free SBUF a weight's prefetch may take (its panels, planned before the kernel that
// streams them): `quarter` leaves the kernels it crosses most of it; `half` lets a larger weight stream
// one ahead (Llama's 5.8 MB gate projection while its up projection computes), the kernels between then
// planning with less. With WeightPrefetch::best, lower() tries `half` on the program it keeps, and keeps
// the faster.
enum class PrefetchBudget : uint8_t { quarter, half };

// The order lower() emits the graph's kernels in: the graph's, except that a matmul group whose epilogue
// works on views of its result (a projection with its rotary embedding, many steps per result tile)
// goes before the independent plain matmuls and linears right ahead of it, so that its epilogue
// overlaps their matmuls instead of running after its own with the Tensor engine idle. The same graph
// (values renumbered) when nothing moves.
Graph emission_order(const Graph& graph);

// The choices of lower() (each enum above says what it does). With `prefetch` WeightPrefetch::best,
// lower() searches them on the cost model and the others are unused; otherwise it lowers once, with them
// as given (tests and A/B measurements).
struct LowerOptions {
  WeightPrefetch prefetch = WeightPrefetch::best;
  PrefetchQueues queues = PrefetchQueues::from_first;
  KernelQueues kernel_queues = KernelQueues::from_first;
  PrefetchReach reach = PrefetchReach::next_kernel;
  ActivationChain chain = ActivationChain::through_hbm;
  PreloadedOrder order = PreloadedOrder::k_slices;
  SharedInput shared = SharedInput::loaded;
  ResidualStream residual = ResidualStream::loaded;
  MlpWeight mlp = MlpWeight::one_ahead;
  PrefetchBudget budget = PrefetchBudget::quarter;
};

// Throws sightline::Error naming the node when the graph holds an op without a device kernel.
// Kernels are emitted in emission_order(graph).
device::Executable lower(const Graph& graph, const device::Spec& spec, const std::string& name,
                         const LowerOptions& options = {});

// The version of what lower() emits, part of every disk cache key (compile.cpp): bumped whenever the
// lowering, or a kernel it emits, changes the executable a graph lowers to, so that disk cache entries
// written by an older lowering are rebuilt instead of run. tests/compiler/lowering_version_test.cpp pins
// the executables of a set of graphs to this number and fails when they change without a bump.
// 3: aten::gelu without {approximate=tanh} is the erf form
// 4: view-level matmul epilogues (rotary), the attention's store into the permuted context, the linears'
//    weight prefetch and bias in the evacuation, Llama's f32-softmax attention, argmax's 16-bit indices
// 5: attention heads staged part by part, their steps balanced over the engines; the weight prefetch
//    from and into matmul epilogue groups and behind a kernel's own loads, its pieces and the kernels'
//    transfers on the queues chosen by the cost model; layer_norm's x ahead of its parameters, one row
//    tile in column halves
// 6: the matmul's operand loads and result stores cut by the stream rule (stream_min_piece_bytes); with
//    a prefetched weight, the folded biases of the next two panels loaded behind the current one's
// 7: rows every partition reads (biases, norm parameters) through KernelBuilder::load_broadcast (the
//    broadcast DMA or one row and a GpSimd copy, by cost); a weight's prefetch may start past
//    compute-bound kernels or inside a matmul kernel (PrefetchReach)
// 8: a gather (aten::embedding) cut by rows into one piece per DMA queue; a linear's result kept in
//    SBUF, transposed on the Tensor engine, for the next linear that reads it (ActivationChain)
// 9: attention items of a few heads sharing their element-wise instructions, blocks of items sharing one
//    transfer per operand and one store; a norm's input and result kept in SBUF between the matmul
//    epilogue before it and the linear after it (ActivationChain::norms_in_sbuf); row loops that read
//    i32 inputs; a product on the Scalar engine keeps the sign of a zero
// 10: linears and matmuls of few rows weight-stationary, y^T transposed back on the Tensor engine
// 11: grouped-query attention reads k and v from their key/value heads; repeat_kv's copies not made
// 12: a row loop (a user's RMSNorm) reads its input from the matmul epilogue before it in SBUF and hands
//     its result on to the next linear in SBUF (ActivationChain::norms_in_sbuf, in_sbuf)
// 13: epilogue operands every tile loads alike (rotary cos / sin) kept in SBUF for the program; a
//     prefetch past kernels never crosses a DMA-bound attention, and takes a second weight ahead; the
//     reach and chains tried on the fastest prefetching placement, each chain on either reach
// 14: a view epilogue's steps (rotary embeddings) placed over the Vector engine and GpSimd and emitted
//     in list-scheduling order (engine_balance.h: schedule_epilogue); such a group emitted before the
//     plain projections ahead of it (emission_order)
// 15: row loops that read bool inputs (Llama's causal mask)
// 16: a linear handed its input in SBUF may compute its result tiles one after the other (PreloadedOrder)
// 17: the kept identity built in place (no ramp tile), its instructions labelled with the norm's op
// 18: a matmul epilogue's first operands loaded behind the kernel's own loads when it has several row tiles
// 19: ... and then for as many tiles as it has operand buffers
// 20: a layer_norm over rows kept in SBUF computes them in place
// 21: a linear whose result only the next linear reads computes it transposed into that linear's a^T
// 22: masked_fill a row step (its mask a full row or one value per row)
// 23: a norm's transposes into the next linear's a^T evacuated on the Scalar engine; a matmul epilogue
//     before a norm that reads its tiles in SBUF places its binary ops on the Vector engine or GpSimd
// 24: a row loop's exact casts are no passes of their own (a 16-bit float widened to f32 is read as it is;
//     an f32 row rounded to 16 bits is written so by the step that computes it)
// 25: a result's transposes into the next linear's a^T copied out of PSUM two K tiles an instruction
// 26: the kept chain (ActivationChain::in_sbuf) also timed with the other kernel queues and prefetch placement
// 27: ... but a cast whose input is a step stays where an activation or a row sum reads it
// 28: attention's exp subtracts the max as its bias operand (and applies the scale where the mask allows),
//     every head's max in one reduction, its placement by the staged pipeline's schedule
// 29: a row loop's tiles handed into the next linear's a^T one tile late, their copies on the engine its
//     steps leave less loaded; a loop reading its rows from SBUF streams the next linear's weight
// 30: a matmul's result kept in SBUF for the next matmul epilogue that reads it as an operand (a gated
//     MLP's up projection); a candidate lowering that cannot be built is dropped
// 31: a row loop places its own steps beside its hand-over's copies; its weight row loaded ahead of the
//     matmul epilogue group before it
// 32: a view epilogue's cat read once by a binary op other than the root is not copied: that op runs
//     on each piece where it lies
// 33: a prefetch's loads carry aten::linear whichever kernel they go out in
// 34: ... but copied where its reader's other operand is a cat too (32 and 33 ran that reader on one
//     cat's pieces and read the other's buffer, which nothing made)
// 35: a prefetched a^T handed on to the next linear of the same input (k and v reading q's), lower()'s
//     last candidate
// 36: an attention's additive mask that the graph makes finite accumulated into its scores on the Tensor
//     engine (q^T scaled first), the scores read in PSUM; items of more heads where they cost less;
//     P^T's evacuations shared over the Vector and Scalar engines item by item
// 37: the rows a norm read in SBUF kept there for the residual add after it (ResidualStream::kept),
//     lower()'s last candidate; a layer_norm does not compute over rows a later kernel reads
// 38: items of more heads tried only with an attention's scores in PSUM (36 tried them on every kernel)
// 39: an MLP's first weight streamed from inside the attention kernel on half the queues
//     (MlpWeight::past_attention), lower()'s last candidate
// 40: a weight's prefetch allowed half the free SBUF (PrefetchBudget::half), tried on the program kept
// 41: with the MLP's stream, the out projection's weight loaded from the attention kernel too
inline constexpr int kLoweringVersion = 41;

enum class IoRole : uint8_t { argument, result, constants, scratch };

struct IoBinding {
  IoRole role = IoRole::argument;
  int index = 0;  // argument or result position
};

// The role of each I/O tensor of a lowered program. Throws sightline::Error for an I/O tensor that is
// not one a lowering declares (an executable from elsewhere in the compile cache directory).
std::vector<IoBinding> io_bindings(const device::Executable& exe);

// The values of a constants I/O tensor, from the executable's metadata.
std::vector<double> constant_values(const device::Executable& exe, const device::IoTensor& io);

}  // namespace sightline::compiler
