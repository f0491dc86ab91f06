"""The paper's analysis figures (Section 4.5, Figures 6 and 7) for any keras-vit model.

Four views of what a model learned, each available as numbers from Python and as a
figure (with its data beside it) from `save_figures` or `keras-vit visualize`:

- attention rollout (Abnar & Zuidema, 2020; the paper's appendix D.8): where the
  read-out token's information comes from, as a map over the input's patches;
- position-embedding similarity: the cosine similarity of each patch position's
  embedding to every other position's (Figure 7, centre);
- the principal components of the patch-embedding filters, as RGB patches
  (Figure 7, left);
- mean attention distance per head against depth, in pixels (Figure 7, right).

The math is also exposed as pure functions on arrays (`rollout`, `rollout_to_map`,
`attention_distance`, `similarity_distance_correlation`), so it can be checked on
exact synthetic attention.

Attention probabilities come from the model's own blocks (`return_attention_scores=True`),
called on the model's own token features batch by batch: no copy of the model is made, and
the reducing functions hold one layer's probabilities for one batch at a time.

Class-token handling: rollout reads the class token's row for models that pool the
class token, and the mean of the pooled tokens' rows otherwise ("gap"). Attention
distance is measured between patches only: the class token's query row and key
column are dropped and each patch's attention over the other patches is renormalized
to sum to 1, so that a head that looks at the class token does not count as looking
nowhere. Patches of hybrids are cells of the stem's feature map; their size in pixels
is image_size / grid_size.

matplotlib (the `viz` extra) is needed only for the figures.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._files import atomic_path
from keras_vit.loading import load_model

if TYPE_CHECKING:
    import keras

log = logging.getLogger("keras_vit")

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


# --------------------------------------------------------------------------- pure math


def rollout(attentions: Sequence[np.ndarray]) -> np.ndarray:
    """Attention rollout: the joint attention of a stack of layers, (B, T, T).

    Per layer, heads are averaged, the identity is added for the residual connection and
    rows are renormalized (0.5 A + 0.5 I); the layers are then multiplied, the first
    layer rightmost. Each row of the result sums to 1: row i says how much of token i's
    output, after the last layer, comes from each input token.

    Args:
        attentions: a sequence of per-layer attention probabilities (B, heads, T, T),
            first layer first, as `TransformerBlock(..., return_attention_scores=True)`
            returns them.

    Example:
    >>> uniform = np.full((1, 2, 5, 5), 0.2)
    >>> rollout([uniform, uniform])[0, 0]
    array([0.4 , 0.15, 0.15, 0.15, 0.15])
    """
    joint = None
    for i, probs in enumerate(attentions):
        probs = np.asarray(probs)
        if probs.ndim != 4 or probs.shape[-1] != probs.shape[-2]:
            raise ValueError(f"attention of layer {i} must be (B, heads, T, T), got shape {probs.shape}.")
        layer = probs.mean(axis=1, dtype=np.float64)
        layer = layer + np.eye(layer.shape[-1])
        layer /= layer.sum(axis=-1, keepdims=True)
        if joint is not None and joint.shape != layer.shape:
            raise ValueError(f"attention of layer {i} has shape {probs.shape}, unlike the layers before it.")
        joint = layer if joint is None else layer @ joint
    if joint is None:
        raise ValueError("rollout needs the attention of at least one layer.")
    return joint


def rollout_to_map(joint: np.ndarray, grid_size: Sequence[int], num_prefix_tokens: int = 1,
                   source: str = "token") -> np.ndarray:
    """The rollout of the read-out, as a map over the patch grid (B, gh, gw) summing to 1.

    `source="token"` reads the class token's row (token 0); `source="mean"` averages the
    rows of the tokens that global average pooling averages (all tokens without a class
    token, the patch tokens with one). The prefix tokens' own columns are dropped and
    the map is renormalized over the patches.

    Example:
    >>> joint = rollout([np.full((1, 1, 5, 5), 0.2)])
    >>> rollout_to_map(joint, (2, 2), num_prefix_tokens=1)[0]
    array([[0.25, 0.25],
           [0.25, 0.25]])
    """
    joint = np.asarray(joint, dtype=np.float64)
    gh, gw = grid_size
    prefix = int(num_prefix_tokens)
    if joint.ndim != 3 or joint.shape[1] != joint.shape[2] or joint.shape[-1] != prefix + gh * gw:
        raise ValueError(
            f"joint attention must be (B, T, T) with T = {prefix} + {gh}x{gw}, got shape {joint.shape}."
        )
    if source == "token":
        if not prefix:
            raise ValueError("source='token' needs a class token; use source='mean' for gap models.")
        row = joint[:, 0]
    elif source == "mean":
        row = joint[:, prefix:].mean(axis=1)
    else:
        raise ValueError(f"source must be 'token' or 'mean', got {source!r}.")
    patches = row[:, prefix:]
    patches = patches / patches.sum(axis=-1, keepdims=True)
    return patches.reshape(-1, gh, gw)


def patch_centre_distances(grid_size: Sequence[int], patch_size: Sequence[float]) -> np.ndarray:
    """Euclidean distances in pixels between the centres of all patches, (N, N), row-major.

    Example:
    >>> patch_centre_distances((1, 3), (16, 16))
    array([[ 0., 16., 32.],
           [16.,  0., 16.],
           [32., 16.,  0.]])
    """
    gh, gw = grid_size
    ph, pw = patch_size
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    centres = np.stack([(rows.ravel() + 0.5) * ph, (cols.ravel() + 0.5) * pw], axis=-1)
    return np.sqrt(((centres[:, None] - centres[None]) ** 2).sum(-1))


def attention_distance(probs: np.ndarray, grid_size: Sequence[int], patch_size: Sequence[float],
                       num_prefix_tokens: int = 0) -> np.ndarray:
    """Mean attention distance of each head of one layer, in pixels, (heads,).

    For each query patch, the distance to every key patch weighted by the attention
    between them, averaged over query patches and images. Prefix (class) tokens are
    dropped as queries and keys; each query's attention over the patches is
    renormalized to sum to 1.

    Args:
        probs: attention probabilities (B, heads, T, T).
        grid_size: the patch grid (gh, gw).
        patch_size: a patch's (height, width) in pixels (floats for hybrids).
        num_prefix_tokens: tokens before the patches (1 with a class token).

    Example:
    >>> attention_distance(np.eye(4)[None, None], (2, 2), (16, 16))  # each patch on itself
    array([0.])
    """
    probs = np.asarray(probs, dtype=np.float32)
    prefix = int(num_prefix_tokens)
    n = grid_size[0] * grid_size[1]
    if probs.ndim != 4 or probs.shape[-1] != probs.shape[-2] or probs.shape[-1] != prefix + n:
        raise ValueError(
            f"attention must be (B, heads, T, T) with T = {prefix} + {grid_size[0]}x{grid_size[1]}, "
            f"got shape {probs.shape}."
        )
    patches = probs[..., prefix:, prefix:]
    mass = patches.sum(axis=-1)
    weighted = (patches * patch_centre_distances(grid_size, patch_size).astype(np.float32)).sum(axis=-1)
    per_query = weighted / np.maximum(mass, np.finfo(np.float32).tiny)
    return per_query.mean(axis=(0, 2), dtype=np.float64)


def uniform_attention_distance(grid_size: Sequence[int], patch_size: Sequence[float]) -> float:
    """The mean attention distance of uniform attention over the patches, in pixels.

    Example:
    >>> uniform_attention_distance((1, 3), (16, 16))  # (0 + 16 + 32 + 16 + 0 + 16 + 32 + 16 + 0) / 9
    14.222222222222221
    """
    return float(patch_centre_distances(grid_size, patch_size).mean())


def similarity_distance_correlation(similarity: np.ndarray) -> float:
    """Spearman rank correlation between position similarity and grid distance.

    Over all pairs of distinct patch positions; negative when nearby positions have
    more similar embeddings, as the paper finds.

    Args:
        similarity: (gh, gw, gh, gw), as `position_embedding_similarity` returns.

    Example:
    >>> distance = patch_centre_distances((3, 3), (1, 1)).reshape(3, 3, 3, 3)
    >>> similarity_distance_correlation(-distance)  # similarity falling with distance
    -1.0
    """
    from scipy.stats import spearmanr

    similarity = np.asarray(similarity)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(f"similarity must be (gh, gw, gh, gw), got shape {similarity.shape}.")
    gh, gw = similarity.shape[:2]
    n = gh * gw
    if n < 3:
        raise ValueError(f"a {gh}x{gw} grid has too few positions for a rank correlation.")
    upper = np.triu_indices(n, k=1)
    distance = patch_centre_distances((gh, gw), (1, 1))[upper]
    return float(spearmanr(similarity.reshape(n, n)[upper], distance).statistic)


# --------------------------------------------------------------------------- model level


def _vit_class():
    from keras_vit.models import VisionTransformer

    return VisionTransformer


def _check_model(model):
    if not isinstance(model, _vit_class()):
        raise ValueError(f"expected a keras_vit.VisionTransformer, got {type(model).__name__}.")


def _check_images(model, images):
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    expected = tuple(model.image_size) + (3,)
    if model.dynamic_image_size and images.ndim == 4 and images.shape[-1] == 3 and len(images):
        ph, pw = patch_pixels(model)
        if images.shape[1] % ph or images.shape[2] % pw:
            raise ValueError(f"images of {images.shape[1]}x{images.shape[2]} are not multiples of the patch size "
                             f"{ph:g}x{pw:g}; keras_vit.visualize.load_images reads and resizes image files.")
    elif images.ndim != 4 or images.shape[1:] != expected or not len(images):
        raise ValueError(
            f"images must be (B, {expected[0]}, {expected[1]}, 3) at the model's size, got shape {images.shape}; "
            "keras_vit.visualize.load_images reads and resizes image files."
        )
    if images.dtype == np.uint8 or (images.size and float(np.abs(images).max()) > 1.5 * _input_bound(model)):
        raise ValueError(
            f"images look like pixels in [0, 255]; the model takes them normalized ({_input_range(model)}): scale "
            "them with keras_vit.preprocess_input(pixels, model=model)."
        )
    return images.astype(np.float32, copy=False)


def _input_bound(model):
    """The largest |value| a normalized image can hold: 1 for [-1, 1], 2.64 for ImageNet's mean and std."""
    from keras_vit.applications import pixel_stats

    mean, std = pixel_stats(model)
    return max(max(m, 1 - m) / s for m, s in zip(mean, std))


