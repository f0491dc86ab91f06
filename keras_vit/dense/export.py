"""Dense models as SavedModel, TFLite (float32, float16, int8) and ONNX, checked against Keras before
they land.

The serving function takes uint8 RGB images (N, H, W, 3) of any size (SavedModel, ONNX; TFLite: the
model's size), resizes them to the model's input size (bilinear) and normalizes them as the backbone's
pixel statistics say; it returns `logits` (N, h, w, classes) and `classes` (N, h, w) int32 for
segmentation, `depth` (N, h, w) for depth, at the model's output size. Each export runs on sample pairs
beside the Keras model before it is renamed into place: max |diff| relative to the output's scale
(float exports within 1e-4), and for segmentation the pixels whose class agrees and the mIoU of both
against the masks (float16 and int8 within 1 point of Keras', else refused). `PATH.json` beside the export holds
the class names and the parity report.

Example:
>>> report = export_dense("runs/seg_fashion/model.keras", "seg.tflite", quantize="int8")
>>> report["miou_drop"] <= 0.01
True
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from typing import Any, Sequence, cast

import keras
import numpy as np

import keras_vit.dense.data as dense_data
import keras_vit.dense.losses as dense_losses
from keras_vit._files import atomic_path
from keras_vit.dense.model import DensePredictor
from keras_vit.serving import INPUT_NAME, dense_attention, float32_copy, metadata_path
from keras_vit.serving import export_runner as _runner

log = logging.getLogger(__name__)

FORMATS = ("saved_model", "tflite", "onnx")
QUANTIZE = ("float16", "int8")
FLOAT_TOLERANCE = 1e-4  # relative to the output's scale, max(1, max |reference|)
INT8_MIOU_DROP = 0.01  # the int8 export's mIoU may fall at most 1 point below Keras'


class DenseServingGraph:
    """The serving function of a DensePredictor: uint8 images -> resize -> normalize -> the model's own
    layers -> {"logits", "classes"} or {"depth"}. The protocol keras_vit.onnx.convert takes."""

    def __init__(self, model: DensePredictor):
        self.model = model
        self.image_size = tuple(model.image_size)
        self.task = model.task

    @property
    def output_names(self) -> list[str]:
        return ["logits", "classes"] if self.task == "segmentation" else ["depth"]

    def __call__(self, x: Any) -> dict[str, Any]:
        import tensorflow as tf

        y = tf.cast(self.model(x, training=False), tf.float32)
        if self.task == "segmentation":
            return {"logits": y, "classes": tf.argmax(y, axis=-1, output_type=tf.int32)}
        return {"depth": y}

    def preprocess(self, images: Any, resize: bool = True) -> Any:
        import tensorflow as tf

        from keras_vit.data import OFFICIAL_STATS, to_model_range

        x = tf.cast(images, tf.float32)
        if resize:
            x = tf.image.resize(x, self.image_size, method="bilinear")
            x.set_shape((None,) + self.image_size + (3,))
        return to_model_range(x, self.model.pixel_mean or OFFICIAL_STATS, self.model.pixel_std or OFFICIAL_STATS)

    def serving_function(self, resize: bool, antialias: bool = False) -> Any:
        def serve(images):
            return self(self.preprocess(images, resize))

        return serve

    def write_saved_model(self, path: str, resize: bool, sizes: Sequence[Any] | None = None,
                          antialias: bool = False) -> None:
        import tensorflow as tf

        archive = keras.export.ExportArchive()
        archive.track(self.model)
        shape = (None, None, None, 3) if resize else (None,) + self.image_size + (3,)
        archive.add_endpoint("serving_default", self.serving_function(resize),
                             input_signature=[tf.TensorSpec(shape, tf.uint8, name=INPUT_NAME)])
        archive.write_out(path, verbose=False)


def _format_of(path: str, format: str | None) -> str:
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"format {format!r}: use one of {FORMATS}.")
        return format
    if path.endswith(".tflite"):
        return "tflite"
    if path.endswith(".onnx"):
        return "onnx"
    if os.path.splitext(path)[1]:
        raise ValueError(f"{path}: a .tflite or .onnx file, or a SavedModel folder (a name without an extension).")
    return "saved_model"


def _tflite_bytes(graph: DenseServingGraph, quantize: str | None, calibration: np.ndarray | None) -> bytes:
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="keras_vit_dense_") as tmp:
        saved = os.path.join(tmp, "saved_model")
        graph.write_saved_model(saved, resize=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        elif quantize == "int8":
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                                   tf.lite.OpsSet.TFLITE_BUILTINS]

            def representative():
                for image in calibration:
                    yield {INPUT_NAME: image[None]}

            converter.representative_dataset = representative
        with warnings.catch_warnings():  # the calibrator runs TF's deprecated interpreter: not ours to act on
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
            return converter.convert()


def _samples(model: DensePredictor, source: Any, max_samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """uint8 images at the model's size and their targets (resized nearest), from a DenseSplit, a dense
    folder, (images, targets) arrays, or the model's own test data (metrics.json beside a .keras file)."""
    if isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(".npz"):
        split = dense_data.load_pairs_npz(source, model.task, model.class_names)
    elif isinstance(source, tuple):
        split = dense_data.from_arrays(source[0], source[1], model.task, model.class_names)
    elif isinstance(source, dense_data.DenseSplit):
        split = source
    else:
        splits = dense_data.load_dense_folder(source, model.task)
        split = splits["test"]
    if len(split) > max_samples:
        split = split.subset(sorted(np.random.default_rng(seed).permutation(len(split))[:max_samples]))
    images, targets = [], []
    for x, y in dense_data.make_dense_dataset(split, model.image_size, 32, training=False, scaled=False):
        images.append(np.round(np.asarray(x)).astype(np.uint8))
        targets.append(np.asarray(y))
    return np.concatenate(images), np.concatenate(targets)


