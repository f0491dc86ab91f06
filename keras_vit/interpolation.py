"""Separable grid interpolation as (n_out, n_in) weight matrices: NumPy (float64, at load) and
`keras.ops` (float32, inside a model's graph).

`resampling_matrix` gives the weights in NumPy, for resampling a checkpoint's position
embeddings once (`keras_vit.resample_position_embeddings`); `interpolation_matrix` gives the
same weights with `keras.ops`, whose output size may be symbolic: a model that takes images of
any size resamples its position embeddings per batch with two small matmuls (`resample_grid`).

The methods, each named for the code whose numbers it reproduces:

- "official": samples at i * (n_in - 1) / (n_out - 1), corners aligned, linearly: the official
  fine-tuning code's `scipy.ndimage.zoom(order=1)`.
- "bilinear": half-pixel centres, (i + 0.5) * n_in / n_out - 0.5, clamped to the grid, as
  `tf.image.resize(method="bilinear")`.
- "bicubic": half-pixel centres, Keys' cubic kernel with a = -0.5, taps outside the grid dropped
  and the rest renormalized, as `tf.image.resize(method="bicubic")` and `jax.image.resize`.
- "torch_bicubic_antialias": PyTorch's `F.interpolate(mode="bicubic", antialias=True,
  align_corners=False)` at a given output size, i.e. timm's `resample_abs_pos_embed`: Keys'
  kernel with a = -0.5, stretched by n_in / n_out where the grid shrinks (so every input row
  under an output row's footprint counts), taps outside the grid dropped and the rest
  renormalized. Equal to "bicubic" where the grid grows.
- "torch_bicubic": PyTorch's plain `F.interpolate(mode="bicubic", align_corners=False)` at a given
  output size, i.e. transformers' `interpolate_pos_encoding` (ViT, DeiT, CLIP, SigLIP): Keys'
  kernel with a = -0.75, four taps, taps past the edge clamped to the edge row (the edge row
  takes their weight), no renormalization.

Every method gives the identity at n_out == n_in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from keras import ops

if TYPE_CHECKING:
    from keras_vit._common import Tensor

METHODS = ("official", "bilinear", "bicubic", "torch_bicubic_antialias", "torch_bicubic")

# Keys' cubic-convolution parameter per cubic method: -0.5 in TensorFlow, JAX and PyTorch's
# antialiased path; -0.75 in PyTorch's plain bicubic (`get_cubic_upsample_coefficients`).
_CUBIC_A = {"bicubic": -0.5, "torch_bicubic_antialias": -0.5, "torch_bicubic": -0.75}


def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"Unknown resampling method {method!r}; use one of {METHODS}.")


def _check_sizes(n_in, n_out):
    for what, n in (("n_in", n_in), ("n_out", n_out)):
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"{what} must be a positive int, got {n!r}.")
    return int(n_in), int(n_out)


# -- NumPy, float64 -------------------------------------------------------------------------------

def _cubic_np(t, a):
    """Keys' cubic convolution kernel, zero from |t| = 2 on."""
    t = np.abs(t)
    return np.where(
        t <= 1,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0),
    )


