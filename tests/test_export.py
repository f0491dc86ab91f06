"""SavedModel / TFLite export: parity with Keras, sizes and batches, Flex refusal, quantization,
attention outputs, atomic writes, and `keras-vit export` / `keras-vit predict` on all three formats.

Most tests use a tiny ViT trained for a few seconds on scikit-learn's handwritten digits (real
8x8 scans, upsampled to 16x16 RGB), so that top-1 agreement and accuracy mean something.
"""

import json
import logging
import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, ROOT, SHARED, randomize, tiny_vit

import keras_vit
import keras_vit.data
from keras_vit.applications import resize_images
from keras_vit.cli import main
from keras_vit.export import export_model, load_classifier, metadata_path

DIGITS = [str(i) for i in range(10)]
CIFAR10_SAMPLE = DATA / "cifar10_sample"
CIFAR10_TGZ = SHARED / "data" / "cifar10-jpeg.tgz"
SHIPPED_CIFAR10 = pathlib.Path(os.environ.get("KERAS_VIT_CIFAR10_MODEL",
                                              ROOT / "saved_models" / "vit_cifar10" / "model.keras"))


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = tf.image.resize((d.images / 16.0 * 255.0).astype("float32")[..., None], (16, 16)).numpy()
    x = np.repeat(np.clip(np.round(x), 0, 255).astype("uint8"), 3, axis=-1)
    order = np.random.default_rng(0).permutation(len(x))
    return x[order], d.target[order]


@pytest.fixture(scope="session")
def digits():
    x, y = _digits()
    return {"train": (x[:1400], y[:1400]), "test": (x[1400:], y[1400:])}


@pytest.fixture(scope="session")
def digits_model(digits, tmp_path_factory):
    """A tiny ViT (16x16, 4x4 patches, 2 blocks) trained on digits: a .keras file, ~90% accurate."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        image_size=16, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=10,
        class_names=DIGITS, classifier_activation="softmax", name="digits_vit")
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    x, y = digits["train"]
    model.fit(keras_vit.preprocess_input(x), y, epochs=8, batch_size=64, verbose=0)
    x, y = digits["test"]
    accuracy = model.evaluate(keras_vit.preprocess_input(x), y, verbose=0)[1]
    assert accuracy > 0.85, f"the digits fixture model trained to only {accuracy:.3f}"
    path = tmp_path_factory.mktemp("digits") / "digits.keras"
    model.save(path)
    keras.backend.clear_session()
    return str(path)


@pytest.fixture
def keras_vit_log():
    """The keras_vit logger's messages, INFO and up (the package leaves the level to the application)."""
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("keras_vit")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


_LOGITS_MODELS = {}


def _keras_logits(path, images):
    """Logits of the .keras model computed directly in Keras: the head's output."""
    if path not in _LOGITS_MODELS:
        model = keras.models.load_model(path)
        _LOGITS_MODELS[path] = keras.Model(model.input, model.get_layer("head").output)
    return _LOGITS_MODELS[path].predict(keras_vit.preprocess_input(images), verbose=0, batch_size=128)


@pytest.fixture(scope="session")
def exports(digits, digits_model, tmp_path_factory):
    """The digits model exported once to each float32 format, checked on the labelled test set."""
    out = tmp_path_factory.mktemp("exports")
    paths = {"saved_model": str(out / "digits_savedmodel"), "tflite": str(out / "digits.tflite")}
    reports = {fmt: export_model(digits_model, path, samples=digits["test"]) for fmt, path in paths.items()}
    return paths, reports


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("fmt", ["saved_model", "tflite"])
def test_float32_export_matches_keras_to_1e4(fmt, exports, digits, digits_model):
    paths, reports = exports
    x, y = digits["test"]
    outputs = load_classifier(paths[fmt])(x)
    assert set(outputs) == {"logits", "probabilities"}
    reference = _keras_logits(digits_model, x)
    assert np.max(np.abs(outputs["logits"] - reference)) <= 1e-4
    # True logits (the model ends in softmax), and their softmax.
    assert np.abs(outputs["logits"]).max() > 1.5
    np.testing.assert_allclose(outputs["probabilities"], _softmax(reference), atol=1e-5)
    assert np.mean(outputs["logits"].argmax(-1) == y) > 0.85

    report = reports[fmt]["parity"]
    assert report["samples"] == len(x) and report["tolerance"] == 1e-4
    assert report["max_abs_logit_diff"] <= 1e-4 and report["top1_agreement"] == 1.0
    assert report["export_accuracy"] == report["keras_accuracy"] == pytest.approx(np.mean(reference.argmax(-1) == y))
    with open(metadata_path(paths[fmt])) as f:
        metadata = json.load(f)
    assert metadata["class_names"] == DIGITS and metadata["image_size"] == [16, 16]
    assert metadata["outputs"] == ["logits", "probabilities"] and metadata["parity"] == report


