"""Autograd memory equal to PyTorch's: each program of issue 9, against the profiler and by hand.

Both sides are measured the same way (as in test_memory_vs_torch.py): the running sum of the
bytes allocated inside the region (a free counts only when its block was allocated inside the
region too), its peak, and what is still live when the region ends. On the torch side the events
are the CPU profiler's `[memory]` events matched by address; on the engine side the tracked
allocator's. PyTorch wraps Python scalars in 4/8-byte tensors that the engine does not make,
hence "within 64 bytes".

Every program is written once against a module `m` (engine or torch). Where the figure is fixed
it is also checked without torch, from bytes worked out by hand (F: one 64x64 float32 buffer).
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest

import engine
from engine.allocator.events import MemoryObserver
from engine.allocator.tracked import get_allocator

SLACK = 64
F = 64 * 64 * 4  # one 64x64 float32 activation
KEEP: list = []  # what a program keeps alive past its region (a graph awaiting backward)


class Region(MemoryObserver):
    """Running sum of the bytes allocated inside the region, its peak, and what is left live."""

    def __init__(self):
        self.live, self.total, self.peak = {}, 0, 0

    def on_alloc(self, event):
        self.live[event.storage_id] = event.requested
        self.total += event.requested
        self.peak = max(self.peak, self.total)

    def on_free(self, event):
        n = self.live.pop(event.storage_id, None)
        if n is not None:
            self.total -= n


def engine_region(fn) -> tuple[int, int]:
    """(peak, live at the end) of the region `fn` on the engine's cpu allocator."""
    region = Region()
    with get_allocator("cpu").observing(region):
        fn()
    return region.peak, region.total


def torch_memory_events(fn) -> list[dict]:
    """The CPU profiler's `[memory]` events of the region `fn` (cpu only), in time order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    return sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )


def torch_region(fn) -> tuple[int, int]:
    """(peak, live at the end) of the region `fn` from PyTorch's CPU profiler."""
    memory = torch_memory_events(fn)
    live: dict[int, list[int]] = {}
    total = peak = 0
    for e in memory:
        n, addr = e["args"]["Bytes"], e["args"]["Addr"]
        if n > 0:
            live.setdefault(addr, []).append(n)
            total += n
        elif live.get(addr):
            total -= live[addr].pop()
        peak = max(peak, total)
    return peak, total


@pytest.fixture(autouse=True)
def _drop_kept():
    yield
    KEEP.clear()


