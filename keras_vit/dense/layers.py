"""The dense heads' own layers: tokens to a spatial map (with DPT's readout), bilinear resizing as
PyTorch computes it (corners aligned or half-pixel; the output size may be symbolic), and the depth
output. Everything else in the heads is Keras' own Conv2D, Conv2DTranspose, BatchNormalization.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_vit._common import Tensor, check_layer_keywords
from keras_vit._common import register as _register
from keras_vit._common import to_pair as _pair


@_register
class TokenMap(keras.layers.Layer):
    """Tokens (B, prefix + gh * gw, D) of `images` (B, H, W, C) -> the patches' map (B, gh, gw, D).

    `readout` is what becomes of the class token (DPT, Ranftl et al. 2021, section 3): "ignore"
    drops it with the other prefix tokens (registers, distillation token), "add" adds it to every
    patch token, "project" concatenates it to each and applies Linear(2D -> D) and exact GELU.

    Example:
    >>> layer = TokenMap(patch_size=16, prefix_tokens=1, readout="add")
    >>> tuple(layer(np.ones((2, 1 + 4 * 6, 8), "float32"), np.zeros((2, 64, 96, 3), "float32")).shape)
    (2, 4, 6, 8)
    """

    def __init__(self, patch_size: int | tuple[int, int], prefix_tokens: int = 1, readout: str = "ignore",
                 **kwargs: Any):
        check_layer_keywords(TokenMap, kwargs)
        super().__init__(**kwargs)
        self.patch_size = _pair(patch_size, "patch_size")
        self.prefix_tokens = int(prefix_tokens)
        if readout not in ("ignore", "add", "project"):
            raise ValueError(f"TokenMap: readout={readout!r}; use 'ignore', 'add' or 'project'.")
        if readout != "ignore" and self.prefix_tokens < 1:
            raise ValueError(f"TokenMap: readout={readout!r} needs a class token; the backbone has none "
                             "(use readout='ignore').")
        self.readout = readout
        self.project: keras.layers.Dense | None = None

    def build(self, tokens_shape: Any, images_shape: Any = None) -> None:
        if self.readout == "project":
            width = int(tokens_shape[-1])
            project = keras.layers.Dense(width, name="project")
            project.build((None, None, 2 * width))
            self.project = project
        self.built = True

    def call(self, tokens: Tensor, images: Tensor) -> Tensor:
        patches = tokens[:, self.prefix_tokens:]
        if self.readout == "add":
            patches = patches + tokens[:, :1]
        elif self.readout == "project" and self.project is not None:
            readout = ops.broadcast_to(tokens[:, :1], ops.shape(patches))
            patches = keras.activations.gelu(self.project(ops.concatenate([patches, readout], axis=-1)),
                                             approximate=False)
        shape = ops.shape(images)
        grid_h, grid_w = shape[1] // self.patch_size[0], shape[2] // self.patch_size[1]
        return ops.reshape(patches, (ops.shape(tokens)[0], grid_h, grid_w, ops.shape(tokens)[-1]))

    def compute_output_shape(self, tokens_shape: Any, images_shape: Any) -> tuple:
        h, w = images_shape[1], images_shape[2]
        return (tokens_shape[0], None if h is None else h // self.patch_size[0],
                None if w is None else w // self.patch_size[1], tokens_shape[-1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "patch_size": self.patch_size, "prefix_tokens": self.prefix_tokens,
                "readout": self.readout}


def _axis_taps(n_in: Any, n_out: Any, align_corners: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(lower index, upper index, upper weight) of each output row: PyTorch's bilinear source index
    (`area_pixel_compute_source_index`), corner-aligned or half-pixel and clamped to the grid."""
    n_in_f, n_out_f = ops.cast(n_in, "float32"), ops.cast(n_out, "float32")
    o = ops.cast(ops.arange(n_out), "float32")
    if align_corners:
        src = o * ((n_in_f - 1.0) / ops.maximum(n_out_f - 1.0, 1.0))
    else:
        src = ops.maximum((o + 0.5) * (n_in_f / n_out_f) - 0.5, 0.0)
    src = ops.minimum(src, n_in_f - 1.0)
    low = ops.floor(src)
    weight = src - low
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, ops.cast(n_in, "int32") - 1)
    return low, high, weight


