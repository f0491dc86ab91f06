"""Exports other runtimes take: the SavedModel's ops (what tf2onnx, tensorflowjs_converter and
coremltools convert), the opt-in TensorFlow resize op, and `--format onnx` run in ONNX Runtime.

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
from conftest import DATA, ROOT, randomize, tiny_vit

import keras_vit
from keras_vit.export import export_model, load_classifier, metadata_path
from keras_vit.serving import ServingGraph

CIFAR10_SAMPLE = DATA / "cifar10_sample"
SHIPPED_CIFAR10 = pathlib.Path(os.environ.get("KERAS_VIT_CIFAR10_MODEL",
                                              ROOT / "saved_models" / "vit_cifar10" / "model.keras"))

# Every op of the default SavedModel's signatures, each one that tf2onnx, tensorflowjs_converter and
# coremltools convert (checked by converting it with each). ScaleAndTranslate (an antialiased
# resize) and EnsureShape are the ones they refused. The model's view (keras_vit.images.model_view:
# crop and antialiased resize as two weight matrices) adds the second group: converted and run by
# tf2onnx + ONNX Runtime here (test_onnx_export_runs_the_models_view); all are in the op lists of the
# TF.js and Core ML converters, whose own tests below need their environments.
PORTABLE_OPS = {
    "AddV2", "BatchMatMulV2", "BiasAdd", "BroadcastTo", "Cast", "ConcatV2", "Const", "Conv2D", "Identity",
    "IdentityN", "MatMul", "Mean", "Mul", "Neg", "NoOp", "Pack", "Placeholder", "ReadVariableOp", "RealDiv",
    "Reshape", "ResizeBilinear", "Rsqrt", "Shape", "Softmax", "SquaredDifference", "Squeeze",
    "StatefulPartitionedCall", "StopGradient", "StridedSlice", "Sub", "Tanh", "Transpose", "Unpack",
} | {
    "Abs", "FloorDiv", "Greater", "Less", "LessEqual", "LogicalAnd", "Maximum", "Minimum", "Range", "SelectV2",
    "Sum", "ZerosLike",
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
    assert "BatchMatMulV2" in ops and "Conv2D" in ops  # the lister sees inside the nested functions
    assert "ScaleAndTranslate" not in ops and "ResizeBilinear" not in ops  # the resize is two weight matrices
    assert not ops - PORTABLE_OPS, f"ops outside the allow-list: {sorted(ops - PORTABLE_OPS)}"
    metadata = json.loads(pathlib.Path(metadata_path(tmp_path / "sm")).read_text())
    assert metadata["preprocessing"] == "bilinear resize to 32x32 (antialiased when shrinking), x / 127.5 - 1"
    assert (metadata["crop_pct"], metadata["interpolation"]) == (1.0, "bilinear")


def test_antialias_is_an_opt_in_tensorflow_only_resize(tiny_model, images, tmp_path):
    """Both resizes are the model's view, antialiased: the default as portable weight matrices, antialias=True
    with TensorFlow's ScaleAndTranslate op (TensorFlow-only, less work on large images)."""
    export_model(tiny_model, tmp_path / "plain")
    export_model(tiny_model, tmp_path / "aa", antialias=True)
    assert "ScaleAndTranslate" in signature_ops(tmp_path / "aa")
    metadata = json.loads(pathlib.Path(metadata_path(tmp_path / "aa")).read_text())
    assert metadata["preprocessing"].startswith("bilinear resize to 32x32 (antialiased when shrinking)")

    # Each is the Keras model on the same antialiased resize done outside the graph.
    graph = ServingGraph(keras.models.load_model(tiny_model))
    resized = tf.image.resize(images.astype("float32"), (32, 32), antialias=True)
    expected = graph(keras_vit.preprocess_input(resized))["logits"].numpy()
    logits = {name: load_classifier(str(tmp_path / name))(images)["logits"] for name in ("plain", "aa")}
    for name in logits:
        assert np.abs(logits[name] - expected).max() <= 1e-4, name

    with pytest.raises(ValueError, match=r"antialias \(--antialias\) applies to a SavedModel that resizes"):
        export_model(tiny_model, tmp_path / "x.tflite", antialias=True)
    with pytest.raises(ValueError, match="antialias"):
        export_model(tiny_model, tmp_path / "nr", resize=False, antialias=True)
    assert sorted(os.listdir(tmp_path)) == ["aa", "aa.json", "plain", "plain.json"]


