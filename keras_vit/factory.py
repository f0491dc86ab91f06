"""Models with their weights: `create_model` and the keras.applications-style constructors (ViTB16, ...).

As keras.applications' builders do, they build the architecture (`VisionTransformer` of a
`ViTConfig`, keras_vit/models.py) and then call the loader (`keras_vit.checkpoints.load_weights`)
for `weights=`: this module sits above both, so the model class knows nothing of files.

Example:
>>> model = create_model("Ti/16", image_size=32, classes=10)  # weights="augreg": a release, downloaded once
>>> model.config.grid, model.variant
((2, 2), 'Ti/16')
"""

from __future__ import annotations

from typing import Any, Sequence

import keras

from keras_vit._common import check_keywords, keywords_of
from keras_vit._common import to_pair as _pair
from keras_vit.checkpoints import load_weights
from keras_vit.config import ViTConfig
from keras_vit.formats import timm
from keras_vit.models import MODEL_KEYWORDS, VisionTransformer, vit_keywords
from keras_vit.presets import PRESETS, timm_family


def create_model(variant: str, *, weights: str | None = None, name: str | None = None,
                 input_tensor: keras.KerasTensor | None = None, **fields: Any) -> VisionTransformer:
    """A VisionTransformer of a named variant ("B/16", "ViT-L_16", "R50+ViT-B_16", ...) or of a timm
    architecture ("vit_small_patch14_dinov2", "deit_base_distilled_patch16_224", ...), with its weights.

    Keyword arguments are `ViTConfig` fields that override the variant's (`ViTConfig.from_preset`);
    the model's `variant` is the preset's name unless they change its sizes. A timm architecture name
    builds what keras-vit's timm reader builds for a checkpoint of that name (DeiT's distillation
    token, DINOv2's LayerScale and registers, CLIP's pre-norm, SigLIP's attention pool, BEiT's relative
    position bias, ...; `keras_vit.presets.TIMM_FAMILIES`), 1000 classes unless `classes` or
    `include_top` say otherwise; its parameter count is timm's (`keras_vit.presets.TIMM_PRESETS` lists
    the families' published sizes).

    Args:
        variant: the preset, by any of its names (`keras_vit.presets.PRESETS`), or a timm
            architecture name (`keras_vit.presets.TIMM_ARCHITECTURES`).
        weights: None, a path to an official `.npz`, a `.keras` or `.weights.h5` file, or a released
            checkpoint name ("imagenet", "imagenet21k", "augreg", ...), loaded by
            `keras_vit.checkpoints.load_weights` (resampled to the model's grid if need be).
        name: the model's name.
        input_tensor: an optional Keras tensor to build the model on.
        **fields: `ViTConfig` fields (image_size, classes, dropout_rate, ...) and `trainable`.

    Example:
    >>> create_model("Ti/16", image_size=384, classes=10).count_params()
    5599306
    >>> model = create_model("vit_small_patch14_reg4_dinov2", image_size=56, include_top=False)
    >>> model.config.register_tokens, model.config.layer_scale, model.config.grid, model.output_shape
    (4, 1e-05, (4, 4), (None, 384))
    """
    check_keywords(fields, vit_keywords(), "create_model")
    trainable = {key: fields.pop(key) for key in MODEL_KEYWORDS if key in fields}
    if timm_family(str(variant)) is not None:
        config = timm_config(str(variant), **fields)
    else:
        config = ViTConfig.from_preset(variant, **fields)
    model = VisionTransformer(config, name=name, input_tensor=input_tensor, **trainable)
    if weights is not None:
        load_weights(model, weights)
    return model


def timm_config(architecture: str, **overrides: Any) -> ViTConfig:
    """The ViTConfig of a timm architecture name, as keras-vit's timm reader reads a checkpoint of that
    name with no model_args (`keras_vit.formats.timm.args_from_config`), `overrides` replacing its fields.

    Example:
    >>> config = timm_config("vit_base_patch16_siglip_224", classes=10)
    >>> config.pooling, config.classifier, config.classes, config.mlp_dim
    ('map', 'gap', 10, 3072)
    """
    check_keywords(overrides, vit_keywords() - set(MODEL_KEYWORDS), "timm_config")
    args, _ = timm.args_from_config({"architecture": architecture}, None, f"timm architecture {architecture!r}")
    args.pop("class_names", None)  # none without a config's label names
    return ViTConfig(**{**args, **overrides})


