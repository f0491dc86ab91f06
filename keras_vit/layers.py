"""The paper's building blocks: patches, the patch encoder and the Transformer block.

Numerics follow the official implementation (google-research/vision_transformer,
`vit_jax/models_vit.py`): pre-LayerNorm blocks with epsilon 1e-6, GELU in its tanh
form, attention scaled by 1/sqrt(head_dim) with the softmax in float32.
"""

import math

import keras
from keras import ops

_register = keras.saving.register_keras_serializable(package="keras_vit")


def _pair(value, what):
    """Turns an int or a pair into a (height, width) tuple of positive ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair = (value, value)
    else:
        try:
            pair = tuple(int(v) for v in value)
        except TypeError:
            raise ValueError(f"{what} must be an int or a pair (h, w), got {value!r}.") from None
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{what} must be a positive int or a pair (h, w), got {value!r}.")
    return pair


def grid_size(image_size, patch_size, what="image_size"):
    """The patch grid (gh, gw) of an image; refuses sizes that would be cropped."""
    (h, w), (ph, pw) = _pair(image_size, what), _pair(patch_size, "patch_size")
    if h % ph or w % pw:
        raise ValueError(
            f"{what} {(h, w)} is not a multiple of the patch size {(ph, pw)}: "
            f"{h % ph} row(s) and {w % pw} column(s) of pixels would be cropped. "
            f"Use for example {(max(ph, h // ph * ph), max(pw, w // pw * pw))}."
        )
    return h // ph, w // pw


@_register
class Patches(keras.layers.Layer):
    """Cuts images into non-overlapping patches, flattened in row-major order.

    (B, H, W, C) -> (B, N, P*P*C) with N = (H / ph) * (W / pw), patches ordered
    row by row and each patch flattened as (ph, pw, C), the layout of a conv kernel,
    so `patches @ kernel.reshape(-1, D)` is the patch embedding.

    Example:
    >>> Patches(16)(keras.ops.zeros((2, 224, 160, 3))).shape
    (2, 140, 768)
    """

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = _pair(patch_size, "patch_size")

    def compute_output_shape(self, input_shape):
        b, h, w, c = tuple(input_shape)
        gh, gw = grid_size((h, w), self.patch_size, "image shape (H, W)")
        ph, pw = self.patch_size
        return (b, gh * gw, ph * pw * c)

    def call(self, images):
        if len(images.shape) != 4:
            raise ValueError(f"Patches expects images (B, H, W, C), got shape {tuple(images.shape)}.")
        _, h, w, c = images.shape
        gh, gw = grid_size((h, w), self.patch_size, "image shape (H, W)")
        ph, pw = self.patch_size
        x = ops.reshape(images, (-1, gh, ph, gw, pw, c))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, gh * gw, ph * pw * c))

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}


@_register
class PatchEncoder(keras.layers.Layer):
    """Linear patch projection, optional class token, learnable 1-D position embeddings.

    The projection is a convolution whose kernel and stride are the patch size, as the
    official `embedding`; its kernel has the conv layout (ph, pw, C, hidden_size).
    The class token starts at zero, position embeddings (1, prefix + N, hidden_size)
    from N(0, 0.02). After `build`, `grid_size` holds the patch grid (gh, gw).

    Example:
    >>> enc = PatchEncoder(192, patch_size=16)
    >>> enc(keras.ops.zeros((1, 224, 224, 3))).shape, enc.grid_size
    ((1, 197, 192), (14, 14))
    """

    def __init__(self, hidden_size, patch_size=16, class_token=True, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = int(hidden_size)
        self.patch_size = _pair(patch_size, "patch_size")
        self.class_token = bool(class_token)
        self.num_prefix_tokens = int(self.class_token)
        self.grid_size = None
        self.projection = keras.layers.Conv2D(
            self.hidden_size,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            kernel_initializer="lecun_normal",
            name="embedding",
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        _, h, w, c = tuple(input_shape)
        self.grid_size = grid_size((h, w), self.patch_size, "input (H, W) of the patch encoder")
        self.projection.build(tuple(input_shape))
        if self.class_token:
            self.cls = self.add_weight(shape=(1, 1, self.hidden_size), initializer="zeros", name="cls")
        num_tokens = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        self.position_embedding = self.add_weight(
            shape=(1, num_tokens, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="pos_embedding",
        )

    @property
    def num_patches(self):
        return self.grid_size[0] * self.grid_size[1]

    def compute_output_shape(self, input_shape):
        _, h, w, _ = tuple(input_shape)
        gh, gw = grid_size((h, w), self.patch_size, "input (H, W) of the patch encoder")
        return (input_shape[0], self.num_prefix_tokens + gh * gw, self.hidden_size)

    def call(self, inputs):
        x = self.projection(inputs)
        x = ops.reshape(x, (-1, self.num_patches, self.hidden_size))
        if self.class_token:
            cls = ops.broadcast_to(ops.cast(self.cls, x.dtype), (ops.shape(x)[0], 1, self.hidden_size))
            x = ops.concatenate([cls, x], axis=1)
        return x + ops.cast(self.position_embedding, x.dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "patch_size": self.patch_size,
            "class_token": self.class_token,
        }


@_register
class DropPath(keras.layers.Layer):
    """Stochastic depth: drops a whole residual branch per sample while training."""

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop path rate must be in [0, 1), got {rate}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate else None

    def call(self, x, training=None):
        if not training or not self.rate:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = ops.floor(keep + keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype))
        return x / ops.cast(keep, x.dtype) * mask

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


@_register
class TransformerBlock(keras.layers.Layer):
    """Pre-LN Transformer encoder block: x + MSA(LN(x)), then + MLP(LN(.)).

    The MLP is Dense -> GELU -> dropout -> Dense -> dropout; stochastic depth
    (`drop_path_rate`) applies to both residual branches. The query, key, value and
    output projections are Dense layers over all heads at once; their kernels are the
    official (D, heads, head_dim) and (heads, head_dim, D) arrays, reshaped.

    Call with `return_attention_scores=True` to also get the attention probabilities
    (B, heads, T, T), in float32.

    Example:
    >>> block = TransformerBlock(num_heads=3, mlp_dim=768)
    >>> y, attn = block(keras.ops.zeros((2, 197, 192)), return_attention_scores=True)
    >>> y.shape, attn.shape
    ((2, 197, 192), (2, 3, 197, 197))
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        approximate_gelu=True,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        policy = self.dtype_policy
        dense = dict(kernel_initializer="glorot_uniform", dtype=policy)
        mlp_dense = dict(dense, bias_initializer=keras.initializers.RandomNormal(stddev=1e-6))
        self.norm1 = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm1", dtype=policy)
        self.norm2 = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm2", dtype=policy)
        self._attention_dense = dense
        self.mlp_dense1 = keras.layers.Dense(self.mlp_dim, name="mlp_dense1", **mlp_dense)
        self.mlp_dense2 = None  # its width is the input's, known in build
        self._mlp_dense = mlp_dense
        self.attention_dropout = keras.layers.Dropout(self.attention_dropout_rate, dtype=policy)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)
        self.drop_path = DropPath(self.drop_path_rate, dtype=policy)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        hidden = input_shape[-1]
        if hidden % self.num_heads:
            raise ValueError(
                f"hidden_size {hidden} is not divisible by num_heads {self.num_heads}."
            )
        self.hidden_size = hidden
        self.head_dim = hidden // self.num_heads
        self.query = keras.layers.Dense(hidden, name="query", **self._attention_dense)
        self.key = keras.layers.Dense(hidden, name="key", **self._attention_dense)
        self.value = keras.layers.Dense(hidden, name="value", **self._attention_dense)
        self.out = keras.layers.Dense(hidden, name="out", **self._attention_dense)
        self.mlp_dense2 = keras.layers.Dense(hidden, name="mlp_dense2", **self._mlp_dense)
        for layer in (self.norm1, self.norm2, self.query, self.key, self.value, self.out, self.mlp_dense1):
            layer.build(input_shape)
        self.mlp_dense2.build(input_shape[:-1] + (self.mlp_dim,))

    def _split_heads(self, x):
        x = ops.reshape(x, (ops.shape(x)[0], -1, self.num_heads, self.head_dim))
        return ops.transpose(x, (0, 2, 1, 3))

    def _self_attention(self, x, training):
        q = self._split_heads(self.query(x) * ops.cast(1.0 / math.sqrt(self.head_dim), x.dtype))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        logits = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
        probs = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = self.attention_dropout(ops.cast(probs, x.dtype), training=training)
        y = ops.matmul(weights, v)
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (ops.shape(x)[0], -1, self.hidden_size))
        return self.out(y), probs

    def call(self, inputs, training=None, return_attention_scores=False):
        y, probs = self._self_attention(self.norm1(inputs), training)
        x = inputs + self.drop_path(self.dropout(y, training=training), training=training)
        y = self.mlp_dense1(self.norm2(x))
        y = keras.activations.gelu(y, approximate=self.approximate_gelu)
        y = self.mlp_dense2(self.dropout(y, training=training))
        x = x + self.drop_path(self.dropout(y, training=training), training=training)
        if return_attention_scores:
            return x, probs
        return x

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