def test_saved_model_takes_any_size_and_batch(exports, digits, digits_model):
    paths, _ = exports
    signature = tf.saved_model.load(paths["saved_model"]).signatures["serving_default"]
    (spec,) = signature.structured_input_signature[1].values()
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, None, None, 3]
    with open(os.path.join(paths["saved_model"], "assets.extra", "keras_vit.json")) as f:
        assert json.load(f)["class_names"] == DIGITS

    x, _ = digits["test"]
    for batch, size in [(1, (16, 16)), (3, (45, 37)), (5, (7, 9)), (2, (16, 64))]:
        images = tf.image.resize(x[:batch].astype("float32"), size).numpy().round().astype("uint8")
        outputs = signature(images=tf.constant(images))
        assert outputs["logits"].shape == (batch, 10) and outputs["probabilities"].shape == (batch, 10)
        # The same resize done outside, in float: the model's view, bilinear, antialiased where it shrinks.
        back = tf.image.resize(images.astype("float32"), (16, 16), antialias=True).numpy()
        reference = _keras_logits(digits_model, back)
        assert np.max(np.abs(outputs["logits"].numpy() - reference)) <= 1e-4, (batch, size)


def test_tflite_takes_its_size_any_batch_builtin_ops_only(exports, digits, digits_model):
    from ai_edge_litert.interpreter import Interpreter

    paths, _ = exports
    interpreter = Interpreter(model_path=paths["tflite"])
    runner = interpreter.get_signature_runner("serving_default")
    (name, detail), = runner.get_input_details().items()
    assert name == "images" and detail["dtype"] == np.uint8
    assert detail["shape_signature"].tolist() == [-1, 16, 16, 3]
    assert set(runner.get_output_details()) == {"logits", "probabilities"}
    ops = {op["op_name"] for op in interpreter._get_ops_details()}
    assert not [op for op in ops if "FLEX" in op.upper() or "CUSTOM" in op.upper()], ops

    x, _ = digits["test"]
    reference = _keras_logits(digits_model, x[:17])
    for batch in (1, 5, 17, 2):
        logits = runner(images=x[:batch])["logits"]
        assert logits.shape == (batch, 10)
        assert np.max(np.abs(logits - reference[:batch])) <= 1e-4


def test_model_needing_flex_ops_is_refused_naming_the_op(tmp_path):
    # A bicubic resize in front of the ViT: TFLite has no builtin for it.
    inputs = keras.Input((24, 24, 3))
    resized = keras.layers.Resizing(32, 32, interpolation="bicubic")(inputs)
    model = randomize(tiny_vit(input_tensor=resized))
    target = tmp_path / "flex.tflite"
    with pytest.raises(ValueError, match=r"builtin ops only: it needs the TensorFlow op\(s\) ResizeBicubic.*"
                                         r"Nothing was written to .*flex\.tflite"):
        export_model(model, target)
    assert os.listdir(tmp_path) == []

    # The same graph is fine as a SavedModel, which TensorFlow runs.
    report = export_model(model, tmp_path / "flex_savedmodel")
    assert report["parity"]["max_abs_logit_diff"] <= 1e-4


@pytest.mark.parametrize("quantize,min_agreement", [("float16", 0.99), ("dynamic", 0.97), ("int8", 0.95)])
def test_quantized_tflite_agrees_on_real_images(quantize, min_agreement, digits, digits_model, exports, tmp_path):
    x, y = digits["test"]
    target = tmp_path / f"digits_{quantize}.tflite"
    # Calibration from a data pipeline: a batched tf.data.Dataset of (images, labels).
    pipeline = tf.data.Dataset.from_tensor_slices(digits["train"]).batch(32)
    metadata = export_model(digits_model, target, quantize=quantize, samples=(x, y),
                            representative_images=pipeline if quantize == "int8" else None,
                            calibration_images=100)
    outputs = load_classifier(target)(x)
    reference = _keras_logits(digits_model, x)
    agreement = np.mean(outputs["logits"].argmax(-1) == reference.argmax(-1))
    accuracy = np.mean(outputs["logits"].argmax(-1) == y)
    keras_accuracy = np.mean(reference.argmax(-1) == y)
    assert agreement >= min_agreement
    assert accuracy >= keras_accuracy - 0.03

    report = metadata["parity"]
    assert report["top1_agreement"] == pytest.approx(agreement)
    assert report["export_accuracy"] == pytest.approx(accuracy)
    assert report["keras_accuracy"] == pytest.approx(keras_accuracy)
    assert "tolerance" not in report and metadata["quantization"] == quantize
    if quantize == "int8":
        assert metadata["calibration"] == {"images": 100, "source": "a tf.data.Dataset (100 images)"}
        # Weights and activations in int8: most tensors are int8.
        from ai_edge_litert.interpreter import Interpreter

        dtypes = [t["dtype"] for t in Interpreter(model_path=str(target)).get_tensor_details()]
        assert dtypes.count(np.int8) > len(dtypes) / 2
    assert os.path.getsize(target) < 0.8 * os.path.getsize(exports[0]["tflite"])  # the float32 export


