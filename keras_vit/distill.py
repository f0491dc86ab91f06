"""DeiT's distillation (Touvron et al., 2021): a ViT student learns from a frozen teacher's labels.

The student is a `VisionTransformer(distillation=True)`: a distillation token beside the class
token and a head on each ("head", "head_dist"). In training the class head learns the true
labels and the distillation head the teacher's, both on the same augmented batch; at inference
the model's logits are the mean of the two heads (the model does that itself: every export
and `predict` sees the averaged logits).

    loss = (1 - alpha) * CE(labels, class head) + alpha * CE(argmax teacher, distillation head)  # "hard"
    loss = (1 - alpha) * CE(labels, class head) + alpha * T^2 * KL(teacher/T || distillation head/T)  # "soft"

DeiT's hard-label form (alpha 1/2) beat the soft one on ImageNet. Label smoothing applies to the
true labels only, as in DeiT's code. The teacher is any `.keras` classifier over the same classes
and image size: a keras-vit model (the CIFAR-10 hybrid ships as one) runs in the training
precision, so in bfloat16 where the student does; other Keras models run as saved.

`keras-vit train` builds all of this from a recipe's `distill` section (`--set teacher=PATH`):

    keras-vit train recipes/cifar10_deit.py --set data=../shared/data/cifar10-jpeg.tgz

or in Python:

    student = keras_vit.VisionTransformer(..., distillation=True, classifier_activation=None)
    trainer = Distiller(student, load_teacher("teacher.keras"))
    trainer.compile(optimizer="adamw")
    trainer.fit(train_ds)        # (images, one-hot labels) batches
    student.save("student.keras")
"""

from __future__ import annotations

import os
import zipfile
from typing import Any, Iterable, Sequence

import keras
from keras import ops

from keras_vit._common import Tensor

KINDS = ("hard", "soft")


def load_teacher(path: str | os.PathLike, *, precision: str = "auto") -> keras.Model:
    """A frozen teacher from a `.keras` file, its logits in the training precision where it can.

    precision: "auto" (a keras-vit model is rebuilt under the global dtype policy, e.g.
    mixed_bfloat16, and gets the file's weights; any other model runs as saved) or "float32"
    (as saved). Returns the model, not trainable, with a `logits_model` attribute: the model
    up to its logits (without a softmax the file may have).

    Example:
    >>> teacher = load_teacher("saved_models/vit_cifar10_hybrid/model.keras")
    """
    from keras_vit.models import VisionTransformer

    path = os.fspath(path)
    if precision not in ("auto", "float32"):
        raise ValueError(f"teacher precision must be 'auto' or 'float32', got {precision!r}.")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"teacher file {path} does not exist; pass the teacher's .keras file "
                                "(--set teacher=PATH).")
    if not path.endswith(".keras") or not zipfile.is_zipfile(path):
        raise ValueError(f"teacher {path} is not a .keras model archive (save it with model.save('name.keras')).")
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")  # the file as saved, whatever the global policy is
    try:
        teacher = keras.models.load_model(path, compile=False, safe_mode=True)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    if isinstance(teacher, VisionTransformer) and precision == "auto" and policy.name != "float32":
        rebuilt = VisionTransformer.from_config(teacher.get_config())  # built under the global policy
        rebuilt.set_weights(teacher.get_weights())
        teacher = rebuilt
    teacher.trainable = False
    if isinstance(teacher, VisionTransformer):
        if not teacher.include_top:
            raise ValueError(f"teacher {path} has no head (include_top=False): a teacher must classify.")
        teacher.logits_model = teacher.stage_model("images", "logits")
    else:
        teacher.logits_model = teacher
    teacher.source_path = path
    return teacher


