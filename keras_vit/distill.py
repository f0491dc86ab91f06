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

A teacher that is itself a ViT of the student's width and token grid (the CIFAR-10 hybrid: a ResNet
stem, then 4 blocks of width 128 on 8x8 tokens) can also give the student its Transformer:
`inherit_teacher` copies its blocks into the student's last ones, and `TokenAligner` trains the
student's patch projection and first blocks to reproduce the tokens the teacher's stem makes, without
labels (`objective="align"`, recipes/cifar10_deit_align.py); distillation then fine-tunes the whole
student from there (`--set init=PATH`):

    inherit_teacher(student, teacher)
    aligner = TokenAligner(student, teacher)
    aligner.compile(optimizer="adamw")
    aligner.fit(train_ds)        # labels unused
"""

from __future__ import annotations

import os
import zipfile
from typing import Any, Iterable, Sequence

import keras
import numpy as np
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


# Inheriting the teacher's Transformer: the hybrid's blocks see an 8x8 grid of tokens of its width,
# which is the plain student's grid at patch 4; a student with `extra` more blocks than the teacher
# takes the teacher's blocks as its last ones, and its first `extra` blocks start as the identity
# (their residual branches' output projections zero), so that at the start the student is its own
# patch projection followed by the teacher's Transformer. Aligning then trains only that front end.
_RESIDUAL_OUTPUTS = ("out", "mlp_dense2")  # the attention's and the MLP's output projections


def inherited_weights(teacher: dict[str, Any], student: dict[str, tuple[int, ...]],
                      source: str = "teacher") -> dict[str, Any]:
    """The student's weights that come from the teacher, as a pure dict-to-dict conversion.

    teacher: weight path -> array, of a keras-vit ViT with a class token (a hybrid's stem and patch
        projection are not read: the student has its own).
    student: weight path -> shape, of a keras-vit ViT of the same width, block shapes and token grid,
        with at least as many blocks, with or without a distillation token.
    Returns path -> array for: the class token (and the distillation token, a copy of it), the
    position embeddings (the class token's also for the distillation token), the teacher's blocks as
    the student's last ones, zeros for the residual output projections of the student's first
    (extra) blocks, the final norm and the head (for both heads). Other student weights keep their
    initialization. A shape that differs raises ValueError naming the key, both shapes and `source`.

    Example:
    >>> plan = inherited_weights({w.path: w.numpy() for w in teacher.weights},
    ...                          {w.path: tuple(w.shape) for w in student.weights})
    """
    def depth(weights):
        return len({p.split("/")[0] for p in weights if p.startswith("encoderblock_")})

    t_depth, s_depth = depth(teacher), depth(student)
    if t_depth == 0 or "patch_encoder/cls" not in teacher:
        raise ValueError(f"{source} has no Transformer blocks or no class token: inheriting needs a keras-vit ViT "
                         "teacher with classifier='token'.")
    extra = s_depth - t_depth
    if extra < 0:
        raise ValueError(f"{source} has {t_depth} blocks, the student {s_depth}: the student needs at least the "
                         f"teacher's number of blocks (model.num_layers >= {t_depth}).")
    plan = {}

    def take(key, value):
        want = student.get(key)
        if want is None:
            raise ValueError(f"the student has no weight {key!r} for {source}'s; build it with the teacher's "
                             "classifier='token' and head.")
        if tuple(value.shape) != tuple(want):
            raise ValueError(f"{source} weight for {key!r} has shape {tuple(value.shape)}, the student's is "
                             f"{tuple(want)}: the student needs the teacher's hidden_size, num_heads, mlp_dim, "
                             "classes and token grid (image_size / patch_size).")
        plan[key] = value

    for key, shape in student.items():
        if key.startswith("encoderblock_"):
            block, rest = key.split("/", 1)
            i = int(block.split("_")[1])
            if i >= extra:
                source_key = f"encoderblock_{i - extra}/{rest}"
                if source_key not in teacher:
                    raise ValueError(f"{source} has no {source_key!r} for the student's {key!r}.")
                take(key, teacher[source_key])
            elif rest.split("/")[0] in _RESIDUAL_OUTPUTS:
                plan[key] = np.zeros(shape, "float32")
        elif key in ("encoder_norm/gamma", "encoder_norm/beta", "head/kernel", "head/bias", "patch_encoder/cls"):
            take(key, teacher[key])
        elif key.startswith("head_dist/"):
            take(key, teacher[key.replace("head_dist/", "head/")])
        elif key == "patch_encoder/dist_token":
            take(key, teacher["patch_encoder/cls"])
        elif key == "patch_encoder/pos_embedding":
            pos = np.asarray(teacher[key])
            if "patch_encoder/dist_token" in student:
                pos = np.concatenate([pos[:, :1], pos], axis=1)
            take(key, pos)
    return plan


def inherit_teacher(student: keras.Model, teacher: keras.Model) -> list[str]:
    """Sets `student`'s weights that `inherited_weights` takes from `teacher` (both keras-vit ViTs);
    returns the student's weight paths it set, all checked before any is assigned.

    Example:
    >>> teacher = load_teacher("saved_models/vit_cifar10_hybrid/model.keras", precision="float32")
    >>> student = keras_vit.VisionTransformer(keras_vit.ViTConfig(image_size=32, patch_size=4, hidden_size=128,
    ...     num_layers=6, num_heads=4, mlp_dim=256, classes=10, distillation=True, classifier_activation=None))
    >>> len(inherit_teacher(student, teacher))
    81
    """
    from keras_vit.models import VisionTransformer

    for model, role in ((student, "student"), (teacher, "teacher")):
        if not isinstance(model, VisionTransformer):
            raise ValueError(f"the {role} {model.name!r} is a {type(model).__name__}; inheriting needs keras-vit "
                             "VisionTransformer models.")
    source = getattr(teacher, "source_path", None) or f"the teacher {teacher.name!r}"
    plan = inherited_weights({w.path: ops.convert_to_numpy(w) for w in teacher.weights},
                             {w.path: tuple(w.shape) for w in student.weights}, source=source)
    for w in student.weights:
        if w.path in plan:
            w.assign(ops.cast(plan[w.path], w.dtype))
    return sorted(plan)


class TokenAligner(keras.Model):
    """Trains a student's front end to produce the teacher's tokens: the student's patch projection,
    tokens, position embeddings and first (extra) blocks regress the teacher's embedded tokens (its
    first block's input: for the hybrid, what its ResNet stem makes) by mean squared error.

    The student should first `inherit_teacher`: its last blocks are then the teacher's, and the better
    its front end reproduces the teacher's tokens, the closer the whole student classifies as the
    teacher does, before it sees a label. Labels in the batches are ignored. Only the front end
    trains; save the student (`student.save`) and fine-tune it (`--set init=PATH`).

    Args:
        student: a keras-vit ViT with at least the teacher's number of blocks.
        teacher: a keras-vit ViT from `load_teacher`, of the student's width and token grid.

    Metrics: "loss" (the squared error per token value) and "explained" (1 - loss / the targets'
    variance: the fraction of the teacher's tokens the student reproduces).
    """

    def __init__(self, student: keras.Model, teacher: keras.Model, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        s_depth, t_depth = len(student.blocks), len(teacher.blocks)
        if s_depth < t_depth:
            raise ValueError(f"the student has {s_depth} blocks, the teacher {t_depth}: aligning needs a student "
                             f"with at least the teacher's (model.num_layers >= {t_depth}).")
        if student.hidden_size != teacher.hidden_size:
            raise ValueError(f"the student's width {student.hidden_size} differs from the teacher's "
                             f"{teacher.hidden_size}: aligning regresses tokens of the teacher's width.")
        teacher.trainable = False
        self.student, self.teacher = student, teacher
        self.extra = s_depth - t_depth
        self._student_embed = student.stage_model("images", "embedded")
        self._teacher_embed = teacher.stage_model("images", "embedded")
        self._teacher_input = _pixel_conversion(student, teacher)
        self._copies = int(getattr(student, "distillation", False))  # the distillation token copies the class token
        self.explained = keras.metrics.Mean(name="explained")
        self.built = True  # every layer is the student's or the teacher's, built; BackupAndRestore asks

    @property
    def trainable_weights(self):
        front = [self.student.patch_encoder, *self.student.blocks[:self.extra]]
        if getattr(self.student, "pre_norm", False):
            front.append(self.student.get_layer("pre_norm"))
        return [w for layer in front for w in layer.trainable_weights]

    def call(self, images: Tensor, training: bool = False) -> Tensor:
        x = self._student_embed(images, training=training)
        for block in self.student.blocks[:self.extra]:
            x = block(x, training=training)
        return ops.cast(x, "float32")

    def teacher_tokens(self, images: Tensor) -> Tensor:
        """The teacher's embedded tokens in the student's token layout (float32)."""
        t = ops.cast(self._teacher_embed(self._teacher_input(images), training=False), "float32")
        if self._copies:
            t = ops.concatenate([t[:, :1], t], axis=1)
        return ops.stop_gradient(t)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        target = self.teacher_tokens(x)
        per_example = ops.mean(ops.square(y_pred - target), axis=(1, 2))
        variance = ops.var(target, axis=(1, 2))
        if sample_weight is None:
            weight = ops.ones_like(per_example)
        else:  # padded rows (weight 0) do not count
            weight = ops.cast(sample_weight, "float32")
        total = ops.maximum(ops.sum(weight), 1.0)
        loss = ops.sum(per_example * weight) / total
        self.explained.update_state(1.0 - loss / ops.maximum(ops.sum(variance * weight) / total, 1e-12))
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), "float32")
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return self.get_metrics_result()
