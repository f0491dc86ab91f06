"""Pictures of dense predictions, as uint8 arrays and PNG files (no plotting library needed).

`colorize` paints class indices with PASCAL VOC's palette (class 0 black, 255 "ignore" white),
`colorize_depth` maps depth to the inferno colour map (near bright), `overlay` blends a mask over its
image, `prediction_grid` lays out image / target / prediction rows, and `write_png` writes atomically.

Example:
>>> mask = np.array([[0, 1], [2, 255]], np.uint8)
>>> colorize(mask)[0, 1].tolist()  # class 1: VOC's dark red
[128, 0, 0]
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from keras_vit._files import atomic_path

IGNORE_INDEX = 255
# inferno at 9 evenly spaced points (matplotlib's table): dark purple to pale yellow
_INFERNO = np.array([[0, 0, 4], [31, 12, 72], [85, 15, 109], [136, 34, 106], [186, 54, 85], [227, 89, 51],
                     [249, 140, 10], [249, 201, 50], [252, 255, 164]], np.float64)


def palette(classes: int = 256) -> np.ndarray:
    """(classes, 3) uint8: PASCAL VOC's colour of each class index (its bit-interleaving scheme)."""
    colours = np.zeros((classes, 3), np.uint8)
    for index in range(classes):
        c, r, g, b = index, 0, 0, 0
        for bit in range(8):
            r |= ((c >> 0) & 1) << (7 - bit)
            g |= ((c >> 1) & 1) << (7 - bit)
            b |= ((c >> 2) & 1) << (7 - bit)
            c >>= 3
        colours[index] = (r, g, b)
    return colours


_VOC = palette()
_VOC[IGNORE_INDEX] = (255, 255, 255)


def colorize(mask: np.ndarray) -> np.ndarray:
    """Class indices (H, W) -> RGB (H, W, 3) uint8 in VOC's palette."""
    return _VOC[np.clip(np.asarray(mask), 0, 255).astype(np.uint8)]


def colorize_depth(depth: np.ndarray, near_bright: bool = True) -> np.ndarray:
    """Depth (H, W) -> RGB (H, W, 3) uint8, scaled over the map's own 2nd-98th percentile; a model
    whose output grows with nearness (relative depth, Depth Anything's) shows the near bright."""
    depth = np.asarray(depth, np.float64)
    finite = depth[np.isfinite(depth)]
    low, high = (np.percentile(finite, (2, 98)) if finite.size else (0.0, 1.0))
    t = np.clip((depth - low) / max(high - low, 1e-12), 0, 1)
    t = np.where(np.isfinite(t), t, 0.0)
    if not near_bright:
        t = 1 - t
    x = t * (len(_INFERNO) - 1)
    i = np.minimum(np.floor(x).astype(int), len(_INFERNO) - 2)
    f = (x - i)[..., None]
    return np.round(_INFERNO[i] * (1 - f) + _INFERNO[i + 1] * f).astype(np.uint8)


def overlay(image: np.ndarray, mask: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """A mask's colours blended over its image (uint8 (H, W, 3)); background (class 0) left clear."""
    image = np.asarray(image, np.float64)
    colours = colorize(mask).astype(np.float64)
    if colours.shape[:2] != image.shape[:2]:
        raise ValueError(f"overlay: mask {colours.shape[:2]} and image {image.shape[:2]} differ in size.")
    weight = np.where((np.asarray(mask) == 0)[..., None], 0.0, alpha)
    return np.round(image * (1 - weight) + colours * weight).astype(np.uint8)


def _resize_nearest(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    rows = np.minimum((np.arange(size[0]) * x.shape[0]) // size[0], x.shape[0] - 1)
    cols = np.minimum((np.arange(size[1]) * x.shape[1]) // size[1], x.shape[1] - 1)
    return x[rows][:, cols]


def prediction_grid(images: np.ndarray, targets: np.ndarray | None, predicted: np.ndarray, task: str,
                    scale: int = 2, near_bright: bool = False) -> np.ndarray:
    """One row per image: the image, its target (where given), the prediction (segmentation: the arg-max
    of logits (N, H, W, C) or class indices (N, H, W); depth (N, H, W), `near_bright` for a model whose
    output grows with nearness: relative depth); each scaled up `scale` times."""
    rows = []
    for n in range(len(images)):
        image = np.asarray(images[n], np.uint8)
        size = image.shape[:2]
        shown = [image]
        pred = np.asarray(predicted[n])
        if task == "segmentation":
            pred = pred.argmax(-1) if pred.ndim == 3 else pred
            if targets is not None:
                shown.append(colorize(_resize_nearest(np.asarray(targets[n]), size)))
            shown.append(colorize(_resize_nearest(pred, size)))
        else:
            if targets is not None:
                shown.append(colorize_depth(_resize_nearest(np.asarray(targets[n]), size), near_bright=False))
            shown.append(colorize_depth(_resize_nearest(pred, size), near_bright=near_bright))
        gap = np.full((size[0], 2, 3), 255, np.uint8)
        rows.append(np.concatenate([p for s in shown for p in (s, gap)][:-1], axis=1))
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 2), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    grid = np.concatenate(rows, axis=0)
    return np.repeat(np.repeat(grid, scale, axis=0), scale, axis=1)


def write_png(path: str | os.PathLike, pixels: Any) -> str:
    """Writes uint8 (H, W, 3) or (H, W) pixels as a PNG, atomically; returns the path."""
    import tensorflow as tf

    pixels = np.asarray(pixels)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(tf.io.encode_png(pixels.astype(np.uint8)).numpy())
    return path
