"""Checkpoints as timm and Hugging Face transformers save them for the hub, in and out.

A hub repository of a ViT is a folder with `config.json` and `model.safetensors`. timm's
config names an `architecture` (e.g. "vit_base_patch16_224") with optional `model_args`
and a `pretrained_cfg`; transformers' has `model_type: "vit"`. `from_pretrained` builds
the matching `VisionTransformer` from that config, with the source's numerics (exact GELU,
its LayerNorm epsilon, timm's `fc_norm`, its input mean and std) and loads the weights
through one name table per source. As for official checkpoints, every key and shape is
checked before anything is assigned. PyTorch pickles (.bin, .pth, .pt, .ckpt) are
refused unread: unpickling runs arbitrary code.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from keras_vit._files import atomic_path
from keras_vit._common import check_keywords, describe_misfit, refuse_unknown_keywords
from keras_vit._common import to_pair as _pair
from keras_vit.checkpoints import (PICKLE_SUFFIXES, convert_checkpoint, describe_changes, load_official_npz,
                                   read_npz_index, refuse_pickle)
from keras_vit.presets import missing_checkpoint
from keras_vit.posemb import infer_grid, resample_note, resample_position_embeddings, stored_grid

if TYPE_CHECKING:
    import keras

log = logging.getLogger("keras_vit")

FORMATS = ("official", "timm", "transformers")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)

# timm's ViT families: (embed_dim, depth, num_heads), timm/models/vision_transformer.py.
TIMM_SIZES = {
    "tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16),
    "huge": (1280, 32, 16), "giant": (1536, 40, 24), "so400m": (1152, 27, 16),
}
# timm architectures keras-vit reads, and what each name implies beyond a plain ViT (as timm's entrypoints
# set it: it is not in config.json's model_args, which override it). timm/models/vision_transformer.py, deit.py.
_TIMM_FAMILIES = (
    (re.compile(r"^(vit|deit)_(?P<size>tiny|small|base|large|huge)_patch(?P<patch>\d+)_(?P<img>\d+)$"), "plain"),
    (re.compile(r"^deit_(?P<size>tiny|small|base)_distilled_patch(?P<patch>16)_(?P<img>\d+)$"), "deit_distilled"),
    (re.compile(r"^vit_(?P<size>small|base|large|giant)_patch(?P<patch>14)_(?:reg(?P<reg>\d+)_)?dinov2$"), "dinov2"),
    (re.compile(r"^vit_(?P<size>base|large|huge)_patch(?P<patch>\d+)_clip_(?P<quick>quickgelu_)?(?P<img>\d+)$"),
     "clip"),
    (re.compile(r"^vit_(?P<size>base|large|so400m)_patch(?P<patch>\d+)_siglip_(?P<gap>gap_)?(?P<img>\d+)$"),
     "siglip"),
    (re.compile(r"^beit_(?P<size>base|large)_patch(?P<patch>16)_(?P<img>\d+)$"), "beit"),
)
TIMM_ARCHITECTURES = ("vit_{tiny,...,huge}_patch{P}_{SIZE}", "deit_{tiny,small,base}[_distilled]_patch16_{SIZE}",
                      "vit_{small,base,large,giant}_patch14[_reg{N}]_dinov2", "vit_*_clip[_quickgelu]_{SIZE}",
                      "vit_*_siglip[_gap]_{SIZE}", "beit_{base,large}_patch16_{SIZE}")
# Families keras-vit does not build yet, and the features they need that it lacks.
_MISSING_FEATURES = {
    "beit-shared": "shared relative position bias (one table for every block)",
    "beit-resized": "relative position bias at another size (its table resampled)",
    "data2vec-vision": "relative position bias shared across blocks (read as BEiT's is not checked)",
    "eva": "rotary position embeddings (RoPE) and SwiGLU with its own norm",
    "eva02": "rotary position embeddings (RoPE) and SwiGLU with its own norm",
    "deit3": "no_embed_class LayerScale variant (not read yet)",
}
TRANSFORMERS_ARCHITECTURES = ("ViTForImageClassification", "ViTModel", "DeiTModel",
                              "DeiTForImageClassificationWithTeacher", "Dinov2Model", "Dinov2WithRegistersModel",
                              "CLIPVisionModel", "CLIPVisionModelWithProjection", "CLIPModel", "SiglipVisionModel",
                              "SiglipModel", "BeitModel", "BeitForImageClassification")
TRANSFORMERS_MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers", "clip", "clip_vision_model", "siglip",
                            "siglip_vision_model", "beit")
# model_args that change nothing at inference (dropout rates, init, dynamic input padding).
_TIMM_INERT_ARGS = {"drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
                    "drop_path_rate", "weight_init", "dynamic_img_pad", "in_chans"}
_TIMM_ARGS = {"img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token",
              "global_pool", "fc_norm", "qkv_bias", "num_classes", "reg_tokens", "no_embed_class", "pre_norm",
              "init_values", "act_layer", "mlp_layer", "dynamic_img_size", "use_abs_pos_emb", "use_rel_pos_bias",
              "use_shared_rel_pos_bias"}
# Options whose values other than these (timm's defaults) name a feature keras-vit does not have.
_TIMM_UNSUPPORTED = {"qk_norm": (False, "query/key normalization"), "final_norm": (True, "no final norm")}
_TIMM_ACTIVATIONS = {None: "gelu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}
_TRANSFORMERS_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                             "quick_gelu": "quick_gelu"}
# The source's own resampling of position embeddings at another size (keras_vit.interpolation's names).
TIMM_RESAMPLE = "torch_bicubic_antialias"
TRANSFORMERS_RESAMPLE = {"dinov2_with_registers": "torch_bicubic_antialias"}  # others: "torch_bicubic"


# -- reading -------------------------------------------------------------------------------

def _require_safetensors():
    try:
        import safetensors.numpy as st
    except ImportError:
        raise ImportError("reading and writing safetensors checkpoints needs the safetensors package: "
                          "pip install 'keras-vit[hub]' (or pip install safetensors).") from None
    return st


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a readable JSON file: {e}.") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} holds {type(config).__name__}, not a config object.")
    return config


_HUB_NAME = re.compile(r"^(?:hf-hub:)?([A-Za-z0-9][\w.-]*/[\w.-]+)$")


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
    if not os.path.exists(path) and _HUB_NAME.match(path) and not path.endswith(
            (".npz", ".safetensors", ".keras", ".h5") + PICKLE_SUFFIXES):
        path = _hub_folder(_HUB_NAME.match(path)[1])
    if not os.path.exists(path):
        raise missing_checkpoint(path)
    if os.path.isdir(path):
        folder = path
        index = os.path.join(folder, "model.safetensors.index.json")
        single = os.path.join(folder, "model.safetensors")
        if os.path.isfile(single):
            files = [single]
        elif os.path.isfile(index):
            shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
            if not shards:
                raise ValueError(f"{index} has no weight_map.")
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
    config = _read_json(config_path)
    return _detect_format(config, config_path), config, files


def _detect_format(config, where):
    if "architecture" in config:
        return "timm"
    if "model_type" in config:
        model_type = config["model_type"]
        if model_type not in TRANSFORMERS_MODEL_TYPES:
            missing = _MISSING_FEATURES.get(str(model_type).replace("_", "-"))
            raise ValueError(f"{where}: unsupported transformers model_type {model_type!r}"
                             + (f": keras-vit lacks its {missing}" if missing else "")
                             + f"; keras-vit reads model_type {', '.join(map(repr, TRANSFORMERS_MODEL_TYPES))}.")
        return "transformers"
    raise ValueError(f"{where} is neither a timm config (no 'architecture') nor a transformers config "
                     "(no 'model_type').")


def _read_tensors(files):
    st = _require_safetensors()
    tensors = {}
    for file in files:
        if not os.path.isfile(file):
            raise FileNotFoundError(f"No checkpoint file at {file}.")
        try:
            part = st.load_file(file)
        except Exception as e:  # a truncated header, a dtype numpy has no type for (bfloat16)
            hint = " (NumPy has no bfloat16: save the weights in float32 or float16)" if "bfloat16" in str(e).lower() \
                or "bf16" in str(e).lower() else ""
            raise ValueError(f"{file} is not a safetensors file NumPy can read: {e}{hint}.") from None
        tensors.update(part)
    return tensors


# -- configs -> VisionTransformer arguments --------------------------------------------------

def _class_names(names, count, descriptions=None):
    if isinstance(names, dict):  # {"0": "cat", ...}
        try:
            names = [names[k] for k in sorted(names, key=int)]
        except (ValueError, KeyError):
            return None
    if not names or len(names) != count:
        return None
    names = [str(n) for n in names]
    if all(re.fullmatch(r"LABEL_\d+", n) for n in names):  # transformers' placeholders
        return None
    if descriptions:
        names = [str(descriptions.get(n, n)) for n in names]
    return names


def _timm_family(arch, where):
    """(family, regex match) of a timm architecture name; refusals name the missing feature."""
    for pattern, family in _TIMM_FAMILIES:
        match = pattern.match(arch)
        if match:
            return family, match
    prefix = arch.split("_")[0]
    missing = _MISSING_FEATURES.get(prefix) or _MISSING_FEATURES.get(arch.split("_patch")[0].split("_")[0])
    raise ValueError(f"{where}: unsupported timm architecture {arch!r}"
                     + (f": keras-vit lacks its {missing}" if missing else "")
                     + f"; keras-vit reads {', '.join(TIMM_ARCHITECTURES)} (with any model_args it supports).")


def _timm_implied(family, match):
    """The model_args a timm architecture name implies (its entrypoint's), in timm's names."""
    embed_dim, depth, heads = TIMM_SIZES[match["size"]]
    implied = dict(embed_dim=embed_dim, depth=depth, num_heads=heads, patch_size=int(match["patch"]))
    if match.groupdict().get("img"):
        implied["img_size"] = int(match["img"])
    if family == "deit_distilled":
        implied["distilled"] = True
    elif family == "dinov2":
        implied.update(img_size=518, init_values=1e-5)
        if match["reg"]:
            implied.update(reg_tokens=int(match["reg"]), no_embed_class=True)
        if match["size"] == "giant":
            implied.update(mlp_ratio=2.66667 * 2, mlp_layer="swiglu", act_layer="silu")
    elif family == "clip":
        implied.update(pre_norm=True, norm_eps=1e-5)
        if match["quick"]:
            implied["act_layer"] = "quick_gelu"
    elif family == "siglip":
        implied.update(class_token=False, global_pool="avg" if match["gap"] else "map")
        if match["gap"]:
            implied["fc_norm"] = False
        if match["size"] == "so400m":
            implied["mlp_ratio"] = 3.7362
    elif family == "beit":
        implied.update(use_abs_pos_emb=False, use_rel_pos_bias=True, init_values=0.1, global_pool="avg")
    return implied


def _timm_args(config, tensors, where):
    """VisionTransformer arguments for a timm config.json; also the qkv_bias flag."""
    arch = str(config["architecture"]).split(".")[0]
    family, match = _timm_family(arch, where)
    margs = dict(config.get("model_args") or {})
    unknown = set(margs) - _TIMM_ARGS - _TIMM_INERT_ARGS - set(_TIMM_UNSUPPORTED)
    if unknown:
        raise ValueError(f"{where}: unsupported timm model_args {sorted(unknown)}.")
    for key, (default, feature) in _TIMM_UNSUPPORTED.items():
        if key in margs and margs[key] != default:
            raise ValueError(f"{where}: timm model_args {key}={margs[key]!r} is not supported (keras-vit lacks "
                             f"{feature or key}; supported: {key}={default!r}).")
    if margs.get("in_chans", 3) != 3:
        raise ValueError(f"{where}: in_chans={margs['in_chans']}; keras-vit models take RGB (3 channels).")
    pcfg = config.get("pretrained_cfg") or {}
    o = _timm_implied(family, match)
    if "global_pool" in config:
        o["global_pool"] = config["global_pool"]
    if pcfg.get("input_size"):
        o["img_size"] = pcfg["input_size"][1:]
    o.update(margs)
    if o.get("use_shared_rel_pos_bias"):
        raise ValueError(f"{where}: use_shared_rel_pos_bias=True: keras-vit lacks the "
                         f"{_MISSING_FEATURES['beit-shared']}.")
    embed_dim = int(o["embed_dim"])
    class_token = bool(o.get("class_token", True))
    global_pool = o.get("global_pool", "token")
    if global_pool not in ("token", "avg", "map"):
        raise ValueError(f"{where}: timm global_pool={global_pool!r} is not supported; use 'token', 'avg' or 'map'.")
    if global_pool == "token" and not class_token:
        raise ValueError(f"{where}: global_pool='token' without a class token.")
    fc_norm = o.get("fc_norm")
    if fc_norm is None:  # timm's default: the norm after pooling for average-pooled models
        fc_norm = global_pool == "avg"
    act = o.get("act_layer")
    swiglu = o.get("mlp_layer") == "swiglu"
    if swiglu:
        if act not in ("silu", "swish"):
            raise ValueError(f"{where}: a SwiGLU MLP with act_layer={act!r}; keras-vit's SwiGLU gates with SiLU.")
        activation = "swiglu"
    elif act in _TIMM_ACTIVATIONS:
        activation = _TIMM_ACTIVATIONS[act]
    else:
        raise ValueError(f"{where}: timm act_layer={act!r} is not supported; keras-vit has "
                         f"{sorted(k for k in _TIMM_ACTIVATIONS if k)} (and SwiGLU).")
    width = int(embed_dim * float(o.get("mlp_ratio", 4.0)))
    num_classes = int(o.get("num_classes", config.get("num_classes", 1000)))
    deit = arch.startswith("deit")
    mean = tuple(pcfg.get("mean") or (IMAGENET_MEAN if deit else HALF))
    std = tuple(pcfg.get("std") or (IMAGENET_STD if deit else HALF))
    image_size = o["img_size"]
    args = dict(
        image_size=tuple(image_size) if isinstance(image_size, (list, tuple)) else int(image_size),
        patch_size=int(o["patch_size"]),
        hidden_size=embed_dim,
        num_layers=int(o["depth"]),
        num_heads=int(o["num_heads"]),
        mlp_dim=width // 2 if swiglu else width,  # timm's packed SwiGLU: fc1 is `width` wide, fc2 takes half
        classes=num_classes if num_classes else None,
        include_top=num_classes > 0,
        classifier="token" if class_token else "gap",
        pooling={"token": None, "avg": "gap", "map": "map"}[global_pool],
        fc_norm=bool(fc_norm),
        approximate_gelu=activation == "gelu_tanh",
        mlp_activation=activation if activation in ("quick_gelu", "swiglu") else None,
        layer_norm_epsilon=float(o.get("norm_eps", 1e-6)),
        pixel_mean=mean,
        pixel_std=std,
        distillation=bool(o.get("distilled", False)),
        layer_scale=None if o.get("init_values") is None else float(o["init_values"]),
        register_tokens=int(o.get("reg_tokens", 0)),
        prefix_posemb="none" if o.get("no_embed_class") else "all",
        pre_norm=bool(o.get("pre_norm", False)),
        patch_bias=not o.get("pre_norm", False),  # timm: bias=not pre_norm
        dynamic_image_size=bool(o.get("dynamic_img_size", False)),
        posemb_resample=TIMM_RESAMPLE,
        relative_position_bias=bool(o.get("use_rel_pos_bias", False)),
        absolute_position_embeddings=bool(o.get("use_abs_pos_emb", True)),
        **_timm_view(pcfg, where),
    )
    label_names = config.get("label_names", pcfg.get("label_names"))
    descriptions = config.get("label_descriptions", pcfg.get("label_descriptions"))
    if num_classes:
        args["class_names"] = _class_names(label_names, num_classes, descriptions)
    return args, bool(o.get("qkv_bias", True))


def _timm_view(pcfg, where):
    """The evaluation view timm's pretrained_cfg names (crop_pct, interpolation), where it names one."""
    view = {}
    if pcfg.get("interpolation") in ("bilinear", "bicubic"):
        view["interpolation"] = pcfg["interpolation"]
    if pcfg.get("crop_pct") is not None:
        if pcfg.get("crop_mode", "center") != "center":
            log.info("%s: timm crop_mode=%r is read as a centre crop", where, pcfg["crop_mode"])
        view["crop_pct"] = min(float(pcfg["crop_pct"]), 1.0)
    return view


def _transformers_view(preprocessor):
    """crop_pct and interpolation from an image processor's resample, size and crop_size."""
    view = {}
    if preprocessor.get("resample") in (2, 3):  # PIL's BILINEAR, BICUBIC
        view["interpolation"] = "bilinear" if preprocessor["resample"] == 2 else "bicubic"
    size, crop = preprocessor.get("size"), preprocessor.get("crop_size")
    if preprocessor.get("do_center_crop") and isinstance(size, dict) and isinstance(crop, dict):
        edge = size.get("shortest_edge") or size.get("height")
        if edge and crop.get("height") and crop["height"] < edge:
            view["crop_pct"] = crop["height"] / edge
    return view


# Keys of a transformers file that hold no part of an image tower (a full CLIP/SigLIP model's text side) or
# nothing used at inference (DINOv2's mask token, for masked-image training).
_TRANSFORMERS_SKIPPED = ("text_model.", "text_projection.", "logit_scale", "logit_bias", "embeddings.mask_token")


# Buffers some older files hold that are derived, not learned: an arange of positions (transformers 4.x
# CLIP/SigLIP), BEiT's relative position index (rebuilt from the grid) and timm BEiT's zero key bias.
_DERIVED_BUFFERS = ("embeddings.position_ids", "relative_position_index", "attn.k_bias")


def _strip_prefix(tensors):
    """The image tower's tensors under the names of a bare model: transformers' task models keep the
    backbone under 'vit.' / 'deit.', CLIP and SigLIP (and their 4.x vision-only saves) under 'vision_model.';
    a full CLIP's or SigLIP's text side is left out. CLIP's vector class embedding (D,) and its
    nn.Embedding table (T, D) are given keras-vit's shapes (1, 1, D), (1, T, D)."""
    out = {}
    for key, value in tensors.items():
        if key.startswith(_TRANSFORMERS_SKIPPED):
            continue
        for prefix in ("vit.", "deit.", "beit.", "vision_model."):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        if key == "embeddings.class_embedding" and value.ndim == 1:
            value = value.reshape(1, 1, -1)
        elif key == "embeddings.position_embedding.weight" and value.ndim == 2:
            value = value[None]
        out[key] = value
    return out


def _transformers_naming(tensors):
    """Which transformers key scheme a (prefix-stripped) state dict uses: "vit" (ViT, DeiT), "dinov2"
    or "clip" (CLIP, SigLIP)."""
    if any(k.startswith("encoder.layers.") for k in tensors) or "embeddings.patch_embedding.weight" in tensors:
        return "clip"
    if any(k.endswith((".lambda_1", "relative_position_bias_table")) for k in tensors):
        return "beit"
    if any(re.match(r"encoder\.layer\.\d+\.norm1\.", k) for k in tensors):
        return "dinov2_swiglu" if any(".mlp.weights_in." in k for k in tensors) else "dinov2"
    return "vit"


def _transformers_args(config, tensors, where, preprocessor=None):
    architectures = config.get("architectures") or []
    bad = [a for a in architectures if a not in TRANSFORMERS_ARCHITECTURES]
    if bad:
        hint = {"DeiTForImageClassification": " (its head reads the class token alone, not DeiT's two heads)",
                "Dinov2ForImageClassification": " (its head reads the class token and the mean patch token)"}.get(
                    bad[0], "")
        raise ValueError(f"{where}: unsupported transformers architecture {bad[0]!r}{hint}; keras-vit reads "
                         f"{', '.join(TRANSFORMERS_ARCHITECTURES)}.")
    model_type = config.get("model_type", "vit")
    if model_type in ("clip", "siglip"):  # a full model: the image tower's config is vision_config
        config = dict(config.get("vision_config") or {}, projection_dim=config.get("projection_dim"))
    act = config.get("hidden_act", "gelu")
    if act not in _TRANSFORMERS_ACTIVATIONS:
        raise ValueError(f"{where}: hidden_act={act!r} is not supported; use one of "
                         f"{sorted(_TRANSFORMERS_ACTIVATIONS)}.")
    activation = _TRANSFORMERS_ACTIVATIONS[act]
    if int(config.get("num_channels", 3)) != 3:
        raise ValueError(f"{where}: num_channels={config['num_channels']}; keras-vit models take RGB.")
    preprocessor = preprocessor or {}
    hidden = int(config.get("hidden_size", 768))
    args = dict(
        image_size=config.get("image_size", 224),
        patch_size=config.get("patch_size", 16),
        hidden_size=hidden,
        num_layers=int(config.get("num_hidden_layers", 12)),
        num_heads=int(config.get("num_attention_heads", 12)),
        mlp_dim=int(config.get("intermediate_size", 3072)),
        classifier="token",
        approximate_gelu=activation == "gelu_tanh",
        mlp_activation="quick_gelu" if activation == "quick_gelu" else None,
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        pixel_mean=tuple(preprocessor.get("image_mean") or HALF),
        pixel_std=tuple(preprocessor.get("image_std") or HALF),
        posemb_resample=TRANSFORMERS_RESAMPLE.get(model_type, "torch_bicubic"),
        **_transformers_view(preprocessor),
    )
    head_key = "classifier.weight"
    if model_type in ("vit", "deit"):
        head = bool(set(architectures) & {"ViTForImageClassification", "DeiTForImageClassificationWithTeacher"}) \
            if architectures else head_key in tensors
        if model_type == "deit":
            args["distillation"] = True  # DeiTModel and the teacher model have the token whatever the file
            head_key = "cls_classifier.weight"
        pooler = "pooler.dense.weight" in tensors
        if pooler and config.get("pooler_act", "tanh") != "tanh":
            raise ValueError(f"{where}: pooler_act={config['pooler_act']!r} is not supported; keras-vit's "
                             "pre-logits layer is Dense + tanh.")
        args["representation_size"] = int(config.get("pooler_output_size") or hidden) if pooler else None
    elif model_type in ("dinov2", "dinov2_with_registers"):
        head = False
        ratio = float(config.get("mlp_ratio", 4))
        if config.get("use_swiglu_ffn"):  # transformers' Dinov2SwiGLUFFN hidden width
            args["mlp_dim"] = (int(int(hidden * ratio) * 2 / 3) + 7) // 8 * 8
            args["mlp_activation"] = "swiglu"
        else:
            args["mlp_dim"] = int(hidden * ratio)
        args["layer_scale"] = float(config.get("layerscale_value", 1.0))
        args["register_tokens"] = int(config.get("num_register_tokens", 0))
        args["prefix_posemb"] = "class"  # the registers are inserted after the table is added
        args["layer_norm_epsilon"] = float(config.get("layer_norm_eps", 1e-6))
        args["dynamic_image_size"] = True  # Dinov2Embeddings resamples at every other size, unasked
    elif model_type in ("clip", "clip_vision_model"):
        head = bool(set(architectures) & {"CLIPVisionModelWithProjection", "CLIPModel"}) \
            if architectures else "visual_projection.weight" in tensors
        head_key = "visual_projection.weight"
        # last_hidden_state is the encoder's output; post_layernorm normalizes the pooled class token alone
        args.update(pre_norm=True, patch_bias=False, fc_norm=True, layer_norm_epsilon=float(
            config.get("layer_norm_eps", 1e-5)))
        if head:
            args["classes"] = int(config.get("projection_dim") or 512)
    elif model_type == "beit":
        if config.get("use_shared_relative_position_bias"):
            raise ValueError(f"{where}: use_shared_relative_position_bias=True: keras-vit lacks the "
                             f"{_MISSING_FEATURES['beit-shared']}.")
        head = "BeitForImageClassification" in architectures if architectures else head_key in tensors
        mean_pooling = bool(config.get("use_mean_pooling", True))
        init = config.get("layer_scale_init_value", 0.1)
        # use_mean_pooling: no final norm on the tokens; pooler.layernorm on the mean patch token
        args.update(layer_scale=float(init) if init and init > 0 else None, fc_norm=mean_pooling,
                    pooling="gap" if mean_pooling else None,
                    relative_position_bias=bool(config.get("use_relative_position_bias", False)),
                    absolute_position_embeddings=bool(config.get("use_absolute_position_embeddings", False)))
    else:  # siglip
        head = False
        args.update(classifier="gap", pooling="map" if config.get("vision_use_head", True) else "gap",
                    layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-6)))
    id2label = config.get("id2label") or {}
    if model_type in ("vit", "deit", "beit"):
        classes = len(id2label) if id2label else int(config.get("num_labels", 2))
        if head and head_key in tensors:  # the weights are the truth for the head's width
            classes = int(tensors[head_key].shape[0])
        args["classes"] = classes if head else None
        if head:
            args["class_names"] = _class_names(id2label, classes)
    elif head and head_key in tensors:
        args["classes"] = int(tensors[head_key].shape[0])
    args["include_top"] = head
    if not head:
        args["classes"] = None
    return args, bool(config.get("qkv_bias", True))


