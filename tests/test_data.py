import io
import tarfile

import numpy as np
import pytest
import tensorflow as tf
from conftest import SHARED

from keras_vit import data

CIFAR_TGZ = SHARED / "data" / "cifar10-jpeg.tgz"


def _png(array):
    return tf.io.encode_png(np.asarray(array, np.uint8)).numpy()


def _make_folder(root, sizes=None, per_class=4, classes=("cat", "dog", "emu"), splits=("train", "test")):
    rng = np.random.default_rng(0)
    for split in splits:
        for i, cls in enumerate(classes):
            folder = root / split / cls
            folder.mkdir(parents=True)
            for j in range(per_class):
                h, w = (sizes or {}).get((split, cls, j), (6, 5))
                (folder / f"{j:03d}.png").write_bytes(_png(rng.integers(0, 255, (h, w, 3)) // (i + 1)))
    return root


def test_from_arrays_converts_grey_and_rgba_and_checks_everything():
    grey = data.from_arrays(np.full((3, 4, 4), 7.0), [0, 1, 1])
    assert grey.images.shape == (3, 4, 4, 3) and grey.images.dtype == np.uint8 and grey.class_names == ["0", "1"]
    rgba = data.from_arrays(np.zeros((2, 4, 4, 4), np.uint8), [0, 0], ["a"])
    assert rgba.images.shape == (2, 4, 4, 3)
    with pytest.raises(ValueError, match=r"mixed sizes: image 0 is \(4, 4, 3\), image 2 is \(5, 4, 3\)"):
        data.from_arrays([np.zeros((4, 4, 3))] * 2 + [np.zeros((5, 4, 3))], [0, 0, 0])
    with pytest.raises(ValueError, match="no images; refusing to train or evaluate on zero examples"):
        data.from_arrays(np.zeros((0, 4, 4, 3)), [])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 1\], found \[0, 2\]"):
        data.from_arrays(np.zeros((2, 4, 4, 3)), [0, 2], ["a", "b"])
    with pytest.raises(ValueError, match=r"pixel values must lie in \[0, 255\]"):
        data.from_arrays(np.full((1, 2, 2, 3), -1.0), [0])


def test_stratified_split_is_per_class_disjoint_and_seeded():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])  # sorted by class
    split = data.from_arrays(np.arange(100)[:, None, None, None].repeat(3, -1).astype(np.uint8), labels)
    rest, held = data.stratified_split(split, 0.1, seed=3)
    assert np.bincount(held.labels).tolist() == [1, 2, 3, 4]
    assert not set(held.images[:, 0, 0, 0]) & set(rest.images[:, 0, 0, 0])
    assert len(rest) + len(held) == 100
    again, _ = data.stratified_split(split, 0.1, seed=3)
    np.testing.assert_array_equal(again.images, rest.images)
    assert len(set(rest.labels[:20])) > 1, "the rest is shuffled, not sorted by class"


def test_digits_split_stratified_80_20():
    splits = data.load_digits()
    train, test = splits["train"], splits["test"]
    assert len(train) + len(test) == 1797 and abs(len(test) - 360) <= 5
    per_class = np.bincount(test.labels) / np.bincount(np.concatenate([train.labels, test.labels]))
    assert np.all(np.abs(per_class - 0.2) < 0.02)
    assert train.images.shape[1:] == (8, 8, 3) and train.images.max() == 255


def test_image_folder(tmp_path):
    """Folders are streamed: their Splits hold the files, decoded as the pipeline reads them."""
    splits = data.load_image_folder(_make_folder(tmp_path / "ds"))
    assert splits["train"].class_names == ["cat", "dog", "emu"]
    assert splits["train"].images is None and len(splits["train"]) == 12
    image, label = next(iter(splits["train"].elements()))
    assert image.shape == (6, 5, 3) and image.dtype == tf.uint8 and int(label) == 0
    assert np.bincount(splits["test"].labels).tolist() == [4, 4, 4]


def test_one_data_source_grammar(tmp_path):
    folder = _make_folder(tmp_path / "ds")
    assert data.data_source("digits") == ("digits", None)
    assert data.data_source("tfds:cifar10") == ("tfds", "cifar10")
    assert data.data_source("cifar100") == ("tfds", "cifar100")
    assert data.data_source(str(folder)) == ("folder", str(folder))
    (tmp_path / "a.tgz").write_bytes(b"")
    assert data.data_source(str(tmp_path / "a.tgz")) == ("archive", str(tmp_path / "a.tgz"))
    for missing in (tmp_path / "nowhere", "gone.tgz"):
        with pytest.raises(ValueError, match=r"Data path .*(nowhere|gone\.tgz) does not exist"):
            data.data_source(missing)


