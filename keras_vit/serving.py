"""Serving: the exported models' function, and running any keras-vit model file the same way.

`ServingGraph` is the one serving function (uint8 images -> resize -> `preprocess_input` ->
the model's own layers -> `{"logits", "probabilities"[, "attention_i"]}`) that the SavedModel,
the TFLite conversion and `.keras` prediction all use. `load_classifier` runs a `.keras` file,
a SavedModel or a `.tflite` file behind one `Classifier` interface (`keras-vit predict`).
Writing and checking exports is keras_vit/export.py's job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import zipfile
from typing import Any, Callable, Sequence

import numpy as np

from keras_vit._common import refuse_unknown_keywords
from keras_vit.applications import decode_predictions, preprocess_input, resize_images
from keras_vit.loading import load_model

log = logging.getLogger(__name__)

METADATA_NAME = "keras_vit.json"  # inside a SavedModel, under assets.extra/
INPUT_NAME = "images"
# The output of a feature-extractor export (outputs="features"): the pooled representation, (N, D).
FEATURES = "features"


def metadata_path(path):
    """Where the metadata and parity report of an export live: `PATH.json` beside it."""
    return os.path.abspath(os.fspath(path)).rstrip(os.sep) + ".json"


# ---------------------------------------------------------------------------------------
# The serving function: one definition for the SavedModel, TFLite and `.keras` prediction.


def float32_copy(model):
    """The model itself in float32, or a float32 twin with its weights (TFLite cannot take
    a mixed_bfloat16 graph, and parity is defined against float32 numerics)."""
    import keras

    if all(getattr(layer, "compute_dtype", "float32") == "float32" for layer in model.layers):
        return model
    log.info("%s computes in %s: exporting a float32 copy of its weights",
             model.name, model.dtype_policy.name)
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        twin = type(model).from_config(model.get_config())
    finally:
        keras.config.set_dtype_policy(policy)
    if tuple(twin.input_shape) != tuple(model.input_shape):
        raise ValueError(
            f"{model.name!r} was built on an input_tensor of shape {model.input_shape}, which its config cannot "
            "rebuild in float32; build it under the float32 policy to export it."
        )
    twin.set_weights([np.asarray(w, "float32") for w in model.get_weights()])
    return twin


def check_exportable(model, features=False):
    """The size a model serves at, or a ValueError naming why it cannot be exported; with `features`, a
    headless model (include_top=False) is fine: the export returns its pooled features."""
    from keras_vit.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"expected a keras_vit.VisionTransformer, got {type(model).__name__} {getattr(model, 'name', '')!r}."
        )
    if not model.include_top and not features:
        raise ValueError(
            f"{model.name!r} has no classification head (include_top=False), and a classifier export's outputs "
            "are logits and probabilities: export its pooled features instead with outputs='features' "
            "(--outputs features)."
        )
    shape = tuple(model.input_shape)
    if len(shape) == 4 and shape[-1] != 3:
        raise ValueError(
            f"{model.name!r} takes {shape[-1]}-channel images; exports serve uint8 RGB images (3 channels), "
            "so only 3-channel models can be exported."
        )
    if len(shape) != 4 or shape[-1] != 3 or (None in shape[1:3] and not model.dynamic_image_size):
        raise ValueError(f"{model.name!r} takes inputs of shape {shape}; expected (batch, height, width, 3).")
    # the input's own size (a model built on an input_tensor may resize inside), else the stored grid's
    return tuple(model.image_size) if None in shape[1:3] else (shape[1], shape[2])


def dynamic_twin(model):
    """The model itself when it takes any size, else a copy with `dynamic_image_size=True` and its weights.

    Exports that serve several sizes run it: position embeddings resampled in the graph.
    """
    if model.dynamic_image_size:
        return model
    log.info("%s is built for %dx%d: serving other sizes from a copy that resamples its position embeddings "
             "in the graph", model.name, *model.image_size)
    twin = type(model).from_config({**model.get_config(), "dynamic_image_size": True})
    twin.set_weights(model.get_weights())
    return twin


@contextlib.contextmanager
def dense_attention(model):
    """Every block of `model` computes its attention in the dense form ("matmul") inside the block, and as
    before after it: exports trace the dense form."""
    blocks = [layer for layer in model.layers if hasattr(layer, "attention_layer")]
    saved = [block.attention_implementation for block in blocks]
    try:
        for block in blocks:
            block.attention_implementation = "matmul"
        yield model
    finally:
        for block, implementation in zip(blocks, saved):
            block.attention_implementation = implementation


def signature_name(index, size):
    """serving_default for the first size of an export, serving_HxW for the others."""
    return "serving_default" if index == 0 else f"serving_{size[0]}x{size[1]}"


class ServingGraph:
    """The model's layers rewired for serving: true logits (from the head, before any
    `predictions` activation) and, on request, every block's attention probabilities;
    `outputs` keeps only some of logits and probabilities (e.g. ("probabilities",) for a
    single-output classifier), or is ("features",): a feature extractor returning the pooled
    representation (the head's input, `stage_model("images", "pre_logits")`), headless models too.
    No numerics are re-implemented: the model's own layers run."""

    def __init__(self, model, attention=False, outputs=("logits", "probabilities")):
        self.model = model
        self.outputs = tuple(outputs)
        self.features = FEATURES in self.outputs
        self.image_size = check_exportable(model, features=self.features)
        # the model's feature API (VisionTransformer.stage_model / forward_blocks), not layer names
        end = "pre_logits" if self.features else "logits"
        self.body = model.stage_model("images", end)
        self.attention = bool(attention)
        if self.attention:
            self._stem = model.stage_model("images", "embedded")
            self._num_blocks = model.num_layers
            self._tail = model.stage_model("encoded", end)

    @property
    def output_names(self):
        if self.features:
            names = [FEATURES]
        else:
            names = [name for name in ("logits", "probabilities") if name in self.outputs]
        if self.attention:
            names += [f"attention_{i}" for i in range(self._num_blocks)]
        return names

    def __call__(self, x):
        """[-1, 1] float images at the model's size -> the output dict (TensorFlow tensors)."""
        import tensorflow as tf

        outputs = {}
        if self.attention:
            rope = self.model.rope_table(x) if getattr(self.model, "rope", None) is not None else None
            x = self._stem(x)
            for i, (tokens, probs) in enumerate(self.model.forward_blocks(x, return_attention=True, rope=rope)):
                outputs[f"attention_{i}"] = tf.cast(probs, tf.float32)
                x = tokens
            y = self._tail(x)
        else:
            y = self.body(x)
        y = tf.cast(y, tf.float32)
        if self.features:
            outputs[FEATURES] = y
        else:
            outputs.update(logits=y, probabilities=tf.nn.softmax(y, axis=-1))
        return {name: outputs[name] for name in self.output_names}

    def serving_function(self, resize, antialias=False):
        """uint8 images -> outputs; with `resize`, images of any size become the model's view of them
        first (`keras_vit.images.model_view`: the model's crop_pct and interpolation, antialiased when
        shrinking), as separable weight matrices that ONNX, TF.js and Core ML converters take; with
        `antialias`, TensorFlow's own ScaleAndTranslate op (TensorFlow-only, less work on large
        images), the same view to 5e-4 of a pixel level."""
        import tensorflow as tf

        from keras_vit.images import model_view, view_policy

        h, w = self.image_size
        crop_pct, interpolation = view_policy(self.model)

        def serve(images):
            x = tf.cast(images, tf.float32)
            if resize:
                x = model_view(x, (h, w), crop_pct, interpolation, portable=not antialias)
                # A static shape for the layers below, without an EnsureShape op (converters refuse it).
                x.set_shape((None, h, w, 3))
            return self(preprocess_input(x, model=self.model))

        return serve

    def input_spec(self, resize, size=None):
        """uint8 (N, H, W, 3): any H, W with `resize` (or without it, for a model of any size and no
        `size`), else `size` or the model's own."""
        import tensorflow as tf

        if resize or (size is None and self.model.dynamic_image_size):
            shape = (None, None, None, 3)
        else:
            shape = (None,) + tuple(size or self.image_size) + (3,)
        return tf.TensorSpec(shape, tf.uint8, name=INPUT_NAME)

    def write_saved_model(self, path, resize, sizes=None, antialias=False):
        """One signature, or with `sizes` one per size (`signature_name`: serving_default first)."""
        import keras

        archive = keras.export.ExportArchive()
        archive.track(self.model)
        for i, size in enumerate(sizes or [None]):
            archive.add_endpoint(signature_name(i, size) if size else "serving_default",
                                 self.serving_function(resize, antialias),
                                 input_signature=[self.input_spec(resize, size)])
        archive.write_out(path, verbose=False)


# ---------------------------------------------------------------------------------------
# Image sets: samples for the parity check, calibration images for int8.


# ---------------------------------------------------------------------------------------
# Running exports: one interface for .keras, SavedModel and .tflite.


class Classifier:
    """A keras-vit image classifier from a `.keras` file, a SavedModel, a `.tflite` or `.onnx` file.

    Call it on uint8 RGB images (N, H, W, 3) to get numpy outputs `{"logits",
    "probabilities", ...}`. `.keras` models, SavedModels and ONNX exports take any H, W
    (resized inside, as the SavedModel's graph does); a `.tflite` model takes its own size,
    so other sizes are resized here first, as the model's view of them (`keras_vit.images.model_view`
    with the export's crop_pct and interpolation), rounded to uint8.

    Attributes: `format` ("keras", "saved_model", "tflite" or "onnx"), `path`, `image_size`
    ((h, w), None when unknown), `class_names` (None when the export has none).

    `load_classifier` makes one from a file; the constructor takes what it read.

    Example:
    >>> clf = load_classifier("saved_models/vit_cifar10/exports/vit_cifar10.tflite")
    >>> clf.format, clf.image_size, clf.class_names[:3]
    ('tflite', (32, 32), ['airplane', 'automobile', 'bird'])
    >>> images = np.stack([keras_vit.load_image("tests/data/cifar10_sample/cat/0511.jpg"),
    ...                    keras_vit.load_image("tests/data/cifar10_sample/ship/0128.jpg")])
    >>> outputs = clf(images)
    >>> sorted(outputs), outputs["probabilities"].shape
    (['logits', 'probabilities'], (2, 10))
    >>> [top[0][1] for top in clf.classify(images, top=1)]
    ['cat', 'ship']
    """

    def __init__(self, path: str, format: str, run: Callable[[np.ndarray], dict[str, np.ndarray]],
                 image_size: Sequence[int] | None, class_names: Sequence[str] | None, fixed_size: bool,
                 metadata: dict[str, Any] | None = None) -> None:
        self.path = path
        self.format = format
        self._run = run
        self.image_size = None if image_size is None else tuple(int(s) for s in image_size)
        self.class_names = None if class_names is None else [str(c) for c in class_names]
        self.fixed_size = fixed_size
        self.metadata = metadata or {}

    def __call__(self, images: np.ndarray, batch_size: int = 32) -> dict[str, np.ndarray]:
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"{self.path} takes uint8 RGB images (N, H, W, 3); got {images.dtype} {images.shape}.")
        if len(images) == 0:
            raise ValueError(f"{self.path}: no images to classify (a batch of 0).")
        if self.fixed_size:
            images = resize_images(images, self.image_size, self.metadata.get("crop_pct", 1.0),
                                   self.metadata.get("interpolation", "bilinear"))
        outputs = [self._run(images[i:i + batch_size]) for i in range(0, len(images), batch_size)]
        return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

    def classify(self, images: np.ndarray, top: int = 5) -> list[list[tuple[Any, str, float]]]:
        """The `top` classes of each image as `decode_predictions` gives them: (class id, name, probability).

        Example:
        >>> clf = load_classifier("saved_models/vit_cifar10/model.keras")
        >>> clf.classify(keras_vit.load_image("tests/data/cifar10_sample/cat/0511.jpg"), top=2)
        [[(3, 'cat', ...), (7, 'horse', ...)]]
        """
        outputs = self(images)
        if "probabilities" not in outputs:
            raise ValueError(f"{self.path} returns {sorted(outputs)}, not class probabilities: a feature extractor "
                             "(exported with outputs='features') has no classes; call it for its features.")
        probabilities = outputs["probabilities"]
        names = self.class_names
        if names is None and probabilities.shape[-1] != 1000:
            names = [f"class {i}" for i in range(probabilities.shape[-1])]
        return decode_predictions(probabilities, top=top, class_names=names)


