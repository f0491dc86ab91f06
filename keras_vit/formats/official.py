"""Google's official checkpoints (.npz, big_vision / vit_jax), in and out.

One name table (`official_key`) turns a keras-vit variable path into the key of the official
checkpoint, in either key layout, and back; loading, saving and the CLI all use it. An .npz is
opened once (`NpzArchive`): its array headers are read once, its CRCs checked after the plan and
before the first assignment, its arrays read one at a time from the same open archive.
"""

from __future__ import annotations

import logging
import math
import os
import re
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from keras_vit._common import check_keywords, refuse_unknown_keywords
from keras_vit._files import atomic_path
from keras_vit.config import ViTConfig
from keras_vit.formats._assign import ArraySource, KeyTable, check_channels, load_into
from keras_vit.formats._headers import Scheme
from keras_vit.formats._torch import refuse_pickle
from keras_vit.models import VisionTransformer, vit_keywords
from keras_vit.posemb import infer_grid
from keras_vit.presets import missing_checkpoint

if TYPE_CHECKING:
    import keras

log = logging.getLogger(__name__)

LAYOUTS = ("released", "current")
POSEMB_KEY = "Transformer/posembed_input/pos_embedding"

# keras-vit path -> official key. {i} is a block index; the layouts differ in the names
# of the encoder block's children only.
_BLOCK_NAMES = {
    "released": {"norm1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_1", "norm2": "LayerNorm_2",
                 "mlp": "MlpBlock_3"},
    "current": {"norm1": "LayerNorm_0", "attn": "MultiHeadDotProductAttention_0", "norm2": "LayerNorm_1",
                "mlp": "MlpBlock_0"},
}
_PARAM = {"gamma": "scale", "beta": "bias", "kernel": "kernel", "bias": "bias"}


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


def official_shape(variable, key, model, layout):
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


def detect_layout(keys):
    """"current" when the keys use current Flax names, else "released"."""
    if any("MultiHeadDotProductAttention_0" in k or "/MlpBlock_0/" in k for k in keys):
        return "current"
    return "released"


def _squeeze(shape):
    return tuple(d for d in shape if d != 1)


class OfficialTable(KeyTable):
    """The official names for one model in one key layout."""

    def __init__(self, model, layout):
        self.model, self.layout, self.format = model, layout, f"{layout} layout"

    def new_report(self):
        return {"layout": self.layout, "loaded": [], "kept": [], "dropped": [], "resampled": []}

    def key(self, path):
        return official_key(path, self.layout), None

    def shape(self, variable, key, part):
        return official_shape(variable, key, self.model, self.layout)

    def fits(self, variable, key, want, found):  # GroupNorm scales: (C,) or (1, 1, 1, C) as saved
        return found == want or ("/gn" in "/" + key and _squeeze(found) == _squeeze(variable.shape))

    def posemb_fits(self, shapes):
        return ("cls" in shapes) == bool(self.model.num_prefix_tokens)

    def drops(self, key, model):
        return (key.startswith("pre_logits/") and model.representation_size is None
                or key.startswith("head/") and not model.include_top)

    def unexpected_hint(self, unexpected):
        if any(k.startswith("cls ") for k in unexpected):
            return " (the checkpoint has a class token: build the model with classifier='token')"
        return ""

    def to_keras(self, value, variable, part):
        return np.reshape(value, variable.shape)


# -- the file --------------------------------------------------------------------------------

