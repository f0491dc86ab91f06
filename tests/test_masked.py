"""Masked patch prediction (keras_vit.masked): the corruption, the colour targets, the pre-training."""

import glob
import os

import keras
import numpy as np
import pytest
from conftest import ROOT, tiny_cifar_folder, tiny_vit

from keras_vit import masked, training


def test_corruption_proportions_over_many_draws():
    batch, n = 4000, 64
    kind, source = masked.corruption_plan(batch, n, seed=keras.random.SeedGenerator(1))
    kind, source = np.asarray(kind), np.asarray(source)
    # exactly half of every image's patches
    assert (np.sum(kind != masked.UNTOUCHED, axis=1) == n // 2).all()
    chosen = kind[kind != masked.UNTOUCHED]
    fractions = [np.mean(chosen == k) for k in (masked.MASKED, masked.RANDOM, masked.KEPT)]
    # 128,000 corrupted patches: one standard deviation of 0.8 is 0.0011, of 0.1 is 0.0008
    np.testing.assert_allclose(fractions, [0.8, 0.1, 0.1], atol=0.005)
    # the chosen patches spread evenly over the positions (no position favoured)
    per_position = np.mean(kind != masked.UNTOUCHED, axis=0)
    assert per_position.min() > 0.45 and per_position.max() < 0.55
    # a random replacement is another patch, from anywhere in the batch, never the patch itself
    own = np.arange(batch * n).reshape(batch, n)
    assert (source != own).all() and source.min() >= 0 and source.max() < batch * n
    assert np.mean(source // n != own // n) > 0.99
    other = masked.corruption_plan(batch, n, seed=keras.random.SeedGenerator(2))[0]
    assert (np.asarray(other) != kind).any()  # the seed changes the draw


def test_other_fractions_and_bad_ones():
    kind = np.asarray(masked.corruption_plan(500, 16, seed=3, corrupt=0.25, mask=1.0, random=0.0)[0])
    assert (np.sum(kind != 0, axis=1) == 4).all() and set(np.unique(kind)) == {0, masked.MASKED}
    for bad, message in ((dict(corrupt=0.0), "corrupts no patch"), (dict(mask=0.95, random=0.1), "at most 1"),
                         (dict(corrupt=1.5), "corrupt must be a fraction")):
        with pytest.raises(ValueError, match=message):
            masked.MaskedPatchPretrainer(tiny_vit(), **bad)
    with pytest.raises(ValueError, match="is a hybrid"):
        masked.MaskedPatchPretrainer(tiny_vit(resnet=dict(num_layers=(), root="small"), patch_size=2))


def _reference_targets(images01, patch, bits=3):
    """Each patch's mean colour in [0, 1], cut into 2^bits bins per channel, one class per (r, g, b)."""
    b, h, w, _ = images01.shape
    levels = 2 ** bits
    out = np.zeros((b, (h // patch) * (w // patch)), np.int64)
    for i in range(b):
        for r in range(h // patch):
            for c in range(w // patch):
                mean = images01[i, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch].reshape(-1, 3).mean(0)
                q = np.minimum(np.floor(mean * levels), levels - 1).astype(int)
                out[i, r * (w // patch) + c] = q[0] * levels * levels + q[1] * levels + q[2]
    return out


def _sample_images():
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "cifar10", "*.jpg")))
    assert len(files) == 10
    pixels = np.stack([tf.io.decode_jpeg(tf.io.read_file(f)).numpy() for f in files])
    return pixels.astype(np.float64) / 255.0


def test_colour_targets_equal_a_numpy_reference_on_fixed_images():
    images01 = _sample_images()  # the ten bundled CIFAR-10 test images, 32x32
    x = (images01 / 0.5 - 1.0).astype("float32")  # the model's [-1, 1] inputs
    for patch in (4, 8):
        got = np.asarray(masked.colour_targets(keras.ops.convert_to_tensor(x), (patch, patch)))
        want = _reference_targets(images01, patch)
        np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 20  # real images, many colours: the test can fail
    # corners of the colour cube, and another normalization (ImageNet's mean/std)
    corners = np.zeros((3, 8, 8, 3))
    corners[0] = 1.0
    corners[1, ..., 0] = 1.0
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    got = masked.colour_targets(keras.ops.convert_to_tensor(((corners - mean) / std).astype("float32")), (4, 4),
                                pixel_mean=mean, pixel_std=std)
    np.testing.assert_array_equal(np.asarray(got), [[511] * 4, [448] * 4, [0] * 4])
    np.testing.assert_array_equal(masked.colour_targets(keras.ops.ones((1, 4, 4, 3)) * 0.0, (4, 4), bits=1), [[7]])


def test_corrupted_embeddings_are_the_mask_another_patch_or_themselves():
    trainer = masked.MaskedPatchPretrainer(tiny_vit(), seed=5)
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(8, 16, 32)).astype("float32"))
    out, kind = trainer.corrupt_embeddings(x)
    out, kind, x = np.asarray(out), np.asarray(kind), np.asarray(x)
    mask = np.asarray(trainer.mask_token)[0, 0]
    np.testing.assert_array_equal(out[kind == masked.MASKED], np.broadcast_to(mask, out[kind == masked.MASKED].shape))
    for k in (masked.UNTOUCHED, masked.KEPT):
        np.testing.assert_array_equal(out[kind == k], x[kind == k])
    flat = x.reshape(-1, 32)
    for row in out[kind == masked.RANDOM]:  # each is some other patch's embedding, exactly
        assert (np.abs(flat - row).max(axis=1) == 0).any()
    assert (kind == masked.RANDOM).any() and not np.allclose(out[kind == masked.RANDOM], x[kind == masked.RANDOM])


def _colour_fields(n, seed=0):
    """Smooth random colour images in [-1, 1]: a patch's colour follows from its neighbours'."""
    rng = np.random.default_rng(seed)
    corners = rng.uniform(-1, 1, (n, 2, 2, 3)).astype("float32")
    return np.asarray(keras.ops.image.resize(corners, (32, 32), interpolation="bilinear"))


def test_pretraining_loss_falls_on_a_tiny_run():
    keras.utils.set_random_seed(0)
    encoder = tiny_vit(patch_size=4, num_layers=2)
    trainer = masked.MaskedPatchPretrainer(encoder, seed=0)
    trainer.compile(optimizer=keras.optimizers.Adam(2e-3))
    images = _colour_fields(256)
    history = trainer.fit(images, np.zeros(256), batch_size=32, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert losses[0] > 6.0  # ln(512) = 6.24: no colour known at the start
    assert losses[-1] < losses[0] - 0.3, losses
    assert history.history["accuracy"][-1] > history.history["accuracy"][0]


@pytest.mark.slow  # CI time (19 s; masked pretraining in CI: test_pretraining_loss_falls_on_a_tiny_run)
def test_mpp_recipe_pretrains_and_the_classifier_recipe_fine_tunes_from_it(tmp_path):
    sample = tiny_cifar_folder(tmp_path / "data")
    tiny = ["model.patch_size=8", "model.hidden_size=32", "model.num_layers=2", "model.mlp_dim=64",
            "epochs=1", "steps_per_epoch=2", "batch_size=8", "validation_split=0", "precision=float32",
            f"data={sample}"]
    config = training.apply_overrides(training.load_recipe(ROOT / "recipes" / "cifar10_mpp.py"), tiny)
    assert config["objective"] == "mpp" and config["mpp"] == dict(corrupt=0.5, mask=0.8, random=0.1, bits=3)
    metrics = training.train(config, tmp_path / "mpp", verbose=0)
    assert metrics["objective"] == "mpp" and 0.0 <= metrics["test_accuracy"] <= 1.0
    encoder = keras.models.load_model(tmp_path / "mpp" / "model.keras")
    assert type(encoder).__name__ == "VisionTransformer"
    fine = training.apply_overrides(training.load_recipe(ROOT / "recipes" / "cifar10.py"),
                                    tiny + [f"init={tmp_path / 'mpp' / 'model.keras'}", "randaugment=None"])
    assert fine["init_checkpoint"] == str(tmp_path / "mpp" / "model.keras")
    model = training.build_model(fine, encoder.class_names)
    for a, b in zip(model.get_weights(), encoder.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert training.train(fine, tmp_path / "fine", verbose=0)["objective"] == "classify"
    with pytest.raises(ValueError, match="takes no teacher"):
        training.wrap_for_training(model, training.apply_overrides(config, ["teacher=t.keras"]), 1)
