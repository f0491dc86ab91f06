import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, ROOT, randomize, tiny_vit
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.checkpoints import (
    from_official_config,
    load_official_npz,
    load_weights,
    official_key,
    resolve_weights,
    save_official_npz,
)
from keras_vit.presets import PRESETS

pytestmark = pytest.mark.backends

OFFICIAL = DATA / "official"
CASES = ["vit_token_prelogits", "vit_gap_current_names", "hybrid_r2_token"]


def _case(name, **kwargs):
    meta = json.loads((OFFICIAL / f"{name}.json").read_text())
    kwargs.setdefault("image_size", meta["image_size"])
    model = from_official_config(meta["config"], **kwargs)
    return model, meta, np.load(OFFICIAL / f"{name}.io.npz")


@pytest.mark.parametrize("name", CASES)
def test_official_logits_to_1e_5(name):
    model, meta, io = _case(name)
    report = load_official_npz(model, OFFICIAL / f"{name}.npz")
    assert report["layout"] == ("current" if "current" in meta["key_layout"] else "released")
    assert not report["kept"] and not report["dropped"] and not report["resampled"]
    logits = model.predict(io["images"], verbose=0)
    assert np.abs(logits - io["logits"]).max() <= 1e-5


def test_exact_gelu_moves_the_logits_beyond_the_tolerance():
    """The fixtures can tell tanh GELU from erf GELU: the parity test is not vacuous."""
    model, _, io = _case("vit_token_prelogits", approximate_gelu=False)
    load_official_npz(model, OFFICIAL / "vit_token_prelogits.npz")
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() > 1e-5


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("layout", ["released", "current"])
def test_save_and_load_both_key_layouts(tmp_path, name, layout):
    model, _, io = _case(name)
    load_official_npz(model, OFFICIAL / f"{name}.npz")
    path = save_official_npz(model, tmp_path / "ckpt.npz", layout=layout)
    keys = np.load(path).files
    assert any(("MultiHeadDotProductAttention_1" if layout == "released" else "MultiHeadDotProductAttention_0") in k
               for k in keys)
    if "hybrid" in name:
        assert np.load(path)["gn_root/scale"].shape == ((1, 1, 1, 64) if layout == "released" else (64,))
    again, _, _ = _case(name)
    assert load_official_npz(again, path)["layout"] == layout
    np.testing.assert_allclose(again.predict(io["images"], verbose=0), io["logits"], atol=1e-5)


def test_checkpoint_moved_to_another_resolution_uses_the_official_resampling():
    model, meta, io = _case("vit_token_prelogits", image_size=48)
    report = load_official_npz(model, OFFICIAL / "vit_token_prelogits.npz")
    assert report["resampled"] == ["position embeddings 4x4 -> 6x6 (official)"]
    stored = np.load(OFFICIAL / "vit_token_prelogits.npz")["Transformer/posembed_input/pos_embedding"]
    import scipy.ndimage

    grid = scipy.ndimage.zoom(stored[0, 1:].reshape(4, 4, -1), (6 / 4, 6 / 4, 1), order=1)
    loaded = to_numpy(model.patch_encoder.position_embedding)
    np.testing.assert_allclose(loaded[0, 1:], grid.reshape(36, -1), atol=1e-6)
    np.testing.assert_array_equal(loaded[0, :1], stored[0, :1])


def test_head_of_another_class_count_is_kept_and_pre_logits_dropped():
    model, _, _ = _case("vit_token_prelogits", classes=3, representation_size=None)
    report = load_official_npz(model, OFFICIAL / "vit_token_prelogits.npz")
    assert [k.split(" ")[0] for k in report["kept"]] == ["head/kernel", "head/bias"]
    assert report["dropped"] == ["pre_logits/bias", "pre_logits/kernel"]
    assert np.all(to_numpy(model.get_layer("head").kernel) == 0)
    features, _, _ = _case("vit_token_prelogits", include_top=False)
    assert load_official_npz(features, OFFICIAL / "vit_token_prelogits.npz")["dropped"] == ["head/bias", "head/kernel"]


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _assert_unchanged(model, before):
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "ViT-test.npz"
    shutil.copy(OFFICIAL / "vit_token_prelogits.npz", path)
    return path


