"""Official checkpoints (.npz) in and out, named released weights, and weight copying.

One mapping table (`official_key`) turns a keras-vit variable path into the key of the
official checkpoint, in either key layout, and back; loading, saving and the CLI all
use it. What differs in shape is resampled (position embeddings), dropped or kept as
the official fine-tuning does (a head of another class count, an unused pre-logits
layer), or refused with an error naming the file, the keys and the shapes.

Loading weights is this module's job: `load_weights` (a released name from
keras_vit/presets.py, an .npz, a .keras or a .weights.h5) is registered with keras_vit.models
on import, so `VisionTransformer(weights=...)` calls it without models importing this
module; `load_keras_model` is the one way keras-vit opens a `.keras` file.
"""

from __future__ import annotations

import logging
import os
import re
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from keras_vit._common import check_keywords, describe_misfit, refuse_unknown_keywords
from keras_vit._files import atomic_path
from keras_vit.models import VisionTransformer, create_model, vit_keywords
from keras_vit.presets import (DEFAULT_WEIGHTS_URL, NAMED_WEIGHTS, PRESETS, WEIGHTS_URL_ENV, missing_checkpoint,
                               weights_url)
# copy_weights lives with the resampling it needs; checkpoints re-exports it.
from keras_vit.posemb import copy_weights  # noqa: F401
from keras_vit.posemb import resample_note, resample_position_embeddings, stored_grid

if TYPE_CHECKING:
    import keras

log = logging.getLogger("keras_vit")

LAYOUTS = ("released", "current")

# keras-vit path -> official key. {i} is a block index; the layouts differ in the names
# of the encoder block's children only.
_BLOCK_NAMES = {
    "released": {"norm1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_1", "norm2": "LayerNorm_2",
                 "mlp": "MlpBlock_3"},
    "current": {"norm1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_0", "norm2": "LayerNorm_1",
                "mlp": "MlpBlock_0"},
}
_PARAM = {"gamma": "scale", "beta": "bias", "kernel": "kernel", "bias": "bias"}
POSEMB_KEY = "Transformer/posembed_input/pos_embedding"


_AUGREG_FILE = re.compile(r"^(R\d*_)?(Ti|S|B|L|H)_\d+-i(1|21)k-[\w.\-]+$")


def official_key(path, layout="released"):
    """The official checkpoint key of a keras-vit variable path, e.g.

    'encoderblock_3/query/kernel' -> 'Transformer/encoderblock_3/MultiHeadDotProductAttention_1/query/kernel'.
    """
    parts = path.split("/")
    if re.fullmatch(r"bn(\d+|_root|_proj)", parts[-2] if len(parts) > 1 else ""):
        raise ValueError(f"The variable {path!r} belongs to a BatchNorm stem (resnet norm='batch'), which the "
                         "official checkpoint layout has no place for (BiT's stem is GroupNorm): save the model "
                         "as .keras or .weights.h5 instead.")
    if parts[-1] == "dist_token" or parts[0] == "head_dist":
        raise ValueError(f"The variable {path!r} belongs to a distilled (DeiT) model, which the official checkpoint "
                         "layout has no place for: save the model as .keras or .weights.h5 instead.")
    leaf = _PARAM.get(parts[-1], parts[-1])
    head = parts[0]
    names = _BLOCK_NAMES[layout]
    if head == "patch_encoder":
        return {"cls": "cls", "pos_embedding": POSEMB_KEY}.get(parts[1]) or f"embedding/{leaf}"
    if head.startswith("encoderblock_"):
        sub = parts[1]
        if sub in ("query", "key", "value", "out"):
            return f"Transformer/{head}/{names['attn']}/{sub}/{leaf}"
        if sub in ("norm1", "norm2"):
            return f"Transformer/{head}/{names[sub]}/{leaf}"
        if sub in ("mlp_dense1", "mlp_dense2"):
            return f"Transformer/{head}/{names['mlp']}/Dense_{int(sub[-1]) - 1}/{leaf}"
    if head == "encoder_norm":
        return f"Transformer/encoder_norm/{leaf}"
    match = re.fullmatch(r"block(\d+)_unit(\d+)", head)
    if match:
        return f"block{match[1]}/unit{match[2]}/{parts[1]}/{leaf}"
    if head in ("conv_root", "gn_root", "pre_logits", "head"):
        return f"{head}/{leaf}"
    raise ValueError(f"No official checkpoint key for the variable {path!r}.")


