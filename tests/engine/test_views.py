"""Views share memory and the version counter with their base; copies do not."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch

VIEWS = {
    "view": lambda t: t.view(4, 6),
    "view_-1": lambda t: t.view(-1),
    "reshape": lambda t: t.reshape(6, 4),
    "transpose": lambda t: t.transpose(0, 2),
    "permute": lambda t: t.permute(2, 0, 1),
    "t_of_2d": lambda t: t[0].t(),
    "T": lambda t: t.T,
    "slice": lambda t: t[:, 1:3],
    "step_slice": lambda t: t[..., ::2],
    "int_index": lambda t: t[1],
    "mixed_index": lambda t: t[1, :, 2],
    "none_index": lambda t: t[None, 0],
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "unsqueeze_neg": lambda t: t.unsqueeze(-1),
    "expand": lambda t: t[:, :1, :1].expand(2, 3, 4),
    "flatten": lambda t: t.flatten(),
    "flatten_1": lambda t: t.flatten(1),
    "detach": lambda t: t.detach(),
    "split": lambda t: t.split(1, 0)[1],
    "chunk": lambda t: t.chunk(2, 2)[0],
    "unbind": lambda t: t.unbind(1)[2],
    "view_as": lambda t: t.view_as(engine.empty(24)),
    "data": lambda t: t.data,
}


def base():
    return engine.arange(24, dtype=engine.float32).reshape(2, 3, 4)


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_shares_memory_version_and_base(name):
    b = base()
    expected = np.asarray(VIEWS[name](engine.tensor(b.numpy().copy())).numpy())
    before = engine.memory.memory_allocated()
    v = VIEWS[name](b)
    assert engine.memory.memory_allocated() == before, "a view allocates nothing"
    np.testing.assert_array_equal(v.numpy(), expected)
    assert v._version == b._version
    assert np.shares_memory(v.numpy(), b.numpy())
    if name not in ("detach", "data"):
        assert v._base is b or v._base is b._base
    # a write through the base shows in the view, and bumps the shared version (`.data` has a
    # version counter of its own, as in PyTorch)
    b.add_(100)
    assert b._version == 1 and v._version == (0 if name == "data" else 1)
    np.testing.assert_array_equal(v.numpy(), expected + 100)


@pytest.mark.parametrize(
    "name", ["view", "reshape", "transpose", "slice", "int_index", "detach", "unsqueeze", "flatten"]
)
def test_write_through_a_view_shows_in_the_base(name):
    b = base()
    v = VIEWS[name](b)
    v.mul_(0)
    assert b._version == 1
    written = np.zeros_like(b.numpy(), dtype=bool)
    ref = base().numpy().copy()
    ref_view = VIEWS[name](engine.from_numpy(ref))
    ref_view.mul_(0)
    np.testing.assert_array_equal(b.numpy(), ref)
    assert not written.any()


def test_clone_and_contiguous_copy():
    b = base()
    c = b.clone()
    assert c._base is None and c.data_ptr() != b.data_ptr()
    assert engine.memory.memory_allocated() == 2 * 96
    c.add_(1)
    assert b._version == 0 and b.numpy()[0, 0, 0] == 0
    assert b.contiguous() is b
    tc = b.transpose(0, 1).contiguous()
    assert tc.is_contiguous() and not np.shares_memory(tc.numpy(), b.numpy())
    np.testing.assert_array_equal(tc.numpy(), b.numpy().transpose(1, 0, 2))


def test_reshape_is_a_view_when_strides_allow_and_a_copy_otherwise():
    b = base()
    assert np.shares_memory(b.reshape(6, 4).numpy(), b.numpy())
    t = b.transpose(1, 2)  # (2, 4, 3), not contiguous
    assert np.shares_memory(t.reshape(2, 2, 2, 3).numpy(), b.numpy())  # splits one dim: a view
    before = engine.memory.memory_allocated()
    r = t.reshape(-1)
    assert engine.memory.memory_allocated() == before + 96
    assert not np.shares_memory(r.numpy(), b.numpy())
    np.testing.assert_array_equal(r.numpy(), b.numpy().transpose(0, 2, 1).reshape(-1))
    with pytest.raises(RuntimeError, match=r"view size is not compatible.*Use .reshape"):
        t.view(-1)


def test_view_shape_errors_name_the_sizes():
    with pytest.raises(RuntimeError, match=r"shape '\[5, 5\]' is invalid for input of size 24"):
        base().view(5, 5)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        base().view(-1, -1)
    with pytest.raises(
        RuntimeError, match=r"expanded size of the tensor \(5\) must match the existing size \(3\)"
    ):
        base().expand(2, 5, 4)


def test_from_numpy_and_numpy_share_memory_and_version():
    a = np.ones(4)
    b = engine.from_numpy(a)
    assert b.dtype is engine.float64
    b.add_(1)
    assert a.tolist() == [2, 2, 2, 2] and b._version == 1
    n = b.numpy()
    n[0] = 9
    assert b[0].item() == 9
    assert b.data_ptr() == a.__array_interface__["data"][0]
    c = engine.from_numpy(a[::2])
    assert c.tolist() == [9, 2] and c.stride() == (2,)
    with pytest.raises(TypeError, match="expected np.ndarray"):
        engine.from_numpy([1, 2])


def test_data_ptr_and_storage_offset():
    b = base()
    assert b[1].data_ptr() == b.data_ptr() + 12 * 4
    assert b[:, 1].storage_offset() == 4
    assert b.untyped_storage() is b[0].untyped_storage()


def test_squeeze_unsqueeze_flatten_shapes():
    t = engine.zeros(1, 3, 1, 2)
    assert t.squeeze().shape == (3, 2)
    assert t.squeeze(0).shape == (3, 1, 2)
    assert t.squeeze(1).shape == (1, 3, 1, 2)
    assert t.squeeze((0, 2)).shape == (3, 2)
    assert t.unsqueeze(0).shape == (1, 1, 3, 1, 2)
    assert t.unsqueeze(4).shape == (1, 3, 1, 2, 1)
    assert t.flatten().shape == (6,) and t.flatten(1, 2).shape == (1, 3, 2)
    assert engine.tensor(3.0).flatten().shape == (1,)
    assert engine.tensor(3.0).unsqueeze(0).shape == (1,)
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.unsqueeze(6)


def test_t_of_1d_and_0d_is_itself_shaped():
    assert engine.zeros(3).t().shape == (3,)
    assert engine.tensor(1.0).t().shape == ()
    with pytest.raises(RuntimeError, match="<= 2 dimensions"):
        engine.zeros(2, 2, 2).t()


def test_permute_errors():
    with pytest.raises(RuntimeError, match="duplicate dims"):
        base().permute(0, 0, 1)
    with pytest.raises(RuntimeError, match="does not match"):
        base().permute(0, 1)


def test_indexing_errors():
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 2"):
        base()[5]
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        engine.tensor(1.0)[0]


def test_advanced_indexing_copies():
    b = base()
    idx = engine.tensor([1, 0])
    g = b[idx]
    assert g.shape == (2, 3, 4) and not np.shares_memory(g.numpy(), b.numpy())
    np.testing.assert_array_equal(g.numpy(), b.numpy()[[1, 0]])
    m = b > 10
    np.testing.assert_array_equal(b[m].numpy(), b.numpy()[b.numpy() > 10])
    np.testing.assert_array_equal(b[[0, 1], 2].numpy(), b.numpy()[[0, 1], 2])


def test_views_of_views_keep_the_root_base():
    b = engine.rand(2, 3, 4)
    v = b[1][2]
    assert v._base is b
    assert v._view_fn(b).tolist() == b.numpy()[1, 2].tolist()


def test_view_strides_answers_from_its_cache_as_its_walk_and_as_torch():
    """view_strides keeps its answers by (old shape, old strides, new shape): a second asking
    gives what the walk gives, for viewable and unviewable layouts alike, and the strides are
    torch's (`view` of the same layout, or its refusal)."""
    import itertools

    from engine.backends import strided

    torch = pytest.importorskip("torch")
    base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    layouts = [base, base.transpose(1, 2), base.permute(3, 0, 1, 2), base[:, 1:], base[..., ::2]]
    targets = [(-1,), (6, 20), (2, 60), (2, 3, 20), (6, 4, 5), (1, 2, 3, 4, 5)]
    asked = 0
    for t, shape in itertools.product(layouts, targets):
        new = tuple(shape) if -1 not in shape else (t.numel(),)
        if t.numel() != math.prod(new):
            continue
        old_shape, old_strides = tuple(t.shape), tuple(t.stride())
        walked = strided._walk(old_shape, old_strides, new)
        first = strided.view_strides(old_shape, old_strides, new)
        again = strided.view_strides(old_shape, old_strides, new)
        assert first == again == walked
        assert (old_shape, old_strides, new) in strided._VIEWS
        try:
            want = tuple(t.view(new).stride())
        except RuntimeError:
            want = None
        assert walked == want, (old_shape, old_strides, new)
        assert strided.view_strides(list(old_shape), list(old_strides), list(new)) == walked
        asked += 1
    assert asked >= 20


