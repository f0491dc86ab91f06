"""ViTConfig: every architectural option of a VisionTransformer, checked once, and what follows from them.

The model, the presets, the checkpoint readers and writers and the recipes all speak it: an option is
one field here (checked in `__post_init__`) plus its uses. What follows from the fields (the patch
grid, the effective patch size, the stem's stride, the tokens before the patches) is computed here
and only here, and handed down to the layers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any

import numpy as np

from keras_vit._common import check_keywords, is_int, shown
from keras_vit._common import to_pair as _pair
from keras_vit.images import view_policy
from keras_vit.layers import PREFIX_POSEMB, check_mlp_activation, grid_size
from keras_vit.presets import canonical_variant, preset_of
from keras_vit.rope import check_rope
from keras_vit.stem import ROOTS, check_first_stride, check_norm, stem_stride

CLASSIFIERS = ("token", "gap")
POOLINGS = ("token", "gap", "avg", "max", "map", "unpooled")
# Bounds far beyond any published ViT (ViT-22B: width 6144, MLP 24576, depth 48, 48 heads, 22B parameters)
# and low enough that a mistyped or hostile value is refused before a layer allocates anything.
MAX_WIDTH = 2**17  # hidden_size, mlp_dim, representation_size
MAX_DEPTH = 2**12
MAX_TOKENS = 2**20  # patch grid cells at image_size (a 16384 x 16384 image in 16 x 16 patches)
MAX_CLASSES = 2**24
MAX_CHANNELS = 2**12
MAX_REGISTERS = 2**12
MAX_PARAMETERS = 2**36  # 69 billion
# The fields a preset fixes (presets.py's `sizes`); a model differing in one is not that variant.
SIZE_ARGS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "resnet")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ViTConfig:
    """The architecture of a VisionTransformer: every option, checked (each bad value named) and
    normalized when the config is made, and what follows from them (`grid`, `effective_patch`,
    `stem_stride`, `num_prefix_tokens`).

    `VisionTransformer(config)` builds it, `model.config` gives it back, and `model.get_config()` is
    its `to_dict()` plus the model's name. Fields take the forms VisionTransformer took (an int for a
    square size, a list for a tuple) and hold the normalized ones (pairs, tuples, floats).

    Attributes:
        image_size: (height, width) of the input images (an int for a square).
        channels: the input's channels, 3 for RGB (the released checkpoints' count); any other count
            (grayscale, RGBA, multispectral) for models trained from scratch: the patch projection (and a
            hybrid's root convolution) takes them all.
        patch_size: (ph, pw); for hybrids, the patch size on the stem's feature map.
        hidden_size: the Transformer's width (each token's size).
        num_layers: its depth, the number of Transformer blocks.
        num_heads: the attention heads of each block.
        mlp_dim: the hidden width of each block's MLP.
        classes: the head's width.
        include_top: with the head (logits) or without (the pooled representation).
        classifier: "token" (a class token, read out at position 0) or "gap" (no class token; the mean
            over all tokens).
        representation_size: width of the pre-logits layer (Dense + tanh), or None.
        resnet: None, or `dict(num_layers=(3, 4, 9), width_factor=1)` for a hybrid with a BiT ResNet-v2
            stem; `num_layers=()` keeps its root block only; `root="small"` replaces the root's 7x7/2
            conv and max-pool by a 3x3/1 conv, for small images (CIFAR's 32x32) that the official root
            would shrink to 8x8 before any stage; `norm="batch"` trains the stem with BatchNorm and plain
            convolutions in place of BiT's GroupNorm and weight standardization (from scratch only: no
            checkpoint has it); `first_stride=2` gives the first stage stride 2 (BiT's has 1), so after a
            "small" root only the root conv runs at full resolution (the official layout cannot hold it
            either). Held without the defaults' keys (root "bit", norm "group", first_stride 1), as the
            official hybrids' configs always were.
        dropout_rate: dropout after the position embeddings and in the MLP.
        attention_dropout_rate: dropout on the attention probabilities.
        drop_path_rate: stochastic depth of the last block; it grows linearly from 0 over the blocks.
        classifier_activation: activation on the head, e.g. "softmax"; None gives logits.
        pooling: how the encoded tokens are pooled: None (as the classifier), "token", "gap" (alias
            "avg"; the mean over the patch tokens), "max" (the maximum over the patch tokens, per
            feature), "map" (one learned query attending over the patch tokens) or "unpooled" (all
            tokens, (B, T, D)).
        approximate_gelu: True for the tanh GELU the official checkpoints were trained with, False for
            the exact erf form.
        class_names: optional names of the head's classes, saved with the model (`decode_predictions`
            and `keras-vit predict` use them).
        attention_implementation: "auto", "matmul", "dot_product_attention" or "chunked" (memory linear
            in the tokens), how the blocks compute attention (see `Attention`); no variable depends on it.
        remat: True recomputes each block's activations in the backward pass instead of storing them
            (see `TransformerBlock`): training at high resolution in a fraction of the memory.
        variant: the preset this model is ("B/16", ...), checked against the sizes; None for another
            model.
        dynamic_image_size: False for a model of one input size; True for one that takes images of any
            size (input (None, None, C)) that is a multiple of `effective_patch`, with the position
            embeddings, stored for `image_size`, resampled inside the graph to each batch's own grid.
        posemb_resample: how a dynamic model resamples its position embeddings: "official"
            (corner-aligned bilinear, as the official fine-tuning code and
            `keras_vit.resample_position_embeddings`), "bilinear" or "bicubic".
        layer_norm_epsilon: epsilon of every LayerNorm (1e-6 as the official code; the Hugging Face
            transformers ViT uses 1e-12).
        fc_norm: False (the paper): the last LayerNorm ("encoder_norm") normalizes every token before
            pooling; True: it normalizes the pooled features instead ("fc_norm", timm's placement for
            average-pooled models).
        pixel_mean: the per-channel (R, G, B) mean, on the [0, 1] pixel scale, that the model's inputs
            were normalized with: x = (pixels / 255 - mean) / std. The default 0.5 (with `pixel_std`
            0.5) is the official [-1, 1] scaling; `preprocess_input(x, model=model)` and exports use the
            model's values.
        pixel_std: the per-channel standard deviation of that normalization (default 0.5).
        distillation: DeiT's distillation token (Touvron et al., 2021), timm's layout: a second learned
            token after the class token ([cls, dist, patches], position embeddings over all three
            kinds), a second head "head_dist" on it beside "head" on the class token; the model's logits
            are the mean of the two heads (DeiT's inference), its pooled representation the mean of the
            two tokens (timm's). Needs classifier="token", no representation_size, no fc_norm. Training
            the two heads apart: `keras_vit.distill`.
        crop_pct: how an image of any size becomes the model's input at evaluation
            (`keras_vit.images.model_view`, used by training's evaluation, predict, fewshot, visualize
            and every export's graph): the central `crop_pct` of the shorter side, resized to the
            model's size (1.0, the default: the whole image, the paper's plain resize).
        interpolation: the resize of that view, "bilinear" (default) or "bicubic", antialiased when
            shrinking.
        layer_scale: None (the paper), or LayerScale's initial value (CaiT, DINOv2's 1e-5): a learned
            per-channel gain on both residual branches of every block.
        register_tokens: learned register tokens (Darcet et al., 2024) after the class (and
            distillation) token: [cls, registers, patches]; 0 for none.
        prefix_posemb: which prefix tokens have position embeddings: "all" (the paper, timm's default),
            "class" (the class and distillation tokens, not the registers: transformers'
            Dinov2WithRegisters) or "none" (the patches only: timm's no_embed_class).
        pre_norm: a LayerNorm ("pre_norm") on the embedded tokens before the first block (CLIP's).
        patch_bias: whether the patch projection has a bias (CLIP's has none).
        mlp_activation: None (GELU as `approximate_gelu` says), "gelu_tanh", "gelu", "quick_gelu"
            (x * sigmoid(1.702 x), OpenAI's CLIP) or "swiglu" (the first MLP Dense 2 * mlp_dim wide,
            silu(first half) * second half: DINOv2 giant). pooling="map" uses it too.
        relative_position_bias: BEiT's learned relative position bias in every block's attention (a
            table of (2gh-1)(2gw-1)+3 entries per head, over `grid` and the class token); such a model
            takes its own image size only.
        absolute_position_embeddings: False for a model without the absolute position table (BEiT, DINOv3).
        rope: rotary position embeddings on every block's queries and keys (the patches', not the class or
            register tokens'; `keras_vit.rope`): None (the paper), "dinov3" (patch centres in [-1, 1],
            channels paired as halves: DINOv3) or "axial" (integer patch indices, neighbouring channels paired:
            EVA02). No weights: the angles follow each image's grid, so the model takes any size its
            absolute table (if any) allows.
        rope_temperature: the base of the RoPE frequencies; None: the kind's (100 for "dinov3", 10000 for
            "axial").
        mlp_norm: a LayerNorm on each MLP's hidden units before its second layer (EVA02's sub-LN,
            timm's `scale_mlp`).
        rope_grid: "axial" only: the reference grid (EVA02's ref_feat_shape, its pre-training grid) the patch
            indices are rescaled to, t = k / n * ref, at every size; None: the indices themselves.
        rope_offset: added to every RoPE coordinate before that rescaling (Perception Encoder's 1.0:
            t = (k + 1) / n * ref).
        rope_xy: the RoPE angles of the columns before the rows' (timm's grid_indexing 'xy', Perception
            Encoder's); False: rows first.
        pool_heads: the "map" pooling's attention heads; None: `num_heads` (Perception Encoder's pool has 8).
        pool_mlp_dim: the "map" pooling's MLP width; None: `mlp_dim`.
        pool_prefix: the "map" pooling attends over the prefix tokens too (Perception Encoder's pool reads
            [class, patches]); False: over the patches (timm's ViT).

    Example:
    >>> config = ViTConfig(image_size=48, patch_size=4, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128,
    ...                    resnet=dict(num_layers=(), root="small"))
    >>> config.grid, config.effective_patch, config.stem_stride, config.num_prefix_tokens
    ((12, 12), (4, 4), 1, 1)
    >>> ViTConfig.from_preset("B/16", image_size=384).grid
    (24, 24)
    >>> ViTConfig(hidden_size=30, num_heads=4)
    Traceback (most recent call last):
    ValueError: hidden_size 30 is not divisible by num_heads 4.
    """

    image_size: tuple[int, int] = (224, 224)
    channels: int = 3
    patch_size: tuple[int, int] = (16, 16)
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    classes: int = 1000
    include_top: bool = True
    classifier: str = "token"
    representation_size: int | None = None
    resnet: dict[str, Any] | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    classifier_activation: str | None = None
    pooling: str | None = None
    approximate_gelu: bool = True
    class_names: tuple[str, ...] | None = None
    attention_implementation: str = "auto"
    remat: bool = False
    variant: str | None = None
    dynamic_image_size: bool = False
    posemb_resample: str = "official"
    layer_norm_epsilon: float = 1e-6
    fc_norm: bool = False
    pixel_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    pixel_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    distillation: bool = False
    crop_pct: float = 1.0
    interpolation: str = "bilinear"
    layer_scale: float | None = None
    register_tokens: int = 0
    prefix_posemb: str = "all"
    pre_norm: bool = False
    patch_bias: bool = True
    mlp_activation: str | None = None
    relative_position_bias: bool = False
    absolute_position_embeddings: bool = True
    rope: str | None = None
    rope_temperature: float | None = None
    rope_grid: tuple[int, int] | None = None
    mlp_norm: bool = False
    rope_offset: float = 0.0
    rope_xy: bool = False
    pool_heads: int | None = None
    pool_mlp_dim: int | None = None
    pool_prefix: bool = False

    def __post_init__(self) -> None:
        _check(self, functools.partial(object.__setattr__, self))

    def __hash__(self) -> int:  # the one mutable field, `resnet`, hashed by its items
        resnet = None if self.resnet is None else tuple(sorted(self.resnet.items()))
        return hash(tuple(resnet if f.name == "resnet" else getattr(self, f.name) for f in dataclasses.fields(self)))

    @classmethod
    def from_preset(cls, variant: str, **overrides: Any) -> ViTConfig:
        """A named variant's config ("B/16", "ViT-L_16", "R50+ViT-B_16", ...; `keras_vit.presets.PRESETS`),
        `overrides` replacing its fields. Its `variant` is the preset's name unless they change its sizes.

        Example:
        >>> ViTConfig.from_preset("ViT-Ti_16", classes=10).variant, ViTConfig.from_preset("Ti/16", num_layers=2).variant
        ('Ti/16', None)
        """
        check_keywords(overrides, field_names(), "ViTConfig.from_preset")
        name = canonical_variant(variant)
        fields = {**preset_of(name).sizes, **overrides}
        if "variant" not in overrides:
            fields["variant"] = None if _size_mismatches(preset_of(name).sizes, fields) else name
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (`dataclasses.asdict`; `class_names` a list, as saved configs hold it):
        `ViTConfig(**config.to_dict()) == config`.

        Example:
        >>> ViTConfig(**ViTConfig(classes=3, class_names=["a", "b", "c"]).to_dict()).class_names
        ('a', 'b', 'c')
        """
        fields = dataclasses.asdict(self)
        if fields["class_names"] is not None:
            fields["class_names"] = list(fields["class_names"])
        return fields

    @property
    def stem_stride(self) -> int:
        """How much the hybrid's ResNet stem shrinks the image (1 without a stem)."""
        if self.resnet is None:
            return 1
        return stem_stride(self.resnet["num_layers"], self.resnet.get("root", "bit"),
                           self.resnet.get("first_stride", 1))

    @property
    def effective_patch(self) -> tuple[int, int]:
        """The patch size in input pixels: `patch_size`, times the stem's stride for hybrids."""
        return self.stem_stride * self.patch_size[0], self.stem_stride * self.patch_size[1]

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid (gh, gw) at `image_size`: where the position embeddings (and BEiT's relative
        position bias) are stored. The one place it is computed; an image size that is not a multiple
        of `effective_patch` is refused here (pixels would be cropped)."""
        if self.resnet is None:
            return grid_size(self.image_size, self.patch_size)
        (h, w), (ph, pw) = self.image_size, self.effective_patch
        if h % ph or w % pw:
            raise ValueError(
                f"image_size {self.image_size} is not a multiple of the hybrid's effective patch size "
                f"{(ph, pw)} (stem stride {self.stem_stride} x patch {self.patch_size}); pixels would be cropped."
            )
        return h // ph, w // pw

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the patches: class, distillation and register tokens."""
        return int(self.classifier == "token") + int(self.distillation) + self.register_tokens

    @property
    def parameter_count(self) -> int:
        """The number of values in the model's weights (`model.count_params()`), counted from the fields
        alone: what building it would allocate, known before anything is built.

        Example:
        >>> ViTConfig.from_preset("B/16").parameter_count  # ViT-B/16 at 224 px with a 1000-class head
        86567656
        """
        return _parameter_count(self)


def _refuse_unknown_fields(init):
    """The dataclass's __init__, refusing a misspelled field by `check_keywords` (naming the field meant)
    rather than by Python's bare "unexpected keyword argument"; `dataclasses.replace` goes through it too."""
    @functools.wraps(init)
    def checked(self, *args, **fields):
        if args:
            raise TypeError(f"ViTConfig takes its fields by keyword (image_size=..., patch_size=...), got {args!r}.")
        check_keywords(fields, field_names(), "ViTConfig")
        init(self, **fields)
    return checked


ViTConfig.__init__ = _refuse_unknown_fields(ViTConfig.__init__)  # type: ignore[method-assign]


@functools.lru_cache(maxsize=1)
def field_names() -> frozenset[str]:
    """The names of ViTConfig's fields."""
    return frozenset(f.name for f in dataclasses.fields(ViTConfig))


def _check(c, set_):
    """The fields checked (each bad value named), in the order VisionTransformer always checked them,
    and normalized with `set_(name, value)`."""
    set_("image_size", _pair(c.image_size, "image_size"))
    set_("patch_size", _pair(c.patch_size, "patch_size"))
    for what, low, high in (("hidden_size", 1, MAX_WIDTH), ("num_layers", 0, MAX_DEPTH), ("num_heads", 1, MAX_WIDTH),
                            ("mlp_dim", 1, MAX_WIDTH), ("register_tokens", 0, MAX_REGISTERS),
                            ("channels", 1, MAX_CHANNELS)):
        set_(what, _integer(getattr(c, what), what, low, high))
    if c.representation_size is not None:
        set_("representation_size", _integer(c.representation_size, "representation_size", 1, MAX_WIDTH))
    if c.classes is not None and c.include_top is not False:
        set_("classes", _integer(c.classes, "classes", 1 if c.include_top else 0, MAX_CLASSES))
    for what in ("include_top", "approximate_gelu", "fc_norm", "distillation", "pre_norm", "patch_bias",
                 "relative_position_bias", "absolute_position_embeddings", "dynamic_image_size", "remat",
                 "mlp_norm", "rope_xy", "pool_prefix"):
        set_(what, _flag(getattr(c, what), what))
    for what in ("dropout_rate", "attention_dropout_rate", "drop_path_rate", "layer_norm_epsilon", "crop_pct"):
        set_(what, _real(getattr(c, what), what))
    if c.layer_scale is not None:
        set_("layer_scale", _real(c.layer_scale, "layer_scale"))
    for what in ("classifier", "posemb_resample", "interpolation", "prefix_posemb", "attention_implementation"):
        if not isinstance(getattr(c, what), str):
            raise ValueError(f"{what} must be a string, got {getattr(c, what)!r} ({type(getattr(c, what)).__name__}).")
    if c.layer_norm_epsilon <= 0:
        raise ValueError(f"layer_norm_epsilon must be positive, got {c.layer_norm_epsilon}.")
    if c.variant is not None:
        set_("variant", _check_variant(c.variant, c))
    set_("pixel_mean", _pixel_stats(c.pixel_mean, "pixel_mean"))
    set_("pixel_std", _pixel_stats(c.pixel_std, "pixel_std"))
    if min(c.pixel_std) <= 0:
        raise ValueError(f"pixel_std must be positive, got {c.pixel_std}.")
    crop_pct, interpolation = view_policy(crop_pct=c.crop_pct, interpolation=c.interpolation)
    set_("crop_pct", crop_pct)
    set_("interpolation", interpolation)
    if c.class_names is not None:
        set_("class_names", tuple(str(name) for name in c.class_names))
        if not c.include_top or len(c.class_names) != c.classes:
            raise ValueError(f"class_names has {len(c.class_names)} names but the model has "
                             f"{c.classes if c.include_top else 'no'} classes.")
    set_("resnet", normalize_resnet(c.resnet))
    if c.classifier not in CLASSIFIERS:
        raise ValueError(f"Unknown classifier {c.classifier!r}; use one of {CLASSIFIERS}.")
    if c.pooling is not None and c.pooling not in POOLINGS:
        raise ValueError(f"Unknown pooling {c.pooling!r}; use None or one of {POOLINGS}.")
    if c.pooling == "token" and c.classifier != "token":
        raise ValueError(f"pooling='token' needs a class token, but classifier={c.classifier!r} has none.")
    if c.hidden_size % c.num_heads:
        raise ValueError(f"hidden_size {c.hidden_size} is not divisible by num_heads {c.num_heads}.")
    for what in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
        if not 0.0 <= getattr(c, what) < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {getattr(c, what)}.")
    if c.rope_temperature is not None:
        set_("rope_temperature", _real(c.rope_temperature, "rope_temperature"))
    if c.rope_grid is not None:
        set_("rope_grid", _pair(c.rope_grid, "rope_grid"))
    set_("rope_offset", _real(c.rope_offset, "rope_offset"))
    check_rope(c.rope, c.hidden_size // c.num_heads, c.rope_temperature, c.rope_grid, c.rope_offset, c.rope_xy)
    for what, high in (("pool_heads", MAX_WIDTH), ("pool_mlp_dim", MAX_WIDTH)):
        if getattr(c, what) is not None:
            set_(what, _integer(getattr(c, what), what, 1, high))
    pooled_map = (c.pooling or c.classifier) == "map"
    if not pooled_map and (c.pool_heads is not None or c.pool_mlp_dim is not None or c.pool_prefix):
        raise ValueError(f"pool_heads={c.pool_heads!r} / pool_mlp_dim={c.pool_mlp_dim!r} / pool_prefix={c.pool_prefix!r} "
                         f"are the attention pool's: they need pooling='map', got pooling={c.pooling!r}.")
    if c.pool_heads is not None and c.hidden_size % c.pool_heads:
        raise ValueError(f"hidden_size {c.hidden_size} is not divisible by pool_heads {c.pool_heads}.")
    if c.rope is not None and c.relative_position_bias:
        raise ValueError(f"rope={c.rope!r} with relative_position_bias=True: a model takes one kind of relative "
                         "position (RoPE or BEiT's bias table), not both.")
    if c.relative_position_bias:  # its table is over one grid of patches and a class token
        clash = [f"{k}={getattr(c, k)!r}" for k, ok in (("classifier", c.classifier == "token"),
                                                       ("distillation", not c.distillation),
                                                       ("register_tokens", not c.register_tokens),
                                                       ("dynamic_image_size", not c.dynamic_image_size),
                                                       ("resnet", c.resnet is None)) if not ok]
        if clash:
            raise ValueError(f"relative_position_bias (BEiT: a class token, one patch grid) does not go with "
                             f"{', '.join(clash)}.")
    if c.prefix_posemb not in PREFIX_POSEMB:
        raise ValueError(f"Unknown prefix_posemb {c.prefix_posemb!r}; use one of {PREFIX_POSEMB}.")
    set_("mlp_activation", check_mlp_activation(c.mlp_activation))
    if c.distillation:
        # transformers' DeiTModel: a pre-logits Dense + tanh on the class token, no head
        pooler_ok = c.representation_size is None or not c.include_top
        clash = [f"{k}={getattr(c, k)!r}" for k, ok in (("classifier", c.classifier == "token"),
                                                       ("representation_size", pooler_ok),
                                                       ("fc_norm", not c.fc_norm)) if not ok]
        if c.include_top and c.pooling not in (None, "token"):
            clash.append(f"pooling={c.pooling!r} with include_top=True (the two heads read the two tokens)")
        if clash:
            raise ValueError(f"distillation=True (DeiT: class and distillation tokens, one head on each) does not "
                             f"go with {', '.join(clash)}; use classifier='token', representation_size=None "
                             "(or include_top=False), fc_norm=False.")
    gh, gw = c.grid  # refuses an image size that is not a multiple of the effective patch
    if gh * gw > MAX_TOKENS:
        raise ValueError(f"image_size {c.image_size} with patch_size {c.patch_size} makes a {gh}x{gw} grid, "
                         f"{gh * gw:,} tokens; keras-vit builds at most {MAX_TOKENS:,} (give a smaller image_size).")
    count = _parameter_count(c)
    if count > MAX_PARAMETERS:
        raise ValueError(f"this config describes a model of {count:,} parameters (hidden_size {c.hidden_size}, "
                         f"num_layers {c.num_layers}, mlp_dim {c.mlp_dim}, a {gh}x{gw} grid); keras-vit builds at most "
                         f"{MAX_PARAMETERS:,}.")


def normalize_resnet(resnet: dict[str, Any] | None) -> dict[str, Any] | None:
    """A hybrid's `resnet` option checked, with tuples for lists and without the defaults' keys."""
    if resnet is None:
        return None
    if not isinstance(resnet, dict) or set(resnet) - {"num_layers", "width_factor", "root", "norm", "first_stride"}:
        raise ValueError(
            "resnet must be None or a dict(num_layers=(3, 4, 9), width_factor=1, root='bit', norm='group', "
            f"first_stride=1), got {resnet!r}."
        )
    num_layers = resnet.get("num_layers", (3, 4, 9))
    if (isinstance(num_layers, (str, bytes, dict)) or not hasattr(num_layers, "__iter__")
            or len(num_layers := tuple(num_layers)) > 8 or not all(is_int(n) and 1 <= n <= MAX_DEPTH for n in num_layers)):
        raise ValueError(f"resnet num_layers must be up to 8 positive unit counts per stage, got {num_layers!r}.")
    width_factor = resnet.get("width_factor", 1)
    if (isinstance(width_factor, (bool, np.bool_)) or not isinstance(width_factor, (int, float))
            or not 0 < width_factor <= 64 or int(64 * width_factor) < 1):
        raise ValueError(f"resnet width_factor must be a number in (0, 64] (1 for BiT-R50), got {width_factor!r}.")
    normalized = {"num_layers": tuple(int(n) for n in num_layers), "width_factor": width_factor}
    root = resnet.get("root", "bit")
    if root not in ROOTS:
        raise ValueError(f"resnet root must be one of {sorted(ROOTS)}, got {root!r}.")
    if root != "bit":  # configs of the official hybrids stay as they were
        normalized["root"] = root
    norm = check_norm(resnet.get("norm", "group"))
    if norm != "group":
        normalized["norm"] = norm
    first_stride = check_first_stride(resnet.get("first_stride", 1))
    if first_stride != 1:
        normalized["first_stride"] = first_stride
    return normalized


def _size_mismatches(sizes, fields):
    """The size fields in which `fields` (a dict, not yet checked) differ from a preset's `sizes`."""
    differ = []
    for key in SIZE_ARGS:
        want, got = sizes.get(key), fields.get(key)
        if key == "patch_size":
            want, got = _pair(want, key), _pair(got, key)
        elif key == "resnet":
            want, got = normalize_resnet(want), normalize_resnet(got)
        elif got is not None:
            got = int(got)
        if want != got:
            differ.append(f"{key}={got!r} (the preset's is {want!r})")
    return differ


def _check_variant(variant, c):
    name = canonical_variant(variant)
    differ = _size_mismatches(preset_of(name).sizes, {key: getattr(c, key) for key in SIZE_ARGS})
    if differ:
        raise ValueError(f"variant={variant!r} does not describe this model: {', '.join(differ)}.")
    return name


def _pixel_stats(values, what):
    if isinstance(values, (str, bytes, dict)):
        raise ValueError(f"{what} must be 3 numbers (R, G, B), got {values!r}.")
    values = tuple(_real(v, what) for v in (values if hasattr(values, "__len__") else (values,) * 3))
    if len(values) != 3:
        raise ValueError(f"{what} must be 3 numbers (R, G, B), got {values}.")
    return values


def _integer(value, what, low, high):
    """`value` as an int in [low, high], else a ValueError naming `what`: a string, a float or a bool is no
    int (JSON's "2" or 2.5 is a mistake to name, not to round)."""
    positive = "a positive int" + (" (3 for RGB)" if what == "channels" else "")
    if not is_int(value):
        kind = positive if low == 1 else "an int >= 0"
        raise ValueError(f"{what} must be {kind}, got {shown(value)} ({type(value).__name__}).")
    if value < low:
        raise ValueError(f"{what} must be {positive if low == 1 else '>= 0'}, got {value}.")
    if value > high:
        raise ValueError(f"{what} must be at most {high:,} (far beyond any published ViT), got {value:,}.")
    return int(value)


def _flag(value, what):
    if isinstance(value, (bool, np.bool_)) or is_int(value) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{what} must be True or False, got {shown(value)} ({type(value).__name__}).")


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _real(value, what):
    """`value` as a float the float32 variables it initializes can hold, else a ValueError naming `what`."""
    try:
        size = None if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) else abs(float(value))
    except OverflowError:  # an int beyond any float
        size = math.inf
    if size is None or not math.isfinite(size):
        raise ValueError(f"{what} must be a finite number, got {shown(value)} ({type(value).__name__}).")
    if size > _FLOAT32_MAX:
        raise ValueError(f"{what} must fit in float32 (at most {_FLOAT32_MAX:.4g} in size), got {shown(value)}.")
    return float(value)


def _parameter_count(c):
    """ViTConfig.parameter_count: every variable the model's layers create, by the layers' own rules."""
    d, m = c.hidden_size, c.mlp_dim
    dense = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731
    count, features = 0, c.channels
    if c.resnet is not None:
        count, features = _stem_parameters(c.resnet, c.channels)
    ph, pw = c.patch_size
    count += ph * pw * features * d + d * c.patch_bias
    count += d * (int(c.classifier == "token") + int(c.distillation) + c.register_tokens)
    if c.absolute_position_embeddings:
        posemb_prefix = {"all": c.num_prefix_tokens, "none": 0,
                         "class": int(c.classifier == "token") + int(c.distillation)}[c.prefix_posemb]
        count += (posemb_prefix + c.grid[0] * c.grid[1]) * d
    count += 2 * d * c.pre_norm
    width = 2 * m if c.mlp_activation == "swiglu" else m
    block = 2 * 2 * d + 4 * dense(d, d) + dense(d, width) + dense(m, d) + 2 * d * (c.layer_scale is not None)
    block += 2 * m * c.mlp_norm
    if c.relative_position_bias:
        gh, gw = c.grid
        block += ((2 * gh - 1) * (2 * gw - 1) + 3) * c.num_heads
    count += c.num_layers * block
    count += 2 * d  # encoder_norm, or fc_norm after pooling
    if (c.pooling or c.classifier) == "map":
        pool_m = m if c.pool_mlp_dim is None else c.pool_mlp_dim
        count += d + 4 * dense(d, d) + 2 * d + dense(d, pool_m) + dense(pool_m, d)
    pooled = d
    if c.representation_size is not None:
        count += dense(d, c.representation_size)
        pooled = c.representation_size
    if c.include_top:
        count += dense(pooled, c.classes) * (2 if c.distillation else 1)
    return count


def _stem_parameters(resnet, channels):
    """(parameters, output channels) of the BiT stem (stem.py): convolutions without bias, two values per
    GroupNorm channel, four per BatchNorm channel (its moving statistics are weights too)."""
    norm = 4 if resnet.get("norm", "group") == "batch" else 2
    width = int(64 * resnet.get("width_factor", 1))
    kernel = 7 if resnet.get("root", "bit") == "bit" else 3
    count, features = kernel * kernel * channels * width + norm * width, width
    for i, units in enumerate(resnet["num_layers"]):
        mid = width * 2**i
        for j in range(units):
            stride = (2 if i > 0 else resnet.get("first_stride", 1)) if j == 0 else 1
            if features != 4 * mid or stride != 1:
                count += features * 4 * mid + norm * 4 * mid
            count += features * mid + 9 * mid * mid + mid * 4 * mid + norm * (mid + mid + 4 * mid)
            features = 4 * mid
    return count, features