def _read_metadata(path):
    candidates = [metadata_path(path)]
    if os.path.isdir(path):
        candidates.insert(0, os.path.join(path, "assets.extra", METADATA_NAME))
    for candidate in candidates:
        if os.path.isfile(candidate):
            try:
                with open(candidate, encoding="utf-8") as f:
                    return json.load(f)
            except (OSError, ValueError) as e:
                raise ValueError(f"metadata {candidate} of {path} cannot be read: {e}") from None
    return {}


def _keras_classifier(path):
    import keras
    import tensorflow as tf

    model = float32_copy(load_model(path))
    graph = ServingGraph(model)
    if keras.backend.backend() == "tensorflow":
        # TensorFlow's own resize op: no converter reads this graph, and it does less work on large photos
        serve = tf.function(graph.serving_function(resize=True, antialias=True),
                            input_signature=[graph.input_spec(resize=True)])

        def run(images):
            return {k: v.numpy() for k, v in serve(images).items()}
    else:
        run = _eager_serving(graph)
    return Classifier(path, "keras", run, graph.image_size, model.class_names, fixed_size=False)


def _eager_serving(graph):
    """The serving function's steps for a model under JAX or torch, which a TensorFlow graph cannot
    call: the same view (`keras_vit.images.model_view`, TensorFlow's ops on the pixels as NumPy) and
    scaling, then the model's own logits, run eagerly by its backend."""
    import keras

    from keras_vit.images import model_view, view_policy

    crop_pct, interpolation = view_policy(graph.model)

    def run(images):
        x = np.asarray(model_view(images, graph.image_size, crop_pct, interpolation))
        y = graph.body(preprocess_input(x, model=graph.model), training=False)
        y = keras.ops.convert_to_numpy(y).astype(np.float32)
        if graph.features:
            outputs = {FEATURES: y}
        else:
            outputs = {"logits": y, "probabilities": keras.ops.convert_to_numpy(keras.ops.softmax(y, axis=-1))}
        return {name: outputs[name] for name in graph.output_names}

    return run


