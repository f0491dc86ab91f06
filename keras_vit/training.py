"""Training with `model.fit` under tf.distribute: recipes, strategies, optimizers, callbacks.

Under the jax and torch backends the same job runs with Keras' own distribution API in place of
tf.distribute (`get_distribution`: `keras.distribution.DataParallel` over jax's devices; one
device under torch); the data stays a tf.data pipeline, which Keras feeds to every backend.

A recipe is a Python file whose `get_config()` returns the whole experiment as a dict
(see `DEFAULTS` for every key). `train(config, model_dir)` builds the data, the model and
the optimizer inside the strategy's scope, fits with preemption-safe callbacks and writes
`model.keras`, `best.keras`, `metrics.json`, `history.csv` and TensorBoard logs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import importlib.util
import json
import logging
import math
import os
import shutil
import time
from typing import Any, Iterable

import keras
import numpy as np
import tensorflow as tf

from keras_vit import report
from keras_vit._files import atomic_path, nearest
from keras_vit._recipes import RECIPES_DIR, find_recipe, shipped_recipes  # noqa: F401  (public here)
from keras_vit.augment import check_rand_augment

log = logging.getLogger("keras_vit")

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
    "image_size": 32,
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
    #                          or --set weights=PATH
    # DeiT distillation (keras_vit.distill), on when a teacher is named: `--set teacher=PATH` (distill.teacher);
    # the model needs distillation=True. kind "hard" (the teacher's top class) or "soft" (KL at temperature);
    # alpha weighs the teacher's term; teacher_precision "auto" runs a keras-vit teacher in the training precision.
    "distill": {"teacher": None, "kind": "hard", "alpha": 0.5, "temperature": 1.0, "teacher_precision": "auto"},
    # "classify", or "mpp": the paper's masked patch prediction pre-training (keras_vit.masked), labels unused
    "objective": "classify",
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
    "seed": 0,
    "jit_compile": False,  # XLA: slower in bfloat16 on CPU, faster or equal in float32 on some; True on GPU/TPU
}

MODEL_KEYS = ("variant", "image_size", "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim",
              "classifier", "representation_size", "resnet", "dropout_rate", "attention_dropout_rate",
              "drop_path_rate", "pooling", "approximate_gelu", "attention_implementation", "distillation")
# Recipe sections set key by key (`--set distill.kind=soft`); the model's keys are MODEL_KEYS.
SECTIONS = ("model", "distill", "mpp")
# Short names for --set: `--set teacher=PATH`, `--set init=PATH` (or `weights=PATH`, keras.applications' word).
ALIASES = {"teacher": "distill.teacher", "init": "init_checkpoint", "weights": "init_checkpoint"}


def _section_keys(section):
    if section == "model":
        return tuple(k for k in MODEL_KEYS if k != "image_size")
    return tuple(DEFAULTS[section])


# --- recipes and overrides -----------------------------------------------------------

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
        return None if text.lower() == "none" else text
    value = literal()
    return None if value == "None" else value


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

    Each value is read as the type of the value it replaces; `config` itself is left as it was.

    Example:
    >>> config = apply_overrides(load_recipe("digits"), ["epochs=2", "model.hidden_size=32"])
    >>> config["epochs"], config["model"]["hidden_size"]
    (2, 32)
    >>> apply_overrides(config, ["epoch=2"])
    Traceback (most recent call last):
    ValueError: Unknown recipe key 'epoch' (did you mean 'epochs'?) in --set epoch=2.
    """
    config = copy.deepcopy(config)
    for item in overrides or ():
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}.")
        key, text = item.split("=", 1)
        key = key.strip()
        if key not in _valid_keys():
            raise ValueError(f"Unknown recipe key {_with_suggestion(key)} in --set {item}.")
        key = ALIASES.get(key, key)
        if key.split(".", 1)[0] in SECTIONS and "." in key:
            section, name = key.split(".", 1)
            config[section][name] = _parse_value(key, text, config[section].get(name))
        else:
            config[key] = _parse_value(key, text, config[key])
    return config


# --- strategies ----------------------------------------------------------------------

def _tf_config():
    try:
        return json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}.") from None


def _num_workers(tf_config):
    cluster = tf_config.get("cluster", {})
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _tpu_resolver():
    if not (os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR") or os.path.exists("/dev/accel0")
            or os.path.exists("/dev/vfio/0")):
        return None
    try:
        return tf.distribute.cluster_resolver.TPUClusterResolver()
    except (ValueError, tf.errors.NotFoundError):
        return None


