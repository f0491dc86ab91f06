"""Recipes and their overrides: `DEFAULTS` (every key a recipe may set), `load_recipe`, `--set` parsing.

A recipe is a Python file whose `get_config()` returns the whole experiment as a dict; unknown keys
are refused with the nearest valid one named.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib.util
import os
from typing import Any, Iterable

from keras_vit._files import is_hub_name, nearest
from keras_vit._recipes import RECIPES_DIR, find_recipe, shipped_recipes  # noqa: F401  (public here)
from keras_vit.config import ViTConfig

# Every key a recipe may set, with its default. Recipes return their own values for the
# keys they care about; `--set key=value` (dotted for model.*) overrides any of them.
DEFAULTS = {
    # data: "digits", "tfds:NAME" (or a tfds name), a folder FOLDER/<class>/* or FOLDER/{train,val,test}/<class>/*,
    # a CSV of path,label[,split] lines, or a .tgz of a folder
    "data": "digits",
    "train_split": "train",
    "test_split": "test",
    "validation_split": 0.1,  # fraction of train held out (stratified) to pick the best model; 0: none
    "test_fraction": 0.1,  # of every class held out as the test split when the data has none (FOLDER/<class>/*)
    "max_train_examples": None,  # a seeded random subset, for quick runs
    "strict": False,  # True: refuse a data set with unreadable image files instead of skipping them
    "class_weight": None,  # "balanced": each class's loss weighted by the inverse of its share
    "image_size": 32,  # None: the init checkpoint's own (a timm / transformers folder's, a .keras file's)
    # model: VisionTransformer arguments; `variant` ("B/16", ...) gives the sizes. None means
    # the variant's value, or VisionTransformer's default without a variant.
    "model": {
        "variant": None,
        "patch_size": None,
        "hidden_size": None,
        "num_layers": None,
        "num_heads": None,
        "mlp_dim": None,
        "classifier": "token",
        "representation_size": None,
        "resnet": None,
        "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "drop_path_rate": 0.0,
    },
    "init_checkpoint": None,  # .npz / .keras / .weights.h5 path or a released name ("imagenet21k"); --set init=PATH
    #                          or --set weights=PATH. A timm / transformers folder (config.json + model.safetensors)
    #                          gives the whole model: its architecture, pixel mean/std (the data pipeline uses them),
    #                          evaluation view and resampling; `--set weights=FOLDER` also takes its image size.
    # DeiT distillation (keras_vit.distill), on when a teacher is named: `--set teacher=PATH` (distill.teacher);
    # the model needs distillation=True. kind "hard" (the teacher's top class) or "soft" (KL at temperature);
    # alpha weighs the teacher's term; teacher_precision "auto" runs a keras-vit teacher in the training precision.
    "distill": {"teacher": None, "kind": "hard", "alpha": 0.5, "temperature": 1.0, "teacher_precision": "auto"},
    # "classify", or "mpp": the paper's masked patch prediction pre-training (keras_vit.masked), labels unused,
    # or "align": the model takes distill.teacher's blocks as its last ones and its front end learns to make the
    # teacher's tokens (keras_vit.distill.TokenAligner), labels unused; then fine-tune it with --set init=PATH
    "objective": "classify",
    # objective "segmentation" or "depth" (keras_vit.dense.training.train): data is a folder of images/ + masks/ (or depth/)
    # pairs, or "fashion_scenes" (Fashion-MNIST items composed into 64x64 scenes, keras_vit.dense.scenes). head
    # "linear" (DINOv2's BN + 1x1 conv), "dpt" or "depth_anything"; taps None: the last block (linear), four
    # evenly spaced blocks (DPT); head_options: further DenseHead fields; mode "finetune" or "linear_probe" (the
    # backbone frozen). Training crops rescale each pair by min_scale-max_scale; masks' 255 is ignored.
    "dense": {"head": "linear", "taps": None, "head_options": None, "mode": "finetune", "ignore_index": 255,
              "min_scale": 0.5, "max_scale": 2.0, "depth_scale": 0.001, "silog_lambda": 0.5, "max_depth": None,
              "scenes_train": 20000, "scenes_test": 2000, "fashion_dir": "/usr/share/datasets/fashion-mnist"},
    "mpp": {"corrupt": 0.5, "mask": 0.8, "random": 0.1, "bits": 3},
    "resample": "official",  # position-embedding resampling when the checkpoint's grid differs
    # augmentation
    "crop": "pad",  # "inception" (area min_area-100%), "pad" (reflect pad + random crop), "none"
    "min_area": 0.05,
    "pad": 4,
    "flip": True,
    "randaugment": None,  # (num_ops, magnitude 0-10)
    "mixup": 0.0,  # MixUp alpha
    "cutmix": 0.0,  # CutMix beta parameter
    "label_smoothing": 0.0,
    "eval_crop_fraction": None,  # central crop at evaluation; None: the init checkpoint's (.keras), else 1.0
    # optimisation
    "optimizer": "adamw",  # "adamw" (decoupled weight decay, not on biases/norms/cls/posemb) or "sgd"
    "learning_rate": 1e-3,
    "weight_decay": 0.05,
    "momentum": 0.9,
    "beta_1": 0.9,
    "beta_2": 0.999,
    "schedule": "cosine",  # after warm-up: "cosine", "linear" or "constant"
    "warmup_steps": None,  # or warmup_epochs
    "warmup_epochs": 1.0,
    "end_learning_rate": 0.0,
    "clip_norm": 1.0,  # clipping by global norm; None: off
    "epochs": 10,
    "batch_size": 128,  # global batch, split across replicas
    "steps_per_epoch": None,  # default: one pass over the training split
    "precision": "auto",  # "auto" (resolve_precision: bfloat16 where native), "float32", "mixed_bfloat16", ...
    "strategy": "auto",  # "auto", "default", "mirrored", "multi_worker", "tpu"
    "cpu_replicas": 0,  # > 1: split the CPU into that many logical devices (tests, debugging)
    # jax: "model_parallel" shards every variable over a DATAxMODEL `mesh` (keras_vit.layout_map's rules),
    # "data_parallel" is Keras' DataParallel; None: the strategy's
    "distribution": None,
    "mesh": None,  # "2x4": 2-way data parallel x 4-way model parallel (distribution="model_parallel")
    "seed": 0,
    "jit_compile": False,  # XLA: slower in bfloat16 on CPU, faster or equal in float32 on some; True on GPU/TPU
    # what the recipe reaches with its own settings, e.g. {"test_accuracy": 0.94}: a run of the unchanged recipe
    # that falls short fails after writing everything (so CI's `keras-vit train digits` checks the quickstart's
    # claim); any other --set clears it (a changed recipe promises nothing); --set expect=None turns it off
    "expect": None,
}

# A recipe's model section takes every architectural option of ViTConfig (keras_vit/config.py), so a new
# option is a recipe key with no list to edit; the run itself decides the head (from the data's classes)
# and the input's channels and statistics (the init checkpoint's, see loop.model_input).
RUN_DECIDES = ("channels", "classes", "include_top", "classifier_activation", "class_names", "pixel_mean", "pixel_std",
               "crop_pct", "interpolation")
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ViTConfig) if f.name not in RUN_DECIDES)
# Keys for which "none" is a value, not None: `--set crop=none` (resize only).
NONE_IS_A_NAME = ("crop",)
# Recipe sections set key by key (`--set distill.kind=soft`); the model's keys are MODEL_KEYS.
SECTIONS = ("model", "distill", "mpp", "dense")
# Short names for --set: `--set teacher=PATH`, `--set init=PATH` (or `weights=PATH`, keras.applications' word).
ALIASES = {"teacher": "distill.teacher", "init": "init_checkpoint", "weights": "init_checkpoint"}


def _section_keys(section):
    if section == "model":
        return tuple(k for k in MODEL_KEYS if k != "image_size")
    return tuple(DEFAULTS[section])


def _flat_keys(config, prefix=""):
    keys = []
    for k, v in config.items():
        if isinstance(v, dict) and k in SECTIONS:
            keys.extend(_flat_keys(v, f"{k}."))
        else:
            keys.append(prefix + k)
    return keys


def _valid_keys():
    return sorted(set(_flat_keys(DEFAULTS)) | {f"{s}.{k}" for s in SECTIONS for k in _section_keys(s)} | set(ALIASES))


def resolve_config(recipe_config):
    """A recipe's dict merged over DEFAULTS; unknown keys raise a ValueError listing valid ones."""
    config = copy.deepcopy(DEFAULTS)
    unknown = []
    for key, value in recipe_config.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ValueError(f"recipe key {key!r} must be a dict, got {value!r}.")
            bad = [f"{key}.{k}" for k in value if k not in _section_keys(key)]
            unknown.extend(bad)
            config[key].update({k: v for k, v in value.items() if f"{key}.{k}" not in bad})
        elif key in config:
            config[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"Unknown recipe key(s) {', '.join(_with_suggestion(k) for k in unknown)}.")
    return config


