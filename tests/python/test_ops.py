"""The op table from Python, checked against numpy on the cpu reference and on the simulated
NeuronCore (small shapes: each neuron op is one simulated executable)."""

import math

import numpy as np
import pytest

import sightline as torch
from sightline import _sightline
import sightline.nn.functional as F

DEVICES = ["cpu", "neuron"]
RNG = np.random.default_rng(5)
A = RNG.standard_normal((4, 32)).astype(np.float32)
B = RNG.standard_normal((4, 32)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
_erf = np.vectorize(math.erf)

UNARY = {
    "neg": (np.negative, A), "abs": (np.abs, A), "exp": (np.exp, A), "log": (np.log, POS),
    "sqrt": (np.sqrt, POS), "rsqrt": (lambda v: 1 / np.sqrt(v), POS), "reciprocal": (lambda v: 1 / v, POS),
    "tanh": (np.tanh, A), "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), A), "relu": (lambda v: np.maximum(v, 0), A),
    "silu": (lambda v: v / (1 + np.exp(-v)), A),
    "gelu": (lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))), A),  # torch's default, approximate="none"
    "erf": (_erf, A), "sin": (np.sin, A), "cos": (np.cos, A),
}
BINARY = {"add": np.add, "sub": np.subtract, "rsub": lambda a, b: b - a, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}
COMPARISONS = {"eq": ("__eq__", np.equal), "ne": ("__ne__", np.not_equal), "lt": ("__lt__", np.less),
               "le": ("__le__", np.less_equal), "gt": ("__gt__", np.greater), "ge": ("__ge__", np.greater_equal)}


def close(actual, expected, tol=2e-5):
    np.testing.assert_allclose(actual.cpu().numpy(), expected, rtol=tol, atol=tol)


