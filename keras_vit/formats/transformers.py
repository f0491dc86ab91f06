"""Hugging Face transformers' hub checkpoints (config.json with `model_type`, model.safetensors), in and out.

The model_type table (which types and architectures keras-vit reads), the config reader
(`args_from_config`, with preprocessor_config.json's view) and writer (`files_of`), and the name
table (`TransformersTable`, one block scheme per family: ViT/DeiT, DINOv2, BEiT, CLIP/SigLIP).
transformers/models/{vit,deit,dinov2,dinov2_with_registers,clip,siglip,beit}/modeling_*.py.
"""

from __future__ import annotations

import os
import re

import numpy as np

from keras_vit._common import is_int, shown
from keras_vit.formats._headers import Scheme
from keras_vit.formats._torch import (
    HALF,
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

TRANSFORMERS_ARCHITECTURES = ("ViTForImageClassification", "ViTModel", "DeiTModel",
                              "DeiTForImageClassificationWithTeacher", "Dinov2Model", "Dinov2WithRegistersModel",
                              "CLIPVisionModel", "CLIPVisionModelWithProjection", "CLIPModel", "SiglipVisionModel",
                              "SiglipModel", "BeitModel", "BeitForImageClassification", "DINOv3ViTModel")
TRANSFORMERS_MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers", "clip", "clip_vision_model", "siglip",
                            "siglip_vision_model", "beit", "dinov3_vit")
DENSE_MODEL_TYPES = ("dpt", "depth_anything")  # dense heads on a backbone: keras_vit/dense/transformers.py
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "quick_gelu": "quick_gelu"}
# transformers' own resampling of position embeddings at another size (keras_vit.interpolation's names)
TRANSFORMERS_RESAMPLE = {"dinov2_with_registers": "torch_bicubic_antialias"}  # others: "torch_bicubic"
# Keys of a transformers file that hold no part of an image tower (a full CLIP/SigLIP model's text side) or
# nothing used at inference (DINOv2's mask token, for masked-image training).
SKIPPED = ("text_model.", "text_projection.", "logit_scale", "logit_bias", "embeddings.mask_token")


# Where transformers keeps the arrays that tell the sizes (prefix-stripped keys of every family: ViT, DeiT,
# DINOv2, BEiT, CLIP, SigLIP; formats/_headers.py), and its names for them.
SCHEME = Scheme(layout="torch", patch=r"embeddings\.patch_embeddings?\.(projection\.)?weight",
                block=r"(?:encoder\.layers?|layer)\.(\d+)\.",
                mlp=r"(?:encoder\.layers?|layer)\.0\.(intermediate\.dense|mlp\.fc1|mlp\.weights_in|mlp\.gate_up_proj|mlp\.up_proj)\.weight",
                posemb=r"embeddings\.position_embeddings?(\.weight)?",
                heads=(r"encoder\.layer\.0\..*relative_position_bias_table", 1),
                head=r"(classifier|cls_classifier|visual_projection)\.weight", pre_logits=r"pooler\.dense\.weight",
                registers=r"embeddings\.register_tokens",
                names={"num_layers": "num_hidden_layers", "mlp": "intermediate_size / mlp_ratio",
                       "num_heads": "num_attention_heads", "position_tokens": "image_size",
                       "classes": "id2label / num_labels / projection_dim", "register_tokens": "num_register_tokens"})


def claims(config, where):
    """Whether a config.json is transformers' (it names a `model_type`); a model_type keras-vit does not
    read is refused, naming the feature it lacks where known."""
    if "model_type" not in config:
        return False
    model_type = config["model_type"]
    if model_type in DENSE_MODEL_TYPES:  # keras_vit/dense/transformers.py reads them
        return True
    if model_type not in TRANSFORMERS_MODEL_TYPES:
        missing = MISSING_FEATURES.get(str(model_type).replace("_", "-"))
        raise ValueError(f"{where}: unsupported transformers model_type {shown(model_type)}"
                         + (f": keras-vit lacks its {missing}" if missing else "")
                         + f"; keras-vit reads model_type {', '.join(map(repr, TRANSFORMERS_MODEL_TYPES))}.")
    return True


