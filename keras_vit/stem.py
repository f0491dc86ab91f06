"""The hybrid's BiT ResNet-v2 stem: weight-standardized convolutions, GroupNorm, bottlenecks.

As the official `vit_jax/models_resnet.py` and the root block of `models_vit.py`:
conv_root 7x7/2 without bias, GroupNorm(32, eps 1e-6), ReLU, max-pool 3x3/2 SAME, then
stages of bottleneck units (the first stage with stride 1, later ones with stride 2).

`norm="batch"` swaps each GroupNorm + weight-standardized convolution for BatchNorm and a
plain convolution (layers bn_root, bn1, ...): not BiT, and no released checkpoint has it, but
from scratch on small images a BatchNorm stem learns faster (CIFAR-10, 4 epochs on 11,400
images: 47.6% against 46.2%).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_vit._common import Shape, Tensor, check_layer_keywords
from keras_vit._common import register as _register
from keras_vit._common import to_pair as _pair

GROUPS = 32
GN_EPSILON = 1e-6
WS_EPSILON = 1e-5


def standardize_kernel(kernel: Tensor, epsilon: float = WS_EPSILON) -> Tensor:
    """(w - mean) / (std + eps) over (H, W, Cin), with the population std."""
    mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
    centered = ops.subtract(kernel, mean)  # ops, not `-`: a NumPy kernel minus a torch tensor has no operator
    std = ops.sqrt(ops.mean(ops.square(centered), axis=(0, 1, 2), keepdims=True))
    return centered / (std + epsilon)


@_register
class StdConv2D(keras.layers.Layer):
    """A bias-free convolution whose kernel is weight-standardized at every call.

    The standardization runs in float32 on the stored kernel, also under mixed
    precision, because the statistics of a bfloat16 kernel lose the small differences
    that weight standardization amplifies.

    Example:
    >>> conv = StdConv2D(64, 7, strides=2, name="conv_root")
    >>> tuple(conv(np.zeros((1, 32, 32, 3), "float32")).shape), tuple(conv.kernel.shape)
    ((1, 16, 16, 64), (7, 7, 3, 64))
    """

    def __init__(self, filters: int, kernel_size: int | tuple[int, int], strides: int | tuple[int, int] = 1,
                 **kwargs: Any) -> None:
        check_layer_keywords(StdConv2D, kwargs)
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")

    def build(self, input_shape: Shape) -> None:
        channels = tuple(input_shape)[-1]
        self.kernel = self.add_weight(
            shape=self.kernel_size + (channels, self.filters),
            initializer="he_normal",
            name="kernel",
            autocast=False,
        )

    def call(self, inputs: Tensor) -> Tensor:
        kernel = ops.cast(standardize_kernel(ops.cast(self.kernel, "float32")), inputs.dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding="same", data_format="channels_last")

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        b, h, w, _ = tuple(input_shape)
        sh, sw = self.strides
        size = lambda n, s: None if n is None else -(-n // s)  # noqa: E731 - SAME padding
        return (b, size(h, sh), size(w, sw), self.filters)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
        }


NORMS = ("group", "batch")


def _norm(kind, name, policy, gamma_initializer="ones"):
    """GroupNorm named gn_<name> (BiT's, as the checkpoints name it) or BatchNorm named bn_<name>."""
    if kind == "group":
        return keras.layers.GroupNormalization(groups=GROUPS, epsilon=GN_EPSILON, gamma_initializer=gamma_initializer,
                                               name=_norm_name("gn", name), dtype=policy)
    return keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5, gamma_initializer=gamma_initializer,
                                           name=_norm_name("bn", name), dtype=policy)


def _norm_name(prefix, name):
    return f"{prefix}_{name}" if name in ("root", "proj") else f"{prefix}{name}"


def _conv(kind, filters, kernel_size, strides=1, name=None, dtype=None):
    """The weight-standardized convolution GroupNorm pairs with in BiT, or a plain one before BatchNorm."""
    if kind == "group":
        return StdConv2D(filters, kernel_size, strides=strides, name=name, dtype=dtype)
    return keras.layers.Conv2D(filters, kernel_size, strides=strides, padding="same", use_bias=False,
                               kernel_initializer="he_normal", name=name, dtype=dtype)


def check_norm(norm):
    """`norm` if it is one of NORMS, else a ValueError naming it."""
    if norm not in NORMS:
        raise ValueError(f"resnet norm must be one of {NORMS}, got {norm!r}.")
    return norm


