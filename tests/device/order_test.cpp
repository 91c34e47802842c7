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

}  // namespace
}  // namespace sightline::device
