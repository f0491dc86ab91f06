"""The paper's building blocks: patches, the patch encoder, attention and the Transformer block.

Numerics follow the official implementation (google-research/vision_transformer,
`vit_jax/models_vit.py`): pre-LayerNorm blocks with epsilon 1e-6, GELU in its tanh
form, attention scaled by 1/sqrt(head_dim) with the softmax in float32.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import keras
from keras import ops

from keras_vit import interpolation
from keras_vit._common import Shape, Tensor, check_layer_keywords
from keras_vit._common import register as _register
from keras_vit._common import to_pair as _pair
from keras_vit.attention import chunked_attention, static_length, use_chunked
from keras_vit.rope import LAYOUTS as _ROPE_LAYOUTS
from keras_vit.rope import apply_rope

if keras.backend.backend() == "tensorflow":
    import tensorflow as _TF
else:
    _TF = None

ATTENTION_IMPLEMENTATIONS = ("auto", "matmul", "dot_product_attention", "chunked")
FORMULATIONS = ("fused", "reference")
# Which prefix tokens (class, distillation, registers) have position embeddings: "all" (the paper, timm's
# default), "class" (class and distillation tokens, not the registers: transformers' Dinov2WithRegisters),
# "none" (only the patches: timm's no_embed_class, as its DINOv2 with registers).
PREFIX_POSEMB = ("all", "class", "none")
# The MLP's nonlinearity: GELU in its tanh form (the paper's checkpoints) or exact (erf) form, QuickGELU
# x * sigmoid(1.702 x) (OpenAI's CLIP), or SwiGLU: the first Dense twice as wide, silu(first half) * second half.
MLP_ACTIVATIONS = ("gelu_tanh", "gelu", "quick_gelu", "swiglu")

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@ops.custom_gradient
def gelu_tanh(x):
    """GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as jax.nn.gelu.

    x^3 is x * x * x (TensorFlow's own tf.nn.gelu uses the slower pow). The gradient is
    written out, reusing the forward tanh: about half the elementwise passes of autodiff
    through the formula, which matters in training, where the MLP's (B*T, mlp_dim)
    activations make GELU one of the larger memory-bound pieces.
    """
    c, a = _SQRT_2_OVER_PI, 0.044715
    x = ops.convert_to_tensor(x)  # a NumPy x times a torch tensor has no operator
    t = ops.tanh(c * (x + a * (x * x * x)))

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream * (0.5 * (1.0 + t) + (0.5 * x) * (1.0 - t * t) * (c + (3.0 * c * a) * (x * x)))

    return 0.5 * x * (1.0 + t), grad


def check_mlp_activation(name):
    """None (GELU as `approximate_gelu` says) or one of MLP_ACTIVATIONS."""
    if name is not None and name not in MLP_ACTIVATIONS:
        raise ValueError(f"Unknown mlp_activation {name!r}; use None or one of {MLP_ACTIVATIONS}.")
    return name


def mlp_activation(x, name):
    """The MLP's nonlinearity `name` (one of MLP_ACTIVATIONS) on x; "swiglu" halves the last axis."""
    if name == "gelu_tanh":
        return gelu_tanh(x)
    if name == "gelu":
        return keras.activations.gelu(x, approximate=False)
    if name == "quick_gelu":
        return x * ops.sigmoid(1.702 * x)
    gate, value = ops.split(x, 2, axis=-1)  # timm's SwiGLUPacked and transformers' weights_in: SiLU on the first
    return ops.silu(gate) * value


def relative_position_index(grid):
    """BEiT's (T, T) index into its relative position bias table, T = 1 + gh * gw (class token first),
    as timm's gen_relative_position_index and transformers' BeitRelativePositionBias: patch pairs by their
    offset, then three entries for class -> patch, patch -> class and class -> class."""
    import numpy as np

    gh, gw = grid
    size = (2 * gh - 1) * (2 * gw - 1) + 3
    coords = np.stack(np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)
    index = np.zeros((gh * gw + 1,) * 2, dtype="int32")
    index[1:, 1:] = (rel[..., 0] + gh - 1) * (2 * gw - 1) + rel[..., 1] + gw - 1
    index[0, :] = size - 3
    index[:, 0] = size - 2
    index[0, 0] = size - 1
    return index


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
    >>> tuple(Patches(16)(keras.ops.zeros((2, 224, 160, 3))).shape)  # 14 x 10 patches of 16 x 16 x 3
    (2, 140, 768)
    """

    def __init__(self, patch_size: int | tuple[int, int], **kwargs: Any) -> None:
        check_layer_keywords(Patches, kwargs)
        super().__init__(**kwargs)
        self.patch_size = _pair(patch_size, "patch_size")

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        b, h, w, c = tuple(input_shape)
        gh, gw = grid_size((h, w), self.patch_size, "image shape (H, W)")
        ph, pw = self.patch_size
        return (b, gh * gw, ph * pw * c)

    def call(self, images: Tensor) -> Tensor:
        if len(images.shape) != 4:
            raise ValueError(f"Patches expects images (B, H, W, C), got shape {tuple(images.shape)}.")
        _, h, w, c = images.shape
        gh, gw = grid_size((h, w), self.patch_size, "image shape (H, W)")
        ph, pw = self.patch_size
        x = ops.reshape(images, (-1, gh, ph, gw, pw, c))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, gh * gw, ph * pw * c))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "patch_size": self.patch_size}


def check_patch_multiple(images, patch_size, what="image size"):
    """Raises when an image's (H, W) is not a multiple of `patch_size` (pixels would be cropped).

    Static sizes are checked in Python, with a ValueError; sizes unknown until run time (a
    graph traced for any resolution) by an assertion in the graph that names both.
    """
    h, w = images.shape[1], images.shape[2]
    if h is not None and w is not None:
        grid_size((h, w), patch_size, what)
    elif _TF is not None:
        shape = _TF.shape(images)
        ok = _TF.logical_and(_TF.equal(shape[1] % patch_size[0], 0), _TF.equal(shape[2] % patch_size[1], 0))
        _TF.debugging.Assert(ok, [
            f"{what} (H, W) is not a multiple of the patch size {tuple(patch_size)}; pixels would be "
            "cropped. H, W =", shape[1], shape[2]])


@_register
class ImageSizeCheck(keras.layers.Layer):
    """Passes images through unchanged; refuses (H, W) that are not multiples of `multiple`.

    A dynamic hybrid's first layer: its stem would round odd sizes silently, so the
    effective patch size (stem stride x patch) is checked on the image itself.
    """

    def __init__(self, multiple, **kwargs):
        check_layer_keywords(ImageSizeCheck, kwargs)
        super().__init__(**kwargs)
        self.multiple = _pair(multiple, "multiple")

    def call(self, images):
        check_patch_multiple(images, self.multiple, "image size")
        return images

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "multiple": self.multiple}


@_register
class PatchEncoder(keras.layers.Layer):
    """Linear patch projection, optional class and distillation tokens, learnable 1-D position embeddings.

    The projection is a convolution whose kernel and stride are the patch size, as the
    official `embedding`; its kernel has the conv layout (ph, pw, C, hidden_size).
    The class token starts at zero, position embeddings (1, prefix + N, hidden_size)
    from N(0, 0.02). After `build`, `grid_size` holds the patch grid (gh, gw) the position
    embeddings are stored at: the input's, or `posemb_grid` when given.
    `distillation_token=True` (DeiT, Touvron et al., 2021) adds a second learned token after the
    class token, timm's layout: tokens [cls, dist, patches], position embeddings over all of them
    (weight "dist_token", timm's name; from N(0, 0.02) as timm initializes it).

    Inputs of another size (a model with `dynamic_image_size=True` takes any multiple of
    the patch size) get the stored embeddings resampled to their own grid inside the
    graph, with `posemb_resample` ("official": corner-aligned bilinear, as the official
    fine-tuning code; "bilinear"; "bicubic"; see `keras_vit.interpolation`). At the stored
    grid nothing is resampled.

    Example:
    >>> enc = PatchEncoder(192, patch_size=16)
    >>> tuple(enc(keras.ops.zeros((1, 224, 224, 3))).shape), enc.grid_size
    ((1, 197, 192), (14, 14))
    >>> tuple(enc(keras.ops.zeros((1, 384, 320, 3))).shape)  # 24 x 20 patches, embeddings resampled
    (1, 481, 192)
    """

    def __init__(self, hidden_size: int, patch_size: int | tuple[int, int] = 16, class_token: bool = True,
                 posemb_grid: int | tuple[int, int] | None = None, posemb_resample: str = "official",
                 distillation_token: bool = False, register_tokens: int = 0, prefix_posemb: str = "all",
                 patch_bias: bool = True, position_embeddings: bool = True, **kwargs: Any) -> None:
        check_layer_keywords(PatchEncoder, kwargs)
        super().__init__(**kwargs)
        self.hidden_size = int(hidden_size)
        self.patch_size = _pair(patch_size, "patch_size")
        self.class_token = bool(class_token)
        self.distillation_token = bool(distillation_token)
        if self.distillation_token and not self.class_token:
            raise ValueError("distillation_token=True needs class_token=True: DeiT's tokens are [cls, dist, patches].")
        self.register_tokens = int(register_tokens)
        if self.register_tokens < 0:
            raise ValueError(f"register_tokens must be >= 0, got {register_tokens!r}.")
        if prefix_posemb not in PREFIX_POSEMB:
            raise ValueError(f"Unknown prefix_posemb {prefix_posemb!r}; use one of {PREFIX_POSEMB}.")
        self.prefix_posemb = prefix_posemb
        self.patch_bias = bool(patch_bias)
        self.position_embeddings = bool(position_embeddings)  # False: no absolute table (BEiT)
        self.num_prefix_tokens = int(self.class_token) + int(self.distillation_token) + self.register_tokens
        # the prefix tokens that have entries in the position table (before the grid's)
        self.num_posemb_prefix_tokens = {"all": self.num_prefix_tokens, "none": 0,
                                         "class": int(self.class_token) + int(self.distillation_token)}[prefix_posemb]
        self.posemb_grid = None if posemb_grid is None else _pair(posemb_grid, "posemb_grid")
        if posemb_resample not in interpolation.METHODS:
            raise ValueError(f"Unknown posemb_resample {posemb_resample!r}; use one of {interpolation.METHODS}.")
        self.posemb_resample = posemb_resample
        self.grid_size: Any = self.posemb_grid  # (gh, gw) once built
        self.projection = keras.layers.Conv2D(
            self.hidden_size,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            data_format="channels_last",
            kernel_initializer="lecun_normal",
            use_bias=self.patch_bias,
            name="embedding",
            dtype=self.dtype_policy,
        )

    def build(self, input_shape: Shape) -> None:
        _, h, w, c = tuple(input_shape)
        if self.posemb_grid is not None:
            self.grid_size = self.posemb_grid
        elif h is None or w is None:
            raise ValueError(
                f"PatchEncoder got inputs of unknown size {tuple(input_shape)}: pass posemb_grid, the patch "
                "grid its position embeddings are stored at.")
        else:
            self.grid_size = grid_size((h, w), self.patch_size, "input (H, W) of the patch encoder")
        self.projection.build(tuple(input_shape))
        if self.class_token:
            self.cls = self.add_weight(shape=(1, 1, self.hidden_size), initializer="zeros", name="cls")
        if self.distillation_token:
            self.dist_token = self.add_weight(shape=(1, 1, self.hidden_size),
                                              initializer=keras.initializers.RandomNormal(stddev=0.02),
                                              name="dist_token")
        if self.register_tokens:
            self.reg_token = self.add_weight(shape=(1, self.register_tokens, self.hidden_size),
                                             initializer=keras.initializers.RandomNormal(stddev=0.02),
                                             name="reg_token")
        num_tokens = self.num_posemb_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if not self.position_embeddings:
            return
        self.position_embedding = self.add_weight(
            shape=(1, num_tokens, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="pos_embedding",
        )

    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        _, h, w, _ = tuple(input_shape)
        if h is None or w is None:
            return (input_shape[0], None, self.hidden_size)
        gh, gw = grid_size((h, w), self.patch_size, "input (H, W) of the patch encoder")
        return (input_shape[0], self.num_prefix_tokens + gh * gw, self.hidden_size)

    def position_embeddings_for(self, grid: Sequence[int | Tensor]) -> Tensor:
        """The position embeddings (1, posemb prefix + gh * gw, D) for a patch grid, in float32.

        `grid` may hold symbolic sizes; the stored embeddings come back unchanged at the
        stored grid.
        """
        prefix = self.num_posemb_prefix_tokens
        stored = ops.cast(self.position_embedding, "float32")
        gh, gw = self.grid_size

        def resampled():
            patches = ops.reshape(stored[0, prefix:], (gh, gw, self.hidden_size))
            out = interpolation.resample_grid(patches, grid, self.posemb_resample)
            out = ops.reshape(out, (1, -1, self.hidden_size))
            return ops.concatenate([stored[:, :prefix], out], axis=1) if prefix else out

        if all(isinstance(g, int) for g in grid):
            return stored if tuple(grid) == tuple(self.grid_size) else resampled()
        # a graph traced for any size: only the branch taken runs
        same = ops.logical_and(ops.equal(grid[0], gh), ops.equal(grid[1], gw))
        return ops.cond(same, lambda: stored, resampled)

    def call(self, inputs: Tensor) -> Tensor:
        check_patch_multiple(inputs, self.patch_size, "input (H, W) of the patch encoder")
        x = self.projection(inputs)
        grid = tuple(x.shape[1:3])
        if None in grid:
            grid = (ops.shape(x)[1], ops.shape(x)[2])
        x = ops.reshape(x, (ops.shape(x)[0], -1, self.hidden_size))
        return self.add_tokens(x, grid)

    def add_tokens(self, x: Tensor, grid: Sequence[int | Tensor]) -> Tensor:
        """Projected patches (B, gh * gw, D) -> tokens (B, prefix + gh * gw, D): the prefix tokens
        (class, distillation, registers) joined, each token with its position embedding if it has one."""
        prefix = ([self.cls] if self.class_token else []) + ([self.dist_token] if self.distillation_token else [])
        prefix = prefix + ([self.reg_token] if self.register_tokens else [])
        embedded = self.num_posemb_prefix_tokens if self.position_embeddings else 0
        if self.position_embeddings:  # BEiT's and RoPE models have no table
            posemb = ops.cast(self.position_embeddings_for(grid), x.dtype)
            # Each token gets its table entry, if it has one, before the tokens are joined: the same sums as
            # timm (cat then add, or add then cat with no_embed_class) and transformers' registers (inserted
            # after the table is added), so one layout serves all three.
            x = x + posemb[:, embedded:]
        if not prefix:
            return x
        batch = ops.shape(x)[0]
        tokens = ops.concatenate([ops.cast(t, x.dtype) for t in prefix], axis=1)  # (1, prefix, D)
        if embedded:
            tokens = ops.concatenate([tokens[:, :embedded] + posemb[:, :embedded], tokens[:, embedded:]], axis=1)
        tokens = ops.broadcast_to(tokens, (batch, self.num_prefix_tokens, self.hidden_size))
        return ops.concatenate([tokens, x], axis=1)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "patch_size": self.patch_size,
            "class_token": self.class_token,
            "posemb_grid": self.posemb_grid,
            "posemb_resample": self.posemb_resample,
            "distillation_token": self.distillation_token,
            "register_tokens": self.register_tokens,
            "prefix_posemb": self.prefix_posemb,
            "patch_bias": self.patch_bias,
            "position_embeddings": self.position_embeddings,
        }


@_register
class DropPath(keras.layers.Layer):
    """Stochastic depth: drops a whole residual branch per sample while training.

    Each sample's branch is kept with probability 1 - rate and scaled by 1 / (1 - rate), so its
    expectation is unchanged; at inference the branch passes as it is.

    Example:
    >>> drop = DropPath(0.5, seed=0)
    >>> x = np.ones((4, 3), "float32")
    >>> keras.ops.convert_to_numpy(drop(x, training=False))[:, 0]
    array([1., 1., 1., 1.], dtype=float32)
    >>> sorted(set(keras.ops.convert_to_numpy(drop(x, training=True)).ravel().tolist()) - {0.0, 2.0})
    []
    """

    def __init__(self, rate: float = 0.0, seed: int | None = None, **kwargs: Any) -> None:
        check_layer_keywords(DropPath, kwargs)
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"drop path rate must be in [0, 1), got {rate}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate else None

    def call(self, x: Tensor, training: bool | None = None) -> Tensor:
        if not training or not self.rate:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = ops.floor(keep + keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype))
        return x / ops.cast(keep, x.dtype) * mask

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


def matmul_bias(x, kernel, bias, dtype):
    """x (N, in) @ kernel + bias as one 2-D matmul, in `dtype` (grappler fuses the bias add on TensorFlow)."""
    y = ops.matmul(x, ops.cast(kernel, dtype))
    if _TF is not None:
        return _TF.nn.bias_add(y, ops.cast(bias, dtype))
    return y + ops.cast(bias, dtype)


def _check_formulation(formulation):
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}.")
    return formulation


def _jax_on_gpu():
    import jax

    return jax.devices()[0].platform == "gpu"


def _check_rope_layout(layout):
    if layout is not None and layout not in _ROPE_LAYOUTS.values():
        raise ValueError(f"rope_layout must be None or one of {tuple(sorted(set(_ROPE_LAYOUTS.values())))}, got {layout!r}.")
    return layout


def _check_attention_implementation(implementation):
    if implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention_implementation must be one of {ATTENTION_IMPLEMENTATIONS}, "
                         f"got {implementation!r}.")
    return implementation


@_register
class Attention(keras.layers.Layer):
    """Multi-head self-attention, as the official MultiHeadDotProductAttention.

    softmax(Q K^T / sqrt(head_dim)) V over all heads at once, the softmax in float32,
    dropout on the probabilities, then the output projection. The query, key, value and
    output projections are Dense layers (`query`, `key`, `value`, `out`); their kernels are
    the official (D, heads, head_dim) and (heads, head_dim, D) arrays, reshaped. Inside a
    `TransformerBlock` the block owns them (so their variables keep the official paths
    `encoderblock_i/query/kernel`, ...) and hands them over with `use_projections`;
    on its own the layer makes its own in `build`.

    Call with `return_attention_scores=True` to also get the probabilities (B, heads, T, T),
    float32.

    Args:
        num_heads: the number of heads; the width must be divisible by it.
        attention_dropout_rate: dropout on the attention probabilities.
        attention_implementation: "matmul" (two batched matmuls around a float32 softmax),
            "dot_product_attention" (`keras.ops.dot_product_attention`: fused kernels on JAX
            and PyTorch; on TensorFlow the same einsums), "chunked" (`keras_vit.attention.
            chunked_attention`: blocks of queries against blocks of keys, memory linear in the
            tokens, values and gradients those of "matmul") or "auto": PyTorch's fused kernel
            (SDPA, itself linear in memory) under torch and on JAX's GPUs; elsewhere "chunked"
            once the dense logits of one image (heads x T^2) exceed `attention.TILE_ELEMENTS`
            (2^24: 1,673 tokens at 6 heads, 1,183 at 12), below that "matmul" on TensorFlow,
            where it is the faster, and "dot_product_attention" on JAX. None of the others
            gives probabilities, so calls with `return_attention_scores=True`, a relative position
            bias, or attention dropout while training use "matmul". No variable depends on the
            choice; `implementation_for(tokens)` says which one a call takes.
        formulation: "fused" (one q/k/v matmul against the three kernels side by side, the
            1/sqrt(head_dim) scale folded into the query kernel, 2-D matmuls) or "reference"
            (the Dense layers called one by one). Quantized or otherwise replaced Dense layers
            always take the reference formulation. Both read the same variables.

    Example:
    >>> attention = Attention(num_heads=3)
    >>> y, probs = attention(keras.ops.zeros((2, 197, 192)), return_attention_scores=True)
    >>> tuple(y.shape), tuple(probs.shape)
    ((2, 197, 192), (2, 3, 197, 197))
    """

    def __init__(self, num_heads: int, attention_dropout_rate: float = 0.0, attention_implementation: str = "auto",
                 formulation: str = "fused", rope_layout: str | None = None, **kwargs: Any) -> None:
        check_layer_keywords(Attention, kwargs)
        super().__init__(**kwargs)
        self.rope_layout = _check_rope_layout(rope_layout)
        self.num_heads = int(num_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.attention_implementation = _check_attention_implementation(attention_implementation)
        self.formulation = _check_formulation(formulation)
        self.attention_dropout = keras.layers.Dropout(self.attention_dropout_rate, dtype=self.dtype_policy)
        self.query = self.key = self.value = self.out = None

    def use_projections(self, query: keras.layers.Dense, key: keras.layers.Dense, value: keras.layers.Dense,
                        out: keras.layers.Dense) -> None:
        """Shares built Dense layers as the four projections (a TransformerBlock's own)."""
        self.query, self.key, self.value, self.out = query, key, value, out

    def build(self, input_shape: Shape) -> None:
        hidden = int(input_shape[-1])
        if hidden % self.num_heads:
            raise ValueError(f"hidden_size {hidden} is not divisible by num_heads {self.num_heads}.")
        self.hidden_size = hidden
        self.head_dim = hidden // self.num_heads
        if self.query is None:
            dense = dict(kernel_initializer="glorot_uniform", dtype=self.dtype_policy)
            projections = [keras.layers.Dense(hidden, name=n, **dense) for n in ("query", "key", "value", "out")]
            for layer in projections:
                layer.build(input_shape)
            self.use_projections(*projections)

    def _fusable(self):
        layers = (self.query, self.key, self.value, self.out)
        return self.formulation == "fused" and all(getattr(layer, "quantization_mode", None) is None
                                                   for layer in layers)

    def implementation_for(self, tokens: int | None, training: bool = False, return_attention_scores: bool = False,
                           bias: bool = False) -> str:
        """The implementation a call over `tokens` tokens takes: "matmul", "dot_product_attention" or
        "chunked" (a TensorFlow graph of any token count takes "matmul" unless "chunked" is asked for).

        Example:
        >>> layer = Attention(num_heads=6, attention_implementation="chunked")
        >>> layer.implementation_for(12322), layer.implementation_for(12322, return_attention_scores=True)
        ('chunked', 'matmul')
        """
        impl = self.attention_implementation
        if return_attention_scores or bias or (training and self.attention_dropout_rate):
            return "matmul"
        if impl != "auto":
            return impl
        backend = keras.backend.backend()
        if backend == "torch" or (backend == "jax" and _jax_on_gpu()):
            return "dot_product_attention"
        tokens = static_length(tokens)
        if tokens is None:  # a graph of any size: the dense form (chunked when asked for)
            return "matmul"
        if use_chunked(tokens, self.num_heads):
            return "chunked"
        return "matmul" if backend == "tensorflow" else "dot_product_attention"

    def _core(self, q, k, v, impl, training, bias):
        """q (scaled), k, v (B, heads, T, head_dim) -> (B, heads, T, head_dim), probs or None."""
        if impl == "chunked":
            return chunked_attention(q, k, v), None
        return self._matmul_attention(q, k, v, training, bias)

    def _matmul_attention(self, q, k, v, training, bias=None):
        """q (already scaled), k, v (B, heads, T, head_dim) -> (B, heads, T, head_dim), float32 probs.
        `bias` (heads, T, T) is added to the logits before the softmax (BEiT's relative position bias)."""
        logits = ops.cast(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))), "float32")
        if bias is not None:
            logits = logits + ops.cast(bias, "float32")
        probs = ops.softmax(logits, axis=-1)
        weights = self.attention_dropout(ops.cast(probs, self.compute_dtype), training=training)
        return ops.matmul(weights, v), probs

    def call(self, x: Tensor, training: bool | None = None, return_attention_scores: bool = False,
             bias: Tensor | None = None, rope: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """x (B, T, D), already normalized -> (B, T, D) [, probs (B, heads, T, T)]; `bias` (heads, T, T)
        is added to the attention logits (a relative position bias); `rope` (2, T, head_dim), a
        `keras_vit.rope.rope_table`, rotates the queries and keys (the layer's `rope_layout` pairs the channels)."""
        if rope is not None and self.rope_layout is None:
            raise ValueError(f"{self.name}: a RoPE table was given to an Attention built with rope_layout=None; "
                             f"build it with rope_layout in {tuple(sorted(set(_ROPE_LAYOUTS.values())))}.")
        if rope is None and self.rope_layout is not None:
            raise ValueError(f"{self.name} rotates its queries and keys (rope_layout={self.rope_layout!r}) and needs "
                             "their RoPE table: call it with rope=keras_vit.rope.rope_table(grid, ...) (a "
                             "VisionTransformer's model.rope_table(images)).")
        y, probs = self._attend(x, training, return_attention_scores, bias, rope)
        return (y, probs) if return_attention_scores else y

    def _rotate(self, q, k, rope):
        """q, k (B, T, heads, head_dim) rotated by the RoPE table, as the sources do after the projection."""
        return apply_rope(q, rope, self.rope_layout), apply_rope(k, rope, self.rope_layout)

    def _attend(self, x, training, return_probs, bias=None, rope=None):
        b, t = ops.shape(x)[0], ops.shape(x)[1]
        d, h, hd = self.hidden_size, self.num_heads, self.head_dim
        scale = 1.0 / math.sqrt(hd)
        impl = self.implementation_for(x.shape[1], bool(training), return_probs, bias is not None)
        dpa = impl == "dot_product_attention"
        logit_bias = bias
        probs = None
        if self._fusable():
            dtype = self.compute_dtype
            kernel = ops.concatenate([self.query.kernel * scale, self.key.kernel, self.value.kernel], axis=1)
            bias = ops.concatenate([self.query.bias * scale, self.key.bias, self.value.bias], axis=0)
            qkv = ops.reshape(matmul_bias(ops.reshape(x, (-1, d)), kernel, bias, dtype), (b, t, 3, h, hd))
            # unstack, not indexing: the gradient of an index is a zero-padded full-size tensor
            if rope is not None:  # rotated as (B, T, heads, head_dim), then as the implementation takes them
                q, k, v = ops.unstack(qkv, 3, axis=2)
                q, k = self._rotate(q, k, rope)
                y, probs = self._heads(q, k, v, impl, training, logit_bias)
            elif dpa:  # (B, T, heads, head_dim) as it comes
                q, k, v = ops.unstack(qkv, 3, axis=2)
                y = ops.dot_product_attention(q, k, v, scale=1.0)
            else:  # one transpose to (3, B, heads, T, head_dim)
                q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)
                y, probs = self._core(q, k, v, impl, training, logit_bias)
                y = ops.transpose(y, (0, 2, 1, 3))
            y = matmul_bias(ops.reshape(y, (-1, d)), self.out.kernel, self.out.bias, dtype)
            return ops.reshape(y, (b, t, d)), probs
        q = ops.reshape(self.query(x) * ops.cast(scale, x.dtype), (b, t, h, hd))
        k = ops.reshape(self.key(x), (b, t, h, hd))
        v = ops.reshape(self.value(x), (b, t, h, hd))
        if rope is not None:
            q, k = self._rotate(q, k, rope)
        y, probs = self._heads(q, k, v, impl, training, logit_bias)
        return self.out(ops.reshape(y, (b, t, d))), probs

    def _heads(self, q, k, v, impl, training, bias):
        """q (scaled), k, v (B, T, heads, head_dim) -> (B, T, heads, head_dim), probs or None."""
        if impl == "dot_product_attention":
            return ops.dot_product_attention(q, k, v, scale=1.0), None
        q, k, v = (ops.transpose(z, (0, 2, 1, 3)) for z in (q, k, v))
        y, probs = self._core(q, k, v, impl, training, bias)
        return ops.transpose(y, (0, 2, 1, 3)), probs

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "attention_dropout_rate": self.attention_dropout_rate,
            "attention_implementation": self.attention_implementation,
            "formulation": self.formulation,
            "rope_layout": self.rope_layout,
        }


