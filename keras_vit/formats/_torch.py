"""What the PyTorch-side formats (timm, transformers) share: safetensors and config.json reading,
PyTorch's array layouts (Linear (out, in), Conv2d (out, in, h, w), packed projections), the key table
base both name tables extend, the state-dict writer, and the refusal of pickles (unpickling runs
arbitrary code)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from keras_vit._common import is_int, shown
from keras_vit.formats._assign import KeyTable
from keras_vit.formats._safetensors import open_safetensors
from keras_vit.posemb import resize_relative_position_bias_table, table_grid

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")

# Families keras-vit does not build yet, and the features they need that it lacks.
MISSING_FEATURES = {
    "beit-shared": "shared relative position bias (one table for every block)",
    "data2vec-vision": "relative position bias shared across blocks (read as BEiT's is not checked)",
    "eva": "EVA-01 layout (eva_giant_*; EVA02 and DINOv3, timm's other Eva models, read)",
    "eva02": "EVA02 CLIP towers' layout (eva02_*_clip_*; eva02_{tiny,small}_patch14_{SIZE} read)",
    "deit3": "no_embed_class LayerScale variant (not read yet)",
}
# Buffers some older files hold that are derived, not learned: an arange of positions (transformers 4.x
# CLIP/SigLIP), BEiT's relative position index (rebuilt from the grid) and timm BEiT's zero key bias.
DERIVED_BUFFERS = ("embeddings.position_ids", "relative_position_index", "attn.k_bias")
# Heads a headless model drops (timm's, transformers' ViT, DeiT's two, CLIP's projection).
HEAD_KEYS = ("head.", "classifier.", "head_dist.", "cls_classifier.", "distillation_classifier.",
             "visual_projection.")
LEAVES = {"gamma": "weight", "beta": "bias", "kernel": "weight", "bias": "bias"}


def refuse_pickle(path):
    """Raises the ValueError for a PyTorch pickle: never read (unpickling can run arbitrary code)."""
    raise ValueError(
        f"{path} is a PyTorch pickle; keras-vit never unpickles (loading a pickle can run arbitrary code). "
        "Convert it to safetensors where you trust it: timm's or transformers' "
        "model.save_pretrained(folder, safe_serialization=True) (timm: timm.models.push_to_hf_hub / "
        "save_for_hf), or safetensors.torch.save_file(torch.load(path), 'model.safetensors'), then load "
        "the folder with config.json and model.safetensors (keras_vit.from_pretrained).")


def require_safetensors():
    try:
        import safetensors.numpy as st
    except ImportError:
        raise ImportError("reading and writing safetensors checkpoints needs the safetensors package: "
                          "pip install 'keras-vit[hub]' (or pip install safetensors).") from None
    return st


# The largest config.json (or preprocessor_config.json, index) read: an ImageNet-21k id2label is ~1 MB.
MAX_JSON_BYTES = 64 * 2**20


def read_json(path):
    """A JSON object from `path`; a file that is too big, not JSON, nested too deep for the parser or not
    an object is a ValueError naming the file."""
    try:
        size = os.path.getsize(path)
        if size > MAX_JSON_BYTES:
            raise ValueError(f"{path} has {size:,} bytes; a config keras-vit reads has at most {MAX_JSON_BYTES:,}.")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except RecursionError:
        raise ValueError(f"{path} is not a readable JSON file: it is nested too deep to parse.") from None
    except (OSError, ValueError) as e:
        if str(e).startswith(str(path)):
            raise
        raise ValueError(f"{path} is not a readable JSON file: {e}.") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds {type(config).__name__}, not a config object.")
    return config


FLOAT32_MAX = float(np.finfo(np.float32).max)


def integer(value, name, where):
    """A config value that must be an int (JSON's 2, not "2", 2.0 or true), else a ValueError naming the file
    and the field."""
    if not is_int(value):
        raise ValueError(f"{where}: {name}={shown(value)} must be an integer, not {type(value).__name__}.")
    return int(value)


def number(value, name, where):
    """A config value that must be a finite number float32 can hold."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and abs(float(value)) <= FLOAT32_MAX
    except OverflowError:  # an int beyond any float
        ok = False
    if not ok:
        raise ValueError(f"{where}: {name}={shown(value)} must be a finite number (float32's range), not "
                         f"{type(value).__name__}.")
    return float(value)


def flag(value, name, where):
    """A config value that must be true or false (JSON's booleans; None as false)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ValueError(f"{where}: {name}={shown(value)} must be true or false, not {type(value).__name__}.")


def numbers_of(value, name, where, count=None):
    """A config value that must be a list of finite numbers (`count` of them, where given)."""
    if not isinstance(value, (list, tuple)) or count is not None and len(value) != count:
        raise ValueError(f"{where}: {name}={shown(value)} must be a list of {count or 'some'} numbers.")
    return tuple(number(v, name, where) for v in value)


def read_tensors(files):
    """{name: array} of safetensors files, headers checked first (`_safetensors.open_safetensors`),
    every array read."""
    return {key: np.asarray(value) for key, value in open_safetensors(files).items()}


def class_names(names, count, descriptions=None):
    """A config's class names as a list of `count` strings, or None (placeholders, another count)."""
    if isinstance(names, dict):  # {"0": "cat", ...}
        try:
            names = [names[k] for k in sorted(names, key=int)]
        except (ValueError, KeyError):
            return None
    if not isinstance(names, (list, tuple)) or not names or len(names) != count:
        return None
    names = [str(n) for n in names]
    if all(re.fullmatch(r"LABEL_\d+", n) for n in names):  # transformers' placeholders
        return None
    if isinstance(descriptions, dict) and descriptions:
        names = [str(descriptions.get(n, n)) for n in names]
    return names


class TorchTable(KeyTable):
    """PyTorch layouts. `qkv_bias=False`: the source has no query/key/value biases (set to zero).
    `relative_method`: how the library resizes BEiT's relative position bias table at another size
    (`keras_vit.posemb.RELATIVE_METHODS`)."""

    relative_method = "timm"

    def __init__(self, model, qkv_bias=True):
        self.model, self.qkv_bias = model, qkv_bias

    def new_report(self):
        self.report = {"loaded": [], "kept": [], "dropped": [], "resampled": [], "zeroed": []}
        return self.report  # to_keras adds the relative position bias tables it resizes

    def no_key_bias(self, path):
        """Whether the source's attention has no key bias (BEiT)."""
        return False

    def shape(self, variable, key, part):
        shape = tuple(variable.shape)
        if variable.path.endswith("embedding/kernel"):  # conv (ph, pw, C, D) <- (D, C, ph, pw)
            return (shape[3], shape[2], shape[0], shape[1])
        if len(shape) == 2 and variable.path.endswith("/kernel"):  # Dense (in, out) <- Linear (out, in)
            shape = shape[::-1]
        if part is not None:  # packed projections (timm's qkv, kv; in_proj): Linear layers stacked
            shape = (part[1] * shape[0],) + shape[1:]
        return shape

    def absent(self, variable, key, shapes, model):
        path = variable.path
        if path.startswith(("head/", "head_dist/")):  # a head without bias (CLIP's visual_projection)
            weight = key[:-len("bias")] + "weight"
            if not key.endswith(".bias") or weight not in shapes:
                return False
            kernel = next(v for v in model.weights if v.path == path[:-len("bias")] + "kernel")
            return shapes[weight] == self.shape(kernel, weight, None)
        return self.no_key_bias(path) or (not self.qkv_bias and path.split("/")[1] in ("query", "key", "value")
                                          and path.endswith("/bias"))

    def drops(self, key, model):
        return (key.startswith(HEAD_KEYS) and not model.include_top
                or key.startswith("pooler.") and model.representation_size is None
                or key.endswith(DERIVED_BUFFERS))  # recomputed by keras-vit (older files saved them)

    def fits(self, variable, key, want, found):
        if found == want:
            return True
        if not key.endswith("relative_position_bias_table") or len(found) != 2 or found[1] != want[1]:
            return False
        try:  # a table of another (square) grid: resized in to_keras, as the library does at load
            table_grid(found[0])
        except ValueError:
            return False
        return True

    def to_keras(self, value, variable, part):
        if variable.path.endswith("relative_position_bias_table") and value.shape != tuple(variable.shape):
            old_grid, new_grid = table_grid(value.shape[0]), tuple(self.model.patch_encoder.grid_size)
            self.report["resampled"].append(f"{variable.path}: relative position bias {old_grid[0]}x{old_grid[1]} "
                                            f"-> {new_grid[0]}x{new_grid[1]} ({self.relative_method})")
            return resize_relative_position_bias_table(value, old_grid, new_grid, self.relative_method)
        if part is not None:
            value = np.split(value, part[1], axis=0)[part[0]]
        if variable.path.endswith("embedding/kernel"):
            return np.transpose(value, (2, 3, 1, 0))
        if value.ndim == 2 and variable.path.endswith("/kernel"):
            return value.T
        return value

    def unwritten(self, variable):
        """Whether the source has no place for a variable that must then be zero (read back as zero by
        `absent`): BEiT's key bias, the biases of a `qkv_bias=False` source, CLIP's unbiased projection."""
        path = variable.path
        return self.no_key_bias(path) or (not self.qkv_bias and path.split("/")[1:2] in (["query"], ["key"],
                                                                                         ["value"])
                                          and path.endswith("/bias"))

    def to_source(self, variable, key):
        """A variable's value in the source's layout under `key` (PyTorch's, by default)."""
        return to_source(variable)

    def state_dict(self, model, prefix=""):
        """The model's weights as {source key: float32 array}, the inverse of loading through this table:
        `prefix` goes before every key but a head's; a variable the source has no place for must be zero
        (a bias it lacks) or it raises, naming the variable."""
        tensors, packed = {}, {}
        for variable in model.weights:
            key, part = self.key(variable.path)
            if key is None or self.unwritten(variable):
                if key is None or np.any(np.asarray(variable.numpy())):
                    what = f"{variable.path}, which" if key is None else f"a non-zero {variable.path}, which"
                    raise ValueError(f"{model.name!r} cannot be saved in {self.format}'s format: it has {what} "
                                     f"{self.format}'s format has no place for.")
                continue
            value = self.to_source(variable, key)
            if not variable.path.startswith(("head/", "head_dist/")):
                key = prefix + key
            if part is not None:
                packed.setdefault(key, [None] * part[1])[part[0]] = value
                continue
            tensors[key] = value
        for key, parts in packed.items():
            tensors[key] = np.concatenate(parts, axis=0)
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}


