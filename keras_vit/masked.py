"""Masked patch prediction: the paper's self-supervised pre-training (Section 4.6, Appendix B.1.2).

Half of the patch embeddings of every image are corrupted, as BERT corrupts words: of the
chosen patches 80% are replaced by a learnable [mask] embedding, 10% by the embedding of another
random patch (of any image in the batch) and 10% are kept as they are. The position embeddings
are added after, so a replaced patch keeps its place. From each chosen patch's output token a
linear head predicts the patch's mean colour at 3 bits a channel: 512 classes. Labels are not
used. The encoder then fine-tunes as any checkpoint does.

`keras-vit train` runs it with `objective="mpp"` (recipes/cifar10_mpp.py) and writes the encoder
as `model.keras`, which another recipe starts from with `--set init=PATH`:

    keras-vit train recipes/cifar10_mpp.py --set data=../shared/data/cifar10-jpeg.tgz --model-dir runs/mpp
    keras-vit train recipes/cifar10.py --set data=../shared/data/cifar10-jpeg.tgz \\
        --set init=runs/mpp/model.keras --model-dir runs/mpp_finetuned

The corruption works on the model's own patches (its patch size, at whatever image size the
recipe sets); the targets are computed from the same (augmented) images the model sees.
"""

from __future__ import annotations

from typing import Any, Sequence

import keras
from keras import ops

from keras_vit._common import Tensor

# corruption kinds, per patch
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


def colour_targets(images: Tensor, patch_size: Sequence[int], bits: int = 3,
                   pixel_mean: Sequence[float] = (0.5,) * 3, pixel_std: Sequence[float] = (0.5,) * 3) -> Tensor:
    """Each patch's mean colour quantized to `bits` per channel, as one class in [0, 2^(3 bits)).

    images: (B, H, W, 3) normalized as the model takes them, x = (pixels / 255 - mean) / std.
    The mean over a patch's pixels, per channel, on the [0, 1] scale, is cut into 2^bits equal
    bins (floor(mean * 2^bits), 1.0 in the top bin, a mean on an edge in the upper bin); the class
    is r * 4^bits + g * 2^bits + b.
    Returns int32 (B, N), patches in row-major order (the model's token order).

    Example:
    >>> colour_targets(keras.ops.ones((1, 8, 8, 3)), (4, 4))  # white: bin 7 everywhere -> 511
    """
    ph, pw = patch_size
    h, w = images.shape[1], images.shape[2]
    if h is None or w is None or h % ph or w % pw:
        raise ValueError(f"colour_targets needs images of a known size that is a multiple of the patch {patch_size}, "
                         f"got {tuple(images.shape)}.")
    pixels = ops.cast(images, "float32") * ops.convert_to_tensor(pixel_std, "float32") + ops.convert_to_tensor(
        pixel_mean, "float32")
    gh, gw = h // ph, w // pw
    patches = ops.reshape(pixels, (-1, gh, ph, gw, pw, 3))
    means = ops.reshape(ops.mean(patches, axis=(2, 4)), (-1, gh * gw, 3))  # (B, N, 3)
    levels = 2 ** int(bits)
    # float32 puts a mean that sits exactly on a bin's edge (integer pixels often do) about 1e-6 of a bin
    # below it; 1e-5 lifts it where exact arithmetic puts it, and is below the 8 / (255 P^2) of a bin by
    # which the integer pixels of a P x P patch (P up to 56 at 3 bits) can otherwise miss an edge
    q = ops.clip(ops.floor(means * levels + 1e-5), 0, levels - 1)
    return ops.cast(q[..., 0] * levels * levels + q[..., 1] * levels + q[..., 2], "int32")


