// Shape and dtype rules of every op, with the errors a user sees for bad shapes and dtypes.
#include <algorithm>

#include "core/checked_math.h"
#include "core/view_meta.h"
#include "sightline/ops.h"

namespace sightline {
namespace {

bool is_integral(double v) { return v == static_cast<double>(static_cast<int64_t>(v)); }

// Type categories, as PyTorch orders them: bool < integer < floating point.
int category(DType t) { return t == DType::boolean ? 0 : dtype_is_floating(t) ? 2 : 1; }

// PyTorch's rule: dimensioned tensors decide the result; a 0-dim tensor only raises the category
// (bool -> int -> float), as a Python scalar does.
DType promote_tensors(const Tensor& a, const Tensor& b) {
  const bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 == b0) return dtype_promote(a.dtype(), b.dtype());
  const Tensor& dimensioned = a0 ? b : a;
  const Tensor& zero_dim = a0 ? a : b;
  if (category(zero_dim.dtype()) > category(dimensioned.dtype())) return zero_dim.dtype();
  return dimensioned.dtype();
}

// A Python scalar: an integral one is an int, any other a float.
DType promote_scalar(DType t, double scalar) {
  const DType scalar_type = is_integral(scalar) ? DType::i32 : DType::f32;
  return category(scalar_type) > category(t) ? scalar_type : t;
}

// Bool tensors are masks: what reads them is listed here; arithmetic on them is an error that says how
// to cast, instead of torch's mix of bool results, integer results and errors.
bool reads_bool(OpId op) {
  return op_is_comparison(op) || op_is_select(op) || op == OpId::scaled_dot_product_attention || op == OpId::sum ||
         op == OpId::cumsum || op == OpId::to_copy || op == OpId::contiguous ||
         op == OpId::copy || op == OpId::cat || op_info(op).is_view;
}

void check_no_bool(const OpCall& call) {
  if (reads_bool(call.op)) return;
  for (const Tensor& t : call.inputs) {
    SIGHTLINE_CHECK(!t.defined() || t.dtype() != DType::boolean,
                    "{}: got a bool tensor ({}); bool tensors are masks for comparisons and where/masked_fill: "
                    "cast with .to(DType::f32) or .to(DType::i32) to compute with it",
                    op_name(call.op), t.describe());
  }
}

DType float_result(DType t) { return dtype_is_floating(t) ? t : DType::f32; }

void check_floating(const Tensor& t, OpId op) {
  SIGHTLINE_CHECK(dtype_is_floating(t.dtype()), "{}: expected a floating-point tensor (f32, bf16, f16), got {}",
                  op_name(op), t.describe());
}

Dims reduced_shape(const Tensor& x, const Dims& dims, bool keepdim, OpId op) {
  std::array<bool, kMaxDims> reduce{};
  if (dims.empty()) reduce.fill(true);
  for (int64_t d : dims) {
    const int n = normalize_dim(static_cast<int>(d), x.dim(), op_name(op));
    SIGHTLINE_CHECK(!reduce[static_cast<size_t>(n)] || dims.empty(), "{}: dim {} appears twice in {}", op_name(op), n,
                    dims);
    reduce[static_cast<size_t>(n)] = true;
  }
  Dims out;
  for (int i = 0; i < x.dim(); ++i) {
    if (!reduce[static_cast<size_t>(i)]) {
      out.push_back(x.shape()[i]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// matmul / linear with OpAttrs::out_dtype: only a wider float result than 16-bit operands (what the
// Tensor engine's f32 accumulation gives), or the operands' own dtype.
DType matmul_out_dtype(std::string_view op, DType operands, const std::optional<DType>& out_dtype) {
  if (!out_dtype || *out_dtype == operands) return operands;
  SIGHTLINE_CHECK(*out_dtype == DType::f32 && (operands == DType::bf16 || operands == DType::f16),
                  "{}: out_dtype {} with {} operands is not supported; out_dtype f32 takes bf16 or f16 operands "
                  "(their f32 sum, unrounded), otherwise leave out_dtype unset",
                  op, dtype_name(*out_dtype), dtype_name(operands));
  return *out_dtype;
}

TensorMeta matmul_meta(const Tensor& a, const Tensor& b) {
  SIGHTLINE_CHECK(a.dim() >= 1 && b.dim() >= 1, "aten::matmul: both operands need at least 1 dim, got {} and {}",
                  a.shape(), b.shape());
  SIGHTLINE_CHECK(a.dtype() == b.dtype(), "aten::matmul: operands must have the same dtype, got {} and {}",
                  a.describe(), b.describe());
  const int64_t k_a = a.shape().back();
  const int64_t k_b = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - 2];
  SIGHTLINE_CHECK(k_a == k_b,
                  "aten::matmul: shapes {} and {} cannot be multiplied: the inner dims differ ({} vs {})", a.shape(),
                  b.shape(), k_a, k_b);
  Dims batch_a, batch_b;
  for (int i = 0; i + 2 < a.dim(); ++i) batch_a.push_back(a.shape()[i]);
  for (int i = 0; i + 2 < b.dim(); ++i) batch_b.push_back(b.shape()[i]);
  Dims out = broadcast_shapes(batch_a, batch_b, "aten::matmul");
  if (a.dim() >= 2) out.push_back(a.shape()[a.dim() - 2]);
  if (b.dim() >= 2) out.push_back(b.shape().back());
  return {out, a.dtype()};
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) { return promote_tensors(a, b); }
DType result_type(const Tensor& a, double b) { return promote_scalar(a.dtype(), b); }

DType elementwise_operand_dtype(const OpCall& call, size_t i, DType out) {
  if ((call.op == OpId::where && i == 0) || (call.op == OpId::masked_fill && i == 1)) return DType::boolean;
  if (!op_is_comparison(call.op)) return out;
  if (call.attrs.has_scalar) return result_type(call.inputs[0], call.attrs.scalar);
  return result_type(call.inputs[0], call.inputs[1]);
}

Dims broadcast_shapes(const Dims& a, const Dims& b, std::string_view op) {
  const int n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.size()), ib = i - (n - b.size());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    SIGHTLINE_CHECK(da == db || da == 1 || db == 1,
                    "shape mismatch in {}: {} vs {}; shapes must be broadcastable (each trailing dim equal or 1)", op,
                    a, b);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]; see scaled_dot_product_attention in ops.h.
TensorMeta sdpa_meta(const OpCall& call) {
  constexpr std::string_view name = "aten::scaled_dot_product_attention";
  const auto& in = call.inputs;
  SIGHTLINE_CHECK(in.size() >= 3 && in[1].defined() && in[2].defined(), "{}: needs query, key and value", name);
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const Tensor mask = in.size() > 3 ? in[3] : Tensor();
  for (const Tensor* t : {&q, &k, &v}) {
    check_floating(*t, call.op);
    SIGHTLINE_CHECK(t->dim() >= 2 && t->dim() == q.dim(),
                    "{}: query, key and value need the same rank, at least 2 ([..., L, E], [..., S, E], [..., S, "
                    "Ev]); got {}, {} and {}",
                    name, q.shape(), k.shape(), v.shape());
    SIGHTLINE_CHECK(t->dtype() == q.dtype() && t->device() == q.device(),
                    "{}: query, key and value must share dtype and device; got {}, {} and {}", name, q.describe(),
                    k.describe(), v.describe());
  }
  const int r = q.dim();
  SIGHTLINE_CHECK(k.shape()[r - 1] == q.shape()[r - 1],
                  "{}: key's last dim ({}) must equal query's ({}): q k^T contracts over it", name,
                  k.shape()[r - 1], q.shape()[r - 1]);
  SIGHTLINE_CHECK(v.shape()[r - 2] == k.shape()[r - 2], "{}: value has {} positions, key {}; they must match", name,
                  v.shape()[r - 2], k.shape()[r - 2]);
  for (int d = 0; d + 2 < r; ++d) {
    const int64_t hq = q.shape()[d], hk = k.shape()[d], hv = v.shape()[d];
    const bool heads = d == r - 3;
    if (heads && call.attrs.enable_gqa) {
      SIGHTLINE_CHECK(hk == hv && hk > 0 && hq % hk == 0,
                      "{}: with enable_gqa the key/value heads (dim -3: {} and {}) must be equal and divide the "
                      "query heads ({})",
                      name, hk, hv, hq);
      continue;
    }
    SIGHTLINE_CHECK(hq == hk && hq == hv,
                    "{}: dim {} of query, key and value must match, got {}, {} and {}{}", name, d, hq, hk, hv,
                    heads && hq != hk ? "; for grouped-query attention pass enable_gqa=true or repeat k and v" : "");
  }
  const int64_t l = q.shape()[r - 2], s = k.shape()[r - 2];
  if (mask.defined()) {
    SIGHTLINE_CHECK(!call.attrs.is_causal,
                    "{}: attn_mask and is_causal were both given; pass one (a causal mask is what is_causal builds)",
                    name);
    SIGHTLINE_CHECK(mask.dtype() == DType::boolean || mask.dtype() == q.dtype(),
                    "{}: attn_mask must be bool (true = attend) or additive of the query's dtype {}, got {}", name,
                    dtype_name(q.dtype()), mask.describe());
    SIGHTLINE_CHECK(mask.device() == q.device(), "{}: query on {} but attn_mask on {}", name, q.device(),
                    mask.device());
    Dims scores = q.shape();
    scores[r - 1] = s;
    SIGHTLINE_CHECK(mask.dim() <= r && broadcast_shapes(scores, mask.shape(), name) == scores,
                    "{}: attn_mask {} does not broadcast to the scores' shape {} ([..., L, S])", name, mask.shape(),
                    scores);
  }
  Dims out = q.shape();
  out[r - 2] = l;
  out[r - 1] = v.shape()[r - 1];
  return {out, q.dtype()};
}

TensorMeta infer_meta_unchecked(const OpCall& call) {
  const OpInfo& info = op_info(call.op);
  const auto& in = call.inputs;
  const OpAttrs& at = call.attrs;
  if (info.arity >= 1) {
    SIGHTLINE_CHECK(in.size() >= 1 && in[0].defined(), "{}: the first input is undefined", info.name);
  }
  check_no_bool(call);
  if (op_is_binary_elementwise(call.op)) {
    if (at.has_scalar) {
      DType t = promote_scalar(in[0].dtype(), at.scalar);
      if (call.op == OpId::div) t = float_result(t);
      if (op_is_comparison(call.op)) t = DType::boolean;
      return {in[0].shape(), t};
    }
    SIGHTLINE_CHECK(in.size() == 2 && in[1].defined(), "{}: the second input is undefined", info.name);
    SIGHTLINE_CHECK(in[0].device() == in[1].device(),
                    "{}: inputs are on different devices ({} and {}); move one with .to(device)", info.name,
                    in[0].device(), in[1].device());
    DType t = promote_tensors(in[0], in[1]);
    if (call.op == OpId::div) t = float_result(t);
    if (op_is_comparison(call.op)) t = DType::boolean;
    return {broadcast_shapes(in[0].shape(), in[1].shape(), info.name), t};
  }
  switch (call.op) {
    case OpId::where: {
      SIGHTLINE_CHECK(in.size() == 3 && in[1].defined() && in[2].defined(), "aten::where: needs cond, a and b");
      SIGHTLINE_CHECK(in[0].dtype() == DType::boolean,
                      "aten::where: cond must be a bool tensor, got {}; make one with a comparison (x > 0) or "
                      ".to(DType::boolean)",
                      in[0].describe());
      SIGHTLINE_CHECK(in[0].device() == in[1].device() && in[1].device() == in[2].device(),
                      "aten::where: inputs are on different devices ({}, {}, {}); move them with .to(device)",
                      in[0].device(), in[1].device(), in[2].device());
      const Dims ab = broadcast_shapes(in[1].shape(), in[2].shape(), info.name);
      return {broadcast_shapes(in[0].shape(), ab, info.name), promote_tensors(in[1], in[2])};
    }
    case OpId::masked_fill: {
      SIGHTLINE_CHECK(in.size() == 2 && in[1].defined(), "aten::masked_fill: needs the input and a mask");
      SIGHTLINE_CHECK(in[1].dtype() == DType::boolean,
                      "aten::masked_fill: the mask must be a bool tensor, got {}; make one with a comparison "
                      "(x > 0) or .to(DType::boolean)",
                      in[1].describe());
      SIGHTLINE_CHECK(in[0].device() == in[1].device(), "aten::masked_fill: input on {} but mask on {}",
                      in[0].device(), in[1].device());
      SIGHTLINE_CHECK(broadcast_shapes(in[0].shape(), in[1].shape(), info.name) == in[0].shape(),
                      "aten::masked_fill: mask {} does not broadcast to the input's shape {}", in[1].shape(),
                      in[0].shape());
      return {in[0].shape(), in[0].dtype()};
    }
    case OpId::neg:
    case OpId::abs:
    case OpId::relu:
      return {in[0].shape(), in[0].dtype()};
    case OpId::pow:
      return {in[0].shape(), promote_scalar(in[0].dtype(), at.scalar)};
    case OpId::exp:
    case OpId::log:
    case OpId::sqrt:
    case OpId::rsqrt:
    case OpId::reciprocal:
    case OpId::tanh:
    case OpId::sigmoid:
    case OpId::silu:
    case OpId::gelu:
    case OpId::erf:
    case OpId::sin:
    case OpId::cos:
      return {in[0].shape(), float_result(in[0].dtype())};
    case OpId::to_copy:
      return {in[0].shape(), at.dtype};
    case OpId::fill:
      return {at.dims, at.dtype};
    case OpId::sum:
      // A bool tensor sums as an integer one: the count of true elements (torch gives its int64; i32 here).
      return {reduced_shape(in[0], at.dims, at.keepdim, call.op),
              in[0].dtype() == DType::boolean ? DType::i32 : in[0].dtype()};
    case OpId::amax:
      return {reduced_shape(in[0], at.dims, at.keepdim, call.op), in[0].dtype()};
    case OpId::mean:
      SIGHTLINE_CHECK(dtype_is_floating(in[0].dtype()),
                      "aten::mean: could not infer the output dtype of {}; the input must be floating point (cast "
                      "with .to(DType::f32))", in[0].describe());
      return {reduced_shape(in[0], at.dims, at.keepdim, call.op), in[0].dtype()};
    case OpId::cumsum: {
      SIGHTLINE_CHECK(in[0].dim() >= 1, "aten::cumsum: needs a tensor of at least 1 dim, got {}", in[0].describe());
      normalize_dim(static_cast<int>(at.dim), in[0].dim(), info.name);
      return {in[0].shape(), in[0].dtype() == DType::boolean ? DType::i32 : in[0].dtype()};
    }
    case OpId::argmax: {
      SIGHTLINE_CHECK(in[0].dim() >= 1, "aten::argmax: needs a tensor of at least 1 dim, got {}; flatten it first",
                      in[0].describe());
      const int d = normalize_dim(static_cast<int>(at.dim), in[0].dim(), info.name);
      SIGHTLINE_CHECK(in[0].shape()[d] > 0, "aten::argmax: dim {} of {} is empty; argmax of no elements is undefined",
                      at.dim, in[0].describe());
      return {reduced_shape(in[0], Dims{at.dim}, at.keepdim, call.op), DType::i32};
    }
    case OpId::topk: {
      SIGHTLINE_CHECK(in[0].dim() >= 1, "aten::topk: needs a tensor of at least 1 dim, got {}; flatten it first",
                      in[0].describe());
      const int d = normalize_dim(static_cast<int>(at.dim), in[0].dim(), info.name);
      SIGHTLINE_CHECK(at.k >= 0 && at.k <= in[0].shape()[d],
                      "aten::topk: k = {} is out of range for dim {} of {} (size {}); k must be in [0, {}]", at.k,
                      at.dim, in[0].describe(), in[0].shape()[d], in[0].shape()[d]);
      Dims shape = in[0].shape();
      shape[d] = at.k;
      return {shape, in[0].dtype()};
    }
    case OpId::softmax:
    case OpId::log_softmax:
      check_floating(in[0], call.op);
      normalize_dim(static_cast<int>(at.dim), in[0].dim(), info.name);
      return {in[0].shape(), in[0].dtype()};
    case OpId::matmul:
      SIGHTLINE_CHECK(in.size() == 2 && in[1].defined(), "aten::matmul: the second input is undefined");
      SIGHTLINE_CHECK(in[0].device() == in[1].device(), "aten::matmul: inputs are on different devices ({} and {})",
                      in[0].device(), in[1].device());
      {
        TensorMeta meta = matmul_meta(in[0], in[1]);
        meta.dtype = matmul_out_dtype("aten::matmul", meta.dtype, call.attrs.out_dtype);
        return meta;
      }
    case OpId::linear: {
      SIGHTLINE_CHECK(in.size() >= 2 && in[1].defined() && in[1].dim() == 2,
                      "aten::linear: weight must be a 2-D [out_features, in_features] tensor, got {}",
                      in.size() >= 2 ? in[1].describe() : std::string("nothing"));
      SIGHTLINE_CHECK(in[0].dim() >= 1 && in[0].shape().back() == in[1].shape()[1],
                      "aten::linear: input {} and weight {} do not match: the input's last dim must equal "
                      "in_features ({})", in[0].shape(), in[1].shape(), in[1].shape()[1]);
      SIGHTLINE_CHECK(in[0].dtype() == in[1].dtype(), "aten::linear: input and weight dtypes differ ({} vs {})",
                      in[0].dtype(), in[1].dtype());
      SIGHTLINE_CHECK(in[0].device() == in[1].device(), "aten::linear: input on {} but weight on {}",
                      in[0].device(), in[1].device());
      if (in.size() > 2 && in[2].defined()) {
        SIGHTLINE_CHECK(in[2].dim() == 1 && in[2].shape()[0] == in[1].shape()[0],
                        "aten::linear: bias must be [{}], got {}", in[1].shape()[0], in[2].shape());
        SIGHTLINE_CHECK(in[2].device() == in[0].device() && in[2].dtype() == in[0].dtype(),
                        "aten::linear: bias {} must match the input's dtype and device ({})", in[2].describe(),
                        in[0].describe());
      }
      Dims out = in[0].shape();
      out[out.size() - 1] = in[1].shape()[0];
      return {out, matmul_out_dtype("aten::linear", in[0].dtype(), call.attrs.out_dtype)};
    }
    case OpId::scaled_dot_product_attention:
      return sdpa_meta(call);
    case OpId::rms_norm:
    case OpId::layer_norm: {
      check_floating(in[0], call.op);
      SIGHTLINE_CHECK(in[0].dim() >= 1, "{}: the input needs at least 1 dim", info.name);
      const int64_t n = in[0].shape().back();
      for (size_t i = 1; i < in.size(); ++i) {
        if (!in[i].defined()) continue;
        SIGHTLINE_CHECK(in[i].dim() == 1 && in[i].shape()[0] == n,
                        "{}: {} must have the shape of the normalized dim [{}], got {}", info.name,
                        i == 1 ? "weight" : "bias", n, in[i].shape());
        SIGHTLINE_CHECK(in[i].device() == in[0].device(), "{}: input on {} but {} on {}", info.name,
                        in[0].device(), i == 1 ? "weight" : "bias", in[i].device());
      }
      SIGHTLINE_CHECK(at.eps >= 0, "{}: eps must be non-negative, got {}", info.name, at.eps);
      return {in[0].shape(), in[0].dtype()};
    }
    case OpId::contiguous:
      return {in[0].shape(), in[0].dtype()};
    case OpId::copy:
      return {in[0].shape(), in[0].dtype()};
    case OpId::cat: {
      SIGHTLINE_CHECK(!in.empty(), "aten::cat: expected a non-empty list of tensors");
      const Tensor& first = in[0];
      const int d = normalize_dim(static_cast<int>(at.dim), first.dim(), "aten::cat");
      Dims out = first.shape();
      DType t = first.dtype();
      for (size_t i = 1; i < in.size(); ++i) {
        const Tensor& x = in[i];
        SIGHTLINE_CHECK(x.defined(), "aten::cat: tensor {} is undefined", i);
        SIGHTLINE_CHECK(x.device() == first.device(), "aten::cat: tensor 0 is on {} but tensor {} on {}",
                        first.device(), i, x.device());
        SIGHTLINE_CHECK(x.dim() == first.dim(), "aten::cat: tensors must have the same rank: {} vs {} (tensor {})",
                        first.shape(), x.shape(), i);
        for (int j = 0; j < x.dim(); ++j) {
          SIGHTLINE_CHECK(j == d || x.shape()[j] == first.shape()[j],
                          "aten::cat: sizes must match except in dim {}: {} vs {} (tensor {})", d, first.shape(),
                          x.shape(), i);
        }
        out[d] = checked_add(out[d], x.shape()[d], [&] {
          return fmt::format("aten::cat: the size of dim {} of the result (tensor {} of shape {})", d, i, x.shape());
        });
        t = dtype_promote(t, x.dtype());
      }
      return {out, t};
    }
    case OpId::embedding: {
      SIGHTLINE_CHECK(in.size() == 2 && in[1].defined(), "aten::embedding: indices are undefined");
      SIGHTLINE_CHECK(in[0].dim() == 2, "aten::embedding: weight must be 2-D [num_embeddings, dim], got {}",
                      in[0].shape());
      SIGHTLINE_CHECK(in[1].dtype() == DType::i32, "aten::embedding: indices must be i32, got {}",
                      in[1].describe());
      SIGHTLINE_CHECK(in[0].device() == in[1].device(), "aten::embedding: weight on {} but indices on {}",
                      in[0].device(), in[1].device());
      Dims out = in[1].shape();
      out.push_back(in[0].shape()[1]);
      return {out, in[0].dtype()};
    }
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "infer_meta has no rule for {}", info.name);
  return {};
}

}  // namespace

TensorMeta infer_meta(const OpCall& call) {
  TensorMeta meta = infer_meta_unchecked(call);
  // Every output is allocated from this shape: its sizes, element count and byte count must fit in an
  // int64, or the allocation would be sized by a wrapped count (zeros({1 << 32, 1 << 32}) was 0 bytes).
  const std::string_view name = op_info(call.op).name;
  for (int64_t d : meta.shape) {
    SIGHTLINE_CHECK(d >= 0, "{}: negative size in the output shape {}; sizes must be >= 0", name, meta.shape);
  }
  const std::optional<int64_t> numel = checked_numel(meta.shape);
  SIGHTLINE_CHECK(numel.has_value(),
                  "{}: the output shape {} has more elements than a 64-bit count can hold; check the sizes, one "
                  "of them is far larger than intended",
                  name, meta.shape);
  int64_t bytes = 0;
  SIGHTLINE_CHECK(!__builtin_mul_overflow(*numel, static_cast<int64_t>(dtype_size(meta.dtype)), &bytes),
                  "{}: the output shape {} of {} takes more bytes than a 64-bit count can hold ({} elements of {} "
                  "bytes); check the sizes, one of them is far larger than intended",
                  name, meta.shape, dtype_name(meta.dtype), *numel, dtype_size(meta.dtype));
  return meta;
}

TensorMeta infer_meta(const OpCall& call, int output) {
  const OpInfo& info = op_info(call.op);
  SIGHTLINE_ASSERT_MSG(output >= 0 && output < info.outputs, "{} has {} output(s), asked for output {}", info.name,
                       info.outputs, output);
  TensorMeta meta = infer_meta(call);
  if (output == 0) return meta;
  // topk's indices: the values' shape, as i32 (argmax's index dtype; torch's int64).
  SIGHTLINE_ASSERT_MSG(call.op == OpId::topk, "{}: no rule for output {}", info.name, output);
  meta.dtype = DType::i32;
  return meta;
}

}  // namespace sightline