def test_int8_needs_and_checks_representative_images(digits_model, tmp_path):
    with pytest.raises(ValueError, match="int8 quantization needs representative images .* no data of its own"):
        export_model(digits_model, tmp_path / "a.tflite", quantize="int8")
    unit_range = np.random.default_rng(0).uniform(0, 1, (8, 16, 16, 3)).astype("float32")
    with pytest.raises(ValueError, match=r"representative images have values in \[0\.00, 1\.00\]: scaled to \[0, 1\]"):
        export_model(digits_model, tmp_path / "a.tflite", quantize="int8", representative_images=unit_range)
    folder = tmp_path / "calibration"
    folder.mkdir()
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ValueError, match=r"broken\.png is not an image"):
        export_model(digits_model, tmp_path / "a.tflite", quantize="int8", representative_images=folder)
    with pytest.raises(ValueError, match="quantization .* applies to TFLite exports only"):
        export_model(digits_model, tmp_path / "b_savedmodel", quantize="float16")
    assert sorted(os.listdir(tmp_path)) == ["calibration"]


def test_failing_quantization_is_reported_and_writes_nothing(digits, digits_model, tmp_path, monkeypatch):
    # No real ViT we can build fails int8 conversion on this stack, so the converter is made to fail
    # as it does (a ConverterError with MLIR diagnostics) to check what the user is told.
    from tensorflow.lite.python.convert_phase import ConverterError
    from tensorflow.lite.python.lite import TFLiteSavedModelConverterV2

    def fail(self):
        raise ConverterError("<unknown>:0: error: 'tfl.fully_connected' op quantization parameters are invalid\n"
                             "<unknown>:0: note: see current operation")

    monkeypatch.setattr(TFLiteSavedModelConverterV2, "convert", fail)
    with pytest.raises(ValueError, match=r"int8 quantization of digits_vit failed: .*quantization parameters "
                                         r"are invalid\. Nothing was written to .*q\.tflite"):
        export_model(digits_model, tmp_path / "q.tflite", quantize="int8", representative_images=digits["train"][0][:8])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", ["saved_model", "tflite"])
def test_attention_maps_exported_by_name(fmt, digits, digits_model, tmp_path):
    target = tmp_path / ("att_savedmodel" if fmt == "saved_model" else "att.tflite")
    metadata = export_model(digits_model, target, attention=True, samples=digits["test"][0][:20])
    assert metadata["outputs"] == ["logits", "probabilities", "attention_0", "attention_1"]
    assert metadata["parity"]["max_abs_attention_diff"] <= 1e-4

    x = digits["test"][0][:3]
    outputs = load_classifier(target)(x)
    model = keras.models.load_model(digits_model)
    hidden = keras.Model(model.input, model.blocks[0].input)(keras_vit.preprocess_input(x))
    for i, block in enumerate(model.blocks):
        hidden, expected = block(hidden, return_attention_scores=True)
        assert outputs[f"attention_{i}"].shape == (3, 4, 17, 17)
        np.testing.assert_allclose(outputs[f"attention_{i}"], expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(outputs["attention_0"].sum(-1), 1.0, atol=1e-5)
    assert np.max(np.abs(outputs["logits"] - _keras_logits(digits_model, x))) <= 1e-4


def test_mixed_bfloat16_model_is_exported_from_a_float32_copy(tmp_path, keras_vit_log):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = randomize(tiny_vit(image_size=16, patch_size=4))
    keras.mixed_precision.set_global_policy("float32")
    assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    images = np.random.default_rng(1).integers(0, 256, (12, 16, 16, 3), dtype=np.uint8)

    metadata = export_model(model, tmp_path / "bf16.tflite", samples=images)
    assert any("computes in mixed_bfloat16: exporting a float32 copy" in m for m in keras_vit_log)
    assert metadata["parity"]["max_abs_logit_diff"] <= 1e-4
    twin = tiny_vit(image_size=16, patch_size=4)
    twin.set_weights(model.get_weights())
    reference = twin(keras_vit.preprocess_input(images)).numpy()
    exported = load_classifier(tmp_path / "bf16.tflite")(images)["logits"]
    assert np.max(np.abs(exported - reference)) <= 1e-4
    # bfloat16 numerics differ from float32 ones by more than the float32 tolerance.
    assert np.max(np.abs(model(keras_vit.preprocess_input(images)).numpy() - reference)) > 1e-4


def test_existing_export_is_kept_unless_overwrite(digits_model, tmp_path):
    target = tmp_path / "digits.tflite"
    export_model(digits_model, target)
    before = target.read_bytes()
    with pytest.raises(FileExistsError, match=r"digits\.tflite exists; pass overwrite=True"):
        export_model(digits_model, target, quantize="dynamic")
    assert target.read_bytes() == before

    # A failing export with overwrite leaves the old file and its JSON as they were.
    inputs = keras.Input((24, 24, 3))
    flex = randomize(tiny_vit(input_tensor=keras.layers.Resizing(32, 32, interpolation="bicubic")(inputs)))
    with pytest.raises(ValueError, match="ResizeBicubic"):
        export_model(flex, target, overwrite=True)
    assert target.read_bytes() == before
    assert json.loads((tmp_path / "digits.tflite.json").read_text())["quantization"] is None

    export_model(digits_model, target, quantize="dynamic", overwrite=True)
    assert target.read_bytes() != before
    assert json.loads((tmp_path / "digits.tflite.json").read_text())["quantization"] == "dynamic"
    assert sorted(os.listdir(tmp_path)) == ["digits.tflite", "digits.tflite.json"]

    folder = tmp_path / "digits_savedmodel"
    export_model(digits_model, folder)
    stamp = (folder / "saved_model.pb").stat().st_mtime_ns
    with pytest.raises(FileExistsError, match="digits_savedmodel exists"):
        export_model(digits_model, folder)
    export_model(digits_model, folder, overwrite=True)
    assert (folder / "saved_model.pb").stat().st_mtime_ns != stamp
    assert sorted(os.listdir(tmp_path)) == ["digits.tflite", "digits.tflite.json", "digits_savedmodel",
                                            "digits_savedmodel.json"]


def test_bad_models_are_refused(digits_model, tmp_path):
    with pytest.raises(ValueError, match="no classification head"):
        export_model(tiny_vit(include_top=False), tmp_path / "features_savedmodel")
    with pytest.raises(ValueError, match="expected a keras_vit.VisionTransformer, got Sequential"):
        export_model(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]), tmp_path / "x_savedmodel")
    with pytest.raises(ValueError, match=r"looks like a file name"):
        export_model(digits_model, tmp_path / "model.keras", format="saved_model")
    with pytest.raises(FileNotFoundError, match=r"missing\.keras does not exist"):
        export_model(tmp_path / "missing.keras", tmp_path / "m.tflite")
    assert os.listdir(tmp_path) == []


