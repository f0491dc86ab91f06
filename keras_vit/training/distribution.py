"""Where a run trains: tf.distribute strategies (tensorflow backend), Keras distributions (jax,
torch), this process's place in a TF_CONFIG cluster, and the precision the hardware computes fastest.
"""

from __future__ import annotations

import contextlib
import json
import os

import keras
import tensorflow as tf


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
        # The batch splits over the mesh's batch axis only (a model-parallel mesh's "data" axis).
        if distribution is None:
            self.num_replicas_in_sync = 1
        else:
            mesh = distribution.device_mesh
            self.num_replicas_in_sync = int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])

    def scope(self):
        return contextlib.nullcontext() if self.distribution is None else self.distribution.scope()

    @property
    def name(self):
        if self.distribution is None:
            return "SingleDevice"
        if isinstance(self.distribution, keras.distribution.ModelParallel):
            return "ModelParallel {}x{}".format(*self.distribution.device_mesh.shape)
        return type(self.distribution).__name__


def get_distribution(name="auto", cpu_replicas=0, distribution=None, mesh=None):
    """The `KerasDistribution` to train with under the jax or torch backend.

    `distribution="model_parallel"` (jax): `keras_vit.parallel`'s layouts over a (data, model) `mesh`
    ("2x4"), each variable sharded as it is created; "data_parallel" is DataParallel ("mirrored").

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
    check_distribution(distribution, mesh, backend)
    if distribution == "data_parallel":
        name = "mirrored"
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
    if distribution == "model_parallel":
        from keras_vit.parallel import RuleModelParallel

        if os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES") and not _MULTI_HOST:
            keras.distribution.initialize()  # several hosts: the env names the peers (once per process)
            _MULTI_HOST.append(True)

        return KerasDistribution(RuleModelParallel(mesh))
    if name == "mirrored" or (name == "auto" and len(devices) > 1):
        return KerasDistribution(keras.distribution.DataParallel(devices=devices))
    return KerasDistribution()


DISTRIBUTIONS = (None, "data_parallel", "model_parallel")
# Whether this process has joined its hosts (keras.distribution.initialize runs once per process).
_MULTI_HOST: list[bool] = []


def check_distribution(distribution, mesh, backend):
    """Refuse a recipe's `distribution` / `mesh` pair this backend cannot run, naming the value."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"Unknown distribution {distribution!r}; use one of {DISTRIBUTIONS} (None: the strategy's).")
    if distribution == "model_parallel":
        if backend != "jax":
            raise ValueError(f"distribution='model_parallel' is keras.distribution's, which runs under KERAS_BACKEND=jax "
                             f"(this is {backend}): run `KERAS_BACKEND=jax keras-vit train ...`.")
        if mesh is None:
            raise ValueError("distribution='model_parallel' needs a mesh, DATAxMODEL devices: --set mesh=2x4.")
    elif mesh is not None:
        raise ValueError(f"mesh={mesh!r} is for distribution='model_parallel' (--set distribution=model_parallel); "
                         f"distribution is {distribution!r}.")


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


def cluster_task():
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


def cpu_flags(cpuinfo):
    """The CPU's feature flags read from `cpuinfo` (/proc/cpuinfo's "flags" or "Features" line), or None."""
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
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return "float32", f"no accelerator, and the CPU's features are unknown ({cpuinfo} unreadable)"
    native = [f for f in BF16_CPU_FLAGS if f in flags]
    if native:
        return "mixed_bfloat16", f"the CPU has native bfloat16 ({', '.join(native)})"
    return "float32", "the CPU has no native bfloat16 (no avx512_bf16 or amx_bf16 flag): bfloat16 would be emulated"

