"""Text towers of two-tower image-text models (CLIP, SigLIP) as Keras models.

token ids (B, L) -> token + position embeddings -> pre-LN Transformer blocks (keras_vit's own
`TransformerBlock`, here with a causal mask for CLIP) -> final LayerNorm -> one token read out -> a
linear projection into the joint embedding space. The read-out token is where each library takes it:

- "eos": the first end-of-text token (`eos_token_id`), transformers' CLIP since PR #24773;
- "argmax": the position of the highest token id, OpenAI's CLIP and transformers' CLIP when the config's
  `eos_token_id` is 2 (checkpoints saved before that PR): the end-of-text id is the vocabulary's last;
- "last": the last position, padding included (SigLIP, which was trained on texts padded to 64 tokens).

Example:
>>> tower = text_tower(TextConfig(vocab_size=100, max_length=16, hidden_size=32, num_layers=2, num_heads=4,
...                               mlp_dim=64, projection_dim=24, pooling="eos", eos_token_id=1))
>>> tuple(tower(keras.ops.ones((3, 7), "int32")).shape)
(3, 24)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_vit._common import Tensor, check_keywords
from keras_vit.attention import static_length
from keras_vit.layers import MLP_ACTIVATIONS, TransformerBlock

POOLINGS = ("eos", "argmax", "last")
# Added to the logits of the keys a query may not see: exp() of it is exactly 0 in float32 (and bfloat16).
_MASKED = -1e9


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """The sizes and options of a text tower.

    Args:
        vocab_size: token ids are in [0, vocab_size).
        max_length: the number of position embeddings: the longest token sequence the tower reads.
        hidden_size: the Transformer's width.
        num_layers: its depth (blocks).
        num_heads: its attention heads.
        mlp_dim: its MLP's hidden width.
        projection_dim: the width of the joint image-text embedding space.
        projection_bias: whether the projection has a bias (SigLIP's `head`; CLIP's `text_projection` has none).
        causal: each token attends to itself and the tokens before it only (CLIP).
        pooling: "eos", "argmax" or "last" (the module docstring says which library reads out where).
        eos_token_id: the end-of-text token's id (pooling "eos").
        mlp_activation: "quick_gelu" (OpenAI's CLIP), "gelu" or "gelu_tanh" (SigLIP).
        layer_norm_epsilon: every LayerNorm's epsilon.

    Example:
    >>> config = TextConfig(vocab_size=49408, max_length=77, hidden_size=512, num_layers=12, num_heads=8,
    ...                     mlp_dim=2048, projection_dim=512, pooling="eos", eos_token_id=49407)  # CLIP ViT-B's
    >>> config.causal, config.mlp_activation
    (True, 'quick_gelu')
    """

    vocab_size: int
    max_length: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    projection_dim: int
    projection_bias: bool = False
    causal: bool = True
    pooling: str = "eos"
    eos_token_id: int | None = None
    mlp_activation: str = "quick_gelu"
    layer_norm_epsilon: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_length", "hidden_size", "num_layers", "num_heads", "mlp_dim",
                     "projection_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TextConfig.{name} must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"TextConfig: hidden_size {self.hidden_size} is not divisible by num_heads "
                             f"{self.num_heads}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"TextConfig.pooling must be one of {POOLINGS}, got {self.pooling!r}.")
        if self.pooling == "eos" and (self.eos_token_id is None or not 0 <= self.eos_token_id < self.vocab_size):
            raise ValueError(f"TextConfig: pooling 'eos' needs an eos_token_id in [0, {self.vocab_size}), got "
                             f"{self.eos_token_id!r}.")
        if self.mlp_activation not in MLP_ACTIVATIONS or self.mlp_activation == "swiglu":
            raise ValueError(f"TextConfig.mlp_activation must be 'quick_gelu', 'gelu' or 'gelu_tanh', got "
                             f"{self.mlp_activation!r}.")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TextConfig:
        check_keywords(values, {f.name for f in dataclasses.fields(cls)}, "TextConfig")
        return cls(**values)


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(keras.layers.Layer):
    """Token embeddings plus learned position embeddings (the first L of `max_length`): ids (B, L) -> (B, L, D).
    An id outside the vocabulary is clipped by the gather on some backends and refused on others, so the
    tokenizers here never make one."""

    def __init__(self, vocab_size: int, max_length: int, hidden_size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab_size, self.max_length, self.hidden_size = int(vocab_size), int(max_length), int(hidden_size)

    def build(self, input_shape: Any) -> None:
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = self.add_weight(shape=(self.vocab_size, self.hidden_size), initializer=init,
                                               name="token_embedding")
        self.position_embedding = self.add_weight(shape=(self.max_length, self.hidden_size), initializer=init,
                                                  name="position_embedding")

    def call(self, ids: Tensor) -> Tensor:
        length = static_length(ids.shape[1])
        if length is not None and length > self.max_length:
            raise ValueError(f"{self.name}: {length} tokens, more than the {self.max_length} position embeddings; "
                             "tokenize with truncation (the tokenizers here truncate to max_length).")
        tokens = ops.take(self.token_embedding, ops.cast(ids, "int32"), axis=0)
        positions = self.position_embedding[: ops.shape(ids)[1]]
        return ops.cast(tokens + positions[None], self.compute_dtype)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], input_shape[1], self.hidden_size)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab_size": self.vocab_size, "max_length": self.max_length,
                "hidden_size": self.hidden_size}


@keras.saving.register_keras_serializable(package="keras_vit")
class TextBlock(TransformerBlock):
    """keras_vit's `TransformerBlock` (the same variables and numerics) whose attention may be causal: with
    `causal=True` token i attends to tokens 0..i only, as CLIP's text encoder."""

    def __init__(self, *args: Any, causal: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.causal = bool(causal)

    def _relative_bias(self, tokens):
        if not self.causal:
            return None
        length = ops.shape(tokens)[1]
        rows = ops.arange(length)[:, None]
        cols = ops.arange(length)[None, :]
        return ops.where(cols > rows, _MASKED, 0.0)[None]  # (1, T, T): the same mask for every head

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "causal": self.causal}


@keras.saving.register_keras_serializable(package="keras_vit")
class TextPool(keras.layers.Layer):
    """The read-out token of each text: (tokens (B, L, D), ids (B, L)) -> (B, D), `pooling` as `TextConfig`."""

    def __init__(self, pooling: str = "eos", eos_token_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}.")
        self.pooling, self.eos_token_id = pooling, eos_token_id

    def call(self, tokens: Tensor, ids: Tensor) -> Tensor:
        if self.pooling == "last":
            return tokens[:, -1]
        ids = ops.cast(ids, "int32")
        if self.pooling == "argmax":
            index = ops.argmax(ids, axis=-1)
        else:  # the first end-of-text token (argmax returns the first of equal maxima)
            index = ops.argmax(ops.cast(ops.equal(ids, self.eos_token_id), "int32"), axis=-1)
        index = ops.cast(index, "int32")
        return ops.take_along_axis(tokens, index[:, None, None], axis=1)[:, 0]

    def compute_output_shape(self, tokens_shape: Any, ids_shape: Any = None) -> tuple[Any, ...]:
        return (tokens_shape[0], tokens_shape[2])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pooling": self.pooling, "eos_token_id": self.eos_token_id}


def text_tower(config: TextConfig, name: str = "text_tower") -> keras.Model:
    """A functional Keras model: token ids (B, L) int32, L <= config.max_length -> text embeddings
    (B, projection_dim), not normalised (transformers' `get_text_features`).

    Example:
    >>> config = TextConfig(vocab_size=100, max_length=64, hidden_size=32, num_layers=2, num_heads=4,
    ...                     mlp_dim=64, projection_dim=32, projection_bias=True, causal=False, pooling="last",
    ...                     mlp_activation="gelu_tanh", layer_norm_epsilon=1e-6)
    >>> text_tower(config).output_shape
    (None, 32)
    """
    ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = TextEmbedding(config.vocab_size, config.max_length, config.hidden_size, name="embeddings")(ids)
    for i in range(config.num_layers):
        x = TextBlock(config.num_heads, config.mlp_dim, mlp_activation=config.mlp_activation,
                      layer_norm_epsilon=config.layer_norm_epsilon, causal=config.causal, name=f"block_{i}")(x)
    x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="final_norm")(x)
    pooled = TextPool(config.pooling, config.eos_token_id, name="pool")(x, ids)
    out = keras.layers.Dense(config.projection_dim, use_bias=config.projection_bias, name="projection")(pooled)
    model = keras.Model(ids, out, name=name)
    model.text_config = config
    return model
