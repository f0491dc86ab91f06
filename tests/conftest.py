import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared"
BACKEND = os.environ["KERAS_BACKEND"]


def pytest_report_header(config):
    if BACKEND != "tensorflow":
        return (f"KERAS_BACKEND={BACKEND}: only the tests marked `backends` (and not `one_backend`) run; the rest "
                "drive TensorFlow itself (tf.data, tf.distribute, SavedModel/TFLite export) or check what no backend "
                "changes, and run under the tensorflow backend")
    return None


@pytest.hookimpl(tryfirst=True)  # before -m selects: a `backends_slow` test is `slow` under jax and torch
def pytest_collection_modifyitems(config, items):
    """Under jax or torch, keep the portable tests (marked `backends`, not `one_backend`); deselect the rest. The
    portable ones marked `backends_slow` are `slow` there: CI runs them under TensorFlow, `-m slow` under all."""
    if BACKEND == "tensorflow":
        return
    def portable(item):
        return item.get_closest_marker("backends") and not item.get_closest_marker("one_backend")

    for item in items:
        if item.get_closest_marker("backends_slow"):
            item.add_marker(pytest.mark.slow)
    kept = [item for item in items if portable(item)]
    dropped = [item for item in items if not portable(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


tensorflow_only = pytest.mark.skipif(BACKEND != "tensorflow", reason=f"TensorFlow-only (KERAS_BACKEND={BACKEND})")


def gradients(loss_fn, variables):
    """d loss_fn() / d variables as NumPy arrays, with the current backend's own autodiff.

    `variables` are Keras variables; `loss_fn` reads them (a layer call or an op on them).
    """
    import keras
    from keras.ops import convert_to_numpy

    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn()
        return [convert_to_numpy(g) for g in tape.gradient(loss, [v.value for v in variables])]
    if BACKEND == "jax":
        import jax

        def stateless(values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return loss_fn()

        return [convert_to_numpy(g) for g in jax.grad(stateless)([v.value for v in variables])]
    if BACKEND == "torch":
        for v in variables:
            v.value.grad = None
        loss_fn().backward()
        return [convert_to_numpy(v.value.grad) for v in variables]
    raise ValueError(f"no gradient helper for KERAS_BACKEND={BACKEND!r}")


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32 and fresh layer names. Without clear_session's full garbage collection:
    it cost 0.3 s a test (1,400 tests: 7 minutes of CI), and Python's own collector frees the same cycles."""
    import keras

    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session(free_memory=False)
    yield
    keras.mixed_precision.set_global_policy("float32")


def tiny_vit(weights=None, **overrides):
    """A small ViT for fast tests: 32x32 images, 8x8 patches, 2 blocks of width 32; `weights` loaded as
    keras_vit.create_model loads them (the model class itself takes none)."""
    import keras_vit
    from keras_vit.checkpoints import load_weights

    config = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=7)
    config.update(overrides)
    model = keras_vit.VisionTransformer(**config)
    if weights is not None:
        load_weights(model, weights)
    return model


def randomize(model, seed=0):
    """Gives every weight (zero-initialized heads and class tokens too) random values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(scale=0.2, size=v.shape).astype(v.dtype))
    return model


def tiny_cifar_folder(root):
    """A data folder of the bundled CIFAR-10 images: train/<class>/ the 20 of tests/data/cifar10_sample,
    test/<class>/ the 10 of tests/data/cifar10; for runs of `keras-vit train` in seconds."""
    import shutil

    root = pathlib.Path(root)
    for path in sorted((ROOT / "tests" / "data" / "cifar10_sample").glob("*/*.jpg")):
        (root / "train" / path.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, root / "train" / path.parent.name / path.name)
    for path in sorted((ROOT / "tests" / "data" / "cifar10").glob("*.jpg")):
        (root / "test" / path.stem).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, root / "test" / path.stem / "0.jpg")
    return str(root)
