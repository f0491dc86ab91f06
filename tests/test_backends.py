"""The same model on every Keras backend: files written under one backend load under the others.

These tests start their own processes, one per backend (KERAS_BACKEND is fixed at `import keras`),
and run in the main (tensorflow) suite; the per-backend runs of the portable tests are
`KERAS_BACKEND=jax python -m pytest` and `KERAS_BACKEND=torch python -m pytest` (see conftest.py).
"""

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

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
@pytest.mark.parametrize("writer, readers", [
    ("jax", ("torch", "tensorflow")),
    # CI time (44 s): CI moves jax's file to torch and TensorFlow; the torch writer's run is the full suite's
    pytest.param("torch", ("jax",), marks=pytest.mark.slow)])
def test_keras_files_move_between_backends_with_the_same_outputs(tmp_path, writer, readers):
    written = run_under(writer, f"DIR = {str(tmp_path)!r}\n" + _WRITE)
    for reader in readers:
        read = run_under(reader, f"DIR, WRITER = {str(tmp_path)!r}, {writer!r}\n" + _READ)
        for name, logits in written.items():
            diff = np.abs(np.asarray(read[name]) - np.asarray(logits)).max()
            assert diff <= 1e-5, f"{name}: written under {writer}, read under {reader}: max |diff| {diff}"
            assert np.abs(logits).max() > 0.1, name  # random weights, not an all-zero head


def _epochs_logged(path):
    if not path.exists():
        return []
    with open(path) as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _train_args(model_dir, *sets):
    return [sys.executable, "-m", "keras_vit.cli", "train", str(ROOT / "recipes" / "digits.py"), "--set", "batch_size=32",
            *[a for s in sets for a in ("--set", s)], "--model-dir", str(model_dir)]


@pytest.mark.slow  # CI time (55 s; in CI: test_dense_training's keras DataParallel, test_training's killed run)
@pytest.mark.skipif("jax" not in OTHER_BACKENDS, reason="jax is not installed (pip install -e '.[jax]')")
def test_jax_trains_data_parallel_over_two_cpu_devices_and_resumes_after_a_kill(tmp_path):
    args = _train_args(tmp_path, "epochs=6", "steps_per_epoch=30")
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    history = tmp_path / "history.csv"
    run = subprocess.Popen(args, cwd=ROOT, env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2"),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 400
    while len(_epochs_logged(history)) < 1 and run.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, "the first run finished before it could be killed"
    run.send_signal(signal.SIGKILL)
    out, _ = run.communicate()
    assert "DataParallel with 2 replica(s) on jax" in out
    done_before = len(_epochs_logged(history))
    assert 1 <= done_before < 6 and not (tmp_path / "metrics.json").exists()
    # the second run asks for the two devices with cpu_replicas instead of XLA_FLAGS
    result = subprocess.run(args + ["--set", "cpu_replicas=2"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from epoch" in result.stdout
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["backend"], metrics["strategy"], metrics["num_replicas"]) == ("jax", "DataParallel", 2)
    assert metrics["epochs_completed"] == 6 and metrics["resumed_at_epoch"] >= 1 and "jax" in metrics["versions"]
    epochs = _epochs_logged(history)
    assert epochs.count(0) == 1 and sorted(set(epochs)) == list(range(6)), epochs
    # the padded last test batch (359 = 11 x 32 + 7 images) counts its real images only
    correct = metrics["test_accuracy"] * metrics["test_examples"]
    assert metrics["test_examples"] % 2 and abs(correct - round(correct)) < 1e-3, metrics["test_accuracy"]


@pytest.mark.skipif("torch" not in OTHER_BACKENDS, reason="torch is not installed (pip install -e '.[torch]')")
def test_torch_trains_on_one_device_and_the_cli_exports_its_model_under_tensorflow(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="torch", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(_train_args(tmp_path / "run", "epochs=2", "steps_per_epoch=5"), cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SingleDevice with 1 replica(s) on torch" in result.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (metrics["backend"], metrics["strategy"], metrics["epochs_completed"]) == ("torch", "SingleDevice", 2)
    # the export needs TensorFlow's graphs: the CLI runs it under that backend, with the same parity checks
    out = tmp_path / "digits.tflite"
    result = subprocess.run([sys.executable, "-m", "keras_vit.cli", "export", str(tmp_path / "run" / "model.keras"),
                             "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "exporting under KERAS_BACKEND=tensorflow" in result.stderr
    metadata = json.loads(out.with_name(out.name + ".json").read_text())
    assert metadata["parity"]["max_abs_logit_diff"] <= 1e-4 and metadata["parity"]["top1_agreement"] == 1.0
    # in the Python API the same request names the backend it needs
    code = ("import keras_vit.export as e\ntry:\n    e.export_model('m.keras', 'm.tflite')\nexcept RuntimeError as x:\n"
            "    print(x)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "needs KERAS_BACKEND=tensorflow, not 'torch'" in result.stdout, result.stderr[-2000:]
