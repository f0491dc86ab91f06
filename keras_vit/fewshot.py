"""Few-shot linear evaluation: how good a frozen representation is with N labelled images per class.

The paper's measure beside fine-tuning (Section 4, "few-shot accuracy"): the model's
pre-logits representation is computed once and frozen; a linear classifier is fitted in
closed form by L2-regularized least squares from the features of N images per class to
{-1, 1}^K targets, and its accuracy is measured on the test split. Here the regularizer
is chosen from a grid on held-out training images (never the test split), and each shot
count is repeated over seeds, reported as mean and spread.

    keras-vit fewshot saved_models/vit_digits/model.keras --data digits --shots 1 5 10 --seeds 3

(`--data` takes a folder or a .tgz of train/<class>/ and test/<class>/ images too, e.g. CIFAR-10 as
JPEG files, a download; or tfds:NAME, prepared by tensorflow-datasets.)

Example:
>>> model = keras_vit.load_model("saved_models/vit_digits/model.keras")
>>> result = keras_vit.fewshot_evaluate(model, "digits", shots=(1, 5), seeds=2, verbose=0)
>>> result["shots"]["5"]["mean"] > 0.8   # test accuracy with 5 images per class
True
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._common import refuse_unknown_keywords
from keras_vit._files import atomic_path
from keras_vit.applications import preprocess_input
from keras_vit.data import Split, load_data
from keras_vit.images import model_view, view_policy
from keras_vit.loading import load_model  # noqa: F401 (public here too: keras_vit.fewshot.load_model)

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

# The bias column's value: large, so that its weight is barely regularized (the L2 term
# penalizes w_bias^2 while the bias itself is w_bias * BIAS).
BIAS = 100.0
# 2^-10 .. 2^20: the regularizers tried on the held-out images.
L2_REGS = tuple(2.0 ** k for k in range(-10, 21, 2))
# How fewshot takes a folder of images in place of a tfds data set (named when tfds is offline).
LOCAL_DATA = "--data FOLDER (fewshot_evaluate(model, data=FOLDER))"


class LeastSquaresProbe:
    """A linear classifier fitted in closed form: ridge regression from standardized features
    (plus a constant bias column) to {-1, 1} one-hot targets, for many regularizers at once.

    One eigendecomposition serves every L2 value: with X (n, d) and X^T X = Q diag(e) Q^T,
    W(l2) = Q diag(1 / (e + l2)) Q^T X^T Y; when d > n the n x n Gram matrix X X^T is
    decomposed instead (W = X^T (X X^T + l2 I)^-1 Y, the same solution).

    Example:
    >>> rng = np.random.default_rng(0)
    >>> centres = rng.normal(size=(3, 8))
    >>> labels = np.repeat([0, 1, 2], 20)
    >>> features = centres[labels] + 0.1 * rng.normal(size=(60, 8))
    >>> probe = LeastSquaresProbe(features, labels, num_classes=3)
    >>> probe.predict(centres, l2=1.0)
    array([0, 1, 2])
    >>> probe.accuracy(features, labels, l2=1.0), probe.weights(l2=1.0).shape
    (1.0, (9, 3))
    """

    def __init__(self, features: np.ndarray, labels: np.ndarray, num_classes: int) -> None:
        x = np.asarray(features, np.float64)
        labels = np.asarray(labels).reshape(-1)
        if x.ndim != 2 or len(x) != len(labels):
            raise ValueError(f"features must be (n, d) with one label each, got features {x.shape} and "
                             f"{len(labels)} labels.")
        if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f"labels must lie in [0, {num_classes - 1}], found [{labels.min()}, {labels.max()}].")
        self.num_classes = int(num_classes)
        self.mean = x.mean(0, keepdims=True)
        self.std = x.std(0, keepdims=True) + 1e-5  # a constant feature (dead unit) stays finite
        x = self._design(x)
        y = 2.0 * np.eye(self.num_classes)[labels] - 1.0
        if len(x) >= x.shape[1]:
            self.eigs, q = np.linalg.eigh(x.T @ x)
            self.left, self.right = q, q.T @ (x.T @ y)
        else:
            self.eigs, q = np.linalg.eigh(x @ x.T)
            self.left, self.right = x.T @ q, q.T @ y
        self.eigs = np.maximum(self.eigs, 0.0)  # round-off can make a zero eigenvalue slightly negative

    def _design(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, np.float64) - self.mean) / self.std
        return np.concatenate([x, np.full((len(x), 1), BIAS)], axis=1)

    def weights(self, l2: float) -> np.ndarray:
        """(d + 1, K): the ridge solution at `l2`, the bias weight last."""
        if not l2 > 0:
            raise ValueError(f"l2 must be positive, got {l2}.")
        return (self.left / (self.eigs + l2)) @ self.right

    def decision(self, features: np.ndarray, l2: float) -> np.ndarray:
        """(n, K) scores; the predicted class is their argmax."""
        return self._design(features) @ self.weights(l2)

    def predict(self, features: np.ndarray, l2: float) -> np.ndarray:
        """(n,) the predicted class of each row of `features`."""
        return self.decision(features, l2).argmax(-1)

    def accuracy(self, features: np.ndarray, labels: np.ndarray, l2: float) -> float:
        """The fraction of `features` whose predicted class is their label."""
        return float(np.mean(self.predict(features, l2) == np.asarray(labels).reshape(-1)))


def choose_l2(probe: LeastSquaresProbe, features: np.ndarray, labels: np.ndarray,
              l2_regs: Sequence[float] = L2_REGS) -> tuple[float, float]:
    """The regularizer with the best accuracy on held-out (features, labels); among equals the
    largest, the simplest classifier that does as well. Returns (l2, accuracy)."""
    scores = [probe.accuracy(features, labels, l2) for l2 in l2_regs]
    best = max(scores)
    l2 = max(l2 for l2, s in zip(l2_regs, scores) if s == best)
    return l2, best


def feature_model(model: keras.Model) -> keras.Model:
    """images in the model's input range -> the frozen representation (the pre-logits, the
    head's input: what `include_top=False` with the model's pooling returns)."""
    if hasattr(model, "stage_model"):
        return model.stage_model("images", "pre_logits")
    return model


def _input_size(model):
    size = model.input_shape[1:3]
    if None in size:  # a dynamic model: its stored grid's native size
        size = tuple(model.image_size) if hasattr(model, "image_size") else None
        if size is None or None in size:
            raise ValueError(f"{model.name} takes any image size and names none; resize the images first.")
    return tuple(int(s) for s in size)


def extract_features(model: keras.Model, images: np.ndarray | Sequence[np.ndarray], batch_size: int = 256,
                     verbose: str | int = "auto", what: str = "images") -> np.ndarray:
    """uint8 RGB images (N, H, W, 3), at any size, or a sequence of images of different sizes -> (N, D)
    float32 representations of `model`, each image seen as the model sees it (`keras_vit.images.model_view`
    with the model's crop_pct and interpolation), with a Keras progress bar for large sets."""
    import keras

    features = feature_model(model)
    size = _input_size(model)
    crop_pct, interpolation = view_policy(model)
    if not isinstance(images, (np.ndarray, _Files)):
        images = list(images) if not isinstance(images, list) else images
    out = []
    steps = math.ceil(len(images) / batch_size)
    bar = keras.utils.Progbar(steps, unit_name="batch") if _show(verbose, steps) else None
    if bar is not None:
        log.info("features of %d %s", len(images), what)
    for i in range(steps):
        chunk = images[i * batch_size:(i + 1) * batch_size]
        if isinstance(chunk, np.ndarray):
            batch = np.asarray(model_view(chunk, size, crop_pct, interpolation))
        else:  # images of different sizes, one by one
            batch = np.stack([np.asarray(model_view(image, size, crop_pct, interpolation)) for image in chunk])
        # convert_to_numpy: a torch tensor that requires grad refuses np.asarray
        out.append(keras.ops.convert_to_numpy(features(preprocess_input(batch, model=model), training=False))
                   .astype(np.float32))
        if bar is not None:
            bar.update(i + 1)
    return np.concatenate(out).reshape(len(images), -1)


class _Files:
    """Images of a file-streamed Split at `indices`, decoded when sliced (a batch at a time)."""

    def __init__(self, files, indices):
        self.files, self.indices = files, np.asarray(indices)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, key):
        return [self.files.read(int(i)) for i in self.indices[key]]


