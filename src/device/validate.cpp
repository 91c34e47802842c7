#include "device/validate.h"

#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "sightline/error.h"

namespace sightline::device {
namespace {

enum class Need { none, optional, required };

struct OperandRule {
  Need dst = Need::none, src0 = Need::none, src1 = Need::none, aux = Need::none;
};

OperandRule rule_for(Opcode op) {
  switch (op) {
    case Opcode::matmul:
      return {Need::required, Need::required, Need::required, Need::none};
    case Opcode::tensor_tensor:
      return {Need::required, Need::required, Need::required, Need::none};
    case Opcode::tensor_scalar:
      return {Need::required, Need::required, Need::optional, Need::none};
    case Opcode::tensor_reduce:
    case Opcode::bn_stats:
    case Opcode::tensor_copy:
    case Opcode::partition_all_reduce:
    case Opcode::dma_copy:
      return {Need::required, Need::required, Need::none, Need::none};
    case Opcode::activate:
      return {Need::required, Need::required, Need::optional, Need::optional};
    case Opcode::dma_gather:
      return {Need::required, Need::required, Need::required, Need::none};
    case Opcode::iota:
      return {Need::required, Need::none, Need::none, Need::none};
    case Opcode::tensor_scan:
    case Opcode::max8:
      return {Need::required, Need::required, Need::none, Need::none};
    case Opcode::find_index8:
      return {Need::required, Need::required, Need::required, Need::none};
  }
  return {};
}

class Checker {
 public:
  Checker(const Executable& exe, const Spec& spec) : exe_(exe), spec_(spec) {}