def test_every_elementwise_op_of_the_table_is_bound():
    table = {op["name"] for op in torch.op_table if op["kind"] == "elementwise" and op["arity"] in (1, 2)}
    assert table - {"pow", "to_copy", "masked_fill"} == set(_sightline.generic_ops)  # masked_fill: below
    # so the numeric checks cover them all
    assert set(UNARY) | set(BINARY) | set(COMPARISONS) == set(_sightline.generic_ops)
    assert {op["profiler_name"] for op in torch.op_table} >= {"aten::mul", "aten::rms_norm", "aten::view"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_numpy(device, name):
    fn, data = UNARY[name]
    x = torch.from_numpy(data).to(device)
    close(getattr(torch, name)(x), fn(data), tol=1e-4)
    close(getattr(x, name)(), fn(data), tol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_match_numpy_with_broadcast(device, name):
    x, y = torch.from_numpy(A).to(device), torch.from_numpy(B[:1]).to(device)
    close(getattr(torch, name)(x, y), BINARY[name](A, B[:1]))


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_forms_and_rsub_scalar(device):
    x = torch.from_numpy(A).to(device)
    tanh_form = 0.5 * A * (1 + np.tanh(math.sqrt(2 / math.pi) * (A + 0.044715 * A**3)))
    close(F.gelu(x, approximate="tanh"), tanh_form, tol=1e-4)
    close(x.gelu(approximate="tanh"), tanh_form, tol=1e-4)
    close(F.gelu(x), 0.5 * A * (1 + _erf(A / math.sqrt(2))), tol=1e-4)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(x, approximate="fast")
    close(torch.rsub(x, 2.0), 2.0 - A)
    close(x.rsub(2.0), 2.0 - A)


@pytest.mark.parametrize("device", DEVICES)
def test_operators_and_scalars(device):
    x, y = torch.from_numpy(A).to(device), torch.from_numpy(POS).to(device)
    close(x + y, A + POS)
    close(x - y, A - POS)
    close(x * y, A * POS)
    close(x / y, A / POS)
    close(x + 2, A + 2)
    close(3 * x, 3 * A)
    close(1 - x, 1 - A)
    close(2 / y, 2 / POS, tol=1e-4)
    close(-x, -A)
    close(abs(x), np.abs(A))
    close(y ** 2, POS ** 2, tol=1e-4)
    close(x @ y.T, A @ POS.T, tol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_reductions_and_softmax(device):
    x = torch.from_numpy(A).to(device)
    close(x.mean(-1, keepdim=True), A.mean(-1, keepdims=True))
    close(x.sum(0), A.sum(0), tol=1e-4)
    close(torch.sum(x), np.array(A.sum()), tol=1e-4)
    close(x.amax((0, 1)), np.array(A.max()))
    e = np.exp(A - A.max(-1, keepdims=True))
    close(x.softmax(-1), e / e.sum(-1, keepdims=True))
    close(F.log_softmax(x, dim=1), np.log(e / e.sum(-1, keepdims=True)), tol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_norms_with_torch_signatures(device):
    x, w, b = (torch.from_numpy(v).to(device) for v in (A, B[0], B[1]))
    rms = A / np.sqrt((A * A).mean(-1, keepdims=True) + 1e-6) * B[0]
    close(torch.rms_norm(x, (32,), w, eps=1e-6), rms, tol=1e-4)
    close(F.rms_norm(x, [32], w, 1e-6), rms, tol=1e-4)
    default_eps = A / np.sqrt((A * A).mean(-1, keepdims=True) + np.finfo(np.float32).eps)
    close(torch.rms_norm(x, (32,)), default_eps, tol=1e-4)  # eps=None is torch's finfo(dtype).eps
    mu, var = A.mean(-1, keepdims=True), A.var(-1, keepdims=True)
    close(torch.layer_norm(x, (32,), w, b), (A - mu) / np.sqrt(var + 1e-5) * B[0] + B[1], tol=1e-4)
    with pytest.raises(ValueError, match="last dim"):
        torch.rms_norm(x, (4, 32), w)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_linear_cat_embedding(device):
    x, wt = torch.from_numpy(A).to(device), torch.from_numpy(B[:, :16].T.copy()).to(device)
    close(torch.matmul(x[:, :4], wt[:4]), A[:, :4] @ B[:, :16].T[:4], tol=1e-4)
    weight = torch.from_numpy(B[:, :8].copy()).to(device)  # [out=4, in=8]
    bias = torch.from_numpy(B[0, :4].copy()).to(device)
    close(F.linear(x[:, :8], weight, bias), A[:, :8] @ B[:, :8].T + B[0, :4], tol=1e-4)
    close(torch.cat([x, x], 0), np.concatenate([A, A], 0))
    close(torch.stack([x, x], 1), np.stack([A, A], 1))
    idx = torch.tensor([[3, 0], [1, 1]]).to(device)
    close(F.embedding(idx, x), A[[[3, 0], [1, 1]]])


def test_bf16_rounds_like_torch():
    x = torch.tensor([1.0 + 2**-9, 1.0 + 3 * 2**-9])
    assert x.bfloat16().float().tolist() == [1.0, 1.0 + 2**-7]  # round to nearest, ties to even


def test_shape_and_dtype_errors_name_the_op():
    with pytest.raises(torch.Error, match="aten::matmul"):
        torch.ones(2, 3) @ torch.ones(4, 5)
    with pytest.raises(torch.Error, match="aten::rms_norm"):
        torch.rms_norm(torch.ones(2, 3), (3,), torch.ones(4))
    with pytest.raises(torch.Error, match=r"aten::rms_norm: expected a floating-point tensor .*got i32\[2, 4\]"):
        torch.rms_norm(torch.ones(2, 4, dtype=torch.int32), (4,))
    with pytest.raises(torch.Error, match="aten::matmul: operands must have the same dtype"):
        torch.ones(2, 3) @ torch.ones(3, 2, dtype=torch.int32)
    with pytest.raises(torch.Error, match="aten::embedding: indices must be i32"):
        torch.embedding(torch.ones(4, 2), torch.ones(3))
    with pytest.raises(torch.Error, match="different devices"):
        torch.ones(2, device="neuron") + torch.ones(2)
    with pytest.raises(TypeError):
        torch.exp(3.0)


def _sdpa_numpy(q, k, v, bias, scale):
    scores = q @ np.swapaxes(k, -1, -2) * scale + bias
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("device", DEVICES)
def test_scaled_dot_product_attention(device):
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((2, 8, 16)).astype(np.float32) for _ in range(3))
    causal = np.where(np.tril(np.ones((8, 8))) > 0, 0.0, -np.inf).astype(np.float32)
    args = [torch.from_numpy(a).to(device) for a in (q, k, v, np.where(causal == 0, 0.0, -1e9).astype(np.float32))]
    expected = _sdpa_numpy(q, k, v, causal, 0.25)
    close(F.scaled_dot_product_attention(*args[:3], attn_mask=args[3]), expected, tol=1e-4)
    close(F.scaled_dot_product_attention(*args[:3], is_causal=True), expected, tol=1e-4)
    keep = torch.from_numpy(np.tril(np.ones((8, 8), dtype=np.float32))).to(device) > 0
    close(F.scaled_dot_product_attention(*args[:3], attn_mask=keep, scale=0.5), _sdpa_numpy(q, k, v, causal * 1, 0.5),
          tol=1e-4)
    close(torch.bmm(args[0], args[1].transpose(1, 2)), q @ k.transpose(0, 2, 1), tol=1e-4)
    # Grouped-query attention: 4 query heads over 2 key/value heads, as repeat_interleave(2, dim=-3).
    gq = rng.standard_normal((1, 4, 5, 8)).astype(np.float32)
    gk, gv = (rng.standard_normal((1, 2, 6, 8)).astype(np.float32) for _ in range(2))
    out = F.scaled_dot_product_attention(*(torch.from_numpy(a).to(device) for a in (gq, gk, gv)), enable_gqa=True)
    close(out, _sdpa_numpy(gq, np.repeat(gk, 2, axis=1), np.repeat(gv, 2, axis=1), 0.0, 8 ** -0.5), tol=1e-4)
    with pytest.raises(torch.Error, match="enable_gqa=true or repeat k and v"):
        F.scaled_dot_product_attention(*(torch.from_numpy(a).to(device) for a in (gq, gk, gv)))


@pytest.mark.parametrize("device", DEVICES)
def test_cumsum_and_argmax(device):
    x = torch.from_numpy(A).to(device)
    close(torch.cumsum(x, 1), np.cumsum(A, 1), tol=1e-4)
    close(x.cumsum(0), np.cumsum(A, 0), tol=1e-4)
    assert torch.argmax(x, 1).cpu().numpy().tolist() == np.argmax(A, 1).tolist()
    assert x.argmax(dim=0, keepdim=True).shape == (1, A.shape[1])
    assert torch.argmax(x).item() == int(np.argmax(A))
    assert (x > 0).cumsum(1).dtype == torch.int32


@pytest.mark.parametrize("device", DEVICES)
def test_topk_returns_values_and_indices_like_torch(device):
    x = torch.from_numpy(A).to(device)
    values, indices = torch.topk(x, 3, dim=1)  # unpacks like torch.return_types.topk
    order = np.argsort(-A, axis=1, kind="stable")[:, :3]
    assert indices.dtype == torch.int32 and indices.cpu().numpy().tolist() == order.tolist()
    close(values, np.take_along_axis(A, order, 1), tol=0)
    low = x.topk(2, dim=0, largest=False)
    assert low.indices.cpu().numpy().tolist() == np.argsort(A, axis=0, kind="stable")[:2].tolist()
    assert isinstance(low, torch.return_types.topk) and low.values.shape == (2, A.shape[1])


@pytest.mark.parametrize("device", DEVICES)
def test_comparisons_give_bool_tensors(device):
    x, y = torch.from_numpy(A).to(device), torch.from_numpy(B).to(device)
    for name, (op, fn) in COMPARISONS.items():
        expected = fn(A, B)
        out = getattr(x, op)(y)
        assert out.dtype == torch.bool
        np.testing.assert_array_equal(out.cpu().numpy(), expected)
        np.testing.assert_array_equal(getattr(torch, name)(x, y).cpu().numpy(), expected)
    np.testing.assert_array_equal((x > 0.5).cpu().numpy(), A > 0.5)
    np.testing.assert_array_equal((0.5 < x).cpu().numpy(), A > 0.5)  # reflected: x.__gt__(0.5)
    np.testing.assert_array_equal(torch.lt(x, 0.25).cpu().numpy(), A < 0.25)
    assert (x == x).cpu().numpy().all()


def test_bool_dtype_numpy_printing_and_hashing():
    mask = torch.from_numpy(np.array([True, False, True]))
    assert mask.dtype == torch.bool and repr(torch.bool) == "sightline.bool"
    assert repr(mask) == "tensor([ True, False,  True])"
    np.testing.assert_array_equal(mask.numpy(), [True, False, True])
    assert mask.numpy().dtype == np.bool_
    assert torch.tensor([True, False]).dtype == torch.bool
    assert mask[0].item() is True
    np.testing.assert_array_equal(mask.int().numpy(), [1, 0, 1])
    np.testing.assert_array_equal(torch.from_numpy(A).bool().numpy(), A != 0)
    x = torch.from_numpy(A)
    assert len({x, x}) == 1  # tensors hash by identity, as in torch
    with pytest.raises(torch.Error, match="bool tensor"):
        mask + mask


@pytest.mark.parametrize("device", DEVICES)
def test_where_and_masked_fill(device):
    x, y = torch.from_numpy(A).to(device), torch.from_numpy(B).to(device)
    np.testing.assert_array_equal(torch.where(x > 0, x, y).cpu().numpy(), np.where(A > 0, A, B))
    np.testing.assert_array_equal(x.where(x > 0, y).cpu().numpy(), np.where(A > 0, A, B))
    np.testing.assert_array_equal(x.masked_fill(y < 0, -1e4).cpu().numpy(), np.where(B < 0, np.float32(-1e4), A))
    np.testing.assert_array_equal(torch.masked_fill(x, y < 0, 0.0).cpu().numpy(), np.where(B < 0, 0, A))


@pytest.mark.parametrize("device", DEVICES)
def test_select_chunk_split(device):
    x = torch.from_numpy(A).to(device)
    np.testing.assert_array_equal(x.select(1, -1).cpu().numpy(), A[:, -1])
    np.testing.assert_array_equal(torch.select(x, 0, 2).cpu().numpy(), A[2])
    halves = x.chunk(2, dim=-1)
    assert len(halves) == 2
    np.testing.assert_array_equal(halves[1].cpu().numpy(), A[:, 16:])
    np.testing.assert_array_equal(torch.chunk(x, 3, 1)[2].cpu().numpy(), A[:, 22:])
    assert [t.shape[1] for t in torch.split(x, 10, dim=1)] == [10, 10, 10, 2]
    assert [t.shape[1] for t in x.split([30, 2], dim=1)] == [30, 2]
