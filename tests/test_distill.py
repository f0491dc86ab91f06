"""DeiT's distillation token (VisionTransformer(distillation=True)) and distillation training."""

import json

import keras
import numpy as np
import pytest
from conftest import ROOT, SHARED, randomize, tiny_cifar_folder, tiny_vit

from keras_vit import distill, training

IMAGES = np.random.default_rng(0).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")


def _distilled(**overrides):
    model = tiny_vit(distillation=True, **overrides)
    randomize(model)  # the heads start at zero: give them values that tell them apart
    return model


def test_distillation_token_layout_and_names():
    plain, model = tiny_vit(), tiny_vit(distillation=True)
    assert model.get_config()["distillation"] and not plain.get_config()["distillation"]
    paths = [w.path for w in model.weights]
    assert paths[:3] == ["patch_encoder/cls", "patch_encoder/dist_token", "patch_encoder/pos_embedding"]
    assert {"head_dist/kernel", "head_dist/bias"} <= set(paths)
    d, classes, patches = 32, 7, 16
    # one token and its position embedding, and a second head
    assert model.count_params() - plain.count_params() == d + d + d * classes + classes
    assert model.get_layer("patch_encoder").get_weights()[2].shape == (1, 2 + patches, d)
    assert model.num_prefix_tokens == 2
    assert model.forward_features(IMAGES).shape == (4, 2 + patches, d)


def test_logits_are_the_two_heads_averaged_and_pooled_is_the_two_tokens_averaged():
    model = _distilled()
    cls, dist = distill.two_heads(model)(IMAGES)
    logits = model(IMAGES)
    np.testing.assert_allclose(logits, (np.asarray(cls) + np.asarray(dist)) / 2, atol=1e-6)
    assert np.abs(np.asarray(cls) - np.asarray(dist)).max() > 0.1  # the heads differ: the mean is no accident
    features = model.forward_features(IMAGES)
    np.testing.assert_allclose(model.forward_head(features, pre_logits=True),
                               (features[:, 0] + features[:, 1]) / 2, atol=1e-6)
    np.testing.assert_allclose(model.forward_intermediates(IMAGES)["logits"], logits, atol=1e-6)
    with pytest.raises(ValueError, match="is distilled: its logits average two heads.*start from 'features'"):
        model.stage_model("pre_logits", "logits")
    headless = tiny_vit(distillation=True, include_top=False)
    headless.set_weights([w for w, v in zip(model.get_weights(), model.weights) if not v.path.startswith("head")])
    np.testing.assert_allclose(headless(IMAGES), (features[:, 0] + features[:, 1]) / 2, atol=1e-5)


def test_switching_distillation_off_changes_the_outputs():
    model = _distilled()
    plain = tiny_vit()
    values = {v.path: v.numpy() for v in model.weights}
    for v in plain.weights:  # everything the plain model has, the class token's position too
        value = values[v.path]
        if v.path == "patch_encoder/pos_embedding":
            value = np.concatenate([value[:, :1], value[:, 2:]], axis=1)
        v.assign(value)
    assert np.abs(np.asarray(model(IMAGES)) - np.asarray(plain(IMAGES))).max() > 1e-2


def test_export_graph_serves_the_averaged_logits():
    from keras_vit import serving

    model = _distilled()
    graph = serving.ServingGraph(model)
    out = graph(IMAGES)
    np.testing.assert_allclose(out["logits"], model(IMAGES), atol=1e-6)
    # every export is made from a float32 copy rebuilt from the config: the token and head survive it
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = _distilled()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    copy = serving.float32_copy(mixed)
    assert copy is not mixed and copy.distillation
    cls, dist = distill.two_heads(copy)(IMAGES)
    np.testing.assert_allclose(serving.ServingGraph(copy)(IMAGES)["logits"], (cls + dist) / 2, atol=1e-5)


def test_tflite_export_outputs_the_averaged_logits(tmp_path):
    from keras_vit.export import export_model
    from keras_vit.serving import load_classifier

    model = _distilled()
    path = tmp_path / "m.tflite"
    pixels = ((IMAGES + 1) * 127.5).round().astype("uint8")
    export_model(model, str(path), samples=pixels)  # refused if it differs from Keras by over 1e-4
    out = load_classifier(str(path))(pixels)
    cls, dist = distill.two_heads(model)(pixels / 127.5 - 1)
    np.testing.assert_allclose(out["logits"], (np.asarray(cls) + np.asarray(dist)) / 2, atol=1e-4)


