"""RNN, LSTM, GRU and their cells against torch 2.13: values and gradients (float64, torch's
weights loaded through state_dict), the nodes of the graph, every block forward and backward as
torch's CPU profiler shows it, parameter names and shapes, reprs, refusals, meta.

torch runs a float32 LSTM on cpu through oneDNN (MkldnnRnnLayerBackward0) unless mkldnn is off;
the engine follows torch's composite (aten/src/ATen/native/RNN.cpp), which torch runs for GRU and
RNN in every dtype, for float64, for proj_size > 0 and with mkldnn off: the comparisons here turn
mkldnn off."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

import engine
from tests.conftest import assert_raises_as_torch
from tests.engine.test_memory_vs_torch import (
    engine_peak,
    engine_sequence,
    torch_peak,
    torch_sequence,
)

torch = pytest.importorskip("torch")

L, N, I, H = 5, 4, 8, 16  # noqa: E741 - sequence, batch, input and hidden sizes (blocks above 64 bytes)

CASES = {  # name -> (module, constructor arguments, input shape)
    "lstm": ("LSTM", {}, (L, N, I)),
    "lstm_two_layers": ("LSTM", {"num_layers": 2}, (L, N, I)),
    "lstm_bidirectional": ("LSTM", {"bidirectional": True}, (L, N, I)),
    "lstm_bidir_two_layers_batch_first": (
        "LSTM",
        {"num_layers": 2, "bidirectional": True, "batch_first": True},
        (N, L, I),
    ),
    "lstm_no_bias": ("LSTM", {"bias": False}, (L, N, I)),
    "lstm_unbatched": ("LSTM", {}, (L, I)),
    "lstm_proj": ("LSTM", {"proj_size": 6, "num_layers": 2}, (L, N, I)),
    "lstm_proj_bidir_batch_first": (
        "LSTM",
        {"proj_size": 6, "bidirectional": True, "batch_first": True},
        (N, L, I),
    ),
    "gru": ("GRU", {}, (L, N, I)),
    "gru_two_layers": ("GRU", {"num_layers": 2}, (L, N, I)),
    "gru_bidir_batch_first": ("GRU", {"bidirectional": True, "batch_first": True}, (N, L, I)),
    "gru_no_bias_unbatched": ("GRU", {"bias": False}, (L, I)),
    "rnn_tanh": ("RNN", {}, (L, N, I)),
    "rnn_relu_bidir_two_layers": (
        "RNN",
        {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True},
        (L, N, I),
    ),
    "rnn_batch_first_no_bias": ("RNN", {"batch_first": True, "bias": False}, (N, L, I)),
    "lstm_cell": ("LSTMCell", {}, (N, I)),
    "lstm_cell_unbatched": ("LSTMCell", {"bias": False}, (I,)),
    "gru_cell": ("GRUCell", {}, (N, I)),
    "gru_cell_no_bias": ("GRUCell", {"bias": False}, (N, I)),
    "rnn_cell": ("RNNCell", {}, (N, I)),
    "rnn_cell_relu_unbatched": ("RNNCell", {"nonlinearity": "relu"}, (I,)),
}


@pytest.fixture(autouse=True)
def _torch_composite():
    with torch.backends.mkldnn.flags(enabled=False):
        yield


def _modules(name, dtype="float64", seed=0):
    """(torch's module, the engine's with torch's weights loaded through state_dict)."""
    cls, kw, _ = CASES[name]
    torch.manual_seed(seed)
    t = getattr(torch.nn, cls)(I, H, **kw).to(getattr(torch, dtype))
    e = getattr(engine.nn, cls)(I, H, **kw).to(getattr(engine, dtype))
    e.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    return {torch: t, engine: e}


def _hidden_shapes(name):
    """The shapes of the initial state(s) a caller may pass."""
    cls, kw, shape = CASES[name]
    batched = len(shape) == (2 if cls.endswith("Cell") else 3)
    if cls.endswith("Cell"):
        one = (shape[0], H) if batched else (H,)
        return [one, one] if cls == "LSTMCell" else [one]
    d = 2 if kw.get("bidirectional") else 1
    lead = (kw.get("num_layers", 1) * d,)
    batch = ((shape[0] if kw.get("batch_first") else shape[1]),) if batched else ()
    h = lead + batch + (kw.get("proj_size") or H,)
    return [h, lead + batch + (H,)] if cls == "LSTM" else [h]


def _flat(result):
    """The result's tensors in order: (output, h) / (output, (h, c)) / h / (h, c)."""
    if not isinstance(result, tuple):
        return [result]
    out = []
    for r in result:
        out += _flat(r)
    return out


def _call(m, mod, name, x, hx):
    if hx is None:
        return mod(x)
    return mod(x, tuple(hx) if len(hx) == 2 else hx[0])


def _run(m, mod, name, dtype, with_hx):
    rng = np.random.default_rng(1)
    x = m.tensor(rng.standard_normal(CASES[name][2]).astype(dtype), requires_grad=True)
    hx = None
    if with_hx:
        hx = [
            m.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True)
            for s in _hidden_shapes(name)
        ]
    outs = _flat(_call(m, mod, name, x, hx))
    loss = sum((o * (k + 1.5)).sum() for k, o in enumerate(outs))
    loss.backward()
    grads = [x.grad] + ([h.grad for h in hx] if hx else [])
    grads += [p.grad for _, p in mod.named_parameters()]
    return outs, grads


