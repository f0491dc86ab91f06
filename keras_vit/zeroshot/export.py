"""A zero-shot classifier exported as a plain image classifier: SavedModel, TFLite or ONNX, the label
embeddings baked in, checked against `ImageText.classify` before it lands.

The serving function takes uint8 RGB images (N, H, W, 3) (SavedModel and ONNX: any size, resized bilinearly
to the checkpoint's; TFLite: the checkpoint's size), normalises them with the checkpoint's mean and std, runs
the image tower, normalises the embedding and applies one linear layer whose rows are the label embeddings
(`ImageText.label_embeddings`: the prompt ensemble) times exp(logit_scale), plus SigLIP's logit bias. Outputs:
`logits` (N, C) and `probabilities` (N, C) (softmax for CLIP, a sigmoid per label for SigLIP). The TFLite file
carries MediaPipe's metadata with the labels; `PATH.json` beside every export holds the labels, the templates
and the parity report.

Example:
>>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_clip")
>>> report = export_zeroshot(model, "zeroshot.tflite", ["cat", "dog", "ship"], templates=["a photo of a {}."],
...                          samples="tests/data/cifar10_sample")
>>> report["max_abs_diff"] < 1e-4
True
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from typing import Any, Sequence, cast

import numpy as np

from keras_vit._common import refuse_unknown_keywords
from keras_vit._files import atomic_path, export_format
from keras_vit.serving import INPUT_NAME, dense_attention, export_runner, float32_copy, metadata_path
from keras_vit.zeroshot.model import DEFAULT_TEMPLATES, ImageText

log = logging.getLogger(__name__)

TOLERANCE = 1e-4  # probabilities' max |diff| against classify
OUTPUTS = ["logits", "probabilities"]


class ZeroShotServingGraph:
    """uint8 images -> resize -> normalise -> image tower -> L2 normalise -> the label embeddings' linear layer
    -> {"logits", "probabilities"}. The protocol keras_vit.onnx.convert takes."""

    def __init__(self, model: ImageText, classes: np.ndarray):
        import keras

        self.image_model = float32_copy(model.image_model)
        self.image_size = tuple(model.image_size)
        self.family = model.family
        self.mean = np.asarray(model.image_model.pixel_mean, np.float32)
        self.std = np.asarray(model.image_model.pixel_std, np.float32)
        # the scale folded into the kernel: one MatMul and one Add in every format
        self.kernel = keras.Variable((np.exp(model.logit_scale) * classes.T).astype(np.float32), trainable=False,
                                     name="label_embeddings")
        self.bias = keras.Variable(np.full((classes.shape[0],), model.logit_bias, np.float32), trainable=False,
                                   name="logit_bias")
        self.output_names = list(OUTPUTS)

    def __call__(self, x: Any) -> dict[str, Any]:
        import tensorflow as tf

        e = tf.cast(self.image_model(x, training=False), tf.float32)
        e = e * tf.math.rsqrt(tf.reduce_sum(e * e, axis=-1, keepdims=True))
        logits = tf.matmul(e, self.kernel) + self.bias
        probs = tf.sigmoid(logits) if self.family == "siglip" else tf.nn.softmax(logits, axis=-1)
        return {"logits": logits, "probabilities": probs}

    def preprocess(self, images: Any, resize: bool = True) -> Any:
        import tensorflow as tf

        x = tf.cast(images, tf.float32)
        if resize:
            x = tf.image.resize(x, self.image_size, method="bilinear")
            x.set_shape((None,) + self.image_size + (3,))
        return (x / 255.0 - self.mean) / self.std

    def serving_function(self, resize: bool, antialias: bool = False) -> Any:
        def serve(images):
            return self(self.preprocess(images, resize))

        return serve

    def write_saved_model(self, path: str, resize: bool, sizes: Sequence[Any] | None = None,
                          antialias: bool = False) -> None:
        import keras
        import tensorflow as tf

        archive = keras.export.ExportArchive()
        archive.track(self.image_model)
        archive.kernel, archive.bias = self.kernel, self.bias  # tracked: their values are in the graph's variables
        shape = (None, None, None, 3) if resize else (None,) + self.image_size + (3,)
        archive.add_endpoint("serving_default", self.serving_function(resize),
                             input_signature=[tf.TensorSpec(shape, tf.uint8, name=INPUT_NAME)])
        archive.write_out(path, verbose=False)


def _tflite_bytes(graph: ZeroShotServingGraph) -> bytes:
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="keras_vit_zeroshot_") as tmp:
        saved = os.path.join(tmp, "saved_model")
        graph.write_saved_model(saved, resize=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        return converter.convert()


def sample_images(source: Any, size: Sequence[int], max_samples: int = 20) -> np.ndarray:
    """uint8 images (N, h, w, 3) at the checkpoint's size for the parity check: a folder of images (searched
    recursively, sorted), a list of paths, or an array."""
    from keras_vit.applications import load_image
    from keras_vit.images import list_images

    if isinstance(source, np.ndarray):
        images = source
    else:
        paths = list_images(os.fspath(source))[0] if isinstance(source, (str, os.PathLike)) else list(source)
        if not paths:
            raise ValueError(f"no images under {source} for the parity check.")
        images = np.stack([load_image(p, size=tuple(size)) for p in paths[:max_samples]])
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"samples must be uint8 images (N, H, W, 3); got {images.dtype} {images.shape}.")
    if tuple(images.shape[1:3]) != tuple(size):
        raise ValueError(f"sample images are {images.shape[1]}x{images.shape[2]}; the parity check feeds them at the "
                         f"checkpoint's size {size[0]}x{size[1]} (a folder or paths are resized to it).")
    return images[:max_samples]


@refuse_unknown_keywords
def export_zeroshot(model: ImageText | str | os.PathLike, path: str | os.PathLike, labels: Sequence[str], *,
                    templates: Sequence[str] = DEFAULT_TEMPLATES, format: str | None = None, samples: Any = None,
                    max_samples: int = 20, overwrite: bool = False) -> dict[str, Any]:
    """Exports a zero-shot classifier over `labels` (SavedModel folder, .tflite or .onnx) and returns its parity
    report (also in PATH.json).

    `samples`: images the export is checked on against `model.classify` (a folder, paths or a uint8 array at the
    checkpoint's size; default: 20 random images). Raises ValueError, writing nothing, when the probabilities
    differ by more than 1e-4.

    Example:
    >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_siglip")
    >>> export_zeroshot(model, "zeroshot_onnx.onnx", ["cat", "dog"])["format"]
    'onnx'
    """
    import keras

    from keras_vit.zeroshot.model import load_image_text

    if keras.backend.backend() != "tensorflow":
        raise ValueError("exports are TensorFlow graphs: run under KERAS_BACKEND=tensorflow (`keras-vit export` "
                         "does this itself).")
    image_text = model if isinstance(model, ImageText) else load_image_text(model)
    return _export(image_text, os.fspath(path), labels, templates, format, samples, max_samples, overwrite)


def _export(model: ImageText, path: str, labels: Sequence[str], templates: Sequence[str], format: str | None,
            samples: Any, max_samples: int, overwrite: bool) -> dict[str, Any]:
    format = export_format(path, format)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it.")
    classes = model.label_embeddings(labels, templates)
    labels, templates = [str(label) for label in labels], list([templates] if isinstance(templates, str) else templates)
    if samples is None:
        samples = np.random.default_rng(0).integers(0, 256, (max_samples, *model.image_size, 3)).astype(np.uint8)
    images = sample_images(samples, model.image_size, max_samples)
    reference = model.probabilities(model.scores(model.image_embeddings(images), classes))
    graph = ZeroShotServingGraph(model, classes)
    with dense_attention(graph.image_model):
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        # staged beside the target: the rename into place is then one atomic step on the same file system
        with tempfile.TemporaryDirectory(prefix=".keras_vit_export_", dir=parent) as tmp:
            staged = os.path.join(tmp, os.path.basename(path.rstrip(os.sep)) or "export")
            content = None
            if format == "saved_model":
                graph.write_saved_model(staged, resize=True)
            elif format == "onnx":
                from keras_vit import onnx

                content = onnx.convert(cast(Any, graph), path, model.image_model.name)
            else:
                content = _with_metadata(_tflite_bytes(graph), model, labels, templates)
            if content is not None:
                with open(staged, "wb") as f:
                    f.write(content)
            out = export_runner(format, staged, content)(images)
            diff = float(np.max(np.abs(out["probabilities"] - reference)))
            report = {"format": format, "samples": int(len(images)), "max_abs_diff": diff,
                      "top1_agreement": float(np.mean(out["probabilities"].argmax(-1) == reference.argmax(-1))),
                      "labels": len(labels), "family": model.family, "image_size": list(model.image_size)}
            if diff > TOLERANCE:
                raise ValueError(f"the {format} zero-shot export differs from classify by {diff:.3g} in probability "
                                 f"(tolerance {TOLERANCE:g}) on {len(images)} images. Nothing was written to {path}.")
            if os.path.isdir(path):
                shutil.rmtree(path)
            os.replace(staged, path)
    meta = {"task": "zero-shot classification", "family": model.family, "source": model.source,
            "class_names": labels, "templates": templates, "outputs": OUTPUTS,
            "input": {"name": INPUT_NAME, "dtype": "uint8", "image_size": list(model.image_size)}, "parity": report}
    with atomic_path(metadata_path(path)) as tmp_json:
        with open(tmp_json, "w") as f:
            json.dump(meta, f, indent=2)
    log.info("exported a zero-shot %s classifier over %d labels -> %s: probabilities within %.3g of classify on "
             "%d images", model.family, len(labels), path, diff, len(images))
    return report


def _with_metadata(content: bytes, model: ImageText, labels: list[str], templates: list[str]) -> bytes:
    from keras_vit import __version__
    from keras_vit.tflite_metadata import add_metadata

    h, w = model.image_size
    score = "a sigmoid per label (SigLIP)" if model.family == "siglip" else "softmax over the labels (CLIP)"
    return add_metadata(
        content, name=f"zeroshot_{model.family}", version=f"keras-vit {__version__}",
        description=(f"a zero-shot {model.family.upper()} classifier over {len(labels)} labels, prompts "
                     f"{templates}, exported by keras-vit {__version__}."),
        class_names=labels, image_size=(h, w),
        input_description=(f"uint8 RGB images (N, {h}, {w}, 3), pixels 0-255 as decoded: feed them as they are; "
                           "the graph normalises them itself."),
        output_descriptions={"logits": f"scaled cosine similarities to the labels' embeddings, (N, {len(labels)})",
                             "probabilities": f"{score}, (N, {len(labels)})"})


def zeroshot_classifier(model: ImageText, labels: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES,
                        batch_size: int = 32) -> Any:
    """A `keras_vit.serving.Classifier` over `labels` (what `keras-vit predict --labels` runs): uint8 images in,
    {"logits", "probabilities"} out, its classes the labels.

    Example:
    >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_clip")
    >>> clf = zeroshot_classifier(model, ["cat", "dog"], templates=["a photo of a {}."])
    >>> clf.class_names, clf(np.zeros((1, 32, 32, 3), np.uint8))["probabilities"].shape
    (['cat', 'dog'], (1, 2))
    """
    from keras_vit.serving import Classifier

    classes = model.label_embeddings(labels, templates)

    def run(images: np.ndarray) -> dict[str, np.ndarray]:
        logits = model.scores(model.image_embeddings(images, batch_size), classes)
        return {"logits": logits, "probabilities": model.probabilities(logits)}

    return Classifier(model.source or "zero-shot", "keras", run, model.image_size, list(labels), fixed_size=False,
                      metadata={"task": "zero-shot classification", "templates": list(templates)})
