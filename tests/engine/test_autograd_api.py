"""engine.autograd.grad, backward(inputs=), Tensor.register_hook and inference_mode, against
PyTorch's behaviour (values, what is accumulated where, errors) and its CPU profiler (memory of
a differentiation that needs only some gradients)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch as an oracle")


def _leaves(m, seed=0):
    rng = np.random.default_rng(seed)
    x = m.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    w = m.tensor(rng.standard_normal((3, 5)), requires_grad=True)
    b = m.tensor(rng.standard_normal(5), requires_grad=True)
    return x, w, b


def _f(x, w, b):
    h = (x @ w + b).tanh()
    return h, (h * h).sum()


@needs_torch
@pytest.mark.torch
def test_grad_returns_gradients_for_leaves_and_non_leaves_and_accumulates_nothing():
    results = {}
    for m in (engine, torch):
        x, w, b = _leaves(m)
        h, loss = _f(x, w, b)
        gx, gh = m.autograd.grad(loss, [x, h])
        assert x.grad is None and w.grad is None and b.grad is None
        assert not gx.requires_grad and gx.grad_fn is None
        results[m] = (gx.numpy(), gh.numpy())
    for a, t in zip(results[engine], results[torch], strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-12)


@needs_torch
@pytest.mark.torch
def test_grad_with_grad_outputs_and_retain_graph():
    results = {}
    for m in (engine, torch):
        x, w, b = _leaves(m)
        h, _ = _f(x, w, b)
        go = m.tensor(np.arange(20.0).reshape(4, 5))
        (g1,) = m.autograd.grad(h, x, grad_outputs=go, retain_graph=True)
        (g2,) = m.autograd.grad(h, w, grad_outputs=go)
        results[m] = (g1.numpy(), g2.numpy())
    for a, t in zip(results[engine], results[torch], strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-12)


def test_grad_of_an_unused_input_needs_allow_unused():
    x, w, b = _leaves(engine)
    unused = engine.randn(2, requires_grad=True)
    _, loss = _f(x, w, b)
    with pytest.raises(RuntimeError, match=r"inputs\[1\]\) appears to not have been used"):
        engine.autograd.grad(loss, [x, unused], retain_graph=True)
    gx, gu = engine.autograd.grad(loss, [x, unused], allow_unused=True, retain_graph=True)
    assert gu is None and gx.shape == (4, 3)
    _, gz = engine.autograd.grad(loss, [x, unused], materialize_grads=True)
    assert gz.numpy().tolist() == [0.0, 0.0]


def test_grad_refuses_what_it_cannot_do():
    x, w, b = _leaves(engine)
    _, loss = _f(x, w, b)
    with pytest.raises(RuntimeError, match="does not require grad"):
        engine.autograd.grad(loss, [engine.randn(2)])
    with pytest.raises(NotImplementedError, match="create_graph"):
        engine.autograd.grad(loss, [x], create_graph=True)


@needs_torch
@pytest.mark.torch
def test_backward_with_inputs_accumulates_only_into_those():
    results = {}
    for m in (engine, torch):
        x, w, b = _leaves(m)
        h, loss = _f(x, w, b)
        loss.backward(inputs=[w])
        assert x.grad is None and b.grad is None
        results[m] = w.grad.numpy()
    np.testing.assert_allclose(results[engine], results[torch], rtol=1e-12)


@needs_torch
@pytest.mark.torch
def test_register_hook_on_leaf_and_non_leaf_changes_the_gradient_like_torch():
    results = {}
    for m in (engine, torch):
        x, w, b = _leaves(m)
        seen = []
        w.register_hook(lambda g: g * 2)  # a leaf: before accumulation into w.grad
        h = (x @ w + b).tanh()
        handle = h.register_hook(lambda g, seen=seen: seen.append(g.shape) or g.clamp(-0.5, 0.5))
        (h * h).sum().backward(retain_graph=True)
        assert seen == [(4, 5)]
        handle.remove()
        first = (x.grad.numpy().copy(), w.grad.numpy().copy(), b.grad.numpy().copy())
        x.grad = w.grad = b.grad = None
        (h * h).sum().backward()
        assert seen == [(4, 5)]  # removed
        results[m] = first + (x.grad.numpy(), w.grad.numpy())
    for a, t in zip(results[engine], results[torch], strict=True):
        np.testing.assert_allclose(a, t, rtol=1e-12)


def test_register_hook_needs_a_tensor_that_requires_grad():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        engine.randn(3).register_hook(lambda g: g)


def test_inference_mode_records_no_history_and_is_a_decorator_too():
    x = engine.randn(3, requires_grad=True)
    with engine.inference_mode():
        assert engine.is_inference_mode_enabled() and not engine.is_grad_enabled()
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert not engine.is_inference_mode_enabled() and engine.is_grad_enabled()
    with engine.inference_mode(False):
        assert (x * 2).requires_grad

    @engine.inference_mode()
    def f(t):
        return t.sin()

    assert not f(x).requires_grad


# ---------------------------------------------------------------------------------------------
# memory: grad() computes only what leads to its inputs
# ---------------------------------------------------------------------------------------------
def _mlp_grad_program(m, wrt):
    m.manual_seed(0)
    model = m.nn.Sequential(m.nn.Linear(256, 512), m.nn.ReLU(), m.nn.Linear(512, 256))
    x = m.tensor(
        np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32),
        requires_grad=True,
    )

    def region():
        loss = model(x).pow(2).sum()
        if wrt == "input":
            (g,) = m.autograd.grad(loss, [x])
        elif wrt == "first_weight":
            (g,) = m.autograd.grad(loss, [model[0].weight])
        else:
            loss.backward(inputs=[model[2].weight])
        del loss

    return region


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("wrt", ["input", "first_weight", "backward_inputs_last_weight"])
def test_grad_peak_matches_torch_profiler(wrt):
    e = engine_peak(_mlp_grad_program(engine, wrt))
    t = torch_peak(_mlp_grad_program(torch, wrt))
    assert abs(e - t) <= SCALAR_SLACK, (e, t)


def test_grad_wrt_input_allocates_no_weight_gradients():
    # Given the MLP, d loss / d x needs grad_input of each Linear only: no [512, 256] or
    # [256, 512] weight gradient (512 KiB each) is ever allocated.
    sizes = []
    from engine.allocator.events import MemoryObserver
    from engine.allocator.tracked import get_allocator

    class Sizes(MemoryObserver):
        def on_alloc(self, event):
            sizes.append(event.requested)

    region = _mlp_grad_program(engine, "input")
    with get_allocator("cpu").observing(Sizes()):
        region()
    assert 512 * 256 * 4 not in sizes