def _show(verbose, steps):
    if verbose == "auto":
        return steps > 4
    return bool(verbose)


def _class_pools(split, need, seeds):
    """Per class, the example indices a seed may draw from: all of an in-memory split; for a
    streamed one (ImageNet from tfds) the first `need * seeds` of each class in the stream,
    read once. Returns (images or None, labels, {class: indices})."""
    if split.stream is None:
        labels = np.asarray(split.labels)
        images = split.images if split.files is None else split  # a file-streamed split: decoded when used
        return images, labels, {c: np.flatnonzero(labels == c) for c in range(len(split.class_names))}
    want = need * seeds
    images, labels = [], []
    counts = np.zeros(len(split.class_names), int)
    for image, label in split.elements():
        label = int(label)
        if counts[label] < want:
            images.append(np.asarray(image))
            labels.append(label)
            counts[label] += 1
            if counts.min() >= want:
                break
    labels = np.asarray(labels)
    return images, labels, {c: np.flatnonzero(labels == c) for c in range(len(split.class_names))}


def _check_enough(pools, class_names, need, shots, holdout, origin):
    short = [(class_names[c], len(idx)) for c, idx in pools.items() if len(idx) < need]
    if short:
        name, count = min(short, key=lambda s: s[1])
        raise ValueError(
            f"{origin}: class {name!r} has {count} training images, fewer than {max(shots)} shots + {holdout} "
            f"held out for choosing the regularizer = {need}; use fewer --shots or --holdout."
        )


