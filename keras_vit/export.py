"""SavedModel, TFLite and ONNX export with the preprocessing inside, checked against Keras.

An exported model takes what a camera or a decoder gives: uint8 RGB images (N, H, W, 3).
Its `serving_default` signature resizes (SavedModel only: bilinear; antialiased when
shrinking only on request, a TensorFlow-only op), scales to [-1, 1] as `preprocess_input` and returns a dict
`{"logits", "probabilities"}` (+ `"attention_0"`, ... with `attention=True`). Every export
is run once on sample images and compared with the Keras model before it is renamed into
place; the comparison (the parity report) and the class names go beside it as JSON:

    vit.tflite          the model          vit_savedmodel/      the SavedModel
    vit.tflite.json     metadata + parity  vit_savedmodel.json  (a copy also inside, in
                                                                 assets.extra/keras_vit.json)

This module writes and checks exports: TFLite conversion, the parity check, the metadata;
`vit.onnx` (+ `vit.onnx.json`) comes from keras_vit/onnx.py (tf2onnx). The serving function
and running exports (`load_classifier`, `Classifier`) live in keras_vit/serving.py, reading
image sets (`load_image_set`) in keras_vit/data.py; both are re-exported here, where they
were first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import tempfile
import warnings
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._common import refuse_unknown_keywords, to_pair
from keras_vit._files import EXPORT_FORMATS, atomic_path, export_format
from keras_vit.applications import preprocess_input, resize_images
from keras_vit.data import load_image_set  # noqa: F401 (public here too)
from keras_vit.loading import load_model
from keras_vit.serving import (  # noqa: F401 (public here too)
    FEATURES,
    INPUT_NAME,
    METADATA_NAME,
    Classifier,
    ServingGraph,
    check_exportable,
    dense_attention,
    dynamic_twin,
    float32_copy,
    litert_interpreter,
    load_classifier,
    metadata_path,
    model_format,
    onnx_classifier,
    saved_model_classifier,
    signature_name,
    tflite_classifier,
)
from keras_vit.tflite_metadata import add_metadata, output_tensor_names

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

log = logging.getLogger(__name__)

FORMATS = EXPORT_FORMATS
QUANTIZATIONS = ("float16", "dynamic", "int8", "a16w8")
CALIBRATED = ("int8", "a16w8")  # quantizations that calibrate activations on representative images
MIN_CALIBRATION_IMAGES = 100  # fewer get a warning (see _warn_few_calibration_images)
OUTPUTS = ("logits", "probabilities")
FLOAT32_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class ExportRequest:
    """What `export_model` was asked for, normalized once (an absolute `path`, the `format` it names,
    `outputs` in their order), passed whole to the steps that write and check the export."""

    path: str
    format: str
    quantize: str | None = None
    attention: bool = False
    representative_images: Any = None
    samples: Any = None
    max_samples: int = 1000
    calibration_images: int = 200
    overwrite: bool = False
    seed: int = 0
    image_sizes: Sequence[int | tuple[int, int]] | None = None
    resize: bool = True
    antialias: bool = False
    outputs: tuple[str, ...] = OUTPUTS

    @property
    def kind(self) -> str:
        """"tflite (int8)", "onnx", ...: how messages name the export."""
        return self.format + (f" ({self.quantize})" if self.quantize else "")

    @property
    def features(self) -> bool:
        """A feature extractor (outputs="features")."""
        return FEATURES in self.outputs


def _recipe_data(model_path):
    """The data source and splits a model was trained on, from the `metrics.json` that
    `keras-vit train` writes beside `model.keras`; None when there is none.

    Returns {"data": spec, "train_split": ..., "test_split": ...}.
    """
    if not isinstance(model_path, (str, os.PathLike)):
        return None
    metrics = os.path.join(os.path.dirname(os.path.abspath(os.fspath(model_path))), "metrics.json")
    if not os.path.isfile(metrics):
        return None
    try:
        with open(metrics, encoding="utf-8") as f:
            config = json.load(f).get("config") or {}
    except (OSError, ValueError, AttributeError) as e:
        log.info("cannot read %s (%s): no default data for the export", metrics, e)
        return None
    if not isinstance(config.get("data"), str):
        return None
    data = config["data"]
    try:  # a folder split by `keras-vit train` (FOLDER/<class>/*): the files it recorded, a CSV data spec
        with open(metrics, encoding="utf-8") as f:
            recorded = json.load(f).get("data_split")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and os.path.isfile(recorded):
        data = recorded
    return {"data": data, "train_split": config.get("train_split", "train"),
            "test_split": config.get("test_split", "test"), "metrics": metrics}


# ---------------------------------------------------------------------------------------
# Conversion to TFLite.


_FLEX_LIST = re.compile(r"TF Select ops: ([^\n]+)")
_FLEX_OP = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")


def _flex_ops(message):
    found = _FLEX_LIST.search(message)
    if found:
        return sorted({op.strip() for op in found.group(1).split(",") if op.strip()})
    return sorted(set(_FLEX_OP.findall(message)))


@contextlib.contextmanager
def _quiet_converter():
    # The calibrator runs the deprecated tf.lite.Interpreter inside TF; its warning is not ours to act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated")
        yield


def _convert_tflite(request, graph, calibration, sizes, quantize=None):
    """The .tflite bytes of `graph` at `sizes`, quantized as `quantize` (None: as requested; "": float)."""
    import tensorflow as tf

    path, name = request.path, graph.model.name
    quantize = request.quantize if quantize is None else quantize or None
    if quantize == "a16w8":
        return _a16w8(_convert_tflite(request, graph, None, sizes, quantize=""), calibration, sizes, name, path)

    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as tmp:
        saved = os.path.join(tmp, "saved_model")
        graph.write_saved_model(saved, resize=False, sizes=sizes)
        keys = [signature_name(i, size) for i, size in enumerate(sizes)]
        converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=keys)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        elif quantize == "int8":
            # Ops without an int8 kernel (NEG, in LayerNorm) stay float rather than failing.
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
                                                   tf.lite.OpsSet.TFLITE_BUILTINS]

            def representative():
                for image in calibration:
                    if len(sizes) == 1:
                        yield {INPUT_NAME: image[None]}
                    else:  # every signature calibrated, each on the image at its own size
                        for key, size in zip(keys, sizes):
                            yield key, {INPUT_NAME: resize_images(image[None], size)}

            converter.representative_dataset = representative
        try:
            with _quiet_converter():
                return converter.convert()
        except Exception as e:
            message = str(e)
            flex = _flex_ops(message)
            if flex:
                raise ValueError(
                    f"{name} cannot be exported to TFLite with builtin ops only: it needs the TensorFlow "
                    f"op(s) {', '.join(flex)} (Flex / Select TF ops, which the TFLite runtimes here cannot "
                    f"run). Nothing was written to {path}."
                ) from None
            first = next((line for line in message.splitlines() if "error" in line.lower()),
                         message.splitlines()[0] if message else type(e).__name__)
            what = f"{quantize} quantization" if quantize else "TFLite conversion"
            raise ValueError(f"{what} of {name} failed: {first.strip()}. Nothing was written to {path}.") from None


# LayerNorm's moments overflow int16 (the residual stream's squared deviations span more than 16 bits
# hold: 95.0% top-1 agreement with them quantized against 97.7% kept float, on the shipped CIFAR-10
# model, benchmarks/a16w8.json), so its ops stay float.
_A16W8_FLOAT_OPS = r".*(norm1|norm2|encoder_norm|fc_norm)[^/]*/.*"


def _a16w8(content, calibration, sizes, name, path):
    """The float TFLite model quantized to int16 activations and int8 weights with ai-edge-quantizer
    (LiteRT's own 16x8 mode writes SQUARED_DIFFERENCE with int16 tensors, which its runtime refuses)."""
    import copy

    try:
        from ai_edge_quantizer import quantizer, recipe
    except ImportError:
        raise ValueError("a16w8 quantization needs ai-edge-quantizer: pip install 'keras-vit[export]'. "
                         f"Nothing was written to {path}.") from None
    base = recipe.static_wi8_ai16()
    keep_float = []
    # Float outputs, computed in float: the head and the final softmax (an int16 softmax after a float
    # output, as the quantizer otherwise writes it, returns garbage probabilities); float LayerNorm.
    outputs = "|".join(re.escape(n) for n in output_tensor_names(content))
    for operation, regex in (("OUTPUT", ".*"), ("*", outputs), ("*", _A16W8_FLOAT_OPS)):
        entry = copy.deepcopy(base[0])
        entry.update(regex=regex, operation=operation, algorithm_key="no_quantize")
        keep_float.append(entry)
    keys = [signature_name(i, size) for i, size in enumerate(sizes)]
    data = {key: [{INPUT_NAME: resize_images(image[None], size)} for image in calibration]
            for key, size in zip(keys, sizes)}
    try:
        q = quantizer.Quantizer(bytes(content), list(base) + keep_float)
        with _quiet_converter(), contextlib.redirect_stderr(io.StringIO()):  # its progress bars
            # its calibrator keeps every tensor on purpose, and says so
            warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
            result = q.quantize(q.calibrate(data, num_threads=os.cpu_count() or 1), enable_progress_report=False)
    except Exception as e:
        raise ValueError(f"a16w8 quantization of {name} failed: {e}. Nothing was written to {path}.") from None
    return bytes(result.quantized_model)


def _output_names(outputs):
    """The export's outputs, in OUTPUTS order, or ("features",) for a feature extractor; refuses unknown
    names, "features" beside others, and classifier exports without probabilities."""
    names = [outputs] if isinstance(outputs, str) else list(outputs)
    unknown = [n for n in names if n not in OUTPUTS + (FEATURES,)]
    if unknown or not names:
        raise ValueError(f"unknown export output(s) {unknown or names}; choose from {OUTPUTS}, or "
                         f"{FEATURES!r} alone (a feature extractor).")
    if FEATURES in names:
        if len(names) > 1:
            raise ValueError(f"outputs {names}: {FEATURES!r} stands alone (a feature extractor returns the pooled "
                             "features only); export the classifier separately.")
        return (FEATURES,)
    if "probabilities" not in names:
        raise ValueError(f"outputs {names}: an export needs 'probabilities' (its classifier's scores); "
                         "use ['logits', 'probabilities'] for both.")
    return tuple(n for n in OUTPUTS if n in names)


def _with_tflite_metadata(request, content, graph, sizes):
    """The .tflite bytes with TFLite Model Metadata: what MediaPipe and the Task Library need to classify."""
    from keras_vit import __version__

    model = graph.model
    descriptions = {
        "logits": f"the classification head's logits, (N, {model.classes})",
        "probabilities": f"softmax of the logits, (N, {model.classes}): the classifier's scores",
        FEATURES: f"the pooled features (the head's input), (N, {_feature_dim(model)})",
    }
    descriptions.update({name: f"block {name.split('_')[1]}'s attention probabilities (N, heads, tokens, tokens)"
                         for name in graph.output_names if name.startswith("attention_")})
    h, w = sizes[0]
    return add_metadata(
        content, name=model.name, version=f"keras-vit {__version__}",
        description=(f"{model.name}: a Vision Transformer (Dosovitskiy et al., 2021) "
                     + (f"feature extractor ({_feature_dim(model)} features)" if graph.features
                        else f"classifying {model.classes} classes")
                     + f", exported by keras-vit {__version__}" + (f", {request.quantize} quantized" if request.quantize else "")
                     + "."),
        class_names=None if graph.features else getattr(model, "class_names", None), image_size=(h, w),
        input_description=(f"uint8 RGB images (N, {h}, {w}, 3), pixels 0-255 as decoded: feed them as they are "
                           f"(normalization mean 0, std 1); the graph scales them itself ({_scaling_text(model)})."),
        output_descriptions=descriptions)


def _feature_dim(model):
    """The width of the pooled features: the head's input (the pre-logits layer's, where there is one)."""
    return int(model.stage_model("images", "pre_logits").output.shape[-1])


def _view_text(model, size):
    crop = "" if model.crop_pct >= 1.0 else f"central {model.crop_pct:g} of the shorter side, "
    return f"{crop}{model.interpolation} resize to {size[0]}x{size[1]} (antialiased when shrinking)"


def _size_text(num_bytes):
    return f"{num_bytes / 2**20:.1f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.0f} KiB"


def _scaling_text(model):
    from keras_vit.applications import pixel_stats

    mean, std = pixel_stats(model)
    if mean == (0.5, 0.5, 0.5) and std == (0.5, 0.5, 0.5):
        return "x / 127.5 - 1"
    return f"(x / 255 - mean) / std, mean {list(mean)}, std {list(std)}"


def _reference(graph, images, batch_size=64, view=False):
    """The Keras model's outputs on uint8 images (at a size it takes): the parity reference. With `view`,
    the images first become the model's view of them (its crop_pct and interpolation), as an export
    that resizes in its graph sees them: computed here with TensorFlow's own resize op, so the graph's
    weight matrices are checked too."""
    import tensorflow as tf

    from keras_vit.images import model_view, view_policy

    crop_pct, interpolation = view_policy(graph.model)

    def run(x):
        if view:
            x = model_view(x, graph.image_size, crop_pct, interpolation)
        return graph(preprocess_input(x, model=graph.model))

    run = tf.function(run, input_signature=[graph.input_spec(resize=False, size=images.shape[1:3])])
    outputs = [run(tf.constant(images[i:i + batch_size])) for i in range(0, len(images), batch_size)]
    return {k: np.concatenate([o[k].numpy() for o in outputs]) for k in outputs[0]}


def _feature_parity(reference, exported, tolerance):
    ref, out = reference[FEATURES], exported[FEATURES]
    if not np.all(np.isfinite(out)):
        raise ValueError(f"the export returns non-finite {FEATURES} (NaN or inf)")
    report = {"samples": int(len(ref)), "max_abs_feature_diff": float(np.max(np.abs(ref - out)))}
    attention = sorted(k for k in reference if k.startswith("attention_"))
    if attention:
        report["max_abs_attention_diff"] = float(max(np.max(np.abs(reference[k] - exported[k])) for k in attention))
    if tolerance is not None:
        report["tolerance"] = tolerance
    return report


def _parity(reference, exported, labels, tolerance):
    if FEATURES in reference:  # a feature extractor: no classes to agree on
        return _feature_parity(reference, exported, tolerance)
    key = "logits" if "logits" in reference else "probabilities"  # a probabilities-only export
    ref, out = reference[key], exported[key]
    if not np.all(np.isfinite(out)):
        raise ValueError(f"the export returns non-finite {key} (NaN or inf)")
    agree = int(np.sum(ref.argmax(-1) == out.argmax(-1)))
    report = {"samples": int(len(ref))}
    if key == "logits":
        report["max_abs_logit_diff"] = float(np.max(np.abs(ref - out)))
    report.update({
        "max_abs_probability_diff": float(np.max(np.abs(reference["probabilities"] - exported["probabilities"]))),
        "top1_agreement": agree / len(ref),
        "top1_agreements": agree,
    })
    attention = sorted(k for k in reference if k.startswith("attention_"))
    if attention:
        report["max_abs_attention_diff"] = float(max(np.max(np.abs(reference[k] - exported[k])) for k in attention))
    if labels is not None:
        report["labelled"] = True
        report["keras_accuracy"] = float(np.mean(ref.argmax(-1) == labels))
        report["export_accuracy"] = float(np.mean(out.argmax(-1) == labels))
    if tolerance is not None:
        report["tolerance"] = tolerance
    return report


def format_parity(report):
    """One line: `max |logit diff| ..., top-1 agreement ...[, accuracy ...]` (a feature extractor's:
    `max |feature diff| ...`)."""
    if "max_abs_feature_diff" in report:
        line = f"max |feature diff| {report['max_abs_feature_diff']:.3g} ({report['samples']} images)"
        if "max_abs_attention_diff" in report:
            line += f", max |attention diff| {report['max_abs_attention_diff']:.3g}"
        return line
    key = "logit" if "max_abs_logit_diff" in report else "probability"
    line = (f"max |{key} diff| {report[f'max_abs_{key}_diff']:.3g}, top-1 agreement "
            f"{100 * report['top1_agreement']:.2f}% ({report['top1_agreements']}/{report['samples']})")
    if "max_abs_attention_diff" in report:
        line += f", max |attention diff| {report['max_abs_attention_diff']:.3g}"
    if report.get("labelled"):
        line += (f"; accuracy Keras {100 * report['keras_accuracy']:.2f}%, "
                 f"export {100 * report['export_accuracy']:.2f}%")
    return line


def _load_model(model):
    if not isinstance(model, (str, os.PathLike)):
        return model, getattr(model, "name", None)
    path = os.fspath(model)
    # a .keras file, an official .npz, a hub folder or name: the one keras_vit.load_model
    return load_model(path), path


# Over 80 lines with its docstring (the CLI's --help and the README point here); the code is ~45.
@refuse_unknown_keywords
def export_model(model: keras.Model | str | os.PathLike, path: str | os.PathLike, format: str | None = None, *,
                 quantize: str | None = None, attention: bool = False,
                 representative_images: str | os.PathLike | Sequence[str] | np.ndarray | tf.data.Dataset | None = None,
                 samples: str | os.PathLike | Sequence[str] | np.ndarray | tuple | tf.data.Dataset | None = None,
                 max_samples: int = 1000, calibration_images: int = 200, overwrite: bool = False, seed: int = 0,
                 image_sizes: Sequence[int | tuple[int, int]] | None = None, resize: bool = True,
                 antialias: bool = False, outputs: str | Sequence[str] = OUTPUTS) -> dict[str, Any]:
    """Exports a keras-vit model as a SavedModel, a TFLite or an ONNX file, checked against Keras.

    The `serving_default` signature takes uint8 RGB images (N, H, W, 3) and returns
    `{"logits", "probabilities"}` (true logits from the head, and their softmax; with
    `attention=True` also `"attention_0"`, ... (N, heads, tokens, tokens)). The SavedModel
    takes any batch and any H, W (bilinear resize inside the graph, with ops that ONNX,
    TF.js and Core ML converters take); the TFLite model takes the model's own size and any batch, with builtin ops
    only: a model that would need Flex (Select TF) ops is refused, naming the ops.

    After writing to a temporary path, the export is run on `samples` and compared with
    the Keras model (max |logit difference|, top-1 agreement, and accuracy when the
    samples are labelled); a float32 export that differs by more than 1e-4 is refused.
    Only then is it renamed onto `path`, and the metadata (class names, image size,
    outputs, quantization, the parity report) written to `PATH.json` (and, for a
    SavedModel, `PATH/assets.extra/keras_vit.json`). A TFLite file also carries TFLite
    Model Metadata (keras_vit/tflite_metadata.py: the class names as its label file, the
    uint8 input, the named outputs), which MediaPipe Tasks and the TFLite Task Library read.

    Args:
        model: a `keras_vit.VisionTransformer`, or what `keras_vit.load_model` opens: a `.keras`
            file, an official `.npz`, a timm / transformers hub folder or a hub name. A model
            built under mixed_bfloat16 is exported from a float32 copy of its weights.
        path: the SavedModel folder, the `.tflite` or the `.onnx` file to write.
        format: "saved_model", "tflite" or "onnx" (tf2onnx's conversion of the SavedModel's
            graph, resize inside, checked in ONNX Runtime; the `onnx` extra); default from
            `path` (".tflite", ".onnx", else a SavedModel folder).
        quantize: TFLite only: None (float32), "float16", "dynamic" (int8 weights),
            "int8" (int8 weights and activations, calibrated on `representative_images`) or
            "a16w8" (int8 weights, int16 activations, calibrated the same way; LayerNorm,
            the head and the final softmax stay float; needs ai-edge-quantizer, the `export`
            extra).
        attention: also output each block's attention maps.
        representative_images: calibration images for int8: a folder, a data source of
            `keras_vit.data` (its "train" split), image files, an array or a
            tf.data.Dataset (see `load_image_set`). Default: the training split of the
            model's own data, named in the `metrics.json` that `keras-vit train` writes
            beside `model.keras`.
        samples: images for the parity check, in the same forms (a data source's "test"
            split); labelled ones (class folders, data sources, (images, labels)) add
            accuracy. Default: the model's own test split (as above); when it is named but
            cannot be read, a FileNotFoundError; without a metrics.json, 32 images of
            random pixels, labelled as such in the report and warned about.
        max_samples: at most this many samples (a random subset of a larger folder).
        calibration_images: at most this many representative images; calibrating on fewer than
            100 logs a warning (the activation ranges may miss real images).
        overwrite: replace an existing export (and its JSON).
        image_sizes: the sizes the export serves, ints or (h, w). TFLite: one signature per
            size, `serving_default` the first, `serving_HxW` the others (default: the
            model's size). A SavedModel with `resize=False`: the sizes its parity is checked
            at (default: the model's and one 2 patches larger). A model built for one size
            serves others from a copy that resamples its position embeddings in the graph
            (`dynamic_image_size=True`).
        resize: SavedModel only: False serves each batch at its own size (multiples of the
            patch size; no resize in the graph), as a model of any size does in Keras.
        antialias: SavedModel only: antialias the resize where it shrinks (TensorFlow's
            ScaleAndTranslate op). TensorFlow-only: tf2onnx, tensorflowjs_converter and
            coremltools refuse that op.
        outputs: which of "logits" and "probabilities" the export returns: "probabilities"
            (or ["probabilities"]) makes a single-output classifier, as MediaPipe's
            ImageClassifier and the TFLite Task Library expect. "features" alone makes a
            feature extractor: its one output `features` is the pooled representation (N, D),
            the head's input (`model.stage_model("images", "pre_logits")`; for a headless
            backbone such as DINOv2, its pooled output), checked against Keras to 1e-4 in float32;
            a model without a head (include_top=False) exports this way only.

    Returns:
        The metadata dict written to `PATH.json`, with the parity report under "parity".

    Example:
    >>> metadata = export_model("saved_models/vit_cifar10/model.keras", "vit.tflite",
    ...                         samples="tests/data/cifar10_sample")
    >>> metadata["format"], metadata["image_size"], metadata["parity"]["top1_agreement"]
    ('tflite', [32, 32], 1.0)
    >>> metadata["parity"]["max_abs_logit_diff"] < 1e-4
    True
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            f"export_model traces the model into TensorFlow graphs, which needs KERAS_BACKEND=tensorflow, not "
            f"{keras.backend.backend()!r}: a .keras file written under any backend exports under it "
            "(`keras-vit export` starts that process by itself).")
    path = os.path.abspath(os.fspath(path)).rstrip(os.sep)
    request = ExportRequest(
        path=path, format=export_format(path, format), quantize=quantize, attention=attention,
        representative_images=representative_images, samples=samples, max_samples=max_samples,
        calibration_images=calibration_images, overwrite=overwrite, seed=seed, image_sizes=image_sizes,
        resize=resize, antialias=antialias, outputs=_output_names(outputs))
    recipe = _recipe_data(model)
    meta_path = _check_request(request, recipe)

    model, source = _load_model(model)
    native = check_exportable(model, features=request.features)
    sizes = _export_sizes(request, model, native)
    log.info("exporting %s to %s: %s%s", model.name, path, request.kind,
             "" if sizes == [native] else ", sizes " + ", ".join(f"{h}x{w}" for h, w in sizes))
    model = float32_copy(model)
    if sizes != [native] or not resize:
        model = dynamic_twin(model)
    # The dense form: converters and on-device runtimes take it (the chunked form's loops are TensorFlow
    # control flow), and an export serves the sizes it was built for.
    with dense_attention(model):
        graph = ServingGraph(model, attention=attention, outputs=request.outputs)
        sample_split, calibration_split = "test", "train"
        if recipe is not None:
            sample_split, calibration_split = recipe["test_split"], recipe["train_split"]
        sample_images, labels, sample_source = _sample_images(request, model, graph.image_size, recipe, sample_split)
        calibration = calibration_source = None
        if quantize in CALIBRATED:
            if representative_images is None:
                log.info("representative images: the %s split of %s, the model's training data (%s)",
                         calibration_split, recipe["data"], recipe["metrics"])
                representative_images = recipe["data"]
            calibration, _, calibration_source = load_image_set(
                representative_images, graph.image_size, labelled=False, split=calibration_split,
                max_images=calibration_images, seed=seed + 1, what="representative images")
            _warn_few_calibration_images(quantize, len(calibration), calibration_source, calibration_images)

        suffix = {"tflite": ".tflite", "onnx": ".onnx"}.get(request.format, "")
        with atomic_path(path, overwrite=overwrite, suffix=suffix) as tmp:
            exported = _write_export(request, graph, tmp, sizes, calibration, calibration_source)
            reports = {}
            for i, size in enumerate(sizes):
                images = sample_images if size == graph.image_size else resize_images(sample_images, size)
                run = exported[i] if request.format == "tflite" else exported[0]
                log.info("checking parity against Keras on %d images from %s%s", len(images), sample_source,
                         "" if len(sizes) == 1 else f" at {size[0]}x{size[1]}")
                reports[size] = _check_parity(request, graph, run, images, labels)
            report = dict(reports[sizes[0]], sample_source=sample_source)
            metadata = _metadata(request, graph, source, report, sizes)
            if request.format == "onnx":
                metadata.update(_onnx_metadata())
            if len(sizes) > 1:
                metadata["parity_by_size"] = {f"{h}x{w}": r for (h, w), r in reports.items()}
            if calibration is not None:
                metadata["calibration"] = {"images": int(len(calibration)), "source": calibration_source}
            text = json.dumps(metadata, indent=2) + "\n"
            if request.format == "saved_model":
                os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
                with open(os.path.join(tmp, "assets.extra", METADATA_NAME), "w", encoding="utf-8") as f:
                    f.write(text)
            del exported
        with atomic_path(meta_path, overwrite=True) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
        log.info("wrote %s and %s", path, meta_path)
        return metadata


def _warn_few_calibration_images(quantize, count, source, limit):
    """A warning for a calibration set too small to find the activations' ranges. Issue 35 reported the
    README's int8 example (20 images) 10 points down; on the shipped CIFAR-10 model, checked on 2,000
    test images, 20 images gave max |logit diff| 1.21 and 71.45% (Keras 71.70%), 200 gave 0.725 and 71.75%."""
    if count >= MIN_CALIBRATION_IMAGES:
        return
    if limit is not None and limit < MIN_CALIBRATION_IMAGES:
        more = f"raise calibration_images (--calibration-images, now {limit}) to {MIN_CALIBRATION_IMAGES} or more"
    else:
        more = (f"pass {MIN_CALIBRATION_IMAGES} or more representative images (representative_images=, "
                "--representative IMAGES: a folder, or a data source such as the model's training data)")
    log.warning("%s quantization calibrates on only %d image(s) from %s, fewer than %d: the quantized activation "
                "ranges may not cover real images, and accuracy may drop; %s.",
                quantize, count, source, MIN_CALIBRATION_IMAGES, more)


def _check_request(request, recipe):
    """Refuses a bad request before any work; returns the metadata path."""
    path, format, quantize, resize, image_sizes = (request.path, request.format, request.quantize, request.resize,
                                                   request.image_sizes)
    if not resize and format != "saved_model":
        raise ValueError("resize=False (--no-resize) applies to SavedModels; a TFLite export takes the sizes it "
                         "serves as given (image_sizes, --image-size).")
    if image_sizes and format == "saved_model" and resize:
        raise ValueError("image_sizes (--image-size) for a SavedModel needs resize=False (--no-resize): with "
                         "resizing, it takes any size and resizes it to the model's.")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantize!r}; use one of {QUANTIZATIONS}.")
    if quantize and format != "tflite":
        raise ValueError(f"quantization ({quantize}) applies to TFLite exports only, not {format}.")
    if quantize in CALIBRATED and request.representative_images is None and recipe is None:
        raise ValueError(f"{quantize} quantization needs representative images to calibrate on (--representative IMAGES); "
                         "a model without the metrics.json of `keras-vit train` beside it has no data of its own.")
    if format == "tflite":
        litert_interpreter()
    meta_path = metadata_path(path)
    for target in (path, meta_path):
        if os.path.exists(target) and not request.overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True (--overwrite) to replace it.")
    _check_antialias(format, resize, request.antialias)
    if format == "onnx":
        _check_onnx(image_sizes)
    return meta_path


def _check_antialias(format, resize, antialias):
    if antialias and (format != "saved_model" or not resize):
        raise ValueError("antialias (--antialias) applies to a SavedModel that resizes in its graph; "
                         f"this {format} export has no resize in its graph.")


def _check_onnx(image_sizes):
    """An ONNX export resizes in its graph, as the default SavedModel; tf2onnx and ONNX Runtime are there."""
    from keras_vit._optional import require

    if image_sizes:
        raise ValueError("image_sizes (--image-size) do not apply to an ONNX export: it takes any size and "
                         "resizes it to the model's.")
    require("tf2onnx", "onnx", what="ONNX export")
    require("onnxruntime", "onnx", what="the ONNX export's check in ONNX Runtime")


def _onnx_metadata():
    from keras_vit import onnx

    return {"signatures": None, "onnx": onnx.versions()}


def _sample_images(request, model, image_size, recipe, split):
    """The parity check's images: given, else the model's own test split (refused when it cannot be read),
    else, for a model without metrics.json, random pixels with a warning. A feature extractor's
    are read without labels: it has no classes to match folders with."""
    class_names = getattr(model, "class_names", None)
    samples, max_samples, seed = request.samples, request.max_samples, request.seed
    if samples is not None:
        if request.features:
            images, _, source = load_image_set(samples, image_size, labelled=False, split=split,
                                               max_images=max_samples, seed=seed, what="samples")
            return images, None, source
        return load_image_set(samples, image_size, class_names=class_names, classes=model.classes, split=split,
                              max_images=max_samples, seed=seed, what="samples")
    if recipe is not None:
        # The model's own test data, as its recipe (metrics.json) names it, when it can be read here.
        log.info("samples: the %s split of %s, the model's data (%s)", split, recipe["data"], recipe["metrics"])
        try:
            return load_image_set(recipe["data"], image_size, class_names=class_names, classes=model.classes,
                                  split=split, max_images=max_samples, seed=seed, what="samples")
        except (ValueError, FileNotFoundError) as e:
            # a parity check on random pixels would pass for a model that is wrong on real images
            raise FileNotFoundError(
                f"samples: the model's own {split} data ({recipe['data']}, named in {recipe['metrics']}) "
                f"cannot be read here ({e}); pass samples (--samples IMAGES, e.g. tests/data/cifar10_sample) "
                "to check the export on real images.") from None
    images = np.random.default_rng(seed).integers(0, 256, (32,) + image_size + (3,), dtype=np.uint8)
    log.warning("no sample images and no metrics.json beside the model: parity is checked on RANDOM PIXELS "
                "only (pass samples, --samples IMAGES, for real images and accuracy)")
    return images, None, "32 images of random pixels (no samples given)"


def _export_sizes(request, model, native):
    """The sizes an export serves (and is checked at): [(h, w), ...], the first the default."""
    format, image_sizes, resize = request.format, request.image_sizes, request.resize
    grid = model.patch_encoder.grid_size
    step = (native[0] // grid[0], native[1] // grid[1])  # the effective patch size
    if not image_sizes:
        if format == "saved_model" and not resize:
            return [native, (native[0] + 2 * step[0], native[1] + 2 * step[1])]
        return [native]
    sizes = []
    for size in image_sizes:
        size = to_pair(size, "image size")
        if size not in sizes:
            sizes.append(size)
    bad = [f"{h}x{w}" for h, w in sizes if h % step[0] or w % step[1]]
    if bad:
        raise ValueError(f"image size(s) {', '.join(bad)} are not multiples of {model.name!r}'s patch size "
                         f"{step[0]}x{step[1]}.")
    return sizes


def _write_export(request, graph, tmp, sizes, calibration, calibration_source):
    """Writes the SavedModel or the .tflite file to `tmp`; the export, loaded as a Classifier per signature."""
    format, quantize, path, name = request.format, request.quantize, request.path, graph.model.name
    if format == "onnx":
        from keras_vit import onnx

        log.info("converting the SavedModel to ONNX (tf2onnx, opset %d)", onnx.OPSET)
        content = onnx.convert(graph, path, name)
        with open(tmp, "wb") as f:
            f.write(content)
        log.info("converted: %s; images uint8 (batch, height, width, 3), resized inside -> %s",
                 _size_text(len(content)), ", ".join(graph.output_names))
        return [onnx_classifier(tmp, {}, content=content)]
    if format == "saved_model":
        graph.write_saved_model(tmp, resize=request.resize, antialias=request.antialias)
        log.info("wrote the SavedModel: serving_default takes uint8 images of any size%s -> %s",
                 "" if request.resize else " (multiples of the patch size, no resize)", ", ".join(graph.output_names))
        return [saved_model_classifier(tmp, {})]
    if calibration is not None:
        log.info("converting to TFLite (builtin ops, %s), calibrating on %d images from %s",
                 quantize, len(calibration), calibration_source)
    else:
        log.info("converting to TFLite (builtin ops%s)", f", {quantize}" if quantize else "")
    content = _convert_tflite(request, graph, calibration, sizes)
    content = _with_tflite_metadata(request, content, graph, sizes)
    with open(tmp, "wb") as f:
        f.write(content)
    log.info("converted: %s; %s -> %s", _size_text(len(content)), ", ".join(
        f"{signature_name(i, size)} takes uint8 (N, {size[0]}, {size[1]}, 3)" for i, size in enumerate(sizes)),
        ", ".join(graph.output_names))
    return [tflite_classifier(tmp, {}, content=content, signature=signature_name(i, size))
            for i, size in enumerate(sizes)]


def _check_parity(request, graph, exported, images, labels):
    """Runs the export and the Keras model on `images`; the parity report, or a refusal. An export that
    resizes in its graph (not TFLite) is compared with the model's view of the images."""
    kind, quantize, format, name, path = request.kind, request.quantize, request.format, graph.model.name, request.path
    reference = _reference(graph, images, view=format != "tflite" and request.resize)
    try:
        outputs = exported(images)
    except Exception as e:
        raise ValueError(f"the {kind} export of {name} does not run: {e}. Nothing was written to {path}.") from None
    missing = set(graph.output_names) - set(outputs)
    if missing:
        raise ValueError(f"the {kind} export lacks the outputs {sorted(missing)}. Nothing was written to {path}.")
    tolerance = None if quantize else FLOAT32_TOLERANCE
    try:
        report = _parity(reference, outputs, labels, tolerance)
    except ValueError as e:
        raise ValueError(f"the {kind} export of {name}: {e}. Nothing was written to {path}.") from None
    log.info("parity: %s", format_parity(report))
    key, what = next((k, w) for k, w in (("feature", FEATURES), ("logit", "logits"), ("probability", "probabilities"))
                     if f"max_abs_{k}_diff" in report)
    if tolerance is not None and report[f"max_abs_{key}_diff"] > tolerance:
        raise ValueError(
            f"the float32 {format} export of {name} differs from Keras by "
            f"{report[f'max_abs_{key}_diff']:.3g} in the {what} (tolerance {tolerance:g}). "
            f"Nothing was written to {path}."
        )
    return report


def _metadata(request, graph, source, report, sizes):
    """What goes beside an export as JSON: its input, preprocessing, outputs, classes and parity."""
    from keras_vit import __version__

    model, format = graph.model, request.format
    image_size = sizes[0] if format == "tflite" else graph.image_size
    resizes = format != "tflite" and request.resize
    return {
        "keras_vit": __version__,
        "format": format,
        "quantization": request.quantize,
        "source": source,
        "image_size": list(image_size),
        "input": {"name": INPUT_NAME, "dtype": "uint8",
                  "shape": [None, *image_size, 3] if format == "tflite" else [None, None, None, 3]},
        "signatures": ({signature_name(i, size): [None, *size, 3] for i, size in enumerate(sizes)}
                       if format == "tflite" else {"serving_default": [None, None, None, 3]}),
        "resize": resizes,
        "preprocessing": (_view_text(model, image_size) + ", " if resizes else "") + _scaling_text(model),
        # the model's view of an image of another size: in the graph when it resizes, else the caller's
        # (keras-vit predict applies it before a .tflite file): keras_vit.images.model_view
        "crop_pct": float(model.crop_pct),
        "interpolation": model.interpolation,
        "outputs": graph.output_names,
        # a feature extractor has no classes (even where the model has a head): its output is the head's input
        "classes": None if graph.features else int(model.classes),
        "class_names": None if graph.features else getattr(model, "class_names", None),
        **({"feature_dim": _feature_dim(model)} if graph.features else {}),
        "parity": report,
    }
