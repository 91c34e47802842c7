#include "compiler/lower.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/view_meta.h"
#include "kernels/builder.h"
#include "kernels/eager.h"
#include "sightline/error.h"

namespace sightline::compiler {
namespace {

using kernels::TensorDesc;

constexpr std::string_view kConstantsPrefix = "constants.";

// Where a value lives in the program's HBM: an I/O tensor, an element offset into it and the view's
// shape and strides (a view op changes only these, as in eager mode).
struct Place {
  uint32_t io = 0;
  int64_t offset = 0;  // elements of desc.dtype
  TensorDesc desc;
};

// A tensor that carries a place's view metadata, for the view rules (never bound to memory).
Tensor view_of(const Place& p) {
  static const auto storage = std::make_shared<Storage>(Device::cpu(), 0, nullptr, nullptr, nullptr);
  return Tensor(storage, p.desc.dtype, p.desc.shape, p.desc.strides, p.offset);
}

Place place_of(uint32_t io, const Tensor& view) {
  return {io, view.offset(), {view.dtype(), view.shape(), view.strides()}};
}

// The place of a view op's result, or nullopt for a reshape that needs a copy first.
std::optional<Place> apply_view(OpId op, const OpAttrs& at, const Place& in) {
  const Tensor x = view_of(in);
  switch (op) {
    case OpId::view:
    case OpId::reshape: {
      const Dims shape = view_meta::infer_view_shape(at.dims, x.numel(), op_name(op), x.shape());
      const std::optional<Dims> strides = view_meta::view_strides(x, shape);
      if (!strides) return std::nullopt;
      return Place{in.io, in.offset, {in.desc.dtype, shape, *strides}};
    }
    case OpId::transpose:
      return place_of(in.io, view_meta::transpose(x, static_cast<int>(at.dim), static_cast<int>(at.dim1)));
    case OpId::permute:
      return place_of(in.io, view_meta::permute(x, at.dims));
    case OpId::slice:
      return place_of(in.io, view_meta::slice(x, static_cast<int>(at.dim), at.start, at.end, at.step));
    case OpId::expand:
      return place_of(in.io, view_meta::expand(x, at.dims));
    case OpId::unsqueeze:
      return place_of(in.io, view_meta::unsqueeze(x, static_cast<int>(at.dim)));
    case OpId::squeeze:
      return place_of(in.io, view_meta::squeeze(x, static_cast<int>(at.dim)));
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "{} is not a view op", op_name(op));
  return std::nullopt;
}

// Elementwise kernels take operands of the output dtype; the eager backend casts a promoted operand
// first, as its own op, and so does the lowering.
bool casts_inputs(OpId op) {
  return op_is_binary_elementwise(op) || (op_is_unary_elementwise(op) && op != OpId::fill);
}

bool takes_host_scalar(const Node& n) {
  return n.kind == NodeKind::op && op_is_binary_elementwise(n.op) && n.attrs.has_scalar;
}

std::vector<int64_t> to_vector(const Dims& dims) { return {dims.begin(), dims.end()}; }

std::string constants_io_name(DType dtype) { return fmt::format("const_{}", dtype_name(dtype)); }

class Lowerer {
 public:
  Lowerer(const device::Spec& spec, const std::string& name) : spec_(spec), builder_(spec, name) {}