def _with_suggestion(key):
    """'epoch' -> "'epoch' (did you mean 'epochs'?)"; the full list only when nothing is close."""
    close = nearest(key, _valid_keys())
    if close:
        return f"{key!r} (did you mean {close!r}?)"
    return f"{key!r} (valid keys: {', '.join(_valid_keys())})"


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Runs a recipe file (or a shipped recipe, by name) and returns its resolved config.

    The config holds every key of `DEFAULTS`: the recipe's values, the defaults for the rest.

    Example:
    >>> config = load_recipe("digits")
    >>> config["data"], config["epochs"], config["model"]["patch_size"]
    ('digits', 40, 2)
    """
    path = find_recipe(path)
    spec = importlib.util.spec_from_file_location(f"keras_vit_recipe_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:  # find_recipe hands back an existing .py file: never here
        raise ValueError(f"Recipe {path} is not a Python file.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ValueError(f"Recipe {path} defines no get_config().")
    config = resolve_config(module.get_config())
    config["recipe"] = os.path.abspath(path)
    return config


def _parse_value(key, text, current):
    """Parses `text` as the type of the current value (bool, int, float, str, tuple, None)."""
    def literal():
        try:
            return _safe_literal(text)
        except (ValueError, SyntaxError):
            if any(c in text for c in "([{"):  # meant as a Python value, but not a literal one
                raise ValueError(f"--set {key}={text}: not a literal value (numbers, strings, tuples, lists, "
                                 "{...} or dict(key=value, ...) of them, None).") from None
            return text

    if isinstance(current, bool):
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"--set {key}={text}: expected true or false.")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            if text.lower() == "none":
                return None
            raise ValueError(f"--set {key}={text}: expected an integer.") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            if text.lower() == "none":
                return None
            raise ValueError(f"--set {key}={text}: expected a number.") from None
    if isinstance(current, str):
        return None if text.lower() == "none" and key not in NONE_IS_A_NAME else text
    value = literal()
    # A key whose recipe value is None (randaugment, init) reads none as None in any case, as str keys do.
    return None if isinstance(value, str) and value.lower() == "none" else value


def _safe_literal(text):
    """ast.literal_eval that also reads `dict(a=1, b=(2, 3))`, the README's syntax; never eval."""
    tree = ast.parse(text.strip(), mode="eval").body
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "dict":
        if tree.args or any(k.arg is None for k in tree.keywords):
            raise ValueError(f"dict(...) takes key=value pairs only, got {text!r}.")
        return {k.arg: ast.literal_eval(k.value) for k in tree.keywords}
    return ast.literal_eval(tree)


