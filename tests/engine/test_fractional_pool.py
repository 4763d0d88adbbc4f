"""F.fractional_max_pool2d / 3d (and `_with_indices`), nn.FractionalMaxPool2d / 3d against torch
2.13: with the same `_random_samples` the values, indices and gradients are torch's (float64,
float32, float16, bfloat16: the window arithmetic in the input's dtype); without them the
drawn samples' block, the output, the indices and backward's gradient are torch's blocks;
node names, refusals, reprs, meta."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch, node_chain
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)

CASES = {  # name -> (input shape, kernel, output_size, output_ratio)
    "2d": ((2, 3, 11, 13), (2, 3), (5, 6), None),
    "2d_ratio": ((2, 3, 11, 13), 2, None, (0.5, 0.7)),
    "2d_unbatched": ((3, 9, 8), 3, 4, None),
    "2d_whole": ((1, 2, 6, 7), (6, 1), (1, 7), None),
    "3d": ((2, 2, 7, 8, 9), (2, 3, 2), (3, 4, 5), None),
    "3d_ratio": ((1, 2, 8, 8, 8), 2, None, 0.5),
    "3d_unbatched": ((2, 6, 7, 8), 2, (3, 3, 4), None),
}


def _rank(name):
    return 3 if name.startswith("3d") else 2


def _call(m, name, x, samples, with_indices=False):
    shape, kernel, size, ratio = CASES[name]
    F = m.nn.functional
    fn = F.fractional_max_pool3d if _rank(name) == 3 else F.fractional_max_pool2d
    if with_indices:
        fn = getattr(F, f"fractional_max_pool{_rank(name)}d_with_indices")
    return fn(x, kernel, output_size=size, output_ratio=ratio, _random_samples=samples,
              **({} if with_indices else {"return_indices": True}))  # fmt: skip


def _inputs(name, dtype=np.float64):
    shape = CASES[name][0]
    x = RNG.standard_normal(shape)
    batch = shape[0] if len(shape) == _rank(name) + 2 else 1
    samples = RNG.random((batch, shape[-_rank(name) - 1], _rank(name)))
    return x.astype(dtype), samples.astype(dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_indices_gradients_and_nodes_as_torch(name):
    x, s = _inputs(name)
    out = {}
    for m in (engine, torch):
        xt = m.tensor(x, requires_grad=True)
        y, idx = _call(m, name, xt * 1.0, m.tensor(s))
        y.backward(m.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape))))
        out[m] = (y.detach().numpy(), idx.numpy(), xt.grad.numpy(), node_chain(y.grad_fn))
    (ey, ei, eg, en), (ty, ti, tg, tn) = out[engine], out[torch]
    np.testing.assert_array_equal(ey, ty)
    np.testing.assert_array_equal(ei, ti)
    np.testing.assert_array_equal(eg, tg)
    assert en == tn == [f"FractionalMaxPool{_rank(name)}DBackward0", "MulBackward0"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["2d", "3d"])
def test_lower_precisions_pick_torch_windows(name, dtype):
    """The window starts are computed in the input's dtype: many output sizes, the same
    windows as torch's."""
    x, s = _inputs(name, np.float32)
    out = {}
    for m in (engine, torch):
        xt, st = m.tensor(x).to(getattr(m, dtype)), m.tensor(s).to(getattr(m, dtype))
        rows = []
        for size in range(1, min(CASES[name][0][-_rank(name) :]) - 2):
            fn = getattr(m.nn.functional, f"fractional_max_pool{_rank(name)}d")
            y, idx = fn(xt, 2, output_size=size + 1, return_indices=True, _random_samples=st)
            rows.append((y.float().numpy(), idx.numpy()))
        out[m] = rows
    for (ey, ei), (ty, ti) in zip(out[engine], out[torch], strict=True):
        np.testing.assert_array_equal(ei, ti)
        np.testing.assert_array_equal(ey, ty)


