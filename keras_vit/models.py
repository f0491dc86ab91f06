"""VisionTransformer and the keras.applications-style constructors, one per preset.

The architecture is a `ViTConfig` (keras_vit/config.py: every option, checked once, and the grid,
effective patch, stem stride and prefix tokens derived from them); this module builds the graph it
describes, without weights: keras_vit/factory.py builds models with their weights (`create_model`, the
constructors ViTB16, ...) and calls the loader. The variants themselves (sizes, names, released
weights) are the table in keras_vit/presets.py.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Iterator

import keras
from keras import ops

from keras_vit._common import Tensor, check_keywords, keywords_of
from keras_vit._common import register as _register
from keras_vit.config import SIZE_ARGS, ViTConfig, field_names  # noqa: F401 (SIZE_ARGS: re-exported)
from keras_vit.layers import AttentionPool, ImageSizeCheck, PatchEncoder, TransformerBlock
from keras_vit.presets import PRESETS, VARIANTS, canonical_variant  # noqa: F401 (VARIANTS, canonical_variant: public here)
from keras_vit.rope import LAYOUTS as ROPE_LAYOUTS
from keras_vit.rope import RotaryEmbedding
from keras_vit.stem import resnet_stem

# What VisionTransformer passes on to keras.Model: the Functional model reads `trainable` (saved
# configs hold it) and drops any other keyword silently, so those are refused here.
MODEL_KEYWORDS = ("trainable",)

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
        if getattr(owner, "rope", None) is not None and start == "embedded" and end != "embedded":
            raise ValueError(f"{owner.name!r} rotates its queries and keys by the patch grid (rope={owner.rope!r}), "
                             "which its tokens alone do not tell: start from 'images', or run the blocks with "
                             "model.forward_blocks(tokens, rope=model.rope_table(images)).")
        if (start, end) not in self.models:
            self.models[start, end] = keras.Model(
                self.tensors[start], self.tensors[end], name=f"{owner.name}_{start}_to_{end}")
        return self.models[start, end]


@_register
class VisionTransformer(keras.Model):
    """The Vision Transformer (Dosovitskiy et al., 2021) as a functional Keras model.

    image -> [hybrid ResNet stem] -> PatchEncoder (patch projection, class token, position
    embeddings) -> dropout -> `num_layers` TransformerBlocks -> LayerNorm -> pooling (class
    token or global average) -> [pre-logits Dense + tanh] -> head (zero-initialized Dense).
    Numerics and parameter names follow google-research/vision_transformer, so its
    checkpoints load with `keras_vit.load_official_npz`.

    The architecture is a `ViTConfig`: pass one, or its fields as keywords (both: the keywords
    replace the config's fields). `model.config` gives it back; each field is also an attribute of
    the model (`model.image_size`, `model.classes`, ...).

    It holds the architecture, not weights: `keras_vit.create_model(variant, weights=...)` and the
    constructors (`keras_vit.ViTB16(weights="imagenet")`, ...) load them, as does
    `keras_vit.checkpoints.load_weights(model, weights)` for a model built here.

    Args:
        config: the architecture (`keras_vit.ViTConfig`), or None for its defaults and `fields`.
        name: the model's name.
        input_tensor: an optional Keras tensor to build the model on; its last axis gives
            the channels.
        **fields: `ViTConfig` fields (image_size, patch_size, hidden_size, num_layers, num_heads,
            mlp_dim, classes, ... : see `ViTConfig` for each), and `trainable`, which keras.Model
            takes. A misspelled one is refused, naming the field meant.

    Example:
    >>> model = VisionTransformer(image_size=32, patch_size=4, hidden_size=64, num_layers=2,
    ...                           num_heads=4, mlp_dim=128, classes=10)
    >>> tuple(model(keras.ops.zeros((1, 32, 32, 3))).shape)
    (1, 10)
    >>> VisionTransformer(model.config, classes=3).config.classes  # a config, a field replaced
    3
    """

    def __init__(self, config: ViTConfig | None = None, *, name: str | None = None,
                 input_tensor: keras.KerasTensor | None = None, **fields: Any) -> None:
        if fields.get("weights", None) is not None:
            raise TypeError("VisionTransformer() builds the architecture alone and takes no `weights`: "
                            "keras_vit.create_model(variant, weights=...) and the constructors (keras_vit.ViTB16(weights="
                            "...), ...) load them, or keras_vit.checkpoints.load_weights(model, weights) after building.")
        fields.pop("weights", None)  # weights=None, as VisionTransformer took it: no weights
        check_keywords(fields, vit_keywords(), "VisionTransformer")
        model_kwargs = {key: fields.pop(key) for key in MODEL_KEYWORDS if key in fields}
        if config is not None and not isinstance(config, ViTConfig):
            raise TypeError(f"VisionTransformer takes a ViTConfig (or its fields as keywords), got "
                            f"{type(config).__name__} {config!r}: pass image_size=... by keyword.")
        channels = _input_channels(input_tensor)
        if channels is not None:  # the input tensor's channels, whatever the config says
            fields["channels"] = channels
        if config is None:
            config = ViTConfig(**fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        inputs, x = _model_input(input_tensor, config)
        stages = {"images": inputs}  # the feature API's cut points (see `stage_model`)
        x = _encoder(x, config, stages)
        x = _pool_and_head(x, config, stages)
        super().__init__(inputs=inputs, outputs=x, name=name, **model_kwargs)
        # a plain holder: Keras would track a dict of tensors or of sub-models as sublayers
        self._stages = _Stages(stages)
        self._config = config

    @property
    def config(self) -> ViTConfig:
        """The architecture, as the model was built from it."""
        return self._config

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
        return self._config.num_prefix_tokens

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

    def rope_table(self, images: Tensor) -> Tensor | None:
        """The RoPE table (2, T, head_dim) the blocks rotate `images`' queries and keys by (None without
        `rope`): what `forward_blocks` takes beside the tokens."""
        if self._config.rope is None:
            return None
        return self.get_layer("rope")(images)

    def forward_blocks(self, tokens: Tensor, return_attention: bool = False, training: bool = False,
                       rope: Tensor | None = None) -> Iterator[tuple[Tensor, Tensor | None]]:
        """Yields each block's output (and, with `return_attention`, its attention
        probabilities (B, heads, T, T), float32) for tokens at "embedded", block by block,
        so a consumer may hold one layer at a time. A model with `rope` needs `rope`, its
        `rope_table(images)`."""
        if self._config.rope is not None and rope is None:
            raise ValueError(f"{self.name!r} rotates queries and keys by the patch grid (rope={self._config.rope!r}): "
                             "pass rope=model.rope_table(images) to forward_blocks.")
        extra = {} if rope is None else {"rope": rope}
        for block in self.blocks:
            if return_attention:
                tokens, probs = block(tokens, training=training, return_attention_scores=True, **extra)
                yield tokens, probs
            else:
                tokens = block(tokens, training=training, **extra)
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
        for tokens, probs in self.forward_blocks(x, return_attention, training, rope=self.rope_table(images)):
            out["blocks"].append(tokens)
            attention.append(probs)
            x = tokens
        if return_attention:
            out["attention"] = attention
        # with fc_norm the final norm follows the pooling: the encoded tokens are the features
        out["features"] = x if self._config.fc_norm else self.stage_model("encoded", "features")(x, training=training)
        out["patch_features"] = self.patch_map(out["features"], images)
        out["pre_logits"] = self.stage_model("features", "pre_logits")(out["features"], training=training)
        if self.include_top:  # a distilled model's heads read two tokens, not the pooled mean
            start = "features" if self.distillation else "pre_logits"
            out["logits"] = self.stage_model(start, "logits")(out[start], training=training)
        return out

    def patch_map(self, tokens: Tensor, images: Tensor) -> Tensor:
        """Tokens (B, T, D) of `images` -> the patches' tokens as a map (B, gh, gw, D): the prefix
        tokens (class, distillation, registers) left out, the rest in the patch grid's row-major order."""
        ph, pw = self._config.effective_patch
        h, w = images.shape[1], images.shape[2]
        if h is None or w is None:
            h, w = ops.shape(images)[1], ops.shape(images)[2]
        patches = tokens[:, self.num_prefix_tokens:]
        return ops.reshape(patches, (ops.shape(tokens)[0], h // ph, w // pw, ops.shape(tokens)[-1]))


    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "trainable": self.trainable, **self._config.to_dict()}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> VisionTransformer:
        return cls(**config)  # ViTConfig takes the saved forms (lists for tuples) and normalizes them


def _config_attribute(field):
    """The model's attribute for a config field: the field, with `class_names` a list and `resnet` a copy,
    as they have always been."""
    def get(self):
        value = getattr(self._config, field)
        if value is not None and field == "class_names":
            return list(value)
        return dict(value) if value is not None and field == "resnet" else value
    return property(get, doc=f"`config.{field}`: see `ViTConfig`.")


for _field in dataclasses.fields(ViTConfig):
    setattr(VisionTransformer, _field.name, _config_attribute(_field.name))


@functools.lru_cache(maxsize=1)
def vit_keywords():
    """Every keyword `VisionTransformer` takes but `config`: what the functions that pass fields on check against."""
    return frozenset((keywords_of(VisionTransformer.__init__) - {"config"}) | field_names() | set(MODEL_KEYWORDS))


def _input_channels(input_tensor):
    """The channels of the tensor a model is built on (None: no tensor, or one `_model_input` refuses)."""
    if input_tensor is None:
        return None
    shape = tuple(input_tensor.shape)
    return int(shape[3]) if len(shape) == 4 and shape[3] is not None else None


def _model_input(input_tensor, c):
    """(the model's inputs, the tensor to build on)."""
    if input_tensor is None:
        # channels_last whatever keras.config.image_data_format() says: the patch layout
        # and the official checkpoints are (H, W, C).
        shape = ((None, None) if c.dynamic_image_size else c.image_size) + (c.channels,)
        inputs = keras.Input(shape=shape, name="image")
        return inputs, inputs
    shape = tuple(input_tensor.shape)
    if len(shape) != 4 or (tuple(shape[1:3]) != c.image_size and not c.dynamic_image_size) or shape[3] is None:
        raise ValueError(
            f"input_tensor has shape {shape}; expected (batch, {c.image_size[0]}, {c.image_size[1]}, channels)"
            + (" (or pass dynamic_image_size=True for any size)." if None in shape[1:3] else ".")
        )
    inputs = keras.utils.get_source_inputs(input_tensor)
    return (inputs[0] if len(inputs) == 1 else inputs), input_tensor


def _encoder(x, c, stages):
    """Images -> [stem] -> patch encoder -> blocks -> [final LayerNorm]; the tokens (B, T, D)."""
    if c.dynamic_image_size:
        x = ImageSizeCheck(c.effective_patch, name="image_size_check")(x)
    extra = {}
    if c.rope is not None:  # one table per grid, shared by the blocks
        extra["rope"] = RotaryEmbedding(c.hidden_size // c.num_heads, c.effective_patch, c.rope, c.rope_temperature,
                                        c.rope_grid, c.num_prefix_tokens, c.rope_offset, c.rope_xy, name="rope")(x)
    if c.resnet is not None:
        x = resnet_stem(x, **c.resnet)
    x = PatchEncoder(c.hidden_size, c.patch_size, class_token=c.classifier == "token", posemb_grid=c.grid,
                     posemb_resample=c.posemb_resample, distillation_token=c.distillation,
                     register_tokens=c.register_tokens, prefix_posemb=c.prefix_posemb,
                     patch_bias=c.patch_bias, position_embeddings=c.absolute_position_embeddings,
                     name="patch_encoder")(x)
    x = keras.layers.Dropout(c.dropout_rate, name="encoder_dropout")(x)
    if c.pre_norm:
        x = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon, name="pre_norm")(x)
    stages["embedded"] = x
    for i in range(c.num_layers):
        x = TransformerBlock(
            c.num_heads,
            c.mlp_dim,
            dropout_rate=c.dropout_rate,
            attention_dropout_rate=c.attention_dropout_rate,
            drop_path_rate=c.drop_path_rate * i / max(c.num_layers - 1, 1),
            approximate_gelu=c.approximate_gelu,
            attention_implementation=c.attention_implementation,
            layer_norm_epsilon=c.layer_norm_epsilon,
            layer_scale=c.layer_scale,
            mlp_activation=c.mlp_activation,
            relative_position_grid=c.grid if c.relative_position_bias else None,
            remat=c.remat,
            rope_layout=ROPE_LAYOUTS[c.rope] if c.rope is not None else None,
            mlp_norm=c.mlp_norm,
            name=f"encoderblock_{i}",
        )(x, **extra)
    stages["encoded"] = x
    if not c.fc_norm:
        x = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon, name="encoder_norm")(x)
    stages["features"] = x
    return x