def apply_overrides(config: dict[str, Any], overrides: Iterable[str] | None) -> dict[str, Any]:
    """Applies ["key=value", "model.hidden_size=256", ...]; unknown keys list the valid ones.

    Each value is read as the type of the value it replaces; `config` itself is left as it was. Any key
    but `expect` clears the recipe's `expect`: what it reaches holds for its own settings only.
    `weights=FOLDER` (a timm / transformers checkpoint, `hub_checkpoint`) without `image_size=` sets
    image_size to None: the model trains at the checkpoint's own size.

    Example:
    >>> config = apply_overrides(load_recipe("digits"), ["epochs=2", "model.hidden_size=32"])
    >>> config["epochs"], config["model"]["hidden_size"]
    (2, 32)
    >>> apply_overrides(config, ["epoch=2"])
    Traceback (most recent call last):
    ValueError: Unknown recipe key 'epoch' (did you mean 'epochs'?) in --set epoch=2.
    """
    config = copy.deepcopy(config)
    changed = set()
    for item in overrides or ():
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}.")
        key, text = item.split("=", 1)
        key = key.strip()
        if key not in _valid_keys():
            raise ValueError(f"Unknown recipe key {_with_suggestion(key)} in --set {item}.")
        key = ALIASES.get(key, key)
        changed.add(key)
        if key.split(".", 1)[0] in SECTIONS and "." in key:
            section, name = key.split(".", 1)
            config[section][name] = _parse_value(key, text, config[section].get(name))
        else:
            config[key] = _parse_value(key, text, config[key])
    if changed - {"expect"}:
        config["expect"] = None
    if "init_checkpoint" in changed and "image_size" not in changed and hub_checkpoint(config["init_checkpoint"]):
        # --set weights=FOLDER fine-tunes the checkpoint at its own size, not at the recipe's (--set image_size=N)
        config["image_size"] = None
    return config


def hub_checkpoint(source: Any) -> bool:
    """Whether `init_checkpoint` is a timm / transformers checkpoint (a hub folder holding config.json,
    a .safetensors file with its config.json beside it, or a hub name such as "facebook/dinov2-small",
    which huggingface_hub fetches into its cache): `build_model` builds such a model from its own config,
    at its own size unless image_size is set, with its pixel statistics and a new head."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    source = os.fspath(source)
    return is_hub_name(source) or os.path.isfile(os.path.join(source, "config.json")) or (
        source.endswith(".safetensors") and os.path.isfile(source))

