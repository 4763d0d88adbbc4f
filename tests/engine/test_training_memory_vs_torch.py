"""Programs written the way people train, against PyTorch's CPU profiler: peak and frees.

Attention, norms, residuals, views (split, chunk, unbind, permute, transpose), weight tying and
the optimizers, one warm-up step and then one measured step (gradients and optimizer state exist
from the warm-up on). Measured as in test_autograd_memory_parity.py: region peak, and the bytes
still live at the end with frees matched to allocations by address.

Known difference, not copied: torch's CPU convolution kernels allocate buffers their CUDA kernels
do not (the engine reports its im2col columns as scratch); BatchNorm's second grad_input and
LayerNorm's per-thread partial sums are copied on cpu (test_cpu_kernel_quirks).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.engine.test_autograd_memory_parity import SLACK, engine_region, torch_region


def _x(m, shape, seed=0):
    return m.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _labels(m, n, classes, seed=1):
    return m.tensor(np.random.default_rng(seed).integers(0, classes, n))


def _step(model, x, target, loss_fn, opt):
    def region():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), target).backward()
        opt.step()

    region()  # warm-up
    return region


def attention_block(m):
    nn, F = m.nn, m.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv, self.proj = nn.LayerNorm(64), nn.Linear(64, 192), nn.Linear(64, 64)
            self.ln2, self.fc1, self.fc2 = nn.LayerNorm(64), nn.Linear(64, 256), nn.Linear(256, 64)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(64, dim=2)
            q, k, v = (z.reshape(b, t, 4, 16).transpose(1, 2) for z in (q, k, v))
            att = ((q @ k.transpose(-2, -1)) * 0.25).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return self.head(x.mean(1))

    model = Block()
    opt = m.optim.AdamW(model.parameters(), lr=1e-3)
    return _step(model, _x(m, (4, 32, 64)), _labels(m, 4, 10), F.cross_entropy, opt)


def causal_attention(m):
    nn, F = m.nn, m.nn.functional

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
            self.o = nn.Linear(32, 4)

        def forward(self, x):
            t = x.shape[1]
            att = self.q(x) @ self.k(x).transpose(1, 2) / 32**0.5
            att = att.masked_fill(m.ones(t, t).tril() == 0, float("-inf")).softmax(-1)
            return self.o((att @ self.v(x))[:, -1])

    model = Attn()
    opt = m.optim.AdamW(model.parameters(), lr=1e-3)
    return _step(model, _x(m, (8, 16, 32)), _labels(m, 8, 4), F.cross_entropy, opt)


def residual_mlp_shared_layers(m):
    nn = m.nn

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.n = nn.Linear(128, 128), nn.Linear(128, 128), nn.LayerNorm(128)

        def forward(self, x):
            x = x + self.b(m.relu(self.a(self.n(x))))
            return x + self.b(self.a(x).tanh())  # a and b used twice: gradients accumulate

    model = Res()
    opt = m.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _step(model, _x(m, (64, 128)), _x(m, (64, 128), 1), nn.functional.mse_loss, opt)


def gated_chunk(m):
    nn = m.nn

    class Glu(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.out = nn.Linear(64, 256), nn.Linear(128, 10)

        def forward(self, x):
            a, b = self.lin(x).chunk(2, -1)
            return self.out((a * b.sigmoid()).view(-1, 128))

    model = Glu()
    opt = m.optim.Adam(model.parameters(), lr=1e-3)
    return _step(model, _x(m, (32, 64)), _labels(m, 32, 10), nn.functional.cross_entropy, opt)


def embedding_norm_permute(m):
    nn = m.nn

    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.n, self.o = nn.Embedding(500, 32), nn.LayerNorm(32), nn.Linear(32, 5)

        def forward(self, t):
            return self.o(self.n(self.e(t)).permute(1, 0, 2).mean(0))

    model = Emb()
    opt = m.optim.Adam(model.parameters(), lr=1e-3)
    tokens = _labels(m, 16 * 12, 500).reshape(16, 12)
    return _step(model, tokens, _labels(m, 16, 5, 2), nn.functional.cross_entropy, opt)


def mlp_log_softmax_nll(m):
    nn = m.nn
    model = nn.Sequential(
        nn.Linear(100, 200),
        nn.ReLU(),
        nn.Dropout(0.0),
        nn.Linear(200, 10),
        nn.LogSoftmax(dim=1),
    )
    opt = m.optim.SGD(model.parameters(), lr=0.1)
    return _step(model, _x(m, (50, 100)), _labels(m, 50, 10), nn.functional.nll_loss, opt)


def tied_embedding(m):
    nn = m.nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.h = nn.Embedding(100, 32), nn.Linear(32, 32)

        def forward(self, t):
            return self.h(self.emb(t)).tanh() @ self.emb.weight.t()

    model = Tied()
    opt = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return _step(
        model, _labels(m, 40, 100), _labels(m, 40, 100, 3), nn.functional.cross_entropy, opt
    )


def unbind_heads(m):
    nn = m.nn

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.o = nn.Linear(48, 48), nn.Linear(16, 3)

        def forward(self, x):
            a, b, c = self.lin(x).reshape(x.shape[0], 3, 16).unbind(1)
            return self.o(a * b + c)

    model = Heads()
    opt = m.optim.SGD(model.parameters(), lr=0.1)
    return _step(model, _x(m, (64, 48)), _labels(m, 64, 3), nn.functional.cross_entropy, opt)


def clamp_pow_rms(m):
    nn = m.nn

    class Rms(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x):
            h = self.lin(x).clamp(-1, 1)
            return (h**2).mean(1, keepdim=True).sqrt() * h

    model = Rms()
    opt = m.optim.Adam(model.parameters(), lr=1e-3)
    return _step(model, _x(m, (32, 64)), _x(m, (32, 64), 1), nn.functional.mse_loss, opt)


def inplace_relu_residual(m):
    nn, F = m.nn, m.nn.functional

    class Res(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.o = nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 5)

        def forward(self, x):
            h = self.b(F.relu(self.a(x), inplace=True))
            h += x
            return self.o(F.relu_(h))

    model = Res()
    opt = m.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    return _step(model, _x(m, (32, 64)), _labels(m, 32, 5), F.cross_entropy, opt)


def scale_shift_log_softmax_by_hand(m):
    nn, F = m.nn, m.nn.functional

    class ScaleShift(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)
            self.scale, self.shift = nn.Parameter(m.ones(1, 16)), nn.Parameter(m.zeros(16))

        def forward(self, x):
            h = self.lin(x) * self.scale.expand(x.shape[0], 16) + self.shift
            return (h.exp() / h.exp().sum(1, keepdim=True)).log()

    model = ScaleShift()
    opt = m.optim.SGD(model.parameters(), lr=0.1)
    return _step(model, _x(m, (24, 16)), _labels(m, 24, 16), F.nll_loss, opt)


def clipped_adam(m):
    nn, F = m.nn, m.nn.functional
    model = nn.Sequential(nn.Linear(50, 50), nn.Tanh(), nn.Linear(50, 4))
    opt = m.optim.Adam(model.parameters(), lr=1e-3)
    x, t = _x(m, (20, 50)), _labels(m, 20, 4)

    def region():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), t).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    region()
    return region


PROGRAMS = {
    f.__name__: f
    for f in (
        attention_block,
        causal_attention,
        residual_mlp_shared_layers,
        gated_chunk,
        embedding_norm_permute,
        mlp_log_softmax_nll,
        tied_embedding,
        unbind_heads,
        clamp_pow_rms,
        inplace_relu_residual,
        scale_shift_log_softmax_by_hand,
        clipped_adam,
    )
}


@pytest.mark.torch
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_training_step_matches_pytorch_profiler(name, torch):
    torch.manual_seed(0)
    want = torch_region(PROGRAMS[name](torch))
    got = engine_region(PROGRAMS[name](engine))
    assert abs(got[0] - want[0]) <= SLACK, f"peak: engine {got[0]}, torch {want[0]}"
    assert abs(got[1] - want[1]) <= SLACK, f"live at end: engine {got[1]}, torch {want[1]}"


@pytest.mark.torch
def test_shared_layer_gradients_match_pytorch(torch):
    torch.manual_seed(0)
    t_model = torch.nn.Linear(16, 16)
    e_model = engine.nn.Linear(16, 16)
    e_model.load_state_dict({k: v.detach().numpy() for k, v in t_model.state_dict().items()})
    for m, model in ((torch, t_model), (engine, e_model)):
        x = _x(m, (8, 16))
        y = model(m.relu(model(x)))  # weight and bias used twice
        (y * y).sum().backward()
    for name in ("weight", "bias"):
        got = getattr(e_model, name).grad.numpy()
        want = getattr(t_model, name).grad.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


# ---------------------------------------------------------------------------------------------
# known differences: scratch torch's CPU kernels allocate and its CUDA kernels do not
# ---------------------------------------------------------------------------------------------
def _norm_program(m, kind):
    shape = (8, 16, 16, 16) if kind == "batch" else (64, 256)
    x = _x(m, shape).requires_grad_(True)
    norm = m.nn.BatchNorm2d(16) if kind == "batch" else m.nn.LayerNorm(256)
    w = _x(m, shape, 1)

    def region():
        (norm(x) * w).sum().backward()

    return region


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_batchnorm_backward_peak_by_hand(device):
    # the incoming gradient (A), grad_input (A), grad_weight and grad_bias, the saved mean and
    # invstd (64 bytes each), the 4-byte root and its 4-byte seed (held until backward returns);
    # on cpu torch's batch_norm_backward_cpu_template also makes grad_input twice (the first
    # freed as the second replaces it): a third A at the peak. meta plans a GPU run: cudnn's one.
    from engine.allocator.tracked import get_allocator
    from tests.engine.test_autograd_memory_parity import Region

    a = 8 * 16 * 16 * 16 * 4
    shape = (8, 16, 16, 16)
    x = engine.randn(*shape, device=device, requires_grad=True)
    norm = engine.nn.BatchNorm2d(16, device=device)
    w = engine.randn(*shape, device=device)
    region = Region()
    with get_allocator(device).observing(region):
        (norm(x) * w).sum().backward()
    assert region.peak == (3 if device == "cpu" else 2) * a + 4 * 64 + 4 + 4
    assert region.total == a + 2 * 64  # x.grad, weight.grad, bias.grad


@pytest.mark.torch
def test_cpu_kernel_quirks(torch):
    # torch's CPU kernels allocate what their CUDA kernels do not: BatchNorm's backward a
    # second input-sized grad_input buffer, LayerNorm's backward per-thread partial sums of
    # dgamma and dbeta (2 x threads x D floats). The engine makes both on cpu (and neither on
    # meta, which plans GPU runs): equal to torch's profiler.
    for kind in ("batch", "layer"):
        t_peak, t_live = torch_region(_norm_program(torch, kind))
        e_peak, e_live = engine_region(_norm_program(engine, kind))
        assert abs(t_peak - e_peak) <= SLACK and t_live == e_live, kind
