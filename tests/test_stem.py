import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy as to_numpy

from keras_vit.stem import BottleneckUnit, StdConv2D, resnet_stem, standardize_kernel

# CI runs these under TensorFlow; -m slow under jax and torch too
pytestmark = [pytest.mark.backends, pytest.mark.backends_slow]


def test_weight_standardization_uses_population_std_over_h_w_cin():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 3, 4, 5)).astype("float32")
    expected = (w - w.mean((0, 1, 2))) / (w.std((0, 1, 2)) + 1e-5)
    np.testing.assert_allclose(to_numpy(standardize_kernel(w)), expected, atol=1e-5)


def test_std_conv_is_a_same_padded_conv_with_the_standardized_kernel():
    import tensorflow as tf

    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 9, 9, 4)).astype("float32")
    conv = StdConv2D(6, 7, strides=2)
    y = to_numpy(conv(x))
    kernel = to_numpy(standardize_kernel(to_numpy(conv.kernel)))
    expected = tf.nn.conv2d(x, kernel, strides=2, padding="SAME").numpy()
    np.testing.assert_allclose(y, expected, atol=1e-4)
    assert y.shape == (2, 5, 5, 6)


def test_bottleneck_projects_only_when_channels_or_stride_change():
    unit = BottleneckUnit(32)
    assert unit(np.zeros((1, 8, 8, 128), "float32")).shape == (1, 8, 8, 128)
    assert unit.conv_proj is None
    strided = BottleneckUnit(32, strides=2)
    assert strided(np.zeros((1, 8, 8, 128), "float32")).shape == (1, 4, 4, 128)
    assert strided.conv_proj is not None
    widened = BottleneckUnit(32)
    widened(np.zeros((1, 8, 8, 64), "float32"))
    assert widened.conv_proj is not None
    # gn3 starts at zero scale, so a fresh unit without projection is ReLU(x)
    x = np.random.default_rng(2).normal(size=(1, 4, 4, 128)).astype("float32")
    np.testing.assert_allclose(to_numpy(BottleneckUnit(32)(x)), np.maximum(x, 0), atol=1e-6)


def test_stem_downsamples_4x_then_2x_per_later_stage():
    import keras

    inputs = keras.Input((64, 64, 3))
    assert resnet_stem(inputs, num_layers=()).shape == (None, 16, 16, 64)
    keras.backend.clear_session()
    assert resnet_stem(keras.Input((64, 64, 3)), num_layers=(1, 1)).shape == (None, 8, 8, 512)


def test_the_small_images_root_keeps_the_resolution():
    """root="small": a 3x3/1 conv, no max-pool; a 32x32 image enters the first stage at 32x32."""
    import keras_vit
    from keras_vit.stem import stem_stride

    assert resnet_stem(keras.Input((32, 32, 3)), num_layers=(1, 1), width_factor=0.5, root="small").shape == (
        None, 16, 16, 256)
    assert stem_stride((1, 1), "small") == 2 and stem_stride((1, 1)) == 8
    model = keras_vit.VisionTransformer(image_size=32, patch_size=2, hidden_size=32, num_layers=1, num_heads=2,
                                        mlp_dim=64, classes=3, resnet=dict(num_layers=(1, 1), width_factor=0.5,
                                                                           root="small"))
    assert model.get_layer("conv_root").kernel.shape == (3, 3, 3, 32)
    assert model.get_layer("patch_encoder").output.shape == (None, 65, 32)  # 8x8 patches + class token
    assert model.get_config()["resnet"]["root"] == "small"
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.count_params() == model.count_params()
    with pytest.raises(ValueError, match="resnet root must be one of"):
        keras_vit.VisionTransformer(image_size=32, patch_size=2, hidden_size=32, num_layers=1, num_heads=2,
                                    mlp_dim=64, resnet=dict(num_layers=(1,), root="tiny"))


def test_a_small_root_hybrid_round_trips_through_an_official_npz(tmp_path):
    """The sizes read off the .npz's shapes find the small root and a width factor below 1."""
    from conftest import randomize

    import keras_vit

    model = randomize(keras_vit.VisionTransformer(
        image_size=32, patch_size=1, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=3,
        resnet=dict(num_layers=(1, 1, 1), width_factor=0.5, root="small")))
    keras_vit.save_official_npz(model, tmp_path / "hybrid.npz")
    loaded = keras_vit.from_pretrained(tmp_path / "hybrid.npz")
    assert loaded.get_config()["resnet"] == {"num_layers": (1, 1, 1), "width_factor": 0.5, "root": "small"}
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0), atol=1e-5)