def test_models_of_other_channel_counts_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"takes 4-channel images; exports serve uint8 RGB images \(3 channels\)"):
        export_model(tiny_vit(channels=4), tmp_path / "rgba_savedmodel")
    assert os.listdir(tmp_path) == []


def test_int8_calibrates_and_checks_on_the_models_own_data(digits_model, tmp_path, keras_vit_log):
    """A model dir of `keras-vit train` names its data in metrics.json: export uses it by default."""
    model_dir = tmp_path / "vit_digits"
    model_dir.mkdir()
    with open(digits_model, "rb") as f:
        (model_dir / "model.keras").write_bytes(f.read())
    config = {"data": "digits", "train_split": "train", "test_split": "test", "image_size": 8}
    (model_dir / "metrics.json").write_text(json.dumps({"test_accuracy": 0.9, "config": config}))
    metadata = export_model(model_dir / "model.keras", tmp_path / "own.tflite", quantize="int8")
    assert metadata["calibration"] == {"images": 200, "source": "sklearn digits [train] (200 images)"}
    report = metadata["parity"]
    test_size = len(keras_vit.data.load_digits()["test"])
    assert report["sample_source"] == f"sklearn digits [test] ({test_size} images, labelled)"
    assert report["samples"] == test_size > 300
    assert report["top1_agreement"] >= 0.95 and report["export_accuracy"] >= report["keras_accuracy"] - 0.03
    assert report["keras_accuracy"] > 0.8
    assert any("the model's training data" in m and "metrics.json" in m for m in keras_vit_log)
    assert not any("calibrates on only" in m for m in keras_vit_log)  # 200 images: no warning

    # Data that cannot be read here: export refuses (random pixels would hide a wrong export) and says
    # what to pass; int8 names what is missing; given samples, it exports.
    config["data"] = str(tmp_path / "gone" / "cifar10-jpeg.tgz")
    (model_dir / "metrics.json").write_text(json.dumps({"config": config}))
    with pytest.raises(FileNotFoundError, match=r"samples: the model's own test data .*gone/cifar10-jpeg\.tgz.*"
                                                 r"cannot be read here.*--samples"):
        export_model(model_dir / "model.keras", tmp_path / "fallback.tflite")
    metadata = export_model(model_dir / "model.keras", tmp_path / "fallback.tflite", samples="digits")
    assert metadata["parity"]["sample_source"].startswith("sklearn digits [test]")
    with pytest.raises(FileNotFoundError, match=r"representative images: .*gone/cifar10-jpeg\.tgz does not exist"):
        export_model(model_dir / "model.keras", tmp_path / "int8.tflite", quantize="int8", samples="digits")
    assert sorted(os.listdir(tmp_path)) == ["fallback.tflite", "fallback.tflite.json", "own.tflite",
                                            "own.tflite.json", "vit_digits"]


