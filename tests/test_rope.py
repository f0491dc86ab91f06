"""The RoPE families (issue 54): DINOv3 (timm's vit_*_dinov3, transformers' DINOv3ViTModel), EVA02 (timm's
eva02_*) and Perception Encoder (timm's vit_pe_core_*), read from the folders their libraries wrote
(tests/data/zoo2, zoo2_more), give that library's outputs within 1e-4 at the trained size and another, under
every backend; each feature they need moves the outputs past the tolerance when left out or done another way;
they write back, train, export and refuse what keras-vit lacks by name."""

import dataclasses
import json

import keras
import numpy as np
import pytest
from conftest import BACKEND, DATA
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.rope import RotaryEmbedding, apply_rope, rope_table

pytest.importorskip("safetensors.numpy", reason="the hub formats need safetensors (the `hub` extra)")

ZOO2 = DATA / "zoo2"
CASES = json.loads((ZOO2 / "cases.json").read_text())
TOLERANCE = CASES["tolerance"]
NAMES = sorted(CASES["cases"])
# timm's other Eva layouts (q, k, v apart; SwiGLU as fc1_g / fc1_x, with EVA02's sub-LN or DINOv3 S+'s
# alignment), written by timm itself: tests/data/zoo2_more/make_fixtures.py
MORE = DATA / "zoo2_more"
MORE_CASES = json.loads((MORE / "cases.json").read_text())["cases"]
EVA_LAYOUTS = ("dinov3_splus", "eva02_base")
PE = ("pe_core", "pe_core_noclass")  # Perception Encoder: with a class token, and without (the gigantic's layout)


def _io(name):
    with np.load(ZOO2 / f"{name}.io.npz", allow_pickle=False) as data:
        return dict(data)


def _outputs(model, images, compare):
    out = model.forward_intermediates(images)
    named = {"tokens": out["features"], "pooled": out["pre_logits"], "logits": out.get("logits")}
    return {key: to_numpy(named[key]) for key in compare}


def _diffs(model, name, suffix):
    case, io = CASES["cases"][name], _io(name)
    got = _outputs(model, io["images" + suffix], case["compare"])
    return {key: float(np.abs(value - io[key + suffix]).max()) for key, value in got.items()}


def _load(name, alt=False):
    case = CASES["cases"][name]
    return keras_vit.from_pretrained(ZOO2 / name, **(case["alt"]["keras_kwargs"] if alt else case["keras_kwargs"]))


@pytest.mark.backends
@pytest.mark.parametrize("name", NAMES)
def test_outputs_match_the_library_at_the_trained_size_and_another(name):
    case = CASES["cases"][name]
    model = _load(name)
    assert model.rope is not None
    diffs = _diffs(model, name, "")
    alt_model = _load(name, alt=True) if case["alt"]["keras_kwargs"] else model
    diffs.update({f"{k}_alt": v for k, v in _diffs(alt_model, name, "_alt").items()})
    assert max(diffs.values()) <= TOLERANCE, diffs
    assert len(diffs) == 2 * len(case["compare"])


def _more(name, suffix="", **keywords):
    case = MORE_CASES[name]
    with np.load(MORE / f"{name}.io.npz", allow_pickle=False) as data:
        io = dict(data)
    model = keras_vit.from_pretrained(MORE / name, **(case["alt"]["keras_kwargs"] if suffix else {}))
    if keywords:
        model = _variant(model, **keywords)
    key = case["compare"][0]
    got = _outputs(model, io["images" + suffix], [{"pooled": "pooled", "logits": "logits"}[key]])[key]
    return model, float(np.abs(got - io[key + suffix]).max())


@pytest.mark.backends
@pytest.mark.parametrize("name", EVA_LAYOUTS)
def test_timms_other_eva_layouts_match_at_two_sizes(name):
    model, main = _more(name)
    _, alt = _more(name, "_alt")
    assert max(main, alt) <= TOLERANCE, (main, alt)
    keys = MORE_CASES[name]["block_keys"]
    assert "blocks.0.mlp.fc1_g.weight" in keys and "blocks.0.mlp.fc1.weight" not in keys  # the layout read
    if name == "eva02_base":
        assert model.mlp_norm and "blocks.0.attn.q_proj.weight" in keys
        assert _more(name, mlp_norm=False)[1] > 10 * TOLERANCE  # the sub-LN is needed
    else:
        assert model.mlp_dim == 96  # int(32 * 2.9) = 92, aligned to 8


