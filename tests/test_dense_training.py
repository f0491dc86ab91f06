"""Dense training end to end (keras_vit/dense/): the mask and depth readers on a folder as users keep
it (mixed sizes, palette and grey masks, EXIF, a corrupt file, a mismatched mask, an orphan), the joint
augmentation, the losses and metrics against numpy, the Fashion-MNIST scenes, `keras-vit train` on a
folder (fine-tune, linear probe, depth), `keras-vit predict` / `visualize` pictures, and the exports
checked against Keras."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, ROOT, tensorflow_only

import keras_vit.dense.data as dense_data
from keras_vit.dense import losses as dense_losses
from keras_vit.dense.scenes import FASHION_MNIST_DIR, compose_scenes

FOLDER = DATA / "dense_folder"
# issue 51 aims at 0.75 on scenes composed from the test split; the shipped run reached 0.4583 (its card says the
# aim is not met and why): this floor holds the shipped model to what it reached, not to the aim
SHIPPED_MIOU_FLOOR = 0.45
DEPTH_FOLDER = DATA / "depth_folder"
TINY = ["model.patch_size=8", "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2",
        "model.mlp_dim=64", "model.classifier=gap", "image_size=32", "batch_size=4", "steps_per_epoch=3",
        "epochs=2", "learning_rate=3e-3", "warmup_steps=0", "precision=float32", "validation_split=0.2",
        "dense.taps=(1, 2)", "init=None"]


def _png(path, array, mode=None):
    from PIL import Image

    (Image.fromarray(array, mode) if mode else Image.fromarray(array)).save(path)


# --- readers -------------------------------------------------------------------------

def test_palette_and_grey_masks_read_as_the_same_class_indices(tmp_path):
    from PIL import Image

    mask = np.array([[0, 1, 2], [255, 2, 1]], np.uint8)
    grey = tmp_path / "grey.png"
    _png(grey, mask)
    pal = Image.frombytes("P", (3, 2), mask.tobytes())
    # a palette whose colours repeat (unused entries black, as editors write them): indices still win
    pal.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [0, 0, 0] * 252 + [255, 255, 255])
    pal.save(tmp_path / "pal.png")
    np.testing.assert_array_equal(dense_data.read_mask(grey), mask)
    np.testing.assert_array_equal(dense_data.read_mask(tmp_path / "pal.png"), mask)


def test_colour_and_out_of_range_masks_are_refused_by_name(tmp_path):
    _png(tmp_path / "rgb.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match=r"rgb\.png is a colour PNG.*palette PNGs"):
        dense_data.read_mask(tmp_path / "rgb.png")
    _png(tmp_path / "deep.png", np.full((4, 4), 300, np.uint16))
    with pytest.raises(ValueError, match=r"deep\.png: class index 300"):
        dense_data.read_mask(tmp_path / "deep.png")
    (tmp_path / "pickle.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, "
                                          b"'shape': (2,), }" + b" " * 60 + b"\n" + b"\x80\x04N.")
    with pytest.raises(ValueError, match=r"pickle\.npy is not a \.npy of numbers.*without unpickling"):
        dense_data.read_depth(tmp_path / "pickle.npy")


def test_depth_reads_16_bit_png_in_millimetres_and_npy_in_metres():
    png = dense_data.read_depth(DEPTH_FOLDER / "depth" / "scene_00.png", depth_scale=0.001)
    npy = dense_data.read_depth(DEPTH_FOLDER / "depth" / "scene_01.npy")
    assert png.dtype == npy.dtype == np.float32
    assert 0.79 < png.min() < 0.81 and 3.99 < png.max() < 4.01
    assert 0.79 < npy.min() < 0.81 and 3.99 < npy.max() < 4.01


def test_folder_names_and_leaves_out_the_bad_pairs_and_strict_refuses():
    splits = dense_data.load_dense_folder(FOLDER, test_fraction=0.25, seed=0)
    train, test = splits["train"], splits["test"]
    assert train.class_names == ["background", "disc", "square"]  # classes.txt
    assert len(train) + len(test) == 13  # 12 scenes and the sideways one
    reasons = dict(train.skipped)
    assert set(reasons) == {"images/broken.jpg", "images/odd.png", "masks/lonely.png"}
    assert "truncated or damaged JPEG" in reasons["images/broken.jpg"]
    assert "64x60" in reasons["images/odd.png"] and "64x64" in reasons["images/odd.png"]
    assert "no image" in reasons["masks/lonely.png"]
    with pytest.raises(ValueError, match=r"3 pair\(s\) cannot be used.*strict=True"):
        dense_data.load_dense_folder(FOLDER, strict=True)


def test_an_exif_turned_image_pairs_with_its_upright_mask():
    from keras_vit.images import read_image

    image = read_image(FOLDER / "images" / "sideways.jpg")
    mask = dense_data.read_mask(FOLDER / "masks" / "sideways.png")
    assert image.shape[:2] == mask.shape == (40, 64)
    red = (image[..., 0] > 170) & (image[..., 1] < 90)
    assert np.mean(np.isin(mask[red], (1, 255))) > 0.97  # the disc (and its ignored outline) where its mask says


def test_split_folders_and_classes_beyond_classes_txt(tmp_path):
    root = tmp_path / "data"
    for split, names in (("train", ["scene_00", "scene_01", "scene_02"]), ("test", ["scene_03"])):
        for sub in ("images", "masks"):
            (root / split / sub).mkdir(parents=True)
        for name in names:
            image = next(p for p in (FOLDER / "images").iterdir() if p.stem == name)
            shutil.copy(image, root / split / "images" / image.name)
            shutil.copy(FOLDER / "masks" / f"{name}.png", root / split / "masks" / f"{name}.png")
    (root / "classes.txt").write_text("background\ndisc\n")  # the squares' class 2 is past it
    with pytest.raises(ValueError, match=r"the train split has no usable image/mask pair.*class index 2 in its mask, but "
                                         r"classes.txt names 2 classes"):
        dense_data.load_dense_folder(root)
    (root / "classes.txt").unlink()
    splits = dense_data.load_dense_folder(root)
    assert sorted(splits) == ["test", "train"] and len(splits["train"]) == 3
    assert splits["train"].class_names == ["class_0", "class_1", "class_2"]


def test_training_crops_move_image_and_mask_together_and_never_blend_classes():
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 3, size=(6, 4, 4)).repeat(12, axis=1).repeat(12, axis=2).astype(np.uint8)  # 48x48, blocks of 12
    images = np.stack([masks * 100] * 3, axis=-1).astype(np.uint8)  # the image says the class
    split = dense_data.from_arrays(images, masks, class_names=["a", "b", "c"])
    ds = dense_data.make_dense_dataset(split, (32, 32), 6, training=True, min_scale=0.5, max_scale=2.0,
                                       seed=1, scaled=False, repeat=True)
    flips = []
    for (x, y), _ in zip(ds, range(4)):
        x, y = np.asarray(x)[..., 0], np.asarray(y)
        assert set(np.unique(y)) <= {0, 1, 2, 255}  # nearest: no class in between, padding ignored
        inside = y != 255
        agree = np.abs(x[inside] - y[inside] * 100.0) < 50
        assert agree.mean() > 0.9  # bilinear blends only along the block edges (apart: about a third)
        flips.append(y)
    assert len({a.tobytes() for a in flips}) == 4  # every draw a new crop


def test_evaluation_resizes_image_and_mask_to_the_model_size():
    masks = np.zeros((2, 40, 56), np.uint8)
    masks[:, 10:30, 20:40] = 1
    images = np.stack([masks * 200] * 3, -1).astype(np.uint8)
    split = dense_data.from_arrays(images, masks)
    x, y = next(iter(dense_data.make_dense_dataset(split, (20, 28), 2, training=False)))
    assert tuple(x.shape) == (2, 20, 28, 3) and tuple(y.shape) == (2, 20, 28)
    assert np.asarray(y)[0, 5:15, 10:20].min() == 1 and np.asarray(y)[0, :4].max() == 0


# --- losses and metrics ----------------------------------------------------------------

@pytest.mark.backends
def test_cross_entropy_ignores_255_and_averages_each_image_over_its_labelled_pixels():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 5, 3)).astype("float32")
    labels = rng.integers(0, 3, size=(2, 4, 5))
    labels[0, :2] = 255
    got = float(dense_losses.SegmentationCrossEntropy()(labels, logits))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_image = []
    for n in range(2):
        keep = labels[n] != 255
        per_image.append(-np.mean(np.take_along_axis(logp[n], np.where(keep, labels[n], 0)[..., None], -1)[..., 0][keep]))
    assert abs(got - np.mean(per_image)) < 1e-5
    # counting the ignored pixels as class 0 would move it
    assert abs(float(dense_losses.SegmentationCrossEntropy(ignore_index=-1)(np.where(labels == 255, 0, labels),
                                                                          logits)) - got) > 1e-3


@pytest.mark.backends
def test_silog_is_scale_invariant_at_lambda_one_and_skips_pixels_without_depth():
    depth = np.array([[[1.0, 2.0], [0.0, 4.0]]], "float32")
    assert float(dense_losses.SiLogLoss(lambd=1.0)(depth, depth * 3.0)) < 2e-3
    half = float(dense_losses.SiLogLoss(lambd=0.5)(depth, depth * 2.0))
    assert abs(half - np.sqrt(np.log(2) ** 2 * 0.5)) < 1e-3
    moved = depth.copy()
    moved[0, 1, 0] = 9.0  # a pixel without depth: its prediction does not count
    assert float(dense_losses.SiLogLoss(lambd=0.5)(depth, np.where(depth > 0, depth * 2.0, 9.0))) == pytest.approx(half)


@pytest.mark.backends
def test_metrics_match_numpy():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 4, size=(3, 6, 7))
    labels[0, 0] = 255
    logits = rng.normal(size=(3, 6, 7, 4)).astype("float32")
    predicted = logits.argmax(-1)
    scores = dense_losses.segmentation_scores(dense_losses.confusion_matrix(labels, predicted, 4))
    miou = dense_losses.mean_iou(4)
    miou.update_state(labels, logits)
    assert float(miou.result()) == pytest.approx(scores["miou"], abs=1e-5)
    acc = dense_losses.PixelAccuracy()
    acc.update_state(labels, logits)
    keep = labels != 255
    assert float(acc.result()) == pytest.approx(np.mean(predicted[keep] == labels[keep]), abs=1e-6)
    assert scores["pixel_accuracy"] == pytest.approx(np.mean(predicted[keep] == labels[keep]))
    target = rng.uniform(0.5, 5, size=(2, 4, 4)).astype("float32")
    target[0, 0, 0] = 0
    pred = target * rng.uniform(0.7, 1.4, size=target.shape).astype("float32")
    valid = target > 0
    rel = dense_losses.AbsRel()
    rel.update_state(target, pred)
    assert float(rel.result()) == pytest.approx(np.mean(np.abs(pred - target)[valid] / target[valid]), abs=1e-5)
    delta = dense_losses.DeltaAccuracy()
    delta.update_state(target, pred)
    ratio = np.maximum(pred / np.maximum(target, 1e-6), target / pred)[valid]
    assert float(delta.result()) == pytest.approx(np.mean(ratio < 1.25), abs=1e-6)


# --- scenes --------------------------------------------------------------------------

def test_scenes_place_items_apart_and_label_above_a_tenth_of_each_item_maximum():
    items = np.zeros((4, 28, 28), np.uint8)
    items[:, 4:24, 4:24] = np.linspace(0, 200, 20, dtype=np.uint8)[None, None, :]  # a ramp: 0 .. 200
    labels = np.array([0, 3, 7, 9])
    scenes, masks = compose_scenes(items, labels, count=50, seed=3)
    again, _ = compose_scenes(items, labels, count=50, seed=3)
    np.testing.assert_array_equal(scenes, again)  # seeded
    assert scenes.shape == (50, 64, 64, 3) and masks.shape == (50, 64, 64)
    assert set(np.unique(masks)) <= {0, 1, 4, 8, 10}
    on = scenes[..., 0] > 20  # above 10% of 200
    np.testing.assert_array_equal(masks > 0, on)
    counts = np.array([(m > 0).sum() for m in masks]) / ((items[0] > 20).sum())
    assert set(np.round(counts).astype(int)) <= {1, 2, 3} and len(set(np.round(counts).astype(int))) >= 2
    np.testing.assert_allclose(counts, np.round(counts))  # whole items only: none overlaps another


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason=f"Fashion-MNIST is not in {FASHION_MNIST_DIR} "
                    "(apt-get install dataset-fashion-mnist)")
def test_fashion_scenes_from_debian_files():
    from keras_vit.dense.scenes import SCENE_CLASSES, load_fashion_mnist

    items = load_fashion_mnist()
    assert items["train"][0].shape == (60000, 28, 28) and items["test"][0].shape == (10000, 28, 28)
    scenes, masks = compose_scenes(*items["test"], count=20, seed=0)
    assert len(SCENE_CLASSES) == 11 and masks.max() <= 10 and (masks > 0).mean() > 0.1


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path):
    from keras_vit.dense.scenes import load_fashion_mnist

    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist(tmp_path)


# --- training ------------------------------------------------------------------------

def _config(*extra, data=FOLDER, objective="segmentation"):
    from keras_vit.training import apply_overrides, load_recipe

    return apply_overrides(load_recipe("seg_fashion"), [f"data={data}", f"objective={objective}", *TINY, *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny segmentation model trained on the folder (2 epochs of 3 steps): its run dir."""
    from keras_vit.dense.training import train

    out = tmp_path_factory.mktemp("seg") / "run"
    train(_config("test_fraction=0.25"), out, verbose=0)
    return out


