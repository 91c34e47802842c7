// The op table (include/sightline/ops.h) and its functions. The elementwise ops are bound generically
// from SIGHTLINE_OP_TABLE, as functions and as Tensor methods, so that an op added to the table is in
// Python without a line here; the ops with attributes (reductions, softmax, matmul, the norms, cat,
// embedding) go through their public functions. Every call releases the GIL: an op on a device may
// wait for a queue slot.
#include <string>
#include <string_view>
#include <vector>

#include <pybind11/stl.h>

#include "bindings.h"
#include "sightline/backend.h"
#include "sightline/ops.h"

namespace sightline::python {
namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;

// The table's enum names ("mul", "rsqrt"): the Python names of the ops.
constexpr std::string_view kOpIdNames[] = {
#define SIGHTLINE_PY_OP_NAME(id, name, arity, kind, rule, k, is_view, outputs) #id,
    SIGHTLINE_OP_TABLE(SIGHTLINE_PY_OP_NAME)
#undef SIGHTLINE_PY_OP_NAME
};
static_assert(std::size(kOpIdNames) == static_cast<size_t>(kOpCount));

Tensor optional_tensor(const py::object& value) {
  if (value.is_none()) return Tensor{};
  return value.cast<Tensor>();
}

Dims reduction_dims(const py::object& dim) {
  if (dim.is_none()) return Dims{};
  return dims_from(dim, "dim");
}

Tensor unary_op(OpId op, const Tensor& x) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {x};
  return dispatch(op, inputs, kNoAttrs);
}

Tensor binary_op(OpId op, const Tensor& a, const Tensor& b) {
  static const OpAttrs kNoAttrs;
  const Tensor inputs[] = {a, b};
  return dispatch(op, inputs, kNoAttrs);
}

// The tensor-scalar forms ops.h declares (add, sub, rsub, mul, div, the comparisons).
bool has_scalar_form(OpId op) {
  return op == OpId::add || op == OpId::sub || op == OpId::rsub || op == OpId::mul || op == OpId::div ||
         op_is_comparison(op);
}

Tensor binary_scalar_op(OpId op, const Tensor& a, double b) {
  OpAttrs attrs;
  attrs.scalar = b;
  attrs.has_scalar = true;
  const Tensor inputs[] = {a};
  return dispatch(op, inputs, attrs);
}

py::dict op_info_dict(const OpInfo& info) {
  py::dict d;
  d["name"] = std::string(kOpIdNames[static_cast<int>(info.id)]);
  d["profiler_name"] = std::string(info.name);
  d["arity"] = info.arity;
  d["kind"] = std::string(op_kind_name(info.kind));
  d["flops_per_element"] = info.flops_per_element;
  d["is_view"] = info.is_view;
  d["outputs"] = info.outputs;
  return d;
}

}  // namespace