@pytest.mark.parametrize("name", EVA_LAYOUTS)
def test_timms_other_eva_layouts_write_back(tmp_path, name):
    model, _ = _more(name)
    keras_vit.save_pretrained(model, tmp_path / "out", format="timm")
    again = keras_vit.from_pretrained(tmp_path / "out")
    with np.load(MORE / f"{name}.io.npz", allow_pickle=False) as data:
        images = data["images"]
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))
    written = json.loads((tmp_path / "out" / "config.json").read_text())["model_args"]
    assert written["scale_mlp"] == model.mlp_norm and written["qkv_fused"]


@pytest.mark.backends
@pytest.mark.parametrize("name", PE)
def test_perception_encoder_matches_timm_at_two_sizes(name):
    model, main = _more(name)
    _, alt = _more(name, "_alt")
    assert max(main, alt) <= TOLERANCE, (main, alt)
    assert (model.rope, model.rope_xy, model.pre_norm, model.patch_bias) == ("axial", True, True, False)
    assert (model.pooling, model.pool_heads, model.pool_prefix, model.layer_norm_epsilon) == ("map", 8, True, 1e-5)
    if name == "pe_core":
        assert (model.rope_offset, model.rope_grid, model.classifier) == (1.0, (24, 24), "token")
    else:  # the gigantic's layout: no offset, no class token, the pool's MLP 4x while the blocks' is 8960/1536
        assert (model.rope_offset, model.rope_grid, model.classifier) == (0.0, (32, 32), "gap")
        assert (model.pool_mlp_dim, model.mlp_dim) == (192, int(48 * 8960 / 1536))


@pytest.mark.backends
@pytest.mark.parametrize("fields", [dict(rope_offset=0.0), dict(rope_xy=False), dict(pool_prefix=False),
                                    dict(pool_heads=None), dict(pre_norm=False)], ids=str)
def test_each_perception_encoder_option_moves_the_outputs(fields):
    """PE's grid offset and x-first angles, its pool over the class token too with its own 8 heads, and its
    norm before the blocks: each done the other way moves the logits past the tolerance."""
    assert _more("pe_core")[1] <= TOLERANCE
    assert _more("pe_core", **fields)[1] > 10 * TOLERANCE


def test_perception_encoder_writes_back_as_timms_and_not_as_transformers(tmp_path):
    model, _ = _more("pe_core_noclass")
    keras_vit.save_pretrained(model, tmp_path / "out", format="timm")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    args = written["model_args"]
    assert written["architecture"] == "vit_pe_core_gigantic_patch14_448"
    assert (args["attn_type"], args["use_pre_transformer_norm"], args["rope_grid_indexing"]) == ("rope", True, "xy")
    assert (args["attn_pool_num_heads"], args["rope_grid_offset"], args["class_token"]) == (8, 0.0, False)
    with np.load(MORE / "pe_core_noclass.io.npz", allow_pickle=False) as data:
        images = data["images"]
    again = keras_vit.from_pretrained(tmp_path / "out")
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))
    with pytest.raises(ValueError, match="transformers has no Perception Encoder"):
        keras_vit.save_pretrained(model, tmp_path / "hf", format="transformers")


HF_MORE = json.loads((MORE / "hf_cases.json").read_text())["cases"]


def _gated(model, suffix=""):
    with np.load(MORE / "hf_dinov3_gated.io.npz", allow_pickle=False) as data:
        io = dict(data)
    got = _outputs(model, io["images" + suffix], ["pooled", "tokens"])
    return max(float(np.abs(got[k] - io[k + suffix]).max()) for k in got)


@pytest.mark.backends
def test_transformers_gated_dinov3_mlp_matches_at_two_sizes():
    """DINOv3ViTModel with use_gated_mlp (ViT-H+ and 7B's gate_proj, up_proj, down_proj), read as SwiGLU: the
    gate and the value packed in that order, so swapping them moves the outputs."""
    assert HF_MORE["hf_dinov3_gated"]["mlp_keys"][2:4] == ["layer.0.mlp.gate_proj.bias", "layer.0.mlp.gate_proj.weight"]
    model = keras_vit.from_pretrained(MORE / "hf_dinov3_gated")
    assert (model.mlp_activation, model.mlp_dim) == ("swiglu", 80)
    assert max(_gated(model), _gated(model, "_alt")) <= TOLERANCE
    dense = model.blocks[0].mlp_dense1
    kernel, bias = (to_numpy(v) for v in (dense.kernel, dense.bias))
    dense.kernel.assign(np.concatenate(np.split(kernel, 2, axis=1)[::-1], axis=1))
    dense.bias.assign(np.concatenate(np.split(bias, 2)[::-1]))
    assert _gated(model) > 10 * TOLERANCE


