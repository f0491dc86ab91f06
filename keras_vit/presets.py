"""What a variant is, in one table: sizes, official name, released checkpoints, fine-tune settings.

The constructors (`keras_vit.ViTB16`, ...), `create_model`, the named weights
(`weights="imagenet21k"`, ...) and the parameter-count tests are all read from `PRESETS`.
Plain data, no Keras: every other module may import it.

Example:
>>> PRESETS["B/16"].official_name, PRESETS["B/16"].parameters
('ViT-B_16', 86567656)
"""

import dataclasses
import os

# The public release (gs://vit_models), reachable over HTTPS; overridable for mirrors.
WEIGHTS_URL_ENV = "KERAS_VIT_WEIGHTS_URL"
DEFAULT_WEIGHTS_URL = "https://storage.googleapis.com/vit_models"

NAMED_WEIGHTS = ("imagenet", "imagenet21k", "imagenet21k+imagenet2012", "augreg", "augreg+imagenet2012")

_R50 = {"num_layers": (3, 4, 9), "width_factor": 1}
_R26 = {"num_layers": (2, 2, 2, 2), "width_factor": 1}
_I21K = ("imagenet21k", "imagenet21k+imagenet2012")
_AUGREG = ("augreg", "augreg+imagenet2012")


@dataclasses.dataclass(frozen=True)
class Preset:
    """One variant of the paper (or of "How to train your ViT?").

    sizes: VisionTransformer's size arguments (vit_jax/configs/models.py).
    official_name: the checkpoints' file stem, e.g. "ViT-B_16".
    constructor: the keras.applications-style function's name, e.g. "ViTB16".
    parameters: the official implementation's own count, 1000 classes, 224x224.
    weights: the NAMED_WEIGHTS released for it.
    augreg: the recommended AugReg checkpoint's file stem, or None.
    augreg_finetune_lr: the learning rate in its ImageNet-2012 fine-tune's file name.
    finetune_224: whether an imagenet21k+imagenet2012 fine-tune at 224 (`-224`) was released.
    imagenet: what `weights="imagenet"` loads, the release's path without ".npz", or None.
    """

    sizes: dict
    official_name: str
    constructor: str
    parameters: int
    weights: tuple = ()
    augreg: str | None = None
    augreg_finetune_lr: str | None = None
    finetune_224: bool = False
    imagenet: str | None = None


def _vit(patch, hidden, layers, heads, mlp, resnet=None):
    sizes = dict(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=heads, mlp_dim=mlp)
    return sizes if resnet is None else dict(sizes, resnet=resnet)


