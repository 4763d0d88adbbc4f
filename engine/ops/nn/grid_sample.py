"""F.affine_grid and F.grid_sample: torch's affine_grid_generator and grid_sampler_2d/3d.

affine_grid_generator is one node (AffineGridGeneratorBackward0): forward makes the base grid
[N, *spatial, k + 1] (one torch linspace per spatial dim, scaled by (n - 1) / n when the corners
are not aligned, copied in), multiplies it by theta^T (bmm) and frees it; backward makes the
base grid again and returns (base^T @ grad)^T, a transposed view (so AccumulateGrad copies it,
as torch's).

grid_sampler_2d / grid_sampler_3d are one node each (GridSampler2DBackward0 /
GridSampler3DBackward0) that keep input and grid; forward makes the output; backward makes
grad_input (zeros, only when the input needs a gradient: torch's output_mask) and then
grad_grid (always). The sampling is vectorised over blocks of output points whose [C, block]
temporaries stay within kernels.SCRATCH_ELEMS elements (torch's kernel keeps them in registers:
not charged); input, grid and gradient are read in place, whatever their strides (torch's CPU
kernel copies none of them).
"""

from __future__ import annotations

import itertools

from engine import kernels
from engine.autograd.function import Function
from engine.autograd.grad_mode import no_grad
from engine.ops.nn.common import _live

_MODES = ("bilinear", "nearest", "bicubic")
_PADDINGS = ("zeros", "border", "reflection")


# --- affine_grid ------------------------------------------------------------------------------


def _linspace_from_neg_one(theta, n, align_corners):
    """ATen's linspace_from_neg_one: linspace(-1, 1, n), scaled by (n - 1) / n unless the
    corners are aligned (the same temporaries, freed in C++'s order)."""
    from engine.creation import linspace

    if n <= 1:
        return kernels.zeros((), theta._dtype, theta._device)
    rng = linspace(-1, 1, n, dtype=theta.dtype, device=theta.device)
    if align_corners:
        return rng
    scaled = rng * (n - 1)
    result = scaled / n
    del rng  # range = range * (n - 1) / n: the old range goes first, the temporary after
    del scaled
    return result


def _base_grid(theta, spatial, align_corners):
    """[N, *spatial, k + 1]: x, y (, z) in [-1, 1] and a column of ones (ATen's
    make_base_grid_4D / 5D)."""
    n, k = theta.shape[0], len(spatial)
    base = kernels.empty((n, *spatial, k + 1), theta._dtype, theta._device)
    live = _live(theta._device)
    with no_grad():
        for d in range(k):  # x runs along the last spatial dim, then y, then z
            size = spatial[k - 1 - d]
            r = _linspace_from_neg_one(theta, size, align_corners)
            if live:
                shape = [1] * k
                if r.ndim:
                    shape[k - 1 - d] = size
                base._data[..., d] = r._data.reshape(shape)
            del r
        if live:
            base._data[..., k] = 1
    return base


class AffineGridGenerator(Function):
    retain_inputs = ()

    def forward(self, theta, out=None, size=(), align_corners=False):
        n, spatial = size[0], tuple(size[2:])
        k = len(spatial)
        if theta.shape[0] != n:  # torch's bmm refuses it
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: [{n}, {k + 1}] "
                f"but got: [{theta.shape[0]}, {theta.shape[2]}]."
            )
        self.size, self.align_corners = tuple(size), align_corners
        base = _base_grid(theta, spatial, align_corners)
        grid = kernels.empty((n, *spatial, k), theta._dtype, theta._device)
        if _live(theta._device):
            xp = kernels.xp_of(theta)
            flat = base._data.reshape(n, -1, k + 1)
            xp.matmul(flat, theta._data.transpose(0, 2, 1), out=grid._data.reshape(n, -1, k))
        del base
        return grid

    def backward(self, g):
        n, spatial = self.size[0], self.size[2:]
        k = len(spatial)
        with no_grad():
            base = _base_grid(g, spatial, self.align_corners)
            g_flat = g.reshape(n, -1, k)  # (a copy when g cannot be viewed, as torch's reshape)
            gt = kernels.empty((n, k + 1, k), g._dtype, g._device)
            if _live(g._device):
                xp = kernels.xp_of(g)
                xp.matmul(
                    base._data.reshape(n, -1, k + 1).transpose(0, 2, 1), g_flat._data, out=gt._data
                )
            del base, g_flat
            return (gt.transpose(1, 2),)

    def name(self):
        return "AffineGridGeneratorBackward0"


