"""transformers' full `CLIPModel` and `SiglipModel` folders: the text tower, the logit scale and bias, in and out.

The image tower is read by `keras_vit.from_pretrained` as before (formats/transformers.py); this file reads
the rest: `text_model.*` (CLIPTextTransformer / SiglipTextTransformer), CLIP's `text_projection`, and the
scalars `logit_scale` (and SigLIP's `logit_bias`). The config's text sizes are checked against the
safetensors header before anything is built; then the one loading pass (formats/_assign.py) checks every key
and shape before it assigns anything.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

from keras_vit.formats._assign import ArraySource, load_into
from keras_vit.formats._torch import TorchTable, integer, read_json
from keras_vit.zeroshot.text import TextConfig, text_tower

FAMILIES = {"clip": "clip", "siglip": "siglip"}
ARCHITECTURES = {"clip": "CLIPModel", "siglip": "SiglipModel"}
_ACTIVATIONS = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                "gelu_fast": "gelu_tanh"}
_BLOCK = {"norm1": "layer_norm1", "norm2": "layer_norm2", "query": "self_attn.q_proj", "key": "self_attn.k_proj",
          "value": "self_attn.v_proj", "out": "self_attn.out_proj", "mlp_dense1": "mlp.fc1", "mlp_dense2": "mlp.fc2"}
_LEAF = {"gamma": "weight", "beta": "bias", "kernel": "weight", "bias": "bias"}
_DEFAULTS = {  # transformers' CLIPTextConfig / SiglipTextConfig defaults, for keys a config.json leaves out
    "clip": dict(hidden_act="quick_gelu", layer_norm_eps=1e-5, eos_token_id=49407),
    "siglip": dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
}


def family_of(config: dict[str, Any]) -> str | None:
    """"clip" or "siglip" for a full two-tower transformers config, else None."""
    return FAMILIES.get(config.get("model_type", ""))


class TextTable(TorchTable):
    """keras-vit text tower paths <-> transformers' keys ("text_model." prefixed; CLIP's projection outside)."""

    format = "transformers"

    def __init__(self, model, family):
        super().__init__(model)
        self.family = family

    def key(self, path):
        parts = path.split("/")
        if parts[0] == "embeddings":
            return f"text_model.embeddings.{parts[1]}.weight", None
        if parts[0].startswith("block_"):
            i = parts[0][len("block_"):]
            return f"text_model.encoder.layers.{i}.{_BLOCK[parts[1]]}.{_LEAF[parts[2]]}", None
        if parts[0] == "final_norm":
            return f"text_model.final_layer_norm.{_LEAF[parts[1]]}", None
        if parts[0] == "projection":
            prefix = "text_projection" if self.family == "clip" else "text_model.head"
            return f"{prefix}.{_LEAF[parts[1]]}", None
        return None, None

    def absent(self, variable, key, shapes, model):
        return False

    def drops(self, key, model):  # the image tower and the scalars are read elsewhere
        return not key.startswith(("text_model.", "text_projection."))


def _count_layers(shapes):
    found = {int(m.group(1)) for k in shapes for m in [re.match(r"text_model\.encoder\.layers\.(\d+)\.", k)] if m}
    return max(found) + 1 if found else 0


def text_config_of(config: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str) -> TextConfig:
    """The text tower's TextConfig from a full model's config.json, each size checked against the header's
    shapes (a config that disagrees with its weights is refused here, before anything is built)."""
    family = family_of(config)
    assert family is not None
    text = {**_DEFAULTS[family], **(config.get("text_config") or {})}

    def shape(key):
        if key not in shapes:
            raise ValueError(f"{where}: the weights have no {key!r}; a full {ARCHITECTURES[family]} has a text tower "
                             "(a vision-only save is read by keras_vit.from_pretrained).")
        return shapes[key]

    vocab, width = shape("text_model.embeddings.token_embedding.weight")
    length = shape("text_model.embeddings.position_embedding.weight")[0]
    mlp = shape("text_model.encoder.layers.0.mlp.fc1.weight")[0]
    proj_key = "text_projection.weight" if family == "clip" else "text_model.head.weight"
    projection = shape(proj_key)[0]
    found = dict(vocab_size=vocab, hidden_size=width, max_position_embeddings=length, intermediate_size=mlp,
                 num_hidden_layers=_count_layers(shapes))
    for name, value in found.items():
        if name in text and integer(text[name], f"text_config.{name}", where) != value:
            raise ValueError(f"{where}: config.json's text_config.{name} is {text[name]}, but the weights give "
                             f"{value} ({'the layer keys' if name == 'num_hidden_layers' else 'their shapes'}); "
                             "the folder's config and weights do not belong together.")
    declared = config.get("projection_dim") if family == "clip" else text.get("projection_size")
    if declared is not None and integer(declared, "projection_dim", where) != projection:
        raise ValueError(f"{where}: the config's projection width is {declared}, but {proj_key} is "
                         f"{shapes[proj_key]}.")
    heads = integer(text.get("num_attention_heads", 8 if family == "clip" else 12), "num_attention_heads", where)
    act = text.get("hidden_act")
    if act not in _ACTIVATIONS:
        raise ValueError(f"{where}: text_config.hidden_act {act!r} is not one keras-vit computes "
                         f"({', '.join(_ACTIVATIONS)}).")
    eos_token_id: int | None = None
    if family == "clip":
        eos = text.get("eos_token_id")
        pooling = "argmax" if eos == 2 else "eos"  # transformers' rule (checkpoints saved before PR #24773)
        if pooling == "eos":
            eos_token_id = integer(eos, "eos_token_id", where)
    else:
        pooling = "last"
    clip = family == "clip"
    return TextConfig(vocab_size=vocab, max_length=length, hidden_size=width, num_layers=found["num_hidden_layers"],
                      num_heads=heads, mlp_dim=mlp, projection_dim=projection, projection_bias=not clip, causal=clip,
                      pooling=pooling, eos_token_id=eos_token_id, mlp_activation=_ACTIVATIONS[act],
                      layer_norm_epsilon=float(text["layer_norm_eps"]))


def read_scalars(tensors: dict[str, Any], family: str, where: str) -> tuple[float, float]:
    """(logit_scale, logit_bias) as stored: the scale before exp(); CLIP has no bias (0)."""
    def scalar(key):
        if key not in tensors:
            raise ValueError(f"{where}: the weights have no {key!r}, which a full {ARCHITECTURES[family]} has.")
        value = np.asarray(tensors[key], np.float64).reshape(-1)
        if value.size != 1:
            raise ValueError(f"{where}: {key} should hold one number, found shape {tuple(value.shape)}.")
        return float(value[0])
    return scalar("logit_scale"), scalar("logit_bias") if family == "siglip" else 0.0


def load_text_tower(folder: str, tensors: dict[str, Any], config: dict[str, Any]):
    """A full CLIP / SigLIP folder's text tower, built from its checked config and loaded."""
    family = family_of(config)
    where = os.path.join(folder, "model.safetensors")
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    text_config = text_config_of(config, shapes, where)
    model = text_tower(text_config)
    load_into(model, TextTable(model, family), ArraySource(shapes, lambda key: np.asarray(tensors[key])),
              source=f"Checkpoint {where}", name=where, resample="bilinear")
    return model, text_config


