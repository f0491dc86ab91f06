"""transformers' dense-prediction checkpoints, in and out: `DPTForDepthEstimation`,
`DPTForSemanticSegmentation` (their own ViT under "dpt.", or a DINOv2 `backbone_config` under
"backbone.") and `DepthAnythingForDepthEstimation` (V1 and V2, relative and metric; a DINOv2 under
"backbone.").

The config reader gives the backbone's `ViTConfig` arguments (through formats/transformers.py's
reader, as a bare model of the backbone's model_type) and the head's `DenseHead`; the name table maps
the head's Keras layers to transformers' module paths (`TORCH_NAMES`), and the backbone keeps
formats/transformers.py's table. Loading is the one plan-then-assign pass (formats/_assign.py): every
key and shape of backbone and head checked before anything is assigned.
transformers/models/{dpt,depth_anything}/modeling_*.py.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from keras_vit._common import shown
from keras_vit.dense.config import DenseHead
from keras_vit.dense.model import DensePredictor
from keras_vit.formats import transformers as tf_format
from keras_vit.formats._assign import ArraySource, KeyTable, load_into
from keras_vit.formats._torch import class_names, flag, integer, number, numbers_of, read_json

DENSE_MODEL_TYPES = tf_format.DENSE_MODEL_TYPES
DENSE_ARCHITECTURES = ("DPTForDepthEstimation", "DPTForSemanticSegmentation", "DepthAnythingForDepthEstimation")
BACKBONE_TYPES = ("dinov2", "dinov2_with_registers")
# Keys of the checkpoint that take no part in the outputs: DPT's auxiliary head (a training loss) and
# BatchNorm's step counter, the deepest fusion block's first residual unit (built, never called: that
# block has no shallower stage to merge).
DROPPED = ("auxiliary_head.", "neck.fusion_stage.layers.0.residual_layer1.")

# keras layer name -> transformers module path, by pattern (the head's own names: dense/heads.py)
_NECK = (
    (r"reassemble_(\d+)_readout/project", r"neck.reassemble_stage.readout_projects.\1.0"),
    (r"reassemble_(\d+)_projection", r"neck.reassemble_stage.layers.\1.projection"),
    (r"reassemble_(\d+)_resize", r"neck.reassemble_stage.layers.\1.resize"),
    (r"neck_conv_(\d+)", r"neck.convs.\1"),
    (r"fusion_(\d+)_projection", r"neck.fusion_stage.layers.\1.projection"),
    (r"fusion_(\d+)_residual(\d)_conv(\d)", r"neck.fusion_stage.layers.\1.residual_layer\2.convolution\3"),
    (r"fusion_(\d+)_residual(\d)_bn(\d)", r"neck.fusion_stage.layers.\1.residual_layer\2.batch_norm\3"),
)
_HEADS = {
    "depth_anything": {"head_conv1": "head.conv1", "head_conv2": "head.conv2", "head_conv3": "head.conv3"},
    "dpt_depth": {"head_projection": "head.projection", "head_conv1": "head.head.0", "head_conv2": "head.head.2",
                  "head_conv3": "head.head.4"},
    "dpt_segmentation": {"head_conv": "head.head.0", "head_bn": "head.head.1", "head_classifier": "head.head.4"},
}
_LEAVES = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
           "moving_variance": "running_var"}


def claims(config: dict[str, Any]) -> bool:
    """Whether a transformers config.json is a dense-prediction model keras-vit reads (DPT, Depth Anything)."""
    return config.get("model_type") in DENSE_MODEL_TYPES


def torch_name(layer_path: str, head: DenseHead) -> str | None:
    """transformers' module path of a head layer (its Keras path without the variable), or None."""
    for pattern, replacement in _NECK:
        if re.fullmatch(pattern, layer_path):
            return re.sub(pattern, replacement, layer_path)
    table = _HEADS["depth_anything" if head.kind == "depth_anything" else f"dpt_{head.task}"]
    return table.get(layer_path)


# -- config.json -> (backbone arguments, head) ------------------------------------------------------

def _taps_from(backbone_config, where):
    indices = backbone_config.get("out_indices")
    if indices is None:  # out_features ["stage3", ...]: stage i is block i's output
        features = backbone_config.get("out_features") or []
        if not isinstance(features, list) or not all(isinstance(f, str) and re.fullmatch(r"stage\d+", f)
                                                     for f in features) or not features:
            raise ValueError(f"{where}: backbone_config has neither out_indices nor out_features as stage names "
                             f"(got {shown(features)}).")
        indices = [int(f[len("stage"):]) for f in features]
    if not isinstance(indices, list) or not indices:
        raise ValueError(f"{where}: backbone_config.out_indices={shown(indices)} must be a list of stage numbers.")
    return tuple(integer(i, "backbone_config.out_indices", where) for i in indices)


