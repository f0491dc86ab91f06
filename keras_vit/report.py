"""What a run says about its data and its model, beyond one accuracy figure.

At the start of `keras-vit train`: the images per class of every split, and a warning when the
classes are heavily imbalanced (with the remedy, `--set class_weight=balanced`, whose weights
`balanced_class_weights` computes). At the end: accuracy per class, the confusion matrix (numbers
in metrics.json and confusion_matrix.csv, a figure in confusion_matrix.png when matplotlib is
installed) and the test images the model got most wrong (worst_test_images.csv, the first few in
the log). `predict_files` is `keras-vit predict MODEL FOLDER --out predictions.csv`.
"""

from __future__ import annotations

import csv
import logging
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._files import atomic_path

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from keras_vit.data import Split
    from keras_vit.serving import Classifier

log = logging.getLogger(__name__)

IMBALANCE_RATIO = 3.0  # largest class / smallest class from which the start of a run warns
WORST_LISTED = 10  # worst-classified test images in the log (the CSV lists up to WORST_WRITTEN)
WORST_WRITTEN = 100


def class_counts(split: Split) -> dict[str, int]:
    """{class name: images} of a Split."""
    counts = np.bincount(np.asarray(split.labels, np.int64), minlength=len(split.class_names))
    return {name: int(n) for name, n in zip(split.class_names, counts)}


def describe_classes(splits: dict[str, Split | None]) -> dict[str, dict[str, int]]:
    """Log lines: images per class of each split ({name: Split}), and the imbalance warning; returns
    {split name: {class: count}} for metrics.json."""
    counts = {name: class_counts(split) for name, split in splits.items() if split is not None}
    classes = next(split for split in splits.values() if split is not None).class_names
    width = max(len(c) for c in classes)
    header = f"{'class':<{width}}  " + "  ".join(f"{name:>10}" for name in counts)
    log.info("images per class:\n  %s\n%s", header, "\n".join(
        f"  {c:<{width}}  " + "  ".join(f"{counts[name][c]:>10}" for name in counts) for c in classes))
    warning = imbalance_warning(counts.get("train") or next(iter(counts.values())))
    if warning:
        log.warning("%s", warning)
    return counts


def imbalance_warning(counts: dict[str, int]) -> str | None:
    """The warning for training counts whose largest class holds IMBALANCE_RATIO times the smallest, else None."""
    largest = max(counts, key=lambda c: counts[c])
    smallest = min(counts, key=lambda c: counts[c])
    if counts[smallest] and counts[largest] / counts[smallest] < IMBALANCE_RATIO:
        return None
    ratio = counts[largest] / max(counts[smallest], 1)
    return (f"the classes are imbalanced: {largest!r} has {counts[largest]} training images, {smallest!r} "
            f"{counts[smallest]} ({ratio:.1f}x); --set class_weight=balanced weights each class's loss by "
            "the inverse of its share, so the small classes count as much as the large ones")


def balanced_class_weights(labels: np.ndarray | Sequence[int], num_classes: int) -> dict[int, float]:
    """{class index: n / (classes x count)}, scikit-learn's "balanced" weights: each class weighs as much
    in the loss as every other, and the weights of all n images still sum to n. A class with no
    training images gets weight 0 (and is not counted among the classes)."""
    counts = np.bincount(np.asarray(labels, np.int64), minlength=num_classes)
    total, present = counts.sum(), int(np.count_nonzero(counts))
    return {i: (float(total / (present * c)) if c else 0.0) for i, c in enumerate(counts)}


