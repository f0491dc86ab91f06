"""The zero-shot figure: each image beside a bar chart of its most probable labels (as CLIP's paper shows its
zero-shot predictions), the true label marked where it is known.

Example:
>>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_clip")
>>> photos = ["tests/data/cifar10_sample/cat/0511.jpg", "tests/data/cifar10_sample/ship/0128.jpg"]
>>> labels = ["cat", "dog", "ship", "truck"]
>>> plot_zeroshot(photos, model.classify(photos, labels), labels, "zeroshot.png", truth=["cat", "ship"])
'zeroshot.png'
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from keras_vit._common import refuse_unknown_keywords
from keras_vit._files import atomic_path


@refuse_unknown_keywords
def plot_zeroshot(images: Any, probabilities: np.ndarray, labels: Sequence[str], path: str | os.PathLike, *,
                  top: int = 5, truth: Sequence[str | None] | None = None, columns: int = 4,
                  title: str | None = None) -> str:
    """Writes the figure to `path` (PNG, atomically) and returns it. `images`: paths or uint8 arrays (N, H, W, 3);
    `probabilities` (N, C) as `ImageText.classify` gives them; `truth`: each image's true label, drawn green
    where the top label is right, red where not.

    Example:
    >>> probs = np.array([[0.7, 0.2, 0.1]], np.float32)
    >>> plot_zeroshot(np.zeros((1, 32, 32, 3), np.uint8), probs, ["cat", "dog", "car"], "one.png", truth=["cat"])
    'one.png'
    """
    from keras_vit._optional import require
    from keras_vit.applications import load_image

    Figure = require("matplotlib.figure", "viz", package="matplotlib", what="the zero-shot figure").Figure

    if isinstance(images, (str, os.PathLike)):
        images = [images]
    pixels = [load_image(p) if isinstance(p, (str, os.PathLike)) else np.asarray(p) for p in images]
    probabilities = np.asarray(probabilities)
    labels = list(labels)
    if probabilities.shape != (len(pixels), len(labels)):
        raise ValueError(f"probabilities have shape {probabilities.shape}; {len(pixels)} images and {len(labels)} "
                         f"labels need ({len(pixels)}, {len(labels)}).")
    if truth is not None and len(truth) != len(pixels):
        raise ValueError(f"truth names {len(truth)} labels for {len(pixels)} images.")
    top = max(1, min(int(top), len(labels)))
    columns = max(1, min(int(columns), len(pixels)))
    rows = -(-len(pixels) // columns)
    # a bare Figure renders with Agg and touches no global pyplot state or GUI backend
    figure = Figure(figsize=(4.2 * columns, 2.0 * rows + (0.4 if title else 0)), layout="constrained")
    grid = figure.add_gridspec(rows, 2 * columns, width_ratios=[1, 1.3] * columns)
    for i, image in enumerate(pixels):
        r, c = divmod(i, columns)
        ax = figure.add_subplot(grid[r, 2 * c])
        ax.imshow(image, interpolation="nearest" if max(image.shape[:2]) <= 64 else "antialiased")
        ax.set_axis_off()
        order = np.argsort(-probabilities[i])[:top][::-1]
        true = None if truth is None else truth[i]
        known = true is not None
        if known:
            ax.set_title(f"true: {true}", fontsize=8)
        bars = figure.add_subplot(grid[r, 2 * c + 1])
        colours = []
        for j in order:
            right = known and labels[j] == true
            colours.append("tab:green" if right else ("tab:red" if known and j == order[-1] else "tab:blue"))
        bars.barh(range(top), probabilities[i][order], color=colours)
        bars.set_yticks(range(top), [labels[j] for j in order], fontsize=7)
        bars.set_xlim(0, max(1e-6, float(probabilities[i].max())) * 1.15)
        bars.tick_params(axis="x", labelsize=6)
        bars.spines[["top", "right"]].set_visible(False)
    if title:
        figure.suptitle(title, fontsize=10)
    path = os.fspath(path)
    with atomic_path(path, suffix=".png") as tmp:
        figure.savefig(tmp, dpi=100)
    return path