onnxruntime = pytest.importorskip("onnxruntime", reason="ONNX export needs the onnx extra: pip install -e '.[onnx]'")
pytest.importorskip("tf2onnx", reason="ONNX export needs the onnx extra: pip install -e '.[onnx]'")


@pytest.fixture(scope="module")
def onnx_export(tiny_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    return str(path), export_model(tiny_model, path)


def test_onnx_export_matches_keras_by_name_any_batch_and_size(onnx_export, tiny_model, images):
    path, metadata = onnx_export
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    assert given.name == "images" and given.type == "tensor(uint8)"
    assert given.shape == ["batch", "height", "width", 3]
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("logits", ["batch", 7]),
                                                                 ("probabilities", ["batch", 7])]
    saved_model = pathlib.Path(path).parent / "sm"
    export_model(tiny_model, saved_model)
    saved = load_classifier(str(saved_model))
    for batch, size in [(1, (32, 32)), (6, (45, 37)), (2, (20, 64))]:
        x = images[:batch] if size == (45, 37) else np.random.default_rng(batch).integers(
            0, 256, (batch, *size, 3), dtype=np.uint8)
        logits, probabilities = session.run(["logits", "probabilities"], {"images": x})
        expected = saved(x)
        assert logits.shape == (batch, 7)
        assert np.abs(logits - expected["logits"]).max() <= 1e-4, (batch, size)
        assert np.abs(probabilities - expected["probabilities"]).max() <= 1e-5

    assert metadata["format"] == "onnx" and metadata["outputs"] == ["logits", "probabilities"]
    assert metadata["input"]["shape"] == [None, None, None, 3] and metadata["resize"] is True
    assert metadata["onnx"]["opset"] == 17 and metadata["class_names"] == [f"c{i}" for i in range(7)]
    report = metadata["parity"]
    assert report["tolerance"] == 1e-4 and report["max_abs_logit_diff"] <= 1e-4 and report["samples"] == 32
    assert json.loads(pathlib.Path(metadata_path(path)).read_text()) == metadata
    classifier = load_classifier(path)
    assert classifier.format == "onnx" and classifier.class_names == [f"c{i}" for i in range(7)]
    assert classifier.image_size == (32, 32) and not classifier.fixed_size


def test_onnx_conversion_logging_an_unsupported_op_writes_nothing(tiny_model, tmp_path, monkeypatch):
    from keras_vit.serving import ServingGraph as Graph

    # The antialiased resize's ScaleAndTranslate: tf2onnx logs it and would write a model ONNX Runtime refuses.
    write = Graph.write_saved_model
    monkeypatch.setattr(Graph, "write_saved_model",
                        lambda self, path, resize, sizes=None, antialias=False: write(self, path, resize, sizes, True))
    with pytest.raises(ValueError, match=r"ONNX conversion of tiny_vit failed: tf2onnx: .*ScaleAndTranslate.*"
                                         r"Nothing was written to .*bad\.onnx"):
        export_model(tiny_model, tmp_path / "bad.onnx")
    assert os.listdir(tmp_path) == []


def test_onnx_requests_that_do_not_apply_are_refused(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="antialias"):
        export_model(tiny_model, tmp_path / "a.onnx", antialias=True)
    with pytest.raises(ValueError, match=r"image_sizes \(--image-size\) do not apply to an ONNX export"):
        export_model(tiny_model, tmp_path / "a.onnx", image_sizes=[48])
    with pytest.raises(ValueError, match="quantization"):
        export_model(tiny_model, tmp_path / "a.onnx", quantize="float16")
    with pytest.raises(ValueError, match="looks like a file name"):
        export_model(tiny_model, tmp_path / "a.onnx", format="saved_model")
    assert os.listdir(tmp_path) == []


def test_cli_exports_onnx_and_predicts_with_it(tiny_model, tmp_path, capfd):
    from keras_vit.cli import main

    out = tmp_path / "tiny.onnx"
    assert main(["export", tiny_model, "--out", str(out)]) == 0
    assert json.loads(pathlib.Path(metadata_path(out)).read_text())["format"] == "onnx"
    files = sorted(str(p) for p in CIFAR10_SAMPLE.glob("cat/*.jpg"))
    capfd.readouterr()
    assert main(["predict", str(out), *files, "--top", "2"]) == 0
    onnx_lines = capfd.readouterr().out.strip().splitlines()
    assert main(["predict", tiny_model, *files, "--top", "2"]) == 0
    keras_lines = capfd.readouterr().out.strip().splitlines()
    assert len(onnx_lines) == 2 and [line.split(" ")[:2] for line in onnx_lines] == [
        line.split(" ")[:2] for line in keras_lines]