def _predict(model, dataset):
    """(probabilities (N, C), labels, indices) over an evaluation dataset made `with_index`. The model is
    called here, in this process alone (a distributed predict would wait for the other workers)."""
    import keras

    probabilities, labels, indices = [], [], []
    for images, onehot, index in dataset:
        logits = np.asarray(keras.ops.convert_to_numpy(model(np.asarray(images), training=False)), np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        probabilities.append(p / p.sum(axis=1, keepdims=True))
        labels.append(np.argmax(np.asarray(onehot), axis=1))
        indices.append(np.asarray(index))
    return np.concatenate(probabilities), np.concatenate(labels), np.concatenate(indices)


def confusion_matrix(labels: np.ndarray | Sequence[int], predictions: np.ndarray | Sequence[int],
                     num_classes: int) -> np.ndarray:
    """(num_classes, num_classes) counts: rows the true class, columns the predicted one."""
    matrix = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(matrix, (np.asarray(labels), np.asarray(predictions)), 1)
    return matrix


def end_of_run_report(model: keras.Model, split: Split, dataset: tf.data.Dataset,
                      out_dir: str | os.PathLike) -> dict[str, Any]:
    """Per-class accuracy, the confusion matrix and the worst-classified images of `split` (the test
    split) from `dataset` (its `make_dataset(..., with_index=True)` pipeline). Writes
    confusion_matrix.csv, confusion_matrix.png (with matplotlib) and worst_test_images.csv into
    `out_dir`, logs a summary, and returns what metrics.json keeps."""
    probabilities, labels, indices = _predict(model, dataset)
    classes = list(split.class_names)
    predicted = probabilities.argmax(axis=1)
    matrix = confusion_matrix(labels, predicted, len(classes))
    per_class: dict[str, Any] = {c: (float(matrix[i, i] / matrix[i].sum()) if matrix[i].sum() else None)
                 for i, c in enumerate(classes)}
    names = split.names or [f"#{i}" for i in range(len(split))]
    true_p = probabilities[np.arange(len(labels)), labels]
    wrong = np.flatnonzero(predicted != labels)
    worst = wrong[np.argsort(true_p[wrong], kind="stable")][:WORST_WRITTEN]
    rows = [{"image": names[int(indices[i])], "label": classes[labels[i]], "predicted": classes[predicted[i]],
             "probability_of_label": round(float(true_p[i]), 6),
             "probability_of_predicted": round(float(probabilities[i, predicted[i]]), 6)} for i in worst]
    _write_csv(os.path.join(out_dir, "confusion_matrix.csv"), ["label \\ predicted", *classes],
               [[c, *matrix[i].tolist()] for i, c in enumerate(classes)])
    _write_csv(os.path.join(out_dir, "worst_test_images.csv"), list(rows[0]) if rows else
               ["image", "label", "predicted", "probability_of_label", "probability_of_predicted"],
               [list(r.values()) for r in rows])
    figure = _confusion_figure(matrix, classes, os.path.join(out_dir, "confusion_matrix.png"))
    missing = len(split) - len(labels)
    order = sorted(per_class, key=lambda c: (per_class[c] is None, per_class[c]))
    log.info("accuracy per class (worst first): %s", ", ".join(
        f"{c} {100 * per_class[c]:.1f}%" if per_class[c] is not None else f"{c} (no test images)" for c in order))
    if rows:
        log.info("the %d test images the model got most wrong (all %d misclassified: %s):\n%s",
                 min(WORST_LISTED, len(rows)), len(wrong), os.path.join(out_dir, "worst_test_images.csv"),
                 "\n".join(f"  {r['image']}: {r['label']}, predicted {r['predicted']} "
                           f"({100 * r['probability_of_predicted']:.1f}%; {r['label']} "
                           f"{100 * r['probability_of_label']:.1f}%)" for r in rows[:WORST_LISTED]))
    return {
        "per_class_accuracy": per_class,
        "confusion_matrix": matrix.tolist(),
        "confusion_matrix_figure": figure,
        "worst_test_images": rows[:WORST_LISTED],
        "misclassified_test_images": int(len(wrong)),
        "test_images_unread": int(missing),
    }


def _write_csv(path, header, rows):
    with atomic_path(path, suffix=".csv") as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)


