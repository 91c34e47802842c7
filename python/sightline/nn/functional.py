"""sightline.nn.functional: torch.nn.functional's names for the op table's functions."""

import math as _math

from .. import _sightline
from .. import rms_norm, layer_norm  # noqa: F401  (torch's signatures, in the package root)

relu = _sightline.relu
silu = _sightline.silu
sigmoid = _sightline.sigmoid
tanh = _sightline.tanh
linear = _sightline.linear



def gelu(input, approximate="none"):  # noqa: A002
    """aten::gelu: "none" (torch's default) is the exact form 0.5 x (1 + erf(x / sqrt(2))), "tanh" the
    tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _sightline.gelu(input, approximate=approximate)


def softmax(input, dim, dtype=None):  # noqa: A002
    out = _sightline.softmax(input, dim)
    return out if dtype is None else out.to(dtype)


def log_softmax(input, dim, dtype=None):  # noqa: A002
    out = _sightline.log_softmax(input, dim)
    return out if dtype is None else out.to(dtype)


def embedding(input, weight):  # noqa: A002
    """torch.nn.functional.embedding(input, weight): rows of weight picked by int32 indices."""
    return _sightline.embedding(weight, input)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """softmax(query @ key^T * scale [+ attn_mask]) @ value, from the table's matmul and softmax (no
    fused attention op: each step is its own aten:: op in the profile). attn_mask is additive."""
    if dropout_p:
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference only)")
    if is_causal:
        raise ValueError("scaled_dot_product_attention: is_causal is not supported; pass an additive attn_mask")
    if scale is None:
        scale = 1.0 / _math.sqrt(query.shape[-1])
    scores = _sightline.matmul(query, key.transpose(-2, -1)) * scale
    if attn_mask is not None:
        scores = scores + attn_mask
    return _sightline.matmul(_sightline.softmax(scores, -1), value)