@pytest.mark.skipif(not SHIPPED_CIFAR10.exists(), reason=f"the shipped model {SHIPPED_CIFAR10} is not here")
def test_shipped_cifar10_model_to_onnx_on_real_images(tmp_path):
    metadata = export_model(SHIPPED_CIFAR10, tmp_path / "vit_cifar10.onnx", samples=CIFAR10_SAMPLE)
    report = metadata["parity"]
    assert report["samples"] == 20 and report["labelled"] and report["top1_agreement"] == 1.0
    assert report["max_abs_logit_diff"] <= 1e-4
    assert metadata["class_names"][3] == "cat"


SHIPPED_HYBRID = ROOT / "saved_models" / "vit_cifar10_hybrid" / "model.keras"


@pytest.mark.parametrize("model, onnx", [
    (SHIPPED_CIFAR10, ROOT / "saved_models" / "vit_cifar10" / "exports" / "vit_cifar10.onnx"),
    (SHIPPED_HYBRID, ROOT / "saved_models" / "vit_cifar10_hybrid" / "exports" / "vit_cifar10_hybrid.onnx"),
], ids=["vit", "hybrid"])
def test_shipped_onnx_export_still_matches_the_shipped_model(model, onnx):
    if not onnx.exists() or not model.exists():
        pytest.skip(f"{onnx} or {model} is not in this checkout")
    files = sorted(str(p) for p in CIFAR10_SAMPLE.glob("*/*.jpg"))
    images = np.stack([keras_vit.load_image(f) for f in files])
    reference, exported = load_classifier(model), load_classifier(onnx)
    assert exported.format == "onnx" and exported.class_names == reference.class_names
    assert np.abs(exported(images)["logits"] - reference(images)["logits"]).max() <= 1e-4
    report = json.loads(pathlib.Path(metadata_path(onnx)).read_text())["parity"]
    assert report["samples"] == 10000 and report["labelled"] and report["max_abs_logit_diff"] <= 1e-4


def _raw_output_names(path):
    """The names of a .tflite file's raw output tensors, in `get_output_details()` order."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    by_index = {d["index"]: name for name, d in interpreter.get_signature_runner().get_output_details().items()}
    return [by_index[d["index"]] for d in interpreter.get_output_details()]


def test_raw_tflite_outputs_come_logits_first_as_the_readme_says(tiny_model, tmp_path):
    """docs/export.md, "Serving": clients that read raw tensors (no signature runner) get logits, then probabilities."""
    export_model(tiny_model, tmp_path / "tiny.tflite")
    assert _raw_output_names(tmp_path / "tiny.tflite") == ["logits", "probabilities"]
    shipped = sorted((ROOT / "saved_models" / "vit_cifar10" / "exports").glob("*.tflite"))
    for path in shipped:  # each two-output file (a single-output classifier has nothing to order)
        names = _raw_output_names(path)
        assert names == ["logits", "probabilities"] or names == ["probabilities"], (path.name, names)
    assert shipped or not SHIPPED_CIFAR10.exists()


# TF.js and Core ML converters install TensorFlow 2.19 (and pin its protobuf), so they cannot live beside
# this TensorFlow: the checks below run them from a virtual environment of their own, when named.
TFJS_PYTHON = os.environ.get("KERAS_VIT_TFJS_PYTHON")    # a python with tensorflowjs (4.22 checked)
TFJS_NODE_PATH = os.environ.get("KERAS_VIT_TFJS_NODE_PATH")  # a node_modules with @tensorflow/tfjs
COREML_PYTHON = os.environ.get("KERAS_VIT_COREML_PYTHON")  # a python with coremltools and tensorflow
CLIENT_SETUP = ("python -m venv V && V/bin/pip install tensorflowjs 'ydf<0.13' (TF.js: the converter imports "
                "ydf, whose 0.16 protobuf code breaks the import; then npm install @tensorflow/tfjs in a folder "
                "and point at its node_modules), or V/bin/pip install coremltools tensorflow==2.19.0 (Core ML)")


def _quiet_run(command, **kwargs):
    import subprocess

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **kwargs.pop("env", {})}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, **kwargs)


@pytest.mark.skipif(not (TFJS_PYTHON and TFJS_NODE_PATH),
                    reason="TF.js check: set KERAS_VIT_TFJS_PYTHON and KERAS_VIT_TFJS_NODE_PATH (" + CLIENT_SETUP + ")")
def test_tfjs_converts_and_runs_the_default_saved_model(tiny_model, images, tmp_path):
    export_model(tiny_model, tmp_path / "sm")
    export_model(tiny_model, tmp_path / "aa", antialias=True)
    convert = [TFJS_PYTHON, "-m", "tensorflowjs.converters.converter", "--input_format=tf_saved_model",
               "--output_format=tfjs_graph_model", "--signature_name=serving_default"]
    refused = _quiet_run(convert + [str(tmp_path / "aa"), str(tmp_path / "aa_web")])
    assert refused.returncode != 0 and "Unsupported Ops" in refused.stderr and "ScaleAndTranslate" in refused.stderr
    done = _quiet_run(convert + [str(tmp_path / "sm"), str(tmp_path / "web")])
    assert done.returncode == 0, done.stderr[-2000:]

    saved = load_classifier(str(tmp_path / "sm"))
    script = str(DATA / "clients" / "tfjs_run.js")
    for x in (images, np.random.default_rng(2).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)):
        x.tofile(tmp_path / "x.u8")
        run = _quiet_run(["node", script, str(tmp_path / "web"), str(tmp_path / "x.u8"), *map(str, x.shape[:3])],
                         env={"NODE_PATH": TFJS_NODE_PATH})
        assert run.returncode == 0, run.stderr[-2000:]
        outputs = json.loads(run.stdout.strip().splitlines()[-1])["outputs"]
        # the converter drops the signature's output names: Identity is logits, Identity_1 probabilities
        got = {name: np.reshape(o["data"], o["shape"]) for name, o in outputs.items()}
        expected = saved(x)
        assert np.abs(got["Identity"] - expected["logits"]).max() <= 1e-4
        assert np.abs(got["Identity_1"] - expected["probabilities"]).max() <= 1e-5


COREML_CONVERT = """
import sys
import coremltools as ct
import numpy as np
try:
    model = ct.convert(sys.argv[1], source="tensorflow", convert_to="mlprogram",
                       inputs=[ct.TensorType(name="images", shape=(1, 32, 32, 3), dtype=np.int32)])