def strip_prefix(tensors):
    """The image tower's tensors under the names of a bare model: transformers' task models keep the
    backbone under 'vit.' / 'deit.', CLIP and SigLIP (and their 4.x vision-only saves) under 'vision_model.';
    a full CLIP's or SigLIP's text side is left out. CLIP's vector class embedding (D,) and its nn.Embedding
    table (T, D) are given keras-vit's shapes (1, 1, D), (1, T, D). DINOv3's gated MLP (gate_proj, up_proj) is
    packed into one `mlp.gate_up_proj`, the gate first, as keras-vit's SwiGLU holds it (read when asked for)."""
    out = {}
    for key, value in tensors.items():
        if key.startswith(SKIPPED):
            continue
        for prefix in ("vit.", "deit.", "beit.", "vision_model."):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        if key == "embeddings.class_embedding" and value.ndim == 1:
            value = value.reshape(1, 1, -1)
        elif key == "embeddings.position_embedding.weight" and value.ndim == 2:
            value = value.reshape((1,) + tuple(value.shape))
        out[key] = value
    for key in [k for k in out if re.fullmatch(r"layer\.\d+\.mlp\.gate_proj\.(weight|bias)", k)]:
        up = key.replace("gate_proj", "up_proj")
        if up in out:
            out[key.replace("gate_proj", "gate_up_proj")] = Joined(out.pop(key), out.pop(up))
    return out


def naming(tensors):
    """Which transformers key scheme a (prefix-stripped) state dict uses: "vit" (ViT, DeiT), "dinov2"
    (or "dinov2_swiglu"), "beit", "clip" (CLIP, SigLIP) or "dinov3" ("dinov3_kbias" with a key bias)."""
    if any(re.match(r"layer\.\d+\.attention\.q_proj\.", k) for k in tensors):  # DINOv3ViTModel
        return "dinov3_kbias" if any(re.match(r"layer\.\d+\.attention\.k_proj\.bias", k) for k in tensors) else "dinov3"
    if any(k.startswith("encoder.layers.") for k in tensors) or "embeddings.patch_embedding.weight" in tensors:
        return "clip"
    if any(k.endswith((".lambda_1", "relative_position_bias_table")) for k in tensors):
        return "beit"
    if any(re.match(r"encoder\.layer\.\d+\.norm1\.", k) for k in tensors):
        return "dinov2_swiglu" if any(".mlp.weights_in." in k for k in tensors) else "dinov2"
    return "vit"


# -- config.json -> VisionTransformer arguments -----------------------------------------------

def _view(preprocessor):
    """crop_pct and interpolation from an image processor's resample, size and crop_size."""
    view = {}
    if preprocessor.get("resample") in (2, 3):  # PIL's BILINEAR, BICUBIC
        view["interpolation"] = "bilinear" if preprocessor["resample"] == 2 else "bicubic"
    size, crop = preprocessor.get("size"), preprocessor.get("crop_size")
    if preprocessor.get("do_center_crop") and isinstance(size, dict) and isinstance(crop, dict):
        edge, height = size.get("shortest_edge") or size.get("height"), crop.get("height")
        if is_int(edge) and is_int(height) and 0 < height < edge:
            view["crop_pct"] = height / edge
    return view


