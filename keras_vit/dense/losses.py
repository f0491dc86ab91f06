"""Losses and metrics of dense training, in `keras.ops` (every backend).

Segmentation: cross-entropy over the labelled pixels (255 ignored), mean IoU and pixel accuracy.
Depth: the scale-invariant log loss (SiLog: Eigen et al., 2014; Depth Anything's metric training with
lambda 0.5), AbsRel and delta < 1.25, over the pixels with depth (> 0). `segmentation_scores` turns a
confusion matrix into the per-class IoU table a model card shows.

Example:
>>> loss = SegmentationCrossEntropy(ignore_index=255)
>>> masks = np.array([[[0, 1], [255, 1]]]); logits = np.zeros((1, 2, 2, 3), "float32")
>>> round(float(loss(masks, logits)), 4)  # log(3) over the three labelled pixels
1.0986
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_vit._common import register

IGNORE_INDEX = 255


@register
class SegmentationCrossEntropy(keras.losses.Loss):
    """Softmax cross-entropy of logits (B, H, W, C) against class indices (B, H, W), averaged over each
    image's labelled pixels (those not `ignore_index`); an image with none counts 0.

    Example:
    >>> loss = SegmentationCrossEntropy(ignore_index=255)
    >>> round(float(loss(np.array([[[0, 1], [255, 1]]]), np.zeros((1, 2, 2, 3), "float32"))), 4)
    1.0986
    """

    def __init__(self, ignore_index: int = IGNORE_INDEX, name: str = "segmentation_cross_entropy", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.ignore_index = int(ignore_index)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        labels = ops.cast(y_true, "int32")
        valid = ops.not_equal(labels, self.ignore_index)
        safe = ops.where(valid, labels, ops.zeros_like(labels))
        ce = ops.sparse_categorical_crossentropy(safe, ops.cast(y_pred, "float32"), from_logits=True)
        ce = ops.where(valid, ce, ops.zeros_like(ce))
        count = ops.sum(ops.cast(valid, "float32"), axis=(1, 2))
        return ops.sum(ce, axis=(1, 2)) / ops.maximum(count, 1.0)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "ignore_index": self.ignore_index}


@register
class SiLogLoss(keras.losses.Loss):
    """sqrt(mean(g^2) - lambd * mean(g)^2), g = log(target) - log(prediction), over each image's pixels
    with depth (target > 0); Depth Anything V2's metric-depth loss at lambd 0.5.

    Example:
    >>> depth = np.array([[[1.0, 2.0], [0.0, 4.0]]], "float32")  # 0: no depth there
    >>> round(float(SiLogLoss(lambd=1.0)(depth, 3.0 * depth)), 3)  # a pure scale error costs nothing at 1
    0.001
    """

    def __init__(self, lambd: float = 0.5, eps: float = 1e-6, name: str = "silog", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        if not 0.0 <= lambd <= 1.0:
            raise ValueError(f"SiLogLoss lambd={lambd}: 0 <= lambd <= 1 (1 is fully scale-invariant).")
        self.lambd, self.eps = float(lambd), float(eps)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        target, pred = ops.cast(y_true, "float32"), ops.cast(y_pred, "float32")
        valid = ops.cast(target > 0, "float32")
        g = (ops.log(ops.maximum(target, self.eps)) - ops.log(ops.maximum(pred, self.eps))) * valid
        count = ops.maximum(ops.sum(valid, axis=(1, 2)), 1.0)
        mean, mean_sq = ops.sum(g, axis=(1, 2)) / count, ops.sum(g * g, axis=(1, 2)) / count
        return ops.sqrt(ops.maximum(mean_sq - self.lambd * mean * mean, 0.0) + self.eps)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "lambd": self.lambd, "eps": self.eps}


class _RatioMetric(keras.metrics.Metric):
    """A metric that is sum(values) / sum(counts) over every batch seen."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable((), initializer="zeros", name="total")
        self.count = self.add_variable((), initializer="zeros", name="count")

    def _add(self, values: Any, weights: Any) -> None:
        self.total.assign_add(ops.sum(ops.cast(values, "float32") * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self) -> Any:
        return self.total / ops.maximum(self.count, 1.0)

    def reset_state(self) -> None:
        self.total.assign(0.0)
        self.count.assign(0.0)


@register
class PixelAccuracy(_RatioMetric):
    """The share of labelled pixels whose arg-max class is right.

    Example:
    >>> metric = PixelAccuracy()
    >>> metric.update_state(np.array([[[1, 255]]]), np.array([[[[0.0, 1.0], [1.0, 0.0]]]]))
    >>> float(metric.result())
    1.0
    """

    def __init__(self, ignore_index: int = IGNORE_INDEX, name: str = "pixel_accuracy", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.ignore_index = int(ignore_index)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        labels = ops.cast(y_true, "int32")
        valid = ops.cast(ops.not_equal(labels, self.ignore_index), "float32")
        self._add(ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), labels), valid)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "ignore_index": self.ignore_index}


