"""Rotary position embeddings (RoPE) over the patch grid: DINOv3's, EVA02's and Perception Encoder's.

RoPE (Su et al., 2021; in 2-D, Heo et al., 2024) encodes a patch's position by rotating pairs of channels
of its query and key by angles proportional to its coordinates, so the attention logit of two patches
depends on their offset. Half of each head's channels rotate by the row coordinate, half by the column's;
the class and register tokens are not rotated. No weight is learned: the angles follow the grid, so a
model takes any image size and recomputes them for its own grid (nothing is resampled).

The two kinds keras-vit reads differ in the coordinates and in which channels pair up:

- "dinov3" (DINOv3; timm's `RotaryEmbeddingDinoV3`, transformers' `DINOv3ViTRopePositionEmbedding`):
  patch centres (k + 0.5) / n per axis, each axis by its own length, mapped to [-1, 1]; angle
  2 pi c / temperature^(4i / head_dim) for i < head_dim / 4 (temperature 100); channels paired as halves
  (x_j with x_{j + head_dim/2}, "rotate half").
- "axial" (EVA02; timm's `RotaryEmbeddingCat` with in_pixels=False): integer patch indices k, rescaled
  to a reference grid as k / n * ref (EVA02's ref_feat_shape, its pre-training grid) when one is given;
  angle t / temperature^(4i / head_dim) (temperature 10000); channels paired as neighbours (x_2j with
  x_2j+1, "interleaved").

Either way the angles are [row angles | column angles] (head_dim / 2), per token in the row-major order of
the patches; two options move the grid: an `offset` added to every coordinate before the rescaling
(Perception Encoder's rope_grid_offset 1: indices k + 1) and `xy`, the column angles first ([column | row],
timm's grid_indexing 'xy', Perception Encoder's).

Example:
>>> table = RotaryEmbedding(head_dim=8, patch_size=16, kind="dinov3", prefix_tokens=1)(keras.ops.zeros((1, 32, 48, 3)))
>>> tuple(table.shape)  # (sin, cos) x (1 class token + 2 x 3 patches) x head_dim
(2, 7, 8)
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_vit._common import Shape, Tensor, check_layer_keywords
from keras_vit._common import register as _register
from keras_vit._common import to_pair as _pair

ROPE_KINDS = ("dinov3", "axial")
# Each kind's default temperature (the base of its frequencies) and channel layout.
DEFAULT_TEMPERATURE = {"dinov3": 100.0, "axial": 10000.0}
LAYOUTS = {"dinov3": "half", "axial": "interleaved"}


def check_rope(kind: str | None, head_dim: int, temperature: float | None, reference_grid: Any, offset: float = 0.0,
               xy: bool = False) -> None:
    """Refuses a RoPE configuration keras-vit cannot build, naming the value.

    Example:
    >>> check_rope("rotary", head_dim=64, temperature=None, reference_grid=None)
    Traceback (most recent call last):
    ValueError: Unknown rope 'rotary'; use None or one of ('dinov3', 'axial').
    """
    if kind is None:
        if temperature is not None or reference_grid is not None or offset or xy:
            raise ValueError(f"rope_temperature={temperature!r} / rope_grid={reference_grid!r} / rope_offset={offset!r} / "
                             f"rope_xy={xy!r} need rope='dinov3' or 'axial' (rope=None has no rotary embeddings).")
        return
    if kind not in ROPE_KINDS:
        raise ValueError(f"Unknown rope {kind!r}; use None or one of {ROPE_KINDS}.")
    if head_dim % 4:
        raise ValueError(f"rope={kind!r} rotates a quarter of each head's channels by rows and a quarter by columns: "
                         f"the head width (hidden_size / num_heads) must be a multiple of 4, got {head_dim}.")
    if temperature is not None and not temperature > 0:
        raise ValueError(f"rope_temperature must be positive, got {temperature!r}.")
    if not (isinstance(offset, (int, float)) and not isinstance(offset, bool) and math.isfinite(offset)):
        raise ValueError(f"rope_offset must be a finite number (Perception Encoder's 1.0), got {offset!r}.")
    if reference_grid is not None and kind != "axial":
        raise ValueError(f"rope_grid={reference_grid!r} (EVA02's reference grid) goes with rope='axial', not {kind!r}: "
                         "DINOv3's coordinates are normalized by the grid itself.")


def _axis_angles(n, kind, frequencies, reference, offset):
    """(n, head_dim / 4) angles of one axis of n patches."""
    k = ops.cast(ops.arange(n), "float32")
    n = ops.cast(n, "float32")
    if kind == "dinov3":
        coordinate = 2.0 * ((k + (0.5 + offset)) / n) - 1.0
        return (2.0 * math.pi) * coordinate[:, None] * frequencies[None, :]
    if offset:
        k = k + float(offset)
    t = k if reference is None else k / n * float(reference)
    return t[:, None] * frequencies[None, :]


def rope_table(grid: tuple[Any, Any], head_dim: int, kind: str, temperature: float | None = None,
               reference_grid: tuple[int, int] | None = None, prefix_tokens: int = 0, offset: float = 0.0,
               xy: bool = False) -> Tensor:
    """(2, prefix_tokens + gh * gw, head_dim) float32: the sines and cosines by which `apply_rope` rotates the
    tokens of a (gh, gw) patch grid (which may hold symbolic sizes), the prefix tokens' rows 0 and 1 (not
    rotated). `offset` is added to each coordinate before the rescaling to `reference_grid`; `xy` puts the
    column angles first.

    Example:
    >>> table = keras.ops.convert_to_numpy(rope_table((2, 2), head_dim=4, kind="axial"))
    >>> table[0, :, ::2].astype("float64").round(3).tolist()  # sin of each patch's row and column angles
    [[0.0, 0.0], [0.0, 0.841], [0.841, 0.0], [0.841, 0.841]]
    """
    quarter = head_dim // 4
    temperature = DEFAULT_TEMPERATURE[kind] if temperature is None else float(temperature)
    # as the sources compute them: float32 exponents 4i / head_dim, then the power
    exponents = np.arange(quarter, dtype=np.float32) * np.float32(4.0 / head_dim)
    frequencies = ops.convert_to_tensor((np.float32(temperature) ** -exponents).astype("float32"))
    gh, gw = grid
    ref = (None, None) if reference_grid is None else reference_grid
    rows = ops.broadcast_to(_axis_angles(gh, kind, frequencies, ref[0], offset)[:, None, :], (gh, gw, quarter))
    cols = ops.broadcast_to(_axis_angles(gw, kind, frequencies, ref[1], offset)[None, :, :], (gh, gw, quarter))
    angles = ops.concatenate([cols, rows] if xy else [rows, cols], axis=-1)
    angles = ops.reshape(angles, (-1, 2 * quarter))
    if LAYOUTS[kind] == "half":  # [a | a]: channel j pairs with j + head_dim / 2
        angles = ops.concatenate([angles, angles], axis=-1)
    else:  # [a0, a0, a1, a1, ...]: channel 2j pairs with 2j + 1
        angles = ops.reshape(ops.stack([angles, angles], axis=-1), (-1, head_dim))
    sin, cos = ops.sin(angles), ops.cos(angles)
    if prefix_tokens:
        sin = ops.concatenate([ops.zeros((prefix_tokens, head_dim), "float32"), sin], axis=0)
        cos = ops.concatenate([ops.ones((prefix_tokens, head_dim), "float32"), cos], axis=0)
    return ops.stack([sin, cos], axis=0)


def apply_rope(x: Tensor, table: Tensor, layout: str) -> Tensor:
    """x (B, T, heads, head_dim) rotated by `rope_table`'s (2, T, head_dim): x cos + rot(x) sin, where rot
    pairs channels as `layout` says ("half" or "interleaved").

    Example:
    >>> x = keras.ops.ones((1, 3, 2, 4))
    >>> y = apply_rope(x, rope_table((1, 2), head_dim=4, kind="dinov3", prefix_tokens=1), "half")
    >>> keras.ops.convert_to_numpy(y[0, 0, 0]).tolist()  # the prefix token passes unrotated
    [1.0, 1.0, 1.0, 1.0]
    """
    x = ops.convert_to_tensor(x)  # a NumPy x times a torch tensor has no operator
    table = ops.cast(table, x.dtype)
    sin, cos = table[0][:, None, :], table[1][:, None, :]
    if layout == "half":
        first, second = ops.split(x, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
    else:
        shape = ops.shape(x)
        pairs = ops.reshape(x, (shape[0], shape[1], shape[2], -1, 2))
        rotated = ops.reshape(ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), shape)
    return x * cos + rotated * sin


@_register
class RotaryEmbedding(keras.layers.Layer):
    """The RoPE table of a batch of images: (2, prefix_tokens + gh * gw, head_dim), float32 sines and cosines,
    (gh, gw) the images' patch grid (H / patch, W / patch). The transformer blocks rotate their queries and
    keys by it (`apply_rope`); it holds no weights.

    Args:
        head_dim: each head's width (a multiple of 4).
        patch_size: the patch size in input pixels (a hybrid's effective patch).
        kind: "dinov3" or "axial" (see the module's docstring).
        temperature: the base of the frequencies; None: the kind's (100 for dinov3, 10000 for axial).
        reference_grid: "axial" only: the grid positions are rescaled to (EVA02's ref_feat_shape), or None.
        prefix_tokens: the class and register tokens before the patches (not rotated).
        offset: added to every patch coordinate before the rescaling (Perception Encoder's 1.0).
        xy: the column angles first (timm's grid_indexing 'xy').

    Example:
    >>> layer = RotaryEmbedding(head_dim=16, patch_size=14, kind="axial", reference_grid=(16, 16))
    >>> tuple(layer(keras.ops.zeros((2, 56, 70, 3))).shape)
    (2, 20, 16)
    """

    def __init__(self, head_dim: int, patch_size: int | tuple[int, int], kind: str, temperature: float | None = None,
                 reference_grid: int | tuple[int, int] | None = None, prefix_tokens: int = 0, offset: float = 0.0,
                 xy: bool = False, **kwargs: Any) -> None:
        check_layer_keywords(RotaryEmbedding, kwargs)
        super().__init__(**kwargs)
        self.head_dim = int(head_dim)
        self.patch_size = _pair(patch_size, "patch_size")
        self.reference_grid = None if reference_grid is None else _pair(reference_grid, "reference_grid")
        check_rope(kind, self.head_dim, temperature, self.reference_grid, offset, xy)
        self.kind = kind
        self.offset = float(offset)
        self.xy = bool(xy)
        self.temperature = None if temperature is None else float(temperature)
        self.prefix_tokens = int(prefix_tokens)

    def call(self, images: Tensor) -> Tensor:
        h, w = images.shape[1], images.shape[2]
        if h is None or w is None:
            h, w = ops.shape(images)[1], ops.shape(images)[2]
        grid = (h // self.patch_size[0], w // self.patch_size[1])
        return rope_table(grid, self.head_dim, self.kind, self.temperature, self.reference_grid, self.prefix_tokens,
                          self.offset, self.xy)

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        h, w = tuple(input_shape)[1:3]
        tokens = None if h is None or w is None else self.prefix_tokens + (h // self.patch_size[0]) * (
            w // self.patch_size[1])
        return (2, tokens, self.head_dim)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "head_dim": self.head_dim, "patch_size": self.patch_size, "kind": self.kind,
                "temperature": self.temperature, "reference_grid": self.reference_grid,
                "prefix_tokens": self.prefix_tokens, "offset": self.offset, "xy": self.xy}
