"""Position embeddings at a new resolution: resampling the grid, and moving whole models.

`copy_weights` copies one keras-vit model into another of the same architecture, resampling
the position embeddings when the grids differ; `with_image_size` builds on it.

"official" reproduces the official fine-tuning code (`vit_jax/checkpoint.py`):
`scipy.ndimage.zoom(grid, (new_h / old_h, new_w / old_w, 1), order=1)`, a bilinear
interpolation whose sample points align the grid's corners. "bilinear" and "bicubic"
sample at half-pixel centres, as `tf.image.resize` does; "torch_bicubic_antialias" is timm's
resampling and "torch_bicubic" transformers' (see `keras_vit.interpolation`, which holds the
weights of every method).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from keras_vit._common import format_keys, refuse_unknown_keywords, to_pair
from keras_vit.interpolation import METHODS, resample_grid_numpy, resampling_matrix

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)


def infer_grid(num_patches, like=None):
    """The (rows, cols) of `num_patches` position embeddings: square, or of the aspect ratio of `like`."""
    side = math.isqrt(num_patches)
    if side * side == num_patches:
        return side, side
    if like is not None:  # same aspect ratio as a given grid
        gh = round(math.sqrt(num_patches * like[0] / like[1]))
        if gh and num_patches % gh == 0 and gh * like[1] == (num_patches // gh) * like[0]:
            return gh, num_patches // gh
    raise ValueError(
        f"Cannot tell the patch grid of {num_patches} position embeddings: it is not square. "
        "Pass old_grid=(rows, cols)."
    )


def stored_grid(model, tokens):
    """The (rows, cols) of a checkpoint's `tokens` position embeddings (prefix tokens included) for
    `model`: square, or of the aspect ratio of the model's own grid; ValueError when neither fits."""
    return infer_grid(tokens - model.num_posemb_prefix_tokens, like=model.patch_encoder.grid_size)


def resample_note(old_grid, new_grid, method):
    """The line a loader's report gives a resampling."""
    return f"position embeddings {old_grid[0]}x{old_grid[1]} -> {new_grid[0]}x{new_grid[1]} ({method})"


@refuse_unknown_keywords
def resample_position_embeddings(posemb: np.ndarray, new_grid: int | Sequence[int], *,
                                 old_grid: Sequence[int] | None = None, num_prefix_tokens: int = 1,
                                 method: str = "official") -> np.ndarray:
    """Resamples learned position embeddings to a new patch grid; prefix tokens are kept.

    Args:
        posemb: array (1, prefix + gh * gw, D) or (prefix + gh * gw, D).
        new_grid: int or (rows, cols) of the new patch grid.
        old_grid: (rows, cols) of the stored grid; inferred when it is square.
        num_prefix_tokens: leading embeddings that are not on the grid (the class token).
        method: "official" (corner-aligned bilinear, as scipy.ndimage.zoom(order=1)),
            "bilinear" or "bicubic" (half-pixel centres, as tf.image.resize),
            "torch_bicubic_antialias" (timm's resample_abs_pos_embed) or "torch_bicubic"
            (transformers' interpolate_pos_encoding); see `keras_vit.interpolation`.

    Returns:
        An array of the input's rank and dtype with prefix + rows * cols embeddings.

    Example:
    >>> pe = np.random.normal(size=(1, 1 + 14 * 14, 768)).astype("float32")
    >>> resample_position_embeddings(pe, 24).shape
    (1, 577, 768)
    """
    if method not in METHODS:
        raise ValueError(f"Unknown resampling method {method!r}; use one of {METHODS}.")
    posemb = np.asarray(posemb)
    squeeze = posemb.ndim == 2
    if squeeze:
        posemb = posemb[None]
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"position embeddings must be (1, tokens, dim) or (tokens, dim), got {posemb.shape}.")
    new_grid = (new_grid, new_grid) if isinstance(new_grid, int) else tuple(int(g) for g in new_grid)
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    old_grid = infer_grid(len(grid), like=new_grid) if old_grid is None else tuple(int(g) for g in old_grid)
    if old_grid[0] * old_grid[1] != len(grid):
        raise ValueError(
            f"old_grid {old_grid} holds {old_grid[0] * old_grid[1]} positions, but the embeddings have "
            f"{len(grid)} after {num_prefix_tokens} prefix token(s)."
        )
    if old_grid == new_grid:
        out = posemb
    else:
        resampled = resample_grid_numpy(grid.reshape(old_grid + (-1,)), new_grid, method)
        resampled = resampled.reshape(1, new_grid[0] * new_grid[1], -1).astype(posemb.dtype)
        out = np.concatenate([prefix, resampled], axis=1)
    return out[0] if squeeze else out