@_register
class BottleneckUnit(keras.layers.Layer):
    """A ResNet-v2 bottleneck unit as BiT and the ViT hybrids use it.

    conv1 1x1 -> gn1 -> ReLU -> conv2 3x3 (carrying the stride) -> gn2 -> ReLU ->
    conv3 1x1 to 4 * features -> gn3 (zero-initialized scale) -> ReLU(residual + y);
    the residual goes through conv_proj + gn_proj when the channels or the stride change.

    Example:
    >>> unit = BottleneckUnit(64, strides=2)  # 64 bottleneck features (GroupNorm's 32 groups), 256 out
    >>> tuple(unit(np.zeros((1, 16, 16, 64), "float32")).shape), unit.conv_proj is not None
    ((1, 8, 8, 256), True)
    """

    def __init__(self, features: int, strides: int | tuple[int, int] = 1, norm: str = "group",
                 **kwargs: Any) -> None:
        check_layer_keywords(BottleneckUnit, kwargs)
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = _pair(strides, "strides")
        self.norm = check_norm(norm)
        policy = self.dtype_policy
        out = 4 * self.features
        # the attributes keep BiT's names (gn1, ...) whatever the norm: the layers carry the real ones
        self.conv1 = _conv(norm, self.features, 1, name="conv1", dtype=policy)
        self.gn1 = _norm(norm, "1", policy)
        self.conv2 = _conv(norm, self.features, 3, strides=self.strides, name="conv2", dtype=policy)
        self.gn2 = _norm(norm, "2", policy)
        self.conv3 = _conv(norm, out, 1, name="conv3", dtype=policy)
        self.gn3 = _norm(norm, "3", policy, gamma_initializer="zeros")
        self.conv_proj: keras.layers.Layer | None = None  # built with the input's channels known
        self.gn_proj: keras.layers.Layer | None = None

    def build(self, input_shape: Shape) -> None:
        input_shape = tuple(input_shape)
        if input_shape[-1] != 4 * self.features or self.strides != (1, 1):
            self.conv_proj = _conv(self.norm, 4 * self.features, 1, strides=self.strides, name="conv_proj",
                                   dtype=self.dtype_policy)
            self.gn_proj = _norm(self.norm, "proj", self.dtype_policy)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    def call(self, x: Tensor) -> Tensor:
        residual = x
        if self.conv_proj is not None and self.gn_proj is not None:  # built together
            residual = self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape: Shape) -> tuple[int | None, ...]:
        return self.conv2.compute_output_shape(tuple(input_shape))[:-1] + (4 * self.features,)

    def get_config(self) -> dict[str, Any]:
        config = {**super().get_config(), "features": self.features, "strides": self.strides}
        if self.norm != "group":  # BiT's units keep the config they always had
            config["norm"] = self.norm
        return config


# The root block: "bit" is the official one (conv 7x7/2 + max-pool 3x3/2, image / 4); "small"
# is a 3x3/1 conv without pooling, as ResNets for CIFAR's 32x32 images have (He et al. 2016,
# Section 4.2): a 32x32 image keeps its resolution into the first stage.
ROOTS = {"bit": 4, "small": 1}


def check_first_stride(first_stride):
    if isinstance(first_stride, bool) or first_stride not in (1, 2):
        raise ValueError(f"resnet first_stride must be 1 (BiT) or 2, got {first_stride!r}.")
    return int(first_stride)


def stem_stride(num_layers, root="bit", first_stride=1):
    """How much the stem shrinks the image: the root's stride (4 for "bit", 1 for "small"),
    times the first stage's (`first_stride`), x2 for each stage after the first."""
    return ROOTS[root] * (first_stride if num_layers else 1) * 2 ** max(len(num_layers) - 1, 0)


def resnet_stem(x, num_layers=(3, 4, 9), width_factor=1, root="bit", norm="group", first_stride=1):
    """Adds the BiT ResNet-v2 stem to a functional graph: root block, then the stages.

    `num_layers` gives the units per stage; an empty tuple keeps the root block alone.
    Layer names follow the official checkpoint: conv_root, gn_root, block{i}_unit{j}.
    `norm`: "group" (BiT: GroupNorm after weight-standardized convolutions) or "batch".
    `first_stride`: the first stage's stride. BiT's is 1 (its root has already shrunk the image
    4x); 2 after the "small" root halves the map before the first stage's 4x-wide output, the
    stem's costliest tensors on a CPU (measured in recipes/cifar10_hybrid.py).
    """
    width = int(64 * width_factor)
    if root not in ROOTS:
        raise ValueError(f"resnet root must be one of {sorted(ROOTS)}, got {root!r}.")
    check_norm(norm)
    check_first_stride(first_stride)
    x = _conv(norm, width, 7 if root == "bit" else 3, strides=2 if root == "bit" else 1, name="conv_root")(x)
    x = _norm(norm, "root", None)(x)
    x = keras.layers.ReLU(name="root_relu")(x)
    if root == "bit":
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same", data_format="channels_last",
                                      name="root_pool")(x)
    for i, units in enumerate(num_layers):
        for j in range(units):
            stride = (2 if i > 0 else first_stride) if j == 0 else 1
            x = BottleneckUnit(width * 2**i, strides=stride, norm=norm, name=f"block{i + 1}_unit{j + 1}")(x)
    return x