def _resize_axis(x: Tensor, axis: int, n_out: Any, align_corners: bool) -> Tensor:
    low, high, weight = _axis_taps(ops.shape(x)[axis], n_out, align_corners)
    shape = [1] * 4
    shape[axis] = -1
    weight = ops.cast(ops.reshape(weight, shape), x.dtype)
    a, b = ops.take(x, low, axis=axis), ops.take(x, high, axis=axis)
    return a + (b - a) * weight


@_register
class BilinearResize(keras.layers.Layer):
    """Bilinear resizing of (B, H, W, C) maps as `torch.nn.functional.interpolate(mode="bilinear")`
    computes it, without antialiasing: `align_corners=True` samples at i * (n_in - 1) / (n_out - 1),
    False at half-pixel centres (as `keras.ops.image.resize`). The size is `scale` times the input's,
    or that of a second input's spatial dimensions (`call(x, like)`), symbolic sizes included.

    Keras' own resize has no corner-aligned mode, which DPT's fusion blocks and heads use.

    Example:
    >>> x = np.arange(4, dtype="float32").reshape(1, 2, 2, 1)
    >>> BilinearResize(scale=2, align_corners=True)(x)[0, :, :, 0].numpy().round(3).tolist()[0]
    [0.0, 0.333, 0.667, 1.0]
    """

    def __init__(self, scale: int | None = None, align_corners: bool = True, **kwargs: Any):
        check_layer_keywords(BilinearResize, kwargs)
        super().__init__(**kwargs)
        if scale is not None and (not isinstance(scale, int) or isinstance(scale, bool) or scale < 1):
            raise ValueError(f"BilinearResize: scale={scale!r} must be a positive int (or None: the size of "
                             "the second input).")
        self.scale, self.align_corners = scale, bool(align_corners)

    def call(self, x: Tensor, like: Tensor | None = None) -> Tensor:
        if like is None:
            if self.scale is None:
                raise ValueError("BilinearResize without a scale resizes to a second input's size: call(x, like).")
            size = (ops.shape(x)[1] * self.scale, ops.shape(x)[2] * self.scale)
        else:
            static_in, static_out = tuple(x.shape[1:3]), tuple(like.shape[1:3])
            if None not in static_in and static_in == static_out and not self.align_corners:
                return x  # half-pixel resizing to the same size is the identity
            size = (ops.shape(like)[1], ops.shape(like)[2])
        return _resize_axis(_resize_axis(x, 1, size[0], self.align_corners), 2, size[1], self.align_corners)

    def compute_output_shape(self, x_shape: Any, like_shape: Any = None) -> tuple:
        if like_shape is not None:
            return (x_shape[0], like_shape[1], like_shape[2], x_shape[3])
        return (x_shape[0],) + tuple(None if d is None else d * self.scale for d in x_shape[1:3]) + (x_shape[3],)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale, "align_corners": self.align_corners}


@_register
class DepthOutput(keras.layers.Layer):
    """(B, H, W, 1) -> depth (B, H, W): ReLU ("relative") or sigmoid ("metric"), times `max_depth`
    (Depth Anything multiplies both; 1 for relative checkpoints)."""

    def __init__(self, depth_type: str = "relative", max_depth: float = 1.0, **kwargs: Any):
        check_layer_keywords(DepthOutput, kwargs)
        super().__init__(**kwargs)
        if depth_type not in ("relative", "metric"):
            raise ValueError(f"DepthOutput: depth_type={depth_type!r}; use 'relative' or 'metric'.")
        self.depth_type, self.max_depth = depth_type, float(max_depth)

    def call(self, x: Tensor) -> Tensor:
        x = ops.relu(x) if self.depth_type == "relative" else ops.sigmoid(x)
        return ops.squeeze(x * self.max_depth, axis=-1)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape)[:-1]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "depth_type": self.depth_type, "max_depth": self.max_depth}
