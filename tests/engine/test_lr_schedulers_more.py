"""The rest of torch.optim.lr_scheduler against PyTorch: MultiplicativeLR, MultiStepLR,
ConstantLR, LinearLR, ExponentialLR, PolynomialLR, SequentialLR, ChainedScheduler,
CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR and ReduceLROnPlateau. The lr (and the cycled
momentum or betas) of every param group after every step must equal torch's exactly: both run the
same Python float arithmetic. Also step(epoch), state_dict round trips, and argument errors (same
exception type and message)."""

from __future__ import annotations

import copy
import inspect
import warnings

import pytest

import engine
from tests.conftest import assert_raises_as_torch

pytestmark = [
    pytest.mark.torch,
    # torch's own warning when a ChainedScheduler inside a SequentialLR steps at construction
    pytest.mark.filterwarnings("ignore:Detected call of:UserWarning"),
]

STEPS = 30
GROUP_KEYS = ("lr", "momentum", "betas", "initial_lr", "max_lr", "min_lr")
GROUP_KEYS += ("max_momentum", "base_momentum")


class Scale:
    """A callable object: its __dict__ is what torch saves of it in a state_dict."""

    def __init__(self, factor):
        self.factor = factor

    def __call__(self, epoch):
        return self.factor


def _opt(m, kind="sgd", lrs=(0.1,)):
    params = [m.nn.Parameter(m.ones(2)) for _ in lrs]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(params, lrs, strict=True)]
    if kind == "sgd":
        return m.optim.SGD(groups, lr=lrs[0], momentum=0.9)
    if kind == "sgd0":  # momentum 0: still in defaults, so CyclicLR/OneCycleLR may cycle it
        return m.optim.SGD(groups, lr=lrs[0])
    if kind == "adam":
        return m.optim.Adam(groups, lr=lrs[0], betas=(0.9, 0.99))
    if kind == "adamw":
        return m.optim.AdamW(groups, lr=lrs[0])
    if kind == "rmsprop":
        return m.optim.RMSprop(groups, lr=lrs[0], momentum=0.5)
    if kind == "adagrad":  # no momentum, no betas
        return m.optim.Adagrad(groups, lr=lrs[0])
    raise AssertionError(kind)


def _backward_and_step(m, o):
    o.zero_grad()
    loss = sum((p * p).sum() for g in o.param_groups for p in g["params"])
    loss.backward()
    o.step()


def _snapshot(sched, o):
    """Every group's scheduled keys and the scheduler's last lrs, as plain Python values."""
    groups = [{k: g[k] for k in GROUP_KEYS if k in g} for g in o.param_groups]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    return groups, list(sched.get_last_lr())


