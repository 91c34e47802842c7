// The tile-level emitters (kernels/emit.h) and eager kernels emitted into a larger program
// (emit_eager_kernel, KernelBuilder::view / begin_kernel / end_kernel), as the compiler uses them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "kernel_test_util.h"
#include "kernels/emit.h"
#include "sightline/error.h"

namespace sightline::kernel_tests {
namespace {

using ::testing::HasSubstr;
using kernels::KernelBuilder;
using kernels::TensorDesc;

constexpr int64_t kPad = 40;  // elements in front of each tensor inside the program's I/O tensors

std::vector<int64_t> padded_shape(const TensorDesc& t) {
  return {kPad + std::max<int64_t>(kernels::tensor_extent(t), 1)};
}

// The kernel of `op` emitted into a program whose I/O tensors hold each operand kPad elements in must
// be build_eager_kernel's kernel instruction for instruction (the same tiles, queues, waits and source
// op), its HBM accesses moved by the views' offsets.
void expect_same_kernel_in_a_program(OpId op, const std::vector<TensorDesc>& inputs, const OpAttrs& attrs,
                                     const TensorDesc& out) {
  SCOPED_TRACE(op_name(op));
  const device::Executable alone = kernels::build_eager_kernel(op, inputs, attrs, out, trn2());

  KernelBuilder program(trn2(), "program");
  std::vector<uint32_t> io, views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    io.push_back(program.input("in" + std::to_string(i), inputs[i].dtype, padded_shape(inputs[i])));
  }
  io.push_back(program.output("out", out.dtype, padded_shape(out)));
  for (size_t i = 0; i < inputs.size(); ++i) views.push_back(program.view(io[i], kPad, inputs[i].dtype));
  const uint32_t out_view = program.view(io.back(), kPad, out.dtype);
  const KernelBuilder::KernelScope scope = program.begin_kernel();
  kernels::emit_eager_kernel(program, op, inputs, views, attrs, out, out_view);
  program.end_kernel(scope);
  EXPECT_EQ(program.sbuf_free_bytes(), trn2().sbuf_bytes_per_partition);
  EXPECT_EQ(program.psum_free_bytes(), trn2().psum_bytes_per_partition);
  const device::Executable in_program = program.build();

  EXPECT_EQ(in_program.source_ops, alone.source_ops);
  auto unpadded = [&](device::Instruction in) {
    for (device::AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux}) {
      if (ap->memory != device::Memory::hbm) continue;
      const uint64_t pad = static_cast<uint64_t>(kPad) * dtype_size(ap->dtype);
      EXPECT_GE(ap->offset, pad);
      ap->offset -= pad;
    }
    return in;
  };
  ASSERT_EQ(in_program.engines.size(), alone.engines.size());
  for (size_t e = 0; e < alone.engines.size(); ++e) {
    ASSERT_EQ(in_program.engines[e].size(), alone.engines[e].size()) << "engine " << e;
    for (size_t i = 0; i < alone.engines[e].size(); ++i) {
      EXPECT_EQ(unpadded(in_program.engines[e][i]), alone.engines[e][i]) << "engine " << e << " #" << i;
    }
  }
  ASSERT_EQ(in_program.dma_queues.size(), alone.dma_queues.size());
  for (size_t q = 0; q < alone.dma_queues.size(); ++q) {
    ASSERT_EQ(in_program.dma_queues[q].size(), alone.dma_queues[q].size()) << "queue " << q;
    for (size_t i = 0; i < alone.dma_queues[q].size(); ++i) {
      EXPECT_EQ(unpadded(in_program.dma_queues[q][i]), alone.dma_queues[q][i]) << "queue " << q << " #" << i;
    }
  }
}

TEST(EmitEagerKernel, IntoAProgramAtViewsItIsTheSameKernel) {
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {200, 96});
  const TensorDesc row = TensorDesc::contiguous(DType::f32, {96});
  OpAttrs none;
  expect_same_kernel_in_a_program(OpId::add, {x, row}, none, x);
  expect_same_kernel_in_a_program(OpId::silu, {x}, none, x);
  OpAttrs eps;
  eps.eps = 1e-6;
  expect_same_kernel_in_a_program(OpId::rms_norm, {x, row}, eps, x);
  OpAttrs last;
  last.dim = -1;
  expect_same_kernel_in_a_program(OpId::softmax, {x}, last, x);
  OpAttrs sum;
  sum.dims = {1};
  expect_same_kernel_in_a_program(OpId::sum, {x}, sum, TensorDesc::contiguous(DType::f32, {200}));
  const TensorDesc w = TensorDesc::contiguous(DType::bf16, {96, 300});
  const TensorDesc xb = TensorDesc::contiguous(DType::bf16, {200, 96});
  expect_same_kernel_in_a_program(OpId::matmul, {xb, w}, none, TensorDesc::contiguous(DType::bf16, {200, 300}));
}

TEST(KernelBuilder, ViewsResolveToTheirTensorAndUnknownHandlesAreErrors) {
  KernelBuilder b(trn2(), "views");
  const uint32_t t = b.input("t", DType::f32, {64});
  const uint32_t v = b.view(t, 16, DType::f32);
  EXPECT_EQ(b.view(t, 0, DType::f32), t);
  const kernels::Tile tile = b.sbuf(DType::f32, 8, 1);
  b.load(tile.ap(), kernels::hbm_rows(v, DType::f32, 4, 1, 8, 8));
  EXPECT_THROW(b.load(tile.ap(), kernels::hbm_rows(v + 1, DType::f32, 0, 1, 8, 8)), Error);
  const device::Executable exe = b.build();
  ASSERT_EQ(exe.dma_queues.at(0).size(), 1u);
  EXPECT_EQ(exe.dma_queues[0][0].src0.tensor, t);
  EXPECT_EQ(exe.dma_queues[0][0].src0.offset, (16u + 4u) * 4u);
  KernelBuilder other(trn2(), "bad");
  EXPECT_THROW(other.view(3, 0, DType::f32), Error);
}

