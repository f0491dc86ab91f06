"""Segmentation scenes composed from Fashion-MNIST: a real dense task that trains on a laptop.

Each scene is a 64x64 canvas holding 1 to 3 Fashion-MNIST items (28x28) at random places whose
boxes do not overlap. A pixel's label is its item's class + 1 where the item's intensity is above
10% of that item's maximum, else 0 (background): 11 classes. Scenes for evaluation are composed from
the test split's items only, so no item a model trained on is scored.

Fashion-MNIST comes from Debian's `dataset-fashion-mnist` (`apt-get install dataset-fashion-mnist`:
/usr/share/datasets/fashion-mnist/*-ubyte.gz), or any folder holding the four original files.

Example:
>>> items = load_fashion_mnist()  # {"train": (images, labels), "test": (...)}
>>> scenes, masks = compose_scenes(*items["test"], count=4, seed=0)
>>> scenes.shape, masks.shape, int(masks.max()) <= 10
((4, 64, 64, 3), (4, 64, 64), True)
"""

from __future__ import annotations

import gzip
import os

import numpy as np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = ("t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle_boot")
SCENE_CLASSES = ("background",) + FASHION_CLASSES
_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
          "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def _read_idx(path: str, dims: int) -> np.ndarray:
    """An IDX file (MNIST's format: magic, dimensions, big-endian sizes, uint8 data), its sizes checked
    against the file's length before anything is allocated."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 + 4 * dims or raw[:3] != b"\x00\x00\x08" or raw[3] != dims:
        raise ValueError(f"{path} is not an IDX file of {dims}-dimensional uint8 data (Fashion-MNIST's format).")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    if int(np.prod(shape)) != len(raw) - 4 - 4 * dims:
        raise ValueError(f"{path}: its header says {shape}, which does not match its {len(raw)} bytes.")
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_fashion_mnist(folder: str | os.PathLike = FASHION_MNIST_DIR) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (60000x28x28 uint8, labels), "test": (10000x28x28, labels)} from the four IDX files."""
    folder = os.fspath(folder)
    out = {}
    for split, (images, labels) in _FILES.items():
        paths = [os.path.join(folder, name) for name in (images, labels)]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"Fashion-MNIST is not in {folder} (no {missing[0]}): on Debian or Ubuntu "
                                    "`apt-get install dataset-fashion-mnist`, or pass the folder of the four "
                                    "*-ubyte.gz files (--set dense.fashion_dir=FOLDER).")
        x, y = _read_idx(paths[0], 3), _read_idx(paths[1], 1)
        if len(x) != len(y):
            raise ValueError(f"{folder}: {len(x)} {split} images but {len(y)} labels.")
        out[split] = (x, y)
    return out


def _places(rng: np.random.Generator, count: int, canvas: int, item: int, tries: int = 50) -> list[tuple[int, int]]:
    """Top-left corners of up to `count` item boxes that do not overlap (rejection sampling)."""
    places: list[tuple[int, int]] = []
    for _ in range(tries):
        if len(places) == count:
            break
        y, x = (int(v) for v in rng.integers(0, canvas - item + 1, size=2))
        if all(abs(y - py) >= item or abs(x - px) >= item for py, px in places):
            places.append((y, x))
    return places


def compose_scenes(images: np.ndarray, labels: np.ndarray, count: int, seed: int = 0, canvas: int = 64,
                   max_items: int = 3, threshold: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """`count` scenes (N, canvas, canvas, 3) uint8 grey RGB and their masks (N, canvas, canvas) uint8.

    Each scene draws 1 to `max_items` items (uniformly; fewer when no free place is found) from
    `images` / `labels` (N, 28, 28) / (N,), at random non-overlapping places; mask = class + 1 where
    the item's intensity > `threshold` x its maximum, else 0. Seeded: the same arguments give the same
    scenes.

    Example:
    >>> items = np.full((2, 28, 28), 200, np.uint8)
    >>> scenes, masks = compose_scenes(items, np.array([3, 7]), count=5, seed=0)
    >>> scenes.shape, sorted(np.unique(masks).tolist())
    ((5, 64, 64, 3), [0, 4, 8])
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.ndim != 3 or len(images) != len(labels) or len(images) == 0:
        raise ValueError(f"compose_scenes takes (N, h, w) items and (N,) labels, got {images.shape} and "
                         f"{labels.shape}.")
    item = images.shape[1]
    if images.shape[2] != item or item > canvas:
        raise ValueError(f"items of {images.shape[1:]} do not fit a {canvas}x{canvas} canvas.")
    if int(labels.max()) > 254:
        raise ValueError(f"label {int(labels.max())}: scene masks are uint8 with 255 left for 'ignore'.")
    rng = np.random.default_rng(seed)
    scenes = np.zeros((count, canvas, canvas), np.uint8)
    masks = np.zeros((count, canvas, canvas), np.uint8)
    for n in range(count):
        for y, x in _places(rng, int(rng.integers(1, max_items + 1)), canvas, item):
            k = int(rng.integers(len(images)))
            piece = images[k]
            scenes[n, y:y + item, x:x + item] = piece
            on = piece > threshold * max(int(piece.max()), 1)
            masks[n, y:y + item, x:x + item][on] = labels[k] + 1
    return np.repeat(scenes[..., None], 3, axis=-1), masks


def fashion_scene_splits(train_count: int, test_count: int, seed: int = 0,
                         folder: str | os.PathLike = FASHION_MNIST_DIR) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (scenes, masks) from the training items, "test": (...) from the test items}."""
    items = load_fashion_mnist(folder)
    return {"train": compose_scenes(*items["train"], count=train_count, seed=seed),
            "test": compose_scenes(*items["test"], count=test_count, seed=seed + 1)}
