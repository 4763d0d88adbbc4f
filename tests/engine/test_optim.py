"""engine.optim: update rules (by hand and against PyTorch), lazy state and its exact bytes."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import nn, optim
from engine.allocator.events import MemoryObserver
from engine.allocator.tracked import get_allocator

SHAPES = [(5, 3), (4,), (2, 3, 2)]


def _values(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _engine_params():
    return [nn.Parameter(engine.tensor(v)) for v in _values(0)]


def _set_grads(params, lib_tensor, step):
    for p, g in zip(params, _values(100 + step), strict=True):
        p.grad = lib_tensor(g)


def _run(make_opt, steps=4):
    """The same parameters and gradients through `steps` steps of engine and torch optimizers."""
    torch = pytest.importorskip("torch")
    e_params = _engine_params()
    t_params = [torch.nn.Parameter(torch.tensor(v)) for v in _values(0)]
    e_opt, t_opt = make_opt(optim, e_params), make_opt(torch.optim, t_params)
    for step in range(steps):
        _set_grads(e_params, engine.tensor, step)
        _set_grads(t_params, torch.tensor, step)
        e_opt.step()
        t_opt.step()
    return e_params, t_params, e_opt, t_opt


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.8, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
    dict(lr=0.05, momentum=0.5, maximize=True),
]
ADAM_CONFIGS = [
    dict(lr=1e-2),
    dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    dict(lr=1e-2, amsgrad=True),
    dict(lr=1e-2, maximize=True),
]


@pytest.mark.parametrize("config", SGD_CONFIGS, ids=str)
def test_sgd_matches_pytorch(config):
    e_params, t_params, _, _ = _run(lambda o, ps: o.SGD(ps, **config))
    for e, t in zip(e_params, t_params, strict=True):
        np.testing.assert_allclose(e.numpy(force=True), t.detach().numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
@pytest.mark.parametrize("config", ADAM_CONFIGS, ids=str)
def test_adam_and_adamw_match_pytorch(cls, config):
    e_params, t_params, e_opt, t_opt = _run(lambda o, ps: getattr(o, cls)(ps, **config))
    for e, t in zip(e_params, t_params, strict=True):
        np.testing.assert_allclose(e.numpy(force=True), t.detach().numpy(), rtol=1e-6, atol=1e-7)
    for e, t in zip(e_params, t_params, strict=True):
        es, ts = e_opt.state[e], t_opt.state[t]
        assert es["step"].item() == ts["step"].item() == 4
        np.testing.assert_allclose(
            es["exp_avg_sq"].numpy(), ts["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-9
        )


def test_sgd_momentum_by_hand():
    # p1 = p0 - lr*g0 (buffer = g0); p2 = p1 - lr*(m*g0 + g1)
    p = nn.Parameter(engine.tensor([1.0, -2.0]))
    opt = optim.SGD([p], lr=0.5, momentum=0.9)
    p.grad = engine.tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_allclose(p.numpy(force=True), [0.5, -2.5])
    p.grad = engine.tensor([2.0, 0.0])
    opt.step()
    np.testing.assert_allclose(p.numpy(force=True), [0.5 - 0.5 * 2.9, -2.5 - 0.5 * 0.9], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dampening", [0.0, 0.3])
def test_sgd_momentum_in_one_pass_equals_the_three_in_place_ops(monkeypatch, dtype, dampening):
    """The cpu momentum update runs as one pass of blocks (kernels.momentum_step_): the same
    bits as buf.mul_().add_() and param.add_() one by one, on one thread or the pool, and each
    tensor's version moves as those ops move it. A transposed parameter takes the ops."""
    from engine import kernels
    from engine.optim import sgd

    rng = np.random.default_rng(7)
    # past PARALLEL_MIN_ELEMS (lowered here: 4M parameters would be slow to check): the pool's
    # chunks, several blocks
    monkeypatch.setattr(kernels, "PARALLEL_MIN_ELEMS", 1 << 18)
    big = (600, 1100)
    assert big[0] * big[1] > kernels.PARALLEL_MIN_ELEMS
    values = [rng.standard_normal(s).astype(dtype) for s in (big, (3, 5))]
    grads = [[rng.standard_normal(v.shape).astype(dtype) for v in values] for _ in range(3)]

    before = engine.get_num_threads()
    passes = []

    def run(one_pass: bool, threads: int):
        monkeypatch.setattr(kernels, "BLAS_SPIN_S", 0.0)  # the pool, whatever ran before
        one_pass_step = sgd._momentum_step

        def step(*args):
            done = one_pass and one_pass_step(*args)
            passes.append((tuple(args[0].shape), args[0].is_contiguous(), done))
            return done

        monkeypatch.setattr(sgd, "_momentum_step", step)
        engine.set_num_threads(threads)
        try:
            params = [nn.Parameter(engine.tensor(v.copy())) for v in values]
            params.append(nn.Parameter(engine.tensor(values[0].T.copy()).t()))  # not contiguous
            opt = optim.SGD(params, lr=0.05, momentum=0.9, dampening=dampening)
            for step in grads:
                for p, g in zip(params, [*step, step[0]], strict=True):
                    p.grad = engine.tensor(g)
                opt.step()
            versions = [p._version for p in params]
            versions += [opt.state[p]["momentum_buffer"]._version for p in params]
            return [p.numpy(force=True) for p in params], versions
        finally:
            engine.set_num_threads(before)
            monkeypatch.undo()

    ops_values, ops_versions = run(one_pass=False, threads=2)
    for threads in (1, 2):
        values_now, versions = run(one_pass=True, threads=threads)
        assert versions == ops_versions
        for got, want in zip(values_now, ops_values, strict=True):
            np.testing.assert_array_equal(got, want)
    assert not np.array_equal(ops_values[0], values[0])  # the steps moved the weights
    # (the first step makes the buffers): one pass for the contiguous ones, the ops otherwise
    assert {p for p in passes[6:]} == {(big, True, True), ((3, 5), True, True), (big, False, False)}


