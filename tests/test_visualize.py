"""The paper's analysis figures: rollout, attention distance, position similarity, filters."""

import itertools
import json
import math
import os

import numpy as np
import pytest
from conftest import DATA, ROOT, randomize, tiny_vit

from keras_vit import visualize as viz

pytestmark = pytest.mark.backends

CIFAR_IMAGES = sorted((DATA / "cifar10").glob("*.jpg"))
# The shipped CIFAR-10 model; KERAS_VIT_CIFAR10_MODEL points the claims test at another file.
SHIPPED_CIFAR10 = os.environ.get("KERAS_VIT_CIFAR10_MODEL", str(ROOT / "saved_models" / "vit_cifar10" / "model.keras"))


def _stochastic(rng, shape):
    """Random attention probabilities: positive rows that sum to 1."""
    return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])


def _focused(shape, key):
    """Every query of every head attends to token `key` only."""
    probs = np.zeros(shape)
    probs[..., key] = 1.0
    return probs


# --------------------------------------------------------------------------- rollout math


def test_rollout_rows_sum_to_one_and_maps_to_one():
    rng = np.random.default_rng(0)
    layers = [_stochastic(rng, (2, 3, 1 + 12, 1 + 12)) for _ in range(4)]
    joint = viz.rollout(layers)
    assert joint.shape == (2, 13, 13)
    assert np.all(joint >= 0)
    np.testing.assert_allclose(joint.sum(axis=-1), 1.0, atol=1e-12)
    for source in ("token", "mean"):
        maps = viz.rollout_to_map(joint, (3, 4), num_prefix_tokens=1, source=source)
        assert maps.shape == (2, 3, 4)
        np.testing.assert_allclose(maps.sum(axis=(1, 2)), 1.0, atol=1e-12)


def test_rollout_multiplies_later_layers_on_the_left():
    # Two tokens: layer 1 attends to token 0, layer 2 to token 1. With 0.5 A + 0.5 I per
    # layer, by hand: A1' = [[1, 0], [.5, .5]], A2' = [[.5, .5], [0, 1]], A2' A1' = [[.75, .25], [.5, .5]].
    first, second = _focused((1, 1, 2, 2), 0), _focused((1, 1, 2, 2), 1)
    np.testing.assert_allclose(viz.rollout([first, second])[0], [[0.75, 0.25], [0.5, 0.5]])
    np.testing.assert_allclose(viz.rollout([second, first])[0], [[0.5, 0.5], [0.25, 0.75]])


def test_rollout_averages_heads_before_adding_the_identity():
    # Head 1 attends to token 0, head 2 to token 1: the mean is uniform, so the rollout is 0.5 U + 0.5 I.
    probs = np.concatenate([_focused((1, 1, 2, 2), 0), _focused((1, 1, 2, 2), 1)], axis=1)
    np.testing.assert_allclose(viz.rollout([probs])[0], [[0.75, 0.25], [0.25, 0.75]])


@pytest.mark.parametrize("prefix,source", [(1, "token"), (1, "mean"), (0, "mean")])
def test_uniform_attention_gives_a_uniform_map(prefix, source):
    grid = (3, 5)
    t = prefix + 15
    joint = viz.rollout([np.full((2, 4, t, t), 1.0 / t)] * 6)
    maps = viz.rollout_to_map(joint, grid, num_prefix_tokens=prefix, source=source)
    np.testing.assert_allclose(maps, np.full((2,) + grid, 1.0 / 15), rtol=1e-10)


@pytest.mark.parametrize("prefix,source", [(1, "token"), (0, "mean")])
@pytest.mark.parametrize("patch", [(0, 0), (1, 3), (2, 4)])
def test_attention_focused_on_one_patch_peaks_there(prefix, source, patch):
    grid = (3, 5)
    t = prefix + 15
    key = prefix + patch[0] * grid[1] + patch[1]
    rng = np.random.default_rng(1)
    # Random attention in the first layers, then layers that all look at one patch.
    layers = [_stochastic(rng, (1, 2, t, t)) for _ in range(2)] + [_focused((1, 2, t, t), key)] * 3
    maps = viz.rollout_to_map(viz.rollout(layers), grid, num_prefix_tokens=prefix, source=source)
    assert np.unravel_index(maps[0].argmax(), grid) == patch
    assert maps[0][patch] > 3 / 15  # over three times a uniform map's share


