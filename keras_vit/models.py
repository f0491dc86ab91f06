"""VisionTransformer, the table of the paper's variants and keras.applications-style constructors."""

import keras
from keras import ops

from keras_vit.layers import PatchEncoder, TransformerBlock, _pair, _register, grid_size
from keras_vit.stem import resnet_stem, stem_stride

CLASSIFIERS = ("token", "gap")
POOLINGS = ("token", "gap", "avg", "unpooled")

_R50 = {"num_layers": (3, 4, 9), "width_factor": 1}
_R26 = {"num_layers": (2, 2, 2, 2), "width_factor": 1}

# The official configurations (vit_jax/configs/models.py); sizes, not training options.
VARIANTS = {
    "Ti/16": dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768),
    "S/16": dict(patch_size=16, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "S/32": dict(patch_size=32, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "B/8": dict(patch_size=8, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "B/16": dict(patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "B/32": dict(patch_size=32, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "L/16": dict(patch_size=16, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "L/32": dict(patch_size=32, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "H/14": dict(patch_size=14, hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120),
    "R50+B/16": dict(patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet=_R50),
    "R50+L/32": dict(
        patch_size=1, hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096,
        resnet={"num_layers": (3, 4, 6, 3), "width_factor": 1},
    ),
    "R26+S/32": dict(patch_size=1, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536, resnet=_R26),
    "R26+B/32": dict(patch_size=1, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, resnet=_R26),
    "R+Ti/16": dict(
        patch_size=8, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768,
        resnet={"num_layers": (), "width_factor": 1},
    ),
}


def canonical_variant(name):
    """'ViT-B_16', 'vit-b/16', 'B16' or 'R50+ViT-B_16' -> the key of VARIANTS."""
    key = str(name).strip().upper().replace("VIT-", "").replace("VIT", "").replace("_", "/").lstrip("-")
    if "/" not in key:  # B16 -> B/16
        head = key.rstrip("0123456789")
        key = f"{head}/{key[len(head):]}"
    table = {k.upper(): k for k in VARIANTS}
    if key not in table:
        raise ValueError(f"Unknown ViT variant {name!r}. Known variants: {', '.join(VARIANTS)}.")
    return table[key]


def _normalize_resnet(resnet):
    if resnet is None:
        return None
    if not isinstance(resnet, dict) or set(resnet) - {"num_layers", "width_factor"}:
        raise ValueError(
            f"resnet must be None or a dict(num_layers=(3, 4, 9), width_factor=1), got {resnet!r}."
        )
    num_layers = tuple(int(n) for n in resnet.get("num_layers", (3, 4, 9)))
    if any(n < 1 for n in num_layers):
        raise ValueError(f"resnet num_layers must be positive unit counts per stage, got {num_layers}.")
    return {"num_layers": num_layers, "width_factor": resnet.get("width_factor", 1)}


@_register
class VisionTransformer(keras.Model):
    """The Vision Transformer (Dosovitskiy et al., 2021) as a functional Keras model.

    image -> [hybrid ResNet stem] -> PatchEncoder (patch projection, class token, position
    embeddings) -> dropout -> `num_layers` TransformerBlocks -> LayerNorm -> pooling (class
    token or global average) -> [pre-logits Dense + tanh] -> head (zero-initialized Dense).
    Numerics and parameter names follow google-research/vision_transformer, so its
    checkpoints load with `keras_vit.load_official_npz`.

    Args:
        image_size: int or (height, width) of the RGB input.
        patch_size: int or (ph, pw); for hybrids, the patch size on the stem's feature map.
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's width, depth, heads
            and MLP width.
        classes: the head's width.
        include_top: with the head (logits) or without (the pooled representation).
        classifier: "token" (a class token, read out at position 0) or "gap" (no class
            token; the mean over all tokens).
        representation_size: width of the pre-logits layer (Dense + tanh), or None.
        resnet: None, or `dict(num_layers=(3, 4, 9), width_factor=1)` for a hybrid with a
            BiT ResNet-v2 stem; `num_layers=()` keeps its root block only.
        dropout_rate, attention_dropout_rate: dropout after the position embeddings and in
            the MLP / on the attention probabilities.
        drop_path_rate: stochastic depth of the last block; it grows linearly from 0 over
            the blocks.
        classifier_activation: activation on the head, e.g. "softmax"; None gives logits.
        weights: None, or a path to an official `.npz` checkpoint, a `.weights.h5` file or a
            released checkpoint name such as "imagenet21k".
        name: the model's name.
        pooling: how the encoded tokens are pooled: None (as the classifier), "token",
            "gap" (alias "avg"; the mean over the patch tokens) or "unpooled" (all tokens,
            (B, T, D)).
        approximate_gelu: True for the tanh GELU the official checkpoints were trained
            with, False for the exact erf form.
        input_tensor: an optional Keras tensor to build the model on.
        class_names: optional list of the head's class names, saved with the model
            (`decode_predictions` and `keras-vit predict` use them).
        attention_implementation: "auto", "matmul" or "dot_product_attention", how the
            blocks compute attention (see `TransformerBlock`); no variable depends on it.

    Example:
    >>> model = VisionTransformer(image_size=32, patch_size=4, hidden_size=64, num_layers=2,
    ...                           num_heads=4, mlp_dim=128, classes=10)
    >>> model(keras.ops.zeros((1, 32, 32, 3))).shape
    (1, 10)
    """

    def __init__(
        self,
        image_size=224,
        patch_size=16,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        mlp_dim=3072,
        classes=1000,
        include_top=True,
        classifier="token",
        representation_size=None,
        resnet=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        classifier_activation=None,
        weights=None,
        name=None,
        *,
        pooling=None,
        approximate_gelu=True,
        input_tensor=None,
        class_names=None,
        attention_implementation="auto",
        **kwargs,
    ):
        image_size = _pair(image_size, "image_size")
        if class_names is not None:
            class_names = [str(c) for c in class_names]
            if not include_top or len(class_names) != classes:
                raise ValueError(
                    f"class_names has {len(class_names)} names but the model has "
                    f"{classes if include_top else 'no'} classes."
                )
        patch_size = _pair(patch_size, "patch_size")
        resnet = _normalize_resnet(resnet)
        if classifier not in CLASSIFIERS:
            raise ValueError(f"Unknown classifier {classifier!r}; use one of {CLASSIFIERS}.")
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {pooling!r}; use None or one of {POOLINGS}.")
        if pooling == "token" and classifier != "token":
            raise ValueError(f"pooling='token' needs a class token, but classifier={classifier!r} has none.")
        if int(hidden_size) % int(num_heads):
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}.")
        if classes is not None and include_top and int(classes) < 1:
            raise ValueError(f"classes must be a positive int when include_top=True, got {classes}.")
        for what, rate in (("dropout_rate", dropout_rate), ("attention_dropout_rate", attention_dropout_rate),
                           ("drop_path_rate", drop_path_rate)):
            if not 0.0 <= float(rate) < 1.0:
                raise ValueError(f"{what} must be in [0, 1), got {rate}.")
        if resnet is None:
            grid_size(image_size, patch_size)
        else:
            stride = stem_stride(resnet["num_layers"])
            effective = (stride * patch_size[0], stride * patch_size[1])
            if image_size[0] % effective[0] or image_size[1] % effective[1]:
                raise ValueError(
                    f"image_size {image_size} is not a multiple of the hybrid's effective patch size "
                    f"{effective} (stem stride {stride} x patch {patch_size}); pixels would be cropped."
                )

        if input_tensor is None:
            inputs = keras.Input(shape=image_size + (3,), name="image")
            x = inputs
        else:
            shape = tuple(input_tensor.shape)
            if len(shape) != 4 or tuple(shape[1:3]) != image_size:
                raise ValueError(
                    f"input_tensor has shape {shape}; expected (batch, {image_size[0]}, {image_size[1]}, 3)."
                )
            inputs = keras.utils.get_source_inputs(input_tensor)
            inputs = inputs[0] if len(inputs) == 1 else inputs
            x = input_tensor
        if x.shape[-1] != 3:
            raise ValueError(f"keras-vit models take RGB images with 3 channels; got {x.shape[-1]} channels.")

        if resnet is not None:
            x = resnet_stem(x, **resnet)
        x = PatchEncoder(hidden_size, patch_size, class_token=classifier == "token", name="patch_encoder")(x)
        x = keras.layers.Dropout(dropout_rate, name="encoder_dropout")(x)
        for i in range(num_layers):
            x = TransformerBlock(
                num_heads,
                mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                drop_path_rate=drop_path_rate * i / max(num_layers - 1, 1),
                approximate_gelu=approximate_gelu,
                attention_implementation=attention_implementation,
                name=f"encoderblock_{i}",
            )(x)
        x = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)

        pool = pooling or classifier
        prefix = int(classifier == "token")
        if pool == "token":
            x = x[:, 0]
        elif pool in ("gap", "avg"):
            x = ops.mean(x[:, prefix:] if prefix else x, axis=1)
        if representation_size is not None:
            x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
        if include_top:
            mixed = keras.mixed_precision.global_policy().compute_dtype != "float32"
            head_dtype = "float32" if mixed else None
            x = keras.layers.Dense(
                classes, kernel_initializer="zeros", bias_initializer="zeros", name="head", dtype=head_dtype
            )(x)
            if classifier_activation is not None:
                x = keras.layers.Activation(classifier_activation, name="predictions", dtype=head_dtype)(x)

        super().__init__(inputs=inputs, outputs=x, name=name, **kwargs)

        self.image_size = image_size
        self.patch_size = patch_size
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.classes = classes
        self.include_top = bool(include_top)
        self.classifier = classifier
        self.representation_size = representation_size
        self.resnet = resnet
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.classifier_activation = classifier_activation
        self.pooling = pooling
        self.approximate_gelu = bool(approximate_gelu)
        self.class_names = class_names
        self.attention_implementation = attention_implementation

        if weights is not None:
            from keras_vit.checkpoints import load_weights

            load_weights(self, weights)

    def compile(self, optimizer="rmsprop", loss=None, *args, **kwargs):
        """keras.Model.compile; a loss expecting probabilities on a logits head (the default,
        classifier_activation=None) is compiled as from_logits=True, with a warning (see _losses)."""
        if loss is not None and self.include_top:
            from keras_vit._losses import match_loss_to_head

            loss = match_loss_to_head(loss, outputs_logits=self.classifier_activation is None,
                                      model_name=self.name)
        return super().compile(optimizer, loss, *args, **kwargs)

    def compile_from_config(self, config):
        # Keras skips this for any model that overrides compile(); ours only adjusts the loss, so a
        # saved compiled model loads compiled, as Trainer.compile_from_config would do it.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if hasattr(self, "optimizer") and self.built:
            self.optimizer.build(self.trainable_variables)

    @property
    def patch_encoder(self):
        return self.get_layer("patch_encoder")

    @property
    def blocks(self):
        """The TransformerBlocks, in order."""
        return [self.get_layer(f"encoderblock_{i}") for i in range(self.num_layers)]

    @property
    def num_prefix_tokens(self):
        return int(self.classifier == "token")

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "image_size": self.image_size,
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
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        for key in ("image_size", "patch_size"):
            config[key] = tuple(config[key])
        if config.get("resnet"):
            config["resnet"] = dict(config["resnet"], num_layers=tuple(config["resnet"]["num_layers"]))
        return cls(**config)


def create_model(variant, **kwargs):
    """A VisionTransformer of a named variant ("B/16", "ViT-L_16", "R50+ViT-B_16", ...).

    Keyword arguments override the variant's sizes and pass on to VisionTransformer.

    Example:
    >>> create_model("Ti/16", image_size=384, classes=10).count_params()
    5614474
    """
    return VisionTransformer(**{**VARIANTS[canonical_variant(variant)], **kwargs})


def _application(variant, include_top, weights, input_tensor, input_shape, pooling, classes,
                 classifier_activation, name, **kwargs):
    if input_shape is None:
        input_shape = tuple(input_tensor.shape[1:]) if input_tensor is not None else (224, 224, 3)
    input_shape = tuple(input_shape)
    if len(input_shape) != 3 or any(s is None for s in input_shape):
        raise ValueError(
            f"input_shape must be a static (height, width, 3), got {input_shape}: position embeddings "
            "are learned for one patch grid (use keras_vit.with_image_size to move a model)."
        )
    if input_shape[-1] != 3:
        raise ValueError(f"keras-vit models take RGB images with 3 channels; input_shape {input_shape} has {input_shape[-1]}.")
    config = {**VARIANTS[variant], **kwargs}
    return VisionTransformer(
        image_size=input_shape[:2],
        classes=classes,
        include_top=include_top,
        classifier_activation=classifier_activation if include_top else None,
        weights=weights,
        name=name,
        pooling=pooling,
        input_tensor=input_tensor,
        **config,
    )


def _constructor(variant, fn_name):
    def constructor(include_top=True, weights=None, input_tensor=None, input_shape=None, pooling=None,
                    classes=1000, classifier_activation="softmax", name=None, **kwargs):
        return _application(variant, include_top, weights, input_tensor, input_shape, pooling, classes,
                            classifier_activation, name or fn_name.lower(), **kwargs)

    sizes = VARIANTS[variant]
    constructor.__name__ = constructor.__qualname__ = fn_name
    constructor.__doc__ = f"""ViT-{variant} ({sizes['num_layers']} layers, hidden size {sizes['hidden_size']}, \
{sizes['num_heads']} heads, MLP {sizes['mlp_dim']}{', hybrid ResNet stem ' + str(sizes['resnet']['num_layers']) if 'resnet' in sizes else ''}).

    The keras.applications signature; further keywords (classifier, representation_size,
    dropout_rate, drop_path_rate, ...) pass on to `VisionTransformer`.

    Args:
        include_top: with the classification head.
        weights: None, a path to an official `.npz` or `.weights.h5`, or a released
            checkpoint name ("imagenet21k", "imagenet21k+imagenet2012", AugReg names).
        input_tensor: optional Keras tensor to build the model on.
        input_shape: (height, width, 3), default (224, 224, 3).
        pooling: None (the classifier's own), "token", "gap"/"avg" or "unpooled".
        classes: number of classes of the head.
        classifier_activation: activation of the head; None returns logits.

    Example:
    >>> model = keras_vit.{fn_name}(weights=None, classes=10, input_shape=(384, 384, 3))
    """
    return constructor


ViTTi16 = _constructor("Ti/16", "ViTTi16")
ViTS16 = _constructor("S/16", "ViTS16")
ViTS32 = _constructor("S/32", "ViTS32")
ViTB8 = _constructor("B/8", "ViTB8")
ViTB16 = _constructor("B/16", "ViTB16")
ViTB32 = _constructor("B/32", "ViTB32")
ViTL16 = _constructor("L/16", "ViTL16")
ViTL32 = _constructor("L/32", "ViTL32")
ViTH14 = _constructor("H/14", "ViTH14")
R50ViTB16 = _constructor("R50+B/16", "R50ViTB16")
R26ViTS32 = _constructor("R26+S/32", "R26ViTS32")
R26ViTB32 = _constructor("R26+B/32", "R26ViTB32")
RViTTi16 = _constructor("R+Ti/16", "RViTTi16")
