"""Indexing writes (issue 10): scatter family, index_add/copy/fill, masked_scatter, put, take.

Values and gradients (float64 central differences and PyTorch's) of every op, out of place and in
place; the in-place forms keep only the index or mask for backward, so they are free: checked
against torch's CPU profiler and on meta by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_autograd import gradcheck
from tests.engine.test_memory_vs_torch import engine_peak, torch_peak


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# distinct targets per column (scatter without reduction is undefined for duplicates)
IDX_UNIQUE = np.array([[0, 1, 2, 0], [2, 0, 1, 1]])
IDX_DUP = np.array([[0, 1, 0, 0], [0, 2, 0, 1], [1, 1, 2, 2]])


def _i(m, a):
    return m.tensor(a)


CASES = {
    # scatter family
    "scatter_src": (
        lambda m, x, s: x.scatter(0, _i(m, IDX_UNIQUE), s),
        [_x(3, 4), _x(2, 4, seed=1)],
    ),
    "scatter_value": (lambda m, x: x.scatter(0, _i(m, IDX_UNIQUE), 1.5), [_x(3, 4)]),
    "scatter_inplace": (
        lambda m, x, s: (x * 1).scatter_(0, _i(m, IDX_UNIQUE), s),
        [_x(3, 4), _x(2, 4, seed=1)],
    ),
    "scatter_value_inplace": (
        lambda m, x: (x * 1).scatter_(1, _i(m, IDX_UNIQUE.T), -2.0),
        [_x(4, 3)],
    ),
    "scatter_add": (
        lambda m, x, s: x.scatter_add(0, _i(m, IDX_DUP), s),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_add_inplace": (
        lambda m, x, s: (x * 1).scatter_add_(0, _i(m, IDX_DUP), s),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_sum": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "sum"),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_sum_exclude": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "sum", include_self=False),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_mean": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "mean"),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_mean_exclude": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "mean", include_self=False),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_amax": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "amax"),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_amin_exclude": (
        lambda m, x, s: x.scatter_reduce(0, _i(m, IDX_DUP), s, "amin", include_self=False),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "scatter_reduce_inplace": (
        lambda m, x, s: (x * 1).scatter_reduce_(0, _i(m, IDX_DUP), s, "amax"),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "gather": (lambda m, x: x.gather(1, _i(m, IDX_DUP)), [_x(3, 4)]),
    # index_*
    "index_add": (
        lambda m, x, s: x.index_add(0, _i(m, np.array([2, 0, 2])), s),
        [_x(3, 4), _x(3, 4, seed=1)],
    ),
    "index_add_alpha_inplace": (
        lambda m, x, s: (x * 1).index_add_(1, _i(m, np.array([1, 1])), s, alpha=-0.5),
        [_x(3, 4), _x(3, 2, seed=1)],
    ),
    "index_copy": (
        lambda m, x, s: x.index_copy(0, _i(m, np.array([2, 0])), s),
        [_x(3, 4), _x(2, 4, seed=1)],
    ),
    "index_copy_inplace": (
        lambda m, x, s: (x * 1).index_copy_(1, _i(m, np.array([3, 0])), s),
        [_x(3, 4), _x(3, 2, seed=1)],
    ),
    "index_fill": (lambda m, x: x.index_fill(1, _i(m, np.array([0, 2])), 0.25), [_x(3, 4)]),
    "index_fill_tensor_value": (
        lambda m, x, v: x.index_fill(0, _i(m, np.array([1])), v.sum()),
        [_x(3, 4), _x(2, seed=1)],
    ),
    "index_fill_inplace": (
        lambda m, x: (x * 1).index_fill_(0, _i(m, np.array([2])), -1.0),
        [_x(3, 4)],
    ),
    # masked_scatter, put, take
    "masked_scatter": (
        lambda m, x, s: x.masked_scatter(x > 0, s),
        [_x(3, 4), _x(3, 5, seed=1)],
    ),
    "masked_scatter_broadcast_mask": (
        lambda m, x, s: x.masked_scatter(m.tensor(np.array([True, False, True, False])), s),
        [_x(3, 4), _x(8, seed=1)],
    ),
    "masked_scatter_inplace": (
        lambda m, x, s: (x * 1).masked_scatter_(x < 0, s),
        [_x(3, 4), _x(12, seed=1)],
    ),
    "put": (
        lambda m, x, s: x.put(_i(m, np.array([0, 5, -1])), s),
        [_x(3, 4), _x(3, seed=1)],
    ),
    "put_accumulate_inplace": (
        lambda m, x, s: (x * 1).put_(_i(m, np.array([[1, 1], [7, 0]])), s, accumulate=True),
        [_x(3, 4), _x(2, 2, seed=1)],
    ),
    "take": (lambda m, x: x.take(_i(m, np.array([[0, 11], [3, 3]]))), [_x(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_vs_numeric_and_torch(torch, name):
    fn, arrays = CASES[name]
    gradcheck(fn, arrays, torch=torch)


def test_src_larger_than_index_gets_a_zero_padded_gradient():
    """src may be larger than index: its extra elements get zero gradient (torch's own
    autograd refuses the gather-shaped gradient there, so only the numeric check applies)."""
    fn = lambda m, x, s: m.scatter(x, 1, _i(m, np.array([[2], [0]])), s)  # noqa: E731
    gradcheck(fn, [_x(2, 3), _x(2, 2, seed=1)])


@pytest.mark.parametrize("name", ["scatter_src", "index_add", "masked_scatter", "put"])
def test_gradients_on_transposed_inputs(torch, name):
    fn, arrays = CASES[name]
    gradcheck(fn, arrays, layout="transposed", torch=torch)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_argument_values_and_no_derivative(torch, reduce):
    x, s = _x(3, 4), _x(3, 4, seed=1)
    got = engine.tensor(x).scatter(0, engine.tensor(IDX_DUP), engine.tensor(s), reduce=reduce)
    want = torch.tensor(x).scatter(0, torch.tensor(IDX_DUP), torch.tensor(s), reduce=reduce)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    got = engine.tensor(x).scatter_(0, engine.tensor(IDX_DUP), 2.0, reduce=reduce)
    want = torch.tensor(x).scatter_(0, torch.tensor(IDX_DUP), 2.0, reduce=reduce)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    y = engine.tensor(x, requires_grad=True).scatter(
        0, engine.tensor(IDX_DUP), engine.tensor(s), reduce=reduce
    )
    with pytest.raises(RuntimeError, match="derivative for aten::scatter is not implemented"):
        y.sum().backward()


def test_scatter_reduce_prod_and_int_mean_values(torch):
    x, s = _x(3, 4), _x(3, 4, seed=1)
    got = engine.tensor(x).scatter_reduce(0, engine.tensor(IDX_DUP), engine.tensor(s), "prod")
    want = torch.tensor(x).scatter_reduce(0, torch.tensor(IDX_DUP), torch.tensor(s), "prod")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    xi, si = np.arange(12).reshape(3, 4), np.arange(12).reshape(3, 4) * 3
    got = engine.tensor(xi).scatter_reduce(0, engine.tensor(IDX_DUP), engine.tensor(si), "mean")
    want = torch.tensor(xi).scatter_reduce(0, torch.tensor(IDX_DUP), torch.tensor(si), "mean")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_node_names_are_torchs(torch, name):
    fn, arrays = CASES[name]
    e = fn(engine, *[engine.tensor(a, requires_grad=True) for a in arrays])
    t = fn(torch, *[torch.tensor(a, requires_grad=True) for a in arrays])
    assert e.grad_fn.name() == t.grad_fn.name()


def test_bad_input_says_what_is_wrong():
    x = engine.zeros(3, 4)
    with pytest.raises(RuntimeError, match="out of bounds for dimension 0 with size 3"):
        x.scatter_(0, engine.tensor([[3, 0, 0, 0]]), 1.0)
    with pytest.raises(RuntimeError, match="Expected dtype int64 for index"):
        x.scatter_(0, engine.tensor([[0.0]]), 1.0)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.scatter_(0, engine.tensor([0, 1]), 1.0)
    with pytest.raises(RuntimeError, match="at least 9 elements"):
        x.masked_scatter_(
            engine.tensor([True, False, True, True, True]).reshape(5)[1:], engine.ones(3)
        )
    with pytest.raises(RuntimeError, match="same number of elements"):
        x.put_(engine.tensor([0, 1]), engine.ones(3))
    with pytest.raises(IndexError, match="out of range"):
        x.put_(engine.tensor([12]), engine.ones(1))
    with pytest.raises(RuntimeError, match="must have the shape of self"):
        x.index_add_(0, engine.tensor([0]), engine.ones(2, 4))
    with pytest.raises(RuntimeError, match="reduce argument must be either"):
        x.scatter_reduce(0, engine.zeros(1, 1, dtype=engine.int64), engine.ones(1, 1), "max")


# ---------------------------------------------------------------------------------------------
# memory: in place is free (only the index is kept), out of place copies the input once
# ---------------------------------------------------------------------------------------------
R, C = 256, 128

MEM_PROGRAMS = {
    "scatter_": lambda m, x, s, i: x.scatter_(0, i["rows"], s),
    "scatter": lambda m, x, s, i: x.scatter(0, i["rows"], s),
    "scatter_add_": lambda m, x, s, i: x.scatter_add_(0, i["rows"], s),
    "index_add_": lambda m, x, s, i: x.index_add_(0, i["vector"], s),
    "index_copy_": lambda m, x, s, i: x.index_copy_(0, i["perm"], s),
    "index_fill_": lambda m, x, s, i: x.index_fill_(1, i["few"], 0.0),
    "masked_scatter_": lambda m, x, s, i: x.masked_scatter_(i["mask"], s),
    "put_": lambda m, x, s, i: x.put_(i["flat"], i["values"]),
}


def _mem_program(m, name, backward):
    rng = np.random.default_rng(0)
    leaf = m.tensor(rng.standard_normal((R, C)).astype(np.float32), requires_grad=True)
    src = m.tensor(rng.standard_normal((R, C)).astype(np.float32), requires_grad=True)
    i = dict(
        rows=m.tensor(rng.integers(0, R, (R, C))),
        vector=m.tensor(rng.integers(0, R, R)),
        perm=m.tensor(rng.permutation(R)),
        few=m.tensor(np.array([3, 0, 7, 1])),
        mask=m.tensor(rng.standard_normal((R, C)) > 0),
        flat=m.tensor(np.array([5, 900, 17, 4000])),
        values=m.tensor(rng.standard_normal(4).astype(np.float32)),
    )
    x = leaf.clone()
    s = src.clone()
    keep = []

    def region():
        y = MEM_PROGRAMS[name](m, x, s, i)
        keep.append(y)
        if backward:
            y.backward(m.ones(R, C))

    return region


@pytest.mark.parametrize("name", sorted(MEM_PROGRAMS))
def test_forward_memory_matches_torch_profiler(torch, name):
    want = torch_peak(_mem_program(torch, name, False))
    got = engine_peak(_mem_program(engine, name, False))
    assert got == want == (R * C * 4 if not name.endswith("_") else 0)


# masked_scatter_'s backward runs masked_select, whose CPU kernel's int64 temporaries (the
# mask's count, its int64 copy and prefix sum) the engine charges as well
@pytest.mark.parametrize(
    "name", ["scatter_", "scatter_add_", "index_add_", "index_copy_", "put_", "masked_scatter_"]
)
def test_step_memory_matches_torch_profiler(torch, name):
    want = torch_peak(_mem_program(torch, name, True))
    got = engine_peak(_mem_program(engine, name, True))
    assert got == want


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: x.scatter_(0, i, 1.0),
        lambda x, i: x.scatter_add_(0, i, x.detach()),
        lambda x, i: x.index_fill_(0, i[0], 0.0),
        lambda x, i: x.masked_scatter_(x > 0, x.detach()),
    ],
)
def test_meta_in_place_is_free_and_backward_runs(fn):
    x = engine.empty(4096, 1024, device="meta", requires_grad=True).clone()
    i = engine.zeros(4096, 1024, dtype=engine.int64, device="meta")
    mask_bytes = 4096 * 1024  # x > 0 (only in the masked_scatter case)
    before = engine.memory.memory_allocated("meta")
    y = fn(x, i)
    grown = engine.memory.memory_allocated("meta") - before
    assert y is x and grown in (0, mask_bytes)
    y.sum().backward()


def test_meta_out_of_place_copies_once():
    x = engine.empty(4096, 1024, device="meta")
    i = engine.zeros(1, 1024, dtype=engine.int64, device="meta")
    before = engine.memory.memory_allocated("meta")
    y = x.scatter(0, i, 2.0)
    assert y.shape == x.shape
    assert engine.memory.memory_allocated("meta") - before == 4096 * 1024 * 4


def _scatter_reduce_program(m, inplace):
    rng = np.random.default_rng(0)
    x = m.tensor(rng.standard_normal((R, C)).astype(np.float32), requires_grad=True).clone()
    s = m.tensor(rng.standard_normal((R, C)).astype(np.float32), requires_grad=True).clone()
    i = m.tensor(rng.integers(0, R, (R, C)))
    keep = []

    def region():
        keep.append(
            x.scatter_reduce_(0, i, s, "amax") if inplace else x.scatter_reduce(0, i, s, "amax")
        )

    return region


@pytest.mark.parametrize("inplace", [False, True])
def test_scatter_reduce_in_place_pays_a_clone_like_torch(torch, inplace):
    """scatter_reduce's backward reads self: in place, autograd keeps a clone of it."""
    got = engine_peak(_scatter_reduce_program(engine, inplace))
    assert got == torch_peak(_scatter_reduce_program(torch, inplace)) == R * C * 4