def saved_model_classifier(path, metadata):
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(path)
    except Exception as e:
        raise ValueError(f"{path} cannot be loaded as a SavedModel: {e}") from None
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise ValueError(f"{path} is a SavedModel without a serving_default signature: not a keras-vit export.")
    specs = signature.structured_input_signature[1]
    spec = next(iter(specs.values())) if len(specs) == 1 else None
    if spec is None or spec.dtype != tf.uint8 or spec.shape.rank != 4:
        raise ValueError(
            f"{path} is not a keras-vit export: its serving_default takes {specs}, not uint8 images (N, H, W, 3)."
        )
    (name,) = specs

    def run(images):
        outputs = signature(**{name: tf.constant(images)})
        return {k: v.numpy() for k, v in outputs.items()}

    run.loaded = loaded  # the signature does not keep its SavedModel (and variables) alive
    # an export without a resize takes multiples of the patch size only: other images are resized here
    fixed_size = metadata.get("resize") is False and metadata.get("image_size") is not None
    return Classifier(path, "saved_model", run, metadata.get("image_size"), metadata.get("class_names"),
                      fixed_size=fixed_size, metadata=metadata)


def litert_interpreter():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise ValueError(
            "running TFLite models (export checks, predict) needs the LiteRT interpreter: "
            "pip install 'keras-vit[export]' (ai-edge-litert)."
        ) from None
    return Interpreter