def test_a_batchnorm_stem_trains_saves_and_is_refused_by_the_official_layout(tmp_path):
    """norm="batch": plain convolutions and BatchNorm (bn_root, bn1, ...), training-mode statistics,
    a .keras round trip with the same logits; the official .npz layout (GroupNorm only) refuses it."""
    import keras_vit

    def build(norm):
        return keras_vit.VisionTransformer(
            image_size=32, patch_size=2, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=3,
            resnet=dict(num_layers=(1, 1), width_factor=0.5, root="small", norm=norm))

    model, bit = build("batch"), build("group")
    names = {w.path for w in model.weights}
    assert {"bn_root/moving_mean", "block2_unit1/bn_proj/gamma", "block1_unit1/bn3/moving_variance"} <= names
    assert not any("/gn" in "/" + n for n in names)
    assert isinstance(model.get_layer("conv_root"), keras.layers.Conv2D)
    assert isinstance(bit.get_layer("conv_root"), StdConv2D) and "norm" not in bit.get_config()["resnet"]
    assert model.get_config()["resnet"]["norm"] == "batch"
    assert model.get_layer("block1_unit1").get_config()["norm"] == "batch"
    # BatchNorm's scale and bias are trainable, its moving statistics not (and no weight decay reaches them)
    assert len(model.trainable_weights) < len(model.weights)

    images = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    moving = to_numpy(model.get_layer("bn_root").moving_mean).copy()
    model.fit(images, np.arange(8) % 3, epochs=1, verbose=0)
    assert not np.allclose(to_numpy(model.get_layer("bn_root").moving_mean), moving)  # trained in training mode

    model.save(tmp_path / "bn.keras")
    loaded = keras.saving.load_model(tmp_path / "bn.keras")
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(model(images)), atol=1e-5)
    with pytest.raises(ValueError, match="bn_root.*BatchNorm stem"):
        keras_vit.save_official_npz(model, tmp_path / "bn.npz")
    assert not (tmp_path / "bn.npz").exists()
    with pytest.raises(ValueError, match="resnet norm must be one of .*'layer'"):
        build("layer")


def test_first_stride_2_halves_the_map_before_the_first_stage_and_round_trips(tmp_path):
    """resnet first_stride=2 (the CIFAR hybrid recipe's stem): the root conv at full resolution,
    the first stage's unit at stride 2 (conv2 and the projection), the grid and the image-size
    checks follow it; a .keras round trip keeps it; the official layout refuses it."""
    import keras_vit

    def build(image_size=32, **resnet):
        return keras_vit.VisionTransformer(
            image_size=image_size, patch_size=1, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=3,
            resnet=dict(num_layers=(1, 1), width_factor=0.25, root="small", norm="batch", **resnet))

    model, plain = build(first_stride=2), build()
    assert model.get_layer("conv_root").output.shape == (None, 32, 32, 16)
    assert model.get_layer("block1_unit1").output.shape == (None, 16, 16, 64)
    assert model.get_layer("block1_unit1").get_config()["strides"] == (2, 2)
    assert model.get_layer("block2_unit1").output.shape == (None, 8, 8, 128)
    assert model.get_layer("patch_encoder").output.shape == (None, 65, 32)  # 8x8 patches and the class token
    assert plain.get_layer("patch_encoder").output.shape == (None, 257, 32)
    assert model.get_config()["resnet"]["first_stride"] == 2 and "first_stride" not in plain.get_config()["resnet"]

    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    model.save(tmp_path / "s2.keras")
    loaded = keras.saving.load_model(tmp_path / "s2.keras")
    assert loaded.get_config()["resnet"]["first_stride"] == 2
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(model(images)), atol=1e-5)

    with pytest.raises(ValueError, match="first_stride=2.*official checkpoint layout"):
        keras_vit.save_official_npz(model, tmp_path / "s2.npz")
    assert not (tmp_path / "s2.npz").exists()
    with pytest.raises(ValueError, match=r"not a multiple of the hybrid's effective patch size \(4, 4\)"):
        build(image_size=30, first_stride=2)
    with pytest.raises(ValueError, match="resnet first_stride must be 1 .*or 2, got 3"):
        build(first_stride=3)
