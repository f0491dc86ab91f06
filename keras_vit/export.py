"""SavedModel and TFLite export with the preprocessing inside, checked against Keras.

An exported model takes what a camera or a decoder gives: uint8 RGB images (N, H, W, 3).
Its `serving_default` signature resizes (SavedModel only: bilinear, antialiased when
shrinking), scales to [-1, 1] as `preprocess_input` and returns a dict
`{"logits", "probabilities"}` (+ `"attention_0"`, ... with `attention=True`). Every export
is run once on sample images and compared with the Keras model before it is renamed into
place; the comparison (the parity report) and the class names go beside it as JSON:

    vit.tflite          the model          vit_savedmodel/      the SavedModel
    vit.tflite.json     metadata + parity  vit_savedmodel.json  (a copy also inside, in
                                                                 assets.extra/keras_vit.json)

`load_classifier` runs a `.keras` file, a SavedModel or a `.tflite` file the same way;
`keras-vit predict` uses it.
"""

import contextlib
import json
import logging
import os
import re
import tempfile
import warnings
import zipfile

import numpy as np

from keras_vit._files import atomic_path
from keras_vit.applications import IMAGE_EXTENSIONS, decode_predictions, load_image, preprocess_input, resize_images

log = logging.getLogger("keras_vit")

FORMATS = ("saved_model", "tflite")
QUANTIZATIONS = ("float16", "dynamic", "int8")
FLOAT32_TOLERANCE = 1e-4
METADATA_NAME = "keras_vit.json"  # inside a SavedModel, under assets.extra/
INPUT_NAME = "images"


def metadata_path(path):
    """Where the metadata and parity report of an export live: `PATH.json` beside it."""
    return os.path.abspath(os.fspath(path)).rstrip(os.sep) + ".json"


# ---------------------------------------------------------------------------------------
# The serving function: one definition for the SavedModel, TFLite and `.keras` prediction.


def _float32_copy(model):
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


def _check_exportable(model):
    from keras_vit.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"expected a keras_vit.VisionTransformer, got {type(model).__name__} {getattr(model, 'name', '')!r}."
        )
    if not model.include_top:
        raise ValueError(
            f"{model.name!r} has no classification head (include_top=False); the export's outputs are "
            "logits and probabilities."
        )
    shape = tuple(model.input_shape)
    if len(shape) != 4 or None in shape[1:] or shape[-1] != 3:
        raise ValueError(f"{model.name!r} takes inputs of shape {shape}; expected (batch, height, width, 3).")
    return shape[1], shape[2]


class _Graph:
    """The model's layers rewired for serving: true logits (from the head, before any
    `predictions` activation) and, on request, every block's attention probabilities.
    No numerics are re-implemented: the model's own layers run."""

    def __init__(self, model, attention=False):
        import keras

        self.model = model
        self.image_size = _check_exportable(model)
        self.logits = keras.Model(model.input, model.get_layer("head").output, name=f"{model.name}_logits")
        self.attention = bool(attention)
        if self.attention:
            blocks = model.blocks
            self._stem = keras.Model(model.input, blocks[0].input)
            self._blocks = blocks
            self._tail = keras.Model(blocks[-1].output, model.get_layer("head").output)

    @property
    def output_names(self):
        names = ["logits", "probabilities"]
        if self.attention:
            names += [f"attention_{i}" for i in range(len(self._blocks))]
        return names

    def __call__(self, x):
        """[-1, 1] float images at the model's size -> the output dict (TensorFlow tensors)."""
        import tensorflow as tf

        outputs = {}
        if self.attention:
            x = self._stem(x)
            for i, block in enumerate(self._blocks):
                x, probs = block(x, return_attention_scores=True)
                outputs[f"attention_{i}"] = tf.cast(probs, tf.float32)
            logits = self._tail(x)
        else:
            logits = self.logits(x)
        logits = tf.cast(logits, tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1), **outputs}

    def serving_function(self, resize):
        """uint8 images -> outputs; with `resize`, images of any size are resized first."""
        import tensorflow as tf

        h, w = self.image_size

        def serve(images):
            x = tf.cast(images, tf.float32)
            if resize:
                # Antialiasing only changes a dimension that shrinks: enlarging stays plain bilinear.
                x = tf.image.resize(x, (h, w), method="bilinear", antialias=True)
                x = tf.ensure_shape(x, (None, h, w, 3))
            return self(preprocess_input(x))

        return serve

    def input_spec(self, resize):
        import tensorflow as tf

        shape = (None, None, None, 3) if resize else (None,) + tuple(self.image_size) + (3,)
        return tf.TensorSpec(shape, tf.uint8, name=INPUT_NAME)

    def write_saved_model(self, path, resize):
        import keras

        archive = keras.export.ExportArchive()
        archive.track(self.model)
        archive.add_endpoint("serving_default", self.serving_function(resize),
                             input_signature=[self.input_spec(resize)])
        archive.write_out(path, verbose=False)


