// Tile-level lowering of each op (emit.h): the one place that says which instructions compute an op.
#include "kernels/emit.h"

#include <limits>

#include "sightline/error.h"

namespace sightline::kernels {

bool unary_activation(OpId op, const OpAttrs& attrs, ActFunc& func) {
  switch (op) {
    case OpId::neg: func = ActFunc::neg; return true;
    case OpId::abs: func = ActFunc::abs; return true;
    case OpId::exp: func = ActFunc::exp; return true;
    case OpId::log: func = ActFunc::log; return true;
    case OpId::sqrt: func = ActFunc::sqrt; return true;
    case OpId::rsqrt: func = ActFunc::rsqrt; return true;
    case OpId::reciprocal: func = ActFunc::reciprocal; return true;
    case OpId::tanh: func = ActFunc::tanh; return true;
    case OpId::sigmoid: func = ActFunc::sigmoid; return true;
    case OpId::relu: func = ActFunc::relu; return true;
    case OpId::silu: func = ActFunc::silu; return true;
    case OpId::gelu:
      func = attrs.approximate == GeluApproximate::tanh ? ActFunc::gelu_tanh : ActFunc::gelu;
      return true;
    case OpId::erf: func = ActFunc::erf; return true;
    case OpId::sin: func = ActFunc::sin; return true;
    case OpId::cos: func = ActFunc::cos; return true;
    default: return false;
  }
}

bool binary_alu(OpId op, BinaryAlu& out) {
  switch (op) {
    case OpId::add: out = {AluOp::add, false}; return true;
    case OpId::sub: out = {AluOp::subtract, false}; return true;
    case OpId::rsub: out = {AluOp::subtract, true}; return true;
    case OpId::mul: out = {AluOp::multiply, false}; return true;
    case OpId::div: out = {AluOp::divide, false}; return true;
    case OpId::maximum: out = {AluOp::max, false}; return true;
    case OpId::minimum: out = {AluOp::min, false}; return true;
    case OpId::eq: out = {AluOp::is_equal, false}; return true;
    case OpId::ne: out = {AluOp::not_equal, false}; return true;
    case OpId::lt: out = {AluOp::is_lt, false}; return true;
    case OpId::le: out = {AluOp::is_le, false}; return true;
    case OpId::gt: out = {AluOp::is_gt, false}; return true;
    case OpId::ge: out = {AluOp::is_ge, false}; return true;
    default: return false;
  }
}

AluOp reduction_alu(OpId op) {
  switch (op) {
    case OpId::sum:
    case OpId::mean:
      return AluOp::add;
    case OpId::amax:
      return AluOp::max;
    default:
      fail("{} is not a reduction with a tile-level lowering (sum, mean, amax)", op_name(op));
  }
}

float reduction_identity(AluOp alu) {
  return alu == AluOp::max ? -std::numeric_limits<float>::infinity() : 0.0f;
}

TileOpNeeds tile_op_needs(OpId op) {
  TileOpNeeds needs;
  ActFunc func = ActFunc::identity;
  BinaryAlu alu;
  switch (op) {
    case OpId::where:
    case OpId::masked_fill:
      needs.scratch = true;
      break;
    case OpId::softmax:
    case OpId::log_softmax:
      needs.work = true;
      [[fallthrough]];
    case OpId::rms_norm:
    case OpId::layer_norm:
      needs.stats = true;
      [[fallthrough]];
    case OpId::sum:
    case OpId::mean:
    case OpId::amax:
      needs.row_wide = true;
      break;
    default:
      if (!binary_alu(op, alu) && !unary_activation(op, OpAttrs{}, func) && op != OpId::pow &&
          op != OpId::to_copy)
        return needs;
      break;
  }
  needs.supported = true;
  return needs;
}

void emit_binary(KernelBuilder& b, OpId op, const AccessPattern& y, const TileArg& a, const TileArg& b_arg,
                 Engine on) {
  BinaryAlu mapped;
  SIGHTLINE_CHECK(binary_alu(op, mapped), "{} is not a binary elementwise op", op_name(op));
  const bool sw = mapped.swapped;  // alu(b, a)
  if (a.per_row == b_arg.per_row) {
    b.tensor_tensor(mapped.alu, y, sw ? b_arg.ap : a.ap, sw ? a.ap : b_arg.ap, on);
  } else if (b_arg.per_row) {
    b.tensor_scalar(mapped.alu, y, a.ap, b_arg.ap, /*reverse=*/sw, on);
  } else {
    b.tensor_scalar(mapped.alu, y, b_arg.ap, a.ap, /*reverse=*/!sw, on);
  }
}

void emit_binary_scalar(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& a, float scalar,
                        Engine on) {
  BinaryAlu mapped;
  SIGHTLINE_CHECK(binary_alu(op, mapped), "{} is not a binary elementwise op", op_name(op));
  b.tensor_scalar(mapped.alu, y, a, scalar, /*reverse=*/mapped.swapped, on);
}

void emit_unary(KernelBuilder& b, OpId op, const OpAttrs& attrs, const AccessPattern& y, const AccessPattern& x) {
  if (op == OpId::to_copy) {
    b.copy(y, x);
    return;
  }
  if (op == OpId::pow) {
    const float exponent = static_cast<float>(attrs.scalar);
    if (exponent == 2.0f) {
      b.activate(ActFunc::square, y, x);  // the CPU reference squares exactly too
    } else {
      b.tensor_scalar(AluOp::pow, y, x, exponent);
    }
    return;
  }
  ActFunc func = ActFunc::identity;
  SIGHTLINE_CHECK(unary_activation(op, attrs, func), "{} is not a unary elementwise op", op_name(op));
  b.activate(func, y, x);
}

// where(cond, a, b) = keep_if(a, cond) + keep_unless(b, cond); masked_fill(x, mask, v) =
// keep_unless(x, mask) + keep_if(v, mask). One of each pair is exactly 0, so the sum is the picked
// value itself (NaN and inf included; a picked -0.0 comes out +0.0, which compares equal).
void emit_select(KernelBuilder& b, OpId op, const OpAttrs& attrs, const AccessPattern& y,
                 std::span<const AccessPattern> args, const AccessPattern& picked) {
  if (op == OpId::where) {
    SIGHTLINE_CHECK(args.size() == 3, "aten::where needs cond, a and b, got {} tiles", args.size());
    b.tensor_tensor(AluOp::keep_if, picked, args[1], args[0]);
    b.tensor_tensor(AluOp::keep_unless, y, args[2], args[0]);
  } else {
    SIGHTLINE_CHECK(op == OpId::masked_fill && args.size() == 2, "{} is not where / masked_fill of 2 tiles",
                    op_name(op));
    if (args[1].free_elements() == 1 && y.free_elements() > 1) {
      // One mask value per row (a compiled row loop's [rows, 1] mask, broadcast along the row): the same
      // two picks with the mask as each row's scalar, the value's pick one column of `picked`.
      SIGHTLINE_CHECK(args[0].free_elements() == y.free_elements(),
                      "aten::masked_fill of a per-row mask needs a full row of x");
      AccessPattern column = picked;
      column.dim_count = 1;
      column.dims[0] = {1, 1};
      b.tensor_scalar(AluOp::keep_if, column, args[1], static_cast<float>(attrs.scalar), /*reverse=*/true);
      b.tensor_scalar(AluOp::keep_unless, y, args[0], args[1]);
      b.tensor_scalar(AluOp::add, y, y, column);
      return;
    }
    b.tensor_scalar(AluOp::keep_if, picked, args[1], static_cast<float>(attrs.scalar),
                    /*reverse=*/true);  // keep_if(value, mask)
    b.tensor_tensor(AluOp::keep_unless, y, args[0], args[1]);
  }
  b.tensor_tensor(AluOp::add, y, y, picked);
}

void emit_reduce_finish(KernelBuilder& b, OpId op, const AccessPattern& value, int64_t count) {
  if (op != OpId::mean) return;
  const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  b.tensor_scalar(AluOp::multiply, value, value, scale);
}

void emit_row_reduce(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x, uint32_t n) {
  b.reduce(reduction_alu(op), y, x);
  emit_reduce_finish(b, op, y, n);
}

void emit_softmax(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x,
                  const AccessPattern& work, const Tile& stats, uint16_t p) {
  emit_softmax_exp(b, op, y, x, work, stats, p);
  emit_softmax_scale(b, op, y, work, stats, p);
}

void emit_softmax_exp(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& x,
                      const AccessPattern& work, const Tile& stats, uint16_t p) {
  SIGHTLINE_CHECK(op == OpId::softmax || op == OpId::log_softmax, "{} is not softmax / log_softmax",
                  op_name(op));
  const AccessPattern row_sum = stats.column(p, 1);
  // The max of 16-bit values is one of them, so it is kept in their dtype (exact): the Vector engine
  // then reduces at its 16-bit rate, twice the 32-bit one (docs/hardware-model.md §1.2).
  AccessPattern row_max = stats.column(p, 0);
  if (dtype_size(x.dtype) == 2) row_max.dtype = x.dtype;
  if (op == OpId::log_softmax) {
    b.reduce(AluOp::max, row_max, x);
    b.tensor_scalar(AluOp::subtract, work, x, row_max);  // x - max: _scale reads it
    b.activate(ActFunc::exp, y, work, 1.0f, 0.0f, row_sum);  // y is scratch here
    b.activate(ActFunc::log, row_sum, row_sum);
  } else {
    // -max, then exp(x - max) in one pass: the max's subtraction is the exp's bias operand (the same
    // bits as subtracting first: x * 1 is exact).
    b.reduce(AluOp::max, row_max, x, /*negate=*/true);
    b.activate(ActFunc::exp, work, x, 1.0f, row_max, row_sum);
    b.activate(ActFunc::reciprocal, row_sum, row_sum);
  }
}

void emit_softmax_scale(KernelBuilder& b, OpId op, const AccessPattern& y, const AccessPattern& work,
                        const Tile& stats, uint16_t p) {
  const AccessPattern row_sum = stats.column(p, 1);
  b.tensor_scalar(op == OpId::log_softmax ? AluOp::subtract : AluOp::multiply, y, work, row_sum);
}

// rms_norm per row:   ScalarE  sum of squares (activation-accumulate), rsqrt(ss / n + eps)
//                     VectorE  y = x * rstd, y *= weight
void emit_rms_norm(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const AccessPattern& weight,
                   const Tile& stats, uint16_t p, uint32_t n, float eps) {
  emit_rms_norm_stats(b, y, x, stats, p, n, eps);
  emit_rms_norm_scale(b, y, x, weight, stats, p);
}

void emit_rms_norm_stats(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                         uint16_t p, uint32_t n, float eps) {
  const AccessPattern sum_sq = stats.column(p, 0), rstd = stats.column(p, 1);
  b.activate(ActFunc::square, y, x, 1.0f, 0.0f, sum_sq);  // y is scratch until _scale overwrites it
  b.activate(ActFunc::rsqrt, rstd, sum_sq, 1.0f / static_cast<float>(n), eps);
}

void emit_rms_norm_scale(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x,
                         const AccessPattern& weight, const Tile& stats, uint16_t p) {
  b.tensor_scalar(AluOp::multiply, y, x, stats.column(p, 1));
  if (weight.present()) b.tensor_tensor(AluOp::multiply, y, y, weight);
}

// layer_norm per row: VectorE  mean and variance (bn_stats), y *= w
//                     ScalarE  rstd = rsqrt(var + eps), y *= rstd
//                     GpSimd   y += b, and y = x - mean for 16-bit x (else VectorE)
// The Vector engine alone would take longer than a row tile's HBM time: for bf16 [128, 4096] its
// bn_stats, x - mean, weight and bias passes add up to 7.5 us against 5.8 us of DMA. GpSimd, idle in
// this kernel, takes the bias pass (on-chip operands only: it cannot reach PSUM), and for 16-bit x
// also x - mean, which Vector runs at twice GpSimd's 16-bit rate but GpSimd then has the time for.
void emit_layer_norm(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x,
                     const AccessPattern& weight, const AccessPattern& bias, const Tile& stats, uint16_t p,
                     float eps) {
  emit_layer_norm_normalize(b, y, x, stats, p, eps);
  emit_layer_norm_affine(b, y, weight, bias);
}

namespace {

bool on_chip_sbuf(const AccessPattern& a, const AccessPattern& b) {
  return a.memory == Memory::sbuf && b.memory == Memory::sbuf;
}

}  // namespace

void emit_layer_norm_normalize(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                               uint16_t p, float eps) {
  emit_layer_norm_center(b, y, x, stats, p);
  emit_layer_norm_scale(b, y, stats, p, eps);
}

void emit_layer_norm_center(KernelBuilder& b, const AccessPattern& y, const AccessPattern& x, const Tile& stats,
                            uint16_t p) {
  const AccessPattern moments = stats.region(0, p, 0, 2), mean = stats.column(p, 0);
  b.bn_stats(moments, x);
  const bool narrow = dtype_size(x.dtype) == 2 && on_chip_sbuf(y, x) && mean.memory == Memory::sbuf;
  b.tensor_scalar(AluOp::subtract, y, x, mean, false, narrow ? Engine::gpsimd : Engine::vector);
}

void emit_layer_norm_scale(KernelBuilder& b, const AccessPattern& y, const Tile& stats, uint16_t p, float eps) {
  const AccessPattern var = stats.column(p, 1), rstd = stats.column(p, 2);
  b.activate(ActFunc::rsqrt, rstd, var, 1.0f, eps);
  b.activate(ActFunc::identity, y, y, 1.0f, 0.0f, {}, rstd);
}

void emit_layer_norm_affine(KernelBuilder& b, const AccessPattern& y, const AccessPattern& weight,
                            const AccessPattern& bias) {
  if (weight.present()) b.tensor_tensor(AluOp::multiply, y, y, weight);
  if (bias.present()) b.tensor_tensor(AluOp::add, y, y, bias, on_chip_sbuf(y, bias) ? Engine::gpsimd : Engine::vector);
}

void emit_tile_op(KernelBuilder& b, const TileOp& t) {
  SIGHTLINE_CHECK(t.attrs != nullptr, "emit_tile_op({}): TileOp::attrs is required", op_name(t.op));
  const OpAttrs& attrs = *t.attrs;
  const TileOpNeeds needs = tile_op_needs(t.op);
  SIGHTLINE_CHECK(needs.supported,
                  "{} has no tile-level lowering (kernels/emit.h): it runs only as its own eager kernel",
                  op_name(t.op));
  auto arg = [&](size_t i) {
    SIGHTLINE_CHECK(i < t.args.size(), "emit_tile_op({}): input {} is missing ({} given)", op_name(t.op), i,
                    t.args.size());
    return t.args[i].ap;
  };
  auto optional_arg = [&](size_t i) { return i < t.args.size() ? t.args[i].ap : AccessPattern{}; };
  BinaryAlu alu;
  if (binary_alu(t.op, alu)) {
    if (t.scalar) {
      emit_binary_scalar(b, t.op, t.y, arg(0), *t.scalar, t.engine);
    } else {
      arg(1);
      emit_binary(b, t.op, t.y, t.args[0], t.args[1], t.engine);
    }
    return;
  }
  switch (t.op) {
    case OpId::where:
    case OpId::masked_fill: {
      std::vector<AccessPattern> aps;
      for (const TileArg& a : t.args) aps.push_back(a.ap);
      emit_select(b, t.op, attrs, t.y, aps, t.work);
      return;
    }
    case OpId::sum:
    case OpId::mean:
    case OpId::amax:
      emit_row_reduce(b, t.op, t.y, arg(0), t.n);
      return;
    case OpId::softmax:
    case OpId::log_softmax:
      emit_softmax(b, t.op, t.y, arg(0), t.work, t.stats, t.p);
      return;
    case OpId::rms_norm:
      emit_rms_norm(b, t.y, arg(0), optional_arg(1), t.stats, t.p, t.n, static_cast<float>(attrs.eps));
      return;
    case OpId::layer_norm:
      emit_layer_norm(b, t.y, arg(0), optional_arg(1), optional_arg(2), t.stats, t.p,
                      static_cast<float>(attrs.eps));
      return;
    default:
      emit_unary(b, t.op, attrs, t.y, arg(0));
      return;
  }
}

}  // namespace sightline::kernels