def test_rollout_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\(B, heads, T, T\)"):
        viz.rollout([np.ones((2, 5, 5))])
    with pytest.raises(ValueError, match="at least one layer"):
        viz.rollout([])
    with pytest.raises(ValueError, match="class token"):
        viz.rollout_to_map(np.ones((1, 4, 4)) / 4, (2, 2), num_prefix_tokens=0, source="token")
    with pytest.raises(ValueError, match=r"1 \+ 2x2"):
        viz.rollout_to_map(np.ones((1, 4, 4)) / 4, (2, 2), num_prefix_tokens=1)


# --------------------------------------------------------------------------- attention distance math


def _pairwise_mean_distance(grid, patch):
    """Mean Euclidean distance between all pairs of patch centres (self-pairs included)."""
    centres = [((r + 0.5) * patch[0], (c + 0.5) * patch[1]) for r in range(grid[0]) for c in range(grid[1])]
    return sum(math.dist(a, b) for a, b in itertools.product(centres, centres)) / len(centres) ** 2


@pytest.mark.parametrize("prefix", [0, 1])
def test_attention_to_itself_has_distance_zero(prefix):
    t = prefix + 12
    probs = np.broadcast_to(np.eye(t), (2, 3, t, t))
    np.testing.assert_array_equal(viz.attention_distance(probs, (3, 4), (16, 16), prefix), np.zeros(3))


@pytest.mark.parametrize("prefix", [0, 1])
@pytest.mark.parametrize("grid,patch", [((4, 4), (16, 16)), ((3, 5), (16, 8)), ((1, 2), (10, 10))])
def test_uniform_attention_gives_the_analytic_mean_distance(prefix, grid, patch):
    t = prefix + grid[0] * grid[1]
    probs = np.full((2, 3, t, t), 1.0 / t)
    expected = _pairwise_mean_distance(grid, patch)
    np.testing.assert_allclose(viz.attention_distance(probs, grid, patch, prefix), expected, rtol=1e-6)
    np.testing.assert_allclose(viz.uniform_attention_distance(grid, patch), expected, rtol=1e-12)
    if grid == (1, 2):
        assert expected == 5.0  # by hand: distances 0, 10, 10, 0


def test_attention_distance_is_in_pixels_and_per_head():
    # 2x1 grid of 16x8 px patches. Head 1 looks at the other patch (16 px away), head 2 at itself.
    other = np.array([[0.0, 1.0], [1.0, 0.0]])
    probs = np.stack([other, np.eye(2)])[None]
    np.testing.assert_allclose(viz.attention_distance(probs, (2, 1), (16, 8)), [16.0, 0.0])


def test_class_token_attention_is_left_out_and_the_rest_renormalized():
    # The documented choice: 90% on the class token, the rest uniform over patches, measures as uniform.
    grid, t = (3, 3), 10
    probs = np.zeros((1, 1, t, t))
    probs[..., 0] = 0.9
    probs[..., 1:] = 0.1 / 9
    np.testing.assert_allclose(viz.attention_distance(probs, grid, (4, 4), num_prefix_tokens=1),
                               _pairwise_mean_distance(grid, (4, 4)), rtol=1e-6)


# --------------------------------------------------------------------------- position embeddings


def _set_position_embedding(model, patch_embeddings, prefix_embedding=None):
    import keras

    pe = model.patch_encoder.position_embedding
    value = keras.ops.convert_to_numpy(pe).copy()
    value[0, model.num_prefix_tokens:] = patch_embeddings
    if prefix_embedding is not None:
        value[0, :model.num_prefix_tokens] = prefix_embedding
    pe.assign(value)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_position_similarity_is_the_cosine_of_patch_embeddings(classifier):
    model = tiny_vit(classifier=classifier)  # 4x4 grid, width 32
    rows = np.repeat(np.arange(4), 4)
    one_hot_rows = np.eye(32)[rows] * 3.0  # same row: parallel embeddings; other rows: orthogonal
    _set_position_embedding(model, one_hot_rows, prefix_embedding=np.ones(32) * 100)
    sim = viz.position_embedding_similarity(model)
    assert sim.shape == (4, 4, 4, 4)
    expected = (np.arange(4)[:, None, None, None] == np.arange(4)[None, None, :, None]) * np.ones((4, 4, 4, 4))
    np.testing.assert_allclose(sim, expected, atol=1e-6)