# ---------------------------------------------------------------------------------------
# Image sets: samples for the parity check, calibration images for int8.


def _list_images(folder):
    return sorted(
        os.path.join(folder, f) for f in os.listdir(folder)
        if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, f))
    )


def _folder_files(folder, class_names, classes, labelled):
    """Files of a folder and their labels: class subfolders (labelled) or images (not)."""
    subdirs = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    subdirs = [d for d in subdirs if _list_images(os.path.join(folder, d))]
    if not subdirs:
        files = _list_images(folder)
        if not files:
            raise ValueError(
                f"{folder} holds no images ({', '.join(IMAGE_EXTENSIONS)}) and no class folders of images.")
        return files, None
    if not labelled:
        return [f for d in subdirs for f in _list_images(os.path.join(folder, d))], None
    if class_names is None:
        if len(subdirs) != classes:
            raise ValueError(
                f"{folder} has {len(subdirs)} class folders but the model has {classes} classes and no "
                "class_names to match them by name."
            )
        log.info("the model has no class_names: class folders of %s are matched in sorted order", folder)
        index = {d: i for i, d in enumerate(subdirs)}
    else:
        index = {name: i for i, name in enumerate(class_names)}
        unknown = [d for d in subdirs if d not in index]
        if unknown:
            raise ValueError(
                f"class folder(s) {', '.join(unknown)} of {folder} are not classes of the model "
                f"({', '.join(class_names)})."
            )
    files, labels = [], []
    for d in subdirs:
        for f in _list_images(os.path.join(folder, d)):
            files.append(f)
            labels.append(index[d])
    return files, labels


def _check_pixels(images, what):
    """uint8 pixels from pixels in 0-255, or from model inputs in [-1, 1] (a training pipeline's output)."""
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"{what} must be RGB images (N, height, width, 3); got shape {images.shape}.")
    if images.dtype != np.uint8:
        lo, hi = float(np.min(images)), float(np.max(images))
        if lo < 0 and lo >= -1.0 - 1e-3 and hi <= 1.0 + 1e-3:
            log.info("%s are in [-1, 1], preprocessed: mapped back to pixels", what)
            images = (images.astype("float32") + 1.0) * 127.5
        elif lo >= 0 and hi <= 1.0:
            raise ValueError(
                f"{what} have values in [{lo:.2f}, {hi:.2f}]: scaled to [0, 1]? Give pixels in 0-255 "
                "(or model inputs in [-1, 1])."
            )
        elif lo < 0 or hi > 255:
            raise ValueError(f"{what} have values in [{lo:.1f}, {hi:.1f}]; expected pixels in 0-255.")
        images = np.clip(np.round(images), 0, 255).astype("uint8")
    return images


def _split_labels(split, class_names, classes, what):
    """A data.Split's labels as indices of the model's classes (matched by name)."""
    if class_names is None or list(split.class_names) == list(class_names):
        if classes is not None and len(split.class_names) > classes:
            raise ValueError(f"{what}: {split.origin} has {len(split.class_names)} classes, the model {classes}.")
        return np.asarray(split.labels)
    index = {name: i for i, name in enumerate(class_names)}
    unknown = [c for c in split.class_names if c not in index]
    if unknown:
        raise ValueError(f"{what}: classes {', '.join(unknown)} of {split.origin} are not classes of the model "
                         f"({', '.join(class_names)}).")
    return np.asarray([index[c] for c in split.class_names])[np.asarray(split.labels)]


