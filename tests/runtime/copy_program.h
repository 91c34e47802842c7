// A hand-written device program for the runtime tests: y = x * scale for a [128, n] f32 tensor
// (DMA in, one Vector instruction, DMA out), with the semaphores a kernel builder would insert.
#pragma once

#include "sightline/device/executable.h"

namespace sightline::test_programs {

inline device::Executable scale_program(uint32_t n, float scale, const std::string& name = "scale") {
  using namespace device;
  Executable exe;
  exe.name = name;
  exe.io = {{"x", DType::f32, {128, n}, IoKind::input}, {"y", DType::f32, {128, n}, IoKind::output}};
  exe.source_ops = {"aten::mul"};
  exe.semaphore_count = 2;
  exe.dma_queues.resize(1);
  const AccessPattern tile = sbuf(0, 128, 0, DType::f32, {n});
  Instruction load = dma_copy(tile, hbm(0, 0, 128, n, DType::f32, {n}));
  load.updates.push_back({0, 1});
  load.source_op = 0;
  Instruction mul = tensor_scalar(AluOp::multiply, tile, tile, scale);
  mul.waits.push_back({0, 1});
  mul.updates.push_back({1, 1});
  mul.source_op = 0;
  Instruction store = dma_copy(hbm(1, 0, 128, n, DType::f32, {n}), tile);
  store.waits.push_back({1, 1});
  store.source_op = 0;
  exe.dma_queues[0] = {load, store};
  exe.stream(Engine::vector).push_back(mul);
  return exe;
}

}  // namespace sightline::test_programs