@pytest.mark.parametrize("with_hx", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_as_torch(name, with_hx):
    mods = _modules(name)
    (e_out, e_grads), (t_out, t_grads) = (
        _run(m, mods[m], name, np.float64, with_hx) for m in (engine, torch)
    )
    assert len(e_out) == len(t_out)
    for e, t in zip(e_out, t_out, strict=True):
        assert tuple(e.shape) == tuple(t.shape)
        np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=1e-13, atol=1e-13)
    for e, t in zip(e_grads, t_grads, strict=True):
        np.testing.assert_allclose(e.numpy(), t.numpy(), rtol=1e-12, atol=1e-12)


def test_float32_values_as_torch():
    mods = _modules("lstm_bidir_two_layers_batch_first", "float32")
    (e_out, e_grads), (t_out, t_grads) = (
        _run(m, mods[m], "lstm_bidir_two_layers_batch_first", np.float32, True)
        for m in (engine, torch)
    )
    for e, t in zip(e_out + e_grads, t_out + t_grads, strict=True):
        np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_gradients_against_central_differences():
    """float64 central differences of a small GRU and LSTM with projections (torch not used)."""
    rng = np.random.default_rng(3)
    for mod in (engine.nn.GRU(3, 4, num_layers=2), engine.nn.LSTM(3, 4, proj_size=2)):
        mod = mod.double()
        x0 = rng.standard_normal((3, 2, 3))
        x = engine.tensor(x0, requires_grad=True)
        sum(o.sum() for o in _flat(mod(x))).backward()
        num = np.zeros_like(x0)
        eps = 1e-6
        with engine.no_grad():
            for i in np.ndindex(x0.shape):
                d = np.zeros_like(x0)
                d[i] = eps
                hi = sum(o.sum().item() for o in _flat(mod(engine.tensor(x0 + d))))
                lo = sum(o.sum().item() for o in _flat(mod(engine.tensor(x0 - d))))
                num[i] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def _node_names(*roots):
    """How many nodes of each name the graph behind roots holds (every edge followed).

    The leaves' AccumulateGrad (torch::autograd::AccumulateGrad in torch) and TBackward0 are left
    out: the engine's linear primitive (AddmmBackward0) edges its weight straight to the leaf,
    where torch's goes through weight.t()'s TBackward0."""
    seen, names, todo = set(), collections.Counter(), [r.grad_fn for r in roots]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if "AccumulateGrad" not in fn.name() and fn.name() != "TBackward0":
            names[fn.name()] += 1
        todo += [e[0] for e in fn.next_functions or () if e is not None and e[0] is not None]
    return names


@pytest.mark.parametrize("name", sorted(CASES))
def test_graph_nodes_as_torch(name):
    mods = _modules(name, "float32")
    got = {}
    for m in (engine, torch):
        x = m.ones(*CASES[name][2], requires_grad=True)
        outs = _flat(mods[m](x))
        got[m] = ([o.grad_fn.name() for o in outs], _node_names(*outs))
    assert got[engine] == got[torch]


def _steps(m, mod, name, grad=True):
    x = m.tensor(
        np.random.default_rng(1).standard_normal(CASES[name][2]).astype(np.float32),
        requires_grad=True,
    )
    held = {}

    def forward():
        if grad:
            held["y"] = _flat(mod(x))[0]
        else:
            with m.no_grad():
                held["y"] = mod(x)

    def backward():
        held["y"].backward(m.ones_like(held["y"]))

    return forward, backward


# Backward cases where a gradient is summed into one that arrived before it (a multi-step LSTM or
# GRU: the hidden state's, the shared weights' and biases'): torch's InputBuffer::add moves only
# the first gradient into the buffer; one summed in stays in the node's outputs until every edge
# is served, and the hidden-to-hidden weight's goes through TBackward0, a node of its own, after
# the step's other gradients are freed. Their full sequence is checked below, after forwards that
# ran under the profilers (a free is reported only of a block torch's profiler saw made).
_BACKWARD_INTERLEAVED = {
    "gru",
    "gru_bidir_batch_first",
    "gru_two_layers",
    "lstm",
    "lstm_bidir_two_layers_batch_first",
    "lstm_bidirectional",
    "lstm_proj",
    "lstm_proj_bidir_batch_first",
    "lstm_two_layers",
}