def test_image_folder_errors_name_the_path(tmp_path):
    with pytest.raises(ValueError, match=r"Data folder .*missing does not exist"):
        data.load_image_folder(tmp_path / "missing")
    (tmp_path / "empty" / "train").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"empty/train has no class folders"):
        data.load_image_folder(tmp_path / "empty")
    root = _make_folder(tmp_path / "holes")
    for f in (root / "test" / "dog").iterdir():
        f.unlink()
    with pytest.raises(ValueError, match=r"Class folder .*holes/test/dog has no images"):
        data.load_image_folder(root)
    # Images of mixed sizes are what photo folders hold: read as they are (tests/test_photos.py).
    mixed = _make_folder(tmp_path / "mixed", sizes={("train", "dog", 2): (7, 5)})
    sizes = {tuple(image.shape) for image, _ in data.load_image_folder(mixed)["train"].elements()}
    assert sizes == {(6, 5, 3), (7, 5, 3)}
    broken = _make_folder(tmp_path / "broken")
    (broken / "train" / "emu" / "001.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"1 of 24 files cannot be used \(strict=true refuses them\): "
                                         r".*broken/train/emu/001.png \(Unknown image file format"):
        data.load_image_folder(broken, strict=True)


def test_archive_layout_like_the_cifar_tgz(tmp_path):
    archive = tmp_path / "small.tgz"
    rng = np.random.default_rng(1)
    with tarfile.open(archive, "w:gz") as tar:
        for split in ("train", "test"):
            for cls in ("b", "a"):
                for j in range(3):
                    payload = _png(rng.integers(0, 255, (4, 4, 3)))
                    info = tarfile.TarInfo(f"cifar/{split}/{cls}/{j}.png")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
    splits = data.load_image_archive(archive)
    assert splits["train"].class_names == ["a", "b"] and len(splits["test"]) == 6
    (tmp_path / "bad.tgz").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(ValueError, match=r"Cannot read the image archive .*bad.tgz"):
        data.load_data(str(tmp_path / "bad.tgz"))
    with pytest.raises(ValueError, match=r"Data path .*nowhere.tgz does not exist"):
        data.load_data(str(tmp_path / "nowhere.tgz"))


def test_a_subset_of_a_folder_or_archive_decodes_only_the_images_it_keeps(tmp_path, caplog):
    """200 calibration images of an archive of 50,000 decode 200: the same seeded pick as
    decoding the whole split and then sampling it, so exports calibrate on the same images."""
    root = _make_folder(tmp_path / "set", per_class=6)
    archive = tmp_path / "set.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="set")
    for source in (root, archive):
        full = data.load_data(str(source), ("train",))["train"]
        decoded = full.images if full.files is None else np.stack([full.files.read(i) for i in range(len(full))])
        expected = data._subset(decoded, full.labels, 5, np.random.default_rng(3))
        caplog.clear()
        with caplog.at_level("INFO", logger="keras_vit"):
            images, labels, _ = data.load_image_set(str(source), (6, 5), class_names=["cat", "dog", "emu"],
                                                    split="train", max_images=5, seed=3)
        assert np.array_equal(images, expected[0]) and np.array_equal(labels, expected[1])
        assert "decoding 5 images of" in caplog.text and "decoding 18" not in caplog.text
    # An unreadable file is left out of the listing (its header is read, never its pixels) and named once.
    victim = root / "train" / "dog" / "002.png"
    victim.write_bytes(b"not an image")
    assert len(data.load_image_set(str(root), (6, 5), split="train", labelled=False, max_images=5, seed=3)[0]) == 5
    caplog.clear()
    with caplog.at_level("INFO", logger="keras_vit"):
        images, _, _ = data.load_image_set(str(root), (6, 5), split="train", labelled=False, seed=3)
    assert len(images) == 17 and f"skipped 1 of 18 files of {root}" in caplog.text and str(victim) in caplog.text