  device::Executable run(const Graph& graph) {
    std::vector<Place> arguments(static_cast<size_t>(graph.input_count()));
    for (const Node& n : graph.nodes) {
      if (n.kind != NodeKind::input) continue;
      const uint32_t io =
          builder_.input(fmt::format("arg{}", n.input_index), n.meta.dtype, to_vector(n.meta.shape));
      arguments[static_cast<size_t>(n.input_index)] = {io, 0,
                                                       TensorDesc::contiguous(n.meta.dtype, n.meta.shape)};
    }
    std::vector<std::optional<Place>> results;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const TensorMeta& meta = graph.nodes[static_cast<size_t>(graph.outputs[k])].meta;
      const uint32_t io = builder_.output(fmt::format("out{}", k), meta.dtype, to_vector(meta.shape));
      results.push_back(Place{io, 0, TensorDesc::contiguous(meta.dtype, meta.shape)});
    }
    declare_constants(graph);
    lower_graph(graph, arguments, results);
    device::Executable exe = builder_.build();
    for (uint32_t io : scratch_ios_) exe.io[io].kind = device::IoKind::scratch;
    for (const auto& [dtype, values] : constants_) {
      exe.metadata.emplace_back(fmt::format("{}{}", kConstantsPrefix, constants_io_name(dtype)),
                                fmt::format("{}", fmt::join(values.list, ",")));
    }
    exe.metadata.emplace_back("compiled.kernels", fmt::format("{}", kernel_count_));
    return exe;
  }

 private:
  struct Constants {
    uint32_t io = 0;
    std::vector<double> list;
  };

  // One constants I/O tensor per dtype, sized up front (an I/O tensor's shape is fixed once declared).
  void declare_constants(const Graph& graph) {
    collect_constants(graph);
    for (auto& [dtype, c] : constants_) {
      c.io = builder_.input(constants_io_name(dtype), dtype, {static_cast<int64_t>(c.list.size())});
    }
  }

  void collect_constants(const Graph& graph) {
    for (const Node& n : graph.nodes) {
      if (n.kind == NodeKind::fused) collect_constants(*n.body);
      if (!takes_host_scalar(n)) continue;
      std::vector<double>& list = constants_[n.meta.dtype].list;
      if (std::find(list.begin(), list.end(), n.attrs.scalar) == list.end()) list.push_back(n.attrs.scalar);
    }
  }

  Place constant(double value, DType dtype) {
    const Constants& c = constants_.at(dtype);
    const auto it = std::find(c.list.begin(), c.list.end(), value);
    SIGHTLINE_ASSERT(it != c.list.end());
    return {c.io, it - c.list.begin(), {dtype, {}, {}}};
  }

  Place scratch(const TensorMeta& meta) {
    const uint32_t io =
        builder_.output(fmt::format("scratch{}", scratch_ios_.size()), meta.dtype, to_vector(meta.shape));
    scratch_ios_.push_back(io);
    return {io, 0, TensorDesc::contiguous(meta.dtype, meta.shape)};
  }