@_register
class TransformerBlock(keras.layers.Layer):
    """Pre-LN Transformer encoder block: x + MSA(LN(x)), then + MLP(LN(.)).

    The self-attention is an `Attention` layer (see there for `attention_implementation`
    and `formulation`); the block owns its query, key, value and output Dense layers, so
    variables and official checkpoint keys are those of the official block. The MLP is
    Dense -> GELU -> dropout -> Dense -> dropout; stochastic depth (`drop_path_rate`)
    applies to both residual branches.

    Call with `return_attention_scores=True` to also get the attention probabilities
    (B, heads, T, T), in float32.

    `remat=True` (rematerialisation) recomputes both residual branches in the backward pass
    while training instead of storing their activations (`keras.remat`: tf.recompute_grad,
    jax.checkpoint, torch.utils.checkpoint), for about a third more compute; the gradients are
    those without it. The dropout masks are drawn outside the recomputation, so it sees the same
    ones; attention dropout (inside the softmax) cannot be, and is refused with remat.

    `formulation`: "fused" (the default) works on the tokens as one (B*T, D) matrix: 2-D
    matmuls whose bias adds TensorFlow's grappler fuses into them, one q/k/v matmul, and the
    tanh GELU as x * x * x rather than TensorFlow's pow(x, 3) (jax.nn.gelu's own
    formulation); "reference" calls the Dense sublayers one by one (it serves quantized or
    otherwise replaced Dense layers, which always take it). Both read the same variables;
    float32 results agree to about 1e-6. It may be changed on a built block
    (`block.formulation = "reference"`), as may `attention_implementation`.

    Example:
    >>> block = TransformerBlock(num_heads=3, mlp_dim=768)
    >>> y, attn = block(keras.ops.zeros((2, 197, 192)), return_attention_scores=True)
    >>> tuple(y.shape), tuple(attn.shape)
    ((2, 197, 192), (2, 3, 197, 197))
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        approximate_gelu: bool = True,
        layer_norm_epsilon: float = 1e-6,
        attention_implementation: str = "auto",
        formulation: str = "fused",
        layer_scale: float | None = None,
        mlp_activation: str | None = None,
        relative_position_grid: tuple[int, int] | None = None,
        remat: bool = False,
        rope_layout: str | None = None,
        mlp_norm: bool = False,
        **kwargs: Any,
    ) -> None:
        check_layer_keywords(TransformerBlock, kwargs)
        super().__init__(**kwargs)
        if not isinstance(remat, bool):
            raise ValueError(f"remat must be True or False, got {remat!r}.")
        if remat and attention_dropout_rate:
            raise ValueError(
                f"remat=True with attention_dropout_rate={attention_dropout_rate}: the recomputation would draw "
                "other dropout masks than the forward pass. Set attention_dropout_rate=0 (the paper's ViTs "
                "use 0) or remat=False.")
        self.remat = remat
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.layer_scale = None if layer_scale is None else float(layer_scale)
        self.mlp_activation = check_mlp_activation(mlp_activation)
        # BEiT's relative position bias over a fixed patch grid (gh, gw) with a class token in front
        self.relative_position_grid = None if relative_position_grid is None else _pair(
            relative_position_grid, "relative_position_grid")
        policy = self.dtype_policy
        dense = dict(kernel_initializer="glorot_uniform", dtype=policy)
        mlp_dense = dict(dense, bias_initializer=keras.initializers.RandomNormal(stddev=1e-6))
        self.norm1 = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm1", dtype=policy)
        self.norm2 = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm2", dtype=policy)
        self._attention_dense = dense
        # Private on purpose: Keras saves a layer's public attributes first, so the projections
        # keep their saved paths (encoderblock_i/query, ...) of files written before this layer.
        self._attention = Attention(self.num_heads, self.attention_dropout_rate, attention_implementation,
                                    formulation, rope_layout=rope_layout, name="attention", dtype=policy)
        # SwiGLU's first Dense is twice as wide: its two halves are the gate and the value
        width = 2 * self.mlp_dim if self.mlp_activation == "swiglu" else self.mlp_dim
        self.mlp_dense1 = keras.layers.Dense(width, name="mlp_dense1", **mlp_dense)
        self.mlp_dense2: keras.layers.Dense | None = None  # its width is the input's, known in build
        # EVA02's sub-LN: the MLP's hidden units normalized before its second layer
        self.mlp_norm = (keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="mlp_norm", dtype=policy)
                         if mlp_norm else None)
        self._mlp_dense = mlp_dense
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)
        self.drop_path = DropPath(self.drop_path_rate, dtype=policy)

    @property
    def attention_implementation(self) -> str:
        return self._attention.attention_implementation

    @attention_implementation.setter
    def attention_implementation(self, value: str) -> None:
        self._attention.attention_implementation = _check_attention_implementation(value)

    @property
    def formulation(self) -> str:
        return self._attention.formulation

    @formulation.setter
    def formulation(self, value: str) -> None:
        self._attention.formulation = _check_formulation(value)

    def attention_layer(self) -> Attention:
        """The block's `Attention` layer (sharing the block's query/key/value/out). A method,
        not an attribute: an attribute would change where Keras saves the projections."""
        return self._attention

    def build(self, input_shape: Shape) -> None:
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
        if self.mlp_norm is not None:
            self.mlp_norm.build(input_shape[:-1] + (self.mlp_dim,))
        self._attention.use_projections(self.query, self.key, self.value, self.out)
        self._attention.build(input_shape)
        if self.relative_position_grid is not None:
            self.relative_position_index = relative_position_index(self.relative_position_grid)
            self.relative_position_bias_table = self.add_weight(
                shape=(int(self.relative_position_index.max()) + 1, self.num_heads), initializer="zeros",
                name="relative_position_bias_table")
        if self.layer_scale is not None:  # LayerScale (Touvron et al., 2021): a per-channel gain on each branch
            init = keras.initializers.Constant(self.layer_scale)
            self.layer_scale1 = self.add_weight(shape=(hidden,), initializer=init, name="layer_scale1")
            self.layer_scale2 = self.add_weight(shape=(hidden,), initializer=init, name="layer_scale2")

    def _fusable(self):
        layers = (self.mlp_dense1, self.mlp_dense2)
        return self.formulation == "fused" and all(getattr(layer, "quantization_mode", None) is None
                                                   for layer in layers)

    def _gelu(self, x):
        return mlp_activation(x, self.mlp_activation or ("gelu_tanh" if self.approximate_gelu else "gelu"))

    def _scale(self, y, which):
        if self.layer_scale is None:
            return y
        return y * ops.cast(self.layer_scale1 if which == 1 else self.layer_scale2, y.dtype)

    def _mlp(self, x, training, keep=None):
        """The MLP; `keep` (B, T, mlp_dim), when given, is its dropout mask, drawn by the caller."""
        def drop(y, keep):
            y = self.dropout(y, training=training) if keep is None else y * keep
            return y if self.mlp_norm is None else self.mlp_norm(y)
        if self._fusable():
            b, t = ops.shape(x)[0], ops.shape(x)[1]
            dtype = self.compute_dtype
            y = self._gelu(matmul_bias(ops.reshape(x, (-1, self.hidden_size)), self.mlp_dense1.kernel,
                                        self.mlp_dense1.bias, dtype))
            keep = None if keep is None else ops.reshape(keep, (-1, self.mlp_dim))
            y = matmul_bias(drop(y, keep), self.mlp_dense2.kernel, self.mlp_dense2.bias, dtype)
            return ops.reshape(y, (b, t, self.hidden_size))
        return self.mlp_dense2(drop(self._gelu(self.mlp_dense1(x)), keep))

    @property
    def rope_layout(self) -> str | None:
        """How the block's attention pairs channels for RoPE ("half", "interleaved"), or None (no RoPE)."""
        return self._attention.rope_layout

    def _remat_branches(self, inputs, training, bias, rope):
        """The two residual branches, recomputed in the backward pass instead of stored (`remat`): what is
        kept per block is its input and the branch outputs. The random parts (dropout masks, drop path)
        are drawn outside the recomputed functions, so the recomputation sees the same ones."""
        def attention_branch(x):
            return self._attention(self.norm1(x), training=training, bias=bias, rope=rope)

        def mlp_branch(x, *keep):
            return self._mlp(self.norm2(x), training, *keep)

        keep = ()
        if training and self.dropout_rate:
            shape = ops.shape(inputs)
            keep = (self.dropout(ops.ones((shape[0], shape[1], self.mlp_dim), self.compute_dtype), training=True),)
        y = keras.remat(attention_branch)(inputs)
        x = inputs + self.drop_path(self.dropout(self._scale(y, 1), training=training), training=training)
        y = keras.remat(mlp_branch)(x, *keep)
        return x + self.drop_path(self.dropout(self._scale(y, 2), training=training), training=training)

    def _relative_bias(self, tokens):
        if self.relative_position_grid is None:
            return None
        expected = self.relative_position_index.shape[0]
        if tokens.shape[1] is not None and tokens.shape[1] != expected:
            raise ValueError(f"{self.name}: a relative position bias over the grid {self.relative_position_grid} "
                             f"(+ the class token: {expected} tokens) got {tokens.shape[1]} tokens; BEiT-style "
                             "models take their own image size.")
        bias = ops.take(self.relative_position_bias_table, self.relative_position_index.reshape(-1), axis=0)
        return ops.transpose(ops.reshape(bias, (expected, expected, self.num_heads)), (2, 0, 1))

    def call(self, inputs: Tensor, training: bool | None = None, return_attention_scores: bool = False,
             rope: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """inputs (B, T, D) -> (B, T, D) [, probs]; `rope`: the RoPE table (2, T, head_dim) of a block built
        with `rope_layout` (`keras_vit.rope.rope_table`)."""
        bias = self._relative_bias(inputs)
        if self.remat and training and not return_attention_scores:
            return self._remat_branches(inputs, training, bias, rope)
        y, probs = (self._attention(self.norm1(inputs), training=training, return_attention_scores=True, bias=bias,
                                    rope=rope)
            if return_attention_scores else (self._attention(self.norm1(inputs), training=training, bias=bias,
                                                             rope=rope), None))
        x = inputs + self.drop_path(self.dropout(self._scale(y, 1), training=training), training=training)
        y = self._mlp(self.norm2(x), training)
        x = x + self.drop_path(self.dropout(self._scale(y, 2), training=training), training=training)
        if return_attention_scores:
            return x, probs
        return x

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "attention_implementation": self.attention_implementation,
            "formulation": self.formulation,
            "layer_scale": self.layer_scale,
            "mlp_activation": self.mlp_activation,
            "relative_position_grid": self.relative_position_grid,
            "remat": self.remat,
            "rope_layout": self.rope_layout,
            "mlp_norm": self.mlp_norm is not None,
        }


