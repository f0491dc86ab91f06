"""keras_vit.load_model: the one loader every command uses, for each kind of file and for hub names."""

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

import keras_vit
from keras_vit._files import is_hub_name
from keras_vit.checkpoints import load_keras_model
from keras_vit.loading import load_model

DATA = ROOT / "tests" / "data"
SHIPPED = ROOT / "saved_models" / "vit_cifar10" / "model.keras"


def _logits(model, images):
    return np.asarray(model.predict(images, verbose=0))


def test_a_keras_file_loads_as_load_keras_model_loads_it():
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    model = load_model(SHIPPED)
    assert isinstance(model, keras_vit.VisionTransformer)
    assert np.array_equal(_logits(model, images), _logits(load_keras_model(SHIPPED), images))


def test_an_official_npz_gives_the_official_logits():
    io = np.load(DATA / "official" / "vit_token_prelogits.io.npz")
    model = load_model(DATA / "official" / "vit_token_prelogits.npz")
    assert np.abs(_logits(model, io["images"]) - io["logits"]).max() < 1e-4


@pytest.mark.parametrize("folder", ["timm/timm_vit_token", "transformers/hf_vit_classifier", "zoo/timm_dinov2_reg4"])
def test_a_hub_folder_loads_as_from_pretrained_builds_it(folder):
    io = np.load(DATA / f"{folder}.io.npz")
    model = load_model(str(DATA / folder))
    reference = keras_vit.from_pretrained(DATA / folder)
    def config(m):
        return {k: v for k, v in m.get_config().items() if k != "name"}

    assert config(model) == config(reference)
    assert np.array_equal(_logits(model, io["images"]), _logits(reference, io["images"]))


@pytest.mark.parametrize("export", ["saved_models/vit_cifar10/exports/vit_cifar10.tflite"])
def test_an_export_is_refused_pointing_to_load_classifier(export):
    with pytest.raises(ValueError, match="load_classifier"):
        load_model(ROOT / export)


def test_a_missing_file_is_named():
    with pytest.raises(FileNotFoundError, match="nothere.keras"):
        load_model("nothere.keras")
    with pytest.raises(FileNotFoundError, match="nothere.npz"):
        load_model("nothere.npz")


def test_hub_names_are_told_from_missing_files():
    assert is_hub_name("facebook/dinov2-small") and is_hub_name("hf-hub:timm/vit_small_patch14_reg4_dinov2.lvd142m")
    assert not is_hub_name("runs/digits/model.keras") and not is_hub_name("nothere")
    assert not is_hub_name(str(DATA / "timm" / "timm_vit_token"))  # on disk: a folder, not a name


def test_a_hub_name_resolves_offline_through_the_cache():
    pytest.importorskip("huggingface_hub", reason="hub names need huggingface_hub (the `hub` extra)")
    script = ("import numpy as np, keras_vit\n"
              "io = np.load('tests/data/zoo/timm_dinov2_reg4.io.npz')\n"
              "model = keras_vit.load_model('timm/vit_small_patch14_reg4_dinov2.lvd142m')\n"
              "print(float(np.abs(model.forward_features(io['images']) - io['tokens']).max()))\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(DATA / "zoo" / "hub"), KERAS_BACKEND="tensorflow")
    env.pop("HF_HOME", None)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert float(run.stdout.split()[-1]) < 1e-4, run.stdout