def args_from_config(config, tensors, where, preprocessor=None):
    """(VisionTransformer arguments, qkv_bias) of a transformers config.json (and preprocessor_config.json);
    `tensors` (prefix-stripped) tell whether a head and a pooler are there."""
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError(f"{where}: architectures={shown(architectures)} must be a list of class names.")
    bad = [a for a in architectures if a not in TRANSFORMERS_ARCHITECTURES]
    if bad:
        hint = {"DeiTForImageClassification": " (its head reads the class token alone, not DeiT's two heads)",
                "Dinov2ForImageClassification": " (its head reads the class token and the mean patch token)"}.get(
                    bad[0], "")
        raise ValueError(f"{where}: unsupported transformers architecture {shown(bad[0])}{hint}; keras-vit reads "
                         f"{', '.join(TRANSFORMERS_ARCHITECTURES)}.")
    model_type = config.get("model_type", "vit")
    if model_type in ("clip", "siglip"):  # a full model: the image tower's config is vision_config
        if not isinstance(config.get("vision_config") or {}, dict):
            raise ValueError(f"{where}: vision_config must be an object, got {type(config['vision_config']).__name__}.")
        config = dict(config.get("vision_config") or {}, projection_dim=config.get("projection_dim"))
    act = config.get("hidden_act", "gelu")
    gated = model_type == "dinov3_vit" and flag(config.get("use_gated_mlp", False), "use_gated_mlp", where)
    if gated:  # DINOv3ViTGatedMLP: down(act(gate(x)) * up(x)), keras-vit's SwiGLU when act is SiLU
        if act not in ("silu", "swish"):
            raise ValueError(f"{where}: use_gated_mlp=true with hidden_act={shown(act)}: keras-vit's gated MLP (SwiGLU) "
                             "gates with SiLU (hidden_act 'silu').")
        activation = "swiglu"
    elif not isinstance(act, str) or act not in _ACTIVATIONS:
        raise ValueError(f"{where}: hidden_act={shown(act)} is not supported; use one of {sorted(_ACTIVATIONS)}.")
    else:
        activation = _ACTIVATIONS[act]
    if integer(config.get("num_channels", 3), "num_channels", where) != 3:
        raise ValueError(f"{where}: num_channels={config['num_channels']}; keras-vit models take RGB.")
    preprocessor = preprocessor or {}
    pre_where = os.path.join(os.path.dirname(where), "preprocessor_config.json")
    hidden = integer(config.get("hidden_size", 768), "hidden_size", where)
    sizes = {}
    for name, default in (("image_size", 224), ("patch_size", 16)):
        value = config.get(name, default)
        sizes[name] = (tuple(integer(v, name, where) for v in value) if isinstance(value, (list, tuple))
                       else integer(value, name, where))
    args = dict(
        **sizes,
        hidden_size=hidden,
        num_layers=integer(config.get("num_hidden_layers", 12), "num_hidden_layers", where),
        num_heads=integer(config.get("num_attention_heads", 12), "num_attention_heads", where),
        mlp_dim=integer(config.get("intermediate_size", 3072), "intermediate_size", where),
        classifier="token",
        approximate_gelu=activation == "gelu_tanh",
        mlp_activation=activation if activation in ("quick_gelu", "swiglu") else None,
        layer_norm_epsilon=number(config.get("layer_norm_eps", 1e-12), "layer_norm_eps", where),
        pixel_mean=numbers_of(preprocessor.get("image_mean") or HALF, "image_mean", pre_where, 3),
        pixel_std=numbers_of(preprocessor.get("image_std") or HALF, "image_std", pre_where, 3),
        posemb_resample=TRANSFORMERS_RESAMPLE.get(model_type, "torch_bicubic"),
        **_view(preprocessor),
    )
    head_key = "classifier.weight"
    if model_type in ("vit", "deit"):
        head = (bool(set(architectures) & {"ViTForImageClassification", "DeiTForImageClassificationWithTeacher"})
                if architectures else head_key in tensors)
        if model_type == "deit":
            args["distillation"] = True  # DeiTModel and the teacher model have the token whatever the file
            head_key = "cls_classifier.weight"
        pooler = "pooler.dense.weight" in tensors
        if pooler and config.get("pooler_act", "tanh") != "tanh":
            raise ValueError(f"{where}: pooler_act={shown(config['pooler_act'])} is not supported; keras-vit's "
                             "pre-logits layer is Dense + tanh.")
        args["representation_size"] = (integer(config.get("pooler_output_size") or hidden, "pooler_output_size", where)
                                       if pooler else None)
    elif model_type in ("dinov2", "dinov2_with_registers"):
        head = False
        ratio = number(config.get("mlp_ratio", 4), "mlp_ratio", where)
        if flag(config.get("use_swiglu_ffn"), "use_swiglu_ffn", where):  # transformers' Dinov2SwiGLUFFN hidden width
            args["mlp_dim"] = (int(int(hidden * ratio) * 2 / 3) + 7) // 8 * 8
            args["mlp_activation"] = "swiglu"
        else:
            args["mlp_dim"] = int(hidden * ratio)
        args["layer_scale"] = number(config.get("layerscale_value", 1.0), "layerscale_value", where)
        args["register_tokens"] = integer(config.get("num_register_tokens", 0), "num_register_tokens", where)
        args["prefix_posemb"] = "class"  # the registers are inserted after the table is added
        args["layer_norm_epsilon"] = number(config.get("layer_norm_eps", 1e-6), "layer_norm_eps", where)
        args["dynamic_image_size"] = True  # Dinov2Embeddings resamples at every other size, unasked
    elif model_type in ("clip", "clip_vision_model"):
        head = (bool(set(architectures) & {"CLIPVisionModelWithProjection", "CLIPModel"})
                if architectures else "visual_projection.weight" in tensors)
        head_key = "visual_projection.weight"
        # last_hidden_state is the encoder's output; post_layernorm normalizes the pooled class token alone
        args.update(pre_norm=True, patch_bias=False, fc_norm=True, layer_norm_epsilon=number(
            config.get("layer_norm_eps", 1e-5), "layer_norm_eps", where))
        if head:
            args["classes"] = integer(config.get("projection_dim") or 512, "projection_dim", where)
    elif model_type == "beit":
        if flag(config.get("use_shared_relative_position_bias"), "use_shared_relative_position_bias", where):
            raise ValueError(f"{where}: use_shared_relative_position_bias=True: keras-vit lacks the "
                             f"{MISSING_FEATURES['beit-shared']}.")
        head = "BeitForImageClassification" in architectures if architectures else head_key in tensors
        mean_pooling = flag(config.get("use_mean_pooling", True), "use_mean_pooling", where)
        init = number(config.get("layer_scale_init_value", 0.1), "layer_scale_init_value", where)
        # use_mean_pooling: no final norm on the tokens; pooler.layernorm on the mean patch token
        args.update(layer_scale=float(init) if init and init > 0 else None, fc_norm=mean_pooling,
                    pooling="gap" if mean_pooling else None,
                    relative_position_bias=flag(config.get("use_relative_position_bias", False),
                                                "use_relative_position_bias", where),
                    absolute_position_embeddings=flag(config.get("use_absolute_position_embeddings", False),
                                                      "use_absolute_position_embeddings", where))
    elif model_type == "dinov3_vit":
        head = False
        for key in ("query_bias", "value_bias", "proj_bias", "mlp_bias"):
            if not flag(config.get(key, True), key, where):
                raise ValueError(f"{where}: {key}=false: keras-vit reads DINOv3 with its query, value, output and MLP "
                                 "biases (only the key bias may be left out, as the released models do).")
        args.update(layer_scale=number(config.get("layerscale_value", 1.0), "layerscale_value", where),
                    register_tokens=integer(config.get("num_register_tokens", 0), "num_register_tokens", where),
                    absolute_position_embeddings=False, rope="dinov3", dynamic_image_size=True,
                    rope_temperature=number(config.get("rope_theta", 100.0), "rope_theta", where),
                    layer_norm_epsilon=number(config.get("layer_norm_eps", 1e-5), "layer_norm_eps", where))
        if not flag(config.get("apply_layernorm", True), "apply_layernorm", where):
            raise ValueError(f"{where}: apply_layernorm=false: keras-vit's DINOv3 normalizes its outputs.")
    else:  # siglip
        head = False
        args.update(classifier="gap", pooling="map" if flag(config.get("vision_use_head", True), "vision_use_head", where)
                    else "gap", layer_norm_epsilon=number(config.get("layer_norm_eps", 1e-6), "layer_norm_eps", where))
    id2label = config.get("id2label") or {}
    if not isinstance(id2label, dict):
        raise ValueError(f"{where}: id2label must be an object {{\"0\": \"name\", ...}}, got {type(id2label).__name__}.")
    if model_type in ("vit", "deit", "beit"):
        classes = len(id2label) if id2label else integer(config.get("num_labels", 2), "num_labels", where)
        if head and head_key in tensors:  # the weights are the truth for the head's width
            classes = int(tensors[head_key].shape[0])
        args["classes"] = classes if head else None
        if head:
            args["class_names"] = class_names(id2label, classes)
    elif head and head_key in tensors:
        args["classes"] = int(tensors[head_key].shape[0])
    args["include_top"] = head
    if not head:
        args["classes"] = None
    return args, flag(config.get("qkv_bias", True), "qkv_bias", where)


