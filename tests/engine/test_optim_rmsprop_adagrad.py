"""RMSprop and Adagrad: PyTorch's single-tensor updates (the cpu default), checked against torch
for the parameters after three steps (float64, tight) and for the memory of the optimizer's
construction and of a step (state in torch's order, the per-parameter temporaries), measured
by torch's CPU profiler as in test_memory_vs_torch."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_memory_vs_torch import SCALAR_SLACK, engine_peak, torch_peak

CONFIGS = {
    "rmsprop": ("RMSprop", {}),
    "rmsprop_momentum_centered": ("RMSprop", {"momentum": 0.9, "centered": True}),
    "rmsprop_weight_decay_maximize": ("RMSprop", {"weight_decay": 0.1, "maximize": True}),
    "adagrad": ("Adagrad", {}),
    "adagrad_decay": (
        "Adagrad",
        {"lr_decay": 0.1, "weight_decay": 0.05, "initial_accumulator_value": 0.2},
    ),
}


def _model(lib, dtype):
    torch_like = lib.nn.Sequential(lib.nn.Linear(16, 32), lib.nn.Tanh(), lib.nn.Linear(32, 4))
    return torch_like.double() if dtype == "float64" else torch_like


def _data(lib, dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16)).astype(dtype)
    y = rng.standard_normal((8, 4)).astype(dtype)
    return lib.tensor(x), lib.tensor(y)


def _pair(name, dtype):
    import torch

    torch.manual_seed(0)
    t_model = _model(torch, dtype)
    e_model = _model(engine, dtype)
    e_model.load_state_dict({k: v.detach().numpy() for k, v in t_model.state_dict().items()})
    cls, kw = CONFIGS[name]
    return (
        (e_model, getattr(engine.optim, cls)(e_model.parameters(), **kw)),
        (t_model, getattr(torch.optim, cls)(t_model.parameters(), **kw)),
    )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_three_steps_end_with_torchs_parameters(name):
    torch = pytest.importorskip("torch")
    (em, eo), (tm, to) = _pair(name, "float64")
    for lib, model, opt in ((engine, em, eo), (torch, tm, to)):
        x, y = _data(lib, "float64")
        for _ in range(3):
            opt.zero_grad()
            lib.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    for (k, ev), (_, tv) in zip(em.state_dict().items(), tm.state_dict().items(), strict=True):
        np.testing.assert_allclose(
            ev.numpy(), tv.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=k
        )
    e_state = {k: sorted(v) for k, v in eo.state_dict()["state"].items()}
    t_state = {k: sorted(v) for k, v in to.state_dict()["state"].items()}
    assert e_state == t_state  # the same state entries per parameter


@pytest.mark.parametrize("name", list(CONFIGS))
def test_construction_and_steps_peak_as_torchs(name):
    torch = pytest.importorskip("torch")
    (em, _), (tm, _) = _pair(name, "float32")
    cls, kw = CONFIGS[name]
    peaks = []
    for lib, model, measure in ((engine, em, engine_peak), (torch, tm, torch_peak)):
        x, y = _data(lib, "float32")
        lib.nn.functional.mse_loss(model(x), y).backward()  # gradients exist before the region

        def region(lib=lib, model=model, x=x, y=y):
            opt = getattr(lib.optim, cls)(model.parameters(), **kw)
            opt.step()
            opt.zero_grad(set_to_none=False)
            lib.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            region.keep = opt

        peaks.append(measure(region))
    assert abs(peaks[0] - peaks[1]) <= SCALAR_SLACK, peaks


def test_adagrad_makes_its_state_with_the_optimizer():
    p = engine.nn.Parameter(engine.zeros(100))
    before = engine.memory.memory_allocated()
    opt = engine.optim.Adagrad([p], initial_accumulator_value=0.5)
    assert engine.memory.memory_allocated() - before == 100 * 4 + 4  # sum and step
    assert opt.state[p]["sum"].tolist() == [0.5] * 100


def test_bad_hyper_parameters_raise_torchs_messages():
    p = [engine.nn.Parameter(engine.zeros(2))]
    with pytest.raises(ValueError, match="Invalid alpha value: -1"):
        engine.optim.RMSprop(p, alpha=-1)
    with pytest.raises(ValueError, match="Invalid lr_decay value: -0.5"):
        engine.optim.Adagrad(p, lr_decay=-0.5)