@tensorflow_only
def test_segmentation_trains_on_the_folder_and_writes_its_run(trained):
    import keras

    from keras_vit.dense import DensePredictor

    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["epochs_completed"] == 2 and 0.0 <= metrics["test_miou"] <= 1.0
    assert set(metrics["test_per_class"]) == {"background", "disc", "square"}
    assert {s["file"] for s in metrics["skipped"]} == {"images/broken.jpg", "images/odd.png", "masks/lonely.png"}
    assert metrics["head"]["kind"] == "linear" and metrics["head"]["classes"] == 3
    for name in ("model.keras", "best.keras", "history.csv", "test_predictions.png"):
        assert (trained / name).is_file(), name
    model = keras.saving.load_model(trained / "model.keras", compile=False)
    assert isinstance(model, DensePredictor) and model.class_names == ["background", "disc", "square"]
    assert "val_miou" in (trained / "history.csv").read_text().splitlines()[0]


@tensorflow_only
def test_linear_probe_leaves_the_backbone_as_it_was(tmp_path):
    import keras

    from keras_vit.dense.training import build_dense_model, train

    config = _config("dense.mode=linear_probe", "epochs=1", "validation_split=0")
    keras.utils.set_random_seed(0)
    before = {w.path: np.asarray(w) for w in build_dense_model(config, ["a", "b", "c"]).backbone.weights}
    train(config, tmp_path / "probe", verbose=0)
    model = keras.saving.load_model(tmp_path / "probe" / "model.keras", compile=False)
    after = {w.path: np.asarray(w) for w in model.backbone.weights}
    assert before.keys() == after.keys()
    for path, value in before.items():
        np.testing.assert_array_equal(value, after[path], err_msg=path)
    head = model.get_layer("linear_classifier").get_weights()[0]
    assert np.abs(head).sum() > 0 and json.loads((tmp_path / "probe" / "metrics.json").read_text())["mode"] == (
        "linear_probe")