def _pool_and_head(x, c, stages):
    """Tokens -> pooled representation -> [fc_norm] -> [pre-logits] -> [head -> activation]."""
    pool = c.pooling or c.classifier
    prefix = c.num_prefix_tokens
    tokens = x
    if pool == "token" and c.distillation and c.representation_size is not None:
        x = x[:, 0]  # transformers' DeiTModel pools the class token alone
    elif pool == "token" and c.distillation:
        x = (x[:, 0] + x[:, 1]) * 0.5  # timm's pooled output of a distilled DeiT
    elif pool == "token":
        x = x[:, 0]
    elif pool in ("gap", "avg"):
        x = ops.mean(x[:, prefix:] if prefix else x, axis=1)
    elif pool == "max":
        x = ops.max(x[:, prefix:] if prefix else x, axis=1)
    elif pool == "map":  # one learned query attends over the patch tokens (timm's ViT drops the prefix tokens too)
        activation = c.mlp_activation or ("gelu_tanh" if c.approximate_gelu else "gelu")
        x = AttentionPool(c.pool_heads or c.num_heads, c.pool_mlp_dim or c.mlp_dim, c.layer_norm_epsilon, activation,
                          name="attention_pool")(x[:, prefix:] if prefix and not c.pool_prefix else x)
    if c.fc_norm:
        x = keras.layers.LayerNormalization(epsilon=c.layer_norm_epsilon, name="fc_norm")(x)
    if c.representation_size is not None:
        x = keras.layers.Dense(c.representation_size, activation="tanh", name="pre_logits")(x)
    stages["pre_logits"] = x
    if c.include_top:
        mixed = keras.mixed_precision.global_policy().compute_dtype != "float32"
        head_dtype = "float32" if mixed else None
        head = keras.layers.Dense(c.classes, kernel_initializer="zeros", bias_initializer="zeros", name="head",
                                  dtype=head_dtype)
        if c.distillation:
            head_dist = keras.layers.Dense(c.classes, kernel_initializer="zeros", bias_initializer="zeros",
                                           name="head_dist", dtype=head_dtype)
            x = (head(tokens[:, 0]) + head_dist(tokens[:, 1])) * 0.5  # DeiT's inference: the two heads averaged
        else:
            x = head(x)
        stages["logits"] = x
        if c.classifier_activation is not None:
            x = keras.layers.Activation(c.classifier_activation, name="predictions", dtype=head_dtype)(x)
    return x
