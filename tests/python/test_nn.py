"""sightline.nn: modules compute what their functional forms compute, move between devices, and
list their parameters."""

import numpy as np

import sightline as torch
from sightline import nn


def test_linear_rmsnorm_and_sequential_against_numpy():
    g = torch.Generator(4)
    model = nn.Sequential(nn.RMSNorm(16, eps=1e-6), nn.Linear(16, 8, generator=g), nn.SiLU())
    assert [name for name, _ in model.named_parameters()] == ["0.weight", "1.weight", "1.bias"]
    x = torch.randn(4, 16, generator=g)
    a = x.numpy()
    lin = model[1]
    h = a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6)
    z = h @ lin.weight.numpy().T + lin.bias.numpy()
    expected = z / (1 + np.exp(-z))
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    model.to("neuron")
    assert all(p.device == "neuron:0" for p in model.parameters())
    np.testing.assert_allclose(model(x.to("neuron")).cpu().numpy(), expected, rtol=1e-4, atol=1e-5)
    assert "Linear(in_features=16, out_features=8, bias=True)" in repr(model)


def test_embedding_layernorm_and_module_lists():
    emb = nn.Embedding(10, 4, generator=torch.Generator(1))
    idx = torch.tensor([[1, 2], [9, 0]])
    np.testing.assert_array_equal(emb(idx).numpy(), emb.weight.numpy()[[[1, 2], [9, 0]]])
    blocks = nn.ModuleList([nn.LayerNorm(4), nn.GELU(approximate="tanh")])
    y = emb(idx)
    for b in blocks:
        y = b(y)
    assert y.shape == (2, 2, 4) and len(blocks) == 2
