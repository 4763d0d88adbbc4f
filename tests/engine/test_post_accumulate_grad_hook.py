"""Tensor.register_post_accumulate_grad_hook as torch's: the hook sees the leaf once its .grad
is accumulated, in no_grad unless create_graph, not under autograd.grad; refusals in torch's
words; and the "optimizer step in backward" pattern (a per-parameter optimizer whose step and
zero_grad run in the hook, freeing each gradient as soon as it is used) allocates and frees
torch's blocks in torch's order."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch

torch = pytest.importorskip("torch")


def _t(m, shape, seed=0):
    return m.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("m", [engine, torch], ids=["engine", "torch"])
def test_hook_sees_the_accumulated_grad_after_tensor_hooks(m):
    v = _t(m, (3,)).requires_grad_()
    seen = []
    v.register_post_accumulate_grad_hook(
        lambda p: seen.append(("post", m.is_grad_enabled(), p.grad.tolist()))
    )
    v.register_hook(lambda g: seen.append(("pre", g.tolist())))
    (v * 2 + v).sum().backward()
    assert seen == [("pre", [3.0, 3.0, 3.0]), ("post", False, [3.0, 3.0, 3.0])]
    (v * 2).sum().backward()  # accumulated into the existing .grad: the hook sees the sum
    assert seen[-1] == ("post", False, [5.0, 5.0, 5.0])


def test_sgd_in_the_hook_updates_as_torch():
    lr = 0.1
    results = {}
    for m in (engine, torch):
        v = _t(m, (4,)).requires_grad_()

        def sgd(p):
            p.data.add_(p.grad, alpha=-lr)

        v.register_post_accumulate_grad_hook(sgd)
        (v * v).sum().backward()
        results[m] = (v.detach().numpy().copy(), v.grad.numpy().copy())
    np.testing.assert_allclose(results[engine][0], results[torch][0], rtol=1e-6)
    np.testing.assert_allclose(results[engine][1], results[torch][1], rtol=1e-6)


@pytest.mark.parametrize("m", [engine, torch], ids=["engine", "torch"])
def test_autograd_grad_accumulates_nothing_and_runs_no_hook(m):
    seen = []
    u = _t(m, (3,)).requires_grad_()
    u.register_post_accumulate_grad_hook(lambda p: seen.append(1))
    m.autograd.grad((u * 2).sum(), u)
    assert seen == [] and u.grad is None


@pytest.mark.parametrize("m", [engine, torch], ids=["engine", "torch"])
def test_removed_hook_does_not_run(m):
    v = _t(m, (2,)).requires_grad_()
    seen = []
    h = v.register_post_accumulate_grad_hook(lambda p: seen.append(1))
    h.remove()
    v.sum().backward()
    assert seen == []


def test_refusals_as_torch():
    assert_raises_as_torch(lambda m: m.zeros(2).register_post_accumulate_grad_hook(print))
    assert_raises_as_torch(
        lambda m: (m.zeros(2, requires_grad=True) * 2).register_post_accumulate_grad_hook(print)
    )

    def returns(value):
        def run(m):
            w = m.zeros(3, requires_grad=True)
            w.register_post_accumulate_grad_hook(lambda p: value(m))
            (w * 2).sum().backward()

        return run

    assert_raises_as_torch(returns(lambda m: 5))
    assert_raises_as_torch(returns(lambda m: m.ones(3)))


@pytest.mark.parametrize("m", [engine, torch], ids=["engine", "torch"])
def test_a_hook_may_return_the_leaf_itself(m):
    w = m.zeros(3, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-0.5))
    (w * 2).sum().backward()
    assert w.tolist() == [-1.0, -1.0, -1.0]


def _optimizer_in_backward(m, opt_name, transposed=False):
    """An MLP whose parameters each have their own optimizer, stepped in the hook (the
    PyTorch tutorial "How to save memory by fusing the optimizer step into the backward
    pass"); two steps: a warm-up that makes the optimizer state, then the measured one."""
    nn = m.nn
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 128))
    x, target = _t(m, (32, 256)), _t(m, (32, 128), 1)
    extra = m.nn.Parameter(_t(m, (128, 128), 2))  # used as extra.t(): its gradient is a view
    params = [*model.parameters(), extra]

    def make_opt(p):
        if opt_name == "sgd":
            return m.optim.SGD([p], lr=0.01, momentum=0.9)
        return m.optim.AdamW([p], lr=1e-3)

    opts = {p: make_opt(p) for p in params}

    def hook(p):
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(hook)

    def step():
        y = model(x)
        if transposed:
            y = y @ extra.t()
        m.nn.functional.mse_loss(y, target).backward()

    step()  # the warm-up: optimizer state exists from here on
    return [step]


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("transposed", [False, True], ids=["plain", "view-grad"])
def test_optimizer_in_backward_blocks_as_torch(opt_name, transposed):
    assert_steps_as_torch(lambda m: _optimizer_in_backward(m, opt_name, transposed))


def _mlp_step(m, fused):
    nn = m.nn
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
    x = _t(m, (8, 512))
    if fused:
        opts = {p: m.optim.SGD([p], lr=0.01) for p in model.parameters()}

        def hook(p):
            opts[p].step()
            opts[p].zero_grad(set_to_none=True)

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(hook)
    else:
        opt = m.optim.SGD(model.parameters(), lr=0.01)

    def region():
        model(x).sum().backward()
        if not fused:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return region


def test_optimizer_in_backward_lowers_the_peak_as_torch():
    """What the pattern is for: each gradient freed as soon as its parameter is updated, so the
    weight gradients never coexist; both peaks are torch's."""
    from tests.engine.test_memory_vs_torch import engine_peak, torch_peak

    peaks = {
        fused: (engine_peak(_mlp_step(engine, fused)), torch_peak(_mlp_step(torch, fused)))
        for fused in (False, True)
    }
    for got, expected in peaks.values():
        assert got == expected
    saved = peaks[False][0] - peaks[True][0]
    assert saved > 1024 * 512 * 4 * 3 // 4  # about a weight gradient (2 MiB) less