def get_strategy(name="auto", cpu_replicas=0):
    """The tf.distribute strategy to train with.

    "auto": TPUStrategy when a TPU is configured, MultiWorkerMirroredStrategy when
    TF_CONFIG names several workers, MirroredStrategy for several GPUs (or `cpu_replicas`
    logical CPUs), else the default strategy. Or name one: "default", "mirrored",
    "multi_worker", "tpu".
    """
    names = ("auto", "default", "mirrored", "multi_worker", "tpu")
    if name not in names:
        raise ValueError(f"Unknown strategy {name!r}; use one of {names}.")
    if cpu_replicas and cpu_replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        configured = tf.config.get_logical_device_configuration(cpu) or []
        if len(configured) < cpu_replicas:
            try:  # listing logical devices would initialize them: configure first
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_replicas)
            except RuntimeError as e:
                raise RuntimeError(f"cpu_replicas={cpu_replicas} must be set before TensorFlow starts: {e}") from None
    if name == "tpu" or (name == "auto" and _tpu_resolver() is not None):
        resolver = _tpu_resolver() or tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker" or (name == "auto" and _num_workers(_tf_config()) > 1):
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    if name == "mirrored" or (name == "auto" and (len(gpus) > 1 or (cpu_replicas or 0) > 1)):
        devices = [d.name for d in gpus] if gpus else [d.name for d in cpus[: max(cpu_replicas or 1, 1)]]
        return tf.distribute.MirroredStrategy(devices)
    return tf.distribute.get_strategy()


class KerasDistribution:
    """What `train` uses of a tf.distribute strategy, for the jax and torch backends: a
    `keras.distribution` (None: one device), its `scope()` and `num_replicas_in_sync`."""

    def __init__(self, distribution=None):
        self.distribution = distribution
        self.num_replicas_in_sync = 1 if distribution is None else int(distribution.device_mesh.devices.size)

    def scope(self):
        return contextlib.nullcontext() if self.distribution is None else self.distribution.scope()

    @property
    def name(self):
        return "SingleDevice" if self.distribution is None else type(self.distribution).__name__


def get_distribution(name="auto", cpu_replicas=0):
    """The `KerasDistribution` to train with under the jax or torch backend.

    jax: "auto" is `keras.distribution.DataParallel` over every visible device when there are
    several (GPUs, TPU cores, or CPUs split by `cpu_replicas` or
    `XLA_FLAGS=--xla_force_host_platform_device_count=N`), else one device; "mirrored" is
    DataParallel even over one; "default" one device. torch: one device ("auto", "default").
    "multi_worker" and "tpu" are tf.distribute's: the tensorflow backend's.

    Example (under KERAS_BACKEND=jax, with two CPU devices):
    >>> get_distribution("auto").name, get_distribution("auto").num_replicas_in_sync
    ('DataParallel', 2)
    """
    backend = keras.backend.backend()
    names = ("auto", "default", "mirrored", "multi_worker", "tpu")
    if name not in names:
        raise ValueError(f"Unknown strategy {name!r}; use one of {names}.")
    usable = ("auto", "default", "mirrored") if backend == "jax" else ("auto", "default")
    if name not in usable:
        raise ValueError(f"strategy {name!r} is not available under KERAS_BACKEND={backend}: use one of {usable}, "
                         "or train under KERAS_BACKEND=tensorflow for tf.distribute's strategies.")
    if backend != "jax":
        if cpu_replicas and cpu_replicas > 1:
            raise ValueError(f"cpu_replicas={cpu_replicas}: training under KERAS_BACKEND={backend} uses one device; "
                             "split the CPU under jax or tensorflow.")
        return KerasDistribution()
    import jax

    if cpu_replicas and cpu_replicas > 1:
        if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
            try:  # takes effect only before jax has started its CPU backend
                jax.config.update("jax_num_cpu_devices", int(cpu_replicas))
            except RuntimeError:
                pass
        if len(jax.devices("cpu")) < cpu_replicas:
            raise RuntimeError(f"cpu_replicas={cpu_replicas} must be set before jax starts; run with "
                               f"XLA_FLAGS=--xla_force_host_platform_device_count={cpu_replicas}.")
    devices = keras.distribution.list_devices()
    if cpu_replicas and cpu_replicas > 1 and all(d.startswith("cpu") for d in devices):
        devices = devices[:cpu_replicas]
    if name == "mirrored" or (name == "auto" and len(devices) > 1):
        return KerasDistribution(keras.distribution.DataParallel(devices=devices))
    return KerasDistribution()


def strategy_name(strategy):
    """The public tf.distribute name of a strategy (CollectiveAllReduceStrategy -> MultiWorkerMirroredStrategy),
    or of a `KerasDistribution` ("DataParallel", "SingleDevice")."""
    if isinstance(strategy, KerasDistribution):
        return strategy.name
    name = type(strategy).__name__
    return {
        "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
        "_DefaultDistributionStrategy": "DefaultStrategy",
        "TPUStrategyV2": "TPUStrategy",
    }.get(name, name)


def _task():
    """(task type, index, is_chief) of this process in TF_CONFIG; a lone process is the chief."""
    task = _tf_config().get("task", {})
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    has_chief = bool(_tf_config().get("cluster", {}).get("chief"))
    return kind, index, (kind == "chief" or (not has_chief and index == 0))


# --- precision -----------------------------------------------------------------------