def tflite_classifier(path, metadata, content=None, signature="serving_default"):
    Interpreter = litert_interpreter()
    try:
        interpreter = Interpreter(model_path=None if content is not None else path, model_content=content)
        runner = interpreter.get_signature_runner(signature)
    except Exception as e:
        raise ValueError(f"{path} cannot be loaded as a TFLite model: {e}") from None
    inputs = runner.get_input_details()
    if len(inputs) != 1:
        raise ValueError(f"{path} is not a keras-vit export: it takes {len(inputs)} inputs ({', '.join(inputs)}).")
    (name, detail), = inputs.items()
    shape = tuple(int(s) for s in detail["shape_signature"])
    if detail["dtype"] != np.uint8 or len(shape) != 4 or shape[-1] != 3:
        raise ValueError(
            f"{path} is not a keras-vit export: it takes {np.dtype(detail['dtype']).name} {shape}, "
            "not uint8 images (N, H, W, 3)."
        )

    def run(images):
        return {k: np.asarray(v) for k, v in runner(**{name: images}).items()}

    class_names = metadata.get("class_names")
    if class_names is None:  # a .tflite file without its JSON: the label file of its TFLite metadata
        from keras_vit.tflite_metadata import read_metadata

        try:
            class_names = (read_metadata(content if content is not None else path) or {}).get("labels")
        except ValueError as e:
            log.info("%s: no class names from its TFLite metadata (%s)", path, e)
    return Classifier(path, "tflite", run, shape[1:3], class_names, fixed_size=True, metadata=metadata)