def _test_set(split, max_images, seed):
    if split.stream is None:
        labels = np.asarray(split.labels)
        keep = np.arange(len(labels))
        if max_images and len(labels) > max_images:  # class-sorted folders: shuffle before taking
            keep = np.sort(np.random.default_rng(seed).permutation(len(labels))[:max_images])
        if split.files is not None:
            return _Files(split.files, keep), labels[keep]
        return split.images[keep], labels[keep]
    images, labels = [], []
    for image, label in split.elements().take(max_images or -1):
        images.append(np.asarray(image))
        labels.append(int(label))
    return images, np.asarray(labels)


def _pick(images, idx):
    """The images at `idx`: an array's rows, a file-streamed Split's files (decoded when used), a list's items."""
    if isinstance(images, np.ndarray):
        return images[idx]
    if isinstance(images, Split):
        return _Files(images.files, idx)
    return [images[i] for i in idx]


@refuse_unknown_keywords
def fewshot_evaluate(model: keras.Model, data: str | os.PathLike | dict[str, Split],
                     shots: int | Sequence[int] = (1, 5, 10, 25), seeds: int = 3, *, holdout: int = 10,
                     l2_regs: Sequence[float] = L2_REGS, test_images: int | None = None, batch_size: int = 256,
                     train_split: str = "train", test_split: str = "test", verbose: str | int = "auto") -> dict[str, Any]:
    """Few-shot linear accuracy of a model's frozen representation (the paper's Section 4).

    For each seed, `shots` images per class are drawn from the training split (the smaller
    shot counts are the first images of the larger, so the shot counts of one seed are nested),
    and `holdout` further images per class; a least-squares probe is fitted on the shots, its
    regularizer chosen from `l2_regs` on the held-out images, and its accuracy measured on
    the test split (all of it, or `test_images` drawn at random).

    Args:
        model: a keras-vit model (or any Keras model from images in its input range to
            features); its head, if any, is not used.
        data: a data spec as the recipes take ("digits", "tfds:NAME", a folder or a .tgz of
            train/<class>/ and test/<class>/), or a dict {"train": Split, "test": Split}.
        shots: images per class, each an int >= 1.
        seeds: how many draws to average over.

    Returns:
        A dict: "shots" maps each shot count (as a string) to {"mean", "std", "min", "max",
        "accuracies" (per seed), "l2" (chosen, per seed)}, with the model, data, feature
        dimension, class count and test size beside it.

    Raises:
        ValueError: a shot count < 1, or a class with fewer than max(shots) + holdout
            training images (named).

    Example:
    >>> model = keras_vit.load_model("saved_models/vit_digits/model.keras")
    >>> result = fewshot_evaluate(model, "digits", shots=(1, 5), seeds=2, verbose=0)
    >>> result["num_classes"], result["feature_dim"], sorted(result["shots"])
    (10, 64, ['1', '5'])
    >>> result["shots"]["5"]["mean"] > 0.8
    True
    """
    shots = sorted({int(s) for s in np.atleast_1d(shots)})
    if not shots or shots[0] < 1:
        raise ValueError(f"shots must be positive ints, got {shots}.")
    if int(seeds) < 1 or int(holdout) < 1:
        raise ValueError(f"seeds and holdout must be >= 1, got seeds={seeds}, holdout={holdout}.")
    seeds, holdout = int(seeds), int(holdout)
    splits = data if isinstance(data, dict) else load_data(data, (train_split, test_split), local_data=LOCAL_DATA)
    train, test = splits[train_split], splits[test_split]
    if not isinstance(train, Split) or not isinstance(test, Split):
        raise ValueError(f"data must name or hold '{train_split}' and '{test_split}' Splits.")
    class_names = train.class_names
    num_classes = len(class_names)
    _input_size(model)  # a model that names no input size fails before any image is read
    need = shots[-1] + holdout

    pool_images, pool_labels, pools = _class_pools(train, need, seeds)
    _check_enough(pools, class_names, need, shots, holdout, train.origin)
    draws = []  # per seed: per class its permuted pool indices; shots first, held-out last
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        draws.append({c: rng.permutation(idx)[:need] for c, idx in pools.items()})
    used = np.unique(np.concatenate([idx for draw in draws for idx in draw.values()]))
    used_features = extract_features(model, _pick(pool_images, used), batch_size, verbose, "training images")
    row = {int(i): r for r, i in enumerate(used)}

    test_x, test_y = _test_set(test, test_images, seed=0)
    test_features = extract_features(model, test_x, batch_size, verbose, "test images")

    results: dict[str, dict[str, Any]] = {}
    for n in shots:
        accuracies, chosen = [], []
        for draw in draws:
            fit = [row[int(i)] for c in range(num_classes) for i in draw[c][:n]]
            held = [row[int(i)] for c in range(num_classes) for i in draw[c][shots[-1]:]]
            probe = LeastSquaresProbe(used_features[fit], pool_labels[used[fit]], num_classes)
            l2, _ = choose_l2(probe, used_features[held], pool_labels[used[held]], l2_regs)
            accuracies.append(probe.accuracy(test_features, test_y, l2))
            chosen.append(l2)
        results[str(n)] = {
            "mean": float(np.mean(accuracies)), "std": float(np.std(accuracies)),
            "min": float(np.min(accuracies)), "max": float(np.max(accuracies)),
            "accuracies": accuracies, "l2": chosen,
        }
        log.info("%d-shot: %.2f%% +- %.2f over %d seeds", n, 100 * results[str(n)]["mean"],
                 100 * results[str(n)]["std"], seeds)
    return {
        "model": getattr(model, "name", str(model)),
        "data": train.origin,
        "data_spec": os.fspath(data) if isinstance(data, (str, os.PathLike)) else None,
        "representation": "pre_logits",
        "feature_dim": int(used_features.shape[1]),
        "num_classes": num_classes,
        "test_images": int(len(test_y)),
        "seeds": seeds,
        "holdout_per_class": holdout,
        "l2_regs": [float(v) for v in l2_regs],
        "shots": results,
    }