@tensorflow_only
def test_depth_trains_with_silog_and_scores_absrel_and_delta(tmp_path):
    from keras_vit.dense.training import train

    with pytest.raises(ValueError, match=r"dense.max_depth.*--set dense.max_depth=10"):
        train(_config(data=DEPTH_FOLDER, objective="depth"), tmp_path / "no", verbose=0)
    metrics = train(_config("dense.max_depth=5", "test_fraction=0.34", data=DEPTH_FOLDER, objective="depth"),
                    tmp_path / "depth", verbose=0)
    assert metrics["head"]["depth_type"] == "metric" and metrics["head"]["max_depth"] == 5.0
    assert 0 < metrics["test_abs_rel"] < 5 and 0 <= metrics["test_delta1"] <= 1 and metrics["test_pixels"] > 0
    assert not (tmp_path / "no").exists()  # a refused start leaves nothing behind


def test_dense_recipe_keys_are_checked_before_anything_runs(tmp_path):
    from keras_vit.dense.training import train
    from keras_vit.training import apply_overrides, load_recipe
    from keras_vit.training import train as classify

    with pytest.raises(ValueError, match=r"'dense.mod' \(did you mean 'dense.mode'\?\)"):
        apply_overrides(load_recipe("seg_fashion"), ["dense.mod=linear_probe"])
    with pytest.raises(ValueError, match=r"dense.mode 'probe'"):
        train(_config("dense.mode=probe"), tmp_path / "x", verbose=0)
    with pytest.raises(FileNotFoundError, match=r"init_checkpoint nowhere/model.keras does not exist.*init=None"):
        train(_config("init=nowhere/model.keras"), tmp_path / "x", verbose=0)
    with pytest.raises(ValueError, match=r"mixup mixes labels"):
        train(_config("mixup=0.2"), tmp_path / "x", verbose=0)
    with pytest.raises(ValueError, match=r"keras_vit.dense.training.train"):
        classify(_config(), tmp_path / "x", verbose=0)
    assert not (tmp_path / "x").exists()