def _confusion_figure(matrix, classes, path):
    """confusion_matrix.png, rows normalized (each true class sums to 1), counts written in the cells
    for up to 30 classes; its path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info('confusion matrix figure: off (matplotlib is not installed; pip install "keras-vit[viz]"); '
                 "the numbers are in confusion_matrix.csv")
        return None
    n = len(classes)
    rates = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    side = min(max(4.0, 0.45 * n + 2.0), 30.0)
    fig, ax = plt.subplots(figsize=(side + 1.5, side))
    image = ax.imshow(rates, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(n), classes, rotation=90 if n > 6 else 0, fontsize=8 if n > 20 else 10)
    ax.set_yticks(range(n), classes, fontsize=8 if n > 20 else 10)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"Confusion matrix ({int(matrix.sum())} test images; rows sum to 1)")
    if n <= 30:
        for i in range(n):
            for j in range(n):
                if matrix[i, j]:
                    ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=7 if n > 15 else 9,
                            color="white" if rates[i, j] > 0.5 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return os.path.basename(path)


def image_paths(inputs: Sequence[str | os.PathLike], class_names: Sequence[str] | None = None
                ) -> tuple[list[str], list[str | None] | None]:
    """(image files, their labels or None) from files and folders, as `keras-vit predict` takes them.

    A file is checked at once (its header: FileNotFoundError or ValueError naming it, a decompression
    bomb refused); a folder gives its image files, recursively, in sorted order. When every folder's
    subfolders are all classes of the model (`class_names`), each file is labelled by its subfolder.
    """
    from keras_vit.images import check, inspect, list_images

    paths: list[str] = []
    labels: list[str | None] = []
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            files, _ = list_images(item)
            if not files:
                raise ValueError(f"{item} holds no images (.jpg, .jpeg, .png, .gif, .bmp, .webp).")
            top = [os.path.relpath(f, item).split(os.sep)[0] for f in files]
            nested = all(os.sep in os.path.relpath(f, item) for f in files)
            known = class_names is not None and nested and set(top) <= set(class_names)
            paths.extend(files)
            labels.extend(top if known else [None] * len(files))
        elif os.path.isfile(item):
            check(inspect(item, verify=False), item)
            paths.append(item)
            labels.append(None)
        else:
            raise FileNotFoundError(f"image {item} does not exist.")
    return paths, (labels if labels and all(label is not None for label in labels) else None)


def predict_files(classifier: Classifier, paths: Sequence[str | os.PathLike], out: str | os.PathLike | None = None, top: int = 5,
                  names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Classifies image files one by one with a `keras_vit.serving.Classifier`; unreadable files are
    skipped and named in one summary line. Writes `out` (CSV: path, then class and probability for each
    of the `top` classes; `label` and `correct` when `names` gives each file's true class) and returns
    its rows.

    Example:
    >>> predict_files(load_classifier("model.keras"), ["a.jpg", "b.png"], out="predictions.csv")
    """
    from keras_vit.images import read_image

    rows, skipped = [], []
    for i, path in enumerate(paths):
        try:
            image = read_image(path)
        except ValueError as e:
            skipped.append((path, str(e)))
            continue
        (best,) = classifier.classify(image[None], top=top)
        row: dict[str, Any] = {"path": os.fspath(path)}
        for k, (_, name, score) in enumerate(best, 1):
            row[f"class_{k}"], row[f"probability_{k}"] = name, round(float(score), 6)
        if names is not None:
            row["label"] = names[i]
            row["correct"] = int(best[0][1] == names[i])
        rows.append(row)
        print(f"{path}: " + ", ".join(f"{name} {score:.4f}" for _, name, score in best), flush=True)
    if skipped:
        log.warning("skipped %d of %d files that cannot be read: %s%s", len(skipped), len(paths),
                    "; ".join(reason for _, reason in skipped[:5]),
                    f"; and {len(skipped) - 5} more" if len(skipped) > 5 else "")
    if not rows:
        raise ValueError(f"none of the {len(paths)} files can be read as an image"
                         + (f" ({skipped[0][1]})" if skipped else "") + ".")
    if names is not None:
        log.info("accuracy on the labelled images: %.2f%% (%d of %d)", 100 * np.mean([r["correct"] for r in rows]),
                 sum(r["correct"] for r in rows), len(rows))
    if out:
        header = list(rows[0])
        _write_csv(out, header, [[r.get(k, "") for k in header] for r in rows])
        log.info("wrote %s (%d images)", out, len(rows))
    return rows


__all__ = ["class_counts", "describe_classes", "imbalance_warning", "balanced_class_weights", "confusion_matrix",
           "end_of_run_report", "image_paths", "predict_files", "IMBALANCE_RATIO"]