  void stream(const std::vector<Instruction>& instrs, Engine engine, int queue) {
    for (size_t i = 0; i < instrs.size(); ++i) {
      // Where an error is, as plain data: formatted only when there is an error to report.
      where_ = {engine, queue, i, nullptr};
      instruction(instrs[i], engine);
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    std::string where = where_.queue < 0
                            ? fmt::format("{} instruction {}", engine_name(where_.engine), where_.index)
                            : fmt::format("dma queue {} instruction {}", where_.queue, where_.index);
    if (where_.opcode) where += fmt::format(" ({})", opcode_name(*where_.opcode));
    fail("executable '{}': {}: {}", exe_.name, where, fmt::format(format, std::forward<Args>(args)...));
  }

  void instruction(const Instruction& in, Engine engine) {
    if (static_cast<int>(in.opcode) >= kOpcodeCount) error("opcode {} does not exist", int(in.opcode));
    where_.opcode = &in.opcode;
    if ((in.flags & kFlagGpSimd) && !opcode_runs_on(in.opcode, Engine::gpsimd))
      error("only tensor_tensor and tensor_scalar can run on GpSimd (flag {})", int(kFlagGpSimd));
    if ((in.flags & kFlagNegate) && in.opcode != Opcode::tensor_reduce)
      error("only tensor_reduce negates its result (flag {})", int(kFlagNegate));
    if ((in.flags & kFlagBiasOperand) && (in.opcode != Opcode::activate || !in.src1.present()))
      error("the bias operand flag ({}) needs an activate with its bias column in src1", int(kFlagBiasOperand));
    if (in.engine() != engine) {
      error("{} runs on the {} engine, not in the {} stream", opcode_name(in.opcode),
            engine_name(in.engine()), engine_name(engine));
    }
    const bool uses_alu = in.opcode == Opcode::tensor_tensor || in.opcode == Opcode::tensor_scalar ||
                          in.opcode == Opcode::tensor_reduce || in.opcode == Opcode::partition_all_reduce ||
                          in.opcode == Opcode::tensor_scan;
    if (uses_alu && in.func >= kAluOpCount) error("ALU op {} does not exist", int(in.func));
    if (in.opcode == Opcode::activate && in.func >= kActFuncCount)
      error("activation {} does not exist", int(in.func));
    if ((in.opcode == Opcode::tensor_reduce || in.opcode == Opcode::partition_all_reduce) &&
        in.alu() != AluOp::add && in.alu() != AluOp::max && in.alu() != AluOp::min &&
        in.alu() != AluOp::multiply) {
      error("reductions take add, max, min or multiply, not {}", alu_op_name(in.alu()));
    }
    if (in.opcode == Opcode::tensor_scan && in.alu() != AluOp::add && in.alu() != AluOp::max &&
        in.alu() != AluOp::min) {
      error("tensor_scan takes add, max or min, not {}", alu_op_name(in.alu()));
    }
    for (const auto& w : in.waits) {
      if (w.semaphore >= exe_.semaphore_count) {
        error("waits on semaphore {} but the executable has {} semaphores", w.semaphore,
              exe_.semaphore_count);
      }
    }
    for (const auto& u : in.updates) {
      if (u.semaphore >= exe_.semaphore_count) {
        error("updates semaphore {} but the executable has {} semaphores", u.semaphore, exe_.semaphore_count);
      }
    }
    if (in.source_op != kNoSourceOp && in.source_op >= exe_.source_ops.size()) {
      error("source op index {} is outside the table of {} source ops", in.source_op, exe_.source_ops.size());
    }
    const OperandRule rule = rule_for(in.opcode);
    operand(in, in.dst, "dst", rule.dst, engine, true);
    operand(in, in.src0, "src0", rule.src0, engine, false);
    operand(in, in.src1, "src1", rule.src1, engine, false);
    operand(in, in.aux, "aux", rule.aux, engine, true);
    shapes(in);
  }

  void operand(const Instruction& in, const AccessPattern& ap, const char* name, Need need, Engine engine,
               bool is_dst) {
    if (!ap.present()) {
      if (need == Need::required) error("operand {} is missing", name);
      return;
    }
    if (need == Need::none) error("operand {} is set but {} does not take it", name, opcode_name(in.opcode));
    if (static_cast<int>(ap.memory) >= kMemoryCount)
      error("operand {}: memory {} does not exist", name, int(ap.memory));
    if (static_cast<int>(ap.dtype) >= kDTypeCount)
      error("operand {}: dtype {} does not exist", name, int(ap.dtype));
    if (ap.dim_count > 4) error("operand {}: {} free dims, at most 4", name, ap.dim_count);
    if (ap.partition_count == 0) error("operand {}: partition count is 0", name);
    for (int d = 0; d < ap.dim_count; ++d) {
      if (ap.dims[d].size == 0) error("operand {}: free dim {} has size 0", name, d);
    }
    // Sizes and strides come from files too: bound them in floating point before any integer math.
    double elements = ap.partition_count, reach = 0;
    const double es = static_cast<double>(dtype_size(ap.dtype));
    for (int d = 0; d < ap.dim_count; ++d) {
      elements *= ap.dims[d].size;
      reach += (ap.dims[d].size - 1.0) * std::fabs(static_cast<double>(ap.dims[d].stride)) * es;
    }
    reach += (ap.partition_count - 1.0) * std::fabs(static_cast<double>(ap.partition_stride)) * es;
    if (elements * es > static_cast<double>(std::numeric_limits<uint32_t>::max()) || reach > 0x1p60) {
      error("operand {}: more bytes than one instruction may move (4 GiB) or strides beyond any memory",
            name);
    }
    if (ap.offset > (uint64_t{1} << 60)) error("operand {}: offset {} beyond any memory", name, ap.offset);
    if (ap.bytes() > std::numeric_limits<uint32_t>::max()) {
      error("operand {}: {} bytes, more than one instruction may move (4 GiB)", name, ap.bytes());
    }
    memory_rules(ap, name, is_dst, engine);
    if (ap.memory == Memory::hbm) {
      if (ap.tensor >= exe_.io.size()) {
        error("operand {}: I/O tensor {} does not exist ({} I/O tensors)", name, ap.tensor, exe_.io.size());
      }
      const ByteExtent e = operand_extent(ap, true);
      const int64_t base = static_cast<int64_t>(ap.offset);
      const uint64_t tensor_bytes = exe_.io[ap.tensor].bytes();
      if (ap.offset > tensor_bytes || base + e.min < 0 ||
          static_cast<uint64_t>(base + e.max) > tensor_bytes) {
        error("operand {}: bytes [{}, {}) fall outside I/O tensor '{}' of {} bytes", name, base + e.min,
              base + e.max, exe_.io[ap.tensor].name, tensor_bytes);
      }
      return;
    }
    const uint32_t limit =
        ap.memory == Memory::sbuf ? spec_.sbuf_bytes_per_partition : spec_.psum_bytes_per_partition;
    if (uint32_t{ap.partition_start} + ap.partition_count > spec_.partitions) {
      error("operand {}: partitions [{}, {}) out of range; the core has {} partitions", name,
            ap.partition_start, ap.partition_start + ap.partition_count, spec_.partitions);
    }
    const ByteExtent e = operand_extent(ap, false);
    const int64_t base = static_cast<int64_t>(ap.offset);
    if (ap.offset > limit || base + e.min < 0 || base + e.max > int64_t{limit}) {
      error("operand {}: {} bytes [{}, {}) overflow the {} bytes of a partition", name,
            memory_name(ap.memory), base + e.min, base + e.max, limit);
    }
  }

  void memory_rules(const AccessPattern& ap, const char* name, bool is_dst, Engine engine) {
    if (engine == Engine::dma) {
      if (is_dst && ap.memory == Memory::psum)
        error("operand {}: DMA cannot write PSUM (only TensorE does)", name);
      return;
    }
    if (ap.memory == Memory::hbm) {
      error("operand {}: the {} engine reads and writes SBUF/PSUM only; move HBM data with dma_copy", name,
            engine_name(engine));
    }
    if (engine == Engine::gpsimd && ap.memory == Memory::psum)
      error("operand {}: GpSimd cannot reach PSUM", name);
    if (engine == Engine::tensor) {
      const Memory want = is_dst ? Memory::psum : Memory::sbuf;
      if (ap.memory != want) error("operand {}: matmul takes SBUF inputs and a PSUM output", name);
    }
  }

  void same_shape(const AccessPattern& a, const char* an, const AccessPattern& b, const char* bn) {
    if (a.partition_count != b.partition_count || a.free_elements() != b.free_elements()) {
      error("{} is [{}, {}] but {} is [{}, {}]; they must match", an, a.partition_count, a.free_elements(),
            bn, b.partition_count, b.free_elements());
    }
  }

  void per_partition(const AccessPattern& a, const char* an, const AccessPattern& like, uint64_t want) {
    if (a.partition_count != like.partition_count || a.free_elements() != want) {
      error("{} must be [{}, {}], got [{}, {}]", an, like.partition_count, want, a.partition_count,
            a.free_elements());
    }
  }

  void shapes(const Instruction& in) {
    switch (in.opcode) {
      case Opcode::matmul: {
        const uint64_t k = in.src0.partition_count, m = in.src0.free_elements(), n = in.src1.free_elements();
        if (in.src1.partition_count != k)
          error("stationary has {} partitions, moving {}", k, in.src1.partition_count);
        if (k > spec_.tensor.array_rows)
          error("contraction size {} exceeds {} array rows", k, spec_.tensor.array_rows);
        if (m > spec_.tensor.array_cols)
          error("stationary free size {} exceeds {} array columns", m, spec_.tensor.array_cols);
        if (n > spec_.tensor.moving_free_max)
          error("moving free size {} exceeds {}", n, spec_.tensor.moving_free_max);
        if (in.dst.partition_count != m || in.dst.free_elements() != n) {
          error("dst must be [{}, {}] (stationary free x moving free), got [{}, {}]", m, n,
                in.dst.partition_count, in.dst.free_elements());
        }
        if (in.dst.dtype != DType::f32)
          error("matmul accumulates in f32; dst dtype is {}", dtype_name(in.dst.dtype));
        const ByteExtent e = operand_extent(in.dst, false);
        const uint64_t bank = spec_.psum_bank_bytes();
        const uint64_t first = (in.dst.offset + e.min) / bank, last = (in.dst.offset + e.max - 1) / bank;
        if (first != last)
          error("dst PSUM bytes [{}, {}) cross a {}-byte bank boundary", in.dst.offset + e.min,
                in.dst.offset + e.max, bank);
        break;
      }
      case Opcode::tensor_tensor:
        same_shape(in.dst, "dst", in.src0, "src0");
        same_shape(in.src0, "src0", in.src1, "src1");
        break;
      case Opcode::tensor_scalar:
        same_shape(in.dst, "dst", in.src0, "src0");
        if (in.src1.present()) per_partition(in.src1, "scalar operand src1", in.src0, 1);
        break;
      case Opcode::tensor_reduce: {
        // Over the innermost free dims: dst holds one result per element of src0's outer dims (none: one).
        uint64_t outer = 1;
        bool found = in.dst.free_elements() == 1;
        for (int d = 0; d + 1 < in.src0.dim_count && !found; ++d) {
          outer *= in.src0.dims[d].size;
          found = in.dst.free_elements() == outer;
        }
        if (in.dst.partition_count != in.src0.partition_count || !found) {
          error("dst must be [{}, 1], or [{}, the product of src0's outer free dims] to reduce its innermost "
                "dims only; got [{}, {}]",
                in.src0.partition_count, in.src0.partition_count, in.dst.partition_count, in.dst.free_elements());
        }
        break;
      }
      case Opcode::bn_stats:
        per_partition(in.dst, "dst (mean, variance)", in.src0, 2);
        break;
      case Opcode::tensor_copy:
      case Opcode::dma_copy:
        same_shape(in.dst, "dst", in.src0, "src0");
        break;
      case Opcode::dma_gather:
        if (in.src0.memory != Memory::hbm) error("the gather table src0 must be in HBM");
        if (in.src1.memory != Memory::sbuf || in.src1.dtype != DType::i32)
          error("the row indices src1 must be an i32 SBUF tile");
        if (in.dst.free_elements() != in.src0.free_elements()) {
          error("dst rows have {} elements but table rows {}", in.dst.free_elements(),
                in.src0.free_elements());
        }
        per_partition(in.src1, "row indices src1", in.dst, 1);
        break;
      case Opcode::activate:
        same_shape(in.dst, "dst", in.src0, "src0");
        if (in.src1.present()) {
          per_partition(in.src1, (in.flags & kFlagBiasOperand) ? "bias operand src1" : "scale operand src1",
                        in.src0, 1);
        }
        if (in.aux.present()) per_partition(in.aux, "accumulator aux", in.src0, 1);
        break;
      case Opcode::partition_all_reduce:
        if (in.dst.free_elements() != in.src0.free_elements()) {
          error("dst free size {} differs from src0 free size {}", in.dst.free_elements(),
                in.src0.free_elements());
        }
        break;
      case Opcode::iota:
        break;
      case Opcode::tensor_scan:
        same_shape(in.dst, "dst", in.src0, "src0");
        break;
      case Opcode::max8:
      case Opcode::find_index8: {
        const uint64_t k = in.dst.free_elements();
        if (in.dst.partition_count != in.src0.partition_count || k < 1 || k > 8 || k > in.src0.free_elements()) {
          error("dst must be [{}, k] with 1 <= k <= 8 and k <= src0's free size {}, got [{}, {}]",
                in.src0.partition_count, in.src0.free_elements(), in.dst.partition_count, k);
        }
        if (in.opcode == Opcode::find_index8) per_partition(in.src1, "values src1", in.src0, k);
        break;
      }
    }
  }

  const Executable& exe_;
  const Spec& spec_;
  struct Where {
    Engine engine = Engine::dma;
    int queue = -1;
    size_t index = 0;
    const Opcode* opcode = nullptr;  // set once the opcode is known to exist
  } where_;
};

}  // namespace

ByteExtent operand_extent(const AccessPattern& ap, bool include_partitions) {
  const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
  ByteExtent e;
  auto widen = [&](int64_t count, int64_t stride_elements) {
    const int64_t reach = (count - 1) * stride_elements * es;
    if (reach < 0)
      e.min += reach;
    else
      e.max += reach;
  };
  for (int d = 0; d < ap.dim_count && d < 4; ++d) widen(ap.dims[d].size, ap.dims[d].stride);
  if (include_partitions) widen(ap.partition_count, ap.partition_stride);
  e.max += es;
  return e;
}

void validate_executable(const Executable& exe, const Spec& spec) {
  SIGHTLINE_CHECK(exe.dma_queues.size() <= spec.dma.queues,
                  "executable '{}': uses {} DMA queues but the {} core has {}", exe.name,
                  exe.dma_queues.size(), spec.name, spec.dma.queues);
  // Semaphore ids are 16-bit in the instruction encoding.
  SIGHTLINE_CHECK(exe.semaphore_count <= 65536, "executable '{}': {} semaphores, at most 65536", exe.name,
                  exe.semaphore_count);
  Checker c(exe, spec);
  for (int e = 0; e < kComputeEngineCount; ++e) c.stream(exe.engines[e], static_cast<Engine>(e), -1);
  for (size_t q = 0; q < exe.dma_queues.size(); ++q)
    c.stream(exe.dma_queues[q], Engine::dma, static_cast<int>(q));
}

}  // namespace sightline::device
