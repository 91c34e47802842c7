// The functional model runs lane-aligned instructions in groups, a partition row of every member at a
// time (FunctionalExecutor::run): the results, and the errors, are those of one instruction after
// another in the issue order.
#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "device/functional.h"
#include "device/timing.h"
#include "sightline/error.h"
#include "test_programs.h"

namespace sightline::device {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Runs `exe` on fresh memories with FunctionalExecutor, either one instruction after another (execute)
// or grouped (run), and returns the bytes of every I/O tensor ("" when unwritten), or the error.
struct Outcome {
  std::vector<std::vector<uint8_t>> tensors;
  std::string error;
};

Outcome run_functional(const Executable& exe, const Spec& spec, const std::vector<std::vector<float>>& inputs,
                       bool grouped) {
  std::vector<const Instruction*> order;
  simulate(exe, spec, [&](const Instruction& in, Engine, uint32_t, uint32_t) { order.push_back(&in); }, false);
  HbmMemory hbm(spec.hbm.capacity_bytes);
  OnChipMemory sbuf(spec.partitions, spec.sbuf_bytes_per_partition);
  OnChipMemory psum(spec.partitions, spec.psum_bytes_per_partition);
  std::vector<uint64_t> addresses;
  std::vector<HbmMemory::Span> io;
  for (size_t i = 0; i < exe.io.size(); ++i) {
    addresses.push_back(hbm.allocate(exe.io[i].bytes()));
    if (i < inputs.size() && !inputs[i].empty()) {
      hbm.write(addresses[i], inputs[i].data(), inputs[i].size() * 4);
    }
    io.push_back(hbm.span(addresses[i], exe.io[i].bytes()));
  }
  FunctionalExecutor executor(exe, sbuf, psum, io);
  Outcome out;
  try {
    if (grouped) {
      executor.run(order, [&](size_t position, const Error& e) {
        fail("position {}: {}", position, e.what());
      });
    } else {
      for (size_t position = 0; position < order.size(); ++position) {
        try {
          executor.execute(*order[position]);
        } catch (const Error& e) {
          fail("position {}: {}", position, e.what());
        }
      }
    }
  } catch (const Error& e) {
    out.error = e.what();
  }
  for (size_t i = 0; i < exe.io.size(); ++i) {
    std::vector<uint8_t> bytes(exe.io[i].bytes());
    try {
      hbm.read(addresses[i], bytes.data(), bytes.size());
    } catch (const Error&) {
      bytes.clear();
    }
    out.tensors.push_back(std::move(bytes));
  }
  return out;
}

void expect_same(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.error, b.error);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_TRUE(a.tensors[i] == b.tensors[i]) << "tensor " << i;
}

TEST(FunctionalOrder, RmsNormGroupedIsBitIdentical) {
  const Spec spec = Spec::builtin("trn2");
  for (const auto& [rows, cols] : {std::pair<uint32_t, uint32_t>{300, 1000}, {1024, 512}}) {
    const Executable exe = testing::rms_norm_program(spec, rows, cols, 1e-6f);
    const std::vector<std::vector<float>> inputs{random_values(size_t{rows} * cols, rows)};
    const Outcome one = run_functional(exe, spec, inputs, false);
    const Outcome grouped = run_functional(exe, spec, inputs, true);
    EXPECT_EQ(one.error, "");
    expect_same(one, grouped);
  }
}