# -- the name table ----------------------------------------------------------------------------

_ATTENTION = {"query": "attention.attention.query", "key": "attention.attention.key",
              "value": "attention.attention.value", "out": "attention.output.dense"}
_BLOCKS = {
    "vit": {**_ATTENTION, "norm1": "layernorm_before", "norm2": "layernorm_after", "mlp_dense1": "intermediate.dense",
            "mlp_dense2": "output.dense"},
    "dinov2": {**_ATTENTION, "norm1": "norm1", "norm2": "norm2", "mlp_dense1": "mlp.fc1", "mlp_dense2": "mlp.fc2",
               "layer_scale1": "layer_scale1.lambda1", "layer_scale2": "layer_scale2.lambda1"},
    "beit": {**_ATTENTION, "norm1": "layernorm_before", "norm2": "layernorm_after",
             "mlp_dense1": "intermediate.dense", "mlp_dense2": "output.dense", "layer_scale1": "lambda_1",
             "layer_scale2": "lambda_2",
             "relative_position_bias_table": "attention.attention.relative_position_bias.relative_position_bias_table"},
    "clip": {"query": "self_attn.q_proj", "key": "self_attn.k_proj", "value": "self_attn.v_proj",
             "out": "self_attn.out_proj", "norm1": "layer_norm1", "norm2": "layer_norm2", "mlp_dense1": "mlp.fc1",
             "mlp_dense2": "mlp.fc2"},
}
# SigLIP's attention-pool head (nn.MultiheadAttention's in_proj packed q, k, v)
_MAP = {"probe": ("head.probe", None), "query": ("head.attention.in_proj", (0, 3)),
        "key": ("head.attention.in_proj", (1, 3)), "value": ("head.attention.in_proj", (2, 3)),
        "out": ("head.attention.out_proj", None), "norm": ("head.layernorm", None),
        "mlp_dense1": ("head.mlp.fc1", None), "mlp_dense2": ("head.mlp.fc2", None)}