# torch's in-place view ops: the tensor's own metadata changes, the data stays, the version moves
INPLACE_VIEWS = {
    "squeeze_": lambda t: t.squeeze_(),
    "squeeze_dim": lambda t: t.squeeze_(2),
    "squeeze_dim_not_one": lambda t: t.squeeze_(0),
    "squeeze_dims": lambda t: t.squeeze_((-1, 2)),
    "unsqueeze_": lambda t: t.unsqueeze_(1),
    "unsqueeze_last": lambda t: t.unsqueeze_(-1),
    "swapdims_": lambda t: t.swapdims_(0, 1),
    "swapaxes_": lambda t: t.swapaxes_(-1, 0),
}


@pytest.mark.parametrize("layout", ["contiguous", "sliced"])
@pytest.mark.parametrize("name", list(INPLACE_VIEWS))
def test_inplace_view_ops_change_metadata_as_torch(name, layout):
    torch = pytest.importorskip("torch")
    seen = {}
    for lib in (engine, torch):
        base = lib.arange(48.0).reshape(4, 3, 1, 4)
        t = base[1:, :, :, ::2] if layout == "sliced" else base * 1
        grad_base = (lib.arange(48.0).reshape(4, 3, 1, 4).requires_grad_(True) * 1)[1:]
        version, ptr = t._version, t.data_ptr()
        before = engine.memory.memory_allocated()
        out = INPLACE_VIEWS[name](t)
        assert out is t
        assert t.data_ptr() == ptr
        if lib is engine:
            assert engine.memory.memory_allocated() == before  # metadata only
        t.add_(1000)  # the writes land in the tensor's (and its base's) memory
        INPLACE_VIEWS[name](grad_base)
        seen[lib.__name__] = (
            tuple(t.shape),
            t.stride(),
            t._version - version,
            base.sum().item(),
            t.is_contiguous(),
            grad_base.grad_fn.name(),
        )
    assert seen["engine"] == seen["torch"]


