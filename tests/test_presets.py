"""The ViT families' presets (timm architecture names): each builds the architecture keras-vit's timm
reader builds for that name, with timm's own parameter count (tests/data/timm_presets/counts.json, made
by timm itself: make_counts.py beside it)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

import keras_vit
from keras_vit.formats import timm
from keras_vit.presets import PRESETS, TIMM_PRESETS, canonical_variant, did_you_mean, timm_family, timm_model_args, timm_presets

COUNTS = json.loads((ROOT / "tests" / "data" / "timm_presets" / "counts.json").read_text())


def inert_key_biases(arch):
    """The parameters keras-vit's model of `arch` has beyond timm's: BEiT's key bias, one hidden-size vector
    a block, that timm keeps as a zero buffer (loaders set it to zero). It cannot change an output: it adds
    q . b to every key's score of a query alike, which the softmax cancels (test_the_key_bias_is_inert)."""
    family, match = timm_family(arch)
    args = timm_model_args(family, match)
    if family == "dinov3" and not args["qkv_bias"]:
        # DINOv3 without biases: keras-vit's query, key and value biases are all zero (loaders set them so)
        return 3 * args["embed_dim"] * args["depth"]
    return args["embed_dim"] * args["depth"] if family in ("beit", "eva02", "dinov3") else 0

# (architecture, create_model keywords, the name whose timm count it must equal)
CASES = [(arch, {}, arch) for arch in timm_presets()] + [
    ("vit_so400m_patch14_siglip_384", {"image_size": 378}, "vit_so400m_patch14_siglip_384")]


@pytest.fixture(scope="module")
def built_counts():
    """Every family preset built once, with its 1000-class head. The variables get their shapes but are never
    initialized (as tests/test_models.py's built_counts: the giants hold a billion values a count does not
    need), in a process of its own. The headless count ("0") is that count less the head layers': what
    include_top=False leaves out (test_include_top_false_drops_exactly_the_head_layers), at half the builds."""
    code = ("import json, sys, keras, keras_vit\n"
            "out = {}\n"
            "for arch, kw, _ in json.loads(sys.argv[1]):\n"
            "    with keras.StatelessScope(initialize_variables=False):\n"
            "        model = keras_vit.create_model(arch, **kw)\n"
            "    assert all(v._value is None for v in model.weights), arch  # nothing was allocated\n"
            "    heads = sum(layer.count_params() for layer in model.layers if layer.name in ('head', 'head_dist'))\n"
            "    out[arch] = {'1000': model.count_params(), '0': model.count_params() - heads}\n"
            "    del model; keras.backend.clear_session()\n"
            "print(json.dumps(out))\n")
    result = subprocess.run([sys.executable, "-c", code, json.dumps(CASES)], capture_output=True, text=True,
                            cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ["deit_tiny_distilled_patch16_224", "vit_base_patch16_siglip_224",
                                  "vit_small_patch14_reg4_dinov2"])
def test_include_top_false_drops_exactly_the_head_layers(arch):
    """What built_counts' headless count rests on: include_top=False builds the same model less `head` (and
    DeiT's `head_dist`), every other layer with the same parameters."""
    import keras

    def layers(model):
        return {layer.name: layer.count_params() for layer in model.layers if layer.weights}

    with keras.StatelessScope(initialize_variables=False):
        top = layers(keras_vit.create_model(arch))
        bare = layers(keras_vit.create_model(arch, include_top=False))
    heads = {name for name in top if name in ("head", "head_dist")}
    assert heads and set(top) - set(bare) == heads and all(top[name] == bare[name] for name in bare)


@pytest.mark.slow
@pytest.mark.parametrize("arch,keywords,timm_name", CASES, ids=[case[0] for case in CASES])
def test_family_presets_have_timms_parameter_counts(arch, keywords, timm_name, built_counts):
    extra = inert_key_biases(arch)
    assert built_counts[arch] == {classes: count + extra for classes, count in COUNTS["counts"][timm_name].items()}


def test_the_key_bias_is_inert():
    """Why BEiT's count is timm's plus its key biases: a key bias changes no output."""
    import numpy as np

    model = keras_vit.create_model("beit_base_patch16_224", image_size=32, hidden_size=32, num_layers=2,
                                   num_heads=4, mlp_dim=64, include_top=False,  # features: the head starts at zero
                                   layer_scale=1.0)
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    before = np.asarray(model(images))
    key_biases = [w for w in model.weights if w.path.endswith("key/bias")]
    assert len(key_biases) == 2 and sum(int(np.prod(w.shape)) for w in key_biases) == 2 * 32
    for w in key_biases:
        w.assign(np.random.default_rng(1).normal(0, 3, w.shape))
    np.testing.assert_allclose(np.asarray(model(images)), before, atol=1e-5)
    # the query bias, by contrast, does change them: the test can fail
    query = next(w for w in model.weights if w.path.endswith("query/bias"))
    query.assign(np.random.default_rng(1).normal(0, 3, query.shape))
    assert np.abs(np.asarray(model(images)) - before).max() > 1e-3  # the key bias: under 1e-5


def test_the_fixture_counts_every_preset():
    assert set(COUNTS["counts"]) == set(timm_presets()) | {"vit_so400m_patch14_siglip_384"}
    assert COUNTS["timm"] and COUNTS["torch"].startswith("2.14.1")


def test_a_small_family_preset_is_built_and_counted_here():
    """One preset built in this process (the slow test builds them all): a DeiT, heads and tokens included."""
    model = keras_vit.create_model("deit_tiny_distilled_patch16_224")
    assert model.count_params() == COUNTS["counts"]["deit_tiny_distilled_patch16_224"]["1000"]
    assert model.config.distillation and model.variant is None


