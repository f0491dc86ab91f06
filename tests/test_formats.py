"""keras_vit/formats/: every format loads through the one plan-then-assign pass (a wrong shape in the
last key the model meets leaves every weight unchanged, the error naming the file, the key and both
shapes), and an official .npz is opened once per load."""

import io
import json
import shutil
import zipfile

import numpy as np
import pytest
from conftest import DATA, randomize

import keras_vit
from keras_vit import checkpoints, pretrained
from keras_vit.formats import official, timm, transformers

st = pytest.importorskip("safetensors.numpy", reason="the hub formats need safetensors (the `hub` extra)")

OFFICIAL = sorted((DATA / "official").glob("*[!o].npz"))  # the checkpoints, not their .io.npz
HUB = [DATA / "timm" / "timm_vit_token", DATA / "timm" / "timm_deit_distilled",
       DATA / "transformers" / "hf_vit_classifier"] + sorted(
    p for p in (DATA / "zoo").iterdir() if (p / "config.json").is_file() and (p / "model.safetensors").is_file())
PREFIXES = ("", "vit.", "deit.", "beit.", "vision_model.")


def _last_key(model, key_of):
    """The source key of the last variable of the model (heads aside: another head's shape is kept, not refused)."""
    for variable in reversed(model.weights):
        if not variable.path.startswith(("head/", "head_dist/")):
            return key_of(variable.path)
    raise AssertionError("a model without variables")


def _wider(array):
    """The array with one more row: a shape no variable of the model has."""
    return np.concatenate([array, array[:1]], axis=0)


def _assert_refused_and_unchanged(model, load, words):
    randomize(model, seed=3)
    before = model.get_weights()
    with pytest.raises(ValueError) as error:
        load()
    for word in words + ["shape mismatches", "expected", "found", "The model was left unchanged"]:
        assert word in str(error.value), (word, str(error.value))
    assert all(np.array_equal(w, b) for w, b in zip(model.get_weights(), before))


@pytest.mark.parametrize("path", OFFICIAL, ids=lambda p: p.stem)
def test_official_wrong_shape_in_the_last_key_changes_nothing(path, tmp_path):
    model = keras_vit.from_pretrained(path)
    with np.load(path, allow_pickle=False) as npz:
        arrays = dict(npz)
    key = _last_key(model, lambda p: official.official_key(p, official.detect_layout(arrays)))
    found = _wider(arrays[key]).shape
    arrays[key] = _wider(arrays[key])
    bad = tmp_path / path.name
    np.savez(bad, **arrays)
    _assert_refused_and_unchanged(model, lambda: checkpoints.load_official_npz(model, bad),
                                  [str(bad), f"{key}: expected", str(found)])


@pytest.mark.parametrize("folder", HUB, ids=lambda p: p.name)
def test_hub_wrong_shape_in_the_last_key_changes_nothing(folder, tmp_path):
    model = keras_vit.from_pretrained(folder)
    arrays = st.load_file(str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    if timm.claims(config):
        table = timm.TimmTable(model)
    else:
        table = transformers.TransformersTable(model, transformers.naming(transformers.strip_prefix(arrays)))
    key = _last_key(model, lambda p: table.key(p)[0])
    stored = next(prefix + key for prefix in PREFIXES if prefix + key in arrays)
    arrays[stored] = _wider(arrays[stored])
    bad = tmp_path / folder.name
    shutil.copytree(folder, bad)
    st.save_file(arrays, str(bad / "model.safetensors"))
    _assert_refused_and_unchanged(model, lambda: keras_vit.load_pretrained(model, bad),
                                  [str(bad / "model.safetensors"), f"{key}: expected",
                                   str(tuple(arrays[stored].shape))])


class _Opens:
    """Counts the opens of one file through io.open (zipfile's, np.load's and open()'s way in)."""

    def __init__(self, monkeypatch, path):
        self.path, self.count, real = str(path), 0, io.open

        def counting(file, *args, **kwargs):
            if str(file) == self.path:
                self.count += 1
            return real(file, *args, **kwargs)

        monkeypatch.setattr(io, "open", counting)
        monkeypatch.setattr(np, "load", self._refuse)

    @staticmethod
    def _refuse(*args, **kwargs):
        raise AssertionError("np.load opens the file again: read it through the open formats.official.NpzArchive")


@pytest.mark.parametrize("how", ["load_official_npz", "from_pretrained", "load_pretrained", "convert",
                                 "convert --variant", "weights="])
def test_an_official_npz_is_opened_once(how, tmp_path, monkeypatch):
    path = DATA / "official" / "vit_token_prelogits.npz"
    model = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4,
                                        mlp_dim=64, representation_size=24, classes=7)
    zips = []
    real_zip = zipfile.ZipFile

    class CountingZip(real_zip):
        def __init__(self, file, *args, **kwargs):
            zips.append(str(file))
            super().__init__(file, *args, **kwargs)

    opens = _Opens(monkeypatch, path)
    monkeypatch.setattr(zipfile, "ZipFile", CountingZip)
    if how == "load_official_npz":
        report = checkpoints.load_official_npz(model, path)
    elif how == "from_pretrained":
        report = {"loaded": keras_vit.from_pretrained(path).weights}
    elif how == "load_pretrained":
        report = keras_vit.load_pretrained(model, path)
    elif how == "weights=":
        report = checkpoints.load_weights(model, path)
    else:
        variant = {"variant": "Ti/16", "image_size": 32} if how == "convert --variant" else {}
        if variant:  # the released sizes: a checkpoint of Ti/16's shapes, written before counting
            monkeypatch.undo()
            path = tmp_path / "ti16.npz"
            checkpoints.save_official_npz(keras_vit.create_model("Ti/16", image_size=32, classes=7), path)
            opens = _Opens(monkeypatch, path)
            monkeypatch.setattr(zipfile, "ZipFile", CountingZip)
            zips.clear()
        pretrained.convert(path, tmp_path / "out.keras", **variant)
        report = {"loaded": [1]}
    assert report["loaded"]
    assert opens.count == 1, f"{path} opened {opens.count} times"
    assert zips.count(str(path)) == 1
