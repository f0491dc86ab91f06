import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from conftest import DATA, ROOT

from keras_vit import training

DIGITS = str(ROOT / "recipes" / "digits.py")
QUICK = ["--set", "epochs=2", "--set", "steps_per_epoch=5", "--set", "batch_size=32"]


def _env(**extra):
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)


def _cli(*args, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "keras_vit.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env or _env(), **kwargs)


def _metrics(model_dir):
    return json.loads((model_dir / "metrics.json").read_text())


def test_recipes_resolve_and_unknown_keys_list_the_valid_ones():
    for recipe in ("digits", "cifar10", "finetune", "pretrain_imagenet21k"):
        config = training.load_recipe(ROOT / "recipes" / f"{recipe}.py")
        assert set(training.DEFAULTS) <= set(config)
    with pytest.raises(ValueError, match=r"Unknown recipe key\(s\) 'epoch' \(did you mean 'epochs'\?\)\.$"):
        training.resolve_config({"epoch": 3})
    with pytest.raises(ValueError, match=r"'zzz' \(valid keys: .*batch_size.*epochs"):
        training.resolve_config({"zzz": 3})
    config = training.load_recipe(DIGITS)
    with pytest.raises(ValueError, match=r"Unknown recipe key 'learnin_rate' \(did you mean 'learning_rate'"):
        training.apply_overrides(config, ["learnin_rate=0.1"])
    with pytest.raises(ValueError, match=r"--set epochs=x: expected an integer"):
        training.apply_overrides(config, ["epochs=x"])
    with pytest.raises(ValueError, match="--set expects key=value"):
        training.apply_overrides(config, ["epochs"])
    changed = training.apply_overrides(config, ["epochs=3", "model.hidden_size=32", "flip=true",
                                                "randaugment=(2, 9)", "init_checkpoint=ViT-B_16.npz"])
    assert (changed["epochs"], changed["model"]["hidden_size"], changed["flip"]) == (3, 32, True)
    assert changed["randaugment"] == (2, 9) and changed["init_checkpoint"] == "ViT-B_16.npz"


def test_set_crop_none_is_the_resize_only_crop_not_none():
    config = training.apply_overrides(training.load_recipe("digits"), ["crop=none", "data=none"])
    assert config["crop"] == "none" and config["data"] is None, "other strings still read none as None"
    cifar = training.load_recipe("cifar10")
    assert cifar["randaugment"] and cifar["init_checkpoint"] is None
    for spelling in ("none", "None", "NONE"):
        config = training.apply_overrides(cifar, [f"randaugment={spelling}", "init=(1, 2)", f"init={spelling}"])
        assert config["randaugment"] is None and config["init_checkpoint"] is None, spelling


def test_warmup_then_cosine_or_linear_decay():
    cosine = training.WarmupSchedule(1.0, warmup_steps=10, total_steps=110)
    values = [float(cosine(s)) for s in (0, 5, 10, 60, 110, 200)]
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0, 0.5, 0.0, 0.0], atol=1e-6)
    linear = training.WarmupSchedule(2.0, 0, 100, decay="linear", end=1.0)
    np.testing.assert_allclose([float(linear(s)) for s in (0, 50, 100)], [2.0, 1.5, 1.0], atol=1e-6)
    assert keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(cosine)).get_config() == (
        cosine.get_config())


def test_adamw_skips_biases_norms_class_token_and_position_embeddings():
    from conftest import tiny_vit

    model = tiny_vit()
    config = training.resolve_config({"optimizer": "adamw", "weight_decay": 0.1})
    optimizer = training.build_optimizer(config, steps_per_epoch=10)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert "encoderblock_0/query/kernel" in decayed and "head/kernel" in decayed
    assert not {p for p in decayed if p.endswith(("bias", "gamma", "beta", "cls", "pos_embedding"))}
    sgd = training.build_optimizer(training.resolve_config({"optimizer": "sgd"}), 10)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.9 and sgd.global_clipnorm == 1.0


def test_strategy_names_are_the_public_ones():
    import tensorflow as tf

    assert training.strategy_name(tf.distribute.get_strategy()) == "DefaultStrategy"
    assert training.strategy_name(type("CollectiveAllReduceStrategy", (), {})()) == "MultiWorkerMirroredStrategy"
    with pytest.raises(ValueError, match="Unknown strategy 'gpus'"):
        training.get_strategy("gpus")


