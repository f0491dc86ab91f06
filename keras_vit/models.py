"""VisionTransformer and the keras.applications-style constructors, one per preset.

The variants themselves (sizes, names, released weights) are the table in
keras_vit/presets.py; this module builds models from it. Weights named by `weights=`
are loaded by keras_vit/checkpoints.py through `register_weights_loader`.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Sequence

import keras
from keras import ops

from keras_vit._common import Tensor, check_keywords, keywords_of
from keras_vit._common import register as _register
from keras_vit._common import to_pair as _pair
from keras_vit.images import view_policy
from keras_vit.layers import (PREFIX_POSEMB, AttentionPool, ImageSizeCheck, PatchEncoder, TransformerBlock,
                              check_mlp_activation, grid_size)
from keras_vit.presets import PRESETS, VARIANTS, canonical_variant  # noqa: F401 (VARIANTS is public here)
from keras_vit.stem import ROOTS, check_first_stride, check_norm, resnet_stem, stem_stride

CLASSIFIERS = ("token", "gap")
POOLINGS = ("token", "gap", "avg", "max", "map", "unpooled")
SIZE_ARGS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "resnet")
# What VisionTransformer passes on to keras.Model: the Functional model reads `trainable` (saved
# configs hold it) and drops any other keyword silently, so those are refused here.
MODEL_KEYWORDS = ("trainable",)

# Loading weights is keras_vit.checkpoints' job; it registers its loader here when imported
# (as `import keras_vit` does), so this module needs no import of it.
_weights_loader = None


def register_weights_loader(loader):
    """Sets the function `VisionTransformer(weights=...)` calls as loader(model, weights)."""
    global _weights_loader
    _weights_loader = loader


def _load_weights(model, weights):
    if _weights_loader is None:
        raise RuntimeError("weights= needs keras_vit.checkpoints, which registers the loader: "
                           "import keras_vit.checkpoints (or use keras_vit.VisionTransformer / the constructors "
                           "from the package, which bring it).")
    _weights_loader(model, weights)


def _normalize_resnet(resnet):
    if resnet is None:
        return None
    if not isinstance(resnet, dict) or set(resnet) - {"num_layers", "width_factor", "root", "norm", "first_stride"}:
        raise ValueError(
            "resnet must be None or a dict(num_layers=(3, 4, 9), width_factor=1, root='bit', norm='group', "
            f"first_stride=1), got {resnet!r}."
        )
    num_layers = tuple(int(n) for n in resnet.get("num_layers", (3, 4, 9)))
    if any(n < 1 for n in num_layers):
        raise ValueError(f"resnet num_layers must be positive unit counts per stage, got {num_layers}.")
    normalized = {"num_layers": num_layers, "width_factor": resnet.get("width_factor", 1)}
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


class _Stages:
    """The model's cut-point tensors and the sub-models between them, built once each."""

    ORDER = ("images", "embedded", "encoded", "features", "pre_logits", "logits")

    def __init__(self, tensors):
        self.tensors = tensors
        self.models = {}

    def model(self, owner, start, end):
        for point in (start, end):
            if point not in self.ORDER:
                raise ValueError(f"Unknown cut point {point!r}; use one of {self.ORDER}.")
            if point not in self.tensors:
                raise ValueError(f"{owner.name!r} has no {point!r} (include_top={owner.include_top}).")
        if self.ORDER.index(start) >= self.ORDER.index(end):
            raise ValueError(f"{start!r} does not come before {end!r}; the order is {self.ORDER}.")
        if getattr(owner, "distillation", False) and start == "pre_logits" and end == "logits":
            raise ValueError(f"{owner.name!r} is distilled: its logits average two heads on two tokens, not one "
                             "head on 'pre_logits' (their mean); start from 'features'.")
        if (start, end) not in self.models:
            self.models[start, end] = keras.Model(
                self.tensors[start], self.tensors[end], name=f"{owner.name}_{start}_to_{end}")
        return self.models[start, end]


def _size_mismatches(sizes, config):
    """The size arguments in which `config` differs from a preset's `sizes`."""
    differ = []
    for key in SIZE_ARGS:
        want, got = sizes.get(key), config.get(key)
        if key == "patch_size":
            want, got = _pair(want, key), _pair(got, key)
        elif key == "resnet":
            want, got = _normalize_resnet(want), _normalize_resnet(got)
        elif got is not None:
            got = int(got)
        if want != got:
            differ.append(f"{key}={got!r} (the preset's is {want!r})")
    return differ


def _check_variant(variant, patch_size, hidden_size, num_layers, num_heads, mlp_dim, resnet):
    name = canonical_variant(variant)
    differ = _size_mismatches(PRESETS[name].sizes, dict(
        patch_size=patch_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        mlp_dim=mlp_dim, resnet=resnet))
    if differ:
        raise ValueError(f"variant={variant!r} does not describe this model: {', '.join(differ)}.")
    return name


