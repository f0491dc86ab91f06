"""Checkpoints as timm and Hugging Face transformers save them for the hub, in and out: the dispatcher.

A hub repository of a ViT is a folder with `config.json` and `model.safetensors`. timm's
config names an `architecture` (e.g. "vit_base_patch16_224") with optional `model_args`
and a `pretrained_cfg`; transformers' has `model_type: "vit"`. `from_pretrained` finds the
format (keras_vit/formats/: official.py, timm.py, transformers.py, one file per source, each its
name table and config reader and writer), builds the matching `VisionTransformer` from that
config, with the source's numerics (exact GELU, its LayerNorm epsilon, timm's `fc_norm`, its input
mean and std), and loads the weights through the one loading pass every format shares
(formats/_assign.py: every key and shape checked before anything is assigned). PyTorch pickles
(.bin, .pth, .pt, .ckpt) are refused unread: unpickling runs arbitrary code.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from keras_vit._common import check_keywords, refuse_unknown_keywords
from keras_vit._files import atomic_path, is_hub_name
from keras_vit.checkpoints import convert_checkpoint
from keras_vit.dense import transformers as dense_transformers
from keras_vit.formats import official, timm, transformers
from keras_vit.formats._assign import ArraySource, load_into
from keras_vit.formats._headers import (
    check_args,
    check_config,
    check_memory,
    check_parameters,
    config_of,
    read_sizes,
)
from keras_vit.formats._safetensors import open_safetensors
from keras_vit.formats._torch import (  # noqa: F401
    HALF,
    IMAGENET_MEAN,
    IMAGENET_STD,
    MISSING_FEATURES,
    PICKLE_SUFFIXES,
    read_json,
    read_tensors,
    refuse_pickle,
    require_safetensors,
    write_folder,
)
from keras_vit.formats.timm import TIMM_ARCHITECTURES, TIMM_RESAMPLE, TIMM_SIZES  # noqa: F401
from keras_vit.formats.transformers import TRANSFORMERS_ARCHITECTURES, TRANSFORMERS_MODEL_TYPES, TRANSFORMERS_RESAMPLE  # noqa: F401
from keras_vit.presets import missing_checkpoint

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

FORMATS = ("official", "timm", "transformers")
# The writers: format -> its module (unsavable, files_of, state_dict).
_WRITERS = {"timm": timm, "transformers": transformers}


# -- finding a checkpoint and its format -----------------------------------------------------

def _hub_folder(name):
    """The local snapshot folder of a Hugging Face hub repo, through huggingface_hub (its cache and
    offline mode); only the files keras-vit reads are fetched."""
    from keras_vit._optional import require

    huggingface_hub = require("huggingface_hub", "hub", what=f"{name!r}, not a local path, read as a hub name,")
    try:
        return huggingface_hub.snapshot_download(
            name, allow_patterns=["config.json", "preprocessor_config.json", "model.safetensors",
                                  "model.safetensors.index.json", "model-*.safetensors"])
    except Exception as e:  # offline without a cached copy, a missing repo, no network
        raise ValueError(f"{name!r} is neither a local path nor a hub repo huggingface_hub can give "
                         f"({type(e).__name__}: {e}). Offline (HF_HUB_OFFLINE=1) it must be in the cache "
                         "(HF_HUB_CACHE).") from None


def _locate(path):
    """(format, config or None, [weights files]) of a checkpoint file, hub folder or hub name."""
    path = os.fspath(path)
    if is_hub_name(path):
        path = _hub_folder(path.removeprefix("hf-hub:"))
    if not os.path.exists(path):
        raise missing_checkpoint(path)
    if os.path.isdir(path):
        folder = path
        index = os.path.join(folder, "model.safetensors.index.json")
        single = os.path.join(folder, "model.safetensors")
        if os.path.isfile(single):
            files = [single]
        elif os.path.isfile(index):
            weight_map = read_json(index).get("weight_map", {})
            if not isinstance(weight_map, dict) or not all(isinstance(s, str) for s in weight_map.values()):
                raise ValueError(f"{index}: weight_map must be an object {{tensor name: shard file name}}.")
            shards = sorted(set(weight_map.values()))
            if not shards:
                raise ValueError(f"{index} has no weight_map.")
            outside = [s for s in shards if os.path.basename(s) != s or s in ("", ".", "..")]
            if outside:
                raise ValueError(f"{index} names shard {outside[0][:200]!r}, not a file beside it.")
            files = [os.path.join(folder, s) for s in shards]
        else:
            pickles = sorted(f for f in os.listdir(folder) if f.endswith(PICKLE_SUFFIXES))
            if pickles:
                refuse_pickle(os.path.join(folder, pickles[0]))
            raise ValueError(f"{folder} has no model.safetensors (nor model.safetensors.index.json); "
                             f"it holds: {', '.join(sorted(os.listdir(folder))) or 'nothing'}.")
    elif path.endswith(PICKLE_SUFFIXES):
        refuse_pickle(path)
    elif path.endswith(".npz"):
        return "official", None, [path]
    elif path.endswith(".safetensors"):
        folder, files = os.path.dirname(os.path.abspath(path)), [path]
    else:
        raise ValueError(f"{path} is not a checkpoint keras-vit reads: give an official .npz, a hub folder "
                         "(config.json + model.safetensors) or a .safetensors file with config.json beside it.")
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{folder} has no config.json: the architecture of {files[0]} cannot be told "
                         "without it (save the model with timm's or transformers' save_pretrained).")
    config = read_json(config_path)
    return _detect_format(config, config_path), config, files


def _detect_format(config, where):
    if timm.claims(config):
        return "timm"
    if transformers.claims(config, where):
        return "transformers"
    raise ValueError(f"{where} is neither a timm config (no 'architecture') nor a transformers config "
                     "(no 'model_type').")


class _Checkpoint:
    """A located checkpoint, each file opened once: its format, VisionTransformer arguments and, to load
    from, the open .npz or the safetensors' arrays. A context manager (closes the .npz)."""

    def __init__(self, path, located=None):
        fmt, config, files = located or _locate(path)
        self.format, self.files, self.archive, self.tensors, self.qkv_bias = fmt, files, None, None, True
        if fmt == "official":
            self.archive = official.NpzArchive(files[0])
            try:
                self.args = official.args_from_shapes(self.archive.index, files[0])
            except BaseException:
                self.archive.close()
                raise
            return
        where = os.path.join(os.path.dirname(os.path.abspath(files[0])), "config.json")
        if fmt == "transformers" and dense_transformers.claims(config):
            raise ValueError(f"{where}: model_type {config['model_type']!r} is a dense-prediction model (depth or "
                             "segmentation): keras_vit.from_pretrained builds it as a keras_vit.dense.DensePredictor "
                             "with its head; load_pretrained fills a VisionTransformer.")
        tensors = open_safetensors(files)  # the headers, checked against the file; no array read yet
        if fmt == "timm":
            tensors = timm.checkpoint_filter(tensors)
            self.args, self.qkv_bias = timm.args_from_config(config, tensors, where)
        else:
            tensors = transformers.strip_prefix(tensors)
            pre = os.path.join(os.path.dirname(where), "preprocessor_config.json")
            self.args, self.qkv_bias = transformers.args_from_config(
                config, tensors, where, read_json(pre) if os.path.isfile(pre) else None)
        # The config against the weights' shapes, before anything is built from it.
        scheme = timm.SCHEME if fmt == "timm" else transformers.SCHEME
        shapes = {k: tuple(v.shape) for k, v in tensors.items() if not k.startswith(transformers.SKIPPED)}
        found = read_sizes(shapes, scheme)
        check_args(self.args, found, where, scheme)
        saved = config_of(self.args, where)
        check_config(saved, found, where, scheme)
        check_parameters(saved, shapes, where)
        self.tensors = tensors

    def load(self, model, resample):
        if self.archive is not None:
            return official.load_archive(model, self.archive, resample=resample)
        source = self.files[0] if len(self.files) == 1 else os.path.dirname(self.files[0])
        return load_state_dict(model, self.tensors, self.format, source=source, qkv_bias=self.qkv_bias,
                               resample=resample)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.archive is not None:
            self.archive.close()