class TransformersTable(TorchTable):
    """transformers' names for one model, in one key scheme (`naming`); `skipped` the keys strip_prefix
    left out (reported as dropped)."""

    format = "transformers"

    def __init__(self, model, naming="vit", qkv_bias=True, skipped=()):
        super().__init__(model, qkv_bias)
        self.naming, self.skipped = naming, list(skipped)
        self.clip = naming == "clip"
        self.distillation = bool(getattr(model, "distillation", False))

    def new_report(self):
        report = super().new_report()
        report["dropped"].extend(self.skipped)
        return report

    relative_method = "transformers"  # BeitRelativePositionBias: bilinear, at every other size

    def no_key_bias(self, path):  # BEiT's and DINOv3's key projections have no bias
        return self.naming in ("beit", "dinov3") and path.endswith("/key/bias")

    def key(self, path):
        parts = path.split("/")
        leaf = LEAVES.get(parts[-1])
        head = parts[0]
        clip = self.clip
        if self.naming.startswith("dinov3"):
            return self._dinov3_key(parts, leaf)
        if head == "patch_encoder":
            named = {"cls": "embeddings.class_embedding" if clip else "embeddings.cls_token",
                     "pos_embedding": "embeddings.position_embedding.weight" if clip
                     else "embeddings.position_embeddings",
                     "dist_token": "embeddings.distillation_token", "reg_token": "embeddings.register_tokens"}
            return named.get(parts[1]) or ("embeddings.patch_embedding." if clip
                                           else "embeddings.patch_embeddings.projection.") + leaf, None
        m = re.fullmatch(r"encoderblock_(\d+)", head)
        if m:
            i, sub = m[1], parts[1]
            names = _BLOCKS[self.naming.replace("_swiglu", "")]
            if sub not in names:
                return None, None
            if sub.startswith(("layer_scale", "relative_position")):
                return f"encoder.layer.{i}.{names[sub]}", None
            if self.naming == "dinov2_swiglu" and sub.startswith("mlp_dense"):
                name = "mlp.weights_in" if sub == "mlp_dense1" else "mlp.weights_out"
                return f"encoder.layer.{i}.{name}.{leaf}", None
            return (f"encoder.layers.{i}." if clip else f"encoder.layer.{i}.") + f"{names[sub]}.{leaf}", None
        if head == "attention_pool":
            key, part = _MAP[parts[1]]
            if parts[1] == "probe":
                return key, None
            return (f"{key}_{leaf}", part) if part is not None else (f"{key}.{leaf}", None)  # in_proj_weight
        if clip:
            top = {"encoder_norm": "post_layernorm", "fc_norm": "post_layernorm", "head": "visual_projection",
                   "pre_norm": "pre_layrnorm"}
        else:
            top = {"encoder_norm": "layernorm", "head": "cls_classifier" if self.distillation else "classifier",
                   "head_dist": "distillation_classifier", "pre_logits": "pooler.dense",
                   "fc_norm": "pooler.layernorm" if self.naming == "beit" else None}
        if top.get(head):
            return f"{top[head]}.{leaf}", None
        return None, None

    def _dinov3_key(self, parts, leaf):
        """DINOv3ViTModel's names: embeddings.*, layer.{i}.*, norm."""
        head = parts[0]
        if head == "patch_encoder":
            return {"cls": "embeddings.cls_token", "reg_token": "embeddings.register_tokens"}.get(
                parts[1]) or f"embeddings.patch_embeddings.{leaf}", None
        m = re.fullmatch(r"encoderblock_(\d+)", head)
        if m:
            name = _DINOV3_BLOCK.get(parts[1])
            if parts[1] == "mlp_dense1" and self.model.mlp_activation == "swiglu":
                name = "mlp.gate_up_proj"  # gate_proj and up_proj, packed by strip_prefix
            if name is None:
                return None, None
            return f"layer.{m[1]}.{name}" + ("" if parts[1].startswith("layer_scale") else f".{leaf}"), None
        return ("norm." + leaf, None) if head == "encoder_norm" else (None, None)


