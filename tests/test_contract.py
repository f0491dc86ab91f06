"""The contract every model keras-vit builds or loads keeps (issue 36 item 5), one parametrized test per
clause over every case: each of the paper's 14 presets (keras_vit.presets.PRESETS, built by its own
constructor) and each family keras-vit loads (official .npz, timm and transformers ViTs, DeiT distilled,
DINOv2 with and without registers, CLIP, SigLIP, BEiT, MAE: the tiny random checkpoints of tests/data).

- it builds: a VisionTransformer with the output its source promises (a preset at its real size has the
  official implementation's parameter count, counted without allocating a weight);
- its config round-trips: get_config -> JSON -> keras deserialization gives the same config and, with
  the same weights, the same outputs;
- a `.keras` file gives back the same config, the same weights and identical outputs;
- it takes another input size as docs/resolution.md promises: `with_image_size` moves it, a dynamic copy
  (`dynamic_image_size=True`) takes the size directly and agrees with it (BEiT refuses both, naming why);
- all of it under every Keras backend (`backends`: the jax and torch runs take this file).

Only the public API (keras_vit.*), so the contract outlives refactors of the modules behind it. Presets
are built one block deep at two patches a side with dropout and stochastic depth on (those are the
presets' own layers; depth repeats the same block), 10 classes; the parity of each family with its
library is tests/test_zoo.py's, the official numerics tests/test_checkpoints.py's.
"""

import json

import keras
import numpy as np
import pytest
from conftest import DATA
from keras.ops import convert_to_numpy as to_numpy

import keras_vit

pytestmark = pytest.mark.backends

PRESETS = keras_vit.presets.PRESETS
ZOO = json.loads((DATA / "zoo" / "cases.json").read_text())["cases"]
# family case -> (checkpoint, its reference outputs); every zoo checkpoint, the plain ViTs, the official layouts
FAMILIES = {
    **{f"official/{name}": (DATA / "official" / f"{name}.npz", DATA / "official" / f"{name}.io.npz")
       for name in ("vit_token_prelogits", "vit_gap_current_names", "hybrid_r2_token")},
    "timm/timm_vit_token": (DATA / "timm" / "timm_vit_token", DATA / "timm" / "timm_vit_token.io.npz"),
    "transformers/hf_vit_classifier": (DATA / "transformers" / "hf_vit_classifier",
                                       DATA / "transformers" / "hf_vit_classifier.io.npz"),
    **{f"zoo/{name}": (DATA / "zoo" / name, DATA / "zoo" / f"{name}.io.npz") for name in sorted(ZOO)},
}
# The presets with a ResNet stage or more (R26, R50) take 4x the others' time here: the full suite runs them.
CASES = [pytest.param(f"preset/{p.constructor}", marks=[pytest.mark.slow] if p.sizes.get("resnet", {}).get("num_layers")
                      else []) for p in PRESETS.values()] + sorted(FAMILIES)
# What the official implementation counts for a preset at another size (vit_jax, 1000 classes).
OTHER_SIZE_COUNTS = {("B/16", 384): 86_859_496}


def _variant(constructor):
    (variant,) = [v for v, p in PRESETS.items() if p.constructor == constructor]
    return variant