def test_transformers_gated_dinov3_writes_back(tmp_path):
    model = keras_vit.from_pretrained(MORE / "hf_dinov3_gated")
    keras_vit.save_pretrained(model, tmp_path / "out", format="transformers")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["use_gated_mlp"], config["hidden_act"], config["intermediate_size"]) == (True, "silu", 80)
    again = keras_vit.from_pretrained(tmp_path / "out")
    assert _gated(again) <= TOLERANCE


def test_fewshot_runs_on_a_rope_backbone():
    """The paper's few-shot probe on a Perception Encoder's frozen features (random weights: the features still
    carry the digits' shapes, so the probe beats chance by far)."""
    model, _ = _more("pe_core")
    result = keras_vit.fewshot_evaluate(model, "digits", shots=(5,), seeds=1, test_images=200, verbose=0)
    assert result["feature_dim"] == 48 and result["num_classes"] == 10
    assert result["shots"]["5"]["mean"] > 0.3, result["shots"]


def _moved(model, name, suffix=""):
    return max(_diffs(model, name, suffix).values())


def _variant(model, **fields):
    """The same weights in a model built with other fields (RoPE has no weights: every variable still fits)."""
    other = keras_vit.VisionTransformer(dataclasses.replace(model.config, **fields))
    values = {v.path.split("/", 1)[1]: v for v in model.weights}
    for variable in other.weights:  # by path: a variant without a layer (mlp_norm=False) has fewer
        variable.assign(values[variable.path.split("/", 1)[1]])
    return other


@pytest.mark.backends
@pytest.mark.parametrize("name", ["timm_dinov3", "hf_dinov3", "timm_eva02"])
def test_rope_left_out_moves_the_outputs(name):
    model = _load(name)
    assert _moved(model, name) <= TOLERANCE
    assert _moved(_variant(model, rope=None, rope_temperature=None, rope_grid=None), name) > 10 * TOLERANCE


@pytest.mark.backends
@pytest.mark.parametrize("name", ["timm_dinov3", "timm_eva02"])
def test_the_other_channel_pairing_moves_the_outputs(name):
    """DINOv3 pairs channel j with j + head_dim / 2, EVA02 neighbours: swapping the layout is caught."""
    model = _load(name)
    other = {"half": "interleaved", "interleaved": "half"}[model.blocks[0].rope_layout]
    for block in model.blocks:
        block.attention_layer().rope_layout = other
    assert _moved(model, name) > 10 * TOLERANCE


@pytest.mark.backends
def test_eva02_positions_rescaled_to_the_reference_grid_at_every_size():
    model = _load("timm_eva02", alt=True)
    assert model.rope_grid == (16, 16)
    assert _moved(model, "timm_eva02", "_alt") <= TOLERANCE
    assert _moved(_variant(model, rope_grid=None), "timm_eva02", "_alt") > 10 * TOLERANCE


@pytest.mark.backends
def test_dinov3_storage_tokens_and_pooling_are_needed():
    model = _load("timm_dinov3")
    assert (model.register_tokens, model.pooling, model.fc_norm) == (4, "gap", False)
    assert _moved(_variant(model, pooling="token"), "timm_dinov3") > 10 * TOLERANCE  # upstream's class token
    hf = _load("hf_dinov3")
    assert hf.pooling is None  # transformers' pooler_output: the normed class token
    weights = [w for w in hf.weights if "reg_token" not in w.path]
    no_registers = keras_vit.VisionTransformer(dataclasses.replace(hf.config, register_tokens=0))
    no_registers.set_weights([w.numpy() for w in weights])
    io = _io("hf_dinov3")
    assert float(np.abs(to_numpy(no_registers(io["images"])) - io["pooled"]).max()) > 10 * TOLERANCE


@pytest.mark.backends
def test_chunked_attention_keeps_the_rope_outputs():
    model = _load("timm_dinov3")
    for block in model.blocks:
        block.attention_implementation = "chunked"
    assert _moved(model, "timm_dinov3") <= TOLERANCE


