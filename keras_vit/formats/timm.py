"""timm's hub checkpoints (config.json with `architecture`, model.safetensors), in and out.

The config reader (`args_from_config`) and writer (`config_of`), and the name table (`TimmTable`).
timm/models/vision_transformer.py, deit.py, beit.py. The architecture table the reader reads (which
timm names keras-vit reads, what each implies beyond a plain ViT) is keras_vit.presets' TIMM_FAMILIES,
shared with `create_model`.
"""

from __future__ import annotations

import logging
import re

import numpy as np

from keras_vit._common import shown
from keras_vit.formats._headers import Scheme
from keras_vit.formats._torch import (
    HALF,
    IMAGENET_MEAN,
    IMAGENET_STD,
    LEAVES,
    MISSING_FEATURES,
    Joined,
    TorchTable,
    class_names,
    flag,
    integer,
    number,
    numbers_of,
    round_trip_problems,
)
from keras_vit.formats._torch import unsavable as unsavable_common

# The architecture table is the presets' (create_model builds the same names): one place for both.
from keras_vit.presets import TIMM_ARCHITECTURES, TIMM_SIZES, timm_family, timm_model_args

log = logging.getLogger(__name__)

# model_args that change nothing at inference (dropout rates, init, dynamic input padding).
_INERT_ARGS = {"drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
               "drop_path_rate", "weight_init", "dynamic_img_pad", "in_chans"}
_ARGS = {"img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token",
         "global_pool", "fc_norm", "qkv_bias", "num_classes", "reg_tokens", "no_embed_class", "pre_norm",
         "init_values", "act_layer", "mlp_layer", "dynamic_img_size", "use_abs_pos_emb", "use_rel_pos_bias",
         "use_shared_rel_pos_bias",
         # timm's Eva (DINOv3, EVA02): its own names, translated by `_eva_args`
         "num_reg_tokens", "use_fc_norm", "use_rot_pos_emb", "rope_type", "rope_temperature", "rope_rotate_half",
         "rope_grid_offset", "rope_grid_indexing", "ref_feat_shape", "swiglu_mlp", "scale_mlp", "qkv_fused",
         "use_post_transformer_norm", "use_pre_transformer_norm", "scale_attn_inner", "swiglu_align_to",
         "attn_type", "attn_pool_num_heads", "attn_pool_mlp_ratio"}
