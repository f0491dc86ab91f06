"""Photos as users keep them (issue 38): every format and colour mode, upright; bad files skipped and
named; decompression bombs refused before decoding; folders with and without their own split, CSV
lists; the split recorded and reused; one view of an image in training, predict, fewshot, visualize
and every export; the end-of-run report; `keras-vit train` and `predict` end to end on such folders.

The photos are generated here (Pillow, which the test extra brings with matplotlib, writes the
formats TensorFlow cannot encode), tiny so the tests stay fast.
"""

import csv
import io
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, randomize, tiny_vit

from keras_vit import data, images, report

Image = pytest.importorskip("PIL.Image", reason="Pillow writes the test photos (pip install -e '.[test]')")
ImageOps = pytest.importorskip("PIL.ImageOps")

FINETUNE = str(ROOT / "recipes" / "finetune.py")
TINY = ["--set", "model.variant=None", "--set", "model.patch_size=8", "--set", "model.hidden_size=32",
        "--set", "model.num_layers=2", "--set", "model.num_heads=4", "--set", "model.mlp_dim=64",
        "--set", "image_size=32", "--set", "batch_size=8", "--set", "epochs=1", "--set", "steps_per_epoch=3",
        "--set", "warmup_steps=1"]


def _pixels(h, w, seed):
    """A picture with structure (so a turn or a mirror shows), not noise JPEG would smear."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (3, 4, 3)).astype("float32")
    return np.asarray(tf.cast(tf.image.resize(base[None], (h, w))[0], tf.uint8))


def _encode(array, fmt, **kwargs):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def _exif(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def bomb_png():
    """A 50,000 x 50,000 RGB PNG header in a file of under 100 bytes: 7.5 GB if anything decoded it."""
    header = struct.pack(">IIBBBBB", 50_000, 50_000, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + _png_chunk(b"IEND", b""))


def write_photos(root):
    """FOLDER/<class>/** of every kind a user's folder holds, and what each should read as (upright RGB,
    with the largest difference a decoder may make); the files that must be skipped, and why."""
    expected, bad = {}, {}

    def put(relative, content, upright=None, tolerance=0):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if upright is not None:
            expected[str(path)] = (upright, tolerance)
        return str(path)

    a, b, c = _pixels(24, 36, 1), _pixels(40, 30, 2), _pixels(50, 20, 3)
    # cat: JPEG, WebP, grayscale and RGBA PNGs, EXIF-turned JPEG, a photo in a nested folder
    put("cat/plain.jpg", _encode(a, "JPEG", quality=95, subsampling=0), a, 12)
    put("cat/lossless.webp", _encode(a, "WEBP", lossless=True), a)
    put("cat/grey.png", _encode(a[..., 0], "PNG"), np.repeat(a[..., :1], 3, -1))
    put("cat/alpha.png", _encode(np.concatenate([b, np.full((40, 30, 1), 9, np.uint8)], -1), "PNG"), b)
    put("cat/turned.jpg", _encode(c, "JPEG", quality=95, subsampling=0, exif=_exif(6)), np.rot90(c, 3), 12)  # stored 20 wide
    put("cat/2019/summer/nested.png", _encode(b, "PNG"), b)
    # dog: BMPs (24-bit; a palette one, read by Pillow), an animated GIF's first frame, CMYK JPEG, 16-bit PNG
    put("dog/plain.bmp", _encode(b, "BMP"), b)
    palette = Image.fromarray(a).convert("P")
    put("dog/palette.bmp", _save_image(palette, "BMP"), np.asarray(palette.convert("RGB")))
    frames = [Image.fromarray(np.full((10, 14, 3), v, np.uint8)) for v in (30, 220)]
    put("dog/animated.gif", _save_image(frames[0], "GIF", save_all=True, append_images=frames[1:]),
        np.full((10, 14, 3), 30, np.uint8))
    put("dog/cmyk.jpg", _save_image(Image.fromarray(c).convert("CMYK"), "JPEG", quality=95, subsampling=0), c, 12)
    deep = (b[..., :1].astype(np.uint16) * 257)
    put("dog/deep.png", tf.io.encode_png(deep).numpy(), np.repeat(b[..., :1], 3, -1))
    put("dog/upside_down.png", _encode(a, "PNG", exif=_exif(3)), a[::-1, ::-1])
    # emu: photos of several sizes, and what must be skipped
    for i, size in enumerate([(33, 47), (64, 48), (17, 90)]):
        pixels = _pixels(*size, 10 + i)
        put(f"emu/{i}.jpg", _encode(pixels, "JPEG", quality=95, subsampling=0), pixels, 12)
    noise = np.random.default_rng(20).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    whole = _encode(noise, "JPEG")  # about 10 kB: cut in half, the header is whole and the scan is not
    bad[put("emu/cut.jpg", whole[: len(whole) // 2])] = "truncated or damaged JPEG: "
    bad[put("emu/fake.jpg", b"just some text, named like a photo")] = "Unknown image file format"
    bad[put("emu/bomb.png", bomb_png())] = "decompression bomb"
    put("emu/notes.txt", b"not an image, not named like one")
    return expected, bad


def _save_image(image, fmt, **kwargs):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos") / "my_photos"
    expected, bad = write_photos(root)
    return root, expected, bad


def test_every_kind_of_photo_is_read_upright_as_rgb_uint8(photos):
    _, expected, _ = photos
    assert len(expected) == 15
    for path, (upright, tolerance) in expected.items():
        image = images.read_image(path)
        assert image.dtype == np.uint8 and image.shape == upright.shape, path
        assert np.abs(image.astype(int) - upright).max() <= tolerance, path
        if path.endswith((".jpg", ".png", ".webp")):  # Pillow agrees on the orientation (and on the pixels)
            with Image.open(path) as opened:
                reference = np.asarray(ImageOps.exif_transpose(opened).convert("RGB"))
            if not path.endswith("deep.png"):  # Pillow cuts 16-bit grey at 255 instead of scaling it
                assert np.abs(image.astype(int) - reference).max() <= max(tolerance, 3), path


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "WEBP"])
def test_all_eight_exif_orientations_match_pillow(kind, tmp_path):
    pixels = _pixels(6, 9, 5)
    for orientation in range(1, 9):
        path = tmp_path / f"o{orientation}.{kind.lower()}"
        extra = {"quality": 95} if kind == "JPEG" else {"lossless": True} if kind == "WEBP" else {}
        path.write_bytes(_encode(pixels, kind, exif=_exif(orientation), **extra))
        assert images.inspect(str(path)).orientation == orientation
        with Image.open(path) as opened:
            reference = np.asarray(ImageOps.exif_transpose(opened).convert("RGB"))
        image = images.read_image(path)
        assert image.shape == reference.shape and np.abs(image.astype(int) - reference).max() <= 12, orientation


def test_a_folder_without_a_split_is_split_seeded_and_bad_files_are_named_once(photos, caplog):
    root, expected, bad = photos
    with caplog.at_level("INFO", logger="keras_vit"):
        splits = data.load_data(str(root), test_fraction=0.3, seed=1)
    train, test = splits["train"], splits["test"]
    assert train.class_names == ["cat", "dog", "emu"] and train.images is None
    assert len(train) + len(test) == 15 and sorted(train.files.names + test.files.names) == sorted(expected)
    assert np.bincount(test.labels).tolist() == [2, 2, 1]  # 30% of 6, 6 and 3, at least one each
    assert sorted(name for name, _ in train.skipped) == sorted(bad)
    for name, reason in train.skipped:
        assert reason.startswith(bad[name]), (name, reason)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped")]
    assert len(lines) == 1 and "skipped 3 of 18 files" in lines[0], lines  # one summary line, every file named
    assert all(name in lines[0] for name in bad)
    assert "1 files without an image extension" in caplog.text  # notes.txt is not counted as a photo
    # every file of the stream decodes upright, at its own size
    for (image, _), name in zip(train.elements(), train.files.names):
        assert tuple(image.shape) == expected[name][0].shape
    again = data.load_data(str(root), test_fraction=0.3, seed=1)["test"]
    assert again.files.names == test.files.names
    assert data.load_data(str(root), test_fraction=0.3, seed=2)["test"].files.names != test.files.names
    with pytest.raises(ValueError, match=r"3 of 18 files cannot be used \(strict=true refuses them\): .*bomb.png "
                                         r"\(decompression bomb: its PNG header claims 50000x50000"):
        data.load_data(str(root), strict=True)


def test_a_folder_of_only_unreadable_files_is_refused(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        (tmp_path / cls / "x.jpg").write_bytes(b"no")
    with pytest.raises(ValueError, match=r"none of its 2 image files can be read .*x.jpg: Unknown image file format"):
        data.load_data(str(tmp_path))


def test_decompression_bombs_are_refused_before_decoding_in_every_command(photos, tmp_path, monkeypatch, caplog):
    from keras_vit import fewshot, visualize

    root, _, _ = photos
    bomb = str(root / "emu" / "bomb.png")
    decoded = []
    real = images.decode_eager
    monkeypatch.setattr(images, "decode_eager", lambda source, info: decoded.append(info) or real(source, info))
    monkeypatch.setattr(data, "decode_eager", images.decode_eager)
    for read in (images.read_image, lambda p: visualize.load_images([p], 32), lambda p: report.image_paths([p])):
        with pytest.raises(ValueError, match=r"bomb.png: decompression bomb: its PNG header claims 50000x50000 = "
                                             r"2,500,000,000 pixels, over the limit of 178,956,970"):
            read(bomb)
    assert not any(info.width == 50_000 for info in decoded)
    # train and fewshot list the folder: the bomb is left out by its header (test above); fewshot runs
    model = randomize(tiny_vit(classes=3))
    with caplog.at_level("INFO", logger="keras_vit"):
        result = fewshot.fewshot_evaluate(model, str(root), shots=(1,), seeds=1, holdout=1)
    assert result["num_classes"] == 3 and "decompression bomb" in caplog.text
    assert not any(info.width == 50_000 for info in decoded)
    monkeypatch.setenv(images.MAX_PIXELS_ENV, "100")  # the limit is the user's to move
    with pytest.raises(ValueError, match=r"over the limit of 100 "):
        images.read_image(root / "cat" / "plain.jpg")


def test_split_folders_with_their_own_validation_and_csv_lists(tmp_path):
    for split, count in (("train", 4), ("val", 2), ("test", 2)):
        for cls in ("ant", "bee"):
            for j in range(count):
                path = tmp_path / "split" / split / cls / f"{j}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_encode(_pixels(8 + j, 9, j), "PNG"))
    splits = data.load_data(str(tmp_path / "split"))
    assert {k: len(v) for k, v in splits.items()} == {"train": 8, "validation": 4, "test": 4}
    train, validation, test = data.training_splits(str(tmp_path / "split"), validation_split=0.25)
    assert (len(train), len(validation), len(test)) == (8, 4, 4)  # its own val/, not 25% of train
    # A CSV of path,label[,split]: paths relative to the CSV, a header line optional.
    rows = [["path", "label", "split"]] + [
        [os.path.relpath(f, tmp_path), f.split(os.sep)[-2], f.split(os.sep)[-3]]
        for f in sorted(str(p) for p in (tmp_path / "split").rglob("*.png"))]
    (tmp_path / "list.csv").write_text("\n".join(",".join(r) for r in rows) + "\n")
    listed = data.load_data(str(tmp_path / "list.csv"))
    assert {k: len(v) for k, v in listed.items()} == {"train": 8, "validation": 4, "test": 4}
    assert listed["train"].class_names == ["ant", "bee"]
    (tmp_path / "two.csv").write_text("\n".join(",".join(r[:2]) for r in rows[1:]) + "\n")  # no split, no header
    seeded = data.load_data(str(tmp_path / "two.csv"), test_fraction=0.25)
    assert (len(seeded["train"]), len(seeded["test"])) == (12, 4)
    for text, message in (("a.png\n", r"row 1: expected path,label"), ("a.png,ant,later\n", "unknown split 'later'"),
                          ("a.png,ant,train\nb.png,bee\n", "some lines name a split and some do not")):
        (tmp_path / "bad.csv").write_text(text)
        with pytest.raises(ValueError, match=message):
            data.load_data(str(tmp_path / "bad.csv"))


def test_the_split_is_recorded_in_the_model_dir_and_reused(photos, tmp_path, caplog):
    root, _, _ = photos
    copy = tmp_path / "photos"
    subprocess.run(["cp", "-r", str(root), str(copy)], check=True)
    settings = dict(seed=0, test_fraction=0.3, validation_split=0.25)
    first = data.training_splits(str(copy), record_dir=str(tmp_path / "run"), **settings)
    record = tmp_path / "run" / data.SPLIT_RECORD
    text = record.read_text()
    assert text.startswith("# keras-vit data split: ") and "# skipped: " in text
    # New photos arrive, one of the training photos breaks: a resumed or re-run job keeps the recorded split.
    for j in range(4):
        (copy / "cat" / f"new{j}.png").write_bytes(_encode(_pixels(9, 9, 40 + j), "PNG"))
    broken = first[0].files.names[0]
    with open(broken, "wb") as f:
        f.write(b"damaged")
    with caplog.at_level("INFO", logger="keras_vit"):
        second = data.training_splits(str(copy), record_dir=str(tmp_path / "run"), **settings)
    assert second[0].files.names == first[0].files.names[1:]
    assert np.array_equal(second[0].labels, first[0].labels[1:])
    for a, b in zip(first[1:], second[1:]):
        assert a.files.names == b.files.names and np.array_equal(a.labels, b.labels)
    assert "4 images of" in caplog.text and "are not in the split recorded" in caplog.text
    assert f"skipped 1 of {len(first[0]) + len(first[1]) + len(first[2])} files" in caplog.text
    assert record.read_text() == text  # the record stands as it was made
    # The record is itself a data spec; other settings make a new split.
    again = data.load_data(str(record), ("train", "test"))
    assert again["test"].files.names == first[2].files.names and len(again["validation"]) == len(first[1])
    third = data.training_splits(str(copy), record_dir=str(tmp_path / "run"), **dict(settings, seed=5))
    assert third[0].files.names != first[0].files.names
    # keras-vit train reads it through prepare_data, into the model dir
    from keras_vit import training

    config = training.resolve_config(dict(data=str(copy), test_fraction=0.3, validation_split=0.25, seed=5))
    via_training = training.prepare_data(config, str(tmp_path / "run"))
    assert via_training[2].files.names == third[2].files.names


def test_model_view_is_one_definition_in_two_implementations():
    rng = np.random.default_rng(0)
    for shape in ((37, 53, 3), (300, 200, 3), (32, 32, 3)):
        picture = rng.uniform(0, 255, shape).astype("float32")
        for crop in (1.0, 0.875):
            for method in images.INTERPOLATIONS:
                fast = images.model_view(picture, (24, 24), crop, method).numpy()
                portable = images.model_view(picture, (24, 24), crop, method, portable=True).numpy()
                assert np.abs(fast - portable).max() <= 5e-4, (shape, crop, method)
                if crop < 1.0:
                    side = int(min(shape[:2]) * crop)
                    top, left = (shape[0] - side) // 2, (shape[1] - side) // 2
                    picture_crop = picture[top:top + side, left:left + side]
                else:
                    picture_crop = picture
                resized = tf.image.resize(picture_crop[None], (24, 24), method, antialias=True)[0].numpy()
                assert np.abs(fast - np.clip(resized, 0, 255)).max() <= 1e-4
    batch = rng.integers(0, 256, (2, 32, 32, 3)).astype("uint8")
    for portable in (False, True):  # the identity at the model's size, exactly
        assert np.array_equal(images.model_view(batch, 32, portable=portable).numpy(), batch.astype("float32"))


@pytest.fixture(scope="module")
def viewed_model(tmp_path_factory):
    """A tiny model whose view crops (87.5%) and resizes bicubic, as a timm checkpoint's would."""
    path = tmp_path_factory.mktemp("viewed") / "model.keras"
    model = randomize(tiny_vit(classes=3, class_names=["cat", "dog", "emu"], crop_pct=0.875,
                               interpolation="bicubic"), seed=3)
    model.save(path)
    return model, str(path)


def test_one_view_in_training_predict_fewshot_visualize_and_every_export(photos, viewed_model, tmp_path):
    import keras_vit
    from keras_vit import fewshot, visualize
    from keras_vit.export import export_model
    from keras_vit.serving import load_classifier

    root, expected, _ = photos
    model, path = viewed_model
    split = data.load_data(str(root), test_fraction=0.5)["test"]
    names = split.files.names
    pipeline = data.make_dataset(split, 32, 4, training=False, crop_fraction=model.crop_pct,
                                 interpolation=model.interpolation)
    inputs = np.concatenate([x.numpy() for x, _ in pipeline])  # what evaluation in keras-vit train feeds the model
    assert inputs.shape == (len(names), 32, 32, 3)
    logits = model.predict(inputs, verbose=0)
    # visualize: the same float inputs; its uint8 load_images rounds them
    viz = keras_vit.preprocess_input(visualize._model_inputs(names, (32, 32), model=model))
    assert np.abs(viz - inputs).max() <= 1e-6
    pixels = visualize.load_images(names, (32, 32), model=model)
    assert np.abs(keras_vit.preprocess_input(pixels) - inputs).max() <= 0.5 / 127.5 + 1e-6
    # fewshot: the features of the same inputs
    features = fewshot.extract_features(model, [images.read_image(n) for n in names], verbose=False)
    np.testing.assert_allclose(features, fewshot.feature_model(model)(inputs).numpy(), atol=1e-5)
    # predict (.keras), SavedModel and ONNX: the view in the graph; TFLite: the view before it, rounded
    decoded = [images.read_image(n) for n in names]
    keras_logits = np.concatenate([load_classifier(path)(im[None])["logits"] for im in decoded])
    np.testing.assert_allclose(keras_logits, logits, atol=1e-4)
    exports = {"saved_model": tmp_path / "sm"}
    try:
        import onnxruntime  # noqa: F401
        import tf2onnx  # noqa: F401

        exports["onnx"] = tmp_path / "m.onnx"
    except ImportError:
        pass
    for fmt, out in exports.items():
        metadata = export_model(path, out)
        assert (metadata["crop_pct"], metadata["interpolation"]) == (0.875, "bicubic")
        got = np.concatenate([load_classifier(str(out))(im[None])["logits"] for im in decoded])
        np.testing.assert_allclose(got, logits, atol=1e-4, err_msg=fmt)
    metadata = export_model(path, tmp_path / "m.tflite")
    assert metadata["preprocessing"] == "x / 127.5 - 1" and metadata["crop_pct"] == 0.875
    lite = np.concatenate([load_classifier(str(tmp_path / "m.tflite"))(im[None])["logits"] for im in decoded])
    rounded = np.stack([images.view_pixels(im, 32, 0.875, "bicubic") for im in decoded])  # the view, as uint8
    assert np.abs(keras_vit.preprocess_input(rounded) - inputs).max() <= 0.5 / 127.5 + 1e-6
    np.testing.assert_allclose(lite, model.predict(keras_vit.preprocess_input(rounded), verbose=0), atol=1e-4)


def test_class_counts_imbalance_warning_and_balanced_weights(caplog):
    labels = np.array([0] * 30 + [1] * 6 + [2] * 4)
    split = data.from_arrays(np.zeros((40, 4, 4, 3), np.uint8), labels, ["big", "mid", "small"])
    with caplog.at_level("INFO", logger="keras_vit"):
        counts = report.describe_classes({"train": split, "validation": None, "test": split})
    assert counts == {"train": {"big": 30, "mid": 6, "small": 4}, "test": {"big": 30, "mid": 6, "small": 4}}
    assert "'big' has 30 training images, 'small' 4 (7.5x); --set class_weight=balanced" in caplog.text
    weights = report.balanced_class_weights(labels, 4)
    assert weights[3] == 0.0 and np.isclose(sum(weights[c] * n for c, n in enumerate([30, 6, 4])), 40)
    assert weights[2] == pytest.approx(40 / (3 * 4))
    assert report.imbalance_warning({"a": 10, "b": 5}) is None


def test_end_of_run_report_lists_per_class_accuracy_confusions_and_the_worst_images(tmp_path):
    model = randomize(tiny_vit(classes=3), seed=1)
    rng = np.random.default_rng(0)
    split = data.from_arrays(rng.integers(0, 256, (30, 32, 32, 3)), np.arange(30) % 3, ["a", "b", "c"])
    split.names = [f"img{i}.png" for i in range(30)]
    dataset = data.make_dataset(split, 32, 8, training=False, with_index=True)
    details = report.end_of_run_report(model, split, dataset, str(tmp_path))
    matrix = np.array(details["confusion_matrix"])
    predictions = model.predict(split.images / 127.5 - 1.0, verbose=0).argmax(-1)
    assert np.array_equal(matrix, report.confusion_matrix(split.labels, predictions, 3)) and matrix.sum() == 30
    assert details["per_class_accuracy"]["a"] == pytest.approx(np.mean(predictions[split.labels == 0] == 0))
    worst = details["worst_test_images"]
    assert details["misclassified_test_images"] == int(np.sum(predictions != split.labels))
    assert [w["probability_of_label"] for w in worst] == sorted(w["probability_of_label"] for w in worst)
    assert all(w["label"] != w["predicted"] and w["image"].startswith("img") for w in worst)
    with open(tmp_path / "confusion_matrix.csv") as f:
        assert next(csv.reader(f)) == ["label \\ predicted", "a", "b", "c"]
    assert (tmp_path / "confusion_matrix.png").stat().st_size > 1000 and (tmp_path / "worst_test_images.csv").exists()


def _cli(*args, cwd=ROOT):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "keras_vit.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)


@pytest.fixture(scope="module")
def init_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("init") / "tiny.keras"
    randomize(tiny_vit(classes=10)).save(path)
    return str(path)


@pytest.mark.slow  # CI time (33 s; photo folders in CI: test_finetune_recipe_on_split_folders_with_balanced_class_weights)
def test_finetune_recipe_on_a_folder_without_a_split_then_predict_the_folder(photos, init_checkpoint, tmp_path):
    root, expected, bad = photos
    run = tmp_path / "run"
    result = _cli("train", FINETUNE, "--set", f"data={root}", "--set", f"weights={init_checkpoint}",
                  *TINY, "--set", "test_fraction=0.3", "--set", "validation_split=0.2", "--model-dir", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped 3 of 18 files" in result.stderr and "images per class:" in result.stderr
    assert "accuracy per class (worst first)" in result.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["config"]["init_checkpoint"] == init_checkpoint  # --set weights=PATH names the init checkpoint
    assert metrics["skipped_files"] == 3 and {s["file"] for s in metrics["skipped"]} == set(bad)
    assert metrics["train_examples"] + metrics["validation_examples"] + metrics["test_examples"] == 15
    assert metrics["data_split"] == str(run / data.SPLIT_RECORD)
    assert sum(map(sum, metrics["confusion_matrix"])) == metrics["test_examples"]
    assert set(metrics["per_class_accuracy"]) == {"cat", "dog", "emu"}
    for name in ("model.keras", "confusion_matrix.png", "confusion_matrix.csv", "worst_test_images.csv"):
        assert (run / name).exists(), name
    # predict a whole folder into a CSV: class subfolders named as the model's classes add the label
    out = tmp_path / "predictions.csv"
    result = _cli("predict", str(run / "model.keras"), str(root), "--out", str(out), "--top", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped 3 of 18 files that cannot be read" in result.stderr
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert {r["path"] for r in rows} == set(expected) and rows[0]["label"] in ("cat", "dog", "emu")
    assert set(rows[0]) == {"path", "class_1", "probability_1", "class_2", "probability_2", "label", "correct"}


def test_finetune_recipe_on_split_folders_with_balanced_class_weights(init_checkpoint, tmp_path):
    for split, count in (("train", 5), ("val", 1), ("test", 2)):
        for c, cls in enumerate(("ant", "bee")):
            for j in range(count * (3 if cls == "ant" and split == "train" else 1)):
                path = tmp_path / "data" / split / cls / f"{j}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(_encode(_pixels(20 + 3 * j, 30, 7 * c + j), "JPEG"))
    result = _cli("train", FINETUNE, "--set", f"data={tmp_path / 'data'}", "--set",
                  f"init_checkpoint={init_checkpoint}", *TINY, "--set", "class_weight=balanced",
                  "--model-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the classes are imbalanced: 'ant' has 15 training images, 'bee' 5 (3.0x)" in result.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (metrics["train_examples"], metrics["validation_examples"], metrics["test_examples"]) == (20, 2, 4)
    assert metrics["class_weight"] == {"0": pytest.approx(20 / 30), "1": pytest.approx(2.0)}
    assert metrics["class_counts"]["train"] == {"ant": 15, "bee": 5}
