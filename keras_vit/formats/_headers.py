"""A checkpoint's config checked against its weights' headers before anything is built.

Every reader knows the shapes of the weights before it reads an array (the safetensors header, the
.npz members' .npy headers, the HDF5 datasets of a .keras file) and the config it will build from.
`read_sizes` reads the architecture off the shapes (width, depth, MLP width, patch, input channels, the
position table's tokens, heads where a shape holds them, the head's classes) through a format's
`Scheme`, and `check_config` compares them with the `ViTConfig`: a config.json that claims another
width, depth, patch or image size than the weights hold, as a mistaken or hostile upload would, is a
ValueError naming the field, the config's value and the weights' key and shape, raised before a layer
allocates anything. `check_parameters` bounds what is left (a parameter count beyond what the weights
hold) and `check_memory` what the build would take against the memory this machine has.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from typing import Any

from keras_vit._common import is_int
from keras_vit.config import ViTConfig

# field -> (what the weights say, the key it was read from, that key's shape)
Found = dict[str, tuple[Any, Any, Any]]


@dataclasses.dataclass(frozen=True)
class Scheme:
    """Where a format keeps the arrays that tell a ViT's sizes, and its layout ("torch": Linear (out, in),
    Conv2d (out, in, h, w); "keras": Dense (in, out), Conv2D (h, w, in, out)). Keys are regular
    expressions (matched in full); `block` has the block index as its group."""

    layout: str
    patch: str
    block: str
    mlp: str
    posemb: str | None = None
    heads: tuple[str, int] | None = None  # a key whose axis holds the heads
    head: str | None = None
    pre_logits: str | None = None
    registers: str | None = None
    names: dict[str, str] = dataclasses.field(default_factory=dict)  # the format's own field names


def _find(shapes, pattern):
    rx = re.compile(pattern)
    return next(((k, s) for k, s in shapes.items() if rx.fullmatch(k)), (None, None))


def read_sizes(shapes: dict[str, tuple[int, ...]], scheme: Scheme) -> Found:
    """The sizes a checkpoint's shapes hold, each with the key and shape it was read from."""
    torch = scheme.layout == "torch"
    found: Found = {}
    key, shape = _find(shapes, scheme.patch)
    if shape is not None and len(shape) == 4:
        d, c, ph, pw = shape if torch else (shape[3], shape[2], shape[0], shape[1])
        found.update(hidden_size=(d, key, shape), patch_channels=(c, key, shape), patch_size=((ph, pw), key, shape))
    rx = re.compile(scheme.block)
    blocks = {m[1] or "0" for k in shapes if (m := rx.match(k))}
    if blocks:
        last = max(blocks, key=int)
        example = next(k for k in shapes if (m := rx.match(k)) and (m[1] or "0") == last)
        found["num_layers"] = (int(last) + 1, example, shapes[example])
        if len(blocks) != int(last) + 1:
            missing = sorted(set(range(int(last) + 1)) - {int(b) for b in blocks})
            found["block_gaps"] = (missing, example, shapes[example])
    key, shape = _find(shapes, scheme.mlp)
    if shape is not None and len(shape) == 2:
        found["mlp_width"] = (shape[0] if torch else shape[1], key, shape)
    if scheme.posemb:
        key, shape = _find(shapes, scheme.posemb)
        if shape is not None and len(shape) in (2, 3):
            found["position_tokens"] = (shape[-2], key, shape)
    if scheme.heads:
        key, shape = _find(shapes, scheme.heads[0])
        if shape is not None and len(shape) > scheme.heads[1]:
            found["num_heads"] = (shape[scheme.heads[1]], key, shape)
    for field, pattern in (("classes", scheme.head), ("representation_size", scheme.pre_logits)):
        key, shape = _find(shapes, pattern) if pattern else (None, None)
        if shape is not None and len(shape) == 2:
            found[field] = (shape[0] if torch else shape[1], key, shape)
    if scheme.registers:
        key, shape = _find(shapes, scheme.registers)
        if shape is not None and len(shape) == 3:
            found["register_tokens"] = (shape[1], key, shape)
    return found


def expected(config: Any, field: str) -> tuple[Any, str] | None:
    """(the value `field` takes in weights of `config`, how the config gives it), or None when the
    config has no such array."""
    c = config
    if field == "hidden_size":
        return c.hidden_size, f"hidden_size {c.hidden_size}"
    if field == "patch_channels":  # a hybrid's patch projection takes the stem's features
        return (c.channels, f"{c.channels} input channels") if c.resnet is None else None
    if field == "patch_size":
        return c.patch_size, f"patch_size {c.patch_size}"
    if field == "num_layers":
        return c.num_layers, f"num_layers {c.num_layers}"
    if field == "block_gaps":
        return [], "blocks 0 to num_layers - 1"
    if field == "mlp_width":
        swiglu = c.mlp_activation == "swiglu"
        return ((2 if swiglu else 1) * c.mlp_dim,
                f"mlp_dim {c.mlp_dim}" + (f" (SwiGLU: a first layer {2 * c.mlp_dim} wide)" if swiglu else ""))
    if field == "position_tokens":
        if not c.absolute_position_embeddings:
            return None
        prefix = {"all": c.num_prefix_tokens, "none": 0,
                  "class": int(c.classifier == "token") + int(c.distillation)}[c.prefix_posemb]
        gh, gw = c.grid
        return prefix + gh * gw, (f"image_size {c.image_size} (a {gh}x{gw} grid of {c.patch_size[0]}x"
                                  f"{c.patch_size[1]} patches, {gh * gw:,} position embeddings + {prefix} prefix)")
    if field == "num_heads":
        return c.num_heads, f"num_heads {c.num_heads}"
    if field == "classes":
        return (c.classes, f"classes {c.classes}") if c.include_top else None
    if field == "representation_size":
        return ((c.representation_size, f"representation_size {c.representation_size}")
                if c.representation_size is not None else None)
    if field == "register_tokens":
        return c.register_tokens, f"register_tokens {c.register_tokens}"
    raise KeyError(field)


