"""sightline: a C++ inference runtime with a simulated NeuronCore, from Python with torch's names.

A PyTorch script ports by changing its imports::

    import sightline as torch
    from sightline.profiler import profile, schedule, record_function, ProfilerActivity
    from sightline.neuron import NeuronConfig, NeuronProfiler

    x = torch.randn(4096, 4096, device="neuron")
    w = torch.ones(4096, device="neuron")
    y = torch.rms_norm(x, (4096,), w, eps=1e-6)

The extension module ``sightline._sightline`` binds the public C++ API (include/sightline/); this
package gives it torch's signatures. docs/python.md maps torch's names to sightline's and lists what
differs.
"""

import builtins as _builtins
import collections as _collections
import functools as _functools
import os as _os
import inspect as _inspect
import warnings as _warnings

from . import _sightline
from ._sightline import (  # noqa: F401  (the public names of the package)
    Device as device,
    DType as dtype,
    Error,
    Generator,
    Tensor,
    CompileStats,
    manual_seed,
    from_numpy,
    promote_types,
    dtype_parse,
    host_clock,
    op_table,
    # the ops with attributes (the elementwise ops are re-exported from the op table below)
    sum, mean, amax, softmax, log_softmax, cumsum, argmax, pow, matmul, linear, cat, embedding, where, masked_fill, select,
    chunk, split,
)
from . import _tensor  # noqa: F401  (adds the Python-side Tensor methods)

# with_stack: stacks start at the user's code, not inside this package.
_sightline._set_stack_package_dirs(sorted({
    _os.path.dirname(__file__) + _os.sep,
    _os.path.dirname(_os.path.abspath(__file__)) + _os.sep,
    _os.path.dirname(_os.path.realpath(__file__)) + _os.sep,
}))
from ._tensor import _size

Error.__module__ = "sightline"  # tracebacks say sightline.Error

# The elementwise ops, as _sightline binds them from SIGHTLINE_OP_TABLE: add, mul, rsqrt, silu, ...
for _name in _sightline.generic_ops:
    globals()[_name] = getattr(_sightline, _name)
del _name

__version__ = "0.1.0"

# ---- dtypes, with torch's names -------------------------------------------------------------------

float32 = float = dtype.f32
bfloat16 = dtype.bf16
float16 = half = dtype.f16
int32 = int = dtype.i32
bool = dtype.boolean  # noqa: A001  (torch.bool; the builtin is _builtins.bool in this module)

_DTYPE_NAMES = {dtype.f32: "float32", dtype.bf16: "bfloat16", dtype.f16: "float16", dtype.i32: "int32",
                dtype.boolean: "bool"}
dtype.__repr__ = lambda self: "sightline." + _DTYPE_NAMES[self]
dtype.__str__ = dtype.__repr__


class finfo:
    """torch.finfo for the floating dtypes: eps, max, min, tiny, bits."""

    _INFO = {
        dtype.f32: (32, 1.1920928955078125e-07, 3.4028234663852886e38, 1.1754943508222875e-38),
        dtype.bf16: (16, 0.0078125, 3.3895313892515355e38, 1.1754943508222875e-38),
        dtype.f16: (16, 0.0009765625, 65504.0, 6.103515625e-05),
    }

    def __init__(self, type=float32):  # noqa: A002  (torch's argument name)
        if type not in self._INFO:
            raise TypeError(f"finfo: {type!r} is not a floating point dtype")
        self.dtype = type
        self.bits, self.eps, self.max, self.tiny = self._INFO[type]
        self.min = -self.max


class _NoGrad:
    """torch.no_grad / inference_mode / enable_grad: sightline has no autograd, so these scopes (context
    managers and decorators) change nothing; they exist so that inference scripts port unchanged."""

    def __init__(self, mode=True):
        self.mode = mode

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper


no_grad = inference_mode = enable_grad = _NoGrad
Size = tuple  # Tensor.shape is a tuple, as torch.Size is one


def is_grad_enabled():
    return False


def get_default_dtype():
    return float32


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(input):  # noqa: A002
    return input.dtype.is_floating_point


def numel(input):  # noqa: A002
    return input.numel()


# ---- factories: torch's signatures --------------------------------------------------------------


def _device(device):
    return None if device is None else (device if isinstance(device, _sightline.Device) else _sightline.Device(str(device)))


def empty(*size, dtype=None, device=None, requires_grad=False):
    return _sightline.empty(_size(size), dtype=dtype, device=_device(device))


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return _sightline.zeros(_size(size), dtype=dtype, device=_device(device))


def ones(*size, dtype=None, device=None, requires_grad=False):
    return _sightline.ones(_size(size), dtype=dtype, device=_device(device))


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    if dtype is None and isinstance(fill_value, (_builtins.bool, type(1))):
        dtype = int32  # torch infers an integer dtype from an integer fill value
    return _sightline.full(_size((size,)), fill_value, dtype=dtype, device=_device(device))


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _sightline.rand(_size(size), dtype=dtype, device=_device(device), generator=generator)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _sightline.randn(_size(size), dtype=dtype, device=_device(device), generator=generator)