def test_adam_first_step_moves_each_weight_by_lr():
    # bias-corrected m/sqrt(v) = g/|g| at step 1
    p = nn.Parameter(engine.tensor([1.0, 1.0, 1.0]))
    opt = optim.Adam([p], lr=0.1)
    p.grad = engine.tensor([3.0, -0.5, 1e-3])
    opt.step()
    np.testing.assert_allclose(p.numpy(force=True), [0.9, 1.1, 0.9], rtol=1e-4)


def test_step_updates_parameters_in_place_without_history():
    p = _engine_params()[0]
    ptr, version = p.data_ptr(), p._version
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = engine.ones(*p.shape)
    opt.step()
    assert p.data_ptr() == ptr and p._version > version
    assert p.is_leaf and p.grad_fn is None


def test_parameters_without_grad_are_skipped_and_get_no_state():
    a, b = _engine_params()[:2]
    opt = optim.Adam([a, b])
    a.grad = engine.ones(*a.shape)
    opt.step()
    assert len(opt.state[a]) == 3 and b not in opt.state


def test_state_is_allocated_lazily_at_the_first_step():
    params = _engine_params()
    opt = optim.Adam(params)
    assert len(opt.state) == 0
    _set_grads(params, engine.tensor, 0)
    opt.step()
    assert set(opt.state[params[0]]) == {"step", "exp_avg", "exp_avg_sq"}


class _Region(MemoryObserver):
    """Bytes allocated inside the region (frees of older storages ignored) and their categories."""

    def __init__(self):
        self.live, self.total, self.peak, self.categories = {}, 0, 0, {}

    def on_alloc(self, event):
        self.live[event.storage_id] = event.requested
        self.total += event.requested
        self.peak = max(self.peak, self.total)
        cat = event.context.get("category")
        self.categories[cat] = self.categories.get(cat, 0) + event.requested

    def on_free(self, event):
        n = self.live.pop(event.storage_id, None)
        if n is not None:
            self.total -= n


def _measure(fn):
    region = _Region()
    with get_allocator("cpu").observing(region):
        fn()
    return region


def test_adam_state_adds_twice_the_parameter_bytes_plus_step_counters():
    # Given parameters with gradients
    params = _engine_params()
    _set_grads(params, engine.tensor, 0)
    param_bytes = sum(p.nbytes for p in params)
    opt = optim.Adam(params, lr=1e-3)
    # When the first step runs
    region = _measure(opt.step)
    # Then what stays allocated is exactly exp_avg + exp_avg_sq + one float32 step per parameter
    assert region.total == 2 * param_bytes + 4 * len(params)
    assert region.categories["optimizer_state"] == 2 * param_bytes + 4 * len(params)
    # and a later step keeps nothing new
    assert _measure(opt.step).total == 0


def test_adam_step_allocates_one_denominator_at_a_time():
    # PyTorch's single-tensor Adam: denom = (exp_avg_sq.sqrt() / c).add_(eps); sqrt's result
    # dies once the division has made denom. With one parameter the step's peak is two buffers.
    p = nn.Parameter(engine.randn(256, 64))
    p.grad = engine.randn(256, 64)
    opt = optim.Adam([p])
    opt.step()
    assert _measure(opt.step).peak == 2 * p.nbytes


def test_sgd_momentum_buffer_is_the_parameters_size_and_made_once():
    params = _engine_params()
    _set_grads(params, engine.tensor, 0)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    first = _measure(opt.step)
    assert first.total == sum(p.nbytes for p in params)
    assert first.categories == {"optimizer_state": first.total}
    assert _measure(opt.step).peak == 0  # in place from then on


def test_plain_sgd_step_allocates_nothing():
    params = _engine_params()
    _set_grads(params, engine.tensor, 0)
    assert _measure(optim.SGD(params, lr=0.1).step).peak == 0