@pytest.mark.slow  # CI time (25 s; mixed precision in CI: test_export's bfloat16 copy)
def test_mixed_bfloat16_training_in_process(tmp_path):
    config = training.apply_overrides(training.load_recipe(DIGITS), ["epochs=1", "steps_per_epoch=3",
                                                                      "precision=mixed_bfloat16"])
    metrics = training.train(config, tmp_path, verbose=0)
    assert metrics["epochs_completed"] == 1 and keras.mixed_precision.global_policy().name == "float32"
    assert metrics["precision"] == "mixed_bfloat16" and metrics["precision_reason"] == "set explicitly"
    model = keras.models.load_model(tmp_path / "model.keras")
    assert model.class_names == [str(d) for d in range(10)]


def _cpuinfo(tmp_path, flags, key="flags"):
    path = tmp_path / f"cpuinfo_{len(flags)}"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\n{key}\t\t: fpu sse2 {' '.join(flags)}\n\n")
    return str(path)


def test_precision_auto_follows_the_cpu_flags(tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
    for flags, native in ((["avx512f", "avx512_bf16"], "avx512_bf16"),
                          (["amx_bf16", "amx_tile"], "amx_bf16, amx_tile")):
        policy, why = training.resolve_precision("auto", cpuinfo=_cpuinfo(tmp_path, flags))
        assert (policy, why) == ("mixed_bfloat16", f"the CPU has native bfloat16 ({native})")
    policy, why = training.resolve_precision("auto", cpuinfo=_cpuinfo(tmp_path, ["avx2", "avx512f"]))
    assert policy == "float32" and "no native bfloat16" in why and "emulated" in why
    policy, why = training.resolve_precision("auto", cpuinfo=str(tmp_path / "missing"))
    assert policy == "float32" and "unreadable" in why
    # an explicit choice is kept as given, whatever the hardware
    assert training.resolve_precision("mixed_bfloat16", cpuinfo=_cpuinfo(tmp_path, ["avx2"]))[0] == "mixed_bfloat16"
    assert training.resolve_precision("float32", cpuinfo=_cpuinfo(tmp_path, ["avx512_bf16"]))[0] == "float32"
    with pytest.raises(ValueError, match=r"Unknown precision 'bf16'; use one of \('auto', 'float32'"):
        training.resolve_precision("bf16")


def test_precision_auto_follows_the_accelerator(tmp_path, monkeypatch):
    import tensorflow as tf

    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    details = {"compute_capability": (9, 0), "device_name": "NVIDIA H100"}
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda device: details)
    no_bf16_cpu = _cpuinfo(tmp_path, ["avx2"])
    assert training.resolve_precision("auto", cpuinfo=no_bf16_cpu) == (
        "mixed_bfloat16", "the GPU NVIDIA H100 (compute capability 9.0) has native bfloat16")
    details.update(compute_capability=(7, 5), device_name="Tesla T4")
    policy, why = training.resolve_precision("auto", cpuinfo=_cpuinfo(tmp_path, ["avx512_bf16"]))
    assert policy == "float32" and "Tesla T4 (compute capability 7.5) has no native bfloat16" in why
    tpu = tf.config.LogicalDevice("/device:TPU:0", "TPU")
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [tpu] if kind == "TPU" else [])
    assert training.resolve_precision("auto", cpuinfo=no_bf16_cpu)[0] == "mixed_bfloat16"


def test_recipes_default_to_auto_and_the_start_line_says_which_and_why(tmp_path, capfd):
    assert training.DEFAULTS["precision"] == "auto"
    for recipe in ("cifar10", "finetune", "pretrain_imagenet21k"):
        assert training.load_recipe(ROOT / "recipes" / f"{recipe}.py")["precision"] == "auto", recipe
    assert training.load_recipe(DIGITS)["precision"] == "float32"  # its shipped model's precision
    config = training.apply_overrides(training.load_recipe(DIGITS), ["epochs=1", "steps_per_epoch=2",
                                                                      "precision=auto"])
    metrics = training.train(config, tmp_path, verbose=0)
    policy, why = training.resolve_precision("auto")
    assert f"precision {policy} (auto: {why})" in capfd.readouterr().out
    assert (metrics["precision"], metrics["precision_reason"]) == (policy, why)
    assert keras.mixed_precision.global_policy().name == "float32"


