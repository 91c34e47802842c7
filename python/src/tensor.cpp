// Tensor, DType, Device and Generator, the factories, and the numpy bridge (include/sightline/tensor.h,
// dtype.h). Calls that may wait for a device (copies, item, printing) release the GIL.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "sightline/backend.h"
#include "sightline/dtype.h"
#include "sightline/error.h"
#include "sightline/ops.h"
#include "sightline/tensor.h"

namespace sightline::python {
namespace {

using release_gil = py::call_guard<py::gil_scoped_release>;

std::optional<py::dtype> numpy_dtype(DType t) {
  switch (t) {
    case DType::f32: return py::dtype::of<float>();
    case DType::f16: return py::dtype("float16");
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::bf16: return std::nullopt;  // numpy has no bfloat16
    case DType::boolean: return py::dtype::of<bool>();  // numpy's bool_: one byte, 0 or 1, as ours
  }
  return std::nullopt;
}

// torch.from_numpy: a cpu tensor with the array's dtype (float32, float16, int32) and shape. The data
// is copied (torch shares it; a sightline Storage owns memory of its backend's allocator).
Tensor from_numpy(const py::array& array) {
  DType dtype;
  if (array.dtype().is(py::dtype::of<float>())) {
    dtype = DType::f32;
  } else if (array.dtype().is(py::dtype("float16"))) {
    dtype = DType::f16;
  } else if (array.dtype().is(py::dtype::of<int32_t>())) {
    dtype = DType::i32;
  } else if (array.dtype().is(py::dtype::of<bool>())) {
    dtype = DType::boolean;
  } else {
    throw py::type_error("from_numpy: can't convert an array of dtype " + std::string(py::str(array.dtype())) +
                         "; sightline holds float32, float16, int32, bool (and bfloat16, which numpy lacks); "
                         "convert first, e.g. array.astype(numpy.float32)");
  }
  if (array.ndim() > kMaxDims) {
    throw py::value_error("from_numpy: a tensor has at most " + std::to_string(kMaxDims) + " dims, got " +
                          std::to_string(array.ndim()));
  }
  const auto contiguous = py::array::ensure(array, py::array::c_style);
  Dims shape;
  for (py::ssize_t i = 0; i < contiguous.ndim(); ++i) shape.push_back(contiguous.shape(i));
  Tensor out = empty(shape, dtype);
  if (out.nbytes() != 0) std::memcpy(out.raw_data(), contiguous.data(), out.nbytes());
  return out;
}

// Tensor.numpy(): an array that shares the cpu tensor's memory (strides and all), keeping it alive.
py::array to_numpy(const Tensor& t) {
  if (!t.defined()) throw py::value_error("numpy(): the tensor is undefined");
  if (!t.device().is_cpu()) {
    throw py::type_error("can't convert " + t.device().to_string() +
                         " device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.");
  }
  const std::optional<py::dtype> dtype = numpy_dtype(t.dtype());
  if (!dtype) {
    throw py::type_error("Got unsupported ScalarType BFloat16: numpy has no bfloat16; use Tensor.float() first");
  }
  std::vector<py::ssize_t> shape, strides;
  for (int i = 0; i < t.dim(); ++i) {
    shape.push_back(t.shape()[i]);
    strides.push_back(t.strides()[i] * static_cast<py::ssize_t>(t.element_size()));
  }
  py::capsule owner(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(*dtype, shape, strides, t.raw_data(), owner);
}

Device device_from(const py::handle& value) {
  if (py::isinstance<Device>(value)) return value.cast<Device>();
  if (py::isinstance<py::str>(value)) return Device::parse(value.cast<std::string>());
  throw py::type_error("expected a device (sightline.device or a string such as \"neuron:0\"), got " +
                       std::string(py::str(py::type::handle_of(value).attr("__name__"))));
}

TensorOptions options_from(const py::object& dtype, const py::object& device) {
  TensorOptions options;
  if (!dtype.is_none()) options.dtype = dtype.cast<DType>();
  if (!device.is_none()) options.device = device_from(device);
  return options;
}

Generator* generator_from(const py::object& generator) {
  return generator.is_none() ? nullptr : generator.cast<Generator*>();
}

// Tensor.to(...): torch's forms to(device), to(dtype), to(device, dtype), to(other), and the keywords.
Tensor tensor_to(const Tensor& self, const py::args& args, const py::kwargs& kwargs) {
  std::optional<Device> device;
  std::optional<DType> dtype;
  auto take = [&](const py::handle& value) {
    if (py::isinstance<DType>(value)) {
      dtype = value.cast<DType>();
    } else if (py::isinstance<Tensor>(value)) {
      const auto& other = value.cast<const Tensor&>();
      device = other.device();
      dtype = other.dtype();
    } else {
      device = device_from(value);
    }
  };
  for (const py::handle& a : args) take(a);
  for (const auto& [key, value] : kwargs) {
    const std::string k = py::str(key);
    if (k == "device") {
      if (!value.is_none()) device = device_from(value);
    } else if (k == "dtype") {
      if (!value.is_none()) dtype = value.cast<DType>();
    } else if (k != "non_blocking" && k != "copy") {
      throw py::type_error("to() got an unexpected keyword argument '" + k + "'");
    }
  }
  py::gil_scoped_release release;
  Tensor out = self;
  if (device && !(*device == out.device())) out = out.to(*device);
  if (dtype && *dtype != out.dtype()) out = out.to(*dtype);
  return out;
}

py::tuple shape_tuple(const Dims& dims) {
  py::tuple out(static_cast<size_t>(dims.size()));
  for (int i = 0; i < dims.size(); ++i) out[static_cast<size_t>(i)] = dims[i];
  return out;
}

}  // namespace

Dims dims_from(const py::handle& value, const char* what) {
  if (py::isinstance<py::int_>(value)) return Dims{value.cast<int64_t>()};
  if (!py::isinstance<py::sequence>(value) || py::isinstance<py::str>(value)) {
    throw py::type_error(std::string(what) + ": expected an int or a sequence of ints, got " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  }
  const auto seq = value.cast<py::sequence>();
  if (seq.size() > static_cast<size_t>(kMaxDims)) {
    throw py::value_error(std::string(what) + ": a tensor has at most " + std::to_string(kMaxDims) + " dims, got " +
                          std::to_string(seq.size()));
  }
  Dims dims;
  for (auto item : seq) {
    if (!py::isinstance<py::int_>(item)) {
      throw py::type_error(std::string(what) + ": expected ints, got " +
                           std::string(py::str(py::type::handle_of(item).attr("__name__"))));
    }
    dims.push_back(item.cast<int64_t>());
  }
  return dims;
}

Dims dims_from_args(const py::args& args, const char* what) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return dims_from(args[0], what);
  return dims_from(args, what);
}

void init_tensor(py::module_& m) {
  py::enum_<DType>(m, "DType")
      .value("f32", DType::f32)
      .value("bf16", DType::bf16)
      .value("f16", DType::f16)
      .value("i32", DType::i32)
      .value("boolean", DType::boolean)
      .def_property_readonly("itemsize", [](DType t) { return dtype_size(t); })
      .def_property_readonly("is_floating_point", [](DType t) { return dtype_is_floating(t); })
      .def_property_readonly("name", [](DType t) { return std::string(dtype_name(t)); });
  m.def("dtype_parse", [](const std::string& name) { return dtype_parse(name); });
  m.def("promote_types", [](DType a, DType b) { return dtype_promote(a, b); });

  py::class_<Device>(m, "Device")
      .def(py::init([](const std::string& text) { return Device::parse(text); }), py::arg("device"))
      .def(py::init([](const std::string& type, int index) {
             return Device::parse(type + ":" + std::to_string(index));
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return backend(d.backend).name(); })
      .def_property_readonly("index", [](const Device& d) { return d.index; })
      .def("__str__", &Device::to_string)
      .def("__repr__",
           [](const Device& d) {
             return "device(type='" + backend(d.backend).name() + "', index=" + std::to_string(d.index) + ")";
           })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; }, py::is_operator())
      .def(
          "__eq__",
          [](const Device& a, const std::string& b) {
            const Backend* named = find_backend(b.substr(0, b.find(':')));
            return named != nullptr && a == Device::parse(b);  // an unknown name is another device
          },
          py::is_operator())
      .def("__hash__", [](const Device& d) { return (static_cast<int>(d.backend) << 16) | d.index; });