_DINOV3_BLOCK = {"query": "attention.q_proj", "key": "attention.k_proj", "value": "attention.v_proj",
                 "out": "attention.o_proj", "norm1": "norm1", "norm2": "norm2", "mlp_dense1": "mlp.up_proj",
                 "mlp_dense2": "mlp.down_proj", "layer_scale1": "layer_scale1.lambda1",
                 "layer_scale2": "layer_scale2.lambda1"}


# -- writing -----------------------------------------------------------------------------------

# family -> (model_type, architecture without a head, with one, key prefix of the backbone with a head,
# without one, image processor), as transformers' save_pretrained writes them
_WRITTEN = {
    "vit": ("vit", "ViTModel", "ViTForImageClassification", "vit.", "", "ViTImageProcessor"),
    "deit": ("deit", "DeiTModel", "DeiTForImageClassificationWithTeacher", "deit.", "", "DeiTImageProcessor"),
    "dinov2": ("dinov2", "Dinov2Model", None, None, "", "BitImageProcessor"),
    "dinov2_with_registers": ("dinov2_with_registers", "Dinov2WithRegistersModel", None, None, "",
                              "BitImageProcessor"),
    "clip": ("clip_vision_model", "CLIPVisionModel", "CLIPVisionModelWithProjection", "vision_model.", "",
             "CLIPImageProcessor"),
    "siglip": ("siglip_vision_model", "SiglipVisionModel", None, None, "", "SiglipImageProcessor"),
    "beit": ("beit", "BeitModel", "BeitForImageClassification", "beit.", "", "BeitImageProcessor"),
    "dinov3_vit": ("dinov3_vit", "DINOv3ViTModel", None, None, "", "DINOv3ViTImageProcessorFast"),
}


def _family_of(model):
    if model.rope is not None:
        return "dinov3_vit"
    if model.relative_position_bias or not model.absolute_position_embeddings:
        return "beit"
    if model.distillation:
        return "deit"
    if model.pooling == "map" or model.classifier == "gap":
        return "siglip"
    if model.pre_norm:
        return "clip"
    if model.layer_scale is not None or model.register_tokens or model.mlp_activation == "swiglu":
        return "dinov2_with_registers" if model.register_tokens else "dinov2"
    return "vit"


