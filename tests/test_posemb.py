import numpy as np
import pytest
import scipy.ndimage
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.posemb import resample_position_embeddings

pytestmark = pytest.mark.backends


def _posemb(grid, dim=8, prefix=1, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(1, prefix + grid[0] * grid[1], dim)).astype("float32")


@pytest.mark.parametrize("method", ["official", "bilinear", "bicubic"])
def test_identity_when_the_grid_is_unchanged(method):
    pe = _posemb((5, 7))
    out = resample_position_embeddings(pe, (5, 7), old_grid=(5, 7), method=method)
    np.testing.assert_array_equal(out, pe)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("method", ["official", "bilinear", "bicubic"])
@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((4, 6), (9, 5)), ((12, 12), (7, 7))])
def test_class_token_untouched_and_shapes(method, old, new):
    pe = _posemb(old)
    out = resample_position_embeddings(pe, new, old_grid=old, method=method)
    assert out.shape == (1, 1 + new[0] * new[1], 8) and out.dtype == pe.dtype
    np.testing.assert_array_equal(out[:, :1], pe[:, :1])


@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((7, 7), (12, 12)), ((12, 12), (7, 7)),
                                     ((4, 6), (9, 5)), ((1, 4), (3, 8)), ((3, 3), (1, 1))])
@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_official_method_is_scipy_zoom_order_1(old, new):
    pe = _posemb(old, dim=16)
    out = resample_position_embeddings(pe, new, old_grid=old)[0, 1:].reshape(new + (16,))
    grid = pe[0, 1:].reshape(old + (16,))
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert expected.shape == out.shape
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_official_method_keeps_the_corners_and_half_pixel_does_not():
    pe = _posemb((4, 4))
    grid = pe[0, 1:].reshape(4, 4, 8)
    out = resample_position_embeddings(pe, 10)[0, 1:].reshape(10, 10, 8)
    for (i, j), (k, m) in {(0, 0): (0, 0), (0, 9): (0, 3), (9, 0): (3, 0), (9, 9): (3, 3)}.items():
        np.testing.assert_allclose(out[i, j], grid[k, m], atol=1e-6)
    half = resample_position_embeddings(pe, 10, method="bilinear")[0, 1:].reshape(10, 10, 8)
    assert not np.allclose(half[0, 1], out[0, 1], atol=1e-3)


def test_half_pixel_methods_match_tensorflow():
    import tensorflow as tf

    pe = _posemb((6, 4), dim=5)
    grid = pe[0, 1:].reshape(1, 6, 4, 5)
    bilinear = resample_position_embeddings(pe, (9, 10), old_grid=(6, 4), method="bilinear")
    np.testing.assert_allclose(bilinear[0, 1:].reshape(9, 10, 5),
                               tf.image.resize(grid, (9, 10), "bilinear")[0].numpy(), atol=1e-5)
    bicubic = resample_position_embeddings(pe, (9, 10), old_grid=(6, 4), method="bicubic")
    # upsampling: antialias=True is tf's exact Keys-cubic (a=-0.5) path, edges renormalized
    np.testing.assert_allclose(bicubic[0, 1:].reshape(9, 10, 5),
                               tf.image.resize(grid, (9, 10), "bicubic", antialias=True)[0].numpy(), atol=1e-5)


def test_gap_models_have_no_prefix_and_2d_input_works():
    pe = _posemb((3, 3), prefix=0)[0]
    out = resample_position_embeddings(pe, 6, num_prefix_tokens=0)
    assert out.shape == (36, 8)


def test_errors_name_the_values():
    with pytest.raises(ValueError, match="Unknown resampling method 'nearest'"):
        resample_position_embeddings(_posemb((2, 2)), 3, method="nearest")
    with pytest.raises(ValueError, match="Cannot tell the patch grid of 6 position embeddings"):
        resample_position_embeddings(_posemb((2, 3)), (4, 4))
    with pytest.raises(ValueError, match=r"old_grid \(3, 3\) holds 9 positions, but the embeddings have 6"):
        resample_position_embeddings(_posemb((2, 3)), (4, 4), old_grid=(3, 3))


def test_with_image_size_copies_every_weight_and_resamples(tmp_path):
    from conftest import randomize, tiny_vit

    model = randomize(tiny_vit(representation_size=16))
    bigger = keras_vit.with_image_size(model, (48, 64))
    assert bigger.input_shape == (None, 48, 64, 3) and bigger.patch_encoder.grid_size == (6, 8)
    for a, b in zip(model.weights, bigger.weights):
        assert a.path == b.path
        if a.path != "patch_encoder/pos_embedding":
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    expected = resample_position_embeddings(to_numpy(model.patch_encoder.position_embedding), (6, 8), old_grid=(4, 4))
    np.testing.assert_array_equal(to_numpy(bigger.patch_encoder.position_embedding), expected)
    same = keras_vit.with_image_size(model, 32)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(same(x)), to_numpy(model(x)))


def test_with_image_size_resamples_with_the_models_own_method_by_default():
    """A model loaded from timm (posemb_resample="torch_bicubic_antialias") moved to another size gives
    what timm gives there, not the official resampling."""
    from conftest import randomize, tiny_vit

    model = randomize(tiny_vit(posemb_resample="torch_bicubic_antialias"))
    embedding = to_numpy(model.patch_encoder.position_embedding)
    for size, grid in ((48, (6, 6)), (24, (3, 3))):  # grows and shrinks: antialiasing changes the shrinking
        moved = to_numpy(keras_vit.with_image_size(model, size).patch_encoder.position_embedding)
        own = resample_position_embeddings(embedding, grid, old_grid=(4, 4), method="torch_bicubic_antialias")
        official = resample_position_embeddings(embedding, grid, old_grid=(4, 4))
        np.testing.assert_array_equal(moved, own)
        assert np.abs(moved - official).max() > 1e-3
    official_model = randomize(tiny_vit())
    np.testing.assert_array_equal(
        to_numpy(keras_vit.with_image_size(official_model, 48).patch_encoder.position_embedding),
        resample_position_embeddings(to_numpy(official_model.patch_encoder.position_embedding), (6, 6), old_grid=(4, 4)))
