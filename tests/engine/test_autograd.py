"""Gradients: float64 central differences for every differentiable core op, and PyTorch's grads.

Each case is one program written against a module `m` (engine or torch), so the same code runs
on both and the gradients can be compared directly.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine

EPS = 1e-6


def _sample(shape, domain, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if domain == "positive":
        x = np.abs(x) + 0.5
    elif domain == "unit":
        x = np.tanh(x) * 0.9
    elif domain == "spread":  # distinct values, far from ties and kinks
        x = rng.permutation(np.arange(int(np.prod(shape)))).reshape(shape) * 0.37 - 1.1
    return np.asarray(x, dtype=np.float64)


def _noncontig(m, arr):
    """A leaf with the values of arr laid out transposed (non-contiguous) when ndim >= 2."""
    if arr.ndim < 2:
        return m.tensor(arr, dtype=m.float64, requires_grad=True)
    t = m.tensor(np.ascontiguousarray(arr.T), dtype=m.float64)
    return t.permute(*reversed(range(arr.ndim))).detach().requires_grad_()


def _scalarize(y, weights):
    if isinstance(y, tuple):
        y = y[0]
    return (y * weights).sum()


def gradcheck(fn, arrays, *, layout="contiguous", torch=None, rtol=1e-6, atol=1e-7):
    """Check engine grads of fn(engine, *tensors) against central differences and PyTorch."""
    leaves = [
        (
            _noncontig(engine, a)
            if layout == "transposed"
            else engine.tensor(a, dtype=engine.float64, requires_grad=True)
        )
        for a in arrays
    ]
    y = fn(engine, *leaves)
    out = y[0] if isinstance(y, tuple) else y
    w = _sample(out.shape, "any", 99)
    loss = _scalarize(y, engine.tensor(w, dtype=engine.float64))
    loss.backward()
    analytic = [t.grad.numpy().copy() if t.grad is not None else np.zeros(t.shape) for t in leaves]
    for t, g in zip(leaves, analytic, strict=True):
        assert g.shape == t.shape

    # numeric: perturb each element of a detached copy
    with engine.no_grad():
        values = [engine.tensor(a, dtype=engine.float64) for a in arrays]
        for i, v in enumerate(values):
            arr = v.numpy()
            num = np.zeros(arr.shape)
            for idx in np.ndindex(arr.shape):
                orig = arr[idx]
                arr[idx] = orig + EPS
                fp = _scalarize(fn(engine, *values), engine.tensor(w)).item()
                arr[idx] = orig - EPS
                fm = _scalarize(fn(engine, *values), engine.tensor(w)).item()
                arr[idx] = orig
                num[idx] = (fp - fm) / (2 * EPS)
            np.testing.assert_allclose(
                analytic[i], num, rtol=1e-5, atol=1e-6, err_msg=f"input {i}: analytic vs numeric"
            )

    if torch is not None:
        tleaves = [
            (
                _noncontig(torch, a)
                if layout == "transposed"
                else torch.tensor(a, dtype=torch.float64, requires_grad=True)
            )
            for a in arrays
        ]
        ty = fn(torch, *tleaves)
        tout = ty[0] if isinstance(ty, tuple) else ty
        np.testing.assert_allclose(
            out.detach().numpy(), tout.detach().numpy(), rtol=rtol, atol=atol
        )
        _scalarize(ty, torch.tensor(w)).backward()
        for i, t in enumerate(tleaves):
            tg = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
            np.testing.assert_allclose(
                analytic[i], tg, rtol=rtol, atol=atol, err_msg=f"input {i}: engine vs torch"
            )
    return analytic


def _where(m, x, y):
    return m.where(x > 0, x, y)


def _scale(m, x):
    return x.scale(2.0, 0.5) if m is engine else x * 2.0 + 0.5


def _setitem(m, x, y):
    b = x * 2
    b[0] = y[0]
    b[:, 1] = 4.0
    return b


def _index_gather(m, x):
    return x[m.tensor([2, 0, 2])] * 1.5


# name: (fn(m, *tensors), shapes, domain)
CASES = {
    "neg": (lambda m, x: -x, [(3, 4)], "any"),
    "abs": (lambda m, x: x.abs(), [(3, 4)], "spread"),
    "exp": (lambda m, x: x.exp(), [(3, 4)], "any"),
    "log": (lambda m, x: x.log(), [(3, 4)], "positive"),
    "sqrt": (lambda m, x: x.sqrt(), [(3, 4)], "positive"),
    "sin": (lambda m, x: x.sin(), [(3, 4)], "any"),
    "cos": (lambda m, x: m.cos(x), [(3, 4)], "any"),
    "tanh": (lambda m, x: x.tanh(), [(3, 4)], "any"),
    "sigmoid": (lambda m, x: m.sigmoid(x), [(3, 4)], "any"),
    "relu": (lambda m, x: m.relu(x), [(3, 4)], "spread"),
    "erf": (lambda m, x: m.erf(x), [(3, 4)], "any"),
    "pow2": (lambda m, x: x**2, [(3, 4)], "any"),
    "pow3": (lambda m, x: x.pow(3), [(3, 4)], "any"),
    "pow_half": (lambda m, x: x**0.5, [(3, 4)], "positive"),
    "pow_neg": (lambda m, x: x**-1.5, [(3, 4)], "positive"),
    "pow_0": (lambda m, x: x**0 + x, [(3, 4)], "positive"),
    "pow_tt": (lambda m, x, y: x**y, [(3, 4), (4,)], "positive"),
    "rpow": (lambda m, x: 2.0**x, [(3, 4)], "any"),
    "square_rsqrt": (lambda m, x: x.square() + x.rsqrt(), [(3, 4)], "positive"),
    "clamp": (lambda m, x: x.clamp(-0.5, 0.7), [(3, 4)], "spread"),
    "clamp_min": (lambda m, x: m.clamp(x, min=0.2), [(3, 4)], "spread"),
    "clamp_max": (lambda m, x: x.clamp(max=-0.1), [(3, 4)], "spread"),
    "clamp_tensor": (lambda m, x, lo: x.clamp(min=lo + 0.05), [(3, 4), (4,)], "spread"),
    "clamp_tensors": (
        lambda m, x, lo, hi: m.clamp(x, lo - 0.05, hi + 0.51),
        [(3, 4), (4,), (3, 1)],
        "spread",
    ),
    "clamp_tensor_max": (lambda m, x, hi: x.clamp(max=hi + 0.05), [(3, 4), (3, 4)], "spread"),
    "scale": (_scale, [(3, 4)], "any"),
    "add": (lambda m, x, y: x + y, [(3, 4), (3, 4)], "any"),
    "add_bcast": (lambda m, x, y: m.add(x, y, alpha=2.5), [(2, 3, 4), (3, 1)], "any"),
    "add_scalar": (lambda m, x: 3 + x + 1.5, [(3, 4)], "any"),
    "sub": (lambda m, x, y: m.sub(x, y, alpha=-2), [(3, 4), (4,)], "any"),
    "rsub": (lambda m, x: 1.0 - x, [(3, 4)], "any"),
    "mul": (lambda m, x, y: x * y, [(3, 1), (1, 4)], "any"),
    "mul_scalar": (lambda m, x: 2.5 * x * 3, [(3, 4)], "any"),
    "mul_same": (lambda m, x: x * x, [(3, 4)], "any"),
    "div": (lambda m, x, y: x / y, [(3, 4), (4,)], "positive"),
    "rdiv": (lambda m, x: 2.0 / x, [(3, 4)], "positive"),
    "div_scalar": (lambda m, x: x / 4.0, [(3, 4)], "any"),
    "maximum": (lambda m, x, y: m.maximum(x, y), [(3, 4), (4,)], "spread"),
    "minimum": (lambda m, x, y: m.minimum(x, y), [(3, 4), (3, 4)], "spread"),
    "where": (_where, [(3, 4), (4,)], "spread"),
    "where_scalar": (lambda m, x: m.where(x > 0, x, 0.0), [(3, 4)], "spread"),
    "masked_fill": (lambda m, x: x.masked_fill(x > 0.3, 2.0), [(3, 4)], "spread"),
    "sum": (lambda m, x: x.sum(), [(2, 3, 4)], "any"),
    "sum_dim": (lambda m, x: x.sum(1), [(2, 3, 4)], "any"),
    "sum_dims_keep": (lambda m, x: x.sum((0, 2), keepdim=True), [(2, 3, 4)], "any"),
    "mean": (lambda m, x: x.mean(), [(2, 3, 4)], "any"),
    "mean_dim": (lambda m, x: x.mean(-1, keepdim=True), [(2, 3, 4)], "any"),
    "amax": (lambda m, x: x.amax(1), [(2, 3, 4)], "spread"),
    "amin_keep": (lambda m, x: m.amin(x, (0, 2), True), [(2, 3, 4)], "spread"),
    "max_all": (lambda m, x: x.max(), [(3, 4)], "spread"),
    "min_all": (lambda m, x: m.min(x), [(3, 4)], "spread"),
    "max_dim": (lambda m, x: x.max(1).values, [(3, 4)], "spread"),
    "min_dim_keep": (lambda m, x: x.min(0, keepdim=True)[0], [(3, 4)], "spread"),
    "max_binary": (lambda m, x, y: m.max(x, y), [(3, 4), (4,)], "spread"),
    "softmax": (lambda m, x: x.softmax(-1), [(3, 4)], "any"),
    "softmax_0": (lambda m, x: m.softmax(x, 0), [(3, 4)], "any"),
    "log_softmax": (lambda m, x: x.log_softmax(1), [(2, 3, 4)], "any"),
    "matmul_2d": (lambda m, x, y: x @ y, [(2, 3), (3, 4)], "any"),
    "matmul_vec": (lambda m, x, y: m.matmul(x, y), [(3,), (3,)], "any"),
    "matmul_mv": (lambda m, x, y: x @ y, [(2, 3), (3,)], "any"),
    "matmul_vm": (lambda m, x, y: x @ y, [(3,), (3, 2)], "any"),
    "matmul_batched": (lambda m, x, y: x @ y, [(2, 2, 3), (3, 2)], "any"),
    "matmul_bcast": (lambda m, x, y: x @ y, [(2, 1, 2, 3), (3, 3, 2)], "any"),
    "reshape": (lambda m, x: x.reshape(4, 3) * 2, [(3, 4)], "any"),
    "view": (lambda m, x: x.reshape(12).view(2, 6).exp(), [(3, 4)], "any"),
    "permute": (lambda m, x: x.permute(2, 0, 1).sin(), [(2, 3, 4)], "any"),
    "transpose": (lambda m, x: x.transpose(0, 1).exp(), [(3, 4)], "any"),
    "t": (lambda m, x, y: x.t() @ y, [(3, 4), (3, 2)], "any"),
    "squeeze_unsqueeze": (
        lambda m, x: x.unsqueeze(1).squeeze(1).unsqueeze(-1) * 2,
        [(3, 4)],
        "any",
    ),
    "expand": (lambda m, x: x.expand(2, 3, 4).exp(), [(3, 1)], "any"),
    "flatten": (lambda m, x: x.flatten(1).sin(), [(2, 3, 4)], "any"),
    "slice": (lambda m, x: x[1:, ::2].exp(), [(3, 4)], "any"),
    "select": (lambda m, x: x[1] * x[:, 2].sum(), [(3, 4)], "any"),
    "index_gather": (_index_gather, [(3, 4)], "any"),
    "clone": (lambda m, x: x.clone() * x, [(3, 4)], "any"),
    "contiguous": (lambda m, x: x.t().contiguous().exp(), [(3, 4)], "any"),
    "setitem": (_setitem, [(3, 4), (3, 4)], "any"),
    "split": (lambda m, x: x.split(2, 1)[1] * 3, [(3, 4)], "any"),
    "unbind": (lambda m, x: x.unbind(0)[1].exp(), [(3, 4)], "any"),
    "chain": (lambda m, x, y: ((x @ y).relu() + 1).log().sum(0), [(3, 4), (4, 2)], "positive"),
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_central_differences_and_torch(name, layout):
    fn, shapes, domain = CASES[name]
    try:
        import torch
    except ImportError:
        torch = None
    arrays = [_sample(s, domain, i) for i, s in enumerate(shapes)]
    gradcheck(fn, arrays, layout=layout, torch=torch)


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("name", ["exp", "sin", "sigmoid", "mul_same", "sum", "pow2", "softmax_0"])
def test_gradients_over_shapes(name, shape):
    fn, _, domain = CASES[name]
    if name == "softmax_0" and shape == ():
        fn = lambda m, x: m.softmax(x, 0) * x  # noqa: E731
    gradcheck(fn, [_sample(shape, domain, 0)])


def test_gradient_through_a_dtype_cast_matches_torch(torch):
    xv = _sample((3, 4), "any", 0)
    x, tx = engine.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    y, ty = x.to(engine.float32) * 2, tx.to(torch.float32) * 2
    assert y.dtype is engine.float32 and y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    ty.sum().backward()
    assert x.grad.dtype is engine.float64
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_gradients_of_0d_and_broadcast_scalars(torch):
    gradcheck(
        lambda m, x, y: x * y + y, [_sample((), "any", 0), _sample((3,), "any", 1)], torch=torch
    )
    gradcheck(
        lambda m, x, y: (x / y).sum(0),
        [_sample((2, 3), "any", 0), _sample((), "positive", 1)],
        torch=torch,
    )


# ---------------------------------------------------------------------------------------------
# in-place ops under autograd: gradients equal the out-of-place program's
INPLACE_CASES = {
    "relu_": lambda m, x: (x * 1).relu_(),
    "sigmoid_": lambda m, x: (x * 1).sigmoid_() * 2,
    "tanh_": lambda m, x: (x + 0).tanh_(),
    "exp_": lambda m, x: (x * 2).exp_(),
    "sqrt_": lambda m, x: (x * 2).sqrt_(),
    "sin_": lambda m, x: (x * 2).sin_(),
    "cos_": lambda m, x: (x * 2).cos_(),
    "log_": lambda m, x: (x * 2).log_(),
    "abs_": lambda m, x: (x * 2).abs_(),
    "pow_": lambda m, x: (x * 2).pow_(3),
    "neg_": lambda m, x: (x * 2).neg_(),
    "clamp_": lambda m, x: (x * 2).clamp_(-0.5, 1.0),
    "add_": lambda m, x, y: (x * 2).add_(y, alpha=3),
    "sub_": lambda m, x, y: (x * 2).sub_(y),
    "mul_": lambda m, x, y: (x * 2).mul_(y),
    "mul_scalar_": lambda m, x: (x * 2).mul_(3.0),
    "div_": lambda m, x, y: (x * 2).div_(y),
    "iadd_chain": lambda m, x, y: _iops(x, y),
    "copy_": lambda m, x, y: (x * 2).copy_(y) * x,
    "fill_": lambda m, x: (x * 2).fill_(3.0) * x,
    "zero_": lambda m, x: (x * 2).zero_() + x,
    "t_": lambda m, x: (x * 2).t_().exp(),
    "transpose_": lambda m, x: (x * 2).transpose_(0, 1) * 3,
    "masked_fill_": lambda m, x: (x * 2).masked_fill_(x > 0.5, 0.0),
    "view_mul_": lambda m, x: _through_view(x),
    "slice_relu_": lambda m, x: _slice_relu(x),
    "slice_sin_": lambda m, x: _slice_sin(x),
    "slice_mul_by_other": lambda m, x, y: _slice_mul(x, y),
    "view_of_view_": lambda m, x: _view_of_view(x),
    "base_then_view": lambda m, x: _base_then_view(x),
    "setitem_tensor_index": lambda m, x, y: _setitem_index(m, x, y),
    "t_on_a_view": lambda m, x: _t_on_view(m, x),
    "transpose_then_write": lambda m, x: _transpose_then_write(x),
    "swapdims_": lambda m, x: (x * 2).swapdims_(0, 1) * m.arange(3.0, dtype=m.float64),
    "swapaxes_": lambda m, x: (x * 2).swapaxes_(1, 0).exp(),
    "unsqueeze_squeeze_": lambda m, x: _unit_dims(m, x),
    "squeeze_on_a_view_then_write": lambda m, x: _squeeze_view_write(x),
}


def _unit_dims(m, x):
    b = (x * 2).unsqueeze_(1)  # [3, 1, 3]
    c = b * m.arange(3.0, dtype=m.float64).reshape(3, 1, 1)
    c.unsqueeze_(-1).squeeze_((1, 3))  # [3, 3]
    return c.squeeze_(0).exp()  # dim 0 is not of size 1: a node, no change


def _squeeze_view_write(x):
    b = (x * 2).unsqueeze(1)  # [3, 1, 3]
    v = b[1:]
    v.squeeze_(1)  # [2, 3], a view of b
    v.mul_(x[:2])
    return b.exp()


def _t_on_view(m, x):
    b = x * 2
    v = b[0:2]
    v.t_()
    return v * m.arange(6.0, dtype=m.float64).reshape(3, 2) + b[2].unsqueeze(1)


def _transpose_then_write(x):
    b = x * 2
    v = b[:, 1:]
    v.t_()
    v[0] = 0.0
    return b.exp()


def _iops(x, y):
    z = x * 1
    z += y
    z *= y
    z -= 1
    z /= y
    return z


def _through_view(x):
    b = x * 1
    b.view(-1).mul_(2)
    return b


def _slice_relu(x):
    b = x * 1
    b[1:].relu_()
    return b * 2


def _slice_sin(x):
    b = x * 1
    b[:, :2].sin_()
    return b.exp()


def _slice_mul(x, y):
    b = x * 1
    b[0].mul_(y[0])
    return b


def _view_of_view(x):
    b = x * 2
    v = b[1:]
    w = v[:, 1]
    w.exp_()
    return v * b[1:]


def _base_then_view(x):
    b = x * 2
    v = b[:, 1]
    b.mul_(x)
    return v.exp()


def _setitem_index(m, x, y):
    b = x * 2
    b[m.tensor([0, 2])] = y[:2] * 3
    return b


@pytest.mark.parametrize("name", list(INPLACE_CASES))
def test_inplace_gradients_match_torch(name):
    fn = INPLACE_CASES[name]
    n = fn.__code__.co_argcount - 1
    try:
        import torch
    except ImportError:
        torch = None
    arrays = [_sample((3, 3), "positive", i) for i in range(n)]
    if name == "t_on_a_view":
        arrays = [_sample((3, 3), "positive", 0)]
    if name in ("relu_", "slice_relu_", "abs_", "clamp_", "masked_fill_"):
        arrays = [_sample((3, 3), "spread", i) for i in range(n)]
    gradcheck(fn, arrays, torch=torch)


# ---------------------------------------------------------------------------------------------
# the seeds and PyTorch's rules
def test_seed_000_scale_then_scale_():
    a = engine.randn(3, 4, requires_grad=True)
    x = a.scale(2.0)
    y = x.scale_(2.0)
    assert y is x
    y.sum().backward()
    assert (a.grad.numpy() == 4).all()


def test_seed_000_scale_on_the_leaf_raises_and_leaves_it_unchanged():
    a = engine.randn(3, 4, requires_grad=True)
    before = a.detach().numpy().copy()
    with pytest.raises(
        RuntimeError,
        match="a leaf Variable that requires grad is being used in an in-place operation.",
    ):
        a.scale_(2.0)
    np.testing.assert_array_equal(a.detach().numpy(), before)
    assert a._version == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.relu_(),
        lambda a: a.add_(1),
        lambda a: a.sin_(),
        lambda a: a.zero_(),
        lambda a: a.fill_(1.0),
        lambda a: a.copy_(engine.ones(3, 4)),
        lambda a: a.t_(),
        lambda a: a.swapdims_(0, 1),
        lambda a: a.unsqueeze_(0),
        lambda a: a.squeeze_(),
        lambda a: a.__setitem__(0, 4.0),
        lambda a: a.__setitem__(engine.tensor([0]), 4.0),
        lambda a: engine.add(a, 1, out=a),
        lambda a: a.__iadd__(1),
        lambda a: a.masked_fill_(a > 0, 0.0),
    ],
)
def test_leaf_checks_run_before_the_kernel(call):
    a = engine.randn(3, 4, requires_grad=True)
    before = a.detach().numpy().copy()
    allocated = engine.memory.memory_allocated()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        call(a)
    np.testing.assert_array_equal(a.detach().numpy(), before)
    assert a._version == 0 and a.shape == (3, 4)
    assert engine.memory.memory_allocated() <= allocated + 48 + 1  # at most the operand made above


def test_view_of_a_leaf_may_not_be_written():
    a = engine.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        a[0].add_(1)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        a[:, 1] = 2.0


def test_leaf_may_be_written_under_no_grad():
    a = engine.ones(3, requires_grad=True)
    with engine.no_grad():
        a.mul_(2)
        a[0] = 5.0
    assert a.tolist() == [5, 2, 2] if False else a.detach().tolist() == [5, 2, 2]
    assert a.is_leaf and a.requires_grad


def test_seed_sin_then_relu_raises_the_version_error(torch):
    x = engine.randn(3, 4, requires_grad=True)
    a = x * 2
    s = a.sin()
    a.relu_()
    with pytest.raises(RuntimeError) as info:
        s.sum().backward()
    tx = torch.randn(3, 4, requires_grad=True)
    ta = tx * 2
    ts = ta.sin()
    ta.relu_()
    with pytest.raises(RuntimeError) as tinfo:
        ts.sum().backward()
    ours, theirs = str(info.value), str(tinfo.value)
    assert ours.split("Hint")[0] == theirs.split("Hint")[0].replace("torch.", "engine.")
    assert (
        "[engine.FloatTensor [3, 4]], which is output 0 of Relu, is at version 1; expected version 0 instead"
        in ours
    )


def _version_error(lib, program) -> str:
    with pytest.raises(RuntimeError) as info:
        program(lib)
    return str(info.value).split("Hint")[0].replace("torch.", "engine.")


def _saved_output_modified(lib):
    y = lib.rand(3, requires_grad=True).exp()  # exp keeps its own output for backward
    y.add_(1)
    y.sum().backward()


def _saved_input_modified_then_dropped(lib):
    a = lib.rand(3, requires_grad=True) * 2
    z = a.sin()  # sin keeps its input
    a.mul_(2)
    del a  # the error can no longer ask the tensor for its producer: the saved one is named
    z.sum().backward()


@pytest.mark.parametrize(
    "program, producer",
    [(_saved_output_modified, "Exp"), (_saved_input_modified_then_dropped, "Mul")],
)
def test_version_error_names_the_producer_as_torch_does(program, producer, torch):
    # the producer's label is worked out only when the error is raised
    ours = _version_error(engine, program)
    assert ours == _version_error(torch, program)
    assert f"which is output 0 of {producer}, is at version 1" in ours


def test_seed_exp_then_relu_succeeds_with_torchs_gradient(torch):
    xv = _sample((3, 4), "any", 0)
    x = engine.tensor(xv, requires_grad=True)
    a = x * 2
    s = a.exp()
    a.relu_()
    s.sum().backward()
    tx = torch.tensor(xv, requires_grad=True)
    ta = tx * 2
    ts = ta.exp()
    ta.relu_()
    ts.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_setitem_gives_the_overwritten_row_a_zero_gradient():
    x = engine.randn(3, 4, requires_grad=True)
    b = x * 2
    b[0] = 4.0
    b.sum().backward()
    g = x.grad.numpy()
    assert (g[0] == 0).all() and (g[1:] == 2).all()


def test_seed_004_clone_detach_and_accumulation():
    a = engine.tensor(1.0, requires_grad=True)
    a_ = a.clone()
    y = a**2
    z = a**2 + a_ * 3
    y.backward()
    assert a.grad.item() == 2
    z.backward()
    assert a_.grad is None
    assert a.grad.item() == 7
    assert a_.requires_grad and not a_.is_leaf and a_.grad_fn.name() == "CloneBackward0"

    d = a.detach()
    assert not d.requires_grad and d.is_leaf and d.data_ptr() == a.data_ptr()
    c = engine.tensor(1.0)
    c_ = c.clone()
    c_.requires_grad_()
    (c_**2).backward()
    assert c.grad is None and c_.grad.item() == 2


def test_seed_004_clone_and_detach_types():
    a = engine.tensor(1.0, requires_grad=True)
    b = a.clone()
    c = a.detach()
    a.data *= 3
    b += 1
    assert a.item() == 3 and c.item() == 3 and b.item() == 2
    assert repr(b) == "tensor(2., grad_fn=<AddBackward0>)"
    assert repr(a) == "tensor(3., requires_grad=True)"


# ---------------------------------------------------------------------------------------------
# API
def test_requires_grad_grad_fn_is_leaf():
    a = engine.ones(2, requires_grad=True)
    b = engine.ones(2)
    assert a.is_leaf and b.is_leaf and a.grad_fn is None
    c = a * b
    assert c.requires_grad and not c.is_leaf and c.grad_fn.name() == "MulBackward0"
    d = b * 2
    assert not d.requires_grad and d.is_leaf
    with pytest.raises(
        RuntimeError, match="only Tensors of floating point dtype can require gradients"
    ):
        engine.ones(2, dtype=engine.int64).requires_grad_()
    with pytest.raises(
        RuntimeError, match="you can only change requires_grad flags of leaf variables"
    ):
        c.requires_grad_(False)
    assert (a > 0).requires_grad is False


def test_backward_on_non_scalar_needs_gradient():
    a = engine.ones(2, 3, requires_grad=True)
    y = a * 3
    with pytest.raises(
        RuntimeError, match="grad can be implicitly created only for scalar outputs"
    ):
        y.backward()
    y.backward(gradient=engine.full((2, 3), 2.0))
    assert (a.grad.numpy() == 6).all()
    with pytest.raises(
        RuntimeError,
        match=r"Mismatch in shape: grad_output\[0\] has a shape of \[3\] and output\[0\] has a shape of \[2, 3\]",
    ):
        (a * 2).backward(engine.ones(3))


def test_backward_twice_needs_retain_graph():
    a = engine.ones(3, requires_grad=True)
    y = (a.exp() * a).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * 2 * np.e * np.ones(3))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_backward_of_something_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        engine.ones(2).sum().backward()


def test_retain_grad_keeps_a_non_leaf_gradient():
    a = engine.ones(3, requires_grad=True)
    b = a * 2
    b.retain_grad()
    assert b.retains_grad
    c = (b * b).sum()
    c.backward()
    assert b.grad.tolist() == [4, 4, 4]
    d = a * 3
    assert d.grad is None
    with pytest.raises(
        RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"
    ):
        engine.ones(2).retain_grad()


def test_no_grad_context_and_decorator():
    a = engine.ones(2, requires_grad=True)
    with engine.no_grad():
        assert not engine.is_grad_enabled()
        b = a * 2
        with engine.enable_grad():
            assert (a * 2).requires_grad
    assert not b.requires_grad and b.grad_fn is None and engine.is_grad_enabled()

    @engine.no_grad()
    def f(x):
        return x * 2

    assert not f(a).requires_grad
    assert engine.is_grad_enabled()
    with engine.set_grad_enabled(False):
        assert not (a * 2).requires_grad
    assert engine.is_grad_enabled()


def test_detach_and_detach_():
    a = engine.ones(2, requires_grad=True)
    b = a * 2
    d = b.detach()
    assert not d.requires_grad and d._version == b._version
    d.add_(1)
    assert b._version == 1
    b.detach_()
    assert not b.requires_grad and b.grad_fn is None
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        (a * 2)[0].detach_()


def test_grad_setter_checks_shape():
    a = engine.ones(2, requires_grad=True)
    a.grad = engine.zeros(2)
    with pytest.raises(RuntimeError, match=r"assigned grad has data of a different size"):
        a.grad = engine.zeros(3)
    a.grad = None


def test_accumulation_adds_into_existing_grad():
    a = engine.ones(3, requires_grad=True)
    (a * 2).sum().backward()
    g = a.grad
    (a * 3).sum().backward()
    assert a.grad is g and g.tolist() == [5, 5, 5]


def test_errors_for_views_made_under_no_grad_and_multi_output_views():
    a = engine.ones(4, 2, requires_grad=True)
    b = a * 2
    with engine.no_grad():
        v = b[0]
    with pytest.raises(
        RuntimeError,
        match="A view was created in no_grad mode and is being modified inplace with grad mode enabled",
    ):
        v.mul_(2)
    for parts in (b.split(2), b.unbind(0), b.chunk(2)):
        with pytest.raises(
            RuntimeError, match="This view is the output of a function that returns multiple views"
        ):
            parts[1].add_(1)
    assert b._version == 0


def _sin_then(op):
    def program(m):
        x = m.ones(3, requires_grad=True)
        a = x * 2
        s = a.sin()
        op(a)
        s.sum().backward()

    return program


def _exp_then_add(m):
    x = m.ones(3, requires_grad=True)
    y = x.exp()
    y.add_(1)
    y.sum().backward()


def _sin_then_relu_then_del(m):
    x = m.ones(3, requires_grad=True)
    a = x * 2
    s = a.sin()
    a.relu_()
    del a
    s.sum().backward()


def _saved_leaf_changed(m):
    w = m.ones(3, requires_grad=True)
    x = m.ones(3)
    y = (x * w).sum()
    with m.no_grad():
        x.add_(1)
    y.backward()


VERSION_ERRORS = {
    "sin_then_relu_": _sin_then(lambda a: a.relu_()),
    "sin_then_add_": _sin_then(lambda a: a.add_(1)),
    "sin_then_mul_": _sin_then(lambda a: a.mul_(2)),
    "sin_then_sigmoid_": _sin_then(lambda a: a.sigmoid_()),
    "sin_then_two_ops": _sin_then(lambda a: a.mul_(2).exp_()),
    "exp_output_then_add_": _exp_then_add,
    "saved_leaf_changed": _saved_leaf_changed,
}


@pytest.mark.parametrize("name", list(VERSION_ERRORS))
def test_version_errors_read_like_torchs(name, torch):
    program = VERSION_ERRORS[name]
    with pytest.raises(RuntimeError) as ours:
        program(engine)
    with pytest.raises(RuntimeError) as theirs:
        program(torch)
    expected = str(theirs.value).split(" Hint:")[0].replace("torch.", "engine.")
    assert str(ours.value).split(" Hint:")[0] == expected


def _node_order(lib):
    """The order backward runs the nodes of a graph with branches, joins and a chain, read
    from hooks on every intermediate tensor (they run as its grad_fn is about to run)."""
    t = {}
    x = lib.ones(3, requires_grad=True)
    t["a"] = x * 2
    t["b"] = x + 1
    t["c"] = t["a"] * t["b"]
    t["sin"] = t["c"].sin()
    t["exp"] = t["a"].exp()
    t["d"] = t["sin"] + t["exp"]
    t["db"] = t["d"] * t["b"]
    t["tanh"] = t["db"].tanh()  # a chain: each node the only one ready
    t["neg"] = t["tanh"].neg()
    t["e"] = t["neg"].exp()
    t["cos"] = t["a"].cos()  # made after the chain: a higher sequence number
    t["f"] = t["e"] + t["cos"]
    order = []
    for name, v in t.items():
        v.register_hook(lambda g, name=name: order.append(name))
    t["f"].sum().backward()
    return order, x.grad


def test_nodes_run_in_torchs_order_through_branches_and_chains(torch):
    mine, gx = _node_order(engine)
    theirs, tgx = _node_order(torch)
    assert mine == theirs
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-6)


def test_next_functions_are_torchs_pairs_none_included():
    """next_functions as torch's: a (node, input_nr) pair per tensor input, (None, 0) for one
    that needs no gradient (code that unpacks `for fn, nr in node.next_functions` runs)."""
    import torch

    seen = {}
    for m in (torch, engine):
        x = m.ones(3, requires_grad=True)
        c = m.ones(3)
        y = (x * c).sum()
        mul = y.grad_fn.next_functions[0][0]
        pairs = mul.next_functions
        seen[m] = (
            len(pairs),
            [(fn is None, nr) for fn, nr in pairs],
            pairs[0][0].name().removeprefix("torch::autograd::"),
        )
    assert seen[engine] == seen[torch]


@pytest.mark.parametrize(
    "expr",
    [
        "x * 2", "2 * x", "x + 2", "2 + x", "x - 2", "2 - x", "x / 2", "2 / x", "x ** 2",
        "2 ** x", "m.where(x > 0, x, 0.0)", "m.where(x > 0, 0.0, x)", "m.where(x > 0, x, x * 2)",
        "x.add(2, alpha=3)", "m.mul(x, 2)", "x.clamp(0, 1)", "m.maximum(x, x * 2)",
        "x.masked_fill(x > 0, 1.0)", "x.masked_fill(x > 0, v)", "x.clone().masked_fill_(x > 0, 1.0)",
        "x.sub(2, alpha=2)", "x.div(2, rounding_mode='floor')", "x.div(x * 2, rounding_mode='trunc')",
    ],
)  # fmt: skip
def test_node_and_its_inputs_as_torchs(expr):
    """The node's name and what its next_functions list, in torch's order: a Python number
    wrapped by torch's binding is an input with no gradient, where's condition and a mask are
    not inputs."""
    import torch

    seen = {}
    for m in (torch, engine):
        x = m.ones(3, requires_grad=True)
        v = m.tensor(2.0, requires_grad=True)
        fn = eval(expr, {"m": m, "x": x, "v": v}).grad_fn
        seen[m] = (
            fn.name(),
            [None if f is None else f.name().removeprefix("torch::autograd::") for f, _ in fn.next_functions],
        )  # fmt: skip
    assert seen[engine] == seen[torch]


def _tree(fn, depth=0) -> list[str]:
    if fn is None:
        return ["  " * depth + "None"]
    out = ["  " * depth + fn.name().removeprefix("torch::autograd::")]
    if "AccumulateGrad" not in fn.name():
        for f, _ in fn.next_functions:
            out += _tree(f, depth + 1)
    return out


@pytest.mark.parametrize(
    "call",
    [
        lambda m, lin, x: lin(x),
        lambda m, lin, x: lin(m.ones(5, 2, 4)),
        lambda m, lin, x: m.nn.functional.linear(x, lin.weight),
        lambda m, lin, x: lin(m.ones(4)),
    ],
    ids=["2d-bias", "3d-bias", "no-bias", "vector-bias"],
)
def test_linear_graph_as_torchs(call):
    """Linear's graph node by node: addmm(bias, input, weight.t()) lists the bias, the input and
    the weight behind its TBackward0, in that order (the engine's node keeps its own order and
    runs the transpose in its backward walk)."""
    import torch

    trees = {}
    for m in (torch, engine):
        m.manual_seed(0)
        lin = m.nn.Linear(4, 3)
        x = m.ones(2, 4, requires_grad=True)
        y = call(m, lin, x)
        trees[m] = _tree(y.grad_fn)
        assert y.grad_fn.next_functions == y.grad_fn.next_functions  # the same nodes each time
    assert trees[engine] == trees[torch]