// DMAs on one queue (issued in queue order) where a later copy reads HBM rows an earlier one wrote from
// other lanes: lane by lane, the read would come first, so the group must end before it.
TEST(FunctionalOrder, HbmHazardsAcrossLanesSplitGroups) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t cols = 64;
  const uint64_t row = cols * 4;
  Executable exe;
  exe.name = "hazards";
  exe.io = {{"x", DType::f32, {192, cols}, IoKind::input}, {"y", DType::f32, {192, cols}, IoKind::output}};
  exe.dma_queues.resize(1);
  auto on_chip = [&](uint16_t first, uint16_t count, uint64_t offset) {
    return sbuf(first, count, offset, DType::f32, {cols});
  };
  auto off_chip = [&](uint32_t tensor, uint32_t first_row, uint16_t count) {
    return hbm(tensor, first_row * row, count, cols, DType::f32, {cols});
  };
  exe.dma_queues[0] = {
      dma_copy(on_chip(0, 128, 0), off_chip(0, 0, 128)),           // x[0, 128) -> lanes 0..127
      dma_copy(off_chip(1, 0, 128), on_chip(0, 128, 0)),           // -> y[0, 128)
      dma_copy(on_chip(0, 64, row), off_chip(1, 64, 64)),          // y[64, 128) -> lanes 0..63 (RAW)
      dma_copy(off_chip(0, 128, 64), on_chip(0, 64, row)),         // -> x[128, 192)
      dma_copy(on_chip(64, 64, 2 * row), off_chip(0, 128, 64)),    // x[128, 192) -> lanes 64..127 (RAW)
      dma_copy(off_chip(1, 128, 64), on_chip(64, 64, 2 * row)),    // -> y[128, 192)
  };
  std::vector<float> x = random_values(size_t{128} * cols, 9);
  const Outcome one = run_functional(exe, spec, {x}, false);
  const Outcome grouped = run_functional(exe, spec, {x}, true);
  EXPECT_EQ(one.error, "");
  expect_same(one, grouped);
  // And through Core: y = [x[0, 128), x[64, 128)].
  Core core(spec);
  const std::vector<uint64_t> io{core.hbm_allocate(192 * row), core.hbm_allocate(192 * row)};
  core.hbm_write(io[0], x.data(), 128 * row);
  core.run(exe, io);
  std::vector<float> y(size_t{192} * cols);
  core.hbm_read(io[1], y.data(), y.size() * 4);
  EXPECT_EQ(std::memcmp(y.data(), x.data(), 128 * row), 0);
  EXPECT_EQ(std::memcmp(y.data() + 128 * cols, x.data() + 64 * cols, 64 * row), 0);
}

// Two copies of one group that both read unwritten bytes: the earlier fails at lane 100, the later at
// lane 0, which lane by lane comes first. The error is the earlier copy's, at its row 100.
TEST(FunctionalOrder, GroupedErrorsAreThoseOfTheIssueOrder) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t cols = 32;
  Executable exe;
  exe.name = "faults";
  exe.io = {{"x", DType::f32, {128, cols}, IoKind::input}, {"z", DType::f32, {8, cols}, IoKind::input}};
  exe.dma_queues.resize(1);
  exe.dma_queues[0] = {
      dma_copy(sbuf(0, 128, 0, DType::f32, {cols}), hbm(0, 0, 128, cols, DType::f32, {cols})),
      dma_copy(sbuf(0, 8, cols * 4, DType::f32, {cols}), hbm(1, 0, 8, cols, DType::f32, {cols})),
  };
  const std::vector<float> x = random_values(size_t{100} * cols, 10);  // rows 100.. never written
  const Outcome one = run_functional(exe, spec, {x, {}}, false);
  const Outcome grouped = run_functional(exe, spec, {x, {}}, true);
  EXPECT_NE(one.error.find("position 0:"), std::string::npos) << one.error;
  EXPECT_NE(one.error.find("partition row 100"), std::string::npos) << one.error;
  EXPECT_EQ(one.error, grouped.error);

  Core core(spec);
  const std::vector<uint64_t> io{core.hbm_allocate(128 * cols * 4), core.hbm_allocate(8 * cols * 4)};
  core.hbm_write(io[0], x.data(), x.size() * 4);
  try {
    core.run(exe, io);
    ADD_FAILURE() << "reading unwritten rows ran";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dma queue 0 instruction 0"), std::string::npos) << what;
    EXPECT_NE(what.find(one.error.substr(one.error.find(": ") + 2)), std::string::npos) << what;
  }
}

