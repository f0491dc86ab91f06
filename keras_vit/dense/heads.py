"""The heads as functional graphs over a backbone's token maps: DPT's neck (reassemble, fusion) and
its depth and segmentation heads, Depth Anything's variant, and DINOv2's linear head.

Layer names are keras-style; `TORCH_NAMES` (keras_vit/dense/transformers.py) maps them to
transformers' module paths. Convs are Keras' own with PyTorch's padding: 3x3 stride 1 is "same";
the 0.5 reassemble (3x3, stride 2, padding 1) pads explicitly, since Keras' "same" at stride 2 pads
one side only.
"""

from __future__ import annotations

from typing import Sequence

import keras

from keras_vit._common import Tensor
from keras_vit.dense.config import DenseHead
from keras_vit.dense.layers import BilinearResize, DepthOutput, TokenMap


def _conv(filters, kernel, name, bias=True, strides=1, padding="same"):
    return keras.layers.Conv2D(filters, kernel, strides=strides, padding=padding, use_bias=bias, name=name)


def _batch_norm(name):
    # PyTorch's BatchNorm2d: eps 1e-5, running statistics updated by 0.1 of each batch's
    return keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name=name)


def _reassemble(maps: Sequence[Tensor], head: DenseHead) -> list[Tensor]:
    out = []
    for i, (x, channels, factor) in enumerate(zip(maps, head.neck_hidden_sizes, head.reassemble_factors)):
        x = _conv(channels, 1, f"reassemble_{i}_projection")(x)
        if factor > 1:
            x = keras.layers.Conv2DTranspose(channels, factor, strides=factor, padding="valid",
                                             name=f"reassemble_{i}_resize")(x)
        elif factor < 1:
            x = keras.layers.ZeroPadding2D(1, name=f"reassemble_{i}_pad")(x)
            x = _conv(channels, 3, f"reassemble_{i}_resize", strides=round(1 / factor), padding="valid")(x)
        out.append(_conv(head.fusion_hidden_size, 3, f"neck_conv_{i}", bias=False)(x))
    return out


def _residual_unit(x: Tensor, head: DenseHead, name: str) -> Tensor:
    """DPT's pre-activation residual unit: ReLU, conv3x3 [, BN], ReLU, conv3x3 [, BN], + input."""
    y = keras.layers.ReLU(name=f"{name}_relu1")(x)
    y = _conv(head.fusion_hidden_size, 3, f"{name}_conv1", bias=head.fusion_uses_bias)(y)
    if head.fusion_batch_norm:
        y = _batch_norm(f"{name}_bn1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(y)
    y = _conv(head.fusion_hidden_size, 3, f"{name}_conv2", bias=head.fusion_uses_bias)(y)
    if head.fusion_batch_norm:
        y = _batch_norm(f"{name}_bn2")(y)
    return keras.layers.Add(name=f"{name}_add")([y, x]) if head.fusion_residual else y


def _fusion(features: Sequence[Tensor], head: DenseHead) -> Tensor:
    """Deepest stage first: x + unit1(stage) (the stage resized to x where their sizes differ), unit2,
    upsampled (corners aligned: DPT x2, Depth Anything to the next stage's size, x2 at the last),
    then a 1x1 projection. Returns the last fused map."""
    stages = list(features)[::-1]
    fused = None
    for j, stage in enumerate(stages):
        name = f"fusion_{j}"
        if fused is None:
            fused = stage
        else:
            stage = BilinearResize(align_corners=False, name=f"{name}_match")(stage, fused)
            fused = keras.layers.Add(name=f"{name}_merge")([fused, _residual_unit(stage, head, f"{name}_residual1")])
        fused = _residual_unit(fused, head, f"{name}_residual2")
        if head.kind == "depth_anything" and j + 1 < len(stages):
            fused = BilinearResize(align_corners=True, name=f"{name}_upsample")(fused, stages[j + 1])
        else:
            fused = BilinearResize(scale=2, align_corners=True, name=f"{name}_upsample")(fused)
        fused = _conv(head.fusion_hidden_size, 1, f"{name}_projection")(fused)
    return fused


def _depth_head(x: Tensor, images: Tensor, head: DenseHead) -> Tensor:
    features = head.fusion_hidden_size
    if head.add_projection:
        x = _conv(256, 3, "head_projection")(x)
        x = keras.layers.ReLU(name="head_projection_relu")(x)
    x = _conv(features // 2, 3, "head_conv1")(x)
    if head.kind == "depth_anything":  # to the image's size (the patch grid times the patch)
        x = BilinearResize(align_corners=True, name="head_upsample")(x, images)
    else:
        x = BilinearResize(scale=2, align_corners=True, name="head_upsample")(x)
    x = _conv(head.head_hidden_size, 3, "head_conv2")(x)
    x = keras.layers.ReLU(name="head_relu")(x)
    x = _conv(1, 1, "head_conv3")(x)
    return DepthOutput(head.depth_type, head.max_depth, name="depth")(x)


def _segmentation_head(x: Tensor, head: DenseHead) -> Tensor:
    features = head.fusion_hidden_size
    x = _conv(features, 3, "head_conv", bias=False)(x)
    x = _batch_norm("head_bn")(x)
    x = keras.layers.ReLU(name="head_relu")(x)
    x = keras.layers.Dropout(head.dropout, name="head_dropout")(x)
    x = _conv(head.classes, 1, "head_classifier")(x)
    return BilinearResize(scale=2, align_corners=True, dtype="float32", name="logits")(x)


def _linear_head(maps: Sequence[Tensor], images: Tensor, head: DenseHead, patch_size: tuple[int, int]) -> Tensor:
    """DINOv2's linear protocol: the tapped patch maps concatenated, BatchNorm, a 1x1 conv to the
    classes (or to one depth value), upsampled bilinearly to the image. With `subpixel` the linear map
    gives each token's patch x patch block instead (then the resize is the identity where the image
    is a multiple of the patch)."""
    x = maps[0] if len(maps) == 1 else keras.layers.Concatenate(name="linear_concat")(list(maps))
    if head.linear_batch_norm:
        x = _batch_norm("linear_bn")(x)
    outputs = head.classes if head.task == "segmentation" else 1
    if head.subpixel:
        x = keras.layers.Conv2DTranspose(outputs, patch_size, strides=patch_size, padding="valid",
                                         name="linear_classifier")(x)
    else:
        x = _conv(outputs, 1, "linear_classifier")(x)
    x = BilinearResize(align_corners=False, dtype="float32", name="logits" if head.task == "segmentation"
                       else "linear_upsample")(x, images)
    if head.task == "depth":
        x = DepthOutput(head.depth_type, head.max_depth, name="depth")(x)
    return x


def build_head(tokens: Sequence[Tensor], images: Tensor, head: DenseHead, *, patch_size: tuple[int, int],
               prefix_tokens: int) -> Tensor:
    """The head's output for the tapped token tensors (B, T, D) of `images`: depth (B, H', W') or
    segmentation logits (B, H', W', classes)."""
    readout = head.readout if head.kind == "dpt" else "ignore"
    maps = [TokenMap(patch_size, prefix_tokens, readout, name=f"reassemble_{i}_readout")(t, images)
            for i, t in enumerate(tokens)]
    if head.kind == "linear":
        return _linear_head(maps, images, head, patch_size)
    fused = _fusion(_reassemble(maps, head), head)
    if head.task == "depth":
        return _depth_head(fused, images, head)
    return _segmentation_head(fused, head)