def affine_grid(theta, size, align_corners=None):
    """The sampling grid [N, H, W, 2] (or [N, D, H, W, 3]) of a batch of affine matrices theta
    [N, 2, 3] ([N, 3, 4]) for an output of `size` (torch's; align_corners defaults to False)."""
    if align_corners is None:
        align_corners = False
    if not theta.dtype.is_floating_point:
        raise ValueError(
            f"Expected theta to have floating point type, but got torch.{theta.dtype.name}"
        )
    given, size = size, tuple(int(s) for s in size)  # (torch's words show the size as given)
    if len(size) == 4:
        if theta.ndim != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(
                f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {given}. "
                f"Got torch.Size({list(theta.shape)})."
            )
        spatial = size[-2:]
    elif len(size) == 5:
        if theta.ndim != 3 or theta.shape[-2] != 3 or theta.shape[-1] != 4:
            raise ValueError(
                f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {given}. "
                f"Got torch.Size({list(theta.shape)})."
            )
        spatial = size[-3:]
    else:
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {given}."
        )
    if not (align_corners and min(spatial) == 1) and min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {given}")
    return AffineGridGenerator.apply(
        theta, op="affine_grid_generator", size=size, align_corners=bool(align_corners)
    )


# --- grid_sample ------------------------------------------------------------------------------


def _source_index(xp, coord, size, padding, align_corners):
    """The grid's normalised coordinate in input pixels, after padding's clipping or
    reflection, and its derivative (ATen's grid_sampler_compute_source_index_set_grad)."""
    if align_corners:
        scale = (size - 1) / 2
        ix = (coord + 1) * scale
    else:
        scale = size / 2
        ix = (coord + 1) * scale - 0.5
    grad = xp.full(ix.shape, scale, dtype=ix.dtype)
    if padding == "border":
        ix, g = _clip(xp, ix, size)
        grad *= g
    elif padding == "reflection":
        if align_corners:
            ix, g = _reflect(xp, ix, 0, 2 * (size - 1))
        else:
            ix, g = _reflect(xp, ix, -1, 2 * size - 1)
        grad *= g
        ix, g = _clip(xp, ix, size)
        grad *= g
    return ix, grad


def _clip(xp, ix, size):
    g = ((ix > 0) & (ix < size - 1)).astype(ix.dtype)
    return xp.clip(ix, 0, size - 1), g


def _reflect(xp, ix, twice_low, twice_high):
    if twice_low == twice_high:
        return xp.zeros_like(ix), xp.zeros_like(ix)
    lo, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = ix - lo
    sign = xp.where(shifted < 0, -1.0, 1.0).astype(ix.dtype)
    shifted = xp.abs(shifted)
    extra = xp.fmod(shifted, span)
    flips = xp.floor(shifted / span)
    even = (flips % 2) == 0
    return xp.where(even, extra + lo, span - extra + lo), xp.where(even, sign, -sign)


def _cubic_coefficients(xp, t):
    a = -0.75
    x1 = t + 1
    x2 = t
    x3 = 1 - t
    x4 = 2 - t
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731
    return [far(x1), near(x2), near(x3), far(x4)]


def _cubic_derivatives(xp, t):
    a = -0.75
    x1 = t + 1
    x2 = t
    x3 = 1 - t
    x4 = 2 - t
    dfar = lambda x: (3 * a * x - 10 * a) * x + 8 * a  # noqa: E731
    dnear = lambda x: (3 * (a + 2) * x - 2 * (a + 3)) * x  # noqa: E731
    return [dfar(x1), dnear(x2), -dnear(x3), -dfar(x4)]