class NpzArchive:
    """An .npz opened once: `index` ({key: (shape, dtype)}) from the array headers, read on opening;
    `verify()` checks every member's CRC; `read(key)` one array (never unpickled). A context manager."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            raise
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise ValueError(f"{self.path} is not a readable .npz checkpoint (a zip archive of .npy arrays): "
                             f"{e}.") from None
        try:
            self.index = self._read_index()
        except BaseException:
            self._zip.close()
            raise

    def _read_index(self):
        index = {}
        for info in self._zip.infolist():
            if info.filename.endswith(".pkl"):  # torch.save's zip: archive/data.pkl and storages
                refuse_pickle(self.path)
            if not info.filename.endswith(".npy"):
                raise ValueError(f"{self.path}: member {info.filename!r} is not a .npy array; this is no .npz "
                                 "checkpoint.")
            key = info.filename[: -len(".npy")]
            try:
                with self._zip.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    reader = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                              else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = reader(f)
                    header = f.tell()
            except Exception as e:  # truncated members, bad headers
                raise ValueError(f"{self.path}: cannot read the header of array {key!r}: {e}.") from None
            if dtype.hasobject:
                raise ValueError(f"{self.path}: array {key!r} holds Python objects; keras-vit never unpickles.")
            want = header + math.prod(shape) * dtype.itemsize
            if info.file_size != want:  # a header that lies about its array: refused before anything is sized by it
                raise ValueError(f"{self.path}: the header of array {key!r} says shape {tuple(shape)} of {dtype} "
                                 f"({want - header:,} bytes), but its member holds {info.file_size - header:,} bytes.")
            index[key] = (tuple(shape), dtype)
        if not index:
            raise ValueError(f"{self.path} holds no arrays.")
        return index

    def verify(self):
        """Reads every member once to check its CRC, so loading cannot fail half-way."""
        try:
            bad = self._zip.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, zipfile.LargeZipFile) as e:
            raise ValueError(f"{self.path} is truncated or corrupt: {e}.") from None
        if bad is not None:
            raise ValueError(f"{self.path} is corrupt: the data of {bad!r} fails its checksum.")

    def read(self, key):
        with self._zip.open(key + ".npy") as f:
            return np.lib.format.read_array(f, allow_pickle=False)

    def source(self):
        """The archive as the loading pass reads it."""
        return ArraySource({k: v[0] for k, v in self.index.items()}, self.read, self.verify)

    def close(self):
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_npz_index(path):
    """{key: (shape, dtype)} from an .npz's array headers, without reading the arrays."""
    with NpzArchive(path) as archive:
        return archive.index


def open_checkpoint(path):
    """The NpzArchive at `path`; a missing file names the release to download."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise missing_checkpoint(path)
    return NpzArchive(path)


def load_archive(model, archive, *, resample="official"):
    """`load_official_npz` from an open NpzArchive (the file opened once by whoever read its config)."""
    path = archive.path
    first_conv = archive.index.get("conv_root/kernel" if model.resnet else "embedding/kernel")
    if first_conv is not None and len(first_conv[0]) == 4:
        check_channels(model, first_conv[0][2], f"Checkpoint {path}")
    layout = detect_layout(archive.index)
    return load_into(model, OfficialTable(model, layout), archive.source(),
                     source=f"Checkpoint {path} ({layout} key layout)", name=path, resample=resample)


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
    with open_checkpoint(path) as archive:
        return load_archive(model, archive, resample=resample)


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
        arrays[key] = np.reshape(np.asarray(variable.numpy()), official_shape(variable, key, model, layout))
    with atomic_path(path) as tmp:
        np.savez(tmp, **arrays)
        if not tmp.endswith(".npz"):  # np.savez appends .npz to other names
            os.replace(tmp + ".npz", tmp)
    return path


# -- configs ---------------------------------------------------------------------------------

# Where the official layout keeps the arrays that tell the sizes (formats/_headers.py).
SCHEME = Scheme(layout="keras", patch=r"embedding/kernel", block=r"Transformer/encoderblock_(\d+)/",
                mlp=r"Transformer/encoderblock_0/MlpBlock_\d/Dense_0/kernel", posemb=re.escape(POSEMB_KEY),
                heads=(r"Transformer/encoderblock_0/MultiHeadDotProductAttention_\d/query/kernel", 1),
                head=r"head/kernel", pre_logits=r"pre_logits/kernel")


def args_from_shapes(index, path):
    """VisionTransformer arguments read off an official .npz's array headers ({key: (shape, dtype)})."""
    from keras_vit.stem import stem_stride

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
        grid = infer_grid(shapes[POSEMB_KEY][1] - prefix)
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
    return VisionTransformer(ViTConfig(**args))
