"""sightline.nn: a small torch.nn (Module, Linear, RMSNorm, LayerNorm, Embedding, activations,
Sequential, ModuleList) for writing models in Python. Inference only: there is no autograd."""

import math as _math

from .. import _sightline
from . import functional  # noqa: F401
from .. import Tensor, empty, ones, zeros, rand, randn, rms_norm, layer_norm


class Parameter:
    """torch.nn.Parameter(t) is the tensor itself here (no autograd)."""

    def __new__(cls, data, requires_grad=True):
        return data


class Module:
    """torch.nn.Module: attributes that are Tensors are parameters, Modules are children."""

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", False)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Tensor):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def named_parameters(self, prefix=""):
        for name, p in self._parameters.items():
            yield prefix + name, p
        for name, m in self._modules.items():
            yield from m.named_parameters(prefix + name + ".")

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def children(self):
        return iter(self._modules.values())

    def _apply(self, fn):
        for name, p in list(self._parameters.items()):
            setattr(self, name, fn(p))
        for m in self._modules.values():
            m._apply(fn)
        return self

    def to(self, *args, **kwargs):
        return self._apply(lambda t: t.to(*args, **kwargs))

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def eval(self):
        return self

    def train(self, mode=True):
        if mode:
            raise ValueError("sightline is an inference runtime: there is no training mode")
        return self

    def requires_grad_(self, requires_grad=True):
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


def _uniform(shape, bound, device, dtype, generator=None):
    return (rand(*shape, generator=generator) * (2 * bound) - bound).to(device or "cpu").to(dtype or _sightline.DType.f32)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, generator=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / _math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound, device, dtype, generator)
        self.bias = _uniform((out_features,), bound, device, dtype, generator) if bias else None

    def forward(self, x):
        return _sightline.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = ones(*self.normalized_shape, device=device, dtype=dtype) if elementwise_affine else None

    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = ones(*self.normalized_shape, device=device, dtype=dtype) if elementwise_affine else None
        self.bias = zeros(*self.normalized_shape, device=device, dtype=dtype) if elementwise_affine and bias else None

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None, generator=None):
        super().__init__()
        self.weight = randn(num_embeddings, embedding_dim, generator=generator).to(device or "cpu")
        if dtype is not None:
            self.weight = self.weight.to(dtype)

    def forward(self, indices):
        return _sightline.embedding(self.weight, indices)


class _Activation(Module):
    _fn = None

    def forward(self, x):
        return type(self)._fn(x)


class ReLU(_Activation):
    _fn = staticmethod(_sightline.relu)


class SiLU(_Activation):
    _fn = staticmethod(_sightline.silu)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return functional.gelu(x, self.approximate)


class Sigmoid(_Activation):
    _fn = staticmethod(_sightline.sigmoid)


class Tanh(_Activation):
    _fn = staticmethod(_sightline.tanh)


class Softmax(Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _sightline.softmax(x, self.dim)


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        setattr(self, str(len(self._modules)), m)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)
