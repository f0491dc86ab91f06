"""timm and Hugging Face transformers checkpoints: parity with the libraries' own logits,
the name tables both ways, and every refusal."""

import json
import shutil
import sys

import numpy as np
import pytest
from conftest import DATA, randomize, tiny_vit

import keras_vit
from keras_vit.pretrained import convert, detect_format, from_pretrained, load_pretrained, save_pretrained

st = pytest.importorskip("safetensors.numpy", reason="the hub formats need safetensors (the `hub` extra)")

TIMM = DATA / "timm" / "timm_vit_token"
HF = DATA / "transformers" / "hf_vit_classifier"
OFFICIAL = DATA / "official"


def _io(folder):
    return np.load(f"{folder}.io.npz")


def _copy(folder, tmp_path, *, config=None, tensors=None):
    """A copy of a fixture folder with its config and / or tensors edited."""
    out = tmp_path / folder.name
    shutil.copytree(folder, out)
    if config is not None:
        cfg = json.loads((folder / "config.json").read_text())
        config(cfg)
        (out / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        arrays = st.load_file(str(folder / "model.safetensors"))
        tensors(arrays)
        st.save_file(arrays, str(out / "model.safetensors"))
    return out


@pytest.mark.parametrize("folder", [TIMM, HF], ids=["timm", "transformers"])
def test_logits_match_the_source_library_to_1e_4(folder):
    model = from_pretrained(folder)
    io = _io(folder)
    diff = np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max()
    print(f"{folder.name}: max |logit diff| {diff:.3g}")
    assert diff <= 1e-4
    assert model.approximate_gelu is False and model.pixel_mean == (0.5, 0.5, 0.5)
    assert model.layer_norm_epsilon == (1e-6 if folder is TIMM else 1e-12)


def test_tanh_gelu_misses_the_timm_logits():
    """The fixture tells the GELU forms apart: the parity test is not vacuous."""
    model = from_pretrained(TIMM, approximate_gelu=True)
    io = _io(TIMM)
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() > 1e-4


def test_class_names_from_id2label_and_timm_label_names(tmp_path):
    assert from_pretrained(HF).class_names == ["apple", "bridge", "cloud", "dune", "elm", "fjord", "glacier"]
    names = [f"n0{i}" for i in range(7)]
    folder = _copy(TIMM, tmp_path, config=lambda c: c.update(
        label_names=names, label_descriptions={n: f"thing {i}" for i, n in enumerate(names)}))
    assert from_pretrained(folder).class_names == [f"thing {i}" for i in range(7)]
    # a new head of another width drops the checkpoint's names and starts at zero
    model = from_pretrained(HF, classes=3)
    assert model.class_names is None and model.output_shape == (None, 3)
    assert not np.any(model.get_layer("head").kernel.numpy())


def _bare_vit_model(tmp_path, pooler=None):
    """transformers' ViTModel as save_pretrained writes it: no 'vit.' prefix, no classifier."""
    def edit(arrays):
        for key in list(arrays):
            value = arrays.pop(key)
            if not key.startswith("classifier."):
                arrays[key.removeprefix("vit.")] = value
        if pooler is not None:
            arrays["pooler.dense.weight"], arrays["pooler.dense.bias"] = pooler

    def config(cfg):
        cfg["architectures"] = ["ViTModel"]
        cfg.pop("id2label"), cfg.pop("label2id")

    return _copy(HF, tmp_path, config=config, tensors=edit)


def test_bare_vit_model_gives_the_classifier_features(tmp_path):
    """ViTModel's last hidden state at the class token, through the fixture's head by hand,
    gives the fixture's logits."""
    model = from_pretrained(_bare_vit_model(tmp_path))
    assert not model.include_top and model.output_shape == (None, 32)
    io = _io(HF)
    features = model.predict(io["images"], verbose=0)
    source = st.load_file(str(HF / "model.safetensors"))
    logits = features @ source["classifier.weight"].T + source["classifier.bias"]
    assert np.abs(logits - io["logits"]).max() <= 1e-4


def test_bare_vit_model_pooler_is_the_pre_logits_layer(tmp_path):
    rng = np.random.default_rng(0)
    pooler = (rng.normal(size=(32, 32)).astype("float32"), rng.normal(size=32).astype("float32"))
    model = from_pretrained(_bare_vit_model(tmp_path, pooler))
    assert model.representation_size == 32 and not model.include_top
    io = _io(HF)
    source = st.load_file(str(HF / "model.safetensors"))
    features = from_pretrained(HF, include_top=False).predict(io["images"], verbose=0)
    # the fixture's features are right (see above); the pooler is tanh(W x + b) on them
    np.testing.assert_allclose(features @ source["classifier.weight"].T + source["classifier.bias"],
                               io["logits"], atol=1e-4)
    expected = np.tanh(features @ pooler[0].T + pooler[1])
    assert np.abs(model.predict(io["images"], verbose=0) - expected).max() <= 1e-5


def test_timm_checkpoint_at_32_px_into_a_48_px_model():
    model = from_pretrained(TIMM, image_size=48)
    assert model.image_size == (48, 48) and model.patch_encoder.grid_size == (6, 6)
    source = st.load_file(str(TIMM / "model.safetensors"))
    # timm's own resampling by default (growing, TensorFlow's antialiased bicubic is the same)
    expected = keras_vit.resample_position_embeddings(source["pos_embed"], 6, method="torch_bicubic_antialias")
    np.testing.assert_allclose(model.patch_encoder.position_embedding.numpy(), expected, atol=1e-6)
    # and into a model built by hand
    target = tiny_vit(image_size=48, approximate_gelu=False)
    report = load_pretrained(target, TIMM)
    assert report["resampled"] == ["position embeddings 4x4 -> 6x6 (torch_bicubic_antialias)"]
    np.testing.assert_array_equal(target.get_layer("head").kernel.numpy(), source["head.weight"].T)


def _unchanged(model, before):
    return all(np.array_equal(w, b) for w, b in zip(model.get_weights(), before))


@pytest.mark.parametrize("edit, words", [
    (lambda a: a.pop("blocks.1.mlp.fc1.weight"), ["missing keys", "blocks.1.mlp.fc1.weight (64, 32)"]),
    (lambda a: a.update({"blocks.0.ls1.gamma": np.ones(32, "float32")}),
     ["unexpected keys", "blocks.0.ls1.gamma (32,)"]),
    (lambda a: a.update({"blocks.1.mlp.fc1.weight": np.ones((48, 32), "float32")}),
     ["shape mismatches", "blocks.1.mlp.fc1.weight: expected (64, 32), found (48, 32)"]),
], ids=["missing", "unexpected", "shape"])
def test_bad_timm_checkpoints_name_the_key_and_leave_the_model_unchanged(tmp_path, edit, words):
    folder = _copy(TIMM, tmp_path, tensors=edit)
    model = randomize(tiny_vit(approximate_gelu=False))
    before = model.get_weights()
    with pytest.raises(ValueError) as error:
        load_pretrained(model, folder)
    for word in words + ["model.safetensors", "left unchanged"]:
        assert word in str(error.value)
    assert _unchanged(model, before)
    with pytest.raises(ValueError, match=words[0]):
        from_pretrained(folder)


def test_bad_transformers_shape_names_the_key(tmp_path):
    folder = _copy(HF, tmp_path, tensors=lambda a: a.update(
        {"vit.embeddings.position_embeddings": np.ones((1, 17, 16), "float32")}))
    model = randomize(tiny_vit(approximate_gelu=False, layer_norm_epsilon=1e-12))
    before = model.get_weights()
    with pytest.raises(ValueError, match=r"embeddings.position_embeddings: expected \(1, 17, 32\), found \(1, 17, 16\)"):
        load_pretrained(model, folder)
    assert _unchanged(model, before)


@pytest.mark.parametrize("folder, edit, match", [
    (TIMM, lambda c: c.update(architecture="convnext_tiny"), "unsupported timm architecture 'convnext_tiny'"),
    (TIMM, lambda c: c.update(architecture="eva_giant_patch14_224"), "eva_giant_patch14_224.*EVA-01 layout"),
    (TIMM, lambda c: c["model_args"].update(qk_norm=True), "qk_norm=True.*query/key normalization"),
    (TIMM, lambda c: c["model_args"].update(global_pool="avgmax"), "global_pool='avgmax'"),
    (TIMM, lambda c: c["model_args"].update(frobnicate=1), r"model_args \['frobnicate'\]"),
    (HF, lambda c: c.update(model_type="data2vec-vision"), "model_type 'data2vec-vision'.*relative position bias"),
    (HF, lambda c: c.update(architectures=["ViTForMaskedImageModeling"]), "ViTForMaskedImageModeling"),
    (HF, lambda c: c.update(hidden_act="relu"), "hidden_act='relu'"),
    (HF, lambda c: c.clear(), "neither a timm config"),
], ids=["arch", "eva01", "qk_norm", "avgmax_pool", "unknown_arg", "model_type", "hf_arch", "act", "no_kind"])
def test_unsupported_configs_name_themselves(tmp_path, folder, edit, match):
    bad = _copy(folder, tmp_path, config=edit)
    model = randomize(tiny_vit(approximate_gelu=False))
    before = model.get_weights()
    with pytest.raises(ValueError, match=match):
        from_pretrained(bad)
    with pytest.raises(ValueError, match=match):
        load_pretrained(model, bad)
    assert _unchanged(model, before)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pth", "checkpoint.pt", "last.ckpt"])
def test_pickles_are_refused_unread(tmp_path, name):
    folder = tmp_path / "repo"
    folder.mkdir()
    shutil.copy(TIMM / "config.json", folder)
    pickle = folder / name
    pickle.write_bytes(b"\x80\x04cos\nsystem\n(S'touch pwned'\ntR.")  # would run a command if unpickled
    for path in (folder, pickle):
        with pytest.raises(ValueError, match="never unpickles") as error:
            from_pretrained(path)
        assert name in str(error.value) and "safe_serialization=True" in str(error.value)
    assert not (tmp_path / "pwned").exists()


def test_missing_files_and_config_name_themselves(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        from_pretrained(tmp_path / "nowhere")
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(TIMM / "model.safetensors", lone)
    with pytest.raises(ValueError, match="no config.json"):
        from_pretrained(lone / "model.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no model.safetensors"):
        from_pretrained(tmp_path / "empty")
    truncated = _copy(TIMM, tmp_path / "t")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors is not a safetensors file keras-vit can read: .*truncated"):
        from_pretrained(truncated)
    with pytest.raises(ValueError, match="variant is for .npz"):
        from_pretrained(TIMM, variant="B/16")


def test_missing_safetensors_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    model = from_pretrained(TIMM)  # reading is keras-vit's own, header first (formats/_safetensors.py)
    with pytest.raises(ImportError, match=r"keras-vit\[hub\]"):
        save_pretrained(model, tmp_path / "out")


def test_qkv_bias_false_loads_zero_biases(tmp_path):
    def drop(arrays):
        for i in range(2):
            arrays.pop(f"blocks.{i}.attn.qkv.bias")

    folder = _copy(TIMM, tmp_path, config=lambda c: c["model_args"].update(qkv_bias=False), tensors=drop)
    model = from_pretrained(folder)
    assert not np.any(model.blocks[0].query.bias.numpy()) and not np.any(model.blocks[1].value.bias.numpy())
    # without the config's word, absent biases are missing keys
    with pytest.raises(ValueError, match="missing keys: blocks.0.attn.qkv.bias"):
        from_pretrained(_copy(TIMM, tmp_path / "b", tensors=drop))


def test_official_npz_sizes_read_off_the_file():
    meta = json.loads((OFFICIAL / "hybrid_r2_token.json").read_text())
    model = from_pretrained(OFFICIAL / "hybrid_r2_token.npz")
    assert model.image_size == (meta["image_size"],) * 2
    assert model.resnet["num_layers"] == tuple(meta["config"]["resnet"]["num_layers"])
    io = np.load(OFFICIAL / "hybrid_r2_token.io.npz")
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() <= 1e-4
    assert detect_format(OFFICIAL / "hybrid_r2_token.npz") == "official"
    assert detect_format(TIMM) == "timm" and detect_format(HF / "model.safetensors") == "transformers"


def test_save_pretrained_timm_round_trip(tmp_path):
    model = from_pretrained(TIMM)
    out = save_pretrained(model, tmp_path / "saved", format="timm")
    saved, source = st.load_file(f"{out}/model.safetensors"), st.load_file(str(TIMM / "model.safetensors"))
    assert sorted(saved) == sorted(source)
    for key in source:
        np.testing.assert_array_equal(saved[key], source[key], err_msg=key)
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    original = json.loads((TIMM / "config.json").read_text())
    for key in ("img_size", "patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "global_pool"):
        assert config["model_args"][key] == original["model_args"][key], key
    assert config["pretrained_cfg"]["mean"] == [0.5] * 3 and config["num_classes"] == 7
    io = _io(TIMM)
    again = from_pretrained(out)
    np.testing.assert_array_equal(again.predict(io["images"], verbose=0), model.predict(io["images"], verbose=0))
    with pytest.raises(FileExistsError):
        save_pretrained(model, out)


def test_save_pretrained_average_pooled_models_both_norm_placements(tmp_path):
    io = _io(TIMM)
    for i, (classifier, pooling, fc_norm) in enumerate([("gap", None, False), ("token", "gap", True)]):
        model = randomize(tiny_vit(classifier=classifier, pooling=pooling, fc_norm=fc_norm, approximate_gelu=False,
                                   pixel_mean=(0.485, 0.456, 0.406), pixel_std=(0.229, 0.224, 0.225)))
        folder = save_pretrained(model, tmp_path / f"m{i}")
        keys = set(st.load_file(f"{folder}/model.safetensors"))
        assert ("fc_norm.weight" in keys) == fc_norm and ("norm.weight" in keys) != fc_norm
        assert ("cls_token" in keys) == (classifier == "token")
        again = from_pretrained(folder)
        assert (again.fc_norm, again.classifier, again.pixel_mean) == (fc_norm, classifier, model.pixel_mean)
        np.testing.assert_allclose(again.predict(io["images"], verbose=0), model.predict(io["images"], verbose=0),
                                   atol=1e-6)


def test_save_pretrained_transformers_round_trip(tmp_path):
    model = from_pretrained(HF)
    out = save_pretrained(model, tmp_path / "hf", format="transformers")
    saved, source = st.load_file(f"{out}/model.safetensors"), st.load_file(str(HF / "model.safetensors"))
    assert sorted(saved) == sorted(source)
    for key in source:
        np.testing.assert_array_equal(saved[key], source[key], err_msg=key)
    again = from_pretrained(out)
    assert again.class_names == model.class_names and again.layer_norm_epsilon == 1e-12


def test_save_pretrained_refuses_what_the_format_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="pre-logits"):
        save_pretrained(tiny_vit(representation_size=16), tmp_path / "a")
    with pytest.raises(ValueError, match="layer_norm_epsilon=1e-12"):
        save_pretrained(tiny_vit(layer_norm_epsilon=1e-12), tmp_path / "b")
    with pytest.raises(ValueError, match="fc_norm"):
        save_pretrained(tiny_vit(pooling="gap", fc_norm=True), tmp_path / "c", format="transformers")
    assert not list(tmp_path.iterdir())


def test_convert_autodetects_each_format(tmp_path):
    import keras

    from keras_vit.cli import main

    io = _io(TIMM)
    assert main(["convert", str(TIMM), "--out", str(tmp_path / "timm.keras")]) == 0
    model = keras.models.load_model(tmp_path / "timm.keras")
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() <= 1e-4
    assert main(["convert", str(HF), "--image-size", "48", "--classes", "3", "--out", str(tmp_path / "hf.keras")]) == 0
    model = keras.models.load_model(tmp_path / "hf.keras")
    assert model.input_shape == (None, 48, 48, 3) and model.output_shape == (None, 3)
    assert model.layer_norm_epsilon == 1e-12 and not np.any(model.get_layer("head").kernel.numpy())
    assert main(["convert", str(OFFICIAL / "vit_gap_current_names.npz"), "--out", str(tmp_path / "npz.keras")]) == 0
    model = keras.models.load_model(tmp_path / "npz.keras")
    io = np.load(OFFICIAL / "vit_gap_current_names.io.npz")
    assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() <= 1e-4
    # a hub checkpoint with --variant, and a pickle, are refused without writing anything
    assert main(["convert", str(HF), "--variant", "B/16", "--out", str(tmp_path / "x.keras")]) == 1
    (tmp_path / "model.bin").write_bytes(b"\x80\x04.")
    assert main(["convert", str(tmp_path / "model.bin"), "--out", str(tmp_path / "y.keras")]) == 1
    assert sorted(p.name for p in tmp_path.glob("*.keras")) == ["hf.keras", "npz.keras", "timm.keras"]
    with pytest.raises(ValueError, match="end in .keras"):
        convert(TIMM, tmp_path / "model.h5")


def test_preprocess_input_and_exports_use_the_models_mean_and_std():
    from keras_vit.export import _scaling_text
    from keras_vit.serving import ServingGraph

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    model = randomize(tiny_vit(pixel_mean=mean, pixel_std=std))
    pixels = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3)).astype("uint8")
    expected = (pixels / 255.0 - np.array(mean)) / np.array(std)
    np.testing.assert_allclose(keras_vit.preprocess_input(pixels, model=model), expected, atol=1e-5)
    np.testing.assert_allclose(keras_vit.preprocess_input(pixels), pixels / 127.5 - 1, atol=1e-6)
    served = ServingGraph(model).serving_function(resize=False)(pixels)["logits"].numpy()
    np.testing.assert_allclose(served, model.predict(expected.astype("float32"), verbose=0), atol=1e-4)
    assert "0.485" in _scaling_text(model) and _scaling_text(tiny_vit()) == "x / 127.5 - 1"
    config = model.get_config()
    assert config["pixel_mean"] == mean and config["pixel_std"] == std
    with pytest.raises(ValueError, match="pixel_std must be positive"):
        tiny_vit(pixel_std=(0.5, 0.0, 0.5))