def resampling_matrix(n_in: int, n_out: int, method: str = "official") -> np.ndarray:
    """(n_out, n_in) float64 NumPy weights that resample a length-`n_in` axis to `n_out`.

    Rows are output positions; `matrix @ values` resamples `values` (n_in, ...) along its
    first axis. See the module's docstring for the methods.

    Args:
        n_in: the stored length.
        n_out: the new length.
        method: one of `METHODS`.

    Example:
    >>> resampling_matrix(4, 2, "torch_bicubic_antialias").round(4).tolist()  # 4 -> 2: all 4 rows count
    [[0.4587, 0.4587, 0.1198, -0.0372], [-0.0372, 0.1198, 0.4587, 0.4587]]
    >>> resampling_matrix(4, 2, "bicubic").round(4).tolist()  # the kernel not widened: 3 rows count
    [[0.5294, 0.5294, -0.0588, 0.0], [0.0, -0.0588, 0.5294, 0.5294]]
    """
    _check_method(method)
    n_in, n_out = _check_sizes(n_in, n_out)
    rows = np.arange(n_out)
    weights = np.zeros((n_out, n_in))
    if method == "official":
        step = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        src = rows * step
        lo = np.clip(np.floor(src).astype(int), 0, n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        np.add.at(weights, (rows, lo), 1.0 - (src - lo))
        np.add.at(weights, (rows, hi), src - lo)
        return weights
    src = (rows + 0.5) * (n_in / n_out) - 0.5  # half-pixel centres
    if method == "bilinear":
        src = np.clip(src, 0, n_in - 1)
        lo = np.floor(src).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        np.add.at(weights, (rows, lo), 1.0 - (src - lo))
        np.add.at(weights, (rows, hi), src - lo)
        return weights
    a = _CUBIC_A[method]
    if method == "torch_bicubic_antialias":
        # aten's _compute_weights_aa: every input row within the (stretched) support, weight
        # filter((j + 0.5 - centre) / stretch), normalized by the row's sum.
        stretch = max(n_in / n_out, 1.0)
        weights = _cubic_np((np.arange(n_in)[None, :] - src[:, None]) / stretch, a)
        return weights / weights.sum(axis=1, keepdims=True)
    base = np.floor(src).astype(int)
    for offset in (-1, 0, 1, 2):
        idx = base + offset
        if method == "torch_bicubic":  # aten's upsample_get_value_bounded: the edge row takes the tap
            np.add.at(weights, (rows, np.clip(idx, 0, n_in - 1)), _cubic_np(src - idx, a))
        else:
            inside = (idx >= 0) & (idx < n_in)
            np.add.at(weights, (rows[inside], idx[inside]), _cubic_np(src - idx, a)[inside])
    if method == "bicubic":
        weights /= weights.sum(axis=1, keepdims=True)
    return weights


def resample_grid_numpy(grid: np.ndarray, new_grid: Sequence[int], method: str = "official") -> np.ndarray:
    """Resamples a (gh, gw, ...) array to (new_gh, new_gw, ...), rows then columns, in float64."""
    rows = resampling_matrix(grid.shape[0], new_grid[0], method)
    cols = resampling_matrix(grid.shape[1], new_grid[1], method)
    out = np.einsum("ih,hw...->iw...", rows, np.asarray(grid, np.float64))
    return np.einsum("jw,iw...->ij...", cols, out)


# -- keras.ops, float32, sizes possibly symbolic ----------------------------------------------------

def _taps(index, n_in, weight):
    """(n_out, n_in) matrix with `weight[i]` at column `index[i]` of row i."""
    return ops.one_hot(ops.cast(index, "int32"), n_in, dtype="float32") * weight[:, None]


def _cubic(t, a=-0.5):
    t = ops.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return ops.where(t <= 1, near, ops.where(t < 2, far, ops.zeros_like(t)))


def interpolation_matrix(n_in: int, n_out: Tensor | int, method: str = "official") -> Tensor:
    """(n_out, n_in) float32 weights that resample a length-`n_in` axis to `n_out`.

    The in-graph twin of `resampling_matrix` (equal to it within float32 rounding).

    Args:
        n_in: the stored length, a Python int.
        n_out: the new length, an int or a scalar tensor (a symbolic image size).
        method: one of `METHODS`.

    Example:
    >>> keras.ops.convert_to_numpy(interpolation_matrix(2, 3)).tolist()  # corners kept
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    """
    _check_method(method)
    n_in = int(n_in)
    if not isinstance(n_out, int):  # a static size stays a Python int: jax's arange under jit needs it concrete
        n_out = ops.cast(n_out, "int32")
    i = ops.arange(n_out, dtype="int32")
    # Sample points as exact fractions num / den of integers, so that the integer part
    # and the fraction come out exact where float32 arithmetic on `src` would lose about
    # 1e-6 on grids of a few dozen patches.
    if method == "official":
        num, den = i * (n_in - 1), ops.maximum(n_out - 1, 1)
    else:
        num, den = (2 * i + 1) * n_in - n_out, 2 * n_out
    den = den + ops.zeros_like(num)
    if method in ("official", "bilinear"):
        num = ops.clip(num, 0, (n_in - 1) * den)
        lo = ops.floor_divide(num, den)
        frac = ops.cast(num - lo * den, "float32") / ops.cast(den, "float32")
        hi = ops.minimum(lo + 1, n_in - 1)
        return _taps(lo, n_in, 1.0 - frac) + _taps(hi, n_in, frac)
    a = _CUBIC_A[method]
    if method == "torch_bicubic_antialias":
        # Every (output, input) pair at once: the distance (src_i - j) / stretch is
        # (n_in (2i + 1) - n_out (2j + 1)) / (2 max(n_in, n_out)), exact in integers.
        j = ops.arange(n_in, dtype="int32")
        dist = num[:, None] - (2 * n_out) * j[None, :]
        scale = 2 * ops.maximum(n_out, n_in)
        weights = _cubic(ops.cast(dist, "float32") / ops.cast(scale, "float32"), a)
        return weights / ops.sum(weights, axis=1, keepdims=True)
    base = ops.floor_divide(num, den)
    weights = 0.0
    for offset in (-1, 0, 1, 2):
        idx = base + offset
        t = ops.cast(num - idx * den, "float32") / ops.cast(den, "float32")
        if method == "torch_bicubic":  # past the edge: the edge row takes the tap's weight
            weights = weights + _taps(ops.clip(idx, 0, n_in - 1), n_in, _cubic(t, a))
        else:
            inside = ops.cast(ops.logical_and(idx >= 0, idx <= n_in - 1), "float32")
            weights = weights + _taps(ops.clip(idx, 0, n_in - 1), n_in, _cubic(t, a) * inside)
    if method == "torch_bicubic":
        return weights
    return weights / ops.sum(weights, axis=1, keepdims=True)


def resample_grid(grid: Tensor, new_grid: Sequence[Tensor | int], method: str = "official") -> Tensor:
    """Resamples a (gh, gw, D) tensor to (new_gh, new_gw, D), rows then columns, in float32.

    `grid`'s first two sizes must be static; `new_grid`'s may be symbolic.
    """
    gh, gw = int(grid.shape[0]), int(grid.shape[1])
    rows = interpolation_matrix(gh, new_grid[0], method)
    cols = interpolation_matrix(gw, new_grid[1], method)
    grid = ops.cast(grid, "float32")
    out = ops.einsum("ih,hwd->iwd", rows, grid)
    return ops.einsum("jw,iwd->ijd", cols, out)
