// The op table — the single source of truth about ops — and the op functions.
//
//   Tensor y = x * rsqrt(mean(x * x, {-1}, /*keepdim=*/true) + 1e-6) * w;   // naive RMSNorm
//   Tensor z = rms_norm(x, w, 1e-6);                                        // the fused built-in
//
// Every op is one line of SIGHTLINE_OP_TABLE: its enum name, its profiler name (`aten::<op>`, as
// PyTorch names it), the number of tensor inputs (-1: a list), its kind, and the rule that counts its
// FLOPs and bytes. The OpId enum, the name table and the cost rules are generated from that one list,
// so an op cannot exist without its entry. The dispatcher, the CPU reference, the device kernels,
// the compiler and the tests all read this table.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "sightline/tensor.h"

namespace sightline {

// attention: scaled_dot_product_attention, two matmuls around a softmax in one kernel.
enum class OpKind : uint8_t { elementwise, reduction, movement, matmul, normalization, attention };
std::string_view op_kind_name(OpKind kind);

// How an op's FLOPs are counted (bytes are always: bytes of the inputs read + bytes written, except
// for views, which move nothing):
//   per_output: k FLOPs per output element (elementwise)
//   per_input:  k FLOPs per element of the first input (reductions, normalizations, softmax)
//   matmul:     2 * M * N * K (+ M * N for a bias)
//   attention:  2 * L * S * E (q k^T) + 2 * L * S * Ev (p v) per batch and head, + k * L * S (the
//               scale, mask and softmax)
//   none:       0 (movement)
enum class CostRule : uint8_t { per_output, per_input, matmul, attention, none };

// X(id, profiler name, tensor arity, kind, cost rule, k, is_view, outputs)
// Ops marked is_view only rewrite metadata: they run the same code for every backend and never look
// up a kernel. `outputs` is the number of tensors the op returns (topk: values and indices); an op of
// more than one is run by dispatch_outputs (sightline/backend.h). New ops go at the end (OpId values
// stay stable).
#define SIGHTLINE_OP_TABLE(X)                                                     \
  X(add, "aten::add", 2, elementwise, per_output, 1, false, 1)                       \
  X(sub, "aten::sub", 2, elementwise, per_output, 1, false, 1)                       \
  X(rsub, "aten::rsub", 2, elementwise, per_output, 1, false, 1)                     \
  X(mul, "aten::mul", 2, elementwise, per_output, 1, false, 1)                       \
  X(div, "aten::div", 2, elementwise, per_output, 1, false, 1)                       \
  X(maximum, "aten::maximum", 2, elementwise, per_output, 1, false, 1)               \
  X(minimum, "aten::minimum", 2, elementwise, per_output, 1, false, 1)               \
  X(eq, "aten::eq", 2, elementwise, per_output, 1, false, 1)                         \
  X(ne, "aten::ne", 2, elementwise, per_output, 1, false, 1)                         \
  X(lt, "aten::lt", 2, elementwise, per_output, 1, false, 1)                         \
  X(le, "aten::le", 2, elementwise, per_output, 1, false, 1)                         \
  X(gt, "aten::gt", 2, elementwise, per_output, 1, false, 1)                         \
  X(ge, "aten::ge", 2, elementwise, per_output, 1, false, 1)                         \
  X(where, "aten::where", 3, elementwise, per_output, 1, false, 1)                   \
  X(masked_fill, "aten::masked_fill", 2, elementwise, per_output, 1, false, 1)       \
  X(neg, "aten::neg", 1, elementwise, per_output, 1, false, 1)                       \
  X(abs, "aten::abs", 1, elementwise, per_output, 1, false, 1)                       \
  X(exp, "aten::exp", 1, elementwise, per_output, 1, false, 1)                       \
  X(log, "aten::log", 1, elementwise, per_output, 1, false, 1)                       \
  X(sqrt, "aten::sqrt", 1, elementwise, per_output, 1, false, 1)                     \
  X(rsqrt, "aten::rsqrt", 1, elementwise, per_output, 1, false, 1)                   \
  X(reciprocal, "aten::reciprocal", 1, elementwise, per_output, 1, false, 1)         \
  X(pow, "aten::pow", 1, elementwise, per_output, 1, false, 1)                       \
  X(tanh, "aten::tanh", 1, elementwise, per_output, 1, false, 1)                     \
  X(sigmoid, "aten::sigmoid", 1, elementwise, per_output, 1, false, 1)               \
  X(relu, "aten::relu", 1, elementwise, per_output, 1, false, 1)                     \
  X(silu, "aten::silu", 1, elementwise, per_output, 2, false, 1)                     \
  X(gelu, "aten::gelu", 1, elementwise, per_output, 8, false, 1)                     \
  X(erf, "aten::erf", 1, elementwise, per_output, 1, false, 1)                       \
  X(sin, "aten::sin", 1, elementwise, per_output, 1, false, 1)                       \
  X(cos, "aten::cos", 1, elementwise, per_output, 1, false, 1)                       \
  X(to_copy, "aten::_to_copy", 1, elementwise, none, 0, false, 1)                    \
  X(fill, "aten::fill_", 0, elementwise, none, 0, false, 1)                          \
  X(sum, "aten::sum", 1, reduction, per_input, 1, false, 1)                          \
  X(mean, "aten::mean", 1, reduction, per_input, 1, false, 1)                        \
  X(amax, "aten::amax", 1, reduction, per_input, 1, false, 1)                        \
  X(softmax, "aten::softmax", 1, reduction, per_input, 5, false, 1)                  \
  X(log_softmax, "aten::log_softmax", 1, reduction, per_input, 5, false, 1)          \
  X(cumsum, "aten::cumsum", 1, reduction, per_input, 1, false, 1)                    \
  X(argmax, "aten::argmax", 1, reduction, per_input, 1, false, 1)                    \
  X(matmul, "aten::matmul", 2, matmul, matmul, 2, false, 1)                          \
  X(linear, "aten::linear", 3, matmul, matmul, 2, false, 1)                          \
  X(rms_norm, "aten::rms_norm", 2, normalization, per_input, 4, false, 1)            \
  X(layer_norm, "aten::layer_norm", 3, normalization, per_input, 8, false, 1)        \
  X(scaled_dot_product_attention, "aten::scaled_dot_product_attention", 4, attention, attention, 7, false, 1) \
  X(contiguous, "aten::contiguous", 1, movement, none, 0, false, 1)                  \
  X(copy, "aten::copy_", 1, movement, none, 0, false, 1)                             \
  X(cat, "aten::cat", -1, movement, none, 0, false, 1)                               \
  X(embedding, "aten::embedding", 2, movement, none, 0, false, 1)                    \
  X(view, "aten::view", 1, movement, none, 0, true, 1)                               \
  X(reshape, "aten::reshape", 1, movement, none, 0, true, 1)                         \
  X(transpose, "aten::transpose", 1, movement, none, 0, true, 1)                     \
  X(permute, "aten::permute", 1, movement, none, 0, true, 1)                         \
  X(slice, "aten::slice", 1, movement, none, 0, true, 1)                             \
  X(expand, "aten::expand", 1, movement, none, 0, true, 1)                           \
  X(unsqueeze, "aten::unsqueeze", 1, movement, none, 0, true, 1)                     \
  X(squeeze, "aten::squeeze", 1, movement, none, 0, true, 1)                         \
  X(select, "aten::select", 1, movement, none, 0, true, 1)                      \
  X(topk, "aten::topk", 1, reduction, per_input, 1, false, 2)

enum class OpId : uint8_t {
#define SIGHTLINE_OP_ENUM(id, name, arity, kind, rule, k, is_view, outputs) id,
  SIGHTLINE_OP_TABLE(SIGHTLINE_OP_ENUM)
#undef SIGHTLINE_OP_ENUM
};

struct OpInfo {
  OpId id;
  std::string_view name;  // "aten::mul"
  int arity;              // tensor inputs; -1 for a list (cat)
  OpKind kind;
  CostRule cost_rule;
  int flops_per_element;  // the k of the cost rule
  bool is_view;
  int outputs;  // tensors returned: 1, or 2 for topk
};

inline constexpr OpInfo kOpTable[] = {
#define SIGHTLINE_OP_INFO(id, name, arity, kind, rule, k, is_view, outputs) \
  OpInfo{OpId::id, name, arity, OpKind::kind, CostRule::rule, k, is_view, outputs},
    SIGHTLINE_OP_TABLE(SIGHTLINE_OP_INFO)
#undef SIGHTLINE_OP_INFO
};
inline constexpr int kOpCount = static_cast<int>(std::size(kOpTable));

constexpr const OpInfo& op_info(OpId id) { return kOpTable[static_cast<int>(id)]; }
constexpr std::string_view op_name(OpId id) { return op_info(id).name; }

// Activation-style functions shared by the unary ops, the CPU reference and the device kernels.
constexpr bool op_is_unary_elementwise(OpId id) {
  return op_info(id).kind == OpKind::elementwise && op_info(id).arity == 1 && id != OpId::to_copy;
}
// masked_fill takes two tensors but is a select, not an arithmetic op with a scalar form.
constexpr bool op_is_binary_elementwise(OpId id) {
  return op_info(id).kind == OpKind::elementwise && op_info(id).arity == 2 && id != OpId::masked_fill;
}
// The selects: where(cond, a, b) and masked_fill(x, mask) with attrs.scalar as the value.
constexpr bool op_is_select(OpId id) { return id == OpId::where || id == OpId::masked_fill; }
// The comparisons: binary elementwise ops that write bool.
constexpr bool op_is_comparison(OpId id) {
  return id == OpId::eq || id == OpId::ne || id == OpId::lt || id == OpId::le || id == OpId::gt || id == OpId::ge;
}

// gelu's `approximate` argument, as torch names it: "none" is the exact form 0.5 x (1 + erf(x / sqrt(2)))
// (torch's default), "tanh" the tanh approximation.
enum class GeluApproximate : uint8_t { none, tanh };
// Parses "none" or "tanh"; throws sightline::Error naming both otherwise.
GeluApproximate gelu_approximate_parse(std::string_view name);
std::string_view gelu_approximate_name(GeluApproximate a);

// Non-tensor arguments of an op. Which fields an op reads is documented at its function below.
struct OpAttrs {
  double scalar = 0.0;     // the scalar operand of tensor-scalar ops, pow's exponent, fill's and
                           // masked_fill's value
  bool has_scalar = false;  // binary ops: the second operand is `scalar`, not inputs[1]
  Dims dims;               // reduction dims, permute order, view/expand/reshape shape
  bool keepdim = false;
  int64_t dim = 0;  // softmax, cat, slice, select, transpose (dim0), squeeze/unsqueeze
  int64_t dim1 = 0;  // transpose
  int64_t start = 0, end = 0, step = 1;  // slice; select's index is `start`
  double eps = 0.0;                       // rms_norm, layer_norm
  DType dtype = DType::f32;               // to_copy
  // matmul, linear: the result's dtype when it differs from the operands' (bf16 operands, f32 result:
  // the f32 sum as it accumulates, unrounded, as torch.mm's out_dtype). Unset: the operands' dtype.
  std::optional<DType> out_dtype;
  Device device;                          // copy: the destination device
  GeluApproximate approximate = GeluApproximate::none;  // gelu
  bool is_causal = false;   // scaled_dot_product_attention (its scale is `scalar`)
  bool enable_gqa = false;  // scaled_dot_product_attention
  int64_t k = 0;            // topk (its dim is `dim`)
  bool largest = true;      // topk
  bool sorted = true;       // topk
};

// One op application as the dispatcher, the observer hooks and the kernels see it.
struct OpCall {
  OpId op;
  std::span<const Tensor> inputs;  // absent optional inputs are undefined tensors
  const OpAttrs& attrs;
  // An op of several outputs: outputs 1.. (topk's indices), allocated by the dispatcher with the metas
  // of infer_meta(call, i); the kernel's `out` is output 0. Empty for every other op.
  std::span<Tensor> more_outputs = {};
};

// FLOPs and bytes an op application costs by its table rule (used by the profiler's with_flops and
// the analysis layer).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};
OpCost op_cost(const OpCall& call, const Tensor& out);

// Output shape and dtype of an op application, with the errors for bad shapes and dtypes.
struct TensorMeta {
  Dims shape;
  DType dtype = DType::f32;
};
TensorMeta infer_meta(const OpCall& call);
// Output `output` of an op of several outputs (op_info(op).outputs); output 0 is infer_meta(call).
TensorMeta infer_meta(const OpCall& call, int output);
// Broadcast two shapes (numpy rules) or throw naming `op` and both shapes.
Dims broadcast_shapes(const Dims& a, const Dims& b, std::string_view op);
// torch.result_type: the dtype add(a, b) / add(a, scalar) computes in (a 0-dim tensor or a scalar only
// raises the category: bool < int < float).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, double b);
// The dtype an elementwise op's kernels read input `i` in (each backend casts a promoted operand to it
// first; a binary op's host scalar, input 1, becomes a tensor of it): the output dtype, except for the
// comparisons, which compare in result_type and write bool, and the masks of where (input 0) and
// masked_fill (input 1), which are bool.
DType elementwise_operand_dtype(const OpCall& call, size_t i, DType out);

// ---- op functions ----
// Binary elementwise ops broadcast; tensor-scalar forms do not promote the tensor's dtype except
// that an integer tensor with a fractional scalar becomes f32 (as in PyTorch).
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
// rsub(a, b) = b - a, as torch.rsub: `1.0 - t` is one aten::rsub (the scalar is `b`).
Tensor rsub(const Tensor& a, const Tensor& b);
Tensor rsub(const Tensor& a, double b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Comparisons: bool tensors of the broadcast shape, comparing in result_type(a, b) (NaN compares unequal
// to everything, as in torch).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, double b);
// where(cond, a, b): a where cond is true, else b; cond is bool, the three broadcast, the result has
// result_type(a, b). masked_fill(x, mask, value): value where the bool mask (broadcast to x) is true.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);
// gelu: approximate "none" (torch's default) is the exact erf form, "tanh" the tanh approximation.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);

// Reductions over `dims` (negative dims count from the end; empty = all dims).
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// cumsum along dim (a scan): out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...], the input's
// dtype (bool sums as i32; floats accumulate in f32). argmax: the index (i32; torch's int64) of the
// largest value along dim, the first one on ties, a NaN above every number (as torch).
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// topk, as torch.topk(input, k, dim=-1, largest=True, sorted=True): the k largest (smallest with
// largest = false) values along dim and their indices (i32, as argmax; torch's int64), shape of x with
// dim of size k; one aten::topk op with two outputs. NaN ranks above every number (as torch). Order: by
// value, descending (ascending for largest = false); equal values in ascending index order. torch's CPU
// kernel partial-sorts (value, index) pairs comparing values only, so it leaves the order of ties
// unspecified; ascending index is the stable choice, and what max8 + find_index8 give on the device.
// With sorted = false the same order is returned (torch allows any). 0 <= k <= size of dim.
struct TopkResult {
  Tensor values;
  Tensor indices;
};
TopkResult topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// matmul: 1-D and 2-D operands, and batched operands whose batch dims broadcast, as torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
// linear: x[..., in] @ weight[out, in]^T + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// rms_norm: x / sqrt(mean(x^2 over the last dim) + eps) * weight (weight may be undefined).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
// layer_norm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias (both optional).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention (inference: no
// dropout): softmax(q k^T * scale + bias) v for q [..., L, E], k [..., S, E], v [..., S, Ev] ->
// [..., L, Ev], one fused op (one executable on the device; the scores stay on chip). `attn_mask`
// (optional) broadcasts to [..., L, S]: bool (true = attend; false = -inf) or additive of q's dtype.
// `is_causal` masks key j > query i (the top-left causal mask torch builds; not with attn_mask).
// `scale` defaults to 1/sqrt(E). With `enable_gqa` the heads
// (dim -3) of k and v may divide those of q: query head h reads key/value head h / (Hq / Hkv), as
// torch's repeat_interleave of k and v; without it the leading dims must match.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, bool enable_gqa = false);

// chunk: `chunks` views along dim of size ceil(n / chunks) (the last may be smaller, fewer when n is
// small), as torch.chunk; split: views of `split_size` along dim (the last the remainder), or of the
// given sizes (summing to n), as torch.split. Each view is one aten::slice.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);

Tensor cat(std::span<const Tensor> tensors, int64_t dim);
Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim);
// embedding: rows of weight[num, dim] picked by i32 indices of any shape -> indices.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return mul(reciprocal(b), a); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace sightline