def configs_from(config: dict[str, Any], tensors: dict[str, Any], where: str,
                 preprocessor: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool, DenseHead, str]:
    """(backbone ViTConfig arguments, qkv_bias, DenseHead, the backbone's key prefix) of a DPT or Depth
    Anything config.json; `tensors` are the checkpoint's (to tell the backbone's arrays)."""
    model_type = config["model_type"]
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or any(a not in DENSE_ARCHITECTURES for a in architectures):
        raise ValueError(f"{where}: architectures={shown(architectures)}; keras-vit reads the dense models "
                         f"{', '.join(DENSE_ARCHITECTURES)}.")
    if config.get("backbone") not in (None, ""):
        raise ValueError(f"{where}: backbone={shown(config['backbone'])} names a timm or hub backbone loaded "
                         "apart; keras-vit reads checkpoints whose backbone_config is in the file.")
    segmentation = "DPTForSemanticSegmentation" in architectures or (not architectures and any(
        k.startswith("head.head.4.") for k in tensors) and model_type == "dpt" and "head.head.1.running_mean" in tensors)
    backbone_config = config.get("backbone_config")
    if model_type == "dpt" and flag(config.get("is_hybrid", False), "is_hybrid", where):
        raise ValueError(f"{where}: is_hybrid=true: DPT-hybrid (a BiT ResNet stem feeding the first two neck "
                         "stages) is not read by keras-vit yet; DPT with a plain ViT or a DINOv2 backbone is.")
    if model_type == "dpt" and config.get("neck_ignore_stages"):
        raise ValueError(f"{where}: neck_ignore_stages={shown(config['neck_ignore_stages'])} is DPT-hybrid's; "
                         "keras-vit reads DPT with a plain ViT or DINOv2 backbone.")
    if model_type == "depth_anything" and not isinstance(backbone_config, dict):
        raise ValueError(f"{where}: Depth Anything needs its backbone_config (a DINOv2's), got "
                         f"{shown(backbone_config)}.")
    backbone_tensors = {k: v for k, v in tensors.items() if not k.startswith(("neck.", "head.") + DROPPED)}
    if isinstance(backbone_config, dict):
        kind = backbone_config.get("model_type")
        if kind not in BACKBONE_TYPES:
            raise ValueError(f"{where}: backbone_config.model_type={shown(kind)}; keras-vit reads dense models on "
                             f"{', '.join(BACKBONE_TYPES)} backbones (and DPT's own ViT).")
        prefix = "backbone."
        inner = dict(backbone_config, architectures=[])
        taps = _taps_from(backbone_config, where)
        final_norm = flag(backbone_config.get("apply_layernorm", True), "backbone_config.apply_layernorm", where)
    else:
        prefix = "dpt."
        inner = dict(config, model_type="vit", architectures=[])  # DPT's own ViT, as transformers' ViTModel
        out = config.get("backbone_out_indices", [2, 5, 8, 11])
        if not isinstance(out, list) or not out:
            raise ValueError(f"{where}: backbone_out_indices={shown(out)} must be a list of block indices.")
        taps = tuple(integer(i, "backbone_out_indices", where) + 1 for i in out)  # 0-based blocks -> stages
        final_norm = False
    stripped = tf_format.strip_prefix({k[len(prefix):]: v for k, v in backbone_tensors.items()
                                       if k.startswith(prefix)})
    args, qkv_bias = tf_format.args_from_config(inner, stripped, where, preprocessor)
    args.update(include_top=False, classes=None)
    args.pop("class_names", None)
    if model_type == "dpt" and prefix == "dpt.":
        # DPTViTEmbeddings._resize_pos_embed: bilinear, half-pixel, at every size the model is given
        args.update(dynamic_image_size=True, posemb_resample="bilinear")
    hidden = args["hidden_size"]
    reassemble = config.get("reassemble_hidden_size", hidden) if model_type == "depth_anything" else hidden
    if integer(reassemble, "reassemble_hidden_size", where) != hidden:
        raise ValueError(f"{where}: reassemble_hidden_size={reassemble} differs from the backbone's hidden_size "
                         f"{hidden}; the neck reads the backbone's tokens.")
    if model_type == "depth_anything":
        patch = integer(config.get("patch_size", 14), "patch_size", where)
        if patch != args["patch_size"]:
            raise ValueError(f"{where}: patch_size={patch} differs from the backbone's {args['patch_size']}.")
    head_in = config.get("head_in_index", -1)
    if head_in != -1:
        raise ValueError(f"{where}: head_in_index={shown(head_in)}; keras-vit's heads read the last fused map (-1).")
    fields: dict[str, Any] = dict(
        taps=taps, final_norm=final_norm,
        neck_hidden_sizes=tuple(integer(n, "neck_hidden_sizes", where)
                                for n in config.get("neck_hidden_sizes") or [96, 192, 384, 768]),
        reassemble_factors=numbers_of(config.get("reassemble_factors", [4, 2, 1, 0.5]), "reassemble_factors", where),
        fusion_hidden_size=integer(config.get("fusion_hidden_size", 256), "fusion_hidden_size", where),
    )
    if model_type == "depth_anything":
        fields.update(kind="depth_anything", task="depth", readout="ignore",
                      head_hidden_size=integer(config.get("head_hidden_size", 32), "head_hidden_size", where),
                      depth_type=config.get("depth_estimation_type", "relative"),
                      max_depth=number(config.get("max_depth", 1), "max_depth", where))
    else:
        batch_norm = flag(config.get("use_batch_norm_in_fusion_residual", False),
                          "use_batch_norm_in_fusion_residual", where)
        bias = config.get("use_bias_in_fusion_residual")
        fields.update(kind="dpt", readout=config.get("readout_type", "project"), fusion_batch_norm=batch_norm,
                      fusion_bias=None if bias is None else flag(bias, "use_bias_in_fusion_residual", where))
        if segmentation:
            id2label = config.get("id2label") or {}
            classes = len(id2label) if isinstance(id2label, dict) and id2label else integer(
                config.get("num_labels", 2), "num_labels", where)
            fields.update(task="segmentation", classes=classes, class_names=class_names(id2label, classes),
                          dropout=number(config.get("semantic_classifier_dropout", 0.1),
                                         "semantic_classifier_dropout", where))
        else:
            fields.update(task="depth", add_projection=flag(config.get("add_projection", False), "add_projection",
                                                            where))
    try:
        head = DenseHead(**fields)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return args, qkv_bias, head, prefix


