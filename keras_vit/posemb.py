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
