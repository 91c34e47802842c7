// Tiled matmul and linear on the Tensor engine against the CPU reference.
#include "kernel_test_util.h"

namespace sightline::kernel_tests {
namespace {

TEST(EagerMatmul, TwoDimensionalPartialTiles) {
  // M, K, N all cross tile boundaries: 2 stationary tiles, 2 K tiles, 2 moving tiles.
  const DeviceResult r = check_op(OpId::matmul, {random({130, 200}), random({200, 600})}, {}, 1e-4);
  EXPECT_GT(r.exe.stream(device::Engine::tensor).size(), 0u);
}

TEST(EagerMatmul, OneDimensionalAndBatchedOperands) {
  check_op(OpId::matmul, {random({70}), random({70, 30})}, {}, 1e-4);
  check_op(OpId::matmul, {random({30, 70}), random({70})}, {}, 1e-4);
  check_op(OpId::matmul, {random({70}), random({70})}, {}, 1e-4);
  check_op(OpId::matmul, {random({2, 3, 40, 50}), random({50, 30})}, {}, 1e-4);
  check_op(OpId::matmul, {random({3, 40, 50}), random({1, 50, 20})}, {}, 1e-4);
  check_op(OpId::matmul, {random({2, 1, 9, 20}), random({3, 20, 7})}, {}, 1e-4);
}

TEST(EagerMatmul, TransposedOperandsAndDtypes) {
  check_op(OpId::matmul, {random({60, 140}).transpose(0, 1), random({90, 60}).transpose(0, 1)}, {}, 1e-4);
  check_op(OpId::matmul, {random({64, 256}, DType::bf16), random({256, 64}, DType::bf16)}, {}, 3e-2);
  check_op(OpId::matmul, {random_ints({20, 30}, 6), random_ints({30, 10}, 6)}, {}, 0);
}

TEST(EagerLinear, WithAndWithoutBias) {
  check_op(OpId::linear, {random({2, 70, 150}), random({40, 150}), random({40})}, {}, 1e-4);
  check_op(OpId::linear, {random({130, 33}), random({520, 33})}, {}, 1e-4);
  check_op(OpId::linear, {random({33}), random({9, 33}), random({9})}, {}, 1e-4);
}

}  // namespace
}  // namespace sightline::kernel_tests