def to_source(variable):
    """A variable's value in PyTorch's layout."""
    value = np.asarray(variable.numpy())
    if variable.path.endswith("embedding/kernel"):
        return np.transpose(value, (3, 2, 0, 1))
    if value.ndim == 2 and variable.path.endswith("/kernel"):
        return value.T
    return value


def unsavable(model) -> list[str]:
    """What a model has that neither timm's nor transformers' writers hold."""
    problems = []
    if model.resnet is not None:
        problems.append("a hybrid ResNet stem")
    if model.pooling == "unpooled":
        problems.append("pooling='unpooled'")
    return problems


class Joined:
    """Arrays joined along their first axis, read when asked for (the loader's plan needs the shape alone)."""

    def __init__(self, *parts):
        self.parts = parts
        self.shape = (sum(int(p.shape[0]) for p in parts),) + tuple(parts[0].shape[1:])

    def __array__(self, dtype=None, copy=None):
        joined = np.concatenate([np.asarray(p) for p in self.parts], axis=0)
        return joined if dtype is None else joined.astype(dtype)


# The VisionTransformer arguments a written config must give back when read (the rest: the view, the
# resampling, dropout, names, are the source's own or not part of the computation).
STRUCTURE = ("image_size", "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "include_top",
             "classes", "classifier", "representation_size", "pooling", "fc_norm", "layer_norm_epsilon",
             "distillation", "layer_scale", "register_tokens", "prefix_posemb", "pre_norm", "patch_bias",
             "relative_position_bias", "absolute_position_embeddings", "rope", "rope_temperature", "rope_grid", "mlp_norm",
             "rope_offset", "rope_xy", "pool_heads", "pool_mlp_dim", "pool_prefix")