  py::class_<Generator>(m, "Generator")
      .def(py::init<uint64_t>(), py::arg("seed") = 0x5eed)
      .def(
          "manual_seed",
          [](Generator& g, uint64_t seed) -> Generator& {
            g = Generator(seed);
            return g;
          },
          py::arg("seed"), py::return_value_policy::reference_internal)
      .def("next_u64", &Generator::next_u64)
      .def("next_uniform", &Generator::next_uniform)
      .def("next_normal", &Generator::next_normal);
  m.def("manual_seed", &manual_seed, py::arg("seed"));

  py::class_<Tensor> t(m, "Tensor");
  t.def_property_readonly("shape", [](const Tensor& x) { return shape_tuple(x.shape()); })
      .def("size",
           [](const Tensor& x, const py::object& dim) -> py::object {
             if (dim.is_none()) return shape_tuple(x.shape());
             return py::int_(x.size(dim.cast<int>()));
           },
           py::arg("dim") = py::none())
      .def("stride",
           [](const Tensor& x, const py::object& dim) -> py::object {
             if (dim.is_none()) return shape_tuple(x.strides());
             return py::int_(x.strides()[normalize_dim(dim.cast<int>(), x.dim(), "stride")]);
           },
           py::arg("dim") = py::none())
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("is_cpu", [](const Tensor& x) { return x.device().is_cpu(); })
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("element_size", &Tensor::element_size)
      .def("storage_offset", &Tensor::offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("defined", &Tensor::defined)
      .def("shares_storage", &Tensor::shares_storage)
      .def("describe", &Tensor::describe)
      .def("view", [](const Tensor& x, const py::args& shape) { return x.view(dims_from_args(shape, "view")); })
      .def("reshape",
           [](const Tensor& x, const py::args& shape) {
             const Dims dims = dims_from_args(shape, "reshape");
             py::gil_scoped_release release;
             return x.reshape(dims);
           })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("permute",
           [](const Tensor& x, const py::args& dims) { return x.permute(dims_from_args(dims, "permute")); })
      .def("_slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step") = 1)
      .def("expand", [](const Tensor& x, const py::args& shape) { return x.expand(dims_from_args(shape, "expand")); })
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("squeeze", &Tensor::squeeze, py::arg("dim"))
      .def("contiguous", &Tensor::contiguous, release_gil())
      .def("clone", &Tensor::clone, release_gil())
      .def("to", &tensor_to)
      .def("cpu", [](const Tensor& x) { return x.device().is_cpu() ? x : x.to(Device::cpu()); }, release_gil())
      .def("item",
           [](const Tensor& x) -> py::object {
             double v = 0;
             {
               py::gil_scoped_release release;
               v = x.item();
             }
             if (x.dtype() == DType::i32) return py::int_(static_cast<int64_t>(v));
             if (x.dtype() == DType::boolean) return py::bool_(v != 0);
             return py::float_(v);
           })
      .def("numpy", &to_numpy)
      .def("__repr__", &Tensor::to_string, release_gil())
      .def("__len__", [](const Tensor& x) {
        if (x.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return x.shape()[0];
      });

  m.def("from_numpy", &from_numpy, py::arg("ndarray"));
  m.def(
      "empty",
      [](const Dims& shape, const py::object& dtype, const py::object& device) {
        const TensorOptions o = options_from(dtype, device);
        py::gil_scoped_release release;
        return empty(shape, o);
      },
      py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "zeros",
      [](const Dims& shape, const py::object& dtype, const py::object& device) {
        const TensorOptions o = options_from(dtype, device);
        py::gil_scoped_release release;
        return zeros(shape, o);
      },
      py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "ones",
      [](const Dims& shape, const py::object& dtype, const py::object& device) {
        const TensorOptions o = options_from(dtype, device);
        py::gil_scoped_release release;
        return ones(shape, o);
      },
      py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "full",
      [](const Dims& shape, double value, const py::object& dtype, const py::object& device) {
        const TensorOptions o = options_from(dtype, device);
        py::gil_scoped_release release;
        return full(shape, value, o);
      },
      py::arg("size"), py::arg("fill_value"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def(
      "arange",
      [](double start, double end, double step, const py::object& dtype, const py::object& device) {
        const TensorOptions o = options_from(dtype, device);
        py::gil_scoped_release release;
        return arange(start, end, step, o);
      },
      py::arg("start"), py::arg("end"), py::arg("step") = 1.0, py::arg("dtype") = py::none(),
      py::arg("device") = py::none());
  m.def(
      "rand",
      [](const Dims& shape, const py::object& dtype, const py::object& device, const py::object& generator) {
        const TensorOptions o = options_from(dtype, device);
        Generator* g = generator_from(generator);
        py::gil_scoped_release release;
        return rand(shape, o, g);
      },
      py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("generator") = py::none());
  m.def(
      "randn",
      [](const Dims& shape, const py::object& dtype, const py::object& device, const py::object& generator) {
        const TensorOptions o = options_from(dtype, device);
        Generator* g = generator_from(generator);
        py::gil_scoped_release release;
        return randn(shape, o, g);
      },
      py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("generator") = py::none());
  m.def(
      "normal",
      [](double mean, double std, const Dims& shape, const py::object& dtype, const py::object& device,
         const py::object& generator) {
        const TensorOptions o = options_from(dtype, device);
        Generator* g = generator_from(generator);
        py::gil_scoped_release release;
        return normal(mean, std, shape, o, g);
      },
      py::arg("mean"), py::arg("std"), py::arg("size"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("generator") = py::none());
  m.def(
      "memory_allocated", [](const py::object& device) { return memory_allocated(device_from(device)); },
      py::arg("device"));
  m.def("backend_names", &backend_names);
  m.def(
      "synchronize_device",
      [](const py::object& device) {
        const Device d = device_from(device);
        py::gil_scoped_release release;
        synchronize(d);
      },
      py::arg("device"));
}

}  // namespace sightline::python
