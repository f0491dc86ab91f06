"""keras-vit: the Vision Transformer as Keras 3 applications, with the official numerics.

The public names below are imported on first use (PEP 562), so `import keras_vit` and the
`keras-vit` command start without TensorFlow; `keras_vit.ViTB16` or `from keras_vit import ViTB16`
imports it then. The Keras layers and models are registered for `keras.models.load_model` as soon
as Keras is imported, before or after keras_vit.

Example:
>>> import keras, keras_vit
>>> model = keras_vit.ViTTi16(weights=None, input_shape=(32, 32, 3), classes=10)
"""

import importlib
import importlib.abc
import importlib.util
import logging
import os
import sys

__version__ = "0.1.0"

# TensorFlow is our default backend; a user's own KERAS_BACKEND wins.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ start-up lines (cuInit failures, CPU feature notes) say nothing a user can act on;
# set before TensorFlow is imported, and only when the user has not chosen a level (the CLI also
# hides the lines TensorFlow writes before its logging reads the level).
_USER_TF_LOG_LEVEL = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# A library only adds a NullHandler: the application (our CLI, a notebook) decides where the
# "keras_vit" log lines go; see keras_vit.cli for the console format.
logging.getLogger("keras_vit").addHandler(logging.NullHandler())

_EXPORTS = {
    "keras_vit.layers": ("Attention", "AttentionPool", "DropPath", "Patches", "PatchEncoder", "TransformerBlock"),
    "keras_vit.rope": ("RotaryEmbedding",),
    "keras_vit.stem": ("BottleneckUnit", "StdConv2D"),
    "keras_vit.config": ("ViTConfig",),
    "keras_vit.models": ("VARIANTS", "VisionTransformer"),
    "keras_vit.factory": ("R26ViTB32", "R26ViTS32", "R50ViTB16", "R50ViTL32", "RViTTi16", "ViTB8", "ViTB16", "ViTB32",
                          "ViTH14", "ViTL16", "ViTL32", "ViTS16", "ViTS32", "ViTTi16", "create_model"),
    "keras_vit.posemb": ("resample_patch_embedding", "resample_position_embeddings", "with_image_size",
                         "with_patch_size"),
    "keras_vit.checkpoints": ("load_official_npz", "save_official_npz"),
    "keras_vit.pretrained": ("from_pretrained", "load_pretrained", "save_pretrained"),
    "keras_vit.applications": ("decode_predictions", "imagenet_class_names", "load_image", "preprocess_input"),
    "keras_vit.export": ("export_model", "load_classifier"),
    "keras_vit.fewshot": ("fewshot_evaluate",),
    "keras_vit.loading": ("load_model",),
    "keras_vit.parallel": ("layout_map",),
    "keras_vit.dense.config": ("DenseHead",),
    "keras_vit.dense.model": ("DensePredictor",),
    "keras_vit.zeroshot.model": ("ImageText", "load_image_text"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
# The modules whose classes `.keras` files name (register_keras_serializable runs on import).
_SERIALIZABLES = ("keras_vit.layers", "keras_vit.stem", "keras_vit.models", "keras_vit.training", "keras_vit.dense",
                  "keras_vit.zeroshot")

__all__ = sorted(_MODULE_OF) + ["__version__"]


# Submodules reachable as attributes, as when __init__ imported them all (keras_vit.data.load_digits).
_SUBMODULES = ("applications", "checkpoints", "config", "data", "dense", "export", "factory", "fewshot", "images",
               "interpolation", "layers", "loading", "models", "parallel", "posemb", "presets", "pretrained", "report", "serving",
               "stem", "training", "visualize", "zeroshot")


def __getattr__(name):
    if name in _SUBMODULES:
        module = importlib.import_module(f"keras_vit.{name}")  # the import sets the attribute too
        if name not in ("interpolation", "presets"):
            _register_serializables()
        return module
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    _register_serializables()
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_MODULE_OF) | set(_SUBMODULES))


def _register_serializables(during_import=False):
    for module in _SERIALIZABLES:
        try:
            importlib.import_module(module)
        except ImportError:
            # Keras was first imported by one of our own modules, half-initialized at this moment
            # (e.g. _common, which layers needs): its import goes on to load what it needs, and
            # __getattr__ registers the rest once it is done.
            if not during_import:
                raise


class _RegisterAfterKeras(importlib.abc.MetaPathFinder):
    """Registers keras-vit's classes right after `keras` itself is imported, so that
    `import keras_vit; import keras; keras.models.load_model("vit.keras")` works as before.

    It hands back the spec the other finders give, its loader wrapped; it stays in sys.meta_path
    until Keras has really been executed (TensorFlow asks for the spec without importing)."""

    _busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras" or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec("keras")
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _register_serializables(during_import=True)

        spec.loader.exec_module = exec_then_register
        return spec


if "keras" in sys.modules:
    _register_serializables()
elif not any(isinstance(f, _RegisterAfterKeras) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