def test_distillation_refuses_what_it_does_not_go_with():
    for bad, what in ((dict(classifier="gap"), "classifier='gap'"), (dict(representation_size=16), "representation_size=16"),
                      (dict(fc_norm=True), "fc_norm=True"), (dict(pooling="gap"), "pooling='gap' with include_top=True")):
        with pytest.raises(ValueError, match=f"distillation=True .* does not go with {what}"):
            tiny_vit(distillation=True, **bad)
    tiny_vit(distillation=True, include_top=False, pooling="gap")  # a feature extractor may pool the patches


def _labels(n=4, classes=7, seed=1):
    return keras.ops.convert_to_numpy(keras.ops.one_hot(np.random.default_rng(seed).integers(0, classes, n), classes))


def test_hard_distillation_loss_is_deits():
    student, teacher = _distilled(), tiny_vit()
    randomize(teacher, seed=3)
    trainer = distill.Distiller(student, teacher, kind="hard", alpha=0.5, label_smoothing=0.1)
    labels = _labels()
    pred = trainer(IMAGES, training=False)
    loss = float(trainer.compute_loss(IMAGES, labels, pred, training=True))
    t = np.asarray(teacher(IMAGES))
    hard = np.eye(7)[t.argmax(-1)]

    def ce(y, logits):
        logp = (logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
            - logits.max(-1, keepdims=True))
        return -(y * logp).sum(-1)

    smooth = labels * 0.9 + 0.1 / 7
    want = np.mean(0.5 * ce(smooth, np.asarray(pred["cls"])) + 0.5 * ce(hard, np.asarray(pred["dist"])))
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    # validation: the label loss of the averaged logits, as a plain model's
    val = float(trainer.compute_loss(IMAGES, labels, pred, training=False))
    np.testing.assert_allclose(val, np.mean(ce(smooth, np.asarray(pred["logits"]))), rtol=1e-5)
    soft = distill.Distiller(student, teacher, kind="soft", alpha=1.0, temperature=2.0)
    p = np.exp(t / 2) / np.exp(t / 2).sum(-1, keepdims=True)
    q = np.asarray(keras.ops.softmax(pred["dist"] / 2))
    np.testing.assert_allclose(float(soft.compute_loss(IMAGES, labels, pred, training=True)),
                               np.mean((p * np.log(p / q)).sum(-1)) * 4, rtol=1e-4)


@pytest.mark.slow  # CI time (19 s; in CI: test_train_with_a_teacher_writes_the_student_and_the_head_table)
def test_distill_training_steps_keep_the_teacher_frozen():
    student, teacher = _distilled(), tiny_vit()
    randomize(teacher, seed=3)
    before_teacher = [w.copy() for w in teacher.get_weights()]
    before_student = [w.copy() for w in student.get_weights()]
    trainer = distill.Distiller(student, teacher)
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-3))
    x = np.random.default_rng(2).uniform(-1, 1, (16, 32, 32, 3)).astype("float32")
    history = trainer.fit(x, _labels(16), batch_size=8, epochs=2, verbose=0, validation_data=(x[:8], _labels(8)))
    for a, b in zip(before_teacher, teacher.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(before_student, student.get_weights()))
    assert {"loss", "accuracy", "cls_accuracy", "dist_accuracy", "teacher_agreement", "val_accuracy",
            "val_teacher_agreement"} <= set(history.history)
    assert not {id(w) for w in trainer.trainable_weights} & {id(w) for w in teacher.weights}
    assert len(trainer.trainable_weights) == len(student.trainable_weights)
    # each metric is what it says, against NumPy on the same images
    labels = _labels(16)
    results = trainer.evaluate(x, labels, batch_size=8, verbose=0, return_dict=True)
    cls, dist = (np.asarray(t) for t in distill.two_heads(student)(x))
    truth, taught = labels.argmax(-1), np.asarray(teacher(x)).argmax(-1)
    want = {"accuracy": np.mean((cls + dist).argmax(-1) == truth), "cls_accuracy": np.mean(cls.argmax(-1) == truth),
            "dist_accuracy": np.mean(dist.argmax(-1) == truth), "teacher_agreement": np.mean(dist.argmax(-1) == taught)}
    for name, value in want.items():
        assert results[name] == pytest.approx(value, abs=1e-6), (name, results, want)