def activation(args):
    """The MLP's activation a VisionTransformer's arguments name: "gelu", "gelu_tanh", "quick_gelu", "swiglu"."""
    return args.get("mlp_activation") or ("gelu_tanh" if args.get("approximate_gelu", True) else "gelu")


def _normal(model, name, value):
    if name in ("image_size", "patch_size") and isinstance(value, int):
        return (value, value)
    if name == "image_size":
        return tuple(value)
    if name == "pooling" and value is None and model.classifier == "gap":
        return "gap"  # a model without a class token pools by averaging unless told otherwise
    if name == "classes" and not model.include_top:
        return None
    if name == "prefix_posemb" and model.register_tokens == 0 and not model.distillation and value == "class":
        return "all"  # with a class token alone, "class" and "all" are one layout
    if name == "layer_scale" and value is not None:
        return "on"  # the gains are weights; the initial value is not part of the computation
    if name == "layer_norm_epsilon":
        return float(f"{value:.6g}")
    if name == "rope_temperature" and model.rope is not None:  # None is the kind's default
        from keras_vit.rope import DEFAULT_TEMPERATURE

        return float(DEFAULT_TEMPERATURE[model.rope] if value is None else value)
    if name == "rope_grid" and value is not None:
        return tuple(value)
    if name == "pool_heads" and value is None:
        return model.num_heads
    if name == "pool_mlp_dim" and value is None:
        return model.mlp_dim
    if name == "rope_offset":
        return float(value)
    return value