def _application(variant, include_top=True, weights=None, input_tensor=None, input_shape=None, pooling=None,
                 classes=1000, classifier_activation="softmax", name=None, **kwargs):
    """The one builder behind the keras.applications-style constructors."""
    check_keywords(kwargs, vit_keywords() | keywords_of(_application), PRESETS[variant].constructor)
    if input_shape is None:
        input_shape = tuple(input_tensor.shape[1:]) if input_tensor is not None else (224, 224, 3)
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or input_shape[-1] is None or (input_shape[0] is None) != (input_shape[1] is None):
        raise ValueError(
            f"input_shape must be (height, width, channels), or (None, None, channels) for a model that "
            f"takes any size, got {input_shape}."
        )
    if input_tensor is not None and tuple(input_tensor.shape[1:]) != input_shape:
        raise ValueError(f"input_shape {input_shape} does not match input_tensor's shape {tuple(input_tensor.shape)}.")
    if input_shape[0] is None:  # any size; position embeddings stored for image_size (224 by default)
        kwargs["dynamic_image_size"] = True
        input_shape = tuple(_pair(kwargs.pop("image_size", 224), "image_size")) + input_shape[2:]
    if input_tensor is None:
        kwargs["channels"] = input_shape[2]
    return create_model(
        variant,
        image_size=tuple(input_shape[:2]),
        classes=classes,
        include_top=include_top,
        classifier_activation=classifier_activation if include_top else None,
        weights=weights,
        name=name or PRESETS[variant].constructor.lower(),
        pooling=pooling,
        input_tensor=input_tensor,
        **kwargs,
    )


_APPLICATION_DOC = """
    The keras.applications signature; further keywords (classifier, representation_size,
    dropout_rate, drop_path_rate, ...) pass on to `VisionTransformer`.

    Args:
        include_top: with the classification head.
        weights: None, a path to an official `.npz` or `.weights.h5`, or a released
            checkpoint name: "imagenet" (the ImageNet-1k fine-tuned release of the variant,
            see `keras_vit.presets.PRESETS[variant].imagenet`), "imagenet21k", "imagenet21k+imagenet2012",
            AugReg names; `keras_vit.presets.PRESETS[variant].weights` lists what exists.
        input_tensor: optional Keras tensor to build the model on.
        input_shape: (height, width, channels), default (224, 224, 3); other channel
            counts than 3 only with weights=None; (None, None, channels) for a model that
            takes any size (position embeddings stored at 224, or `image_size=`).
        pooling: None (the classifier's own), "token", "gap"/"avg", "max" or "unpooled".
        classes: number of classes of the head.
        classifier_activation: activation of the head; None returns logits.
        name: the model's name, by default the function's in lower case.
"""


def _documented(variant):
    """Adds the shared Args section and checks the function is the preset's constructor."""
    def wrap(fn):
        if PRESETS[variant].constructor != fn.__name__:
            raise AssertionError(f"presets name {PRESETS[variant].constructor} for {variant}, not {fn.__name__}")
        fn.__doc__ = fn.__doc__.rstrip() + "\n" + _APPLICATION_DOC.format(fn=fn.__name__)
        return fn
    return wrap


# One explicit function per preset (IDEs and docs see them); all call `_application`.
# tests/test_models.py checks this list against presets.PRESETS.

