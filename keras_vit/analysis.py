"""The numbers behind the paper's analysis figures (Section 4.5, Figures 6 and 7), without matplotlib.

- attention rollout (Abnar & Zuidema, 2020; the paper's appendix D.8): where the read-out token's
  information comes from, as a map over the input's patches;
- position-embedding similarity: the cosine similarity of each patch position's embedding to every
  other position's (Figure 7, centre);
- the principal components of the patch-embedding filters, as RGB patches (Figure 7, left);
- mean attention distance per head against depth, in pixels (Figure 7, right).

The math is exposed as pure functions on arrays (`rollout`, `rollout_to_map`, `attention_distance`,
`similarity_distance_correlation`), so it can be checked on exact synthetic attention; the functions
on a model run its own blocks (`return_attention_scores=True`) on its own token features batch by
batch: no copy of the model is made, and the reducing functions hold one layer's probabilities for
one batch at a time.

Prefix tokens: rollout reads the class token's row for models that pool the class token, and the
mean of the pooled tokens' rows otherwise ("gap"); the columns of every token before the patches
(class, distillation, register tokens) are dropped and the map renormalized over the patches.
Attention distance is measured between patches only, each patch's attention over the patches
renormalized to sum to 1, so that a head that looks at the class token does not count as looking
nowhere. Patches of hybrids are cells of the stem's feature map; their size in pixels is
image_size / grid_size.

keras_vit.visualize draws the figures (matplotlib) from these numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:
    import keras

__all__ = [
    # on a model
    "attention_rollout", "mean_attention_distance", "position_embedding_similarity",
    "embedding_filter_components", "attention_probabilities", "attention_summary", "patch_pixels",
    "image_grid", "read_out", "check_images", "input_pixels",
    # on arrays
    "rollout", "rollout_to_map", "attention_distance", "uniform_attention_distance",
    "patch_centre_distances", "similarity_distance_correlation",
]


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


def check_images(model: keras.Model, images: np.ndarray) -> np.ndarray:
    """`images` as float32 (B, H, W, 3) when the model takes them: at its size (any multiple of the patch
    size for a model of any size) and normalized as it expects, else a ValueError saying what to do
    (pixels in [0, 255] are refused: the bound is the model's own, 2.64 for ImageNet's mean and std).

    Example:
    >>> model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=10)
    >>> check_images(model, np.zeros((32, 32, 3))).shape   # one image becomes a batch
    (1, 32, 32, 3)
    >>> check_images(model, np.full((1, 32, 32, 3), 200.0))
    Traceback (most recent call last):
    ValueError: images look like pixels in [0, 255]; ...
    """
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


def input_pixels(model: keras.Model, images: np.ndarray) -> np.ndarray:
    """Model inputs -> the uint8 pixels they were normalized from, with the model's own mean and std
    (`preprocess_input(pixels, model=model)` undone, rounded).

    Example:
    >>> model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=10)
    >>> input_pixels(model, keras_vit.preprocess_input(np.array([0.0, 128.0, 255.0]), model=model))
    array([  0, 128, 255], dtype=uint8)
    """
    from keras_vit.applications import pixel_stats

    mean, std = (np.asarray(v, np.float32) for v in pixel_stats(model))
    return np.clip(np.round((np.asarray(images, np.float32) * std + mean) * 255.0), 0, 255).astype(np.uint8)


def patch_pixels(model: keras.Model) -> tuple[float, float]:
    """A patch's (height, width) in input pixels: image size / grid size (also for hybrids).

    Example:
    >>> patch_pixels(keras_vit.load_model("saved_models/vit_cifar10_hybrid/model.keras"))  # 32 px over a 8x8 grid
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


def read_out(model: keras.Model) -> str:
    """Where the pooled representation comes from: "token" (the class token's row) or "mean" (the
    pooled tokens', for gap models), which rollout reads.

    Example:
    >>> read_out(keras_vit.ViTTi16(input_shape=(32, 32, 3))), read_out(
    ...     keras_vit.ViTTi16(input_shape=(32, 32, 3), classifier="gap"))
    ('token', 'mean')
    """
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
    images = check_images(model, images)
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    embed = model.stage_model("images", "embedded")

    def layers(batch):
        rope = model.rope_table(batch) if getattr(model, "rope", None) is not None else None
        x = embed(batch, training=False)
        for _, probs in model.forward_blocks(x, return_attention=True, training=False, rope=rope):
            yield keras.ops.convert_to_numpy(probs)

    for start in range(0, len(images), batch_size):
        yield layers(images[start:start + batch_size])


