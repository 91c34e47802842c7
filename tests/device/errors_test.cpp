// Invalid programs and memory misuse are sightline::Error with messages that say what was wrong.
#include <gtest/gtest.h>

#include "sightline/error.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

// Runs `exe` (no I/O) on a fresh trn2 core and returns the error message, or "" if it ran.
std::string run_error(const Executable& exe) {
  Core core(Spec::builtin());
  try {
    core.run(exe, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Executable one(Instruction in) {
  Executable exe;
  exe.name = "bad";
  exe.stream(in.engine()).push_back(in);
  return exe;
}

void expect_mentions(const std::string& message, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(message.empty()) << "expected an error";
  for (const char* part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << message << "\nmissing: " << part;
}

TEST(DeviceErrors, PartitionsOutOfRange) {
  expect_mentions(run_error(one(iota(sbuf(120, 16, 0, DType::f32, {8}), 0, 0))),
                  {"bad", "gpsimd instruction 0", "partitions [120, 136)", "128 partitions"});
}

TEST(DeviceErrors, SbufOverflow) {
  const uint32_t per_partition = Spec::builtin().sbuf_bytes_per_partition;
  expect_mentions(run_error(one(iota(sbuf(0, 128, per_partition - 8, DType::f32, {4}), 0, 0))),
                  {"SBUF", "overflow", std::to_string(per_partition).c_str()});
}

TEST(DeviceErrors, PsumOverflowAndBankCrossing) {
  AccessPattern a = sbuf(0, 128, 0, DType::f32, {8});
  expect_mentions(run_error(one(tensor_copy(psum(0, 128, 16384 - 4, DType::f32, {8}), a))),
                  {"PSUM", "overflow"});
  expect_mentions(
      run_error(one(matmul(psum(0, 128, 1024, DType::f32, {512}), sbuf(0, 128, 0, DType::bf16, {128}),
                           sbuf(0, 128, 4096, DType::bf16, {512}), false))),
      {"bank"});
}

TEST(DeviceErrors, ReadingUnwrittenTiles) {
  AccessPattern src = sbuf(0, 128, 0, DType::f32, {64});
  expect_mentions(run_error(one(activate(ActFunc::exp, sbuf(0, 128, 4096, DType::f32, {64}), src))),
                  {"scalar instruction 0", "ACTIVATE", "SBUF partition 0", "wrote"});
  // Writes of one execution do not leak into the next: on-chip memory starts unwritten every run.
  Core core(Spec::builtin());
  Executable write_then_read;
  write_then_read.name = "write_then_read";
  write_then_read.semaphore_count = 1;
  Instruction w = iota(src, 0, 1);
  w.updates.push_back({0, 1});
  Instruction r = activate(ActFunc::exp, sbuf(0, 128, 4096, DType::f32, {64}), src);
  r.waits.push_back({0, 1});
  write_then_read.stream(Engine::gpsimd).push_back(w);
  write_then_read.stream(Engine::scalar).push_back(r);
  EXPECT_NO_THROW(core.run(write_then_read, {}));
  EXPECT_THROW(core.run(one(activate(ActFunc::exp, sbuf(0, 128, 4096, DType::f32, {64}), src)), {}), Error);
  // Partially written: partition 5 is missing.
  Executable partial;
  partial.name = "partial";
  partial.semaphore_count = 1;
  Instruction low = iota(sbuf(0, 5, 0, DType::f32, {64}), 0, 1);
  Instruction high = iota(sbuf(6, 122, 0, DType::f32, {64}), 0, 1);
  high.updates.push_back({0, 1});
  partial.stream(Engine::gpsimd) = {low, high};
  Instruction read = tensor_copy(sbuf(0, 128, 4096, DType::f32, {64}), src);
  read.waits.push_back({0, 1});
  partial.stream(Engine::vector).push_back(read);
  expect_mentions(run_error(partial), {"SBUF partition 5"});
}

TEST(DeviceErrors, UnwrittenHbmInput) {
  testing::Harness h(Spec::builtin());
  Executable& exe = h.executable();
  exe.io.push_back({"x", DType::f32, {4, 4}, IoKind::input});
  exe.dma_queues[0].push_back(dma_copy(sbuf(0, 4, 0, DType::f32, {4}), hbm(0, 0, 4, 4, DType::f32, {4})));
  const uint64_t address = h.core().hbm_allocate(64);
  try {
    h.core().run(exe, std::vector<uint64_t>{address});
    FAIL();
  } catch (const Error& e) {
    expect_mentions(e.what(), {"dma queue 0", "HBM tensor 'x'", "never written"});
  }
}

TEST(DeviceErrors, HbmExhaustionSaysAskedAndFree) {
  Spec spec = Spec::builtin();
  spec.hbm.capacity_bytes = 1 << 20;
  Core core(spec);
  const uint64_t a = core.hbm_allocate(600 << 10);
  try {
    core.hbm_allocate(600 << 10);
    FAIL();
  } catch (const Error& e) {
    expect_mentions(e.what(), {"HBM exhausted", "asked for 614400 bytes", "434176 bytes free"});
  }
  core.hbm_free(a);
  EXPECT_NO_THROW(core.hbm_allocate(600 << 10));
  EXPECT_THROW(core.hbm_free(12345), Error);
}

TEST(DeviceErrors, OperandRulesPerEngine) {
  AccessPattern s = sbuf(0, 128, 0, DType::f32, {8});
  Executable exe = one(tensor_copy(s, s));
  exe.io.push_back({"x", DType::f32, {128, 8}, IoKind::input});
  exe.stream(Engine::vector)[0].src0 = hbm(0, 0, 128, 8, DType::f32, {8});
  expect_mentions(run_error(exe), {"vector engine reads and writes SBUF/PSUM only"});
  expect_mentions(run_error(one(iota(psum(0, 128, 0, DType::f32, {8}), 0, 0))), {"GpSimd cannot reach PSUM"});
  expect_mentions(run_error(one(tensor_tensor(AluOp::add, s, s, sbuf(0, 64, 0, DType::f32, {8})))),
                  {"must match"});
  // Moved to GpSimd, an elementwise instruction takes GpSimd's rules: no PSUM, and its own stream.
  expect_mentions(run_error(one(tensor_tensor(AluOp::add, psum(0, 128, 0, DType::f32, {8}), s, s, Engine::gpsimd))),
                  {"gpsimd instruction 0", "GpSimd cannot reach PSUM"});
  Executable gpsimd_in_vector;
  gpsimd_in_vector.name = "moved";
  gpsimd_in_vector.stream(Engine::vector).push_back(tensor_scalar(AluOp::add, s, s, 1.0f, false, Engine::gpsimd));
  expect_mentions(run_error(gpsimd_in_vector), {"runs on the gpsimd engine, not in the vector stream"});
  Instruction flagged_copy = tensor_copy(s, s);
  flagged_copy.flags = kFlagGpSimd;
  expect_mentions(run_error(one(flagged_copy)), {"only tensor_tensor and tensor_scalar can run on GpSimd"});
  EXPECT_THROW(tensor_tensor(AluOp::add, s, s, s, Engine::scalar), Error);
  // The negate and bias-operand flags belong to tensor_reduce and activate; a reduction's dst holds one
  // result, or one per index of src0's outer dims.
  Instruction negated_copy = tensor_copy(s, s);
  negated_copy.flags = kFlagNegate;
  expect_mentions(run_error(one(negated_copy)), {"only tensor_reduce negates"});
  Instruction bias_without_column = activate(ActFunc::exp, s, s);
  bias_without_column.flags = kFlagBiasOperand;
  expect_mentions(run_error(one(bias_without_column)), {"bias operand flag", "src1"});
  expect_mentions(run_error(one(activate(ActFunc::exp, s, s, 1.0f, sbuf(0, 128, 64, DType::f32, {2})))),
                  {"bias operand src1 must be [128, 1]"});
  AccessPattern heads = s;
  heads.dims[0] = {2, 4};
  heads.dims[1] = {4, 1};
  heads.dim_count = 2;
  expect_mentions(run_error(one(tensor_reduce(AluOp::max, sbuf(0, 128, 64, DType::f32, {4}), heads))),
                  {"product of src0's outer free dims", "got [128, 4]"});
  Executable wrong_stream;
  wrong_stream.name = "wrong";
  wrong_stream.stream(Engine::scalar).push_back(tensor_copy(s, s));
  expect_mentions(run_error(wrong_stream), {"runs on the vector engine"});
  Executable bad_sem = one(iota(s, 0, 0));
  bad_sem.stream(Engine::gpsimd)[0].updates.push_back({3, 1});
  expect_mentions(run_error(bad_sem), {"semaphore 3", "0 semaphores"});
}

TEST(DeviceErrors, BindingsMustMatchAndFit) {
  Core core(Spec::builtin());
  Executable exe = testing::rms_norm_program(core.spec(), 128, 64, 1e-6f);
  EXPECT_THROW(core.run(exe, {}), Error);
  const uint64_t small = core.hbm_allocate(64);
  try {
    core.run(exe, std::vector<uint64_t>{small, small});
    FAIL();
  } catch (const Error& e) {
    expect_mentions(e.what(), {"I/O tensor 'x'", "leaves the allocation"});
  }
}

}  // namespace
}  // namespace sightline::device
