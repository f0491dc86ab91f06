"""DensePredictor: any keras-vit backbone with a dense head (keras_vit/dense/heads.py) on its token maps.

One functional model, images -> depth (N, H', W') or segmentation logits (N, H', W', classes), built
from two configs: the backbone's `ViTConfig` and the head's `DenseHead`. The backbone is built as
`VisionTransformer` builds it (same layer names, so its checkpoint tables load it unchanged); the
head reads the tensors of the blocks its `taps` name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras

from keras_vit._common import check_keywords
from keras_vit._common import register as _register
from keras_vit.config import ViTConfig
from keras_vit.dense.config import DenseHead
from keras_vit.dense.heads import build_head
from keras_vit.models import VisionTransformer


def _backbone_config(backbone: ViTConfig | dict[str, Any]) -> ViTConfig:
    config = backbone if isinstance(backbone, ViTConfig) else ViTConfig(**backbone)
    if config.include_top or config.classes is not None or config.class_names is not None:
        config = dataclasses.replace(config, include_top=False, classes=None, class_names=None)  # type: ignore[arg-type]
    return config


def _tapped(vit: VisionTransformer, head: DenseHead) -> list[Any]:
    """The token tensors (B, T, D) of the stages `head.taps` names, through the final LayerNorm where
    `head.final_norm`."""
    bad = [t for t in head.taps if t > vit.num_layers]
    if bad:
        raise ValueError(f"DenseHead taps={head.taps}: the backbone has {vit.num_layers} blocks, no stage "
                         f"{bad[0]} (0 = the embeddings, i = block i's output).")
    norm = None
    if head.final_norm:
        try:
            norm = vit.get_layer("encoder_norm")
        except ValueError:
            raise ValueError("DenseHead final_norm=True: this backbone has no final LayerNorm over the tokens "
                             "(fc_norm normalizes the pooled token alone); use final_norm=False.") from None
    embedded = vit.stage_model("images", "embedded").outputs[0]
    tensors = [embedded if t == 0 else vit.blocks[t - 1].output for t in head.taps]
    return [norm(t) if norm is not None else t for t in tensors]


@_register
class DensePredictor(keras.Model):
    """A ViT backbone and a dense head: depth or semantic segmentation.

    Args:
        backbone: the backbone's `ViTConfig` (or its dict); its classification head is left out.
        head: the head's `DenseHead` (or its dict).

    `predict(images)` gives depth (N, H', W') for `task="depth"` or segmentation logits (N, H', W',
    classes), channels-last, for `task="segmentation"`. H', W' are the image's size for Depth
    Anything and linear heads, and 16 x the patch grid for DPT heads (as transformers' DPT: the
    image's size at patch 16; transformers' post-processing resizes to the image). Images are normalized as the
    backbone's (`pixel_mean`, `pixel_std`). A backbone built with `dynamic_image_size=True` takes any
    multiple of its patch size.

    Example:
    >>> backbone = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=4, num_heads=2,
    ...                                mlp_dim=64, dynamic_image_size=True)
    >>> head = DenseHead(kind="dpt", task="segmentation", taps=(1, 2, 3, 4), neck_hidden_sizes=(8, 16, 32, 32),
    ...                  fusion_hidden_size=16, classes=3)
    >>> model = DensePredictor(backbone, head)
    >>> tuple(model.predict(np.zeros((2, 48, 64, 3), "float32"), verbose=0).shape)  # DPT: 16 x the 6x8 grid
    (2, 96, 128, 3)
    """

    def __init__(self, backbone: ViTConfig | dict[str, Any], head: DenseHead | dict[str, Any], *,
                 name: str | None = None, trainable: bool = True, **kwargs: Any) -> None:
        check_keywords(kwargs, {"backbone", "head", "name", "trainable"}, "DensePredictor")
        backbone_config = _backbone_config(backbone)
        head_config = head if isinstance(head, DenseHead) else DenseHead.from_dict(dict(head))
        vit = VisionTransformer(backbone_config)
        images = vit.inputs[0]
        output = build_head(_tapped(vit, head_config), images, head_config,
                            patch_size=backbone_config.effective_patch, prefix_tokens=backbone_config.num_prefix_tokens)
        super().__init__(images, output, name=name or f"{head_config.kind}_{head_config.task}", trainable=trainable)
        self._backbone_config, self._head_config = backbone_config, head_config
        # Held outside Keras' tracking: its layers are already this model's (tracked twice, saving would
        # see them under two paths).
        object.__setattr__(self, "_backbone_model", vit)

    @property
    def backbone(self) -> VisionTransformer:
        """The backbone as a VisionTransformer sharing this model's layers and weights (its
        `forward_intermediates`, `stage_model`, checkpoint tables)."""
        return self._backbone_model

    @property
    def backbone_config(self) -> ViTConfig:
        return self._backbone_config

    @property
    def head_config(self) -> DenseHead:
        return self._head_config

    @property
    def task(self) -> str:
        """"depth" or "segmentation"."""
        return self._head_config.task

    @property
    def class_names(self) -> list[str] | None:
        names = self._head_config.class_names
        return list(names) if names is not None else None

    @property
    def patch_size(self) -> tuple[int, int]:
        return self._backbone_config.effective_patch

    @property
    def image_size(self) -> tuple[int, int]:
        return self._backbone_config.image_size

    @property
    def pixel_mean(self) -> tuple[float, ...] | None:
        return self._backbone_config.pixel_mean

    @property
    def pixel_std(self) -> tuple[float, ...] | None:
        return self._backbone_config.pixel_std

    @property
    def dynamic_image_size(self) -> bool:
        return self._backbone_config.dynamic_image_size

    def backbone_layers(self) -> list[keras.layers.Layer]:
        """The backbone's layers (the patch encoder, the blocks, the final LayerNorm): what a linear
        probe freezes."""
        return [layer for layer in self.backbone.layers if not isinstance(layer, keras.layers.InputLayer)]

    def freeze_backbone(self, frozen: bool = True) -> None:
        """Freezes (or unfreezes) the backbone for a linear probe / head-only training; compile after."""
        for layer in self.backbone_layers():
            layer.trainable = not frozen

    @classmethod
    def from_backbone(cls, backbone: VisionTransformer, head: DenseHead | dict[str, Any], *,
                      name: str | None = None) -> DensePredictor:
        """A DensePredictor on `backbone`'s architecture with its weights copied (the head new).

        Example:
        >>> vit = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2,
        ...                                   num_heads=2, mlp_dim=64, classes=10)
        >>> model = DensePredictor.from_backbone(vit, DenseHead(kind="linear", task="segmentation", taps=(2,),
        ...                                                     final_norm=True, classes=4))
        >>> tuple(model.predict(np.zeros((1, 32, 32, 3), "float32"), verbose=0).shape)
        (1, 32, 32, 4)
        """
        model = cls(backbone.config, head, name=name)
        own = {layer.name: layer for layer in model.backbone_layers()}
        missing = [layer.name for layer in backbone.layers if layer.weights and layer.name not in own
                   and layer.name not in ("head", "head_dist", "pre_logits")]
        if missing:
            raise ValueError(f"{backbone.name!r} has layers the rebuilt backbone lacks: {missing[:5]}.")
        for layer in backbone.layers:
            if layer.name in own and layer.weights:
                own[layer.name].set_weights(layer.get_weights())
        return model

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "trainable": self.trainable, "backbone": self._backbone_config.to_dict(),
                "head": self._head_config.to_dict()}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> DensePredictor:
        return cls(**config)