class _Taps:
    """For each sample point: the input pixels it reads (flat index per tap, in bounds mask)
    and their weights, with each weight's derivative along each coordinate."""

    def __init__(self, xp, grid, spatial, mode, padding, align_corners):
        k = len(spatial)
        # grid[..., 0] is x (the last spatial dim), grid[..., 1] y, grid[..., 2] z
        self.coords, self.mults = [], []
        for d in range(k):
            size = spatial[k - 1 - d]
            if mode == "bicubic":  # the taps are padded one by one, below
                if align_corners:
                    scale = (size - 1) / 2
                    ix = (grid[..., d] + 1) * scale
                else:
                    scale = size / 2
                    ix = (grid[..., d] + 1) * scale - 0.5
                mult = scale
            else:
                ix, mult = _source_index(xp, grid[..., d], size, padding, align_corners)
            self.coords.append(ix)
            self.mults.append(mult)
        self.taps = []  # (flat index, in-bounds mask, weight, [d weight / d coord])
        dt = grid.dtype
        if mode == "nearest":
            pos = [xp.rint(c) for c in self.coords]
            self.taps.append(self._tap(xp, pos, spatial, xp.ones_like(pos[0]), None))
        elif mode == "bilinear":
            lo = [xp.floor(c) for c in self.coords]
            frac = [c - f for c, f in zip(self.coords, lo, strict=True)]
            for bits in itertools.product((0, 1), repeat=k):
                ws = [fr if b else 1 - fr for fr, b in zip(frac, bits, strict=True)]
                w = ws[0]
                for extra in ws[1:]:
                    w = w * extra
                dws = []
                for d in range(k):
                    dw = xp.full(w.shape, 1.0 if bits[d] else -1.0, dtype=dt)
                    for e in range(k):
                        if e != d:
                            dw = dw * ws[e]
                    dws.append(dw)
                pos = [f + b for f, b in zip(lo, bits, strict=True)]
                self.taps.append(self._tap(xp, pos, spatial, w, dws))
        else:  # bicubic, 2-D: 4 x 4 taps, each padded by itself
            lo = [xp.floor(c) for c in self.coords]
            frac = [c - f for c, f in zip(self.coords, lo, strict=True)]
            cx, cy = (_cubic_coefficients(xp, t) for t in frac)
            dx, dy = (_cubic_derivatives(xp, t) for t in frac)
            for j in range(4):
                for i in range(4):
                    pos = []
                    for d, off in ((0, i), (1, j)):
                        p = lo[d] - 1 + off
                        size = spatial[k - 1 - d]
                        if padding == "border":
                            p = _clip(xp, p, size)[0]
                        elif padding == "reflection":
                            twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
                            p = _clip(xp, _reflect(xp, p, *twice)[0], size)[0]
                        pos.append(p)
                    w = cx[i] * cy[j]
                    dws = [dx[i] * cy[j], cx[i] * dy[j]]
                    # ATen rounds the padded tap to the nearest pixel before reading it
                    pos = [xp.rint(p) if padding != "zeros" else p for p in pos]
                    self.taps.append(self._tap(xp, pos, spatial, w, dws))

    @staticmethod
    def _tap(xp, pos, spatial, weight, dws):
        """(the tap's pixel per spatial dim, clipped into the input, in z, y, x order; the
        mask of taps inside it; the weight; its derivatives)."""
        k = len(spatial)
        inside = None
        index = []
        for d in reversed(range(k)):  # z, y, x: the input's spatial dims in order
            size = spatial[k - 1 - d]
            p = pos[d]
            ok = (p >= 0) & (p <= size - 1)
            inside = ok if inside is None else inside & ok
            index.append(xp.clip(p, 0, size - 1).astype(xp.int64))
        return tuple(index), inside, weight, dws


