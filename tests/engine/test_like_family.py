"""zeros_like and its family are rows of the op table with PyTorch's default
memory_format=torch.preserve_format: a dense input's strides are kept exactly (size-1 dims
included), any other layout becomes a dense one with the dims in the input's order (PyTorch's
infer_dense_strides); memory_format="contiguous_format" asks for C order. The bytes are the
same either way (numel x itemsize)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.ops import registry

LAYOUTS = {
    "contiguous": lambda m: m.randn(2, 3, 4),
    "transposed": lambda m: m.randn(2, 3, 4).transpose(0, 2),
    "sliced": lambda m: m.randn(2, 3, 4)[:, ::2],
    "expanded": lambda m: m.randn(4, 1, 3).expand(4, 5, 3),
    "channels_last": lambda m: m.randn(2, 3, 4, 5).permute(0, 2, 3, 1),
    "size_one_dim": lambda m: m.randn(3, 1, 4).transpose(0, 1),
    "strided_vector": lambda m: m.randn(6)[::2],
    "scalar": lambda m: m.tensor(3.0),
}
FAMILY = ["zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like"]


def _call(lib, name, x, **kw):
    fn = getattr(lib, name)
    return fn(x, 2.5, **kw) if name == "full_like" else fn(x, **kw)


def test_the_family_are_rows_of_the_op_table():
    names = {row.name for row in registry.rows()}
    assert set(FAMILY) | {"randint_like"} <= names


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", FAMILY)
def test_layout_is_torchs_preserve_format(name, layout):
    torch = pytest.importorskip("torch")
    e = _call(engine, name, LAYOUTS[layout](engine))
    t = _call(torch, name, LAYOUTS[layout](torch))
    assert (tuple(e.shape), e.stride(), e._dtype.name) == (
        tuple(t.shape),
        t.stride(),
        str(t.dtype).removeprefix("torch."),
    )


@pytest.mark.parametrize("name", FAMILY)
def test_values_bytes_and_options(name):
    x = engine.randn(2, 3, 4).transpose(0, 2)
    before = engine.memory.memory_allocated()
    y = _call(engine, name, x, dtype=engine.float64, requires_grad=True)
    assert engine.memory.memory_allocated() - before == 24 * 8
    assert y.requires_grad and y._dtype is engine.float64 and y.is_leaf
    if name in ("zeros_like", "ones_like", "full_like"):
        want = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": 2.5}[name]
        assert np.all(y.detach().numpy() == want)
    c = _call(engine, name, x, memory_format="contiguous_format")
    assert c.is_contiguous()


def test_randint_like_keeps_the_layout_and_draws_in_range():
    x = engine.zeros(3, 5).t()
    y = engine.randint_like(x, 2, 9)
    assert y.stride() == (1, 5) and y._dtype is engine.float32
    assert set(np.unique(y.numpy())) <= set(range(2, 9))


def test_on_meta_the_layout_follows_the_cpu_rule():
    x = engine.randn(2, 3, 4, device="meta").transpose(0, 2)
    y = engine.zeros_like(x)
    assert y.device.type == "meta" and y.stride() == (1, 4, 12)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "size_one_dim", "scalar"])
@pytest.mark.parametrize("name", FAMILY)
def test_layout_with_another_dtype_or_device_is_torchs(name, layout):
    """Another itemsize (a float64 result of a float32 input) or device (meta) keeps the layout
    rule: the strides in elements are the ones torch gives."""
    torch = pytest.importorskip("torch")
    for kw in (dict(dtype="float64"), dict(device="meta")):
        ekw = {k: getattr(engine, v) if k == "dtype" else v for k, v in kw.items()}
        tkw = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
        e = _call(engine, name, LAYOUTS[layout](engine), **ekw)
        t = _call(torch, name, LAYOUTS[layout](torch), **tkw)
        assert (tuple(e.shape), e.stride(), e._dtype.name, e.device.type) == (
            tuple(t.shape),
            t.stride(),
            str(t.dtype).removeprefix("torch."),
            t.device.type,
        )