def test_a_student_and_teacher_that_do_not_fit_are_refused(tmp_path):
    with pytest.raises(ValueError, match="has no distillation token: build it with distillation=True"):
        distill.Distiller(tiny_vit(), tiny_vit())
    with pytest.raises(ValueError, match="predicts 5 classes, the student 7"):
        distill.Distiller(tiny_vit(distillation=True), tiny_vit(classes=5))
    with pytest.raises(ValueError, match=r"takes images of shape \(48, 48, 3\), the student \(32, 32, 3\)"):
        distill.Distiller(tiny_vit(distillation=True), tiny_vit(image_size=48))
    with pytest.raises(ValueError, match="classes .* differ from the student's"):
        distill.Distiller(tiny_vit(distillation=True, class_names=list("abcdefg")),
                          tiny_vit(class_names=list("gfedcba")))
    with pytest.raises(FileNotFoundError, match=r"teacher file .*nope.keras does not exist.*--set teacher=PATH"):
        distill.load_teacher(tmp_path / "nope.keras")


def test_teacher_runs_in_the_training_precision_with_the_files_weights(tmp_path):
    teacher = tiny_vit()
    randomize(teacher, seed=4)
    teacher.save(tmp_path / "t.keras")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = distill.load_teacher(tmp_path / "t.keras")
        as_saved = distill.load_teacher(tmp_path / "t.keras", precision="float32")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert mixed.get_layer("encoderblock_0").compute_dtype == "bfloat16" and not mixed.trainable
    assert as_saved.get_layer("encoderblock_0").compute_dtype == "float32"
    want = np.asarray(teacher(IMAGES))
    np.testing.assert_allclose(as_saved.logits_model(IMAGES), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mixed.logits_model(IMAGES), "float32"), want, atol=0.15)


def test_train_with_a_teacher_writes_the_student_and_the_head_table(tmp_path):
    """`keras-vit train` with a distill section, on the bundled CIFAR-10 sample images."""
    teacher = tiny_vit(classes=10)
    randomize(teacher, seed=5)
    teacher.save(tmp_path / "teacher.keras")
    config = training.apply_overrides(training.load_recipe(ROOT / "recipes" / "cifar10_deit.py"), [
        f"data={tiny_cifar_folder(tmp_path / 'data')}", f"teacher={tmp_path / 'teacher.keras'}",
        "epochs=1", "steps_per_epoch=2", "batch_size=8", "validation_split=0", "randaugment=None",
        "model.patch_size=8", "model.hidden_size=32", "model.num_layers=2", "model.mlp_dim=64",
        "precision=float32"])
    metrics = training.train(config, tmp_path / "run", verbose=0)
    model = keras.models.load_model(tmp_path / "run" / "model.keras")
    assert model.distillation and type(model).__name__ == "VisionTransformer"
    heads = metrics["test_heads"]
    assert set(heads) == {"class_head", "distillation_head", "averaged", "examples"}
    assert heads["averaged"] == pytest.approx(metrics["test_accuracy"], abs=1e-6)
    assert metrics["teacher"].endswith("teacher.keras") and metrics["all_epochs_seconds"] > 0
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["test_heads"] == heads


def test_deit_recipe_parses_with_its_teacher_and_student():
    config = training.load_recipe(ROOT / "recipes" / "cifar10_deit.py")
    assert config["model"]["distillation"] and config["distill"]["kind"] == "hard"
    assert config["distill"]["teacher"] == "saved_models/vit_cifar10_hybrid/model.keras"
    vit = training.load_recipe(ROOT / "recipes" / "cifar10.py")
    same = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
    assert {k: config["model"][k] for k in same} == {k: vit["model"][k] for k in same}
    changed = training.apply_overrides(config, ["teacher=other.keras", "distill.kind=soft", "distill.temperature=3"])
    assert changed["distill"] == dict(config["distill"], teacher="other.keras", kind="soft", temperature=3.0)
    with pytest.raises(ValueError, match=r"'distill.kidn' \(did you mean 'distill.kind'\?\)"):
        training.apply_overrides(config, ["distill.kidn=soft"])


