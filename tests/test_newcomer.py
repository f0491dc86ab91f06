"""The newcomer's path (issue 17): the Keras habits that must not fail silently, a fast and quiet
command line, one-line errors with the next step."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import ROOT


def _run(*code_or_args, env=None, timeout=120):
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), timeout=timeout)


# --- finding 1: the head convention -----------------------------------------------------------

def _three_colours(n=48, size=32, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    colours = np.array([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]], "float32")
    images = colours[labels][:, None, None, :] + rng.normal(scale=0.3, size=(n, size, size, 3))
    return images.astype("float32"), labels


def _entry_points():
    import keras_vit

    tiny = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    return {
        "VisionTransformer": lambda: keras_vit.VisionTransformer(image_size=32, classes=3, **tiny),
        "create_model": lambda: keras_vit.create_model("Ti/16", image_size=32, classes=3, **tiny),
        "ViTTi16": lambda: keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=3, **tiny),
    }


@pytest.mark.parametrize("entry", ["VisionTransformer", "create_model", "ViTTi16"])
@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "SparseCategoricalCrossentropy()"])
def test_every_entry_point_learns_with_the_loss_a_keras_user_writes(entry, loss):
    import keras

    model = _entry_points()[entry]()
    images, labels = _three_colours()
    loss_arg = keras.losses.SparseCategoricalCrossentropy() if loss.endswith("()") else loss
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss_arg, metrics=["accuracy"])
    switched = [w for w in caught if "from_logits=True" in str(w.message)]
    # logits models say that they switched; the softmax constructor needs nothing
    assert len(switched) == (0 if entry == "ViTTi16" else 1), [str(w.message) for w in caught]
    history = model.fit(images, labels, epochs=6, batch_size=16, verbose=0).history
    assert history["loss"][0] == pytest.approx(np.log(3), abs=0.15)
    assert history["loss"][-1] < 0.7 * history["loss"][0], history["loss"]


def test_from_logits_on_a_softmax_model_warns_and_is_left_alone():
    import keras

    model = _entry_points()["ViTTi16"]()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with pytest.warns(UserWarning, match=r"ends in an activation \(softmax\).*from_logits=True"):
        model.compile(optimizer="adam", loss=loss)
    assert model.loss is loss


def test_logits_model_with_a_logits_loss_compiles_silently():
    import keras

    model = _entry_points()["VisionTransformer"]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1))
    assert model.loss.get_config()["label_smoothing"] == 0.1