def _input_range(model):
    from keras_vit.applications import pixel_stats

    mean, std = pixel_stats(model)
    return "[-1, 1]" if mean == std == (0.5, 0.5, 0.5) else f"(x / 255 - mean) / std, mean {list(mean)}, std {list(std)}"


def _to_pixels(model, images):
    """Model inputs -> the uint8 pixels they were normalized from, with the model's own mean and std."""
    from keras_vit.applications import pixel_stats

    mean, std = (np.asarray(v, np.float32) for v in pixel_stats(model))
    return np.clip(np.round((np.asarray(images, np.float32) * std + mean) * 255.0), 0, 255).astype(np.uint8)


def patch_pixels(model: keras.Model) -> tuple[float, float]:
    """A patch's (height, width) in input pixels: image size / grid size (also for hybrids).

    Example:
    >>> patch_pixels(load_model("saved_models/vit_cifar10_hybrid/model.keras"))  # 32 px over a 8x8 grid
    (4.0, 4.0)
    """
    gh, gw = model.patch_encoder.grid_size
    return model.image_size[0] / gh, model.image_size[1] / gw


def image_grid(model: keras.Model, images: np.ndarray) -> tuple[int, int]:
    """The patch grid (gh, gw) of images (B, H, W, 3): the model's, or for a model of any size, their own.

    Example:
    >>> model = keras_vit.ViTTi16(weights=None, input_shape=(64, 64, 3), dynamic_image_size=True)
    >>> image_grid(model, np.zeros((1, 96, 128, 3)))
    (6, 8)
    """
    ph, pw = patch_pixels(model)
    return int(round(images.shape[1] / ph)), int(round(images.shape[2] / pw))


