"""compile() over Python functions: the decorator forms, capture of the function's ops into one
program, the guards, and the errors of what cannot be captured."""

import numpy as np
import pytest

import sightline as torch

X = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
W = np.random.default_rng(2).standard_normal(64).astype(np.float32)


def naive(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def test_compile_as_decorator_and_call():
    @torch.compile
    def f1(x, w):
        return naive(x, w)

    @torch.compile(backend="neuron")
    def f2(x, w):
        return naive(x, w)

    f3 = torch.compile(naive, backend="neuron")
    x, w = torch.from_numpy(X).to("neuron"), torch.from_numpy(W).to("neuron")
    expected = naive(x, w).cpu().numpy()
    for f in (f1, f2, f3):
        np.testing.assert_allclose(f(x, w).cpu().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert f2.__name__ == "f2" and f3.__wrapped__ is naive


def test_the_naive_rmsnorm_compiles_to_one_row_group_of_its_own_ops_and_one_device_call():
    compiled = torch.compile(naive, backend="neuron")
    x, w = torch.from_numpy(X).to("neuron"), torch.from_numpy(W).to("neuron")
    compiled(x, w)
    compiled(x, w)
    s = compiled.stats()
    assert (s.compilations, s.calls, s.cache_hits, s.device_calls) == (1, 2, 1, 2)
    dump = compiled.graph_dump(x, w)
    assert "fused.rows" in dump and "aten::rsqrt" in dump and "aten::rms_norm" not in dump
    compiled(torch.from_numpy(X[:4]).to("neuron"), w)  # a new signature compiles again
    assert compiled.stats().compilations == 2


def test_substitute_builtins_replaces_the_naive_rmsnorm_by_the_builtin():
    substituted = torch.compile(naive, options={"substitute_builtins": True})
    x, w = torch.from_numpy(X).to("neuron"), torch.from_numpy(W).to("neuron")
    assert "aten::rms_norm" in substituted.graph_dump(x, w)
    np.testing.assert_allclose(substituted(x, w).cpu().numpy(), torch.compile(naive)(x, w).cpu().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_compile_on_cpu_and_tuple_results():
    @torch.compile
    def two(a, b):
        return a + b, a * b

    a, b = torch.from_numpy(X), torch.from_numpy(X[::-1].copy())
    s, p = two(a, b)
    np.testing.assert_allclose(s.numpy(), X + X[::-1])
    np.testing.assert_allclose(p.numpy(), X * X[::-1])


def test_what_cannot_be_captured_is_an_error():
    outside = torch.ones(64)

    @torch.compile
    def reads_host(x):
        return x * x.sum().item()

    @torch.compile
    def closes_over(x):
        return x * outside

    @torch.compile
    def raises(x):
        raise KeyError("from the user's function")

    @torch.compile
    def returns_number(x):
        return 3

    x = torch.from_numpy(X)
    with pytest.raises(torch.Error, match="aten::sum"):
        reads_host(x)
    with pytest.raises(torch.Error):
        closes_over(x)
    with pytest.raises(KeyError, match="from the user's function"):
        raises(x)
    with pytest.raises(TypeError, match="must return a Tensor"):
        returns_number(x)
    with pytest.raises(TypeError, match="argument 1 is a float"):
        torch.compile(naive)(x, 1e-6)
    with pytest.raises(ValueError, match="unknown backend"):
        torch.compile(naive, backend="cudagraphs")
    with pytest.raises(ValueError, match="unknown options"):
        torch.compile(naive, options={"max_autotune": True})
    assert torch.compile(naive, disable=True) is naive


def test_autocast_runs_matmuls_with_bf16_operands_and_keeps_the_rest_f32():
    a = np.random.default_rng(3).standard_normal((16, 128)).astype(np.float32)
    b = np.random.default_rng(4).standard_normal((128, 8)).astype(np.float32)

    def f(x, y):
        return torch.matmul(x, y).relu()

    cast = torch.compile(f, options={"autocast": "matmul_bf16"})
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    out = cast(x, y)
    assert out.dtype == torch.float32
    dump = cast.graph_dump(x, y)
    assert "aten::_to_copy" in dump and "bf16" in dump and "bf16" not in torch.compile(f).graph_dump(x, y)
    # Per element within (3u + 4u^2 + 3Ke) (|A||B|)_ij, u = 2^-8, e = 2^-24 (docs/architecture.md, section 10);
    # relu only shrinks the difference.
    u, k = 2.0**-8, a.shape[1]
    bound = (3 * u + 4 * u * u + 3 * k * 2.0**-24) * 1.01 * (np.abs(a) @ np.abs(b))
    err = np.abs(out.numpy() - np.maximum(a @ b, 0))
    assert np.all(err <= bound)
    assert err.max() > 0  # the operands really were rounded
    with pytest.raises(torch.Error, match="unknown autocast 'fp8'"):
        torch.compile(f, options={"autocast": "fp8"})


def test_topk_is_a_graph_break_reported_by_explain():
    def f(x, w):
        h = torch.nn.functional.silu(x * w)
        top = torch.topk(h, 4)
        return torch.softmax(top.values, -1) * h.mean(-1, keepdim=True), top.indices

    x, w = torch.from_numpy(X).to("neuron"), torch.from_numpy(W).to("neuron")
    compiled = torch.compile(f, backend="neuron")
    values, indices = compiled(x, w)
    want_values, want_indices = f(x, w)
    np.testing.assert_allclose(values.cpu().numpy(), want_values.cpu().numpy(), rtol=1e-5, atol=1e-6)
    assert indices.cpu().numpy().tolist() == want_indices.cpu().numpy().tolist()
    report = compiled.explain(x, w)
    assert (report.graph_count, report.graph_break_count) == (2, 1)
    assert report.breaks[0].op == "aten::topk" and "returns 2 tensors" in report.breaks[0].reason
    assert "Graph Break Count: 1" in str(report)
    with pytest.raises(torch.Error, match="graph break at aten::topk"):
        torch.compile(f, fullgraph=True)(x, w)