def _naming(family, model):
    if family == "dinov3_vit":
        return "dinov3"
    if family in ("clip", "siglip"):
        return "clip"
    if family.startswith("dinov2"):
        return "dinov2_swiglu" if model.mlp_activation == "swiglu" else "dinov2"
    return "beit" if family == "beit" else "vit"


class _Writer(TransformersTable):
    """The name table, writing: CLIP's unbiased projection, its vector class embedding and its
    position table without a batch axis."""

    def unwritten(self, variable):
        return super().unwritten(variable) or (self.clip and variable.path == "head/bias")

    def to_source(self, variable, key):
        value = super().to_source(variable, key)
        if key in ("embeddings.class_embedding", "embeddings.position_embedding.weight"):
            return value.reshape(value.shape[1:]) if key.endswith("weight") else value.reshape(-1)
        return value


def _hidden_act(model):
    act = model.mlp_activation or ("gelu_tanh" if model.approximate_gelu else "gelu")
    # Dinov2SwiGLUFFN gates with SiLU whatever hidden_act says; its configs keep "gelu"
    return {"gelu_tanh": "gelu_pytorch_tanh", "swiglu": "gelu"}.get(act, act)


def _dinov2_ratio(model):
    """transformers' mlp_ratio for a DINOv2 MLP of keras-vit's width: an integer (Dinov2Config checks it),
    D * r wide, or for SwiGLU the r whose Dinov2SwiGLUFFN width, (int(int(D * r) * 2 / 3) + 7) // 8 * 8,
    is it; where none is, the nearest, which the read-back check then refuses naming mlp_dim."""
    hidden, width = model.hidden_size, model.mlp_dim
    if model.mlp_activation != "swiglu":
        return max(1, round(width / hidden))
    for r in range(1, 33):
        if (int(int(hidden * r) * 2 / 3) + 7) // 8 * 8 == width:
            return r
    return 4


def config_of(model):
    """transformers' config.json of a model, in its family's model_type (ViT, DeiT, DINOv2, CLIP's and
    SigLIP's vision towers, BEiT), a task model where it has a head."""
    family = _family_of(model)
    model_type, bare, task = _WRITTEN[family][:3]
    top = model.include_top and task is not None
    config = {
        "architectures": [task if top else bare], "model_type": model_type, "hidden_size": model.hidden_size,
        "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_heads,
        "intermediate_size": model.mlp_dim, "hidden_act": _hidden_act(model),
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
        "layer_norm_eps": model.layer_norm_epsilon, "image_size": model.image_size[0],
        "patch_size": model.patch_size[0], "num_channels": 3, "qkv_bias": True, "dtype": "float32",
    }
    if family == "vit":  # as before: ViT's config unchanged
        config["hidden_act"] = "gelu_pytorch_tanh" if model.approximate_gelu else "gelu"
    if family in ("vit", "deit"):
        config.update(encoder_stride=model.patch_size[0], pooler_act="tanh",
                      pooler_output_size=model.representation_size or model.hidden_size)
    elif family.startswith("dinov2"):
        del config["intermediate_size"]
        config.update(mlp_ratio=_dinov2_ratio(model), layerscale_value=model.layer_scale or 1.0,
                      use_swiglu_ffn=model.mlp_activation == "swiglu", drop_path_rate=0.0, apply_layernorm=True,
                      use_mask_token=True)
        if model.register_tokens:
            config["num_register_tokens"] = model.register_tokens
    elif family in ("clip", "siglip"):
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "qkv_bias"):
            del config[key]
        config["attention_dropout"] = 0.0
        if family == "clip" and top:
            config["projection_dim"] = int(model.classes)
        if family == "siglip":
            config["vision_use_head"] = model.pooling == "map"
    elif family == "dinov3_vit":
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "qkv_bias"):
            del config[key]
        config.update(layerscale_value=model.layer_scale or 1.0, num_register_tokens=model.register_tokens,
                      rope_theta=model.rope_temperature or 100.0, query_bias=True, key_bias=False, value_bias=True,
                      proj_bias=True, mlp_bias=True, use_gated_mlp=model.mlp_activation == "swiglu", apply_layernorm=True,
                      attention_dropout=0.0,
                      drop_path_rate=0.0, pos_embed_shift=None, pos_embed_jitter=None, pos_embed_rescale=2.0)
        if model.mlp_activation == "swiglu":  # DINOv3ViTGatedMLP gates with hidden_act
            config["hidden_act"] = "silu"
    elif family == "beit":
        config.update(use_relative_position_bias=model.relative_position_bias,
                      use_absolute_position_embeddings=model.absolute_position_embeddings,
                      use_shared_relative_position_bias=False, use_mask_token=False,
                      layer_scale_init_value=model.layer_scale if model.layer_scale is not None else 0.0,
                      use_mean_pooling=model.pooling == "gap", drop_path_rate=0.0)
    if top and family in ("vit", "deit", "beit"):
        names = model.class_names or [f"LABEL_{i}" for i in range(int(model.classes))]
        config["id2label"] = {str(i): n for i, n in enumerate(names)}
        config["label2id"] = {n: i for i, n in enumerate(names)}
    return config


