"""sightline.nn.functional: torch.nn.functional's names for the op table's functions."""

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


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention for inference: one fused aten::scaled_dot_product_attention
    (one executable on neuron; the scores stay on chip). attn_mask is bool (True = attend) or additive of the
    query's dtype; is_causal masks key j > query i; scale=None is 1/sqrt(E); enable_gqa lets key/value have
    fewer heads (dim -3) that divide the query's."""
    if dropout_p:
        raise ValueError("scaled_dot_product_attention: dropout_p must be 0 (inference only)")
    return _sightline._scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa)
