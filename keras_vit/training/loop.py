"""One training run, start to finish: the data splits, the model (`build`) and its callbacks
(`callbacks`), `compile_for_training`, `model.fit` in the strategy's scope, and the files a run writes
(`model.keras`, `best.keras`, `metrics.json`, `history.csv`, TensorBoard logs)."""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import json
import logging
import os
import shutil
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_vit import report
from keras_vit._files import atomic_path
from keras_vit.augment import check_rand_augment
from keras_vit.training.build import build_model, model_input
from keras_vit.training.callbacks import BestModelCheckpoint, EpochCounter, tensorboard_callback
from keras_vit.training.config import hub_checkpoint
from keras_vit.training.distribution import (
    KerasDistribution,
    check_distribution,
    cluster_task,
    get_distribution,
    get_strategy,
    resolve_precision,
    strategy_name,
)
from keras_vit.training.keras_patches import apply_multi_worker_fix
from keras_vit.training.optimizers import build_optimizer

# "classify" (labels, a teacher's too when distill.teacher is set), "mpp" (masked patch prediction,
# no labels), "align" (inherit a teacher's blocks and regress its tokens, no labels)
OBJECTIVES = ("classify", "mpp", "align")
# per-pixel objectives, trained by keras_vit.dense.training.train
DENSE_OBJECTIVES = ("segmentation", "depth")

log = logging.getLogger(__name__)


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


def train(config: dict[str, Any], model_dir: str | os.PathLike, backup_dir: str | os.PathLike | None = None,
          verbose: str | int = "auto", overwrite: bool = False) -> dict[str, Any]:
    """Runs one experiment; returns the metrics written to `model_dir/metrics.json`.

    A model dir that holds a finished run (its metrics.json) is refused unless `overwrite`; one
    with a backup of an unfinished run resumes from its last finished epoch (a line says so).
    Ctrl-C raises a KeyboardInterrupt whose message says from which epoch a rerun resumes.

    Example:
    <!-- slow: trains for a minute on 2 CPU cores -->
    >>> from keras_vit.training import apply_overrides, load_recipe
    >>> config = apply_overrides(load_recipe("digits"), ["epochs=1", "max_train_examples=300"])
    >>> metrics = train(config, "runs/digits", verbose=0)
    keras-vit train: ...
    >>> 0.0 <= metrics["test_accuracy"] <= 1.0, os.path.exists("runs/digits/model.keras")
    (True, True)
    """
    config = copy.deepcopy(config)
    check_run_keys(config)
    if config["randaugment"]:
        check_rand_augment(config["randaugment"])  # before minutes of decoding, not after
    if config["class_weight"] not in (None, "balanced"):
        raise ValueError(f"class_weight must be None or 'balanced', got {config['class_weight']!r}.")
    _check_objective(config)  # before minutes of decoding, not after
    _check_expect(config["expect"])
    if config["class_weight"] and config["objective"] != "classify":
        raise ValueError(f"class_weight weighs the classes of the labels; objective {config['objective']!r} "
                         "uses no labels.")
    return run_job(config, model_dir, _train, backup_dir=backup_dir, verbose=verbose, overwrite=overwrite)


# The metrics a recipe's `expect` may name, each a minimum.
_EXPECTABLE = ("test_accuracy",)


def _check_expect(expect: Any) -> None:
    """Refuses an `expect` that is not None or {metric: minimum} over _EXPECTABLE's metrics.

    Example:
    >>> _check_expect({"test_accuracy": 0.94})
    >>> _check_expect({"test_acc": 0.94})
    Traceback (most recent call last):
    ValueError: expect names 'test_acc'; it takes {metric: minimum} over test_accuracy (or None).
    """
    if expect is None:
        return
    if not isinstance(expect, dict):
        raise ValueError(f"expect must be a dict {{metric: minimum}} or None, got {expect!r}.")
    for name, minimum in expect.items():
        if name not in _EXPECTABLE:
            raise ValueError(f"expect names {name!r}; it takes {{metric: minimum}} over {', '.join(_EXPECTABLE)} "
                             "(or None).")
        if isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
            raise ValueError(f"expect[{name!r}] must be a number, got {minimum!r}.")