# name: (optimizer kind, group lrs, build(L, o) -> scheduler)
CASES = {
    "multiplicative": ("sgd", (0.1,), lambda L, o: L.MultiplicativeLR(o, lambda e: 0.95)),
    "multiplicative_per_group": (
        "sgd",
        (0.1, 0.02),
        lambda L, o: L.MultiplicativeLR(o, [lambda e: 0.9, lambda e: 1.0 + 0.01 * e]),
    ),
    "multiplicative_object": ("sgd", (0.1,), lambda L, o: L.MultiplicativeLR(o, Scale(0.97))),
    "multistep": ("sgd", (0.1, 0.3), lambda L, o: L.MultiStepLR(o, [3, 7, 7, 12], gamma=0.5)),
    "multistep_unsorted": ("sgd", (0.1,), lambda L, o: L.MultiStepLR(o, (20, 4), gamma=0.3)),
    "constant_default": ("sgd", (0.1, 0.05), lambda L, o: L.ConstantLR(o)),
    "constant": ("sgd", (0.1,), lambda L, o: L.ConstantLR(o, factor=0.5, total_iters=4)),
    "constant_factor_one": ("sgd", (0.1,), lambda L, o: L.ConstantLR(o, factor=1.0)),
    "linear_default": ("sgd", (0.1, 0.05), lambda L, o: L.LinearLR(o)),
    "linear": (
        "sgd",
        (0.1,),
        lambda L, o: L.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=10),
    ),
    "linear_decay": (
        "sgd",
        (0.1,),
        lambda L, o: L.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=7),
    ),
    "exponential": ("sgd", (0.1, 0.01), lambda L, o: L.ExponentialLR(o, gamma=0.9)),
    "polynomial_default": ("sgd", (0.1,), lambda L, o: L.PolynomialLR(o)),
    "polynomial": (
        "sgd",
        (0.1, 0.02),
        lambda L, o: L.PolynomialLR(o, total_iters=10, power=2.0),
    ),
    "polynomial_sqrt": ("sgd", (0.1,), lambda L, o: L.PolynomialLR(o, total_iters=25, power=0.5)),
    "warm_restarts": ("sgd", (0.1, 0.05), lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=5)),
    "warm_restarts_mult": (
        "sgd",
        (0.1,),
        lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.001),
    ),
    "cyclic_triangular": (
        "sgd",
        (0.1,),
        lambda L, o: L.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4),
    ),
    "cyclic_triangular2": (
        "sgd",
        (0.1, 0.2),
        lambda L, o: L.CyclicLR(
            o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=5, mode="triangular2"
        ),
    ),
    "cyclic_exp_range": (
        "sgd",
        (0.1,),
        lambda L, o: L.CyclicLR(
            o, base_lr=0.001, max_lr=0.1, step_size_up=5, mode="exp_range", gamma=0.9
        ),
    ),
    "cyclic_scale_fn_cycle": (
        "sgd",
        (0.1,),
        lambda L, o: L.CyclicLR(
            o, base_lr=0.01, max_lr=0.1, step_size_up=4, scale_fn=lambda x: 0.5**x
        ),
    ),
    "cyclic_scale_fn_iterations": (
        "sgd",
        (0.1,),
        lambda L, o: L.CyclicLR(
            o,
            base_lr=0.01,
            max_lr=0.1,
            step_size_up=4,
            scale_fn=lambda x: 1 / (1 + 0.1 * x),
            scale_mode="iterations",
        ),
    ),
    "cyclic_lists": (
        "sgd",
        (0.1, 0.2),
        lambda L, o: L.CyclicLR(
            o,
            base_lr=[0.01, 0.02],
            max_lr=(0.1, 0.3),
            step_size_up=6,
            base_momentum=[0.7, 0.75],
            max_momentum=0.95,
        ),
    ),
    "cyclic_betas": (
        "adam",
        (0.001, 0.002),
        lambda L, o: L.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=4),
    ),
    "cyclic_rmsprop": (
        "rmsprop",
        (0.01,),
        lambda L, o: L.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=3),
    ),
    "cyclic_no_momentum": (
        "adagrad",
        (0.1,),
        lambda L, o: L.CyclicLR(o, 0.01, 0.1, step_size_up=4, cycle_momentum=False),
    ),
    "onecycle_cos": ("sgd", (0.1,), lambda L, o: L.OneCycleLR(o, max_lr=0.1, total_steps=STEPS)),
    "onecycle_linear_epochs": (
        "sgd",
        (0.1, 0.2),
        lambda L, o: L.OneCycleLR(
            o, max_lr=[0.1, 0.5], epochs=3, steps_per_epoch=10, anneal_strategy="linear"
        ),
    ),
    "onecycle_three_phase": (
        "sgd",
        (0.1,),
        lambda L, o: L.OneCycleLR(
            o,
            max_lr=0.2,
            total_steps=STEPS + 5,
            pct_start=0.25,
            three_phase=True,
            div_factor=10.0,
            final_div_factor=100.0,
        ),
    ),
    "onecycle_three_phase_linear": (
        "sgd",
        (0.1,),
        lambda L, o: L.OneCycleLR(
            o, max_lr=0.2, total_steps=STEPS, three_phase=True, anneal_strategy="linear"
        ),
    ),
    "onecycle_betas": (
        "adam",
        (0.001, 0.003),
        lambda L, o: L.OneCycleLR(
            o, max_lr=0.01, total_steps=STEPS, base_momentum=[0.8, 0.85], max_momentum=0.9
        ),
    ),
    "onecycle_adamw": ("adamw", (0.001,), lambda L, o: L.OneCycleLR(o, 0.01, total_steps=40)),
    "onecycle_no_momentum": (
        "adagrad",
        (0.1,),
        lambda L, o: L.OneCycleLR(o, max_lr=0.1, total_steps=STEPS, cycle_momentum=False),
    ),
    "sequential": (
        "sgd",
        (0.1, 0.02),
        lambda L, o: L.SequentialLR(
            o,
            [L.LinearLR(o, start_factor=0.1, total_iters=5), L.CosineAnnealingLR(o, T_max=10)],
            milestones=[5],
        ),
    ),
    "sequential_three": (
        "sgd",
        (0.1,),
        lambda L, o: L.SequentialLR(
            o,
            [
                L.ConstantLR(o, factor=0.5, total_iters=2),
                L.ExponentialLR(o, gamma=0.9),
                L.MultiStepLR(o, [3, 6], gamma=0.5),
            ],
            milestones=[3, 10],
        ),
    ),
    "sequential_one": (
        "sgd",
        (0.1,),
        lambda L, o: L.SequentialLR(o, [L.PolynomialLR(o, total_iters=8)], milestones=[]),
    ),
    "sequential_warm_restarts": (
        "sgd",
        (0.1,),
        lambda L, o: L.SequentialLR(
            o,
            [L.LinearLR(o, start_factor=0.5, total_iters=4), L.CosineAnnealingWarmRestarts(o, 4)],
            milestones=[4],
        ),
    ),
    "chained": (
        "sgd",
        (0.1, 0.05),
        lambda L, o: L.ChainedScheduler(
            [L.ConstantLR(o, factor=0.5, total_iters=4), L.ExponentialLR(o, gamma=0.9)]
        ),
    ),
    "chained_with_optimizer": (
        "sgd",
        (0.1,),
        lambda L, o: L.ChainedScheduler(
            [L.StepLR(o, 3, gamma=0.5), L.MultiplicativeLR(o, lambda e: 0.99)], optimizer=o
        ),
    ),
    "sequential_of_chained": (
        "sgd",
        (0.1,),
        lambda L, o: L.SequentialLR(
            o,
            [
                L.ChainedScheduler(
                    [L.LinearLR(o, start_factor=0.2, total_iters=4), L.ExponentialLR(o, 0.95)]
                ),
                L.CosineAnnealingLR(o, T_max=12, eta_min=0.001),
            ],
            milestones=[6],
        ),
    ),
}