# --- predict, visualize, export -----------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "keras_vit.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=600)


@tensorflow_only
def test_predict_writes_palette_masks_that_read_back_as_the_predicted_classes(trained, tmp_path):
    import keras

    from keras_vit.dense.predict import predict_image
    from keras_vit.images import read_image

    run = _cli("predict", trained / "model.keras", FOLDER / "images" / "scene_01.jpg",
               FOLDER / "images" / "sideways.jpg", "--out", tmp_path / "pred")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "scene_01.jpg: " in run.stdout and "%" in run.stdout
    model = keras.saving.load_model(trained / "model.keras", compile=False)
    for name in ("scene_01", "sideways"):
        image = read_image(next((FOLDER / "images").glob(f"{name}.*")))
        mask = dense_data.read_mask(tmp_path / "pred" / f"{name}_mask.png")
        assert mask.shape == image.shape[:2]  # the image's own (upright) size
        np.testing.assert_array_equal(mask, predict_image(model, image))
    vis = _cli("visualize", trained / "model.keras", "--image", FOLDER / "images" / "scene_02.jpg",
               "--out", tmp_path / "vis")
    assert vis.returncode == 0, vis.stderr[-2000:]
    assert (tmp_path / "vis" / "scene_02_overlay.png").is_file()


@tensorflow_only
@pytest.mark.parametrize("out,quantize", [("m.tflite", None), ("m8.tflite", "int8"), ("m16.tflite", "float16"),
                                          ("m.onnx", None), ("saved", None)])