# -- loading -------------------------------------------------------------------------------

@refuse_unknown_keywords
def load_state_dict(model, tensors, fmt, *, source="the checkpoint", qkv_bias=True, resample="bicubic"):
    """Fills `model` from a timm or transformers state dict ({name: NumPy array}).

    The model's head is kept when the checkpoint's has another class count or none; a
    checkpoint head or pooler the model has no place for is dropped; position embeddings
    are resampled to the model's patch grid (`resample`: "bicubic" as timm, "bilinear",
    "official"). With `qkv_bias=False` (the source has no query/key/value biases) those
    biases are set to zero. Every key and shape is checked first: on error the model is
    unchanged. Returns a dict with the lists `loaded`, `kept`, `dropped`, `resampled`,
    `zeroed`.
    """
    if fmt not in ("timm", "transformers"):
        raise ValueError(f"Unknown state-dict format {fmt!r}; use 'timm' or 'transformers'.")
    skipped = []
    if fmt == "transformers":  # the bare model's names; a full CLIP's text side reported as dropped
        skipped = sorted(k for k in tensors if k.startswith(transformers.SKIPPED))
        tensors = transformers.strip_prefix(tensors)
    table = (transformers.TransformersTable(model, transformers.naming(tensors), qkv_bias, skipped)
             if fmt == "transformers" else timm.TimmTable(model, qkv_bias))
    return load_into(model, table, ArraySource.of(tensors), source=f"{fmt} checkpoint {source}", name=source,
                     resample=resample)