def check_pair(student: keras.Model, teacher: keras.Model) -> None:
    """Refuses a student and teacher that cannot be distilled: the student needs a distillation
    token, both the same classes (names too, where both have them) and the same input size."""
    if not getattr(student, "distillation", False):
        raise ValueError(f"the student {student.name!r} has no distillation token: build it with "
                         "distillation=True (recipes: model=dict(..., distillation=True)).")
    s_classes = student.outputs[0].shape[-1]
    t_classes = teacher.outputs[0].shape[-1]
    if s_classes != t_classes:
        raise ValueError(f"the teacher {teacher.name!r} predicts {t_classes} classes, the student {s_classes}; "
                         "distil from a teacher of the same classes.")
    s_names, t_names = getattr(student, "class_names", None), getattr(teacher, "class_names", None)
    if s_names and t_names and list(s_names) != list(t_names):
        raise ValueError(f"the teacher's classes {t_names} differ from the student's {s_names} (names or order); "
                         "the teacher's labels would be read as the wrong classes.")
    s_shape, t_shape = tuple(student.input_shape[1:]), tuple(teacher.input_shape[1:])
    if t_shape != s_shape and not (t_shape[:2] == (None, None) and t_shape[2] == s_shape[2]):
        raise ValueError(f"the teacher {teacher.name!r} takes images of shape {t_shape}, the student {s_shape}; "
                         "train the student at the teacher's size, or use a teacher built with "
                         "dynamic_image_size=True.")


def two_heads(student: keras.Model) -> keras.Model:
    """A model sharing `student`'s layers that returns (class-head logits, distillation-head logits)."""
    if not getattr(student, "distillation", False):
        raise ValueError(f"{student.name!r} has no distillation token (distillation=False): it has one head.")
    return keras.Model(student.input, [student.get_layer("head").output, student.get_layer("head_dist").output],
                       name=f"{student.name}_two_heads")


class Distiller(keras.Model):
    """Trains a distilled ViT: the class head on labels, the distillation head on a frozen teacher.

    Args:
        student: a `VisionTransformer(distillation=True)` with logits (no softmax).
        teacher: a model from `load_teacher` (or any Keras classifier; it is frozen here).
        kind: "hard" (the teacher's top class, DeiT's choice) or "soft" (its tempered
            distribution, Hinton et al.).
        alpha: the distillation term's weight; the label term gets 1 - alpha.
        temperature: the softening temperature of "soft".
        label_smoothing: on the true labels only.

    Metrics: "accuracy" (the averaged heads, the model's own prediction), "cls_accuracy" and
    "dist_accuracy" (each head alone), and "teacher_agreement" (the distillation head's top
    class against the teacher's). The validation loss is the label loss of the averaged
    logits, as a plain model's.

    Save the student (`student.save`), not the Distiller: it holds the teacher too.
    """

    def __init__(self, student: keras.Model, teacher: keras.Model, kind: str = "hard", alpha: float = 0.5,
                 temperature: float = 1.0, label_smoothing: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if kind not in KINDS:
            raise ValueError(f"Unknown distillation kind {kind!r}; use one of {KINDS}.")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"distillation alpha must be in [0, 1], got {alpha}.")
        if float(temperature) <= 0:
            raise ValueError(f"distillation temperature must be positive, got {temperature}.")
        check_pair(student, teacher)
        teacher.trainable = False
        self.student = student
        self.teacher = teacher
        self.heads = two_heads(student)
        self._teacher_logits = getattr(teacher, "logits_model", teacher)
        self.kind, self.alpha, self.temperature = kind, float(alpha), float(temperature)
        self.label_smoothing = float(label_smoothing)
        self._teacher_input = _pixel_conversion(student, teacher)
        self.accuracy_metric = keras.metrics.CategoricalAccuracy(name="accuracy")
        self.cls_accuracy = keras.metrics.CategoricalAccuracy(name="cls_accuracy")
        self.dist_accuracy = keras.metrics.CategoricalAccuracy(name="dist_accuracy")
        self.teacher_agreement = keras.metrics.Mean(name="teacher_agreement")
        self.built = True  # every layer is the student's or the teacher's, built; BackupAndRestore asks

    def call(self, images: Tensor, training: bool = False) -> dict[str, Tensor]:
        cls, dist = self.heads(images, training=training)
        cls, dist = ops.cast(cls, "float32"), ops.cast(dist, "float32")
        return {"logits": (cls + dist) * 0.5, "cls": cls, "dist": dist}

    def teacher_logits(self, images: Tensor) -> Tensor:
        """The frozen teacher's logits (float32) for the student's input batch."""
        logits = self._teacher_logits(self._teacher_input(images), training=False)
        return ops.stop_gradient(ops.cast(logits, "float32"))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        label_loss = keras.losses.categorical_crossentropy(
            y, y_pred["cls" if training else "logits"], from_logits=True, label_smoothing=self.label_smoothing)
        teacher = self.teacher_logits(x)
        dist = y_pred["dist"]
        agree = ops.cast(ops.equal(ops.argmax(dist, axis=-1), ops.argmax(teacher, axis=-1)), "float32")
        self.teacher_agreement.update_state(agree, sample_weight=sample_weight)
        if training:
            if self.kind == "hard":
                target = ops.one_hot(ops.argmax(teacher, axis=-1), ops.shape(teacher)[-1])
                dist_loss = keras.losses.categorical_crossentropy(target, dist, from_logits=True)
            else:
                t = self.temperature
                target = ops.softmax(teacher / t, axis=-1)
                dist_loss = keras.losses.kl_divergence(target, ops.softmax(dist / t, axis=-1)) * (t * t)
            per_example = (1.0 - self.alpha) * label_loss + self.alpha * dist_loss
        else:
            per_example = label_loss
        if sample_weight is None:
            loss = ops.mean(per_example)
        else:  # padded rows (weight 0) do not count
            weight = ops.cast(sample_weight, "float32")
            loss = ops.sum(per_example * weight) / ops.maximum(ops.sum(weight), 1.0)
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        self.accuracy_metric.update_state(y, y_pred["logits"], sample_weight=sample_weight)
        self.cls_accuracy.update_state(y, y_pred["cls"], sample_weight=sample_weight)
        self.dist_accuracy.update_state(y, y_pred["dist"], sample_weight=sample_weight)
        return self.get_metrics_result()