# -- the name table --------------------------------------------------------------------------------

class _Loading:
    """What the loading pass reads of a model: the dense model's weights and name, the rest the backbone's."""

    def __init__(self, model: DensePredictor):
        self._model = model

    @property
    def weights(self):
        return self._model.weights

    @property
    def name(self):
        return self._model.name

    def __getattr__(self, name):
        return getattr(self._model.backbone, name)


class DenseTable(KeyTable):
    """transformers' names for a DensePredictor: the backbone's through formats/transformers.py's table
    (under `prefix`), the head's through `torch_name`, with PyTorch's conv layouts."""

    format = "transformers"

    def __init__(self, model: DensePredictor, backbone_table: tf_format.TransformersTable, prefix: str):
        self.model, self.backbone, self.prefix = model, backbone_table, prefix
        self.backbone_paths = {v.path for v in model.backbone.weights}
        # backbone variables off the head's path (DPT's final LayerNorm, a pooler): their keys are dropped
        used = {v.path for v in model.weights}
        self.unused = {self.prefix + k for k in (backbone_table.key(p)[0] for p in self.backbone_paths - used) if k}

    def new_report(self):
        return self.backbone.new_report()

    def _head_key(self, path):
        layer, leaf = path.rsplit("/", 1)
        name = torch_name(layer, self.model.head_config)
        return (f"{name}.{_LEAVES[leaf]}" if name is not None and leaf in _LEAVES else None), None

    def key(self, path):
        if path in self.backbone_paths:
            key, part = self.backbone.key(path)
            return (None if key is None else self.prefix + key), part
        return self._head_key(path)

    def shape(self, variable, key, part):
        if variable.path in self.backbone_paths:
            return self.backbone.shape(variable, key[len(self.prefix):], part)
        shape = tuple(variable.shape)
        if len(shape) == 4:  # Conv2D (kh, kw, in, out) <- (out, in, kh, kw); transposed (kh, kw, out, in) <- (in, out, ..)
            return (shape[3], shape[2], shape[0], shape[1])
        return shape[::-1] if len(shape) == 2 else shape

    def fits(self, variable, key, want, found):
        if variable.path in self.backbone_paths:
            return self.backbone.fits(variable, key, want, found)
        return found == want

    def absent(self, variable, key, shapes, model):
        return variable.path in self.backbone_paths and self.backbone.absent(variable, key, shapes, model)

    def drops(self, key, model):
        if key.startswith(DROPPED) or key.endswith(".num_batches_tracked") or key in self.unused:
            return True
        return key.startswith(self.prefix) and self.backbone.drops(key[len(self.prefix):], model)

    def to_keras(self, value, variable, part):
        if variable.path in self.backbone_paths:
            return self.backbone.to_keras(value, variable, part)
        if value.ndim == 4:
            return np.transpose(value, (2, 3, 1, 0))
        return value.T if value.ndim == 2 else value

    def to_source(self, variable):
        value = np.asarray(variable.numpy())
        if value.ndim == 4:
            return np.transpose(value, (3, 2, 0, 1))
        return value.T if value.ndim == 2 else value