def _fresh():
    model, _, _ = _case("vit_token_prelogits")
    return model, _weights(model)


def test_not_an_npz(tmp_path):
    model, before = _fresh()
    bad = tmp_path / "notes.npz"
    bad.write_text("these are not weights")
    with pytest.raises(ValueError, match=r"notes\.npz is not a readable \.npz checkpoint"):
        load_official_npz(model, bad)
    _assert_unchanged(model, before)


def test_truncated_file(ckpt):
    model, before = _fresh()
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"ViT-test\.npz"):
        load_official_npz(model, ckpt)
    _assert_unchanged(model, before)


def test_corrupt_array_data_is_caught_before_assigning(ckpt):
    model, before = _fresh()
    data = bytearray(ckpt.read_bytes())
    start = data.index(b"Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel.npy")
    data[start + 300] ^= 0xFF  # inside that array's data
    ckpt.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"ViT-test\.npz is corrupt"):
        load_official_npz(model, ckpt)
    _assert_unchanged(model, before)


def _rewrite(path, drop=(), add=None, change=None):
    arrays = dict(np.load(path))
    for key in drop:
        del arrays[key]
    arrays.update(add or {})
    arrays.update(change or {})
    np.savez(path, **arrays)


def test_missing_keys_are_named(ckpt):
    model, before = _fresh()
    _rewrite(ckpt, drop=["Transformer/encoderblock_0/LayerNorm_2/scale"])
    with pytest.raises(ValueError, match=r"ViT-test\.npz.*missing keys: Transformer/encoderblock_0/LayerNorm_2/scale \(32,\)"):
        load_official_npz(model, ckpt)
    _assert_unchanged(model, before)


def test_unexpected_keys_are_named(ckpt):
    model, before = _fresh()
    _rewrite(ckpt, add={"Transformer/encoderblock_7/LayerNorm_0/scale": np.ones(32, "float32")})
    with pytest.raises(ValueError, match=r"unexpected keys: Transformer/encoderblock_7/LayerNorm_0/scale \(32,\)"):
        load_official_npz(model, ckpt)
    _assert_unchanged(model, before)


def test_shape_mismatch_names_expected_and_found(ckpt):
    model, before = _fresh()
    _rewrite(ckpt, change={"Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel": np.ones((32, 65), "float32")})
    with pytest.raises(ValueError, match=r"Dense_0/kernel: expected \(32, 64\), found \(32, 65\)"):
        load_official_npz(model, ckpt)
    _assert_unchanged(model, before)


def test_class_token_checkpoint_into_a_gap_model_is_refused(ckpt):
    model, _, _ = _case("vit_token_prelogits", classifier="gap")
    with pytest.raises(ValueError, match="classifier='token'"):
        load_official_npz(model, ckpt)


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "pickle.npz"
    np.savez(path, cls=np.array([{"a": 1}], dtype=object))
    model, before = _fresh()
    with pytest.raises(ValueError, match="holds Python objects; keras-vit never unpickles"):
        load_official_npz(model, path)
    _assert_unchanged(model, before)


@pytest.mark.one_backend
def test_official_key_table():
    assert official_key("encoderblock_3/query/kernel") == (
        "Transformer/encoderblock_3/MultiHeadDotProductAttention_1/query/kernel")
    assert official_key("encoderblock_3/norm2/gamma", "current") == "Transformer/encoderblock_3/LayerNorm_1/scale"
    assert official_key("encoderblock_0/mlp_dense2/bias") == "Transformer/encoderblock_0/MlpBlock_3/Dense_1/bias"
    assert official_key("block2_unit3/gn_proj/beta") == "block2/unit3/gn_proj/bias"
    assert official_key("patch_encoder/pos_embedding") == "Transformer/posembed_input/pos_embedding"