def _chunks(xp, out_spatial, channels):
    """The output points of one sample in blocks whose [C, block] temporaries stay within
    kernels.SCRATCH_ELEMS: the block's index into each output dim."""
    total = 1
    for s in out_spatial:
        total *= s
    step = max(1, kernels.SCRATCH_ELEMS // max(channels, 1))
    for start in range(0, total, step):
        yield xp.unravel_index(xp.arange(start, min(total, start + step)), out_spatial)


class GridSampler(Function):
    retain_inputs = (0, 1)

    def forward(self, x, grid, out=None, mode="bilinear", padding="zeros", align_corners=False):
        self.mode, self.padding, self.align_corners = mode, padding, align_corners
        self.k = x.ndim - 2
        n, c = x.shape[:2]
        out_spatial = tuple(grid.shape[1:-1])
        y = kernels.empty((n, c, *out_spatial), x._dtype, x._device)
        if _live(x._device):
            xp = kernels.xp_of(x)
            spatial = tuple(x.shape[2:])
            for b in range(n):
                xb, gb, yb = x._data[b], grid._data[b], y._data[b]
                for at in _chunks(xp, out_spatial, c):
                    taps = _Taps(xp, gb[at], spatial, mode, padding, align_corners)
                    acc = None
                    for index, inside, w, _ in taps.taps:
                        v = xb[(slice(None), *index)] * (w * inside)
                        acc = v if acc is None else acc + v
                    yb[(slice(None), *at)] = acc
        return y

    def backward(self, g):
        x, grid = self.saved_tensors
        needs_input = self._edges[0] is not None
        # torch's output_mask: grad_input only when the input needs it, grad_grid always
        gx = kernels.zeros(tuple(x.shape), g._dtype, g._device) if needs_input else None
        gg = kernels.empty(tuple(grid.shape), grid._dtype, grid._device)
        if _live(g._device):
            xp = kernels.xp_of(g)
            n, c = x.shape[:2]
            spatial, out_spatial = tuple(x.shape[2:]), tuple(grid.shape[1:-1])
            args = (self.mode, self.padding, self.align_corners)
            for b in range(n):
                xb, gridb, gob, ggb = x._data[b], grid._data[b], g._data[b], gg._data[b]
                for at in _chunks(xp, out_spatial, c):
                    taps = _Taps(xp, gridb[at], spatial, *args)
                    go = gob[(slice(None), *at)]  # [C, block]
                    gcoord = [0.0] * self.k
                    for index, inside, w, dws in taps.taps:
                        where = (slice(None), *index)
                        if needs_input:
                            xp.add.at(gx._data[b], where, go * (w * inside))
                        if dws is not None:
                            gv = (xb[where] * go).sum(0) * inside
                            for d in range(self.k):
                                gcoord[d] = gcoord[d] + gv * dws[d]
                    for d in range(self.k):
                        ggb[(*at, d)] = gcoord[d] * taps.mults[d]
        return (gx, gg)

    def name(self):
        return f"GridSampler{self.k}DBackward0"


def _sizes(t):
    return list(t.shape)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Samples input [N, C, H, W] (or [N, C, D, H, W]) at grid's normalised coordinates
    [N, Ho, Wo, 2] (or [N, Do, Ho, Wo, 3]); modes bilinear, nearest and (4-D) bicubic, padding
    zeros, border or reflection, as torch's."""
    if mode not in _MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDINGS:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    if align_corners is None:
        align_corners = False
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input "
            f"with sizes {_sizes(input)} and grid with sizes {_sizes(grid)}"
        )
    if grid.shape[-1] != input.ndim - 2:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {input.ndim - 2} in last dimension, but "
            f"got grid with sizes {_sizes(grid)}"
        )
    for i in range(2, input.ndim):
        if input.shape[i] <= 0:
            raise RuntimeError(
                "grid_sampler(): expected input to have non-empty spatial dimensions, but input "
                f"has sizes {_sizes(input)} with dimension {i} being empty"
            )
    want = 4 if input.ndim == 4 else 5
    if input.ndim != want or grid.ndim != want:
        raise RuntimeError(
            f"grid_sampler(): expected {want}D input and grid with same number of dimensions, "
            f"but got input with sizes {_sizes(input)} and grid with sizes {_sizes(grid)}"
        )
    if want == 5 and mode == "bicubic":
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if grid._dtype is not input._dtype:
        raise RuntimeError(
            f"expected scalar type {input._dtype.scalar_name} but found {grid._dtype.scalar_name}"
        )
    op = "grid_sampler_2d" if want == 4 else "grid_sampler_3d"
    return GridSampler.apply(
        input, grid, op=op, mode=mode, padding=padding_mode, align_corners=bool(align_corners)
    )
