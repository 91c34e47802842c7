#include <fmt/format.h>

#include "formats/neff.h"

namespace sightline::formats {
namespace {

using device::AccessPattern;
using device::Instruction;

std::string_view io_kind_name(device::IoKind kind) {
  switch (kind) {
    case device::IoKind::input:
      return "input";
    case device::IoKind::output:
      return "output";
    case device::IoKind::scratch:
      return "scratch";
  }
  return "?";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string operand_text(const device::Executable& exe, const AccessPattern& ap) {
  std::string dims;
  for (int d = 0; d < ap.dim_count && d < 4; ++d) {
    dims += fmt::format("{}{}:{}", d ? " " : "", ap.dims[d].size, ap.dims[d].stride);
  }
  if (ap.memory == device::Memory::hbm) {
    const std::string tensor = ap.tensor < exe.io.size() ? exe.io[ap.tensor].name : "?";
    return fmt::format("HBM[{} +{}B p{}x{} {} [{}]]", tensor, ap.offset, ap.partition_count,
                       ap.partition_stride, dtype_name(ap.dtype), dims);
  }
  return fmt::format("{}[p{}:{} +{}B {} [{}]]", device::memory_name(ap.memory), ap.partition_start,
                     ap.partition_start + ap.partition_count, ap.offset, dtype_name(ap.dtype), dims);
}

std::string instruction_text(const device::Executable& exe, const Instruction& in) {
  std::string s{device::opcode_name(in.opcode)};
  if (in.opcode == device::Opcode::activate) {
    s += fmt::format(" {}", device::act_func_name(in.act()));
  } else if (in.opcode == device::Opcode::tensor_tensor || in.opcode == device::Opcode::tensor_scalar ||
             in.opcode == device::Opcode::tensor_reduce ||
             in.opcode == device::Opcode::partition_all_reduce) {
    s += fmt::format(" {}", device::alu_op_name(in.alu()));
  }
  const std::pair<const char*, const AccessPattern*> operands[] = {
      {"dst", &in.dst}, {"src0", &in.src0}, {"src1", &in.src1}, {"aux", &in.aux}};
  for (const auto& [name, ap] : operands) {
    if (ap->present()) s += fmt::format(" {}={}", name, operand_text(exe, *ap));
  }
  if (in.imm0 != 0 || in.imm1 != 0) s += fmt::format(" imm=({}, {})", in.imm0, in.imm1);
  if (in.flags & device::kFlagAccumulate) s += " accumulate";
  if (in.flags & device::kFlagReverse) s += " reverse";
  if (in.flags & device::kFlagNegate) s += " negate";
  if (in.flags & device::kFlagBiasOperand) s += " bias=src1";
  for (const auto& w : in.waits) s += fmt::format(" wait(S[{}]>={})", w.semaphore, w.value);
  for (const auto& u : in.updates) s += fmt::format(" update(S[{}]{:+})", u.semaphore, u.delta);
  if (in.source_op != device::kNoSourceOp && in.source_op < exe.source_ops.size()) {
    s += fmt::format(" op={}", exe.source_ops[in.source_op]);
  }
  return s;
}

void dump_stream(std::string& out, const device::Executable& exe, const std::string& title,
                 const std::vector<Instruction>& stream) {
  if (stream.empty()) return;
  out += fmt::format("{} ({} instructions)\n", title, stream.size());
  for (size_t i = 0; i < stream.size(); ++i)
    out += fmt::format("  {:5}  {}\n", i, instruction_text(exe, stream[i]));
}

}  // namespace

std::string neff_dump(const device::Executable& exe) {
  std::string out = fmt::format("executable '{}'  ({})\n", exe.name, neff_file_name(exe));
  out += fmt::format("instructions: {}  semaphores: {}  dma queues: {}\n", exe.instruction_count(),
                     exe.semaphore_count, exe.dma_queues.size());
  out += "io tensors:\n";
  for (size_t i = 0; i < exe.io.size(); ++i) {
    const auto& t = exe.io[i];
    out += fmt::format("  [{}] {:6} {} {} {} ({} bytes)\n", i,
                       io_kind_name(t.kind), t.name, dtype_name(t.dtype),
                       shape_text(t.shape), t.bytes());
  }
  if (!exe.source_ops.empty()) {
    out += "source ops:\n";
    for (size_t i = 0; i < exe.source_ops.size(); ++i)
      out += fmt::format("  [{}] {}\n", i, exe.source_ops[i]);
  }
  if (!exe.metadata.empty()) {
    out += "metadata:\n";
    for (const auto& [k, v] : exe.metadata) out += fmt::format("  {} = {}\n", k, v);
  }
  for (int e = 0; e < device::kComputeEngineCount; ++e) {
    dump_stream(out, exe, fmt::format("stream {}", device::engine_name(static_cast<device::Engine>(e))),
                exe.engines[e]);
  }
  for (size_t q = 0; q < exe.dma_queues.size(); ++q) {
    dump_stream(out, exe, fmt::format("stream dma queue {}", q), exe.dma_queues[q]);
  }
  return out;
}

}  // namespace sightline::formats