def format_table(result: dict[str, Any]) -> str:
    """The result of `fewshot_evaluate` as a Markdown table (shots, mean accuracy, spread).

    Example:
    >>> import json
    >>> with open("saved_models/vit_digits/fewshot.json") as f:
    ...     print(format_table(json.load(f)))
    Few-shot linear accuracy: saved_models/vit_digits/model.keras on sklearn digits [train] (64-d pre-logits, ...)
    <BLANKLINE>
    | shots per class | accuracy (mean) | std | min | max |
    |---:|---:|---:|---:|---:|
    | 1 | 89.97% | ...
    """
    lines = [f"Few-shot linear accuracy: {result['model']} on {result['data']} "
             f"({result['feature_dim']}-d pre-logits, {result['num_classes']} classes, "
             f"{result['test_images']} test images, {result['seeds']} seeds)",
             "",
             "| shots per class | accuracy (mean) | std | min | max |",
             "|---:|---:|---:|---:|---:|"]
    for n, r in result["shots"].items():
        lines.append(f"| {n} | {100 * r['mean']:.2f}% | {100 * r['std']:.2f} | {100 * r['min']:.2f}% | "
                     f"{100 * r['max']:.2f}% |")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: str | os.PathLike) -> str:
    """Writes a result atomically as JSON."""
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return path


__all__ = ["LeastSquaresProbe", "choose_l2", "extract_features", "feature_model", "fewshot_evaluate",
           "format_table", "load_model", "write_json", "L2_REGS"]
