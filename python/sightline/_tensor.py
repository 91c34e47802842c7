"""Tensor methods written in Python on top of the bound C++ ones: indexing, the dtype shorthands,
numpy interop, and torch's optional-argument forms (squeeze(), flatten, size arguments as *args)."""

import builtins

from . import _sightline
from ._sightline import DType, Tensor


def _size(size):
    """torch's size arguments: f(2, 3), f((2, 3)), f([2, 3]) and f(torch.Size) alike."""
    if len(size) == 1 and not isinstance(size[0], builtins.int):
        size = size[0]
    size = tuple(size)
    for s in size:
        if not isinstance(s, builtins.int):
            raise TypeError(f"size must be a sequence of ints, got an element of type {type(s).__name__}")
    return size


def _getitem(self, key):
    """x[i], x[a:b:c], x[..., None], x[i, :, j]: views (slice, squeeze, unsqueeze), as in torch."""
    if not isinstance(key, tuple):
        key = (key,)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([builtins.slice(None)] * (self.dim() - consumed))
        else:
            expanded.append(k)
    out = self
    dim = 0
    for k in expanded:
        if k is None:
            out = out.unsqueeze(dim)
            dim += 1
        elif isinstance(k, builtins.slice):
            start, stop, step = k.indices(out.shape[dim])
            if step <= 0:
                raise ValueError("step must be greater than zero")
            stop = builtins.max(stop, start)
            if (start, stop, step) != (0, out.shape[dim], 1):
                out = out._slice(dim, start, stop, step)
            dim += 1
        elif isinstance(k, builtins.int) or hasattr(k, "__index__"):
            i = k.__index__()
            n = out.shape[dim]
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            if i < 0:
                i += n
            out = out._slice(dim, i, i + 1).squeeze(dim)
        elif isinstance(k, Tensor):
            raise IndexError("indexing with a tensor is not supported; use sightline.embedding for gathers")
        else:
            raise IndexError(f"only integers, slices, ellipsis and None are valid indices, got {type(k).__name__}")
    return out


_squeeze_dim = Tensor.squeeze


def _squeeze(self, dim=None):
    if dim is not None:
        if isinstance(dim, (tuple, list)):
            out = self
            for d in sorted((d % self.dim() for d in dim), reverse=True):
                if out.shape[d] == 1:
                    out = _squeeze_dim(out, d)
            return out
        return _squeeze_dim(self, dim) if self.dim() and self.shape[dim] == 1 else self
    out = self
    for d in reversed(range(self.dim())):
        if out.shape[d] == 1:
            out = _squeeze_dim(out, d)
    return out


def _flatten(self, start_dim=0, end_dim=-1):
    if self.dim() == 0:
        return self.reshape(1)
    start, end = start_dim % self.dim(), end_dim % self.dim()
    shape = self.shape
    middle = 1
    for s in shape[start:end + 1]:
        middle *= s
    return self.reshape(shape[:start] + (middle,) + shape[end + 1:])


def _array(self, dtype=None, copy=None):
    array = self.cpu().numpy() if self.dtype != DType.bf16 else self.cpu().to(DType.f32).numpy()
    return array if dtype is None else array.astype(dtype)


def _tolist(self):
    return _array(self).tolist()


def _bool(self):
    if self.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return builtins.bool(self.item())


def _transpose_2d(self):
    if self.dim() > 2:
        raise RuntimeError(f".T is for tensors of at most 2 dims, got {self.dim()}; use permute")
    return self if self.dim() < 2 else self.transpose(0, 1)


def _type_as(self, other):
    return self.to(other.dtype)


Tensor.__getitem__ = _getitem
Tensor.squeeze = _squeeze
Tensor.flatten = _flatten
Tensor.__array__ = _array
Tensor.tolist = _tolist
Tensor.__bool__ = _bool
Tensor.__float__ = lambda self: builtins.float(self.item())
Tensor.__int__ = lambda self: builtins.int(self.item())
Tensor.__iter__ = lambda self: (self[i] for i in range(len(self)))
Tensor.T = property(_transpose_2d)
Tensor.float = lambda self: self.to(DType.f32)
Tensor.bfloat16 = lambda self: self.to(DType.bf16)
Tensor.half = lambda self: self.to(DType.f16)
Tensor.int = lambda self: self.to(DType.i32)
Tensor.bool = lambda self: self.to(DType.boolean)
Tensor.type_as = _type_as
Tensor.is_floating_point = lambda self: self.dtype.is_floating_point
Tensor.square = lambda self: self * self
Tensor.mm = Tensor.matmul
Tensor.t = _transpose_2d
Tensor.neuron = lambda self, device=0: self.to(_sightline.Device("neuron", device))
Tensor.requires_grad = False
Tensor.requires_grad_ = lambda self, requires_grad=True: self
Tensor.detach = lambda self: self
Tensor.grad = None