def _run(m, name, steps=STEPS, resume_at=None):
    """The snapshot after construction and after each of `steps` steps. With resume_at=k the
    optimizer and the scheduler are saved after k steps and loaded into fresh ones, which go on."""
    kind, lrs, build = CASES[name]
    L = m.optim.lr_scheduler
    o = _opt(m, kind, lrs)
    sched = build(L, o)
    trace = [_snapshot(sched, o)]
    for i in range(steps):
        if i == resume_at:
            o_state = copy.deepcopy(o.state_dict())
            s_state = copy.deepcopy(sched.state_dict())
            o = _opt(m, kind, lrs)
            sched = build(L, o)
            o.load_state_dict(o_state)
            sched.load_state_dict(s_state)
        _backward_and_step(m, o)
        sched.step()
        trace.append(_snapshot(sched, o))
    return trace


@pytest.mark.parametrize("name", sorted(CASES))
def test_scheduler_follows_torch_step_for_step(torch, name):
    ours, theirs = _run(engine, name), _run(torch, name)
    assert len(ours) == STEPS + 1
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"step {i}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_round_trip_goes_on_as_an_uninterrupted_run(torch, name):
    resumed = _run(engine, name, resume_at=7)
    assert resumed == _run(engine, name)
    assert resumed == _run(torch, name, resume_at=7)