def _data_split(spec, split, what):
    """A split of a keras_vit.data source: an archive (.tgz/.tar), `root/<split>/<class>/` folders,
    "digits" or "tfds:NAME"."""
    from keras_vit import data

    log.info("reading the %s split of %s for the %s", split, spec, what)
    try:
        splits = data.load_data(spec, (split,))
    except (ValueError, OSError) as e:
        raise ValueError(f"{what}: cannot read the {split} split of {spec}: {e}") from None
    if split not in splits:
        raise ValueError(f"{what}: {spec} has no {split!r} split (it has {', '.join(splits)}).")
    return splits[split]


def _is_data_spec(path, split):
    if os.path.isdir(path):
        return os.path.isdir(os.path.join(path, split))
    if os.path.isfile(path):
        return path.lower().endswith((".tgz", ".tar", ".tar.gz"))
    return path == "digits" or path.startswith("tfds:")


def load_image_set(source, image_size, *, class_names=None, classes=None, labelled=True, split="test",
                   max_images=None, seed=0, what="images"):
    """Images for parity checks and calibration, as uint8 at `image_size`, with labels if known.

    `source` is one of:
    - a folder of images, or of one subfolder of images per class, named as the model's
      class_names (with `labelled=False` the names are not checked);
    - a data source of `keras_vit.data` (a training recipe's `data`): a `.tgz`/`.tar` of
      `<split>/<class>/` images, a folder `root/<split>/<class>/`, "digits" or
      "tfds:NAME", of which `split` is read; or a `keras_vit.data.Split`;
    - a list of image files; an array (N, H, W, 3) of pixels in 0-255, or a pair
      (images, labels); a tf.data.Dataset of images or (images, labels), batched or not.
    Arrays and datasets in [-1, 1] (a training pipeline's output) are mapped back to
    pixels. A larger set is shuffled (with `seed`) before `max_images` are taken, since
    class folders list their files in class order.

    Returns (images, labels or None, a description of the source).

    Example:
    >>> images, labels, source = load_image_set("../shared/data/cifar10-jpeg.tgz", (32, 32),
    ...                                         class_names=model.class_names, max_images=500)
    """
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    labels = None
    if isinstance(source, (str, os.PathLike)) and _is_data_spec(os.fspath(source), split):
        source = _data_split(os.fspath(source), split, what)
    if all(hasattr(source, a) for a in ("images", "labels", "class_names", "origin")):  # a keras_vit.data.Split
        labels = _split_labels(source, class_names, classes, what) if labelled else None
        images, description = np.asarray(source.images), str(source.origin)
        if max_images and len(images) > max_images:
            keep = rng.permutation(len(images))[:max_images]
            images, labels = images[keep], None if labels is None else labels[keep]
        description += f" ({len(images)} images{', labelled' if labels is not None else ''})"
    elif isinstance(source, (str, os.PathLike)) or (
            isinstance(source, (list, tuple)) and source and isinstance(source[0], (str, os.PathLike))):
        if isinstance(source, (str, os.PathLike)):
            folder = os.fspath(source)
            if not os.path.exists(folder):
                raise FileNotFoundError(f"{what}: {folder} does not exist.")
            if os.path.isdir(folder):
                files, labels = _folder_files(folder, class_names, classes, labelled)
                description = f"{folder}{' (labelled by class folder)' if labels is not None else ''}"
            else:
                files, description = [folder], folder
        else:
            files = [os.fspath(f) for f in source]
            description = f"{len(files)} image files"
        order = rng.permutation(len(files)) if max_images and len(files) > max_images else np.arange(len(files))
        order = order[:max_images] if max_images else order
        if len(order) > 100:
            log.info("reading %d %s from %s", len(order), what, description)
        images = np.stack([load_image(files[i], size=image_size) for i in order])
        labels = None if labels is None else np.asarray(labels)[order]
        return images, labels, description
    elif isinstance(source, tf.data.Dataset):
        batches, label_batches = [], []
        count = 0
        for element in source:
            x, y = (element[0], element[1]) if isinstance(element, (tuple, list)) else (element, None)
            x, y = np.asarray(x), None if y is None else np.asarray(y)
            if x.ndim == 3:  # an unbatched dataset
                x, y = x[None], None if y is None else y[None]
            batches.append(x)
            if y is not None:  # class indices, or one-hot / mixed labels
                label_batches.append(y.argmax(-1) if y.ndim == 2 else y.reshape(len(x)))
            count += len(x)
            if max_images and count >= max_images:
                break
        if not batches:
            raise ValueError(f"{what}: the dataset is empty.")
        images = np.concatenate(batches)[:max_images]
        if label_batches and labelled:
            labels = np.concatenate(label_batches)[:max_images]
        description = f"a tf.data.Dataset ({len(images)} images)"
    else:
        if isinstance(source, tuple) and len(source) == 2:
            source, labels = source
            labels = np.asarray(labels).reshape(-1) if labelled else None
        images = np.asarray(source)
        if labels is not None and len(labels) != len(images):
            raise ValueError(f"{what}: {len(images)} images but {len(labels)} labels.")
        if max_images and len(images) > max_images:
            keep = rng.permutation(len(images))[:max_images]
            images, labels = images[keep], None if labels is None else labels[keep]
        description = f"an array of {len(images)} images"
    images = _check_pixels(images, what)
    if len(images) == 0:
        raise ValueError(f"{what}: no images.")
    return resize_images(images, image_size), labels, description


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
    return {"data": config["data"], "train_split": config.get("train_split", "train"),
            "test_split": config.get("test_split", "test"), "metrics": metrics}


