"""keras_vit.interpolation against PyTorch itself: the weights and the resampled grids that
`F.interpolate(mode="bicubic")` computes with and without antialias, and what timm's
`resample_abs_pos_embed` and transformers' `interpolate_pos_encoding` give (tests/data/interpolation/,
made by make_reference.py there); then end to end, the shared dynamic fixtures' logits."""

import json

import keras
import numpy as np
import pytest
from conftest import BACKEND, DATA
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit import interpolation
from keras_vit.posemb import resample_position_embeddings

REFERENCE = DATA / "interpolation" / "torch_reference.npz"
TORCH_NAMES = {"aa": "torch_bicubic_antialias", "plain": "torch_bicubic"}
SIZES = range(1, 13)  # the reference holds torch's matrices for every n_in, n_out in 1..12
# Under jax and torch, a sample: their eager ops compile per shape (all pairs take minutes there); the
# arithmetic is the same keras.ops code on every backend.
PAIRS = ([(n_in, n_out) for n_in in SIZES for n_out in SIZES] if BACKEND == "tensorflow"
         else [(1, 3), (4, 3), (4, 7), (12, 5), (9, 1)])


@pytest.fixture(scope="module")
def ref():
    with np.load(REFERENCE, allow_pickle=False) as data:
        return dict(data)


def _cases(ref):
    return [(k, tuple(c[:2]), tuple(c[2:])) for k, c in enumerate(ref["cases"].tolist())]


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_numpy_weights_are_torchs_in_float64(ref, name):
    worst = max(np.abs(interpolation.resampling_matrix(n_in, n_out, TORCH_NAMES[name])
                       - ref[f"matrix_{name}_{n_in}_{n_out}"]).max()
                for n_in in SIZES for n_out in SIZES)
    assert worst <= 1e-12, worst


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.backends
@pytest.mark.parametrize("name", TORCH_NAMES)
def test_in_graph_weights_are_torchs_in_float32(ref, name):
    worst = 0.0
    for n_in, n_out in PAIRS:
        got = to_numpy(interpolation.interpolation_matrix(n_in, n_out, TORCH_NAMES[name]))
        assert got.dtype == np.float32 and got.shape == (n_out, n_in)
        worst = max(worst, np.abs(got - ref[f"matrix_{name}_{n_in}_{n_out}"]).max())
    assert worst <= 1e-6, worst


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_grids_resampled_as_torch_does_in_float64(ref, name):
    for k, old, new in _cases(ref):
        got = interpolation.resample_grid_numpy(ref[f"grid_{k}"], new, TORCH_NAMES[name])
        assert got.shape == new + (3,)
        assert np.abs(got - ref[f"out_{name}_f64_{k}"]).max() <= 1e-12, (old, new)


@pytest.mark.backends
@pytest.mark.parametrize("name", TORCH_NAMES)
def test_grids_resampled_in_graph_as_torch_does_in_float32(ref, name):
    cases = _cases(ref)
    for k, old, new in cases if BACKEND == "tensorflow" else cases[1::6]:
        grid = ref[f"grid_{k}"].astype("float32")
        got = to_numpy(interpolation.resample_grid(keras.ops.convert_to_tensor(grid), new, TORCH_NAMES[name]))
        assert np.abs(got - ref[f"out_{name}_f32_{k}"]).max() <= 1e-5, (old, new)


@pytest.mark.parametrize("method", TORCH_NAMES.values())
def test_in_graph_weights_at_a_symbolic_size_equal_the_eager_ones(method):
    import tensorflow as tf

    traced = tf.function(lambda n: interpolation.interpolation_matrix(9, n, method),
                         input_signature=[tf.TensorSpec((), tf.int32)])
    for n_out in (1, 4, 9, 13, 30):
        eager = to_numpy(interpolation.interpolation_matrix(9, n_out, method))
        assert np.abs(traced(tf.constant(n_out)).numpy() - eager).max() <= 1e-7