def test_smooth_position_embeddings_correlate_negatively_with_distance_random_ones_do_not():
    model = tiny_vit(patch_size=4, hidden_size=64)  # 8x8 grid
    centres = np.stack(np.meshgrid(np.arange(8), np.arange(8), indexing="ij"), -1).reshape(-1, 2)
    anchors = np.random.default_rng(0).uniform(0, 7, size=(64, 2))
    bumps = np.exp(-((centres[:, None] - anchors[None]) ** 2).sum(-1) / (2 * 2.0**2))  # (64 positions, 64 dims)
    _set_position_embedding(model, bumps)
    rho_smooth = viz.similarity_distance_correlation(viz.position_embedding_similarity(model))
    _set_position_embedding(model, np.random.default_rng(1).normal(size=(64, 64)))
    rho_random = viz.similarity_distance_correlation(viz.position_embedding_similarity(model))
    assert rho_smooth < -0.9, rho_smooth
    assert abs(rho_random) < 0.1, rho_random


# --------------------------------------------------------------------------- embedding filters


def test_filter_components_recover_a_planted_basis():
    model = tiny_vit()  # patch 8: kernel (8, 8, 3, 32)
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(192, 2)))[0].T  # two orthonormal filters
    weights = rng.normal(size=(32, 2)) * [3.0, 1.0]
    kernel = (weights @ basis + 1e-4 * rng.normal(size=(32, 192))).T.reshape(8, 8, 3, 32)
    model.patch_encoder.projection.kernel.assign(kernel.astype("float32"))
    result = viz.embedding_filter_components(model, num_components=5)
    assert result["source"] == "patch_embedding"
    components = result["components"]
    assert components.shape == (5, 8, 8, 3)
    flat = components.reshape(5, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(5), atol=1e-8)
    assert result["explained_variance_ratio"][:2].sum() > 0.999
    assert np.all(np.diff(result["explained_variance_ratio"]) <= 1e-12)
    # The top two components span the planted filters.
    np.testing.assert_allclose(np.linalg.svd(flat[:2] @ basis.T, compute_uv=False), [1.0, 1.0], atol=1e-4)
    assert np.all(flat[np.arange(5), np.abs(flat).argmax(axis=1)] > 0)  # sign fixed


def test_hybrid_filters_come_from_the_rgb_stem_and_say_so():
    model = tiny_vit(patch_size=2, resnet=dict(num_layers=(1,), width_factor=1))
    result = viz.embedding_filter_components(model)
    assert result["source"] == "conv_root"
    assert result["components"].shape == (12, 7, 7, 3)  # the default: the informative few
    assert "not RGB" in result["note"] and "weight-standardized" in result["note"]
    # a BatchNorm stem's root conv is plain: its filters are shown as they are, and the note says nothing else
    model = tiny_vit(patch_size=2, resnet=dict(num_layers=(1,), width_factor=1, norm="batch"))
    result = viz.embedding_filter_components(model)
    assert result["source"] == "conv_root" and "weight-standardized" not in result["note"]


# --------------------------------------------------------------------------- on real models


def _images(n, size=(32, 32), seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=(n,) + size + (3,)).astype("float32")


def _reference_attention(model, images, layer):
    """Block `layer`'s attention recomputed in numpy from its weights and its input."""
    import keras

    source = "encoder_dropout" if layer == 0 else f"encoderblock_{layer - 1}"
    x = keras.ops.convert_to_numpy(keras.Model(model.input, model.get_layer(source).output)(images)).astype(np.float64)
    block = model.blocks[layer]
    gamma, beta = (keras.ops.convert_to_numpy(w) for w in block.norm1.weights)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    x = (x - mean) / np.sqrt(var + 1e-6) * gamma + beta

    def heads(dense):
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
        y = x @ kernel + bias
        return y.reshape(y.shape[0], y.shape[1], block.num_heads, -1).transpose(0, 2, 1, 3)

    q, k = heads(block.query), heads(block.key)
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_attention_probabilities_are_the_blocks_own_and_the_model_is_not_copied(classifier):
    model = randomize(tiny_vit(classifier=classifier, num_layers=3))
    images = _images(5)
    nodes = [len(block._inbound_nodes) for block in model.blocks]
    count = len(model.layers)
    probs = viz.attention_probabilities(model, images, batch_size=2)
    assert len(probs) == 3
    t = model.num_prefix_tokens + 16
    for i, p in enumerate(probs):
        assert p.shape == (5, 4, t, t) and p.dtype == np.float32
        np.testing.assert_allclose(p, _reference_attention(model, images, i), atol=2e-5)
    # Shared weights, no new graph nodes, no new layers: nothing of the model was cloned.
    assert [len(block._inbound_nodes) for block in model.blocks] == nodes
    assert len(model.layers) == count