@pytest.mark.backends
def test_rope_table_follows_the_grid_and_leaves_the_prefix_unrotated():
    table = to_numpy(rope_table((3, 5), head_dim=8, kind="dinov3", prefix_tokens=2))
    assert table.shape == (2, 17, 8)
    np.testing.assert_array_equal(table[0, :2], 0.0)
    np.testing.assert_array_equal(table[1, :2], 1.0)
    np.testing.assert_allclose(table[0] ** 2 + table[1] ** 2, 1.0, atol=1e-6)
    # DINOv3: patch centres in [-1, 1], each axis by its own length: the middle row's angle is 0
    quarter = 2
    middle_row = table[0, 2 + 5:2 + 10, :quarter]
    np.testing.assert_allclose(middle_row, 0.0, atol=1e-7)
    x = np.random.default_rng(0).normal(size=(1, 17, 2, 8)).astype("float32")
    rotated = to_numpy(apply_rope(x, table, "half"))
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)  # a rotation
    np.testing.assert_array_equal(rotated[:, :2], x[:, :2])
    layer = RotaryEmbedding(head_dim=8, patch_size=16, kind="dinov3", prefix_tokens=2)
    np.testing.assert_allclose(to_numpy(layer(np.zeros((1, 48, 80, 3), "float32"))), table, atol=1e-7)


@pytest.mark.backends
def test_rope_makes_attention_depend_on_offsets_only():
    """The rotated q . k of two patches is a function of their offset: shifting both by one row keeps it."""
    table = to_numpy(rope_table((4, 4), head_dim=8, kind="axial"))
    rng = np.random.default_rng(1)
    q, k = (rng.normal(size=(1, 1, 1, 8)).astype("float32") for _ in range(2))
    def logit(i, j):
        qi = to_numpy(apply_rope(np.repeat(q, 16, axis=1), table, "interleaved"))[0, i, 0]
        kj = to_numpy(apply_rope(np.repeat(k, 16, axis=1), table, "interleaved"))[0, j, 0]
        return float(qi @ kj)
    assert logit(0, 5) == pytest.approx(logit(4, 9), abs=1e-5)  # (0,0)-(1,1) and (1,0)-(2,1)
    assert logit(0, 5) != pytest.approx(logit(0, 6), abs=1e-3)


@pytest.mark.backends
def test_keras_file_round_trip_keeps_the_outputs(tmp_path):
    model = _load("hf_dinov3")
    path = tmp_path / "dinov3.keras"
    model.save(path)
    again = keras.saving.load_model(path)
    assert again.config == model.config
    images = _io("hf_dinov3")["images_alt"]
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))


@pytest.mark.parametrize("name,fmt", [("timm_dinov3", "timm"), ("timm_eva02", "timm"), ("hf_dinov3", "transformers"),
                                      ("hf_dinov3", "timm")])
def test_writes_back_in_each_format_it_reads(tmp_path, name, fmt):
    model = _load(name)
    keras_vit.save_pretrained(model, tmp_path / "out", format=fmt)
    again = keras_vit.from_pretrained(tmp_path / "out")
    images = _io(name)["images"]
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    if fmt == "timm":
        assert config["architecture"] == {"dinov3": "vit_small_patch16_dinov3", "axial": "eva02_tiny_patch14_224"}[
            model.rope]
        assert "act_layer" not in config["model_args"]  # timm's Eva takes none
    else:
        assert config["model_type"] == "dinov3_vit"


def test_transformers_has_no_eva02_and_says_so(tmp_path):
    with pytest.raises(ValueError, match="transformers has no EVA02"):
        keras_vit.save_pretrained(_load("timm_eva02"), tmp_path / "out", format="transformers")


def _timm_folder(tmp_path, **model_args):
    source = json.loads((ZOO2 / "timm_eva02" / "config.json").read_text())
    source["model_args"].update(model_args)
    folder = tmp_path / "eva"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(source))
    (folder / "model.safetensors").write_bytes((ZOO2 / "timm_eva02" / "model.safetensors").read_bytes())
    return folder


@pytest.mark.parametrize("model_args,named", [
    ({"scale_attn_inner": True}, "a LayerNorm inside the attention"),
    ({"rope_grid_indexing": "yx"}, "rope_grid_indexing='yx'; use 'ij' or 'xy'"),
    ({"rope_type": "mixed"}, "rope_type='mixed'"),
    ({"use_pre_transformer_norm": True}, "attn_type='eva' with use_pre_transformer_norm=True"),
    ({"attn_type": "rope"}, "attn_type='rope' with use_pre_transformer_norm=False"),
])
def test_eva_options_keras_vit_lacks_are_refused_by_name(tmp_path, model_args, named):
    with pytest.raises(ValueError, match=named):
        keras_vit.from_pretrained(_timm_folder(tmp_path, **model_args))