def corruption_plan(batch: Tensor | int, num_patches: int, seed: Tensor | int, corrupt: float = 0.5,
                    mask: float = 0.8, random: float = 0.1) -> tuple[Tensor, Tensor]:
    """Which patches to corrupt and how: (kind (B, N) int32, source (B, N) int32).

    Exactly round(corrupt * N) patches (at least 1) of each image are chosen at random; each
    chosen one independently becomes MASKED with probability `mask`, RANDOM with `random`, else
    KEPT; the others are UNTOUCHED. `source` is, for every patch, the flat index (b * N + n) of
    another patch of the batch, never itself: what a RANDOM patch is replaced by.
    seed: a `keras.random.SeedGenerator` (or an int, for a fixed draw).
    """
    n_corrupt = max(int(round(corrupt * num_patches)), 1)
    noise = keras.random.uniform((batch, num_patches), seed=seed)
    rank = ops.argsort(ops.argsort(noise, axis=-1), axis=-1)
    chosen = rank < n_corrupt
    u = keras.random.uniform((batch, num_patches), seed=seed)
    how = ops.where(u < mask, MASKED, ops.where(u < mask + random, RANDOM, KEPT))
    kind = ops.cast(ops.where(chosen, how, UNTOUCHED), "int32")
    total = batch * num_patches
    pick = ops.cast(ops.floor(keras.random.uniform((batch, num_patches), seed=seed) * ops.cast(total - 1, "float32")),
                    "int32")
    pick = ops.minimum(pick, total - 2)
    own = ops.reshape(ops.arange(total, dtype="int32"), (batch, num_patches))
    source = pick + ops.cast(pick >= own, "int32")  # skip itself: uniform over the other B*N - 1
    return kind, source


def _check_fractions(corrupt, mask, random):
    for name, value in (("corrupt", corrupt), ("mask", mask), ("random", random)):
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"mpp {name} must be a fraction in [0, 1], got {value}.")
    if float(corrupt) == 0.0:
        raise ValueError("mpp corrupt=0 corrupts no patch: nothing to predict.")
    if float(mask) + float(random) > 1.0:
        raise ValueError(f"mpp mask + random must be at most 1 (the rest are kept), got {mask} + {random}.")