@refuse_unknown_keywords
def load_pretrained(model: keras.Model, path: str | os.PathLike, *, resample: str | None = None) -> dict[str, Any]:
    """Loads a checkpoint into an existing keras-vit model: a hub folder of timm or
    transformers (config.json + model.safetensors), a .safetensors file with its
    config.json beside it, or an official .npz.

    The model must have the checkpoint's architecture; see `from_pretrained` to build it
    from the checkpoint's config. Every key and shape is checked before anything is
    assigned: on error (naming the keys and shapes) the model is unchanged. Options the
    weights cannot show (LayerNorm epsilon, GELU form, input mean and std) are compared
    with the checkpoint's config and a difference is logged. Returns the load report.

    Example:
    >>> model = keras_vit.VisionTransformer(image_size=48, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                                     mlp_dim=64, classes=7, approximate_gelu=False)
    >>> report = load_pretrained(model, "tests/data/timm/timm_vit_token")  # a timm folder
    >>> len(report["loaded"]), report["resampled"], report["dropped"]
    (32, ['position embeddings 4x4 -> 6x6 (torch_bicubic_antialias)'], [])
    """
    with _Checkpoint(path) as checkpoint:
        fmt, args = checkpoint.format, checkpoint.args
        if fmt == "official":
            return checkpoint.load(model, resample or "official")
        for name in ("layer_norm_epsilon", "approximate_gelu", "fc_norm", "pixel_mean", "pixel_std",
                     "mlp_activation"):
            if getattr(model, name, None) != args.get(name, False if name == "fc_norm" else None):
                log.warning("%s: the %s checkpoint has %s=%s, the model %r has %s", path, fmt, name, args.get(name),
                            model.name, getattr(model, name, None))
        return checkpoint.load(model, resample or args["posemb_resample"])


