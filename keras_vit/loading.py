"""One `load_model` for every command: a keras-vit `.keras` file, an official `.npz`, a timm or
transformers hub folder (or `.safetensors` with its config.json), or a Hugging Face hub name.

It sits above the checkpoint readers and calls only their public functions
(`keras_vit.checkpoints.load_keras_model`, `keras_vit.pretrained.from_pretrained`), so that
`keras-vit export`, `visualize`, `fewshot` and `predict` open the same files the same way.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from keras_vit._common import refuse_unknown_keywords

if TYPE_CHECKING:
    import keras

# Exports run through keras_vit.load_classifier, not as Keras models: named so the error can say so.
_EXPORT_SUFFIXES = (".tflite", ".onnx")


@refuse_unknown_keywords
def load_model(path: str | os.PathLike) -> keras.Model:
    """A keras_vit.VisionTransformer from any file or name keras-vit reads.

    `path` is a `.keras` file saved by keras-vit (`keras_vit.checkpoints.load_keras_model`: safe
    mode, not compiled), or a checkpoint `keras_vit.from_pretrained` builds a model from with its
    own config: an official `.npz` (sizes from its shapes), a timm / transformers hub folder
    (config.json + model.safetensors), a `.safetensors` file with its config.json beside it, or a
    Hugging Face hub name ("facebook/dinov2-small", "timm/vit_small_patch14_reg4_dinov2.lvd142m",
    fetched through huggingface_hub's cache).

    Raises:
        FileNotFoundError: a path that does not exist and is not a hub name.
        ValueError: an export (SavedModel, .tflite, .onnx: run those with
            `keras_vit.load_classifier`), or a file neither reader takes, naming it.

    Example:
    >>> import keras_vit
    >>> keras_vit.load_model("saved_models/vit_cifar10/model.keras").image_size
    (32, 32)
    >>> keras_vit.load_model("tests/data/timm/timm_vit_token").classes  # a (tiny) timm hub folder
    7
    """
    path = os.fspath(path)
    if path.endswith(".keras"):
        from keras_vit.checkpoints import load_keras_model

        return load_keras_model(path)
    if path.endswith(_EXPORT_SUFFIXES) or os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ValueError(f"{path} is an export, not a Keras model: run it with keras_vit.load_classifier(path) "
                         "(or `keras-vit predict`); export and analysis take the .keras file or checkpoint "
                         "it was made from.")
    from keras_vit.pretrained import from_pretrained

    return from_pretrained(path)


__all__ = ["load_model"]
