import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import ROOT, randomize, tiny_vit
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.presets import PRESETS

pytestmark = pytest.mark.backends

def test_every_preset_has_its_explicit_constructor():
    import inspect

    for variant, preset in PRESETS.items():
        constructor = getattr(keras_vit, preset.constructor)
        assert inspect.isfunction(constructor) and constructor.__module__ == "keras_vit.factory"
        assert f"ViT-{variant.split('+')[-1]}" in constructor.__doc__.splitlines()[0]
        # each constructor's own example calls it (tests/test_docs.py runs it)
        assert "Args:" in constructor.__doc__ and f">>> model = {preset.constructor}(" in constructor.__doc__
    assert keras_vit.VARIANTS == {v: p.sizes for v, p in PRESETS.items()}


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_the_variant_is_stored_in_the_config_not_guessed():
    model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=3)
    assert model.variant == "Ti/16" and model.get_config()["variant"] == "Ti/16"
    assert keras_vit.VisionTransformer.from_config(model.get_config()).variant == "Ti/16"
    assert keras_vit.create_model("ViT-Ti_16", image_size=32, classes=3, dropout_rate=0.1).variant == "Ti/16"
    # other sizes are another model: no variant, so no named weights are looked up for it
    assert keras_vit.create_model("Ti/16", image_size=32, num_layers=2).variant is None
    assert tiny_vit().variant is None
    with pytest.raises(ValueError, match=r"variant='Ti/16' does not describe this model: num_layers=2"):
        keras_vit.VisionTransformer(image_size=32, patch_size=16, hidden_size=192, num_layers=2, num_heads=3,
                                    mlp_dim=768, variant="Ti/16")