def test_exports_agree_with_keras_before_they_land(trained, tmp_path, out, quantize):
    from keras_vit.dense.export import export_dense

    if quantize == "int8":  # a model trained for a few steps on 3 test pairs: int8 may lose more than the point
        try:
            report = export_dense(trained / "model.keras", tmp_path / out, quantize=quantize, max_samples=8)
        except ValueError as e:  # then the check refuses it by name and nothing lands
            assert "more than 1 point below" in str(e) and "Nothing was written" in str(e)
            assert not os.listdir(tmp_path)
            return
    else:
        report = export_dense(trained / "model.keras", tmp_path / out, quantize=quantize, max_samples=8)
    assert (tmp_path / out).exists() and (tmp_path / f"{out}.json").is_file()
    meta = json.loads((tmp_path / f"{out}.json").read_text())
    assert meta["class_names"] == ["background", "disc", "square"] and meta["outputs"] == ["logits", "classes"]
    assert report["samples"] == 3  # the run's own test split (metrics.json), 3 pairs
    if quantize is None:
        assert report["relative_max_abs_diff"] < 1e-4 and report["class_agreement"] == 1.0
    else:
        assert report["class_agreement"] > 0.9 and report["miou_drop"] <= 0.01
        assert report["relative_max_abs_diff"] < (0.5 if quantize == "int8" else 0.05)
    assert report.get("classes_match_logits", True)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".keras_vit_export_")]  # nothing staged left


def test_an_int8_export_that_loses_more_than_a_point_is_refused():
    from keras_vit.dense.export import _check

    class Model:
        name = "m"

    report = {"format": "tflite", "relative_max_abs_diff": 0.3, "keras_miou": 0.80, "export_miou": 0.785,
              "miou_drop": 0.015}
    with pytest.raises(ValueError, match=r"mIoU 0.7850 against Keras' 0.8000.*Nothing was written to x.tflite"):
        _check(report, Model(), "x.tflite", "int8")
    _check(dict(report, export_miou=0.795, miou_drop=0.005), Model(), "x.tflite", "int8")
    with pytest.raises(ValueError, match=r"float32 tflite export of m differs from Keras by 0.3"):
        _check(report, Model(), "x.tflite", None)


@tensorflow_only
def test_export_without_samples_asks_for_them(tmp_path):
    from keras_vit.dense.export import export_dense
    from keras_vit.pretrained import from_pretrained

    model = from_pretrained(DATA / "dense" / "hf_dpt_seg")
    with pytest.raises(ValueError, match=r"pass samples="):
        export_dense(model, tmp_path / "m.tflite")
    assert not (tmp_path / "m.tflite").exists()


# --- the shipped model -----------------------------------------------------------------