def test_position_embeddings_as_timm_and_transformers_resample_them(ref):
    """The libraries' own functions, class token kept apart: timm's resample_abs_pos_embed is the
    antialiased bicubic, transformers' ViT interpolate_pos_encoding the plain one, and its
    Dinov2WithRegisters the antialiased one."""
    checked = {"timm": 0, "hf_vit": 0, "hf_dinov2reg": 0}
    for k, old, new in _cases(ref):
        posemb = np.concatenate([ref[f"prefix_{k}"], ref[f"grid_{k}"].reshape(1, -1, 3).astype("float32")], axis=1)
        for key, method in (("timm", "torch_bicubic_antialias"), ("hf_vit", "torch_bicubic"),
                            ("hf_dinov2reg", "torch_bicubic_antialias")):
            if f"{key}_{k}" not in ref:
                continue
            got = resample_position_embeddings(posemb, new, old_grid=old, method=method)
            assert got.dtype == np.float32 and got.shape == ref[f"{key}_{k}"].shape
            assert np.abs(got - ref[f"{key}_{k}"]).max() <= 1e-5, (key, old, new)
            checked[key] += 1
    assert checked["timm"] == len(ref["cases"]) and min(checked.values()) >= 10, checked


def test_the_torch_methods_differ_from_the_tensorflow_bicubic_where_the_issue_measured():
    """4 -> 3 rows: the antialiased kernel widens (0.18 in the weights); growing, it is "bicubic";
    the plain one (a = -0.75, edges clamped) differs either way."""
    aa, tf_bicubic = (interpolation.resampling_matrix(4, 3, m) for m in ("torch_bicubic_antialias", "bicubic"))
    assert 0.17 < np.abs(aa - tf_bicubic).max() < 0.19
    assert np.abs(interpolation.resampling_matrix(4, 7, "torch_bicubic_antialias")
                  - interpolation.resampling_matrix(4, 7, "bicubic")).max() <= 1e-15
    assert np.abs(interpolation.resampling_matrix(4, 7, "torch_bicubic")
                  - interpolation.resampling_matrix(4, 7, "bicubic")).max() > 0.01
    for method in interpolation.METHODS:
        np.testing.assert_allclose(interpolation.resampling_matrix(5, 5, method), np.eye(5), atol=1e-12)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_bad_sizes_are_named(bad):
    with pytest.raises(ValueError, match=rf"n_out must be a positive int, got {bad!r}"):
        interpolation.resampling_matrix(4, bad, "torch_bicubic")


# -- end to end: ../shared/fixtures/dynamic, copied to tests/data/dynamic --------------------------

DYNAMIC = DATA / "dynamic"


def _dynamic_case(name):
    cases = json.loads((DYNAMIC / "cases.json").read_text())["cases"]
    with np.load(DYNAMIC / f"{name}.io.npz", allow_pickle=False) as data:
        return cases[name], dict(data)


@pytest.mark.backends
@pytest.mark.parametrize("name, method, misses", [("timm_dyn_token", "torch_bicubic_antialias", "bicubic"),
                                                  ("hf_interp", "torch_bicubic", "bicubic")])
def test_a_dynamic_model_gives_the_librarys_logits_at_other_sizes(name, method, misses):
    case, io = _dynamic_case(name)
    model = keras_vit.from_pretrained(DYNAMIC / name, dynamic_image_size=True, posemb_resample=method)
    for h, w in case["sizes"] + [case["control"]]:
        assert np.abs(to_numpy(model(io[f"images_{h}x{w}"])) - io[f"logits_{h}x{w}"]).max() <= 1e-4, (h, w)
    if BACKEND != "tensorflow":
        return
    # the method is what makes it match: TensorFlow's bicubic misses where the grid shrinks (timm) or
    # anywhere (transformers)
    other = keras_vit.from_pretrained(DYNAMIC / name, dynamic_image_size=True, posemb_resample=misses)
    h, w = case["sizes"][-1]
    assert np.abs(to_numpy(other(io[f"images_{h}x{w}"])) - io[f"logits_{h}x{w}"]).max() > 1e-2


def test_a_timm_checkpoint_resampled_at_load_gives_timms_logits():
    case, io = _dynamic_case("timm_load_48")
    (h, w), = case["sizes"]
    model = keras_vit.from_pretrained(DYNAMIC / "timm_load_48", image_size=(h, w), resample="torch_bicubic_antialias")
    assert np.abs(to_numpy(model(io[f"images_{h}x{w}"])) - io[f"logits_{h}x{w}"]).max() <= 1e-4
    # growing, the antialiased bicubic is TensorFlow's; PyTorch's plain bicubic misses
    miss = keras_vit.from_pretrained(DYNAMIC / "timm_load_48", image_size=(h, w), resample="torch_bicubic")
    assert np.abs(to_numpy(miss(io[f"images_{h}x{w}"])) - io[f"logits_{h}x{w}"]).max() > 1e-2