def _write_image(path, array):
    path.parent.mkdir(parents=True, exist_ok=True)
    encode = tf.io.encode_png if path.suffix == ".png" else tf.io.encode_jpeg
    tf.io.write_file(str(path), encode(array))


@pytest.fixture(scope="session")
def digit_files(digits, tmp_path_factory):
    """Test digits as image files: class folders of PNGs, plus odd-sized, grayscale and RGBA ones."""
    root = tmp_path_factory.mktemp("digit_files")
    x, y = digits["test"]
    for i in range(60):
        _write_image(root / "by_class" / str(y[i]) / f"{i:03d}.png", x[i])
    train_x = digits["train"][0]
    for i in range(40):  # calibration images in folders that are not classes
        _write_image(root / "calibration" / f"part{i % 2}" / f"{i:03d}.jpg", train_x[i])
    singles = {
        "plain.png": x[60],
        "large.jpg": tf.image.resize(x[61:62].astype("float32"), (45, 37)).numpy()[0].round().astype("uint8"),
        "gray.png": x[62][..., :1],
        "rgba.png": np.concatenate([x[63], np.full((16, 16, 1), 255, np.uint8)], axis=-1),
    }
    for name, array in singles.items():
        _write_image(root / name, array)
    return root, [str(root / name) for name in singles], y[60:64]


def test_cli_export_then_predict_on_all_three_formats(digits_model, digit_files, tmp_path, capfd, keras_vit_log):
    root, images, labels = digit_files
    tflite = tmp_path / "digits.tflite"
    assert main(["export", digits_model, "--format", "tflite", "--quantize", "int8", "--representative",
                 str(root / "calibration"), "--samples", str(root / "by_class"), "--out", str(tflite)]) == 0
    log = "\n".join(keras_vit_log)
    assert "calibrating on 40 images" in log and "checking parity against Keras on 60 images" in log
    # fewer than 100 calibration images: a warning naming the count and what to pass
    assert "int8 quantization calibrates on only 40 image(s)" in log and "--representative IMAGES" in log
    assert "max |logit diff|" in log and "top-1 agreement" in log and "accuracy Keras" in log
    report = json.loads((tmp_path / "digits.tflite.json").read_text())["parity"]
    assert report["labelled"] and report["samples"] == 60

    saved = tmp_path / "digits_savedmodel"
    assert main(["export", digits_model, "--out", str(saved)]) == 0
    capfd.readouterr()

    predictions = {}
    for model in (digits_model, str(saved), str(tflite)):
        keras_vit_log.clear()
        assert main(["predict", model, *images, "--top", "3"]) == 0
        lines = capfd.readouterr().out.strip().splitlines()
        assert len(lines) == len(images)
        assert f"{images[2]}: converted grayscale to RGB" in keras_vit_log
        assert f"{images[3]}: converted RGBA to RGB (alpha dropped)" in keras_vit_log
        for line, path in zip(lines, images):
            assert line.startswith(f"{path}: ")
            top = [item.rsplit(" ", 1) for item in line.split(": ", 1)[1].split(", ")]
            assert len(top) == 3 and all(name in DIGITS for name, _ in top)
            scores = [float(s) for _, s in top]
            assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1.0001
        predictions[model] = [line.split(": ", 1)[1].split(" ")[0] for line in lines]
    first = list(predictions.values())
    assert first[0] == first[1]  # .keras and SavedModel share the serving graph
    assert sum(a == b for a, b in zip(first[0], first[2])) >= 3  # int8 TFLite may flip one
    assert sum(p == str(t) for p, t in zip(first[0], labels)) >= 3


def test_cli_errors_name_the_file(digits_model, digit_files, tmp_path, capfd):
    root, images, _ = digit_files
    not_image = tmp_path / "notes.jpg"
    not_image.write_text("this is text, not a JPEG")
    assert main(["predict", digits_model, images[0], str(not_image)]) == 1
    out, err = capfd.readouterr()
    assert out == ""  # every image is read before anything is predicted
    assert f"keras-vit predict: error: {not_image} is not an image that can be read: Unknown image file format" in err

    assert main(["predict", str(not_image), images[0]]) == 1
    assert f"keras-vit predict: error: {not_image} is not a model keras-vit can run" in capfd.readouterr().err
    assert main(["predict", str(tmp_path / "nothing.tflite"), images[0]]) == 1
    assert "nothing.tflite does not exist" in capfd.readouterr().err
    with open(digits_model, "rb") as f:
        (tmp_path / "cut.keras").write_bytes(f.read()[:5000])
    assert main(["predict", str(tmp_path / "cut.keras"), images[0]]) == 1
    assert f"keras-vit predict: error: {tmp_path / 'cut.keras'} is not a valid .keras file" in capfd.readouterr().err
    os.remove(tmp_path / "cut.keras")
    assert main(["predict", digits_model, str(tmp_path / "missing.png")]) == 1
    assert "missing.png does not exist" in capfd.readouterr().err

    existing = tmp_path / "taken.tflite"
    existing.write_bytes(b"keep me")
    assert main(["export", digits_model, "--out", str(existing)]) == 1
    assert "keras-vit export: error: " in capfd.readouterr().err and existing.read_bytes() == b"keep me"
    assert main(["export", digits_model, "--quantize", "int8", "--out", str(tmp_path / "q.tflite")]) == 1
    assert "int8 quantization needs representative images" in capfd.readouterr().err
    wrong = tmp_path / "by_class"
    (wrong / "seven").mkdir(parents=True)
    _write_image(wrong / "seven" / "a.png", np.zeros((16, 16, 3), np.uint8))
    assert main(["export", digits_model, "--samples", str(wrong), "--out", str(tmp_path / "s.tflite")]) == 1
    assert "class folder(s) seven of" in capfd.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["by_class", "notes.jpg", "taken.tflite"]


