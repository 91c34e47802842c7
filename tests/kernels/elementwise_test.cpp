// Eager elementwise kernels against the CPU reference: broadcasting, views, dtypes, partial tiles.
#include <limits>

#include "kernel_test_util.h"

namespace sightline::kernel_tests {
namespace {

const OpId kBinary[] = {OpId::add, OpId::sub, OpId::rsub, OpId::mul, OpId::div, OpId::maximum, OpId::minimum};

TEST(EagerElementwise, BinarySameShapeNotMultipleOf128) {
  for (OpId op : kBinary) {
    SCOPED_TRACE(std::string(op_name(op)));
    Tensor b = random({200, 300});
    if (op == OpId::div) b = random_positive({200, 300});
    check_op(op, {random({200, 300}), b});
  }
}

TEST(EagerElementwise, BinaryBroadcastLayouts) {
  // Row broadcast [R, C] * [C], per-row [R, C] * [R, 1], a 0-dim scalar on either side, 3-D broadcast.
  check_op(OpId::mul, {random({130, 257}), random({257})});
  check_op(OpId::sub, {random({257}), random({130, 257})});
  check_op(OpId::add, {random({130, 257}), random({130, 1})});
  check_op(OpId::div, {random({130, 257}), random_positive({130, 1})});
  check_op(OpId::sub, {random({130, 1}), random({130, 257})});
  check_op(OpId::add, {random({130, 257}), random({})});
  check_op(OpId::maximum, {random({}), random({3, 70})});
  check_op(OpId::mul, {random({3, 1, 5}), random({4, 1})});
  check_op(OpId::add, {random({}), random({})});
  check_op(OpId::add, {random({130, 1}), random({1, 300})});
}

TEST(EagerElementwise, BinaryViews) {
  const Tensor x = random({300, 200});
  check_op(OpId::add, {x.transpose(0, 1), random({200, 300})});         // transposed 2-D
  check_op(OpId::mul, {x.slice(1, 3, 190, 2), x.slice(1, 4, 191, 2)});  // strided columns
  check_op(OpId::sub, {random({1, 200}).expand({300, 200}), x});        // stride-0 expand
  check_op(OpId::add, {random({70000}), random({70000})});              // long 1-D: folded onto partitions
  check_op(OpId::mul, {random({2, 3, 4, 5, 6}).permute({4, 2, 0, 3, 1}), random({6, 4, 2, 5, 3})});
}

TEST(EagerElementwise, BinaryDtypes) {
  check_op(OpId::add, {random({130, 70}, DType::bf16), random({130, 70}, DType::bf16)});
  check_op(OpId::mul, {random({130, 70}, DType::f16), random({70}, DType::f16)});
  check_op(OpId::add, {random({130, 70}, DType::bf16), random({130, 70})});  // promotes to f32
  check_op(OpId::add, {random_ints({129, 33}), random_ints({129, 33})}, {}, 0);
  check_op(OpId::mul, {random_ints({129, 33}), random_ints({33})}, {}, 0);
  check_op(OpId::maximum, {random_ints({129, 33}), random_ints({129, 1})}, {}, 0);
  check_op(OpId::div, {random_ints({40, 33}), add(random_ints({40, 33}, 5), 7)});  // i32 / i32 -> f32
  check_op(OpId::mul, {random_ints({40, 33}), random({})});                        // i32 * 0-dim f32 -> f32
}

TEST(EagerElementwise, Unary) {
  const OpId ops[] = {OpId::neg,     OpId::abs,  OpId::exp,  OpId::tanh,
                      OpId::sigmoid, OpId::relu, OpId::silu, OpId::gelu};
  for (OpId op : ops) {
    SCOPED_TRACE(std::string(op_name(op)));
    check_op(op, {random({131, 200})});
  }
  for (OpId op : {OpId::log, OpId::sqrt, OpId::rsqrt, OpId::reciprocal}) {
    SCOPED_TRACE(std::string(op_name(op)));
    check_op(op, {random_positive({131, 200})});
  }
  check_op(OpId::exp, {random({131, 200}, DType::bf16)});
  check_op(OpId::gelu, {random({64, 40}, DType::f16)});
  check_op(OpId::neg, {random_ints({50, 50})}, {}, 0);
  check_op(OpId::relu, {random_ints({50, 50})}, {}, 0);
  check_op(OpId::sigmoid, {random({300, 200}).transpose(0, 1)});
}

// The Scalar-engine functions issue #18 added: erf, gelu's exact (erf) form and its tanh form, sin, cos.
TEST(EagerElementwise, ErfGeluSinCos) {
  for (OpId op : {OpId::erf, OpId::gelu, OpId::sin, OpId::cos}) {
    SCOPED_TRACE(std::string(op_name(op)));
    check_op(op, {random({131, 200})});
    check_op(op, {random({64, 40}, DType::bf16)});
    check_op(op, {random({300, 70}).transpose(0, 1)});
  }
  OpAttrs tanh_form;
  tanh_form.approximate = GeluApproximate::tanh;
  check_op(OpId::gelu, {random({131, 200})}, tanh_form);
  check_op(OpId::gelu, {random({64, 40}, DType::f16)}, tanh_form);
  check_op(OpId::sin, {random_ints({40, 30})});  // i32 -> f32, cast on the device first
  // The two forms lower to different activation functions, so they must not share a cached kernel.
  const Tensor x = random({4, 8});
  const kernels::TensorDesc d = kernels::TensorDesc::of(x);
  EXPECT_NE(kernels::eager_kernel_key(OpId::gelu, {&d, 1}, OpAttrs{}, d),
            kernels::eager_kernel_key(OpId::gelu, {&d, 1}, tanh_form, d));
}

// rsub(a, b) = b - a with the operands in every layout build_binary distinguishes: both full tiles, a
// per-row column on either side, a 0-dim scalar (what `1.0 - t` sends) on either side.
TEST(EagerElementwise, RsubSwapsTheOperands) {
  check_op(OpId::rsub, {random({130, 257}), random({130, 257})});
  check_op(OpId::rsub, {random({130, 257}), random({130, 1})});
  check_op(OpId::rsub, {random({130, 1}), random({130, 257})});
  check_op(OpId::rsub, {random({130, 257}), random({})});
  check_op(OpId::rsub, {random({}), random({3, 70})});
  check_op(OpId::rsub, {random({130, 257}), random({257})});
  check_op(OpId::rsub, {random_ints({40, 33}), random_ints({40, 33})}, {}, 0);
}

// The comparisons on the Vector engine write bool (1.0 / 0.0 rounded into one byte by the store) and
// compare in the operands' dtype: bf16 operands stay bf16, an i32 one against an f32 0-dim goes f32.
TEST(EagerElementwise, ComparisonsWriteBool) {
  for (OpId op : {OpId::eq, OpId::ne, OpId::lt, OpId::le, OpId::gt, OpId::ge}) {
    SCOPED_TRACE(std::string(op_name(op)));
    const Tensor a = random({130, 257});
    check_op(op, {a, random({130, 257})}, {}, 0);
    check_op(op, {a, a}, {}, 0);  // every element equal
    check_op(op, {a, random({257})}, {}, 0);
    check_op(op, {random({130, 1}), a}, {}, 0);
    check_op(op, {a, random({})}, {}, 0);
    check_op(op, {random({64, 40}, DType::bf16), random({64, 40}, DType::bf16)}, {}, 0);
    check_op(op, {random_ints({40, 33}), random_ints({40, 33})}, {}, 0);
    check_op(op, {random_ints({40, 33}), random({})}, {}, 0);
    check_op(op, {a.transpose(0, 1), random({257, 130})}, {}, 0);
  }
}

// where and masked_fill: a bool mask tile beside operand tiles of the output dtype, broadcast on
// either axis; NaN and inf pass through the select unchanged.
TEST(EagerElementwise, SelectsWhereAndMaskedFill) {
  const Tensor cond = gt(random({130, 257}), 0.0);
  check_op(OpId::where, {cond, random({130, 257}), random({130, 257})}, {}, 0);
  check_op(OpId::where, {gt(random({130, 1}), 0.0), random({257}), random({130, 257})}, {}, 0);
  check_op(OpId::where, {gt(random({257}), 0.0), random({130, 257}), random({})}, {}, 0);
  check_op(OpId::where, {cond, random({130, 257}, DType::bf16), random({130, 257}, DType::bf16)}, {}, 0);
  check_op(OpId::where, {cond.transpose(0, 1), random_ints({257, 130}), random_ints({257, 130})}, {}, 0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const Tensor special = from_vector(std::vector<float>{inf, -inf, nan, 1.0f}, {4});
  check_op(OpId::where, {gt(random({4}), 0.0), special, random({4})}, {}, 0);
  OpAttrs value;
  value.scalar = -inf;  // the attention mask's fill
  check_op(OpId::masked_fill, {random({130, 257}), cond}, value, 0);
  check_op(OpId::masked_fill, {random({4, 130, 70}), gt(random({130, 1}), 0.0)}, value, 0);
  value.scalar = 3.0;
  check_op(OpId::masked_fill, {random({64, 40}, DType::bf16), gt(random({64, 40}), 0.0)}, value, 0);
  check_op(OpId::masked_fill, {random_ints({40, 33}), gt(random({33}), 0.0)}, value, 0);
}

TEST(EagerElementwise, Pow) {
  OpAttrs attrs;
  for (double e : {2.0, 3.0, 0.5, -1.5}) {
    attrs.scalar = e;
    SCOPED_TRACE(e);
    check_op(OpId::pow, {random_positive({129, 77})}, attrs, 1e-4);
  }
  attrs.scalar = 2.0;
  check_op(OpId::pow, {random_ints({40, 30})}, attrs, 0);
}

TEST(EagerElementwise, ToCopyCasts) {
  OpAttrs attrs;
  attrs.dtype = DType::bf16;
  check_op(OpId::to_copy, {random({130, 300})}, attrs);
  attrs.dtype = DType::f32;
  check_op(OpId::to_copy, {random({130, 300}, DType::f16).transpose(0, 1)}, attrs);
  check_op(OpId::to_copy, {random_ints({77, 5})}, attrs, 0);
  // Float to i32 truncates toward zero, as the CPU reference does, including negatives and halves.
  attrs.dtype = DType::i32;
  check_op(OpId::to_copy, {mul(random({130, 300}), 40.0)}, attrs, 0);
  const std::vector<float> edges = {2.5f, -2.5f, 0.5f,   -0.5f,  0.99999994f, -0.99999994f,
                                    3.0f, -3.0f, 1e-30f, 7.5e9f, -7.5e9f,     16777215.0f};
  check_op(OpId::to_copy, {from_vector(edges, {static_cast<int64_t>(edges.size())})}, attrs, 0);
}

TEST(EagerElementwise, ContiguousAndFill) {
  check_op(OpId::contiguous, {random({300, 200}).transpose(0, 1)});
  check_op(OpId::contiguous, {random({5, 1, 7}).expand({5, 130, 7})});
  check_op(OpId::contiguous, {random({4, 6, 8, 10}).permute({3, 1, 0, 2}).slice(0, 1, 9, 3)});
  OpAttrs attrs;
  attrs.scalar = 2.5;
  attrs.dims = {300, 70};
  check_op(OpId::fill, {}, attrs, 0);
  attrs.dtype = DType::i32;
  attrs.scalar = -7;
  attrs.dims = {3};
  check_op(OpId::fill, {}, attrs, 0);
  attrs.dims = {};
  check_op(OpId::fill, {}, attrs, 0);
}

TEST(EagerElementwise, RowBroadcastLoadsTheRowOnce) {
  // [512, 256] * [256]: four row tiles share one broadcast load of the row.
  const DeviceResult r = check_op(OpId::mul, {random({512, 256}), random({256})});
  uint64_t row_loads = 0;
  for (const auto& queue : r.exe.dma_queues) {
    for (const auto& in : queue) row_loads += in.src0.memory == device::Memory::hbm && in.src0.tensor == 1;
  }
  EXPECT_GT(row_loads, 0u);
  EXPECT_LE(row_loads, r.exe.dma_queues.size());  // one split load, not one per tile
}

}  // namespace
}  // namespace sightline::kernel_tests