SHIPPED = DATA.parent.parent / "saved_models" / "seg_fashion"


@pytest.fixture(scope="module")
def shipped():
    import keras

    model = keras.saving.load_model(SHIPPED / "model.keras", compile=False)
    split = dense_data.load_pairs_npz(SHIPPED / "test_scenes.npz", "segmentation", model.class_names)
    return model, split


@pytest.mark.slow
@tensorflow_only
def test_the_shipped_segmenter_scores_what_its_card_says(shipped):
    from keras_vit.dense.training import evaluate_dense

    model, split = shipped
    scores = evaluate_dense(model, dense_data.make_dense_dataset(split, model.image_size, 64, training=False))
    recorded = json.loads((SHIPPED / "shipped_scores.json").read_text())
    assert scores["miou"] == pytest.approx(recorded["miou"], abs=1e-4)
    card = (SHIPPED / "MODEL_CARD.md").read_text()
    assert f"mIoU {scores['miou']:.4f}" in card
    metrics = json.loads((SHIPPED / "metrics.json").read_text())
    assert metrics["test_examples"] == 2000 and f"**{metrics['test_miou']:.4f}**" in card
    assert metrics["test_miou"] >= SHIPPED_MIOU_FLOOR and scores["miou"] >= SHIPPED_MIOU_FLOOR
    assert ("is not met" in card) == (metrics["test_miou"] < 0.75)


@pytest.mark.slow
@tensorflow_only
@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST_DIR), reason=f"Fashion-MNIST is not in {FASHION_MNIST_DIR} "
                    "(apt-get install dataset-fashion-mnist)")
def test_the_shipped_test_scenes_are_the_recipe_s_own():
    from keras_vit.dense.scenes import fashion_scene_splits

    with np.load(SHIPPED / "test_scenes.npz") as z:
        images, targets = z["images"], z["targets"]
    scenes, masks = fashion_scene_splits(1, 2000, seed=0)["test"]
    np.testing.assert_array_equal(images, scenes[:len(images), ..., 0])
    np.testing.assert_array_equal(targets, masks[:len(images)])


@pytest.mark.slow
@tensorflow_only
@pytest.mark.parametrize("name", ["seg_fashion.tflite", "seg_fashion_f16.tflite", "seg_fashion.onnx"])
def test_the_shipped_exports_agree_with_keras(shipped, name):
    from keras_vit.dense.export import DenseServingGraph, _parity, _runner

    model, split = shipped
    images = np.stack(split.images[:100])
    targets = np.stack(split.targets[:100])
    format = "onnx" if name.endswith(".onnx") else "tflite"
    path = SHIPPED / "exports" / name
    report = _parity(DenseServingGraph(model), _runner(format, str(path), path.read_bytes()), images, targets, None)
    if name in ("seg_fashion.tflite", "seg_fashion.onnx"):
        assert report["relative_max_abs_diff"] < 1e-4 and report["class_agreement"] > 0.999
    assert report["miou_drop"] <= 0.01 and report["class_agreement"] > 0.97


_DATA_PARALLEL = r"""
import json, sys
sys.path.insert(0, "tests")
from test_dense_training import _config
from keras_vit.dense.training import train
# 2 devices; validation_split 0.45 of the folder's pairs leaves a last validation batch of odd length
metrics = train(_config("strategy=mirrored", "validation_split=0.45", "epochs=1", "batch_size=4"), sys.argv[1], verbose=0)
print(json.dumps({k: metrics[k] for k in ("strategy", "num_replicas", "validation_examples", "test_miou",
                                           "final_epoch_logs")}))
"""


def test_dense_training_runs_under_keras_data_parallel_on_two_devices(tmp_path):
    pytest.importorskip("jax", reason="jax is not installed (pip install -e '.[jax]')")
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        pytest.skip("starts its own jax process; runs in the tensorflow suite only")
    result = subprocess.run([sys.executable, "-c", _DATA_PARALLEL, str(tmp_path / "run")], capture_output=True,
                            text=True, cwd=ROOT, timeout=600,
                            env=dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3",
                                     XLA_FLAGS="--xla_force_host_platform_device_count=2"))
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["strategy"] == "DataParallel" and got["num_replicas"] == 2
    assert got["validation_examples"] % 4 % 2 == 1, got  # the odd last batch was padded, not refused
    assert 0.0 <= got["test_miou"] <= 1.0 and 0.0 <= got["final_epoch_logs"]["val_miou"] <= 1.0