def test_nan_wins_as_in_torch():
    x, s = _inputs("2d")
    x[0, 0, :3, :3] = np.nan
    x[1, 2, 5, :] = -np.inf
    outs = [_call(m, "2d", m.tensor(x), m.tensor(s)) for m in (engine, torch)]
    np.testing.assert_array_equal(outs[0][0].numpy(), outs[1][0].numpy())
    np.testing.assert_array_equal(outs[0][1].numpy(), outs[1][1].numpy())


@pytest.mark.parametrize("name", ["2d", "3d", "2d_unbatched"])
def test_blocks_with_given_samples_as_torch(name):
    x, s = _inputs(name, np.float32)

    def make(m):
        xt, st = m.tensor(x, requires_grad=True), m.tensor(s)
        return forward_backward(m, lambda: _call(m, name, xt, st)[0])

    assert_steps_as_torch(make)


@pytest.mark.parametrize("name", ["2d_ratio", "3d", "3d_unbatched"])
def test_blocks_with_drawn_samples_as_torch(name):
    """Without samples F draws rand(N, C, rank) in the input's dtype: made before the output,
    freed when the call returns."""
    x, _ = _inputs(name, np.float64)

    def make(m):
        xt = m.tensor(x, requires_grad=True)
        return forward_backward(m, lambda: _call(m, name, xt, None)[0])

    assert_steps_as_torch(make)


def test_drawn_samples_give_valid_windows():
    x = engine.tensor(RNG.standard_normal((2, 3, 10, 10)))
    y, idx = engine.nn.functional.fractional_max_pool2d(
        x, 2, output_ratio=(0.5, 0.5), return_indices=True
    )
    assert tuple(y.shape) == (2, 3, 5, 5)
    np.testing.assert_array_equal(
        np.take_along_axis(x.numpy().reshape(2, 3, -1), idx.numpy().reshape(2, 3, -1), 2),
        y.numpy().reshape(2, 3, -1),
    )