def test_state_dict_saves_callable_objects_as_torch(torch):
    """A callable object's __dict__ is saved and loaded back (a lambda is saved as None)."""
    for m in (engine, torch):
        L = m.optim.lr_scheduler
        for cls in (L.LambdaLR, L.MultiplicativeLR):
            o = _opt(m, "sgd", (0.1, 0.2))
            sched = cls(o, [Scale(0.5), lambda e: 0.9])
            state = sched.state_dict()
            assert state["lr_lambdas"] == [{"factor": 0.5}, None]
            other = cls(_opt(m, "sgd", (0.1, 0.2)), [Scale(0.1), lambda e: 0.8])
            other.load_state_dict(state)
            assert other.lr_lambdas[0].factor == 0.5
            assert "lr_lambdas" in state  # the caller's dict is left whole
    o = _opt(engine, "sgd")
    sched = engine.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, scale_fn=Scale(0.5))
    assert sched.state_dict()["_scale_fn_custom"] == {"factor": 0.5}


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_dict_keys_match_torch(torch, name):
    kind, lrs, build = CASES[name]
    ours = build(engine.optim.lr_scheduler, _opt(engine, kind, lrs)).state_dict()
    theirs = build(torch.optim.lr_scheduler, _opt(torch, kind, lrs)).state_dict()
    # torch's flag for its "use get_last_lr()" warning, which the engine does not give
    assert set(ours) == set(theirs) - {"_get_lr_called_within_step"}


def _epochs_run(m, kind, lrs, build, epochs):
    L = m.optim.lr_scheduler
    o = _opt(m, kind, lrs)
    sched = build(L, o)
    trace = [_snapshot(sched, o)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in epochs:
            _backward_and_step(m, o)
            sched.step(epoch)
            trace.append((_snapshot(sched, o), sched.last_epoch))
    return trace


EPOCH_CASES = {
    "step": lambda L, o: L.StepLR(o, 3, gamma=0.5),
    "cosine": lambda L, o: L.CosineAnnealingLR(o, T_max=8, eta_min=0.01),
    "multistep": lambda L, o: L.MultiStepLR(o, [3, 7, 7, 12], gamma=0.5),
    "constant": lambda L, o: L.ConstantLR(o, factor=0.5, total_iters=4),
    "linear": lambda L, o: L.LinearLR(o, start_factor=0.25, end_factor=0.75, total_iters=10),
    "exponential": lambda L, o: L.ExponentialLR(o, gamma=0.9),
    "polynomial": lambda L, o: L.PolynomialLR(o, total_iters=10, power=2.0),
    "lambda": lambda L, o: L.LambdaLR(o, lambda e: 1 / (1 + e)),
    "multiplicative": lambda L, o: L.MultiplicativeLR(o, lambda e: 0.9),  # no closed form
    "cyclic": lambda L, o: L.CyclicLR(o, 0.01, 0.1, step_size_up=4, mode="triangular2"),
    "onecycle": lambda L, o: L.OneCycleLR(o, 0.1, total_steps=25),
    "warm_restarts": lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=5),
    "warm_restarts_mult": lambda L, o: L.CosineAnnealingWarmRestarts(o, 3, T_mult=2, eta_min=0.01),
}
EPOCHS = [0, 3, 1, 7, 7, 12, 20, 5, 4, 10, 11, 25, 2]
FRACTIONAL = [0.5, 1.0, 1.7, 2.99, 3.0, 5.0, 5.2, 8.75, 13.3, 0, 22.0, 21.5, 44.1, 100.25]


