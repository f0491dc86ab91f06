"""Exports other runtimes take: the SavedModel's ops (what tf2onnx, tensorflowjs_converter and
coremltools convert), the opt-in antialiased resize, and `--format onnx` run in ONNX Runtime.

Tiny random models (tests/conftest.py) keep these fast; the shipped CIFAR-10 model is checked on
the 20 committed test images.
"""

import json
import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from conftest import DATA, ROOT, randomize, tiny_vit
from keras_vit.export import export_model, load_classifier, metadata_path
from keras_vit.serving import ServingGraph

CIFAR10_SAMPLE = DATA / "cifar10_sample"
SHIPPED_CIFAR10 = pathlib.Path(os.environ.get("KERAS_VIT_CIFAR10_MODEL",
                                              ROOT / "saved_models" / "vit_cifar10" / "model.keras"))

# Every op of the default SavedModel's signatures, each one that tf2onnx, tensorflowjs_converter and
# coremltools convert (checked by converting it with each). ScaleAndTranslate (an antialiased
# resize) and EnsureShape are the ones they refused.
PORTABLE_OPS = {
    "AddV2", "BatchMatMulV2", "BiasAdd", "BroadcastTo", "Cast", "ConcatV2", "Const", "Conv2D", "Identity",
    "IdentityN", "MatMul", "Mean", "Mul", "Neg", "NoOp", "Pack", "Placeholder", "ReadVariableOp", "RealDiv",
    "Reshape", "ResizeBilinear", "Rsqrt", "Shape", "Softmax", "SquaredDifference", "Squeeze",
    "StatefulPartitionedCall", "StopGradient", "StridedSlice", "Sub", "Tanh", "Transpose", "Unpack",
}


def signature_ops(path):
    """The op types of every signature of a SavedModel, nested functions included."""
    loaded = tf.saved_model.load(str(path))
    ops = set()
    for signature in loaded.signatures.values():
        graph = signature.graph.as_graph_def()
        ops |= {node.op for node in graph.node}
        for function in graph.library.function:
            ops |= {node.op for node in function.node_def}
    return ops


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny ViT with random weights, saved as a .keras file."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.keras"
    randomize(tiny_vit(class_names=[f"c{i}" for i in range(7)], name="tiny_vit")).save(path)
    return str(path)


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(1).integers(0, 256, (6, 45, 37, 3), dtype=np.uint8)


def test_default_saved_model_has_only_ops_every_converter_takes(tiny_model, tmp_path):
    export_model(tiny_model, tmp_path / "sm")
    ops = signature_ops(tmp_path / "sm")
    assert "ResizeBilinear" in ops and "Conv2D" in ops  # the lister sees inside the nested functions
    assert not ops - PORTABLE_OPS, f"ops outside the allow-list: {sorted(ops - PORTABLE_OPS)}"
    metadata = json.loads(pathlib.Path(metadata_path(tmp_path / "sm")).read_text())
    assert metadata["preprocessing"] == "bilinear resize to 32x32, x / 127.5 - 1"


def test_antialias_is_an_opt_in_tensorflow_only_resize(tiny_model, images, tmp_path):
    export_model(tiny_model, tmp_path / "plain")
    export_model(tiny_model, tmp_path / "aa", antialias=True)
    assert "ScaleAndTranslate" in signature_ops(tmp_path / "aa")
    metadata = json.loads(pathlib.Path(metadata_path(tmp_path / "aa")).read_text())
    assert metadata["preprocessing"].startswith("bilinear resize to 32x32 (antialiased when shrinking)")

    # Each is the Keras model on the same resize done outside the graph.
    graph = ServingGraph(keras.models.load_model(tiny_model))
    logits = {}
    for name, antialias in (("plain", False), ("aa", True)):
        resized = tf.image.resize(images.astype("float32"), (32, 32), antialias=antialias)
        expected = graph(keras_vit.preprocess_input(resized))["logits"].numpy()
        logits[name] = load_classifier(str(tmp_path / name))(images)["logits"]
        assert np.abs(logits[name] - expected).max() <= 1e-4, name
    assert np.abs(logits["plain"] - logits["aa"]).max() > 1e-3  # the two resizes differ on shrinking

    with pytest.raises(ValueError, match=r"antialias \(--antialias\) applies to a SavedModel that resizes"):
        export_model(tiny_model, tmp_path / "x.tflite", antialias=True)
    with pytest.raises(ValueError, match="antialias"):
        export_model(tiny_model, tmp_path / "nr", resize=False, antialias=True)
    assert sorted(os.listdir(tmp_path)) == ["aa", "aa.json", "plain", "plain.json"]
