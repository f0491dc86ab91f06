"""Few-shot linear evaluation: the closed-form solver, a case with a known answer, the errors,
and the command on the shipped digits model."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT

from keras_vit.data import Split, from_arrays
from keras_vit.fewshot import BIAS, LeastSquaresProbe, choose_l2, fewshot_evaluate, format_table


def _direct_ridge(features, labels, num_classes, l2):
    """The textbook solution, (X^T X + l2 I)^-1 X^T Y on the standardized, bias-padded design."""
    x = np.asarray(features, np.float64)
    x = (x - x.mean(0)) / (x.std(0) + 1e-5)
    x = np.concatenate([x, np.full((len(x), 1), BIAS)], 1)
    y = 2.0 * np.eye(num_classes)[labels] - 1.0
    return np.linalg.solve(x.T @ x + l2 * np.eye(x.shape[1]), x.T @ y)


@pytest.mark.parametrize("n, d", [(40, 8), (12, 30)])  # more examples than features, and fewer
def test_solver_equals_the_direct_numpy_solution(n, d):
    rng = np.random.default_rng(n)
    features = rng.normal(size=(n, d))
    labels = rng.integers(0, 4, n)
    probe = LeastSquaresProbe(features, labels, 4)
    for l2 in (1e-3, 1.0, 1e3):
        np.testing.assert_allclose(probe.weights(l2), _direct_ridge(features, labels, 4, l2), rtol=1e-6, atol=1e-9)
    test = rng.normal(size=(5, d))
    x = (test - features.mean(0)) / (features.std(0) + 1e-5)
    expected = np.concatenate([x, np.full((5, 1), BIAS)], 1) @ _direct_ridge(features, labels, 4, 1.0)
    np.testing.assert_allclose(probe.decision(test, 1.0), expected, rtol=1e-6, atol=1e-9)


def test_choose_l2_takes_the_best_on_held_out_and_the_largest_of_equals():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 6)) * 4
    labels = np.repeat(np.arange(3), 5)
    probe = LeastSquaresProbe(centers[labels] + rng.normal(size=(15, 6)), labels, 3)
    held_labels = np.repeat(np.arange(3), 4)
    held = centers[held_labels] + rng.normal(size=(12, 6))
    l2, accuracy = choose_l2(probe, held, held_labels, (0.01, 1.0, 100.0))
    scores = {v: probe.accuracy(held, held_labels, v) for v in (0.01, 1.0, 100.0)}
    assert accuracy == max(scores.values())
    assert l2 == max(v for v, s in scores.items() if s == accuracy)


def _colour_feature_model(image_size=8):
    """A frozen 'representation' that is each image's mean colour: separable for solid-colour classes."""
    import keras

    images = keras.Input((image_size, image_size, 3))
    return keras.Model(images, keras.layers.GlobalAveragePooling2D()(images))


def _colour_split(per_class, seed, origin, noise=20):
    rng = np.random.default_rng(seed)
    colours = np.array([[200, 30, 30], [30, 200, 30], [30, 30, 200], [200, 200, 30]])
    labels = np.repeat(np.arange(4), per_class)
    images = colours[labels][:, None, None, :] + rng.normal(0, noise, (len(labels), 8, 8, 3))
    return from_arrays(np.clip(images, 0, 255), labels, ["red", "green", "blue", "yellow"], origin=origin)


def test_separable_features_give_full_accuracy_from_one_shot():
    data = {"train": _colour_split(30, 0, "colours [train]"), "test": _colour_split(25, 1, "colours [test]")}
    result = fewshot_evaluate(_colour_feature_model(), data, shots=(1, 5), seeds=3, holdout=5)
    for n in ("1", "5"):
        assert result["shots"][n]["accuracies"] == [1.0, 1.0, 1.0]
    assert result["test_images"] == 100 and result["num_classes"] == 4 and result["feature_dim"] == 3
    table = format_table(result)
    assert "| 1 | 100.00% |" in table and "| 5 | 100.00% |" in table


def test_features_that_carry_no_label_give_chance():
    """The same pipeline on images whose colour says nothing of their label: no better than guessing."""
    train, test = _colour_split(30, 0, "train"), _colour_split(100, 1, "test")
    shuffle = np.random.default_rng(2).permutation
    data = {"train": Split(train.images, shuffle(train.labels), train.class_names, "shuffled labels"),
            "test": Split(test.images, shuffle(test.labels), test.class_names, "shuffled labels")}
    result = fewshot_evaluate(_colour_feature_model(), data, shots=(5,), seeds=3, holdout=5)
    assert result["shots"]["5"]["mean"] < 0.4  # chance is 0.25; the separable case above gives 1.0


