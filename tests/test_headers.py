"""Configs checked against the weights' headers before anything is built (issue 50): each lying or
malformed file is refused naming the field, the config's value and the weights' key and shape; the
header-first safetensors reader against the safetensors library; ViTConfig's types, bounds and
parameter count."""

import json
import shutil
import struct
import zipfile

import numpy as np
import pytest
from conftest import DATA, tiny_vit

import keras_vit
from keras_vit.checkpoints import load_keras_model, load_weights
from keras_vit.config import MAX_PARAMETERS, ViTConfig
from keras_vit.formats import _headers
from keras_vit.formats._safetensors import SafetensorsFile
from keras_vit.models import VisionTransformer
from keras_vit.pretrained import from_pretrained, load_pretrained

st = pytest.importorskip("safetensors.numpy")

TIMM = DATA / "timm" / "timm_vit_token"
HF = DATA / "transformers" / "hf_vit_classifier"
NPZ = DATA / "official" / "vit_token_prelogits.npz"


def _edited(folder, tmp_path, edit=None, raw=None):
    out = tmp_path / folder.name
    shutil.copytree(folder, out)
    if edit is not None:
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (out / "config.json").write_text(json.dumps(config))
    if raw is not None:
        (out / "config.json").write_text(raw)
    return out


def _model_args(**change):
    return lambda config: config["model_args"].update(change)


@pytest.mark.parametrize("edit, words", [
    (_model_args(embed_dim=65536, depth=64), ["hidden_size 65536 (from embed_dim)", "patch_embed.proj.weight",
                                              "(32, 3, 8, 8)", "width 32"]),
    (_model_args(depth=64), ["num_layers 64 (from depth)", "the weights hold 2 blocks", "blocks.1."]),
    (_model_args(img_size=[65536, 65536]), ["image_size (65536, 65536)", "8192x8192 grid", "pos_embed",
                                            "(1, 17, 32)", "17 position embeddings"]),
    (_model_args(img_size=[64, 64]), ["image_size (64, 64)", "pos_embed", "(1, 17, 32)"]),
    (_model_args(depth="2"), ["depth='2' must be an integer, not str"]),
    (_model_args(depth=2.0), ["depth=2.0 must be an integer, not float"]),
    (_model_args(depth=-3), ["num_layers -3 (from depth)", "the weights hold 2 blocks"]),
    (_model_args(mlp_ratio=4.0), ["mlp_dim 128", "blocks.0.mlp.fc1.weight", "(64, 32)", "an MLP 64 wide"]),
    (_model_args(patch_size=4), ["patch_size (4, 4)", "patch_embed.proj.weight", "(32, 3, 8, 8)"]),
    (_model_args(num_heads=64), ["hidden_size 32 is not divisible by num_heads 64"]),
    (_model_args(num_classes=10**8), ["classes 100000000", "head.weight", "(7, 32)", "7 classes"]),
    (_model_args(reg_tokens=2), ["image_size (32, 32)", "+ 3 prefix", "pos_embed", "(1, 17, 32)"]),
    (_model_args(class_token="false"), ["class_token='false' must be true or false, not str"]),
    (lambda c: c["pretrained_cfg"].update(mean=[0.5, 0.5]), ["mean=[0.5, 0.5] must be a list of 3 numbers"]),
], ids=["wide-deep", "deep", "huge-image", "other-image", "string", "float", "negative", "mlp", "patch", "heads",
        "classes", "registers", "bool-string", "mean"])
def test_a_timm_config_that_lies_is_refused_naming_field_value_and_shape(tmp_path, edit, words):
    folder = _edited(TIMM, tmp_path, edit)
    with pytest.raises(ValueError) as error:
        from_pretrained(folder)
    for word in words + [str(folder / "config.json")]:
        assert word in str(error.value)


def test_a_transformers_config_that_lies_is_refused_naming_its_own_field(tmp_path):
    folder = _edited(HF, tmp_path, lambda c: c.update(num_hidden_layers=48))
    with pytest.raises(ValueError, match=r"num_layers 48 \(from num_hidden_layers\), but the weights hold 2 blocks"):
        from_pretrained(folder)
    folder = _edited(HF, tmp_path / "w", lambda c: c.update(hidden_size=64, num_attention_heads=4))
    with pytest.raises(ValueError, match=r"hidden_size 64.*projection.weight has shape \(32, 3, 8, 8\)"):
        from_pretrained(folder)
    folder = _edited(HF, tmp_path / "i", lambda c: c.update(image_size=[1, 2, 3]))
    with pytest.raises(ValueError, match="image_size must be a positive int or a pair"):
        from_pretrained(folder)