def normal(mean, std, size, *, generator=None, dtype=None, device=None, requires_grad=False):
    """torch.normal(mean, std, size): N(mean, std^2) for float mean and std, the values of
    randn(size) * std + mean in float32, bit for bit, in one pass (then converted to dtype)."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        raise TypeError("normal: only the normal(mean: float, std: float, size) form is supported; for tensor "
                        "means or stds write randn(size) * std + mean")
    return _sightline.normal(_builtins.float(mean), _builtins.float(std), _size((size,)), dtype=dtype,
                             device=_device(device), generator=generator)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, type(1)) for v in (start, end, step))
        dtype = int32 if ints else float32
    return _sightline.arange(start, end, step, dtype=dtype, device=_device(device))


def _like(fn, input, dtype, device, *args):  # noqa: A002
    return fn(input.shape, *args, dtype=dtype or input.dtype, device=device or input.device)


def empty_like(input, *, dtype=None, device=None):  # noqa: A002
    return _like(empty, input, dtype, device)


def zeros_like(input, *, dtype=None, device=None):  # noqa: A002
    return _like(zeros, input, dtype, device)


def ones_like(input, *, dtype=None, device=None):  # noqa: A002
    return _like(ones, input, dtype, device)


def full_like(input, fill_value, *, dtype=None, device=None):  # noqa: A002
    return full(input.shape, fill_value, dtype=dtype or input.dtype, device=device or input.device)


def rand_like(input, *, dtype=None, device=None):  # noqa: A002
    return _like(rand, input, dtype, device)


def randn_like(input, *, dtype=None, device=None):  # noqa: A002
    return _like(randn, input, dtype, device)


def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """torch.tensor: a copy of `data` (a nested list, a number, a numpy array or a Tensor).

    Python floats become float32, Python ints int32 (sightline has no 64-bit dtypes), bools bool."""
    if isinstance(data, Tensor):
        out = data.clone()
    else:
        import numpy as np

        array = np.asarray(data)
        if array.dtype.kind == "f" and array.dtype != np.float16:
            array = array.astype(np.float32)
        elif array.dtype.kind in "iu":
            if array.size and (array.max() > 2**31 - 1 or array.min() < -(2**31)):
                raise OverflowError("tensor(): integer values do not fit in int32")
            array = array.astype(np.int32)
        elif array.dtype.kind not in "fb":  # numpy bool stays bool, as torch.tensor([True]) is torch.bool
            raise TypeError(f"tensor(): can't make a tensor from data of numpy dtype {array.dtype}")
        out = from_numpy(array)
    if dtype is not None and dtype != out.dtype:
        out = out.to(dtype)
    if device is not None:
        out = out.to(device)
    return out


as_tensor = tensor


# ---- ops with torch's signatures ----------------------------------------------------------------


def _last_dim_only(name, input, normalized_shape):  # noqa: A002
    shape = (normalized_shape,) if isinstance(normalized_shape, type(1)) else tuple(normalized_shape)
    if len(shape) != 1 or input.dim() == 0 or shape[0] != input.shape[-1]:
        raise ValueError(
            f"{name}: normalized_shape must be the last dim of the input, ({input.shape[-1] if input.dim() else '?'},), "
            f"got {shape}; sightline normalizes over the last dim only")


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    """torch.rms_norm / torch.nn.functional.rms_norm over the last dim (aten::rms_norm, one fused op).

    eps=None is torch's default: finfo(input.dtype).eps."""
    _last_dim_only("rms_norm", input, normalized_shape)
    if eps is None:  # an integer input is refused by the op itself, with its message
        eps = finfo(input.dtype).eps if input.dtype.is_floating_point else 1e-6
    return _sightline._rms_norm(input, weight, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):  # noqa: A002
    """torch.layer_norm / torch.nn.functional.layer_norm over the last dim (aten::layer_norm)."""
    _last_dim_only("layer_norm", input, normalized_shape)
    return _sightline._layer_norm(input, weight, bias, eps)


def transpose(input, dim0, dim1):  # noqa: A002
    return input.transpose(dim0, dim1)


def permute(input, dims):  # noqa: A002
    return input.permute(dims)


def reshape(input, shape):  # noqa: A002
    return input.reshape(shape)


def unsqueeze(input, dim):  # noqa: A002
    return input.unsqueeze(dim)


def squeeze(input, dim=None):  # noqa: A002
    return input.squeeze(dim)


def flatten(input, start_dim=0, end_dim=-1):  # noqa: A002
    return input.flatten(start_dim, end_dim)


def concat(tensors, dim=0):
    return cat(tensors, dim)


concatenate = concat


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack expects a non-empty list of tensors")
    d = dim if dim >= 0 else dim + tensors[0].dim() + 1
    return cat([t.unsqueeze(d) for t in tensors], d)


mm = bmm = matmul


def clone(input):  # noqa: A002
    return input.clone()


def square(input):  # noqa: A002
    return input * input


def synchronize(device=None):
    """Waits for the queued work of `device` (default: every neuron core)."""
    if device is None:
        from . import neuron as _neuron

        _neuron.synchronize()
    else:
        _sightline.synchronize_device(_device(device))


