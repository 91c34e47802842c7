// Eager reductions and softmax against the CPU reference.
#include "kernel_test_util.h"

namespace sightline::kernel_tests {
namespace {

OpAttrs reduce_over(Dims dims, bool keepdim) {
  OpAttrs a;
  a.dims = dims;
  a.keepdim = keepdim;
  return a;
}

TEST(EagerReduction, SumMeanAmaxOverDims) {
  const Tensor x = random({130, 300});
  for (OpId op : {OpId::sum, OpId::mean, OpId::amax}) {
    SCOPED_TRACE(std::string(op_name(op)));
    check_op(op, {x}, reduce_over({-1}, true), 1e-4);
    check_op(op, {x}, reduce_over({-1}, false), 1e-4);
    check_op(op, {x}, reduce_over({0}, false), 1e-4);
    check_op(op, {x}, reduce_over({}, false), 1e-4);
    check_op(op, {x.transpose(0, 1)}, reduce_over({1}, true), 1e-4);
  }
}

TEST(EagerReduction, ManyDimsAndLongRows) {
  const Tensor x = random({5, 130, 70});
  check_op(OpId::sum, {x}, reduce_over({0, 2}, false), 1e-4);
  check_op(OpId::mean, {x}, reduce_over({0, 2}, true), 1e-4);
  check_op(OpId::amax, {x}, reduce_over({1}, false), 1e-4);
  check_op(OpId::sum, {random({3, 9000})}, reduce_over({1}, false), 1e-4);  // chunks of the free axis
  check_op(OpId::sum, {random({70001})}, reduce_over({}, false), 1e-4);     // full reduction, folded
  check_op(OpId::amax, {random({})}, reduce_over({}, false), 0);
}

TEST(EagerReduction, Dtypes) {
  check_op(OpId::sum, {random({130, 64}, DType::bf16)}, reduce_over({-1}, false));
  check_op(OpId::mean, {random({130, 64}, DType::f16)}, reduce_over({0}, true));
  check_op(OpId::sum, {random_ints({40, 50})}, reduce_over({1}, false), 0);
  check_op(OpId::amax, {random_ints({40, 50})}, reduce_over({}, false), 0);
}

TEST(EagerSoftmax, OverAnyDim) {
  for (OpId op : {OpId::softmax, OpId::log_softmax}) {
    SCOPED_TRACE(std::string(op_name(op)));
    OpAttrs a;
    a.dim = -1;
    check_op(op, {mul(random({130, 300}), 4.0)}, a, 1e-4);
    a.dim = 0;
    check_op(op, {random({130, 300})}, a, 1e-4);
    a.dim = 1;
    check_op(op, {random({3, 40, 5})}, a, 1e-4);
    a.dim = -1;
    check_op(op, {random({70, 33}, DType::bf16)}, a);
    // Rows so long that one work and one output row fit: the tiles' stages run back to back.
    check_op(op, {random({200, 12288})}, a, 1e-4);
  }
}

// softmax along rows: per row tile a reduction of the negated max and an exp that subtracts it as its
// bias operand, no subtraction pass; log_softmax keeps x - max, which its last step reads.
TEST(EagerSoftmax, TheExpSubtractsTheMax) {
  OpAttrs a;
  a.dim = -1;
  for (OpId op : {OpId::softmax, OpId::log_softmax}) {
    SCOPED_TRACE(std::string(op_name(op)));
    const DeviceResult r = check_op(op, {mul(random({256, 300}), 4.0)}, a, 1e-4);
    int subtractions = 0, biased_exps = 0, negated = 0;
    for (const auto& stream : r.exe.engines) {
      for (const device::Instruction& in : stream) {
        subtractions += in.opcode == device::Opcode::tensor_scalar && in.alu() == device::AluOp::subtract;
        biased_exps += in.opcode == device::Opcode::activate && in.act() == device::ActFunc::exp &&
                       (in.flags & device::kFlagBiasOperand) != 0;
        negated += in.opcode == device::Opcode::tensor_reduce && (in.flags & device::kFlagNegate) != 0;
      }
    }
    const bool softmax = op == OpId::softmax;
    EXPECT_EQ(subtractions, softmax ? 0 : 4);  // log_softmax: x - max and x - max - log(sum), 2 row tiles
    EXPECT_EQ(biased_exps, softmax ? 2 : 0);
    EXPECT_EQ(negated, softmax ? 2 : 0);
  }
}

}  // namespace
}  // namespace sightline::kernel_tests