# Parameter counts: counted by the official implementation from its own init
# (vit_jax/models_test.py); R50+L/32's is our model's (its hybrids match the official
# counts), equal to timm's vit_large_r50_s32_224 (328.99M).
PRESETS = {
    "Ti/16": Preset(_vit(16, 192, 12, 3, 768), "ViT-Ti_16", "ViTTi16", 5_717_416, _AUGREG,
                    "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "S/16": Preset(_vit(16, 384, 12, 6, 1536), "ViT-S_16", "ViTS16", 22_050_664, _AUGREG,
                   "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03"),
    "S/32": Preset(_vit(32, 384, 12, 6, 1536), "ViT-S_32", "ViTS32", 22_878_952, _AUGREG,
                   "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "B/8": Preset(_vit(8, 768, 12, 12, 3072), "ViT-B_8", "ViTB8", 86_576_872),
    "B/16": Preset(_vit(16, 768, 12, 12, 3072), "ViT-B_16", "ViTB16", 86_567_656, _I21K + _AUGREG,
                   "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03", finetune_224=True),
    "B/32": Preset(_vit(32, 768, 12, 12, 3072), "ViT-B_32", "ViTB32", 88_224_232, _I21K + _AUGREG,
                   "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "L/16": Preset(_vit(16, 1024, 24, 16, 4096), "ViT-L_16", "ViTL16", 304_326_632, _I21K + _AUGREG,
                   "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01", finetune_224=True),
    "L/32": Preset(_vit(32, 1024, 24, 16, 4096), "ViT-L_32", "ViTL32", 306_535_400, _I21K),
    "H/14": Preset(_vit(14, 1280, 32, 16, 5120), "ViT-H_14", "ViTH14", 632_045_800, _I21K),
    "R50+B/16": Preset(_vit(1, 768, 12, 12, 3072, _R50), "R50+ViT-B_16", "R50ViTB16", 98_659_112, _I21K),
    "R50+L/32": Preset(_vit(1, 1024, 24, 16, 4096, {"num_layers": (3, 4, 6, 3), "width_factor": 1}),
                       "R50+ViT-L_32", "R50ViTL32", 328_994_856, _AUGREG,
                       "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01"),
    "R26+S/32": Preset(_vit(1, 384, 12, 6, 1536, _R26), "R26+ViT-S_32", "R26ViTS32", 36_431_912, _AUGREG,
                       "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01"),
    "R26+B/32": Preset(_vit(1, 768, 12, 12, 3072, _R26), "R26+ViT-B_32", "R26ViTB32", 101_383_976),
    "R+Ti/16": Preset(_vit(8, 192, 12, 3, 768, {"num_layers": (), "width_factor": 1}), "R+ViT-Ti_16", "RViTTi16",
                      6_337_704, _AUGREG, "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03"),
}

# weights="imagenet", the keras.applications habit: the ImageNet-1k classifier released for the
# variant. The AugReg ImageNet-21k -> ImageNet-1k fine-tuning at 224 where one exists (the files
# timm's `augreg_in21k_ft_in1k` 224 weights come from); else the original paper's ImageNet-21k ->
# ImageNet-1k fine-tuning, released at 384 only (a model of another size gets its position
# embeddings resampled). R26+B/32 has no ImageNet-1k release.
_I1K_224 = "--imagenet2012-steps_20k-lr_{lr}-res_224"
_IMAGENET = {
    "Ti/16": "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0" + _I1K_224.format(lr="0.03"),
    "S/16": "augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0" + _I1K_224.format(lr="0.03"),
    "S/32": "augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0" + _I1K_224.format(lr="0.03"),
    "B/8": "augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0" + _I1K_224.format(lr="0.01"),
    "B/16": "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0" + _I1K_224.format(lr="0.01"),
    "B/32": "augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0" + _I1K_224.format(lr="0.03"),
    "L/16": "augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1" + _I1K_224.format(lr="0.01"),
    "R+Ti/16": "augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0" + _I1K_224.format(lr="0.03"),
    "R26+S/32": "augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1" + _I1K_224.format(lr="0.03"),
    "R50+L/32": "augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1" + _I1K_224.format(lr="0.01"),
    "L/32": "imagenet21k+imagenet2012/ViT-L_32",
    "H/14": "imagenet21k+imagenet2012/ViT-H_14",
    "R50+B/16": "imagenet21k+imagenet2012/R50+ViT-B_16",
}
PRESETS = {name: dataclasses.replace(preset, imagenet=_IMAGENET[name], weights=("imagenet",) + preset.weights)
           if name in _IMAGENET else preset for name, preset in PRESETS.items()}

# The official configurations' sizes, by variant (the public `keras_vit.VARIANTS`).
VARIANTS = {name: preset.sizes for name, preset in PRESETS.items()}


def canonical_variant(name):
    """'ViT-B_16', 'vit-b/16', 'B16' or 'R50+ViT-B_16' -> the key of PRESETS."""
    key = str(name).strip().upper().replace("VIT-", "").replace("VIT", "").replace("_", "/").lstrip("-")
    if "/" not in key:  # B16 -> B/16
        head = key.rstrip("0123456789")
        key = f"{head}/{key[len(head):]}"
    table = {k.upper(): k for k in PRESETS}
    if key not in table:
        raise ValueError(f"Unknown ViT variant {name!r}. Known variants: {', '.join(PRESETS)}.")
    return table[key]


def weights_url():
    """The release's base URL: $KERAS_VIT_WEIGHTS_URL (when set and not empty), else Google's bucket."""
    return (os.environ.get(WEIGHTS_URL_ENV) or DEFAULT_WEIGHTS_URL).rstrip("/")


def released_at(path):
    """The release URLs of an official checkpoint named like `path` ("ViT-B_16.npz", an AugReg
    file name, ...), [] for a name the release does not have. Standard library only: the command
    line names them before TensorFlow loads.

    Example:
    >>> released_at("ViT-L_32.npz")
    ['https://storage.googleapis.com/vit_models/imagenet21k/ViT-L_32.npz',
     'https://storage.googleapis.com/vit_models/imagenet21k+imagenet2012/ViT-L_32.npz']
    """
    name = os.path.basename(os.fspath(path))
    stem = name[:-len(".npz")] if name.endswith(".npz") else name
    base, found = weights_url(), []
    for preset in PRESETS.values():
        for folder in ("imagenet21k", "imagenet21k+imagenet2012"):
            if folder in preset.weights and stem == preset.official_name:
                found.append(f"{base}/{folder}/{stem}.npz")
        if preset.finetune_224 and stem == preset.official_name + "-224":
            found.append(f"{base}/imagenet21k+imagenet2012/{stem}.npz")
        if preset.augreg and (stem == preset.augreg or stem.startswith(preset.augreg + "--")):
            found.append(f"{base}/augreg/{stem}.npz")
        if preset.imagenet and stem == os.path.basename(preset.imagenet):
            found.append(f"{base}/{preset.imagenet}.npz")
    return sorted(set(found), key=found.index)


def missing_checkpoint(path):
    """The FileNotFoundError for a checkpoint path that is not there, saying where one comes from:
    the release URL of an official .npz of that name, else what the loaders read."""
    path = os.fspath(path)
    urls = released_at(path)
    if urls:
        where = " and ".join(urls)
        return FileNotFoundError(f"No checkpoint at {path}. The official {os.path.basename(path)} is released at "
                                 f"{where}: download it and pass its path (in Python, a released name such as "
                                 "weights='imagenet21k' downloads and caches it).")
    if path.endswith(".npz"):
        return FileNotFoundError(f"No checkpoint at {path}. The official checkpoints are released under "
                                 f"{weights_url()} (e.g. {weights_url()}/imagenet21k/ViT-B_16.npz; "
                                 "keras_vit.presets.PRESETS names each variant's files): download one and pass its path.")
    return FileNotFoundError(f"No checkpoint at {path}: give an official .npz, a timm or transformers hub folder "
                             "(config.json + model.safetensors) or a .safetensors file with config.json beside it.")