def test_timm_distilled_deit_checkpoint_gives_timms_outputs():
    """The distillation token is the one timm's deit_*_distilled_* models have: a tiny random checkpoint
    that timm 1.0.31 saved (../shared/fixtures/zoo/timm_deit_distilled) gives timm's logits, pooled
    output and tokens (a copy in tests/data/timm)."""
    from safetensors.numpy import load_file

    from keras_vit.pretrained import load_state_dict

    folder = ROOT / "tests" / "data" / "timm"
    io = np.load(folder / "timm_deit_distilled.io.npz")
    model = tiny_vit(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=5,
                     distillation=True, approximate_gelu=False, pixel_mean=(0.485, 0.456, 0.406),
                     pixel_std=(0.229, 0.224, 0.225))
    report = load_state_dict(model, load_file(str(folder / "timm_deit_distilled" / "model.safetensors")), "timm")
    assert {"dist_token", "head_dist.weight", "head_dist.bias"} <= set(report["loaded"])
    assert not report["kept"] and not report["dropped"]
    images = io["images"]
    np.testing.assert_allclose(model(images), io["logits"], atol=1e-4)
    features = model.forward_features(images)
    np.testing.assert_allclose(features, io["tokens"], atol=1e-4)
    np.testing.assert_allclose(model.forward_head(features, pre_logits=True), io["pooled"], atol=1e-4)


SHIPPED_DEIT = ROOT / "saved_models" / "deit_cifar10" / "model.keras"
CIFAR10_TGZ = SHARED / "data" / "cifar10-jpeg.tgz"


@pytest.mark.slow
def test_shipped_deit_reaches_80_percent_and_its_heads_table_holds():
    """The shipped DeiT student (recipes/cifar10_deit_align.py, then recipes/cifar10_deit.py from it) on all
    10,000 CIFAR-10 test images (float32, the two heads averaged, as every export serves it): the bar of
    issue 39 is 80%; each head alone is reported beside it."""
    if not SHIPPED_DEIT.exists():
        pytest.skip(f"the shipped DeiT model {SHIPPED_DEIT} is not there (saved_models/ship.py writes it)")
    if not CIFAR10_TGZ.exists():
        pytest.skip(f"the CIFAR-10 JPEGs are not at {CIFAR10_TGZ} (they are in CI's ../shared, not in a clone)")
    import keras_vit

    model = keras.models.load_model(SHIPPED_DEIT, compile=False)
    assert model.distillation and model.image_size == (32, 32)
    images, labels, _ = keras_vit.data.load_image_set(CIFAR10_TGZ, model.image_size, class_names=model.class_names,
                                                      split="test")
    assert len(images) == len(labels) == 10000
    x = keras_vit.preprocess_input(images)
    cls, dist = (np.concatenate(parts) for parts in zip(*(
        [np.asarray(t) for t in distill.two_heads(model)(x[i:i + 500])] for i in range(0, len(x), 500))))
    accuracy = {"class_head": np.mean(cls.argmax(-1) == labels), "distillation_head": np.mean(dist.argmax(-1) == labels),
                "averaged": np.mean((cls + dist).argmax(-1) == labels)}
    assert accuracy["averaged"] >= 0.80, accuracy
    logits = np.concatenate([np.asarray(model(x[i:i + 500])) for i in range(0, len(x), 500)])
    assert np.mean(logits.argmax(-1) == (cls + dist).argmax(-1)) == 1.0  # the model's own output is the average
    recorded = json.loads((SHIPPED_DEIT.parent / "metrics.json").read_text())["test_heads"]
    for head, value in accuracy.items():  # the card's table (training precision) against float32 here
        assert abs(recorded[head] - value) < 0.005, (head, recorded[head], value)


# Inheriting the teacher's Transformer and aligning the student's front end (objective "align")


def _front_copied(student, teacher):
    """Gives `student` the teacher's patch projection too: then an inherited student is the teacher."""
    for name in ("patch_encoder/embedding/kernel", "patch_encoder/embedding/bias"):
        dict((w.path, w) for w in student.weights)[name].assign(dict((w.path, w) for w in teacher.weights)[name])


def test_a_student_that_inherits_the_teacher_computes_the_teacher():
    """The teacher's 2 blocks become the student's last 2; the student's first 2 blocks start as the identity
    (their residual outputs zero, whatever their other weights): with the teacher's patch projection added,
    the student's logits are the teacher's."""
    teacher = randomize(tiny_vit(classifier_activation=None), seed=1)
    student = randomize(tiny_vit(num_layers=4, classifier_activation=None), seed=2)
    inherited = distill.inherit_teacher(student, teacher)
    assert "encoderblock_2/query/kernel" in inherited and "encoderblock_0/out/kernel" in inherited
    assert "encoderblock_0/query/kernel" not in inherited and "patch_encoder/embedding/kernel" not in inherited
    assert not np.allclose(student(IMAGES), teacher(IMAGES), atol=1e-3)  # the projections still differ
    _front_copied(student, teacher)
    np.testing.assert_allclose(student(IMAGES), teacher(IMAGES), atol=1e-5)
    block = {w.path: w.numpy() for w in student.get_layer("encoderblock_3").weights}
    for w in teacher.get_layer("encoderblock_1").weights:
        np.testing.assert_array_equal(block[w.path.replace("encoderblock_1", "encoderblock_3")], w.numpy())