// A square-and-sum activation (RMSNorm's) over every partition but the first (127 rows), rows of 1003
// elements (a tail past the vector loop's last 8), a scale and a bias: into its own rows, in place, and
// into rows that partly overlap the source (which cannot be computed in place), with an f32 and a bf16
// sum. Grouped, the outputs and sums are those of row after row; with one source row never written, so
// is the error.
TEST(FunctionalOrder, SquareSumRowsAreThoseOfRowByRow) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t cols = 1003;
  const uint16_t first = 1, rows = 127;
  const uint64_t row = cols * 4, out_bytes = 2 * row + 64;
  for (const int variant : {0, 1, 2}) {
    for (const DType sum_dtype : {DType::f32, DType::bf16}) {
      for (const bool hole : {false, true}) {
        Executable exe;
        exe.name = "square_sum";
        exe.io = {{"x", DType::f32, {rows, cols}, IoKind::input},
                  {"y", DType::f32, {rows, cols}, IoKind::output},
                  {"sum", sum_dtype, {rows, 1}, IoKind::output}};
        exe.semaphore_count = 2;
        exe.dma_queues.resize(1);
        const AccessPattern x = sbuf(first, rows, 0, DType::f32, {cols});
        // 0: rows of their own; 1: in place; 2: four bytes past the source's start.
        const uint64_t y_offset = variant == 0 ? 2 * row : variant == 1 ? 0 : 4;
        const AccessPattern y = sbuf(first, rows, y_offset, DType::f32, {cols});
        const AccessPattern sum = sbuf(first, rows, out_bytes, sum_dtype, {1});
        Instruction load = dma_copy(x, hbm(0, 0, rows, cols, DType::f32, {cols}));
        load.updates.push_back({0, 1});
        Instruction square = activate(ActFunc::square, y, x, 0.75f, 0.125f);
        square.aux = sum;
        square.waits.push_back({0, 1});
        square.updates.push_back({1, 1});
        Instruction store_y = dma_copy(hbm(1, 0, rows, cols, DType::f32, {cols}), y);
        store_y.waits.push_back({1, 1});
        Instruction store_sum = dma_copy(hbm(2, 0, rows, 1, sum_dtype, {1}), sum);
        store_sum.waits.push_back({1, 1});
        exe.dma_queues[0] = {load, store_y, store_sum};
        exe.stream(Engine::scalar).push_back(square);
        std::vector<float> input = random_values(size_t{rows} * cols, 21 + variant);
        if (hole) {  // row 6 (partition 7) is not loaded
          exe.dma_queues[0][0] = dma_copy(sbuf(first, 6, 0, DType::f32, {cols}), hbm(0, 0, 6, cols, DType::f32, {cols}));
          Instruction rest = dma_copy(sbuf(first + 7, rows - 7, 0, DType::f32, {cols}),
                                      hbm(0, 7 * row, rows - 7, cols, DType::f32, {cols}));
          rest.updates.push_back({0, 1});
          exe.dma_queues[0].insert(exe.dma_queues[0].begin() + 1, rest);
        }
        const Outcome one = run_functional(exe, spec, {input}, false);
        const Outcome grouped = run_functional(exe, spec, {input}, true);
        SCOPED_TRACE(::testing::Message() << "variant " << variant << " sum " << dtype_name(sum_dtype) << " hole " << hole);
        if (hole) {
          EXPECT_NE(one.error.find("partition 7 "), std::string::npos) << one.error;
        } else {
          EXPECT_EQ(one.error, "");
          ASSERT_FALSE(one.tensors[1].empty());
        }
        expect_same(one, grouped);
      }
    }
  }
}

// A Core keeps the functional model's buffers from run to run: programs of other shapes in between,
// and a run that stops at an error in the middle of a group, leave nothing behind that changes the next
// run's results or errors.
TEST(FunctionalOrder, CoreRunsAfterOtherProgramsAndErrorsAreUnchanged) {
  const Spec spec = Spec::builtin("trn2");
  const uint32_t rows = 300, cols = 1000;
  const Executable rms = testing::rms_norm_program(spec, rows, cols, 1e-6f);
  const Executable small = testing::rms_norm_program(spec, 40, 64, 1e-6f);
  const std::vector<float> x = random_values(size_t{rows} * cols, 5);
  const Outcome want = run_functional(rms, spec, {x}, false);
  ASSERT_EQ(want.error, "");

  Core core(spec);
  const std::vector<uint64_t> io{core.hbm_allocate(x.size() * 4), core.hbm_allocate(x.size() * 4)};
  const std::vector<uint64_t> small_io{core.hbm_allocate(40 * 64 * 4), core.hbm_allocate(40 * 64 * 4)};
  const auto check_rms = [&] {
    core.hbm_write(io[0], x.data(), x.size() * 4);
    core.run(rms, io);
    std::vector<uint8_t> y(x.size() * 4);
    core.hbm_read(io[1], y.data(), y.size());
    EXPECT_TRUE(y == want.tensors[1]);
  };
  check_rms();
  // The small program, its input never written, fails at its first load.
  EXPECT_THROW(core.run(small, small_io), Error);
  check_rms();
  const std::vector<float> s = random_values(40 * 64, 6);
  core.hbm_write(small_io[0], s.data(), s.size() * 4);
  core.run(small, small_io);
  check_rms();
}

}  // namespace
}  // namespace sightline::device
