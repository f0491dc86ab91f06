"""applications: the official input scaling, ImageNet / own class names, image files, and loading
saved models with plain keras / tf.keras after `import keras_vit`."""

import json
import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, ROOT, randomize, tiny_vit

import keras_vit

pytestmark = pytest.mark.backends

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SHIPPED = {
    "vit_cifar10": os.environ.get("KERAS_VIT_CIFAR10_MODEL", ROOT / "saved_models" / "vit_cifar10" / "model.keras"),
    "vit_cifar10_hybrid": ROOT / "saved_models" / "vit_cifar10_hybrid" / "model.keras",
    "vit_digits": ROOT / "saved_models" / "vit_digits" / "model.keras",
    "deit_cifar10": ROOT / "saved_models" / "deit_cifar10" / "model.keras",
}


def test_preprocess_input_is_the_official_scaling():
    pixels = np.array([[0, 51, 127, 255]], "uint8")
    expected = pixels.astype("float64") / 127.5 - 1.0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(keras_vit.preprocess_input(pixels)), expected, atol=1e-7)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras_vit.preprocess_input(pixels.astype("float32"))), expected, atol=1e-7)
    assert keras_vit.preprocess_input(np.zeros((2, 8, 8, 3), "uint8")).shape == (2, 8, 8, 3)


def test_imagenet_class_names_are_shipped_with_their_license():
    names = keras_vit.imagenet_class_names()
    assert len(names) == 1000
    assert names[0] == "tench" and names[1] == "goldfish" and names[281] == "tabby cat" and names[999] == "toilet paper"
    data = os.path.join(os.path.dirname(keras_vit.__file__), "resources")
    with open(os.path.join(data, "imagenet_classes.json")) as f:
        shipped = json.load(f)
    wnids = [wnid for wnid, _ in shipped["classes"]]
    assert len(set(wnids)) == 1000 and all(re.fullmatch(r"n\d{8}", w) for w in wnids)
    assert wnids == sorted(wnids)  # the ImageNet-1k class order is the sorted WordNet ids
    assert "imagenet-classes" in shipped["source"]
    with open(os.path.join(data, "imagenet_classes.LICENSE")) as f:
        license_text = f.read()
    assert "MIT License" in license_text and "Illia Volkov, Nikita Kisel" in license_text


def test_decode_predictions_with_imagenet_names():
    preds = np.full((2, 1000), 0.0001, "float32")
    preds[0, [281, 285, 3]] = [0.7, 0.2, 0.05]
    preds[1, 0] = 0.9
    decoded = keras_vit.decode_predictions(preds, top=3)
    assert [(i, n) for i, n, _ in decoded[0]] == [("n02123045", "tabby cat"), ("n02124075", "Egyptian Mau"),
                                                   ("n01491361", "tiger shark")]
    assert decoded[0][0][2] == pytest.approx(0.7)
    assert len(decoded[1]) == 3 and decoded[1][0][:2] == ("n01440764", "tench")
    assert len(keras_vit.decode_predictions(tf.constant(preds))[0]) == 5


def test_decode_predictions_with_own_class_names():
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]], "float32")
    decoded = keras_vit.decode_predictions(probs, top=5, class_names=["cat", "dog", "bird"])
    assert decoded[0] == [(1, "dog", pytest.approx(0.6)), (2, "bird", pytest.approx(0.3)),
                          (0, "cat", pytest.approx(0.1))]
    model = tiny_vit(classes=3, class_names=["cat", "dog", "bird"])
    assert keras_vit.decode_predictions(probs, top=1, class_names=model)[1] == [(0, "cat", pytest.approx(0.5))]

    with pytest.raises(ValueError, match="preds have 3 classes, not ImageNet-1k's 1000"):
        keras_vit.decode_predictions(probs)
    with pytest.raises(ValueError, match="class_names has 2 names but preds have 3 classes"):
        keras_vit.decode_predictions(probs, class_names=["cat", "dog"])
    with pytest.raises(ValueError, match=r"has no class_names"):
        keras_vit.decode_predictions(probs, class_names=tiny_vit(classes=3))
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        keras_vit.decode_predictions(probs[0], class_names=["cat", "dog", "bird"])