@pytest.mark.parametrize("raw, words", [
    ('{"architecture": "vit_tiny_patch16_224", "model_args": ' + "[" * 100_000 + "]" * 100_000 + "}",
     ["nested too deep"]),
    ("{", ["is not a readable JSON file"]),
    ("[1, 2]", ["holds list, not a config object"]),
    ('{"architecture": 3}', ["architecture=3 must be a timm model name"]),
])
def test_a_malformed_config_json_is_a_value_error_naming_the_file(tmp_path, raw, words):
    folder = _edited(TIMM, tmp_path, raw=raw)
    with pytest.raises(ValueError) as error:
        from_pretrained(folder)
    for word in words + [str(folder / "config.json")]:
        assert word in str(error.value)


def test_an_oversized_config_json_is_refused_unread(tmp_path, monkeypatch):
    from keras_vit.formats import _torch

    monkeypatch.setattr(_torch, "MAX_JSON_BYTES", 100)
    with pytest.raises(ValueError, match=r"config.json has [\d,]+ bytes; a config keras-vit reads has at most 100"):
        from_pretrained(_edited(TIMM, tmp_path))


# -- the safetensors reader ---------------------------------------------------------------------

def _header(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _write(path, header, body, length=None):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + body)


@pytest.mark.parametrize("folder", [TIMM, HF, DATA / "zoo" / "hf_clip", DATA / "zoo" / "hf_dinov2"],
                         ids=["timm", "transformers", "clip", "dinov2"])
def test_the_header_first_reader_gives_what_the_safetensors_library_gives(folder):
    ours, theirs = SafetensorsFile(folder / "model.safetensors"), st.load_file(str(folder / "model.safetensors"))
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours.shapes[key] == value.shape
        got = np.asarray(ours[key])
        assert got.dtype == value.dtype and np.array_equal(got, value)


