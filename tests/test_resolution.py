"""Any resolution at run time: dynamic models, in-graph position resampling, FlexiViT patch sizes."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, ROOT, randomize, tiny_vit
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit import interpolation
from keras_vit.checkpoints import from_official_config, load_official_npz, save_official_npz
from keras_vit.posemb import copy_weights, resample_patch_embedding, with_patch_size

OFFICIAL = DATA / "official"
HYBRID = dict(patch_size=1, resnet=dict(num_layers=(1,), width_factor=1))  # stem stride 4
KINDS = {"token": {}, "gap": dict(classifier="gap"), "hybrid": HYBRID}


@pytest.mark.parametrize("method", interpolation.METHODS)
def test_interpolation_matrices_equal_the_numpy_ones_eagerly_and_traced(method):
    traced = tf.function(lambda n, n_in: interpolation.interpolation_matrix(n_in, n, method),
                         reduce_retracing=True)
    for n_in, n_out in [(4, 7), (7, 4), (5, 5), (3, 1), (1, 3), (14, 24), (24, 14), (37, 61)]:
        expected = interpolation.resampling_matrix(n_in, n_out, method)
        eager = keras.ops.convert_to_numpy(interpolation.interpolation_matrix(n_in, n_out, method))
        graph = traced(tf.constant(n_out), n_in).numpy()
        assert eager.shape == expected.shape == graph.shape
        assert np.abs(eager - expected).max() <= 1e-6
        assert np.abs(graph - expected).max() <= 1e-6


@pytest.mark.backends
def test_unknown_resampling_method_is_named():
    with pytest.raises(ValueError, match="'nearest'"):
        tiny_vit(dynamic_image_size=True, posemb_resample="nearest")


@pytest.mark.backends
@pytest.mark.parametrize("kind", KINDS)
# under jax and torch "official" only: each case is a few seconds of jax's op-by-op compiling, and the
# methods differ only in keras.ops arithmetic (test_backends.py moves a bicubic dynamic model across backends)
@pytest.mark.parametrize("method", [m if m == "official" else pytest.param(m, marks=pytest.mark.one_backend)
                                    for m in interpolation.METHODS])
@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_dynamic_model_equals_a_model_built_at_each_size(kind, method):
    dynamic = randomize(tiny_vit(dynamic_image_size=True, posemb_resample=method, **KINDS[kind]))
    assert dynamic.input_shape == (None, None, None, 3)
    rng = np.random.default_rng(1)
    for size in [(32, 32), (48, 64), (16, 40)]:
        static = tiny_vit(image_size=size, **KINDS[kind])
        copy_weights(dynamic, static, method=method)
        # the in-graph embeddings equal the NumPy (float64) resampling of the stored ones
        grid = static.patch_encoder.grid_size
        in_graph = keras.ops.convert_to_numpy(dynamic.patch_encoder.position_embeddings_for(grid))
        expected = keras_vit.resample_position_embeddings(
            dynamic.patch_encoder.position_embedding.numpy(), grid, old_grid=dynamic.patch_encoder.grid_size,
            num_prefix_tokens=dynamic.num_prefix_tokens, method=method)
        assert np.abs(in_graph - expected).max() <= 1e-6
        images = rng.normal(size=(2,) + size + (3,)).astype("float32")
        assert np.abs(to_numpy(dynamic(images)) - to_numpy(static(images))).max() <= 1e-5


def test_traced_for_any_size_it_matches_eager_and_resamples_only_off_the_stored_grid():
    model = randomize(tiny_vit(dynamic_image_size=True))
    fn = tf.function(model, input_signature=[tf.TensorSpec((None, None, None, 3))])
    ops_in_graph = {op.type for op in fn.get_concrete_function().graph.get_operations()}
    assert ops_in_graph & {"If", "StatelessIf"}, "the resampling must sit in a branch of its own"
    for size in (32, 48):
        images = np.random.default_rng(size).normal(size=(2, size, size, 3)).astype("float32")
        assert np.abs(fn(images).numpy() - np.asarray(model(images))).max() <= 1e-5
    # traced at the stored size (as eager calls and static models are), no resampling op exists
    at_stored = tf.function(model).get_concrete_function(tf.TensorSpec((None, 32, 32, 3)))
    assert not {op.type for op in at_stored.graph.get_operations()} & {"OneHot", "Einsum", "If", "StatelessIf"}
    stored = model.patch_encoder.position_embedding
    assert model.patch_encoder.position_embeddings_for((4, 4)) is not None
    assert np.array_equal(keras.ops.convert_to_numpy(model.patch_encoder.position_embeddings_for((4, 4))),
                          stored.numpy())


@pytest.mark.parametrize("kind, multiple", [("token", 8), ("hybrid", 4)])
def test_a_size_off_the_patch_grid_is_refused_eagerly_and_in_a_traced_graph(kind, multiple):
    model = tiny_vit(dynamic_image_size=True, **KINDS[kind])
    bad = np.zeros((1, 34, 32, 3), "float32")
    with pytest.raises(ValueError, match=rf"image size \(34, 32\) is not a multiple of the patch size "
                                         rf"\({multiple}, {multiple}\)"):
        model(bad)
    fn = tf.function(model, input_signature=[tf.TensorSpec((None, None, None, 3))])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"not a multiple of the patch size \({multiple}, {multiple}\).*\[34\] \[32\]"):
        fn(bad)


def test_fit_over_batches_of_two_resolutions():
    model = tiny_vit(dynamic_image_size=True, classes=3)
    rng = np.random.default_rng(0)

    def batches(size):
        labels = rng.integers(0, 3, 48)
        images = rng.normal(size=(48, size, size, 3)).astype("float32") * 0.1
        images[..., 0] += labels[:, None, None]  # learnable: the class is in the red channel
        return tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)

    data = batches(32).concatenate(batches(48)).repeat(4)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(data, epochs=3, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.backends
def test_dynamic_model_under_mixed_bfloat16():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = randomize(tiny_vit(dynamic_image_size=True))
    keras.mixed_precision.set_global_policy("float32")
    reference = tiny_vit(dynamic_image_size=True)
    reference.set_weights(model.get_weights())
    images = np.random.default_rng(0).normal(size=(2, 48, 40, 3)).astype("float32")
    out = to_numpy(model(images))
    assert out.dtype == np.float32 and out.shape == (2, 7)
    assert np.abs(out - to_numpy(reference(images))).max() < 0.1


def test_keras_round_trip_in_a_fresh_process(tmp_path):
    model = randomize(tiny_vit(dynamic_image_size=True, posemb_resample="bicubic"))
    images = np.random.default_rng(0).normal(size=(2, 48, 40, 3)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "logits.npy", to_numpy(model(images)))
    model.save(tmp_path / "dyn.keras")
    code = f"""