TEST(EmitTileOp, OpsWithoutATileLoweringAreOneClearError) {
  KernelBuilder b(trn2(), "tile_ops");
  const kernels::Tile x = b.sbuf(DType::f32, 8);
  OpAttrs attrs;
  kernels::TileOp t;
  t.op = OpId::matmul;
  t.attrs = &attrs;
  t.y = x.ap();
  t.args = {{x.ap()}};
  try {
    kernels::emit_tile_op(b, t);
    FAIL() << "matmul has no tile-level lowering";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("aten::matmul has no tile-level lowering"));
  }
  EXPECT_FALSE(kernels::tile_op_needs(OpId::matmul).supported);
  EXPECT_FALSE(kernels::tile_op_needs(OpId::fill).supported);
  const kernels::TileOpNeeds softmax = kernels::tile_op_needs(OpId::softmax);
  EXPECT_TRUE(softmax.supported && softmax.row_wide && softmax.stats && softmax.work);
  const kernels::TileOpNeeds add = kernels::tile_op_needs(OpId::add);
  EXPECT_TRUE(add.supported && !add.row_wide && !add.stats && !add.work);
  EXPECT_THROW(kernels::reduction_alu(OpId::add), Error);
}

TEST(KernelBuilder, AKernelScopeRestartsQueuesAndLeavesTheProgramAsItFoundIt) {
  KernelBuilder b(trn2(), "scopes");
  const uint32_t t = b.input("t", DType::f32, {64});
  const kernels::Tile kept = b.sbuf(DType::f32, 8, 1, "kept");
  auto one_dma = [&] { b.dma(kept.ap(), kernels::hbm_rows(t, DType::f32, 0, 1, 8, 8)); };
  one_dma();  // queue 0
  const uint32_t free_before = b.sbuf_free_bytes();
  const KernelBuilder::KernelScope scope = b.begin_kernel();
  b.sbuf(DType::f32, 256, 0, "kernel_tile");
  b.psum(512, 0, "kernel_acc");
  one_dma();  // queue 0 again: the kernel's round robin starts afresh
  b.end_kernel(scope);
  EXPECT_EQ(b.sbuf_free_bytes(), free_before);
  EXPECT_EQ(b.psum_free_bytes(), trn2().psum_bytes_per_partition);
  one_dma();  // queue 1: the program's round robin goes on
  const device::Executable exe = b.build();
  ASSERT_GE(exe.dma_queues.size(), 2u);
  EXPECT_EQ(exe.dma_queues[0].size(), 2u);
  EXPECT_EQ(exe.dma_queues[1].size(), 1u);
}

// The matmul epilogue's contract: `allocated` once before any instruction, then `before_store` once
// per result tile, the tiles together covering the output exactly once.
TEST(EmitEagerKernel, MatmulHooksSeeEveryResultTileOnceBeforeItsStore) {
  const TensorDesc a = TensorDesc::contiguous(DType::bf16, {300, 160});
  const TensorDesc w = TensorDesc::contiguous(DType::bf16, {160, 700});
  const TensorDesc out = TensorDesc::contiguous(DType::bf16, {300, 700});
  KernelBuilder b(trn2(), "hooks");
  const uint32_t ia = b.input("a", a.dtype, {300, 160}), iw = b.input("w", w.dtype, {160, 700});
  const uint32_t io = b.output("out", out.dtype, {300, 700});
  int allocated = 0;
  std::vector<int> covered(300 * 700, 0);
  kernels::EagerHooks hooks;
  hooks.allocated = [&] { ++allocated; };
  hooks.before_store = [&](const device::AccessPattern& y, const device::AccessPattern& dst) {
    EXPECT_EQ(y.memory, device::Memory::sbuf);
    EXPECT_EQ(dst.tensor, io);
    EXPECT_EQ(y.partition_count, dst.partition_count);
    const int64_t e0 = static_cast<int64_t>(dst.offset / dtype_size(dst.dtype));
    for (int64_t r = 0; r < dst.partition_count; ++r) {
      for (uint32_t c = 0; c < dst.dims[0].size; ++c)
        ++covered[static_cast<size_t>(e0 + r * dst.partition_stride + c)];
    }
  };
  const TensorDesc ins[] = {a, w};
  const uint32_t tensors[] = {ia, iw};
  const KernelBuilder::KernelScope scope = b.begin_kernel();
  kernels::emit_eager_kernel(b, OpId::matmul, ins, tensors, {}, out, io, &hooks);
  b.end_kernel(scope);
  const device::Executable exe = b.build();
  EXPECT_EQ(allocated, 1);
  EXPECT_GT(exe.instruction_count(), 0u);
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }));

  KernelBuilder other(trn2(), "no_hooks");
  const TensorDesc x = TensorDesc::contiguous(DType::f32, {4, 8});
  const TensorDesc one[] = {x};
  const uint32_t ix[] = {other.input("x", DType::f32, {4, 8})};
  const uint32_t iy = other.output("y", DType::f32, {4, 8});
  EXPECT_THROW(kernels::emit_eager_kernel(other, OpId::exp, one, ix, {}, x, iy, &hooks), Error);
}

}  // namespace
}  // namespace sightline::kernel_tests