def _expectation(expect: dict[str, float] | None, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Each expected metric beside what the run got: {name: {"minimum", "got", "met"}}; None without `expect`.

    Example:
    >>> _expectation({"test_accuracy": 0.94}, {"test_accuracy": 0.9694})
    {'test_accuracy': {'minimum': 0.94, 'got': 0.9694, 'met': True}}
    """
    if not expect:
        return None
    return {name: {"minimum": minimum, "got": metrics[name], "met": metrics[name] >= minimum}
            for name, minimum in expect.items()}


def _enforce_expectation(config, metrics, out_dir):
    """After the run is written: a line when the recipe's expectation holds, an error when it does not."""
    report = metrics.get("expectation")
    if not report:
        return
    said = ", ".join(f"{name.replace('_', ' ')} {r['got']:.4f} {'>=' if r['met'] else '<'} {r['minimum']}"
                     for name, r in report.items())
    if all(r["met"] for r in report.values()):
        print(f"keras-vit train: the recipe's expectation holds: {said}", flush=True)
        return
    recipe = f"recipe {os.path.basename(config['recipe'])}" if config.get("recipe") else "the recipe"
    raise RuntimeError(f"{said}: below what {recipe} reaches with its own settings (its expect). "
                       f"The run is kept in {out_dir} (model.keras, metrics.json); "
                       "compare metrics.json's versions with the recipe's, or pass --set expect=None to train "
                       "without the check.")


def check_run_keys(config: dict[str, Any]) -> None:
    """Refuses an epoch count or batch size that is not a positive integer (any job's first check)."""
    for key in ("epochs", "batch_size"):
        if not isinstance(config[key], int) or config[key] < 1:
            raise ValueError(f"{key} must be a positive integer, got {config[key]!r}.")


def run_job(config: dict[str, Any], model_dir: str | os.PathLike, job: Any, *,
            backup_dir: str | os.PathLike | None = None, verbose: str | int = "auto",
            overwrite: bool = False) -> dict[str, Any]:
    """What every training job shares: the model dir's check (a finished run is refused unless
    `overwrite`), the strategy (tf.distribute, or Keras' distribution under jax / torch), the precision
    policy and the seed, then `job(config, model_dir, backup_dir, strategy, index, is_chief, verbose,
    (policy, why))` in the distribution's scope; a model dir this run created is removed again when the
    job fails before writing anything. (`train` runs the classification job; `keras_vit.dense.training.train`
    the dense one.)"""
    policy, why = resolve_precision(config["precision"])  # an unknown name fails before anything starts
    _check_model_dir(model_dir, backup_dir, overwrite)
    created = not os.path.exists(model_dir)
    try:
        backend = keras.backend.backend()
        if backend == "tensorflow":
            check_distribution(config["distribution"], config["mesh"], backend)
            if config["distribution"] == "data_parallel":
                config = dict(config, strategy="mirrored")
            strategy = get_strategy(config["strategy"], config["cpu_replicas"])
            kind, index, is_chief = cluster_task()
        else:  # one process: Keras' distribution API, not TF_CONFIG's cluster
            strategy = get_distribution(config["strategy"], config["cpu_replicas"], config["distribution"],
                                        config["mesh"])
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
                return job(config, model_dir, backup_dir, strategy, index, is_chief, verbose, (policy, why))
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
    >>> compile_for_training(model, keras_vit.training.load_recipe("digits"), steps_per_epoch=10)
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
        jit_compile=jit_compile_setting(config["jit_compile"]),
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
    # The pipeline feeds the model its own inputs: its size, pixel statistics (a checkpoint's own) and view.
    # A timm / transformers checkpoint decides them: its model is built first; other models after the data,
    # as always (the order the seeded random streams are drawn in).
    model = None
    if hub_checkpoint(config["init_checkpoint"]):
        with strategy.scope():
            model = build_model(config, class_names)
    view = (dict(image_size=model.image_size, pixel_mean=model.pixel_mean, pixel_std=model.pixel_std,
                 crop_pct=model.crop_pct, interpolation=model.interpolation) if model is not None
            else model_input(config))
    size, inputs = view["image_size"], dict(pixel_mean=view["pixel_mean"], pixel_std=view["pixel_std"])
    aug = dict(crop=config["crop"], min_area=config["min_area"], pad=config["pad"], flip=config["flip"],
               randaugment=config["randaugment"], mixup=config["mixup"], cutmix=config["cutmix"])
    train_ds = data_lib.make_dataset(train_split, size, batch, training=True, seed=config["seed"],
                                     repeat=True, **aug, **inputs)
    eval_kw = dict(crop_fraction=view["crop_pct"], interpolation=view["interpolation"], **inputs)
    val_ds = (data_lib.make_dataset(val_split, size, batch, training=False, **eval_kw)
              if val_split is not None else None)
    test_ds = data_lib.make_dataset(test_split, size, batch, training=False, **eval_kw)
    padded = isinstance(strategy, KerasDistribution) and strategy.num_replicas_in_sync > 1
    if padded:  # DataParallel splits every batch evenly over the devices, the last one too
        val_ds, test_ds = (_pad_batches(ds, strategy.num_replicas_in_sync) if ds is not None else None
                           for ds in (val_ds, test_ds))

    with strategy.scope():
        if model is None:
            model = build_model(config, class_names)
        compile_for_training(model, config, steps, padded=padded)
        fit_model = wrap_for_training(model, config, steps)  # the model, or the wrapper that trains it
    apply_multi_worker_fix(fit_model, strategy)
    monitor = ("val_" if val_ds is not None else "") + ("explained" if config["objective"] == "align" else "accuracy")
    counter, callbacks = run_callbacks(model_dir, out_dir, backup_dir, index, is_chief, monitor,
                                       save_target=model if fit_model is not model else None)

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
    if is_chief and config["objective"] != "mpp":  # per class, confusions, the worst images: files
        details = report.end_of_run_report(
            model, test_split, data_lib.make_dataset(test_split, size, batch, training=False,
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
        "input": {"image_size": list(size), "pixel_mean": list(inputs["pixel_mean"]),
                  "pixel_std": list(inputs["pixel_std"])},
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
        "versions": versions(),
    }
    metrics["expectation"] = _expectation(config["expect"], metrics)
    if is_chief:
        with atomic_path(os.path.join(out_dir, "model.keras")) as tmp:
            model.save(tmp)
    with atomic_path(os.path.join(out_dir, "metrics.json")) as tmp:
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=2, default=json_default)
    print(f"keras-vit train: {'stopped early after' if stopped else 'done:'} {counter.epochs_completed} epochs, "
          f"test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}, {train_seconds:.0f} s, "
          f"{strategy_name(strategy)} x{strategy.num_replicas_in_sync} -> {out_dir}", flush=True)
    if is_chief:
        _enforce_expectation(config, metrics, out_dir)
    return metrics


def run_callbacks(model_dir: str, out_dir: str, backup_dir: str | os.PathLike | None, index: int, is_chief: bool,
                  monitor: str, save_target: keras.Model | None = None) -> tuple[EpochCounter, list[Any]]:
    """(the epoch counter, every callback of a run): the counter, TerminateOnNaN, BackupAndRestore (a
    folder per worker: workers sharing one crash on the HDF5 file lock), the best model by `monitor`
    (best.keras), history.csv and TensorBoard logs."""
    backup_dir = backup_dir or os.path.join(model_dir, "backup")
    worker_backup = os.path.join(backup_dir, f"worker_{index}")
    counter = EpochCounter(worker_backup)
    callbacks = [counter, keras.callbacks.TerminateOnNaN(),
                 keras.callbacks.BackupAndRestore(worker_backup, double_checkpoint=True),
                 BestModelCheckpoint(os.path.join(out_dir, "best.keras"), monitor, enabled=is_chief,
                                     save_target=save_target),
                 keras.callbacks.CSVLogger(os.path.join(out_dir, "history.csv"), append=True)]
    callbacks.extend(tensorboard_callback(out_dir, is_chief))
    return counter, callbacks


def _check_objective(config):
    """Refuses an unknown objective, and a teacher where the objective needs one or takes none."""
    objective, teacher = config["objective"], config["distill"]["teacher"]
    if objective in DENSE_OBJECTIVES:
        raise ValueError(f"objective {objective!r} is a dense job: keras_vit.dense.training.train(config, model_dir) runs it "
                         "(as `keras-vit train` does).")
    if objective not in OBJECTIVES:
        raise ValueError(f"Unknown objective {objective!r}; use one of {OBJECTIVES}.")
    if objective == "align" and not teacher:
        raise ValueError("objective 'align' regresses a teacher's tokens; name the teacher (--set teacher=PATH).")
    if objective == "mpp" and teacher:
        raise ValueError("objective 'mpp' pre-trains without labels; it takes no teacher (distill.teacher).")


def wrap_for_training(model, config, steps):
    """What `fit` trains: the model itself, a `Distiller` around it when the recipe names a teacher,
    the masked-patch-prediction wrapper for objective "mpp", or for "align" the `TokenAligner` around the
    model after it inherits the teacher's blocks. Built in the strategy's scope."""
    _check_objective(config)
    settings = config["distill"]
    if config["objective"] == "align":
        from keras_vit.distill import TokenAligner, inherit_teacher, load_teacher

        teacher = load_teacher(settings["teacher"], precision=settings["teacher_precision"])
        inherited = inherit_teacher(model, teacher)  # a resumed run's backup then overwrites them all
        log.info("inherited %d weights from the teacher %s (its %d blocks as the student's last); aligning the "
                 "student's patch projection and first %d blocks to its tokens", len(inherited), settings["teacher"],
                 len(teacher.blocks), len(model.blocks) - len(teacher.blocks))
        wrapper = TokenAligner(model, teacher, name="align")
    elif config["objective"] == "mpp":
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
    wrapper.compile(optimizer=build_optimizer(config, steps), jit_compile=jit_compile_setting(config["jit_compile"]))
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


def jit_compile_setting(value):
    """The recipe's jit_compile, for the backend: False (TensorFlow's graphs without XLA) is Keras' own
    default elsewhere, since jax has no compiled mode but XLA and torch runs eagerly."""
    if value is False and keras.backend.backend() != "tensorflow":
        return "auto"
    return value


def versions():
    versions = {"tensorflow": tf.__version__, "keras": keras.__version__}
    backend = keras.backend.backend()
    if backend != "tensorflow":
        versions[backend] = importlib.import_module(backend).__version__
    return versions


def json_default(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return str(value)