def memory_allocated(device):
    return _sightline.memory_allocated(_device(device))


# ---- compile ------------------------------------------------------------------------------------

_BACKENDS = ("neuron", "inductor", "sightline")


class CompiledFunction:
    """What compile(fn) returns: calls run the captured, optimized program of their input signature."""

    def __init__(self, fn, *, optimize=True, cache_dir="", autocast="none", fullgraph=False,
                 substitute_builtins=False):
        try:
            params = _inspect.signature(fn).parameters.values()
            variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
            arity = -1 if variadic else len([p for p in params if p.default is p.empty])
        except (TypeError, ValueError):
            arity = -1
        self._fn = fn
        self._impl = _sightline.CompiledFunction(fn, optimize, cache_dir, arity, autocast, fullgraph,
                                                 substitute_builtins)
        _functools.update_wrapper(self, fn)

    def _inputs(self, args, kwargs):
        if kwargs:
            raise TypeError(f"compiled {self._fn.__name__}(): keyword arguments are not supported; pass tensors positionally")
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise TypeError(
                    f"compiled {self._fn.__name__}(): argument {i} is a {type(a).__name__}; compile() captures "
                    "functions of Tensors (make other values constants of the function)")
        return list(args)

    def __call__(self, *args, **kwargs):
        out = self._impl(self._inputs(args, kwargs))
        return out[0] if self._impl.returns_single else tuple(out)

    def stats(self):
        return self._impl.stats()

    def graph_dump(self, *args):
        """The optimized graph for the signature of `args` (compiling it if needed); with graph breaks,
        each graph and each break in order."""
        return self._impl.graph_dump(self._inputs(args, {}))

    def explain(self, *args):
        """torch._dynamo.explain for the signature of `args`: a CompileReport with graph_count,
        graph_break_count, op_count and breaks (each with op, reason, op_index, graph)."""
        return self._impl.explain(self._inputs(args, {}))


def compile(model=None, *, fullgraph=False, dynamic=None, backend="neuron", mode=None, options=None, disable=False):
    """torch.compile: capture `model` (a function of Tensors) and run it as one compiled program.

    Usable as @compile, @compile(backend="neuron") or compile(fn). On a neuron device each call is
    one device execution ("Torch-Compiled Region" in the profile). options: {"optimize": bool,
    "cache_dir": str, "autocast": "none" | "matmul_bf16", "substitute_builtins": bool} (CompileOptions in
    include/sightline/compile.h; "matmul_bf16": matmuls read bf16 operands and accumulate in f32, everything
    else stays f32; "substitute_builtins": replace naive forms of built-in fused ops, such as the RMSNorm
    chain, by the built-in instead of compiling the function's own ops).
    An op the graph cannot hold (topk) is a graph break: the graphs before and after it are compiled
    and it runs eagerly between them (explain() lists the breaks); fullgraph=True makes a break an
    error with its reason, as in torch."""
    if isinstance(backend, str) and backend not in _BACKENDS:
        raise ValueError(f"compile: unknown backend {backend!r}; sightline compiles for {', '.join(_BACKENDS)} "
                         "(one compiler: the device is the one the inputs are on)")
    if not isinstance(backend, str):
        raise TypeError("compile: backend must be a string (custom backends are not supported)")
    options = dict(options or {})
    optimize = _builtins.bool(options.pop("optimize", True))
    cache_dir = str(options.pop("cache_dir", ""))
    autocast = str(options.pop("autocast", "none"))
    substitute_builtins = _builtins.bool(options.pop("substitute_builtins", False))
    if options:
        raise ValueError(f"compile: unknown options {sorted(options)}; accepted: optimize, cache_dir, autocast, "
                         "substitute_builtins")

    def wrap(fn):
        if disable:
            return fn
        if not callable(fn):
            raise TypeError(f"compile: expected a callable, got {type(fn).__name__}")
        if hasattr(fn, "forward") and hasattr(fn, "parameters"):
            _warnings.warn("compile: an nn.Module is captured through its __call__; its parameters are "
                           "tensors of the enclosing scope, which capture refuses: pass them as arguments")
        return CompiledFunction(fn, optimize=optimize, cache_dir=cache_dir, autocast=autocast,
                                fullgraph=_builtins.bool(fullgraph), substitute_builtins=substitute_builtins)

    if model is None:
        return wrap
    return wrap(model)


# ---- topk ---------------------------------------------------------------------------------------

class _TopkReturn(_collections.namedtuple("topk", ["values", "indices"])):
    """torch.return_types.topk: a (values, indices) tuple with named fields."""
    __slots__ = ()


class return_types:  # noqa: N801  (torch.return_types)
    topk = _TopkReturn


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002  (torch's argument names)
    """torch.topk: the k largest (or smallest) values along dim and their indices (int32; torch's int64).
    Equal values come in ascending index order."""
    return _TopkReturn(*_sightline._topk(input, k, dim, largest, sorted))


Tensor.topk = lambda self, k, dim=-1, largest=True, sorted=True: topk(self, k, dim, largest, sorted)


from . import neuron, profiler, nn  # noqa: E402,F401