def test_inplace_view_ops_are_tensor_methods_only_as_in_torch():
    torch = pytest.importorskip("torch")
    for name in ("squeeze_", "unsqueeze_", "swapdims_", "swapaxes_", "swapdims"):
        assert hasattr(engine.Tensor, name) == hasattr(torch.Tensor, name), name
        assert hasattr(engine, name) == hasattr(torch, name), name


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dim", [0, 2, 4, -1])
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed"])
def test_unsqueeze_strides_as_torch(layout, dim, device):
    # torch: the new dim's stride is the size times the stride of the dim it precedes, and one
    # element at the end (numpy's reshape would repeat the last stride of a strided array)
    torch = pytest.importorskip("torch")
    strides = []
    for lib in (engine, torch):
        t = lib.zeros(4, 3, 1, 4, device=device)
        t = {"contiguous": t, "sliced": t[1:, :, :, ::2], "transposed": t.transpose(1, 3)}[layout]
        out = t.unsqueeze(dim)
        t.unsqueeze_(dim)
        strides.append((out.stride(), t.stride()))
    assert strides[0] == strides[1]


# the node each view op records is torch's (reports name backward's allocations by it)
NODE_NAMES = {
    "squeeze()": lambda t: t.squeeze(),
    "squeeze(dim)": lambda t: t.squeeze(1),
    "squeeze(dims)": lambda t: t.squeeze((1,)),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "view": lambda t: t.view(-1),
    "reshape": lambda t: t.reshape(3, 4),
    "flatten": lambda t: t.flatten(),
    "unflatten": lambda t: t.unflatten(2, (2, -1)),
    "expand": lambda t: t.expand(2, 3, 1, 4),
    "permute": lambda t: t.permute(2, 0, 1),
    "transpose": lambda t: t.transpose(0, 2),
    "swapaxes": lambda t: t.swapaxes(0, 1),
    "swapdims": lambda t: t.swapdims(0, 1),
    "mT": lambda t: t.mT,
    "t": lambda t: t[:, 0].t(),
    "t of 1-d": lambda t: t[0, 0].t(),
    "T": lambda t: t[:, 0].T,
    "movedim": lambda t: t.movedim(0, 2),
    "narrow": lambda t: t.narrow(0, 1, 2),
    "narrow whole": lambda t: t.narrow(2, 0, 4),
    "[1]": lambda t: t[1],
    "[1:]": lambda t: t[1:],
    "[:]": lambda t: t[:],
    "[0:10]": lambda t: t[0:10],
    "[...]": lambda t: t[...],
    "[:, :]": lambda t: t[:, :],
    "[:, 0:1]": lambda t: t[:, 0:1],
    "[1, :, 2]": lambda t: t[1, :, 2],
    "[None, 0]": lambda t: t[None, 0],
    "[0, None]": lambda t: t[0, None],
    "[..., ::2]": lambda t: t[..., ::2],
    "[..., 1]": lambda t: t[..., 1],
    "[1, ...]": lambda t: t[1, ...],
    "[0, 0:10]": lambda t: t[0, 0:10],
    "[-2:]": lambda t: t[-2:],
    "diagonal": lambda t: t[:, 0].diagonal(),
    "split": lambda t: t.split(1)[0],
    "unbind": lambda t: t.unbind(0)[0],
    "unfold": lambda t: t.unfold(2, 2, 1),
    "select": lambda t: t.select(1, 0),
    "ravel": lambda t: t.ravel(),
    "ravel of a transpose": lambda t: t.transpose(0, 2).ravel(),
    "tile": lambda t: t.tile(2),
}