def test_predict_on_real_photos_of_another_size(exports, capfd):
    """The committed CIFAR-10 JPEGs (32x32) through the 16x16 digits exports: the shrinking path."""
    paths, _ = exports
    files = sorted(str(p) for p in CIFAR10_SAMPLE.glob("*/*.jpg"))
    assert len(files) == 20
    images = np.stack([keras_vit.load_image(f) for f in files])
    saved_model = load_classifier(paths["saved_model"])
    saved = saved_model(images)["logits"]
    lite = load_classifier(paths["tflite"])(images)["logits"]
    assert saved.shape == lite.shape == (20, 10)
    # The TFLite path resizes here first (antialiased, rounded to uint8); the SavedModel's graph resizes
    # plain bilinear in float (checked against Keras in test_saved_model_takes_any_size_and_batch), which
    # flips 4 of these 20 out-of-domain photos: given the same resized pixels, the two agree.
    resized = saved_model(resize_images(images, (16, 16)))["logits"]
    assert np.mean(resized.argmax(-1) == lite.argmax(-1)) >= 0.9
    assert main(["predict", paths["tflite"], *files[:2], "--top", "1"]) == 0
    assert len(capfd.readouterr().out.strip().splitlines()) == 2


SHIPPED_HYBRID = ROOT / "saved_models" / "vit_cifar10_hybrid" / "model.keras"
SHIPPED_DEIT = ROOT / "saved_models" / "deit_cifar10" / "model.keras"


# Post-training int8 costs a ViT some agreement (LayerNorm, GELU and softmax activations); a broken
# quantization falls to chance. The ViT: 95.6% agreement, +0.03 points (its previous model, trained
# without RandAugment: 94.6%, -0.9 points). The hybrid (a BatchNorm stem):
# 98.4% agreement, -0.03 points (85.78% -> 85.75%); its earlier GroupNorm
# stem quantized worse, 91.1% and -3.0 points (the shipped exports' own reports, all 10,000 test images).
INT8_CHECK_IMAGES = 2000  # a seeded random fifth of the test set: +-0.7 points on the drop, a third of the time


@pytest.mark.slow
@pytest.mark.parametrize("shipped, min_accuracy, max_drop", [
    # recipes/cifar10.py: 72.29% in float32; a stand-in named by KERAS_VIT_CIFAR10_MODEL has no bar
    (SHIPPED_CIFAR10, None if "KERAS_VIT_CIFAR10_MODEL" in os.environ else 0.72, 0.03),
    (SHIPPED_HYBRID, 0.85, 0.03),   # recipes/cifar10_hybrid.py: 85.78% in float32 (its aim: 85%)
    (SHIPPED_DEIT, 0.80, 0.03),     # the distilled ViT started from the hybrid's Transformer (issue 39's bar: 80%)
], ids=["vit", "hybrid", "deit"])
def test_shipped_cifar10_models_int8_on_the_test_set(tmp_path, shipped, min_accuracy, max_drop):
    """Each shipped CIFAR-10 model's accuracy on all 10,000 test images (in Keras, float32), and a fresh
    int8 export of it, calibrated on training images, against Keras on a random 2,000 of them."""
    if not shipped.exists():
        pytest.skip(f"the shipped CIFAR-10 model {shipped} is not there yet (trained by its recipe)")
    if not CIFAR10_TGZ.exists():
        pytest.skip(f"the CIFAR-10 JPEGs are not at {CIFAR10_TGZ} (they are in CI's ../shared, not in a clone)")
    keras_model = load_classifier(shipped)
    images, labels, _ = keras_vit.data.load_image_set(CIFAR10_TGZ, keras_model.image_size,
                                                      class_names=keras_model.class_names, split="test")
    assert len(images) == len(labels) == 10000
    accuracy = float(np.mean(keras_model(images)["logits"].argmax(-1) == labels))
    if min_accuracy is not None:
        assert accuracy >= min_accuracy, accuracy
    subset = np.random.default_rng(0).permutation(len(images))[:INT8_CHECK_IMAGES]
    metadata = export_model(shipped, tmp_path / "model.tflite", quantize="int8", representative_images=CIFAR10_TGZ,
                            samples=(images[subset], labels[subset]), max_samples=INT8_CHECK_IMAGES)
    report = metadata["parity"]
    assert report["samples"] == INT8_CHECK_IMAGES and report["labelled"]
    assert metadata["calibration"]["source"].startswith(f"{CIFAR10_TGZ}:train")
    assert report["top1_agreement"] >= 0.90
    assert report["export_accuracy"] >= report["keras_accuracy"] - max_drop


