"""The paper's analysis figures (Section 4.5, Figures 6 and 7) for any keras-vit model.

Four views of what a model learned, each drawn as a figure (with its data beside it, `.npz` and
`.json`) by `save_figures` or `keras-vit visualize`: attention rollout, position-embedding
similarity, the principal components of the embedding filters, and mean attention distance per
head against depth.

The numbers come from keras_vit.analysis (no matplotlib there); its functions are re-exported
here under the names they had (`keras_vit.visualize.attention_rollout`, ...). matplotlib (the
`viz` extra) is needed only for the figures.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._files import atomic_path
from keras_vit.analysis import (  # noqa: F401 (public here too, as before the split)
    attention_distance,
    attention_probabilities,
    attention_rollout,
    attention_summary,
    check_images,
    embedding_filter_components,
    image_grid,
    input_pixels,
    mean_attention_distance,
    patch_centre_distances,
    patch_pixels,
    position_embedding_similarity,
    read_out,
    rollout,
    rollout_to_map,
    similarity_distance_correlation,
    uniform_attention_distance,
)
from keras_vit.loading import load_model

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

__all__ = [
    # on a model
    "attention_rollout", "mean_attention_distance", "position_embedding_similarity",
    "embedding_filter_components", "attention_probabilities", "patch_pixels",
    # on arrays
    "rollout", "rollout_to_map", "attention_distance", "uniform_attention_distance",
    "patch_centre_distances", "similarity_distance_correlation",
    # files and figures
    "load_model", "load_images", "save_figures", "visualize_files", "FIGURES",
]

FIGURES = ("attention_rollout", "position_similarity", "embedding_filters", "attention_distance")

# Rollout panels drawn at most; the .npz holds every image's map.
_MAX_ROLLOUT_PANELS = 16


# --------------------------------------------------------------------------- files


def load_images(paths: Sequence[str | os.PathLike], image_size: int | Sequence[int], *, crop_pct: float = 1.0,
                interpolation: str = "bilinear", model: keras.Model | None = None) -> np.ndarray:
    """Reads image files (JPEG, PNG, GIF, BMP, WebP) and resizes them to `image_size`.

    Returns uint8 RGB pixels (B, H, W, 3); scale them with `keras_vit.preprocess_input`.
    Reads each file with `keras_vit.images.read_image` (header checked first, decompression
    bombs refused, EXIF orientation applied, grayscale, RGBA and CMYK become RGB; errors name the
    file) and resizes it as the model sees it (`keras_vit.images.model_view`: `crop_pct` and
    `interpolation`, or `model`'s own), rounded to uint8.

    Example:
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg", "tests/data/cifar10_sample/ship/0128.jpg"], (32, 32))
    >>> pixels.shape, pixels.dtype
    ((2, 32, 32, 3), dtype('uint8'))
    """
    paths = list(paths)
    if not paths:
        raise ValueError("no images given.")
    return np.clip(np.round(_model_inputs(paths, image_size, crop_pct, interpolation, model)), 0, 255).astype(np.uint8)


def _model_inputs(paths, image_size, crop_pct=1.0, interpolation="bilinear", model=None):
    """Image files -> float32 pixels (B, H, W, 3) at `image_size`, as the model sees them (not rounded)."""
    from keras_vit.images import model_view, read_image, view_policy

    if model is not None:
        crop_pct, interpolation = view_policy(model)
    return np.stack([np.asarray(model_view(read_image(path), image_size, crop_pct, interpolation))
                     for path in paths])


def _write_json(path, data):
    with atomic_path(path, suffix=".json") as tmp:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")


def _write_npz(path, **arrays):
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def _save_figure(figure, path):
    with atomic_path(path, suffix=".png") as tmp:
        figure.savefig(tmp, dpi=100)


def _require_matplotlib():
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError("the figures need matplotlib: pip install 'keras-vit[viz]'")


def _figure(width, height):
    _require_matplotlib()
    from matplotlib.figure import Figure

    # A bare Figure renders with Agg and touches no global pyplot state or GUI backend.
    return Figure(figsize=(width, height), layout="constrained")


# --------------------------------------------------------------------------- figures


def _upsample(maps, size):
    import keras

    resized = keras.ops.image.resize(maps[..., None].astype(np.float32), size, interpolation="bilinear")
    return keras.ops.convert_to_numpy(resized)[..., 0]


def _predictions(model, images, batch_size):
    """Top-1 (name, score) per image, or None for models without a head."""
    if not model.include_top:
        return None
    import keras

    outputs = np.concatenate([keras.ops.convert_to_numpy(model(images[i:i + batch_size], training=False))
                              for i in range(0, len(images), batch_size)]).astype(np.float64)
    scores = None
    if model.classifier_activation is None:  # logits
        scores = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
    elif model.classifier_activation == "softmax":
        scores = outputs
    top = outputs.argmax(axis=-1)
    names = model.class_names
    return [(names[t] if names else f"class {t}", None if scores is None else float(scores[i, t]))
            for i, t in enumerate(top)]


def _plot_rollout(pixels, upsampled, names, predictions, source):
    n = min(len(pixels), _MAX_ROLLOUT_PANELS)
    pairs = min(n, 5)
    rows = math.ceil(n / pairs)
    fig = _figure(1.8 * 2 * pairs + 0.8, 2.0 * rows + 0.5)
    axes = fig.subplots(rows, 2 * pairs, squeeze=False)
    h, w = pixels.shape[1:3]
    for i in range(rows * pairs):
        left, right = axes[i // pairs, 2 * (i % pairs)], axes[i // pairs, 2 * (i % pairs) + 1]
        if i >= n:
            left.set_axis_off(), right.set_axis_off()
            continue
        label = names[i]
        if predictions:
            name, score = predictions[i]
            label += f"\npred: {name}" + (f" ({score:.0%})" if score is not None else "")
        left.imshow(pixels[i], extent=(0, w, h, 0))
        left.set_title(label, fontsize=8)
        right.imshow(pixels[i], extent=(0, w, h, 0))
        relative = upsampled[i] / upsampled[i].max()
        right.imshow(relative, cmap="inferno", alpha=0.6, vmin=0, vmax=1, extent=(0, w, h, 0))
        right.set_title("rollout", fontsize=8)
        for ax in (left, right):
            ax.tick_params(labelsize=6)
    axes[0, 0].set_ylabel("pixels", fontsize=7)
    fig.suptitle(f"Attention rollout from the {'class token' if source == 'token' else 'mean over tokens'}",
                 fontsize=10)
    import matplotlib

    # A colour bar of the opaque colour map, not of the translucent overlay.
    scale = matplotlib.cm.ScalarMappable(matplotlib.colors.Normalize(0, 1), matplotlib.colormaps["inferno"])
    fig.colorbar(scale, ax=axes, shrink=0.8, label="rollout attention / its maximum")
    return fig


def _plot_position_similarity(similarity, rho):
    gh, gw = similarity.shape[:2]
    # One mosaic image with one-cell gaps draws any grid size fast (576 maps at 384/16).
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan)
    for i in range(gh):
        for j in range(gw):
            mosaic[i * (gh + 1):i * (gh + 1) + gh, j * (gw + 1):j * (gw + 1) + gw] = similarity[i, j]
    side = min(7.0, max(4.0, 0.35 * max(gh, gw) + 2.5))
    fig = _figure(side + 1.2, side + 0.4)
    ax = fig.subplots()
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    image = ax.imshow(mosaic, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
    # Ticks at the centres of the small maps, thinned to at most 16 labels a side.
    cols, rows = range(0, gw, math.ceil(gw / 16)), range(0, gh, math.ceil(gh / 16))
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in cols], [str(j + 1) for j in cols])
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in rows], [str(i + 1) for i in rows])
    ax.tick_params(length=0, labelsize=8)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.set_title(f"Position embedding similarity ({gh}x{gw} patches)\nSpearman rank correlation with grid "
                 f"distance: {'n/a' if rho is None else format(rho, '+.2f')}", fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8, label="Cosine similarity")
    return fig


def _plot_embedding_filters(result):
    components, ratio = result["components"], result["explained_variance_ratio"]
    k = len(components)
    cols = min(k, 6)
    rows = math.ceil(k / cols)
    fig = _figure(1.2 * cols + 0.3, 1.3 * rows + 1.0)
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.set_axis_off()
        if i >= k:
            continue
        c = components[i]
        # Each component on its own [0, 1] scale, as the paper draws them.
        ax.imshow((c - c.min()) / max(c.max() - c.min(), 1e-12), interpolation="nearest")
        ax.set_title(f"PC{i + 1} {ratio[i]:.0%}", fontsize=7)
    what = "RGB embedding filters" if result["source"] == "patch_embedding" else "Stem conv_root filters"
    fig.suptitle(f"{what}: first {k} principal components (share of variance)\n{result['note']}", fontsize=8)
    return fig


def _plot_attention_distance(distances, uniform, image_size, patch_size, num_images):
    layers, heads = distances.shape
    fig = _figure(6.0, 4.2)
    ax = fig.subplots()
    colors = [f"C{h % 10}" for h in range(heads)]
    markers = "os^Dv<>ph*"
    # Heads of a layer often lie within a pixel of each other: each head gets its own offset
    # within the layer's column and its own marker, drawn hollow, so none hides another.
    step = min(0.6 / max(heads - 1, 1), 0.12)
    for h in range(heads):
        x = np.arange(1, layers + 1) + (h - (heads - 1) / 2) * step
        ax.scatter(x, distances[:, h], s=26, facecolors="none", edgecolors=colors[h], linewidths=1.2,
                   marker=markers[h % len(markers)], label=f"head {h + 1}")
    ax.axhline(uniform, color="0.4", linestyle="--", linewidth=1, label="uniform attention")
    ax.set_xlim(0.5, layers + 0.5)
    ax.set_ylim(0, max(uniform, float(distances.max())) * 1.12)
    ax.set_xticks(range(1, layers + 1))
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_title(f"Mean attention distance per head, {num_images} image{'s' if num_images != 1 else ''}\n"
                 f"{image_size[0]}x{image_size[1]} px, patches {patch_size[0]:g}x{patch_size[1]:g} px", fontsize=10)
    if heads <= 24:
        ax.legend(fontsize=7, ncol=1 if heads <= 12 else 2, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  frameon=False)
    ax.grid(alpha=0.3)
    return fig


# Over 80 lines: four figures, each a short block of (compute, write .npz/.json, draw) in sequence.
def save_figures(model: keras.Model, out_dir: str | os.PathLike, images: np.ndarray | None = None,
                 names: Sequence[str] | None = None, *, batch_size: int = 16,
                 num_components: int = 12) -> dict[str, Any]:
    """Writes the four figures and the numbers behind them into `out_dir`.

    `<figure>.png`, `<figure>.npz` (the arrays) and `<figure>.json` (a summary) for
    attention_rollout, position_similarity, embedding_filters and attention_distance.
    The attention figures need `images` ((B, H, W, 3) at the model's size, in [-1, 1]);
    without them only the two weight figures are written. Returns {figure: {kind: path}}
    and, under "summary", the key numbers.

    Example:
    >>> model = load_model("saved_models/vit_cifar10/model.keras")
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> written = save_figures(model, "figs", keras_vit.preprocess_input(pixels, model=model), names=["cat", "ship"])
    >>> sorted(written), written["attention_rollout"]["png"]
    (['attention_distance', ...], 'figs/attention_rollout.png')
    """
    from keras_vit.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(f"expected a keras_vit.VisionTransformer, got {type(model).__name__}.")
    _require_matplotlib()
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    written, summary = {}, {}

    def paths(name):
        written[name] = {kind: os.path.join(out_dir, f"{name}.{kind}") for kind in ("png", "npz", "json")}
        return written[name]

    grid = tuple(model.patch_encoder.grid_size)
    pixels_per_patch = patch_pixels(model)

    log.info("position embedding similarity (%dx%d patches)", *grid)
    similarity = position_embedding_similarity(model)
    rho = similarity_distance_correlation(similarity) if grid[0] * grid[1] >= 3 else None
    p = paths("position_similarity")
    n = grid[0] * grid[1]
    flat = similarity.reshape(n, n)
    distance = np.round(patch_centre_distances(grid, (1, 1)), 6)
    by_distance = [{"grid_distance": float(d), "mean_similarity": float(flat[distance == d].mean())}
                   for d in np.unique(distance)]
    _write_npz(p["npz"], similarity=similarity, grid_distance=distance.reshape(grid + grid))
    _write_json(p["json"], {"grid_size": list(grid), "spearman_similarity_vs_grid_distance": rho,
                            "mean_similarity_by_grid_distance": by_distance})
    _save_figure(_plot_position_similarity(similarity, rho), p["png"])
    summary["position_similarity_spearman"] = rho

    log.info("principal components of the embedding filters")
    filters = embedding_filter_components(model, num_components)
    p = paths("embedding_filters")
    _write_npz(p["npz"], components=filters["components"],
               explained_variance_ratio=filters["explained_variance_ratio"])
    _write_json(p["json"], {"source": filters["source"], "note": filters["note"],
                            "component_shape": list(filters["components"].shape[1:]),
                            "explained_variance_ratio": filters["explained_variance_ratio"].tolist()})
    _save_figure(_plot_embedding_filters(filters), p["png"])
    summary["embedding_filters_source"] = filters["source"]

    if images is None or len(images) == 0:
        log.info("no images: skipping attention_rollout and attention_distance (they need input images)")
        return {**written, "summary": summary}
    images = check_images(model, images)
    names = [str(n) for n in names] if names is not None else [f"image {i + 1}" for i in range(len(images))]
    if len(names) != len(images):
        raise ValueError(f"{len(names)} names for {len(images)} images.")

    log.info("attention of %d image(s): rollout and mean attention distance", len(images))
    source = read_out(model)
    maps, distances = attention_summary(model, images, batch_size)
    image_size = tuple(images.shape[1:3])
    upsampled = _upsample(maps, image_size)
    pixels = input_pixels(model, images)
    predictions = _predictions(model, images, batch_size)
    p = paths("attention_rollout")
    _write_npz(p["npz"], maps=maps, upsampled=upsampled, images=pixels, names=np.array(names))
    peaks = [np.unravel_index(int(m.argmax()), maps.shape[1:]) for m in maps]
    _write_json(p["json"], {
        "source": "class token" if source == "token" else "mean over tokens",
        "grid_size": list(maps.shape[1:]),
        "images": [{"name": names[i], "peak_patch_row_col": [int(peaks[i][0]), int(peaks[i][1])],
                    "peak_share": float(maps[i].max()),
                    **({"prediction": predictions[i][0], "score": predictions[i][1]} if predictions else {})}
                   for i in range(len(images))],
    })
    if len(images) > _MAX_ROLLOUT_PANELS:
        log.info("drawing the first %d of %d rollout maps (the .npz holds all)", _MAX_ROLLOUT_PANELS, len(images))
    _save_figure(_plot_rollout(pixels, upsampled, names, predictions, source), p["png"])

    uniform = uniform_attention_distance(maps.shape[1:], pixels_per_patch)
    p = paths("attention_distance")
    _write_npz(p["npz"], mean_distance_px=distances)
    _write_json(p["json"], {
        "num_images": len(images),
        "image_size": list(image_size),
        "patch_size_px": list(pixels_per_patch),
        "class_token": "excluded; each patch's attention over the patches is renormalized",
        "uniform_attention_px": uniform,
        "layer_mean_px": distances.mean(axis=1).tolist(),
        "mean_distance_px": distances.tolist(),
    })
    _save_figure(_plot_attention_distance(distances, uniform, image_size, pixels_per_patch, len(images)),
                 p["png"])
    summary["attention_distance_first_layer_px"] = float(distances[0].mean())
    summary["attention_distance_last_layer_px"] = float(distances[-1].mean())
    summary["uniform_attention_px"] = uniform
    return {**written, "summary": summary}


def visualize_files(model_path: str | os.PathLike, out_dir: str | os.PathLike,
                    image_paths: Sequence[str | os.PathLike] | None = None, *, batch_size: int = 16,
                    num_components: int = 12) -> dict[str, Any]:
    """`keras-vit visualize`: a `.keras` model file and image files -> the figures in `out_dir`.

    Images are resized to the model's input size and scaled to [-1, 1]; they are named
    by their file names in the figures. Returns what `save_figures` returns.

    Example:
    >>> written = visualize_files("saved_models/vit_cifar10/model.keras", "figs", ["tests/data/cifar10_sample/cat/0511.jpg"])
    >>> sorted(written["summary"])
    [...]
    """
    from keras_vit.applications import preprocess_input

    _require_matplotlib()
    model = load_model(model_path)
    log.info("loaded %s: %s on %dx%d images, %dx%d patches of %sx%s px", model_path, model.name,
             *model.image_size, *model.patch_encoder.grid_size, *(f"{p:g}" for p in patch_pixels(model)))
    images = names = None
    if image_paths:
        pixels = _model_inputs(image_paths, model.image_size, model=model)  # in float: as predict and exports
        log.info("read %d image(s), resized to %dx%d", len(pixels), *model.image_size)
        images = np.asarray(preprocess_input(pixels, model=model))
        names = [os.path.basename(os.fspath(p)) for p in image_paths]
    return save_figures(model, out_dir, images, names, batch_size=batch_size, num_components=num_components)
