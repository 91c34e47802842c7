// Built-in eager kernels: one device executable per op application (op, shapes, strides, dtypes).
//
// The neuron backend calls build_eager_kernel for an op the first time it meets that op with those
// tensor layouts, caches the executable under eager_kernel_key, and runs it with one HBM address per
// I/O tensor: the defined inputs in call order, then the output, each bound at the address of its
// first element. Inputs may be views (any non-negative strides, stride 0 for broadcast dims); each I/O
// tensor is declared with the extent its strides reach, so a view binds without a copy.
//
//   TensorDesc x{DType::f32, {4096, 4096}, {4096, 1}}, w{DType::f32, {4096}, {1}};
//   OpAttrs attrs;
//   attrs.eps = 1e-6;
//   TensorDesc descs[] = {x, w};
//   device::Executable exe = build_eager_kernel(OpId::rms_norm, descs, attrs, x, spec);
//
// Every non-view op of the op table has a kernel except `copy` (host<->device copies are the
// runtime's job). Binary ops always get two tensors: the backend turns a host scalar into a 0-dim
// device tensor first. Engines compute in f32; results are rounded to the output dtype.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>

#include "sightline/device/executable.h"
#include "sightline/device/spec.h"
#include "sightline/kernels/builder.h"
#include "sightline/ops.h"

namespace sightline::kernels {

// A tensor as a kernel sees it: element strides; the tensor is bound at its first element's address.
struct TensorDesc {
  DType dtype = DType::f32;
  Dims shape;
  Dims strides;

