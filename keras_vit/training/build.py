"""The model a run trains: built from the recipe's model keys (with an init checkpoint's weights) or
from a timm / transformers checkpoint's own config, and what the data pipeline feeds it (its size, pixel
statistics and evaluation view)."""

from __future__ import annotations

import json
import logging
import os

import numpy as np

from keras_vit.training.config import DEFAULTS, hub_checkpoint

log = logging.getLogger(__name__)


def _saved_config(source):
    """A `.keras` init checkpoint's model config ({} for anything else, or an unreadable file)."""
    if not (isinstance(source, str) and source.endswith(".keras") and os.path.isfile(source)):
        return {}
    import zipfile

    try:
        with zipfile.ZipFile(source) as z:
            return json.loads(z.read("config.json")).get("config", {})
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return {}


def eval_view(config):
    """(crop_pct, interpolation): how evaluation (and the saved model's predict and exports) turn an
    image of any size into the model's input: the recipe's `eval_crop_fraction`, else the view a
    `.keras` init checkpoint carries (a timm checkpoint's crop_pct and interpolation, converted), else
    the paper's plain resize (1.0, bilinear). (A timm / transformers folder's model takes its own view.)"""
    from keras_vit.images import view_policy

    saved = _saved_config(config["init_checkpoint"])
    return view_policy(crop_pct=config["eval_crop_fraction"] or saved.get("crop_pct"),
                       interpolation=saved.get("interpolation"))


# The model keys a timm / transformers checkpoint's own config does not decide: regularization for training.
TRAINING_MODEL_KEYS = ("dropout_rate", "attention_dropout_rate", "drop_path_rate")


def model_input(config):
    """What the data pipeline feeds a model built from the recipe's keys (not a timm / transformers folder,
    whose model decides): {image_size, pixel_mean, pixel_std, crop_pct, interpolation}. The recipe's
    image_size (None: a .keras init checkpoint's), that checkpoint's pixel statistics (one converted from
    DeiT or DINOv2 keeps ImageNet's), else the official [-1, 1] scaling; `eval_view`'s crop."""
    from keras_vit.data import OFFICIAL_STATS

    saved = _saved_config(config["init_checkpoint"])
    image_size = config["image_size"] if config["image_size"] is not None else saved.get("image_size")
    if image_size is None:
        raise ValueError(f"image_size None means the init checkpoint's own size, which only a timm / transformers "
                         f"folder or a .keras file records; init_checkpoint={config['init_checkpoint']!r}: set "
                         "image_size (--set image_size=224).")
    crop_pct, interpolation = eval_view(config)
    image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    return dict(image_size=image_size, pixel_mean=tuple(saved.get("pixel_mean") or OFFICIAL_STATS),
                pixel_std=tuple(saved.get("pixel_std") or OFFICIAL_STATS), crop_pct=crop_pct,
                interpolation=interpolation)


def build_model(config, class_names):
    """The model a run trains, built in the strategy's scope: from a timm / transformers checkpoint's own
    config (`hub_checkpoint`), else from the recipe's model keys (at `model_input`'s size and statistics)
    with `init_checkpoint`'s weights loaded."""
    from keras_vit.config import ViTConfig
    from keras_vit.models import VisionTransformer

    if hub_checkpoint(config["init_checkpoint"]):
        return _from_hub_checkpoint(config, class_names)
    kwargs = {k: v for k, v in config["model"].items() if v is not None and k != "variant"}
    kwargs.update(model_input(config), classes=len(class_names), class_names=class_names, classifier_activation=None)
    variant = config["model"].get("variant")
    vit_config = ViTConfig.from_preset(variant, **kwargs) if variant else ViTConfig(**kwargs)
    _check_mesh(vit_config)
    model = VisionTransformer(vit_config)
    if config["init_checkpoint"]:
        from keras_vit.checkpoints import load_weights

        load_weights(model, config["init_checkpoint"], method=config["resample"])
    return model


def _check_mesh(vit_config):
    """Under a model-parallel distribution, refuse a model whose heads or widths do not split over its mesh."""
    import keras

    from keras_vit.parallel import RuleModelParallel, check_mesh

    distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if isinstance(distribution, RuleModelParallel):
        check_mesh(vit_config, distribution.mesh_shape)


def _from_hub_checkpoint(config, class_names):
    """A timm / transformers checkpoint fine-tuned as timm does it: its architecture, numerics, pixel
    statistics, evaluation view and position-embedding resampling; a new zero head for these classes."""
    from keras_vit.pretrained import from_pretrained

    source = os.fspath(config["init_checkpoint"])
    ignored = [f"model.{k}={v!r}" for k, v in config["model"].items()
               if k not in TRAINING_MODEL_KEYS and v is not None and v != DEFAULTS["model"].get(k)]
    if ignored:
        log.info("%s: the architecture is the checkpoint's own; ignoring %s", source, ", ".join(ignored))
    overrides = {k: config["model"][k] for k in TRAINING_MODEL_KEYS if config["model"].get(k) is not None}
    if config["image_size"] is not None:
        overrides["image_size"] = config["image_size"]  # position embeddings resampled as the source's library does
    if config["eval_crop_fraction"]:
        overrides["crop_pct"] = config["eval_crop_fraction"]
    model = from_pretrained(source, classes=len(class_names), class_names=list(class_names),
                            classifier_activation=None, **overrides)
    _check_mesh(model.config)
    # A new head even when the checkpoint's has as many classes: its classes are not these.
    for layer in model.layers:
        if layer.name in ("head", "head_dist"):
            layer.set_weights([np.zeros(w.shape, w.dtype) for w in layer.get_weights()])
    log.info("fine-tuning %s at %dx%d, pixels normalized with mean %s and std %s, a new head for %d classes",
             source, *model.image_size, tuple(model.pixel_mean), tuple(model.pixel_std), len(class_names))
    return model
