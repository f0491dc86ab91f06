"""keras-vit's constructors against the keras.applications contract.

The checks follow what Keras' own application suite (keras/src/applications/applications_test.py)
expects of every keras.applications model, plus the constructors' signature and the
preprocess_input / decode_predictions formats, so the contract cannot drift (keras.saving's serialization
round trip of every constructor is in tests/test_contract.py). The smallest variants
run at 32x32 (one to four patches) to stay fast. Where keras-vit differs on purpose, the test
says so and pins the difference:
- `weights` defaults to None, not "imagenet" (no download on construction; R26+B/32 has no release);
- include_top=False with pooling=None gives the classifier's pooled representation (B, D), not a
  feature map: a ViT's tokens have no spatial map to return (pooling="unpooled" gives (B, T, D));
- models are channels_last whatever keras.config.image_data_format() says;
- input_shape may leave both sizes free, (None, None, C): a model of any size, its position embeddings
  stored at 224 and resampled in the graph; one free size alone is refused.
"""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import randomize

import keras_vit
from keras_vit.checkpoints import resolve_weights, save_official_npz
from keras_vit.presets import PRESETS

CONSTRUCTORS = ["ViTTi16", "ViTS16", "ViTS32", "ViTB8", "ViTB16", "ViTB32", "ViTL16", "ViTL32", "ViTH14",
                "R50ViTB16", "R26ViTS32", "R26ViTB32", "RViTTi16"]
# (constructor, width of the pooled representation): the smallest plain, wide-patch and hybrid variants
SMALL = [(keras_vit.ViTTi16, 192), (keras_vit.ViTS32, 384), (keras_vit.RViTTi16, 192)]
SIZE = (32, 32, 3)
ids = [c.__name__ for c, _ in SMALL]


@pytest.mark.parametrize("name", CONSTRUCTORS)
def test_signature_is_the_keras_applications_one(name):
    reference = inspect.signature(keras.applications.ResNet50).parameters
    ours = inspect.signature(getattr(keras_vit, name)).parameters
    assert list(ours)[: len(reference)] == list(reference)
    for param, ref in reference.items():
        if param == "weights":  # a difference on purpose: no download unless asked for
            assert ours[param].default is None
        elif param == "name":  # None stands for the constructor's own name (as MobileNetV2)
            assert ours[param].default is None
        else:
            assert ours[param].default == ref.default, param
    assert all(p.kind == p.VAR_KEYWORD for p in list(ours.values())[len(reference):])


@pytest.mark.parametrize("app,width", SMALL, ids=ids)
def test_top_classes_activation_and_name(app, width):
    model = app(weights=None, input_shape=SIZE, classes=10)
    assert model.output_shape == (None, 10)
    assert model.layers[-1].activation.__name__ == "softmax"
    assert model.name == app.__name__.lower()
    probs = keras.ops.convert_to_numpy(model(np.zeros((2,) + SIZE, "float32")))
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, atol=1e-5)
    logits = app(weights=None, input_shape=SIZE, classifier_activation=None, name="mine")
    assert logits.output_shape == (None, 1000) and logits.name == "mine"
    assert logits.layers[-1].name == "head" and logits.layers[-1].activation.__name__ == "linear"


@pytest.mark.parametrize("app,width", SMALL, ids=ids)
def test_no_top_pooling_none_avg_max(app, width):
    for pooling in (None, "avg", "max"):
        model = app(weights=None, include_top=False, pooling=pooling, input_shape=SIZE)
        assert model.output_shape == (None, width), pooling


def test_max_pooling_is_the_maximum_over_the_patch_tokens():
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    tokens = randomize(keras_vit.ViTTi16(include_top=False, pooling="unpooled", input_shape=(64, 64, 3)))
    pooled = keras_vit.ViTTi16(include_top=False, pooling="max", input_shape=(64, 64, 3))
    pooled.set_weights(tokens.get_weights())
    all_tokens = tokens(x).numpy()
    assert all_tokens.shape == (2, 17, 192)
    np.testing.assert_allclose(pooled(x).numpy(), all_tokens[:, 1:].max(axis=1), atol=1e-6)
    gap = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2,
                                      mlp_dim=32, classifier="gap", include_top=False, pooling="max")
    assert gap.output_shape == (None, 32)
    clone = keras_vit.VisionTransformer.from_config(pooled.get_config())
    assert clone.pooling == "max" and clone.output_shape == (None, 192)


@pytest.mark.parametrize("app,width", SMALL, ids=ids)
def test_no_top_variable_input_channels(app, width):
    for channels in (1, 4):
        model = app(weights=None, include_top=False, input_shape=SIZE[:2] + (channels,))
        assert model.input_shape == (None,) + SIZE[:2] + (channels,)
        assert model.output_shape == (None, width)
        assert model(np.zeros((1,) + SIZE[:2] + (channels,), "float32")).shape == (1, width)