def test_a_streamed_split_draws_from_the_stream():
    import tensorflow as tf

    train = _colour_split(30, 0, "stream")
    stream = tf.data.Dataset.from_tensor_slices((train.images, train.labels))
    data = {"train": Split(None, None, train.class_names, "streamed colours", stream=stream, num_examples=120),
            "test": _colour_split(10, 1, "colours [test]")}
    result = fewshot_evaluate(_colour_feature_model(), data, shots=(2,), seeds=2, holdout=3)
    assert result["shots"]["2"]["accuracies"] == [1.0, 1.0]


def test_more_shots_than_a_class_holds_is_refused_naming_the_class():
    train = _colour_split(30, 0, "colours [train]")
    keep = np.flatnonzero((train.labels != 2) | (np.arange(len(train.labels)) % 30 < 8))  # 'blue' keeps 8
    data = {"train": Split(train.images[keep], train.labels[keep], train.class_names, "colours [train]"),
            "test": _colour_split(5, 1, "test")}
    with pytest.raises(ValueError, match=r"class 'blue' has 8 training images, fewer than 5 shots \+ 5 held out"):
        fewshot_evaluate(_colour_feature_model(), data, shots=(1, 5), holdout=5)
    with pytest.raises(ValueError, match="shots must be positive"):
        fewshot_evaluate(_colour_feature_model(), data, shots=(0, 5))


def test_fewshot_command_on_the_shipped_digits_model(tmp_path):
    pytest.importorskip("sklearn", reason="the digits data needs scikit-learn (pip install keras-vit[digits])")
    out = tmp_path / "fewshot.json"
    run = subprocess.run(
        [sys.executable, "-m", "keras_vit.cli", "fewshot", str(ROOT / "saved_models/vit_digits/model.keras"),
         "--data", "digits", "--shots", "1", "10", "--seeds", "2", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| shots per class | accuracy (mean) |" in run.stdout and "| 10 |" in run.stdout
    result = json.loads(out.read_text())
    assert result["test_images"] == 359 and result["feature_dim"] == 64 and result["seeds"] == 2
    # a representation trained on digits: 10 images per class give a probe near the model's own 96.4%
    assert result["shots"]["10"]["mean"] > 0.9, result["shots"]
    assert len(result["shots"]["1"]["accuracies"]) == 2


def test_fewshot_command_error_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "keras_vit.cli", "fewshot", str(tmp_path / "missing.keras"), "--data", "digits"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300,
    )
    assert run.returncode != 0
    assert "missing.keras does not exist" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.backends
def test_fewshot_of_a_vision_transformer_under_every_backend():
    """The model's own features under its backend (torch: features that carry gradients)."""
    from conftest import randomize, tiny_vit

    data = {"train": _colour_split(6, 0, "colours [train]"), "test": _colour_split(5, 1, "colours [test]")}
    model = randomize(tiny_vit(image_size=8, patch_size=4, classes=4))
    result = fewshot_evaluate(model, data, shots=(1, 2), seeds=2, holdout=2)
    assert result["feature_dim"] == 32 and result["test_images"] == 20
    assert all(0.0 <= a <= 1.0 for r in result["shots"].values() for a in r["accuracies"])


def test_fewshot_offline_names_its_own_data_option(monkeypatch, capsys):
    """Offline, a tfds name that is not prepared: the error says how fewshot takes a folder instead."""
    tfds = pytest.importorskip("tensorflow_datasets", reason="tfds:NAME needs tensorflow-datasets")
    from keras_vit import data
    from keras_vit.cli import main

    if tfds.builder("cifar10").is_prepared():
        pytest.skip("cifar10 is prepared for tfds here: nothing to download")
    monkeypatch.setattr(data, "TFDS_HOST", ("127.0.0.1", 9))  # as offline: nothing answers
    assert main(["fewshot", str(ROOT / "saved_models/vit_digits/model.keras"), "--data", "cifar10"]) == 1
    err = capsys.readouterr().err
    assert "tfds:cifar10 is not prepared" in err and "--data FOLDER" in err and "--set data" not in err, err