except Exception as e:
    print("FAILED", type(e).__name__, e)
    sys.exit(1)
model.save(sys.argv[2])
print("OUTPUTS", *[o.name for o in model.get_spec().description.output])
"""


@pytest.mark.skipif(not COREML_PYTHON, reason="Core ML check: set KERAS_VIT_COREML_PYTHON (" + CLIENT_SETUP + ")")
def test_coreml_converts_the_default_saved_model(tiny_model, tmp_path):
    """Conversion only: Core ML predicts on macOS alone."""
    export_model(tiny_model, tmp_path / "sm")
    export_model(tiny_model, tmp_path / "aa", antialias=True)
    refused = _quiet_run([COREML_PYTHON, "-c", COREML_CONVERT, str(tmp_path / "aa"), str(tmp_path / "aa.mlpackage")])
    assert refused.returncode == 1 and "Conversion for TF op 'ScaleAndTranslate' not implemented" in refused.stdout
    done = _quiet_run([COREML_PYTHON, "-c", COREML_CONVERT, str(tmp_path / "sm"), str(tmp_path / "vit.mlpackage")])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "OUTPUTS Identity Identity_1" in done.stdout
    assert (tmp_path / "vit.mlpackage" / "Manifest.json").is_file()


def test_a_register_backbone_exports_its_pooled_features_to_onnx(tmp_path):
    """timm's DINOv2 with registers (tiny, headless, exact GELU: TensorFlow's Erfc, mapped as 1 - Erf)."""
    from keras_vit.images import model_view, view_policy

    folder = DATA / "zoo" / "timm_dinov2_reg4"
    model = keras_vit.load_model(folder)
    path = tmp_path / "dinov2.onnx"
    metadata = export_model(str(folder), path, outputs="features")
    assert metadata["outputs"] == ["features"] and metadata["parity"]["max_abs_feature_diff"] <= 1e-4
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("features", ["batch", 32])]
    for size in [(56, 56), (70, 48)]:  # its own size, and another, resized inside as the model views it
        images = np.random.default_rng(size[1]).integers(0, 256, (3, *size, 3), dtype=np.uint8)
        x = np.asarray(model_view(images.astype("float32"), model.image_size, *view_policy(model)))
        expected = model.stage_model("images", "pre_logits")(keras_vit.preprocess_input(x, model=model))
        (features,) = session.run(["features"], {"images": images})
        assert np.abs(features - np.asarray(expected)).max() <= 1e-4, size