def _tables(model: DensePredictor, prefix: str, qkv_bias: bool, tensors_naming: str) -> DenseTable:
    backbone = tf_format.TransformersTable(model.backbone, tensors_naming, qkv_bias)
    return DenseTable(model, backbone, prefix)


def load_tensors(model: DensePredictor, shapes: dict[str, tuple[int, ...]], read, *, prefix: str,
                 qkv_bias: bool = True, source: str = "the checkpoint") -> dict[str, Any]:
    """Fills a DensePredictor from transformers' arrays (`shapes` {key: shape}, `read(key)` an array):
    every key and shape checked first; on error the model is unchanged. Returns the load report."""
    stripped = {k[len(prefix):]: None for k in shapes if k.startswith(prefix)}
    table = _tables(model, prefix, qkv_bias, tf_format.naming(stripped))
    # the backbone's keys as formats/transformers.py names them (DINOv2's mask token is skipped there)
    skipped = [k for k in shapes if k.startswith(prefix) and k[len(prefix):].startswith(tf_format.SKIPPED)]
    table.backbone.skipped.extend(skipped)
    shown_shapes = {k: v for k, v in shapes.items() if k not in skipped}
    return load_into(_Loading(model), table, ArraySource(shown_shapes, read),
                     source=f"transformers checkpoint {source}", name=source, resample=model.backbone.posemb_resample)


def from_folder(config: dict[str, Any], tensors: dict[str, Any], folder: str, **overrides: Any) -> DensePredictor:
    """The DensePredictor of a transformers dense folder's config.json, preprocessor_config.json and
    (opened) tensors, its weights loaded. `overrides` replace backbone fields (image_size, ...)."""
    where = os.path.join(folder, "config.json")
    pre_path = os.path.join(folder, "preprocessor_config.json")
    preprocessor = read_json(pre_path) if os.path.isfile(pre_path) else None
    args, qkv_bias, head, prefix = configs_from(config, tensors, where, preprocessor)
    args.update(overrides)
    model = DensePredictor(args, head)
    load_tensors(model, {k: tuple(v.shape) for k, v in tensors.items()}, lambda k: np.asarray(tensors[k]),
                 prefix=prefix, qkv_bias=qkv_bias, source=folder)
    return model


# -- writing -----------------------------------------------------------------------------------------

def unsavable(model: DensePredictor) -> list[str]:
    """What transformers' dense configs cannot say about `model` (empty: it saves)."""
    head, backbone = model.head_config, model.backbone
    problems = []
    if head.kind == "linear":
        problems.append("a linear head (transformers has no dense model with one)")
    if not head.fusion_residual:
        problems.append("fusion_residual=False")
    dinov2 = tf_format._family_of(backbone).startswith("dinov2")
    if head.kind == "depth_anything" and not dinov2:
        problems.append("a Depth Anything head on a non-DINOv2 backbone")
    if head.kind == "dpt" and not dinov2:
        if tf_format._family_of(backbone) != "vit":
            problems.append(f"a DPT head on a {tf_format._family_of(backbone)} backbone (DPT's own is a plain ViT)")
        if head.final_norm:
            problems.append("final_norm=True on DPT's own ViT")
        if backbone.posemb_resample != "bilinear":
            problems.append(f"posemb_resample={backbone.posemb_resample!r} (DPT's own ViT resamples bilinearly)")
    if head.kind == "depth_anything" and head.readout != "ignore":
        problems.append(f"readout={head.readout!r} (Depth Anything ignores the class token)")
    problems += tf_format.unsavable(backbone)
    return problems