@register
class AbsRel(_RatioMetric):
    """mean(|prediction - target| / target) over the pixels with depth.

    Example:
    >>> metric = AbsRel()
    >>> metric.update_state(np.array([[[2.0, 0.0]]]), np.array([[[2.2, 5.0]]]))
    >>> round(float(metric.result()), 4)
    0.1
    """

    def __init__(self, name: str = "abs_rel", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        target, pred = ops.cast(y_true, "float32"), ops.cast(y_pred, "float32")
        valid = ops.cast(target > 0, "float32")
        self._add(ops.abs(pred - target) / ops.maximum(target, 1e-6), valid)


@register
class DeltaAccuracy(_RatioMetric):
    """The share of pixels with depth where max(prediction / target, target / prediction) < threshold.

    Example:
    >>> metric = DeltaAccuracy()
    >>> metric.update_state(np.array([[[2.0, 2.0]]]), np.array([[[2.2, 3.0]]]))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, threshold: float = 1.25, name: str = "delta1", **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.threshold = float(threshold)

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        target, pred = ops.cast(y_true, "float32"), ops.maximum(ops.cast(y_pred, "float32"), 1e-6)
        valid = ops.cast(target > 0, "float32")
        ratio = ops.maximum(pred / ops.maximum(target, 1e-6), ops.maximum(target, 1e-6) / pred)
        self._add(ratio < self.threshold, valid)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "threshold": self.threshold}


def mean_iou(classes: int, ignore_index: int = IGNORE_INDEX, name: str = "miou") -> keras.metrics.Metric:
    """Keras' own MeanIoU on logits (arg-max taken) with `ignore_index` left out: the mean over the
    classes that appear in the targets or the predictions."""
    return keras.metrics.MeanIoU(num_classes=classes, ignore_class=ignore_index, sparse_y_pred=False, name=name)


def confusion_matrix(masks: np.ndarray, predicted: np.ndarray, classes: int,
                     ignore_index: int = IGNORE_INDEX) -> np.ndarray:
    """(classes, classes) int64 counts, rows the true class, columns the predicted, labelled pixels only."""
    masks, predicted = np.asarray(masks).reshape(-1), np.asarray(predicted).reshape(-1)
    keep = masks != ignore_index
    if np.any(masks[keep] >= classes) or np.any(masks[keep] < 0):
        raise ValueError(f"a mask holds class {int(masks[keep].max())}, the model has {classes} classes.")
    return np.bincount(masks[keep].astype(np.int64) * classes + predicted[keep].astype(np.int64),
                       minlength=classes * classes).reshape(classes, classes)


def segmentation_scores(confusion: np.ndarray, class_names: list[str] | None = None) -> dict[str, Any]:
    """{"miou", "pixel_accuracy", "per_class": {name: {"iou", "pixels"}}} from a confusion matrix; the
    mean IoU is over the classes present in the targets or the predictions (as Keras' MeanIoU and mmseg).

    Example:
    >>> scores = segmentation_scores(np.array([[8, 2], [0, 10]]), ["background", "item"])
    >>> round(scores["miou"], 4), scores["per_class"]["item"]
    (0.8167, {'iou': 0.8333, 'pixels': 10})
    """
    confusion = np.asarray(confusion, np.float64)
    tp = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - tp
    iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
    names = class_names or [f"class_{i}" for i in range(len(tp))]
    return {"miou": float(np.nanmean(iou)) if np.any(union > 0) else 0.0,
            "pixel_accuracy": float(tp.sum() / max(confusion.sum(), 1)),
            "per_class": {n: {"iou": None if np.isnan(v) else round(float(v), 4), "pixels": int(confusion[i].sum())}
                          for i, (n, v) in enumerate(zip(names, iou))}}
