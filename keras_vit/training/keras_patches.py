"""Every patch keras-vit applies to Keras internals, in one place, checked against the Keras it patches.

keras-team/keras#20585: Keras 3 `fit` under MultiWorkerMirroredStrategy (CollectiveAllReduceStrategy)
fails in two places, both fixed here and only for a model trained under that strategy:

- `Trainer._maybe_symbolic_build` reduces a PerReplica data batch across workers to build the model
  symbolically, which fails eagerly: the model gets one that builds from this worker's batch;
- `keras.src.backend.tensorflow.trainer.reduce_per_replica` averages every log over axis 0, which a
  scalar metric does not have: scalars are averaged with axis=None.

Both reach into `keras.src`, which is private and changes between releases. `TESTED_KERAS` names the
releases the fixes were run on; another release gets a warning naming it, and a Keras without the
names these patches replace gets an error naming its version (before `fit` fails further in).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import keras
import tensorflow as tf

# The first and last Keras minor releases the multi-worker fixes were run on (tests/test_training.py's
# two-process MultiWorkerMirroredStrategy run): 3.5 to 3.15.
TESTED_KERAS = ((3, 5), (3, 15))


def _minor(version: str) -> tuple[int, int]:
    from packaging.version import Version

    release = Version(version).release
    return release[0], (release[1] if len(release) > 1 else 0)


def check_keras_version(version: str | None = None) -> str | None:
    """None when `version` (default: the installed Keras) lies in `TESTED_KERAS`, else the warning to give.

    Example:
    >>> check_keras_version("3.15.1") is None
    True
    >>> print(check_keras_version("3.99.0"))  # doctest: +ELLIPSIS
    keras-vit patches Keras internals ... tested on Keras 3.5 to 3.15; this is Keras 3.99.0: ...
    """
    version = version or keras.__version__
    (low, high), found = TESTED_KERAS, _minor(version)
    if low <= found <= high:
        return None
    return (f"keras-vit patches Keras internals for MultiWorkerMirroredStrategy training (keras-team/keras#20585), "
            f"tested on Keras {low[0]}.{low[1]} to {high[0]}.{high[1]}; this is Keras {version}: if training fails "
            f'inside keras.src, use a tested Keras (pip install "keras>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}").')


def _missing(what: str) -> RuntimeError:
    return RuntimeError(f"Keras {keras.__version__} has no {what}, which keras-vit patches for "
                        "MultiWorkerMirroredStrategy training (keras-team/keras#20585; tested on Keras "
                        f"{TESTED_KERAS[0][0]}.{TESTED_KERAS[0][1]} to {TESTED_KERAS[1][0]}.{TESTED_KERAS[1][1]}): "
                        "install a tested Keras, or train under another strategy (--set strategy=mirrored on one machine).")


def _needs_multi_worker_fix(strategy: Any) -> bool:
    return type(strategy).__name__ == "CollectiveAllReduceStrategy" and _minor(keras.__version__) >= (3, 0)


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
    """Scalars get axis=None; everything else, and every other strategy, goes to Keras' own code."""
    try:
        from keras.src import tree
        from keras.src.backend.tensorflow import trainer as tf_trainer
    except ImportError:
        raise _missing("keras.src.backend.tensorflow.trainer") from None
    original = getattr(tf_trainer, "reduce_per_replica", None)
    if original is None:
        raise _missing("keras.src.backend.tensorflow.trainer.reduce_per_replica")
    if getattr(original, "_keras_vit_fix", False):
        return

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and type(strategy).__name__ == "CollectiveAllReduceStrategy":
            def reduce(v):
                local = (strategy.experimental_local_results(v)[0]
                         if isinstance(v, tf.distribute.DistributedValues) else v)
                if getattr(local, "shape", None) is not None and local.shape.rank == 0:
                    return strategy.reduce("MEAN", v, axis=None)
                return original(v, strategy, reduction)
            return tree.map_structure(reduce, values)
        return original(values, strategy, reduction)

    reduce_per_replica._keras_vit_fix = True
    tf_trainer.reduce_per_replica = reduce_per_replica


def apply_multi_worker_fix(model: keras.Model, strategy: Any) -> bool:
    """The two fixes for MWMS + Keras 3 fit, applied only under that strategy; returns whether it did.

    Warns (naming the version) under a Keras outside `TESTED_KERAS`; raises a RuntimeError naming it
    when that Keras lacks what the fixes replace.

    Example:
    >>> apply_multi_worker_fix(keras.Sequential([keras.layers.Dense(1)]), tf.distribute.get_strategy())
    False
    """
    if not _needs_multi_worker_fix(strategy):
        return False
    if not hasattr(model, "_maybe_symbolic_build"):
        raise _missing("Trainer._maybe_symbolic_build")
    message = check_keras_version()
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    model._maybe_symbolic_build = types.MethodType(_build_from_local_batch, model)
    _patch_scalar_reduce()
    return True