def text_state_dict(model, family: str) -> dict[str, np.ndarray]:
    return TextTable(model, family).state_dict(model)


_HIDDEN_ACT = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}
# The tokenizer's files a folder keeps beside the weights, copied as they are.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spiece.model", "special_tokens_map.json")


def text_config_json(config: TextConfig, family: str) -> dict[str, Any]:
    """transformers' text_config of a TextConfig (the inverse of `text_config_of`)."""
    out: dict[str, Any] = {
        "model_type": f"{family}_text_model", "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.mlp_dim, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "max_position_embeddings": config.max_length,
        "hidden_act": _HIDDEN_ACT[config.mlp_activation], "layer_norm_eps": config.layer_norm_epsilon,
        "attention_dropout": 0.0,
    }
    if family == "clip":
        out["projection_dim"] = config.projection_dim
        out["eos_token_id"] = 2 if config.pooling == "argmax" else config.eos_token_id
    else:
        out["projection_size"] = config.projection_dim
    return out


def save_image_text(model: Any, folder: str, *, overwrite: bool = False) -> str:
    """An ImageText as transformers' full CLIPModel / SiglipModel folder (weights, config, preprocessor and the
    tokenizer's own files), written atomically: what `load_image_text` and transformers' from_pretrained read."""
    import shutil

    from keras_vit._files import atomic_path
    from keras_vit.formats import transformers as vision_writer
    from keras_vit.formats._torch import require_safetensors
    from keras_vit.pretrained import state_dict

    family = model.family
    config = model.text_model.text_config
    tokenizer_path = getattr(model.tokenizer, "path", None)
    if tokenizer_path is None:
        raise ValueError("this ImageText's tokenizer was not read from files, so there are none to write beside the "
                         "weights; save_pretrained writes the tokenizer files load_image_text read.")
    # a vision-only save may name its tower's keys without the prefix (SiglipVisionModel); a full model has it
    vision_tensors = {k if k.startswith(("vision_model.", "visual_projection.")) else f"vision_model.{k}": v
                      for k, v in state_dict(model.image_model, "transformers").items()}
    tensors = {**vision_tensors, **text_state_dict(model.text_model, family)}
    tensors["logit_scale"] = np.asarray(model.logit_scale if family == "clip" else [model.logit_scale], np.float32)
    if family == "siglip":
        tensors["logit_bias"] = np.asarray([model.logit_bias], np.float32)
    elif model.logit_bias:
        raise ValueError(f"a CLIP model has no logit bias, but this one's is {model.logit_bias}; CLIPModel cannot "
                         "hold it.")
    vision_files = vision_writer.files_of(model.image_model)
    vision = dict(vision_files["config.json"])
    for key in ("architectures", "dtype"):
        vision.pop(key, None)
    vision.pop("projection_dim", None)
    full: dict[str, Any] = {"architectures": [ARCHITECTURES[family]], "model_type": family, "dtype": "float32",
                            "text_config": text_config_json(config, family), "vision_config": vision}
    if family == "clip":
        full.update(projection_dim=config.projection_dim, logit_scale_init_value=2.6592)
    source = os.path.dirname(tokenizer_path)
    st = require_safetensors()
    with atomic_path(folder, overwrite=overwrite) as tmp:
        os.makedirs(tmp)
        st.save_file({k: np.array(v, order="C") for k, v in tensors.items()}, os.path.join(tmp, "model.safetensors"),
                     metadata={"format": "pt"})
        for name, content in (("config.json", full),
                              ("preprocessor_config.json", vision_files["preprocessor_config.json"])):
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2)
        for name in TOKENIZER_FILES:
            if os.path.exists(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(tmp, name))
    return folder


def read_config(folder: str) -> dict[str, Any]:
    return read_json(os.path.join(folder, "config.json"))


__all__ = ["family_of", "load_text_tower", "read_scalars", "text_config_of"]