@refuse_unknown_keywords
def with_image_size(model: keras.Model, image_size: int | Sequence[int], *, method: str | None = None) -> keras.Model:
    """The same model at another input size: all weights copied, position embeddings resampled.

    `method` defaults to the model's own (`model.posemb_resample`): the official one for Google's
    models, timm's or transformers' for a model loaded from theirs, so the moved model gives what its
    library gives at that size; any name of `keras_vit.interpolation.METHODS` overrides it.

    Example:
    >>> model = keras_vit.ViTTi16(input_shape=(224, 224, 3))
    >>> model_384 = with_image_size(model, 384)  # 14x14 position embeddings -> 24x24
    >>> model_384.image_size, model_384.count_params() - model.count_params()  # 24^2 - 14^2 more, of 192 values
    ((384, 384), 72960)
    """
    config = model.get_config()
    config["image_size"] = to_pair(image_size, "image_size")
    new = type(model).from_config(config)
    copy_weights(model, new, method=method or getattr(model, "posemb_resample", "official"))
    return new


@refuse_unknown_keywords
def copy_weights(source, target, *, method="official"):
    """Copies weights between two keras-vit models of the same architecture.

    Position embeddings are resampled when the patch grids differ; a head of another
    class count is kept as the target has it. Returns a report like `load_official_npz`.
    """
    src = {v.path: v for v in source.weights}
    plan, problems = [], []
    report = {"loaded": [], "kept": [], "dropped": [], "resampled": []}
    for variable in target.weights:
        s = src.pop(variable.path, None)
        if s is None:
            if variable.path.startswith(("head/", "head_dist/")):
                report["kept"].append(variable.path)
            else:
                problems.append(f"{variable.path} missing in the source")
        elif tuple(s.shape) == tuple(variable.shape):
            plan.append((variable, s, None))
        elif variable.path.startswith(("head/", "head_dist/")):
            report["kept"].append(f"{variable.path} (target {tuple(variable.shape)}, source {tuple(s.shape)})")
        elif variable.path == "patch_encoder/pos_embedding" and s.shape[-1] == variable.shape[-1]:
            old_grid = source.patch_encoder.grid_size
            plan.append((variable, s, old_grid))
            new_grid = target.patch_encoder.grid_size
            report["resampled"].append(resample_note(old_grid, new_grid, method))
        elif variable.path.endswith("relative_position_bias_table"):
            problems.append(f"{variable.path}: target {tuple(variable.shape)}, source {tuple(s.shape)} (BEiT's relative "
                            "position bias is resized as its library does when the checkpoint loads: "
                            "keras_vit.from_pretrained(folder, image_size=...))")
        else:
            problems.append(f"{variable.path}: target {tuple(variable.shape)}, source {tuple(s.shape)}")
    for path in src:
        if path.startswith(("head/", "head_dist/", "pre_logits/")):
            report["dropped"].append(path)
        else:
            problems.append(f"{path} has no place in the target")
    if problems:
        raise ValueError(
            f"Cannot copy weights from {source.name!r} to {target.name!r}: {format_keys(problems)}. "
            "The target was left unchanged."
        )
    for variable, s, old_grid in plan:
        value = s.numpy()
        if old_grid is not None:
            value = resample_position_embeddings(
                value, target.patch_encoder.grid_size, old_grid=old_grid,
                num_prefix_tokens=target.num_posemb_prefix_tokens, method=method)
        variable.assign(value.astype(variable.dtype))
        report["loaded"].append(variable.path)
    return report


PATCH_METHODS = ("pi", "bilinear")


