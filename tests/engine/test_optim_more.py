"""Adafactor, NAdam, RAdam, Adamax, Adadelta, Rprop and ASGD against torch.optim: parameters and state after
several steps (float64 and float32), state_dict keys and state shapes / dtypes, and every block
each step allocates and frees, in torch's order, for the single-tensor update (torch's cpu
default) and the foreach one (foreach=True, which torch runs on cpu too)."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import assert_steps_as_torch

# two Linear layers' weights and biases and a 3-d parameter (Adafactor's factored batch case)
SHAPES = [(24, 16), (24,), (8, 24), (8,), (3, 4, 5)]


def _model(m, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    params = [m.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]
    x = m.tensor(rng.standard_normal((5, 16)).astype(dtype))

    def loss():
        h = (x @ params[0].t() + params[1]).tanh()
        return ((h @ params[2].t() + params[3]) ** 2).mean() + (params[4] ** 3).sum() * 0.01

    return params, loss


CASES = {
    "Adafactor": dict(),
    "Adafactor wd maximize": dict(weight_decay=0.1, maximize=True),
    "Adafactor eps d beta2_decay": dict(lr=0.05, d=1.5, eps=(1e-20, 1e-2), beta2_decay=-0.5),
    "NAdam": dict(),
    "NAdam wd": dict(weight_decay=0.1),
    "NAdam decoupled wd maximize": dict(
        weight_decay=0.1, decoupled_weight_decay=True, maximize=True
    ),
    "NAdam momentum_decay betas": dict(momentum_decay=0.05, betas=(0.8, 0.9)),
    "RAdam": dict(),
    "RAdam wd maximize": dict(weight_decay=0.1, maximize=True),
    "RAdam decoupled wd": dict(weight_decay=0.1, decoupled_weight_decay=True),
    "Adamax": dict(),
    "Adamax wd": dict(weight_decay=0.1),
    "Adamax maximize": dict(maximize=True),
    "Adamax wd maximize": dict(weight_decay=0.1, maximize=True, betas=(0.8, 0.9)),
    "Adadelta": dict(),
    "Adadelta wd maximize": dict(weight_decay=0.1, maximize=True),
    "Adadelta lr rho": dict(lr=0.5, rho=0.8, eps=1e-4),
    "Rprop": dict(),
    "Rprop maximize": dict(maximize=True),
    # large steps so that signs flip (etaminus, and the gradient zeroed) and the clamp bites
    "Rprop lr etas step_sizes": dict(lr=0.3, etas=(0.3, 1.5), step_sizes=(0.05, 0.4)),
    "ASGD": dict(),
    "ASGD wd": dict(weight_decay=0.1),
    "ASGD wd maximize": dict(weight_decay=0.1, maximize=True),
    "ASGD maximize": dict(maximize=True),
    # t0 small: the averaging starts (mu != 1) within the steps taken
    "ASGD t0 lambd alpha": dict(lr=0.05, t0=1.0, lambd=0.01, alpha=0.5),
}
# RAdam's rectified branch (rho_t > 5) starts at its 6th step with beta2=0.999; Rprop's and
# ASGD's branches (sign flips, clamps, the averaging) within 5
STEPS = {"RAdam": 7, "Rprop": 5, "ASGD": 5}
IMPLS = {"single": dict(foreach=False), "foreach": dict(foreach=True)}


def _steps(case) -> int:
    return STEPS.get(case.split()[0], 3)


def _cases():
    for case in CASES:
        for impl in IMPLS:
            yield pytest.param(case, impl, id=f"{case}-{impl}")


def _setup(m, case, impl, dtype):
    """(params, optimizer named by the case's first word with its kwargs, make-gradients)."""
    params, loss = _model(m, dtype)
    opt = getattr(m.optim, case.split()[0])(params, **CASES[case], **IMPLS[impl])

    def grads():
        opt.zero_grad(set_to_none=True)
        loss().backward()

    return params, opt, grads


def _run(m, case, impl, dtype):
    """Parameters and state after the case's steps."""
    params, opt, grads = _setup(m, case, impl, dtype)
    for _ in range(_steps(case)):
        grads()
        opt.step()
    state = [{k: np.asarray(v.detach().numpy()) for k, v in opt.state[p].items()} for p in params]
    return [p.detach().numpy().copy() for p in params], state, opt


@pytest.mark.torch
@pytest.mark.parametrize("case,impl", list(_cases()))
def test_values_and_state_match_torch_float64(case, impl, torch):
    e_params, e_state, _ = _run(engine, case, impl, np.float64)
    t_params, t_state, _ = _run(torch, case, impl, np.float64)
    # ASGD's foreach update computes the new etas as float32 0-d tensors (lr / (1 + lambd * lr *
    # step) ** alpha on the step counters); the engine's float32 pow (numpy's) and torch's
    # (the C library's powf) differ by one unit in the last place for some bases, and that eta
    # then scales the whole update: the etas to 1 ulp, the rest to float32's relative precision
    loose = case.startswith("ASGD") and impl == "foreach"
    tol = dict(rtol=1e-6, atol=1e-9) if loose else dict(rtol=1e-11, atol=1e-12)
    for e, t in zip(e_params, t_params, strict=True):
        np.testing.assert_allclose(e, t, **tol)
    for e, t in zip(e_state, t_state, strict=True):
        assert list(e) == list(t)
        for k in e:
            assert e[k].shape == t[k].shape and e[k].dtype == t[k].dtype, k
            if loose and k == "eta":
                np.testing.assert_array_max_ulp(e[k], t[k], maxulp=1)
            else:
                np.testing.assert_allclose(e[k], t[k], **tol, err_msg=k)


# Rprop moves by the sign of each gradient: with large steps, a gradient near zero whose sign
# float32 rounding decides (numpy's and torch's backward differ in the last bits) moves its
# entry by a whole step, so that case is compared in float64 only
FLOAT32_CASES = [c for c in _cases() if c.values[0] != "Rprop lr etas step_sizes"]


@pytest.mark.torch
@pytest.mark.parametrize("case,impl", FLOAT32_CASES)
def test_values_match_torch_float32(case, impl, torch):
    e_params, e_state, _ = _run(engine, case, impl, np.float32)
    t_params, t_state, _ = _run(torch, case, impl, np.float32)
    for e, t in zip(e_params, t_params, strict=True):
        assert e.dtype == t.dtype == np.float32
        np.testing.assert_allclose(e, t, rtol=1e-4, atol=1e-5)
    for e, t in zip(e_state, t_state, strict=True):
        for k in e:
            assert e[k].shape == t[k].shape and e[k].dtype == t[k].dtype, k


@pytest.mark.torch
@pytest.mark.parametrize("case", [c for c in CASES if " " not in c])
def test_state_dict_as_torch(case, torch):
    """Keys of state and param_groups, and each state tensor's shape and dtype."""
    dicts = {}
    for m in (engine, torch):
        _, _, opt = _run(m, case, "single", np.float32)
        dicts[m.__name__] = opt.state_dict()
    e, t = dicts["engine"], dicts["torch"]
    assert e["state"].keys() == t["state"].keys()
    for i in e["state"]:
        es, ts = e["state"][i], t["state"][i]
        assert list(es) == list(ts)
        for k in es:
            assert tuple(es[k].shape) == tuple(ts[k].shape), k
            assert str(es[k].dtype).split(".")[-1] == str(ts[k].dtype).split(".")[-1], k
    assert [sorted(g) for g in e["param_groups"]] == [sorted(g) for g in t["param_groups"]]


def test_adafactor_state_is_factored():
    """A (24, 16) weight keeps 24 + 16 numbers of second moment, a (3, 4, 5) one 3*4 + 3*5."""
    params, opt, grads = _setup(engine, "Adafactor", "single", np.float32)
    grads()
    opt.step()
    shapes = [{k: tuple(v.shape) for k, v in opt.state[p].items()} for p in params]
    assert shapes[0] == {"step": (), "row_var": (24, 1), "col_var": (1, 16)}
    assert shapes[1] == {"step": (), "variance": (24,)}
    assert shapes[4] == {"step": (), "row_var": (3, 4, 1), "col_var": (3, 1, 5)}


def test_rprop_cases_flip_signs_and_clamp():
    """The Rprop cases reach every branch: a sign flip (step size times etaminus), a growth
    (etaplus), and step sizes held at both clamps."""
    params, opt, grads = _setup(engine, "Rprop lr etas step_sizes", "single", np.float64)
    for _ in range(_steps("Rprop")):
        grads()
        opt.step()
    sizes = np.concatenate([opt.state[p]["step_size"].numpy().ravel() for p in params])
    assert np.isclose(sizes, 0.05).any() and np.isclose(sizes, 0.4).any()
    assert ((sizes > 0.05) & (sizes < 0.4)).any()
    prevs = np.concatenate([opt.state[p]["prev"].numpy().ravel() for p in params])
    assert (prevs == 0).any() and (prevs != 0).any()  # gradients zeroed after a flip


@pytest.mark.torch
@pytest.mark.parametrize("case,impl", list(_cases()))
def test_every_block_of_each_step_as_torch(case, impl, torch):
    """Backward and step, for the first step (state made) and the later ones: each block
    allocated and freed as torch's CPU profiler shows it, in order."""

    def make(m):
        _, opt, grads = _setup(m, case, impl, np.float32)
        return [fn for _ in range(min(_steps(case), 7)) for fn in (grads, opt.step)]

    assert_steps_as_torch(make)


@pytest.mark.torch
@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("Adafactor", dict(lr=-1.0)),
        ("Adafactor", dict(beta2_decay=0.5)),
        ("Adafactor", dict(eps=(-1.0, 1e-3))),
        ("Adafactor", dict(d=0.5)),
        ("Adafactor", dict(weight_decay=-0.1)),
        ("NAdam", dict(momentum_decay=-1.0)),
        ("NAdam", dict(betas=(1.0, 0.9))),
        ("RAdam", dict(eps=-1.0)),
        ("Adamax", dict(betas=(0.9, 1.5))),
        ("Adadelta", dict(rho=1.5)),
        ("Adadelta", dict(weight_decay=-1.0)),
        ("Rprop", dict(lr=-1.0)),
        ("Rprop", dict(etas=(1.5, 1.2))),
        ("Rprop", dict(etas=(0.5, 0.9))),
        ("Rprop", dict(etas=(0.0, 1.2))),
        ("ASGD", dict(lr=-1.0)),
        ("ASGD", dict(weight_decay=-0.1)),
    ],
)
def test_bad_hyper_parameters_refused_as_torch(name, kwargs, torch):
    assert_raises_as_torch(
        lambda m: getattr(m.optim, name)([m.zeros(3, requires_grad=True)], **kwargs)
    )


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
@pytest.mark.parametrize("flag", ["capturable", "differentiable"])
def test_unmodelled_flags_refused_by_name(name, flag):
    with pytest.raises(NotImplementedError, match=flag):
        getattr(engine.optim, name)([engine.zeros(3, requires_grad=True)], **{flag: True})