def _pixel_stats(values, what):
    values = tuple(float(v) for v in (values if hasattr(values, "__len__") else (values,) * 3))
    if len(values) != 3:
        raise ValueError(f"{what} must be 3 numbers (R, G, B), got {values}.")
    return values


@_register
class VisionTransformer(keras.Model):
    """The Vision Transformer (Dosovitskiy et al., 2021) as a functional Keras model.

    image -> [hybrid ResNet stem] -> PatchEncoder (patch projection, class token, position
    embeddings) -> dropout -> `num_layers` TransformerBlocks -> LayerNorm -> pooling (class
    token or global average) -> [pre-logits Dense + tanh] -> head (zero-initialized Dense).
    Numerics and parameter names follow google-research/vision_transformer, so its
    checkpoints load with `keras_vit.load_official_npz`.

    Args:
        image_size: int or (height, width) of the input images.
        patch_size: int or (ph, pw); for hybrids, the patch size on the stem's feature map.
        hidden_size: the Transformer's width (each token's size).
        num_layers: its depth, the number of Transformer blocks.
        num_heads: the attention heads of each block.
        mlp_dim: the hidden width of each block's MLP.
        classes: the head's width.
        include_top: with the head (logits) or without (the pooled representation).
        classifier: "token" (a class token, read out at position 0) or "gap" (no class
            token; the mean over all tokens).
        representation_size: width of the pre-logits layer (Dense + tanh), or None.
        resnet: None, or `dict(num_layers=(3, 4, 9), width_factor=1)` for a hybrid with a
            BiT ResNet-v2 stem; `num_layers=()` keeps its root block only; `root="small"`
            replaces the root's 7x7/2 conv and max-pool by a 3x3/1 conv, for small images
            (CIFAR's 32x32) that the official root would shrink to 8x8 before any stage;
            `norm="batch"` trains the stem with BatchNorm and plain convolutions in place of
            BiT's GroupNorm and weight standardization (from scratch only: no checkpoint has it);
            `first_stride=2` gives the first stage stride 2 (BiT's has 1), so after a "small"
            root only the root conv runs at full resolution (the official layout cannot
            hold it either).
        dropout_rate: dropout after the position embeddings and in the MLP.
        attention_dropout_rate: dropout on the attention probabilities.
        drop_path_rate: stochastic depth of the last block; it grows linearly from 0 over
            the blocks.
        classifier_activation: activation on the head, e.g. "softmax"; None gives logits.
        weights: None, or a path to an official `.npz` checkpoint, a `.weights.h5` file or a
            released checkpoint name such as "imagenet" or "imagenet21k".
        name: the model's name.
        pooling: how the encoded tokens are pooled: None (as the classifier), "token",
            "gap" (alias "avg"; the mean over the patch tokens), "max" (the maximum over
            the patch tokens, per feature) or "unpooled" (all tokens, (B, T, D)).
        approximate_gelu: True for the tanh GELU the official checkpoints were trained
            with, False for the exact erf form.
        input_tensor: an optional Keras tensor to build the model on; its last axis gives
            the channels.
        channels: the input's channels, 3 for RGB (the released checkpoints' count); any
            other count (grayscale, RGBA, multispectral) for models trained from scratch:
            the patch projection (and a hybrid's root convolution) takes them all.
        class_names: optional list of the head's class names, saved with the model
            (`decode_predictions` and `keras-vit predict` use them).
        attention_implementation: "auto", "matmul" or "dot_product_attention", how the
            blocks compute attention (see `TransformerBlock`); no variable depends on it.
        dynamic_image_size: False for a model of one input size; True for one that takes
            images of any size (input (None, None, C)) that is a multiple of the effective
            patch size (hybrids: the stem's stride x patch), with the position embeddings,
            stored for `image_size`, resampled inside the graph to each batch's own grid.
        posemb_resample: how a dynamic model resamples its position embeddings:
            "official" (corner-aligned bilinear, as the official fine-tuning code and
            `keras_vit.resample_position_embeddings`), "bilinear" or "bicubic".
        layer_norm_epsilon: epsilon of every LayerNorm (1e-6 as the official code; the
            Hugging Face transformers ViT uses 1e-12).
        fc_norm: False (the paper): the last LayerNorm ("encoder_norm") normalizes every
            token before pooling; True: it normalizes the pooled features instead
            ("fc_norm", timm's placement for average-pooled models).
        pixel_mean: the per-channel (R, G, B) mean, on the [0, 1] pixel scale, that the
            model's inputs were normalized with: x = (pixels / 255 - mean) / std. The default
            0.5 (with `pixel_std` 0.5) is the official [-1, 1] scaling;
            `preprocess_input(x, model=model)` and exports use the model's values.
        pixel_std: the per-channel standard deviation of that normalization (default 0.5).
        distillation: DeiT's distillation token (Touvron et al., 2021), timm's layout: a
            second learned token after the class token ([cls, dist, patches], position
            embeddings over all three kinds), a second head "head_dist" on it beside "head"
            on the class token; the model's logits are the mean of the two heads (DeiT's
            inference), its pooled representation the mean of the two tokens (timm's).
            Needs classifier="token", no representation_size, no fc_norm. Training the two
            heads apart (the class head on labels, the distillation head on a teacher's):
            `keras_vit.distill`.
        crop_pct: how an image of any size becomes the model's input at evaluation
            (`keras_vit.images.model_view`, used by training's evaluation, predict, fewshot,
            visualize and every export's graph): the central `crop_pct` of the shorter side,
            resized to the model's size (1.0, the default: the whole image, the paper's plain
            resize). A timm checkpoint's own `crop_pct` is read with it.
        interpolation: the resize of that view, "bilinear" (default) or "bicubic", antialiased
            when shrinking; a timm checkpoint's own `interpolation` is read with it.
        layer_scale: None (the paper), or LayerScale's initial value (CaiT, DINOv2's 1e-5): a learned
            per-channel gain on both residual branches of every block (x + gamma * MSA(LN(x)), ...).
        register_tokens: learned register tokens (Darcet et al., 2024) after the class (and
            distillation) token: [cls, registers, patches]; 0 for none.
        prefix_posemb: which prefix tokens have position embeddings: "all" (the paper, timm's default),
            "class" (the class and distillation tokens, not the registers: transformers'
            Dinov2WithRegisters) or "none" (the patches only: timm's no_embed_class, as its DINOv2 with
            registers).
        pre_norm: a LayerNorm ("pre_norm") on the embedded tokens before the first block (CLIP's
            `norm_pre` / `pre_layrnorm`).
        patch_bias: whether the patch projection has a bias (CLIP's has none).
        mlp_activation: None (GELU as `approximate_gelu` says), "gelu_tanh", "gelu", "quick_gelu"
            (x * sigmoid(1.702 x), OpenAI's CLIP) or "swiglu" (the first MLP Dense 2 * mlp_dim wide,
            silu(first half) * second half: DINOv2 giant). pooling="map" uses it too.
        relative_position_bias: BEiT's learned relative position bias in every block's attention
            (a table of (2gh-1)(2gw-1)+3 entries per head, over the stored patch grid and the class
            token); such a model takes its own image size only.
        absolute_position_embeddings: False for a model without the absolute position table (BEiT).

    Example:
    >>> model = VisionTransformer(image_size=32, patch_size=4, hidden_size=64, num_layers=2,
    ...                           num_heads=4, mlp_dim=128, classes=10)
    >>> tuple(model(keras.ops.zeros((1, 32, 32, 3))).shape)
    (1, 10)
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        hidden_size: int = 768,
        num_layers: int = 12,
        num_heads: int = 12,
        mlp_dim: int = 3072,
        classes: int = 1000,
        include_top: bool = True,
        classifier: str = "token",
        representation_size: int | None = None,
        resnet: dict[str, Any] | None = None,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        classifier_activation: str | None = None,
        weights: str | None = None,
        name: str | None = None,
        *,
        pooling: str | None = None,
        approximate_gelu: bool = True,
        input_tensor: keras.KerasTensor | None = None,
        channels: int = 3,
        class_names: Sequence[str] | None = None,
        attention_implementation: str = "auto",
        variant: str | None = None,
        dynamic_image_size: bool = False,
        posemb_resample: str = "official",
        layer_norm_epsilon: float = 1e-6,
        fc_norm: bool = False,
        pixel_mean: Sequence[float] = (0.5, 0.5, 0.5),
        pixel_std: Sequence[float] = (0.5, 0.5, 0.5),
        distillation: bool = False,
        crop_pct: float = 1.0,
        interpolation: str = "bilinear",
        layer_scale: float | None = None,
        register_tokens: int = 0,
        prefix_posemb: str = "all",
        pre_norm: bool = False,
        patch_bias: bool = True,
        mlp_activation: str | None = None,
        relative_position_bias: bool = False,
        absolute_position_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        check_keywords(kwargs, vit_keywords(), "VisionTransformer")
        args = _check_arguments(dict(
            image_size=image_size, patch_size=patch_size, hidden_size=hidden_size, num_layers=num_layers,
            num_heads=num_heads, mlp_dim=mlp_dim, classes=classes, include_top=include_top, classifier=classifier,
            representation_size=representation_size, resnet=resnet, dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate, drop_path_rate=drop_path_rate,
            classifier_activation=classifier_activation, pooling=pooling, approximate_gelu=approximate_gelu,
            channels=channels, class_names=class_names, attention_implementation=attention_implementation,
            variant=variant, dynamic_image_size=dynamic_image_size, posemb_resample=posemb_resample,
            layer_norm_epsilon=layer_norm_epsilon, fc_norm=fc_norm, pixel_mean=pixel_mean, pixel_std=pixel_std,
            distillation=distillation, crop_pct=crop_pct, interpolation=interpolation, layer_scale=layer_scale,
            register_tokens=register_tokens, prefix_posemb=prefix_posemb, pre_norm=pre_norm, patch_bias=patch_bias,
            mlp_activation=mlp_activation, relative_position_bias=relative_position_bias,
            absolute_position_embeddings=absolute_position_embeddings))
        inputs, x, args["channels"] = _model_input(input_tensor, args)
        stages = {"images": inputs}  # the feature API's cut points (see `stage_model`)
        x = _encoder(x, args, stages)
        x = _pool_and_head(x, args, stages)
        super().__init__(inputs=inputs, outputs=x, name=name, **kwargs)
        # a plain holder: Keras would track a dict of tensors or of sub-models as sublayers
        self._stages = _Stages(stages)
        for key, value in args.items():  # the config's values, normalized: get_config returns them
            setattr(self, key, value)

        if weights is not None:
            _load_weights(self, weights)

    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, *args: Any, **kwargs: Any) -> None:
        """keras.Model.compile; a loss expecting probabilities on a logits head (the default,
        classifier_activation=None) is compiled as from_logits=True, with a warning (see _losses)."""
        check_keywords(kwargs, keywords_of(keras.Model.compile), "compile")
        if loss is not None and self.include_top:
            from keras_vit._losses import match_loss_to_head

            loss = match_loss_to_head(loss, outputs_logits=self.classifier_activation is None,
                                      model_name=self.name)
        return super().compile(optimizer, loss, *args, **kwargs)

    def compile_from_config(self, config: dict[str, Any]) -> None:
        # Keras skips this for any model that overrides compile(); ours only adjusts the loss, so a
        # saved compiled model loads compiled, as Trainer.compile_from_config would do it.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Keras' own refusal names shapes only ("expected shape=(None, 8, 8, 3), found shape=(2, 32, 32, 3)");
        # this one names the ways to another size.
        if not getattr(self, "dynamic_image_size", True):
            self._check_image_size(args[0] if args else kwargs.get("inputs"))
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Tensor, training: bool | None = None, mask: Tensor | None = None, **kwargs: Any) -> Tensor:
        # JAX's fit and predict reach the model through stateless_call -> call, past __call__ and past
        # Keras' own shape check (a model of one size then ran other sizes, its position embeddings
        # resampled unasked).
        if not self.dynamic_image_size:
            self._check_image_size(inputs)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    # Arrays given to fit / evaluate / predict are checked before Keras' loop: under JAX an error inside
    # it leaves the model's variables purged, the model unusable for the rest of the session.
    def fit(self, x: Any = None, *args: Any, **kwargs: Any) -> keras.callbacks.History:
        self._check_image_size(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._check_image_size(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        self._check_image_size(x)
        return super().predict(x, *args, **kwargs)

    def _check_image_size(self, images):
        try:
            shape = tuple(images.shape)
        except (AttributeError, TypeError, ValueError):  # no shape, or one of unknown rank
            return
        # the model's input: image_size, or the source of the input_tensor it was built on (a Resizing layer's)
        h, w = tuple(self.input_shape)[1:3]
        if len(shape) != 4 or None in (shape[1], shape[2], h, w):
            return
        size = (int(shape[1]), int(shape[2]))
        if size != (h, w):
            raise ValueError(
                f"{self.name!r} takes {h}x{w} images, got {size[0]}x{size[1]} "
                f"(input shape {shape}). Resize the images to {h}x{w}, or make the model take other sizes: "
                f"keras_vit.with_image_size(model, {size}) gives a copy for {size[0]}x{size[1]} (position "
                "embeddings resampled once), and a model built with dynamic_image_size=True takes any multiple "
                "of its patch size (resampled in the graph).")

    @property
    def patch_encoder(self) -> PatchEncoder:
        return self.get_layer("patch_encoder")

    @property
    def blocks(self) -> list[TransformerBlock]:
        """The TransformerBlocks, in order."""
        return [self.get_layer(f"encoderblock_{i}") for i in range(self.num_layers)]

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the patches: class, distillation and register tokens."""
        return int(self.classifier == "token") + int(self.distillation) + self.register_tokens

    @property
    def num_posemb_prefix_tokens(self) -> int:
        """The position table's entries before the patch grid's (see `prefix_posemb`)."""
        return self.patch_encoder.num_posemb_prefix_tokens

    # -- the feature API: what export, visualize and fine-tuning code ask the model for ---------
    # Cut points of the graph, in order: "images" -> [stem, patch encoder, dropout] ->
    # "embedded" (the first block's input) -> blocks -> "encoded" (the last block's output) ->
    # LayerNorm -> "features" (B, T, D) -> pooling [+ pre-logits] -> "pre_logits" (the head's
    # input) -> head -> "logits" (before any classifier_activation; only with include_top).

    def stage_model(self, start: str = "images", end: str = "logits") -> keras.Model:
        """A Keras model from one cut point of this model to a later one, sharing its layers.

        start, end: "images", "embedded", "encoded", "features", "pre_logits", "logits".

        Example:
        >>> model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=10, classifier_activation="softmax")
        >>> features = model.stage_model("images", "pre_logits")  # the pooled representation, (B, 192)
        >>> tuple(features(np.zeros((2, 32, 32, 3), "float32")).shape)
        (2, 192)
        """
        return self._stages.model(self, start, end)

    def forward_features(self, images: Tensor, training: bool = False) -> Tensor:
        """Images in [-1, 1] -> the encoded tokens after the final LayerNorm, (B, T, D)."""
        return self.stage_model("images", "features")(images, training=training)

    def forward_head(self, features: Tensor, pre_logits: bool = False, training: bool = False) -> Tensor:
        """`forward_features`' tokens -> logits (before any activation), or with `pre_logits`
        the pooled representation the head reads."""
        return self.stage_model("features", "pre_logits" if pre_logits else "logits")(features, training=training)

    def forward_blocks(self, tokens: Tensor, return_attention: bool = False,
                       training: bool = False) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Yields each block's output (and, with `return_attention`, its attention
        probabilities (B, heads, T, T), float32) for tokens at "embedded", block by block,
        so a consumer may hold one layer at a time."""
        for block in self.blocks:
            if return_attention:
                tokens, probs = block(tokens, training=training, return_attention_scores=True)
                yield tokens, probs
            else:
                tokens = block(tokens, training=training)
                yield tokens, None

    def forward_intermediates(self, images: Tensor, return_attention: bool = False,
                              training: bool = False) -> dict[str, Any]:
        """Everything along the way, as a dict (timm's forward_intermediates, big_vision's `out`).

        Keys: "embedded", "blocks" (list of each block's output), "attention" (list of
        (B, heads, T, T) float32, with `return_attention`), "features", "patch_features" (the
        features of the patches alone, without the class, distillation and register tokens, as a
        spatial map (B, gh, gw, D) for dense heads), "pre_logits" and, with include_top, "logits".
        The values equal the full model's.

        Example:
        >>> model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=10)
        >>> out = model.forward_intermediates(np.zeros((1, 32, 32, 3), "float32"), return_attention=True)
        >>> sorted(out), len(out["attention"]), tuple(out["attention"][0].shape)
        (['attention', 'blocks', 'embedded', 'features', 'logits', 'patch_features', 'pre_logits'], 12, (1, 3, 5, 5))
        """
        out = {"embedded": self.stage_model("images", "embedded")(images, training=training)}
        x, out["blocks"], attention = out["embedded"], [], []
        for tokens, probs in self.forward_blocks(x, return_attention, training):
            out["blocks"].append(tokens)
            attention.append(probs)
            x = tokens
        if return_attention:
            out["attention"] = attention
        out["features"] = self.stage_model("encoded", "features")(x, training=training)
        out["patch_features"] = self.patch_map(out["features"], images)
        out["pre_logits"] = self.stage_model("features", "pre_logits")(out["features"], training=training)
        if self.include_top:  # a distilled model's heads read two tokens, not the pooled mean
            start = "features" if self.distillation else "pre_logits"
            out["logits"] = self.stage_model(start, "logits")(out[start], training=training)
        return out

    def patch_map(self, tokens: Tensor, images: Tensor) -> Tensor:
        """Tokens (B, T, D) of `images` -> the patches' tokens as a map (B, gh, gw, D): the prefix
        tokens (class, distillation, registers) left out, the rest in the patch grid's row-major order."""
        ph, pw = _effective_patch(dict(resnet=self.resnet, patch_size=self.patch_size))
        h, w = images.shape[1], images.shape[2]
        if h is None or w is None:
            h, w = ops.shape(images)[1], ops.shape(images)[2]
        patches = tokens[:, self.num_prefix_tokens:]
        return ops.reshape(patches, (ops.shape(tokens)[0], h // ph, w // pw, ops.shape(tokens)[-1]))

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_size": self.image_size,
            "channels": self.channels,
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "classes": self.classes,
            "include_top": self.include_top,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "resnet": self.resnet,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "classifier_activation": self.classifier_activation,
            "pooling": self.pooling,
            "approximate_gelu": self.approximate_gelu,
            "class_names": self.class_names,
            "attention_implementation": self.attention_implementation,
            "variant": self.variant,
            "dynamic_image_size": self.dynamic_image_size,
            "posemb_resample": self.posemb_resample,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "fc_norm": self.fc_norm,
            "pixel_mean": self.pixel_mean,
            "pixel_std": self.pixel_std,
            "distillation": self.distillation,
            "crop_pct": self.crop_pct,
            "interpolation": self.interpolation,
            "layer_scale": self.layer_scale,
            "register_tokens": self.register_tokens,
            "prefix_posemb": self.prefix_posemb,
            "pre_norm": self.pre_norm,
            "patch_bias": self.patch_bias,
            "mlp_activation": self.mlp_activation,
            "relative_position_bias": self.relative_position_bias,
            "absolute_position_embeddings": self.absolute_position_embeddings,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> VisionTransformer:
        config = dict(config)
        for key in ("image_size", "patch_size"):
            config[key] = tuple(config[key])
        if config.get("resnet"):
            config["resnet"] = dict(config["resnet"], num_layers=tuple(config["resnet"]["num_layers"]))
        return cls(**config)


@functools.lru_cache(maxsize=1)
def vit_keywords():
    """Every keyword `VisionTransformer` takes; what the functions that pass theirs on check against."""
    return frozenset(keywords_of(VisionTransformer.__init__) | set(MODEL_KEYWORDS))


def _check_arguments(args):
    """VisionTransformer's arguments checked (each bad value named) and normalized."""
    a = dict(args)
    a["image_size"], a["patch_size"] = _pair(a["image_size"], "image_size"), _pair(a["patch_size"], "patch_size")
    a["dynamic_image_size"] = bool(a["dynamic_image_size"])
    if a["variant"] is not None:
        a["variant"] = _check_variant(a["variant"], a["patch_size"], a["hidden_size"], a["num_layers"],
                                      a["num_heads"], a["mlp_dim"], a["resnet"])
    a["pixel_mean"], a["pixel_std"] = _pixel_stats(a["pixel_mean"], "pixel_mean"), _pixel_stats(a["pixel_std"], "pixel_std")
    if min(a["pixel_std"]) <= 0:
        raise ValueError(f"pixel_std must be positive, got {a['pixel_std']}.")
    a["crop_pct"], a["interpolation"] = view_policy(crop_pct=a["crop_pct"], interpolation=a["interpolation"])
    if a["class_names"] is not None:
        a["class_names"] = [str(c) for c in a["class_names"]]
        if not a["include_top"] or len(a["class_names"]) != a["classes"]:
            raise ValueError(f"class_names has {len(a['class_names'])} names but the model has "
                             f"{a['classes'] if a['include_top'] else 'no'} classes.")
    a["resnet"] = _normalize_resnet(a["resnet"])
    classifier, pooling = a["classifier"], a["pooling"]
    if classifier not in CLASSIFIERS:
        raise ValueError(f"Unknown classifier {classifier!r}; use one of {CLASSIFIERS}.")
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"Unknown pooling {pooling!r}; use None or one of {POOLINGS}.")
    if pooling == "token" and classifier != "token":
        raise ValueError(f"pooling='token' needs a class token, but classifier={classifier!r} has none.")
    if int(a["hidden_size"]) % int(a["num_heads"]):
        raise ValueError(f"hidden_size {a['hidden_size']} is not divisible by num_heads {a['num_heads']}.")
    if a["classes"] is not None and a["include_top"] and int(a["classes"]) < 1:
        raise ValueError(f"classes must be a positive int when include_top=True, got {a['classes']}.")
    for what in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
        if not 0.0 <= float(a[what]) < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {a[what]}.")
        a[what] = float(a[what])
    for what in ("hidden_size", "num_layers", "num_heads", "mlp_dim"):
        a[what] = int(a[what])
    for what in ("include_top", "approximate_gelu", "fc_norm", "distillation", "pre_norm", "patch_bias",
                 "relative_position_bias", "absolute_position_embeddings"):
        a[what] = bool(a[what])
    if a["relative_position_bias"] or not a["absolute_position_embeddings"]:
        clash = [f"{k}={a[k]!r}" for k, ok in (("classifier", classifier == "token"),
                                              ("distillation", not a["distillation"]),
                                              ("register_tokens", not a["register_tokens"]),
                                              ("dynamic_image_size", not a["dynamic_image_size"]),
                                              ("resnet", a["resnet"] is None)) if not ok]
        if clash:
            raise ValueError(f"relative_position_bias / absolute_position_embeddings=False (BEiT: a class token, "
                             f"one patch grid) do not go with {', '.join(clash)}.")
    if a["layer_scale"] is not None:
        a["layer_scale"] = float(a["layer_scale"])
    a["register_tokens"] = int(a["register_tokens"])
    if a["register_tokens"] < 0:
        raise ValueError(f"register_tokens must be >= 0, got {a['register_tokens']}.")
    if a["prefix_posemb"] not in PREFIX_POSEMB:
        raise ValueError(f"Unknown prefix_posemb {a['prefix_posemb']!r}; use one of {PREFIX_POSEMB}.")
    a["mlp_activation"] = check_mlp_activation(a["mlp_activation"])
    if a["distillation"]:
        # transformers' DeiTModel: a pre-logits Dense + tanh on the class token, no head
        pooler_ok = a["representation_size"] is None or not a["include_top"]
        clash = [f"{k}={a[k]!r}" for k, ok in (("classifier", classifier == "token"),
                                              ("representation_size", pooler_ok),
                                              ("fc_norm", not a["fc_norm"])) if not ok]
        if a["include_top"] and pooling not in (None, "token"):
            clash.append(f"pooling={pooling!r} with include_top=True (the two heads read the two tokens)")
        if clash:
            raise ValueError(f"distillation=True (DeiT: class and distillation tokens, one head on each) does not "
                             f"go with {', '.join(clash)}; use classifier='token', representation_size=None "
                             "(or include_top=False), fc_norm=False.")
    a["layer_norm_epsilon"] = float(a["layer_norm_epsilon"])
    image_size, patch_size, resnet = a["image_size"], a["patch_size"], a["resnet"]
    if resnet is None:
        grid_size(image_size, patch_size)
    else:
        stride = _stem_stride(resnet)
        effective = (stride * patch_size[0], stride * patch_size[1])
        if image_size[0] % effective[0] or image_size[1] % effective[1]:
            raise ValueError(
                f"image_size {image_size} is not a multiple of the hybrid's effective patch size "
                f"{effective} (stem stride {stride} x patch {patch_size}); pixels would be cropped."
            )
    return a


def _stem_stride(resnet):
    """How much a normalized `resnet` config shrinks the image (1 without a stem)."""
    if resnet is None:
        return 1
    return stem_stride(resnet["num_layers"], resnet.get("root", "bit"), resnet.get("first_stride", 1))


def _effective_patch(args):
    """The patch size in input pixels: the patch, times the stem's stride for hybrids."""
    stride = _stem_stride(args["resnet"])
    return stride * args["patch_size"][0], stride * args["patch_size"][1]


def _model_input(input_tensor, args):
    """(the model's inputs, the tensor to build on, its channel count)."""
    image_size, dynamic = args["image_size"], args["dynamic_image_size"]
    if input_tensor is None:
        channels = args["channels"]
        try:
            valid = not isinstance(channels, bool) and int(channels) == channels and channels >= 1
        except (TypeError, ValueError):
            valid = False
        if not valid:
            raise ValueError(f"channels must be a positive int (3 for RGB), got {channels!r}.")
        # channels_last whatever keras.config.image_data_format() says: the patch layout
        # and the official checkpoints are (H, W, C).
        inputs = keras.Input(shape=((None, None) if dynamic else image_size) + (int(channels),), name="image")
        return inputs, inputs, int(channels)
    shape = tuple(input_tensor.shape)
    if len(shape) != 4 or (tuple(shape[1:3]) != image_size and not dynamic) or shape[3] is None:
        raise ValueError(
            f"input_tensor has shape {shape}; expected (batch, {image_size[0]}, {image_size[1]}, channels)"
            + (" (or pass dynamic_image_size=True for any size)." if None in shape[1:3] else ".")
        )
    inputs = keras.utils.get_source_inputs(input_tensor)
    return (inputs[0] if len(inputs) == 1 else inputs), input_tensor, int(shape[3])


def _encoder(x, a, stages):
    """Images -> [stem] -> patch encoder -> blocks -> [final LayerNorm]; the tokens (B, T, D)."""
    effective = _effective_patch(a)
    if a["dynamic_image_size"]:
        x = ImageSizeCheck(effective, name="image_size_check")(x)
    if a["resnet"] is not None:
        x = resnet_stem(x, **a["resnet"])
    grid = (a["image_size"][0] // effective[0], a["image_size"][1] // effective[1])
    x = PatchEncoder(a["hidden_size"], a["patch_size"], class_token=a["classifier"] == "token", posemb_grid=grid,
                     posemb_resample=a["posemb_resample"], distillation_token=a["distillation"],
                     register_tokens=a["register_tokens"], prefix_posemb=a["prefix_posemb"],
                     patch_bias=a["patch_bias"], position_embeddings=a["absolute_position_embeddings"],
                     name="patch_encoder")(x)
    x = keras.layers.Dropout(a["dropout_rate"], name="encoder_dropout")(x)
    if a["pre_norm"]:
        x = keras.layers.LayerNormalization(epsilon=a["layer_norm_epsilon"], name="pre_norm")(x)
    stages["embedded"] = x
    num_layers = a["num_layers"]
    for i in range(num_layers):
        x = TransformerBlock(
            a["num_heads"],
            a["mlp_dim"],
            dropout_rate=a["dropout_rate"],
            attention_dropout_rate=a["attention_dropout_rate"],
            drop_path_rate=a["drop_path_rate"] * i / max(num_layers - 1, 1),
            approximate_gelu=a["approximate_gelu"],
            attention_implementation=a["attention_implementation"],
            layer_norm_epsilon=a["layer_norm_epsilon"],
            layer_scale=a["layer_scale"],
            mlp_activation=a["mlp_activation"],
            relative_position_grid=grid if a["relative_position_bias"] else None,
            name=f"encoderblock_{i}",
        )(x)
    stages["encoded"] = x
    if not a["fc_norm"]:
        x = keras.layers.LayerNormalization(epsilon=a["layer_norm_epsilon"], name="encoder_norm")(x)
    stages["features"] = x
    return x


def _pool_and_head(x, a, stages):
    """Tokens -> pooled representation -> [fc_norm] -> [pre-logits] -> [head -> activation]."""
    pool = a["pooling"] or a["classifier"]
    prefix = int(a["classifier"] == "token") + int(a["distillation"]) + a["register_tokens"]
    tokens = x
    if pool == "token" and a["distillation"] and a["representation_size"] is not None:
        x = x[:, 0]  # transformers' DeiTModel pools the class token alone
    elif pool == "token" and a["distillation"]:
        x = (x[:, 0] + x[:, 1]) * 0.5  # timm's pooled output of a distilled DeiT
    elif pool == "token":
        x = x[:, 0]
    elif pool in ("gap", "avg"):
        x = ops.mean(x[:, prefix:] if prefix else x, axis=1)
    elif pool == "max":
        x = ops.max(x[:, prefix:] if prefix else x, axis=1)
    elif pool == "map":  # one learned query attends over the patch tokens (timm drops the prefix tokens too)
        activation = a["mlp_activation"] or ("gelu_tanh" if a["approximate_gelu"] else "gelu")
        x = AttentionPool(a["num_heads"], a["mlp_dim"], a["layer_norm_epsilon"], activation,
                          name="attention_pool")(x[:, prefix:] if prefix else x)
    if a["fc_norm"]:
        x = keras.layers.LayerNormalization(epsilon=a["layer_norm_epsilon"], name="fc_norm")(x)
    if a["representation_size"] is not None:
        x = keras.layers.Dense(a["representation_size"], activation="tanh", name="pre_logits")(x)
    stages["pre_logits"] = x
    if a["include_top"]:
        mixed = keras.mixed_precision.global_policy().compute_dtype != "float32"
        head_dtype = "float32" if mixed else None
        head = keras.layers.Dense(a["classes"], kernel_initializer="zeros", bias_initializer="zeros", name="head",
                                  dtype=head_dtype)
        if a["distillation"]:
            head_dist = keras.layers.Dense(a["classes"], kernel_initializer="zeros", bias_initializer="zeros",
                                           name="head_dist", dtype=head_dtype)
            x = (head(tokens[:, 0]) + head_dist(tokens[:, 1])) * 0.5  # DeiT's inference: the two heads averaged
        else:
            x = head(x)
        stages["logits"] = x
        if a["classifier_activation"] is not None:
            x = keras.layers.Activation(a["classifier_activation"], name="predictions", dtype=head_dtype)(x)
    return x


def create_model(variant: str, **kwargs: Any) -> VisionTransformer:
    """A VisionTransformer of a named variant ("B/16", "ViT-L_16", "R50+ViT-B_16", ...).

    Keyword arguments override the variant's sizes and pass on to VisionTransformer; the
    model's `variant` is the preset's name unless they change its sizes.

    Example:
    >>> create_model("Ti/16", image_size=384, classes=10).count_params()
    5599306
    """
    check_keywords(kwargs, vit_keywords(), "create_model")
    name = canonical_variant(variant)
    config = {**PRESETS[name].sizes, **kwargs}
    if "variant" not in kwargs:
        config["variant"] = None if _size_mismatches(PRESETS[name].sizes, config) else name
    return VisionTransformer(**config)


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
