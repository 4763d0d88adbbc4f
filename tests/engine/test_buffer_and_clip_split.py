"""nn.Buffer (a tensor flagged as a module buffer: assigning it registers one, persistent or not)
and clip_grads_with_norm_ (clip_grad_norm_'s second half, after get_total_norm), against torch."""

from __future__ import annotations

import pytest

import engine

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("m", [engine, torch], ids=["engine", "torch"])
def test_buffer_registers_on_assignment(m):
    class Net(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.kept = m.nn.Buffer(m.ones(2))
            self.scratch = m.nn.Buffer(m.zeros(1), persistent=False)

    net = Net()
    assert [n for n, _ in net.named_buffers()] == ["kept", "scratch"]
    assert list(net.state_dict()) == ["kept"]
    assert type(net.kept) is m.Tensor and isinstance(net.kept, m.nn.Buffer)
    assert not isinstance(m.ones(1), m.nn.Buffer)
    t = m.ones(2, requires_grad=True)
    b = m.nn.Buffer(t)
    assert b is not t and b.data_ptr() == t.data_ptr() and b.requires_grad and b.is_leaf
    with pytest.raises(AttributeError, match="'int' object has no attribute 'detach'"):
        m.nn.Buffer(3)


def test_clip_in_two_steps_as_torch():
    results = []
    for m in (engine, torch):
        ps = [m.nn.Parameter(m.ones(3)) for _ in range(2)]
        ps[0].grad = m.tensor([3.0, 4.0, 0.0])
        ps[1].grad = m.tensor([1.0, -2.0, 2.0])
        total = m.nn.utils.get_total_norm([p.grad for p in ps], norm_type=2.0)
        m.nn.utils.clip_grads_with_norm_(ps, 2.0, total)
        results.append((float(total), [p.grad.tolist() for p in ps]))
    assert results[0] == results[1]