def test_channels_round_trip_through_keras_files(tmp_path):
    model = randomize(keras_vit.RViTTi16(weights=None, input_shape=(32, 32, 4), classes=3))
    assert model.get_layer("conv_root").kernel.shape == (7, 7, 4, 64)
    model.save(tmp_path / "rgba.keras")
    loaded = keras.models.load_model(tmp_path / "rgba.keras")
    assert loaded.input_shape == (None, 32, 32, 4) and loaded.channels == 4
    x = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 4)).astype("float32")
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=r"channels must be a positive int \(3 for RGB\), got 0"):
        keras_vit.create_model("Ti/16", image_size=32, channels=0)


@pytest.mark.parametrize("app,width", SMALL, ids=ids)
def test_no_top_custom_input_shape(app, width):
    model = app(weights=None, include_top=False, input_shape=(32, 64, 3))
    assert model.input_shape == (None, 32, 64, 3) and model.output_shape[-1] == width


@pytest.mark.parametrize("app,width", SMALL, ids=ids)
def test_no_top_custom_input_tensor(app, width):
    inputs = keras.Input(shape=(64, 64, 4), name="custom_input")
    x = keras.layers.Conv2D(3, (2, 2), padding="valid", strides=(2, 2))(inputs)
    model = app(weights=None, include_top=False, input_tensor=x)
    assert model.output_shape[-1] == width
    assert model.inputs[0].name == "custom_input" and model.input_shape == (None, 64, 64, 4)
    with pytest.raises(ValueError, match=r"input_shape \(48, 48, 3\) does not match input_tensor's shape"):
        app(weights=None, include_top=False, input_tensor=x, input_shape=(48, 48, 3))


def test_channels_last_whatever_the_global_data_format():
    keras.config.set_image_data_format("channels_first")
    try:
        model = keras_vit.RViTTi16(weights=None, input_shape=(64, 64, 3), classes=5)
        plain = keras_vit.ViTTi16(weights=None, input_shape=(32, 32, 3), include_top=False)
    finally:
        keras.config.set_image_data_format("channels_last")
    assert model.input_shape == (None, 64, 64, 3) and plain.output_shape == (None, 192)
    assert model(np.zeros((1, 64, 64, 3), "float32")).shape == (1, 5)


def test_none_sizes_give_a_model_of_any_size():
    """keras.applications' `input_shape=(None, None, 3)`: position embeddings stored at 224."""
    model = keras_vit.ViTTi16(weights=None, input_shape=(None, None, 3), classes=5)
    assert model.input_shape == (None, None, None, 3) and model.image_size == (224, 224)
    assert model(np.zeros((1, 32, 48, 3), "float32")).shape == (1, 5)
    with pytest.raises(ValueError, match=r"\(None, None, channels\) for a model that takes any size"):
        keras_vit.ViTTi16(weights=None, input_shape=(None, 32, 3))


# --- weights ---------------------------------------------------------------------------------------

# weights="imagenet": which file each variant resolves to (presets.py says why)
EXPECTED_IMAGENET = {
    "Ti/16": "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "S/16": "augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "S/32": "augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "B/8": "augreg/B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224",
    "B/16": "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224",
    "B/32": "augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "L/16": "augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224",
    "R+Ti/16":
        "augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "R26+S/32":
        "augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.03-res_224",
    "R50+L/32":
        "augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224",
    "L/32": "imagenet21k+imagenet2012/ViT-L_32",
    "H/14": "imagenet21k+imagenet2012/ViT-H_14",
    "R50+B/16": "imagenet21k+imagenet2012/R50+ViT-B_16",
}


def test_imagenet_resolves_to_the_imagenet_1k_release_of_each_variant(monkeypatch):
    monkeypatch.delenv("KERAS_VIT_WEIGHTS_URL", raising=False)
    assert {v for v, p in PRESETS.items() if p.imagenet} | {"R26+B/32"} == set(keras_vit.VARIANTS)
    for variant, stem in EXPECTED_IMAGENET.items():
        assert resolve_weights("imagenet", variant) == f"https://storage.googleapis.com/vit_models/{stem}.npz"
    with pytest.raises(ValueError, match=r"No 'imagenet' weights were released for R26\+B/32"):
        resolve_weights("imagenet", "R26+B/32")
    with pytest.raises(ValueError, match=r"No 'imagenet' weights were released for R26\+B/32"):
        keras_vit.R26ViTB32(weights="imagenet", input_shape=(32, 32, 3))


def _mirror(tmp_path, monkeypatch):
    """A local mirror of the release (KERAS_VIT_WEIGHTS_URL) and a fresh Keras cache: no network."""
    mirror = tmp_path / "mirror"
    monkeypatch.setenv("KERAS_VIT_WEIGHTS_URL", mirror.as_uri())
    (tmp_path / "keras_home").mkdir()
    monkeypatch.setattr(keras.src.backend.config, "keras_home", lambda: str(tmp_path / "keras_home"))
    return mirror