@pytest.mark.parametrize("name", list(NODE_NAMES))
def test_view_ops_record_torchs_node(name):
    torch = pytest.importorskip("torch")
    names = []
    for lib in (engine, torch):
        x = lib.ones(3, 1, 4, requires_grad=True) * 1
        names.append(NODE_NAMES[name](x).grad_fn.name())
    assert names[0] == names[1]


@pytest.mark.parametrize(
    "call",
    [
        lambda m, t: t.narrow(0, -2, 2),
        lambda m, t: m.narrow(t, 2, 1, 3),
        lambda m, t: t.narrow(1, 3, 0),
        lambda m, t: t.unflatten(2, (2, 2)),
        lambda m, t: m.unflatten(t, -1, (-1, 1)),
        lambda m, t: t.unflatten(0, (1, 3)),
        lambda m, t: t.unfold(2, 3, 1),  # overlapping windows: their gradients add
        lambda m, t: t.unfold(1, 2, 2).unfold(2, 2, 3),
        lambda m, t: t.transpose(0, 2).unfold(0, 4, 1),
        lambda m, t: t.unfold(0, 0, 2),
        lambda m, t: t[0, 0, 0].unfold(0, 1, 1),
        lambda m, t: t.select(1, 2),
        lambda m, t: m.select(t, -1, -3),
        lambda m, t: t.ravel(),
        lambda m, t: t.transpose(0, 2).ravel(),  # a copy first
        lambda m, t: t.tile(2),
        lambda m, t: m.tile(t, (2, 1, 1, 2)),
    ],
)
def test_narrow_unflatten_unfold_select_ravel_and_tile_as_torch(call):
    torch = pytest.importorskip("torch")
    arr = np.arange(48.0).reshape(3, 4, 4)
    out = {}
    for lib in (engine, torch):
        x = lib.tensor(arr, requires_grad=True)
        y = call(lib, x * 1)
        w = lib.tensor(np.linspace(-1, 1, y.numel()).reshape(tuple(y.shape)))
        (y * w).sum().backward()
        out[lib.__name__] = (y.detach().numpy(), y.stride(), x.grad.numpy())
    for a, b in zip(out["engine"], out["torch"], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.ones(3, 1, 4).narrow(0, 4, 1),
        lambda m: m.ones(3, 1, 4).narrow(0, -4, 1),
        lambda m: m.ones(3, 1, 4).narrow(0, 1, -1),
        lambda m: m.ones(3, 1, 4).narrow(0, 2, 2),
        lambda m: m.ones(()).narrow(0, 0, 1),
        lambda m: m.ones(3, 1, 4).unflatten(2, (3, 2)),
        lambda m: m.ones(3, 1, 4).unflatten(2, ()),
        lambda m: m.ones(3, 1, 4).unflatten(2, (3, -1)),
        lambda m: m.ones(2, 5).unfold(1, 6, 1),
        lambda m: m.ones(2, 5).unfold(1, 2, 0),
        lambda m: m.ones(2, 5).unfold(1, -1, 1),
        lambda m: m.ones(2, 5).unfold(2, 1, 1),
        lambda m: m.tensor(3.0).unfold(0, 2, 1),
    ],
)
def test_narrow_unflatten_and_unfold_refuse_as_torch(call):
    pytest.importorskip("torch")
    assert_raises_as_torch(call)