def _official_args(path):
    """VisionTransformer arguments read off an official .npz's array shapes."""
    from keras_vit.stem import stem_stride

    index = read_npz_index(path)
    shapes = {k: v[0] for k, v in index.items()}
    blocks = {int(m[1]) for k in shapes if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))}
    query = next((s for k, s in shapes.items() if k.endswith("/query/kernel")), None)
    mlp = next((s for k, s in shapes.items() if re.search(r"/MlpBlock_\d/Dense_0/kernel$", k)), None)
    if not blocks or query is None or mlp is None or "embedding/kernel" not in shapes:
        raise ValueError(f"{path} is not a ViT checkpoint in the official layout (no Transformer/encoderblock_*).")
    units = {}
    for k in shapes:
        m = re.match(r"block(\d+)/unit(\d+)/", k)
        if m:
            units[int(m[1])] = max(units.get(int(m[1]), 0), int(m[2]))
    resnet = None
    if "conv_root/kernel" in shapes:
        root_width = shapes["conv_root/kernel"][-1]
        resnet = {"num_layers": tuple(units[b] for b in sorted(units)),
                  "width_factor": root_width // 64 if root_width % 64 == 0 else root_width / 64}
        if shapes["conv_root/kernel"][0] == 3:  # keras-vit's root for small images
            resnet["root"] = "small"
    patch = shapes["embedding/kernel"][:2]
    prefix = int("cls" in shapes)
    stride = stem_stride(resnet["num_layers"], resnet.get("root", "bit")) if resnet else 1
    try:
        grid = infer_grid(shapes["Transformer/posembed_input/pos_embedding"][1] - prefix)
        image_size = (grid[0] * patch[0] * stride, grid[1] * patch[1] * stride)
    except ValueError:  # a non-square grid: the caller must give image_size
        image_size = None
    head = shapes.get("head/kernel")
    return dict(
        image_size=image_size,
        patch_size=tuple(patch),
        hidden_size=query[0],
        num_layers=max(blocks) + 1,
        num_heads=query[1],
        mlp_dim=mlp[1],
        classes=head[-1] if head else None,
        include_top=head is not None,
        classifier="token" if prefix else "gap",
        representation_size=shapes["pre_logits/kernel"][-1] if "pre_logits/kernel" in shapes else None,
        resnet=resnet,
    )


# -- the name tables -------------------------------------------------------------------------

# transformers' names of a block's sublayers, per key scheme (see _transformers_naming)
_TRANSFORMERS_BLOCK = {
    "vit": {"query": "attention.attention.query", "key": "attention.attention.key",
            "value": "attention.attention.value", "out": "attention.output.dense", "norm1": "layernorm_before",
            "norm2": "layernorm_after", "mlp_dense1": "intermediate.dense", "mlp_dense2": "output.dense"},
    "dinov2": {"query": "attention.attention.query", "key": "attention.attention.key",
               "value": "attention.attention.value", "out": "attention.output.dense", "norm1": "norm1",
               "norm2": "norm2", "mlp_dense1": "mlp.fc1", "mlp_dense2": "mlp.fc2",
               "layer_scale1": "layer_scale1.lambda1", "layer_scale2": "layer_scale2.lambda1"},
    "beit": {"query": "attention.attention.query", "key": "attention.attention.key",
             "value": "attention.attention.value", "out": "attention.output.dense", "norm1": "layernorm_before",
             "norm2": "layernorm_after", "mlp_dense1": "intermediate.dense", "mlp_dense2": "output.dense",
             "layer_scale1": "lambda_1", "layer_scale2": "lambda_2",
             "relative_position_bias_table": "attention.attention.relative_position_bias.relative_position_bias_table"},
    "clip": {"query": "self_attn.q_proj", "key": "self_attn.k_proj", "value": "self_attn.v_proj",
             "out": "self_attn.out_proj", "norm1": "layer_norm1", "norm2": "layer_norm2", "mlp_dense1": "mlp.fc1",
             "mlp_dense2": "mlp.fc2"},
}
_TIMM_BLOCK = {"out": "attn.proj", "norm1": "norm1", "norm2": "norm2", "mlp_dense1": "mlp.fc1",
               "mlp_dense2": "mlp.fc2", "layer_scale1": "ls1.gamma", "layer_scale2": "ls2.gamma"}
# the attention-pool (MAP) head: timm's attn_pool (q; kv packed k then v) and transformers' SigLIP head
# (nn.MultiheadAttention's in_proj packed q, k, v)
_TIMM_MAP = {"probe": ("attn_pool.latent", None), "query": ("attn_pool.q", None), "key": ("attn_pool.kv", (0, 2)),
             "value": ("attn_pool.kv", (1, 2)), "out": ("attn_pool.proj", None), "norm": ("attn_pool.norm", None),
             "mlp_dense1": ("attn_pool.mlp.fc1", None), "mlp_dense2": ("attn_pool.mlp.fc2", None)}
_SIGLIP_MAP = {"probe": ("head.probe", None), "query": ("head.attention.in_proj", (0, 3)),
               "key": ("head.attention.in_proj", (1, 3)), "value": ("head.attention.in_proj", (2, 3)),
               "out": ("head.attention.out_proj", None), "norm": ("head.layernorm", None),
               "mlp_dense1": ("head.mlp.fc1", None), "mlp_dense2": ("head.mlp.fc2", None)}


def _source_key(path, fmt, naming="vit", distillation=False):
    """(source key, packed part (index, count) or None) of a keras-vit variable path; None when there is none.

    `naming` picks transformers' key scheme ("vit" for ViT and DeiT, "dinov2", "clip" for CLIP and SigLIP);
    `distillation` DeiT's head names (cls_classifier, distillation_classifier)."""
    parts = path.split("/")
    leaf = {"gamma": "weight", "beta": "bias", "kernel": "weight", "bias": "bias"}.get(parts[-1])
    head = parts[0]
    timm = fmt == "timm"
    clip = not timm and naming == "clip"
    if head == "patch_encoder":
        if parts[1] == "cls":
            return ("cls_token" if timm else "embeddings.class_embedding" if clip else "embeddings.cls_token"), None
        if parts[1] == "pos_embedding":
            return ("pos_embed" if timm else "embeddings.position_embedding.weight" if clip
                    else "embeddings.position_embeddings"), None
        if parts[1] == "dist_token":  # DeiT's distillation token
            return ("dist_token" if timm else "embeddings.distillation_token"), None
        if parts[1] == "reg_token":
            return ("reg_token" if timm else "embeddings.register_tokens"), None
        return ("patch_embed.proj." if timm else "embeddings.patch_embedding." if clip
                else "embeddings.patch_embeddings.projection.") + leaf, None
    m = re.fullmatch(r"encoderblock_(\d+)", head)
    if m:
        i, sub = m[1], parts[1]
        if timm and naming == "beit":  # timm's Beit: qkv without bias, q_bias and v_bias apart, gamma_1/2
            if sub in ("query", "key", "value") and leaf == "bias":
                return f"blocks.{i}.attn.{sub[0]}_bias", None
            beit = {"layer_scale1": "gamma_1", "layer_scale2": "gamma_2",
                    "relative_position_bias_table": "attn.relative_position_bias_table"}
            if sub in beit:
                return f"blocks.{i}.{beit[sub]}", None
        if timm:
            if sub in ("query", "key", "value"):
                return f"blocks.{i}.attn.qkv.{leaf}", (("query", "key", "value").index(sub), 3)
            name = _TIMM_BLOCK[sub]
            return (f"blocks.{i}.{name}" if sub.startswith("layer_scale") else f"blocks.{i}.{name}.{leaf}"), None
        names = _TRANSFORMERS_BLOCK[naming.replace("_swiglu", "")]
        if sub not in names:
            return None, None
        if sub.startswith(("layer_scale", "relative_position")):
            return f"encoder.layer.{i}.{names[sub]}", None
        if naming == "dinov2_swiglu" and sub.startswith("mlp_dense"):
            name = "mlp.weights_in" if sub == "mlp_dense1" else "mlp.weights_out"
            return f"encoder.layer.{i}.{name}.{leaf}", None
        return (f"encoder.layers.{i}." if clip else f"encoder.layer.{i}.") + f"{names[sub]}.{leaf}", None
    if head == "attention_pool":
        key, part = (_TIMM_MAP if timm else _SIGLIP_MAP)[parts[1]]
        if parts[1] == "probe":
            return key, None
        if not timm and part is not None:  # in_proj_weight, in_proj_bias
            return f"{key}_{leaf}", part
        return f"{key}.{leaf}", part
    if timm:
        names = {"encoder_norm": "norm", "fc_norm": "fc_norm", "head": "head", "head_dist": "head_dist",
                 "pre_norm": "norm_pre"}
    elif clip:
        names = {"encoder_norm": "post_layernorm", "fc_norm": "post_layernorm", "head": "visual_projection",
                 "pre_norm": "pre_layrnorm"}
    else:
        names = {"encoder_norm": "layernorm", "head": "cls_classifier" if distillation else "classifier",
                 "head_dist": "distillation_classifier", "pre_logits": "pooler.dense",
                 "fc_norm": "pooler.layernorm" if naming == "beit" else None}
    if names.get(head):
        return f"{names[head]}.{leaf}", None
    return None, None


def _source_shape(variable, part):
    """The shape the source stores for a keras-vit variable (PyTorch layouts)."""
    shape = tuple(variable.shape)
    if variable.path.endswith("embedding/kernel"):  # conv (ph, pw, C, D) <- (D, C, ph, pw)
        return (shape[3], shape[2], shape[0], shape[1])
    if len(shape) == 2 and variable.path.endswith("/kernel"):  # Dense (in, out) <- Linear (out, in)
        shape = shape[::-1]
    if part is not None:  # packed projections (timm's qkv, kv; in_proj): Linear layers stacked
        shape = (part[1] * shape[0],) + shape[1:]
    return shape


def _to_keras(value, variable, part):
    if part is not None:
        value = np.split(value, part[1], axis=0)[part[0]]
    if variable.path.endswith("embedding/kernel"):
        return np.transpose(value, (2, 3, 1, 0))
    if value.ndim == 2 and variable.path.endswith("/kernel"):
        return value.T
    return value


def _to_source(variable):
    value = np.asarray(variable.numpy())
    if variable.path.endswith("embedding/kernel"):
        return np.transpose(value, (3, 2, 0, 1))
    if value.ndim == 2 and variable.path.endswith("/kernel"):
        return value.T
    return value


# -- loading -------------------------------------------------------------------------------

# Over 80 lines with its docstring: the same check-everything-then-assign pass as load_official_npz.
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
    naming = None
    if fmt == "transformers":
        skipped = sorted(k for k in tensors if k.startswith(_TRANSFORMERS_SKIPPED))
        tensors = _strip_prefix(tensors)
        naming = _transformers_naming(tensors)
    elif getattr(model, "relative_position_bias", False):
        naming = "beit"
    report = {"loaded": [], "kept": [], "dropped": [], "resampled": [], "zeroed": []}
    if fmt == "transformers":
        report["dropped"].extend(skipped)
    plan, missing, mismatched, expected = [], [], [], set()
    for variable in model.weights:
        key, part = _source_key(variable.path, fmt, naming or "vit", getattr(model, "distillation", False))
        # BEiT's attention has no key bias (timm: a zero buffer; transformers: key without bias)
        no_key_bias = naming == "beit" and variable.path.endswith("/key/bias")
        if key is None:
            missing.append(f"{variable.path} (no {fmt} equivalent)")
            continue
        expected.add(key)
        want = _source_shape(variable, part)
        is_head = variable.path.startswith(("head/", "head_dist/"))
        if key not in tensors:
            if is_head and key.endswith(".bias") and key[:-len("bias")] + "weight" in tensors and \
                    tuple(tensors[key[:-len("bias")] + "weight"].shape) == _source_shape(
                        next(v for v in model.weights if v.path == variable.path[:-len("bias")] + "kernel"), None):
                plan.append((variable, None, None, "zero"))  # a head without bias (CLIP's visual_projection)
                report["zeroed"].append(variable.path)
            elif is_head:
                report["kept"].append(f"{key} (not in the checkpoint)")
            elif no_key_bias or not qkv_bias and variable.path.split("/")[1] in ("query", "key", "value") and \
                    variable.path.endswith("/bias"):
                plan.append((variable, None, None, "zero"))
                report["zeroed"].append(variable.path)
            else:
                missing.append(f"{key} {want}")
            continue
        found = tuple(tensors[key].shape)
        if found == want:
            plan.append((variable, key, part, None))
        elif is_head:
            report["kept"].append(f"{key} (model {want}, checkpoint {found})")
        elif variable.path == "patch_encoder/pos_embedding" and len(found) == 3 and found[2] == want[2]:
            try:
                old_grid = stored_grid(model, found[1])
            except ValueError as e:
                mismatched.append(f"{key}: expected {want}, found {found} ({e})")
                continue
            plan.append((variable, key, part, old_grid))
            report["resampled"].append(resample_note(old_grid, model.patch_encoder.grid_size, resample))
        else:
            mismatched.append(f"{key}: expected {want}, found {found}")
    unexpected = []
    head_keys = ("head.", "classifier.", "head_dist.", "cls_classifier.", "distillation_classifier.",
                 "visual_projection.")
    for key in sorted(set(tensors) - expected):
        if key.startswith(head_keys) and not model.include_top:
            report["dropped"].append(key)
        elif key.startswith("pooler.") and model.representation_size is None:
            report["dropped"].append(key)
        elif key.endswith(_DERIVED_BUFFERS):  # recomputed by keras-vit (older files saved them)
            report["dropped"].append(key)
        else:
            unexpected.append(f"{key} {tuple(tensors[key].shape)}")
    if missing or unexpected or mismatched:
        raise ValueError(f"{fmt} checkpoint {source} does not fit the model {model.name!r}: "
                         + describe_misfit(missing, unexpected, mismatched) + ". The model was left unchanged.")
    for variable, key, part, how in plan:
        if how == "zero":
            variable.assign(np.zeros(variable.shape, variable.dtype))
            continue
        value = _to_keras(np.asarray(tensors[key]), variable, part)
        if how is not None:
            value = resample_position_embeddings(value, model.patch_encoder.grid_size, old_grid=how,
                                                 num_prefix_tokens=model.num_posemb_prefix_tokens, method=resample)
        variable.assign(value.astype(variable.dtype))
        if key not in report["loaded"]:
            report["loaded"].append(key)
    pieces = [p for p in (describe_changes(report),) if p]
    if report["zeroed"]:
        pieces.append(f"biases the source has none of set to zero: {len(report['zeroed'])}")
    log.info("loaded %d arrays from %s (%s)%s.", len(report["loaded"]), source, fmt,
             "; " + "; ".join(pieces) if pieces else ", every variable of the model")
    return report


def _read_checkpoint(path):
    """(format, VisionTransformer arguments, tensors, qkv_bias, source files)."""
    fmt, config, files = _locate(path)
    if fmt == "official":
        return fmt, _official_args(files[0]), None, True, files
    where = os.path.join(os.path.dirname(os.path.abspath(files[0])), "config.json")
    tensors = _read_tensors(files)
    if fmt == "timm":
        args, qkv_bias = _timm_args(config, tensors, where)
    else:
        tensors = _strip_prefix(tensors)
        pre = os.path.join(os.path.dirname(where), "preprocessor_config.json")
        args, qkv_bias = _transformers_args(config, tensors, where,
                                            _read_json(pre) if os.path.isfile(pre) else None)
    return fmt, args, tensors, qkv_bias, files


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
    fmt, args, tensors, qkv_bias, files = _read_checkpoint(path)
    if fmt == "official":
        return load_official_npz(model, files[0], resample=resample or "official")
    for name in ("layer_norm_epsilon", "approximate_gelu", "fc_norm", "pixel_mean", "pixel_std", "mlp_activation"):
        if getattr(model, name, None) != args.get(name, False if name == "fc_norm" else None):
            log.warning("%s: the %s checkpoint has %s=%s, the model %r has %s", path, fmt, name, args.get(name),
                        model.name, getattr(model, name, None))
    source = files[0] if len(files) == 1 else os.path.dirname(files[0])
    return load_state_dict(model, tensors, fmt, source=source, qkv_bias=qkv_bias,
                           resample=resample or args["posemb_resample"])


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
    saved with dynamic_img_size.

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
    from keras_vit.models import VARIANTS, VisionTransformer, canonical_variant, vit_keywords

    check_keywords(overrides, vit_keywords() | {"resample", "variant"}, "from_pretrained")
    fmt, args, tensors, qkv_bias, files = _read_checkpoint(path)
    if variant is not None:
        if fmt != "official":
            raise ValueError(f"{path} is a {fmt} checkpoint: its config gives the sizes; variant is for .npz files.")
        args.update(VARIANTS[canonical_variant(variant)])
    if args.get("relative_position_bias") and "image_size" in overrides and \
            _pair(overrides["image_size"], "image_size") != _pair(args["image_size"], "image_size"):
        raise ValueError(f"{path}: image_size={overrides['image_size']!r}, not the checkpoint's "
                         f"{args['image_size']!r}: keras-vit lacks the {_MISSING_FEATURES['beit-resized']}.")
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
    model = VisionTransformer(**args)
    log.info("built a %s ViT (%s) from %s: %dx%d images, %d classes", fmt, _sizes_text(model), path,
             *model.image_size, model.classes if model.include_top else 0)
    if fmt == "official":
        load_official_npz(model, files[0], resample=resample or "official")
    else:
        source = files[0] if len(files) == 1 else os.path.dirname(files[0])
        load_state_dict(model, tensors, fmt, source=source, qkv_bias=qkv_bias,
                        resample=resample or model.posemb_resample)
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

def _timm_arch(model):
    sizes = (model.hidden_size, model.num_layers, model.num_heads)
    family = next((f for f, s in TIMM_SIZES.items() if s == sizes), None)
    if family is None:
        family = next((f for f, (dim, _, _) in TIMM_SIZES.items() if dim == model.hidden_size), "base")
    ph, pw = model.patch_size
    h, w = model.image_size
    return f"vit_{family}_patch{ph}_{h}" if ph == pw and h == w else f"vit_{family}_patch16_224"


def _check_savable(model, fmt):
    from keras_vit.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise ValueError(f"expected a keras_vit.VisionTransformer, got {type(model).__name__}.")
    problems = []
    if model.resnet is not None:
        problems.append("a hybrid ResNet stem")
    if model.pooling == "unpooled":
        problems.append("pooling='unpooled'")
    # the issue-37 families are read, not written yet: their configs need the per-family writers
    for name, plain in (("layer_scale", None), ("register_tokens", 0), ("prefix_posemb", "all"), ("pre_norm", False),
                        ("patch_bias", True), ("mlp_activation", None)):
        if getattr(model, name, plain) != plain:
            problems.append(f"{name}={getattr(model, name)!r} (writing it is not implemented yet)")
    if model.pooling == "map":
        problems.append("pooling='map' (writing it is not implemented yet)")
    if model.relative_position_bias or not model.absolute_position_embeddings:
        problems.append("BEiT's relative position bias (writing it is not implemented yet)")
    if fmt == "transformers" and model.distillation:
        problems.append("a distillation token (writing DeiT's transformers format is not implemented yet)")
    if fmt == "timm":
        if model.representation_size is not None:
            problems.append(f"a pre-logits layer (representation_size={model.representation_size})")
        if model.layer_norm_epsilon != 1e-6:
            problems.append(f"layer_norm_epsilon={model.layer_norm_epsilon:g} (timm's ViT uses 1e-6)")
    else:
        if model.classifier != "token" or model.pooling not in (None, "token"):
            problems.append("pooling other than the class token")
        if model.fc_norm:
            problems.append("fc_norm")
        if model.representation_size is not None and model.include_top:
            problems.append("a pre-logits layer under a head")
        if model.image_size[0] != model.image_size[1] or model.patch_size[0] != model.patch_size[1]:
            problems.append("non-square images or patches")
    if problems:
        raise ValueError(f"{model.name!r} cannot be saved in {fmt}'s format: it has {', '.join(problems)}.")


@refuse_unknown_keywords
def state_dict(model, fmt="timm"):
    """The model's weights as {name: NumPy array} under timm's or transformers' names."""
    _check_savable(model, fmt)
    tensors, qkv = {}, {}
    prefix = "vit." if fmt == "transformers" and model.include_top else ""
    for variable in model.weights:
        key, part = _source_key(variable.path, fmt)
        value = _to_source(variable)
        if part is not None:
            qkv.setdefault(key, [None] * part[1])[part[0]] = value
            continue
        top = key.startswith(("classifier.", "head."))
        tensors[key if top else prefix + key] = value
    for key, parts in qkv.items():
        tensors[key] = np.concatenate(parts, axis=0)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}