def test_sharded_checkpoints_and_single_files(tmp_path):
    """transformers writes big models as shards listed in model.safetensors.index.json."""
    folder = tmp_path / "sharded"
    folder.mkdir()
    shutil.copy(HF / "config.json", folder)
    arrays = st.load_file(str(HF / "model.safetensors"))
    keys = sorted(arrays)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        st.save_file({k: arrays[k] for k in part}, str(folder / name))
        weight_map.update(dict.fromkeys(part, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    io = _io(HF)
    for path in (folder, HF / "model.safetensors"):
        model = from_pretrained(path)
        assert np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max() <= 1e-4


# --- issue 35: misspelled keywords, and log lines that say what happened ----------------------------

def test_misspelled_keywords_are_refused_naming_the_nearest():
    with pytest.raises(TypeError, match=r"from_pretrained\(\) got an unexpected keyword argument `image_sise` "
                                        r"\(did you mean `image_size`\?\)"):
        from_pretrained(TIMM, image_sise=48)
    with pytest.raises(TypeError, match=r"load_pretrained\(\) .* `resmaple` \(did you mean `resample`\?\)"):
        load_pretrained(tiny_vit(), TIMM, resmaple="bicubic")
    with pytest.raises(TypeError, match=r"save_pretrained\(\) .* `formt` \(did you mean `format`\?\)"):
        save_pretrained(tiny_vit(), "unused", formt="timm")


def test_load_lines_say_an_official_checkpoint_and_what_was_not_loaded(tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="keras_vit")
    convert(OFFICIAL / "vit_gap_current_names.npz", tmp_path / "npz.keras")
    assert any(r.getMessage().endswith("vit_gap_current_names.npz is an official checkpoint") for r in caplog.records)
    caplog.clear()
    model = from_pretrained(HF, classes=10)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded ")]
    assert "not loaded (the model keeps its own): classifier.weight (model (10, 32), checkpoint (7, 32))" in line, line
    assert "kept" not in line and "nothing" not in line and model.classes == 10
