"""Dense predictions on image files, written as pictures: `keras-vit predict` and `keras-vit visualize`
on a DensePredictor.

Each image is read upright (EXIF), resized to the model's input size, predicted, and the prediction
resized back to the image's own size (class indices nearest, depth bilinear). Segmentation writes
`<name>_mask.png`, a palette PNG: its pixels are the class indices (any mask reader, and
`keras_vit.dense.data.read_mask`, gets the classes back) and its palette VOC's colours (any viewer shows
them). Depth writes `<name>_depth.png` (the inferno colour map) and `<name>_depth.npy` (the values).
With `overlay`, `<name>_overlay.png` blends the mask over the image (depth: image and depth side by side).

Example:
>>> rows = predict_dense_files(model, ["photo.jpg"], "predictions")
>>> sorted(rows[0]["files"])  # doctest: +SKIP
['predictions/photo_mask.png']
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any, Sequence

import keras
import numpy as np

from keras_vit._files import atomic_path
from keras_vit.dense.model import DensePredictor
from keras_vit.dense.visualize import colorize_depth, overlay, palette, write_png
from keras_vit.images import is_image_name, list_images, read_image


def is_dense_file(path: str | os.PathLike) -> bool:
    """Whether a .keras file holds a DensePredictor (read from its config, nothing built)."""
    import zipfile

    path = os.fspath(path)
    if not (path.endswith(".keras") and os.path.isfile(path)):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            return json.loads(z.read("config.json")).get("class_name") == "DensePredictor"
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False


def write_palette_png(path: str | os.PathLike, indices: np.ndarray) -> str:
    """(H, W) uint8 class indices as an 8-bit palette PNG with VOC's colours (255 white), atomically."""
    indices = np.ascontiguousarray(indices, np.uint8)
    if indices.ndim != 2:
        raise ValueError(f"write_palette_png takes (H, W) indices, got {indices.shape}.")
    colours = palette()
    colours[255] = 255

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    h, w = indices.shape
    rows = np.concatenate([np.zeros((h, 1), np.uint8), indices], axis=1)  # filter type 0 on every row
    content = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
               + chunk(b"PLTE", colours.tobytes()) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
               + chunk(b"IEND", b""))
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(content)
    return path


def _expand(paths: Sequence[str | os.PathLike]) -> list[str]:
    found = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            images, _ = list_images(p)
            found += [os.path.join(p, name) for name in images]
        elif not os.path.isfile(p):
            raise FileNotFoundError(f"image {p} does not exist.")
        elif not is_image_name(p):
            raise ValueError(f"{p} is not an image file (JPEG, PNG, GIF, BMP, WebP).")
        else:
            found.append(p)
    if not found:
        raise ValueError(f"no image files in {', '.join(str(os.fspath(p)) for p in paths)}.")
    return found


def predict_image(model: DensePredictor, image: np.ndarray) -> np.ndarray:
    """One uint8 image (H, W, 3) -> class indices (H, W) uint8 or depth (H, W) float32 at its own size."""
    import tensorflow as tf

    from keras_vit.data import OFFICIAL_STATS, to_model_range

    x = tf.image.resize(tf.cast(image[None], tf.float32), model.image_size, method="bilinear", antialias=True)
    x = to_model_range(tf.clip_by_value(x, 0, 255), model.pixel_mean or OFFICIAL_STATS,
                       model.pixel_std or OFFICIAL_STATS)
    y = keras.ops.convert_to_numpy(model(keras.ops.convert_to_tensor(np.asarray(x)), training=False))[0]
    size = image.shape[:2]
    if model.task == "segmentation":
        classes = y.argmax(-1).astype(np.uint8)
        return tf.image.resize(classes[..., None], size, method="nearest").numpy()[..., 0]
    return tf.image.resize(y[..., None], size, method="bilinear").numpy()[..., 0].astype(np.float32)


def _summary(model: DensePredictor, prediction: np.ndarray) -> str:
    if model.task == "depth":
        return (f"depth min {prediction.min():.4g}, median {np.median(prediction):.4g}, "
                f"max {prediction.max():.4g}")
    names = model.class_names or [f"class_{i}" for i in range(model.head_config.classes or 0)]
    counts = np.bincount(prediction.reshape(-1), minlength=len(names))
    order = [i for i in np.argsort(-counts) if counts[i]][:4]
    return ", ".join(f"{names[i]} {counts[i] / prediction.size:.1%}" for i in order)


def predict_dense_files(model: DensePredictor | str | os.PathLike, paths: Sequence[str | os.PathLike],
                        out_dir: str | os.PathLike = "predictions", overlay_images: bool = False,
                        verbose: bool = True) -> list[dict[str, Any]]:
    """Predicts every image (files or folders of them) and writes its pictures into `out_dir`; returns
    one row per image: {"image", "files", "summary"}. Prints a line per image with `verbose`.

    Example:
    >>> head = keras_vit.DenseHead(kind="linear", task="segmentation", taps=(1,), final_norm=True, classes=3)
    >>> model = keras_vit.DensePredictor(keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=16,
    ...                                  num_layers=1, num_heads=2, mlp_dim=32), head)
    >>> rows = predict_dense_files(model, ["tests/data/dense_folder/images/scene_01.jpg"], "masks", verbose=False)
    >>> rows[0]["files"]
    ['masks/scene_01_mask.png']
    """
    if not isinstance(model, DensePredictor):
        model = keras.saving.load_model(os.fspath(model), compile=False)
        if not isinstance(model, DensePredictor):
            raise ValueError(f"expected a dense model (a DensePredictor .keras file), got {type(model).__name__}.")
    files = _expand(paths)
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    stems: dict[str, int] = {}
    rows = []
    near_bright = model.head_config.depth_type == "relative"
    for path in files:
        image = read_image(path)
        prediction = predict_image(model, image)
        stem = os.path.splitext(os.path.basename(path))[0]
        stems[stem] = stems.get(stem, 0) + 1
        stem = stem if stems[stem] == 1 else f"{stem}_{stems[stem]}"  # two folders' photo.jpg both kept
        written = []
        if model.task == "segmentation":
            written.append(write_palette_png(os.path.join(out_dir, f"{stem}_mask.png"), prediction))
            if overlay_images:
                written.append(write_png(os.path.join(out_dir, f"{stem}_overlay.png"), overlay(image, prediction)))
        else:
            written.append(write_png(os.path.join(out_dir, f"{stem}_depth.png"),
                                     colorize_depth(prediction, near_bright=near_bright)))
            npy = os.path.join(out_dir, f"{stem}_depth.npy")
            with atomic_path(npy) as tmp:
                with open(tmp, "wb") as f:
                    np.save(f, prediction)
            written.append(npy)
            if overlay_images:
                side = np.concatenate([image, colorize_depth(prediction, near_bright=near_bright)], axis=1)
                written.append(write_png(os.path.join(out_dir, f"{stem}_overlay.png"), side))
        row = {"image": path, "files": written, "summary": _summary(model, prediction)}
        rows.append(row)
        if verbose:
            print(f"{path}: {row['summary']} -> {', '.join(written)}", flush=True)
    return rows