SHIPPED_EXPORTS = ROOT / "saved_models" / "vit_cifar10" / "exports"


@pytest.mark.parametrize("name, max_diff, min_agreement", [
    ("vit_cifar10.tflite", 1e-4, 1.0),
    ("vit_cifar10_f16.tflite", 0.1, 0.95),
    ("vit_cifar10_dynamic.tflite", 1.0, 0.9),
    ("vit_cifar10_int8.tflite", None, 0.8),   # 95.6% over the 10,000 test images
    ("vit_cifar10_a16w8.tflite", None, 0.9),  # 97.7%
    ("vit_cifar10_hybrid.tflite", 1e-4, 1.0),
    ("vit_cifar10_hybrid_int8.tflite", None, 0.8),  # 98.4%
    ("deit_cifar10.tflite", 1e-4, 1.0),
    ("deit_cifar10_int8.tflite", None, 0.8),
])
def test_shipped_cifar10_exports_still_match_the_shipped_model(name, max_diff, min_agreement):
    """The TFLite files in saved_models/ are the shipped model's, not a stale export of another."""
    shipped = (SHIPPED_HYBRID if name.startswith("vit_cifar10_hybrid") else SHIPPED_DEIT if name.startswith("deit")
               else SHIPPED_CIFAR10)
    path = shipped.parent / "exports" / name if shipped is not SHIPPED_CIFAR10 else SHIPPED_EXPORTS / name
    if not path.exists() or not shipped.exists():
        pytest.skip(f"{path} or {shipped} is not in this checkout")
    files = sorted(str(p) for p in CIFAR10_SAMPLE.glob("*/*.jpg"))
    images = np.stack([keras_vit.load_image(f) for f in files])
    reference = load_classifier(shipped)
    lite = load_classifier(path)
    assert list(lite.class_names) == list(reference.class_names) == sorted(p.name for p in CIFAR10_SAMPLE.iterdir() if p.is_dir())
    expected, got = reference(images)["logits"], lite(images)["logits"]
    if max_diff is not None:
        assert np.abs(got - expected).max() <= max_diff
    assert np.mean(got.argmax(-1) == expected.argmax(-1)) >= min_agreement
    report = json.loads(pathlib.Path(metadata_path(path)).read_text())["parity"]
    assert report["samples"] == 10000 and report["labelled"]


def test_few_calibration_images_are_warned_about_with_what_to_pass(digits, digits_model, tmp_path, caplog):
    x, _ = digits["train"]
    caplog.set_level(logging.INFO, logger="keras_vit")
    export_model(digits_model, tmp_path / "q.tflite", quantize="int8", representative_images=x[:200],
                 calibration_images=20, samples=digits["test"])
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("keras_vit.")]
    assert warning.getMessage().startswith("int8 quantization calibrates on only 20 image(s)")
    assert "raise calibration_images (--calibration-images, now 20) to 100 or more" in warning.getMessage()


def test_the_format_comes_from_the_name_or_format_and_other_names_are_refused(digits, digits_model, tmp_path):
    for name in ("x.mlmodel", "d.tfjs"):
        with pytest.raises(ValueError, match=rf"{name}: keras-vit does not export \.\w+ files; it writes saved_model "
                                             r"\(a folder: a name without an extension\), tflite \(\.tflite\) or onnx"):
            export_model(digits_model, tmp_path / name)
    with pytest.raises(ValueError, match=r"m\.tflite names a tflite file, but the format is onnx"):
        export_model(digits_model, tmp_path / "m.tflite", format="onnx")
    assert os.listdir(tmp_path) == []
    # named by format=, any name is the user's choice
    metadata = export_model(digits_model, tmp_path / "d.v1", format="saved_model", samples=digits["test"])
    assert metadata["format"] == "saved_model" and (tmp_path / "d.v1" / "saved_model.pb").is_file()