  // Lowers `graph` with its inputs at `inputs`. Output k is written to `results[k]` when that is set
  // (a contiguous tensor), else left where its producer put it. Returns the outputs' places.
  std::vector<Place> lower_graph(const Graph& graph, std::span<const Place> inputs,
                                 std::span<const std::optional<Place>> results) {
    // A kernel-producing output writes its result straight into the requested place; other outputs
    // (an argument returned as is, a view, a value returned twice) are copied there at the end.
    std::map<int, Place> destination;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const Node& n = graph.nodes[static_cast<size_t>(graph.outputs[k])];
      const bool produces = n.kind == NodeKind::fused || (n.kind == NodeKind::op && !op_info(n.op).is_view);
      if (results[k] && produces) destination.emplace(graph.outputs[k], *results[k]);
    }
    std::vector<Place> values(graph.nodes.size());
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Node& n = graph.nodes[i];
      std::optional<Place> dst;
      if (auto it = destination.find(static_cast<int>(i)); it != destination.end()) dst = it->second;
      std::vector<Place> operands;
      for (int v : n.inputs) {
        if (v != kNoValue) operands.push_back(values[static_cast<size_t>(v)]);
      }
      switch (n.kind) {
        case NodeKind::input:
          values[i] = inputs[static_cast<size_t>(n.input_index)];
          break;
        case NodeKind::fused: {
          const std::optional<Place> body_result[] = {dst};
          values[i] = lower_graph(*n.body, operands, body_result).front();
          break;
        }
        case NodeKind::op:
          if (!op_info(n.op).is_view) {
            values[i] = kernel(n.op, std::move(operands), n.attrs, n.meta, dst);
          } else if (std::optional<Place> view = apply_view(n.op, n.attrs, operands.front())) {
            values[i] = *view;
          } else {
            const Place& source = operands.front();
            const Place dense =
                kernel(OpId::contiguous, {source}, {}, {source.desc.shape, source.desc.dtype}, std::nullopt);
            values[i] = *apply_view(n.op, n.attrs, dense);
          }
          break;
      }
    }
    std::vector<Place> out;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      const Place& value = values[static_cast<size_t>(graph.outputs[k])];
      const bool in_place = results[k] && value.io == results[k]->io && value.offset == results[k]->offset;
      if (results[k] && !in_place) {
        out.push_back(
            kernel(OpId::contiguous, {value}, {}, {value.desc.shape, value.desc.dtype}, results[k]));
      } else {
        out.push_back(value);
      }
    }
    return out;
  }

  // Builds the eager kernel of one op application and merges it into the program.
  Place kernel(OpId op, std::vector<Place> operands, OpAttrs attrs, const TensorMeta& meta,
               const std::optional<Place>& dst) {
    if (casts_inputs(op)) {
      for (Place& p : operands) {
        if (p.desc.dtype == meta.dtype) continue;
        OpAttrs cast;
        cast.dtype = meta.dtype;
        p = kernel(OpId::to_copy, {p}, cast, {p.desc.shape, meta.dtype}, std::nullopt);
      }
    }
    if (op_is_binary_elementwise(op) && attrs.has_scalar) {
      operands.push_back(constant(attrs.scalar, meta.dtype));
      attrs.has_scalar = false;
    }
    const Place out = dst ? *dst : scratch(meta);
    std::vector<TensorDesc> descs;
    for (const Place& p : operands) descs.push_back(p.desc);
    device::Executable sub = kernels::build_eager_kernel(op, descs, attrs, out.desc, spec_);
    operands.push_back(out);
    merge(sub, operands, op);
    ++kernel_count_;
    return out;
  }

  // Re-emits `sub` (built by the kernel builder: stream s owns semaphore s, engines first, then DMA
  // queues) through the program's builder. Instructions go out in an order the sub-program's waits
  // allow, so the builder's hazard tracking sees every access in a valid sequential order and derives
  // the waits of the merged program, across sub-programs too.
  void merge(const device::Executable& sub, std::span<const Place> io_places, OpId op) {
    SIGHTLINE_ASSERT_MSG(sub.io.size() == io_places.size(), "kernel '{}' has {} I/O tensors, {} places",
                         sub.name, sub.io.size(), io_places.size());
    const size_t stream_count = device::kComputeEngineCount + sub.dma_queues.size();
    auto stream = [&](size_t s) -> const std::vector<device::Instruction>& {
      return s < device::kComputeEngineCount ? sub.engines[s]
                                             : sub.dma_queues[s - device::kComputeEngineCount];
    };
    std::vector<uint32_t> done(stream_count, 0);
    size_t remaining = sub.instruction_count();
    while (remaining > 0) {
      bool progressed = false;
      for (size_t s = 0; s < stream_count; ++s) {
        const std::vector<device::Instruction>& instructions = stream(s);
        while (done[s] < instructions.size() && ready(instructions[done[s]], done)) {
          emit(sub, instructions[done[s]], s, io_places, op);
          ++done[s];
          --remaining;
          progressed = true;
        }
      }
      SIGHTLINE_ASSERT_MSG(progressed, "kernel '{}': its semaphore waits never all hold", sub.name);
    }
  }

  static bool ready(const device::Instruction& in, const std::vector<uint32_t>& done) {
    for (const device::SemaphoreWait& w : in.waits) {
      if (w.semaphore >= done.size() || done[w.semaphore] < w.value) return false;
    }
    return true;
  }

  void emit(const device::Executable& sub, device::Instruction in, size_t stream,
            std::span<const Place> io_places, OpId op) {
    SIGHTLINE_ASSERT_MSG(
        in.updates.size() == 1 && size_t{in.updates[0].semaphore} == stream && in.updates[0].delta == 1,
        "kernel '{}': an instruction of stream {} does not count on semaphore {}", sub.name, stream, stream);
    in.waits.clear();
    in.updates.clear();
    builder_.set_source_op(
        in.source_op < sub.source_ops.size() ? std::string_view(sub.source_ops[in.source_op]) : op_name(op));
    in.source_op = device::kNoSourceOp;
    for (device::AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux}) {
      if (ap->memory != device::Memory::hbm) continue;
      const Place& p = io_places[ap->tensor];
      ap->tensor = p.io;
      ap->offset += static_cast<uint64_t>(p.offset) * dtype_size(p.desc.dtype);
    }
    const bool is_dma = stream >= static_cast<size_t>(device::kComputeEngineCount);
    builder_.emit(std::move(in), is_dma ? static_cast<int>(stream) - device::kComputeEngineCount : -1);
  }

  const device::Spec& spec_;
  kernels::KernelBuilder builder_;
  std::map<DType, Constants> constants_;
  std::vector<uint32_t> scratch_ios_;
  int kernel_count_ = 0;
};