def test_unfold_on_meta_charges_as_on_cpu():
    def run(device):
        engine.memory.reset_peak_memory_stats(device)
        x = engine.ones(4, 3, 16, 16, device=device, requires_grad=True)
        before = engine.memory.memory_allocated(device)
        v = x.unfold(2, 4, 2)
        assert engine.memory.memory_allocated(device) == before  # a view
        v.sum().backward()
        return tuple(v.shape), v.stride(), engine.memory.max_memory_allocated(device) - before

    assert run("meta") == run("cpu")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.ones(3, 4).select(0, 5),
        lambda m: m.ones(3, 4).select(1, -5),
        lambda m: m.tensor(1.0).select(0, 0),
        lambda m: m.ones(3, 4).select(2, 0),
    ],
)
def test_select_refuses_as_torch(call):
    pytest.importorskip("torch")
    assert_raises_as_torch(call, IndexError)


@pytest.mark.parametrize(
    "index",
    [
        "x[1:, :-1]",
        "x[0, :5]",
        "x[2:10, 3]",
        "x[None, 1:, :-1]",
        "x[:, None, 2:]",
        "x[..., 1:]",
        "x[None]",
        "x[:, None]",
        "x[...]",
        "x[:]",
        "x[0:64]",
        "x[1]",
        "x[-1, None, ::2]",
        "x[-3]",
        "x[:, -1]",
        "x[5:2]",
        "x[:, 3:1000]",
        "x[::3, -2]",
        "x[60:, 127]",
    ],
)
def test_basic_indexing_backward_is_torchs_chain(index):
    """An index is torch's chain of steps, one view node each: a None's backward is a view, an
    alias's the gradient itself, each select or slice makes zeros of the shape before it (an
    intermediate lives until the step before has made its own): the blocks torch's profiler
    shows, in order, and the same gradients and node names."""
    import torch

    from tests.conftest import node_chain
    from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

    arr = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    held, leaves = {engine: {}, torch: {}}, {}

    def make(m):
        x = leaves[m] = m.tensor(arr, requires_grad=True)
        return forward_backward(m, lambda: eval(index, {}, {"x": x}) * 2, held[m])  # noqa: S307

    assert_steps_as_torch(make)
    names = {m: node_chain(held[m]["y"].grad_fn.next_functions[0][0]) for m in (engine, torch)}
    assert names[engine] == names[torch]
    assert np.array_equal(leaves[engine].grad.numpy(), leaves[torch].grad.numpy())
    np.testing.assert_array_equal(leaves[engine].grad.numpy(), leaves[torch].grad.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: x.t().reshape(-1),
        lambda m, x: x.t().flatten(),
        lambda m, x: x[:, ::2].reshape(2, -1),
        lambda m, x: m.reshape(x.t(), (4, 6)),
        lambda m, x: x.t().reshape(-1).mul_(2),  # in place on the copy: a plain op
        lambda m, x: x.t().reshape(24).relu_().sum(),
    ],
    ids=["reshape", "flatten", "strided", "function", "mul_", "relu_"],
)
def test_reshape_that_copies_is_torchs_unsafe_view_of_a_clone(call):
    """at::reshape that cannot view: _unsafe_view(clone(contiguous)), not a view of the copy:
    UnsafeViewBackward0 behind CloneBackward0, an in-place op on it a plain node (no CopySlices),
    every block forward and backward as torch's profiler shows."""
    import torch

    from tests.conftest import node_chain
    from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

    arr = np.random.default_rng(5).standard_normal((4, 6))
    chains = {}
    for m in (torch, engine):
        x = m.tensor(arr, requires_grad=True)
        y = call(m, x)
        chains[m] = (node_chain(y.grad_fn), y._base is None)
    assert chains[engine] == chains[torch]

    def make(m):
        x = m.tensor(arr, requires_grad=True)
        return forward_backward(m, lambda: call(m, x))

    assert_steps_as_torch(make)