def _read_out(model):
    """Where the pooled representation comes from: 'token' or 'mean'."""
    if model.pooling in ("gap", "avg") or model.classifier != "token":
        return "mean"
    return "token"


def _iter_attention(model, images, batch_size):
    """Yields, per batch of images, an iterator over the blocks' probabilities (b, heads, T, T).

    The blocks are called eagerly on the output of the model's own embedding layers,
    which adds no nodes to the model's graph and shares every weight. Each layer's
    probabilities are computed when the consumer asks for them, so a reducing consumer
    holds one layer of one batch at a time.
    """
    import keras

    _check_model(model)
    images = _check_images(model, images)
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    embed = model.stage_model("images", "embedded")

    def layers(x):
        for _, probs in model.forward_blocks(x, return_attention=True, training=False):
            yield keras.ops.convert_to_numpy(probs)

    for start in range(0, len(images), batch_size):
        yield layers(embed(images[start:start + batch_size], training=False))


def attention_probabilities(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> list[np.ndarray]:
    """The attention probabilities of every block, a list of (B, heads, T, T) float32 arrays.

    Holds all of them in memory (12 layers x 12 heads x 197^2 floats = 22 MB per image for
    ViT-B/16 at 224); `attention_rollout` and `mean_attention_distance` reduce layer by layer.

    Example:
    >>> model = load_model("saved_models/vit_cifar10/model.keras")
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> probs = attention_probabilities(model, keras_vit.preprocess_input(pixels, model=model))
    >>> len(probs), probs[0].shape   # blocks, then (images, heads, tokens, tokens)
    (6, (2, 4, 65, 65))
    """
    batches = [list(layers) for layers in _iter_attention(model, images, batch_size)]
    return [np.concatenate(parts) for parts in zip(*batches)]


def _reduce_attention(model, images, batch_size):
    """One pass over `images`: rollout maps (B, gh, gw) and mean attention distances (L, heads)."""
    _check_model(model)
    images = _check_images(model, images)
    grid, pixels, prefix, source = (image_grid(model, images), patch_pixels(model), model.num_prefix_tokens,
                                    _read_out(model))
    maps, total, count = [], 0.0, 0
    for layers in _iter_attention(model, images, batch_size):
        head_means, distances = [], []
        for probs in layers:
            distances.append(attention_distance(probs, grid, pixels, prefix))
            head_means.append(probs.mean(axis=1, keepdims=True))  # all rollout needs; heads x smaller
        maps.append(rollout_to_map(rollout(head_means), grid, prefix, source))
        n = len(head_means[0])
        total, count = total + np.stack(distances) * n, count + n
    return np.concatenate(maps), total / count


def attention_rollout(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> np.ndarray:
    """Attention rollout maps (B, gh, gw) of `images`, each summing to 1 over the patches.

    From the class token for models that read it out, from the mean over the pooled
    tokens for gap models. `images` are (B, H, W, 3) at the model's size, in [-1, 1]; a model
    of any size (`dynamic_image_size=True`) takes other multiples of the patch size, and the
    maps are on the images' own grid.

    Example:
    >>> model = load_model("saved_models/vit_cifar10/model.keras")
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> maps = attention_rollout(model, keras_vit.preprocess_input(pixels, model=model))
    >>> maps.shape, maps.sum(axis=(1, 2)).round(6)   # a map over the 8x8 patch grid per image
    ((2, 8, 8), array([1., 1.]))
    """
    return _reduce_attention(model, images, batch_size)[0]


def mean_attention_distance(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> np.ndarray:
    """Mean attention distance in pixels per layer and head, (num_layers, heads), over `images`.

    Distances are between patch centres in input pixels (patch size = image size / grid
    size, so hybrids are measured on the image too); class tokens are left out and each
    patch's attention over the patches renormalized (see `attention_distance`).

    Example:
    >>> model = load_model("saved_models/vit_cifar10/model.keras")
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> d = mean_attention_distance(model, keras_vit.preprocess_input(pixels, model=model))
    >>> d.shape   # (layers, heads), in pixels
    (6, 4)
    """
    return _reduce_attention(model, images, batch_size)[1]


def position_embedding_similarity(model: keras.Model) -> np.ndarray:
    """Cosine similarity of each patch position's embedding to every other's, (gh, gw, gh, gw).

    `sim[i, j]` is the map for the patch at row i, column j: its similarity to each
    position of the grid. The class token's embedding is left out.

    Example:
    >>> sim = position_embedding_similarity(load_model("saved_models/vit_cifar10/model.keras"))
    >>> sim.shape
    (8, 8, 8, 8)
    >>> similarity_distance_correlation(sim) < 0   # nearby positions are alike
    True
    """
    import keras

    _check_model(model)
    encoder = model.patch_encoder
    gh, gw = encoder.grid_size
    embeddings = keras.ops.convert_to_numpy(encoder.position_embedding).astype(np.float64)[0]
    embeddings = embeddings[model.num_posemb_prefix_tokens:]
    norms = np.linalg.norm(embeddings, axis=-1, keepdims=True)
    unit = embeddings / np.maximum(norms, 1e-12)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)


def embedding_filter_components(model: keras.Model, num_components: int = 12) -> dict[str, Any]:
    """The top principal components of the model's first RGB filters, as RGB patches.

    For a ViT these are the patch-embedding filters (ph, pw, 3, D). A hybrid's patch
    embedding sees the stem's feature channels rather than RGB, so for hybrids the
    components are those of the stem's weight-standardized `conv_root` filters (7, 7, 3, 64),
    the layer that does see pixels; `source` and `note` say which.

    Returns a dict: `components` (K, h, w, 3), each a unit vector with its largest entry
    positive, `explained_variance_ratio` (K,), `source` ("patch_embedding" or "conv_root"),
    `note` (a sentence for the figure).

    Example:
    >>> pcs = embedding_filter_components(load_model("saved_models/vit_cifar10/model.keras"))
    >>> pcs["components"].shape, pcs["source"]   # 12 components of the 4x4 RGB patch filters
    ((12, 4, 4, 3), 'patch_embedding')
    """
    import keras

    _check_model(model)
    if int(num_components) < 1:
        raise ValueError(f"num_components must be positive, got {num_components}.")
    if model.resnet is None:
        kernel = keras.ops.convert_to_numpy(model.patch_encoder.projection.kernel)
        source = "patch_embedding"
        note = f"Patch-embedding filters ({kernel.shape[0]}x{kernel.shape[1]} RGB, {kernel.shape[-1]} filters)."
    else:
        from keras_vit.stem import StdConv2D, standardize_kernel

        conv = model.get_layer("conv_root")
        kernel = keras.ops.cast(conv.kernel, "float32")
        standardized = isinstance(conv, StdConv2D)  # BiT's stem; a BatchNorm stem's convs are plain
        kernel = keras.ops.convert_to_numpy(standardize_kernel(kernel) if standardized else kernel)
        channels = model.patch_encoder.projection.kernel.shape[2]
        source = "conv_root"
        note = (f"Hybrid: the patch embedding sees {channels} stem channels, not RGB; shown are the stem's "
                f"conv_root filters ({kernel.shape[0]}x{kernel.shape[1]} RGB"
                f"{', weight-standardized' if standardized else ''}).")
    h, w, c, filters = kernel.shape
    data = kernel.reshape(h * w * c, filters).T.astype(np.float64)
    data -= data.mean(axis=0)
    _, singular, vt = np.linalg.svd(data, full_matrices=False)
    k = min(int(num_components), len(singular))
    components = vt[:k]
    # The sign of a principal component is arbitrary; fix it so figures are reproducible.
    signs = np.sign(components[np.arange(k), np.abs(components).argmax(axis=1)])
    components = components * signs[:, None]
    variance = singular**2
    ratio = variance[:k] / max(variance.sum(), 1e-300)
    return {
        "components": components.reshape(k, h, w, c),
        "explained_variance_ratio": ratio,
        "source": source,
        "note": note,
    }


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
    _check_model(model)
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
    images = _check_images(model, images)
    names = [str(n) for n in names] if names is not None else [f"image {i + 1}" for i in range(len(images))]
    if len(names) != len(images):
        raise ValueError(f"{len(names)} names for {len(images)} images.")

    log.info("attention of %d image(s): rollout and mean attention distance", len(images))
    source = _read_out(model)
    maps, distances = _reduce_attention(model, images, batch_size)
    image_size = tuple(images.shape[1:3])
    upsampled = _upsample(maps, image_size)
    pixels = _to_pixels(model, images)
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