# Options whose values other than these (timm's defaults) name a feature keras-vit does not have.
_UNSUPPORTED = {"qk_norm": (False, "query/key normalization"), "final_norm": (True, "no final norm")}
_ACTIVATIONS = {None: "gelu", "gelu": "gelu", "gelu_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}
# The pixel statistics of timm's default_cfgs by family, for a config.json without mean/std and for the
# presets built by name (create_model("vit_small_patch14_dinov2")); other families use 0.5 as timm does.
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_FAMILY_STATS = {"deit_distilled": (IMAGENET_MEAN, IMAGENET_STD), "dinov2": (IMAGENET_MEAN, IMAGENET_STD),
                 "clip": (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD), "dinov3": (IMAGENET_MEAN, IMAGENET_STD),
                 "eva02": (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)}
# timm's Eva class (the families with rotary position embeddings): its option values keras-vit builds
# (others are refused, naming the feature), and the RoPE kind each rope_type is.
EVA_FAMILIES = ("dinov3", "eva02", "pe_core")
_EVA_SUPPORTED = {"scale_attn_inner": (False, "a LayerNorm inside the attention (scale_attn_inner)")}
_GRID_INDEXING = {"ij": False, "xy": True}
_ROPE_TYPES = {("dinov3", True): "dinov3", ("cat", False): "axial"}
# timm's own resampling of position embeddings at another size (keras_vit.interpolation's names).
TIMM_RESAMPLE = "torch_bicubic_antialias"


# Where timm keeps the arrays that tell the sizes (formats/_headers.py), and its names for them.
SCHEME = Scheme(layout="torch", patch=r"patch_embed\.proj\.weight", block=r"blocks\.(\d+)\.",
                mlp=r"blocks\.0\.mlp\.fc1\.weight", posemb=r"pos_embed",
                heads=(r"blocks\.0\..*relative_position_bias_table", 1), head=r"head\.weight",
                registers=r"reg_token",
                names={"hidden_size": "embed_dim", "num_layers": "depth", "mlp": "mlp_ratio",
                       "position_tokens": "img_size / pretrained_cfg input_size", "classes": "num_classes",
                       "register_tokens": "reg_tokens"})


def claims(config):
    """Whether a config.json is timm's (it names an `architecture`)."""
    return "architecture" in config


# -- config.json -> VisionTransformer arguments -----------------------------------------------

def family(arch, where):
    """(family, regex match) of a timm architecture name; refusals name the missing feature."""
    found = timm_family(arch)
    if found:
        return found
    prefix = arch.split("_")[0]
    missing = MISSING_FEATURES.get(prefix) or MISSING_FEATURES.get(arch.split("_patch")[0].split("_")[0])
    raise ValueError(f"{where}: unsupported timm architecture {shown(arch)}"
                     + (f": keras-vit lacks its {missing}" if missing else "")
                     + f"; keras-vit reads {', '.join(TIMM_ARCHITECTURES)} (with any model_args it supports).")


def args_from_config(config, tensors, where):
    """(VisionTransformer arguments, qkv_bias) of a timm config.json."""
    if not isinstance(config["architecture"], str):
        raise ValueError(f"{where}: architecture={shown(config['architecture'])} must be a timm model name (a string).")
    arch = config["architecture"].split(".")[0]
    name, match = family(arch, where)
    for part in ("model_args", "pretrained_cfg"):
        if not isinstance(config.get(part) or {}, dict):
            raise ValueError(f"{where}: {part} must be an object, got {type(config[part]).__name__}.")
    margs = dict(config.get("model_args") or {})
    unknown = set(margs) - _ARGS - _INERT_ARGS - set(_UNSUPPORTED)
    if unknown:
        raise ValueError(f"{where}: unsupported timm model_args {sorted(unknown)}.")
    for key, (default, feature) in _UNSUPPORTED.items():
        if key in margs and margs[key] != default:
            raise ValueError(f"{where}: timm model_args {key}={shown(margs[key])} is not supported (keras-vit lacks "
                             f"{feature or key}; supported: {key}={shown(default)}).")
    if integer(margs.get("in_chans", 3), "in_chans", where) != 3:
        raise ValueError(f"{where}: in_chans={margs['in_chans']}; keras-vit models take RGB (3 channels).")
    pcfg = config.get("pretrained_cfg") or {}
    o = timm_model_args(name, match)
    if "global_pool" in config:
        o["global_pool"] = config["global_pool"]
    if pcfg.get("input_size"):
        size = pcfg["input_size"]
        if not isinstance(size, list) or len(size) != 3:
            raise ValueError(f"{where}: pretrained_cfg input_size={shown(size)} must be [channels, height, width].")
        o["img_size"] = size[1:]
    o.update(margs)
    eva = _eva_args(o, name, where) if name in EVA_FAMILIES else {}
    if name not in EVA_FAMILIES and set(o) & _EVA_ONLY:
        raise ValueError(f"{where}: model_args {sorted(set(o) & _EVA_ONLY)} are timm Eva's (DINOv3, EVA02), not "
                         f"{arch!r}'s.")
    if flag(o.get("use_shared_rel_pos_bias"), "use_shared_rel_pos_bias", where):
        raise ValueError(f"{where}: use_shared_rel_pos_bias=True: keras-vit lacks the "
                         f"{MISSING_FEATURES['beit-shared']}.")
    embed_dim = integer(o["embed_dim"], "embed_dim", where)
    class_token = flag(o.get("class_token", True), "class_token", where)
    global_pool = o.get("global_pool", "token")
    if global_pool not in ("token", "avg", "map"):
        raise ValueError(f"{where}: timm global_pool={shown(global_pool)} is not supported; use 'token', 'avg' or 'map'.")
    if global_pool == "token" and not class_token:
        raise ValueError(f"{where}: global_pool='token' without a class token.")
    fc_norm = o.get("fc_norm")
    if fc_norm is None:  # timm's default: the norm after pooling for average-pooled models
        fc_norm = global_pool == "avg"
    act = o.get("act_layer")
    swiglu = o.get("mlp_layer") == "swiglu"
    if swiglu:
        if act not in ("silu", "swish"):
            raise ValueError(f"{where}: a SwiGLU MLP with act_layer={shown(act)}; keras-vit's SwiGLU gates with SiLU.")
        activation = "swiglu"
    elif (act is None or isinstance(act, str)) and act in _ACTIVATIONS:
        activation = _ACTIVATIONS[act]
    else:
        raise ValueError(f"{where}: timm act_layer={shown(act)} is not supported; keras-vit has "
                         f"{sorted(k for k in _ACTIVATIONS if k)} (and SwiGLU).")
    width = int(embed_dim * number(o.get("mlp_ratio", 4.0), "mlp_ratio", where))
    num_classes = integer(o.get("num_classes", config.get("num_classes", 1000)), "num_classes", where)
    if num_classes < 0:
        raise ValueError(f"{where}: num_classes={num_classes} must be >= 0 (0 for no head).")
    default_mean, default_std = _FAMILY_STATS.get(name) or (
        (IMAGENET_MEAN, IMAGENET_STD) if arch.startswith("deit") else (HALF, HALF))
    mean = numbers_of(pcfg.get("mean") or default_mean, "mean", where, 3)
    std = numbers_of(pcfg.get("std") or default_std, "std", where, 3)
    image_size = o["img_size"]
    image_size = (tuple(integer(v, "img_size", where) for v in image_size) if isinstance(image_size, (list, tuple))
                  else integer(image_size, "img_size", where))
    patch_size = o["patch_size"]
    patch_size = (tuple(integer(v, "patch_size", where) for v in patch_size) if isinstance(patch_size, (list, tuple))
                  else integer(patch_size, "patch_size", where))
    args = dict(
        image_size=image_size,
        patch_size=patch_size,
        hidden_size=embed_dim,
        num_layers=integer(o["depth"], "depth", where),
        num_heads=integer(o["num_heads"], "num_heads", where),
        mlp_dim=width // 2 if swiglu else width,  # timm's packed SwiGLU: fc1 is `width` wide, fc2 takes half
        classes=num_classes if num_classes else None,
        include_top=num_classes > 0,
        classifier="token" if class_token else "gap",
        pooling={"token": None, "avg": "gap", "map": "map"}[global_pool],
        fc_norm=flag(fc_norm, "fc_norm", where),
        approximate_gelu=activation == "gelu_tanh",
        mlp_activation=activation if activation in ("quick_gelu", "swiglu") else None,
        layer_norm_epsilon=number(o.get("norm_eps", 1e-6), "norm_eps", where),
        pixel_mean=mean,
        pixel_std=std,
        distillation=flag(o.get("distilled", False), "distilled", where),
        layer_scale=None if o.get("init_values") is None else number(o["init_values"], "init_values", where),
        register_tokens=integer(o.get("reg_tokens", 0), "reg_tokens", where),
        prefix_posemb="none" if flag(o.get("no_embed_class"), "no_embed_class", where) else "all",
        pre_norm=flag(o.get("pre_norm", False), "pre_norm", where),
        patch_bias=not o.get("pre_norm", False),  # timm: bias=not pre_norm
        dynamic_image_size=flag(o.get("dynamic_img_size", False), "dynamic_img_size", where),
        posemb_resample=TIMM_RESAMPLE,
        relative_position_bias=flag(o.get("use_rel_pos_bias", False), "use_rel_pos_bias", where),
        absolute_position_embeddings=flag(o.get("use_abs_pos_emb", True), "use_abs_pos_emb", where),
        **_view(pcfg, where),
    )
    args.update(eva)
    label_names = config.get("label_names", pcfg.get("label_names"))
    descriptions = config.get("label_descriptions", pcfg.get("label_descriptions"))
    if num_classes:
        args["class_names"] = class_names(label_names, num_classes, descriptions)
    return args, flag(o.get("qkv_bias", True), "qkv_bias", where)


_EVA_ONLY = {"num_reg_tokens", "use_fc_norm", "use_rot_pos_emb", "rope_type", "rope_temperature", "rope_rotate_half",
             "rope_grid_offset", "rope_grid_indexing", "ref_feat_shape", "swiglu_mlp", "scale_mlp", "qkv_fused",
             "use_post_transformer_norm", "use_pre_transformer_norm", "scale_attn_inner", "swiglu_align_to",
             "attn_type", "attn_pool_num_heads", "attn_pool_mlp_ratio"}


def _eva_args(o, name, where):
    """timm Eva's model_args `o` rewritten in place into VisionTransformer's timm names (reg_tokens, fc_norm,
    mlp_layer, ...), the unsupported options refused by name; returns the RoPE fields."""
    for key, (default, feature) in _EVA_SUPPORTED.items():
        if o.get(key, default) not in (default, None):
            raise ValueError(f"{where}: timm model_args {key}={shown(o[key])}: keras-vit lacks {feature} (it reads "
                             f"{key}={shown(default)}).")
    flag(o.pop("qkv_fused", True), "qkv_fused", where)  # either layout reads (checkpoint_filter packs q, k, v)
    mlp_norm = flag(o.pop("scale_mlp", False), "scale_mlp", where)
    align = integer(o.pop("swiglu_align_to", 0) or 0, "swiglu_align_to", where)
    if "num_reg_tokens" in o:
        o["reg_tokens"] = o.pop("num_reg_tokens")
    global_pool = o.get("global_pool", "avg")  # Eva's default pooling
    o["global_pool"] = global_pool
    fc_norm = o.pop("use_fc_norm", None)
    o["fc_norm"] = global_pool == "avg" if fc_norm is None else fc_norm
    post = o.pop("use_post_transformer_norm", None)
    if post is not None and bool(post) == bool(o["fc_norm"]):
        raise ValueError(f"{where}: timm model_args use_post_transformer_norm={shown(post)} with fc_norm="
                         f"{shown(o['fc_norm'])}: keras-vit has one final norm, before pooling or after it.")
    extra = {"mlp_norm": mlp_norm}
    pre_norm = flag(o.pop("use_pre_transformer_norm", False), "use_pre_transformer_norm", where)
    o["pre_norm"] = pre_norm  # and no patch bias, as timm's Eva builds it
    # the two attention classes differ in their names alone (EvaAttention: q_bias, v_bias; AttentionRope: one
    # packed qkv bias); keras-vit tells them apart by the pre-transformer norm that comes with the second (PE's)
    attn_type = o.pop("attn_type", "eva")
    if attn_type != ("rope" if pre_norm else "eva"):
        raise ValueError(f"{where}: timm model_args attn_type={shown(attn_type)} with use_pre_transformer_norm="
                         f"{pre_norm}: keras-vit reads timm's Eva with attn_type 'eva' (EVA02, DINOv3) and with 'rope' "
                         "and a norm before the blocks (Perception Encoder).")
    if global_pool == "map":  # Eva's attention pool reads every token, the class token included
        dim = integer(o["embed_dim"], "embed_dim", where)
        heads = o.pop("attn_pool_num_heads", None)
        ratio = o.pop("attn_pool_mlp_ratio", None)
        extra.update(pool_prefix=True, pool_heads=None if heads is None else integer(heads, "attn_pool_num_heads", where),
                     pool_mlp_dim=None if ratio is None else int(dim * number(ratio, "attn_pool_mlp_ratio", where)))
    else:
        for key in ("attn_pool_num_heads", "attn_pool_mlp_ratio"):
            o.pop(key, None)
    if flag(o.pop("swiglu_mlp", False), "swiglu_mlp", where):
        # Eva's SwiGLU: gate and value int(dim * mlp_ratio) wide each (packed GluMlp, or SwiGLU's fc1_g and
        # fc1_x with a sub-LN or an alignment), rounded up to a multiple of swiglu_align_to
        o.update(mlp_layer="swiglu", act_layer="silu")
        hidden = int(integer(o["embed_dim"], "embed_dim", where) * number(o.get("mlp_ratio", 4.0), "mlp_ratio", where))
        extra["mlp_dim"] = hidden + (-hidden % align if align else 0)
    o.setdefault("no_embed_class", False)
    ref = o.pop("ref_feat_shape", None)
    kind = None
    if flag(o.pop("use_rot_pos_emb", False), "use_rot_pos_emb", where):
        rope_type = o.pop("rope_type", "cat")
        half = flag(o.pop("rope_rotate_half", False), "rope_rotate_half", where)
        kind = _ROPE_TYPES.get((rope_type, half))
        if kind is None:
            raise ValueError(f"{where}: timm rope_type={shown(rope_type)} with rope_rotate_half={half}: keras-vit "
                             "reads 'dinov3' (rotate half) and 'cat' (interleaved, EVA02's).")
    temperature = o.pop("rope_temperature", None)
    offset = number(o.pop("rope_grid_offset", 0.0) or 0.0, "rope_grid_offset", where)
    indexing = o.pop("rope_grid_indexing", "ij")
    if indexing not in _GRID_INDEXING:
        raise ValueError(f"{where}: timm model_args rope_grid_indexing={shown(indexing)}; use 'ij' or 'xy'.")
    for key in ("rope_type", "rope_rotate_half"):
        o.pop(key, None)
    if kind is None:
        return extra
    if ref is not None:
        ref = tuple(integer(v, "ref_feat_shape", where) for v in (ref if isinstance(ref, (list, tuple)) else (ref, ref)))
        if kind != "axial":
            ref = None  # timm's DINOv3 RoPE ignores it
    temperature = None if temperature is None else number(temperature, "rope_temperature", where)
    return {**extra, "rope": kind, "rope_temperature": temperature, "rope_grid": ref, "rope_offset": offset,
            "rope_xy": _GRID_INDEXING[indexing]}


def _view(pcfg, where):
    """The evaluation view timm's pretrained_cfg names (crop_pct, interpolation), where it names one."""
    view = {}
    if pcfg.get("interpolation") in ("bilinear", "bicubic"):
        view["interpolation"] = pcfg["interpolation"]
    if pcfg.get("crop_pct") is not None:
        if pcfg.get("crop_mode", "center") != "center":
            log.info("%s: timm crop_mode=%r is read as a centre crop", where, pcfg["crop_mode"])
        view["crop_pct"] = min(number(pcfg["crop_pct"], "crop_pct", where), 1.0)
    return view


# -- timm's other layouts, packed into the one the table names ---------------------------------

def checkpoint_filter(tensors: dict) -> dict:
    """timm's Eva layouts (EVA02 base and large, DINOv3 S+ and H+) as the fused ones the table names, a pure
    dict-to-dict conversion: q_proj / k_proj / v_proj -> qkv (k_proj has no bias: q_bias, v_bias), SwiGLU's
    fc1_g / fc1_x -> one fc1 (the gate first, as the packed GluMlp). Other files pass unchanged."""
    out = dict(tensors)
    for key in [k for k in tensors if re.fullmatch(r"blocks\.\d+\.attn\.q_proj\.weight", k)]:
        stem = key[:-len("q_proj.weight")]
        parts = [out.pop(f"{stem}{p}_proj.weight") for p in "qkv"]
        out[f"{stem}qkv.weight"] = Joined(*parts)
        for p in "qv":
            if f"{stem}{p}_proj.bias" in out:
                out[f"{stem}{p}_bias"] = out.pop(f"{stem}{p}_proj.bias")
    for key in [k for k in tensors if re.fullmatch(r"blocks\.\d+\.mlp\.fc1_g\.(weight|bias)", k)]:
        out[key.replace("fc1_g", "fc1")] = Joined(out.pop(key), out.pop(key.replace("fc1_g", "fc1_x")))
    return out


def split_swiglu(tensors: dict) -> dict:
    """The inverse for writing a SwiGLU with a sub-LN (timm's SwiGLU class): fc1 -> fc1_g, fc1_x."""
    out = {}
    for key, value in tensors.items():
        if re.fullmatch(r"blocks\.\d+\.mlp\.fc1\.(weight|bias)", key):
            gate, x = np.split(value, 2, axis=0)
            out[key.replace("fc1", "fc1_g")], out[key.replace("fc1", "fc1_x")] = gate, x
        else:
            out[key] = value
    return out


# -- the name table ----------------------------------------------------------------------------

_BLOCK = {"out": "attn.proj", "norm1": "norm1", "norm2": "norm2", "mlp_dense1": "mlp.fc1",
          "mlp_dense2": "mlp.fc2", "mlp_norm": "mlp.norm", "layer_scale1": "ls1.gamma", "layer_scale2": "ls2.gamma"}
# timm's Beit: qkv without bias, q_bias and v_bias apart, gamma_1/2
_BEIT_BLOCK = {"layer_scale1": "gamma_1", "layer_scale2": "gamma_2",
               "relative_position_bias_table": "attn.relative_position_bias_table"}
_PATCH_ENCODER = {"cls": "cls_token", "pos_embedding": "pos_embed", "dist_token": "dist_token",
                  "reg_token": "reg_token"}
# the attention-pool (MAP) head: attn_pool (q; kv packed k then v)
_MAP = {"probe": ("attn_pool.latent", None), "query": ("attn_pool.q", None), "key": ("attn_pool.kv", (0, 2)),
        "value": ("attn_pool.kv", (1, 2)), "out": ("attn_pool.proj", None), "norm": ("attn_pool.norm", None),
        "mlp_dense1": ("attn_pool.mlp.fc1", None), "mlp_dense2": ("attn_pool.mlp.fc2", None)}
_TOP = {"encoder_norm": "norm", "fc_norm": "fc_norm", "head": "head", "head_dist": "head_dist", "pre_norm": "norm_pre"}


class TimmTable(TorchTable):
    """timm's names for one model (BEiT's attention when it has a relative position bias)."""

    format = "timm"

    def __init__(self, model, qkv_bias=True):
        super().__init__(model, qkv_bias)
        # timm's Beit and Eva (the RoPE families) share their LayerScale's names, and their attention's
        # (q_bias, v_bias) but for Eva's AttentionRope (Perception Encoder's: one qkv bias)
        self.beit = bool(getattr(model, "relative_position_bias", False)) or getattr(model, "rope", None) is not None
        self.split_bias = self.beit and not (getattr(model, "rope", None) is not None and model.pre_norm)

    def no_key_bias(self, path):  # timm's Beit and EvaAttention: a zero buffer
        return self.split_bias and path.endswith("/key/bias")

    def key(self, path):
        parts = path.split("/")
        leaf = LEAVES.get(parts[-1])
        head = parts[0]
        if head == "patch_encoder":
            return _PATCH_ENCODER.get(parts[1]) or f"patch_embed.proj.{leaf}", None
        m = re.fullmatch(r"encoderblock_(\d+)", head)
        if m:
            i, sub = m[1], parts[1]
            if self.beit:
                if sub in ("query", "key", "value") and leaf == "bias" and self.split_bias:
                    return f"blocks.{i}.attn.{sub[0]}_bias", None
                if sub in _BEIT_BLOCK:
                    return f"blocks.{i}.{_BEIT_BLOCK[sub]}", None
            if sub in ("query", "key", "value"):
                return f"blocks.{i}.attn.qkv.{leaf}", (("query", "key", "value").index(sub), 3)
            name = _BLOCK[sub]
            return (f"blocks.{i}.{name}" if sub.startswith("layer_scale") else f"blocks.{i}.{name}.{leaf}"), None
        if head == "attention_pool":
            key, part = _MAP[parts[1]]
            return (key, None) if parts[1] == "probe" else (f"{key}.{leaf}", part)
        if _TOP.get(head):
            return f"{_TOP[head]}.{leaf}", None
        return None, None


# -- writing -----------------------------------------------------------------------------------

def unsavable(model):
    """What a model has that timm's config cannot say: the written config.json, read back by
    `args_from_config`, must give the model's structure (each difference is named)."""
    problems = unsavable_common(model)
    if problems:
        return problems
    config = config_of(model)
    try:
        args, _ = args_from_config(config, {}, "the written config.json")
    except ValueError as e:
        return [str(e).rstrip(".")]
    same = ()
    if _family_of(model) == "plain" and model.mlp_activation is None and model.approximate_gelu:
        same = ("activation",)  # timm's plain ViT: saved with the warning save_pretrained logs
    return round_trip_problems(model, args, "timm", same)


def _family_of(model):
    """The timm family (architecture table entry) a model is written as."""
    if model.rope is not None:
        if model.pre_norm:  # Eva's AttentionRope blocks and a norm before them
            return "pe_core"
        return "dinov3" if model.rope == "dinov3" else "eva02"
    if model.relative_position_bias or not model.absolute_position_embeddings:
        return "beit"
    if model.distillation:
        return "deit_distilled"
    if model.pooling == "map":
        return "siglip"
    if model.pre_norm:
        return "clip"
    if model.layer_scale is not None or model.register_tokens or model.mlp_activation == "swiglu":
        return "dinov2"
    return "plain"


def _size(model, allowed, default):
    sizes = (model.hidden_size, model.num_layers, model.num_heads)
    return next((f for f in allowed if TIMM_SIZES[f] == sizes), default)


def _arch(model):
    """The architecture name: the family's entrypoint (model_args give the sizes and options)."""
    name = _family_of(model)
    if name == "dinov3":
        return f"vit_{_size(model, ('small', 'base', 'large'), 'small')}_patch16_dinov3"
    if name == "eva02":
        return f"eva02_{_size(model, ('tiny', 'small', 'base', 'large'), 'tiny')}_patch14_224"
    if name == "pe_core":  # the entrypoints timm registers; model_args say every option
        return "vit_pe_core_gigantic_patch14_448" if model.classifier == "gap" else "vit_pe_core_tiny_patch16_384"
    if name == "beit":
        return f"beit_{_size(model, ('base', 'large'), 'base')}_patch16_224"
    if name == "deit_distilled":
        return f"deit_{_size(model, ('tiny', 'small', 'base'), 'base')}_distilled_patch16_224"
    if name == "siglip":
        return f"vit_{_size(model, ('base', 'large'), 'base')}_patch16_siglip_224"
    if name == "clip":
        quick = "quickgelu_" if model.mlp_activation == "quick_gelu" else ""
        return f"vit_{_size(model, ('base', 'large', 'huge'), 'base')}_patch16_clip_{quick}224"
    if name == "dinov2":
        if model.mlp_activation == "swiglu":  # timm's packed SwiGLU comes with the giant entrypoint only
            return "vit_giant_patch14_dinov2"
        reg = "reg4_" if model.register_tokens else ""
        return f"vit_{_size(model, ('small', 'base', 'large'), 'small')}_patch14_{reg}dinov2"
    sizes = (model.hidden_size, model.num_layers, model.num_heads)
    size = next((f for f, s in TIMM_SIZES.items() if s == sizes), None)
    if size is None:
        size = next((f for f, (dim, _, _) in TIMM_SIZES.items() if dim == model.hidden_size), "base")
    ph, pw = model.patch_size
    h, w = model.image_size
    name = f"vit_{size}_patch{ph}_{h}"
    # a name timm has an entrypoint for (model_args give the sizes): timm.create_model refuses others
    return (name if ph == pw and h == w and name in _TIMM_VIT_NAMES
            else f"vit_{size if size in ('tiny', 'small', 'base', 'large') else 'base'}_patch16_224")


_TIMM_VIT_NAMES = {"vit_tiny_patch16_224", "vit_tiny_patch16_384", "vit_small_patch16_224", "vit_small_patch32_224",
                   "vit_small_patch16_384", "vit_small_patch32_384", "vit_base_patch8_224", "vit_base_patch16_224",
                   "vit_base_patch32_224", "vit_base_patch16_384", "vit_base_patch32_384", "vit_large_patch16_224",
                   "vit_large_patch32_224", "vit_large_patch16_384", "vit_large_patch32_384"}


def _model_args(model, name, num_classes, global_pool):
    """timm's model_args: the sizes, and every option the family's entrypoint would set otherwise."""
    swiglu = model.mlp_activation == "swiglu"
    # timm sizes the MLP as int(embed_dim * mlp_ratio) (the packed SwiGLU's fc1 twice keras-vit's width):
    # half a unit above keeps int() from truncating a ratio's round-off below the width
    ratio = (2 * model.mlp_dim + 0.5) / model.hidden_size if swiglu else model.mlp_dim / model.hidden_size
    args = dict(num_classes=num_classes, img_size=list(model.image_size), patch_size=model.patch_size[0],
                embed_dim=model.hidden_size, depth=model.num_layers, num_heads=model.num_heads, mlp_ratio=ratio)
    if name in EVA_FAMILIES:  # timm's Eva: its own argument names
        return _eva_model_args(model, args, global_pool)
    if name == "beit":  # timm's Beit takes none of VisionTransformer's token and norm options
        args.update(global_pool=global_pool, qkv_bias=True, init_values=model.layer_scale,
                    use_abs_pos_emb=model.absolute_position_embeddings,
                    use_rel_pos_bias=model.relative_position_bias)
        return args
    args.update(class_token=model.classifier == "token", global_pool=global_pool, fc_norm=model.fc_norm,
                qkv_bias=True)
    if name == "plain":
        return args
    if model.layer_scale is not None:
        args["init_values"] = model.layer_scale
    if model.register_tokens:
        args["reg_tokens"] = model.register_tokens
    if model.register_tokens or model.prefix_posemb == "none" or name == "dinov2":
        args["no_embed_class"] = model.prefix_posemb == "none"
    if model.pre_norm or name == "clip":
        args["pre_norm"] = model.pre_norm
    if not swiglu and name != "clip":
        act = model.mlp_activation or ("gelu_tanh" if model.approximate_gelu else None)
        if act:
            args["act_layer"] = act
    if model.dynamic_image_size:
        args["dynamic_img_size"] = True
    return args


def _eva_model_args(model, args, global_pool):
    """model_args of timm's Eva (DINOv3, EVA02) for a RoPE model: every option its entrypoint would set."""
    swiglu = model.mlp_activation == "swiglu"
    if swiglu:  # Eva's packed SwiGLU: fc1 2 * int(dim * mlp_ratio) wide
        args["mlp_ratio"] = (model.mlp_dim + 0.5) / model.hidden_size
    args.update(class_token=model.classifier == "token", global_pool=global_pool, use_fc_norm=model.fc_norm,
                qkv_bias=_has_qkv_bias(model), init_values=model.layer_scale, num_reg_tokens=model.register_tokens,
                no_embed_class=model.prefix_posemb == "none", use_abs_pos_emb=model.absolute_position_embeddings,
                use_rot_pos_emb=True, rope_type="dinov3" if model.rope == "dinov3" else "cat",
                rope_rotate_half=model.rope == "dinov3", swiglu_mlp=swiglu, scale_mlp=model.mlp_norm, qkv_fused=True,
                dynamic_img_size=model.dynamic_image_size)
    if model.rope_temperature is not None:
        args["rope_temperature"] = model.rope_temperature
    if model.rope_grid is not None:
        args["ref_feat_shape"] = list(model.rope_grid)
    if model.pre_norm or model.rope_offset or model.rope_xy:
        args.update(use_pre_transformer_norm=model.pre_norm, attn_type="rope" if model.pre_norm else "eva",
                    rope_grid_offset=model.rope_offset, rope_grid_indexing="xy" if model.rope_xy else "ij")
    if global_pool == "map":
        args.update(attn_pool_num_heads=model.pool_heads or model.num_heads,
                    attn_pool_mlp_ratio=((model.pool_mlp_dim or model.mlp_dim) + 0.5) / model.hidden_size)
    return args  # no act_layer, no norm eps: Eva takes neither (the name implies exact GELU and the eps)


def _has_qkv_bias(model):
    """Whether a RoPE model's attention has query or value biases (timm's qkv_bias): DINOv3 has none."""
    import numpy as np

    return any(np.any(np.asarray(block.attention_layer().query.bias.numpy()))
               or np.any(np.asarray(block.attention_layer().value.bias.numpy())) for block in model.blocks)


def config_of(model):
    """timm's config.json of a model (architecture, model_args, pretrained_cfg)."""
    if model.pooling == "map":
        global_pool = "map"
    elif model.classifier == "gap" or model.pooling in ("gap", "avg"):
        global_pool = "avg"
    else:
        global_pool = "token"
    num_classes = int(model.classes) if model.include_top else 0
    name = _family_of(model)
    config = {
        "architecture": _arch(model),
        "num_classes": num_classes,
        "num_features": model.hidden_size,
        "global_pool": global_pool,
        "model_args": _model_args(model, name, num_classes, global_pool),
        "pretrained_cfg": {
            "input_size": [3, *model.image_size], "fixed_input_size": not model.dynamic_image_size,
            "interpolation": model.interpolation, "crop_pct": model.crop_pct, "crop_mode": "center",
            "mean": list(model.pixel_mean), "std": list(model.pixel_std),
            "num_classes": num_classes, "pool_size": None, "first_conv": "patch_embed.proj",
            "classifier": ["head", "head_dist"] if model.distillation else "head",
        },
    }
    if model.include_top and model.class_names:
        config["label_names"] = list(model.class_names)
    return config


def files_of(model):
    """The JSON files of timm's hub folder ({name: content}) beside model.safetensors."""
    return {"config.json": config_of(model)}


def state_dict(model):
    qkv_bias = not (model.rope is not None and not _has_qkv_bias(model))  # DINOv3: no bias keys at all
    tensors = TimmTable(model, qkv_bias).state_dict(model)
    # timm's Eva builds SwiGLU with a sub-LN as fc1_g and fc1_x
    return split_swiglu(tensors) if model.mlp_norm and model.mlp_activation == "swiglu" else tensors