def test_training_pipeline_shapes_ranges_and_augmentations():
    rng = np.random.default_rng(2)
    split = data.from_arrays(rng.integers(0, 256, (40, 16, 16, 3)), rng.integers(0, 5, 40), list("abcde"))
    for crop in ("pad", "inception", "none"):
        x, y = next(iter(data.make_dataset(split, 12, 8, training=True, crop=crop)))
        assert x.shape == (8, 12, 12, 3) and y.shape == (8, 5)
        assert -1.0 <= float(tf.reduce_min(x)) and float(tf.reduce_max(x)) <= 1.0
    x, y = next(iter(data.make_dataset(split, 16, 8, training=True, randaugment=(2, 5), mixup=0.2, cutmix=1.0)))
    assert x.shape == (8, 16, 16, 3)
    np.testing.assert_allclose(tf.reduce_sum(y, -1).numpy(), 1.0, atol=1e-5)
    assert np.any((y.numpy() > 0) & (y.numpy() < 1)), "mixed labels are soft"
    evaluation = data.make_dataset(split, 16, 16, training=False)
    first = np.concatenate([b[0].numpy() for b in evaluation])
    np.testing.assert_allclose(first, split.images / 127.5 - 1.0, atol=1e-6)  # no augmentation, same order
    assert sum(b[0].shape[0] for b in evaluation) == 40  # the partial batch is kept


@pytest.mark.slow  # CI time (31 s reading all 60,000 JPEGs; the reader in CI: the other tgz tests)
@pytest.mark.skipif(not CIFAR_TGZ.exists(), reason=f"needs {CIFAR_TGZ} (the project's shared data; CI has it)")
def test_cifar10_tgz_reads_fully():
    splits = data.load_data(str(CIFAR_TGZ))
    train, test = splits["train"], splits["test"]
    assert (len(train), len(test)) == (50_000, 10_000)
    assert train.class_names[:3] == ["airplane", "automobile", "bird"] and len(train.class_names) == 10
    assert train.images.shape[1:] == (32, 32, 3)
    assert np.bincount(test.labels).tolist() == [1000] * 10


def test_image_sets_from_data_pipelines(tmp_path):
    """load_image_set: the samples and calibration images of an export (export re-exports it)."""
    from test_export import DIGITS, _digits, _write_image

    from keras_vit.export import load_image_set as exported

    assert exported is data.load_image_set
    load_image_set = data.load_image_set
    x, y = (part[1400:] for part in _digits())
    # A training pipeline's output: images in [-1, 1], one-hot labels, batched.
    split = data.from_arrays(x[:50], y[:50], DIGITS, origin="digits test")
    pipeline = data.make_dataset(split, 16, 16, training=False)
    images, labels, source = load_image_set(pipeline, (16, 16))
    assert images.dtype == np.uint8 and np.max(np.abs(images.astype(int) - x[:50])) <= 1
    assert np.array_equal(labels, y[:50]) and source == "a tf.data.Dataset (50 images)"
    # A data.Split whose class order differs from the model's: labels follow the names.
    reversed_names = DIGITS[::-1]
    flipped = data.from_arrays(x[:20], 9 - y[:20], reversed_names, origin="flipped")
    _, labels, _ = load_image_set(flipped, (16, 16), class_names=DIGITS, max_images=20)
    assert np.array_equal(labels, y[:20])
    with pytest.raises(ValueError, match="classes ten of odd are not classes of the model"):
        load_image_set(data.from_arrays(x[:2], [0, 1], ["0", "ten"], origin="odd"), (16, 16), class_names=DIGITS)
    # An archive of split/class folders, as recipes name their data: the requested split is read.
    root = tmp_path / "set"
    for i in range(12):
        _write_image(root / ("train" if i < 8 else "test") / str(y[i]) / f"{i}.png", x[i])
    archive = tmp_path / "set.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="set")
    images, labels, source = load_image_set(str(archive), (16, 16), class_names=DIGITS, split="test")
    assert len(images) == 4 and sorted(labels) == sorted(y[8:12]) and source.startswith(f"{archive}:test")
    images, labels, _ = load_image_set(str(root), (32, 32), class_names=DIGITS, split="train", labelled=False)
    assert images.shape == (8, 32, 32, 3) and labels is None
    images, labels, _ = load_image_set("digits", (16, 16), class_names=DIGITS, split="test", max_images=30)
    assert images.shape == (30, 16, 16, 3) and labels.shape == (30,)