def test_a_distilled_student_takes_the_class_token_for_its_distillation_token():
    teacher = randomize(tiny_vit(classifier_activation=None), seed=1)
    student = randomize(tiny_vit(num_layers=3, distillation=True, classifier_activation=None), seed=2)
    distill.inherit_teacher(student, teacher)
    s, t = ({w.path: w.numpy() for w in m.weights} for m in (student, teacher))
    np.testing.assert_array_equal(s["patch_encoder/dist_token"], t["patch_encoder/cls"])
    np.testing.assert_array_equal(s["patch_encoder/pos_embedding"][:, 1], t["patch_encoder/pos_embedding"][:, 0])
    np.testing.assert_array_equal(s["patch_encoder/pos_embedding"][:, 2:], t["patch_encoder/pos_embedding"][:, 1:])
    np.testing.assert_array_equal(s["head_dist/kernel"], t["head/kernel"])
    _front_copied(student, teacher)  # both tokens are then the teacher's class token: both heads the teacher's
    cls, dist = (np.asarray(x) for x in distill.two_heads(student)(IMAGES))
    np.testing.assert_allclose(cls, dist, atol=1e-5)
    np.testing.assert_allclose(student(IMAGES), cls, atol=1e-5)


def test_inheriting_refuses_a_teacher_that_does_not_fit():
    with pytest.raises(ValueError, match=r"teacher .* has 2 blocks, the student 1: .*model.num_layers >= 2"):
        distill.inherit_teacher(tiny_vit(num_layers=1), tiny_vit())
    with pytest.raises(ValueError, match=r"'patch_encoder/cls' has shape \(1, 1, 48\), the student's is \(1, 1, 32\)"):
        distill.inherit_teacher(tiny_vit(), tiny_vit(hidden_size=48))
    with pytest.raises(ValueError, match=r"'encoderblock_0/mlp_dense1/kernel' has shape \(32, 96\), the student's is "
                                         r"\(32, 64\): the student needs the teacher's hidden_size, num_heads, mlp_dim"):
        distill.inherit_teacher(tiny_vit(), tiny_vit(mlp_dim=96))
    with pytest.raises(ValueError, match=r"'patch_encoder/pos_embedding' has shape \(1, 10, 32\), the student's is "
                                         r"\(1, 17, 32\).*token grid"):
        distill.inherit_teacher(tiny_vit(), tiny_vit(image_size=24))
    with pytest.raises(ValueError, match="no class token: inheriting needs a keras-vit ViT teacher with "
                                         "classifier='token'"):
        distill.inherit_teacher(tiny_vit(), tiny_vit(classifier="gap"))
    with pytest.raises(ValueError, match="is a Sequential; inheriting needs keras-vit VisionTransformer"):
        distill.inherit_teacher(tiny_vit(), keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten()]))


def test_aligning_trains_only_the_front_end_toward_the_teachers_tokens():
    teacher = randomize(tiny_vit(classifier_activation=None), seed=1)
    student = randomize(tiny_vit(num_layers=3, distillation=True, classifier_activation=None), seed=2)
    distill.inherit_teacher(student, teacher)
    before_teacher = [w.numpy().copy() for w in teacher.weights]
    before = {w.path: w.numpy().copy() for w in student.weights}
    aligner = distill.TokenAligner(student, teacher)
    aligner.compile(optimizer=keras.optimizers.Adam(3e-3))
    x = np.random.default_rng(2).uniform(-1, 1, (32, 32, 32, 3)).astype("float32")
    history = aligner.fit(x, np.zeros((32, 7), "float32"), batch_size=8, epochs=6, verbose=0).history
    assert all(b < a for a, b in zip(history["loss"], history["loss"][1:])), history["loss"]
    assert history["loss"][-1] < 0.8 * history["loss"][0], history["loss"]
    for a, w in zip(before_teacher, teacher.weights):
        np.testing.assert_array_equal(a, w.numpy())
    changed = {w.path for w in student.weights if not np.array_equal(before[w.path], w.numpy())}
    assert "patch_encoder/embedding/kernel" in changed and "encoderblock_0/out/kernel" in changed
    assert not {p for p in changed if p.startswith(("encoderblock_1/", "encoderblock_2/", "head", "encoder_norm"))}
    # the metrics against NumPy, one batch: the squared error per token value and the fraction explained
    results = aligner.evaluate(x, np.zeros((32, 7), "float32"), batch_size=32, verbose=0, return_dict=True)
    target = np.asarray(teacher.stage_model("images", "embedded")(x))
    target = np.concatenate([target[:, :1], target], axis=1)
    error = np.mean((np.asarray(aligner(x)) - target) ** 2)
    assert results["loss"] == pytest.approx(error, rel=1e-4)
    assert results["explained"] == pytest.approx(1 - error / np.mean(target.var(axis=(1, 2))), rel=1e-4)


