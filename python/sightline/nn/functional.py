"""sightline.nn.functional: torch.nn.functional's names for the op table's functions."""

import warnings as _warnings

from .. import _sightline
from .. import rms_norm, layer_norm  # noqa: F401  (torch's signatures, in the package root)

relu = _sightline.relu
silu = _sightline.silu
sigmoid = _sightline.sigmoid
tanh = _sightline.tanh
linear = _sightline.linear

_warned_gelu = []


def gelu(input, approximate="none"):  # noqa: A002
    """aten::gelu. sightline computes the tanh approximation (approximate="tanh"); the default "none"
    (erf) is computed the same way, with a warning once."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "none" and not _warned_gelu:
        _warned_gelu.append(True)
        _warnings.warn("gelu: sightline computes the tanh approximation; pass approximate='tanh' to say so",
                       stacklevel=2)
    return _sightline.gelu(input)


def softmax(input, dim, dtype=None):  # noqa: A002
    out = _sightline.softmax(input, dim)
    return out if dtype is None else out.to(dtype)


def log_softmax(input, dim, dtype=None):  # noqa: A002
    out = _sightline.log_softmax(input, dim)
    return out if dtype is None else out.to(dtype)


def embedding(input, weight):  # noqa: A002
    """torch.nn.functional.embedding(input, weight): rows of weight picked by int32 indices."""
    return _sightline.embedding(weight, input)
