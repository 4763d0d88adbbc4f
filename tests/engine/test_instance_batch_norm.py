"""Layer norm's cpu backward (its per-thread partial sums) and batch norm's cpu kernel as torch 2.13's (its per-channel workspace pairs, backward's second
grad_input, the running stats its node keeps; eval's stats read back from the running ones) and
instance norm (torch's composite: batch norm of [1, N*C, ...] with repeated weight, bias and
running stats), against torch's profiler, values and gradients; module reprs and refusals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

torch = pytest.importorskip("torch")

X4 = np.random.default_rng(0).standard_normal((4, 8, 16, 16)).astype(np.float32)
X4C = np.random.default_rng(1).standard_normal((2, 32, 16, 16)).astype(np.float32)

CASES = {  # name -> (input, module maker, train)
    "batch_norm_train": (X4C, lambda m: m.nn.BatchNorm2d(32), True),
    "batch_norm_train_no_affine": (X4C, lambda m: m.nn.BatchNorm2d(32, affine=False), True),
    "batch_norm_eval": (X4C, lambda m: m.nn.BatchNorm2d(32), False),
    "batch_norm_no_stats": (X4C, lambda m: m.nn.BatchNorm2d(32, track_running_stats=False), True),
    "layer_norm": (X4C, lambda m: m.nn.LayerNorm(16), True),
    "layer_norm_no_bias": (X4C, lambda m: m.nn.LayerNorm((16, 16), bias=False), True),
    "instance_norm_2d": (X4, lambda m: m.nn.InstanceNorm2d(8), True),
    "instance_norm_affine": (X4, lambda m: m.nn.InstanceNorm2d(8, affine=True), True),
    "instance_norm_running": (
        X4,
        lambda m: m.nn.InstanceNorm2d(8, track_running_stats=True),
        True,
    ),
    "instance_norm_eval_running": (
        X4,
        lambda m: m.nn.InstanceNorm2d(8, track_running_stats=True),
        False,
    ),
    "instance_norm_1d": (X4[:, :, 0].copy(), lambda m: m.nn.InstanceNorm1d(8), True),
    "instance_norm_unbatched": (X4[0], lambda m: m.nn.InstanceNorm2d(8, affine=True), True),
}


def _module(m, name):
    arr, make, train = CASES[name]
    mod = make(m)
    if hasattr(mod, "running_var") and mod.running_var is not None:
        with torch.no_grad() if m is torch else engine.no_grad():
            mod.running_mean.add_(0.3)
            mod.running_var.mul_(1.7)
    if mod.weight is not None:
        w = np.linspace(0.5, 1.5, mod.weight.numel()).astype(np.float32)
        w = w.reshape(tuple(mod.weight.shape))
        with torch.no_grad() if m is torch else engine.no_grad():
            mod.weight.copy_(m.tensor(w))
            if mod.bias is not None:
                mod.bias.copy_(m.tensor(w[::-1].copy()))
    mod.train(train)
    return arr, mod


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_gradients_and_running_stats_as_torch(name):
    out = []
    for m in (engine, torch):
        arr, mod = _module(m, name)
        x = m.tensor(arr.astype(np.float64), requires_grad=True)
        mod = mod.to(m.float64) if m is torch else mod.to(dtype=engine.float64)
        y = mod(x)
        y.backward(m.tensor(np.random.default_rng(2).standard_normal(tuple(y.shape))))
        running = getattr(mod, "running_mean", None)
        stats = [] if running is None else [mod.running_mean, mod.running_var]
        params = [p.grad for p in mod.parameters()]
        out.append(
            [y.detach().numpy(), x.grad.numpy()] + [s.numpy() for s in stats]
            + [p.numpy() for p in params]
        )  # fmt: skip
    assert len(out[0]) == len(out[1])
    for e, t in zip(*out, strict=True):
        np.testing.assert_allclose(e, t, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocations_forward_and_backward_as_torch(name):
    def make(m):
        arr, mod = _module(m, name)
        x = m.tensor(arr, requires_grad=True)
        return forward_backward(m, lambda: mod(x) * 1.5)

    assert_steps_as_torch(make)


def test_module_reprs_as_torch():
    for name, kw in [
        ("InstanceNorm1d", {}),
        ("InstanceNorm2d", {"affine": True}),
        ("InstanceNorm3d", {"track_running_stats": True, "eps": 1e-3}),
    ]:
        assert repr(getattr(engine.nn, name)(8, **kw)) == repr(getattr(torch.nn, name)(8, **kw))


def test_a_mismatched_channel_count_warns_without_affine_as_torch():
    for m in (engine, torch):
        with pytest.warns(UserWarning, match="does not match num_features"):
            m.nn.InstanceNorm2d(3)(m.ones(2, 4, 3, 3))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.nn.InstanceNorm2d(4, affine=True)(m.ones(2, 3, 3, 3)),
        lambda m: m.nn.InstanceNorm2d(4)(m.ones(2, 4)),
        lambda m: m.nn.functional.instance_norm(m.ones(1, 4, 1, 1)),
        lambda m: m.nn.functional.instance_norm(m.ones(2, 4, 3), use_input_stats=False),
    ],
)
def test_refusals_as_torch(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_raises_as_torch(call)


# torch's cpu kernels take their channels-last path for a contiguous input whose image size is
# 1: per-thread partial sums in a [threads, C] buffer for the statistics (when there are more
# rows than threads) and a [2, threads, C] one in backward, plus backward's ones [C] for a
# missing weight and, in eval, the invstd [C] it computes
PER_THREAD = [
    ((16, 64), "float32", True, True, True),
    ((16, 64), "float64", False, True, True),
    ((16, 64), "float32", True, False, True),
    ((16, 64), "float32", False, False, True),
    ((16, 64), "float32", True, True, False),
    ((2, 64), "float32", True, True, True),  # no more rows than threads: no buffer forward
    ((16, 64, 1, 1), "float32", True, True, True),
    ((16, 64, 10), "float32", True, True, True),  # the contiguous path: none of them
]


@pytest.mark.parametrize(
    ("shape", "dtype", "affine", "train", "track"),
    PER_THREAD,
    ids=[f"{s}-{d}-affine{a}-train{t}-track{k}" for s, d, a, t, k in PER_THREAD],
)
def test_per_thread_partial_sums_of_the_channels_last_kernels_as_torch(
    shape, dtype, affine, train, track
):
    def make(m):
        kind = m.nn.BatchNorm2d if len(shape) == 4 else m.nn.BatchNorm1d
        bn = kind(64, affine=affine, track_running_stats=track).to(getattr(m, dtype))
        bn.train(train)
        x = m.tensor(np.random.default_rng(0).standard_normal(shape).astype(dtype))
        return forward_backward(m, lambda: bn(x.requires_grad_()))

    assert_steps_as_torch(make)