def round_trip_problems(model, args, fmt, same=()):
    """The model's structural arguments that `args` (its written config, read back by the format's own
    reader) does not give back, as "name=value (timm's config reads back as other)"; `same` names arguments whose
    difference changes none of the compared outputs for this model."""
    config = model.get_config()
    problems = []
    mine, theirs = activation(config), activation({**_DEFAULTS, **args})
    if mine != theirs:
        problems.append(f"the {mine} activation ({fmt}'s config reads back as {theirs})")
    if "activation" in same:
        problems = []
    for name in STRUCTURE:
        if name in same or name not in args and name in ("classes",):
            continue
        mine = _normal(model, name, config.get(name))
        theirs = _normal(model, name, args.get(name, _DEFAULTS.get(name)))
        if mine != theirs:
            said = args.get(name, _DEFAULTS.get(name))
            label = "a pre-logits layer " if name == "representation_size" else ""
            problems.append(f"{label}{name}={config.get(name)!r} ({fmt}'s config reads back as {said!r})")
    return problems


# VisionTransformer's own defaults, for arguments a reader leaves out.
_DEFAULTS = {"representation_size": None, "pooling": None, "fc_norm": False, "approximate_gelu": True,
             "mlp_activation": None, "distillation": False, "layer_scale": None, "register_tokens": 0,
             "prefix_posemb": "all", "pre_norm": False, "patch_bias": True, "relative_position_bias": False,
             "absolute_position_embeddings": True, "classifier": "token", "rope": None, "rope_temperature": None,
             "rope_grid": None, "mlp_norm": False, "rope_offset": 0.0, "rope_xy": False, "pool_heads": None,
             "pool_mlp_dim": None, "pool_prefix": False}


def write_folder(folder: Any, tensors: dict[str, np.ndarray], files: dict[str, dict[str, Any]], *,
                 overwrite: bool) -> None:
    """A hub folder written atomically: model.safetensors and each {name: JSON object} of `files`."""
    from keras_vit._files import atomic_path

    st = require_safetensors()
    with atomic_path(folder, overwrite=overwrite) as tmp:
        os.makedirs(tmp)
        st.save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        for name, content in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2)
