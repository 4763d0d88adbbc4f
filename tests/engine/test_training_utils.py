"""Learning-rate schedulers and gradient clipping against PyTorch (values over many steps, the
returned norm, errors) and the bytes clipping allocates."""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
from engine.nn.utils import clip_grad_norm_, clip_grad_value_

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")


def _opt(m, lrs=(0.1, 0.02)):
    params = [m.nn.Parameter(m.zeros(2)) for _ in lrs]
    return m.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs, strict=True)])


SCHEDULES = {
    "step": lambda L, o: L.StepLR(o, step_size=3, gamma=0.5),
    "cosine": lambda L, o: L.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
    "lambda": lambda L, o: L.LambdaLR(o, lambda e: 0.95**e),
    "lambda_per_group": lambda L, o: L.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e + 1]),
    "step_then_cosine": None,  # two schedulers chained on one optimizer
}


def _lrs(m, name, steps=25):
    o = _opt(m)
    L = m.optim.lr_scheduler
    if name == "step_then_cosine":
        scheds = [L.StepLR(o, step_size=4, gamma=0.5), L.CosineAnnealingLR(o, T_max=5)]
    else:
        scheds = [SCHEDULES[name](L, o)]
    out = []
    for _ in range(steps):
        o.step()
        for s in scheds:
            s.step()
        out.append([g["lr"] for g in o.param_groups] + scheds[-1].get_last_lr())
    return out


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedulers_follow_torch_step_for_step(name):
    np.testing.assert_allclose(_lrs(engine, name), _lrs(torch, name), rtol=1e-12, atol=1e-15)


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("name", ["step", "cosine", "lambda"])
def test_a_tensor_lr_is_written_into_as_torch(name):
    """A tensor learning rate stays the same tensor, filled with each new value; the
    scheduler's last_lr are copies of it (torch's _update_param_group_val)."""
    runs = {}
    for m in (engine, torch):
        lr = m.tensor(0.1, dtype=m.float64)
        o = m.optim.SGD([m.nn.Parameter(m.zeros(2))], lr=lr)
        sched = SCHEDULES[name](m.optim.lr_scheduler, o)
        values = []
        for _ in range(9):
            o.step()
            sched.step()
            assert o.param_groups[0]["lr"] is lr
            last = sched.get_last_lr()[0]
            assert isinstance(last, m.Tensor) and last is not lr
            values.append(float(lr.item()))
        runs[m.__name__] = values
    np.testing.assert_allclose(runs["engine"], runs["torch"], rtol=1e-12)


def test_step_lr_by_hand_and_state_dict_round_trip():
    o = _opt(engine, (1.0,))
    s = engine.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.1)
    seen = []
    for _ in range(5):
        seen.append(o.param_groups[0]["lr"])
        s.step()
    np.testing.assert_allclose(seen, [1.0, 1.0, 0.1, 0.1, 0.01])
    state = s.state_dict()
    s2 = engine.optim.lr_scheduler.StepLR(_opt(engine, (1.0,)), step_size=9)
    s2.load_state_dict(state)
    assert s2.last_epoch == 5 and s2.step_size == 2


def test_scheduler_needs_an_optimizer():
    with pytest.raises(TypeError, match="is not an Optimizer"):
        engine.optim.lr_scheduler.StepLR(object(), 1)


def _grads(m):
    rng = np.random.default_rng(0)
    ps = [m.tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 4), (5,), (2, 2)]]
    for p in ps:
        (p * p * p).sum().backward()
    return ps


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ep, tp = _grads(engine), _grads(torch)
    e = clip_grad_norm_(ep, max_norm, norm_type)
    t = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type)
    assert e.shape == () and math.isclose(float(e), float(t), rel_tol=1e-12)
    for a, b in zip(ep, tp, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


@needs_torch
@pytest.mark.torch
def test_clip_grad_value_matches_torch():
    ep, tp = _grads(engine), _grads(torch)
    clip_grad_value_(ep, 0.7)
    torch.nn.utils.clip_grad_value_(tp, 0.7)
    for a, b in zip(ep, tp, strict=True):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_clipping_works_in_place_and_allocates_only_scalars():
    ps = _grads(engine)
    ptrs = [p.grad.data_ptr() for p in ps]
    from tests.engine.test_memory_vs_torch import engine_peak

    peak = engine_peak(lambda: clip_grad_norm_(ps, 0.1))
    # at most: three 0-d norms and their stack (3 values), float64; the norms die before the
    # total and the coefficient are made
    assert peak == (3 + 3) * 8
    assert [p.grad.data_ptr() for p in ps] == ptrs
    assert engine_peak(lambda: clip_grad_value_(ps, 0.01)) == 0


def test_nonfinite_norm_is_an_error_when_asked():
    p = engine.tensor([1.0, 2.0], requires_grad=True)
    p.grad = engine.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


def test_clip_grad_norm_on_meta_accounts_scalars():
    p = engine.empty(1000, 1000, device="meta", requires_grad=True)
    p.grad = engine.empty(1000, 1000, device="meta")
    total = clip_grad_norm_([p], 1.0)
    assert total.is_meta and total.shape == ()