def onnx_classifier(path, metadata, content=None):
    """An ONNX export (`export_model(..., format="onnx")`) run by ONNX Runtime on the CPU."""
    from keras_vit._optional import require

    ort = require("onnxruntime", "onnx", what="running ONNX models")
    try:
        session = ort.InferenceSession(content if content is not None else path, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise ValueError(f"{path} cannot be loaded as an ONNX model: {e}") from None
    inputs = session.get_inputs()
    shape = inputs[0].shape if len(inputs) == 1 else None
    if shape is None or inputs[0].type != "tensor(uint8)" or len(shape) != 4 or shape[-1] != 3:
        raise ValueError(f"{path} is not a keras-vit export: it takes "
                         f"{', '.join(f'{i.name} {i.type} {i.shape}' for i in inputs)}, not uint8 images (N, H, W, 3).")
    name, outputs = inputs[0].name, [o.name for o in session.get_outputs()]

    def run(images):
        return dict(zip(outputs, session.run(outputs, {name: images})))

    # the export resizes inside, as the SavedModel; a fixed-size ONNX graph gets images resized here
    fixed_size = all(isinstance(s, int) for s in shape[1:3])
    image_size = shape[1:3] if fixed_size else metadata.get("image_size")
    return Classifier(path, "onnx", run, image_size, metadata.get("class_names"), fixed_size=fixed_size,
                      metadata=metadata)


def model_format(path):
    """"keras", "saved_model", "tflite" or "onnx", by content (ONNX: by the .onnx name); a ValueError
    names a path that is none."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"model {path} does not exist.")
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            return "saved_model"
    else:
        with open(path, "rb") as f:
            head = f.read(8)
        if head[4:8] == b"TFL3":
            return "tflite"
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                if "config.json" in z.namelist():
                    return "keras"
        if path.endswith(".keras"):
            raise ValueError(f"{path} is not a valid .keras file (a zip archive with config.json): damaged or "
                             "not a Keras model.")
        if path.endswith(".tflite"):
            raise ValueError(f"{path} is not a valid .tflite file (no TFL3 flatbuffer identifier): damaged or "
                             "not a TFLite model.")
        if path.endswith(".onnx"):  # a protobuf has no identifier: ONNX Runtime tells a damaged one
            return "onnx"
    raise ValueError(
        f"{path} is not a model keras-vit can run: expected a .keras file, a SavedModel folder "
        "(with saved_model.pb), a .tflite file or a .onnx file."
    )


@refuse_unknown_keywords
def load_classifier(path: str | os.PathLike) -> Classifier:
    """Loads a `.keras` file, a SavedModel folder, a `.tflite` or a `.onnx` file as a `Classifier`.

    Class names come from the `.keras` model, or from the export's metadata JSON
    (`PATH.json`, or `assets.extra/keras_vit.json` inside a SavedModel).

    Example:
    >>> clf = load_classifier("saved_models/vit_cifar10/exports/vit_cifar10.onnx")
    >>> clf.format, clf.image_size
    ('onnx', (32, 32))
    >>> clf.classify(keras_vit.load_image("tests/data/cifar10_sample/ship/0128.jpg")[None], top=1)
    [[(8, 'ship', ...)]]
    """
    path = os.fspath(path)
    fmt = model_format(path)
    if fmt == "keras":
        return _keras_classifier(path)
    metadata = _read_metadata(path)
    if fmt == "saved_model":
        return saved_model_classifier(path, metadata)
    if fmt == "onnx":
        return onnx_classifier(path, metadata)
    return tflite_classifier(path, metadata)


# ---------------------------------------------------------------------------------------
# Export.


def export_runner(format: str, path: str, content: bytes | None = None) -> Any:
    """A function uint8 images (N, h, w, 3) -> {output name: array} running the written export."""
    if format == "saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(path)
        signature = loaded.signatures["serving_default"]
        return lambda images: {k: v.numpy() for k, v in signature(images=tf.constant(images)).items()}
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(content or path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda images: dict(zip(names, session.run(names, {INPUT_NAME: images})))
    interpreter = litert_interpreter()(model_content=content)
    runner = interpreter.get_signature_runner("serving_default")

    def run(images):
        parts = [runner(**{INPUT_NAME: images[i:i + 1]}) for i in range(len(images))]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    return run