def test_mirrored_strategy_over_two_logical_cpus(tmp_path):
    result = _cli("train", DIGITS, *QUICK, "--set", "strategy=mirrored", "--set", "cpu_replicas=2",
                  "--model-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MirroredStrategy with 2 replica(s)" in result.stdout
    metrics = _metrics(tmp_path)
    assert (metrics["strategy"], metrics["num_replicas"], metrics["epochs_completed"]) == ("MirroredStrategy", 2, 2)


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_multi_worker_training_on_two_local_processes(tmp_path):
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "keras_vit.cli", "train", DIGITS, *QUICK, "--model-dir", str(tmp_path / "run"),
             "--backup-dir", str(tmp_path / "backup")],
            cwd=ROOT, env=_env(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [w.communicate(timeout=600) for w in workers]
    for w, (out, err) in zip(workers, outputs):
        assert w.returncode == 0, err[-3000:]
        assert "MultiWorkerMirroredStrategy with 2 replica(s)" in out
    metrics = _metrics(tmp_path / "run")
    assert (metrics["strategy"], metrics["num_replicas"], metrics["epochs_completed"]) == (
        ("MultiWorkerMirroredStrategy", 2, 2))
    assert (tmp_path / "backup").is_dir()  # per-worker folders, removed once training finished
    worker_1 = json.loads((tmp_path / "run" / ".workers" / "worker_1" / "metrics.json").read_text())
    assert worker_1["test_loss"] == pytest.approx(metrics["test_loss"]), "the replicas stayed in sync"


def test_keras_patches_name_the_keras_version_they_were_not_tested_on(monkeypatch):
    from keras.src.backend.tensorflow import trainer as tf_trainer

    from keras_vit.training import keras_patches

    assert keras_patches.check_keras_version(keras.__version__) is None, "the installed Keras is a tested one"
    low, high = keras_patches.TESTED_KERAS
    assert keras_patches.check_keras_version(f"{low[0]}.{low[1]}.0") is None
    assert keras_patches.check_keras_version(f"{high[0]}.{high[1]}.9") is None
    message = keras_patches.check_keras_version(f"{high[0]}.{high[1] + 1}.0")
    assert f"this is Keras {high[0]}.{high[1] + 1}.0" in message and f"Keras {low[0]}.{low[1]} to" in message
    assert "this is Keras 3.4.2" in keras_patches.check_keras_version("3.4.2")

    mwms = type("CollectiveAllReduceStrategy", (), {})()  # the name is what the patches look at
    model = keras.Sequential([keras.layers.Dense(1)])
    assert keras_patches.apply_multi_worker_fix(model, object()) is False, "other strategies are left alone"
    monkeypatch.setattr(tf_trainer, "reduce_per_replica", tf_trainer.reduce_per_replica)  # restored after the test
    monkeypatch.setattr(keras, "__version__", "3.99.0")
    with pytest.warns(RuntimeWarning, match=r"this is Keras 3\.99\.0"):
        assert keras_patches.apply_multi_worker_fix(model, mwms) is True
    assert tf_trainer.reduce_per_replica._keras_vit_fix
    monkeypatch.delattr(tf_trainer, "reduce_per_replica")
    with pytest.raises(RuntimeError, match=r"Keras 3\.99\.0 has no keras\.src\.backend\.tensorflow\.trainer"
                                           r"\.reduce_per_replica"), pytest.warns(RuntimeWarning):
        keras_patches.apply_multi_worker_fix(keras.Sequential([keras.layers.Dense(1)]), mwms)


def _epochs_logged(path):
    if not path.exists():
        return []
    with open(path) as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def test_killed_run_resumes_where_the_backup_stood(tmp_path):
    args = [sys.executable, "-m", "keras_vit.cli", "train", DIGITS, "--set", "epochs=8", "--set", "steps_per_epoch=20",
            "--set", "batch_size=32", "--model-dir", str(tmp_path)]
    history = tmp_path / "history.csv"
    run = subprocess.Popen(args, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(_epochs_logged(history)) < 3 and run.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert run.poll() is None, "the first run finished before it could be killed"
    run.send_signal(signal.SIGKILL)
    run.wait()
    done_before = len(_epochs_logged(history))
    assert 3 <= done_before < 8 and not (tmp_path / "metrics.json").exists()
    result = subprocess.run(args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = _metrics(tmp_path)
    assert metrics["epochs_completed"] == 8 and metrics["resumed_at_epoch"] >= 3
    epochs = _epochs_logged(history)
    assert epochs.count(0) == 1, f"restarted at epoch 1: {epochs}"
    assert epochs[-1] == 7 and sorted(set(epochs)) == list(range(8))


@pytest.mark.slow  # CI time (40 s of CLI processes; in CI: test_recipes_resolve_and_unknown_keys_list_the_valid_ones)
def test_bad_data_and_keys_fail_with_the_path_or_the_valid_keys(tmp_path):
    result = _cli("train", DIGITS, "--set", f"data={tmp_path / 'nowhere'}", "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 1 and f"Data path {tmp_path / 'nowhere'} does not exist" in result.stderr
    (tmp_path / "empty" / "train").mkdir(parents=True)
    (tmp_path / "empty" / "test").mkdir()
    result = _cli("train", DIGITS, "--set", f"data={tmp_path / 'empty'}", "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 1 and "empty/train has no class folders" in result.stderr
    result = _cli("train", DIGITS, "--set", "epochz=2")
    assert result.returncode == 1 and "did you mean 'epochs'?" in result.stderr
    result = _cli("train", str(tmp_path / "nope.py"))
    assert result.returncode == 1 and "nope.py does not exist" in result.stderr
    # a RandAugment magnitude off the paper's 0-10 scale stops before any data is read or anything written
    result = _cli("train", DIGITS, "--set", "randaugment=(2, 90)", "--model-dir", str(tmp_path / "ra"))
    assert result.returncode == 1 and "randaugment=(2, 90)" in result.stderr and "0-10" in result.stderr
    assert not (tmp_path / "ra").exists()


@pytest.mark.slow  # a CLI training run of its own; CI's time goes to the cheaper ones beside it
def test_a_recipe_that_misses_its_expectation_fails_after_writing_the_run(tmp_path):
    """The digits recipe's `expect` (94% test accuracy): CI's run of the README's first line, `keras-vit train
    digits` with nothing changed, fails below it. Here a recipe of one short epoch expects 99.9%: the run is
    written, then refused by name; the same recipe expecting 0% passes and says so."""
    recipe = tmp_path / "short.py"
    code = ("from keras_vit.training import load_recipe\n\n\n"
            "def get_config():\n"
            "    config = load_recipe('digits')\n"
            "    config.pop('recipe')\n"
            "    return dict(config, epochs=1, steps_per_epoch=3, max_train_examples=200, "
            "expect=dict(test_accuracy=EXPECT))\n")
    recipe.write_text(code.replace("EXPECT", "0.999"))
    result = _cli("train", str(recipe), "--model-dir", str(tmp_path / "missed"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "below what recipe short.py reaches with its own settings" in result.stderr
    assert "--set expect=None" in result.stderr
    metrics = _metrics(tmp_path / "missed")
    assert metrics["expectation"]["test_accuracy"]["met"] is False
    assert (tmp_path / "missed" / "model.keras").exists()
    recipe.write_text(code.replace("EXPECT", "0.0"))
    result = _cli("train", str(recipe), "--model-dir", str(tmp_path / "met"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the recipe's expectation holds: test accuracy" in result.stdout


def test_any_other_override_clears_the_recipes_expectation():
    from keras_vit.training import apply_overrides, load_recipe

    recipe = load_recipe("digits")
    assert recipe["expect"] == {"test_accuracy": 0.94}
    assert apply_overrides(recipe, [])["expect"] == {"test_accuracy": 0.94}
    assert apply_overrides(recipe, ["epochs=2"])["expect"] is None
    assert apply_overrides(recipe, ["expect=None"])["expect"] is None
    assert apply_overrides(recipe, ["expect=dict(test_accuracy=0.5)"])["expect"] == {"test_accuracy": 0.5}
    with pytest.raises(ValueError, match="expect names 'accuracy'"):
        training.train(apply_overrides(recipe, ["expect=dict(accuracy=0.5)"]), "unused")


@pytest.mark.slow  # CI time (48 s; in CI: test_resolution's resampling and test_cli_finetunes ... at its own size's path)
def test_finetune_recipe_from_an_official_checkpoint_at_a_higher_resolution(tmp_path):
    """The paper's fine-tuning path end to end, at toy scale: official .npz at 32px -> a 48px model."""
    from conftest import randomize

    import keras_vit

    source = randomize(keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=21, classifier_activation=None,
                                         representation_size=192))
    ckpt = keras_vit.save_official_npz(source, tmp_path / "Ti_16.npz")
    result = _cli("train", str(ROOT / "recipes" / "finetune.py"), "--set", f"init_checkpoint={ckpt}",
                  "--set", "model.variant=Ti/16", "--set", "data=digits", "--set", "image_size=48",
                  "--set", "batch_size=16", "--set", "epochs=1", "--set", "steps_per_epoch=3",
                  "--set", "warmup_steps=1", "--set", "validation_split=0.1", "--model-dir", str(tmp_path / "ft"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resampled: position embeddings 2x2 -> 3x3 (official)" in result.stderr
    assert "dropped: pre_logits" in result.stderr and "not loaded (the model keeps its own): head/kernel" in result.stderr
    metrics = _metrics(tmp_path / "ft")
    assert metrics["config"]["optimizer"] == "sgd" and metrics["epochs_completed"] == 1
    model = keras.models.load_model(tmp_path / "ft" / "model.keras")
    np.testing.assert_array_equal(model.get_layer("encoderblock_11").get_weights()[0] != 0, True)


@pytest.mark.slow  # a CLI training run of its own; CI's time goes to the cheaper ones beside it
def test_pretrain_recipe_runs_at_toy_scale(tmp_path):
    result = _cli("train", str(ROOT / "recipes" / "pretrain_imagenet21k.py"), "--set", "data=digits",
                  "--set", "test_split=test", "--set", "model.variant=Ti/16", "--set", "image_size=16",
                  "--set", "model.patch_size=4", "--set", "batch_size=16", "--set", "epochs=1",
                  "--set", "steps_per_epoch=3", "--set", "warmup_steps=1", "--model-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = _metrics(tmp_path)
    assert (metrics["config"]["optimizer"], metrics["config"]["schedule"]) == ("adamw", "linear")
    assert metrics["config"]["model"]["dropout_rate"] == 0.1


# Fine-tuning a timm / transformers checkpoint (issue 37 item 4): the pipeline feeds the model the checkpoint's
# own size and pixel statistics, read here from the checkpoint's files, not from keras-vit.
HUB_FIXTURES = {
    "transformers_dinov2": DATA / "zoo" / "hf_dinov2",  # BitImageProcessor: ImageNet mean/std, 56 px
    "timm_deit_distilled": DATA / "timm" / "timm_deit_distilled",  # timm's pretrained_cfg: ImageNet mean/std
    "transformers_clip": DATA / "zoo" / "hf_clip_vision",  # CLIP's own mean/std
}


def _checkpoint_preprocessing(folder):
    """(image size (H, W), mean, std) as the checkpoint's own library reads them from its files."""
    config = json.loads((folder / "config.json").read_text())
    if (folder / "preprocessor_config.json").exists():  # transformers: the image processor's settings
        pre = json.loads((folder / "preprocessor_config.json").read_text())
        vision = config.get("vision_config", config)
        size = vision["image_size"]
        return (size, size), pre["image_mean"], pre["image_std"]
    cfg = config["pretrained_cfg"]  # timm
    return tuple(cfg["input_size"][1:]), cfg["mean"], cfg["std"]


def _recording_make_dataset(monkeypatch):
    """Every pipeline train() builds, recorded: [(split, image_size, kwargs, dataset)]."""
    from keras_vit import data

    built, original = [], data.make_dataset

    def make_dataset(split, image_size, batch_size, **kwargs):
        ds = original(split, image_size, batch_size, **kwargs)
        built.append((split, image_size, kwargs, ds))
        return ds

    monkeypatch.setattr(data, "make_dataset", make_dataset)
    return built


@pytest.mark.parametrize("name", sorted(HUB_FIXTURES))
def test_finetune_from_a_hub_checkpoint_feeds_it_its_own_pixels(name, tmp_path, monkeypatch):
    from keras_vit.images import model_view

    folder = HUB_FIXTURES[name]
    size, mean, std = _checkpoint_preprocessing(folder)
    assert not np.allclose(mean, 0.5) or not np.allclose(std, 0.5), "a fixture whose stats are not [-1, 1]'s"
    built = _recording_make_dataset(monkeypatch)
    config = training.apply_overrides(training.load_recipe("finetune"), [
        f"weights={folder}", "data=digits", "epochs=1", "steps_per_epoch=2", "batch_size=16",
        "max_train_examples=64", "validation_split=0", "precision=float32", "warmup_steps=0"])
    assert config["image_size"] is None, "--set weights=FOLDER trains at the checkpoint's own size"
    metrics = training.train(config, tmp_path / "run", verbose=0)

    assert metrics["input"] == {"image_size": list(size), "pixel_mean": pytest.approx(mean),
                                "pixel_std": pytest.approx(std)}
    train_kw, test_kw = built[0][2], built[-1][2]
    assert built[0][2]["training"] and not test_kw["training"]
    for kw in (train_kw, test_kw):
        np.testing.assert_allclose(kw["pixel_mean"], mean)
        np.testing.assert_allclose(kw["pixel_std"], std)
    # The test pipeline's pixels against the checkpoint's own preprocessing, computed here with NumPy:
    # the model's view of each image (resize, crop), then (x / 255 - mean) / std per channel.
    split, image_size, _, test_ds = built[-1]
    images = next(iter(test_ds))[0].numpy()
    assert images.shape[1:] == (*size, 3)
    view = np.asarray(model_view(split.images[: len(images)], size, test_kw["crop_fraction"], test_kw["interpolation"]),
                      np.float64)
    expected = (view / 255.0 - np.asarray(mean)) / np.asarray(std)
    np.testing.assert_allclose(images, expected, atol=2e-5)
    official = view / 127.5 - 1.0
    assert np.abs(images - official).max() > 0.1, "the pipeline must not scale a DeiT/DINOv2/CLIP model to [-1, 1]"

    model = keras.models.load_model(tmp_path / "run" / "model.keras")
    assert tuple(model.image_size) == tuple(size) and model.classes == 10
    np.testing.assert_allclose(model.pixel_mean, mean)
    np.testing.assert_allclose(model.pixel_std, std)


def test_the_pipeline_scales_with_the_statistics_it_is_given():
    """make_dataset's scaling: [-1, 1] by default (unchanged), the given mean/std otherwise; a pipeline that
    ignored them fails here."""
    from keras_vit import data

    images = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3) * 2
    split = data.Split(images, np.array([0, 1]), ["a", "b"], origin="test")
    default = next(iter(data.make_dataset(split, 4, 2, training=False)))[0].numpy()
    np.testing.assert_array_equal(default, images.astype(np.float32) / 127.5 - 1.0)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    scaled = next(iter(data.make_dataset(split, 4, 2, training=False, pixel_mean=mean, pixel_std=std)))[0].numpy()
    np.testing.assert_allclose(scaled, (images / 255.0 - np.array(mean)) / np.array(std), atol=1e-5)
    import keras_vit

    probe = type("Probe", (), {"pixel_mean": mean, "pixel_std": std})()  # preprocess_input reads only these
    np.testing.assert_array_equal(scaled, keras_vit.preprocess_input(images, model=probe))  # training scales as serving
    with pytest.raises(ValueError, match=r"pixel_mean and pixel_std take 3 values.*\(0\.5, 0\.5\)"):
        data.make_dataset(split, 4, 2, training=False, pixel_mean=(0.5, 0.5))


@pytest.mark.slow  # CI time (20 s; in CI: test_finetune_from_a_hub_checkpoint_feeds_it_its_own_pixels)
def test_cli_finetunes_a_hub_folder_at_its_own_size(tmp_path):
    folder = HUB_FIXTURES["transformers_dinov2"]
    size, mean, std = _checkpoint_preprocessing(folder)
    result = _cli("train", str(ROOT / "recipes" / "finetune.py"), "--set", f"weights={folder}", "--set", "data=digits",
                  "--set", "batch_size=16", "--set", "epochs=1", "--set", "steps_per_epoch=2", "--set", "warmup_steps=0",
                  "--set", "max_train_examples=64", "--set", "validation_split=0", "--model-dir", str(tmp_path / "ft"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the architecture is the checkpoint's own; ignoring model.variant='B/16'" in result.stderr
    metrics = _metrics(tmp_path / "ft")
    assert metrics["input"]["image_size"] == list(size)
    np.testing.assert_allclose(metrics["input"]["pixel_mean"], mean)
    np.testing.assert_allclose(metrics["input"]["pixel_std"], std)


@pytest.mark.slow  # a CLI training run of its own; CI's time goes to the cheaper ones beside it
def test_cli_finetunes_a_hub_name_through_the_huggingface_hub_cache(tmp_path):
    """`--set weights=facebook/dinov2-small` (a name, not a folder) is fetched by huggingface_hub, here offline
    from a cache laid out as huggingface_hub lays it out, and trains as the folder would."""
    pytest.importorskip("huggingface_hub", reason="hub names need huggingface_hub (the `hub` extra)")
    cache = DATA / "zoo" / "hub"
    snapshot = next((cache / "models--facebook--dinov2-small" / "snapshots").iterdir())
    size, mean, std = _checkpoint_preprocessing(snapshot)
    env = _env(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
    env.pop("HF_HOME", None)
    args = ["train", "finetune", "--set", "data=digits", "--set", "batch_size=16", "--set", "epochs=1",
            "--set", "steps_per_epoch=1", "--set", "warmup_steps=0", "--set", "max_train_examples=32",
            "--set", "validation_split=0"]
    run = _cli(*args, "--set", "weights=facebook/dinov2-small", "--model-dir", str(tmp_path / "ft"), env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = _metrics(tmp_path / "ft")
    assert metrics["config"]["init_checkpoint"] == "facebook/dinov2-small"
    assert metrics["input"]["image_size"] == list(size), "the checkpoint's own size, as for its folder"
    np.testing.assert_allclose(metrics["input"]["pixel_mean"], mean)
    np.testing.assert_allclose(metrics["input"]["pixel_std"], std)
    # a name the cache does not hold is refused before training, naming the cache
    run = _cli(*args, "--set", "weights=facebook/nope", "--model-dir", str(tmp_path / "nope"), env=env, timeout=900)
    assert run.returncode != 0 and "'facebook/nope'" in run.stderr and "HF_HUB_CACHE" in run.stderr
    assert not (tmp_path / "nope").exists()


def test_build_model_from_a_hub_checkpoint_at_a_set_size_keeps_its_statistics_and_gets_a_new_head():
    """The Python route: init_checkpoint=FOLDER with image_size set resamples to that size; the recipe's
    architecture keys are ignored, its regularization applies, the head is new (zeros) for these classes."""
    folder = HUB_FIXTURES["timm_deit_distilled"]
    _, mean, std = _checkpoint_preprocessing(folder)
    config = training.resolve_config({"init_checkpoint": str(folder), "image_size": 48,
                                      "model": {"variant": "B/16", "drop_path_rate": 0.1}})
    model = training.build_model(config, ["a", "b", "c", "d", "e"])  # as many classes as the checkpoint's head
    assert tuple(model.image_size) == (48, 48) and model.classes == 5 and model.class_names == ["a", "b", "c", "d", "e"]
    assert model.drop_path_rate == 0.1 and model.distillation, "DeiT's architecture, the recipe's drop-path"
    np.testing.assert_allclose(model.pixel_mean, mean)
    np.testing.assert_allclose(model.pixel_std, std)
    for name in ("head", "head_dist"):
        assert all(not np.any(w) for w in model.get_layer(name).get_weights()), f"{name}: a new zero head"
    plain = training.build_model(training.resolve_config({"init_checkpoint": str(DATA / "timm" / "timm_vit_token"),
                                                          "image_size": None}), ["x", "y"])
    assert tuple(plain.image_size) == (32, 32) and tuple(plain.pixel_mean) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match=r"image_size None means the init checkpoint's own size.*'imagenet21k'"):
        training.build_model(training.resolve_config({"init_checkpoint": "imagenet21k", "image_size": None}), ["x"])


def test_a_keras_init_checkpoint_keeps_its_pixel_statistics(tmp_path):
    """A .keras model converted from DeiT / DINOv2 fine-tunes with its own statistics, as a hub folder does."""
    import keras_vit

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    keras_vit.VisionTransformer(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                                classes=3, pixel_mean=mean, pixel_std=std).save(tmp_path / "init.keras")
    config = training.resolve_config({"init_checkpoint": str(tmp_path / "init.keras"), "image_size": None,
                                      "model": {"patch_size": 4, "hidden_size": 16, "num_layers": 1, "num_heads": 2,
                                                "mlp_dim": 32}})
    planned = training.model_input(config)  # what the pipeline feeds it: decided before the model is built
    assert (planned["image_size"], planned["pixel_mean"], planned["pixel_std"]) == ((16, 16), mean, std)
    model = training.build_model(config, ["a", "b"])
    assert tuple(model.image_size) == (16, 16)
    np.testing.assert_allclose(model.pixel_mean, mean)
    np.testing.assert_allclose(model.pixel_std, std)