# x86 CPU flags (/proc/cpuinfo) of native bfloat16 matmuls: AVX512-BF16 (Cooper Lake, Zen 4 and
# later) and AMX (Sapphire Rapids and later). Without them oneDNN emulates bfloat16, slower than float32.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16", "bfloat16", "float16")


def _cpu_flags(cpuinfo):
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.split(":")[0].strip() in ("flags", "Features"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def resolve_precision(precision: str = "auto", *, cpuinfo: str = "/proc/cpuinfo") -> tuple[str, str]:
    """The Keras dtype policy to train with, and why: `(policy, reason)`.

    "auto" takes "mixed_bfloat16" where the hardware computes bfloat16 natively: a TPU, a
    GPU of compute capability 8.0 or later (Ampere, Hopper, ...), or a CPU with AVX512-BF16
    or AMX (its flags in `cpuinfo`); everywhere else "float32", because emulated bfloat16
    is slower than float32 (0.8x for ViT-B/16 inference on an AVX2-only CPU). Any other
    name (`PRECISIONS`) is returned as given.

    Example:
    >>> resolve_precision("mixed_bfloat16")
    ('mixed_bfloat16', 'set explicitly')
    >>> policy, reason = resolve_precision("auto")  # e.g. 'the CPU has native bfloat16 (avx512_bf16)'
    >>> policy in ("float32", "mixed_bfloat16")
    True
    """
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; use one of {PRECISIONS}.")
    if precision != "auto":
        return precision, "set explicitly"
    if tf.config.list_logical_devices("TPU"):
        return "mixed_bfloat16", "a TPU computes in bfloat16 natively"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = []
        for gpu in gpus:
            details = tf.config.experimental.get_device_details(gpu)
            capabilities.append((details.get("compute_capability") or (0, 0), details.get("device_name", gpu.name)))
        (major, minor), name = min(capabilities)
        if major >= 8:
            return "mixed_bfloat16", f"the GPU {name} (compute capability {major}.{minor}) has native bfloat16"
        return "float32", (f"the GPU {name} (compute capability {major}.{minor}) has no native bfloat16 "
                           "(mixed_float16 may be faster: --set precision=mixed_float16)")
    flags = _cpu_flags(cpuinfo)
    if flags is None:
        return "float32", f"no accelerator, and the CPU's features are unknown ({cpuinfo} unreadable)"
    native = [f for f in BF16_CPU_FLAGS if f in flags]
    if native:
        return "mixed_bfloat16", f"the CPU has native bfloat16 ({', '.join(native)})"
    return "float32", "the CPU has no native bfloat16 (no avx512_bf16 or amx_bf16 flag): bfloat16 would be emulated"


# --- optimisation --------------------------------------------------------------------

@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak`, then "cosine", "linear" or "constant" down to `end`."""

    def __init__(self, peak, warmup_steps, total_steps, decay="cosine", end=0.0):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.decay = decay
        self.end = float(end)
        if decay not in ("cosine", "linear", "constant"):
            raise ValueError(f"Unknown schedule {decay!r}; use 'cosine', 'linear' or 'constant'.")

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warm = self.peak * step / max(self.warmup_steps, 1)
        progress = keras.ops.clip((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 0.0, 1.0)
        if self.decay == "cosine":
            decayed = self.end + (self.peak - self.end) * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        elif self.decay == "linear":
            decayed = self.peak + (self.end - self.peak) * progress
        else:
            decayed = self.peak + 0.0 * progress
        return keras.ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps,
                "decay": self.decay, "end": self.end}


# Not decayed, as in the official code: biases, norm scales and offsets, class token, position embeddings
# (and DeiT's distillation token, as timm's no_weight_decay).
NO_DECAY = ["bias", "gamma", "beta", "cls", "pos_embedding", "dist_token"]


def build_optimizer(config, steps_per_epoch):
    total = max(int(config["epochs"] * steps_per_epoch), 1)
    warmup = config["warmup_steps"]
    if warmup is None:
        warmup = int(round(config["warmup_epochs"] * steps_per_epoch))
    schedule = WarmupSchedule(config["learning_rate"], min(warmup, total), total, config["schedule"],
                              config["end_learning_rate"])
    common = dict(learning_rate=schedule, global_clipnorm=config["clip_norm"])
    if config["optimizer"] == "adamw":
        optimizer = keras.optimizers.AdamW(weight_decay=config["weight_decay"], beta_1=config["beta_1"],
                                           beta_2=config["beta_2"], **common)
        optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    elif config["optimizer"] == "sgd":
        optimizer = keras.optimizers.SGD(momentum=config["momentum"], **common)
    else:
        raise ValueError(f"Unknown optimizer {config['optimizer']!r}; use 'adamw' or 'sgd'.")
    return optimizer


# --- callbacks -----------------------------------------------------------------------

class BestModelCheckpoint(keras.callbacks.Callback):
    """Saves the model with the best `monitor` so far, atomically (never a half-written file).

    `save_target`: the model to save when it is not the one being fit (a distilled student inside
    its `Distiller`, an encoder inside its pre-training wrapper)."""

    def __init__(self, path, monitor="val_accuracy", enabled=True, save_target=None):
        super().__init__()
        self.path = path
        self.monitor = monitor
        self.enabled = enabled
        self.save_target = save_target
        self.best = -math.inf

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or value <= self.best:
            return
        self.best = float(value)
        if self.enabled:
            with atomic_path(self.path) as tmp:
                (self.save_target or self.model).save(tmp)


class EpochCounter(keras.callbacks.Callback):
    """Remembers the last finished epoch (BackupAndRestore may start fit past epoch 0) and says
    when a run resumes. Adds each epoch's wall and CPU seconds (this process, all threads) to its
    logs, so history.csv holds the cost of every epoch across resumes."""

    def __init__(self, backup_dir=None):
        super().__init__()
        self.backup_dir = backup_dir
        self.first_epoch = None
        self.epochs_completed = 0
        self._started = None

    def on_epoch_begin(self, epoch, logs=None):
        self._started = (time.time(), time.process_time())
        if self.first_epoch is None:
            self.first_epoch = epoch
            self.epochs_completed = epoch
            if epoch:
                print(f"keras-vit train: resuming from epoch {epoch + 1} (backup in {self.backup_dir})", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        self.epochs_completed = epoch + 1
        if logs is not None and self._started is not None:
            logs["epoch_seconds"] = round(time.time() - self._started[0], 1)
            logs["epoch_cpu_seconds"] = round(time.process_time() - self._started[1], 1)


# --- MultiWorkerMirroredStrategy with Keras 3 fit --------------------------------------

def _needs_multi_worker_fix(strategy):
    """keras-team/keras#20585: Keras 3 fit under CollectiveAllReduceStrategy reduces a
    PerReplica data batch across workers to build the model symbolically, which fails
    eagerly. Seen on Keras 3.5-3.15; the fix only touches models trained under MWMS."""
    from packaging.version import Version

    return (type(strategy).__name__ == "CollectiveAllReduceStrategy"
            and Version(keras.__version__) >= Version("3.0"))


def _build_from_local_batch(self, iterator=None, data_batch=None):
    """`_maybe_symbolic_build` that takes this worker's batch: only its shapes are needed."""
    from keras.src import tree

    if iterator is not None:
        for _, _, it in iterator:
            batch = next(it)
            data_batch = tree.map_structure(
                lambda x: (self.distribute_strategy.experimental_local_results(x)[0]
                           if isinstance(x, tf.distribute.DistributedValues) else x), batch)
            break
    with self.distribute_strategy.scope():
        self._symbolic_build(data_batch=data_batch)


def _patch_scalar_reduce():
    """Keras' MWMS branch of `reduce_per_replica` averages every log over axis 0, which a
    scalar metric does not have ("Invalid reduction dimension 0"). Scalars get axis=None;
    everything else, and every other strategy, goes to Keras' own code."""
    from keras.src.backend.tensorflow import trainer as tf_trainer
    from keras.src import tree

    original = tf_trainer.reduce_per_replica
    if getattr(original, "_keras_vit_fix", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and type(strategy).__name__ == "CollectiveAllReduceStrategy":
            def reduce(v):
                local = strategy.experimental_local_results(v)[0] \
                    if isinstance(v, tf.distribute.DistributedValues) else v
                if getattr(local, "shape", None) is not None and local.shape.rank == 0:
                    return strategy.reduce("MEAN", v, axis=None)
                return original(v, strategy, reduction)
            return tree.map_structure(reduce, values)
        return original(values, strategy, reduction)

    reduce_per_replica._keras_vit_fix = True
    tf_trainer.reduce_per_replica = reduce_per_replica


def apply_multi_worker_fix(model, strategy):
    """The two fixes for MWMS + Keras 3 fit, applied only under that strategy; returns whether it did."""
    if not _needs_multi_worker_fix(strategy) or not hasattr(model, "_maybe_symbolic_build"):
        return False
    import types

    model._maybe_symbolic_build = types.MethodType(_build_from_local_batch, model)
    _patch_scalar_reduce()
    return True


# --- the job -------------------------------------------------------------------------

def prepare_data(config, model_dir=None, write_record=True):
    """Loads the splits named by the config: train (minus validation), validation, test.

    Folders and CSVs of images are streamed, their split recorded in `model_dir` (data_split.csv)
    and reused from there by a resumed or re-run job (`keras_vit.data.training_splits`).
    """
    from keras_vit import data as data_lib

    train_name, test_name = config["train_split"], config["test_split"]
    fraction = config["validation_split"]
    kind = data_lib.data_source(config["data"])[0]
    if kind in ("folder", "csv"):
        return data_lib.training_splits(
            config["data"], train_split=train_name, test_split=test_name, seed=config["seed"],
            test_fraction=config["test_fraction"], validation_split=fraction,
            max_train_examples=config["max_train_examples"], strict=config["strict"], record_dir=model_dir,
            write_record=write_record)
    if kind == "tfds" and fraction:
        # tfds slicing holds out validation data without reading the split into memory
        pct = int(round(fraction * 100))
        names = (f"{train_name}[{pct}%:]", test_name, f"{train_name}[:{pct}%]")
        splits = data_lib.load_data(config["data"], names)
        train, test, validation = (splits[n] for n in names)
        if config["max_train_examples"] and train.stream is None and config["max_train_examples"] < len(train):
            train, _ = data_lib.stratified_split(train, 1.0 - config["max_train_examples"] / len(train),
                                                 seed=config["seed"])
        return train, validation, test
    extra = (dict(seed=config["seed"], test_fraction=config["test_fraction"], strict=config["strict"])
             if kind == "archive" else {})
    splits = data_lib.load_data(config["data"], (train_name, test_name), **extra)
    train, test = splits[train_name], splits[test_name]
    if config["max_train_examples"]:
        # a stratified subset: the sorted folders must not yield the first classes only
        keep = int(config["max_train_examples"])
        if keep < len(train):
            train, _ = data_lib.stratified_split(train, 1.0 - keep / len(train), seed=config["seed"])
    validation = None
    if config["validation_split"]:
        train, validation = data_lib.stratified_split(train, config["validation_split"], seed=config["seed"])
    for split in (train, test) + ((validation,) if validation is not None else ()):
        if len(split) == 0:
            raise ValueError(f"{split.origin}: no images; refusing to train on zero examples.")
    return train, validation, test


def eval_view(config):
    """(crop_pct, interpolation): how evaluation (and the saved model's predict and exports) turn an
    image of any size into the model's input: the recipe's `eval_crop_fraction`, else the view a
    `.keras` init checkpoint carries (a timm checkpoint's crop_pct and interpolation, converted), else
    the paper's plain resize (1.0, bilinear)."""
    from keras_vit.images import view_policy

    source = config["init_checkpoint"]
    saved = {}
    if isinstance(source, str) and source.endswith(".keras") and os.path.isfile(source):
        import zipfile

        try:
            with zipfile.ZipFile(source) as z:
                saved = json.loads(z.read("config.json")).get("config", {})
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            saved = {}
    return view_policy(crop_pct=config["eval_crop_fraction"] or saved.get("crop_pct"),
                       interpolation=saved.get("interpolation"))


def build_model(config, class_names):
    from keras_vit.models import VisionTransformer, create_model

    kwargs = {k: v for k, v in config["model"].items() if v is not None and k != "variant"}
    crop_pct, interpolation = eval_view(config)
    kwargs.update(image_size=config["image_size"], classes=len(class_names), class_names=class_names,
                  classifier_activation=None, crop_pct=crop_pct, interpolation=interpolation)
    variant = config["model"].get("variant")
    model = create_model(variant, **kwargs) if variant else VisionTransformer(**kwargs)
    if config["init_checkpoint"]:
        from keras_vit.checkpoints import load_weights

        load_weights(model, config["init_checkpoint"], method=config["resample"])
    return model


def train(config: dict[str, Any], model_dir: str | os.PathLike, backup_dir: str | os.PathLike | None = None,
          verbose: str | int = "auto", overwrite: bool = False) -> dict[str, Any]:
    """Runs one experiment; returns the metrics written to `model_dir/metrics.json`.

    A model dir that holds a finished run (its metrics.json) is refused unless `overwrite`; one
    with a backup of an unfinished run resumes from its last finished epoch (a line says so).
    Ctrl-C raises a KeyboardInterrupt whose message says from which epoch a rerun resumes.

    Example:
    <!-- slow: trains for a minute on 2 CPU cores -->
    >>> config = apply_overrides(load_recipe("digits"), ["epochs=1", "max_train_examples=300"])
    >>> metrics = train(config, "runs/digits", verbose=0)
    keras-vit train: ...
    >>> 0.0 <= metrics["test_accuracy"] <= 1.0, os.path.exists("runs/digits/model.keras")
    (True, True)
    """
    config = copy.deepcopy(config)
    for key in ("epochs", "batch_size"):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ValueError(f"{key} must be a positive integer, got {config[key]!r}.")
    if config["randaugment"]:
        check_rand_augment(config["randaugment"])  # before minutes of decoding, not after
    if config["class_weight"] not in (None, "balanced"):
        raise ValueError(f"class_weight must be None or 'balanced', got {config['class_weight']!r}.")
    if config["class_weight"] and config["objective"] == "mpp":
        raise ValueError("class_weight weighs the classes of the labels; objective 'mpp' uses no labels.")
    policy, why = resolve_precision(config["precision"])  # an unknown name fails before anything starts
    _check_model_dir(model_dir, backup_dir, overwrite)
    created = not os.path.exists(model_dir)
    try:
        backend = keras.backend.backend()
        if backend == "tensorflow":
            strategy = get_strategy(config["strategy"], config["cpu_replicas"])
            kind, index, is_chief = _task()
        else:  # one process: Keras' distribution API, not TF_CONFIG's cluster
            strategy = get_distribution(config["strategy"], config["cpu_replicas"])
            index, is_chief = 0, True
        replicas = strategy.num_replicas_in_sync
        print(f"keras-vit train: {strategy_name(strategy)} with {replicas} replica(s)"
              f"{'' if is_chief else f' (worker {index})'}{'' if backend == 'tensorflow' else f' on {backend}'}; "
              f"precision {policy} ({'auto: ' if config['precision'] == 'auto' else ''}{why})", flush=True)
        keras.utils.set_random_seed(config["seed"])
        keras.mixed_precision.set_global_policy(policy)
        # A Keras distribution shards the batches of fit and evaluate too, not only the variables.
        scope = strategy.scope() if isinstance(strategy, KerasDistribution) else contextlib.nullcontext()
        try:
            with scope:
                return _train(config, model_dir, backup_dir, strategy, index, is_chief, verbose, (policy, why))
        finally:
            keras.mixed_precision.set_global_policy("float32")
    except BaseException:
        if created:
            _remove_if_empty(model_dir)
        raise


_RUN_FILES = ("model.keras", "best.keras", "metrics.json", "history.csv", "confusion_matrix.csv",
              "confusion_matrix.png", "worst_test_images.csv")


def _check_model_dir(model_dir, backup_dir, overwrite):
    finished = os.path.join(model_dir, "metrics.json")
    backup = backup_dir or os.path.join(model_dir, "backup")
    # BackupAndRestore deletes its backup when a run ends, so a metrics.json without one is a finished run.
    if not os.path.exists(finished) or (os.path.isdir(backup) and os.listdir(backup)):
        return
    if not overwrite:
        raise FileExistsError(f"{model_dir} holds a finished run ({finished}); pass --overwrite (overwrite=True) "
                              "to train into it again, or choose another --model-dir.")
    log.info("overwriting the finished run in %s", model_dir)
    for name in _RUN_FILES:
        if os.path.exists(os.path.join(model_dir, name)):
            os.remove(os.path.join(model_dir, name))
    if os.path.isdir(os.path.join(model_dir, "logs")):
        shutil.rmtree(os.path.join(model_dir, "logs"))


def _remove_if_empty(folder):
    """Removes a folder this run created when no file was written into it (a failed start)."""
    for _, _, files in os.walk(folder):
        if files:
            return
    shutil.rmtree(folder, ignore_errors=True)


def compile_for_training(model: keras.Model, config: dict[str, Any], steps_per_epoch: int,
                         padded: bool = False) -> None:
    """Compiles `model` as `train` does: the recipe's optimizer and schedule, loss, accuracy and XLA setting.

    `padded`: batches carry zero-weight rows (a Keras distribution's evenly split last batch).

    Example:
    >>> model = keras_vit.VisionTransformer(image_size=8, patch_size=2, hidden_size=16, num_layers=1,
    ...                                     num_heads=2, mlp_dim=32, classes=10)
    >>> compile_for_training(model, load_recipe("digits"), steps_per_epoch=10)
    >>> type(model.optimizer).__name__, type(model.loss).__name__
    ('AdamW', 'CategoricalCrossentropy')
    """
    model.compile(
        optimizer=build_optimizer(config, steps_per_epoch),
        loss=keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config["label_smoothing"],
            # padded rows (weight 0) must not count in a batch's mean; same value on unweighted batches
            **({"reduction": "mean_with_sample_weight"} if padded else {})),
        # weighted_metrics: the only ones that see sample weights (the zero weights of padded rows)
        **{"weighted_metrics" if padded else "metrics": [keras.metrics.CategoricalAccuracy(name="accuracy")]},
        jit_compile=_jit_compile(config["jit_compile"]),
    )


# Over 80 lines: one run, start to finish, in the strategy's scope (data, model, callbacks, fit,
# evaluation, files); each step is a call, their order is the content.
def _train(config, model_dir, backup_dir, strategy, index, is_chief, verbose, precision):
    from keras_vit import data as data_lib

    model_dir = os.path.abspath(model_dir)
    # Non-chief workers write nothing the user reads; their files go to a scratch folder.
    out_dir = model_dir if is_chief else os.path.join(model_dir, ".workers", f"worker_{index}")
    os.makedirs(out_dir, exist_ok=True)
    train_split, val_split, test_split = prepare_data(config, model_dir, write_record=is_chief)
    class_names = train_split.class_names
    log.info("data: %d train, %s validation, %d test images of %s, %d classes",
             len(train_split), len(val_split) if val_split is not None else 0, len(test_split),
             config["data"], len(class_names))
    class_counts = report.describe_classes({"train": train_split, "validation": val_split, "test": test_split})
    class_weight = (report.balanced_class_weights(train_split.labels, len(class_names))
                    if config["class_weight"] == "balanced" else None)
    batch = config["batch_size"]
    if batch % strategy.num_replicas_in_sync:
        raise ValueError(f"batch_size {batch} is not divisible by the {strategy.num_replicas_in_sync} replicas.")
    steps = config["steps_per_epoch"] or max(len(train_split) // batch, 1)
    aug = dict(crop=config["crop"], min_area=config["min_area"], pad=config["pad"], flip=config["flip"],
               randaugment=config["randaugment"], mixup=config["mixup"], cutmix=config["cutmix"])
    train_ds = data_lib.make_dataset(train_split, config["image_size"], batch, training=True, seed=config["seed"],
                                     repeat=True, **aug)
    crop_pct, interpolation = eval_view(config)
    eval_kw = dict(crop_fraction=crop_pct, interpolation=interpolation)
    val_ds = (data_lib.make_dataset(val_split, config["image_size"], batch, training=False, **eval_kw)
              if val_split is not None else None)
    test_ds = data_lib.make_dataset(test_split, config["image_size"], batch, training=False, **eval_kw)
    padded = isinstance(strategy, KerasDistribution) and strategy.num_replicas_in_sync > 1
    if padded:  # DataParallel splits every batch evenly over the devices, the last one too
        val_ds, test_ds = (_pad_batches(ds, strategy.num_replicas_in_sync) if ds is not None else None
                           for ds in (val_ds, test_ds))

    with strategy.scope():
        model = build_model(config, class_names)
        compile_for_training(model, config, steps, padded=padded)
        fit_model = wrap_for_training(model, config, steps)  # the model, or the wrapper that trains it
    apply_multi_worker_fix(fit_model, strategy)
    backup_dir = backup_dir or os.path.join(model_dir, "backup")
    # One folder per worker: workers sharing one crash on the HDF5 file lock.
    worker_backup = os.path.join(backup_dir, f"worker_{index}")
    counter = EpochCounter(worker_backup)
    callbacks = [counter, keras.callbacks.TerminateOnNaN(),
                 keras.callbacks.BackupAndRestore(worker_backup, double_checkpoint=True)]
    monitor = "val_accuracy" if val_ds is not None else "accuracy"
    callbacks.append(BestModelCheckpoint(os.path.join(out_dir, "best.keras"), monitor, enabled=is_chief,
                                         save_target=model if fit_model is not model else None))
    callbacks.append(keras.callbacks.CSVLogger(os.path.join(out_dir, "history.csv"), append=True))
    callbacks.extend(_tensorboard(out_dir, is_chief))

    start, cpu_start = time.time(), time.process_time()
    try:
        with data_lib.unknown_length_quiet():
            history = fit_model.fit(train_ds, epochs=config["epochs"], steps_per_epoch=steps, validation_data=val_ds,
                                    callbacks=callbacks, verbose=verbose, shuffle=False, class_weight=class_weight)
    except KeyboardInterrupt:
        print(flush=True)  # end Keras' progress bar line
        raise KeyboardInterrupt(f"interrupted; run the same command again to resume from epoch "
                                f"{counter.epochs_completed + 1}") from None
    train_seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
    # masked patch prediction: the test split scores the pre-training task (colour accuracy), not classes
    with data_lib.unknown_length_quiet():
        test_loss, test_accuracy = (fit_model if config["objective"] == "mpp" else model).evaluate(test_ds, verbose=0)
    stopped = counter.epochs_completed < config["epochs"]
    details = {}
    if is_chief and config["objective"] == "classify":  # per class, confusions, the worst images: files
        details = report.end_of_run_report(
            model, test_split, data_lib.make_dataset(test_split, config["image_size"], batch, training=False,
                                                     with_index=True, **eval_kw), out_dir)
    metrics = {
        "objective": config["objective"],
        "epochs_completed": counter.epochs_completed,
        "resumed_at_epoch": counter.first_epoch or 0,
        "stopped_early": stopped,
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "test_examples": len(test_split),
        "train_examples": len(train_split),
        "validation_examples": len(val_split) if val_split is not None else 0,
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(cpu_seconds, 1),
        "strategy": strategy_name(strategy),
        "num_replicas": strategy.num_replicas_in_sync,
        "precision": precision[0],
        "precision_reason": precision[1],
        "parameters": model.count_params(),
        "class_names": class_names,
        "class_counts": class_counts,
        "class_weight": class_weight,
        "skipped_files": len(train_split.skipped),
        "skipped": [{"file": name, "reason": reason} for name, reason in train_split.skipped[:100]],
        "data_split": (os.path.join(model_dir, data_lib.SPLIT_RECORD)
                       if os.path.isfile(os.path.join(model_dir, data_lib.SPLIT_RECORD)) else None),
        **details,
        "final_epoch_logs": {k: float(v[-1]) for k, v in history.history.items() if v},
        "config": config,
        **_task_metrics(model, config, test_ds, os.path.join(out_dir, "history.csv")),
        "backend": keras.backend.backend(),
        "versions": _versions(),
    }
    if is_chief:
        with atomic_path(os.path.join(out_dir, "model.keras")) as tmp:
            model.save(tmp)
    with atomic_path(os.path.join(out_dir, "metrics.json")) as tmp:
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=2, default=_json_default)
    print(f"keras-vit train: {'stopped early after' if stopped else 'done:'} {counter.epochs_completed} epochs, "
          f"test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}, {train_seconds:.0f} s, "
          f"{strategy_name(strategy)} x{strategy.num_replicas_in_sync} -> {out_dir}", flush=True)
    return metrics


def wrap_for_training(model, config, steps):
    """What `fit` trains: the model itself, a `Distiller` around it when the recipe names a teacher,
    or the masked-patch-prediction wrapper for objective "mpp". Built in the strategy's scope."""
    if config["objective"] not in ("classify", "mpp"):
        raise ValueError(f"Unknown objective {config['objective']!r}; use 'classify' or 'mpp'.")
    settings = config["distill"]
    if config["objective"] == "mpp":
        if settings["teacher"]:
            raise ValueError("objective 'mpp' pre-trains without labels; it takes no teacher (distill.teacher).")
        from keras_vit.masked import MaskedPatchPretrainer

        wrapper = MaskedPatchPretrainer(model, **config["mpp"], seed=config["seed"], name="mpp")
    elif settings["teacher"]:
        from keras_vit.distill import Distiller, load_teacher

        teacher = load_teacher(settings["teacher"], precision=settings["teacher_precision"])
        log.info("distilling (%s labels, alpha %s) from the teacher %s: %s parameters, %s", settings["kind"],
                 settings["alpha"], settings["teacher"], f"{teacher.count_params():,}",
                 teacher.dtype_policy.name if hasattr(teacher, "dtype_policy") else "as saved")
        wrapper = Distiller(model, teacher, kind=settings["kind"], alpha=settings["alpha"],
                            temperature=settings["temperature"], label_smoothing=config["label_smoothing"],
                            name="distiller")
    else:
        return model
    wrapper.compile(optimizer=build_optimizer(config, steps), jit_compile=_jit_compile(config["jit_compile"]))
    return wrapper


def _task_metrics(model, config, test_ds, history_csv):
    """metrics.json's extras: the summed cost of every epoch in history.csv (across resumes) and, for a
    distilled model, the test accuracy of each head alone and averaged."""
    extra = {}
    try:
        import csv

        with open(history_csv, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("epoch_seconds")]
        if rows:
            extra["all_epochs_seconds"] = round(sum(float(r["epoch_seconds"]) for r in rows), 1)
            extra["all_epochs_cpu_seconds"] = round(sum(float(r["epoch_cpu_seconds"]) for r in rows), 1)
    except (OSError, ValueError, KeyError):
        pass
    if config["distill"]["teacher"]:
        from keras_vit import distill

        extra["teacher"] = config["distill"]["teacher"]
        extra["test_heads"] = distill.head_accuracies(model, test_ds)
    return extra


def _tensorboard(out_dir, is_chief):
    """The TensorBoard callback when tensorboard is installed; otherwise one line on how to get the logs.

    TensorFlow no longer installs tensorboard, and the logs are a nicety: a run must not fail for them.
    """
    if importlib.util.find_spec("tensorboard") is None:
        if is_chief:
            log.info('TensorBoard logs: off (tensorboard is not installed; pip install "keras-vit[tensorboard]" '
                     "to write them to %s)", os.path.join(out_dir, "logs"))
        return []
    return [keras.callbacks.TensorBoard(os.path.join(out_dir, "logs"), write_graph=False)]


def _pad_batches(ds, multiple):
    """(images, labels) batches padded with zero rows to a multiple of `multiple`, as (images, labels,
    sample weights) with weight 0 on the padding: accuracy and each batch's mean loss count only
    the real examples. (Keras weights each batch's loss by its row count, pad rows included: over a
    split, the loss moves by at most (multiple - 1) / len(split) of one batch's difference from the mean.)"""
    def pad(images, labels):
        n = tf.shape(images)[0]
        extra = (multiple - n % multiple) % multiple

        def zeros(x):
            return tf.zeros(tf.concat([[extra], tf.shape(x)[1:]], 0), x.dtype)

        weights = tf.concat([tf.ones([n]), tf.zeros([extra])], 0)
        return tf.concat([images, zeros(images)], 0), tf.concat([labels, zeros(labels)], 0), weights

    return ds.map(pad)


def _jit_compile(value):
    """The recipe's jit_compile, for the backend: False (TensorFlow's graphs without XLA) is Keras' own
    default elsewhere, since jax has no compiled mode but XLA and torch runs eagerly."""
    if value is False and keras.backend.backend() != "tensorflow":
        return "auto"
    return value


def _versions():
    versions = {"tensorflow": tf.__version__, "keras": keras.__version__}
    backend = keras.backend.backend()
    if backend != "tensorflow":
        versions[backend] = importlib.import_module(backend).__version__
    return versions


def _json_default(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return str(value)
