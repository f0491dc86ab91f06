"""RandAugment (Cubuk et al., 2020) with the paper's operations and magnitude scale.

`rand_augment(image, num_ops, magnitude)` draws `num_ops` operations uniformly (with
replacement) and applies each with probability 0.5 (timm's RandAugment, which DeiT used; the
TPU EfficientNet code draws that probability in 0.2-0.8). The paper's 14 operations:
identity, auto-contrast, equalize, rotate, solarize, color, posterize, contrast,
brightness, sharpness, shear-x/y and translate-x/y, each at the strength `magnitude` on the
paper's 0-10 scale. The ranges at magnitude 10 are those of the reference implementations
(timm, the TPU EfficientNet code): rotate +-30 degrees, shear +-0.3, translate +-45% of the
image, color/contrast/brightness/sharpness enhancement 1 +- 0.9, posterize to 4 bits,
solarize above a threshold of 0. Strength rises with the magnitude for every operation
(DeiT's "increasing" variant, `rand-m9-...-inc1`, the recipe that made ViT trainable on
ImageNet alone), so magnitude 0 leaves images unchanged except for auto-contrast and equalize.

Keras 3's own `keras.layers.RandAugment` is not used: its single `factor` sets every
operation's range in that operation's own units (a rotation `factor` of 0.9 is +-324 degrees,
a translation of 0.9 moves 90% of the image), so "magnitude 9" turns most 32x32 images into
noise: a CIFAR-10 ViT trained on them (with mixup) was at 27% validation accuracy after 3 epochs,
where the recipe without either is at 48%.

Images are float32 (H, W, 3) pixels in [0, 255] with a static size, inside a tf.data map.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import tensorflow as tf

MAX_MAGNITUDE = 10.0
# Each drawn operation is applied with this probability, as in timm's RandAugment (DeiT's recipe); applying
# every drawn operation doubles the operations per image, and on the CIFAR-10 ViT recipe (with
# mixup) cost 5.7 points of first-epoch validation accuracy (22.6% against 28.4%).
APPLY_PROBABILITY = 0.5
_FILL = 128.0  # gray, as the reference implementations fill pixels moved in from outside

# The strength of each operation at magnitude 10.
_ROTATE_DEGREES = 30.0
_SHEAR = 0.3
_TRANSLATE_FRACTION = 0.45
_ENHANCE = 0.9
_POSTERIZE_BITS_REMOVED = 4


def _random_sign(value):
    return tf.where(tf.random.uniform(()) < 0.5, -value, value)


def _affine(image, transform):
    """Samples output pixel (x, y) from input (a0 x + a1 y + a2, b0 x + b1 y + b2)."""
    height, width = image.shape[0], image.shape[1]
    transform = tf.concat([tf.cast(transform, tf.float32), tf.zeros(2)], 0)[None]
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None], transforms=transform, output_shape=tf.constant([height, width]),
        fill_value=_FILL, interpolation="BILINEAR", fill_mode="CONSTANT")
    return out[0]


def _rotate(image, m):
    angle = _random_sign(m * _ROTATE_DEGREES * math.pi / 180.0)
    cy, cx = (image.shape[0] - 1) / 2.0, (image.shape[1] - 1) / 2.0
    cos, sin = tf.cos(angle), tf.sin(angle)
    return _affine(image, [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy])


def _shear(image, m, axis):
    s = _random_sign(m * _SHEAR)
    if axis == "x":
        return _affine(image, [1.0, s, 0.0, 0.0, 1.0, 0.0])
    return _affine(image, [1.0, 0.0, 0.0, s, 1.0, 0.0])


def _translate(image, m, axis):
    if axis == "x":
        return _affine(image, [1.0, 0.0, _random_sign(m * _TRANSLATE_FRACTION * image.shape[1]), 0.0, 1.0, 0.0])
    return _affine(image, [1.0, 0.0, 0.0, 0.0, 1.0, _random_sign(m * _TRANSLATE_FRACTION * image.shape[0])])


def _blend(image, degenerate, factor):
    """PIL's ImageEnhance: factor 1 is the image, 0 the degenerate one, > 1 extrapolates."""
    return tf.clip_by_value(degenerate + factor * (image - degenerate), 0.0, 255.0)


def _gray(image):
    return tf.image.rgb_to_grayscale(image)


def _color(image, m):
    return _blend(image, _gray(image), 1.0 + _random_sign(m * _ENHANCE))


def _contrast(image, m):
    return _blend(image, tf.reduce_mean(_gray(image)), 1.0 + _random_sign(m * _ENHANCE))


def _brightness(image, m):
    return _blend(image, tf.zeros_like(image), 1.0 + _random_sign(m * _ENHANCE))