# ---------------------------------------------------------------------------------------
# Running exports: one interface for .keras, SavedModel and .tflite.


class Classifier:
    """A keras-vit image classifier from a `.keras` file, a SavedModel or a `.tflite` file.

    Call it on uint8 RGB images (N, H, W, 3) to get numpy outputs `{"logits",
    "probabilities", ...}`. `.keras` models and SavedModels take any H, W (resized inside,
    as the SavedModel's graph does); a `.tflite` model takes its own size, so other sizes
    are resized here first (the same resize, rounded to uint8).

    Attributes: `format` ("keras", "saved_model" or "tflite"), `path`, `image_size`
    ((h, w), None when unknown), `class_names` (None when the export has none).
    """

    def __init__(self, path, format, run, image_size, class_names, fixed_size, metadata=None):
        self.path = path
        self.format = format
        self._run = run
        self.image_size = None if image_size is None else tuple(int(s) for s in image_size)
        self.class_names = None if class_names is None else [str(c) for c in class_names]
        self.fixed_size = fixed_size
        self.metadata = metadata or {}

    def __call__(self, images, batch_size=32):
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"{self.path} takes uint8 RGB images (N, H, W, 3); got {images.dtype} {images.shape}.")
        if len(images) == 0:
            raise ValueError(f"{self.path}: no images to classify (a batch of 0).")
        if self.fixed_size:
            images = resize_images(images, self.image_size)
        outputs = [self._run(images[i:i + batch_size]) for i in range(0, len(images), batch_size)]
        return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}

    def classify(self, images, top=5):
        """The `top` classes of each image as `decode_predictions` gives them."""
        probabilities = self(images)["probabilities"]
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

    try:
        model = keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as e:  # Keras raises many types for damaged archives
        raise ValueError(f"{path} cannot be loaded as a Keras model: {e}") from None
    model = _float32_copy(model)
    graph = _Graph(model)
    serve = tf.function(graph.serving_function(resize=True), input_signature=[graph.input_spec(resize=True)])

    def run(images):
        return {k: v.numpy() for k, v in serve(images).items()}

    return Classifier(path, "keras", run, graph.image_size, model.class_names, fixed_size=False)


def _saved_model_classifier(path, metadata):
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
    return Classifier(path, "saved_model", run, metadata.get("image_size"), metadata.get("class_names"),
                      fixed_size=False, metadata=metadata)


def _litert_interpreter():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        raise ValueError(
            "running TFLite models (export checks, predict) needs the LiteRT interpreter: "
            "pip install 'keras-vit[export]' (ai-edge-litert)."
        ) from None
    return Interpreter


def _tflite_classifier(path, metadata, content=None):
    Interpreter = _litert_interpreter()
    try:
        interpreter = Interpreter(model_path=None if content is not None else path, model_content=content)
        runner = interpreter.get_signature_runner("serving_default")
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

    return Classifier(path, "tflite", run, shape[1:3], metadata.get("class_names"), fixed_size=True,
                      metadata=metadata)