def _programs(name):
    mods = _modules(name, "float32")
    return _steps(engine, mods[engine], name), _steps(torch, mods[torch], name)


def _forward_profiled(name):
    """The backward steps, after both forwards ran under the profilers (torch reports a free
    only of a block its profiler saw made): returns the forwards' sequences too."""
    (e_fwd, e_bwd), (t_fwd, t_bwd) = _programs(name)
    return (engine_sequence(e_fwd), torch_sequence(t_fwd)), (e_bwd, t_bwd)


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocks_forward_and_backward_as_torch(name):
    """Forward: every block, in order. Backward: every block in order (the interleaved cases:
    the peak, see _BACKWARD_INTERLEAVED)."""
    (e_fwd, t_fwd), (e_bwd, t_bwd) = _forward_profiled(name)
    assert e_fwd == t_fwd
    if name in _BACKWARD_INTERLEAVED:
        assert engine_peak(e_bwd) == torch_peak(t_bwd)
    else:
        assert engine_sequence(e_bwd) == torch_sequence(t_bwd)


@pytest.mark.parametrize("name", sorted(_BACKWARD_INTERLEAVED))
def test_backward_blocks_interleaved_as_torch(name):
    _, (e_bwd, t_bwd) = _forward_profiled(name)
    assert engine_sequence(e_bwd) == torch_sequence(t_bwd)


@pytest.mark.parametrize(
    "name", ["lstm_bidir_two_layers_batch_first", "lstm_proj", "gru_two_layers", "rnn_tanh"]
)
def test_blocks_without_grad_as_torch(name):
    """Without autograd nothing is kept: each temporary dies where torch's does."""
    mods = _modules(name, "float32")
    assert engine_sequence(_steps(engine, mods[engine], name, grad=False)[0]) == torch_sequence(
        _steps(torch, mods[torch], name, grad=False)[0]
    )


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_dropout_between_layers_in_training(cls):
    """Dropout draws from the engine's RNG (values differ from torch's), its blocks are torch's;
    in eval it is off and the values are torch's."""
    torch.manual_seed(0)
    t = getattr(torch.nn, cls)(I, H, num_layers=3, dropout=0.4)
    e = getattr(engine.nn, cls)(I, H, num_layers=3, dropout=0.4)
    e.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((L, N, I)).astype(np.float32)
    e.train()
    t.train()
    e_fwd, e_bwd = _fb(engine, e, x)
    t_fwd, t_bwd = _fb(torch, t, x)
    assert engine_sequence(e_fwd) == torch_sequence(t_fwd)
    assert engine_sequence(e_bwd) == torch_sequence(t_bwd)
    engine.manual_seed(5)
    y1 = e(engine.tensor(x))[0].detach().numpy()
    engine.manual_seed(5)
    y2 = e(engine.tensor(x))[0].detach().numpy()
    np.testing.assert_array_equal(y1, y2)  # the engine's RNG decides the mask
    e.eval()
    t.eval()
    np.testing.assert_allclose(
        e(engine.tensor(x))[0].detach().numpy(),
        t(torch.tensor(x))[0].detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def _fb(m, mod, x):
    xt = m.tensor(x, requires_grad=True)
    held = {}

    def forward():
        held["y"] = mod(xt)[0]

    def backward():
        held["y"].backward(m.ones_like(held["y"]))

    return forward, backward


@pytest.mark.parametrize(
    "cls, kw",
    [
        ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 3}),
        ("LSTM", {"bias": False}),
        ("GRU", {"num_layers": 2, "bidirectional": True}),
        ("RNN", {"nonlinearity": "relu", "bias": False}),
        ("LSTMCell", {}),
        ("GRUCell", {"bias": False}),
        ("RNNCell", {}),
    ],
)
def test_parameters_named_shaped_and_initialised_as_torch(cls, kw):
    e, t = getattr(engine.nn, cls)(I, H, **kw), getattr(torch.nn, cls)(I, H, **kw)
    e_params, t_params = dict(e.named_parameters()), dict(t.named_parameters())
    assert list(e_params) == list(t_params)
    assert [tuple(p.shape) for p in e_params.values()] == [
        tuple(p.shape) for p in t_params.values()
    ]
    bound = 1 / math.sqrt(H)
    for p in e_params.values():
        v = p.detach().numpy()
        assert v.min() >= -bound and v.max() <= bound and v.std() > bound / 4
    assert repr(e) == repr(t)
    assert list(e.state_dict()) == list(t.state_dict())