  static TensorDesc contiguous(DType dtype, const Dims& shape) {
    return {dtype, shape, contiguous_strides(shape)};
  }
  static TensorDesc of(const Tensor& t) { return {t.dtype(), t.shape(), t.strides()}; }
};

// Elements from the first to one past the last element the strides reach (0 for an empty tensor).
int64_t tensor_extent(const TensorDesc& t);

// Executable for one op application. I/O order: the defined inputs in call order, then the output,
// then `more_outputs` (the outputs after the first of an op of several, such as topk's indices).
// Throws sightline::Error for ops without a device kernel (copy, the view ops) and unsupported layouts.
device::Executable build_eager_kernel(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                                      const TensorDesc& out, const device::Spec& spec,
                                      std::span<const TensorDesc> more_outputs = {});

// The same kernel emitted into `b`, a program it is part of (the compiler's lowering): the inputs are
// in HBM tensors `input_tensors` and the output in `out_tensor` (I/O indices of `b` or its
// KernelBuilder::view handles), each at its first element. Between b.begin_kernel() and
// b.end_kernel() on a builder with no tiles live, the instructions, tiles and DMA queues are those of
// build_eager_kernel's executable.
//
// `hooks` (optional) let a caller add work to a matmul / linear kernel: `allocated` runs once the
// kernel has allocated its tiles, before its first instruction (room for the caller's own tiles above
// them); `before_store` runs for each result tile once it is in SBUF (`y`), right before the kernel
// stores it to `dst` (an HBM pattern of the output): the compiler's matmul epilogue; `before_stores`
// runs once, right before the kernel's first store, so that a caller's transfers emitted there queue
// behind the kernel's loads emitted by then (a resident b's later panels are fetched one panel ahead,
// after the first stores) but ahead of its stores; `after_loads` likewise, as soon as the kernel has
// emitted all its loads (right before the store that follows the last of them; the first store when
// the kernel streams its operands), behind every load of the kernel (the attention kernel runs it
// right after its last item's loads, ahead of its stores); `weight` hands a
// linear kernel its weight already loaded into SBUF (prefetch_linear_weight), so it loads none.
// The phases of the attention kernel: q k^T (and its operand loads), the scale, the mask, the softmax,
// and P v (the transposes of P, v's loads, the store).
enum class AttentionPhase { scores, scale, mask, softmax, values };

// Whether the attention kernel takes these shapes (head dims within the Tensor engine's rows and a
// PSUM bank, one query tile's scores in PSUM); the reason when it does not.
std::optional<std::string> attention_unsupported(const device::Spec& spec, const TensorDesc& q, const TensorDesc& k,
                                                 const TensorDesc& v);

struct EagerHooks {
  std::function<void()> allocated;
  std::function<void(const AccessPattern& y, const AccessPattern& dst)> before_store;
  // before_store needs each result tile's whole rows (a row-wide epilogue such as softmax): the kernel
  // keeps its tiles whole instead of storing its last one in column pieces.
  bool whole_rows = false;
  // scaled_dot_product_attention: called as the kernel moves to each phase of its work, so that a
  // caller that fused the user's ops into it (compile()'s fused attention) labels each phase's
  // instructions with the op it comes from.
  std::function<void(AttentionPhase)> attention_phase;
  // scaled_dot_product_attention: every element of the additive mask is finite by how the graph makes
  // it (compile()'s lowering proves it: a 0/1 value times a finite scalar, Llama's causal mask). The
  // kernel may then add the mask on the Tensor engine (an identity matmul accumulated into the scores'
  // PSUM), where a -inf or NaN anywhere in a column of it would poison that column's every score.
  bool mask_finite = false;
  std::function<void()> before_stores;
  std::function<void()> after_loads;
  // Runs once, right before the kernel evacuates its first result tile (before its first before_store),
  // behind every load the kernel has emitted by then: a caller's loads that the epilogue needs go there,
  // so that they do not hold back the kernel's first operands.
  std::function<void()> before_first_result;
  // Runs right after before_store with the PSUM accumulator the tile `y` was evacuated from (its
  // rows, every column of the tile): that bank is free until the kernel's next use of it, so a caller
  // may put work of its own through it (compile()'s lowering transposes the result tile into the next
  // linear's a^T there: a result kept in SBUF). Only a matmul kernel's resident schedule calls it.
  std::function<void(const AccessPattern& y, const AccessPattern& acc)> after_epilogue;
  // A normalization kernel (rms_norm, layer_norm) calls it once per row tile, right after the
  // instructions that compute the tile's whole rows `y` (SBUF, from partition 0), with the output rows
  // they are stored to (`dst`, HBM): compile()'s lowering transposes them into the next linear's a^T
  // there (a norm's result kept in SBUF). Called whether or not the rows were stored in pieces.
  std::function<void(const AccessPattern& y, const AccessPattern& dst)> rows_computed;
  // A normalization kernel of a contiguous input reads row tile t (rows [t * partitions, ...)) from
  // columns [t * n, (t + 1) * n) of this tile instead of loading it: compile()'s lowering has the matmul
  // epilogue before the norm write its result there (a norm's input kept in SBUF).
  const struct Tile* input_rows = nullptr;
  // ... and a later kernel reads those rows there too (compile()'s lowering keeps them for a residual
  // add): the kernel must not compute its result over them.
  bool input_rows_read_later = false;
  // A normalization kernel's weight and bias (inputs 1 and 2), already broadcast to every partition of
  // these tiles: compile()'s lowering loads them ahead of the kernel before, so that they do not queue
  // behind the transfers that kernel leaves on the DMA queues (a weight's prefetch).
  const struct Tile* parameters[2] = {nullptr, nullptr};
  const struct PrefetchedWeight* weight = nullptr;
};

// A linear's weight ([N, K], a program input nothing writes) loaded into SBUF ahead of its kernel, laid
// out as the matmul's resident panels of b[k, n] = weight[n, k]: compile()'s lowering loads it while the
// kernels before the linear run, so that the linear's first matmul waits only for its activation.
struct PrefetchedWeight {
  TensorDesc weight;
  // One tile per panel of up to the Tensor engine's moving columns; none when only the activation is
  // handed over (a weight too large to prefetch: the kernel loads b as it would without this).
  TilePool panels;
  // The linear's input x too, when the kernel before it does not write it (q, k and v read one
  // activation): a^T [k tile][row], every row of x in one block (allocate_linear_activation).
  std::optional<Tile> activation;
  TensorDesc x;
  // With `activation` handed over and more than one row tile, the kernel computes its result tiles one
  // after the other (every K step of a tile, then the next's) instead of K slice by K slice over a
  // group of every PSUM bank as when it loads a^T itself: each tile's epilogue and store then overlap
  // the next tiles' matmuls, while a panel of b the kernel still loads holds more matmuls back until
  // it has landed.
  bool tile_by_tile = false;
  // Set by the kernel that reads `activation` as its a^T (a kernel whose plan cannot takes x from HBM
  // instead): compile()'s lowering checks it where nothing but this tile holds x (emit_linear_transposed).
  mutable bool activation_read = false;
};
// Allocates the panels on `b` (outside any kernel's scope: the caller frees them after the linear) when
// they take at most `budget` bytes per partition; nullopt (nothing allocated) otherwise.
std::optional<PrefetchedWeight> allocate_linear_weight(KernelBuilder& b, const TensorDesc& weight,
                                                       uint64_t budget);
// Emits the loads of the weight (HBM tensor `tensor`, at its first element) into the panels: pieces of
// at least stream_min_piece_bytes (a stream of transfers, each hiding the next one's fixed cost), spread
// over every DMA queue.
void prefetch_linear_weight(KernelBuilder& b, const PrefetchedWeight& w, uint32_t tensor);
// Adds x ([..., K], rows that are one strided run) as a^T when it takes at most `budget` bytes per
// partition; false (nothing allocated) otherwise. Its loads: prefetch_linear_activation (HBM `tensor`).
bool allocate_linear_activation(KernelBuilder& b, PrefetchedWeight& w, const TensorDesc& x, uint64_t budget);
void prefetch_linear_activation(KernelBuilder& b, const PrefetchedWeight& w, uint32_t tensor);
// Whether emit_linear_transposed can compute the linear of `w` (its panels and its a^T handed over,
// both in SBUF) into `next`'s a^T: `next` reads the result as its input, every row of it.
bool linear_transposes_into(const device::Spec& spec, const PrefetchedWeight& w, const PrefetchedWeight& next);
// The linear y = x @ weight^T (+ bias) of `w` (its panels and a^T in SBUF), computed transposed: per
// block of 128 output columns n, y^T[n, rows] = weight[n, :] @ x^T, the block of the weight stationary
// and x^T moving (up to the Tensor engine's moving columns of rows at a time), straight into the next
// linear's a^T `next.activation` (K tile j of it is block j of y): no result tile, no transpose, no
// store. A linear whose result only the next linear reads then hands it over at the cost of its own
// matmuls (compile()'s lowering; an ESM-2 or BERT FFN's FC1 -> FC2). The bias ([n], HBM tensor
// `bias_tensor` at its first element, or none) is one scalar per partition of a block, added as the
// Vector engine evacuates the block; `epilogue` then runs on the block in SBUF (elementwise ops, in
// place); `after_loads` right after the bias's load (a caller's loads queue behind it there). The same
// products in the same K order as the row-major kernel: the same bits.
void emit_linear_transposed(KernelBuilder& b, const PrefetchedWeight& w, std::optional<uint32_t> bias_tensor,
                            const TensorDesc& bias, const PrefetchedWeight& next,
                            const std::function<void(const AccessPattern&)>& epilogue,
                            const std::function<void()>& after_loads = {});
// The SBUF bytes per partition a normalization kernel (rms_norm, layer_norm of `inputs`: x, then its
// parameters) takes with its whole pipeline of row tiles: what a caller must leave free beside SBUF of its
// own for the kernel to run at its best (compile()'s lowering, before it keeps the norm's result in SBUF).
uint64_t normalization_sbuf_bytes(std::span<const TensorDesc> inputs, const TensorDesc& out);
void emit_eager_kernel(KernelBuilder& b, OpId op, std::span<const TensorDesc> inputs,
                       std::span<const uint32_t> input_tensors, const OpAttrs& attrs, const TensorDesc& out,
                       uint32_t out_tensor, const EagerHooks* hooks = nullptr);

// A cache key that differs whenever build_eager_kernel would build a different executable for the same
// spec; the overload with a spec also tells specs apart (for caches shared across device specs).
std::string eager_kernel_key(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                             const TensorDesc& out);
std::string eager_kernel_key(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                             const TensorDesc& out, const device::Spec& spec);

}  // namespace sightline::kernels