def _official_shape(variable, key, model, layout):
    """The shape an official checkpoint stores for a keras-vit variable."""
    shape = tuple(variable.shape)
    if "/MultiHeadDotProductAttention_" in key:
        heads = model.num_heads
        d = model.hidden_size
        name = key.split("/")[-2]
        if name == "out":
            return (heads, d // heads, d) if key.endswith("kernel") else shape
        return (d, heads, d // heads) if key.endswith("kernel") else (heads, d // heads)
    if layout == "released" and re.search(r"(^|/)gn(\d+|_root|_proj)/", key):
        return (1, 1, 1) + shape
    return shape


def _detect_layout(keys):
    if any("MultiHeadDotProductAttention_0" in k or "/MlpBlock_0/" in k for k in keys):
        return "current"
    return "released"


PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")


def refuse_pickle(path):
    """Raises the ValueError for a PyTorch pickle: never read (unpickling can run arbitrary code)."""
    raise ValueError(
        f"{path} is a PyTorch pickle; keras-vit never unpickles (loading a pickle can run arbitrary code). "
        "Convert it to safetensors where you trust it: timm's or transformers' "
        "model.save_pretrained(folder, safe_serialization=True) (timm: timm.models.push_to_hf_hub / "
        "save_for_hf), or safetensors.torch.save_file(torch.load(path), 'model.safetensors'), then load "
        "the folder with config.json and model.safetensors (keras_vit.from_pretrained).")


def read_npz_index(path):
    """{key: (shape, dtype)} from an .npz's array headers, without reading the arrays."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ValueError(f"{path} is not a readable .npz checkpoint (a zip archive of .npy arrays): {e}.") from None
    index = {}
    with archive:
        for info in archive.infolist():
            if info.filename.endswith(".pkl"):  # torch.save's zip: archive/data.pkl and storages
                refuse_pickle(path)
            if not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: member {info.filename!r} is not a .npy array; this is no .npz checkpoint.")
            key = info.filename[: -len(".npy")]
            try:
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = reader(f)
            except Exception as e:  # truncated members, bad headers
                raise ValueError(f"{path}: cannot read the header of array {key!r}: {e}.") from None
            if dtype.hasobject:
                raise ValueError(f"{path}: array {key!r} holds Python objects; keras-vit never unpickles.")
            index[key] = (tuple(shape), dtype)
    if not index:
        raise ValueError(f"{path} holds no arrays.")
    return index


def _verify_data(path):
    """Reads every member once to check its CRC, so loading cannot fail half-way."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zipfile.LargeZipFile) as e:
        raise ValueError(f"{path} is truncated or corrupt: {e}.") from None
    if bad is not None:
        raise ValueError(f"{path} is corrupt: the data of {bad!r} fails its checksum.")


def _squeeze(shape):
    return tuple(d for d in shape if d != 1)


def check_channels(model, channels, source):
    """Refuses weights for `channels`-channel images in a model that takes another count.

    The patch projection (a hybrid's root convolution) has one kernel slice per input
    channel, so RGB weights have no place in a grayscale, RGBA or multispectral model.
    """
    own = model.input_shape[-1]
    if channels != own:
        raise ValueError(
            f"{source} holds weights for {channels}-channel images{' (RGB)' if channels == 3 else ''}, but the "
            f"model {model.name!r} takes {own} channel(s): build it with input_shape=(height, width, {channels}) "
            "to load them, or train it from scratch with weights=None."
        )


# Over 80 lines with its docstring: every check runs before the first assignment (a bad file
# leaves the model unchanged), in one pass over the index; split, the plan would travel between parts.
@refuse_unknown_keywords
def load_official_npz(model: keras.Model, path: str | os.PathLike, *, resample: str = "official") -> dict[str, Any]:
    """Fills a keras-vit model from a checkpoint in the official .npz layout.

    Works for ViT and hybrid models, token and gap pooling, with or without pre-logits,
    in both key layouts (the released files' older Flax names and current Flax names).
    As the official fine-tuning does: a head with another class count is not loaded
    (the model keeps its own, zero-initialized head); pre-logits in the checkpoint are
    dropped when the model has no representation layer; position embeddings are
    resampled to the model's patch grid with `resample` ("official", "bilinear",
    "bicubic"). Everything is checked before anything is assigned: on error the model
    is unchanged.

    Returns a dict with the lists `loaded`, `kept`, `dropped`, `resampled` and the `layout`.

    Example:
    >>> # the sizes of tests/data/official/vit_token_prelogits.npz (the same code loads ViT-B_16.npz into ViTB16)
    >>> model = keras_vit.VisionTransformer(image_size=48, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                                     mlp_dim=64, representation_size=24, classes=10)
    >>> report = load_official_npz(model, "tests/data/official/vit_token_prelogits.npz")  # 32 -> 48 pixels
    >>> report["layout"], report["resampled"]
    ('released', ['position embeddings 4x4 -> 6x6 (official)'])
    >>> report["kept"]  # a head of another class count is not loaded, as in the official fine-tuning
    ['head/kernel (model (24, 10), checkpoint (24, 7))', 'head/bias (model (10,), checkpoint (7,))']
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise missing_checkpoint(path)
    index = read_npz_index(path)
    first_conv = index.get("conv_root/kernel" if model.resnet else "embedding/kernel")
    if first_conv is not None and len(first_conv[0]) == 4:
        check_channels(model, first_conv[0][2], f"Checkpoint {path}")
    layout = _detect_layout(index)
    plan, missing, mismatched = [], [], []
    report = {"layout": layout, "loaded": [], "kept": [], "dropped": [], "resampled": []}
    expected = set()
    for variable in model.weights:
        key = official_key(variable.path, layout)
        expected.add(key)
        want = _official_shape(variable, key, model, layout)
        if key not in index:
            if key.startswith("head/"):
                report["kept"].append(f"{key} (not in the checkpoint)")
            else:
                missing.append(f"{key} {want}")
            continue
        found = index[key][0]
        if found == want or ("/gn" in "/" + key and _squeeze(found) == _squeeze(variable.shape)):
            plan.append((variable, key, None))
        elif key.startswith("head/"):
            report["kept"].append(f"{key} (model {want}, checkpoint {found})")
        elif key == POSEMB_KEY and len(found) == 3 and found[2] == want[2] and \
                ("cls" in index) == bool(model.num_prefix_tokens):
            try:
                old_grid = stored_grid(model, found[1])
            except ValueError as e:
                mismatched.append(f"{key}: expected {want}, found {found} ({e})")
                continue
            plan.append((variable, key, old_grid))
            report["resampled"].append(resample_note(old_grid, model.patch_encoder.grid_size, resample))
        else:
            mismatched.append(f"{key}: expected {want}, found {found}")
    unexpected = []
    for key in sorted(set(index) - expected):
        if key.startswith("pre_logits/") and model.representation_size is None:
            report["dropped"].append(key)
        elif key.startswith("head/") and not model.include_top:
            report["dropped"].append(key)
        else:
            unexpected.append(f"{key} {index[key][0]}")
    if missing or unexpected or mismatched:
        hint = ""
        if any(k.startswith("cls ") for k in unexpected):
            hint = " (the checkpoint has a class token: build the model with classifier='token')"
        raise ValueError(
            f"Checkpoint {path} ({layout} key layout) does not fit the model {model.name!r}: "
            + describe_misfit(missing, unexpected, mismatched, hint) + ". The model was left unchanged."
        )
    _verify_data(path)
    with np.load(path, allow_pickle=False) as npz:
        for variable, key, old_grid in plan:
            value = npz[key]
            if old_grid is not None:
                value = resample_position_embeddings(
                    value, model.patch_encoder.grid_size, old_grid=old_grid,
                    num_prefix_tokens=model.num_posemb_prefix_tokens, method=resample)
            variable.assign(np.reshape(value, variable.shape).astype(variable.dtype))
            report["loaded"].append(key)
            del value
    changes = describe_changes(report)
    log.info("loaded %d arrays from %s (%s layout)%s.", len(report["loaded"]), path, layout,
             "; " + changes if changes else ", every variable of the model")
    return report


# A load report's lists as its log line words them: "kept" are the model's own variables (its head),
# which nothing from the checkpoint was loaded into.
_CHANGE_LABELS = {"kept": "not loaded (the model keeps its own)", "dropped": "dropped", "resampled": "resampled"}


def describe_changes(report):
    """A load report's changes for its log line, only those that happened ("kept: nothing" read
    as if nothing had loaded): "not loaded (the model keeps its own): head/kernel (...); resampled: ..."."""
    return "; ".join(f"{label}: {', '.join(report[key])}" for key, label in _CHANGE_LABELS.items() if report[key])


@refuse_unknown_keywords
def save_official_npz(model: keras.Model, path: str | os.PathLike, *, layout: str = "released") -> str | os.PathLike:
    """Writes a keras-vit model as an official .npz checkpoint (atomically).

    The inverse of `load_official_npz`: the same key table, the official array shapes.
    `layout`: "released" (the released files' older Flax names) or "current" (current Flax names).

    Example:
    >>> model = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                                     mlp_dim=64, classes=10)
    >>> save_official_npz(model, "vit.npz")
    'vit.npz'
    >>> sorted(np.load("vit.npz"))[:3]
    ['Transformer/encoder_norm/bias', 'Transformer/encoder_norm/scale', 'Transformer/encoderblock_0/LayerNorm_0/bias']
    """
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown key layout {layout!r}; use one of {LAYOUTS}.")
    first_stride = (getattr(model, "resnet", None) or {}).get("first_stride", 1)
    if first_stride != 1:  # the arrays would fit, and the official code would run the stem at stride 1
        raise ValueError(f"{model.name} has a stem with resnet first_stride={first_stride}, which the official "
                         "checkpoint layout has no place for (BiT's first stage has stride 1): save the model "
                         "as .keras or .weights.h5 instead.")
    arrays: dict[str, Any] = {}
    for variable in model.weights:
        key = official_key(variable.path, layout)
        arrays[key] = np.reshape(np.asarray(variable.numpy()), _official_shape(variable, key, model, layout))
    with atomic_path(path) as tmp:
        np.savez(tmp, **arrays)
        if not tmp.endswith(".npz"):  # np.savez appends .npz to other names
            os.replace(tmp + ".npz", tmp)
    return path


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

    found = []
    with h5py.File(path, "r") as f:
        first_conv = f.get("layers/std_conv2d/vars/0" if model.resnet else "layers/patch_encoder/projection/vars/0")
        if isinstance(first_conv, h5py.Dataset) and len(first_conv.shape) == 4:
            check_channels(model, first_conv.shape[2], path)
        f.visititems(lambda name, obj: found.append(obj.shape)
                     if isinstance(obj, h5py.Dataset) and "patch_encoder" in name and len(obj.shape) == 3
                     and obj.shape[0] == 1 and obj.shape[1] > 1 else None)
    if not found:
        raise ValueError(f"{path} holds no keras-vit position embeddings (patch_encoder).")
    grid = stored_grid(model, found[0][1])
    stride = (model.image_size[0] // model.patch_encoder.grid_size[0],
              model.image_size[1] // model.patch_encoder.grid_size[1])
    config = dict(model.get_config(), image_size=(grid[0] * stride[0], grid[1] * stride[1]))
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
    index = read_npz_index(os.fspath(checkpoint))
    classifier = "token" if "cls" in index else "gap"
    model = create_model(variant, image_size=image_size, classes=classes, classifier=classifier,
                         representation_size=representation_size)
    log.info("built %s at %s with %d classes (%s classifier)", variant, model.image_size, classes, classifier)
    load_official_npz(model, checkpoint, resample=resample)
    with atomic_path(out, overwrite=overwrite) as tmp:
        model.save(tmp)
    log.info("wrote %s", out)
    return out


def from_official_config(config, image_size=224, **kwargs):
    """A VisionTransformer from a config in the official vit_jax layout (a dict).

    Reads num_classes, patches.size, hidden_size, transformer.{mlp_dim, num_heads,
    num_layers, dropout_rate, attention_dropout_rate}, classifier, representation_size
    and resnet.{num_layers, width_factor}; keyword arguments override.
    """
    check_keywords(kwargs, vit_keywords(), "from_official_config")
    transformer = config["transformer"]
    resnet = config.get("resnet")
    args = dict(
        image_size=image_size,
        patch_size=tuple(config["patches"]["size"]),
        hidden_size=config["hidden_size"],
        num_layers=transformer["num_layers"],
        num_heads=transformer["num_heads"],
        mlp_dim=transformer["mlp_dim"],
        dropout_rate=transformer.get("dropout_rate", 0.0),
        attention_dropout_rate=transformer.get("attention_dropout_rate", 0.0),
        classes=config.get("num_classes") or 1000,
        include_top=bool(config.get("num_classes")),
        classifier=config.get("classifier", "token"),
        representation_size=config.get("representation_size"),
        resnet=None if resnet is None else {"num_layers": tuple(resnet["num_layers"]),
                                            "width_factor": resnet.get("width_factor", 1)},
    )
    args.update(kwargs)
    return VisionTransformer(**args)