class MaskedPatchPretrainer(keras.Model):
    """Pre-trains a `VisionTransformer`'s encoder by masked patch prediction.

    Shares the encoder's layers (its patch projection, tokens, position embeddings, blocks and
    final LayerNorm); adds a [mask] embedding and a linear head from each output token to
    2^(3 bits) colours. Fit it on (images, anything) batches: the labels are ignored. Save the
    encoder (`encoder.save`) to fine-tune it.

    Args:
        encoder: a VisionTransformer without a ResNet stem and with the paper's final norm
            (fc_norm=False).
        corrupt, mask, random: the fraction of patches corrupted, and of those the fractions
            masked and replaced by a random patch (the rest are kept); the paper's 0.5, 0.8, 0.1.
        bits: bits per channel of the colour targets (3: 512 classes).
        seed: seed of the corruption's random draws.

    Metrics: "loss" (cross-entropy over the corrupted patches) and "accuracy" (their colours
    predicted right).
    """

    def __init__(self, encoder: keras.Model, corrupt: float = 0.5, mask: float = 0.8, random: float = 0.1,
                 bits: int = 3, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_fractions(corrupt, mask, random)
        if getattr(encoder, "resnet", None) is not None:
            raise ValueError(f"{encoder.name!r} is a hybrid: masked patch prediction corrupts the embeddings of image "
                             "patches; pre-train a plain ViT (resnet=None).")
        if getattr(encoder, "fc_norm", False):
            raise ValueError(f"{encoder.name!r} normalizes the pooled features (fc_norm=True), not each token: "
                             "masked patch prediction reads every patch's normalized output token.")
        if getattr(encoder, "dynamic_image_size", False):
            raise ValueError(f"{encoder.name!r} takes any image size; pre-train it at one (dynamic_image_size=False).")
        if not 1 <= int(bits) <= 8:
            raise ValueError(f"mpp bits must be in 1..8, got {bits}.")
        self.encoder = encoder
        self.corrupt, self.mask, self.random = float(corrupt), float(mask), float(random)
        self.bits = int(bits)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.patch_encoder = encoder.patch_encoder
        self.num_prefix = encoder.num_prefix_tokens
        self.grid = tuple(self.patch_encoder.grid_size)
        hidden = encoder.hidden_size
        self.mask_token = self.add_weight(shape=(1, 1, hidden), name="mask_token",
                                          initializer=keras.initializers.RandomNormal(stddev=0.02))
        mixed = keras.mixed_precision.global_policy().compute_dtype != "float32"
        self.head = keras.layers.Dense(2 ** (3 * self.bits), name="mpp_head", dtype="float32" if mixed else None)
        self.head.build((None, None, hidden))
        self.accuracy_metric = keras.metrics.Mean(name="accuracy")
        self.built = True  # the encoder's layers are built, the head above; BackupAndRestore asks

    @property
    def trainable_weights(self):
        # the encoder's classification head gets no gradient here; leaving it out spares the optimizer
        # its slots and the run a warning
        return [w for w in super().trainable_weights if not w.path.startswith(("head/", "head_dist/"))]

    def corrupt_embeddings(self, x: Tensor, training: bool = True) -> tuple[Tensor, Tensor]:
        """Patch embeddings (B, N, D) -> (corrupted embeddings, kind (B, N))."""
        batch, n, d = ops.shape(x)[0], x.shape[1], x.shape[2]
        kind, source = corruption_plan(batch, n, self.seed_generator, self.corrupt, self.mask, self.random)
        flat = ops.reshape(x, (-1, d))
        replaced = ops.reshape(ops.take(flat, ops.reshape(source, (-1,)), axis=0), ops.shape(x))
        mask_token = ops.broadcast_to(ops.cast(self.mask_token, x.dtype), ops.shape(x))
        k = kind[..., None]
        x = ops.where(k == MASKED, mask_token, ops.where(k == RANDOM, replaced, x))
        return x, kind

    def call(self, images: Tensor, training: bool = False) -> dict[str, Tensor]:
        enc, pe = self.encoder, self.patch_encoder
        x = pe.projection(images)
        x = ops.reshape(x, (-1, self.grid[0] * self.grid[1], pe.hidden_size))  # static N: the plan needs it
        x, kind = self.corrupt_embeddings(x, training=training)
        x = pe.add_tokens(x, self.grid)
        x = enc.get_layer("encoder_dropout")(x, training=training)
        if getattr(enc, "pre_norm", False):
            x = enc.get_layer("pre_norm")(x)
        for block in enc.blocks:
            x = block(x, training=training)
        x = enc.get_layer("encoder_norm")(x)
        logits = self.head(x[:, self.num_prefix:])
        targets = colour_targets(images, pe.patch_size, self.bits, enc.pixel_mean, enc.pixel_std)
        return {"logits": ops.cast(logits, "float32"), "kind": kind, "targets": targets}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        per_patch = keras.losses.sparse_categorical_crossentropy(y_pred["targets"], y_pred["logits"], from_logits=True)
        weight = ops.cast(y_pred["kind"] != UNTOUCHED, "float32")
        if sample_weight is not None:  # padded rows (weight 0) do not count
            weight = weight * ops.cast(sample_weight, "float32")[:, None]
        loss = ops.sum(per_patch * weight) / ops.maximum(ops.sum(weight), 1.0)
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        right = ops.cast(ops.equal(ops.cast(ops.argmax(y_pred["logits"], axis=-1), "int32"), y_pred["targets"]),
                         "float32")
        weight = ops.cast(y_pred["kind"] != UNTOUCHED, "float32")
        if sample_weight is not None:
            weight = weight * ops.cast(sample_weight, "float32")[:, None]
        self.accuracy_metric.update_state(right, sample_weight=weight)
        return self.get_metrics_result()