def test_config_refusals_name_the_value():
    base = dict(image_size=32, patch_size=8, hidden_size=24, num_layers=1, num_heads=4, mlp_dim=48)
    with pytest.raises(ValueError, match="multiple of 4, got 6"):
        keras_vit.ViTConfig(**base, rope="dinov3")
    with pytest.raises(ValueError, match="Unknown rope 'rotary'"):
        keras_vit.ViTConfig(**dict(base, hidden_size=32), rope="rotary")
    with pytest.raises(ValueError, match="rope_grid=.*goes with rope='axial'"):
        keras_vit.ViTConfig(**dict(base, hidden_size=32), rope="dinov3", rope_grid=16)
    with pytest.raises(ValueError, match="not both"):
        keras_vit.ViTConfig(**dict(base, hidden_size=32), rope="axial", relative_position_bias=True,
                            absolute_position_embeddings=False)


def test_block_apis_ask_for_the_grid():
    model = _load("hf_dinov3")
    with pytest.raises(ValueError, match="start from 'images'"):
        model.stage_model("embedded", "encoded")
    images = _io("hf_dinov3")["images"]
    tokens = model.stage_model("images", "embedded")(images)
    with pytest.raises(ValueError, match="rope=model.rope_table"):
        next(model.forward_blocks(tokens))
    out = list(model.forward_blocks(tokens, return_attention=True, rope=model.rope_table(images)))
    assert len(out) == 2 and tuple(out[0][1].shape) == (2, 4, 21, 21)
    from keras_vit.analysis import attention_probabilities

    maps = attention_probabilities(model, images)
    assert len(maps) == 2 and maps[0].shape == (2, 4, 21, 21)


def test_timm_names_build_the_rope_families():
    """create_model(timm name) builds what the reader reads for that name (their counts against timm's:
    tests/test_presets.py, which covers every name of TIMM_PRESETS)."""
    dino = keras_vit.factory.timm_config("vit_base_patch16_dinov3")
    assert (dino.rope, dino.rope_temperature, dino.register_tokens, dino.absolute_position_embeddings) == (
        "dinov3", 100.0, 4, False)
    assert dino.dynamic_image_size and dino.layer_norm_epsilon == 1e-5 and dino.pooling == "gap"
    eva = keras_vit.factory.timm_config("eva02_small_patch14_336")
    assert (eva.rope, eva.rope_grid, eva.mlp_activation, eva.mlp_dim, eva.fc_norm) == ("axial", (16, 16), "swiglu",
                                                                                       1024, True)
    assert eva.image_size == (336, 336) and eva.pixel_mean == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    pe = keras_vit.factory.timm_config("vit_pe_core_large_patch14_336")
    assert (pe.rope, pe.rope_grid, pe.rope_offset, pe.rope_xy, pe.pool_heads, pe.pool_prefix, pe.pre_norm) == (
        "axial", (24, 24), 1.0, True, 8, True, True)


def test_fit_and_dense_heads_work_on_a_rope_backbone():
    model = _load("hf_dinov3")
    images = _io("hf_dinov3")["images"]
    classifier = keras_vit.VisionTransformer(dataclasses.replace(model.config, include_top=True, classes=3))
    classifier.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    x, y = np.concatenate([images] * 4), np.tile([0, 2], 4)  # each image its own label
    before = classifier.evaluate(x, y, verbose=0)
    classifier.fit(x, y, epochs=10, batch_size=4, verbose=0)
    assert classifier.evaluate(x, y, verbose=0) < 0.8 * before
    head = keras_vit.dense.DenseHead(kind="linear", task="segmentation", taps=(1, 2), classes=5)
    predictor = keras_vit.dense.DensePredictor(model.config, head)
    assert tuple(predictor.predict(_io("hf_dinov3")["images_alt"], verbose=0).shape) == (2, 48, 80, 5)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TFLite export runs under the tensorflow backend")
def test_tflite_export_agrees_with_keras(tmp_path):
    model = _load("timm_eva02")
    report = keras_vit.export_model(model, tmp_path / "eva02.tflite")
    assert (tmp_path / "eva02.tflite").is_file()
    assert report["parity"]["max_abs_logit_diff"] <= 1e-4 and report["parity"]["top1_agreement"] == 1.0, report
