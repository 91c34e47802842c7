#include "sightline/error.h"
#include "sightline/ops.h"

namespace sightline {

GeluApproximate gelu_approximate_parse(std::string_view name) {
  if (name == "none") return GeluApproximate::none;
  if (name == "tanh") return GeluApproximate::tanh;
  fail("aten::gelu: approximate must be 'none' (the exact erf form) or 'tanh', got '{}'", name);
}

std::string_view gelu_approximate_name(GeluApproximate a) { return a == GeluApproximate::tanh ? "tanh" : "none"; }

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::elementwise: return "elementwise";
    case OpKind::reduction: return "reduction";
    case OpKind::movement: return "movement";
    case OpKind::matmul: return "matmul";
    case OpKind::normalization: return "normalization";
    case OpKind::attention: return "attention";
  }
  return "?";
}

OpCost op_cost(const OpCall& call, const Tensor& out) {
  const OpInfo& info = op_info(call.op);
  OpCost cost;
  if (info.is_view) return cost;
  for (const Tensor& t : call.inputs) {
    if (t.defined()) cost.bytes += static_cast<double>(t.nbytes());
  }
  if (call.op == OpId::embedding && call.inputs.size() == 2) {
    // Only the gathered rows of the table are read, not the whole weight.
    cost.bytes -= static_cast<double>(call.inputs[0].nbytes());
    cost.bytes += static_cast<double>(out.nbytes());
  }
  cost.bytes += static_cast<double>(out.nbytes());
  for (const Tensor& t : call.more_outputs) {  // topk's indices
    if (t.defined()) cost.bytes += static_cast<double>(t.nbytes());
  }
  const double k = info.flops_per_element;
  switch (info.cost_rule) {
    case CostRule::per_output:
      cost.flops = k * static_cast<double>(out.numel());
      break;
    case CostRule::per_input:
      cost.flops = k * static_cast<double>(call.inputs[0].numel());
      break;
    case CostRule::matmul: {
      // out has [..., M, N] (or fewer dims for 1-D operands); K is the first input's last dim.
      const double k_dim = static_cast<double>(call.inputs[0].shape().back());
      cost.flops = 2.0 * static_cast<double>(out.numel()) * k_dim;
      if (call.inputs.size() > 2 && call.inputs[2].defined()) cost.flops += static_cast<double>(out.numel());
      break;
    }
    case CostRule::attention: {
      // out [..., L, Ev]; scores [..., L, S] with S key positions of E features.
      const Dims& kshape = call.inputs[1].shape();
      const double e = static_cast<double>(kshape.back()), s = static_cast<double>(kshape[kshape.size() - 2]);
      const double ev = static_cast<double>(out.shape().back());
      const double rows = ev > 0 ? static_cast<double>(out.numel()) / ev : 0.0;  // batch x heads x L
      cost.flops = rows * s * (2.0 * e + 2.0 * ev + k);
      break;
    }
    case CostRule::none:
      break;
  }
  return cost;
}

}  // namespace sightline
