"""Dense training with `model.fit`: a recipe with objective "segmentation" or "depth".

The job shares everything but its data, model and scores with classification (`keras_vit.training`:
the strategy, precision, optimizer, schedule, backups that resume a killed run, best.keras,
history.csv): `train(config, model_dir)` runs it, as `keras-vit train RECIPE` does. The model is a
`DensePredictor`: the recipe's backbone (its model keys, or `init_checkpoint`'s: an official .npz, a
.keras classifier, a timm / transformers folder, a dense checkpoint itself) with the recipe's head
(`dense.head`, `dense.taps`, `dense.head_options`); `dense.mode="linear_probe"` freezes the backbone.

metrics.json holds the test split's scores computed from the predictions over every test pixel at
the model's input size (segmentation: mIoU, pixel accuracy, IoU per class; depth: AbsRel, delta <
1.25, RMSE), and test_predictions.png shows a few test images, their targets and the predictions.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from typing import Any

import keras
import numpy as np

import keras_vit.dense.data as dense_data
import keras_vit.dense.losses as dense_losses
from keras_vit._files import atomic_path
from keras_vit.data import unknown_length_quiet
from keras_vit.dense.config import DenseHead
from keras_vit.dense.model import DensePredictor
from keras_vit.dense.visualize import prediction_grid, write_png
from keras_vit.training.build import build_model, model_input
from keras_vit.training.config import hub_checkpoint
from keras_vit.training.distribution import KerasDistribution, strategy_name
from keras_vit.training.loop import (
    DENSE_OBJECTIVES,
    check_run_keys,
    jit_compile_setting,
    json_default,
    run_callbacks,
    run_job,
    versions,
)
from keras_vit.training.optimizers import build_optimizer

log = logging.getLogger(__name__)

MODES = ("finetune", "linear_probe")
FASHION_SCENES = "fashion_scenes"


def check_dense_config(config: dict[str, Any]) -> None:
    """Refuses a dense recipe's bad values before any data is read."""
    dense = config["dense"]
    if config["objective"] not in DENSE_OBJECTIVES:
        raise ValueError(f"objective {config['objective']!r} is not a dense one; use one of {DENSE_OBJECTIVES}.")
    if dense["mode"] not in MODES:
        raise ValueError(f"dense.mode {dense['mode']!r}: use one of {MODES}.")
    if dense["head"] not in ("linear", "dpt", "depth_anything"):
        raise ValueError(f"dense.head {dense['head']!r}: use 'linear', 'dpt' or 'depth_anything'.")
    if dense["head_options"] is not None and not isinstance(dense["head_options"], dict):
        raise ValueError(f"dense.head_options must be a dict of DenseHead fields, got {dense['head_options']!r}.")
    if config["data"] == FASHION_SCENES and config["objective"] != "segmentation":
        raise ValueError("data 'fashion_scenes' is a segmentation task; use objective 'segmentation'.")
    if config["objective"] == "depth" and not dense["max_depth"] and not config["init_checkpoint"]:
        raise ValueError("dense.max_depth: a depth model trained here predicts metric depth, sigmoid times max_depth; "
                         "set the largest depth it should reach in the data's unit (--set dense.max_depth=10 for "
                         "indoor scenes in metres, 80 for driving).")
    source = config["init_checkpoint"]
    if (isinstance(source, str) and source.endswith((".keras", ".h5", ".npz")) and not os.path.isfile(source)
            and not hub_checkpoint(source)):
        raise FileNotFoundError(f"init_checkpoint {source} does not exist: the recipe starts its backbone from it "
                                "(recipes/seg_fashion.py: `keras-vit train fashion_items` writes it); or train from "
                                "scratch with --set init=None.")
    if config["distill"]["teacher"]:
        raise ValueError("distill.teacher: dense training takes no teacher.")
    for key in ("mixup", "cutmix"):
        if config[key]:
            raise ValueError(f"{key} mixes labels of whole images; dense training does not take it (set it to 0).")