def from_pretrained(path: str | os.PathLike, *, resample: str | None = None, variant: str | None = None,
                    **overrides: Any) -> keras.Model:
    """A VisionTransformer built from a checkpoint's own config, with its weights loaded.

    `path` is a Hugging Face hub folder as timm or transformers save it (config.json +
    model.safetensors, or a sharded model.safetensors.index.json), a .safetensors file
    with its config.json beside it, or an official .npz (then the sizes come from the
    file's shapes, or from `variant`). Supported: timm's vit_* and deit_* (not distilled)
    ViTs and transformers' ViTModel and ViTForImageClassification; PyTorch pickles (.bin,
    .pth, .pt, .ckpt) are refused unread. The model follows the source's numerics (exact
    GELU, its LayerNorm epsilon, timm's fc_norm, no class token where it has none), takes
    its class names (id2label, label_names) and records its input mean and std
    (`preprocess_input(x, model=model)` and exports use them).

    `path` may also be a Hugging Face hub name ("facebook/dinov2-small",
    "timm/vit_small_patch14_reg4_dinov2.lvd142m", or with timm's "hf-hub:" prefix), fetched through
    `huggingface_hub` (pip install 'keras-vit[hub]'): its cache, HF_HUB_CACHE and HF_HUB_OFFLINE apply.

    Families: plain ViTs, DeiT (distilled too: timm `deit_*_distilled_*`, transformers `DeiTModel`,
    `DeiTForImageClassificationWithTeacher`), DINOv2 with and without registers (timm `vit_*_dinov2`,
    `vit_*_reg4_dinov2`; transformers `Dinov2Model`, `Dinov2WithRegistersModel`), CLIP's image tower
    (timm `vit_*_clip_*`; transformers `CLIPVisionModel[WithProjection]` and a full `CLIPModel`'s vision
    tower, whose logits are the image embedding) and SigLIP's (timm `vit_*_siglip_*`; transformers
    `SiglipVisionModel`, a full `SiglipModel`'s vision tower).

    At another size the model resamples its position embeddings as its library does, by default:
    timm's antialiased bicubic ("torch_bicubic_antialias"), transformers' plain bicubic
    ("torch_bicubic"; Dinov2WithRegisters antialiases), the official corner-aligned bilinear for .npz.
    transformers' DINOv2 models take any size (`dynamic_image_size=True`), as there; timm's do when
    saved with dynamic_img_size. BEiT's relative position bias tables are resized as its library
    does (`keras_vit.posemb.resize_relative_position_bias_table`: "timm" or "transformers").

    Keyword arguments override `VisionTransformer` arguments: `image_size` resamples the
    position embeddings once (`resample`, by default the source's method), `posemb_resample` the
    method of a dynamic model, `classes` other than the checkpoint's gives a new zero head,
    `include_top=False` drops the head.

    Example:
    >>> model = from_pretrained("tests/data/timm/timm_vit_token")  # a (tiny) timm hub folder
    >>> model.image_size, model.patch_size, model.classes, model.approximate_gelu
    ((32, 32), (8, 8), 7, False)
    >>> from_pretrained("tests/data/timm/timm_vit_token", image_size=64).image_size  # its position embeddings resampled
    (64, 64)
    """
    from keras_vit.models import vit_keywords

    check_keywords(overrides, vit_keywords() | {"resample", "variant"}, "from_pretrained")
    located = _locate(path)  # once: a hub name is resolved (snapshot_download) here and nowhere else
    fmt, config, files = located
    if fmt == "transformers" and dense_transformers.claims(config):
        return _dense_from_pretrained(config, files, path, resample, variant, overrides)
    with _Checkpoint(path, located) as checkpoint:
        return _build_and_load(checkpoint, path, resample, variant, overrides)


_DENSE_OVERRIDES = ("image_size", "dynamic_image_size", "posemb_resample", "attention_implementation", "remat",
                    "dropout_rate", "attention_dropout_rate", "drop_path_rate", "name")


