"""TFLite Model Metadata in every TFLite export (read back from the file), `outputs="probabilities"`,
a16w8 quantization on real photos, and MediaPipe's ImageClassifier on the shipped CIFAR-10 model."""

import json
import os
import pathlib
import zipfile

import numpy as np
import pytest
from conftest import DATA, ROOT, randomize, tiny_vit

import keras_vit
from keras_vit.export import export_model, load_classifier, metadata_path
from keras_vit.tflite_metadata import LABELS_FILE, read_metadata

NAMES = ["ant", "bee", "cat", "dog", "elk"]
CIFAR10_SAMPLE = DATA / "cifar10_sample"
SHIPPED_CIFAR10 = pathlib.Path(os.environ.get("KERAS_VIT_CIFAR10_MODEL",
                                              ROOT / "saved_models" / "vit_cifar10" / "model.keras"))
SHIPPED_EXPORTS = ROOT / "saved_models" / "vit_cifar10" / "exports"
HYBRID_EXPORTS = ROOT / "saved_models" / "vit_cifar10_hybrid" / "exports"
DEIT_EXPORTS = ROOT / "saved_models" / "deit_cifar10" / "exports"


def _model(class_names=NAMES):
    return randomize(tiny_vit(image_size=16, patch_size=4, classes=5, class_names=class_names, name="tiny_vit"))


