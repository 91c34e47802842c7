#include "device/core.h"

#include <algorithm>

#include <fmt/format.h>

#include "device/functional.h"
#include "device/timing.h"
#include "device/validate.h"
#include "sightline/error.h"

namespace sightline::device {

Core::Core(Spec spec)
    : spec_(std::move(spec)),
      hbm_(spec_.hbm.capacity_bytes),
      sbuf_(spec_.partitions, spec_.sbuf_bytes_per_partition),
      psum_(spec_.partitions, spec_.psum_bytes_per_partition) {}

double timing_only_ns(const Spec& spec, const Executable& exe) {
  Core core(spec);
  std::vector<uint64_t> addresses;
  addresses.reserve(exe.io.size());
  for (const IoTensor& t : exe.io) addresses.push_back(core.hbm_allocate(std::max<uint64_t>(t.bytes(), 1)));
  return core.run(exe, addresses, {.functional = false, .record = false}).duration_ns;
}

RunResult Core::run(const Executable& exe, std::span<const uint64_t> io_addresses,
                    const RunOptions& options) {
  if (!options.validated) validate_executable(exe, spec_);
  SIGHTLINE_CHECK(
      io_addresses.size() == exe.io.size(),
      "executable '{}' has {} I/O tensors but {} HBM addresses were bound; bind one per tensor in "
      "Executable::io order",
      exe.name, exe.io.size(), io_addresses.size());
  std::vector<HbmMemory::Span> io;
  io.reserve(exe.io.size());
  for (size_t i = 0; i < exe.io.size(); ++i) {
    if (exe.io[i].bytes() == 0) {  // an empty tensor: validation rejects every operand that touches it
      io.push_back({nullptr, nullptr});
      continue;
    }
    try {
      io.push_back(hbm_.span(io_addresses[i], exe.io[i].bytes()));
    } catch (const Error& e) {
      fail("executable '{}': I/O tensor '{}' ({} bytes) bound at {:#x}: {}", exe.name, exe.io[i].name,
           exe.io[i].bytes(), io_addresses[i], e.what());
    }
  }
  sbuf_.reset();
  psum_.reset();

  // The timing simulation records the issue order; the functional model then runs that order (its
  // result is what one instruction after another in that order computes, so a program whose semaphores
  // are right computes the same result whatever the costs are). Nothing the timing does depends on data.
  struct Issued {
    Engine engine;
    uint32_t queue;
    uint32_t index;
  };
  std::vector<const Instruction*> order;
  std::vector<Issued> issued;
  if (options.functional) {
    order.reserve(exe.instruction_count());
    issued.reserve(exe.instruction_count());
  }
  const IssueCallback on_issue = [&](const Instruction& in, Engine engine, uint32_t queue, uint32_t index) {
    if (!options.functional) return;
    order.push_back(&in);
    issued.push_back({engine, queue, index});
  };
  const auto run_functional = [&] {
    if (!options.functional) return;
    FunctionalExecutor executor(exe, sbuf_, psum_, std::move(io), functional_workspace_);
    executor.run(order, [&](size_t position, const Error& e) {
      const Issued& at = issued[position];
      const std::string stream =
          at.engine == Engine::dma ? fmt::format("dma queue {}", at.queue) : std::string(engine_name(at.engine));
      fail("executable '{}': {} instruction {} ({}): {}", exe.name, stream, at.index,
           opcode_name(order[position]->opcode), e.what());
    });
  };
  RunResult result;
  try {
    result = simulate(exe, spec_, on_issue, options.record);
  } catch (const Error&) {
    // The timing stopped the run (a deadlock, say): what was issued before it still ran, one instruction
    // at a time, and its first failure is the error of the run.
    run_functional();
    throw;
  }
  run_functional();
  return result;
}

double dma_copy_ns(const Spec& spec, uint64_t bytes, uint32_t queues) {
  queues = std::clamp<uint32_t>(queues, 1, spec.dma.queues);
  const double rate = std::min(spec.dma.queue_bytes_per_ns * queues, spec.hbm.bytes_per_ns);
  return spec.dma.fixed_cost_ns + static_cast<double>(bytes) / rate;
}

}  // namespace sightline::device