def _recipe_samples(model_path: str | None) -> Any:
    """The test split of the run that wrote `model_path` (its metrics.json's config), or None."""
    if not model_path:
        return None
    record = os.path.join(os.path.dirname(os.path.abspath(model_path)), "metrics.json")
    if not os.path.isfile(record):
        return None
    with open(record) as f:
        config = json.load(f).get("config")
    if not config or config.get("objective") not in dense_data.TASKS:
        return None
    from keras_vit.dense.training import dense_splits

    return dense_splits(config)[2]


def _scores(model: DensePredictor, outputs: np.ndarray, targets: np.ndarray | None) -> dict[str, Any]:
    if targets is None or model.task != "segmentation":
        return {}
    classes = int(model.head_config.classes or 0)
    predicted = outputs.argmax(-1)
    confusion = dense_losses.confusion_matrix(targets, predicted, classes)
    return {"miou": dense_losses.segmentation_scores(confusion, model.class_names)["miou"]}


def _parity(graph: DenseServingGraph, run: Any, images: np.ndarray, targets: np.ndarray | None,
            quantize: str | None) -> dict[str, Any]:
    import tensorflow as tf

    model = graph.model
    reference = np.concatenate([np.asarray(graph(graph.preprocess(tf.constant(images[i:i + 32]), resize=False))[
        graph.output_names[0]]) for i in range(0, len(images), 32)])
    exported = run(images)
    got = np.asarray(exported[graph.output_names[0]], np.float32)
    if got.shape != reference.shape:
        raise ValueError(f"the export's {graph.output_names[0]} is {got.shape}, Keras' {reference.shape}.")
    scale = max(1.0, float(np.abs(reference).max()))
    report: dict[str, Any] = {"samples": int(len(images)), "max_abs_diff": float(np.abs(got - reference).max()),
                              "relative_max_abs_diff": float(np.abs(got - reference).max() / scale)}
    if model.task == "segmentation":
        report["class_agreement"] = float(np.mean(got.argmax(-1) == reference.argmax(-1)))
        if "classes" in exported:
            report["classes_match_logits"] = bool(np.array_equal(np.asarray(exported["classes"]), got.argmax(-1)))
        keras_scores, export_scores = _scores(model, reference, targets), _scores(model, got, targets)
        if keras_scores:
            report.update(keras_miou=keras_scores["miou"], export_miou=export_scores["miou"],
                          miou_drop=keras_scores["miou"] - export_scores["miou"])
    return report


def export_dense(model: DensePredictor | str | os.PathLike, path: str | os.PathLike, format: str | None = None, *,
                 quantize: str | None = None, samples: Any = None, representative: Any = None,
                 max_samples: int = 200, calibration_images: int = 200, overwrite: bool = False) -> dict[str, Any]:
    """Exports a DensePredictor (or its .keras file); returns the parity report (also in PATH.json).

    `samples`: pairs for the parity check (a dense folder, a .npz of `images` and `targets`, a DenseSplit,
    (images, targets) arrays);
    default the model's own test data, from the metrics.json of `keras-vit train` beside its file.
    `representative`: int8's calibration images (the same kinds; default: the samples).
    Raises ValueError, writing nothing, when the export differs from Keras past the tolerance (float
    exports 1e-4 relative; float16 and int8 segmentation: mIoU more than 1 point below Keras').

    Example:
    >>> head = keras_vit.DenseHead(kind="linear", task="segmentation", taps=(1,), final_norm=True, classes=3)
    >>> model = keras_vit.DensePredictor(keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=16,
    ...                                  num_layers=1, num_heads=2, mlp_dim=32), head)
    >>> pairs = (np.random.default_rng(0).integers(0, 255, (4, 32, 32, 3), dtype=np.uint8), np.zeros((4, 32, 32)))
    >>> report = export_dense(model, "seg.tflite", samples=pairs)
    >>> report["relative_max_abs_diff"] < 1e-4, report["class_agreement"]
    (True, 1.0)
    """
    model_path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    loaded = keras.saving.load_model(model_path, compile=False) if model_path is not None else model
    if not isinstance(loaded, DensePredictor):
        raise ValueError(f"export_dense exports a DensePredictor, got {type(loaded).__name__}; classifiers export "
                         "with keras_vit.export.export_model.")
    return _export(loaded, os.fspath(path), format, quantize, samples, representative, max_samples,
                   calibration_images, overwrite, model_path)