bool parse_index(std::string_view text, std::string_view prefix, int& index) {
  if (!text.starts_with(prefix) || text.size() == prefix.size()) return false;
  const std::string_view digits = text.substr(prefix.size());
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  return error == std::errc() && end == digits.data() + digits.size();
}

}  // namespace

device::Executable lower(const Graph& graph, const device::Spec& spec, const std::string& name) {
  return Lowerer(spec, name).run(graph);
}

std::vector<IoBinding> io_bindings(const device::Executable& exe) {
  std::vector<IoBinding> bindings;
  for (const device::IoTensor& io : exe.io) {
    IoBinding b;
    const bool known = (io.kind == device::IoKind::input && parse_index(io.name, "arg", b.index)) ||
                       (io.kind == device::IoKind::output && parse_index(io.name, "out", b.index)) ||
                       (io.kind == device::IoKind::scratch && parse_index(io.name, "scratch", b.index)) ||
                       (io.kind == device::IoKind::input && io.name.starts_with("const_"));
    SIGHTLINE_CHECK(
        known,
        "executable '{}': I/O tensor '{}' is not one a compiled program declares (arg<i>, out<i>, "
        "const_<dtype>, scratch<i>); it was not made by compile()'s lowering",
        exe.name, io.name);
    b.role = io.kind == device::IoKind::output    ? IoRole::result
             : io.kind == device::IoKind::scratch ? IoRole::scratch
             : io.name.starts_with("const_")      ? IoRole::constants
                                                  : IoRole::argument;
    bindings.push_back(b);
  }
  return bindings;
}

std::vector<double> constant_values(const device::Executable& exe, const device::IoTensor& io) {
  const std::string key = fmt::format("{}{}", kConstantsPrefix, io.name);
  for (const auto& [k, text] : exe.metadata) {
    if (k != key) continue;
    std::vector<double> values;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find(',', begin);
      if (end == std::string::npos) end = text.size();
      values.push_back(std::stod(text.substr(begin, end - begin)));
      begin = end + 1;
    }
    SIGHTLINE_CHECK(static_cast<int64_t>(values.size()) == (io.shape.empty() ? 1 : io.shape[0]),
                    "executable '{}': metadata '{}' lists {} values for I/O tensor '{}' of shape [{}]",
                    exe.name, key, values.size(), io.name, fmt::join(io.shape, ", "));
    return values;
  }
  fail("executable '{}': no metadata '{}' gives the values of I/O tensor '{}'", exe.name, key, io.name);
}

}  // namespace sightline::compiler
