// The rewrite engine and its two rule tables: scalar constant folding and recognition of built-ins.
#include "compiler/rewrite.h"

#include <array>

namespace sightline::compiler {
namespace {

bool same_meta(const TensorMeta& a, const TensorMeta& b) { return a.shape == b.shape && a.dtype == b.dtype; }

// The replacement node with its meta recomputed, or nothing when it is ill-typed or its meta differs.
std::optional<Node> checked(const Graph& graph, const Node& candidate, const TensorMeta& original) {
  try {
    Node n = make_op_node(graph, candidate.op, candidate.inputs, candidate.attrs);
    if (!same_meta(n.meta, original)) return std::nullopt;
    return n;
  } catch (const Error&) {
    return std::nullopt;
  }
}

constexpr int kMaxRewritesPerNode = 32;  // rules shrink nodes, so this is never reached by a sound table

}  // namespace

Graph apply_rewrites(const Graph& graph, std::span<const RewriteRule> rules) {
  Graph out;
  RewriteContext ctx{out};
  std::vector<int> remap(graph.nodes.size(), kNoValue);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node n = graph.nodes[i];
    for (int& v : n.inputs) {
      if (v != kNoValue) v = remap[static_cast<size_t>(v)];
    }
    int value = kNoValue;
    for (int round = 0; round < kMaxRewritesPerNode && n.kind == NodeKind::op && value == kNoValue; ++round) {
      bool fired = false;
      for (const RewriteRule& rule : rules) {
        if (rule.op != n.op) continue;
        const size_t mark = out.nodes.size();
        std::optional<Replacement> r = rule.apply(ctx, n);
        if (!r) continue;
        if (r->node) {
          if (std::optional<Node> accepted = checked(out, *r->node, n.meta)) {
            n = std::move(*accepted);
            fired = true;
            break;
          }
        } else if (r->alias != kNoValue && same_meta(out.nodes[static_cast<size_t>(r->alias)].meta, n.meta)) {
          value = r->alias;
          fired = true;
          break;
        }
        out.nodes.resize(mark);  // drop the helper nodes of a rejected replacement
      }
      if (!fired) break;
    }
    if (value == kNoValue) value = out.add(std::move(n));
    remap[i] = value;
  }
  for (int v : graph.outputs) out.outputs.push_back(remap[static_cast<size_t>(v)]);
  return out;
}

// ---- constant folding ----

namespace {

Node scalar_op(OpId op, int input, double scalar) {
  Node n;
  n.op = op;
  n.inputs = {input};
  n.attrs.scalar = scalar;
  n.attrs.has_scalar = true;
  return n;
}

Node unary_op(OpId op, std::vector<int> inputs) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  return n;
}

// x * 1, x / 1, x + 0, x - 0, pow(x, 1): the input itself.
std::optional<Replacement> drop_identity_scalar(RewriteContext&, const Node& n) {
  if (!n.attrs.has_scalar) return std::nullopt;
  const double identity = (n.op == OpId::add || n.op == OpId::sub) ? 0.0 : 1.0;
  if (n.attrs.scalar != identity) return std::nullopt;
  return Replacement::value(n.inputs[0]);
}

// The scalar a node adds to its input: x + c is c, x - c is -c.
std::optional<double> added_scalar(const Node& n) {
  if (n.kind != NodeKind::op || !n.attrs.has_scalar) return std::nullopt;
  if (n.op == OpId::add) return n.attrs.scalar;
  if (n.op == OpId::sub) return -n.attrs.scalar;
  return std::nullopt;
}

// (x + a) + b, (x - a) + b, ... -> x + (b + a)
std::optional<Replacement> fold_add_chain(RewriteContext& ctx, const Node& n) {
  const std::optional<double> outer = added_scalar(n);
  if (!outer) return std::nullopt;
  const Node& inner = ctx.producer(n.inputs[0]);
  const std::optional<double> inner_scalar = added_scalar(inner);
  if (!inner_scalar) return std::nullopt;
  return Replacement::with(scalar_op(OpId::add, inner.inputs[0], *inner_scalar + *outer));
}

// (x * a) * b -> x * (a * b); (x / a) / b -> x / (a * b)
std::optional<Replacement> fold_scale_chain(RewriteContext& ctx, const Node& n) {
  if (!n.attrs.has_scalar) return std::nullopt;
  const Node& inner = ctx.producer(n.inputs[0]);
  if (inner.kind != NodeKind::op || inner.op != n.op || !inner.attrs.has_scalar) return std::nullopt;
  return Replacement::with(scalar_op(n.op, inner.inputs[0], inner.attrs.scalar * n.attrs.scalar));
}

std::optional<Replacement> fold_double_negation(RewriteContext& ctx, const Node& n) {
  if (!ctx.is_op(n.inputs[0], OpId::neg)) return std::nullopt;
  return Replacement::value(ctx.producer(n.inputs[0]).inputs[0]);
}