@pytest.mark.parametrize("name", sorted(EPOCH_CASES))
def test_step_with_an_epoch_follows_torch(torch, name):
    epochs = FRACTIONAL if name.startswith("warm_restarts") else EPOCHS
    build = EPOCH_CASES[name]
    ours = _epochs_run(engine, "sgd", (0.1, 0.03), build, epochs)
    assert ours == _epochs_run(torch, "sgd", (0.1, 0.03), build, epochs)


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_warm_restarts_stepped_within_epochs_follow_torch(torch, t_mult):
    """The documented batch pattern: sched.step(epoch + i / iters) with fractional epochs."""
    iters = 7
    epochs = [e + i / iters for e in range(12) for i in range(iters)]

    def build(L, o):
        return L.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=t_mult, eta_min=1e-4)

    ours = _epochs_run(engine, "sgd", (0.1,), build, epochs)
    assert ours == _epochs_run(torch, "sgd", (0.1,), build, epochs)


def test_step_with_an_epoch_warns():
    o = _opt(engine)
    sched = engine.optim.lr_scheduler.ExponentialLR(o, 0.5)
    with pytest.warns(UserWarning, match="epoch parameter"):
        sched.step(3)
    assert o.param_groups[0]["lr"] == 0.1 * 0.5**3


@pytest.mark.parametrize(
    "name", ["multistep", "linear", "exponential", "polynomial", "cyclic", "sequential", "onecycle"]
)
def test_a_tensor_lr_is_written_into_as_torch(torch, name):
    builds = {
        "multistep": lambda L, o: L.MultiStepLR(o, [2, 5], gamma=0.5),
        "linear": lambda L, o: L.LinearLR(o, start_factor=0.5, total_iters=4),
        "exponential": lambda L, o: L.ExponentialLR(o, gamma=0.9),
        "polynomial": lambda L, o: L.PolynomialLR(o, total_iters=6, power=2.0),
        "cyclic": lambda L, o: L.CyclicLR(o, 0.01, 0.1, step_size_up=3),
        "onecycle": lambda L, o: L.OneCycleLR(o, 0.1, total_steps=12),
        "sequential": lambda L, o: L.SequentialLR(
            o, [L.ConstantLR(o, 0.5, total_iters=3), L.ExponentialLR(o, 0.8)], milestones=[3]
        ),
    }
    runs = {}
    for m in (engine, torch):
        lr = m.tensor(0.1, dtype=m.float64)
        o = m.optim.SGD([m.nn.Parameter(m.ones(2))], lr=lr, momentum=0.9)
        sched = builds[name](m.optim.lr_scheduler, o)
        values = []
        for _ in range(10):
            _backward_and_step(m, o)
            sched.step()
            assert o.param_groups[0]["lr"] is lr
            last = sched.get_last_lr()[0]
            assert isinstance(last, m.Tensor) and last is not lr
            values.append((lr.item(), last.item()))
        runs[m.__name__] = values
    assert runs["engine"] == runs["torch"]


# --- ReduceLROnPlateau -------------------------------------------------------------------------