def model_format(path):
    """"keras", "saved_model" or "tflite", by content; a ValueError names a path that is none."""
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
    raise ValueError(
        f"{path} is not a model keras-vit can run: expected a .keras file, a SavedModel folder "
        "(with saved_model.pb) or a .tflite file."
    )


def load_classifier(path):
    """Loads a `.keras` file, a SavedModel folder or a `.tflite` file as a `Classifier`.

    Class names come from the `.keras` model, or from the export's metadata JSON
    (`PATH.json`, or `assets.extra/keras_vit.json` inside a SavedModel).

    Example:
    >>> clf = load_classifier("vit_cifar10.tflite")
    >>> clf.classify(keras_vit.load_image("cat.jpg")[None], top=3)
    [[(3, 'cat', 0.92), (5, 'dog', 0.05), (2, 'bird', 0.01)]]
    """
    path = os.fspath(path)
    fmt = model_format(path)
    if fmt == "keras":
        return _keras_classifier(path)
    metadata = _read_metadata(path)
    if fmt == "saved_model":
        return _saved_model_classifier(path, metadata)
    return _tflite_classifier(path, metadata)


# ---------------------------------------------------------------------------------------
# Export.


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


def _convert_tflite(graph, path, quantize, calibration, name):
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as tmp:
        saved = os.path.join(tmp, "saved_model")
        graph.write_saved_model(saved, resize=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=["serving_default"])
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
                    yield {INPUT_NAME: image[None]}

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


def _size_text(num_bytes):
    return f"{num_bytes / 2**20:.1f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.0f} KiB"


def _reference(graph, images, batch_size=64):
    """The Keras model's outputs on uint8 images at its size: the parity reference."""
    import tensorflow as tf

    run = tf.function(lambda x: graph(preprocess_input(x)), input_signature=[graph.input_spec(resize=False)])
    outputs = [run(tf.constant(images[i:i + batch_size])) for i in range(0, len(images), batch_size)]
    return {k: np.concatenate([o[k].numpy() for o in outputs]) for k in outputs[0]}


def _parity(reference, exported, labels, tolerance):
    ref, out = reference["logits"], exported["logits"]
    if not np.all(np.isfinite(out)):
        raise ValueError("the export returns non-finite logits (NaN or inf)")
    agree = int(np.sum(ref.argmax(-1) == out.argmax(-1)))
    report = {
        "samples": int(len(ref)),
        "max_abs_logit_diff": float(np.max(np.abs(ref - out))),
        "max_abs_probability_diff": float(np.max(np.abs(reference["probabilities"] - exported["probabilities"]))),
        "top1_agreement": agree / len(ref),
        "top1_agreements": agree,
    }
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
    """One line: `max |logit diff| ..., top-1 agreement ...[, accuracy ...]`."""
    line = (f"max |logit diff| {report['max_abs_logit_diff']:.3g}, top-1 agreement "
            f"{100 * report['top1_agreement']:.2f}% ({report['top1_agreements']}/{report['samples']})")
    if "max_abs_attention_diff" in report:
        line += f", max |attention diff| {report['max_abs_attention_diff']:.3g}"
    if report.get("labelled"):
        line += (f"; accuracy Keras {100 * report['keras_accuracy']:.2f}%, "
                 f"export {100 * report['export_accuracy']:.2f}%")
    return line


def _format_of(path, format):
    path = os.fspath(path)
    if format is None:
        format = "tflite" if path.endswith(".tflite") else "saved_model"
    if format not in FORMATS:
        raise ValueError(f"Unknown export format {format!r}; use one of {FORMATS}.")
    if format == "saved_model" and path.endswith((".tflite", ".keras", ".h5", ".json")):
        raise ValueError(f"a SavedModel is a folder; {path} looks like a file name (use --format tflite for .tflite).")
    return format


def _load_model(model):
    if not isinstance(model, (str, os.PathLike)):
        return model, getattr(model, "name", None)
    import keras

    path = os.fspath(model)
    if model_format(path) != "keras":
        raise ValueError(f"{path}: export takes a Keras model (.keras file), not a {model_format(path)} export.")
    try:
        return keras.models.load_model(path, compile=False, safe_mode=True), path
    except Exception as e:
        raise ValueError(f"{path} cannot be loaded as a Keras model: {e}") from None