@pytest.mark.parametrize("classifier,pooling,source", [("token", None, "token"), ("gap", None, "mean"),
                                                       ("token", "gap", "mean")])
def test_model_functions_are_the_array_functions_on_the_models_attention(classifier, pooling, source):
    model = randomize(tiny_vit(classifier=classifier, pooling=pooling, include_top=pooling is None))
    images = _images(3)
    probs = viz.attention_probabilities(model, images)
    maps = viz.attention_rollout(model, images, batch_size=2)
    expected = viz.rollout_to_map(viz.rollout(probs), (4, 4), model.num_prefix_tokens, source)
    np.testing.assert_allclose(maps, expected, atol=1e-6)
    distances = viz.mean_attention_distance(model, images, batch_size=2)
    assert distances.shape == (2, 4)
    expected = [viz.attention_distance(p, (4, 4), (8, 8), model.num_prefix_tokens) for p in probs]
    np.testing.assert_allclose(distances, expected, rtol=1e-5)


def test_hybrid_and_non_square_models_measure_in_input_pixels():
    # Stem stride 4 and 2x2 patches on its feature map: a patch covers 8x8 input pixels.
    hybrid = randomize(tiny_vit(patch_size=2, resnet=dict(num_layers=(1,), width_factor=1)))
    assert viz.patch_pixels(hybrid) == (8.0, 8.0)
    images = _images(2)
    distances = viz.mean_attention_distance(hybrid, images)
    max_distance = viz.patch_centre_distances((4, 4), (8, 8)).max()
    assert distances.shape == (2, 4) and np.all((distances > 0) & (distances < max_distance))
    assert viz.attention_rollout(hybrid, images).shape == (2, 4, 4)

    wide = randomize(tiny_vit(image_size=(32, 48), patch_size=8))
    images = _images(2, size=(32, 48))
    assert viz.attention_rollout(wide, images).shape == (2, 4, 6)
    assert viz.position_embedding_similarity(wide).shape == (4, 6, 4, 6)


def test_bad_images_and_models_are_refused_with_the_reason():
    model = tiny_vit()
    with pytest.raises(ValueError, match=r"\(B, 32, 32, 3\).*\(2, 64, 64, 3\)"):
        viz.attention_rollout(model, _images(2, size=(64, 64)))
    with pytest.raises(ValueError, match="preprocess_input"):
        viz.mean_attention_distance(model, np.full((1, 32, 32, 3), 200, np.uint8))
    with pytest.raises(ValueError, match="VisionTransformer"):
        viz.position_embedding_similarity(object())


# --------------------------------------------------------------------------- figures and the CLI


def _saved_model(path, **overrides):
    model = randomize(tiny_vit(patch_size=4, classes=10, class_names=[p.stem for p in CIFAR_IMAGES], **overrides))
    model.save(path)
    return model


@pytest.mark.one_backend  # figures and files from the arrays that the tests above check on every backend
def test_cli_writes_the_four_figures_and_their_data(tmp_path, capsys):
    from matplotlib.image import imread

    import keras_vit
    from keras_vit import cli

    model = _saved_model(tmp_path / "m.keras")
    images = [str(CIFAR_IMAGES[3]), str(CIFAR_IMAGES[8])]
    out = tmp_path / "figs"
    assert cli.main(["visualize", str(tmp_path / "m.keras"), "--image", *images, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / f"{name}.png") for name in viz.FIGURES]
    for name in viz.FIGURES:
        png = imread(out / f"{name}.png")
        assert png.ndim == 3 and min(png.shape[:2]) > 200 and png[..., :3].std() > 0.05  # drawn, not blank
        assert (out / f"{name}.npz").stat().st_size and json.loads((out / f"{name}.json").read_text())

    pixels = viz.load_images(images, (32, 32))
    inputs = np.asarray(keras_vit.preprocess_input(pixels))
    with np.load(out / "attention_rollout.npz", allow_pickle=False) as data:
        np.testing.assert_allclose(data["maps"], viz.attention_rollout(model, inputs), atol=1e-6)
        assert data["upsampled"].shape == (2, 32, 32)
        assert list(data["names"]) == ["cat.jpg", "ship.jpg"]
    with np.load(out / "attention_distance.npz", allow_pickle=False) as data:
        np.testing.assert_allclose(data["mean_distance_px"], viz.mean_attention_distance(model, inputs), rtol=1e-5)
    with np.load(out / "position_similarity.npz", allow_pickle=False) as data:
        np.testing.assert_allclose(data["similarity"], viz.position_embedding_similarity(model), atol=1e-12)
    summary = json.loads((out / "position_similarity.json").read_text())
    assert summary["spearman_similarity_vs_grid_distance"] == pytest.approx(
        viz.similarity_distance_correlation(viz.position_embedding_similarity(model)))
    rollout = json.loads((out / "attention_rollout.json").read_text())
    assert rollout["source"] == "class token" and rollout["images"][0]["prediction"] in model.class_names
    distance = json.loads((out / "attention_distance.json").read_text())
    assert distance["patch_size_px"] == [4.0, 4.0] and len(distance["mean_distance_px"]) == 2


