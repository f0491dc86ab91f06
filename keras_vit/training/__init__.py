"""Training with `model.fit` under tf.distribute: recipes, strategies, optimizers, callbacks.

Under the jax and torch backends the same job runs with Keras' own distribution API in place of
tf.distribute (`get_distribution`: `keras.distribution.DataParallel` over jax's devices; one
device under torch); the data stays a tf.data pipeline, which Keras feeds to every backend.

A recipe is a Python file whose `get_config()` returns the whole experiment as a dict
(see `DEFAULTS` for every key). `train(config, model_dir)` builds the data, the model and
the optimizer inside the strategy's scope, fits with preemption-safe callbacks and writes
`model.keras`, `best.keras`, `metrics.json`, `history.csv` and TensorBoard logs.

The package, bottom up: `config` (recipes, `DEFAULTS`, `--set`), `distribution` (strategies, Keras
distributions, precision), `optimizers` (AdamW / SGD and the warm-up schedule), `keras_patches`
(every patch to Keras internals, checked against the Keras version), `build` (the model a run trains
and what the pipeline feeds it), `callbacks`, `loop` (the data splits, `compile_for_training`, `train`).
Every name is re-exported here: `keras_vit.training.X` as before.
"""

from keras_vit.training.build import TRAINING_MODEL_KEYS, build_model, eval_view, model_input
from keras_vit.training.callbacks import BestModelCheckpoint, EpochCounter
from keras_vit.training.config import (
    ALIASES,
    DEFAULTS,
    MODEL_KEYS,
    RECIPES_DIR,
    SECTIONS,
    apply_overrides,
    find_recipe,
    hub_checkpoint,
    load_recipe,
    resolve_config,
    shipped_recipes,
)
from keras_vit.training.distribution import (
    BF16_CPU_FLAGS,
    PRECISIONS,
    KerasDistribution,
    cluster_task,
    cpu_flags,
    get_distribution,
    get_strategy,
    resolve_precision,
    strategy_name,
)
from keras_vit.training.keras_patches import TESTED_KERAS, apply_multi_worker_fix, check_keras_version
from keras_vit.training.loop import compile_for_training, prepare_data, train, wrap_for_training
from keras_vit.training.optimizers import NO_DECAY, WarmupSchedule, build_optimizer

__all__ = [
    "ALIASES", "BF16_CPU_FLAGS", "DEFAULTS", "MODEL_KEYS", "NO_DECAY", "PRECISIONS", "RECIPES_DIR", "SECTIONS",
    "TESTED_KERAS", "TRAINING_MODEL_KEYS", "BestModelCheckpoint", "EpochCounter", "KerasDistribution", "WarmupSchedule",
    "apply_multi_worker_fix", "apply_overrides", "build_model", "build_optimizer", "check_keras_version",
    "cluster_task", "compile_for_training", "cpu_flags", "eval_view", "find_recipe", "get_distribution", "hub_checkpoint",
    "get_strategy", "load_recipe", "model_input", "prepare_data", "resolve_config", "resolve_precision", "shipped_recipes",
    "strategy_name", "train", "wrap_for_training",
]

_cpu_flags = cpu_flags  # the name benchmarks/ import