@refuse_unknown_keywords
def resample_patch_embedding(kernel: np.ndarray, new_patch_size: int | Sequence[int], method: str = "pi") -> np.ndarray:
    """Resizes a patch-embedding kernel to another patch size (FlexiViT, Beyer et al., 2023).

    "pi" (pseudo-inverse resize) chooses the new kernel w' so that a patch x and its bilinear
    resize B x embed alike, <B x, w'> = <x, w>: w' = pinv(B^T) w, exact when the patch grows.
    "bilinear" resizes the kernel itself. B is `tf.image.resize`'s bilinear resize (half-pixel
    centres, no antialiasing), as a matrix.

    Args:
        kernel: the conv kernel (ph, pw, C, D) of `PatchEncoder`'s projection.
        new_patch_size: int or (ph', pw').
        method: "pi" or "bilinear".

    Returns:
        A float array (ph', pw', C, D) of the kernel's dtype.

    Example:
    >>> kernel = np.random.normal(size=(16, 16, 3, 768)).astype("float32")
    >>> resample_patch_embedding(kernel, 32).shape
    (32, 32, 3, 768)
    """
    if method not in PATCH_METHODS:
        raise ValueError(f"Unknown patch-embedding resampling method {method!r}; use one of {PATCH_METHODS}.")
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(f"a patch-embedding kernel is (ph, pw, C, D), got shape {kernel.shape}.")
    new = (new_patch_size,) * 2 if isinstance(new_patch_size, int) else tuple(int(p) for p in new_patch_size)
    if len(new) != 2 or min(new) < 1:
        raise ValueError(f"new_patch_size must be a positive int or (ph, pw), got {new_patch_size!r}.")
    (ph, pw), rest = kernel.shape[:2], kernel.shape[2:]
    if (ph, pw) == new:
        return kernel
    resize = np.kron(resampling_matrix(ph, new[0], "bilinear"), resampling_matrix(pw, new[1], "bilinear"))
    flat = kernel.reshape(ph * pw, -1).astype(np.float64)
    out = np.linalg.pinv(resize.T) @ flat if method == "pi" else resize @ flat
    return out.reshape(new + rest).astype(kernel.dtype)


@refuse_unknown_keywords
def with_patch_size(model: keras.Model, patch_size: int | Sequence[int], *, method: str = "pi") -> keras.Model:
    """The same model with another patch size: the patch embedding resampled (FlexiViT).

    The position embeddings keep their grid, so the model's native image size becomes
    grid x new patch (hybrids: x the stem's stride); a dynamic model stays dynamic.

    Example:
    >>> model_8 = with_patch_size(keras_vit.ViTTi16(input_shape=(224, 224, 3)), 8)  # 14x14 patches of 8 px
    >>> model_8.image_size, model_8.patch_size
    ((112, 112), (8, 8))
    """
    new_patch = to_pair(patch_size, "patch_size")
    config = model.get_config()
    config["variant"] = None  # the paper's variants fix the patch size
    (gh, gw), stride = model.config.grid, model.config.stem_stride
    config["patch_size"] = new_patch
    config["image_size"] = (gh * new_patch[0] * stride, gw * new_patch[1] * stride)
    new = type(model).from_config(config)
    kernel = model.patch_encoder.projection.kernel
    source = {v.path: v for v in model.weights}
    for variable in new.weights:
        value = source[variable.path].numpy()
        if variable.path == kernel.path:
            value = resample_patch_embedding(value, new_patch, method)
        variable.assign(value)
    log.info("patch size %dx%d -> %dx%d (%s); image size %dx%d -> %dx%d", *model.patch_size, *new_patch, method,
             *model.image_size, *new.image_size)
    return new


# -- BEiT's relative position bias table at another patch grid --------------------------------------

RELATIVE_METHODS = ("timm", "transformers")