def test_save_figures_without_images_writes_the_weight_figures(tmp_path):
    model = tiny_vit(classifier="gap", patch_size=2, resnet=dict(num_layers=(1,), width_factor=1))
    written = viz.save_figures(model, tmp_path)
    assert sorted(k for k in written if k != "summary") == ["embedding_filters", "position_similarity"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.{kind}" for name in ("embedding_filters", "position_similarity") for kind in ("json", "npz", "png"))
    assert json.loads((tmp_path / "embedding_filters.json").read_text())["source"] == "conv_root"


def test_load_images_resizes_to_the_model_and_makes_rgb(tmp_path):
    import tensorflow as tf

    gray = np.tile(np.linspace(0, 255, 20, dtype=np.uint8), (10, 1))[..., None]  # 10x20, one channel
    (tmp_path / "gray.png").write_bytes(tf.io.encode_png(gray).numpy())
    pixels = viz.load_images([tmp_path / "gray.png", CIFAR_IMAGES[0]], (32, 48))
    assert pixels.shape == (2, 32, 48, 3) and pixels.dtype == np.uint8
    assert np.all(pixels[0, ..., 0] == pixels[0, ..., 2])  # gray stays gray in RGB
    assert pixels[0, 16, 0, 0] < 20 and pixels[0, 16, -1, 0] > 235  # the left-to-right ramp survives resizing


def test_cli_errors_name_the_file(tmp_path, capsys):
    from keras_vit import cli

    _saved_model(tmp_path / "m.keras")
    not_an_image = tmp_path / "notes.jpg"
    not_an_image.write_text("not a picture")
    not_a_model = tmp_path / "junk.keras"
    not_a_model.write_text("not a model")
    cases = [
        ([str(tmp_path / "missing.keras")], "missing.keras"),
        ([str(not_a_model)], "junk.keras"),
        ([str(tmp_path / "m.keras"), "--image", str(tmp_path / "nowhere.png")], "nowhere.png"),
        ([str(tmp_path / "m.keras"), "--image", str(CIFAR_IMAGES[0]), str(not_an_image)], "notes.jpg"),
    ]
    for args, name in cases:
        assert cli.main(["visualize", *args, "--out", str(tmp_path / "figs")]) == 1
        err = capsys.readouterr().err  # progress lines ("keras_vit: loaded ...") may come first
        last = err.strip().splitlines()[-1]
        assert last.startswith("keras-vit visualize: error: ") and name in last, err


# --------------------------------------------------------------------------- the paper's claims


@pytest.mark.skipif(not os.path.isfile(SHIPPED_CIFAR10),
                    reason=f"{SHIPPED_CIFAR10} is not in this checkout yet (the shipped CIFAR-10 model is trained "
                    "separately); the paper's two claims are measured on it once it is")
@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_the_papers_claims_hold_on_the_shipped_cifar10_model(record_property):
    import keras_vit

    model = viz.load_model(SHIPPED_CIFAR10)
    rho = viz.similarity_distance_correlation(viz.position_embedding_similarity(model))
    images = np.asarray(keras_vit.preprocess_input(viz.load_images(CIFAR_IMAGES, model.image_size)))
    distances = viz.mean_attention_distance(model, images)
    first, last = float(distances[0].mean()), float(distances[-1].mean())
    record_property("position_similarity_spearman", rho)
    record_property("attention_distance_first_last_px", (first, last))
    print(f"\n{SHIPPED_CIFAR10}: Spearman(similarity, grid distance) = {rho:+.3f}; mean attention distance "
          f"first layer {first:.2f} px, last layer {last:.2f} px (uniform "
          f"{viz.uniform_attention_distance(model.patch_encoder.grid_size, viz.patch_pixels(model)):.2f} px)")
    # Section 4.5: closer patches have more similar position embeddings ...
    assert rho < -0.3, f"position-embedding similarity does not fall with grid distance (Spearman {rho:+.3f})"
    # ... and attention reaches further in deep layers than in the first.
    assert last > first, f"mean attention distance of the last layer {last:.2f} px <= the first {first:.2f} px"


# --------------------------------------------------------------------------- register and distillation tokens

ZOO = DATA / "zoo"
# (fixture, tokens before the patches, position-table rows before the patches' rows), from tests/data/zoo/cases.json
PREFIXED = [("timm_dinov2_reg4", 5, 0), ("hf_dinov2_reg", 5, 1), ("timm_deit_distilled", 2, 2)]


def _class_token_rollout(attentions, prefix):
    """The class token's rollout over the patch tokens alone, written out for this test (not viz.rollout)."""
    import keras

    joint = None
    for probs in attentions:
        a = keras.ops.convert_to_numpy(probs).astype(np.float64).mean(axis=1) + np.eye(probs.shape[-1])
        a /= a.sum(-1, keepdims=True)
        joint = a if joint is None else a @ joint
    row = joint[:, 0, prefix:]  # the class token's row; the registers' (and distillation token's) columns left out
    return row / row.sum(-1, keepdims=True)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("name, prefix, posemb_prefix", PREFIXED)
def test_register_and_distillation_models_map_the_class_token_over_the_patches_only(name, prefix, posemb_prefix):
    import keras_vit

    model = keras_vit.load_model(ZOO / name)
    assert model.num_prefix_tokens == prefix and model.num_posemb_prefix_tokens == posemb_prefix
    images = keras_vit.preprocess_input(viz.load_images(CIFAR_IMAGES[:2], model.image_size), model=model)
    gh, gw = model.patch_encoder.grid_size
    maps = viz.attention_rollout(model, images)
    attentions = model.forward_intermediates(images, return_attention=True)["attention"]
    assert attentions[0].shape[-1] == prefix + gh * gw
    assert maps.shape == (2, gh, gw)
    np.testing.assert_allclose(maps.reshape(2, -1), _class_token_rollout(attentions, prefix), atol=1e-6)
    # attention distance over patch queries and keys only: the registers' rows and columns are not patches
    distance = viz.mean_attention_distance(model, images)
    assert distance.shape == (model.num_layers, model.num_heads) and np.all(distance >= 0)
    assert np.all(distance <= viz.patch_centre_distances((gh, gw), viz.patch_pixels(model)).max())
    # one similarity map per patch position: the class token's row of the table (where it has one) left out
    assert viz.position_embedding_similarity(model).shape == (gh, gw, gh, gw)


def test_visualize_command_draws_a_register_model_from_its_hub_folder(tmp_path):
    """The figures of a DINOv2-with-registers checkpoint, normalized with ImageNet's mean and std (inputs
    past [-1, 1]), read by `keras-vit visualize` straight from the timm folder; the photos come back."""
    from keras_vit.cli import main

    out = tmp_path / "figs"
    assert main(["visualize", str(ZOO / "timm_dinov2_reg4"), "--image", *map(str, CIFAR_IMAGES[:2]),
                 "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == sorted(f"{f}.png" for f in viz.FIGURES)
    rollout = json.loads((out / "attention_rollout.json").read_text())
    assert rollout["source"] == "class token" and rollout["grid_size"] == [4, 4]
    with np.load(out / "attention_rollout.npz") as saved:
        expected = viz.load_images(CIFAR_IMAGES[:2], (56, 56), model=viz.load_model(ZOO / "timm_dinov2_reg4"))
        assert np.abs(saved["images"].astype(int) - np.round(expected).astype(int)).max() <= 1


def test_the_numbers_import_without_matplotlib():
    """keras_vit.analysis is the figures' numbers without matplotlib: importing it (and computing) loads none."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, keras_vit.analysis as a\n"
            "a.rollout([np.full((1, 1, 5, 5), 0.2)])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
    assert viz.attention_rollout is __import__("keras_vit.analysis").analysis.attention_rollout  # re-exported