def test_with_indices_forms_and_modules_as_torch():
    x, s = _inputs("3d")
    outs = []
    for m in (engine, torch):
        y, i = _call(m, "3d", m.tensor(x), m.tensor(s), with_indices=True)
        pool = m.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True,
                                        _random_samples=m.tensor(s))  # fmt: skip
        y2, i2 = pool(m.tensor(x))
        pool2 = m.nn.FractionalMaxPool2d(
            (2, 3), output_ratio=0.5, _random_samples=m.tensor(s[:, :, :2])
        )
        outs.append((y.numpy(), i.numpy(), y2.numpy(), i2.numpy(),
                     pool2(m.tensor(x[:, :, 0])).numpy(), repr(pool), repr(pool2),
                     [n for n, _ in pool.named_buffers()]))  # fmt: skip
    for a, b in zip(*outs, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b


def test_meta_shapes_and_backward():
    x = engine.ones(2, 3, 9, 9, device="meta", requires_grad=True)
    y, idx = engine.nn.functional.fractional_max_pool2d(x, 2, output_size=4, return_indices=True)
    assert tuple(y.shape) == (2, 3, 4, 4) and idx.dtype == engine.int64
    y.backward(engine.ones_like(y))
    assert tuple(x.grad.shape) == (2, 3, 9, 9)
    x3 = engine.ones(3, 6, 7, 8, device="meta", requires_grad=True)
    assert tuple(engine.nn.functional.fractional_max_pool3d(x3, 2, output_ratio=0.5).shape) == (
        3, 3, 3, 4,
    )  # fmt: skip


X2 = RNG.standard_normal((2, 3, 7, 9))
S2 = RNG.random((2, 3, 2))
X3 = RNG.standard_normal((2, 3, 5, 7, 9))
S3 = RNG.random((2, 3, 3))


def _f2(m, x=X2, s=S2, kernel=2, size=3, **kw):
    x = x if not isinstance(x, np.ndarray) else m.tensor(x)
    s = s if not isinstance(s, np.ndarray) else m.tensor(s)
    return m.nn.functional.fractional_max_pool2d(x, kernel, size, _random_samples=s, **kw)


def _f3(m, x=X3, s=S3, kernel=2, size=3, **kw):
    x = x if not isinstance(x, np.ndarray) else m.tensor(x)
    s = s if not isinstance(s, np.ndarray) else m.tensor(s)
    return m.nn.functional.fractional_max_pool3d(x, kernel, size, _random_samples=s, **kw)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: _f2(m, x=X2[0, 0]),
        lambda m: _f2(m, x=X2[None]),
        lambda m: _f2(m, x=X2[:, :0]),
        lambda m: _f2(m, s=S2[:, :1]),
        lambda m: _f2(m, s=S2[:1, :1]),
        lambda m: _f2(m, s=S2[..., :1]),
        lambda m: _f2(m, s=S2.reshape(2, 6)),
        lambda m: _f2(m, s=m.tensor(S2).float()),
        lambda m: _f2(m, s=m.tensor(S2[:1]).float()),
        lambda m: _f2(m, size=(8, 3)),
        lambda m: _f2(m, kernel=(2, 8)),
        lambda m: _f2(m, kernel=(2, 2, 2)),
        lambda m: _f2(m, size=(3, 3, 3)),
        lambda m: _f2(m, size=(-1, 3)),
        lambda m: _f2(m, x=m.tensor(X2).long(), s=m.tensor(S2).long()),
        lambda m: m.nn.functional.fractional_max_pool2d(m.tensor(X2), 2),
        lambda m: m.nn.functional.fractional_max_pool2d(m.tensor(X2), 2, output_ratio=0.5),
        lambda m: m.nn.functional.fractional_max_pool2d(m.tensor(X2), 2, output_ratio=(0.5,) * 3),
        lambda m: _f3(m, x=X3[0, 0]),
        lambda m: _f3(m, x=X3[:, :, :0]),
        lambda m: _f3(m, s=S3[:, :1]),
        lambda m: _f3(m, s=S3[..., :2]),
        lambda m: _f3(m, s=m.tensor(S3).float()),
        lambda m: _f3(m, kernel=(4, 2, 2)),
        lambda m: _f3(m, kernel=(2, 6, 2)),
        lambda m: _f3(m, kernel=1, size=(5, 3, 3)),
        lambda m: _f3(m, kernel=(2, 2, 9)),
        lambda m: _f3(m, kernel=(2, 2)),
        lambda m: _f3(m, size=(3, 3)),
        lambda m: _f3(m, x=m.tensor(X3).long(), s=m.tensor(S3).long()),
        lambda m: m.nn.functional.fractional_max_pool3d(m.tensor(X3), 2),
        lambda m: m.nn.functional.fractional_max_pool3d(m.tensor(X3), 2, output_ratio=(0.5, 0.5)),
        lambda m: m.nn.FractionalMaxPool2d(2),
        lambda m: m.nn.FractionalMaxPool3d(2),
        lambda m: m.nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5),
        lambda m: m.nn.FractionalMaxPool2d(2, output_ratio=1.5),
        lambda m: m.nn.FractionalMaxPool3d(2, output_ratio=(0.5, 0.5, 1.0)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_a_strided_input_is_copied_as_torch():
    """torch's kernel reads a contiguous copy of a strided input (after the outputs); the
    input's gradient is contiguous, copied to the leaf's strides by AccumulateGrad."""
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    s = RNG.random((2, 3, 2)).astype(np.float32)

    def make(m):
        xt = m.tensor(x).transpose(2, 3).detach().requires_grad_()
        st, held = m.tensor(s), {}

        def forward():
            held["y"] = m.nn.functional.fractional_max_pool2d(xt, 2, 4, _random_samples=st)

        def backward():
            held["y"].backward(m.ones(2, 3, 4, 4))

        return forward, backward

    assert_steps_as_torch(make)
