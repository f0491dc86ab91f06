"""Zero-shot with two-tower checkpoints (keras_vit/zeroshot/): transformers' CLIPModel and SiglipModel folders,
written by transformers itself with their tokenizer files (tests/data/zeroshot/make_zeroshot.py), give
transformers' token ids, embeddings and logits under every backend; the options that matter (SigLIP's padding,
CLIP's read-out token, SigLIP's logit bias) each move the logits past the tolerance when got wrong."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
from conftest import BACKEND, DATA

import keras_vit
from keras_vit.zeroshot import ImageText, TextConfig, load_image_text, text_tower
from keras_vit.zeroshot.tokenizers import load_tokenizer

pytestmark = pytest.mark.backends

ZEROSHOT = DATA / "zeroshot"
CASES = json.loads((ZEROSHOT / "cases.json").read_text())
TOLERANCE = CASES["tolerance"]
NAMES = ["hf_clip", "hf_clip_legacy", "hf_siglip"]


def relative_error(out, ref):
    return float(np.max(np.abs(np.asarray(out) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.fixture(scope="module")
def loaded():
    """{case: (ImageText, arrays)}, each checkpoint read once for the file."""
    out = {}
    for name in NAMES:
        with np.load(ZEROSHOT / f"{name}.io.npz") as io:
            out[name] = (load_image_text(ZEROSHOT / name), dict(io))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_token_ids_are_the_checkpoint_tokenizer_s(loaded, name):
    """Mixed case, punctuation, accents, digits, runs of spaces and an unseen word: the ids transformers'
    tokenizer gives, padded as its zero-shot usage pads (CLIP to the longest text, SigLIP to 64)."""
    model, io = loaded[name]
    ids = model.tokenize(list(io["texts"]))
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, io["input_ids"])
    assert ids.shape[1] == (64 if name == "hf_siglip" else max(io["attention_mask"].sum(axis=1)))


@pytest.mark.parametrize("name", NAMES)
def test_embeddings_and_logits_are_transformers(loaded, name):
    model, io = loaded[name]
    texts = list(io["texts"])
    text = model.text_embeddings(texts)
    assert relative_error(text, io["text_embeds"]) <= TOLERANCE, (name, BACKEND)
    image = model.image_embeddings(io["images"])
    assert relative_error(image, io["image_embeds"]) <= TOLERANCE, (name, BACKEND)
    assert relative_error(model.image_embeddings(io["images_alt"]), io["image_embeds_alt"]) <= TOLERANCE
    logits = model.logits(io["images"], texts)
    assert logits.shape == io["logits_per_image"].shape
    assert relative_error(logits, io["logits_per_image"]) <= TOLERANCE, (name, BACKEND)


def _logits_with(model, io, ids):
    return model.scores(model.image_embeddings(io["images"]), np.asarray(model.text_model.predict(ids, verbose=0)))


def test_siglip_padded_to_the_longest_text_misses(loaded):
    """SigLIP reads the last position, padding included: padded to the longest text instead of 64, the
    logits move past the tolerance (the mistake of mteb #1424)."""
    model, io = loaded["hf_siglip"]
    ids = io["input_ids"]
    width = int(max((row != model.tokenizer.pad_token_id).sum() + 1 for row in ids))
    shortened = ids[:, :width]
    assert relative_error(_logits_with(model, io, shortened), io["logits_per_image"]) > 10 * TOLERANCE


@pytest.mark.parametrize("wrong", ["last", "argmax"])
def test_clip_read_out_at_another_token_misses(loaded, wrong):
    """transformers' current CLIP pools at the first end-of-text token; the last position or the highest id
    (the legacy rule) give other logits."""
    model, io = loaded["hf_clip"]
    config = dataclasses.replace(model.text_model.text_config, pooling=wrong)
    other = text_tower(config)
    other.set_weights(model.text_model.get_weights())
    logits = model.scores(model.image_embeddings(io["images"]), np.asarray(other.predict(io["input_ids"], verbose=0)))
    assert relative_error(logits, io["logits_per_image"]) > 10 * TOLERANCE


def test_the_legacy_clip_reads_out_at_the_highest_id(loaded):
    model, io = loaded["hf_clip_legacy"]
    assert model.text_model.text_config.pooling == "argmax"
    assert loaded["hf_clip"][0].text_model.text_config.pooling == "eos"


def test_siglip_without_its_logit_bias_misses(loaded):
    model, io = loaded["hf_siglip"]
    assert model.logit_bias == pytest.approx(-2.5)
    unbiased = ImageText(model.image_model, model.text_model, model.tokenizer, "siglip", model.logit_scale, 0.0)
    logits = unbiased.logits(io["images"], list(io["texts"]))
    assert relative_error(logits, io["logits_per_image"]) > 10 * TOLERANCE


def test_classify_is_the_prompt_ensemble(loaded):
    """classify: per label, the mean of the normalised template embeddings, normalised; softmax (CLIP) or
    sigmoid (SigLIP) over the scaled cosine similarities: computed here by hand from the text embeddings."""
    labels, templates = ["cat", "dog", "rocket ship"], ["a photo of a {}.", "a blurry photo of the {}", "{}"]
    for name in ("hf_clip", "hf_siglip"):
        model, io = loaded[name]
        probs = model.classify(io["images"], labels, templates=templates)
        texts = [t.format(label) for label in labels for t in templates]
        t = model.text_embeddings(texts).astype(np.float64)
        t = (t / np.linalg.norm(t, axis=-1, keepdims=True)).reshape(3, 3, -1).mean(axis=1)
        i = model.image_embeddings(io["images"]).astype(np.float64)
        cosine = (i / np.linalg.norm(i, axis=-1, keepdims=True)) @ (t / np.linalg.norm(t, axis=-1, keepdims=True)).T
        logits = np.exp(model.logit_scale) * cosine + model.logit_bias
        if name == "hf_clip":
            want = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
            np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
        else:
            want = 1 / (1 + np.exp(-logits))
        np.testing.assert_allclose(probs, want, rtol=1e-4, atol=1e-6)


def test_classify_reads_photos_from_disk(loaded):
    """Paths and uint8 arrays: resized to the checkpoint's size and normalised with its mean and std."""
    from keras_vit.applications import load_image

    model, _ = loaded["hf_clip"]
    paths = sorted(str(p) for p in (DATA / "cifar10_sample" / "cat").glob("*.jpg"))[:2]
    from_paths = model.classify(paths, ["cat", "dog"])
    pixels = np.stack([load_image(p) for p in paths])
    np.testing.assert_allclose(model.classify(pixels, ["cat", "dog"]), from_paths, rtol=1e-5, atol=1e-6)
    scaled = (pixels / 255.0 - np.asarray(model.image_model.pixel_mean)) / np.asarray(model.image_model.pixel_std)
    np.testing.assert_allclose(model.classify(scaled.astype(np.float32), ["cat", "dog"]), from_paths, atol=1e-5)


def test_bad_labels_and_templates_are_named(loaded):
    model, io = loaded["hf_clip"]
    with pytest.raises(TypeError, match="split it first"):
        model.classify(io["images"], "cat,dog")
    with pytest.raises(ValueError, match="labels repeat.*'cat'"):
        model.classify(io["images"], ["cat", "cat"])
    with pytest.raises(ValueError, match="exactly one"):
        model.classify(io["images"], ["cat"], templates=["a photo"])


def test_the_text_tower_round_trips_through_a_keras_file(loaded, tmp_path):
    import keras

    model, io = loaded["hf_clip"]
    path = tmp_path / "text.keras"
    model.text_model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_allclose(np.asarray(again.predict(io["input_ids"], verbose=0)), io["text_embeds"],
                               rtol=0, atol=TOLERANCE)


def test_a_config_that_disagrees_with_its_weights_is_refused_before_building(tmp_path):
    folder = tmp_path / "clip"
    shutil.copytree(ZEROSHOT / "hf_clip", folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 40
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"num_hidden_layers is 40, but the weights give 2"):
        load_image_text(folder)


def test_a_missing_tokenizer_is_named_with_what_writes_it(tmp_path):
    for name, missing in (("hf_clip", "tokenizer.json"), ("hf_siglip", "spiece.model")):
        folder = tmp_path / name
        shutil.copytree(ZEROSHOT / name, folder)
        os.remove(folder / missing)
        with pytest.raises(FileNotFoundError, match=missing):
            load_image_text(folder)


def test_an_image_only_checkpoint_points_to_from_pretrained():
    with pytest.raises(ValueError, match="from_pretrained"):
        load_image_text(DATA / "zoo" / "hf_dinov2")
    with pytest.raises(TypeError):
        load_image_text(ZEROSHOT / "hf_clip", padding="longest")  # a misspelled / unknown keyword is refused


def test_long_texts_are_truncated_keeping_the_end_token():
    clip = load_tokenizer(str(ZEROSHOT / "hf_clip"), "clip", 24)
    ids = clip(["a photo of a cat " * 20, "a dog"])
    assert ids.shape == (2, 24) and ids[0, -1] == clip.eos_token_id
    siglip = load_tokenizer(str(ZEROSHOT / "hf_siglip"), "siglip", 64)
    ids = siglip(["a photo of a cat " * 40])
    assert ids.shape == (1, 64) and ids[0, -1] == siglip.eos_token_id


def test_a_text_tower_of_any_config_builds():
    tower = text_tower(TextConfig(vocab_size=50, max_length=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                                  projection_dim=8, pooling="eos", eos_token_id=3))
    out = tower.predict(np.array([[1, 2, 3, 0], [4, 3, 0, 0]], np.int32), verbose=0)
    assert out.shape == (2, 8)
    with pytest.raises(ValueError, match="eos_token_id"):
        TextConfig(vocab_size=50, max_length=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                   projection_dim=8, pooling="eos")
    with pytest.raises(ValueError, match="more than the 8 position embeddings"):
        tower(np.ones((1, 9), np.int32))


def test_load_image_text_is_public():
    assert keras_vit.load_image_text is load_image_text


CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.mark.one_backend
@pytest.mark.parametrize("name, out", [("hf_clip", "zeroshot.tflite"), ("hf_siglip", "zeroshot.onnx"),
                                       ("hf_clip", "zeroshot_saved_model")])
def test_the_exported_zero_shot_classifier_agrees_with_classify(loaded, tmp_path, name, out):
    """20 CIFAR-10 images at the checkpoint's size: the export's probabilities are classify's; the TFLite file
    carries the labels in MediaPipe's metadata, and keras_vit.load_classifier runs every format."""
    from keras_vit.applications import load_image
    from keras_vit.export import load_classifier
    from keras_vit.zeroshot.export import export_zeroshot

    model, _ = loaded[name]
    paths = sorted(str(p) for p in (DATA / "cifar10_sample").rglob("*.jpg"))[:20]
    assert len(paths) == 20
    templates = ["a photo of a {}.", "a blurry photo of the {}."]
    report = export_zeroshot(model, tmp_path / out, CIFAR_CLASSES, templates=templates, samples=paths)
    assert report["samples"] == 20 and report["max_abs_diff"] <= 1e-4 and report["top1_agreement"] == 1.0
    images = np.stack([load_image(p) for p in paths])
    classifier = load_classifier(tmp_path / out)
    assert classifier.class_names == CIFAR_CLASSES
    np.testing.assert_allclose(classifier(images)["probabilities"], model.classify(images, CIFAR_CLASSES, templates),
                               atol=1e-4)
    meta = json.loads((tmp_path / f"{out}.json").read_text())
    assert meta["templates"] == templates and meta["class_names"] == CIFAR_CLASSES
    if out.endswith(".tflite"):
        from keras_vit.tflite_metadata import read_metadata

        written = read_metadata(tmp_path / out)
        assert "zero-shot" in written["description"]
        assert "labels.txt" in str(written)


@pytest.mark.one_backend
def test_an_export_that_differs_is_refused_and_writes_nothing(loaded, tmp_path, monkeypatch):
    import keras_vit.zeroshot.export as zexport

    model, _ = loaded["hf_clip"]
    monkeypatch.setattr(zexport, "TOLERANCE", -1.0)
    with pytest.raises(ValueError, match="Nothing was written"):
        zexport.export_zeroshot(model, tmp_path / "z.onnx", ["cat", "dog"])
    assert not (tmp_path / "z.onnx").exists() and not (tmp_path / "z.onnx.json").exists()


@pytest.mark.one_backend
@pytest.mark.slow  # the CLI end to end (the exports' parity: the in-process tests above)
def test_the_cli_predicts_and_exports_zero_shot(tmp_path):
    import subprocess
    import sys

    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(CIFAR_CLASSES) + "\n")
    run = lambda *a: subprocess.run([sys.executable, "-m", "keras_vit.cli", *map(str, a)], capture_output=True,  # noqa: E731
                                    text=True, cwd=tmp_path)
    folder = DATA / "cifar10_sample"
    done = run("predict", ZEROSHOT / "hf_clip", folder, "--labels-file", labels, "--templates", "clip", "--top", "2",
               "--out", tmp_path / "p.csv")
    assert done.returncode == 0, done.stderr
    assert "accuracy on the labelled images" in done.stderr + done.stdout
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 21
    done = run("predict", ZEROSHOT / "hf_siglip", folder / "cat", "--labels", "cat, dog")
    assert done.returncode == 0 and (" cat " in done.stdout or " dog " in done.stdout), done.stderr
    done = run("predict", ZEROSHOT / "hf_clip", folder / "cat")
    assert done.returncode != 0 and "--labels" in done.stderr
    done = run("export", ZEROSHOT / "hf_siglip", "--labels", "cat,dog", "--out", tmp_path / "s.tflite",
               "--samples", folder)
    assert done.returncode == 0, done.stderr
    done = run("predict", tmp_path / "s.tflite", folder / "cat")
    assert done.returncode == 0 and "cat" in done.stdout, done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_save_pretrained_writes_what_transformers_wrote(loaded, tmp_path, name):
    """The folder written holds transformers' own keys and shapes (those of the folder transformers saved), its
    config reads back to the same towers, the tokenizer files come along, and the logits are transformers'."""
    from keras_vit.formats._safetensors import SafetensorsFile

    model, io = loaded[name]
    folder = model.save_pretrained(tmp_path / name)
    written = SafetensorsFile(os.path.join(folder, "model.safetensors")).shapes
    original = SafetensorsFile(ZEROSHOT / name / "model.safetensors").shapes
    assert written == original
    config = json.loads((tmp_path / name / "config.json").read_text())
    assert config["architectures"] == [("SiglipModel" if name == "hf_siglip" else "CLIPModel")]
    again = load_image_text(folder)
    assert again.text_model.text_config == model.text_model.text_config
    np.testing.assert_array_equal(again.tokenize(list(io["texts"])), io["input_ids"])
    assert relative_error(again.logits(io["images"], list(io["texts"])), io["logits_per_image"]) <= TOLERANCE
    with pytest.raises(FileExistsError):
        model.save_pretrained(tmp_path / name)