def export_model(model, path, format=None, *, quantize=None, attention=False, representative_images=None,
                 samples=None, max_samples=1000, calibration_images=200, overwrite=False, seed=0):
    """Exports a keras-vit model as a SavedModel or a TFLite file, checked against Keras.

    The `serving_default` signature takes uint8 RGB images (N, H, W, 3) and returns
    `{"logits", "probabilities"}` (true logits from the head, and their softmax; with
    `attention=True` also `"attention_0"`, ... (N, heads, tokens, tokens)). The SavedModel
    takes any batch and any H, W (bilinear resize, antialiased when shrinking, inside the
    graph); the TFLite model takes the model's own size and any batch, with builtin ops
    only: a model that would need Flex (Select TF) ops is refused, naming the ops.

    After writing to a temporary path, the export is run on `samples` and compared with
    the Keras model (max |logit difference|, top-1 agreement, and accuracy when the
    samples are labelled); a float32 export that differs by more than 1e-4 is refused.
    Only then is it renamed onto `path`, and the metadata (class names, image size,
    outputs, quantization, the parity report) written to `PATH.json` (and, for a
    SavedModel, `PATH/assets.extra/keras_vit.json`).

    Args:
        model: a `keras_vit.VisionTransformer` or the path of a `.keras` file. A model
            built under mixed_bfloat16 is exported from a float32 copy of its weights.
        path: the SavedModel folder or the `.tflite` file to write.
        format: "saved_model" or "tflite"; default from `path` (".tflite" or not).
        quantize: TFLite only: None (float32), "float16", "dynamic" (int8 weights) or
            "int8" (int8 weights and activations, calibrated on `representative_images`).
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
        calibration_images: at most this many representative images.
        overwrite: replace an existing export (and its JSON).

    Returns:
        The metadata dict written to `PATH.json`, with the parity report under "parity".

    Example:
    >>> metadata = export_model("vit.keras", "vit.tflite", quantize="int8",
    ...                         representative_images="cifar10/train", samples="cifar10/test")
    >>> metadata["parity"]["top1_agreement"], metadata["parity"]["export_accuracy"]
    """
    path = os.path.abspath(os.fspath(path)).rstrip(os.sep)
    format = _format_of(path, format)
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantize!r}; use one of {QUANTIZATIONS}.")
    if quantize and format != "tflite":
        raise ValueError(f"quantization ({quantize}) applies to TFLite exports only, not {format}.")
    recipe = _recipe_data(model)
    if quantize == "int8" and representative_images is None and recipe is None:
        raise ValueError("int8 quantization needs representative images to calibrate on (--representative IMAGES); "
                         "a model without the metrics.json of `keras-vit train` beside it has no data of its own.")
    if format == "tflite":
        _litert_interpreter()
    meta_path = metadata_path(path)
    for target in (path, meta_path):
        if os.path.exists(target) and not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True (--overwrite) to replace it.")

    model, source = _load_model(model)
    _check_exportable(model)
    kind = format + (f" ({quantize})" if quantize else "")
    log.info("exporting %s to %s: %s", model.name, path, kind)
    model = _float32_copy(model)
    graph = _Graph(model, attention=attention)
    image_size = graph.image_size

    class_names = getattr(model, "class_names", None)
    sample_split, calibration_split = "test", "train"
    if recipe is not None:
        sample_split, calibration_split = recipe["test_split"], recipe["train_split"]
    sample_images = None
    if samples is not None:
        sample_images, labels, sample_source = load_image_set(
            samples, image_size, class_names=class_names, classes=model.classes, split=sample_split,
            max_images=max_samples, seed=seed, what="samples")
    elif recipe is not None:
        # The model's own test data, as its recipe (metrics.json) names it, when it can be read here.
        log.info("samples: the %s split of %s, the model's data (%s)", sample_split, recipe["data"],
                 recipe["metrics"])
        try:
            sample_images, labels, sample_source = load_image_set(
                recipe["data"], image_size, class_names=class_names, classes=model.classes, split=sample_split,
                max_images=max_samples, seed=seed, what="samples")
        except (ValueError, FileNotFoundError) as e:
            # a parity check on random pixels would pass for a model that is wrong on real images
            raise FileNotFoundError(
                f"samples: the model's own {sample_split} data ({recipe['data']}, named in {recipe['metrics']}) "
                f"cannot be read here ({e}); pass samples (--samples IMAGES, e.g. tests/data/cifar10_sample) "
                "to check the export on real images.") from None
    if sample_images is None:
        sample_images = np.random.default_rng(seed).integers(0, 256, (32,) + image_size + (3,), dtype=np.uint8)
        labels, sample_source = None, "32 images of random pixels (no samples given)"
        log.warning("no sample images and no metrics.json beside the model: parity is checked on RANDOM PIXELS "
                    "only (pass samples, --samples IMAGES, for real images and accuracy)")
    calibration = None
    if quantize == "int8":
        if representative_images is None:
            log.info("representative images: the %s split of %s, the model's training data (%s)",
                     calibration_split, recipe["data"], recipe["metrics"])
            representative_images = recipe["data"]
        calibration, _, calibration_source = load_image_set(
            representative_images, image_size, labelled=False, split=calibration_split,
            max_images=calibration_images, seed=seed + 1, what="representative images")

    with atomic_path(path, overwrite=overwrite, suffix=".tflite" if format == "tflite" else "") as tmp:
        if format == "saved_model":
            graph.write_saved_model(tmp, resize=True)
            log.info("wrote the SavedModel: serving_default takes uint8 images of any size -> %s",
                     ", ".join(graph.output_names))
            exported = _saved_model_classifier(tmp, {})
        else:
            if calibration is not None:
                log.info("converting to TFLite (builtin ops, int8), calibrating on %d images from %s",
                         len(calibration), calibration_source)
            else:
                log.info("converting to TFLite (builtin ops%s)", f", {quantize}" if quantize else "")
            content = _convert_tflite(graph, path, quantize, calibration, model.name)
            with open(tmp, "wb") as f:
                f.write(content)
            log.info("converted: %s; serving_default takes uint8 (N, %d, %d, 3) -> %s",
                     _size_text(len(content)), *image_size, ", ".join(graph.output_names))
            exported = _tflite_classifier(tmp, {}, content=content)

        log.info("checking parity against Keras on %d images from %s", len(sample_images), sample_source)
        reference = _reference(graph, sample_images)
        try:
            outputs = exported(sample_images)
        except Exception as e:
            raise ValueError(
                f"the {kind} export of {model.name} does not run: {e}. Nothing was written to {path}.") from None
        missing = set(graph.output_names) - set(outputs)
        if missing:
            raise ValueError(f"the {kind} export lacks the outputs {sorted(missing)}. Nothing was written to {path}.")
        tolerance = None if quantize else FLOAT32_TOLERANCE
        try:
            report = _parity(reference, outputs, labels, tolerance)
        except ValueError as e:
            raise ValueError(f"the {kind} export of {model.name}: {e}. Nothing was written to {path}.") from None
        report["sample_source"] = sample_source
        log.info("parity: %s", format_parity(report))
        if tolerance is not None and report["max_abs_logit_diff"] > tolerance:
            raise ValueError(
                f"the float32 {format} export of {model.name} differs from Keras by "
                f"{report['max_abs_logit_diff']:.3g} in the logits (tolerance {tolerance:g}). "
                f"Nothing was written to {path}."
            )
        from keras_vit import __version__

        metadata = {
            "keras_vit": __version__,
            "format": format,
            "quantization": quantize,
            "source": source,
            "image_size": list(image_size),
            "input": {"name": INPUT_NAME, "dtype": "uint8",
                      "shape": [None, None, None, 3] if format == "saved_model" else [None, *image_size, 3]},
            "preprocessing": (("bilinear resize to %dx%d (antialiased when shrinking), " % image_size
                               if format == "saved_model" else "") + "x / 127.5 - 1"),
            "outputs": graph.output_names,
            "classes": int(model.classes),
            "class_names": class_names,
            "parity": report,
        }
        if calibration is not None:
            metadata["calibration"] = {"images": int(len(calibration)), "source": calibration_source}
        text = json.dumps(metadata, indent=2) + "\n"
        if format == "saved_model":
            os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
            with open(os.path.join(tmp, "assets.extra", METADATA_NAME), "w", encoding="utf-8") as f:
                f.write(text)
        del exported
    with atomic_path(meta_path, overwrite=True) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    log.info("wrote %s and %s", path, meta_path)
    return metadata