def _write(path, array, encode=tf.io.encode_png):
    tf.io.write_file(str(path), encode(array))
    return str(path)


def test_load_image_converts_grayscale_and_rgba(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (10, 12, 3), dtype=np.uint8)
    image = keras_vit.load_image(_write(tmp_path / "rgb.png", rgb))
    assert image.dtype == np.uint8 and image.shape == (10, 12, 3) and np.array_equal(image, rgb)
    gray = keras_vit.load_image(_write(tmp_path / "gray.png", rgb[..., :1]))
    assert gray.shape == (10, 12, 3) and np.array_equal(gray[..., 2], rgb[..., 0])
    rgba = np.concatenate([rgb, np.full((10, 12, 1), 7, np.uint8)], axis=-1)
    assert np.array_equal(keras_vit.load_image(_write(tmp_path / "rgba.png", rgba)), rgb)
    gray_alpha = keras_vit.load_image(_write(tmp_path / "la.png", rgba[..., 1:3]))
    assert np.array_equal(gray_alpha[..., 0], rgb[..., 1])
    jpeg = keras_vit.load_image(_write(tmp_path / "gray.jpg", rgb[..., :1], tf.io.encode_jpeg))
    assert jpeg.shape == (10, 12, 3)
    cat = keras_vit.load_image(DATA / "cifar10_sample" / "cat" / "0511.jpg")
    assert cat.shape == (32, 32, 3) and cat.std() > 10


def test_load_image_resizes_like_the_exports(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    small = keras_vit.load_image(_write(tmp_path / "a.png", rgb), size=(20, 15))
    expected = tf.image.resize(rgb[None].astype("float32"), (20, 15), antialias=True)[0].numpy()
    assert small.shape == (20, 15, 3) and np.max(np.abs(small - expected)) <= 0.5
    assert keras_vit.load_image(tmp_path / "a.png", size=64).shape == (64, 64, 3)


def test_load_image_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"image .*missing\.png does not exist"):
        keras_vit.load_image(tmp_path / "missing.png")
    with pytest.raises(FileNotFoundError, match="is a folder, not an image file"):
        keras_vit.load_image(tmp_path)
    text = tmp_path / "readme.jpg"
    text.write_text("not a picture")
    with pytest.raises(ValueError, match=rf"{re.escape(str(text))} is not an image that can be read: "
                                         r"Unknown image file format\."):
        keras_vit.load_image(text)
    with open(DATA / "cifar10_sample" / "cat" / "0511.jpg", "rb") as f:
        (tmp_path / "cut.jpg").write_bytes(f.read()[:200])
    with pytest.raises(ValueError, match=r"cut\.jpg is not an image that can be read: .*JPEG"):
        keras_vit.load_image(tmp_path / "cut.jpg")


