"""The `keras-vit` command line as a newcomer meets it (issue 35): a wrong path is reported at once, before
TensorFlow loads; help texts say what each command reads, each choice once; `predict` gives the same
answer under every Keras backend."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

DIGITS_MODEL = ROOT / "saved_models" / "vit_digits" / "model.keras"
IMAGES = [ROOT / "tests" / "data" / "cifar10" / name for name in ("cat.jpg", "ship.jpg")]
OTHER_BACKENDS = [b for b in ("jax", "torch") if importlib.util.find_spec(b)]


def _python(*args, env=None, timeout=300):
    environ = {k: v for k, v in os.environ.items() if k != "KERAS_VIT_WEIGHTS_URL"}  # the release's own URLs
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env=dict(environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))


# Each command with a path that is not there, and what its one line must say.
MISSING = {
    "predict model": (["predict", "saved_models/vit_digit/model.keras", str(IMAGES[0])],
                      "model saved_models/vit_digit/model.keras does not exist (did you mean "
                      "saved_models/vit_digits/model.keras?); predict runs a .keras file"),
    "predict image": (["predict", str(DIGITS_MODEL), "tests/data/cifar10/catt.jpg"],
                      "image tests/data/cifar10/catt.jpg does not exist (did you mean tests/data/cifar10/cat.jpg?)"),
    "visualize": (["visualize", "nothere.keras", "--out", "figs_never_written"],
                  "model nothere.keras does not exist; visualize reads a .keras file"),
    "visualize image": (["visualize", str(DIGITS_MODEL), "--image", "gone.png", "--out", "figs_never_written"],
                        "image gone.png does not exist"),
    "fewshot": (["fewshot", "nothere.keras", "--data", "digits"], "model nothere.keras does not exist; fewshot reads"),
    "export": (["export", "nothere.keras", "--out", "x.tflite"], "model nothere.keras does not exist; export reads"),
    "export format": (["export", str(DIGITS_MODEL), "--out", "x.mlmodel"],
                      "x.mlmodel: keras-vit does not export .mlmodel files; it writes saved_model"),
    "convert": (["convert", "ViT-B_16.npz", "--out", "x.keras"],
                "No checkpoint at ViT-B_16.npz. The official ViT-B_16.npz is released at "
                "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"),
}


def test_missing_paths_are_reported_before_tensorflow_is_imported():
    """The robust proof of "at once": every command refuses its missing path without importing TensorFlow
    (or Keras), in one line that says what to give."""
    code = ("import contextlib, io, json, sys\nfrom keras_vit.cli import main\nout = {}\n"
            f"for name, args in {json.dumps({k: v[0] for k, v in MISSING.items()})}.items():\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        out[name] = [main(args), err.getvalue()]\n"
            "out['heavy'] = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules)\n"
            "print(json.dumps(out))")
    result = _python("-c", code)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out.pop("heavy") == [], "TensorFlow or Keras was imported before the paths were checked"
    for name, (args, words) in MISSING.items():
        code, err = out[name]
        command = args[0]
        assert code == 1 and err.startswith(f"keras-vit {command}: error: ") and err.count("\n") == 1, (name, err)
        assert words in err, (name, err)
    assert not (ROOT / "figs_never_written").exists()


def _help(*command):
    result = _python("-m", "keras_vit.cli", *command, "--help")
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


@pytest.mark.parametrize("command", ["train", "convert", "export", "predict", "visualize", "fewshot"])
def test_help_lists_each_choice_once_and_says_what_the_command_reads(command):
    text = _help(command)
    for group in re.findall(r"\{([^}]*)\}", text):
        choices = group.split(",")
        assert len(choices) == len(set(choices)), f"{command} --help lists a choice twice: {{{group}}}"
    if command != "train":
        assert "Reads " in text, f"{command} --help does not say what it reads"
    if command == "predict":
        assert all(kind in text for kind in (".keras", "SavedModel", ".tflite", ".onnx")), text
    if command == "export":
        assert "logits,probabilities (the default: both), probabilities" in text and "or features" in text


def _top_lines(stdout):
    """{image: [(class, probability), ...]} from predict's lines."""
    tops = {}
    for line in stdout.strip().splitlines():
        path, classes = line.rsplit(": ", 1)
        tops[path] = [(name, float(p)) for name, p in (item.rsplit(" ", 1) for item in classes.split(", "))]
    return tops


@pytest.mark.slow  # CI time (45 s of processes; the backends' numerics in CI: the jax and torch runs of the portable tests)
@pytest.mark.skipif(not OTHER_BACKENDS, reason="jax and torch are not installed (pip install -e '.[jax,torch]')")
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_predict_gives_the_same_classes_under_every_backend(backend):
    """`KERAS_BACKEND=jax keras-vit predict model.keras IMG` runs the model natively, with the answer the
    TensorFlow backend gives (it crashed: a TensorFlow graph cannot call a JAX model)."""
    args = ["-m", "keras_vit.cli", "predict", str(DIGITS_MODEL), *map(str, IMAGES), "--top", "3"]
    reference = _python(*args, env={"KERAS_BACKEND": "tensorflow"})
    other = _python(*args, env={"KERAS_BACKEND": backend})
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert other.returncode == 0, other.stderr[-3000:]
    expected, got = _top_lines(reference.stdout), _top_lines(other.stdout)
    assert sorted(got) == sorted(expected) == sorted(map(str, IMAGES))
    for image, top in expected.items():
        assert [name for name, _ in got[image]] == [name for name, _ in top], (image, top, got[image])
        assert max(abs(p - q) for (_, p), (_, q) in zip(got[image], top)) <= 2e-4, (image, top, got[image])