def test_presets_build_what_the_timm_reader_reads():
    """create_model(name) is the reader's architecture for a config.json naming it, options overridable."""
    for arch in timm_presets():
        args, qkv_bias = timm.args_from_config({"architecture": arch}, None, "test")
        args.pop("class_names", None)
        assert keras_vit.factory.timm_config(arch) == keras_vit.ViTConfig(**args), arch
        assert qkv_bias == (not (arch.endswith("_dinov3"))), arch
    config = keras_vit.factory.timm_config("vit_small_patch14_dinov2", image_size=224, classes=10)
    assert config.grid == (16, 16) and config.classes == 10 and config.layer_scale == 1e-5


@pytest.mark.parametrize("arch,features", [
    ("deit_base_distilled_patch16_224", dict(distillation=True, pixel_mean=(0.485, 0.456, 0.406))),
    ("vit_small_patch14_dinov2", dict(image_size=(518, 518), layer_scale=1e-5, register_tokens=0)),
    ("vit_small_patch14_reg4_dinov2", dict(register_tokens=4, prefix_posemb="none")),
    ("vit_giant_patch14_dinov2", dict(mlp_activation="swiglu", mlp_dim=4096, hidden_size=1536, num_layers=40)),
    ("vit_base_patch16_clip_224", dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5,
                                       mlp_activation=None, approximate_gelu=False)),
    ("vit_base_patch16_clip_quickgelu_224", dict(mlp_activation="quick_gelu")),
    ("vit_base_patch16_siglip_224", dict(classifier="gap", pooling="map")),
    ("vit_base_patch16_siglip_gap_224", dict(classifier="gap", pooling="gap", fc_norm=False)),
    ("vit_so400m_patch14_siglip_224", dict(mlp_dim=4304, hidden_size=1152, num_layers=27)),
    ("beit_base_patch16_224", dict(relative_position_bias=True, absolute_position_embeddings=False,
                                   layer_scale=0.1, pooling="gap", fc_norm=True)),
])
def test_each_family_preset_has_its_features(arch, features):
    config = keras_vit.factory.timm_config(arch)
    assert {key: getattr(config, key) for key in features} == features


def test_family_presets_take_overrides_as_the_paper_presets_do():
    model = keras_vit.create_model("vit_small_patch14_reg4_dinov2", image_size=28, classes=3, num_layers=1,
                                   classifier_activation="softmax")
    assert model.output_shape == (None, 3) and model.config.grid == (2, 2) and model.config.register_tokens == 4
    with pytest.raises(TypeError, match="image_sise"):
        keras_vit.create_model("vit_small_patch14_dinov2", image_sise=224)


def test_a_size_keras_vit_would_crop_is_refused_naming_the_crop():
    with pytest.raises(ValueError, match=r"not a multiple of the patch size \(14, 14\).*\(378, 378\)"):
        keras_vit.factory.timm_config("vit_so400m_patch14_siglip_384")


@pytest.mark.parametrize("typo,meant", [
    ("vit_small_patch14_dinov3", "vit_small_patch16_dinov3"),
    ("deit_base_distiled_patch16_224", "deit_base_distilled_patch16_224"),
    ("vit_base_patch16_siglp_224", "vit_base_patch16_siglip_224"),
    ("beit_bse_patch16_224", "beit_base_patch16_224"),
    ("vit_base_patch16_clip_quickgleu_224", "vit_base_patch16_clip_quickgelu_224"),
])
def test_a_misspelled_family_name_gets_the_close_match(typo, meant):
    with pytest.raises(ValueError, match=f"Did you mean '{meant}'"):
        keras_vit.create_model(typo)


def test_no_hint_for_a_name_close_to_nothing():
    assert did_you_mean("resnet50") == ""
    with pytest.raises(ValueError, match="Unknown ViT variant 'resnet50'. Known variants"):
        canonical_variant("resnet50")


def test_the_paper_presets_refer_a_timm_name_to_create_model():
    with pytest.raises(ValueError, match=r"timm architecture.*create_model\('vit_base_patch16_clip_224'\)"):
        keras_vit.ViTConfig.from_preset("vit_base_patch16_clip_224")


def test_preset_names_are_their_families_and_apart_from_the_paper_presets():
    for names in TIMM_PRESETS.values():
        for name in names:
            assert timm_family(name) is not None, name
            with pytest.raises(ValueError):
                canonical_variant(name)
    assert not set(timm_presets()) & set(PRESETS)


def test_docs_table_lists_every_family_preset_with_timms_count():
    text = (ROOT / "docs" / "models.md").read_text()
    for arch in timm_presets():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{arch}`")), None)
        assert row is not None, f"docs/models.md has no row for {arch}"
        count = COUNTS["counts"][arch]["1000"]
        assert f"{count:,}" in row, (arch, row)


@pytest.mark.parametrize("arch, mean, std", [
    ("vit_small_patch14_dinov2", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ("deit_tiny_distilled_patch16_224", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ("vit_base_patch16_clip_224", timm.OPENAI_CLIP_MEAN, timm.OPENAI_CLIP_STD),
    ("vit_base_patch16_siglip_224", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ("beit_base_patch16_224", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ("vit_base_patch16_224", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
])
def test_a_family_preset_has_its_timm_default_pixel_statistics(arch, mean, std):
    """timm's default_cfgs: DINOv2 and DeiT were trained on ImageNet's statistics, CLIP on OpenAI's; a model
    built by name (or read from a config.json without them) must be fed the same pixels."""
    config = keras_vit.factory.timm_config(arch)
    assert config.pixel_mean == pytest.approx(mean) and config.pixel_std == pytest.approx(std)
