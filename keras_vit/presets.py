"""What a variant is, in one table: sizes, official name, released checkpoints, fine-tune settings.

The constructors (`keras_vit.ViTB16`, ...), `create_model`, the named weights
(`weights="imagenet21k"`, ...) and the parameter-count tests are all read from `PRESETS`.
Plain data, no Keras: every other module may import it.

Example:
>>> PRESETS["B/16"].official_name, PRESETS["B/16"].parameters
('ViT-B_16', 86567656)
"""

import dataclasses
import difflib
import os
import re

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
    constructor: the keras.applications-style function's name, e.g. "ViTB16" (None: `create_model` only).
    parameters: the official implementation's own count, 1000 classes, 224x224 (the giants': ours).
    weights: the NAMED_WEIGHTS released for it.
    augreg: the recommended AugReg checkpoint's file stem, or None.
    augreg_finetune_lr: the learning rate in its ImageNet-2012 fine-tune's file name.
    finetune_224: whether an imagenet21k+imagenet2012 fine-tune at 224 (`-224`) was released.
    imagenet: what `weights="imagenet"` loads, the release's path without ".npz", or None.
    """

    sizes: dict
    official_name: str
    constructor: str | None
    parameters: int
    weights: tuple = ()
    augreg: str | None = None
    augreg_finetune_lr: str | None = None
    finetune_224: bool = False
    imagenet: str | None = None
    published: str | None = None


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

# The giants, for model-parallel training (keras_vit.layout_map): ViT-g/14 and ViT-G/14 of "Scaling Vision
# Transformers" (Zhai et al., CVPR 2022, Table 2: 1011M and 1843M, the encoder without a head) and ViT-e/14
# of PaLI (Chen et al., ICLR 2023: 3.9B, with its attention-pool head), sizes as big_vision's models/vit.py.
# No released weights; `parameters` is our count with a 1000-class head at 224 (a class token), tested
# against `published` by tests/test_parallel.py. Not among the paper's 14 (`PRESETS`, `VARIANTS`).
GIANT_PRESETS = {
    "g/14": Preset(_vit(14, 1408, 40, 16, 6144), "ViT-g_14", None, 1_012_611_432, published="1011M"),
    "G/14": Preset(_vit(14, 1664, 48, 16, 8192), "ViT-G_14", None, 1_844_440_680, published="1843M"),
    "e/14": Preset(_vit(14, 1792, 56, 16, 15360), "ViT-e_14", None, 3_807_214_312, published="3.9B"),
}


def preset_of(name: str) -> Preset:
    """The Preset of a `canonical_variant` name: the paper's (`PRESETS`) or a giant (`GIANT_PRESETS`).

    Example:
    >>> preset_of(canonical_variant("ViT-G_14")).sizes["hidden_size"], preset_of("B/16").constructor
    (1664, 'ViTB16')
    """
    return PRESETS[name] if name in PRESETS else GIANT_PRESETS[name]


# The official configurations' sizes, by variant (the public `keras_vit.VARIANTS`).
VARIANTS = {name: preset.sizes for name, preset in PRESETS.items()}


def canonical_variant(name):
    """'ViT-B_16', 'vit-b/16', 'B16' or 'R50+ViT-B_16' -> the key of PRESETS (or of GIANT_PRESETS: 'ViT-g_14'
    and 'ViT-G_14' are two models, told apart by case)."""
    key = re.sub(r"vit-?", "", str(name).strip(), flags=re.IGNORECASE).replace("_", "/").lstrip("-")
    if "/" not in key:  # B16 -> B/16
        head = key.rstrip("0123456789")
        key = f"{head}/{key[len(head):]}"
    if key in PRESETS or key in GIANT_PRESETS:
        return key
    key = key.upper()
    upper = [k.upper() for k in (*PRESETS, *GIANT_PRESETS)]
    table = {k.upper(): k for k in (*PRESETS, *GIANT_PRESETS) if upper.count(k.upper()) == 1}
    if key not in table:
        if timm_family(str(name)) is not None:
            raise ValueError(f"{name!r} is a timm architecture, not one of the paper's variants: "
                             f"keras_vit.create_model({str(name)!r}) builds it.")
        raise ValueError(f"Unknown ViT variant {name!r}.{did_you_mean(name)} Known variants: {', '.join(PRESETS)}, the giants "
                         f"{', '.join(GIANT_PRESETS)}; "
                         f"and timm's families ({', '.join(TIMM_ARCHITECTURES)}; keras_vit.presets.TIMM_PRESETS lists "
                         "their published sizes), which keras_vit.create_model builds.")
    return table[key]


def did_you_mean(name):
    """' Did you mean ...?' naming the preset names (the paper's, the official ones, timm's) closest to
    a misspelled `name`, or ''.

    Example:
    >>> did_you_mean("vit_small_patch14_dinov3")
    " Did you mean 'vit_small_patch16_dinov3' or 'vit_small_patch14_dinov2'?"
    >>> did_you_mean("b/61"), did_you_mean("deit_base_distiled_patch16_224")
    ('', " Did you mean 'deit_base_distilled_patch16_224' or 'deit_base_distilled_patch16_384'?")
    """
    presets = {**PRESETS, **GIANT_PRESETS}
    known = [*presets, *(p.official_name for p in presets.values()), *timm_presets()]
    close = difflib.get_close_matches(str(name).strip(), known, n=2, cutoff=0.8)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


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


# -- the ViT families of timm -----------------------------------------------------------------
# One table, read by formats/timm.py's reader (which timm architectures keras-vit reads and what each
# name implies) and by `create_model("vit_small_patch14_dinov2")` (the same architecture, no weights).

# timm's ViT sizes: (embed_dim, depth, num_heads), timm/models/vision_transformer.py.
TIMM_SIZES = {
    "tiny": (192, 12, 3), "small": (384, 12, 6), "base": (768, 12, 12), "large": (1024, 24, 16),
    "huge": (1280, 32, 16), "giant": (1536, 40, 24), "so400m": (1152, 27, 16),
    "small_plus": (384, 12, 6), "huge_plus": (1280, 32, 20),  # DINOv3's (SwiGLU MLPs)
    "gigantic": (1536, 50, 16),  # Perception Encoder's
}
# timm architectures keras-vit reads, and their family. What each family implies beyond a plain ViT is
# `timm_model_args`'s (as timm's entrypoints set it: config.json's model_args do not say it, they override it).
# timm/models/vision_transformer.py, deit.py, beit.py.
TIMM_FAMILIES = (
    (re.compile(r"^(vit|deit)_(?P<size>tiny|small|base|large|huge)_patch(?P<patch>\d+)_(?P<img>\d+)$"), "plain"),
    (re.compile(r"^deit_(?P<size>tiny|small|base)_distilled_patch(?P<patch>16)_(?P<img>\d+)$"), "deit_distilled"),
    (re.compile(r"^vit_(?P<size>small|base|large|giant)_patch(?P<patch>14)_(?:reg(?P<reg>\d+)_)?dinov2$"), "dinov2"),
    (re.compile(r"^vit_(?P<size>base|large|huge)_patch(?P<patch>\d+)_clip_(?P<quick>quickgelu_)?(?P<img>\d+)$"),
     "clip"),
    (re.compile(r"^vit_(?P<size>base|large|so400m)_patch(?P<patch>\d+)_siglip_(?P<gap>gap_)?(?P<img>\d+)$"),
     "siglip"),
    (re.compile(r"^beit_(?P<size>base|large)_patch(?P<patch>16)_(?P<img>\d+)$"), "beit"),
    # timm/models/eva.py: rotary position embeddings
    (re.compile(r"^vit_(?P<size>tiny|small|small_plus|base|large|huge_plus)_patch(?P<patch>16)_dinov3(?P<qkvb>_qkvb)?$"),
     "dinov3"),
    (re.compile(r"^eva02_(?P<size>tiny|small|base|large)_patch(?P<patch>14)_(?P<img>\d+)$"), "eva02"),
    (re.compile(r"^vit_pe_core_(?P<size>tiny|small|base|large|gigantic)_patch(?P<patch>14|16)_(?P<img>\d+)$"), "pe_core"),
)
TIMM_ARCHITECTURES = ("vit_{tiny,...,huge}_patch{P}_{SIZE}", "deit_{tiny,small,base}[_distilled]_patch16_{SIZE}",
                      "vit_{small,base,large,giant}_patch14[_reg{N}]_dinov2", "vit_*_clip[_quickgelu]_{SIZE}",
                      "vit_*_siglip[_gap]_{SIZE}", "beit_{base,large}_patch16_{SIZE}",
                      "vit_{small,small_plus,base,large,huge_plus}_patch16_dinov3[_qkvb]",
                      "eva02_{tiny,small,base,large}_patch14_{SIZE}",
                      "vit_pe_core_{tiny,small,base,large,gigantic}_patch{14,16}_{SIZE}")

# The families' published sizes, by timm architecture name: `create_model(name)` builds each (any name
# TIMM_FAMILIES matches builds; these are the ones timm publishes weights for, their parameter counts
# tested against timm's own, tests/data/timm_presets/). Not vit_so400m_patch14_siglip_384: 384 is not a
# multiple of its 14-pixel patch, timm's patch convolution drops the last 6 rows and columns, keras-vit
# refuses to crop (image_size=378 builds its architecture, the same 27x27 grid).
TIMM_PRESETS = {
    "DeiT (distilled)": ("deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224",
                         "deit_base_distilled_patch16_224", "deit_base_distilled_patch16_384"),
    "DINOv2": ("vit_small_patch14_dinov2", "vit_base_patch14_dinov2", "vit_large_patch14_dinov2",
               "vit_giant_patch14_dinov2"),
    "DINOv2 with registers": ("vit_small_patch14_reg4_dinov2", "vit_base_patch14_reg4_dinov2",
                              "vit_large_patch14_reg4_dinov2", "vit_giant_patch14_reg4_dinov2"),
    "CLIP": ("vit_base_patch32_clip_224", "vit_base_patch16_clip_224", "vit_large_patch14_clip_224",
             "vit_large_patch14_clip_336", "vit_huge_patch14_clip_224"),
    "CLIP (QuickGELU)": ("vit_base_patch32_clip_quickgelu_224", "vit_base_patch16_clip_quickgelu_224",
                         "vit_large_patch14_clip_quickgelu_224", "vit_large_patch14_clip_quickgelu_336",
                         "vit_huge_patch14_clip_quickgelu_224"),
    "SigLIP": ("vit_base_patch16_siglip_224", "vit_base_patch16_siglip_384", "vit_base_patch16_siglip_gap_224",
               "vit_large_patch16_siglip_256", "vit_large_patch16_siglip_384", "vit_so400m_patch14_siglip_224"),
    "BEiT": ("beit_base_patch16_224", "beit_base_patch16_384", "beit_large_patch16_224"),
    "DINOv3": ("vit_small_patch16_dinov3", "vit_small_plus_patch16_dinov3", "vit_base_patch16_dinov3",
               "vit_large_patch16_dinov3", "vit_huge_plus_patch16_dinov3", "vit_small_patch16_dinov3_qkvb",
               "vit_base_patch16_dinov3_qkvb", "vit_large_patch16_dinov3_qkvb"),
    "EVA02": ("eva02_tiny_patch14_224", "eva02_small_patch14_224", "eva02_base_patch14_224", "eva02_large_patch14_224",
              "eva02_tiny_patch14_336", "eva02_small_patch14_336", "eva02_base_patch14_448", "eva02_large_patch14_448"),
    "Perception Encoder": ("vit_pe_core_tiny_patch16_384", "vit_pe_core_small_patch16_384", "vit_pe_core_base_patch16_224",
                           "vit_pe_core_large_patch14_336", "vit_pe_core_gigantic_patch14_448"),
}


def timm_family(arch):
    """(family, regex match) of a timm architecture name keras-vit reads, else None.

    Example:
    >>> family, match = timm_family("vit_small_patch14_reg4_dinov2")
    >>> family, match["size"], match["reg"]
    ('dinov2', 'small', '4')
    >>> timm_family("convnext_tiny") is None
    True
    """
    for pattern, name in TIMM_FAMILIES:
        match = pattern.match(arch)
        if match:
            return name, match
    return None


def timm_model_args(name, match):
    """The model_args a timm architecture name implies (its entrypoint's), in timm's names: the
    features of its family (`timm_family`'s) at its size.

    Example:
    >>> timm_model_args(*timm_family("vit_base_patch16_clip_quickgelu_224"))["act_layer"]
    'quick_gelu'
    """
    embed_dim, depth, heads = TIMM_SIZES[match["size"]]
    implied = dict(embed_dim=embed_dim, depth=depth, num_heads=heads, patch_size=int(match["patch"]))
    if match.groupdict().get("img"):
        implied["img_size"] = int(match["img"])
    if name == "deit_distilled":
        implied["distilled"] = True
    elif name == "dinov2":
        implied.update(img_size=518, init_values=1e-5)
        if match["reg"]:
            implied.update(reg_tokens=int(match["reg"]), no_embed_class=True)
        if match["size"] == "giant":
            implied.update(mlp_ratio=2.66667 * 2, mlp_layer="swiglu", act_layer="silu")
    elif name == "clip":
        implied.update(pre_norm=True, norm_eps=1e-5)
        if match["quick"]:
            implied["act_layer"] = "quick_gelu"
    elif name == "siglip":
        implied.update(class_token=False, global_pool="avg" if match["gap"] else "map")
        if match["gap"]:
            implied["fc_norm"] = False
        if match["size"] == "so400m":
            implied["mlp_ratio"] = 3.7362
    elif name == "beit":
        implied.update(use_abs_pos_emb=False, use_rel_pos_bias=True, init_values=0.1, global_pool="avg")
    elif name == "dinov3":  # timm's Eva entrypoints (their own argument names)
        implied.update(img_size=256, dynamic_img_size=True, qkv_bias=bool(match["qkvb"]), init_values=1e-5,
                       rope_type="dinov3", rope_temperature=100, rope_rotate_half=True, use_rot_pos_emb=True,
                       use_abs_pos_emb=False, num_reg_tokens=4, use_fc_norm=False, norm_eps=1e-5, global_pool="avg")
        if match["size"].endswith("_plus"):  # S+ and H+: SwiGLU, its widths aligned to 8
            implied.update(swiglu_mlp=True, swiglu_align_to=8)
    elif name == "eva02":
        implied.update(mlp_ratio=4 * 2 / 3, swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(16, 16),
                       global_pool="avg")
        if match["size"] in ("base", "large"):  # their MLP has a sub-LN and q, k, v apart
            implied.update(scale_mlp=True, qkv_fused=False)
    elif name == "pe_core":  # Perception Encoder: timm's Eva with AttentionRope blocks and an attention pool
        implied.update(global_pool="map", attn_type="rope", use_pre_transformer_norm=True, use_rot_pos_emb=True,
                       ref_feat_shape=(implied["img_size"] // implied["patch_size"],) * 2, rope_grid_offset=1.0,
                       rope_grid_indexing="xy", attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0, norm_eps=1e-5)
        if match["size"] == "gigantic":  # no class token, a wider MLP, the grid not offset
            implied.update(class_token=False, mlp_ratio=8960 / 1536, rope_grid_offset=0.0)
    return implied


def timm_presets():
    """Every name of TIMM_PRESETS, in its order.

    Example:
    >>> timm_presets()[:2]
    ('deit_tiny_distilled_patch16_224', 'deit_small_distilled_patch16_224')
    """
    return tuple(name for names in TIMM_PRESETS.values() for name in names)