def config_of(model: DensePredictor) -> dict[str, Any]:
    head, backbone = model.head_config, model.backbone
    inner = tf_format.config_of(backbone)
    config: dict[str, Any] = {
        "neck_hidden_sizes": list(head.neck_hidden_sizes),
        "reassemble_factors": [f if f < 1 else int(f) for f in head.reassemble_factors],
        "fusion_hidden_size": head.fusion_hidden_size, "head_in_index": -1, "dtype": "float32",
        "initializer_range": 0.02,
    }
    dinov2 = inner["model_type"].startswith("dinov2")
    if dinov2:
        stages = [f"stage{i}" for i in range(1, backbone.num_layers + 1)]
        inner.update(architectures=None, out_indices=list(head.taps), out_features=[f"stage{t}" for t in head.taps],
                     stage_names=["stem"] + stages, apply_layernorm=head.final_norm, reshape_hidden_states=False)
        config["backbone_config"] = inner
    if head.kind == "depth_anything":
        config.update(architectures=["DepthAnythingForDepthEstimation"], model_type="depth_anything",
                      reassemble_hidden_size=backbone.hidden_size, patch_size=backbone.patch_size[0],
                      head_hidden_size=head.head_hidden_size, depth_estimation_type=head.depth_type,
                      max_depth=head.max_depth)
        return config
    task = "DPTForSemanticSegmentation" if head.task == "segmentation" else "DPTForDepthEstimation"
    config.update(architectures=[task], model_type="dpt", is_hybrid=False, readout_type=head.readout,
                  use_batch_norm_in_fusion_residual=head.fusion_batch_norm,
                  use_bias_in_fusion_residual=head.fusion_bias, neck_ignore_stages=[], add_projection=head.add_projection,
                  use_auxiliary_head=False)
    if not dinov2:
        config.update({k: v for k, v in inner.items() if k not in ("architectures", "model_type")})
        config.update(backbone_out_indices=[t - 1 for t in head.taps], backbone_config=None)
    if head.task == "segmentation":
        names = list(head.class_names or [f"LABEL_{i}" for i in range(int(head.classes or 0))])
        config.update(id2label={str(i): n for i, n in enumerate(names)}, label2id={n: i for i, n in enumerate(names)},
                      semantic_classifier_dropout=head.dropout, semantic_loss_ignore_index=255)
    return config


def state_dict(model: DensePredictor) -> dict[str, np.ndarray]:
    """The model's weights under transformers' names (backbone under "backbone." or "dpt.")."""
    family = tf_format._family_of(model.backbone)
    prefix = "backbone." if family.startswith("dinov2") else "dpt."
    writer = tf_format._Writer(model.backbone, tf_format._naming(family, model.backbone))
    tensors = writer.state_dict(model.backbone, prefix=prefix)
    if family.startswith("dinov2"):
        tensors[prefix + "embeddings.mask_token"] = np.zeros((1, model.backbone.hidden_size), np.float32)
    table = DenseTable(model, writer, prefix)
    for variable in model.weights:
        if variable.path in table.backbone_paths:
            continue
        key, _ = table.key(variable.path)
        if key is None:
            raise ValueError(f"{model.name!r} cannot be saved in transformers' format: {variable.path} has no "
                             "place there.")
        tensors[key] = np.ascontiguousarray(table.to_source(variable), dtype=np.float32)
    # transformers builds the deepest fusion block's unused first residual unit: zeros, so its load is complete
    for name, value in list(tensors.items()):
        m = re.fullmatch(r"neck\.fusion_stage\.layers\.1\.residual_layer1\.(.*)", name)
        if m:
            tensors[f"neck.fusion_stage.layers.0.residual_layer1.{m[1]}"] = np.zeros_like(value)
    return tensors


def files_of(model: DensePredictor) -> dict[str, dict[str, Any]]:
    h, w = model.backbone.image_size
    pre = {"image_processor_type": "DPTImageProcessor", "do_resize": True, "size": {"height": h, "width": w},
           "keep_aspect_ratio": model.head_config.kind == "depth_anything",
           "ensure_multiple_of": model.patch_size[0] if model.head_config.kind == "depth_anything" else 1,
           "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
           "image_mean": list(model.pixel_mean or (0.5, 0.5, 0.5)), "image_std": list(model.pixel_std or (0.5,) * 3),
           "do_pad": False}
    return {"config.json": config_of(model), "preprocessor_config.json": pre}