import numpy as np, keras, keras_vit
m = keras.models.load_model({str(tmp_path / 'dyn.keras')!r})
assert m.dynamic_image_size and m.posemb_resample == "bicubic" and m.image_size == (32, 32), m.get_config()
diff = np.abs(np.asarray(m(np.load({str(tmp_path / 'images.npy')!r}))) - np.load({str(tmp_path / 'logits.npy')!r}))
print(float(diff.max()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) == 0.0


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.backends
@pytest.mark.parametrize("name", ["vit_token_prelogits", "vit_gap_current_names", "hybrid_r2_token"])
def test_official_checkpoint_in_a_dynamic_model(tmp_path, name):
    """At the base size the official logits; at a new size, the official resampling's."""
    meta = json.loads((OFFICIAL / f"{name}.json").read_text())
    io = np.load(OFFICIAL / f"{name}.io.npz")
    model = from_official_config(meta["config"], image_size=meta["image_size"], dynamic_image_size=True)
    load_official_npz(model, OFFICIAL / f"{name}.npz")
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() <= 1e-5
    base = meta["image_size"]
    new = (base * 3 // 2, base * 2)
    # the official fine-tuning code: scipy.ndimage.zoom(order=1) of the grid (equal to
    # load_official_npz's resampling into a model built at the new size: test_checkpoints)
    static = from_official_config(meta["config"], image_size=new)
    load_official_npz(static, OFFICIAL / f"{name}.npz")
    images = np.random.default_rng(0).uniform(-1, 1, (2,) + new + (3,)).astype("float32")
    assert np.abs(model.predict(images, verbose=0) - static.predict(images, verbose=0)).max() <= 1e-5
    # and the dynamic model writes the checkpoint back at its stored grid
    save_official_npz(model, tmp_path / "back.npz")
    with (np.load(tmp_path / "back.npz", allow_pickle=False) as back,
            np.load(OFFICIAL / f"{name}.npz", allow_pickle=False) as original):
        key = "Transformer/posembed_input/pos_embedding"
        assert np.array_equal(back[key], original[key])


@pytest.mark.backends
def test_with_image_size_keeps_a_dynamic_model_dynamic():
    model = randomize(tiny_vit(dynamic_image_size=True))
    moved = keras_vit.with_image_size(model, 48)
    assert moved.dynamic_image_size and moved.image_size == (48, 48) and moved.patch_encoder.grid_size == (6, 6)
    images = np.random.default_rng(0).normal(size=(1, 48, 48, 3)).astype("float32")
    assert np.abs(to_numpy(moved(images)) - to_numpy(model(images))).max() <= 1e-5


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.backends
def test_constructors_take_none_sizes():
    model = keras_vit.ViTTi16(input_shape=(None, None, 3), weights=None, classes=5, image_size=64)
    assert model.dynamic_image_size and model.image_size == (64, 64) and model.input_shape == (None, None, None, 3)
    assert model(np.zeros((1, 96, 32, 3), "float32")).shape == (1, 5)
    assert keras_vit.ViTTi16(input_shape=(None, None, 3), weights=None, include_top=False).image_size == (224, 224)
    with pytest.raises(ValueError, match=r"\(None, 64, 3\)"):
        keras_vit.ViTTi16(input_shape=(None, 64, 3), weights=None)


# -- patch size at run time (FlexiViT) ------------------------------------------------------

def _upsample_each_patch(images, patch, new_patch):
    """Each (patch x patch) patch resized bilinearly (half-pixel, no antialias) to new_patch."""
    b, h, w, c = images.shape
    gh, gw = h // patch, w // patch
    (nh, nw) = new_patch
    x = tf.reshape(tf.transpose(tf.reshape(images, (b, gh, patch, gw, patch, c)), (0, 1, 3, 2, 4, 5)),
                   (-1, patch, patch, c))
    x = tf.image.resize(x, (nh, nw), method="bilinear", antialias=False)
    x = tf.transpose(tf.reshape(x, (b, gh, gw, nh, nw, c)), (0, 1, 3, 2, 4, 5))
    return tf.reshape(x, (b, gh * nh, gw * nw, c)).numpy()


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.backends
@pytest.mark.parametrize("new_patch", [12, 16, (8, 16)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_with_patch_size_keeps_the_logits_of_upsampled_patches(new_patch, dynamic):
    model = randomize(tiny_vit(dynamic_image_size=dynamic))
    flexi = with_patch_size(model, new_patch)
    new = (new_patch, new_patch) if isinstance(new_patch, int) else new_patch
    assert flexi.patch_size == new and flexi.patch_encoder.grid_size == (4, 4)
    assert flexi.image_size == (4 * new[0], 4 * new[1]) and flexi.dynamic_image_size == dynamic
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    upsampled = _upsample_each_patch(images, 8, new)
    assert np.abs(to_numpy(flexi(upsampled)) - to_numpy(model(images))).max() <= 1e-4


@pytest.mark.backends
def test_resample_patch_embedding_methods_and_errors():
    kernel = np.random.default_rng(0).normal(size=(4, 4, 3, 5)).astype("float32")
    assert resample_patch_embedding(kernel, 4) is kernel
    pi, bilinear = resample_patch_embedding(kernel, 8), resample_patch_embedding(kernel, 8, method="bilinear")
    assert pi.shape == bilinear.shape == (8, 8, 3, 5) and pi.dtype == np.float32
    assert not np.allclose(pi, bilinear)
    # "bilinear" is tf.image.resize of the kernel itself
    resized = tf.image.resize(np.transpose(kernel.reshape(4, 4, 15), (0, 1, 2)), (8, 8), antialias=False).numpy()
    assert np.abs(bilinear.reshape(8, 8, 15) - resized).max() <= 1e-5
    with pytest.raises(ValueError, match="'nearest'"):
        resample_patch_embedding(kernel, 8, method="nearest")
    with pytest.raises(ValueError, match=r"\(4, 4, 3\)"):
        resample_patch_embedding(kernel[..., 0], 8)
    with pytest.raises(ValueError, match="new_patch_size"):
        resample_patch_embedding(kernel, 0)


# -- exports that serve several sizes ---------------------------------------------------------

def _pixels(size, n=6, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n,) + size + (3,), dtype=np.uint8)


def _keras_logits(model, pixels):
    return to_numpy(model(keras_vit.preprocess_input(pixels.astype("float32"))))


def test_tflite_with_one_signature_per_size(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    from keras_vit.export import export_model

    model = randomize(tiny_vit())  # built for 32x32: the 48x48 signature resamples in the graph
    out = tmp_path / "multi.tflite"
    metadata = export_model(model, out, image_sizes=[32, (48, 48)], samples=_pixels((32, 32), 8))
    interpreter = Interpreter(model_path=str(out))
    signatures = interpreter.get_signature_list()
    assert set(signatures) == {"serving_default", "serving_48x48"}  # serving_default: the first size
    assert interpreter.get_signature_runner("serving_default").get_input_details()["images"]["shape"].tolist() == [
        1, 32, 32, 3]
    assert metadata["signatures"] == {"serving_default": [None, 32, 32, 3], "serving_48x48": [None, 48, 48, 3]}
    for name, size in (("serving_default", (32, 32)), ("serving_48x48", (48, 48))):
        pixels = _pixels(size, 3, seed=size[0])
        got = interpreter.get_signature_runner(name)(images=pixels)["logits"]
        assert np.abs(got - _keras_logits(keras_vit.with_image_size(model, size), pixels)).max() <= 1e-4
        assert metadata["parity_by_size"][f"{size[0]}x{size[1]}"]["max_abs_logit_diff"] <= 1e-4
    # builtin ops only: the converter ran with TFLITE_BUILTINS alone, and LiteRT runs it without Flex
    assert keras_vit.load_classifier(out).image_size == (32, 32)


def test_saved_model_without_resize_runs_each_batch_at_its_own_size(tmp_path):
    from keras_vit.export import export_model

    model = randomize(tiny_vit(dynamic_image_size=True, posemb_resample="bilinear"))
    out = tmp_path / "any_size"
    metadata = export_model(model, out, resize=False, samples=_pixels((32, 32), 8))
    assert metadata["resize"] is False and set(metadata["parity_by_size"]) == {"32x32", "48x48"}
    serve = tf.saved_model.load(str(out)).signatures["serving_default"]
    for size in ((32, 32), (40, 56)):
        pixels = _pixels(size, 2, seed=size[1])
        got = serve(images=tf.constant(pixels))["logits"].numpy()
        assert np.abs(got - _keras_logits(model, pixels)).max() <= 1e-4
    graph = serve.graph.as_graph_def()
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert "PartitionedCall" in ops or "StatefulPartitionedCall" in ops or "Einsum" in ops
    assert "ResizeBilinear" not in ops and "ScaleAndTranslate" not in ops


def test_export_cli_sizes_and_bad_requests(tmp_path):
    from keras_vit.cli import main
    from keras_vit.export import export_model

    model = randomize(tiny_vit())
    model.save(tmp_path / "tiny.keras")
    samples = tmp_path / "samples"
    samples.mkdir()
    for i, image in enumerate(_pixels((32, 32), 4)):
        keras.utils.save_img(samples / f"{i}.png", image)
    assert main(["export", str(tmp_path / "tiny.keras"), "--format", "tflite", "--image-size", "32",
                 "--image-size", "64x32", "--samples", str(samples), "--out", str(tmp_path / "m.tflite")]) == 0
    written = json.loads((tmp_path / "m.tflite.json").read_text())
    assert written["signatures"] == {"serving_default": [None, 32, 32, 3], "serving_64x32": [None, 64, 32, 3]}
    with pytest.raises(ValueError, match="--no-resize"):
        export_model(model, tmp_path / "x", image_sizes=[48])
    with pytest.raises(ValueError, match="applies to SavedModels"):
        export_model(model, tmp_path / "x.tflite", resize=False)
    with pytest.raises(ValueError, match=r"36x36 are not multiples of .* patch size 8x8"):
        export_model(model, tmp_path / "y.tflite", image_sizes=[32, 36])
    assert not (tmp_path / "x").exists() and not (tmp_path / "y.tflite").exists()


@pytest.mark.backends
def test_visualize_maps_are_on_each_images_own_grid():
    from keras_vit import visualize

    model = randomize(tiny_vit(dynamic_image_size=True))
    for size, grid in (((32, 32), (4, 4)), ((48, 64), (6, 8))):
        images = np.random.default_rng(0).uniform(-1, 1, (2,) + size + (3,)).astype("float32")
        maps = visualize.attention_rollout(model, images)
        assert maps.shape == (2,) + grid and np.allclose(maps.sum(axis=(1, 2)), 1.0, atol=1e-5)
        assert visualize.mean_attention_distance(model, images).shape == (2, 4)
    with pytest.raises(ValueError, match=r"36x32 are not multiples of the patch size 8x8"):
        visualize.attention_rollout(model, np.zeros((1, 36, 32, 3), "float32"))
