"""The newcomer's path (issue 17): the Keras habits that must not fail silently, a fast and quiet
command line, one-line errors with the next step."""

import os
import subprocess
import sys
import time
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


# --- finding 8: --set papercuts, recipes by name ----------------------------------------------

def test_set_parses_the_readmes_dict_syntax_safely_and_suggests_keys():
    from keras_vit import training

    config = training.load_recipe("digits")  # a shipped recipe, by name
    assert config["recipe"].endswith(os.path.join("keras_vit", "recipes", "digits.py"))
    changed = training.apply_overrides(config, ["model.resnet=dict(num_layers=(3, 4, 9), width_factor=1)"])
    assert changed["model"]["resnet"] == {"num_layers": (3, 4, 9), "width_factor": 1}
    assert training.apply_overrides(config, ["model.resnet={'num_layers': ()}"])["model"]["resnet"] == (
        {"num_layers": ()})
    # never eval: a call inside is no literal, and is refused
    with pytest.raises(ValueError, match=r"--set model.resnet=dict\(num_layers=__import__.*: not a literal value"):
        training.apply_overrides(config, ["model.resnet=dict(num_layers=__import__('os').getcwd())"])
    with pytest.raises(ValueError, match=r"'model.hiden_size' \(did you mean 'model.hidden_size'\?\)"):
        training.apply_overrides(config, ["model.hiden_size=3"])
    with pytest.raises(ValueError, match=r"Recipe digitz does not exist, and is not a shipped recipe \(.*digits"):
        training.load_recipe("digitz")


def test_bad_precision_and_finished_model_dir_are_refused_before_anything_starts(tmp_path):
    from keras_vit import training

    config = training.apply_overrides(training.load_recipe("digits"), ["precision=bf16"])
    with pytest.raises(ValueError, match=r"Unknown precision 'bf16'; use one of"):
        training.train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # no empty model dir after a failed start
    finished = tmp_path / "done"
    finished.mkdir()
    (finished / "metrics.json").write_text("{}")
    config = training.load_recipe("digits")
    with pytest.raises(FileExistsError, match=r"done holds a finished run .*--overwrite"):
        training.train(config, str(finished))
    # a failed start in an empty dir the run created is cleaned up (unreadable data)
    config = training.apply_overrides(config, [f"data={tmp_path / 'missing.tgz'}"])
    with pytest.raises(ValueError, match="missing.tgz does not exist"):
        training.train(config, str(tmp_path / "fresh"))
    assert not (tmp_path / "fresh").exists()


# --- finding 5: a fast, quiet command line; the package imports nothing heavy ----------------

def test_help_and_version_do_not_import_tensorflow():
    for args in (["--help"], ["--version"], ["train", "--help"]):
        code = ("import sys; from keras_vit.cli import main\n"
                f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
                "heavy = sorted(m for m in ('tensorflow', 'keras', 'numpy') if m in sys.modules)\n"
                "print('HEAVY', heavy)")
        result = _run("-c", code)
        assert result.returncode == 0, result.stderr
        assert "HEAVY []" in result.stdout, (args, result.stdout[-500:])
    result = _run("-m", "keras_vit.cli", "--version")
    assert result.stdout.startswith("keras-vit 0.1.0") and result.stderr == ""