def attention_probabilities(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> list[np.ndarray]:
    """The attention probabilities of every block, a list of (B, heads, T, T) float32 arrays.

    Holds all of them in memory (12 layers x 12 heads x 197^2 floats = 22 MB per image for
    ViT-B/16 at 224); `attention_rollout` and `mean_attention_distance` reduce layer by layer.

    Example:
    >>> model = keras_vit.load_model("saved_models/vit_cifar10/model.keras")
    >>> from keras_vit.visualize import load_images
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> probs = attention_probabilities(model, keras_vit.preprocess_input(pixels, model=model))
    >>> len(probs), probs[0].shape   # blocks, then (images, heads, tokens, tokens)
    (6, (2, 4, 65, 65))
    """
    batches = [list(layers) for layers in _iter_attention(model, images, batch_size)]
    return [np.concatenate(parts) for parts in zip(*batches)]


def attention_summary(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """One pass over `images`: (rollout maps (B, gh, gw), mean attention distances (layers, heads)), what
    `attention_rollout` and `mean_attention_distance` return, with the blocks run once.

    Example:
    >>> model = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                                     mlp_dim=64, classes=10)
    >>> maps, distances = attention_summary(model, np.zeros((2, 32, 32, 3)))
    >>> maps.shape, distances.shape   # a 4x4 patch grid; 2 layers of 4 heads
    ((2, 4, 4), (2, 4))
    """
    _check_model(model)
    images = check_images(model, images)
    grid, pixels, prefix, source = (image_grid(model, images), patch_pixels(model), model.num_prefix_tokens,
                                    read_out(model))
    maps: list[np.ndarray] = []
    total, count = np.zeros((model.num_layers, model.num_heads)), 0
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
    >>> model = keras_vit.load_model("saved_models/vit_cifar10/model.keras")
    >>> from keras_vit.visualize import load_images
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> maps = attention_rollout(model, keras_vit.preprocess_input(pixels, model=model))
    >>> maps.shape, maps.sum(axis=(1, 2)).round(6)   # a map over the 8x8 patch grid per image
    ((2, 8, 8), array([1., 1.]))
    """
    return attention_summary(model, images, batch_size)[0]


def mean_attention_distance(model: keras.Model, images: np.ndarray, batch_size: int = 16) -> np.ndarray:
    """Mean attention distance in pixels per layer and head, (num_layers, heads), over `images`.

    Distances are between patch centres in input pixels (patch size = image size / grid
    size, so hybrids are measured on the image too); class tokens are left out and each
    patch's attention over the patches renormalized (see `attention_distance`).

    Example:
    >>> model = keras_vit.load_model("saved_models/vit_cifar10/model.keras")
    >>> from keras_vit.visualize import load_images
    >>> pixels = load_images(["tests/data/cifar10_sample/cat/0511.jpg",
    ...                       "tests/data/cifar10_sample/ship/0128.jpg"], model.image_size)
    >>> d = mean_attention_distance(model, keras_vit.preprocess_input(pixels, model=model))
    >>> d.shape   # (layers, heads), in pixels
    (6, 4)
    """
    return attention_summary(model, images, batch_size)[1]


def position_embedding_similarity(model: keras.Model) -> np.ndarray:
    """Cosine similarity of each patch position's embedding to every other's, (gh, gw, gh, gw).

    `sim[i, j]` is the map for the patch at row i, column j: its similarity to each
    position of the grid. The class token's embedding is left out.

    Example:
    >>> sim = position_embedding_similarity(keras_vit.load_model("saved_models/vit_cifar10/model.keras"))
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
    >>> pcs = embedding_filter_components(keras_vit.load_model("saved_models/vit_cifar10/model.keras"))
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