void init_ops(py::module_& m) {
  py::list table;
  for (const OpInfo& info : kOpTable) table.append(op_info_dict(info));
  m.attr("op_table") = table;

  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  py::list generic;
  for (const OpInfo& info : kOpTable) {
    const OpId op = info.id;
    const std::string name(kOpIdNames[static_cast<int>(op)]);
    if (op == OpId::gelu) {  // torch's approximate="none" | "tanh"
      auto gelu_fn = [](const Tensor& x, const std::string& approximate) {
        py::gil_scoped_release release;
        return gelu(x, approximate);
      };
      m.def("gelu", gelu_fn, py::arg("input"), py::arg("approximate") = "none");
      t.def("gelu", gelu_fn, py::arg("approximate") = "none");
      generic.append(name);
    } else if (op_is_unary_elementwise(op) && op != OpId::pow) {  // pow takes its exponent as an attribute
      m.def(name.c_str(), [op](const Tensor& x) { return unary_op(op, x); }, py::arg("input"), release_gil());
      t.def(name.c_str(), [op](const Tensor& x) { return unary_op(op, x); }, release_gil());
      generic.append(name);
    } else if (op_is_binary_elementwise(op)) {
      m.def(name.c_str(), [op](const Tensor& a, const Tensor& b) { return binary_op(op, a, b); }, py::arg("input"),
            py::arg("other"), release_gil());
      t.def(name.c_str(), [op](const Tensor& a, const Tensor& b) { return binary_op(op, a, b); }, py::arg("other"),
            release_gil());
      if (has_scalar_form(op)) {
        m.def(name.c_str(), [op](const Tensor& a, double b) { return binary_scalar_op(op, a, b); },
              py::arg("input"), py::arg("other"), release_gil());
        t.def(name.c_str(), [op](const Tensor& a, double b) { return binary_scalar_op(op, a, b); },
              py::arg("other"), release_gil());
      }
      generic.append(name);
    }
  }
  m.attr("generic_ops") = generic;  // the names bound from the table above

  // Python operators, as ops.h's C++ operators define them (a scalar on the left: 2 - x is
  // rsub(x, 2), one aten::rsub as in torch; 2 / x is mul(reciprocal(x), 2)).
  t.def("__add__", [](const Tensor& a, const Tensor& b) { return a + b; }, py::is_operator(), release_gil())
      .def("__add__", [](const Tensor& a, double b) { return a + b; }, py::is_operator(), release_gil())
      .def("__radd__", [](const Tensor& a, double b) { return b + a; }, py::is_operator(), release_gil())
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return a - b; }, py::is_operator(), release_gil())
      .def("__sub__", [](const Tensor& a, double b) { return a - b; }, py::is_operator(), release_gil())
      .def("__rsub__", [](const Tensor& a, double b) { return b - a; }, py::is_operator(), release_gil())
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return a * b; }, py::is_operator(), release_gil())
      .def("__mul__", [](const Tensor& a, double b) { return a * b; }, py::is_operator(), release_gil())
      .def("__rmul__", [](const Tensor& a, double b) { return b * a; }, py::is_operator(), release_gil())
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return a / b; }, py::is_operator(), release_gil())
      .def("__truediv__", [](const Tensor& a, double b) { return a / b; }, py::is_operator(), release_gil())
      .def("__rtruediv__", [](const Tensor& a, double b) { return b / a; }, py::is_operator(), release_gil())
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::is_operator(),
           release_gil())
      .def("__pow__", [](const Tensor& a, double e) { return pow(a, e); }, py::is_operator(), release_gil())
      .def("__neg__", [](const Tensor& a) { return -a; }, release_gil())
      .def("__abs__", [](const Tensor& a) { return abs(a); }, release_gil());
  // The comparison operators, as torch's: elementwise bool tensors (x == y, x < 0.5, 0.5 < x).
  t.def("__eq__", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, py::is_operator(), release_gil())
      .def("__eq__", [](const Tensor& a, double b) { return eq(a, b); }, py::is_operator(), release_gil())
      .def("__ne__", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, py::is_operator(), release_gil())
      .def("__ne__", [](const Tensor& a, double b) { return ne(a, b); }, py::is_operator(), release_gil())
      .def("__lt__", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, py::is_operator(), release_gil())
      .def("__lt__", [](const Tensor& a, double b) { return lt(a, b); }, py::is_operator(), release_gil())
      .def("__le__", [](const Tensor& a, const Tensor& b) { return le(a, b); }, py::is_operator(), release_gil())
      .def("__le__", [](const Tensor& a, double b) { return le(a, b); }, py::is_operator(), release_gil())
      .def("__gt__", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, py::is_operator(), release_gil())
      .def("__gt__", [](const Tensor& a, double b) { return gt(a, b); }, py::is_operator(), release_gil())
      .def("__ge__", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, py::is_operator(), release_gil())
      .def("__ge__", [](const Tensor& a, double b) { return ge(a, b); }, py::is_operator(), release_gil());
  // Defining __eq__ drops the default hash; a tensor hashes by identity, as in torch.
  t.attr("__hash__") = py::module_::import("builtins").attr("object").attr("__hash__");

  // The ops with attributes, as functions and methods.
  auto sum_fn = [](const Tensor& x, const py::object& dim, bool keepdim) {
    const Dims dims = reduction_dims(dim);
    py::gil_scoped_release release;
    return sum(x, dims, keepdim);
  };
  auto mean_fn = [](const Tensor& x, const py::object& dim, bool keepdim) {
    const Dims dims = reduction_dims(dim);
    py::gil_scoped_release release;
    return mean(x, dims, keepdim);
  };
  auto amax_fn = [](const Tensor& x, const py::object& dim, bool keepdim) {
    const Dims dims = reduction_dims(dim);
    py::gil_scoped_release release;
    return amax(x, dims, keepdim);
  };
  auto softmax_fn = [](const Tensor& x, int64_t dim) { return softmax(x, dim); };
  auto log_softmax_fn = [](const Tensor& x, int64_t dim) { return log_softmax(x, dim); };
  auto cumsum_fn = [](const Tensor& x, int64_t dim) { return cumsum(x, dim); };
  // argmax(dim=None): the index into the flattened tensor, as torch.
  auto argmax_fn = [](const Tensor& x, const py::object& dim, bool keepdim) {
    if (dim.is_none()) {
      py::gil_scoped_release release;
      const Tensor flat = x.reshape({x.numel()});
      Tensor index = argmax(flat, 0);
      if (keepdim) index = index.reshape(Dims::filled(x.dim(), 1));
      return index;
    }
    const int64_t d = dim.cast<int64_t>();
    py::gil_scoped_release release;
    return argmax(x, d, keepdim);
  };
  auto pow_fn = [](const Tensor& x, double e) { return pow(x, e); };
  auto matmul_fn = [](const Tensor& a, const Tensor& b) { return matmul(a, b); };
  m.def("sum", sum_fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("mean", mean_fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("amax", amax_fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("softmax", softmax_fn, py::arg("input"), py::arg("dim"), release_gil());
  m.def("log_softmax", log_softmax_fn, py::arg("input"), py::arg("dim"), release_gil());
  m.def("cumsum", cumsum_fn, py::arg("input"), py::arg("dim"), release_gil());
  m.def("argmax", argmax_fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  // (values, indices); sightline.topk wraps it in torch.return_types.topk's named form.
  m.def(
      "_topk",
      [](const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
        TopkResult r = topk(x, k, dim, largest, sorted);
        return std::make_pair(std::move(r.values), std::move(r.indices));
      },
      py::arg("input"), py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true,
      release_gil());
  m.def("pow", pow_fn, py::arg("input"), py::arg("exponent"), release_gil());
  m.def("matmul", matmul_fn, py::arg("input"), py::arg("other"), release_gil());
  t.def("sum", sum_fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  t.def("mean", mean_fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  t.def("amax", amax_fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  t.def("softmax", softmax_fn, py::arg("dim"), release_gil());
  t.def("log_softmax", log_softmax_fn, py::arg("dim"), release_gil());
  t.def("cumsum", cumsum_fn, py::arg("dim"), release_gil());
  t.def("argmax", argmax_fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  t.def("pow", pow_fn, py::arg("exponent"), release_gil());
  t.def("matmul", matmul_fn, py::arg("other"), release_gil());

  m.def(
      "linear",
      [](const Tensor& x, const Tensor& weight, const py::object& bias) {
        const Tensor b = optional_tensor(bias);
        py::gil_scoped_release release;
        return linear(x, weight, b);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def(
      "_rms_norm",
      [](const Tensor& x, const py::object& weight, double eps) {
        const Tensor w = optional_tensor(weight);
        py::gil_scoped_release release;
        return rms_norm(x, w, eps);
      },
      py::arg("input"), py::arg("weight"), py::arg("eps"));
  m.def(
      "_scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const py::object& attn_mask, bool is_causal,
         const py::object& scale, bool enable_gqa) {
        const Tensor mask = optional_tensor(attn_mask);
        const std::optional<double> s = scale.is_none() ? std::nullopt : std::optional(scale.cast<double>());
        py::gil_scoped_release release;
        return scaled_dot_product_attention(q, k, v, mask, is_causal, s, enable_gqa);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask"), py::arg("is_causal"),
      py::arg("scale"), py::arg("enable_gqa"));
  m.def(
      "_layer_norm",
      [](const Tensor& x, const py::object& weight, const py::object& bias, double eps) {
        const Tensor w = optional_tensor(weight), b = optional_tensor(bias);
        py::gil_scoped_release release;
        return layer_norm(x, w, b, eps);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("eps"));
  m.def(
      "cat", [](const std::vector<Tensor>& tensors, int64_t dim) { return cat(tensors, dim); }, py::arg("tensors"),
      py::arg("dim") = 0, release_gil());
  m.def(
      "embedding", [](const Tensor& weight, const Tensor& indices) { return embedding(weight, indices); },
      py::arg("weight"), py::arg("indices"), release_gil());
  auto where_fn = [](const Tensor& cond, const Tensor& a, const Tensor& b) { return where(cond, a, b); };
  auto masked_fill_fn = [](const Tensor& x, const Tensor& mask, double value) { return masked_fill(x, mask, value); };
  m.def("where", where_fn, py::arg("condition"), py::arg("input"), py::arg("other"), release_gil());
  m.def("masked_fill", masked_fill_fn, py::arg("input"), py::arg("mask"), py::arg("value"), release_gil());
  t.def("where", [](const Tensor& x, const Tensor& cond, const Tensor& other) { return where(cond, x, other); },
        py::arg("condition"), py::arg("other"), release_gil());
  t.def("masked_fill", masked_fill_fn, py::arg("mask"), py::arg("value"), release_gil());
  auto select_fn = [](const Tensor& x, int dim, int64_t index) { return x.select(dim, index); };
  auto chunk_fn = [](const Tensor& x, int64_t chunks, int64_t dim) { return chunk(x, chunks, dim); };
  // torch.split(tensor, split_size_or_sections, dim)
  auto split_fn = [](const Tensor& x, const py::object& size_or_sections, int64_t dim) {
    if (py::isinstance<py::int_>(size_or_sections)) return split(x, size_or_sections.cast<int64_t>(), dim);
    return split(x, size_or_sections.cast<std::vector<int64_t>>(), dim);
  };
  m.def("select", select_fn, py::arg("input"), py::arg("dim"), py::arg("index"), release_gil());
  m.def("chunk", chunk_fn, py::arg("input"), py::arg("chunks"), py::arg("dim") = 0, release_gil());
  m.def("split", split_fn, py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  t.def("select", select_fn, py::arg("dim"), py::arg("index"), release_gil());
  t.def("chunk", chunk_fn, py::arg("chunks"), py::arg("dim") = 0, release_gil());
  t.def("split", split_fn, py::arg("split_size"), py::arg("dim") = 0);
}

}  // namespace sightline::python