# the state a GPU run keeps on the cpu, as torch's: the 0-d step counters (and NAdam's
# mu_product); ASGD keeps its step, eta and mu on the parameter's device
ON_CPU = {
    "Adafactor": {"step"},
    "NAdam": {"step", "mu_product"},
    "RAdam": {"step"},
    "Adamax": {"step"},
    "Adadelta": {"step"},
    "Rprop": {"step"},
    "ASGD": set(),
}


@pytest.mark.parametrize("name", sorted(ON_CPU))
def test_meta_parameters_step_without_values(name):
    """Shapes only (meta stands for a GPU: foreach, torch's cuda default): the state has the
    shapes and dtypes it has on cpu, and the steps run."""
    shapes = [(4, 3), (3,)]
    for foreach in (True, False):
        states = {}
        for device in ("meta", "cpu"):
            params = [engine.zeros(*s, device=device, requires_grad=True) for s in shapes]
            for p in params:
                p.grad = engine.ones(*p.shape, device=device)
            extra = dict(t0=0.0) if name == "ASGD" else {}  # ASGD: the averaging branch too
            opt = getattr(engine.optim, name)(params, foreach=foreach, **extra)
            for _ in range(3):
                opt.step()
            states[device] = [
                {k: (tuple(v.shape), v.dtype, v.device.type) for k, v in opt.state[p].items()}
                for p in params
            ]
            assert all(
                p.device.type == device and p.shape == s
                for p, s in zip(params, shapes, strict=True)
            )
        assert states["meta"] == [
            {
                k: (shape, dtype, "cpu" if k in ON_CPU[name] else "meta")
                for k, (shape, dtype, _) in s.items()
            }
            for s in states["cpu"]
        ]


def test_asgd_meta_single_update_allocates_as_cpu():
    """On meta the single-tensor update reads eta and mu from the optimizer's own step count:
    the same branch (the average's temporary once mu != 1, from the 4th step with t0=1) and so
    the same parameter-sized blocks as on cpu, step by step."""
    from engine.allocator import MemoryObserver, get_allocator

    blocks = {}
    for device in ("meta", "cpu"):
        p = engine.zeros(64, device=device, requires_grad=True)
        p.grad = engine.ones(64, device=device)
        opt = engine.optim.ASGD([p], foreach=False, t0=1.0)
        steps = []
        for _ in range(4):
            events = []

            class Record(MemoryObserver):
                def on_alloc(self, event, events=events):
                    events.append(event.requested)

                def on_free(self, event, events=events):
                    events.append(-event.requested)

            with get_allocator(device).observing(Record()):
                opt.step()
            steps.append([n for n in events if abs(n) >= 64 * 4])
        blocks[device] = steps
    assert blocks["meta"] == blocks["cpu"]
    assert blocks["cpu"] == [[64 * 4], [], [], [64 * 4, -64 * 4]]
