"""Tensors from Python: factories with torch's keywords, dtypes and devices, views and indexing,
numpy in and out, and errors as Python exceptions with the C++ message."""

import numpy as np
import pytest

import sightline as torch


def test_factories_take_torch_keywords():
    x = torch.zeros(2, 3, dtype=torch.bfloat16, device="neuron")
    assert x.shape == (2, 3) and x.dtype == torch.bfloat16 and str(x.device) == "neuron:0"
    assert x.device.type == "neuron" and x.device.index == 0 and x.device == "neuron:0"
    assert x.device != "cpu" and x.device != "tpu" and x.device != 3 and x.device == torch.device("neuron")
    assert torch.ones((4,)).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert torch.full((2,), 7).dtype == torch.int32
    assert torch.full((2,), 2.5).tolist() == [2.5, 2.5]
    assert torch.arange(4).tolist() == [0, 1, 2, 3] and torch.arange(4).dtype == torch.int32
    assert torch.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert torch.empty(3, 0).numel() == 0
    assert torch.zeros_like(x).dtype == torch.bfloat16 and torch.ones_like(x).device == x.device
    assert repr(torch.float32) == "sightline.float32" and torch.float16.itemsize == 2


def test_generators_are_seedable_and_match_the_cpp_generator():
    a = torch.randn(3, 4, generator=torch.Generator(7))
    b = torch.randn(3, 4, generator=torch.Generator().manual_seed(7))
    assert np.array_equal(a.numpy(), b.numpy())
    torch.manual_seed(1)
    c = torch.rand(5)
    torch.manual_seed(1)
    assert np.array_equal(c.numpy(), torch.rand(5).numpy())
    assert 0.0 <= float(c.amax()) < 1.0


def test_normal_is_randn_scaled_and_shifted():
    got = torch.normal(0.5, 0.02, (3, 5000), generator=torch.Generator(9))
    want = torch.randn(3, 5000, generator=torch.Generator(9)) * 0.02 + 0.5
    assert got.shape == (3, 5000) and got.dtype == torch.float32
    assert np.array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
    assert torch.normal(0.0, 1.0, (4,), dtype=torch.bfloat16, device="neuron").dtype == torch.bfloat16
    with pytest.raises(torch.Error, match="std"):
        torch.normal(0.0, -1.0, (4,))
    with pytest.raises(TypeError, match="randn"):
        torch.normal(torch.zeros(4), 1.0, (4,))


def test_numpy_round_trip_and_shared_memory():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.from_numpy(a)
    assert t.shape == (3, 4) and t.dtype == torch.float32
    assert np.array_equal(t.numpy(), a)
    view = t.transpose(0, 1)
    assert np.array_equal(view.numpy(), a.T)  # strided views come out as strided arrays
    shared = t.numpy()
    shared[0, 0] = 42.0
    assert t[0, 0].item() == 42.0  # numpy() shares the tensor's memory, as torch's does
    assert torch.from_numpy(np.array([1, 2], dtype=np.int32)).dtype == torch.int32
    assert torch.from_numpy(np.array([1.5], dtype=np.float16)).dtype == torch.float16
    assert np.asarray(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32


def test_tensor_from_python_data():
    assert torch.tensor([[1.0, 2.0], [3.0, 4.0]]).dtype == torch.float32
    assert torch.tensor([1, 2, 3]).dtype == torch.int32
    t = torch.tensor(np.ones((2, 2)), dtype=torch.float16, device="neuron")
    assert t.dtype == torch.float16 and t.device == "neuron:0"
    assert torch.tensor(3.5).shape == () and torch.tensor(3.5).item() == 3.5
    with pytest.raises(OverflowError):
        torch.tensor([2**40])


def test_device_copies_item_and_dtype_conversions():
    x = torch.randn(8, 16, generator=torch.Generator(2))
    d = x.to("neuron")
    assert d.device.type == "neuron"
    assert np.array_equal(d.cpu().numpy(), x.numpy())
    assert np.array_equal(x.to(torch.device("neuron:0")).to("cpu").numpy(), x.numpy())
    assert d.to("cpu", torch.bfloat16).dtype == torch.bfloat16
    assert x.to(dtype=torch.float16, device="neuron").dtype == torch.float16
    assert isinstance(torch.tensor([3]).item(), int) and isinstance(d.sum().item(), float)
    assert x.half().dtype == torch.float16 and x.int().dtype == torch.int32 and x.bfloat16().float().dtype == torch.float32
    assert "device='neuron:0'" in repr(d)


def test_views_and_indexing():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = torch.from_numpy(a)
    assert np.array_equal(t.reshape(6, 4).numpy(), a.reshape(6, 4))
    assert np.array_equal(t.view(-1).numpy(), a.reshape(-1))
    assert np.array_equal(t.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    assert np.array_equal(t.unsqueeze(0).numpy(), a[None])
    assert t.unsqueeze(1).squeeze().shape == (2, 3, 4)
    assert np.array_equal(t.flatten(1).numpy(), a.reshape(2, 12))
    for key in [1, -1, (0, 2), (slice(None), 1), (Ellipsis, 3), (0, slice(1, 3), slice(None, None, 2)),
                (None, 1), slice(0, 1)]:
        assert np.array_equal(t[key].numpy(), a[key]), key
    assert np.array_equal(torch.from_numpy(a[0]).T.numpy(), a[0].T)
    assert [r.shape for r in t] == [(3, 4), (3, 4)] and len(t) == 2
    assert t.expand(2, 3, 4).shape == (2, 3, 4)
    assert torch.ones(1, 4).expand(3, -1).stride() == (0, 1)
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]


def test_errors_are_python_exceptions_with_the_cpp_message():
    with pytest.raises(torch.Error, match=r"shape mismatch in aten::mul: \[2, 3\] vs \[4\]"):
        torch.ones(2, 3) * torch.ones(4)
    assert issubclass(torch.Error, RuntimeError)  # torch raises RuntimeError for shape mismatches
    with pytest.raises(RuntimeError, match="unknown|registered"):
        torch.ones(2, device="tpu")
    with pytest.raises(TypeError, match="float64"):
        torch.from_numpy(np.ones(3))
    with pytest.raises(TypeError, match="numpy"):
        torch.ones(2, device="neuron").numpy()
    with pytest.raises(TypeError, match="BFloat16"):
        torch.ones(2, dtype=torch.bfloat16).numpy()
    with pytest.raises(TypeError):
        torch.ones("a")
    with pytest.raises(ValueError, match="at most 8 dims"):
        torch.zeros([1] * 9)
    with pytest.raises(TypeError):
        torch.ones(2).to(3.5)
    with pytest.raises(torch.Error):
        torch.ones(6).view(4, 2)


def test_inference_scripts_port_unchanged():
    @torch.inference_mode()
    def f(x):
        return x.detach() * 2

    with torch.no_grad():
        y = f(torch.ones(2).requires_grad_())
    assert y.tolist() == [2.0, 2.0] and not torch.is_grad_enabled()
    assert isinstance(y.shape, torch.Size)