// pow with the exponents that have a cheaper op.
std::optional<Replacement> strength_reduce_pow(RewriteContext&, const Node& n) {
  const int x = n.inputs[0];
  if (n.attrs.scalar == 2.0) return Replacement::with(unary_op(OpId::mul, {x, x}));
  if (n.attrs.scalar == 0.5) return Replacement::with(unary_op(OpId::sqrt, {x}));
  if (n.attrs.scalar == -0.5) return Replacement::with(unary_op(OpId::rsqrt, {x}));
  if (n.attrs.scalar == -1.0) return Replacement::with(unary_op(OpId::reciprocal, {x}));
  return std::nullopt;
}

constexpr std::array kConstantFolding = {
    RewriteRule{"x * 1 -> x", OpId::mul, &drop_identity_scalar},
    RewriteRule{"x / 1 -> x", OpId::div, &drop_identity_scalar},
    RewriteRule{"x + 0 -> x", OpId::add, &drop_identity_scalar},
    RewriteRule{"x - 0 -> x", OpId::sub, &drop_identity_scalar},
    RewriteRule{"pow(x, 1) -> x", OpId::pow, &drop_identity_scalar},
    RewriteRule{"(x +- a) + b -> x + (a + b)", OpId::add, &fold_add_chain},
    RewriteRule{"(x +- a) - b -> x + (a - b)", OpId::sub, &fold_add_chain},
    RewriteRule{"(x * a) * b -> x * (a * b)", OpId::mul, &fold_scale_chain},
    RewriteRule{"(x / a) / b -> x / (a * b)", OpId::div, &fold_scale_chain},
    RewriteRule{"-(-x) -> x", OpId::neg, &fold_double_negation},
    RewriteRule{"pow(x, 2 | 0.5 | -0.5 | -1) -> x*x | sqrt | rsqrt | reciprocal", OpId::pow,
                &strength_reduce_pow},
};

// ---- built-in recognition ----

bool reduces_last_dim_keepdim(const Node& n) {
  if (!n.attrs.keepdim || n.attrs.dims.size() != 1) return false;
  const int64_t d = n.attrs.dims[0];
  const int rank = n.meta.shape.size();
  return d == -1 || d == rank - 1;
}

// The x of `mean(x * x, [-1], keepdim) + eps` at `value`, and eps.
std::optional<std::pair<int, double>> mean_square_plus_eps(RewriteContext& ctx, int value) {
  if (!ctx.is_op(value, OpId::add)) return std::nullopt;
  const Node& add = ctx.producer(value);
  if (!add.attrs.has_scalar || !ctx.is_op(add.inputs[0], OpId::mean)) return std::nullopt;
  const Node& mean = ctx.producer(add.inputs[0]);
  if (!reduces_last_dim_keepdim(mean) || !ctx.is_op(mean.inputs[0], OpId::mul)) return std::nullopt;
  const Node& square = ctx.producer(mean.inputs[0]);
  if (square.attrs.has_scalar || square.inputs[0] != square.inputs[1]) return std::nullopt;
  return std::make_pair(square.inputs[0], add.attrs.scalar);
}

Node rms_norm_node(int x, int weight, double eps) {
  Node n;
  n.op = OpId::rms_norm;
  n.inputs = {x, weight};
  n.attrs.eps = eps;
  return n;
}

// x * rsqrt(mean(x * x, [-1], keepdim) + eps), either operand order -> rms_norm(x, eps)
std::optional<Replacement> recognize_rms_norm_mul(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int x = n.inputs[static_cast<size_t>(side)], r = n.inputs[static_cast<size_t>(1 - side)];
    if (!ctx.is_op(r, OpId::rsqrt)) continue;
    const auto found = mean_square_plus_eps(ctx, ctx.producer(r).inputs[0]);
    if (found && found->first == x) return Replacement::with(rms_norm_node(x, kNoValue, found->second));
  }
  return std::nullopt;
}

// x / sqrt(mean(x * x, [-1], keepdim) + eps) -> rms_norm(x, eps)
std::optional<Replacement> recognize_rms_norm_div(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar || !ctx.is_op(n.inputs[1], OpId::sqrt)) return std::nullopt;
  const auto found = mean_square_plus_eps(ctx, ctx.producer(n.inputs[1]).inputs[0]);
  if (!found || found->first != n.inputs[0]) return std::nullopt;
  return Replacement::with(rms_norm_node(n.inputs[0], kNoValue, found->second));
}

// rms_norm(x, eps) * w, w a [features] vector of x's dtype -> rms_norm(x, w, eps)
std::optional<Replacement> absorb_rms_norm_weight(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int norm = n.inputs[static_cast<size_t>(side)], w = n.inputs[static_cast<size_t>(1 - side)];
    if (!ctx.is_op(norm, OpId::rms_norm) || ctx.producer(norm).inputs[1] != kNoValue) continue;
    const Node& rms = ctx.producer(norm);
    const TensorMeta& x_meta = ctx.producer(rms.inputs[0]).meta;
    const TensorMeta& w_meta = ctx.producer(w).meta;
    if (w_meta.shape.size() != 1 || w_meta.dtype != x_meta.dtype) continue;
    return Replacement::with(rms_norm_node(rms.inputs[0], w, rms.attrs.eps));
  }
  return std::nullopt;
}

