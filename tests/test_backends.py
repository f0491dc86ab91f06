"""The same model on every Keras backend: files written under one backend load under the others.

These tests start their own processes, one per backend (KERAS_BACKEND is fixed at `import keras`),
and run in the main (tensorflow) suite; the per-backend runs of the portable tests are
`KERAS_BACKEND=jax python -m pytest` and `KERAS_BACKEND=torch python -m pytest` (see conftest.py).
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

OTHER_BACKENDS = [b for b in ("jax", "torch") if importlib.util.find_spec(b)]
needs_backends = pytest.mark.skipif(
    len(OTHER_BACKENDS) < 2, reason="jax and torch are not installed (pip install -e '.[jax,torch]')")


def run_under(backend, code, **env):
    """Runs Python `code` in a fresh process under KERAS_BACKEND=`backend`; returns its last stdout line as JSON."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env=dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", **env))
    assert result.returncode == 0, f"under {backend}:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# Three kinds of model: class token, a hybrid (ResNet stem: StdConv, GroupNorm) with pre-logits,
# and global pooling at any image size (position embeddings resampled in the graph).
_MODELS = """
import json, sys, numpy as np, keras, keras_vit
sys.path.insert(0, "tests")
from conftest import randomize, tiny_vit
models = {
    "token": tiny_vit(),
    "hybrid": tiny_vit(patch_size=1, resnet=dict(num_layers=(1,), width_factor=1), representation_size=8),
    "dynamic": tiny_vit(classifier="gap", dynamic_image_size=True, posemb_resample="bicubic"),
}
images = {"token": (2, 32, 32, 3), "hybrid": (2, 32, 32, 3), "dynamic": (2, 48, 40, 3)}
images = {k: np.random.default_rng(1).normal(size=s).astype("float32") for k, s in images.items()}
"""

_WRITE = _MODELS + """
out = {}
for i, (name, model) in enumerate(models.items()):
    randomize(model, seed=i)
    model.save(f"{DIR}/{keras.backend.backend()}-{name}.keras")
    out[name] = keras.ops.convert_to_numpy(model(images[name])).tolist()
print(json.dumps(out))
"""

_READ = _MODELS + """
out = {}
for name in models:
    model = keras.models.load_model(f"{DIR}/{WRITER}-{name}.keras")
    assert type(model) is keras_vit.VisionTransformer, type(model)
    out[name] = keras.ops.convert_to_numpy(model(images[name])).tolist()
print(json.dumps(out))
"""


@needs_backends
@pytest.mark.parametrize("writer, readers", [("jax", ("torch", "tensorflow")), ("torch", ("jax",))])
def test_keras_files_move_between_backends_with_the_same_outputs(tmp_path, writer, readers):
    written = run_under(writer, f"DIR = {str(tmp_path)!r}\n" + _WRITE)
    for reader in readers:
        read = run_under(reader, f"DIR, WRITER = {str(tmp_path)!r}, {writer!r}\n" + _READ)
        for name, logits in written.items():
            diff = np.abs(np.asarray(read[name]) - np.asarray(logits)).max()
            assert diff <= 1e-5, f"{name}: written under {writer}, read under {reader}: max |diff| {diff}"
            assert np.abs(logits).max() > 0.1, name  # random weights, not an all-zero head