def dense_splits(config: dict[str, Any]) -> tuple[dense_data.DenseSplit, dense_data.DenseSplit | None,
                                                   dense_data.DenseSplit]:
    """(train, validation or None, test) for a dense recipe: the composed Fashion-MNIST scenes, or a
    folder of pairs (its val/ split, else `validation_split` of train held out, seeded)."""
    dense, task = config["dense"], config["objective"]
    if config["data"] == FASHION_SCENES:
        from keras_vit.dense.scenes import SCENE_CLASSES, fashion_scene_splits

        scenes = fashion_scene_splits(dense["scenes_train"], dense["scenes_test"], seed=config["seed"],
                                      folder=dense["fashion_dir"])
        splits = {name: dense_data.from_arrays(*pair, class_names=SCENE_CLASSES, origin=f"fashion_scenes:{name}")
                  for name, pair in scenes.items()}
    else:
        splits = dense_data.load_dense_folder(config["data"], task, strict=config["strict"],
                                              depth_scale=dense["depth_scale"], test_fraction=config["test_fraction"],
                                              seed=config["seed"])
    train, test, validation = splits["train"], splits["test"], splits.get("val")
    rng = np.random.default_rng(config["seed"])
    if config["max_train_examples"] and config["max_train_examples"] < len(train):
        train = train.subset(sorted(rng.permutation(len(train))[:config["max_train_examples"]]))
    if validation is None and config["validation_split"] and len(train) > 1:
        order = rng.permutation(len(train))
        held = max(int(round(len(train) * config["validation_split"])), 1)
        validation, train = train.subset(sorted(order[:held])), train.subset(sorted(order[held:]))
    train.skipped = splits["train"].skipped
    return train, validation, test


def head_for(config: dict[str, Any], num_layers: int, class_names: list[str] | None) -> DenseHead:
    """The recipe's DenseHead: `dense.head` with its taps (None: the last block for "linear", four
    evenly spaced blocks for DPT heads), the task's classes or depth type, and `dense.head_options`."""
    dense, task = config["dense"], config["objective"]
    kind = dense["head"]
    taps = dense["taps"]
    if taps is None:
        taps = ((num_layers,) if kind == "linear"
                else tuple(max(1, round(num_layers * (i + 1) / 4)) for i in range(4)))
    fields: dict[str, Any] = dict(kind=kind, task=task, taps=tuple(taps) if not isinstance(taps, int) else (taps,),
                                  final_norm=kind != "dpt")
    if task == "segmentation":
        fields.update(classes=len(class_names or ()), class_names=tuple(class_names or ()))
    elif dense["max_depth"]:
        fields.update(depth_type="metric", max_depth=float(dense["max_depth"]))
    fields.update(dense["head_options"] or {})
    return DenseHead(**fields)


def build_dense_model(config: dict[str, Any], class_names: list[str] | None) -> DensePredictor:
    """The DensePredictor a dense recipe trains, built in the strategy's scope.

    A dense checkpoint as `init_checkpoint` (a transformers DPT / Depth Anything folder, a .keras
    DensePredictor) is trained as it is when its task and classes are these; any other checkpoint is a
    backbone for the recipe's head."""
    from keras_vit.pretrained import from_pretrained

    source = config["init_checkpoint"]
    task = config["objective"]
    model: keras.Model | None = None
    if hub_checkpoint(source):
        overrides = {"image_size": config["image_size"]} if config["image_size"] is not None else {}
        model = from_pretrained(os.fspath(source), **overrides)
    elif isinstance(source, str) and source.endswith(".keras"):
        loaded = keras.saving.load_model(source, compile=False)
        model = loaded if isinstance(loaded, DensePredictor) else None
    if isinstance(model, DensePredictor):
        if model.task != task or (task == "segmentation" and model.class_names != list(class_names or ())):
            raise ValueError(f"{source} is a {model.task} model"
                             f"{' of classes ' + str(model.class_names) if model.task == 'segmentation' else ''}; "
                             f"this run trains {task}{' of ' + str(class_names) if class_names else ''}. Use its "
                             "backbone alone by converting it, or train on data of its own classes.")
        return model
    backbone = model if model is not None else build_model(config, ["unused"])
    return DensePredictor.from_backbone(backbone, head_for(config, backbone.config.num_layers, class_names))