def test_reprs_as_torch():
    for cls, kw in [
        ("LSTM", {"num_layers": 2, "dropout": 0.5, "batch_first": True, "proj_size": 4}),
        ("GRU", {"bias": False, "bidirectional": True}),
        ("RNN", {"nonlinearity": "relu"}),
        ("RNNCell", {"nonlinearity": "relu", "bias": False}),
        ("LSTMCell", {}),
    ]:
        assert repr(getattr(engine.nn, cls)(I, H, **kw)) == repr(getattr(torch.nn, cls)(I, H, **kw))


def _lstm(m):
    return m.nn.LSTM(3, 4, num_layers=2)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: _lstm(m)(m.ones(2, 3, 4, 3)),
        lambda m: _lstm(m)(m.ones(2, 3, 5)),
        lambda m: _lstm(m)(m.ones(2, 3, 3), (m.ones(2, 3, 4), m.ones(1, 3, 4))),
        lambda m: _lstm(m)(m.ones(2, 3, 3), (m.ones(3, 4), m.ones(2, 3, 4))),
        lambda m: _lstm(m)(m.ones(2, 3), (m.ones(2, 3, 4), m.ones(2, 3, 4))),
        lambda m: _lstm(m)(m.ones(2, 3, 3, dtype=m.float64)),
        lambda m: m.nn.GRU(3, 4)(m.ones(2, 3, 3), m.ones(1, 2, 4)),
        lambda m: m.nn.GRU(3, 4)(m.ones(2, 3, 3), m.ones(2, 4)),
        lambda m: m.nn.GRU(3, 4)(m.ones(2, 3), m.ones(1, 2, 4)),
        lambda m: m.nn.RNN(3, 4)(m.ones(3)),
        lambda m: m.nn.LSTM(3, 4, proj_size=4),
        lambda m: m.nn.LSTM(3, 4, proj_size=-1),
        lambda m: m.nn.LSTM(3, 4, dropout=1.5),
        lambda m: m.nn.LSTM(0, 4),
        lambda m: m.nn.GRU(3, 4, num_layers=0),
        lambda m: m.nn.GRU(3, 4, proj_size=2),
        lambda m: m.nn.RNN(3, 4, nonlinearity="gelu"),
        lambda m: m.nn.LSTMCell(3, 4)(m.ones(2, 2, 3)),
        lambda m: m.nn.LSTMCell(3, 4)(m.ones(2, 5)),
        lambda m: m.nn.LSTMCell(3, 4)(m.ones(2, 3), (m.ones(3, 4), m.ones(2, 4))),
        lambda m: m.nn.LSTMCell(3, 4)(m.ones(2, 3), (m.ones(2, 4), m.ones(2, 5))),
        lambda m: m.nn.GRUCell(3, 4)(m.ones(2, 3), m.ones(2, 2, 4)),
        lambda m: m.nn.GRUCell(3, 4)(m.ones(2, 3), m.ones(2, 5)),
        lambda m: m.nn.RNNCell(3, 4)(m.ones(2, 4)),
        lambda m: m.nn.RNNCell(3, 4)(m.ones(2, 3), m.ones(3, 4)),
    ],
)
def test_refusals_as_torch(call):
    assert_raises_as_torch(call)


def test_packed_sequence_is_refused():
    class Packed:  # what a PackedSequence would be: no Tensor
        pass

    for mod in (engine.nn.LSTM(3, 4), engine.nn.GRU(3, 4), engine.nn.RNN(3, 4)):
        with pytest.raises(NotImplementedError, match="PackedSequence is not supported"):
            mod(Packed())


@pytest.mark.parametrize(
    "cls, kw, shape",
    [
        ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 3}, (5, 2, 8)),
        ("GRU", {"batch_first": True, "num_layers": 2, "dropout": 0.2}, (2, 5, 8)),
        ("RNN", {}, (5, 8)),
        ("LSTMCell", {}, (2, 8)),
        ("GRUCell", {}, (8,)),
        ("RNNCell", {"nonlinearity": "relu"}, (2, 8)),
    ],
)
def test_meta_shapes_and_backward(cls, kw, shape):
    mods = {
        m: getattr(m.nn, cls)(8, H, **kw, device="meta" if m is engine else "cpu")
        for m in (engine, torch)
    }
    e_out = _flat(mods[engine](engine.ones(*shape, device="meta", requires_grad=True)))
    t_out = _flat(mods[torch](torch.ones(*shape, requires_grad=True)))
    assert [tuple(o.shape) for o in e_out] == [tuple(o.shape) for o in t_out]
    assert all(o.device.type == "meta" and o.dtype is engine.float32 for o in e_out)
    e_out[0].sum().backward()
    assert all(
        p.grad is not None and p.grad.device.type == "meta" for p in mods[engine].parameters()
    )