def _signature_outputs(path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    runner = interpreter.get_signature_runner()
    details = runner.get_output_details()
    # the subgraph's output tensors in their raw order, named by the signature
    by_index = {d["index"]: name for name, d in details.items()}
    return [by_index[d["index"]] for d in interpreter.get_output_details()]


def test_tflite_export_carries_labels_normalization_and_output_names(tmp_path):
    path = tmp_path / "tiny.tflite"
    export_model(_model(), path)
    meta = read_metadata(path)
    assert meta["name"] == "tiny_vit" and "5 classes" in meta["description"]
    assert meta["labels"] == NAMES
    (subgraph,) = meta["subgraphs"]
    assert subgraph["name"] == "serving_default"
    (image,) = subgraph["inputs"]
    assert image["name"] == "images" and image["content"] == "image" and image["color_space"] == "RGB"
    assert image["image_size"] == (16, 16)
    # uint8 pixels go in as they are: the graph scales them itself, as the description says
    assert image["normalization"] == {"mean": [0.0], "std": [1.0]}
    assert image["stats"] == {"min": [0.0], "max": [255.0]}
    assert "uint8" in image["description"] and "x / 127.5 - 1" in image["description"]
    outputs = subgraph["outputs"]
    assert [t["name"] for t in outputs] == _signature_outputs(path)
    assert sorted(t["name"] for t in outputs) == ["logits", "probabilities"]
    for tensor in outputs:
        assert tensor["associated_files"] == [{"name": LABELS_FILE, "description": tensor["associated_files"][0][
            "description"], "type": 2}]  # TENSOR_AXIS_LABELS
    assert next(t for t in outputs if t["name"] == "probabilities")["stats"] == {"min": [0.0], "max": [1.0]}
    # the label file is a stored (uncompressed) zip member appended to the model, as MediaPipe reads it
    with zipfile.ZipFile(path) as z:
        (info,) = z.infolist()
        assert info.filename == LABELS_FILE and info.compress_type == zipfile.ZIP_STORED
        assert z.read(info).decode().splitlines() == NAMES
    # and the file still runs as exported; without its JSON, the class names come from the metadata
    os.remove(metadata_path(path))
    clf = load_classifier(path)
    assert clf.class_names == NAMES
    images = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    assert clf(images)["probabilities"].shape == (3, 5)


def test_every_signature_of_a_multi_size_export_is_described(tmp_path):
    model = tiny_vit(image_size=16, patch_size=4, classes=5, class_names=NAMES, dynamic_image_size=True)
    path = tmp_path / "sizes.tflite"
    export_model(randomize(model), path, image_sizes=[16, 24])
    meta = read_metadata(path)
    sizes = {s["name"]: s["inputs"][0]["image_size"] for s in meta["subgraphs"]}
    assert sizes == {"serving_default": (16, 16), "serving_24x24": (24, 24)}
    assert meta["labels"] == NAMES


def test_probabilities_only_export_has_one_named_output(tmp_path):
    path = tmp_path / "probs.tflite"
    metadata = export_model(_model(), path, outputs="probabilities")
    assert metadata["outputs"] == ["probabilities"]
    report = metadata["parity"]
    assert "max_abs_logit_diff" not in report and report["max_abs_probability_diff"] <= 1e-4
    assert report["tolerance"] == 1e-4 and report["top1_agreement"] == 1.0
    assert _signature_outputs(path) == ["probabilities"]
    meta = read_metadata(path)
    assert [t["name"] for t in meta["subgraphs"][0]["outputs"]] == ["probabilities"]
    assert meta["labels"] == NAMES
    images = np.random.default_rng(1).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    outputs = load_classifier(path)(images)
    assert set(outputs) == {"probabilities"}
    np.testing.assert_allclose(outputs["probabilities"].sum(-1), 1.0, atol=1e-5)


def test_cli_writes_a_single_output_a16w8_classifier(tmp_path, capfd):
    from keras_vit.cli import main

    names = sorted(p.name for p in CIFAR10_SAMPLE.iterdir() if p.is_dir())
    model = randomize(tiny_vit(image_size=16, patch_size=4, classes=10, class_names=names))
    model.save(tmp_path / "tiny.keras")
    out = tmp_path / "tiny_a16w8.tflite"
    assert main(["export", str(tmp_path / "tiny.keras"), "--out", str(out), "--quantize", "a16w8",
                 "--outputs", "probabilities", "--samples", str(CIFAR10_SAMPLE),
                 "--representative", str(CIFAR10_SAMPLE)]) == 0
    metadata = json.loads(pathlib.Path(metadata_path(out)).read_text())
    assert metadata["quantization"] == "a16w8" and metadata["outputs"] == ["probabilities"]
    assert metadata["parity"]["samples"] == 20 and metadata["calibration"]["images"] == 20
    assert _signature_outputs(out) == ["probabilities"]
    meta = read_metadata(out)
    assert meta["labels"] == names and "a16w8 quantized" in meta["description"]
    from ai_edge_litert.interpreter import Interpreter

    assert np.int16 in [t["dtype"] for t in Interpreter(model_path=str(out)).get_tensor_details()]


def test_outputs_must_name_probabilities(tmp_path):
    with pytest.raises(ValueError, match=r"unknown export output\(s\) \['scores'\]"):
        export_model(_model(), tmp_path / "x.tflite", outputs=["scores"])
    with pytest.raises(ValueError, match="needs 'probabilities'"):
        export_model(_model(), tmp_path / "x.tflite", outputs="logits")
    assert os.listdir(tmp_path) == []


def test_a_model_without_class_names_gets_metadata_without_labels(tmp_path):
    path = tmp_path / "unnamed.tflite"
    export_model(_model(class_names=None), path)
    meta = read_metadata(path)
    assert meta["labels"] is None and meta["files"] == {}
    assert all(t["associated_files"] == [] for t in meta["subgraphs"][0]["outputs"])


def test_read_metadata_refuses_other_files_and_reads_none(tmp_path):
    import tensorflow as tf

    bad = tmp_path / "x.tflite"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="x.tflite is not a TFLite model"):
        read_metadata(bad)
    add_one = tf.function(lambda x: x + 1.0, input_signature=[tf.TensorSpec((1, 4), tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([add_one.get_concrete_function()], add_one)
    assert read_metadata(converter.convert()) is None  # a plain conversion has none


def _sample():
    files = sorted(CIFAR10_SAMPLE.glob("*/*.jpg"))
    return files, np.stack([keras_vit.load_image(str(f)) for f in files]), [f.parent.name for f in files]


@pytest.mark.slow  # ~25 s: the shipped CIFAR-10 model converted and quantized
def test_a16w8_agrees_with_keras_on_real_photos(tmp_path):
    if not SHIPPED_CIFAR10.exists():
        pytest.skip(f"the shipped CIFAR-10 model {SHIPPED_CIFAR10} is not in this checkout")
    path = tmp_path / "vit_a16w8.tflite"
    metadata = export_model(SHIPPED_CIFAR10, path, quantize="a16w8", samples=CIFAR10_SAMPLE,
                            representative_images=CIFAR10_SAMPLE)
    report = metadata["parity"]
    assert metadata["quantization"] == "a16w8" and metadata["calibration"]["images"] == 20
    # 20 real photos: Keras and a16w8 agree on all (10,000 test images: benchmarks/a16w8.py)
    assert report["samples"] == 20 and report["top1_agreement"] == 1.0
    assert report["export_accuracy"] == report["keras_accuracy"]
    assert report["max_abs_probability_diff"] < 0.2  # real probabilities, not an int16 softmax misread
    probabilities = load_classifier(path)(_sample()[1])["probabilities"]
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-4)
    from ai_edge_litert.interpreter import Interpreter

    dtypes = [t["dtype"] for t in Interpreter(model_path=str(path)).get_tensor_details()]
    assert dtypes.count(np.int16) > 50 and dtypes.count(np.int8) > 20  # int16 activations, int8 weights
    assert os.path.getsize(path) < 0.4 * os.path.getsize(SHIPPED_EXPORTS / "vit_cifar10.tflite")
    assert read_metadata(path)["labels"] == json.loads(pathlib.Path(metadata_path(path)).read_text())["class_names"]


@pytest.mark.slow  # ~20 s
def test_mediapipe_image_classifier_names_the_classes_of_the_shipped_model(tmp_path):
    try:
        import mediapipe as mp
        from mediapipe.tasks.python import BaseOptions
        from mediapipe.tasks.python.vision import ImageClassifier, ImageClassifierOptions
    except ImportError:
        pytest.skip("mediapipe is not installed (pip install 'keras-vit[mediapipe]')")
    if not SHIPPED_CIFAR10.exists():
        pytest.skip(f"the shipped CIFAR-10 model {SHIPPED_CIFAR10} is not in this checkout")
    path = tmp_path / "vit_cifar10_probabilities.tflite"
    export_model(SHIPPED_CIFAR10, path, outputs="probabilities", samples=CIFAR10_SAMPLE)
    _, images, _ = _sample()
    keras_probabilities = load_classifier(SHIPPED_CIFAR10)(images)["probabilities"]
    names = load_classifier(path).class_names

    def classify(**options):
        found = []
        with ImageClassifier.create_from_options(ImageClassifierOptions(
                base_options=BaseOptions(model_asset_path=str(path)), **options)) as classifier:
            for image in images:  # the pixels Keras got (MediaPipe's own JPEG decoder differs slightly)
                (head,) = classifier.classify(mp.Image(image_format=mp.ImageFormat.SRGB,
                                                       data=np.ascontiguousarray(image))).classifications
                found.append(head)
        return found

    heads = classify(max_results=3)
    assert heads[0].head_name == "probabilities"
    for head, expected in zip(heads, keras_probabilities):
        best = head.categories[0]
        assert best.category_name == names[int(expected.argmax())] and best.index == int(expected.argmax())
        assert best.score == pytest.approx(float(expected.max()), abs=1e-5)
    allowed = classify(category_allowlist=["cat", "dog"])
    assert {c.category_name for head in allowed for c in head.categories} <= {"cat", "dog"}
    assert all(head.categories for head in allowed)


@pytest.mark.parametrize("name", ["vit_cifar10.tflite", "vit_cifar10_f16.tflite", "vit_cifar10_dynamic.tflite",
                                  "vit_cifar10_int8.tflite", "vit_cifar10_a16w8.tflite",
                                  "vit_cifar10_hybrid.tflite", "vit_cifar10_hybrid_int8.tflite",
                                  "deit_cifar10.tflite", "deit_cifar10_int8.tflite"])
def test_shipped_tflite_exports_carry_their_metadata(name):
    path = (HYBRID_EXPORTS if "hybrid" in name else DEIT_EXPORTS if name.startswith("deit") else SHIPPED_EXPORTS) / name
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    meta = read_metadata(path)
    assert meta is not None, f"{path} has no TFLite Model Metadata: regenerate it with keras-vit export"
    assert meta["labels"] == sorted(p.name for p in CIFAR10_SAMPLE.iterdir() if p.is_dir())
    (subgraph,) = meta["subgraphs"]
    assert subgraph["inputs"][0]["image_size"] == (32, 32)
    assert [t["name"] for t in subgraph["outputs"]] == _signature_outputs(path)