def test_create_model_accepts_official_names():
    for name in ("B/16", "ViT-B_16", "vit-b16", "R50+ViT-B_16"):
        assert keras_vit.models.canonical_variant(name) in keras_vit.VARIANTS
    with pytest.raises(ValueError, match=r"Unknown ViT variant 'B/17'.*Known variants: Ti/16"):
        keras_vit.create_model("B/17")


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("size", [(32, 32), (48, 24), (16, 40)])
def test_shapes_square_and_non_square(size):
    model = tiny_vit(image_size=size)
    images = np.zeros((2,) + size + (3,), "float32")
    assert model(images).shape == (2, 7)
    assert model.patch_encoder.grid_size == (size[0] // 8, size[1] // 8)
    features = tiny_vit(image_size=size, include_top=False)
    assert features(images).shape == (2, 32)
    unpooled = tiny_vit(image_size=size, include_top=False, pooling="unpooled")
    assert unpooled(images).shape == (2, 1 + (size[0] // 8) * (size[1] // 8), 32)


def test_gap_pooling_and_pre_logits():
    model = tiny_vit(classifier="gap", representation_size=24)
    assert "patch_encoder/cls" not in [v.path for v in model.weights]
    assert model.get_layer("pre_logits").activation.__name__ == "tanh"
    assert model(np.zeros((1, 32, 32, 3), "float32")).shape == (1, 7)
    assert tiny_vit(classifier="gap", representation_size=24, include_top=False).output_shape == (None, 24)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_head_starts_at_zero_and_keras_applications_signature():
    model = keras_vit.ViTTi16(classes=10, input_shape=(64, 64, 3))
    assert np.all(to_numpy(model.get_layer("head").kernel) == 0)
    assert model.get_layer("predictions").activation.__name__ == "softmax"
    assert np.allclose(to_numpy(model(np.zeros((1, 64, 64, 3), "float32"))), 0.1)
    features = keras_vit.ViTTi16(include_top=False, input_shape=(64, 64, 3), pooling="avg")
    assert features.output_shape == (None, 192)
    inputs = keras.Input((32, 64, 3))
    on_tensor = keras_vit.ViTS32(input_tensor=inputs, classes=3)
    assert on_tensor.input_shape == (None, 32, 64, 3) and on_tensor.output_shape == (None, 3)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_hybrid_shapes():
    model = keras_vit.VisionTransformer(
        image_size=64, patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, classes=5,
        resnet=dict(num_layers=(1, 1)))
    assert model.patch_encoder.grid_size == (8, 8)
    assert model(np.zeros((2, 64, 64, 3), "float32")).shape == (2, 5)
    root_only = keras_vit.RViTTi16(input_shape=(64, 96, 3), classes=4)
    assert root_only.patch_encoder.grid_size == (2, 3)


@pytest.mark.one_backend
def test_keras_file_round_trip_in_a_fresh_process(tmp_path):
    model = randomize(keras_vit.VisionTransformer(
        image_size=(32, 48), patch_size=1, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
        resnet=dict(num_layers=(1,)), representation_size=8))
    x = np.random.default_rng(1).normal(size=(2, 32, 48, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", model.predict(x, verbose=0))
    model.save(tmp_path / "m.keras")
    script = f"""
import numpy as np, keras, keras_vit
m = keras.models.load_model({str(tmp_path / 'm.keras')!r})
assert type(m) is keras_vit.VisionTransformer, type(m)
y = m.predict(np.load({str(tmp_path / 'x.npy')!r}), verbose=0)
np.testing.assert_array_equal(y, np.load({str(tmp_path / 'y.npy')!r}))
print("same outputs")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "same outputs" in result.stdout


def test_one_training_step_lowers_the_loss():
    keras.utils.set_random_seed(0)
    model = tiny_vit(classes=4, drop_path_rate=0.1, dropout_rate=0.1)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 4, size=16)
    before = model.evaluate(x, y, verbose=0)
    model.train_on_batch(x, y)
    after = model.evaluate(x, y, verbose=0)
    assert after < before


def test_mixed_precision_keeps_the_head_in_float32():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = tiny_vit()
    assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    assert model.get_layer("head").compute_dtype == "float32"
    assert keras.backend.standardize_dtype(model(np.zeros((1, 32, 32, 3), "float32")).dtype) == "float32"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(image_size=30), r"image_size \(30, 30\) is not a multiple of the patch size \(8, 8\)"),
        (dict(hidden_size=30), "hidden_size 30 is not divisible by num_heads 4"),
        (dict(classifier="cls"), "Unknown classifier 'cls'"),
        (dict(pooling="min"), "Unknown pooling 'min'"),
        (dict(classifier="gap", pooling="token"), "pooling='token' needs a class token"),
        (dict(image_size=36, patch_size=1, resnet=dict(num_layers=(1, 1))),
         r"image_size \(36, 36\) is not a multiple of the hybrid's effective patch size \(8, 8\)"),
        (dict(drop_path_rate=1.0), r"drop_path_rate must be in \[0, 1\), got 1.0"),
    ],
)
def test_bad_model_arguments_name_the_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_vit(**kwargs)


def test_other_channel_counts_and_bad_shapes():
    # grayscale, RGBA, multispectral: the patch projection takes every channel (weights=None)
    assert tiny_vit(channels=1).get_layer("patch_encoder").projection.kernel.shape == (8, 8, 1, 32)
    assert keras_vit.ViTTi16(input_tensor=keras.Input((32, 32, 4))).input_shape == (None, 32, 32, 4)
    with pytest.raises(ValueError, match=r"channels must be a positive int \(3 for RGB\), got 'rgb'"):
        tiny_vit(channels="rgb")
    with pytest.raises(ValueError, match=r"or \(None, None, channels\) for a model that takes any size, "
                                         r"got \(None, 224, 3\)"):
        keras_vit.ViTB16(input_shape=(None, 224, 3))


def test_attention_implementation_passes_to_the_blocks_and_round_trips():
    model = randomize(tiny_vit(attention_implementation="dot_product_attention"))
    assert {b.attention_implementation for b in model.blocks} == {"dot_product_attention"}
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.attention_implementation == "dot_product_attention"
    default = tiny_vit()
    default.set_weights(model.get_weights())
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(x, verbose=0), default.predict(x, verbose=0), atol=1e-5)
    with pytest.raises(ValueError, match="attention_implementation"):
        tiny_vit(attention_implementation="flash")


@pytest.mark.parametrize("overrides", [
    {},
    {"classifier": "gap", "representation_size": 16, "classifier_activation": "softmax"},
])
def test_the_feature_api_gives_the_full_models_values(overrides):
    model = randomize(tiny_vit(**overrides))
    images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    logits = keras.ops.convert_to_numpy(model.stage_model("images", "logits")(images))
    expected = keras.ops.convert_to_numpy(model(images))
    if overrides.get("classifier_activation"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(keras.ops.softmax(logits)), expected, atol=1e-6)
    else:
        np.testing.assert_allclose(logits, expected, atol=1e-6)
    features = model.forward_features(images)
    assert features.shape == (2, model.num_prefix_tokens + 16, 32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.forward_head(features)), logits, atol=1e-6)
    out = model.forward_intermediates(images, return_attention=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out["logits"]), logits, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out["features"]), keras.ops.convert_to_numpy(features),
                               atol=1e-6)
    assert len(out["blocks"]) == len(out["attention"]) == 2 and out["attention"][0].shape == (2, 4, out["features"].shape[1],
                                                                                              out["features"].shape[1])
    x = out["embedded"]
    for i, block in enumerate(model.blocks):
        x, probs = block(x, return_attention_scores=True)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(probs), keras.ops.convert_to_numpy(out["attention"][i]),
                                   atol=1e-6)
    pooled = model.forward_head(features, pre_logits=True)
    assert pooled.shape == (2, overrides.get("representation_size", 32))
    assert model.stage_model("images", "logits") is model.stage_model("images", "logits")  # built once
    assert len(model.layers) == len(tiny_vit(**overrides).layers)  # the sub-models add no layers


def test_the_feature_api_names_bad_cut_points():
    model = tiny_vit(include_top=False)
    with pytest.raises(ValueError, match=r"has no 'logits' \(include_top=False\)"):
        model.stage_model("images", "logits")
    with pytest.raises(ValueError, match=r"Unknown cut point 'head'"):
        model.stage_model("images", "head")
    with pytest.raises(ValueError, match=r"'features' does not come before 'embedded'"):
        model.stage_model("features", "embedded")


# --- misspelled keywords and other sizes: one clear error naming the fix (issue 35) ----------------

def test_a_misspelled_keyword_is_refused_naming_the_nearest():
    with pytest.raises(TypeError, match=r"VisionTransformer\(\) got an unexpected keyword argument `clases` "
                                        r"\(did you mean `classes`\?\)"):
        keras_vit.VisionTransformer(clases=10)
    with pytest.raises(TypeError, match=r"create_model\(\) .* `image_sise` \(did you mean `image_size`\?\)"):
        keras_vit.create_model("Ti/16", image_sise=32)
    with pytest.raises(TypeError, match=r"from_official_config\(\) .* `clases` \(did you mean `classes`\?\)"):
        keras_vit.checkpoints.from_official_config({}, clases=3)
    # nothing close: the valid keywords are listed
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument `zzz`; it takes .*`classes`"):
        keras_vit.VisionTransformer(zzz=1)
    # what keras.Model itself takes still passes (a saved config holds `trainable`)
    assert tiny_vit(trainable=False).trainable is False
    model = tiny_vit()
    with pytest.raises(TypeError, match=r"compile\(\) .* `metric` \(did you mean `metrics`\?\)"):
        model.compile(optimizer="adam", loss="mse", metric=["accuracy"])


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("variant", list(PRESETS))
def test_every_constructor_refuses_a_misspelled_keyword(variant):
    constructor = getattr(keras_vit, PRESETS[variant].constructor)
    with pytest.raises(TypeError, match=rf"{constructor.__name__}\(\) .* `clases` \(did you mean `classes`\?\)"):
        constructor(clases=10)  # refused before anything is built: quick for ViT-H/14 too
    with pytest.raises(TypeError, match=r"`hiden_size` \(did you mean `hidden_size`\?\)"):
        constructor(hiden_size=10)  # a keyword passed on to VisionTransformer


def test_a_model_of_one_size_fed_another_names_the_ways_to_other_sizes():
    model = tiny_vit(image_size=8, patch_size=4)
    images = np.zeros((2, 32, 32, 3), "float32")
    message = (r"takes 8x8 images, got 32x32 \(input shape \(2, 32, 32, 3\)\)\. Resize the "
               r"images to 8x8, or .*keras_vit\.with_image_size\(model, \(32, 32\)\).*dynamic_image_size=True")
    with pytest.raises(ValueError, match=message):
        model(images)
    with pytest.raises(ValueError, match=message):
        model.predict(images, verbose=0)
    with pytest.raises(ValueError, match=message):
        model.compile(loss="sparse_categorical_crossentropy")
        model.fit(images, np.zeros(2), verbose=0)
    # refused before Keras' loop: the model still works (under JAX an error inside it purges its variables)
    assert model.predict(np.zeros((2, 8, 8, 3), "float32"), verbose=0).shape == (2, 7)
    assert model(np.zeros((2, 8, 8, 3), "float32")).shape == (2, 7)
    # the two ways the message names both work
    assert keras_vit.with_image_size(model, (32, 32))(images).shape == (2, 7)
    assert tiny_vit(image_size=8, patch_size=4, dynamic_image_size=True)(images).shape == (2, 7)
    # a model built on an input_tensor takes its source's size (here resized inside to the ViT's 32x32)
    inputs = keras.Input((24, 24, 3))
    resizing = tiny_vit(input_tensor=keras.layers.Resizing(32, 32)(inputs))
    assert resizing(np.zeros((2, 24, 24, 3), "float32")).shape == (2, 7)
    with pytest.raises(ValueError, match=r"takes 24x24 images, got 32x32"):
        resizing(images)


def test_weights_are_loaded_by_the_factory_not_by_the_model_class(tmp_path):
    """keras.applications' layout: the builders (create_model, ViTB16, ...) build the architecture, then call
    the loader; VisionTransformer knows no files, and no registry links the two (issue 36)."""
    import keras_vit.models

    assert not hasattr(keras_vit.models, "register_weights_loader")
    source = randomize(keras_vit.create_model("Ti/16", image_size=32, classes=3, num_layers=2))
    path = tmp_path / "ti.weights.h5"
    source.save_weights(path)
    for model in (keras_vit.create_model("Ti/16", image_size=32, classes=3, num_layers=2, weights=str(path)),
                  keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=3, num_layers=2, weights=str(path))):
        for mine, theirs in zip(model.weights, source.weights):
            np.testing.assert_array_equal(to_numpy(mine), to_numpy(theirs))
    assert keras_vit.VisionTransformer(source.config, weights=None).config == source.config
    with pytest.raises(TypeError, match=r"takes no `weights`: keras_vit.create_model\(variant, weights=...\)"):
        keras_vit.VisionTransformer(source.config, weights=str(path))