def test_imagenet_weights_download_the_resolved_file_and_load(tmp_path, monkeypatch):
    mirror = _mirror(tmp_path, monkeypatch)
    path = mirror / (EXPECTED_IMAGENET["Ti/16"] + ".npz")
    path.parent.mkdir(parents=True)
    # a Ti/16 ImageNet-1k "release" written by keras-vit itself, at 32x32 to stay small
    released = randomize(keras_vit.ViTTi16(input_shape=SIZE, classifier_activation=None))
    save_official_npz(released, path)
    model = keras_vit.ViTTi16(weights="imagenet", input_shape=SIZE)
    cached = tmp_path / "keras_home" / "models" / "vit_models" / "augreg" / path.name
    assert cached.is_file()
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), released.get_layer("head").kernel.numpy())
    np.testing.assert_array_equal(model.patch_encoder.position_embedding.numpy(),
                                  released.patch_encoder.position_embedding.numpy())


def test_rgb_weights_into_another_channel_count_are_refused_before_downloading(tmp_path, monkeypatch):
    _mirror(tmp_path, monkeypatch)  # an empty mirror: a download would fail with another message
    with pytest.raises(ValueError, match=r"weights for 3-channel images \(RGB\), but the model 'vitti16' takes "
                                         r"1 channel\(s\): build it with input_shape=\(height, width, 3\)"):
        keras_vit.ViTTi16(weights="imagenet", input_shape=(32, 32, 1))
    with pytest.raises(ValueError, match="Unknown weights 'imagenet1k'"):
        keras_vit.ViTTi16(weights="imagenet1k", input_shape=(32, 32, 1))
    with pytest.raises(FileNotFoundError, match="weights file missing.weights.h5 does not exist"):
        keras_vit.ViTTi16(weights="missing.weights.h5", input_shape=SIZE)


# --- preprocess_input and decode_predictions ---------------------------------------------------------

def test_preprocess_input_matches_keras_tf_mode_numpy_in_numpy_out():
    reference = keras.applications.mobilenet_v2.preprocess_input  # Keras' "tf" mode: x / 127.5 - 1
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (2, 8, 8, 3)).astype("uint8")
    for x in (pixels, pixels.astype("float16"), pixels.astype("float32"), pixels.astype("float64"),
              np.moveaxis(pixels, -1, 1).astype("float32")):
        ours = keras_vit.preprocess_input(x.copy())
        theirs = reference(x.copy())
        assert type(ours) is np.ndarray and ours.dtype == theirs.dtype, x.dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-3 if x.dtype == np.float16 else 1e-6)
    float_input = pixels.astype("float32")
    keras_vit.preprocess_input(float_input)
    assert float_input.max() > 1  # never written over (Keras would)
    channels_first = np.moveaxis(pixels, -1, 1)
    np.testing.assert_array_equal(keras_vit.preprocess_input(channels_first, data_format="channels_first"),
                                  np.moveaxis(keras_vit.preprocess_input(pixels, data_format="channels_last"), -1, 1))
    assert type(keras_vit.preprocess_input(pixels.tolist())) is np.ndarray
    with pytest.raises(ValueError, match="data_format must be 'channels_first', 'channels_last' or None, got 'NHWC'"):
        keras_vit.preprocess_input(pixels, data_format="NHWC")


def test_preprocess_input_tensor_in_tensor_out():
    pixels = np.random.default_rng(1).integers(0, 256, (2, 8, 8, 3)).astype("uint8")
    expected = pixels.astype("float32") / 127.5 - 1
    for dtype, want in (("uint8", "float32"), ("int32", "float32"), ("float32", "float32"),
                        ("float16", "float16"), ("bfloat16", "bfloat16")):
        y = keras_vit.preprocess_input(tf.constant(pixels.astype("float32"), dtype=dtype), data_format="channels_last")
        assert tf.is_tensor(y) and y.dtype.name == want, dtype
        np.testing.assert_allclose(tf.cast(y, "float32").numpy(), expected, atol=1e-2 if want != "float32" else 1e-6)
    keras_reference = keras.applications.mobilenet_v2.preprocess_input(tf.constant(pixels, "float32"))
    np.testing.assert_allclose(keras_vit.preprocess_input(tf.constant(pixels, "float32")).numpy(),
                               keras_reference.numpy(), atol=1e-6)
    symbolic = keras_vit.preprocess_input(keras.Input((8, 8, 3), dtype="uint8"))
    assert keras.backend.is_keras_tensor(symbolic) and symbolic.dtype == "float32"


def test_decode_predictions_format():
    preds = np.random.default_rng(2).random((3, 1000)).astype("float32")
    decoded = keras_vit.decode_predictions(preds, top=4)
    assert isinstance(decoded, list) and len(decoded) == 3
    for row, scores in zip(decoded, preds):
        assert isinstance(row, list) and len(row) == 4
        assert all(isinstance(t, tuple) and len(t) == 3 for t in row)
        wnid, name, score = row[0]
        assert wnid.startswith("n") and isinstance(name, str) and isinstance(score, float)
        assert score == pytest.approx(scores.max()) and [t[2] for t in row] == sorted((t[2] for t in row), reverse=True)
    assert keras_vit.decode_predictions(preds)[0][0] == decoded[0][0]  # top=5 by default, as Keras
    assert len(keras_vit.decode_predictions(preds)[0]) == 5
    with pytest.raises(ValueError, match=r"\(batch, classes\)"):
        keras_vit.decode_predictions(preds[0])
