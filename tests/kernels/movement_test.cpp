// cat and embedding against the CPU reference.
#include "kernel_test_util.h"

#include <algorithm>
#include <set>
#include <utility>

namespace sightline::kernel_tests {
namespace {

TEST(EagerMovement, Cat) {
  OpAttrs a;
  a.dim = 0;
  check_op(OpId::cat, {random({30, 70}), random({100, 70}), random({1, 70})}, a, 0);
  a.dim = 1;
  check_op(OpId::cat, {random({30, 7}), random({30, 200}).slice(1, 0, 200, 2), random({30, 0})}, a, 0);
  a.dim = -1;
  check_op(OpId::cat, {random({4, 5}, DType::bf16), random({4, 3})}, a, 0);  // promotes bf16 -> f32
}

TEST(EagerMovement, EmbeddingGathersRows) {
  const Tensor weight = random({300, 70});
  std::vector<int32_t> ids;
  for (int i = 0; i < 35; ++i) ids.push_back((i * 37 + 11) % 300);
  ids[3] = 0;
  ids[4] = 299;
  check_op(OpId::embedding, {weight, from_vector(ids, {5, 7})}, {}, 0);
  for (int32_t& id : ids) id %= 50;
  check_op(OpId::embedding, {random({50, 600}, DType::bf16), from_vector(ids, {35}).slice(0, 0, 35, 2)}, {},
           0);
  std::vector<int32_t> many;
  for (int i = 0; i < 200; ++i) many.push_back((i * 7) % 20);
  check_op(OpId::embedding, {random({20, 16}), from_vector(many, {200})}, {}, 0);
}

TEST(EagerMovement, EmbeddingUsesTheGatherDmaAndFallsBackForTallTables) {
  std::vector<int32_t> ids = {0, 69999, 12345, 7, 69999, 40000};
  const DeviceResult tall = check_op(OpId::embedding, {random({70000, 8}), from_vector(ids, {2, 3})}, {}, 0);
  EXPECT_FALSE(tall.exe.stream(device::Engine::tensor).empty());  // one-hot matmul
  for (int32_t& id : ids) id %= 300;
  const DeviceResult gathered = check_op(OpId::embedding, {random({300, 70}), from_vector(ids, {6})}, {}, 0);
  EXPECT_TRUE(gathered.exe.stream(device::Engine::tensor).empty());
  size_t gathers = 0;
  for (const auto& q : gathered.exe.dma_queues) {
    for (const auto& in : q) gathers += in.opcode == device::Opcode::dma_gather;
  }
  EXPECT_EQ(gathers, 1u);
}

// A gather of many rows is cut by rows, one piece per queue, so the queues move the rows in parallel:
// the pieces' rows cover every token once, in order, and the result is the reference's.
TEST(EagerMovement, EmbeddingGathersOnEveryQueue) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 128; ++i) ids.push_back((i * 53 + 5) % 1000);
  const DeviceResult r = check_op(OpId::embedding, {random({1000, 480}), from_vector(ids, {1, 128})}, {}, 0);
  std::vector<std::pair<uint16_t, uint16_t>> rows;  // (first index partition, count) of each piece
  std::set<size_t> queues;
  for (size_t q = 0; q < r.exe.dma_queues.size(); ++q) {
    for (const auto& in : r.exe.dma_queues[q]) {
      if (in.opcode != device::Opcode::dma_gather) continue;
      EXPECT_EQ(in.dst.partition_count, in.src1.partition_count);
      rows.emplace_back(in.src1.partition_start, in.src1.partition_count);
      queues.insert(q);
    }
  }
  EXPECT_EQ(rows.size(), size_t{trn2().dma.queues});
  EXPECT_EQ(queues.size(), rows.size());  // one piece per queue
  std::sort(rows.begin(), rows.end());
  uint32_t next = rows.empty() ? 0 : rows.front().first;
  for (const auto& [first, count] : rows) {
    EXPECT_EQ(first, next);
    next += count;
  }
  EXPECT_EQ(next - rows.front().first, 128u);
}

TEST(EagerKernels, CopyAndViewOpsAreRefused) {
  const kernels::TensorDesc x = kernels::TensorDesc::contiguous(DType::f32, {4});
  const kernels::TensorDesc in[] = {x};
  EXPECT_THROW(kernels::build_eager_kernel(OpId::copy, in, {}, x, trn2()), Error);
  EXPECT_THROW(kernels::build_eager_kernel(OpId::view, in, {}, x, trn2()), Error);
}

TEST(EagerKernels, KeysTellLayoutsApart) {
  const kernels::TensorDesc a = kernels::TensorDesc::contiguous(DType::f32, {4, 8});
  const kernels::TensorDesc t{DType::f32, {4, 8}, {1, 4}};
  const kernels::TensorDesc one[] = {a}, other[] = {t};
  OpAttrs attrs;
  EXPECT_EQ(kernels::eager_kernel_key(OpId::exp, one, attrs, a),
            kernels::eager_kernel_key(OpId::exp, one, attrs, a));
  EXPECT_NE(kernels::eager_kernel_key(OpId::exp, one, attrs, a),
            kernels::eager_kernel_key(OpId::exp, other, attrs, a));
  EXPECT_NE(kernels::eager_kernel_key(OpId::exp, one, attrs, a),
            kernels::eager_kernel_key(OpId::log, one, attrs, a));
  OpAttrs pow3;
  pow3.scalar = 3;
  EXPECT_NE(kernels::eager_kernel_key(OpId::pow, one, attrs, a),
            kernels::eager_kernel_key(OpId::pow, one, pow3, a));
  // Views declare the extent their strides reach, not the logical numel.
  const kernels::TensorDesc expanded{DType::f32, {128, 64}, {0, 1}};
  const kernels::TensorDesc ins[] = {expanded};
  const device::Executable exe = kernels::build_eager_kernel(
      OpId::exp, ins, attrs, kernels::TensorDesc::contiguous(DType::f32, {128, 64}), trn2());
  EXPECT_EQ(exe.io[0].bytes(), 64u * 4);
  EXPECT_EQ(exe.io[1].bytes(), 128u * 64 * 4);
}

}  // namespace
}  // namespace sightline::kernel_tests