def _pixel_conversion(student, teacher):
    """Student inputs -> the teacher's normalization, through pixels in [0, 1] (identity when equal)."""
    s_mean, s_std = getattr(student, "pixel_mean", (0.5,) * 3), getattr(student, "pixel_std", (0.5,) * 3)
    t_mean, t_std = getattr(teacher, "pixel_mean", (0.5,) * 3), getattr(teacher, "pixel_std", (0.5,) * 3)
    if tuple(s_mean) == tuple(t_mean) and tuple(s_std) == tuple(t_std):
        return lambda images: images
    scale = [s / t for s, t in zip(s_std, t_std)]
    shift = [(sm - tm) / t for sm, tm, t in zip(s_mean, t_mean, t_std)]
    return lambda images: images * ops.convert_to_tensor(scale, images.dtype) + ops.convert_to_tensor(shift,
                                                                                                       images.dtype)


def head_accuracies(student: keras.Model, dataset: Iterable[Sequence[Tensor]]) -> dict[str, float]:
    """Top-1 accuracy of the class head alone, the distillation head alone and both averaged (the
    model's own logits), over (images, one-hot labels) batches: DeiT's Table 3 columns.

    Example:
    >>> head_accuracies(keras.models.load_model("model.keras"), test_ds)
    {'class_head': 0.79, 'distillation_head': 0.80, 'averaged': 0.81, 'examples': 10000}
    """
    heads = two_heads(student)
    right = {"class_head": 0, "distillation_head": 0, "averaged": 0}
    total = 0
    for batch in dataset:
        images, labels = batch[0], batch[1]
        cls, dist = (ops.convert_to_numpy(ops.cast(t, "float32")) for t in heads(images, training=False))
        truth = ops.convert_to_numpy(ops.argmax(labels, axis=-1))
        right["class_head"] += int((cls.argmax(-1) == truth).sum())
        right["distillation_head"] += int((dist.argmax(-1) == truth).sum())
        right["averaged"] += int(((cls + dist).argmax(-1) == truth).sum())
        total += len(truth)
    if not total:
        raise ValueError("head_accuracies got an empty dataset.")
    return {**{k: v / total for k, v in right.items()}, "examples": total}