def check_config(config: Any, found: Found, where: str, scheme: Scheme | None = None) -> None:
    """Refuses a config whose sizes are not those its weights hold, naming the field, the config's value
    and the weights' key and shape; run before the model is built."""
    names = scheme.names if scheme else {}
    for field, (value, key, shape) in found.items():
        want = expected(config, field)
        if want is None or want[0] == value:
            continue
        if field == "block_gaps":
            raise ValueError(f"{where}: the weights lack blocks {value[:8]} of the {config.num_layers} the config "
                             f"says (e.g. {key} has shape {shape}); a file cut short or edited?")
        said = want[1]
        own = names.get(field.split("_width")[0] if field == "mlp_width" else field)
        if own:
            said += f" (from {own})"
        advice = ("The config does not describe these weights: fix it, or take config.json and the weights from "
                  "the same save (save_pretrained writes both).")
        if field == "num_layers":
            raise ValueError(f"{where}: the config says {said}, but the weights hold {value} blocks (the last has "
                             f"{key}). {advice}")
        what = {"position_tokens": f"{value} position embeddings", "patch_channels": f"{value} input channels",
                "mlp_width": f"an MLP {value} wide", "hidden_size": f"width {value}", "num_heads": f"{value} heads",
                "classes": f"{value} classes", "register_tokens": f"{value} register tokens",
                "representation_size": f"a pre-logits layer {value} wide"}.get(field, f"{field} {value}")
        raise ValueError(f"{where}: the config says {said}, but the weights' {key} has shape {shape}, which holds "
                         f"{what}. {advice}")


# The sizes the arguments give directly, compared before ViTConfig bounds them: a config claiming a
# 65536-wide model is named against the weights' shape, not only as too big to build.
_DIRECT = ("hidden_size", "num_layers", "mlp_width", "patch_size", "num_heads", "classes", "representation_size",
           "register_tokens")


def check_args(args: dict[str, Any], found: Found, where: str, scheme: Scheme | None = None) -> None:
    """`check_config` on the sizes VisionTransformer arguments name directly (integers only: a value of
    another type is ViTConfig's to refuse), before the arguments become a ViTConfig."""
    fields = {f.name: f.default for f in dataclasses.fields(ViTConfig)}
    fields.update(args)
    patch = fields["patch_size"]
    fields["patch_size"] = (patch, patch) if is_int(patch) else tuple(patch) if isinstance(patch, (list, tuple)) else patch
    view = types.SimpleNamespace(**fields)
    direct = {field: found[field] for field in _DIRECT if field in found and _direct(view, field)}
    patch, image = view.patch_size, fields["image_size"]
    image = (image, image) if is_int(image) else tuple(image) if isinstance(image, (list, tuple)) else ()
    pair = lambda v: isinstance(v, tuple) and len(v) == 2 and all(is_int(d) and d > 0 for d in v)  # noqa: E731
    if ("position_tokens" in found and view.resnet is None and pair(image) and pair(patch)
            and view.absolute_position_embeddings is True and view.prefix_posemb in ("all", "none", "class")
            and not image[0] % patch[0] and not image[1] % patch[1]):  # a plain ViT's grid, as ViTConfig's
        view.image_size, view.grid = image, (image[0] // patch[0], image[1] // patch[1])
        tokens = (view.classifier == "token", view.distillation, view.register_tokens)
        if all(is_int(t) or isinstance(t, bool) for t in tokens):
            view.num_prefix_tokens = sum(int(t) for t in tokens)
            direct["position_tokens"] = found["position_tokens"]
    check_config(view, direct, where, scheme)


def _direct(view, field):
    """Whether an argument holds an integer (a pair of them) to compare as it stands."""
    value = getattr(view, {"mlp_width": "mlp_dim"}.get(field, field))
    return is_int(value) or field == "patch_size" and isinstance(value, tuple) and all(map(is_int, value))


def check_parameters(config: ViTConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """Refuses a config that describes more parameters than the weights hold (a few biases the source has
    none of, zeroed at load, aside): what the per-field checks do not cover cannot be inflated either."""
    held = sum(math.prod(s) for s in shapes.values())
    want = config.parameter_count
    if want > held * 1.05 + 4096:
        raise ValueError(f"{where}: the config describes a model of {want:,} parameters, but the weights hold "
                         f"{held:,} values; the config does not describe these weights.")


def available_memory() -> int | None:
    """The bytes this machine can still allocate (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(config: ViTConfig, where: str) -> None:
    """Refuses to build a model whose float32 weights alone would not fit in the memory available now,
    rather than let the build run into an out-of-memory error (or take the machine down)."""
    need = 4 * config.parameter_count
    free = available_memory()
    if free is not None and need > free:
        raise ValueError(f"{where}: the model has {config.parameter_count:,} parameters, {need / 2**30:.1f} GiB in "
                         f"float32, more than the {free / 2**30:.1f} GiB of memory available here; build it on a "
                         "machine with more memory, or at a smaller image_size / width.")


def config_of(args: dict[str, Any], where: str) -> ViTConfig:
    """ViTConfig(**args), its ValueError prefixed with `where` (the file the arguments came from)."""
    try:
        return ViTConfig(**args)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{where}: {e}") from None