@pytest.mark.one_backend  # tf.keras is TensorFlow's
def test_keras_and_tf_keras_load_models_after_import_keras_vit(tmp_path):
    model = randomize(tiny_vit(classes=3, class_names=["cat", "dog", "bird"], classifier_activation="softmax"))
    path = tmp_path / "vit.keras"
    model.save(path)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    expected = model(images).numpy()
    # A fresh interpreter: only `import keras_vit` registers the layers, no custom_objects.
    script = f"""
import json, numpy as np, keras, tensorflow as tf
import keras_vit
images = np.load({str(tmp_path / 'images.npy')!r})
a = tf.keras.models.load_model({str(path)!r})
b = keras.models.load_model({str(path)!r})
print(json.dumps({{"type": type(a).__name__, "class_names": a.class_names,
                  "a": a(images).numpy().tolist(), "b": b(images).numpy().tolist()}}))
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["type"] == "VisionTransformer" and loaded["class_names"] == ["cat", "dog", "bird"]
    np.testing.assert_allclose(loaded["a"], expected, atol=1e-6)
    np.testing.assert_allclose(loaded["b"], expected, atol=1e-6)


@pytest.mark.one_backend  # tf.keras; under jax and torch test_visualize loads the shipped CIFAR-10 model
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_models_load_with_keras_and_tf_keras(name):
    path = pathlib.Path(SHIPPED[name])
    if not path.exists():
        pytest.skip(f"the shipped model {path} is not there yet (trained by its recipe)")
    for load in (keras.models.load_model, tf.keras.models.load_model):
        model = load(path)
        assert isinstance(model, keras_vit.VisionTransformer) and model.include_top
        assert model.class_names is not None and len(model.class_names) == model.classes
    if "cifar10" in name:
        assert model.class_names == CIFAR10_CLASSES and model.image_size == (32, 32)
        files = sorted((DATA / "cifar10_sample").glob("*/*.jpg"))
        images = np.stack([keras_vit.load_image(f) for f in files])
        labels = [CIFAR10_CLASSES.index(f.parent.name) for f in files]
        preds = model.predict(keras_vit.preprocess_input(images), verbose=0)
        decoded = keras_vit.decode_predictions(preds, top=1, class_names=model)
        correct = sum(d[0][0] == y for d, y in zip(decoded, labels))
        assert correct >= 6, f"{correct}/20 of the committed CIFAR-10 test images (chance: 2)"


def test_pixel_scaling_and_its_inverse_are_one_definition():
    from keras_vit.applications import scale_pixels, to_pixels

    pixels = np.arange(256, dtype="uint8")
    np.testing.assert_array_equal(to_pixels(scale_pixels(pixels.astype("float32"))), pixels)
    np.testing.assert_array_equal(to_pixels(keras.ops.convert_to_numpy(keras_vit.preprocess_input(pixels))), pixels)
    assert to_pixels(np.array([-1.5, 1.5])).tolist() == [0, 255]  # clipped, not wrapped
    from keras_vit import data

    scaled = data.to_model_range(tf.constant(pixels)).numpy()
    np.testing.assert_array_equal(scaled, scale_pixels(pixels.astype("float32")))


def test_to_rgb_is_shared_by_files_and_arrays():
    from keras_vit import data
    from keras_vit.applications import IMAGE_EXTENSIONS, to_rgb

    gray = np.arange(12, dtype="uint8").reshape(1, 2, 2, 3)[..., :1]
    assert to_rgb(gray, "gray").shape == (1, 2, 2, 3) and np.all(to_rgb(gray, "gray")[..., 2] == gray[..., 0])
    assert to_rgb(np.zeros((2, 2, 4), "uint8"), "rgba").shape == (2, 2, 3)
    with pytest.raises(ValueError, match="five has 5 channels"):
        to_rgb(np.zeros((2, 2, 5)), "five")
    # a training folder reads what `predict` reads
    assert data.IMAGE_EXTENSIONS is IMAGE_EXTENSIONS and ".webp" in IMAGE_EXTENSIONS


def test_keras_files_load_one_way_with_one_error(tmp_path):
    from keras_vit.checkpoints import load_keras_model
    from keras_vit.visualize import load_model

    model = tiny_vit()
    model.save(tmp_path / "vit.keras")
    assert isinstance(load_keras_model(tmp_path / "vit.keras"), keras_vit.VisionTransformer)
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    other.save(tmp_path / "dense.keras")
    for load in (load_keras_model, load_model):
        with pytest.raises(ValueError, match=r"dense\.keras holds a Sequential, not a keras_vit\.VisionTransformer"):
            load(tmp_path / "dense.keras")
    (tmp_path / "junk.keras").write_text("no zip")
    with pytest.raises(ValueError, match=r"junk\.keras is not a \.keras model archive"):
        load_keras_model(tmp_path / "junk.keras")
    with pytest.raises(FileNotFoundError, match=r"missing\.keras does not exist"):
        load_keras_model(tmp_path / "missing.keras")
