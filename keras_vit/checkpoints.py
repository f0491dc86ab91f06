"""Weights by name or file, the dispatcher: `load_weights` (what `weights=` calls), released names,
`.keras` files, and the official .npz format's public names.

The formats themselves live in keras_vit/formats/ (official.py holds the .npz name table, its reader
and writer; every format loads through formats/_assign.py's one plan-then-assign pass); this module
re-exports their public names where callers look. `load_weights` (a released name from
keras_vit/presets.py, an .npz, a .keras or a .weights.h5) is what keras_vit/factory.py's `weights=`
calls; `load_keras_model` is the one way keras-vit opens a `.keras` file.
"""

from __future__ import annotations

import logging
import os
import re
import zipfile

from keras_vit._common import refuse_unknown_keywords
from keras_vit._files import atomic_path
from keras_vit.config import ViTConfig, field_names

# The official format's names, re-exported where callers have always found them.
from keras_vit.formats._assign import check_channels, describe_changes  # noqa: F401
from keras_vit.formats._headers import check_memory
from keras_vit.formats._torch import PICKLE_SUFFIXES, refuse_pickle
from keras_vit.formats.keras_files import check_keras_archive, check_sizes, h5_shapes
from keras_vit.formats.official import (  # noqa: F401
    LAYOUTS,
    POSEMB_KEY,
    from_official_config,
    load_archive,
    load_official_npz,
    official_key,
    open_checkpoint,
    read_npz_index,
    save_official_npz,
)
from keras_vit.models import VisionTransformer

# copy_weights lives with the resampling it needs; checkpoints re-exports it.
from keras_vit.posemb import (
    copy_weights,  # noqa: F401
    stored_grid,
)
from keras_vit.presets import DEFAULT_WEIGHTS_URL, NAMED_WEIGHTS, PRESETS, WEIGHTS_URL_ENV, missing_checkpoint, weights_url

log = logging.getLogger(__name__)

_AUGREG_FILE = re.compile(r"^(R\d*_)?(Ti|S|B|L|H)_\d+-i(1|21)k-[\w.\-]+$")


def variant_of(model):
    """The preset a model was built as ("B/16", ...; its config's `variant`), or None."""
    return getattr(model, "variant", None)


def resolve_weights(name, variant, image_size=(224, 224)):
    """The URL of a released checkpoint: a name of NAMED_WEIGHTS, or an AugReg file name.

    Example:
    >>> resolve_weights("imagenet21k", "B/16")
    'https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz'
    """
    base = weights_url()
    stem = name[:-4] if name.endswith(".npz") else name
    if _AUGREG_FILE.match(stem):
        return f"{base}/augreg/{stem}.npz"
    if name not in NAMED_WEIGHTS:
        raise ValueError(
            f"Unknown weights {name!r}: not a file, and not one of {NAMED_WEIGHTS} or an AugReg "
            "checkpoint name such as 'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0'."
        )
    available = [v for v, preset in PRESETS.items() if name in preset.weights]
    if variant not in available:
        raise ValueError(
            f"No {name!r} weights were released for {variant or 'this model'}; "
            f"they exist for {', '.join(available)}."
        )
    preset = PRESETS[variant]
    if name == "imagenet":
        return f"{base}/{preset.imagenet}.npz"
    if name == "imagenet21k":
        return f"{base}/imagenet21k/{preset.official_name}.npz"
    if name == "imagenet21k+imagenet2012":
        suffix = "-224" if preset.finetune_224 and max(image_size) <= 224 else ""
        return f"{base}/imagenet21k+imagenet2012/{preset.official_name}{suffix}.npz"
    if name == "augreg":
        return f"{base}/augreg/{preset.augreg}.npz"
    return f"{base}/augreg/{preset.augreg}--imagenet2012-steps_20k-lr_{preset.augreg_finetune_lr}-res_384.npz"


def fetch_weights(name, variant, image_size=(224, 224)):
    """Downloads a released checkpoint once into the Keras cache (with progress); its path."""
    import keras

    url = resolve_weights(name, variant, image_size)
    folder, fname = url.rsplit("/", 2)[-2:]
    try:
        return keras.utils.get_file(fname=fname, origin=url,
                                    cache_subdir=os.path.join("models", "vit_models", folder))
    except Exception as e:  # get_file wraps URLError/HTTPError in a bare Exception
        reason = " ".join(str(e).split(" -- ")[-1].split()) or type(e).__name__
        raise ConnectionError(
            f"Could not download the {name!r} weights from {url} ({reason}). Set ${WEIGHTS_URL_ENV} to a mirror "
            f"of {DEFAULT_WEIGHTS_URL}, or download the file and pass its path: weights=\"{fname}\"."
        ) from None


@refuse_unknown_keywords
def load_keras_model(path):
    """Loads a keras-vit `.keras` model file, the one way keras-vit does: safe_mode=True, no compile.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: not a `.keras` archive, one Keras cannot load, or a model that is not a
            keras_vit.VisionTransformer, naming the file.

    Example:
    >>> model = load_keras_model("saved_models/vit_cifar10/model.keras")
    """
    import keras

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file {path} does not exist.")
    if not path.endswith(".keras"):
        raise ValueError(f"{path} is not a .keras model file (save models with model.save('name.keras')).")
    if not zipfile.is_zipfile(path):  # Keras would report a bad archive as "File not found"
        raise ValueError(f"{path} is not a .keras model archive (not a zip file).")
    check_keras_archive(path)  # the config against the weights' headers: Keras would build first
    try:
        model = keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as e:  # Keras raises many types for a bad archive; all mean the same here
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} cannot be loaded as a Keras model: {message}") from None
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a keras_vit.VisionTransformer.")
    return model