def compile_dense(model: DensePredictor, config: dict[str, Any], steps_per_epoch: int) -> None:
    """The recipe's optimizer and schedule, the task's loss and metrics (mIoU and pixel accuracy, or
    AbsRel and delta < 1.25); the backbone frozen first for `dense.mode="linear_probe"`."""
    dense = config["dense"]
    model.freeze_backbone(dense["mode"] == "linear_probe")
    if model.task == "segmentation":
        classes = int(model.head_config.classes or 0)
        loss: keras.losses.Loss = dense_losses.SegmentationCrossEntropy(dense["ignore_index"])
        metrics = [dense_losses.mean_iou(classes, dense["ignore_index"]),
                   dense_losses.PixelAccuracy(dense["ignore_index"])]
    else:
        loss = dense_losses.SiLogLoss(dense["silog_lambda"])
        metrics = [dense_losses.AbsRel(), dense_losses.DeltaAccuracy()]
    model.compile(optimizer=build_optimizer(config, steps_per_epoch), loss=loss, metrics=metrics,
                  jit_compile=jit_compile_setting(config["jit_compile"]))


def evaluate_dense(model: DensePredictor, dataset: Any, class_names: list[str] | None = None,
                   ignore_index: int = dense_data.IGNORE_INDEX) -> dict[str, Any]:
    """Scores over every pixel of a dataset of (images, targets): segmentation {"miou", "pixel_accuracy",
    "per_class"}, depth {"abs_rel", "delta1", "rmse", "pixels"}.

    Example:
    >>> head = keras_vit.DenseHead(kind="linear", task="segmentation", taps=(1,), final_norm=True, classes=3)
    >>> model = keras_vit.DensePredictor(keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=16,
    ...                                  num_layers=1, num_heads=2, mlp_dim=32), head)
    >>> test = dense_data.load_dense_folder("tests/data/dense_folder", test_fraction=0.25)["test"]
    >>> scores = evaluate_dense(model, dense_data.make_dense_dataset(test, model.image_size, 4, training=False))
    >>> sorted(scores), 0.0 <= scores["miou"] <= 1.0
    (['miou', 'per_class', 'pixel_accuracy'], True)
    """
    if model.task == "segmentation":
        classes = int(model.head_config.classes or 0)
        confusion = np.zeros((classes, classes), np.int64)
        for images, targets in dataset:
            predicted = np.argmax(keras.ops.convert_to_numpy(model(images, training=False)), axis=-1)
            confusion += dense_losses.confusion_matrix(np.asarray(targets), predicted, classes, ignore_index)
        return dense_losses.segmentation_scores(confusion, class_names or model.class_names)
    abs_rel = delta = sq = count = 0.0
    for images, targets in dataset:
        predicted = keras.ops.convert_to_numpy(model(images, training=False)).astype(np.float64)
        target = np.asarray(targets, np.float64)
        valid = target > 0
        p, t = np.maximum(predicted[valid], 1e-6), target[valid]
        abs_rel += float(np.sum(np.abs(p - t) / t))
        delta += float(np.sum(np.maximum(p / t, t / p) < 1.25))
        sq += float(np.sum((p - t) ** 2))
        count += valid.sum()
    n = max(count, 1.0)
    return {"abs_rel": abs_rel / n, "delta1": delta / n, "rmse": float(np.sqrt(sq / n)), "pixels": int(count)}