@_documented("Ti/16")
def ViTTi16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
            input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
            classifier_activation: str | None = "softmax", name: str | None = None,
            **kwargs: Any) -> VisionTransformer:
    """ViT-Ti/16: 12 layers, hidden size 192, 3 heads, MLP 768 (5.7M parameters).

    Example:
    >>> model = ViTTi16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((24, 24), (None, 10))
    """
    return _application("Ti/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("S/16")
def ViTS16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-S/16: 12 layers, hidden size 384, 6 heads, MLP 1536 (22.1M parameters).

    Example:
    >>> model = ViTS16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((24, 24), (None, 10))
    """
    return _application("S/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("S/32")
def ViTS32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-S/32: 12 layers, hidden size 384, 6 heads, MLP 1536 (22.9M parameters).

    Example:
    >>> model = ViTS32(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("S/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("B/8")
def ViTB8(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
          input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
          classifier_activation: str | None = "softmax", name: str | None = None,
          **kwargs: Any) -> VisionTransformer:
    """ViT-B/8: 12 layers, hidden size 768, 12 heads, MLP 3072 (86.6M parameters).

    Example:
    >>> model = ViTB8(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((48, 48), (None, 10))
    """
    return _application("B/8", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("B/16")
def ViTB16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-B/16: 12 layers, hidden size 768, 12 heads, MLP 3072 (86.6M parameters).

    Example:
    >>> model = ViTB16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((24, 24), (None, 10))
    """
    return _application("B/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("B/32")
def ViTB32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-B/32: 12 layers, hidden size 768, 12 heads, MLP 3072 (88.2M parameters).

    Example:
    >>> model = ViTB32(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("B/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("L/16")
def ViTL16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-L/16: 24 layers, hidden size 1024, 16 heads, MLP 4096 (304.3M parameters).

    Example:
    <!-- slow: builds a 304.3M-parameter model -->
    >>> model = ViTL16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((24, 24), (None, 10))
    """
    return _application("L/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("L/32")
def ViTL32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-L/32: 24 layers, hidden size 1024, 16 heads, MLP 4096 (306.5M parameters).

    Example:
    <!-- slow: builds a 306.5M-parameter model -->
    >>> model = ViTL32(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("L/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("H/14")
def ViTH14(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
           input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
           classifier_activation: str | None = "softmax", name: str | None = None,
           **kwargs: Any) -> VisionTransformer:
    """ViT-H/14: 32 layers, hidden size 1280, 16 heads, MLP 5120 (632.0M parameters).

    Example:
    <!-- slow: builds a 632.0M-parameter model -->
    >>> model = ViTH14(weights=None, input_shape=(392, 392, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((28, 28), (None, 10))
    """
    return _application("H/14", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("R50+B/16")
def R50ViTB16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
              input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
              classifier_activation: str | None = "softmax", name: str | None = None,
              **kwargs: Any) -> VisionTransformer:
    """R50+ViT-B/16: ResNet-50 stem (3, 4, 9), then ViT-B on its 1x1 patches (98.7M parameters).

    Example:
    >>> model = R50ViTB16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="imagenet21k": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((24, 24), (None, 10))
    """
    return _application("R50+B/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("R50+L/32")
def R50ViTL32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
              input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
              classifier_activation: str | None = "softmax", name: str | None = None,
              **kwargs: Any) -> VisionTransformer:
    """R50+ViT-L/32: ResNet-50 stem (3, 4, 6, 3), then ViT-L on its 1x1 patches (329.0M parameters).

    Example:
    <!-- slow: builds a 329.0M-parameter model -->
    >>> model = R50ViTL32(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("R50+L/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("R26+S/32")
def R26ViTS32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
              input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
              classifier_activation: str | None = "softmax", name: str | None = None,
              **kwargs: Any) -> VisionTransformer:
    """R26+ViT-S/32: ResNet-26 stem (2, 2, 2, 2), then ViT-S on its 1x1 patches (36.4M parameters).

    Example:
    >>> model = R26ViTS32(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("R26+S/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("R26+B/32")
def R26ViTB32(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
              input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
              classifier_activation: str | None = "softmax", name: str | None = None,
              **kwargs: Any) -> VisionTransformer:
    """R26+ViT-B/32: ResNet-26 stem (2, 2, 2, 2), then ViT-B on its 1x1 patches (101.4M parameters).

    Example:
    >>> model = R26ViTB32(weights=None, input_shape=(384, 384, 3), classes=10)  # no released weights
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("R26+B/32", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)


@_documented("R+Ti/16")
def RViTTi16(include_top: bool = True, weights: str | None = None, input_tensor: keras.KerasTensor | None = None,
             input_shape: Sequence[int | None] | None = None, pooling: str | None = None, classes: int = 1000,
             classifier_activation: str | None = "softmax", name: str | None = None,
             **kwargs: Any) -> VisionTransformer:
    """R+ViT-Ti/16: the ResNet root block only (stride 2), then ViT-Ti on 8x8 patches (6.3M parameters).

    Example:
    >>> model = RViTTi16(weights=None, input_shape=(384, 384, 3), classes=10)  # weights="augreg": a release
    >>> model.patch_encoder.grid_size, model.output_shape
    ((12, 12), (None, 10))
    """
    return _application("R+Ti/16", include_top, weights, input_tensor, input_shape, pooling, classes,
                        classifier_activation, name, **kwargs)