def _dense_from_pretrained(config, files, path, resample, variant, overrides):
    """transformers' DPT / Depth Anything folder -> a DensePredictor (keras_vit/dense/transformers.py)."""
    if variant is not None or resample is not None:
        raise ValueError(f"{path} is a dense transformers checkpoint: its config gives the sizes and its "
                         "backbone's resampling; drop variant / resample (posemb_resample sets the method).")
    unsupported = sorted(set(overrides) - set(_DENSE_OVERRIDES))
    if unsupported:
        raise ValueError(f"{path} is a dense-prediction checkpoint: {unsupported[0]!r} is a classifier's option; "
                         f"a dense model's backbone takes {', '.join(_DENSE_OVERRIDES)}.")
    folder = os.path.dirname(os.path.abspath(files[0]))
    tensors = open_safetensors(files)
    model = dense_transformers.from_folder(config, tensors, folder, **overrides)
    log.info("built a transformers %s (%s backbone: %s) from %s", model.head_config.kind, model.task,
             _sizes_text(model.backbone), path)
    return model


def _build_and_load(checkpoint, path, resample, variant, overrides):
    from keras_vit.config import ViTConfig
    from keras_vit.models import VARIANTS, VisionTransformer, canonical_variant

    fmt, args = checkpoint.format, checkpoint.args
    if variant is not None:
        if fmt != "official":
            raise ValueError(f"{path} is a {fmt} checkpoint: its config gives the sizes; variant is for .npz files.")
        args.update(VARIANTS[canonical_variant(variant)])
        if args.get("image_size") is not None:  # the variant's sizes against the file's, before building it
            shapes = {k: v[0] for k, v in checkpoint.archive.index.items()}
            check_config(config_of(args, f"{path} as variant {variant!r}"), read_sizes(shapes, official.SCHEME),
                         f"{path} as variant {variant!r}", official.SCHEME)
    if args.get("image_size") is None and "image_size" not in overrides:
        raise ValueError(f"{path}: the position embeddings are not on a square grid; pass image_size=(H, W).")
    if "classes" in overrides and overrides["classes"] != args.get("classes"):
        args.pop("class_names", None)  # the checkpoint's names belong to its own head
        args["include_top"] = True  # a new head, also on a headless checkpoint
    if not overrides.get("include_top", True):
        args.pop("class_names", None)
    args.update(overrides)
    if args.get("class_names") is None:
        args.pop("class_names", None)
    config = ViTConfig(**args)
    check_memory(config, str(path))
    model = VisionTransformer(config)
    log.info("built a %s ViT (%s) from %s: %dx%d images, %d classes", fmt, _sizes_text(model), path,
             *model.image_size, model.classes if model.include_top else 0)
    checkpoint.load(model, resample or ("official" if fmt == "official" else model.posemb_resample))
    return model

def _sizes_text(model):
    return (f"width {model.hidden_size}, depth {model.num_layers}, {model.num_heads} heads, "
            f"patch {model.patch_size[0]}x{model.patch_size[1]}")


def detect_format(path):
    """"official", "timm" or "transformers": the kind of checkpoint at `path` (raises if none)."""
    return _locate(path)[0]


@refuse_unknown_keywords
def convert(path, out, *, variant=None, image_size=None, classes=None, representation_size=None, resample=None,
            overwrite=False):
    """`keras-vit convert`: any checkpoint `from_pretrained` reads -> a `.keras` model, atomically.

    An official .npz with `variant` goes through `convert_checkpoint` as before (224 px,
    1000 classes unless given); otherwise the checkpoint's own config (or shapes) sizes the
    model and `image_size` / `classes` override it.
    """
    out = os.fspath(out)
    if not out.endswith(".keras"):
        raise ValueError(f"--out must end in .keras, got {out}.")
    if os.path.exists(out) and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it.")
    fmt = detect_format(path)
    if fmt == "official" and variant is not None:
        return convert_checkpoint(path, out, variant=variant, image_size=image_size or 224,
                                  classes=classes or 1000, representation_size=representation_size,
                                  resample=resample or "official", overwrite=overwrite)
    if variant is not None:
        raise ValueError(f"{path} is a {fmt} checkpoint: its config gives the sizes, drop --variant.")
    overrides = {k: v for k, v in dict(image_size=image_size, classes=classes).items() if v is not None}
    if representation_size is not None or fmt == "official":  # the official fine-tuning drops pre-logits
        overrides["representation_size"] = representation_size
    log.info("%s is %s %s checkpoint", path, "an" if fmt == "official" else "a", fmt)
    model = from_pretrained(path, resample=resample, **overrides)
    with atomic_path(out, overwrite=overwrite) as tmp:
        model.save(tmp)
    log.info("wrote %s", out)
    return out