def train(config: dict[str, Any], model_dir: str | os.PathLike, backup_dir: str | os.PathLike | None = None,
          verbose: str | int = "auto", overwrite: bool = False) -> dict[str, Any]:
    """Runs a dense recipe; returns the metrics written to `model_dir/metrics.json` (a killed run
    resumes from its last finished epoch, as classification's `keras_vit.training.train`).

    Example:
    <!-- slow: trains for half a minute on 2 CPU cores -->
    >>> from keras_vit.training import apply_overrides, load_recipe
    >>> config = apply_overrides(load_recipe("seg_fashion"), [
    ...     "data=tests/data/dense_folder", "image_size=32", "model.patch_size=8", "model.num_layers=2",
    ...     "dense.taps=(1, 2)", "epochs=1", "steps_per_epoch=2", "batch_size=4", "init=None"])
    >>> metrics = train(config, "runs/masks", verbose=0)
    keras-vit train: ...
    >>> 0.0 <= metrics["test_miou"] <= 1.0, sorted(metrics["test_per_class"])
    (True, ['background', 'disc', 'square'])
    """
    config = copy.deepcopy(config)
    check_run_keys(config)
    check_dense_config(config)
    return run_job(config, model_dir, _train_dense, backup_dir=backup_dir, verbose=verbose, overwrite=overwrite)


def _view(config, model):
    if model is not None:
        return model.image_size, model.pixel_mean, model.pixel_std
    view = model_input(config)
    return view["image_size"], view["pixel_mean"], view["pixel_std"]


def _pad_dense_batches(ds, multiple, fill):
    """(images, targets) batches padded to a multiple of `multiple` rows: zero images whose targets are all
    `fill`, pixels the losses and metrics leave out (the ignore index; depth 0, no depth). The test split is
    scored image by image (`evaluate_dense`), never padded. (A batch's mean loss counts a padded image as 0:
    the validation loss moves by at most (multiple - 1) / len(split) of a batch's mean.)"""
    import tensorflow as tf

    def pad(images, targets):
        extra = (multiple - tf.shape(images)[0] % multiple) % multiple

        def filled(x, value):
            return tf.fill(tf.concat([[extra], tf.shape(x)[1:]], 0), tf.cast(value, x.dtype))

        return tf.concat([images, filled(images, 0)], 0), tf.concat([targets, filled(targets, fill)], 0)

    return ds.map(pad)