@pytest.mark.one_backend
def test_named_weights_resolve_to_the_public_release(monkeypatch):
    monkeypatch.delenv("KERAS_VIT_WEIGHTS_URL", raising=False)
    base = "https://storage.googleapis.com/vit_models"
    assert resolve_weights("imagenet21k", "B/16") == f"{base}/imagenet21k/ViT-B_16.npz"
    assert resolve_weights("imagenet21k", "R50+B/16") == f"{base}/imagenet21k/R50+ViT-B_16.npz"
    assert resolve_weights("imagenet21k+imagenet2012", "L/16", (224, 224)) == (
        f"{base}/imagenet21k+imagenet2012/ViT-L_16-224.npz")
    assert resolve_weights("imagenet21k+imagenet2012", "B/32", (384, 384)) == (
        f"{base}/imagenet21k+imagenet2012/ViT-B_32.npz")
    assert resolve_weights("augreg", "S/16") == (
        f"{base}/augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz")
    assert resolve_weights("augreg+imagenet2012", "B/16").endswith(
        "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz")
    name = "B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
    assert resolve_weights(name, "B/8") == f"{base}/augreg/{name}.npz"
    with pytest.raises(ValueError, match=r"No 'imagenet21k' weights were released for Ti/16"):
        resolve_weights("imagenet21k", "Ti/16")
    assert resolve_weights("imagenet", "B/16") == (f"{base}/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-"
        "do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz")
    assert resolve_weights("imagenet", "H/14") == f"{base}/imagenet21k+imagenet2012/ViT-H_14.npz"
    with pytest.raises(ValueError, match="Unknown weights 'imagenet1k'"):
        resolve_weights("imagenet1k", "B/16")