def _load_keras_file(model, path, method):
    """Loads a .keras or .weights.h5 saved by keras-vit, resampling to the model's size."""
    if path.endswith(".keras"):
        source = load_keras_model(path)
        check_channels(model, source.input_shape[-1], path)
    else:
        source = _model_at_saved_size(model, path)
        source.load_weights(path)
    report = copy_weights(source, model, method=method)
    del source
    return report


def _model_at_saved_size(model, path):
    """A twin of `model` at the image size whose position embeddings a .weights.h5 holds."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except Exception as e:  # h5py: OSError for a file that is no HDF5
        raise ValueError(f"{path} is not a readable .weights.h5 file ({e}).") from None
    with f:
        first_conv = f.get("layers/std_conv2d/vars/0" if model.resnet else "layers/patch_encoder/projection/vars/0")
        if isinstance(first_conv, h5py.Dataset) and len(first_conv.shape) == 4:
            check_channels(model, first_conv.shape[2], path)
        shapes = h5_shapes(f, path)
    found = [s for k, s in shapes.items() if "patch_encoder" in k and len(s) == 3 and s[0] == 1 and s[1] > 1]
    if not found:
        raise ValueError(f"{path} holds no keras-vit position embeddings (patch_encoder).")
    grid = stored_grid(model, found[-1][1])
    stride = (model.image_size[0] // model.patch_encoder.grid_size[0],
              model.image_size[1] // model.patch_encoder.grid_size[1])
    config = dict(model.get_config(), image_size=(grid[0] * stride[0], grid[1] * stride[1]))
    saved = ViTConfig(**{k: v for k, v in config.items() if k in field_names()})
    check_sizes(saved, shapes, path)  # the twin the file's shapes describe, before it is built
    check_memory(saved, path)
    return type(model).from_config(config)


@refuse_unknown_keywords
def load_weights(model, weights, *, method="official"):
    """Loads `weights` into a keras-vit model: a released name, .npz, .keras or .weights.h5.

    A file saved at another resolution is resampled to the model's patch grid.
    """
    weights = os.fspath(weights)
    hub = ("keras_vit.from_pretrained(path) builds the model from its config.json and loads it; "
           "keras_vit.load_pretrained(model, path) loads it into a model of its architecture")
    if os.path.isdir(weights):
        what = "a timm / transformers hub folder" if os.path.isfile(os.path.join(weights, "config.json")) else "a folder"
        raise ValueError(f"weights={weights!r} is {what}; weights= takes a file (.npz, .keras, .weights.h5) or a "
                         f"released name. For a hub folder (config.json + model.safetensors): {hub}.")
    if weights.endswith(PICKLE_SUFFIXES):
        refuse_pickle(weights)
    if weights.endswith(".safetensors"):
        raise ValueError(f"weights={weights!r} is a safetensors checkpoint (timm / transformers), which weights= does "
                         f"not read: {hub}.")
    if os.path.isfile(weights):
        if weights.endswith(".keras") or weights.endswith(".weights.h5"):
            return _load_keras_file(model, weights, method)
        return load_official_npz(model, weights, resample=method)
    if weights.endswith(".npz"):
        raise missing_checkpoint(weights)
    if weights.endswith((".keras", ".h5")) or os.sep in weights:
        raise FileNotFoundError(f"weights file {weights} does not exist.")
    variant = variant_of(model)
    resolve_weights(weights, variant, model.image_size)  # an unknown name or variant fails first
    # Every release is an RGB model: refuse before downloading.
    check_channels(model, 3, f"The released weights {weights!r}")
    path = fetch_weights(weights, variant, model.image_size)
    return load_official_npz(model, path, resample=method)


@refuse_unknown_keywords
def convert_checkpoint(checkpoint, out, *, variant, image_size=224, classes=1000, representation_size=None,
                       resample="official", overwrite=False):
    """An official checkpoint -> a ready-to-fine-tune `.keras` model, written atomically.

    The classifier (class token or gap) follows the checkpoint; the head is new (zero-
    initialized) when `classes` differs from the checkpoint's.
    """
    out = os.fspath(out)
    if not out.endswith(".keras"):
        raise ValueError(f"--out must end in .keras, got {out}.")
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it.")
    with open_checkpoint(checkpoint) as archive:  # opened once: its headers size the model, then it loads
        classifier = "token" if "cls" in archive.index else "gap"
        model = VisionTransformer(ViTConfig.from_preset(variant, image_size=image_size, classes=classes,
                                                        classifier=classifier, representation_size=representation_size))
        log.info("built %s at %s with %d classes (%s classifier)", variant, model.image_size, classes, classifier)
        load_archive(model, archive, resample=resample)
    with atomic_path(out, overwrite=overwrite) as tmp:
        model.save(tmp)
    log.info("wrote %s", out)
    return out


