#include "kernels/eager.h"

#include <algorithm>

#include <fmt/format.h>

#include "device/core.h"
#include "kernels/eager_internal.h"
#include "sightline/error.h"

namespace sightline::kernels {
namespace {

std::string desc_key(const TensorDesc& t) {
  return fmt::format("{}{}/{}", dtype_name(t.dtype), t.shape, t.strides);
}

std::string kernel_name(OpId op, std::span<const TensorDesc> inputs, const TensorDesc& out) {
  std::string name(op_name(op));
  if (name.starts_with("aten::")) name = name.substr(6);
  for (const TensorDesc& t : inputs) name += fmt::format("_{}", desc_key(t));
  return name + fmt::format("_to_{}{}", dtype_name(out.dtype), out.shape);
}

// The checks every op application passes before its kernel is built.
const OpInfo& checked_op(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs) {
  const OpInfo& info = op_info(op);
  SIGHTLINE_CHECK(!info.is_view, "{} is a view op: it rewrites metadata and has no device kernel", info.name);
  SIGHTLINE_CHECK(op != OpId::copy,
                  "aten::copy_ has no eager device kernel: host<->device copies are the runtime's job");
  SIGHTLINE_CHECK(info.arity < 0 || inputs.size() <= static_cast<size_t>(std::max(info.arity, 0)),
                  "{} takes at most {} tensor inputs, got {}", info.name, info.arity, inputs.size());
  SIGHTLINE_CHECK(!(op_is_binary_elementwise(op) && attrs.has_scalar),
                  "{} with a host scalar reaches the device as two tensors: turn the scalar into a 0-dim "
                  "device tensor first",
                  info.name);
  return info;
}

}  // namespace

std::string eager_kernel_key(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                             const TensorDesc& out, const device::Spec& spec) {
  return fmt::format("{}|spec={}", eager_kernel_key(op, inputs, attrs, out), spec.identity());
}

std::string eager_kernel_key(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                             const TensorDesc& out) {
  std::string key = fmt::format("{}|", op_name(op));
  for (const TensorDesc& t : inputs) key += desc_key(t) + ";";
  key += "->" + desc_key(out);
  // Every attribute a kernel may read; the unread ones are zero by default and cost nothing.
  key += fmt::format("|s={}:{}|dims={}|k={}|d={},{}|sl={},{},{}|eps={}|t={}", attrs.scalar, attrs.has_scalar,
                     attrs.dims, attrs.keepdim, attrs.dim, attrs.dim1, attrs.start, attrs.end, attrs.step,
                     attrs.eps, dtype_name(attrs.dtype));
  if (attrs.is_causal || attrs.enable_gqa) key += fmt::format("|causal={}|gqa={}", attrs.is_causal, attrs.enable_gqa);
  if (attrs.approximate != GeluApproximate::none)
    key += fmt::format("|approximate={}", gelu_approximate_name(attrs.approximate));
  if (op == OpId::topk) key += fmt::format("|topk={},{},{}", attrs.k, attrs.largest, attrs.sorted);
  return key;
}

namespace {
// Matmul / linear: whether a product of few rows may run weight-stationary, and where to say it did.
struct GemmChoice {
  bool allow_weight_stationary = true;
  bool* weight_stationary = nullptr;
};
void emit_kernel(KernelBuilder& b, OpId op, std::span<const TensorDesc> inputs,
                 std::span<const uint32_t> input_tensors, const OpAttrs& attrs, const TensorDesc& out,
                 uint32_t out_tensor, const EagerHooks* hooks, std::span<const TensorDesc> more_out,
                 std::span<const uint32_t> more_out_tensors, GemmChoice gemm = {});
}  // namespace

device::Executable build_eager_kernel(OpId op, std::span<const TensorDesc> inputs, const OpAttrs& attrs,
                                      const TensorDesc& out, const device::Spec& spec,
                                      std::span<const TensorDesc> more_outputs) {
  const OpInfo& info = checked_op(op, inputs, attrs);
  SIGHTLINE_CHECK(more_outputs.size() + 1 == static_cast<size_t>(info.outputs),
                  "{} has {} output(s), got {} output descriptions", info.name, info.outputs, more_outputs.size() + 1);
  auto build = [&](GemmChoice gemm) {
    KernelBuilder b(spec, kernel_name(op, inputs, out));
    b.add_metadata("op", std::string(info.name));
    std::vector<uint32_t> input_io;
    for (size_t i = 0; i < inputs.size(); ++i) input_io.push_back(declare_input(b, fmt::format("in{}", i), inputs[i]));
    const uint32_t out_io = declare_output(b, "out", out);
    std::vector<uint32_t> more_io;
    for (size_t i = 0; i < more_outputs.size(); ++i) {
      more_io.push_back(declare_output(b, fmt::format("out{}", i + 1), more_outputs[i]));
    }
    emit_kernel(b, op, inputs, input_io, attrs, out, out_io, nullptr, more_outputs, more_io, gemm);
    return b.build();
  };
  bool weight_stationary = false;
  device::Executable exe = build({true, &weight_stationary});
  if (!weight_stationary) return exe;
  // The spec's costs chose weight-stationary on the Tensor engine's work per panel; a kernel on its own
  // also waits for its first loads and its last tile's chain (the copy of y^T, the transposes), which
  // that rule leaves out. So the kernel is built both ways and the faster kept, timed on the cost model
  // (a tie keeps the activation-stationary one). Built once per shape: the backend caches kernels.
  device::Executable other = build({false, nullptr});
  return device::timing_only_ns(spec, exe) < device::timing_only_ns(spec, other) ? std::move(exe) : std::move(other);
}

void emit_eager_kernel(KernelBuilder& b, OpId op, std::span<const TensorDesc> inputs,
                       std::span<const uint32_t> input_tensors, const OpAttrs& attrs, const TensorDesc& out,
                       uint32_t out_tensor, const EagerHooks* hooks) {
  SIGHTLINE_CHECK(op_info(op).outputs == 1,
                  "{} has {} outputs; a compiled graph holds ops of one output (it breaks the graph there)",
                  op_name(op), op_info(op).outputs);
  emit_kernel(b, op, inputs, input_tensors, attrs, out, out_tensor, hooks, {}, {});
}

namespace {

void emit_kernel(KernelBuilder& b, OpId op, std::span<const TensorDesc> inputs,
                 std::span<const uint32_t> input_tensors, const OpAttrs& attrs, const TensorDesc& out,
                 uint32_t out_tensor, const EagerHooks* hooks, std::span<const TensorDesc> more_out,
                 std::span<const uint32_t> more_out_tensors, GemmChoice gemm) {
  const OpInfo& info = checked_op(op, inputs, attrs);
  SIGHTLINE_CHECK(input_tensors.size() == inputs.size(), "{}: {} input tensors for {} input descriptions",
                  info.name, input_tensors.size(), inputs.size());
  // A caller that labels the attention kernel's phases names every instruction itself.
  if (!(hooks && hooks->attention_phase)) b.set_source_op(info.name);
  SIGHTLINE_CHECK(hooks == nullptr || info.kind == OpKind::matmul || info.kind == OpKind::normalization ||
                      op == OpId::scaled_dot_product_attention,
                  "{}: only matmul, linear, normalization and attention kernels take hooks", info.name);
  EagerContext c{b, op, inputs, attrs, out, {input_tensors.begin(), input_tensors.end()}, out_tensor, hooks};
  c.more_out = more_out;
  c.more_out_io.assign(more_out_tensors.begin(), more_out_tensors.end());
  c.allow_weight_stationary = gemm.allow_weight_stationary;
  c.weight_stationary = gemm.weight_stationary;
  switch (info.kind) {
    case OpKind::elementwise:
      if (op == OpId::fill) {
        build_fill(c);
      } else if (op_is_select(op)) {
        SIGHTLINE_CHECK(inputs.size() == static_cast<size_t>(info.arity), "{} needs {} tensor inputs, got {}",
                        info.name, info.arity, inputs.size());
        build_select(c);
      } else if (op == OpId::to_copy) {
        build_copy(c);
      } else if (op_is_binary_elementwise(op)) {
        SIGHTLINE_CHECK(inputs.size() == 2, "{} needs two tensor inputs, got {}", info.name, inputs.size());
        build_binary(c);
      } else {
        SIGHTLINE_CHECK(inputs.size() == 1, "{} needs one tensor input, got {}", info.name, inputs.size());
        build_unary(c);
      }
      break;
    case OpKind::reduction:
      SIGHTLINE_CHECK(inputs.size() == 1, "{} needs one tensor input, got {}", info.name, inputs.size());
      if (op == OpId::softmax || op == OpId::log_softmax) {
        build_softmax(c);
      } else if (op == OpId::cumsum) {
        build_cumsum(c);
      } else if (op == OpId::argmax) {
        build_argmax(c);
      } else if (op == OpId::topk) {
        build_topk(c);
      } else {
        build_reduction(c);
      }
      break;
    case OpKind::matmul:
      SIGHTLINE_CHECK(inputs.size() >= 2, "{} needs at least two tensor inputs, got {}", info.name,
                      inputs.size());
      if (op == OpId::matmul) {
        build_matmul(c);
      } else {
        build_linear(c);
      }
      break;
    case OpKind::normalization:
      SIGHTLINE_CHECK(!inputs.empty(), "{} needs its input tensor", info.name);
      if (op == OpId::rms_norm) {
        build_rms_norm(c);
      } else {
        build_layer_norm(c);
      }
      break;
    case OpKind::attention:
      SIGHTLINE_CHECK(inputs.size() >= 3, "{} needs query, key and value, got {} inputs", info.name, inputs.size());
      build_attention(c);
      break;
    case OpKind::movement:
      if (op == OpId::cat) {
        build_cat(c);
      } else if (op == OpId::embedding) {
        SIGHTLINE_CHECK(inputs.size() == 2, "aten::embedding needs weight and indices, got {} inputs",
                        inputs.size());
        build_embedding(c);
      } else {
        SIGHTLINE_CHECK(inputs.size() == 1, "{} needs one tensor input, got {}", info.name, inputs.size());
        build_copy(c);
      }
      break;
  }
}

}  // namespace

}  // namespace sightline::kernels