@pytest.mark.parametrize("name", NAMES)
def test_zero_shot_on_photos_is_transformers_pipeline(loaded, name):
    """20 CIFAR-10 test photos over the ten class names: the probabilities of transformers' zero-shot pipeline
    (its template, its padding, softmax or sigmoid). Random weights: agreement, not accuracy, is what counts."""
    model, _ = loaded[name]
    with np.load(ZEROSHOT / "photos.npz") as photos, np.load(ZEROSHOT / f"{name}.photos.npz") as ref:
        probs = model.classify(photos["images"], list(ref["classes"]), templates=[str(ref["template"])])
        np.testing.assert_allclose(probs, ref["probabilities"], atol=TOLERANCE)


@pytest.mark.one_backend
def test_the_zero_shot_figure_is_drawn(loaded, tmp_path):
    pytest.importorskip("matplotlib")
    from keras_vit.zeroshot.figures import plot_zeroshot

    model, _ = loaded["hf_siglip"]
    with np.load(ZEROSHOT / "photos.npz") as photos:
        images, truth = photos["images"][:8], list(photos["labels"][:8])
    probs = model.classify(images, CIFAR_CLASSES)
    path = plot_zeroshot(images, probs, CIFAR_CLASSES, tmp_path / "z.png", truth=truth, title="SigLIP (random)")
    from keras_vit.images import read_image

    assert read_image(path).shape[1] > 800
    with pytest.raises(ValueError, match=r"need \(8, 3\)"):
        plot_zeroshot(images, probs, CIFAR_CLASSES[:3], tmp_path / "bad.png")
