"""Separable grid interpolation written with `keras.ops`, for use inside a model's graph.

The same three methods as `keras_vit.resample_position_embeddings` (NumPy, float64, at
checkpoint time), as (n_out, n_in) weight matrices whose sizes may be symbolic: a model
that takes images of any size resamples its position embeddings per batch with two small
matmuls. "official" samples at i * (n_in - 1) / (n_out - 1) (corners aligned, as
`scipy.ndimage.zoom(order=1)` in the official fine-tuning code); "bilinear" and "bicubic"
at half-pixel centres, as `tf.image.resize` (bicubic: Keys' kernel, a = -0.5, taps outside
the grid dropped and the rest renormalized).
"""

from keras import ops

METHODS = ("official", "bilinear", "bicubic")


def _taps(index, n_in, weight):
    """(n_out, n_in) matrix with `weight[i]` at column `index[i]` of row i."""
    return ops.one_hot(ops.cast(index, "int32"), n_in, dtype="float32") * weight[:, None]


def _cubic(t, a=-0.5):
    t = ops.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return ops.where(t <= 1, near, ops.where(t < 2, far, ops.zeros_like(t)))


def interpolation_matrix(n_in, n_out, method="official"):
    """(n_out, n_in) float32 weights that resample a length-`n_in` axis to `n_out`.

    Args:
        n_in: the stored length, a Python int.
        n_out: the new length, an int or a scalar tensor (a symbolic image size).
        method: "official", "bilinear" or "bicubic".

    Example:
    >>> keras.ops.convert_to_numpy(interpolation_matrix(2, 3)).tolist()  # corners kept
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    """
    if method not in METHODS:
        raise ValueError(f"Unknown resampling method {method!r}; use one of {METHODS}.")
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
    base = ops.floor_divide(num, den)
    weights = 0.0
    for offset in (-1, 0, 1, 2):
        idx = base + offset
        t = ops.cast(num - idx * den, "float32") / ops.cast(den, "float32")
        inside = ops.cast(ops.logical_and(idx >= 0, idx <= n_in - 1), "float32")
        weights = weights + _taps(ops.clip(idx, 0, n_in - 1), n_in, _cubic(t) * inside)
    return weights / ops.sum(weights, axis=1, keepdims=True)


def resample_grid(grid, new_grid, method="official"):
    """Resamples a (gh, gw, D) tensor to (new_gh, new_gw, D), rows then columns, in float32.

    `grid`'s first two sizes must be static; `new_grid`'s may be symbolic.
    """
    gh, gw = int(grid.shape[0]), int(grid.shape[1])
    rows = interpolation_matrix(gh, new_grid[0], method)
    cols = interpolation_matrix(gw, new_grid[1], method)
    grid = ops.cast(grid, "float32")
    out = ops.einsum("ih,hwd->iwd", rows, grid)
    return ops.einsum("jw,iwd->ijd", cols, out)