def _leaf(m, shape, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return m.tensor(data).requires_grad_(True)


# ---------------------------------------------------------------------------------------------
# the programs
# ---------------------------------------------------------------------------------------------
def used_twice(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 2
        (y * y).sum().backward()

    return region


def batched_matmul(m):
    a, w = _leaf(m, (4, 16, 32)), _leaf(m, (32, 64), 1)

    def region():
        (a @ w).sum().backward()

    return region


def split_all(m):
    x = _leaf(m, (64, 64))

    def region():
        a, b, c, d = (x * 1).split(16, 0)
        (a.sum() + b.sum() * 2 + c.sum() + d.sum()).backward()

    return region


def split_some(m):
    x = _leaf(m, (64, 64))

    def region():
        a, _, c, _ = (x * 1).split(16, 0)
        (a.sum() + c.sum()).backward()

    return region


def chunk_product(m):
    x = _leaf(m, (64, 64))

    def region():
        a, b = (x * 1).chunk(2, 1)
        (a * b).sum().backward()

    return region


def unbind_some(m):
    x = _leaf(m, (4, 64, 64))

    def region():
        p = (x * 1).unbind(0)
        (p[0] * p[1] + p[2]).sum().backward()

    return region


def mask_assign(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 1
        y[y < 0] = 0
        y.sum().backward()

    return region


def mask_assign_graph_kept(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 1
        y[y < 0] = 0
        KEEP.append(y.sum())  # backward not run yet: IndexPutBackward0 holds the mask

    return region


def mask_assign_tensor_value(m):
    x, v = _leaf(m, (64, 64)), _leaf(m, (), 3)

    def region():
        y = x * 1
        y[y < 0] = v
        y.sum().backward()

    return region


def mask_gather(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 1
        (y[y > 0] * 2).sum().backward()

    return region


def zero_slice(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 1
        y[:, :16].zero_()
        (y * y).sum().backward()

    return region


def fill_slice_tensor_value(m):
    x, v = _leaf(m, (64, 64)), _leaf(m, (), 3)

    def region():
        y = x * 1
        y[:16].fill_(v)
        (y * y).sum().backward()

    return region


def pow_cube(m):
    x = _leaf(m, (64, 64))

    def region():
        (x**3).sum().backward()

    return region


def clamp_both(m):
    x = _leaf(m, (64, 64))

    def region():
        x.clamp(-0.5, 0.5).sum().backward()

    return region


def clamp_inplace(m):
    x = _leaf(m, (64, 64))

    def region():
        y = x * 1
        y.clamp_(-0.5, 0.5)
        y.sum().backward()

    return region


def softmax_forward(m):
    x = _leaf(m, (64, 64)).detach()

    def region():
        x.softmax(-1)

    return region


def softmax_weighted(m):
    x, w = _leaf(m, (64, 64)), _leaf(m, (64, 64), 1)

    def region():
        (x.softmax(-1) * w).sum().backward()

    return region


def log_softmax_sum(m):
    x = _leaf(m, (64, 64))

    def region():
        x.log_softmax(-1).sum().backward()

    return region


def cos_backward(m):
    x = _leaf(m, (64, 64))

    def region():
        x.cos().sum().backward()

    return region


def where_backward(m):
    x, w = _leaf(m, (64, 64)), _leaf(m, (64, 64), 1).detach()

    def region():
        x.where(w > 0, 0.0).sum().backward()

    return region


def maximum_backward(m):
    x, w = _leaf(m, (64, 64)), _leaf(m, (64, 64), 1)

    def region():
        x.maximum(w).sum().backward()

    return region


def divide_by_column(m):
    x, w = _leaf(m, (64, 64)), _leaf(m, (64, 1), 1)

    def region():
        (x / w).sum().backward()

    return region


def pow_tensor_exponent(m):
    x, w = _leaf(m, (64, 64)), _leaf(m, (64, 64), 1)

    def region():
        x.abs().pow(w).sum().backward()

    return region


def number_over_tensor(m):
    x = _leaf(m, (64, 64))

    def region():
        (1 / x).sum().backward()

    return region


PROGRAMS = {
    "used_twice": used_twice,
    "batched_matmul": batched_matmul,
    "split_all": split_all,
    "split_some": split_some,
    "chunk_product": chunk_product,
    "unbind_some": unbind_some,
    "mask_assign": mask_assign,
    "mask_assign_graph_kept": mask_assign_graph_kept,
    "mask_assign_tensor_value": mask_assign_tensor_value,
    "mask_gather": mask_gather,
    "zero_slice": zero_slice,
    "fill_slice_tensor_value": fill_slice_tensor_value,
    "pow_cube": pow_cube,
    "clamp_both": clamp_both,
    "clamp_inplace": clamp_inplace,
    "softmax_forward": softmax_forward,
    "softmax_weighted": softmax_weighted,
    "log_softmax_sum": log_softmax_sum,
    "cos_backward": cos_backward,
    "where_backward": where_backward,
    "maximum_backward": maximum_backward,
    "divide_by_column": divide_by_column,
    "pow_tensor_exponent": pow_tensor_exponent,
    "number_over_tensor": number_over_tensor,
}


# ---------------------------------------------------------------------------------------------
# by hand (no torch needed)
# ---------------------------------------------------------------------------------------------
def test_two_gradients_reaching_one_tensor_are_summed_in_place():
    # y, then y*y's two gradients (one F each): the second is added into the first, which the
    # engine owns; no third buffer. The 4-byte sum and ones of the root.
    peak, live = engine_region(used_twice(engine))
    assert peak == 3 * F + 4 + 4
    assert live == F  # x.grad


def test_a_gradient_that_is_a_view_is_taken_over_by_accumulate_grad():
    # a @ w folds a to (64, 32): w's gradient (8 KiB), then a's (8 KiB) while the stride-0
    # gradient of the sum is copied into a contiguous (64, 64) operand for BLAS (16 KiB).
    a, w = _leaf(engine, (4, 16, 32)), _leaf(engine, (32, 64), 1)
    peak, live = engine_region(lambda: (a @ w).sum().backward())
    assert peak == 8192 + 8192 + 16384 + 4 + 4
    assert live == 8192 + 8192  # both gradients taken over, none copied
    assert a.grad._base is None and a.grad.is_contiguous()
    expected = np.broadcast_to(w.detach().numpy().sum(1), (4, 16, 32))
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize(
    "name,expected_peak",
    [
        # (each figure's last + 4: the root's 4-byte seed, held until backward returns as
        # torch.autograd.backward holds it)
        # y, the four piece gradients (F in all), the one F buffer they are written into
        ("split_all", F + F + F + 4 + 4),
        # y, the two used pieces' gradients and the two zero pieces (F in all), one F buffer
        ("split_some", F + F + F + 4 + 4),
        # y, a's and b's gradients (F/2 each), the one F buffer
        ("chunk_product", F + F + F + 4 + 4),
        # the views keep y (4F) alive; two piece gradients (p2's is the root's expanded scalar,
        # p3's a 0-d zero), one 4F buffer, freed once x*1's backward made x's 4F gradient
        ("unbind_some", 4 * F + 4 * F + 4 * F + 4 + 4),
    ],
)
def test_split_chunk_unbind_fill_one_buffer(name, expected_peak):
    peak, live = engine_region(PROGRAMS[name](engine))
    assert peak == expected_peak
    assert live == (4 * F if name == "unbind_some" else F)


def test_split_has_one_backward_node():
    x = _leaf(engine, (6, 4))
    pieces = (x * 1).split(2, 0)
    assert len({id(p.grad_fn) for p in pieces}) == 1
    assert pieces[0].grad_fn.name() == "SplitBackward0"
    assert [p._output_nr for p in pieces] == [0, 1, 2]
    assert (x * 1).unbind(1)[3].grad_fn.name() == "UnbindBackward0"


@pytest.mark.parametrize("how", ["split", "chunk", "unbind"])
def test_split_gradients_match_numerical_differentiation(how):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((6, 4))

    def f(m, x):
        if how == "split":
            a, b, c = x.split([1, 2, 3], 0)
            return (a * 2).sum() + (c * c).sum()
        if how == "chunk":
            a, b = x.chunk(2, 1)
            return (a * b).sum()
        p = x.unbind(1)
        return (p[0] * p[2]).sum() + p[3].sum()

    x = engine.tensor(x0, dtype=engine.float64).requires_grad_(True)
    f(engine, x).backward()
    eps, num = 1e-6, np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        up, dn = x0.copy(), x0.copy()
        up[i] += eps
        dn[i] -= eps
        fu = f(engine, engine.tensor(up, dtype=engine.float64)).item()
        fd = f(engine, engine.tensor(dn, dtype=engine.float64)).item()
        num[i] = (fu - fd) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_mask_assignment_keeps_the_mask_until_backward():
    # y (F) and the bool mask (F/4); after the region only the mask and the 4-byte sum are live
    region = mask_assign_graph_kept(engine)
    peak, live = engine_region(region)
    assert peak == F + F // 4 + 4
    assert live == F // 4 + 4
    KEEP.clear()  # the graph dies: so does the mask
    assert engine.memory.memory_allocated() == F  # x only


def test_mask_modified_after_assignment_is_a_version_error():
    x = _leaf(engine, (4, 4))
    y = x * 1
    mask = y < 0
    y[mask] = 0
    mask.fill_(False)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_mask_gather_charges_the_coordinates_pytorch_makes():
    # y[y > 0]: nonzero() gives (count, 2) int64 coordinates, in forward and again in backward
    x = _leaf(engine, (64, 64))
    count = int((x.detach().numpy() > 0).sum())
    coords, picked = count * 2 * 8, count * 4
    peak, live = engine_region(mask_gather(engine))
    # backward: y and its mask, the picked gradient, the zeros it is scattered into, coordinates,
    # the root's seed
    assert peak == F + F // 4 + picked + F + coords + 4 + 4
    assert live == F


@pytest.mark.parametrize(
    "name,expected_peak",
    [
        # y, y*y's gradient, CopySlices' base-sized buffer, the region's clone and its zeros
        # (the last + 4 here and below: the root's seed, live until backward returns)
        ("zero_slice", 3 * F + F // 4 + F // 4 + 4 + 4),
        ("fill_slice_tensor_value", 3 * F + F // 4 + F // 4 + 4 + 4 + 4),
        # pow_backward: self.pow(2), exponent * that, grad * that: three F at once
        ("pow_cube", 3 * F + 4 + 4),
        # clamp_backward: (x >= min) and (x <= max), both live while where() is made
        ("clamp_both", F + 2 * (F // 4) + 4 + 4),
        # y, the clone clamp_ keeps of it, then the same backward as clamp_both
        ("clamp_inplace", 2 * F + F + 2 * (F // 4) + 4 + 4),
        # grad * -self.sin(): the sine, its negation and the product
        ("cos_backward", 3 * F + 4 + 4),
        # the mask (F/4) and where(condition, grad, 0) (F); no logical_not mask
        ("where_backward", F // 4 + F + 4 + 4),
        # per input: grad / 2, the tie mask, where(), the losing mask; x's gradient stays (F)
        ("maximum_backward", F + (F + F // 4 + F + F // 4) + 4 + 4),
        # the divisor's gradient first: self / other, / other, -grad and their product
        ("divide_by_column", 4 * F + 4 + 4),
        # |x| and the result (kept: the exponent needs it), the exponent's gradient (F), then
        # pow_backward_self's exponent - 1, pow, exponent * that, grad * that, its
        # exponent == 0 mask and the where(): 5F + F/4 at once
        ("pow_tensor_exponent", F + F + F + 5 * F + F // 4 + 4 + 4),
        # 1 / x is x.reciprocal() * 1: the reciprocal is kept; backward: grad * 1, then
        # -grad * (result * result) with its two temporaries
        ("number_over_tensor", F + F + 3 * F + 4 + 4),
    ],
)
def test_backward_temporaries_are_pytorchs(name, expected_peak):
    peak, _ = engine_region(PROGRAMS[name](engine))
    assert peak == expected_peak


def test_fill_with_a_tensor_value_sends_the_value_its_gradient():
    x, v = _leaf(engine, (4, 4)), _leaf(engine, (), 3)
    y = x * 1
    y[:2].fill_(v)
    (y * y).sum().backward()
    assert v.grad.item() == pytest.approx(8 * 2 * v.item())
    assert (x.grad.numpy()[:2] == 0).all()


def test_softmax_row_statistics_are_scratch_not_allocated_memory():
    # PyTorch's kernel keeps each row's max and sum in registers: only the result is allocated;
    # the engine's two (64, 1) rows are reported apart, as scratch
    region = softmax_forward(engine)
    engine.memory.reset_peak_memory_stats()
    peak, live = engine_region(region)
    assert (peak, live) == (F, 0)
    assert engine.memory.max_memory_scratch() == 2 * 64 * 4
    assert engine.memory.memory_scratch() == 0


def test_softmax_backward_makes_a_strided_gradient_contiguous_as_pytorch_does():
    # the sum's gradient is a stride-0 expand: the kernel copies it (F) beside its result (F)
    peak, live = engine_region(log_softmax_sum(engine))
    assert peak == F + F + F + 4 + 4
    assert live == F


def test_scratch_reaches_observers_apart_from_allocations():
    seen = []

    class Watch(MemoryObserver):
        def on_alloc(self, event):
            seen.append(("alloc", event.requested))

        def on_scratch(self, event):
            seen.append((f"scratch {event.action}", event.requested))

    x = engine.ones(4, 8)
    with get_allocator("cpu").observing(Watch()):
        x.softmax(1)
    assert (
        seen
        == [("alloc", 128), ("scratch alloc", 16), ("scratch alloc", 16)]
        + [("scratch free", 16)] * 2
    )


# ---------------------------------------------------------------------------------------------
# against PyTorch's profiler
# ---------------------------------------------------------------------------------------------
@pytest.mark.torch
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_region_matches_pytorch_profiler(name, torch):
    make = PROGRAMS[name]
    want = torch_region(make(torch))
    KEEP.clear()
    got = engine_region(make(engine))
    assert abs(got[0] - want[0]) <= SLACK, f"peak: engine {got[0]}, torch {want[0]}"
    assert abs(got[1] - want[1]) <= SLACK, f"live at end: engine {got[1]}, torch {want[1]}"


@pytest.mark.torch
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_gradients_match_pytorch(name, torch):
    leaves = {}
    for m in (engine, torch):
        region = PROGRAMS[name](m)
        region()
        for kept in KEEP:
            kept.backward()
        KEEP.clear()
        cells = region.__closure__ or ()
        leaves[m.__name__] = [c.cell_contents for c in cells if hasattr(c.cell_contents, "grad")]
    for e, t in zip(leaves["engine"], leaves["torch"], strict=True):
        if t.grad is None:
            assert e.grad is None
            continue
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


# --- a batched matmul folds as torch's _matmul_impl: the gradient is copied once


@pytest.mark.torch
def test_batched_matmul_backward_copies_the_gradient_once_as_torch(torch):
    def program(m):
        rng = np.random.default_rng(0)
        att = m.tensor(rng.standard_normal((2, 4, 16, 16)).astype(np.float32))
        att.requires_grad_(True)
        x = m.tensor(rng.standard_normal((2, 16, 4, 8)).astype(np.float32))
        x.requires_grad_(True)
        w = m.tensor(rng.standard_normal((2, 16, 32)).astype(np.float32))

        def region():
            y = m.matmul(att, x.transpose(1, 2))  # v: not viewable as (8, 16, 8): copied
            (y.transpose(1, 2).reshape(2, 16, 32) * w).sum().backward()

        return region

    t_sizes = [e["args"]["Bytes"] for e in torch_memory_events(program(torch))]
    region = program(engine)
    seen = []

    class Sizes(MemoryObserver):
        def on_alloc(self, event):
            seen.append(event.requested)

        def on_free(self, event):
            seen.append(-event.requested)

    with get_allocator("cpu").observing(Sizes()):
        region()

    def big(sizes):  # the tensors' events, without the 4/8-byte scalars torch wraps
        return [s for s in sizes if abs(s) >= 1024]

    assert big(seen) == big(t_sizes)


@pytest.mark.parametrize("through_view", [False, True])
def test_copy_into_a_tensor_with_history_sends_it_zeros_as_torch(through_view):
    # torch's CopyBackwards makes zeros_like(grad) for the destination's history (its old
    # values did not reach the result): x's gradient is zeros, not absent, and the zeros are a
    # block of their own in backward (inside CopySlices too, after the region's clone)
    torch = pytest.importorskip("torch")
    from tests.engine.test_memory_vs_torch import assert_steps_as_torch

    grads = {}

    def make(m):
        x = m.tensor(np.arange(160.0).reshape(4, 40), requires_grad=True)
        z = m.tensor(np.ones((4, 10 if through_view else 40)), requires_grad=True)
        held = {}

        def forward():
            y = x * 2
            (y[:, 5:15] if through_view else y).copy_(z)
            held["y"] = y

        def backward():
            held["y"].backward(m.ones_like(held["y"]))
            grads[m] = (x.grad.numpy().copy(), z.grad.numpy().copy())

        return forward, backward

    assert_steps_as_torch(make)
    (ex, ez), (tx, tz) = grads[engine], grads[torch]
    np.testing.assert_array_equal(ex, tx)
    np.testing.assert_array_equal(ez, tz)
    assert (ex == 0).all() if not through_view else (ex[:, 5:15] == 0).all()


def test_a_node_of_several_gradients_frees_them_first_to_last_as_torch():
    # UnbindBackward0 is handed one gradient per piece: torch frees its input buffer in order
    pytest.importorskip("torch")
    from tests.engine.test_memory_vs_torch import assert_steps_as_torch, forward_backward

    def make(m):
        x = m.tensor(np.arange(6 * 40.0).reshape(6, 40), requires_grad=True)

        def run():
            parts = [p * float(i + 2) for i, p in enumerate((x * 1.0).unbind(0))]
            return m.stack(parts[::-1]).sum(1)

        return forward_backward(m, run)

    assert_steps_as_torch(make)