@pytest.mark.slow  # CI time (14 s; aligning in CI: test_aligning_trains_only_the_front_end_toward_the_teachers_tokens)
def test_train_objective_align_inherits_aligns_and_writes_a_student_to_fine_tune(tmp_path):
    """`keras-vit train` with recipes/cifar10_deit_align.py, on the bundled CIFAR-10 sample images."""
    teacher = randomize(tiny_vit(classes=10, classifier_activation=None), seed=5)
    teacher.save(tmp_path / "teacher.keras")
    recipe = training.load_recipe(ROOT / "recipes" / "cifar10_deit_align.py")
    tiny = ["model.patch_size=8", "model.hidden_size=32", "model.num_heads=4", "model.mlp_dim=64",
            "precision=float32", "validation_split=0", "randaugment=None", "batch_size=8", "epochs=1"]
    with pytest.raises(ValueError, match="objective 'align' regresses a teacher's tokens; name the teacher"):
        training.train(training.apply_overrides(recipe, ["teacher=none", *tiny]), tmp_path / "none", verbose=0)
    assert not (tmp_path / "none").exists()
    config = training.apply_overrides(recipe, [f"data={tiny_cifar_folder(tmp_path / 'data')}",
                                               f"teacher={tmp_path / 'teacher.keras'}", "model.num_layers=3", *tiny])
    metrics = training.train(config, tmp_path / "run", verbose=0)
    history = (tmp_path / "run" / "history.csv").read_text().splitlines()[0].split(",")
    assert {"loss", "explained"} <= set(history) and metrics["objective"] == "align"
    student = keras.models.load_model(tmp_path / "run" / "model.keras", compile=False)
    assert student.distillation and set(metrics["test_heads"]) == {"class_head", "distillation_head", "averaged",
                                                                   "examples"}
    s, t = ({w.path: w.numpy() for w in m.weights} for m in (student, teacher))
    for path, value in t.items():  # the teacher's blocks, norm and head came over and did not train
        if path.startswith("encoderblock_"):
            i, rest = path.split("/", 1)
            np.testing.assert_array_equal(s[f"encoderblock_{int(i.split('_')[1]) + 1}/{rest}"], value)
    np.testing.assert_array_equal(s["head_dist/kernel"], t["head/kernel"])


def test_align_recipe_builds_the_deit_recipes_student_from_the_shipped_teacher():
    """Stage 1's student is stage 2's (so `--set init=` loads every weight), and the shipped hybrid's
    4 blocks fit its last 4."""
    align = training.load_recipe(ROOT / "recipes" / "cifar10_deit_align.py")
    deit = training.load_recipe(ROOT / "recipes" / "cifar10_deit.py")
    assert align["model"] == deit["model"] and align["objective"] == "align"
    assert align["distill"]["teacher"] == deit["distill"]["teacher"]
    teacher_path = ROOT / align["distill"]["teacher"]
    if not teacher_path.exists():
        pytest.skip(f"{teacher_path} is not there")
    import keras_vit

    teacher = distill.load_teacher(teacher_path, precision="float32")
    keys = {k: v for k, v in align["model"].items() if v is not None}
    student = keras_vit.VisionTransformer(image_size=32, classes=10, classifier_activation=None, **keys)
    inherited = distill.inherit_teacher(student, teacher)
    assert len(inherited) == 81 and "encoderblock_5/mlp_dense2/kernel" in inherited
