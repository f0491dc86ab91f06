"""keras-vit's own files (.keras archives, .weights.h5) read header first: the saved config checked
against the HDF5 datasets' shapes before Keras builds anything from it.

A .keras file is a zip of config.json (the model's `get_config()`, hence its ViTConfig) and
model.weights.h5 (every variable, under Keras's class-name paths: layers/patch_encoder/projection/vars/0,
layers/transformer_block_1/mlp_dense1/vars/0, ...). Keras itself builds the model from config.json and
only then reads the weights, so a config that claims a 65536-wide model is built (and runs the machine
out of memory) before a shape is compared; here the config is a `ViTConfig` (every field type- and
range-checked), its sizes are read off the datasets' headers (`_headers.read_sizes`) and compared, and
a dataset whose header claims more bytes than the file stores is refused.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from typing import Any

from keras_vit.config import ViTConfig, field_names
from keras_vit.formats._headers import Scheme, check_args, check_config, check_memory, config_of, read_sizes
from keras_vit.formats._torch import MAX_JSON_BYTES

SCHEME = Scheme(layout="keras", patch=r"layers/patch_encoder/projection/vars/0",
                block=r"layers/transformer_block(?:_(\d+))?/", mlp=r"layers/transformer_block/mlp_dense1/vars/0")
_PATCH_ENCODER_VAR = re.compile(r"layers/patch_encoder/vars/(\d+)")


def h5_shapes(h5: Any, path: str) -> dict[str, tuple[int, ...]]:
    """{dataset path: shape} of a Keras weights file's model variables (not the optimizer's), each
    dataset's header checked against the bytes the file stores for it."""
    import h5py

    shapes: dict[str, tuple[int, ...]] = {}

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset) or not name.startswith("layers/"):
            return
        if obj.dtype.kind not in "fiub":
            raise ValueError(f"{path}: dataset {name!r} holds {obj.dtype}, not numbers.")
        stored = obj.id.get_storage_size()
        if obj.compression is None and not obj.chunks and stored < obj.nbytes:  # Keras writes contiguous data
            raise ValueError(f"{path}: dataset {name!r} claims shape {obj.shape} ({obj.nbytes:,} bytes), but the "
                             f"file stores {stored:,} bytes of it.")
        shapes[name] = tuple(int(d) for d in obj.shape)

    try:
        h5.visititems(visit)
    except ValueError:
        raise
    except Exception as e:  # h5py raises KeyError, OSError, RuntimeError on a damaged file
        raise ValueError(f"{path}: its weights are not a readable HDF5 file ({type(e).__name__}: {e}).") from None
    return shapes


def check_sizes(config: ViTConfig, shapes: dict[str, tuple[int, ...]], where: str) -> None:
    """The config's sizes against a Keras weights file's shapes: width, patch, channels, depth, MLP,
    the position table's tokens, and no more parameters than the file holds."""
    found = read_sizes(shapes, SCHEME)
    encoder = sorted(((int(m[1]), k) for k in shapes if (m := _PATCH_ENCODER_VAR.fullmatch(k))))
    if config.absolute_position_embeddings and encoder:  # the table is the encoder's last variable
        key = encoder[-1][1]
        if len(shapes[key]) == 3:
            found["position_tokens"] = (shapes[key][1], key, shapes[key])
    check_config(config, found, where)
    held = sum(math.prod(s) for s in shapes.values())
    if config.parameter_count > held:
        raise ValueError(f"{where}: the config describes a model of {config.parameter_count:,} parameters, but "
                         f"the weights hold {held:,} values; the config does not describe these weights.")


def check_keras_archive(path: str) -> ViTConfig:
    """A .keras archive's ViTConfig, checked against its weights' headers (and the memory here) before
    Keras builds the model; a ValueError naming the file otherwise."""
    import h5py

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{path} is not a .keras model archive ({e}).") from None
    with archive:
        names = set(archive.namelist())
        for member in ("config.json", "model.weights.h5"):
            if member not in names:
                raise ValueError(f"{path} is not a .keras model archive: it has no {member}.")
        with archive.open("config.json") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise ValueError(f"{path}: its config.json has more than {MAX_JSON_BYTES:,} bytes.")
        try:
            saved = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise ValueError(f"{path}: its config.json is nested too deep to parse.") from None
        except ValueError as e:
            raise ValueError(f"{path}: its config.json is not JSON ({e}).") from None
        if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
            raise ValueError(f"{path}: its config.json is not a Keras model config.")
        if saved.get("class_name") != "VisionTransformer":
            raise ValueError(f"{path} holds a {str(saved.get('class_name'))[:80]}, not a keras_vit.VisionTransformer.")
        fields = {k: v for k, v in saved["config"].items() if k in field_names()}
        with archive.open("model.weights.h5") as f:
            try:
                h5 = h5py.File(f, "r")
            except Exception as e:  # h5py: OSError for a file that is no HDF5
                raise ValueError(f"{path}: its model.weights.h5 is not a readable HDF5 file ({e}).") from None
            with h5:
                shapes = h5_shapes(h5, path)
    where = f"{path}: its config.json"
    check_args(fields, read_sizes(shapes, SCHEME), where)
    config = config_of(fields, where)
    check_sizes(config, shapes, where)
    check_memory(config, path)
    return config