def test_every_dtype_reads_and_bfloat16_widens_exactly(tmp_path):
    arrays = {"f16": np.arange(6, dtype=np.float16).reshape(2, 3), "f64": np.linspace(0, 1, 4),
              "i64": np.arange(3, dtype=np.int64), "u8": np.arange(5, dtype=np.uint8), "b": np.array([True, False])}
    path = tmp_path / "all.safetensors"
    st.save_file(arrays, str(path))
    weights = SafetensorsFile(path)
    for key, value in arrays.items():
        assert np.array_equal(np.asarray(weights[key]), value) and np.asarray(weights[key]).dtype == value.dtype
    # bfloat16: the top 16 bits of float32 values that have no lower bits
    exact = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    header = {"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}
    _write(tmp_path / "bf16.safetensors", header, (exact.view(np.uint32) >> 16).astype("<u2").tobytes())
    got = np.asarray(SafetensorsFile(tmp_path / "bf16.safetensors")["x"])
    assert got.dtype == np.float32 and np.array_equal(got, exact)


@pytest.mark.parametrize("edit, words", [
    (lambda h, b: (h, b, 2**40), ["header length field says 1,099,511,627,776 bytes"]),
    (lambda h, b: ({**h, "pos_embed": {**h["pos_embed"], "shape": [65536, 65536]}}, b, None),
     ["entry 'pos_embed' of shape (65536, 65536) in F32 needs 17,179,869,184 bytes"]),
    (lambda h, b: ({**h, "pos_embed": {**h["pos_embed"], "data_offsets": [0, 10**9]}}, b, None),
     ["entry 'pos_embed'", "data_offsets [0, 1000000000]"]),
    (lambda h, b: (h, b[: len(b) // 2], None), ["ends at byte", "truncated?"]),
    (lambda h, b: ({**h, "pos_embed": {**h["pos_embed"], "dtype": "F8"}}, b, None), ["dtype 'F8'"]),
    (lambda h, b: ({**h, "pos_embed": {**h["pos_embed"], "shape": [1, "17", 32]}}, b, None),
     ["shape [1, '17', 32], not a list of non-negative ints"]),
    (lambda h, b: ({**h, "x": dict(h["pos_embed"])}, b, None), ["overlap"]),
])
def test_a_lying_safetensors_header_is_refused_naming_the_entry(tmp_path, edit, words):
    folder = _edited(TIMM, tmp_path)
    path = folder / "model.safetensors"
    header, body, length = edit(*_header(path))
    _write(path, header, body, length)
    with pytest.raises(ValueError) as error:
        from_pretrained(folder)
    for word in words + [str(path)]:
        assert word in str(error.value)


def test_a_sharded_checkpoint_with_a_key_in_two_shards_is_refused(tmp_path):
    folder = _edited(TIMM, tmp_path)
    arrays = st.load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    st.save_file(arrays, str(folder / "model-00001-of-00002.safetensors"))
    st.save_file({"pos_embed": arrays["pos_embed"]}, str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"pos_embed": "model-00002-of-00002.safetensors",
                            "cls_token": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="holds 'pos_embed', which another shard of the checkpoint holds too"):
        from_pretrained(folder)


# -- .npz, .keras and .weights.h5 ------------------------------------------------------------------

def test_an_npz_header_that_lies_about_its_array_is_refused(tmp_path):
    bad = tmp_path / "wide.npz"
    with zipfile.ZipFile(NPZ) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            content = zin.read(item)
            if item.filename == "embedding/kernel.npy":
                assert b"(8, 8, 3, 32), }   " in content
                content = content.replace(b"(8, 8, 3, 32), }   ", b"(8, 8, 3, 65536), }")
            zout.writestr(item.filename, content)
    with pytest.raises(ValueError, match=r"'embedding/kernel' says shape \(8, 8, 3, 65536\) of float32 "
                                         r"\(50,331,648 bytes\), but its member holds 24,576 bytes"):
        from_pretrained(bad)


def test_an_official_variant_other_than_the_files_sizes_is_refused_before_building(monkeypatch):
    built = []
    monkeypatch.setattr(VisionTransformer, "__init__", lambda *a, **k: built.append(1))
    with pytest.raises(ValueError, match=r"as variant 'B/16'.*hidden_size 768.*embedding/kernel has shape "
                                         r"\(8, 8, 3, 32\)"):
        from_pretrained(NPZ, variant="B/16", image_size=32)
    assert not built


def _keras_file(tmp_path, **change):
    good = tmp_path / "good.keras"
    tiny_vit().save(good)
    bad = tmp_path / "edited.keras"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            content = src.read(item)
            if item.filename == "config.json":
                config = json.loads(content)
                config["config"].update(change)
                content = json.dumps(config).encode()
            dst.writestr(item, content)
    return bad


@pytest.mark.parametrize("change, words", [
    (dict(hidden_size=65536, num_layers=64, mlp_dim=65536, num_heads=64),
     ["hidden_size 65536", "layers/patch_encoder/projection/vars/0", "(8, 8, 3, 32)"]),
    (dict(num_layers=12), ["num_layers 12", "the weights hold 2 blocks"]),
    (dict(image_size=[4096, 4096]), ["image_size (4096, 4096)", "layers/patch_encoder/vars/1"]),
    (dict(num_layers="2"), ["num_layers must be an int >= 0, got '2' (str)"]),
    (dict(classes=10**6), ["describes a model of", "but the weights hold"]),
], ids=["wide-deep", "deep", "image", "string", "classes"])
def test_a_keras_file_whose_config_lies_is_refused_before_keras_builds_it(tmp_path, change, words):
    bad = _keras_file(tmp_path, **change)
    with pytest.raises(ValueError) as error:
        load_keras_model(bad)
    for word in words + [str(bad)]:
        assert word in str(error.value)


def test_a_weights_h5_dataset_claiming_more_than_the_file_stores_is_refused(tmp_path):
    import h5py

    model = tiny_vit()
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "a") as f:  # a position table that claims a 1024x1024 grid, stored as nothing
        del f["layers/patch_encoder/vars/1"]
        f.create_dataset("layers/patch_encoder/vars/1", shape=(1, 1024 * 1024 + 1, 32), dtype="float32")
    with pytest.raises(ValueError, match=r"claims shape \(1, 1048577, 32\) \(134,217,856 bytes\), but the file stores 0"):
        load_weights(tiny_vit(), str(path))


# -- ViTConfig: types, bounds, parameter count, memory -------------------------------------------

@pytest.mark.parametrize("fields, message", [
    (dict(num_layers="2"), r"num_layers must be an int >= 0, got '2' \(str\)"),
    (dict(hidden_size=64.0, num_heads=4), r"hidden_size must be a positive int, got 64.0 \(float\)"),
    (dict(num_heads=True), r"num_heads must be a positive int, got True \(bool\)"),
    (dict(num_layers=-3), r"num_layers must be >= 0, got -3"),
    (dict(image_size="224"), r"image_size must be an int or a pair \(h, w\), got '224'"),
    (dict(patch_size=(16.0, 16)), r"patch_size must be an int or a pair \(h, w\) of ints"),
    (dict(include_top="false"), r"include_top must be True or False, got 'false' \(str\)"),
    (dict(layer_norm_epsilon=float("nan")), r"layer_norm_epsilon must be a finite number, got nan"),
    (dict(mlp_dim=2**20), r"mlp_dim must be at most 131,072"),
    (dict(image_size=65536, patch_size=8), r"makes a 8192x8192 grid, 67,108,864 tokens; keras-vit builds at most"),
    (dict(hidden_size=65536, num_heads=64, mlp_dim=65536, num_layers=64),
     r"describes a model of 1,649,[\d,]+ parameters"),
    (dict(resnet=dict(num_layers=(3, "4"))), r"resnet num_layers must be up to 8 positive unit counts"),
    (dict(resnet=dict(width_factor=1e9)), r"resnet width_factor must be a number in \(0, 64\]"),
])
def test_config_values_are_type_and_range_checked_where_they_enter(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**fields)


def test_bounds_let_the_largest_published_vits_through():
    giant = ViTConfig(image_size=224, patch_size=14, hidden_size=6144, num_layers=48, num_heads=48, mlp_dim=24576)
    assert 21e9 < giant.parameter_count < MAX_PARAMETERS  # ViT-22B's sizes
    assert ViTConfig.from_preset("H/14", image_size=518).grid == (37, 37)


@pytest.mark.parametrize("fields", [
    dict(),
    dict(distillation=True, register_tokens=2, prefix_posemb="class", layer_scale=1e-5, mlp_activation="swiglu"),
    dict(classifier="gap", pooling="map", representation_size=16, fc_norm=True, pre_norm=True, patch_bias=False),
    dict(relative_position_bias=True, absolute_position_embeddings=False, include_top=False),
    dict(image_size=64, patch_size=2, resnet=dict(num_layers=(1, 2), width_factor=0.5)),
    dict(patch_size=2, resnet=dict(num_layers=(2,), root="small", norm="batch", first_stride=2)),
    dict(patch_size=2, resnet=dict(num_layers=(), root="small"), channels=1, prefix_posemb="none"),
], ids=["plain", "deit-dinov2", "siglip-clip", "beit", "hybrid", "batchnorm-stem", "root-only"])
def test_parameter_count_is_what_building_allocates(fields):
    config = ViTConfig(**{**dict(image_size=32, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=48,
                                 classes=5), **fields})
    assert config.parameter_count == VisionTransformer(config).count_params()


def test_a_model_that_would_not_fit_in_memory_is_refused_before_building(monkeypatch):
    monkeypatch.setattr(_headers, "available_memory", lambda: 2**16)
    with pytest.raises(ValueError, match=r"24,135 parameters, 0.0 GiB in float32, more than the 0.0 GiB of memory"):
        from_pretrained(TIMM)


def test_load_pretrained_checks_the_config_against_the_weights_too(tmp_path):
    folder = _edited(TIMM, tmp_path, _model_args(depth=3))
    model = tiny_vit(approximate_gelu=False)
    with pytest.raises(ValueError, match=r"num_layers 3 \(from depth\), but the weights hold 2 blocks"):
        load_pretrained(model, folder)
    assert keras_vit.from_pretrained(TIMM).count_params() == 24135


@pytest.mark.parametrize("weight_map, message", [
    (["model.safetensors"], "weight_map must be an object"),
    ({"pos_embed": "../../elsewhere.safetensors"}, "names shard '../../elsewhere.safetensors', not a file beside it"),
])
def test_a_shard_index_that_points_elsewhere_is_refused(tmp_path, weight_map, message):
    folder = _edited(TIMM, tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ValueError, match=message):
        from_pretrained(folder)