def _timm_offsets(src, dst):
    """timm's `resize_rel_pos_bias_table` (from BEiT's run_class_finetuning.py): the `src` stored
    offsets placed on a geometric progression q whose half spans `dst // 2`, q found by bisection."""
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** (src // 2)) / (1.0 - q) > dst // 2:
            right = q
        else:
            left = q
    dis, cur = [], 1.0
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return np.asarray([-d for d in reversed(dis)] + [0.0] + dis, dtype=np.float32)


def _timm_taps(points, targets):
    """timm's RegularGridInterpolator along one axis, in float32: (left, right) indices and the
    distances each weights the other by (past either end both point at the end row)."""
    right = np.minimum(np.searchsorted(points, targets, side="left"), len(points) - 1)  # torch.bucketize
    left = np.clip(right - 1, 0, len(points) - 1)
    dist_left = np.maximum(targets - points[left], np.float32(0))
    dist_right = np.maximum(points[right] - targets, np.float32(0))
    both_zero = (dist_left == 0) & (dist_right == 0)
    dist_left[both_zero] = dist_right[both_zero] = 1
    return (left, right), (dist_left, dist_right)


def _resize_timm(table, old_size, new_size):
    y_idx, y_dist = _timm_taps(_timm_offsets(old_size[0], new_size[0]),
                               np.arange(-(new_size[0] // 2), new_size[0] // 2 + 0.1, 1.0, dtype=np.float32))
    x_idx, x_dist = _timm_taps(_timm_offsets(old_size[1], new_size[1]),
                               np.arange(-(new_size[1] // 2), new_size[1] // 2 + 0.1, 1.0, dtype=np.float32))
    z = table.reshape(old_size + (-1,))
    numerator = np.zeros(new_size + (table.shape[-1],), np.float32)
    for a in (0, 1):  # the corners in timm's order, product([0, 1], repeat=2)
        for b in (0, 1):
            weight = y_dist[1 - a][:, None] * x_dist[1 - b][None, :]
            numerator = numerator + z[y_idx[a][:, None], x_idx[b][None, :]] * weight[..., None]
    denominator = (y_dist[0] + y_dist[1])[:, None] * (x_dist[0] + x_dist[1])[None, :]
    return (numerator / denominator[..., None]).reshape(new_size[0] * new_size[1], -1)


def resize_relative_position_bias_table(table: np.ndarray, old_grid: int | Sequence[int],
                                        new_grid: int | Sequence[int], method: str = "timm") -> np.ndarray:
    """BEiT's relative position bias table of a `old_grid` patch grid, for `new_grid`, as its library does.

    The table holds (2 * gh - 1) * (2 * gw - 1) offsets between patches (row-major by row offset,
    then column offset), then three entries (class -> patch, patch -> class, class -> class), each
    with one value per head. The offsets are resampled, the three kept; the model built at the new
    size rebuilds its index (`keras_vit.layers.relative_position_index`) for its own grid.

    Args:
        table: ((2 * gh - 1) * (2 * gw - 1) + 3, heads).
        old_grid: (gh, gw) of the stored table, or an int for a square grid.
        new_grid: (rows, cols) of the new patch grid, or an int.
        method: "timm": `timm.layers.resize_rel_pos_bias_table`, which timm's BEiT applies when a
            checkpoint loads into a model of another img_size: the stored offsets placed on a
            geometric progression spanning the new range, interpolated linearly (timm's
            RegularGridInterpolator, clamped at the ends), in float32. "transformers": transformers'
            BeitRelativePositionBias at another size: `F.interpolate(mode="bilinear",
            align_corners=False)` of the offsets viewed as ((2 * gw - 1), (2 * gh - 1)) (its layout:
            the same as timm's for a square stored grid) to (2 * rows - 1, 2 * cols - 1).

    Returns:
        ((2 * rows - 1) * (2 * cols - 1) + 3, heads), of the table's dtype; the table itself at the
        same grid.

    Example:
    >>> table = np.random.normal(size=(7 * 7 + 3, 4)).astype("float32")  # a 4x4 grid, 4 heads
    >>> resize_relative_position_bias_table(table, 4, 8).shape  # an 8x8 grid: 15 * 15 offsets
    (228, 4)
    >>> resize_relative_position_bias_table(table, 4, 8, "transformers").shape
    (228, 4)
    """
    if method not in RELATIVE_METHODS:
        raise ValueError(f"Unknown relative position bias resizing method {method!r}; use one of {RELATIVE_METHODS}.")
    old, new = to_pair(old_grid, "old_grid"), to_pair(new_grid, "new_grid")
    table = np.asarray(table)
    old_size = (2 * old[0] - 1, 2 * old[1] - 1)
    new_size = (2 * new[0] - 1, 2 * new[1] - 1)
    if table.ndim != 2 or table.shape[0] != old_size[0] * old_size[1] + 3:
        raise ValueError(f"a relative position bias table for the {old[0]}x{old[1]} grid has shape "
                         f"({old_size[0] * old_size[1] + 3}, heads), got {table.shape}: pass the grid it was "
                         "trained at as old_grid.")
    if old == new:
        return table
    offsets, extra = table[:-3], table[-3:]
    if method == "timm":
        resized = _resize_timm(offsets.astype(np.float32), old_size, new_size)
    else:  # transformers reshapes to (1, 2gw-1, 2gh-1, heads) before resizing to (2 rows-1, 2 cols-1)
        resized = resample_grid_numpy(offsets.reshape(old_size[1], old_size[0], -1), new_size, "bilinear")
        resized = resized.reshape(new_size[0] * new_size[1], -1)
    return np.concatenate([resized.astype(table.dtype), extra], axis=0)


def table_grid(entries: int) -> tuple[int, int]:
    """The square patch grid of a relative position bias table of `entries` rows (as timm's checkpoint
    filter assumes); ValueError otherwise."""
    side = (math.isqrt(entries - 3) + 1) // 2
    if entries < 4 or (2 * side - 1) ** 2 + 3 != entries:
        raise ValueError(f"a relative position bias table of {entries} rows is not that of a square patch grid "
                         "((2 * g - 1) ** 2 + 3 rows): keras-vit cannot tell its grid to resize it.")
    return side, side