@pytest.mark.parametrize(
    "name",
    [
        "scatter_reduce_sum",
        "scatter_reduce_sum_exclude",
        "scatter_reduce_mean",
        "scatter_reduce_mean_exclude",
    ],
)
def test_scatter_reduce_step_memory_matches_torch_profiler(torch, name):
    """Backward written op for op as PyTorch's scatter_reduce_backward (sum and mean)."""
    fn, arrays = CASES[name]

    def program(m):
        ts = [m.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]

        def region():
            y = fn(m, *ts)
            y.backward(m.ones(y.shape))

        return region

    assert engine_peak(program(engine)) == torch_peak(program(torch))


def test_excluded_self_equal_to_the_result_takes_no_share():
    """include_self=False: out[0] = max(src[0], src[1]) = src[0], so d out[0] / d src[0] = 1
    (central differences agree). PyTorch 2.x gives 0.5 here: it counts the excluded self[0],
    which happens to equal the result (its scatter_reduce_backward masks self only afterwards).
    The engine follows the derivative."""
    s = engine.tensor([3.0, 5.0], requires_grad=True)
    src = engine.tensor([3.0, 1.0], requires_grad=True)
    out = s.scatter_reduce(0, engine.tensor([0, 0]), src, "amax", include_self=False)
    out.backward(engine.ones(2))
    np.testing.assert_array_equal(src.grad.numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(s.grad.numpy(), [0.0, 1.0])


@pytest.mark.parametrize("name", ["masked_scatter", "masked_scatter_broadcast_mask"])
def test_masked_scatter_small_step_memory_matches_torch_profiler(torch, name):
    """Below 32768 elements with a same-shape mask masked_select takes its serial path (no int64
    copies); a broadcast mask takes the prefix-sum path at any size."""
    fn, arrays = CASES[name]

    def program(m):
        ts = [m.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]

        def region():
            y = fn(m, *ts)
            y.backward(m.ones(y.shape))

        return region

    assert engine_peak(program(engine)) == torch_peak(program(torch))