METRICS = [1.0, 0.9, 0.95, 0.95, 0.95, 0.94, 0.96, 0.8, 0.8, 0.8, 0.8, 0.8, 0.79999, 0.7, 0.7]
METRICS += [0.7, 0.7, 0.7, 0.7, 0.71, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
METRICS += [0.6, 0.55, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
METRICS_UP = [-x for x in METRICS]

PLATEAU_CASES = {
    "default": ({}, METRICS, (0.1,)),
    "patience_cooldown": ({"patience": 2, "cooldown": 3, "factor": 0.5}, METRICS, (0.1, 0.02)),
    "no_patience": ({"patience": 0, "factor": 0.7}, METRICS, (0.1,)),
    "abs": ({"patience": 1, "threshold": 0.05, "threshold_mode": "abs"}, METRICS, (0.1,)),
    "max_rel": ({"mode": "max", "patience": 1, "threshold": 0.01}, METRICS_UP, (0.1, 1.0)),
    "max_abs": (
        {"mode": "max", "patience": 2, "threshold_mode": "abs", "cooldown": 1},
        METRICS_UP,
        (0.1,),
    ),
    "min_lr_scalar": ({"patience": 0, "factor": 0.5, "min_lr": 0.02}, METRICS, (0.1, 0.3)),
    "min_lr_list": (
        {"patience": 0, "factor": 0.5, "min_lr": [0.04, 0.001]},
        METRICS,
        (0.1, 0.3),
    ),
    "eps": ({"patience": 0, "factor": 0.9, "eps": 0.005}, METRICS, (0.1, 0.03)),
}


def _plateau_run(m, name, resume_at=None, tensor_metric=False):
    kwargs, metrics, lrs = PLATEAU_CASES[name]
    L = m.optim.lr_scheduler
    o = _opt(m, "sgd", lrs)
    sched = L.ReduceLROnPlateau(o, **kwargs)
    trace = [_snapshot(sched, o)]
    for i, metric in enumerate(metrics):
        if i == resume_at:
            o_state = copy.deepcopy(o.state_dict())
            s_state = copy.deepcopy(sched.state_dict())
            o = _opt(m, "sgd", lrs)
            sched = L.ReduceLROnPlateau(o)  # the loaded state brings its arguments
            o.load_state_dict(o_state)
            sched.load_state_dict(s_state)
        _backward_and_step(m, o)
        sched.step(m.tensor(metric, dtype=m.float64) if tensor_metric else metric)
        state = (sched.best, sched.num_bad_epochs, sched.cooldown_counter, sched.last_epoch)
        trace.append((_snapshot(sched, o), state, sched.in_cooldown))
    return trace


@pytest.mark.parametrize("name", sorted(PLATEAU_CASES))
def test_reduce_on_plateau_follows_torch(torch, name):
    ours = _plateau_run(engine, name)
    assert ours == _plateau_run(torch, name)
    assert ours[-1][0][0][0]["lr"] < ours[0][0][0]["lr"]  # the sequence did reduce
    assert ours == _plateau_run(engine, name, tensor_metric=True)


@pytest.mark.parametrize("name", ["patience_cooldown", "max_abs", "min_lr_list"])
def test_reduce_on_plateau_state_dict_round_trip(torch, name):
    resumed = _plateau_run(engine, name, resume_at=9)
    assert resumed == _plateau_run(engine, name)
    assert resumed == _plateau_run(torch, name, resume_at=9)


def test_reduce_on_plateau_step_with_an_epoch_follows_torch(torch):
    runs = []
    for m in (engine, torch):
        o = _opt(m, "sgd", (0.1,))
        sched = m.optim.lr_scheduler.ReduceLROnPlateau(o, patience=1)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for epoch, metric in zip([5, 3, 9, 9, 2, 7, 8], METRICS, strict=False):
                sched.step(metric, epoch)
                seen.append((sched.last_epoch, o.param_groups[0]["lr"], sched.get_last_lr()))
        runs.append(seen)
    assert runs[0] == runs[1]


def test_reduce_on_plateau_keys_match_torch(torch):
    ours = engine.optim.lr_scheduler.ReduceLROnPlateau(_opt(engine)).state_dict()
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(_opt(torch)).state_dict()
    assert ours == theirs


def test_reduce_on_plateau_new_group_with_a_scalar_min_lr(torch):
    """A group added later gets the scalar min_lr, as in torch."""
    runs = []
    for m in (engine, torch):
        o = _opt(m, "sgd", (0.1,))
        sched = m.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0, min_lr=0.05)
        o.add_param_group({"params": [m.nn.Parameter(m.ones(2))], "lr": 0.2})
        for metric in [1.0, 1.0, 1.0, 1.0]:
            sched.step(metric)
        runs.append(([g["lr"] for g in o.param_groups], sched.min_lrs, sched.get_last_lr()))
    assert runs[0] == runs[1]


# --- errors ------------------------------------------------------------------------------------


def _L(m):
    return m.optim.lr_scheduler


ERRORS = {
    "multiplicative_count": lambda m: _L(m).MultiplicativeLR(
        _opt(m, lrs=(0.1, 0.2)), [lambda e: 1.0]
    ),
    "multiplicative_not_callable": lambda m: _L(m).MultiplicativeLR(_opt(m), 0.5),
    "constant_factor_high": lambda m: _L(m).ConstantLR(_opt(m), factor=1.5),
    "constant_factor_negative": lambda m: _L(m).ConstantLR(_opt(m), factor=-0.1),
    "linear_start_zero": lambda m: _L(m).LinearLR(_opt(m), start_factor=0),
    "linear_start_high": lambda m: _L(m).LinearLR(_opt(m), start_factor=1.5),
    "linear_end_high": lambda m: _L(m).LinearLR(_opt(m), end_factor=1.5),
    "linear_end_negative": lambda m: _L(m).LinearLR(_opt(m), end_factor=-1),
    "resume_without_initial_lr": lambda m: _L(m).ExponentialLR(_opt(m), 0.9, last_epoch=3),
    "not_an_optimizer": lambda m: _L(m).MultiStepLR(object(), [1]),
    "sequential_empty": lambda m: _L(m).SequentialLR(_opt(m), [], []),
    "sequential_milestones": lambda m: _seq(m, milestones=[2, 4]),
    "sequential_plateau": lambda m: _seq(m, plateau=True),
    "sequential_no_optimizer": lambda m: _seq(m, bare=True),
    "sequential_other_optimizer": lambda m: _seq(m, other=True),
    "chained_empty": lambda m: _L(m).ChainedScheduler([]),
    "chained_plateau": lambda m: _chain(m, plateau=True),
    "chained_no_optimizer": lambda m: _chain(m, bare=True),
    "chained_other_optimizer": lambda m: _chain(m, other=True),
    "plateau_factor": lambda m: _L(m).ReduceLROnPlateau(_opt(m), factor=1.0),
    "plateau_mode": lambda m: _L(m).ReduceLROnPlateau(_opt(m), mode="median"),
    "plateau_threshold_mode": lambda m: _L(m).ReduceLROnPlateau(_opt(m), threshold_mode="pct"),
    "plateau_min_lrs": lambda m: _L(m).ReduceLROnPlateau(_opt(m), min_lr=[0.1, 0.2]),
    "plateau_not_an_optimizer": lambda m: _L(m).ReduceLROnPlateau(object()),
    "plateau_new_group_min_lr_list": lambda m: _plateau_new_group(m),
    "plateau_metric_none": lambda m: _L(m).ReduceLROnPlateau(_opt(m)).step(None),
    "cyclic_mode": lambda m: _L(m).CyclicLR(_opt(m), 0.01, 0.1, mode="sawtooth"),
    "cyclic_no_momentum": lambda m: _L(m).CyclicLR(_opt(m, "adagrad"), 0.01, 0.1),
    "cyclic_base_lr_count": lambda m: _L(m).CyclicLR(_opt(m), [0.01, 0.02], 0.1),
    "cyclic_max_lr_count": lambda m: _L(m).CyclicLR(_opt(m), 0.01, (0.1, 0.2)),
    "cyclic_momentum_count": lambda m: _L(m).CyclicLR(_opt(m), 0.01, 0.1, max_momentum=[0.9] * 2),
    "cyclic_not_an_optimizer": lambda m: _L(m).CyclicLR(object(), 0.01, 0.1),
    "onecycle_total_steps_zero": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, total_steps=0),
    "onecycle_total_steps_float": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, total_steps=2.5),
    "onecycle_epochs": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, epochs=0, steps_per_epoch=3),
    "onecycle_steps_per_epoch": lambda m: _L(m).OneCycleLR(
        _opt(m), 0.1, epochs=2, steps_per_epoch=-1
    ),
    "onecycle_no_steps": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, epochs=3),
    "onecycle_pct_start_high": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, 10, pct_start=1.5),
    "onecycle_pct_start_int": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, 10, pct_start=1),
    "onecycle_anneal": lambda m: _L(m).OneCycleLR(_opt(m), 0.1, 10, anneal_strategy="exp"),
    "onecycle_no_momentum": lambda m: _L(m).OneCycleLR(_opt(m, "adagrad"), 0.1, 10),
    "onecycle_max_lr_count": lambda m: _L(m).OneCycleLR(_opt(m), [0.1, 0.2], 10),
    "onecycle_not_an_optimizer": lambda m: _L(m).OneCycleLR(object(), 0.1, 10),
    "onecycle_past_total_steps": lambda m: _step_n(_L(m).OneCycleLR(_opt(m), 0.1, 5), m, 6),
    "warm_restarts_t0_zero": lambda m: _L(m).CosineAnnealingWarmRestarts(_opt(m), 0),
    "warm_restarts_t0_float": lambda m: _L(m).CosineAnnealingWarmRestarts(_opt(m), 1.5),
    "warm_restarts_t_mult_zero": lambda m: _L(m).CosineAnnealingWarmRestarts(_opt(m), 2, 0),
    "warm_restarts_t_mult_float": lambda m: _L(m).CosineAnnealingWarmRestarts(_opt(m), 2, 1.5),
    "warm_restarts_eta_min": lambda m: _L(m).CosineAnnealingWarmRestarts(_opt(m), 2, eta_min="0"),
    "warm_restarts_negative_epoch": lambda m: (
        _L(m).CosineAnnealingWarmRestarts(_opt(m), 2).step(-1)
    ),
}


