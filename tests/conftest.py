import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SHARED = ROOT.parent / "shared"


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32 and fresh layer names."""
    import keras

    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()
    yield
    keras.mixed_precision.set_global_policy("float32")


def tiny_vit(**overrides):
    """A small ViT for fast tests: 32x32 images, 8x8 patches, 2 blocks of width 32."""
    import keras_vit

    config = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=7)
    config.update(overrides)
    return keras_vit.VisionTransformer(**config)


def randomize(model, seed=0):
    """Gives every weight (zero-initialized heads and class tokens too) random values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(scale=0.2, size=v.shape).astype(v.dtype))
    return model