# -- saving --------------------------------------------------------------------------------

def _check_savable(model, fmt):
    from keras_vit.dense.model import DensePredictor
    from keras_vit.models import VisionTransformer

    if isinstance(model, DensePredictor):
        if fmt != "transformers":
            raise ValueError(f"{model.name!r} is a dense model: format='transformers' writes it (DPT, Depth "
                             f"Anything); {fmt} has no dense heads.")
        problems = dense_transformers.unsavable(model)
        if problems:
            raise ValueError(f"{model.name!r} cannot be saved in transformers' format: it has {', '.join(problems)}.")
        return
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"expected a keras_vit.VisionTransformer, got {type(model).__name__}.")
    problems = _WRITERS[fmt].unsavable(model)
    if problems:
        raise ValueError(f"{model.name!r} cannot be saved in {fmt}'s format: it has {', '.join(problems)}.")


@refuse_unknown_keywords
def state_dict(model, fmt="timm"):
    """The model's weights as {name: NumPy array} under timm's or transformers' names."""
    if fmt not in _WRITERS:
        raise ValueError(f"Unknown format {fmt!r}; use 'timm' or 'transformers'.")
    _check_savable(model, fmt)
    return _writer_of(model, fmt).state_dict(model)


def _writer_of(model, fmt):
    from keras_vit.dense.model import DensePredictor

    return dense_transformers if isinstance(model, DensePredictor) else _WRITERS[fmt]


@refuse_unknown_keywords
def save_pretrained(model: keras.Model, folder: str | os.PathLike, *, format: str = "timm", overwrite: bool = False) -> str:
    """Writes a keras-vit model as a hub folder: model.safetensors + config.json (atomically).

    format="timm": timm's names and config (architecture, model_args, pretrained_cfg), which
    timm loads with `timm.create_model(config["architecture"], pretrained=True,
    pretrained_cfg_overlay=dict(file=f"{folder}/model.safetensors"), **config["model_args"])`
    or from the hub. format="transformers": ViTForImageClassification (ViTModel without a
    head) with a preprocessor_config.json. The families read from timm and transformers
    (DeiT distilled, DINOv2 with registers or SwiGLU, CLIP, SigLIP, BEiT) are written back as
    their source's architectures (docs/checkpoints.md); a model whose structure the written
    config would not give back is refused, naming each difference. timm's ViT computes the exact GELU: a model
    built with `approximate_gelu=True` is saved with a log line saying its logits will
    move slightly. Returns the folder.

    Example:
    >>> model = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
    ...                                     mlp_dim=64, classes=10, approximate_gelu=False)
    >>> save_pretrained(model, "my_vit", format="timm")
    'my_vit'
    >>> sorted(os.listdir("my_vit")), from_pretrained("my_vit").count_params() == model.count_params()
    (['config.json', 'model.safetensors'], True)
    """
    if format not in ("timm", "transformers"):
        raise ValueError(f"Unknown format {format!r}; use 'timm' or 'transformers'.")
    require_safetensors()
    _check_savable(model, format)
    if format == "timm" and getattr(model, "approximate_gelu", False):
        log.warning("%s uses the tanh GELU; timm's ViT computes the exact (erf) GELU, so its logits will "
                    "differ slightly (about 1e-4)", model.name)
    tensors = state_dict(model, format)
    write_folder(folder, tensors, _writer_of(model, format).files_of(model), overwrite=overwrite)
    log.info("wrote %s (%s format, %d arrays)", folder, format, len(tensors))
    return os.fspath(folder)