def _timm_config(model):
    global_pool = "avg" if model.classifier == "gap" or model.pooling in ("gap", "avg") else "token"
    num_classes = int(model.classes) if model.include_top else 0
    args = dict(num_classes=num_classes, img_size=list(model.image_size), patch_size=model.patch_size[0],
                embed_dim=model.hidden_size, depth=model.num_layers, num_heads=model.num_heads,
                mlp_ratio=model.mlp_dim / model.hidden_size, class_token=model.classifier == "token",
                global_pool=global_pool, fc_norm=model.fc_norm, qkv_bias=True)
    config = {
        "architecture": _timm_arch(model),
        "num_classes": num_classes,
        "num_features": model.hidden_size,
        "global_pool": global_pool,
        "model_args": args,
        "pretrained_cfg": {
            "input_size": [3, *model.image_size], "fixed_input_size": True,
            "interpolation": model.interpolation, "crop_pct": model.crop_pct, "crop_mode": "center",
            "mean": list(model.pixel_mean), "std": list(model.pixel_std),
            "num_classes": num_classes, "pool_size": None, "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
    }
    if model.include_top and model.class_names:
        config["label_names"] = list(model.class_names)
    return config


def _transformers_config(model):
    config = {
        "architectures": ["ViTForImageClassification" if model.include_top else "ViTModel"],
        "model_type": "vit", "hidden_size": model.hidden_size, "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads, "intermediate_size": model.mlp_dim,
        "hidden_act": "gelu_pytorch_tanh" if model.approximate_gelu else "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
        "layer_norm_eps": model.layer_norm_epsilon, "image_size": model.image_size[0],
        "patch_size": model.patch_size[0], "num_channels": 3, "qkv_bias": True,
        "encoder_stride": model.patch_size[0], "pooler_act": "tanh",
        "pooler_output_size": model.representation_size or model.hidden_size, "dtype": "float32",
    }
    if model.include_top:
        names = model.class_names or [f"LABEL_{i}" for i in range(int(model.classes))]
        config["id2label"] = {str(i): n for i, n in enumerate(names)}
        config["label2id"] = {n: i for i, n in enumerate(names)}
    return config


@refuse_unknown_keywords
def save_pretrained(model: keras.Model, folder: str | os.PathLike, *, format: str = "timm", overwrite: bool = False) -> str:
    """Writes a keras-vit model as a hub folder: model.safetensors + config.json (atomically).

    format="timm": timm's names and config (architecture, model_args, pretrained_cfg), which
    timm loads with `timm.create_model(config["architecture"], pretrained=True,
    pretrained_cfg_overlay=dict(file=f"{folder}/model.safetensors"), **config["model_args"])`
    or from the hub. format="transformers": ViTForImageClassification (ViTModel without a
    head) with a preprocessor_config.json. timm's ViT computes the exact GELU: a model
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
    st = _require_safetensors()
    _check_savable(model, format)
    if format == "timm" and model.approximate_gelu:
        log.warning("%s uses the tanh GELU; timm's ViT computes the exact (erf) GELU, so its logits will "
                    "differ slightly (about 1e-4)", model.name)
    tensors = state_dict(model, format)
    config = _timm_config(model) if format == "timm" else _transformers_config(model)
    with atomic_path(folder, overwrite=overwrite) as tmp:
        os.makedirs(tmp)
        st.save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        if format == "transformers":
            pre = {"image_processor_type": "ViTImageProcessor", "do_resize": True, "do_rescale": True,
                   "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": list(model.pixel_mean),
                   "image_std": list(model.pixel_std), "resample": 3 if model.interpolation == "bicubic" else 2,
                   "size": {"height": model.image_size[0], "width": model.image_size[1]}}
            with open(os.path.join(tmp, "preprocessor_config.json"), "w", encoding="utf-8") as f:
                json.dump(pre, f, indent=2)
    log.info("wrote %s (%s format, %d arrays)", folder, format, len(tensors))
    return os.fspath(folder)