def unsavable(model):
    """What a model has that transformers' config cannot say: the written config.json and keys, read
    back by `args_from_config`, must give the model's structure (each difference is named)."""
    problems = unsavable_common(model)
    if problems:
        return problems
    if model.rope not in (None, "dinov3") or (model.rope is not None and model.pre_norm):
        family = "Perception Encoder" if model.pre_norm else "EVA02"
        return [f"rope={model.rope!r} (transformers has no {family} model; save it in timm's format)"]
    if model.image_size[0] != model.image_size[1] or model.patch_size[0] != model.patch_size[1]:
        return ["non-square images or patches"]
    family = _family_of(model)
    if model.include_top and _WRITTEN[family][2] is None:
        return [f"a classification head ({_WRITTEN[family][1]} has none)"]
    try:
        tensors = state_dict(model)
    except ValueError as e:
        return [str(e).split(": it has ", 1)[-1].rstrip(".")]
    files = files_of(model)
    try:
        args, _ = args_from_config(files["config.json"], strip_prefix(tensors), "the written config.json",
                                   files["preprocessor_config.json"])
    except ValueError as e:
        return [str(e).rstrip(".")]
    # CLIP's post_layernorm on the class token alone is the final norm on every token, then the class token
    same = ("fc_norm",) if family == "clip" and model.pooling is None else ()
    return round_trip_problems(model, args, "transformers", same)


def files_of(model):
    """The JSON files of transformers' hub folder ({name: content}) beside model.safetensors."""
    family = _family_of(model)
    h, w = model.image_size
    pre = {"image_processor_type": _WRITTEN[family][5], "do_resize": True, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": list(model.pixel_mean),
           "image_std": list(model.pixel_std), "resample": 3 if model.interpolation == "bicubic" else 2,
           "size": {"height": h, "width": w}}
    if family != "vit" and model.crop_pct < 1:  # resize the short side, then crop the model's size
        pre.update(size={"shortest_edge": round(h / model.crop_pct)}, do_center_crop=True,
                   crop_size={"height": h, "width": w})
    return {"config.json": config_of(model), "preprocessor_config.json": pre}


def state_dict(model):
    """The model's weights under transformers' names (the backbone under its task model's prefix
    when it has a head; DINOv2's unused mask token as zeros, as its model holds one)."""
    family = _family_of(model)
    top = model.include_top and _WRITTEN[family][2] is not None
    tensors = _Writer(model, _naming(family, model)).state_dict(
        model, prefix=_WRITTEN[family][3] if top else _WRITTEN[family][4])
    if family.startswith("dinov2"):
        tensors["embeddings.mask_token"] = np.zeros((1, model.hidden_size), np.float32)
    elif family == "dinov3_vit":
        tensors["embeddings.mask_token"] = np.zeros((1, 1, model.hidden_size), np.float32)
        for key in [k for k in tensors if re.fullmatch(r"layer\.\d+\.mlp\.gate_up_proj\.(weight|bias)", k)]:
            gate, up = np.split(tensors.pop(key), 2, axis=0)
            tensors[key.replace("gate_up_proj", "gate_proj")], tensors[key.replace("gate_up_proj", "up_proj")] = gate, up
    return tensors