@pytest.mark.parametrize(
    "index",
    [
        "x[3]",
        "x[-1]",
        "x[:, 5]",
        "x[:, -128]",
        "x[10:20]",
        "x[250:]",
        "x[:0]",
        "x[::3]",
        "x[:, 1:-1]",
        "x[1:, :-1]",
        "x[-1, None, ::2]",
        "x[7, 100:]",
    ],
)
def test_indexing_gradients_are_zero_outside_the_index_on_reused_memory(index):
    """The gradient of x[index] is made on memory the host cache hands back (here filled with
    NaN first): everything outside the index is zeroed, the index holds the gradient."""
    from engine import host_cache

    shape = (256, 128)  # 128 KiB of float32: large enough for the host cache
    arr = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(3):  # arrays of this size, NaN, into the cache
        junk = engine.full(shape, float("nan"))
        del junk
    assert host_cache.cached_bytes() > 0
    x = engine.tensor(arr, requires_grad=True)
    y = eval(index, {}, {"x": x})  # noqa: S307
    g = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    y.backward(engine.tensor(g))
    expected = np.zeros(shape, np.float32)
    view = eval(index, {}, {"x": expected})  # noqa: S307
    view[...] = g
    assert np.array_equal(x.grad.numpy(), expected)


CONTIGUITY_LAYOUTS = [
    ((2, 3), (3, 1)),
    ((2, 3), (1, 2)),
    ((2, 1, 3), (3, 99, 1)),  # a size-1 dim's stride does not count
    ((1, 1), (5, 7)),
    ((0, 3), (1, 5)),  # no elements: contiguous whatever the strides
    ((3, 0), (7, 5)),
    ((4, 2), (4, 2)),
    ((2, 2), (0, 1)),  # an expanded dim
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("shape, strides", CONTIGUITY_LAYOUTS)
def test_is_contiguous_is_torchs_rule_on_every_layout(device, shape, strides):
    """Tensor.is_contiguous answers as torch's for the same sizes and strides: from numpy's flag
    on cpu, from the layout's strides on meta (size-1 dims aside, no elements contiguous)."""
    torch = pytest.importorskip("torch")
    want = torch.empty(64).as_strided(shape, strides).is_contiguous()
    t = engine.empty(64, device=device).as_strided(shape, strides)
    assert t.is_contiguous() is want
    assert (
        t.transpose(0, 1).is_contiguous()
        is torch.empty(64).as_strided(shape, strides).transpose(0, 1).is_contiguous()
    )