def _export(model: DensePredictor, path: str, format: str | None, quantize: str | None, samples: Any,
            representative: Any, max_samples: int, calibration_images: int, overwrite: bool,
            model_path: str | None) -> dict[str, Any]:
    format = _format_of(path, format)
    if quantize is not None and (format != "tflite" or quantize not in QUANTIZE):
        raise ValueError(f"quantize={quantize!r}: TFLite takes {QUANTIZE}; {format} exports are float32.")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it.")
    if keras.backend.backend() != "tensorflow":
        raise ValueError("exports are TensorFlow graphs: run under KERAS_BACKEND=tensorflow (`keras-vit export` "
                         "does this itself).")
    source = samples if samples is not None else _recipe_samples(model_path)
    if source is None:
        raise ValueError("export_dense checks the export on sample pairs: pass samples= (--samples FOLDER of "
                         "images/ and masks/ or depth/), or export a .keras file that `keras-vit train` wrote beside "
                         "its metrics.json.")
    images, targets = _samples(model, source, max_samples)
    calibration = None
    if quantize == "int8":
        calibration = (images if representative is None else _samples(model, representative, calibration_images)[0])
        calibration = calibration[:calibration_images]
    model = cast(DensePredictor, float32_copy(model))
    with dense_attention(model):
        graph = DenseServingGraph(model)
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

                content = onnx.convert(cast(Any, graph), path, model.name)  # ServingGraph's protocol
            else:
                content = _tflite_bytes(graph, quantize, calibration)
            if content is not None:
                with open(staged, "wb") as f:
                    f.write(content)
            report = _parity(graph, _runner(format, staged, content), images, targets, quantize)
            report.update(format=format, quantize=quantize, task=model.task, image_size=list(model.image_size))
            _check(report, model, path, quantize)
            if os.path.isdir(path):
                shutil.rmtree(path)
            os.replace(staged, path)
    meta = {"task": model.task, "class_names": model.class_names, "outputs": graph.output_names,
            "input": {"name": INPUT_NAME, "dtype": "uint8", "image_size": list(model.image_size)}, "parity": report}
    with atomic_path(metadata_path(path)) as tmp_json:
        with open(tmp_json, "w") as f:
            json.dump(meta, f, indent=2)
    log.info("exported %s -> %s: %s", model.name, path, format_report(report))
    return report


def _check(report: dict[str, Any], model: DensePredictor, path: str, quantize: str | None) -> None:
    if not quantize and report["relative_max_abs_diff"] > FLOAT_TOLERANCE:
        raise ValueError(f"the float32 {report['format']} export of {model.name} differs from Keras by "
                         f"{report['relative_max_abs_diff']:.3g} (relative; tolerance {FLOAT_TOLERANCE:g}). Nothing "
                         f"was written to {path}.")
    if quantize and "miou_drop" in report and report["miou_drop"] > INT8_MIOU_DROP:
        raise ValueError(f"the {quantize} TFLite export of {model.name} scores mIoU {report['export_miou']:.4f} "
                         f"against Keras' {report['keras_miou']:.4f}, more than {INT8_MIOU_DROP * 100:g} point below. "
                         f"Nothing was written to {path}"
                         f"{'; export float16 instead' if quantize == 'int8' else ''}.")


def format_report(report: dict[str, Any]) -> str:
    parts = [f"max |diff| {report['max_abs_diff']:.3g} ({report['relative_max_abs_diff']:.3g} relative)"]
    if "class_agreement" in report:
        parts.append(f"pixel classes agree {report['class_agreement']:.2%}")
    if "keras_miou" in report:
        parts.append(f"mIoU {report['export_miou']:.4f} vs Keras {report['keras_miou']:.4f}")
    return f"{', '.join(parts)} on {report['samples']} samples"