def _effective_patch(model):
    """Pixels a side of one token: the patch size times a hybrid stem's stride."""
    return tuple(s // g for s, g in zip(model.image_size, model.patch_encoder.grid_size))


def build(case):
    """The case's model: a preset shrunk as the module docstring says, or a family's checkpoint loaded."""
    kind, name = case.split("/", 1)
    if kind == "preset":
        constructor = getattr(keras_vit, name)
        with keras.StatelessScope(initialize_variables=False):  # the stem's stride, with nothing allocated
            patch = _effective_patch(constructor(num_layers=1))
        keras.backend.clear_session()
        return constructor(input_shape=(2 * patch[0], 2 * patch[1], 3), classes=10, num_layers=1,
                           dropout_rate=0.1, drop_path_rate=0.1)
    return keras_vit.from_pretrained(FAMILIES[case][0])


def images(model, size=None, seed=0):
    h, w = size or model.image_size
    return np.random.default_rng(seed).uniform(-1, 1, (2, h, w, model.channels)).astype("float32")


def randomized(model):
    """A preset's head and class token start at zero: random values there make every output count (the
    other weights are drawn at random already)."""
    rng = np.random.default_rng(1)
    for v in model.weights:
        if v.path.startswith("head/") or v.path == "patch_encoder/cls":
            v.assign(rng.normal(scale=0.2, size=v.shape).astype(v.dtype))
    return model


_BUILT = {}


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """conftest.py's, without its garbage collection before each test: with the built models alive that
    alone took 0.6 s a test."""
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session(free_memory=False)
    yield


@pytest.fixture
def model(request):
    """Each case built once for the whole file (no test changes the model it is given)."""
    case = request.param
    if case not in _BUILT:
        built = build(case)
        _BUILT[case] = randomized(built) if case.startswith("preset/") else built
    return _BUILT[case]


# -- it builds ------------------------------------------------------------------------------------

@pytest.mark.one_backend  # a count: the same under every backend
@pytest.mark.parametrize("variant, image_size", [(v, 224) for v in PRESETS] + list(OTHER_SIZE_COUNTS),
                         ids=[p.constructor for p in PRESETS.values()]
                         + [f"{PRESETS[v].constructor}@{s}" for v, s in OTHER_SIZE_COUNTS])
def test_a_preset_at_its_real_size_has_the_official_parameter_count(variant, image_size):
    """The full model, its variables created with their shapes but never initialized (a StatelessScope that
    does not initialize on exit): ViT-H/14 alone would be 2.5 GB of random numbers that a count does not need."""
    preset = PRESETS[variant]
    try:
        with keras.StatelessScope(initialize_variables=False):
            model = getattr(keras_vit, preset.constructor)(input_shape=(image_size, image_size, 3))
        assert all(v._value is None for v in model.weights), variant  # nothing was allocated
        count = OTHER_SIZE_COUNTS.get((variant, image_size), preset.parameters)
        assert (model.count_params(), model.output_shape, model.variant) == (count, (None, 1000), variant)
    finally:
        keras.backend.clear_session()  # drops the uninitialized variables with the rest of Keras' state


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("model", CASES, indirect=True)
def test_it_builds_with_the_output_its_source_promises(model, request):
    case = request.node.callspec.params["model"]
    assert isinstance(model, keras_vit.VisionTransformer)
    out = to_numpy(model(images(model)))
    if case.startswith("preset/"):
        # the constructor builds the table's architecture (its sizes, one block deep)
        variant = _variant(case.split("/", 1)[1])
        with keras.StatelessScope(initialize_variables=False):
            table = keras_vit.VisionTransformer(**{**keras_vit.VARIANTS[variant], "num_layers": 1},
                                                image_size=model.image_size, classes=10, dropout_rate=0.1,
                                                drop_path_rate=0.1, classifier_activation="softmax")
        keras.backend.clear_session(free_memory=False)  # no uninitialized variable left for a later scope
        assert {**table.get_config(), "name": model.name} == model.get_config(), variant
        expected = (2, 10)
    else:
        with np.load(FAMILIES[case][1], allow_pickle=False) as io:
            expected = (2,) + (io["logits"] if "logits" in io and model.include_top else io["pooled"]).shape[1:]
    assert out.shape == expected and np.isfinite(out).all() and out.std() > 0, (out.shape, expected)


# -- config round trip ----------------------------------------------------------------------------

@pytest.mark.parametrize("model", CASES, indirect=True)
def test_the_config_round_trips_with_the_same_outputs(model):
    """keras.saving's own serialization, through JSON: the class is found by its registered name."""
    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(model)))
    clone = keras.saving.deserialize_keras_object(serialized)
    assert type(clone) is type(model) and clone.get_config() == model.get_config()
    assert clone.name == model.name and [v.path for v in clone.weights] == [v.path for v in model.weights]
    clone.set_weights(model.get_weights())
    x = images(model)
    np.testing.assert_array_equal(to_numpy(clone(x)), to_numpy(model(x)))


# -- .keras save and load -------------------------------------------------------------------------

@pytest.mark.parametrize("model", CASES, indirect=True)
def test_a_keras_file_gives_identical_outputs(model, tmp_path):
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    saved = {v.path: to_numpy(v) for v in model.weights}
    assert {v.path for v in loaded.weights} == set(saved)
    for v in loaded.weights:
        np.testing.assert_array_equal(to_numpy(v), saved[v.path], err_msg=v.path)
    x = images(model)
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


# -- another input size ---------------------------------------------------------------------------

@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("model", CASES, indirect=True)
def test_another_size_works_as_docs_resolution_promises(model):
    """`with_image_size` (position embeddings resampled once, with the model's own method) and a dynamic copy
    (resampled in the graph per batch) give a model of the new size, and agree; at the stored size the
    dynamic copy is the model itself. The new grid is a patch taller and two wider (not square)."""
    config = model.get_config()
    patch = _effective_patch(model)
    grid = model.patch_encoder.grid_size
    other = ((grid[0] + 1) * patch[0], (grid[1] + 2) * patch[1])
    if config.get("relative_position_bias"):  # BEiT: a learned table per grid, no resampling of it (yet)
        with pytest.raises(ValueError, match=r"relative_position_bias_table: target \(\d+, \d+\), source .*"
                                             r"resized .* when the checkpoint loads: keras_vit.from_pretrained"):
            keras_vit.with_image_size(model, other)  # the model's own method by default
        with pytest.raises(ValueError, match="relative_position_bias .* does not go with dynamic_image_size=True"):
            keras_vit.VisionTransformer.from_config({**config, "dynamic_image_size": True})
        return
    moved = keras_vit.with_image_size(model, other)  # the model's own method by default
    assert moved.image_size == other and moved.patch_encoder.grid_size == (grid[0] + 1, grid[1] + 2)
    dynamic = keras_vit.VisionTransformer.from_config({**config, "dynamic_image_size": True})
    dynamic.set_weights(model.get_weights())
    x = images(model)
    np.testing.assert_allclose(to_numpy(dynamic(x)), to_numpy(model(x)), atol=1e-6)
    y = images(model, other, seed=1)
    at_other = to_numpy(moved(y))
    assert at_other.shape == to_numpy(model(x)).shape and np.isfinite(at_other).all()
    np.testing.assert_allclose(to_numpy(dynamic(y)), at_other, atol=1e-5)