@_register
class AttentionPool(keras.layers.Layer):
    """Multi-head attention pooling ("MAP", big_vision's head of SigLIP): one learned query attends over
    the tokens, then x + MLP(LayerNorm(x)); (B, T, D) -> (B, D).

    timm's `AttentionPoolLatent` (latent_len 1) and transformers' `SiglipMultiheadAttentionPoolingHead`:
    variables "probe" (1, 1, D), Dense "query", "key", "value", "out", LayerNorm "norm", Dense
    "mlp_dense1" / "mlp_dense2" around the model's MLP activation; the softmax in float32.

    Example:
    >>> tuple(AttentionPool(num_heads=4, mlp_dim=64)(keras.ops.zeros((2, 16, 32))).shape)
    (2, 32)
    """

    def __init__(self, num_heads: int, mlp_dim: int, layer_norm_epsilon: float = 1e-6, mlp_activation: str = "gelu",
                 **kwargs: Any) -> None:
        check_layer_keywords(AttentionPool, kwargs)
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.mlp_activation = check_mlp_activation(mlp_activation) or "gelu"
        if self.mlp_activation == "swiglu":
            raise ValueError("AttentionPool's MLP takes a plain activation, not 'swiglu'.")
        policy = self.dtype_policy
        self.norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm", dtype=policy)
        self.mlp_dense1 = keras.layers.Dense(self.mlp_dim, name="mlp_dense1",
                                             kernel_initializer="glorot_uniform", dtype=policy)
        # widths known in build
        self.query: Any = None
        self.key: Any = None
        self.value: Any = None
        self.out: Any = None
        self.mlp_dense2: Any = None

    def build(self, input_shape: Shape) -> None:
        hidden = int(input_shape[-1])
        if hidden % self.num_heads:
            raise ValueError(f"hidden_size {hidden} is not divisible by num_heads {self.num_heads}.")
        self.hidden_size = hidden
        dense = dict(kernel_initializer="glorot_uniform", dtype=self.dtype_policy)
        self.query, self.key, self.value, self.out = (keras.layers.Dense(hidden, name=n, **dense)
                                                      for n in ("query", "key", "value", "out"))
        self.mlp_dense2 = keras.layers.Dense(hidden, name="mlp_dense2", **dense)
        self.probe = self.add_weight(shape=(1, 1, hidden), name="probe",
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))
        token = (None, 1, hidden)
        for layer in (self.query, self.key, self.value, self.out, self.norm, self.mlp_dense1):
            layer.build(token)
        self.mlp_dense2.build((None, 1, self.mlp_dim))

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        return (input_shape[0], input_shape[-1])

    def call(self, x: Tensor) -> Tensor:
        b, t = ops.shape(x)[0], ops.shape(x)[1]
        d, h = self.hidden_size, self.num_heads
        hd = d // h
        q = self.query(ops.cast(self.probe, x.dtype)) * ops.cast(1.0 / math.sqrt(hd), x.dtype)
        q = ops.transpose(ops.reshape(q, (1, 1, h, hd)), (0, 2, 1, 3))  # (1, heads, 1, hd)
        k = ops.transpose(ops.reshape(self.key(x), (b, t, h, hd)), (0, 2, 3, 1))  # (B, heads, hd, T)
        v = ops.transpose(ops.reshape(self.value(x), (b, t, h, hd)), (0, 2, 1, 3))  # (B, heads, T, hd)
        probs = ops.softmax(ops.cast(ops.matmul(q, k), "float32"), axis=-1)
        y = ops.matmul(ops.cast(probs, x.dtype), v)  # (B, heads, 1, hd)
        y = self.out(ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (b, 1, d)))
        y = y + self.mlp_dense2(mlp_activation(self.mlp_dense1(self.norm(y)), self.mlp_activation))
        return y[:, 0]

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon, "mlp_activation": self.mlp_activation}