def test_zero_grad_set_to_none_drops_gradients():
    params = _engine_params()
    _set_grads(params, engine.tensor, 0)
    opt = optim.SGD(params, lr=0.1)
    before = engine.memory.memory_allocated()
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    assert engine.memory.memory_allocated() == before - sum(p.nbytes for p in params)


def test_zero_grad_set_to_none_false_keeps_zeroed_buffers():
    params = _engine_params()
    _set_grads(params, engine.tensor, 0)
    grads = [p.grad for p in params]
    optim.SGD(params, lr=0.1).zero_grad(set_to_none=False)
    assert all(p.grad is g and not g.numpy().any() for p, g in zip(params, grads, strict=True))


def test_param_groups_have_their_own_hyperparameters():
    a, b = _engine_params()[:2]
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad, b.grad = engine.ones(*a.shape), engine.ones(*b.shape)
    a0, b0 = a.numpy(force=True).copy(), b.numpy(force=True).copy()
    opt.step()
    np.testing.assert_allclose(a.numpy(force=True), a0 - 0.1, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(force=True), b0 - 1.0, rtol=1e-6)


def test_invalid_arguments_are_refused():
    p = _engine_params()
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.SGD(p, lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam([])
    with pytest.raises(ValueError, match="more than one parameter group"):
        optim.SGD([{"params": p}, {"params": p[:1]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p[0] * 2], lr=0.1)


def test_closure_is_evaluated_with_grad_enabled():
    p = nn.Parameter(engine.tensor([2.0]))
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 4.0
    np.testing.assert_allclose(p.numpy(force=True), [1.0])


def test_state_dict_round_trip_continues_identically():
    params_a, params_b = _engine_params(), _engine_params()
    opt_a, opt_b = optim.Adam(params_a, lr=0.01), optim.Adam(params_b, lr=0.01)
    _set_grads(params_a, engine.tensor, 0)
    opt_a.step()
    for pa, pb in zip(params_a, params_b, strict=True):
        pb.data.copy_(pa.detach())
    saved = opt_a.state_dict()  # a copy of it, as torch.save / torch.load would give
    saved["state"] = {
        i: {k: v.clone() if isinstance(v, engine.Tensor) else v for k, v in s.items()}
        for i, s in saved["state"].items()
    }
    opt_b.load_state_dict(saved)
    for params, opt in ((params_a, opt_a), (params_b, opt_b)):
        _set_grads(params, engine.tensor, 1)
        opt.step()
    for pa, pb in zip(params_a, params_b, strict=True):
        np.testing.assert_array_equal(pa.numpy(force=True), pb.numpy(force=True))


def test_addcmul_lerp_addcdiv_in_place_keep_the_object():
    x = engine.ones(4)
    assert x.addcmul_(engine.full((4,), 2.0), engine.full((4,), 3.0), value=0.5) is x
    assert x.lerp_(engine.zeros(4), 0.75) is x
    assert x.addcdiv_(engine.ones(4), engine.full((4,), 4.0), value=-1) is x
    np.testing.assert_allclose(x.numpy(), (1 + 0.5 * 6) * 0.25 - 0.25)


@pytest.mark.torch
def test_load_state_dict_holds_the_loaded_tensors_as_pytorch(torch):
    """PyTorch's load_state_dict keeps the state dict's own tensors where no cast or move is
    needed (no copy, nothing allocated), and a cpu step counter on the cpu."""
    for m in (engine, torch):
        a = m.zeros(300, requires_grad=True)
        b = m.zeros(300, requires_grad=True)
        opt_a, opt_b = m.optim.Adam([a]), m.optim.Adam([b])
        a.grad = m.ones(300)
        opt_a.step()
        opt_b.load_state_dict(opt_a.state_dict())
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert opt_b.state[b][key] is opt_a.state[a][key], (m.__name__, key)
    before = engine.memory.memory_allocated("cpu")
    opt_b.load_state_dict(opt_a.state_dict())
    assert engine.memory.memory_allocated("cpu") == before


@pytest.mark.torch
@pytest.mark.parametrize("fused", [None, True])
def test_load_state_dict_puts_the_step_where_the_saved_update_keeps_it(fused, torch):
    """Into a meta parameter's optimizer: the step counter stays a cpu tensor when the saved
    groups were single-tensor / foreach, and goes to the parameter's device as float32 when
    they were fused (the loaded groups' flags decide, as in torch); the moments go to the
    parameter's device."""
    for m in (engine, torch):
        src = m.optim.Adam([m.zeros(8, requires_grad=True)], fused=fused)
        src.param_groups[0]["params"][0].grad = m.ones(8)
        src.step()
        p = m.zeros(8, device="meta", requires_grad=True)
        opt = m.optim.Adam([p])
        opt.load_state_dict(src.state_dict())
        state = opt.state[p]
        assert opt.param_groups[0]["fused"] == fused
        assert state["step"].device.type == ("meta" if fused else "cpu"), m.__name__
        assert str(state["step"].dtype).endswith("float32")
        assert state["exp_avg"].device.type == "meta"