def _sharpness(image, m):
    kernel = tf.constant([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
    smooth = tf.nn.depthwise_conv2d(image[None], kernel, [1, 1, 1, 1], "VALID")[0]
    # PIL keeps the one-pixel border unsmoothed.
    smooth = tf.pad(smooth, [[1, 1], [1, 1], [0, 0]])
    border = tf.pad(tf.ones_like(smooth[1:-1, 1:-1, :1]), [[1, 1], [1, 1], [0, 0]])
    smooth = smooth * border + image * (1.0 - border)
    return _blend(image, smooth, 1.0 + _random_sign(m * _ENHANCE))


def _posterize(image, m):
    shift = tf.cast(tf.round(m * _POSTERIZE_BITS_REMOVED), tf.int32)
    pixels = tf.cast(image, tf.int32)
    return tf.cast(tf.bitwise.left_shift(tf.bitwise.right_shift(pixels, shift), shift), tf.float32)


def _solarize(image, m):
    threshold = 256.0 * (1.0 - m)
    return tf.where(image < threshold, image, 255.0 - image)


def _auto_contrast(image, m):
    del m
    low = tf.reduce_min(image, axis=[0, 1], keepdims=True)
    high = tf.reduce_max(image, axis=[0, 1], keepdims=True)
    scale = tf.where(high > low, 255.0 / tf.maximum(high - low, 1e-3), 1.0)
    return tf.where(high > low, (image - low) * scale, image)


def _equalize_channel(channel):
    pixels = tf.cast(tf.clip_by_value(channel, 0.0, 255.0), tf.int32)
    histogram = tf.math.bincount(tf.reshape(pixels, [-1]), minlength=256, maxlength=256)
    nonzero = tf.boolean_mask(histogram, histogram > 0)
    # PIL: spread all but the last occupied level evenly over 0-255.
    step = (tf.reduce_sum(nonzero) - nonzero[-1]) // 255

    def equalized():
        lut = (tf.cumsum(histogram) + step // 2) // tf.maximum(step, 1)
        lut = tf.clip_by_value(tf.concat([[0], lut[:-1]], 0), 0, 255)
        return tf.cast(tf.gather(lut, pixels), tf.float32)

    return tf.cond(step > 0, equalized, lambda: tf.cast(pixels, tf.float32))


def _equalize(image, m):
    del m
    return tf.stack([_equalize_channel(image[:, :, c]) for c in range(3)], axis=-1)


OPERATIONS = {
    "identity": lambda image, m: image,
    "auto_contrast": _auto_contrast,
    "equalize": _equalize,
    "rotate": _rotate,
    "solarize": _solarize,
    "color": _color,
    "posterize": _posterize,
    "contrast": _contrast,
    "brightness": _brightness,
    "sharpness": _sharpness,
    "shear_x": lambda image, m: _shear(image, m, "x"),
    "shear_y": lambda image, m: _shear(image, m, "y"),
    "translate_x": lambda image, m: _translate(image, m, "x"),
    "translate_y": lambda image, m: _translate(image, m, "y"),
}


def check_rand_augment(randaugment: Sequence[float]) -> tuple[int, float]:
    """(num_ops, magnitude) as ints/floats, or a ValueError that names the bad value."""
    try:
        num_ops, magnitude = randaugment
        num_ops, magnitude = int(num_ops), float(magnitude)
    except (TypeError, ValueError):
        raise ValueError(f"randaugment={randaugment!r}: expected (num_ops, magnitude), e.g. (2, 9).") from None
    if num_ops < 0 or not 0.0 <= magnitude <= MAX_MAGNITUDE:
        raise ValueError(f"randaugment={randaugment!r}: num_ops must be >= 0 and magnitude within "
                         f"0-{MAX_MAGNITUDE:g} (the RandAugment paper's scale).")
    return num_ops, magnitude


def apply_operation(image: tf.Tensor, name: str, magnitude: float) -> tf.Tensor:
    """One named operation (a key of OPERATIONS) at `magnitude` (0-10) on pixels in [0, 255]."""
    if name not in OPERATIONS:
        raise ValueError(f"Unknown RandAugment operation {name!r}; one of {sorted(OPERATIONS)}.")
    image = tf.convert_to_tensor(image, tf.float32)
    return _clipped(OPERATIONS[name], image, float(magnitude) / MAX_MAGNITUDE)


def rand_augment(image: tf.Tensor, num_ops: int, magnitude: float) -> tf.Tensor:
    """RandAugment on one float32 (H, W, 3) image of pixels in [0, 255].

    Example:
    >>> image = tf.random.uniform((32, 32, 3), 0, 255)
    >>> rand_augment(image, num_ops=2, magnitude=9).shape
    TensorShape([32, 32, 3])
    """
    num_ops, magnitude = check_rand_augment((num_ops, magnitude))
    image = tf.convert_to_tensor(image, tf.float32)
    if image.shape.rank != 3 or None in image.shape or image.shape[-1] != 3:
        raise ValueError(f"rand_augment: expected one (H, W, 3) image of a static size, got {image.shape}.")
    m = magnitude / MAX_MAGNITUDE
    for _ in range(num_ops):
        index = tf.random.uniform((), 0, len(OPERATIONS), dtype=tf.int32)
        # an operation not applied is the identity, OPERATIONS' first entry
        index = tf.where(tf.random.uniform(()) < APPLY_PROBABILITY, index, 0)
        branches = [functools.partial(_clipped, op, image, m) for op in OPERATIONS.values()]
        image = tf.ensure_shape(tf.switch_case(index, branches), image.shape)
    return image


def _clipped(op, image, m):
    return tf.clip_by_value(op(image, m), 0.0, 255.0)