@pytest.mark.slow  # CI time (34 s of fresh processes; lazy exports in CI: test_applications' load after import keras_vit)
def test_lazy_exports_and_registration_for_load_model_in_either_import_order(tmp_path):
    from conftest import tiny_vit

    import keras_vit

    path = tmp_path / "tiny.keras"
    tiny_vit().save(path)
    assert set(keras_vit.__all__) >= {"ViTB16", "VisionTransformer", "create_model", "load_classifier"}
    for first, second in (("keras_vit", "keras"), ("keras", "keras_vit"), ("keras_vit", "tensorflow as tf; keras = tf.keras")):
        code = (f"import {first}\nimport {second}\n"
                f"m = keras.models.load_model({str(path)!r})\nprint(type(m).__name__, m.classes)")
        result = _run("-c", code)
        assert result.returncode == 0 and "VisionTransformer 7" in result.stdout, (first, second, result.stderr[-2000:])
    result = _run("-c", "import keras_vit, sys\nassert 'tensorflow' not in sys.modules\n"
                        "from keras_vit import ViTTi16\nprint(keras_vit.ViTB16.__name__, ViTTi16.__name__)\n"
                        "print(len(keras_vit.data.load_digits()['test']), 'epochs' in keras_vit.training.DEFAULTS)\n"
                        "keras_vit.NoSuchThing")
    assert "ViTB16 ViTTi16\n359 True\n" in result.stdout, result.stderr[-2000:]
    assert "AttributeError: module 'keras_vit' has no attribute 'NoSuchThing'" in result.stderr


