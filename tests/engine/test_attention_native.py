"""The fused attention's compiled float32 forward and backward (engine._native's
attention_forward_f32 / attention_backward_f32): the same bits as the numpy path, its memory,
and the cases it leaves to the numpy path."""

import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine import kernels
from engine.ops import attention as A

pytestmark = pytest.mark.skipif(
    kernels.native is None or not hasattr(kernels.native, "attention_forward_f32"),
    reason="engine._native not built",
)


def _make(shape_q, shape_k, dv=None, packed=False, dtype=np.float32, seed=0):
    """q, k, v (leaves and the views attention takes): packed = MultiheadAttention's layout,
    [B, H, L, E] views of one [L, B, 3, H, E] block."""
    rng = np.random.default_rng(seed)
    if packed:
        B, H, L, E = shape_q
        base = engine.tensor(rng.standard_normal((L, B, 3, H, E)).astype(dtype), requires_grad=True)
        views = [base[:, :, i].permute(1, 2, 0, 3) for i in range(3)]
        return [base], views
    dv = dv or shape_k[-1]
    leaves = [
        engine.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True)
        for s in (shape_q, shape_k, shape_k[:-1] + (dv,))
    ]
    return leaves, leaves


# (torch's cpu flash kernel, which the engine's fused attention is, takes 4-D inputs with one
# head dim; other inputs take the math path)
CASES = {
    "basic": dict(shape_q=(2, 3, 40, 16), shape_k=(2, 3, 40, 16)),
    "packed": dict(shape_q=(3, 4, 33, 8), shape_k=None, packed=True),
    "causal": dict(shape_q=(2, 2, 37, 16), shape_k=(2, 2, 37, 16), causal=True),
    "causal-wide": dict(shape_q=(2, 2, 20, 8), shape_k=(2, 2, 45, 8), causal=True),
    "cross": dict(shape_q=(2, 3, 17, 12), shape_k=(2, 3, 29, 12)),
    "long": dict(shape_q=(1, 2, 300, 32), shape_k=(1, 2, 300, 32)),
    "scale": dict(shape_q=(2, 2, 16, 8), shape_k=(2, 2, 16, 8), scale=0.3),
}


def _run(case, g_layout="contiguous", grads=(True, True, True)):
    spec = dict(CASES[case])
    causal = spec.pop("causal", False)
    scale = spec.pop("scale", None)
    packed = spec.pop("packed", False)
    shape_q = spec.pop("shape_q")
    shape_k = spec.pop("shape_k") or shape_q
    leaves, (q, k, v) = _make(shape_q, shape_k, packed=packed, **spec)
    if not packed:
        for t, need in zip(leaves, grads, strict=True):
            t.requires_grad_(need)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    gn = np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape)
    if g_layout == "transposed":  # a gradient laid out otherwise
        g = engine.tensor(np.ascontiguousarray(np.swapaxes(gn, -1, -2))).transpose(-1, -2)
    elif g_layout == "blhd":  # rows unit-stride at a stride of H*E (MultiheadAttention's)
        g = engine.tensor(np.ascontiguousarray(gn.transpose(0, 2, 1, 3))).transpose(1, 2)
    else:
        g = engine.tensor(gn)
    y.backward(g)
    return [y.detach().numpy()] + [t.grad.numpy() for t in leaves if t.grad is not None]


@pytest.fixture
def paths(monkeypatch):
    """Count the compiled calls; `use(False)` sends the attention down the numpy path."""
    calls = {"forward": 0, "backward": 0}
    real_f, real_b = A._native_forward, A._native_backward

    def counted_f(*a):
        done = real_f(*a)
        calls["forward"] += done
        return done

    def counted_b(*a):
        done = real_b(*a)
        calls["backward"] += done
        return done

    def use(native: bool):
        monkeypatch.setattr(A, "_native_forward", counted_f if native else lambda *a: False)
        monkeypatch.setattr(A, "_native_backward", counted_b if native else lambda *a: False)

    use.calls = calls
    return use


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_the_compiled_path_gives_the_numpy_paths_bits(paths, case, threads):
    before = kernels.get_num_threads()
    engine.set_num_threads(threads)
    try:
        paths(False)
        want = _run(case)
        paths(True)
        got = _run(case)
    finally:
        engine.set_num_threads(before)
    assert paths.calls == {"forward": 1, "backward": 1}
    assert len(got) == len(want) == (2 if case == "packed" else 4)
    for a, b in zip(got, want, strict=True):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("grads", [(True, False, False), (False, True, True), (False, False, True)])
@pytest.mark.parametrize("layout", ["transposed", "blhd"])
def test_some_gradients_and_a_strided_g(paths, grads, layout):
    paths(False)
    want = _run("cross", layout, grads)
    paths(True)
    got = _run("cross", layout, grads)
    assert paths.calls["backward"] == 1
    for a, b in zip(got, want, strict=True):
        assert a.tobytes() == b.tobytes()


def test_left_to_the_numpy_path(paths):
    paths(True)
    # float64, a mask, a dim of 1 (numpy's gemv there)
    _run_with = dict(shape_q=(2, 2, 8, 4), shape_k=(2, 2, 8, 4))
    leaves, (q, k, v) = _make(dtype=np.float64, **_run_with)
    F.scaled_dot_product_attention(q, k, v).sum().backward()
    leaves, (q, k, v) = _make(**_run_with)
    mask = engine.tensor(np.tri(8, dtype=bool))
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    leaves, (q, k, v) = _make((2, 2, 1, 4), (2, 2, 8, 4))
    F.scaled_dot_product_attention(q, k, v).sum().backward()
    assert paths.calls == {"forward": 0, "backward": 0}


def test_memory_is_the_numpy_paths(paths):
    def peak():
        engine.memory.reset_peak_memory_stats()
        start = engine.memory.memory_allocated()
        _run("packed")
        return (
            engine.memory.max_memory_allocated() - start,
            engine.memory.memory_allocated() - start,
        )

    paths(False)
    want = peak()
    paths(True)
    assert peak() == want


def test_values_match_torch():
    torch = pytest.importorskip("torch")
    leaves, (q, k, v) = _make((2, 3, 40, 16), (2, 3, 40, 16))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    y.sum().backward()
    tl = [torch.tensor(t.detach().numpy(), requires_grad=True) for t in leaves]
    yt = torch.nn.functional.scaled_dot_product_attention(*tl, is_causal=True)
    yt.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(leaves, tl, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_the_entries_check_their_arguments():
    native = kernels.native
    m = np.zeros(4, np.float32)
    with pytest.raises(ValueError):  # a row stride below the row's length
        native.attention_forward_f32(0, 0, 0, 0, np.zeros((4, 1), np.int64), m, m,
                                     (4, 4, 8, 8, 4, 8, 8, 8), 1.0, False)  # fmt: skip
    with pytest.raises(ValueError):  # offsets not [4, slices]
        native.attention_forward_f32(0, 0, 0, 0, np.zeros(3, np.int64), m, m,
                                     (4, 4, 8, 8, 8, 8, 8, 8), 1.0, False)  # fmt: skip
    with pytest.raises(ValueError):  # m and t: slices * L float32
        native.attention_forward_f32(0, 0, 0, 0, np.zeros((4, 1), np.int64), m[:3], m,
                                     (4, 4, 8, 8, 8, 8, 8, 8), 1.0, False)  # fmt: skip
    with pytest.raises(ValueError):
        native.attention_backward_f32((0,) * 8, np.zeros((8, 1), np.int64), m, m[:2],
                                      (4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8), 1.0, False)  # fmt: skip