@pytest.mark.one_backend
def test_named_weights_are_fetched_once_into_the_keras_cache(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror" / "imagenet21k"
    mirror.mkdir(parents=True)
    # a Ti/16-shaped "release" written by keras-vit itself, 21 classes and pre-logits like the i21k files
    released = randomize(keras_vit.ViTTi16(classes=21, classifier_activation=None, representation_size=192))
    save_official_npz(released, mirror / "ViT-Ti_16.npz")
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", (tmp_path / "mirror").as_uri())
    monkeypatch.setitem(PRESETS, "Ti/16", dataclasses.replace(PRESETS["Ti/16"], weights=("imagenet21k",)))
    import keras

    (tmp_path / "keras_home").mkdir()
    monkeypatch.setattr(keras.src.backend.config, "keras_home", lambda: str(tmp_path / "keras_home"))
    model = keras_vit.ViTTi16(weights="imagenet21k", classes=10)
    cached = tmp_path / "keras_home" / "models" / "vit_models" / "imagenet21k" / "ViT-Ti_16.npz"
    assert cached.is_file()
    np.testing.assert_array_equal(to_numpy(model.get_layer("encoder_norm").gamma),
                                  to_numpy(released.get_layer("encoder_norm").gamma))
    assert np.all(to_numpy(model.get_layer("head").kernel) == 0)
    shutil.rmtree(tmp_path / "mirror")  # the second time needs no network
    again = keras_vit.ViTTi16(weights="imagenet21k", classes=10)
    np.testing.assert_array_equal(to_numpy(again.get_layer("encoder_norm").gamma),
                                  to_numpy(released.get_layer("encoder_norm").gamma))


@pytest.mark.one_backend
def test_b16_checkpoint_built_at_224_loads_into_a_384_model(tmp_path):
    source = randomize(keras_vit.ViTB16(classifier_activation=None))
    path = save_official_npz(source, tmp_path / "ViT-B_16.npz")
    pe = to_numpy(source.patch_encoder.position_embedding)
    del source
    model = keras_vit.ViTB16(weights=str(path), input_shape=(384, 384, 3), classes=10)
    loaded = to_numpy(model.patch_encoder.position_embedding)
    assert loaded.shape == (1, 577, 768)
    expected = keras_vit.resample_position_embeddings(pe, 24)
    np.testing.assert_array_equal(loaded, expected)
    assert np.all(to_numpy(model.get_layer("head").kernel) == 0)


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_keras_files_load_into_a_model_of_another_size(tmp_path, suffix):
    small = randomize(tiny_vit())
    path = str(tmp_path / f"m{suffix}")
    small.save(path) if suffix == ".keras" else small.save_weights(path)
    big = tiny_vit(image_size=48)
    with pytest.raises(ValueError):  # what Keras alone does
        big.load_weights(path) if suffix == ".weights.h5" else big.set_weights(small.get_weights())
    report = load_weights(big, path)
    assert report["resampled"] == ["position embeddings 4x4 -> 6x6 (official)"]
    np.testing.assert_array_equal(to_numpy(big.get_layer("head").kernel), to_numpy(small.get_layer("head").kernel))
    via_constructor = tiny_vit(image_size=48, weights=path)
    np.testing.assert_array_equal(to_numpy(via_constructor.patch_encoder.position_embedding),
                                  to_numpy(big.patch_encoder.position_embedding))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "keras_vit.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


@pytest.mark.slow  # CI time (34 s of CLI processes; conversion in CI: test_save_and_load_both_key_layouts)
@pytest.mark.one_backend
def test_convert_cli_writes_a_ready_to_fine_tune_model_atomically(tmp_path):
    import keras

    source = randomize(keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=21, classifier_activation=None))
    ckpt = save_official_npz(source, tmp_path / "ti.npz")
    out = tmp_path / "model.keras"
    result = _cli("convert", str(ckpt), "--variant", "Ti/16", "--image-size", "64", "--classes", "10",
                  "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resampled: position embeddings 2x2 -> 4x4 (official)" in result.stderr
    model = keras.models.load_model(out)
    assert model.input_shape == (None, 64, 64, 3) and model.output_shape == (None, 10)
    assert np.all(to_numpy(model.get_layer("head").kernel) == 0)
    np.testing.assert_array_equal(model.get_layer("encoderblock_5").get_weights()[0],
                                  source.get_layer("encoderblock_5").get_weights()[0])
    # an existing file is kept unless --overwrite
    stamp = out.stat().st_mtime_ns
    result = _cli("convert", str(ckpt), "--variant", "Ti/16", "--classes", "10", "--out", str(out))
    assert result.returncode == 1 and "exists" in result.stderr and out.stat().st_mtime_ns == stamp
    # a failed run leaves nothing behind
    failed = tmp_path / "failed.keras"
    result = _cli("convert", str(ckpt), "--variant", "S/16", "--out", str(failed))
    assert result.returncode == 1 and "does not fit" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.keras", "ti.npz"]


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("suffix", [".npz", ".keras", ".weights.h5"])
def test_rgb_weights_into_a_model_of_other_channels_are_refused_naming_both_counts(tmp_path, suffix):
    rgb = randomize(tiny_vit())
    path = str(tmp_path / f"rgb{suffix}")
    {".npz": lambda: save_official_npz(rgb, path), ".keras": lambda: rgb.save(path),
     ".weights.h5": lambda: rgb.save_weights(path)}[suffix]()
    gray = tiny_vit(channels=1)
    before = [w.copy() for w in gray.get_weights()]
    with pytest.raises(ValueError, match=r"holds weights for 3-channel images \(RGB\), but the model "
                                         r"'vision_transformer(_\d+)?' takes 1 channel\(s\)"):
        load_weights(gray, path)
    assert all(np.array_equal(a, b) for a, b in zip(before, gray.get_weights()))
    # the other way round: a 4-channel model's weights into an RGB one
    rgba = randomize(tiny_vit(channels=4))
    rgba_path = str(tmp_path / f"rgba{suffix}")
    {".npz": lambda: save_official_npz(rgba, rgba_path), ".keras": lambda: rgba.save(rgba_path),
     ".weights.h5": lambda: rgba.save_weights(rgba_path)}[suffix]()
    with pytest.raises(ValueError, match=r"weights for 4-channel images, but the model .* takes 3 channel"):
        load_weights(tiny_vit(), rgba_path)
    # and a 4-channel model takes 4-channel weights
    target = tiny_vit(channels=4)
    load_weights(target, rgba_path)
    np.testing.assert_array_equal(to_numpy(target.patch_encoder.projection.kernel),
                                  to_numpy(rgba.patch_encoder.projection.kernel))


def test_hybrid_root_conv_channels_are_checked(tmp_path):
    rgb = randomize(tiny_vit(patch_size=1, resnet=dict(num_layers=(1,))))
    path = save_official_npz(rgb, tmp_path / "hybrid.npz")
    with pytest.raises(ValueError, match=r"3-channel images \(RGB\), but the model .* takes 2 channel"):
        load_official_npz(tiny_vit(patch_size=1, resnet=dict(num_layers=(1,)), channels=2), path)
    rgb.save_weights(tmp_path / "hybrid.weights.h5")
    with pytest.raises(ValueError, match=r"3-channel images \(RGB\), but the model .* takes 2 channel"):
        load_weights(tiny_vit(patch_size=1, resnet=dict(num_layers=(1,)), channels=2),
                     str(tmp_path / "hybrid.weights.h5"))


# --- wrong turns with weights=: each error says what to do instead (issue 35) ---------------------

def _pickle_payload(tmp_path):
    """Bytes that, unpickled, would create tmp_path/pwned: a loader that unpickles is caught by the file."""
    return f"cos\nsystem\n(S'touch {tmp_path / 'pwned'}'\ntR.".encode()


def test_weights_given_a_hub_folder_or_safetensors_point_to_from_pretrained():
    timm = DATA / "timm" / "timm_vit_token"
    with pytest.raises(ValueError, match=r"is a timm / transformers hub folder; weights= takes a file .* "
                                         r"keras_vit\.from_pretrained\(path\) builds the model from its config\.json"):
        tiny_vit(weights=str(timm))
    with pytest.raises(ValueError, match=r"model\.safetensors' is a safetensors checkpoint .*keras_vit\.from_pretrained"):
        tiny_vit(weights=str(timm / "model.safetensors"))


def test_a_pytorch_pickle_as_weights_is_named_and_never_unpickled(tmp_path):
    import zipfile

    pth = tmp_path / "model.pth"
    pth.write_bytes(b"\x80\x02" + _pickle_payload(tmp_path))
    with pytest.raises(ValueError, match=r"model\.pth is a PyTorch pickle; keras-vit never unpickles.*safetensors"):
        tiny_vit(weights=str(pth))
    # torch.save's zip layout under an .npz name: told by its archive/data.pkl, still unread
    disguised = tmp_path / "model.npz"
    with zipfile.ZipFile(disguised, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + _pickle_payload(tmp_path))
        z.writestr("archive/data/0", b"\0" * 16)
    model, before = _fresh()
    with pytest.raises(ValueError, match=r"model\.npz is a PyTorch pickle; keras-vit never unpickles"):
        load_official_npz(model, disguised)
    _assert_unchanged(model, before)
    assert not (tmp_path / "pwned").exists()


def test_a_missing_official_checkpoint_names_its_release_url(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_VIT_WEIGHTS_URL", raising=False)
    url = "https://storage.googleapis.com/vit_models"
    with pytest.raises(FileNotFoundError, match=rf"No checkpoint at ViT-B_16\.npz\. The official ViT-B_16\.npz is "
                                                rf"released at {url}/imagenet21k/ViT-B_16\.npz and "
                                                rf"{url}/imagenet21k\+imagenet2012/ViT-B_16\.npz: download it"):
        tiny_vit(weights="ViT-B_16.npz")
    with pytest.raises(FileNotFoundError, match=rf"{url}/imagenet21k/ViT-L_32\.npz"):
        load_official_npz(tiny_vit(), tmp_path / "ViT-L_32.npz")
    # a name the release does not have: where the release is
    with pytest.raises(FileNotFoundError, match=rf"No checkpoint at .*mine\.npz\. The official checkpoints are released "
                                                rf"under {url} \(e\.g\. {url}/imagenet21k/ViT-B_16\.npz"):
        load_official_npz(tiny_vit(), tmp_path / "mine.npz")


def test_a_head_not_loaded_is_logged_as_such(tmp_path, caplog):
    import logging

    path = save_official_npz(randomize(tiny_vit()), tmp_path / "tiny.npz")
    caplog.set_level(logging.INFO, logger="keras_vit")
    load_official_npz(tiny_vit(classes=3), path)
    (line,) = [r.getMessage() for r in caplog.records if "tiny.npz" in r.getMessage()]
    assert "; not loaded (the model keeps its own): head/kernel (model (32, 3), checkpoint (32, 7))" in line, line
    assert "kept" not in line