@pytest.mark.backends
def test_load_classifier_runs_a_keras_file_under_every_backend(tmp_path):
    """Under JAX or torch the .keras model runs eagerly (a TensorFlow graph cannot call it), with the same
    view (keras_vit.images.model_view) and scaling as the serving graph."""
    names = [f"c{i}" for i in range(7)]
    model = randomize(tiny_vit(class_names=names))
    model.save(tmp_path / "tiny.keras")
    images = np.random.default_rng(1).integers(0, 256, (3, 45, 37, 3), dtype=np.uint8)
    classifier = load_classifier(tmp_path / "tiny.keras")
    outputs = classifier(images)
    from keras_vit.images import model_view

    viewed = model_view(images, (32, 32)).numpy()  # the one view: antialiased when shrinking
    expected = keras.ops.convert_to_numpy(model(keras_vit.preprocess_input(viewed)))
    np.testing.assert_allclose(outputs["logits"], expected, atol=1e-4)
    np.testing.assert_allclose(outputs["probabilities"].sum(-1), 1.0, atol=1e-5)
    (top,) = classifier.classify(images[:1], top=1)
    assert top[0][1] == names[int(expected[0].argmax())]


@pytest.mark.slow  # CI time (20 s; int8 in CI: test_int8_calibrates_and_checks_on_the_models_own_data)
def test_shipped_cifar10_model_exports_int8_from_a_clone_on_the_shipped_calibration_images(tmp_path, keras_vit_log):
    """The int8 export a newcomer runs from a fresh clone: 200 CIFAR-10 training images ship for calibration
    (tests/data/cifar10_calibration), enough for no warning; the check runs on the 20 test images."""
    out = tmp_path / "vit_cifar10_int8.tflite"
    assert main(["export", str(SHIPPED_CIFAR10), "--format", "tflite", "--quantize", "int8", "--out", str(out),
                 "--representative", str(DATA / "cifar10_calibration"), "--samples", str(CIFAR10_SAMPLE)]) == 0
    log = "\n".join(keras_vit_log)
    assert "calibrating on 200 images" in log and "calibrates on only" not in log, log
    metadata = json.loads(out.with_name(out.name + ".json").read_text())
    assert metadata["calibration"]["images"] == 200
    assert metadata["parity"]["samples"] == 20 and metadata["parity"]["top1_agreement"] >= 0.85


# ---------------------------------------------------------------------------------------
# Feature extractors (outputs="features"): a headless backbone's pooled features, as Keras computes them.

DINOV2_REG4 = DATA / "zoo" / "timm_dinov2_reg4"  # timm's vit_small_patch14_reg4_dinov2, tiny: 4 registers, headless


def keras_features(model, images):
    """The pooled features Keras computes on uint8 images, through the model's own view of them."""
    from keras_vit.images import model_view, view_policy

    x = np.asarray(model_view(images.astype("float32"), model.image_size, *view_policy(model)))
    return np.asarray(model.stage_model("images", "pre_logits")(keras_vit.preprocess_input(x, model=model)))


def test_a_register_backbone_exports_its_pooled_features_to_tflite_from_the_cli(tmp_path):
    model = keras_vit.load_model(DINOV2_REG4)
    assert not model.include_top and model.register_tokens == 4
    images = np.random.default_rng(0).integers(0, 256, (5, 56, 56, 3), dtype=np.uint8)
    out = tmp_path / "dinov2.tflite"
    assert main(["export", str(DINOV2_REG4), "--out", str(out), "--outputs", "features",
                 "--samples", str(CIFAR10_SAMPLE)]) == 0
    metadata = json.loads(pathlib.Path(metadata_path(out)).read_text())
    assert metadata["outputs"] == ["features"] and metadata["feature_dim"] == 32
    assert metadata["classes"] is None and metadata["class_names"] is None
    assert metadata["parity"]["max_abs_feature_diff"] <= 1e-4 and metadata["parity"]["tolerance"] == 1e-4
    exported = load_classifier(out)(images)
    assert sorted(exported) == ["features"] and exported["features"].shape == (5, 32)
    assert np.abs(exported["features"] - keras_features(model, images)).max() <= 1e-4
    with pytest.raises(ValueError, match="feature extractor"):
        load_classifier(out).classify(images)


def test_feature_exports_of_a_classifier_give_the_head_input_and_bad_requests_are_refused(tmp_path):
    model = randomize(tiny_vit(representation_size=24))
    metadata = export_model(model, tmp_path / "features_savedmodel", outputs="features")
    assert metadata["outputs"] == ["features"] and metadata["feature_dim"] == 24  # the pre-logits layer's width
    images = np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    exported = load_classifier(str(tmp_path / "features_savedmodel"))(images)["features"]
    assert np.abs(exported - keras_features(model, images)).max() <= 1e-4
    with pytest.raises(ValueError, match=r"no classification head .* outputs='features' \(--outputs features\)"):
        export_model(keras_vit.load_model(DINOV2_REG4), tmp_path / "d.tflite")
    with pytest.raises(ValueError, match="'features' stands alone"):
        export_model(model, tmp_path / "m.tflite", outputs=["features", "logits"])
    assert sorted(os.listdir(tmp_path)) == ["features_savedmodel", "features_savedmodel.json"]
