"""Model parallelism the Keras 3 way: a `keras.distribution.LayoutMap` for any keras-vit model.

Megatron's split of a transformer block over a "model" axis, with the rest sharded FSDP-style over a
"data" axis (the axis the batch is split on): attention's query, key and value kernels and the MLP's first
kernel are column-parallel (their output features on "model", their input features on "data"); attention's
output kernel and the MLP's second kernel row-parallel (input features on "model", output on "data"); the
column-parallel biases follow their features; norms, LayerScale, the other biases, the class and register
tokens and the position embeddings are replicated; every other kernel (the patch embedding, the head, a
hybrid's ResNet stem, an attention-pool head, a dense head) is sharded over "data" on its largest dimension
that divides. GSPMD (jax.jit) inserts the collectives, so the outputs are those of one device.

Example (under KERAS_BACKEND=jax with 8 devices, e.g. XLA_FLAGS=--xla_force_host_platform_device_count=8):

    config = keras_vit.ViTConfig.from_preset("G/14")
    distribution = keras.distribution.ModelParallel(
        layout_map=keras_vit.layout_map(config, "2x4"), batch_dim_name="data")
    with distribution.scope():
        model = keras_vit.create_model("G/14")    # each variable created on its shards
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import keras

from keras_vit._common import check_keywords
from keras_vit.config import ViTConfig

MESH_AXES = ("data", "model")

# Inside a transformer block: (sub-layer, variable) -> which of the kernel's axes go where.
_BLOCK = r"(?:^|.*/)encoderblock_\d+/"
_COLUMN = ("query", "key", "value", "mlp_dense1")
_ROW = ("out", "mlp_dense2")
# What each block dimension that is split on "model" is, for the refusal.
_MODEL_FIELD = {"query": "num_heads", "key": "num_heads", "value": "num_heads", "out": "num_heads",
                "mlp_dense1": "mlp_dim", "mlp_dense2": "mlp_dim"}


def device_mesh(mesh: Any) -> keras.distribution.DeviceMesh:
    """A (data, model) `keras.distribution.DeviceMesh` from "2x4", (2, 4) or a DeviceMesh (returned as
    it is), over the first data x model of `keras.distribution.list_devices()`.

    Example (under jax with 8 devices):

        >>> device_mesh("2x4").shape  # doctest: +SKIP
        (2, 4)
        >>> parse_mesh("2x4"), parse_mesh((1, 8))
        ((2, 4), (1, 8))
    """
    if isinstance(mesh, keras.distribution.DeviceMesh):
        return mesh
    shape = parse_mesh(mesh)
    devices = keras.distribution.list_devices()
    needed = math.prod(shape)
    if needed > len(devices):
        raise ValueError(f"mesh {shape[0]}x{shape[1]} needs {needed} devices; this process sees {len(devices)} "
                         f"({', '.join(devices[:4])}{', ...' if len(devices) > 4 else ''}). On a CPU, "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={needed} before jax starts gives that many.")
    return keras.distribution.DeviceMesh(shape=shape, axis_names=MESH_AXES, devices=devices[:needed])


def parse_mesh(mesh: Any) -> tuple[int, int]:
    """(data, model) from "2x4", "2,4" or a pair of positive integers.

    Example:
    >>> parse_mesh("2x4")
    (2, 4)
    """
    parts = re.split(r"[x,]", mesh.strip().lower()) if isinstance(mesh, str) else list(mesh)
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"mesh {mesh!r} is not DATAxMODEL with two positive integers, e.g. '2x4' (2-way data "
                         "parallel, 4-way model parallel).")
    return shape


def variable_axes(path: str, shape: tuple[int, ...], mesh_shape: tuple[int, int]) -> tuple[str | None, ...]:
    """The mesh axis of each dimension of the variable at `path` (None: not split), by the rules above.

    Example:
    >>> variable_axes("encoderblock_3/query/kernel", (768, 768), (2, 4))
    ('data', 'model')
    >>> variable_axes("encoderblock_3/mlp_dense2/kernel", (3072, 768), (2, 4))
    ('model', 'data')
    >>> variable_axes("encoderblock_3/norm1/gamma", (768,), (2, 4)), variable_axes("head/kernel", (768, 10), (2, 4))
    ((None,), ('data', None))
    """
    data, model = mesh_shape
    block = re.fullmatch(_BLOCK + r"(?P<layer>[a-z_0-9]+)/(?P<var>kernel|bias)", path)
    if block and block["layer"] in _COLUMN + _ROW:
        layer, column = block["layer"], block["layer"] in _COLUMN
        if block["var"] == "bias":
            return ("model",) if column else (None,)
        axes = ("data", "model") if column else ("model", "data")
        for size, axis in zip(shape, axes):
            parts = model if axis == "model" else data
            if size % parts:
                field = _MODEL_FIELD[layer] if axis == "model" else "hidden_size"
                raise ValueError(f"{path} {tuple(shape)}: its {size} features do not split into {parts} parts along "
                                 f"the mesh's {axis!r} axis ({field} must be a multiple of {parts}); "
                                 f"choose a mesh whose {axis} axis divides {size}.")
        return axes
    if len(shape) < 2 or re.search(r"(^|/)patch_encoder/(?!embedding/)", path):
        return (None,) * len(shape)  # norms, biases, tokens, position embeddings: replicated
    # FSDP: the largest dimension that splits evenly over "data", else replicated.
    fits = [i for i in sorted(range(len(shape)), key=lambda i: -shape[i]) if data > 1 and shape[i] % data == 0]
    return tuple("data" if fits and i == fits[0] else None for i in range(len(shape)))


def check_mesh(config: ViTConfig, mesh_shape: tuple[int, int]) -> None:
    """Refuse a model whose heads, MLP or width do not split over the mesh, naming the field.

    Example:
    >>> check_mesh(ViTConfig(hidden_size=192, num_heads=3, mlp_dim=768), (2, 4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: num_heads=3 does not split over the mesh's 4-way 'model' axis: each device would hold part of a head...
    """
    data, model = mesh_shape
    checks = (("num_heads", config.num_heads, model, "model", "each device would hold part of a head"),
              ("mlp_dim", config.mlp_dim, model, "model", "the MLP's features would not split evenly"),
              ("hidden_size", config.hidden_size, data, "data", "the kernels' FSDP shards would not be even"))
    for field, value, parts, axis, why in checks:
        if value % parts:
            other = (f"mesh {data * model}x1" if axis == "model" else f"mesh 1x{model}")
            raise ValueError(f"{field}={value} does not split over the mesh's {parts}-way {axis!r} axis: {why}. "
                             f"Choose a {axis} axis that divides {value} (e.g. {other}), or a model whose {field} "
                             f"is a multiple of {parts}.")


def _shapes(source):
    """(path, shape) of every variable of a model, or of the model a ViTConfig builds (one block of it,
    the block rules matching them all: nothing of the full size is allocated)."""
    if isinstance(source, ViTConfig):
        from keras_vit.models import VisionTransformer

        stand_in = VisionTransformer(dataclasses.replace(source, num_layers=1, variant=None))
        return [(v.path, tuple(v.shape)) for v in stand_in.weights], source
    if not isinstance(source, keras.Model):
        raise TypeError(f"layout_map takes a keras-vit model or a ViTConfig, got {type(source).__name__}.")
    config = getattr(source, "config", None)
    return [(v.path, tuple(v.shape)) for v in source.weights], config if isinstance(config, ViTConfig) else None


def layout_map(model: keras.Model | ViTConfig, mesh: Any, **kwargs: Any) -> keras.distribution.LayoutMap:
    """The `keras.distribution.LayoutMap` of `model` (a built keras-vit model, or the ViTConfig of one to
    build) over a (data, model) mesh ("2x4", (2, 4) or a DeviceMesh with axes "data" and "model"), for
    `keras.distribution.ModelParallel(layout_map=..., batch_dim_name="data")`. The block rules are keyed by
    pattern (`encoderblock_\\d+/query/kernel`, any depth); every other variable by its path.

    Example (under jax with 8 devices):

        distribution = keras.distribution.ModelParallel(
            layout_map=keras_vit.layout_map(model.config, "2x4"), batch_dim_name="data")
        with distribution.scope():
            model = keras_vit.VisionTransformer(model.config)

    >>> layout = layout_map(ViTConfig(hidden_size=64, num_heads=4, mlp_dim=128, num_layers=2), (2, 4))  # doctest: +SKIP
    >>> layout["encoderblock_1/query/kernel"].axes  # doctest: +SKIP
    ('data', 'model')
    """
    check_keywords(kwargs, {"model", "mesh"}, "layout_map")
    mesh = device_mesh(mesh)
    if tuple(mesh.axis_names) != MESH_AXES:
        raise ValueError(f"the mesh's axes are {tuple(mesh.axis_names)}; keras_vit.layout_map shards over "
                         f"{MESH_AXES} (data, model).")
    shape = (int(mesh.shape[0]), int(mesh.shape[1]))
    shapes, config = _shapes(model)
    if config is not None:
        check_mesh(config, shape)
    layouts, keys = keras.distribution.LayoutMap(mesh), set()
    for path, var_shape in shapes:
        axes = variable_axes(path, var_shape, shape)
        block = re.fullmatch(r"(?P<prefix>.*/)?encoderblock_\d+/(?P<rest>.+)", path)
        key = (f"{re.escape(block['prefix'] or '')}encoderblock_\\d+/{re.escape(block['rest'])}" if block
               else re.escape(path))
        if key not in keys:  # not `in layouts`: LayoutMap's lookup answers None, never KeyError
            keys.add(key)
            layouts[key] = axes
    return layouts


class RuleModelParallel(keras.distribution.ModelParallel):
    """`keras.distribution.ModelParallel` whose layouts are `variable_axes`' rules applied to each variable as
    it is created (its path and shape), so a training run need not know the model before it builds it."""

    def __init__(self, mesh: Any) -> None:
        mesh = device_mesh(mesh)
        super().__init__(layout_map=keras.distribution.LayoutMap(mesh), batch_dim_name="data")
        self.mesh_shape = (int(mesh.shape[0]), int(mesh.shape[1]))

    def get_variable_layout(self, variable: Any) -> keras.distribution.TensorLayout:
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        axes = variable_axes(variable.path, tuple(variable.shape), self.mesh_shape)
        return keras.distribution.TensorLayout(axes, self.device_mesh)


def parameter_bytes(model: keras.Model | ViTConfig, mesh: Any, *, bytes_per_value: int = 4) -> dict[str, int]:
    """{"total", "per_device"}: the bytes of `model`'s parameters (a model, or the ViTConfig of one: nothing
    of its size is allocated) and the most any device of a (data, model) mesh holds under `layout_map`'s
    sharding; float32 unless `bytes_per_value` says otherwise.

    Example:
    >>> parameter_bytes(ViTConfig(hidden_size=64, num_heads=4, mlp_dim=128, num_layers=2), (1, 1))
    {'total': 775840, 'per_device': 775840}
    """
    data, model_axis = parse_mesh(mesh) if not isinstance(mesh, keras.distribution.DeviceMesh) else mesh.shape
    shapes, config = _shapes(model)
    layers = config.num_layers if isinstance(model, ViTConfig) else 1
    if config is not None:
        check_mesh(config, (data, model_axis))
    total = per_device = 0
    for path, shape in shapes:
        times = layers if re.fullmatch(r"(.*/)?encoderblock_\d+/.+", path) else 1
        split = {"data": data, "model": model_axis}
        shard = math.prod(s // split[a] if a else s for s, a in zip(shape, variable_axes(path, shape, (data, model_axis))))
        total += times * math.prod(shape) * bytes_per_value
        per_device += times * shard * bytes_per_value
    return {"total": total, "per_device": per_device}