# One run, in the order the seeded streams are drawn: data, model, pipelines, fit, scores, files.
def _train_dense(config, model_dir, backup_dir, strategy, index, is_chief, verbose, precision):
    model_dir = os.path.abspath(model_dir)
    out_dir = model_dir if is_chief else os.path.join(model_dir, ".workers", f"worker_{index}")
    os.makedirs(out_dir, exist_ok=True)
    dense = config["dense"]
    train_split, val_split, test_split = dense_splits(config)
    class_names = train_split.class_names
    log.info("data: %d train, %d validation, %d test pairs of %s%s", len(train_split),
             len(val_split) if val_split is not None else 0, len(test_split), config["data"],
             f", {len(class_names)} classes" if class_names else "")
    batch = config["batch_size"]
    if batch % strategy.num_replicas_in_sync:
        raise ValueError(f"batch_size {batch} is not divisible by the {strategy.num_replicas_in_sync} replicas.")
    steps = config["steps_per_epoch"] or max(len(train_split) // batch, 1)
    with strategy.scope():
        model = build_dense_model(config, class_names)
        compile_dense(model, config, steps)
    size, mean, std = _view(config, model)
    stats = dict(pixel_mean=mean or dense_data.OFFICIAL_STATS, pixel_std=std or dense_data.OFFICIAL_STATS)
    train_ds = dense_data.make_dense_dataset(train_split, size, batch, training=True, flip=config["flip"],
                                             min_scale=dense["min_scale"], max_scale=dense["max_scale"],
                                             seed=config["seed"], repeat=True, **stats)
    val_ds = (dense_data.make_dense_dataset(val_split, size, batch, training=False, **stats)
              if val_split is not None else None)
    test_ds = dense_data.make_dense_dataset(test_split, size, batch, training=False, **stats)
    if isinstance(strategy, KerasDistribution) and strategy.num_replicas_in_sync > 1 and val_ds is not None:
        # DataParallel splits every batch evenly over the devices, fit's last validation batch too
        fill = dense["ignore_index"] if model.task == "segmentation" else 0
        val_ds = _pad_dense_batches(val_ds, strategy.num_replicas_in_sync, fill)
    monitor = ("val_" if val_ds is not None else "") + ("miou" if model.task == "segmentation" else "delta1")
    counter, callbacks = run_callbacks(model_dir, out_dir, backup_dir, index, is_chief, monitor)
    start, cpu_start = time.time(), time.process_time()
    try:
        with unknown_length_quiet():  # streamed files: tf.data cannot count them ahead
            history = model.fit(train_ds, epochs=config["epochs"], steps_per_epoch=steps, validation_data=val_ds,
                                callbacks=callbacks, verbose=verbose, shuffle=False)
    except KeyboardInterrupt:
        print(flush=True)
        raise KeyboardInterrupt(f"interrupted; run the same command again to resume from epoch "
                                f"{counter.epochs_completed + 1}") from None
    train_seconds, cpu_seconds = time.time() - start, time.process_time() - cpu_start
    scores = evaluate_dense(model, test_ds, class_names, dense["ignore_index"])
    stopped = counter.epochs_completed < config["epochs"]
    key = "miou" if model.task == "segmentation" else "delta1"
    metrics = {
        "objective": config["objective"],
        "epochs_completed": counter.epochs_completed,
        "resumed_at_epoch": counter.first_epoch or 0,
        "stopped_early": stopped,
        **{f"test_{k}": v for k, v in scores.items()},
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
        "backbone_parameters": model.backbone.count_params(),
        "mode": dense["mode"],
        "head": model.head_config.to_dict(),
        "input": {"image_size": list(size), "pixel_mean": list(stats["pixel_mean"]),
                  "pixel_std": list(stats["pixel_std"])},
        "class_names": class_names,
        "skipped_files": len(train_split.skipped),
        "skipped": [{"file": name, "reason": reason} for name, reason in train_split.skipped[:100]],
        "final_epoch_logs": {k: float(v[-1]) for k, v in history.history.items() if v},
        "config": config,
        "backend": keras.backend.backend(),
        "versions": versions(),
    }
    if is_chief:
        few = test_split.subset(range(min(8, len(test_split))))
        pixels, targets = next(iter(dense_data.make_dense_dataset(few, size, 8, training=False, scaled=False)))
        inputs, _ = next(iter(dense_data.make_dense_dataset(few, size, 8, training=False, **stats)))
        predicted = keras.ops.convert_to_numpy(model(inputs, training=False))
        write_png(os.path.join(out_dir, "test_predictions.png"),
                  prediction_grid(np.asarray(pixels).astype(np.uint8), np.asarray(targets), predicted, model.task,
                                  near_bright=model.head_config.depth_type == "relative"))
        with atomic_path(os.path.join(out_dir, "model.keras")) as tmp:
            model.save(tmp)
    with atomic_path(os.path.join(out_dir, "metrics.json")) as tmp:
        with open(tmp, "w") as f:
            json.dump(metrics, f, indent=2, default=json_default)
    print(f"keras-vit train: {'stopped early after' if stopped else 'done:'} {counter.epochs_completed} epochs, "
          f"test {key} {scores[key]:.4f}, {train_seconds:.0f} s, {strategy_name(strategy)} "
          f"x{strategy.num_replicas_in_sync} -> {out_dir}", flush=True)
    return metrics