def test_cli_prints_no_tensorflow_start_up_lines(tmp_path):
    env = {"TF_CPP_MIN_LOG_LEVEL": ""}
    code = ("import os; os.environ.pop('TF_CPP_MIN_LOG_LEVEL')\nimport sys; from keras_vit.cli import main\n"
            f"sys.exit(main(['predict', {str(ROOT / 'saved_models/vit_cifar10/model.keras')!r}, "
            f"{str(ROOT / 'tests/data/cifar10_sample/cat/0511.jpg')!r}, '--top', '1']))")
    result = _run("-c", code, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("0511.jpg: cat 0.5114")
    assert result.stderr == "", result.stderr  # no absl pre-init lines, no cuInit, no oneDNN notes


# --- finding 3: network failures, one exception / one line with the next step ------------------

def test_named_weights_offline_raise_one_error_naming_the_url_and_the_next_step(tmp_path, monkeypatch):
    import keras_vit

    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", "http://127.0.0.1:9/vit_models")  # nothing listens on port 9
    with pytest.raises(ConnectionError) as raised:
        keras_vit.ViTTi16(weights="augreg", input_shape=(32, 32, 3), classes=3)
    message = str(raised.value)
    assert "Could not download the 'augreg' weights from http://127.0.0.1:9/vit_models/augreg/Ti_16-i21k" in message
    assert "Connection refused" in message and "\n" not in message
    assert "$KERAS_VIT_WEIGHTS_URL" in message and 'pass its path: weights="Ti_16-i21k' in message


def test_cli_reports_a_download_failure_in_one_line(tmp_path):
    result = _run("-m", "keras_vit.cli", "train", "finetune", "--set", "init_checkpoint=augreg",
                  "--set", "model.variant=Ti/16", "--set", "data=digits", "--set", "image_size=32",
                  "--set", "epochs=1", "--model-dir", str(tmp_path / "ft"),
                  env={"KERAS_HOME": str(tmp_path / "cache"), "KERAS_VIT_WEIGHTS_URL": "http://127.0.0.1:9/x"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("keras-vit train: error: Could not download the 'augreg' weights from "
                           "http://127.0.0.1:9/x/augreg/Ti_16-i21k"), last
    assert not (tmp_path / "ft").exists()  # no empty model dir after a failed start


# --- finding 2: tfds in a fresh venv, and offline ---------------------------------------------

def test_tfds_imports_and_fails_fast_and_clearly_offline(tmp_path, monkeypatch):
    import tensorflow_datasets  # needs importlib_resources, which tfds does not declare

    from keras_vit import data

    monkeypatch.setattr(data, "TFDS_HOST", ("127.0.0.1", 9))  # as offline: nothing answers
    # "fast": refused before tfds starts its download (which retries for minutes offline), not timed here
    attempts = []
    monkeypatch.setattr(tensorflow_datasets.core.DatasetBuilder, "download_and_prepare",
                        lambda self, *a, **k: attempts.append(self.name))
    with pytest.raises(ConnectionError, match=r"tfds:mnist is not prepared in .* cannot be reached \(offline\?\)"
                                              r".*--set data=FOLDER"):
        data.load_tfds("mnist", data_dir=str(tmp_path))
    assert attempts == []


# --- finding 7: train and its model dir ---------------------------------------------------------

@pytest.mark.slow  # three training processes, about 30 s
def test_ctrl_c_says_how_to_resume_and_the_rerun_says_it_resumes_then_a_finished_dir_is_kept(tmp_path):
    import signal

    args = [sys.executable, "-m", "keras_vit.cli", "train", "digits", "--set", "epochs=6", "--set",
            "steps_per_epoch=20", "--set", "batch_size=32", "--model-dir", str(tmp_path)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    # SIGINT back to its default in the child: a shell that starts the suite in the background (`pytest &`)
    # passes SIGINT on as ignored, and Python then installs no KeyboardInterrupt handler.
    run = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    history, deadline = tmp_path / "history.csv", time.time() + 300
    while time.time() < deadline and run.poll() is None:
        if history.exists() and len(history.read_text().splitlines()) >= 3:  # header + 2 epochs
            break
        time.sleep(0.2)
    assert run.poll() is None, "the run finished before it could be interrupted"
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130 and "Traceback" not in err, err[-3000:]
    done = len(history.read_text().splitlines()) - 1
    assert err.strip().splitlines()[-1] == (f"keras-vit train: interrupted; run the same command again to resume "
                                             f"from epoch {done + 1}")
    rerun = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    backup = tmp_path / "backup" / "worker_0"
    assert f"keras-vit train: resuming from epoch {done + 1} (backup in {backup})" in rerun.stdout
    # finished: the same command again is refused, the files stay; --overwrite trains again
    before = (tmp_path / "model.keras").stat().st_mtime
    again = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    last = again.stderr.strip().splitlines()[-1]
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert last.startswith("keras-vit train: error: ") and "holds a finished run" in last and "--overwrite" in last
    assert (tmp_path / "model.keras").stat().st_mtime == before


def test_a_compiled_model_loads_compiled(tmp_path):
    import keras

    model = _entry_points()["VisionTransformer"]()
    with pytest.warns(UserWarning, match="from_logits=True"):
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    model.save(tmp_path / "m.keras")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = keras.models.load_model(tmp_path / "m.keras")
    assert not [w for w in caught if "not called as part of model loading" in str(w.message)]
    assert loaded.compiled and loaded.loss.get_config()["from_logits"] is True


def test_loader_reports_a_complete_load_without_nothing_lists(tmp_path, caplog):
    import logging

    from conftest import randomize, tiny_vit

    import keras_vit

    path = keras_vit.save_official_npz(randomize(tiny_vit()), tmp_path / "tiny.npz")
    caplog.set_level(logging.INFO, logger="keras_vit")
    keras_vit.load_official_npz(tiny_vit(), path)
    (line,) = [r.getMessage() for r in caplog.records if "tiny.npz" in r.getMessage()]
    assert line.endswith("(released layout), every variable of the model.") and "nothing" not in line, line
    keras_vit.load_official_npz(tiny_vit(classes=3), path)
    line = [r.getMessage() for r in caplog.records if "tiny.npz" in r.getMessage()][-1]
    assert "not loaded (the model keeps its own): head/kernel" in line and "nothing" not in line, line
    assert "dropped" not in line, line


def test_visualize_out_on_an_existing_file_is_one_clear_line(tmp_path, capsys):
    from keras_vit.cli import main

    (tmp_path / "figs").write_text("not a folder")
    assert main(["visualize", str(ROOT / "saved_models/vit_cifar10/model.keras"), "--out", str(tmp_path / "figs")]) == 1
    err = capsys.readouterr().err
    assert err == (f"keras-vit visualize: error: --out {tmp_path / 'figs'} is a file; visualize writes a folder of "
                   "figures: name a new or existing folder.\n")