Node layer_norm_node(int x, int weight, int bias, double eps) {
  Node n;
  n.op = OpId::layer_norm;
  n.inputs = {x, weight, bias};
  n.attrs.eps = eps;
  return n;
}

// A [features] vector of x's dtype, features x's last dim: what a norm's weight or bias must be.
bool is_feature_vector(RewriteContext& ctx, int v, int x) {
  const TensorMeta& x_meta = ctx.producer(x).meta;
  const TensorMeta& v_meta = ctx.producer(v).meta;
  return v_meta.shape.size() == 1 && x_meta.shape.size() >= 1 && v_meta.dtype == x_meta.dtype &&
         v_meta.shape[0] == x_meta.shape[x_meta.shape.size() - 1];
}

// rms_norm(x - mean(x, [-1], keepdim), eps) -> layer_norm(x, eps). The naive layer_norm holds an RMSNorm
// of the centered x (the rules above find it first); left there, the mean, the centering and the affine
// steps run around the built-in rms_norm, slower than the default compile() (issue 19), so the whole
// layer_norm becomes the built-in.
std::optional<Replacement> recognize_layer_norm(RewriteContext& ctx, const Node& n) {
  if (n.inputs[1] != kNoValue || !ctx.is_op(n.inputs[0], OpId::sub)) return std::nullopt;
  const Node& centered = ctx.producer(n.inputs[0]);
  if (centered.attrs.has_scalar || centered.inputs.size() != 2 || !ctx.is_op(centered.inputs[1], OpId::mean)) {
    return std::nullopt;
  }
  const Node& mu = ctx.producer(centered.inputs[1]);
  if (!reduces_last_dim_keepdim(mu) || mu.inputs[0] != centered.inputs[0]) return std::nullopt;
  return Replacement::with(layer_norm_node(centered.inputs[0], kNoValue, kNoValue, n.attrs.eps));
}

// layer_norm(x, eps) * w, either order, w a [features] vector of x's dtype -> layer_norm(x, w, eps)
std::optional<Replacement> absorb_layer_norm_weight(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int norm = n.inputs[static_cast<size_t>(side)], w = n.inputs[static_cast<size_t>(1 - side)];
    if (!ctx.is_op(norm, OpId::layer_norm)) continue;
    const Node& ln = ctx.producer(norm);
    if (ln.inputs[1] != kNoValue || ln.inputs[2] != kNoValue || !is_feature_vector(ctx, w, ln.inputs[0])) continue;
    return Replacement::with(layer_norm_node(ln.inputs[0], w, kNoValue, ln.attrs.eps));
  }
  return std::nullopt;
}

// layer_norm(x, w, eps) + b, either order, b a [features] vector of x's dtype -> layer_norm(x, w, b, eps)
std::optional<Replacement> absorb_layer_norm_bias(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int norm = n.inputs[static_cast<size_t>(side)], b = n.inputs[static_cast<size_t>(1 - side)];
    if (!ctx.is_op(norm, OpId::layer_norm)) continue;
    const Node& ln = ctx.producer(norm);
    if (ln.inputs[1] == kNoValue || ln.inputs[2] != kNoValue || !is_feature_vector(ctx, b, ln.inputs[0])) continue;
    return Replacement::with(layer_norm_node(ln.inputs[0], ln.inputs[1], b, ln.attrs.eps));
  }
  return std::nullopt;
}

// x * sigmoid(x), either order -> silu(x)
std::optional<Replacement> recognize_silu(RewriteContext& ctx, const Node& n) {
  if (n.attrs.has_scalar) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const int x = n.inputs[static_cast<size_t>(side)], s = n.inputs[static_cast<size_t>(1 - side)];
    if (ctx.is_op(s, OpId::sigmoid) && ctx.producer(s).inputs[0] == x) {
      return Replacement::with(unary_op(OpId::silu, {x}));
    }
  }
  return std::nullopt;
}

constexpr std::array kBuiltinRecognition = {
    RewriteRule{"x * rsqrt(mean(x*x, -1, keepdim) + eps) -> rms_norm(x)", OpId::mul, &recognize_rms_norm_mul},
    RewriteRule{"x / sqrt(mean(x*x, -1, keepdim) + eps) -> rms_norm(x)", OpId::div, &recognize_rms_norm_div},
    RewriteRule{"rms_norm(x) * w -> rms_norm(x, w)", OpId::mul, &absorb_rms_norm_weight},
    RewriteRule{"rms_norm(x - mean(x, -1, keepdim)) -> layer_norm(x)", OpId::rms_norm, &recognize_layer_norm},
    RewriteRule{"layer_norm(x) * w -> layer_norm(x, w)", OpId::mul, &absorb_layer_norm_weight},
    RewriteRule{"layer_norm(x, w) + b -> layer_norm(x, w, b)", OpId::add, &absorb_layer_norm_bias},
    RewriteRule{"x * sigmoid(x) -> silu(x)", OpId::mul, &recognize_silu},
};

}  // namespace

std::span<const RewriteRule> constant_folding_rules() { return kConstantFolding; }
std::span<const RewriteRule> builtin_recognition_rules() { return kBuiltinRecognition; }

}  // namespace sightline::compiler