def _other_opt(m):
    """An optimizer of another scheduler, its repr (in torch's message) the same in both: the
    engine's SGD defaults momentum, dampening and weight_decay to 0.0 where torch has the int 0."""
    p = [m.nn.Parameter(m.ones(2))]
    return m.optim.SGD(p, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0)


def _seq(m, milestones=(2,), plateau=False, bare=False, other=False):
    o = _opt(m)
    L = _L(m)
    second = L.ExponentialLR(_other_opt(m) if other else o, 0.9)
    if plateau:
        second = L.ReduceLROnPlateau(o)
    if bare:
        second = object()
    return L.SequentialLR(o, [L.ConstantLR(o), second], milestones=list(milestones))


def _chain(m, plateau=False, bare=False, other=False):
    o = _opt(m)
    L = _L(m)
    second = L.ExponentialLR(_other_opt(m) if other else o, 0.9)
    if plateau:
        second = L.ReduceLROnPlateau(o)
    if bare:
        second = object()
    return L.ChainedScheduler([L.ConstantLR(o), second])


def _plateau_new_group(m):
    o = _opt(m)
    sched = _L(m).ReduceLROnPlateau(o, patience=0, min_lr=[0.0])
    o.add_param_group({"params": [m.nn.Parameter(m.ones(2))], "lr": 0.2})
    for _ in range(3):
        sched.step(1.0)


def _step_n(sched, m, n):
    for _ in range(n):
        _backward_and_step(m, sched.optimizer)
        sched.step()


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_argument_errors_as_torch(torch, name):
    assert_raises_as_torch(ERRORS[name])


# --- the module's surface ----------------------------------------------------------------------


def test_all_names_as_torch(torch):
    assert sorted(engine.optim.lr_scheduler.__all__) == sorted(torch.optim.lr_scheduler.__all__)


@pytest.mark.parametrize("name", sorted(engine.optim.lr_scheduler.__all__))
def test_signature_as_torch(torch, name):
    def params(cls):
        sig = inspect.signature(cls.__init__)
        return [(p.name, p.kind, p.default) for p in sig.parameters.values()]

    ours = getattr(engine.optim.lr_scheduler, name)
    theirs = getattr(torch.optim.lr_scheduler, name)
    assert params(ours) == params(theirs)
    assert inspect.signature(ours.step).parameters.keys() == (
        inspect.signature(theirs.step).parameters.keys()
    )
