"""Dense prediction (keras_vit/dense/): transformers' DPT and Depth Anything checkpoints give transformers'
outputs at two sizes under every backend; each head option moves the outputs when switched; the heads go
on any backbone keras-vit builds; the models save and load (.keras, transformers' folders)."""

import dataclasses
import json
import os

import numpy as np
import pytest
from conftest import BACKEND, DATA, tensorflow_only

import keras_vit
from keras_vit.dense import DenseHead, DensePredictor
from keras_vit.dense.transformers import configs_from

pytestmark = pytest.mark.backends

DENSE = DATA / "dense"
CASES = json.loads((DENSE / "cases.json").read_text())
TOLERANCE = CASES["tolerance"]
NAMES = sorted(CASES["cases"])


def relative_error(out, ref):
    from keras.ops import convert_to_numpy

    out = convert_to_numpy(out)  # a torch tensor that requires grad has no __array__
    return float(np.max(np.abs(out - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def output_key(io):
    return "depth" if "depth" in io else "logits"


@pytest.fixture(scope="module")
def loaded():
    """{case: (model, arrays)}, each checkpoint read once for the file."""
    out = {}
    for name in NAMES:
        with np.load(DENSE / f"{name}.io.npz") as io:
            out[name] = (keras_vit.from_pretrained(DENSE / name), dict(io))
    return out


@pytest.mark.parametrize("suffix", ["", "_alt"])
@pytest.mark.parametrize("name", NAMES)
def test_transformers_outputs_at_two_sizes(loaded, name, suffix):
    model, io = loaded[name]
    key = output_key(io)
    out = model.predict(io["images" + suffix], verbose=0)
    assert out.shape == io[key + suffix].shape
    assert relative_error(out, io[key + suffix]) <= TOLERANCE, (name, suffix, BACKEND)


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("name", NAMES)
def test_the_tapped_token_maps_are_the_necks_inputs(loaded, name):
    """The backbone's tokens the head reads equal transformers' `features` (its neck's inputs)."""
    model, io = loaded[name]
    head = model.head_config
    out = model.backbone.forward_intermediates(io["images_alt"])
    for i, stage in enumerate(head.taps):
        tokens = out["embedded"] if stage == 0 else out["blocks"][stage - 1]
        if head.final_norm:
            tokens = model.backbone.get_layer("encoder_norm")(tokens)
        assert relative_error(tokens, io["features_alt"][:, i]) <= TOLERANCE, (name, stage)


def test_each_checkpoint_names_its_task_and_classes(loaded):
    depth, _ = loaded["hf_depth_anything"]
    seg, _ = loaded["hf_dpt_seg"]
    assert (depth.task, depth.head_config.kind, depth.head_config.taps, depth.head_config.final_norm) == (
        "depth", "depth_anything", (1, 2, 3, 4), True)
    assert (seg.task, seg.class_names, seg.head_config.fusion_batch_norm) == (
        "segmentation", ["wall", "floor", "tree", "sky"], True)
    assert loaded["hf_dpt_depth"][0].head_config.taps == (1, 2, 3, 4)  # backbone_out_indices [0, 1, 2, 3]
    assert seg.backbone.posemb_resample == "bilinear" and depth.backbone.posemb_resample == "torch_bicubic"


def _switched(model, **change):
    """The same weights under a head with one option changed (variables matched by path)."""
    other = DensePredictor(model.backbone_config, dataclasses.replace(model.head_config, **change))
    values = {v.path: v for v in model.weights}
    for variable in other.weights:
        if variable.path in values and tuple(values[variable.path].shape) == tuple(variable.shape):
            variable.assign(values[variable.path].numpy())
    return other


SWITCHES = [
    ("hf_dpt_seg", {"readout": "ignore"}), ("hf_dpt_seg", {"readout": "add"}),
    ("hf_dpt_depth", {"readout": "ignore"}),
    ("hf_dpt_seg", {"fusion_batch_norm": False, "fusion_bias": False}),
    ("hf_dpt_depth", {"fusion_residual": False}), ("hf_depth_anything", {"fusion_residual": False}),
    ("hf_depth_anything", {"depth_type": "metric", "max_depth": 10.0}),
    ("hf_depth_anything", {"final_norm": False}), ("hf_dpt_depth", {"final_norm": True}),
    ("hf_depth_anything", {"kind": "dpt"}),  # DPT's x2 fusion and head resizing instead of Depth Anything's
]


@pytest.mark.one_backend  # the heads' graph is the same ops as the parity cases run on every backend
@pytest.mark.parametrize("name,change", SWITCHES, ids=[f"{n}-{'-'.join(c)}" for n, c in SWITCHES])
def test_each_head_option_moves_the_outputs(loaded, name, change):
    model, io = loaded[name]
    key = output_key(io)
    other = _switched(model, **change)
    out = other.predict(io["images"], verbose=0)
    if out.shape != io[key].shape:
        return  # a different output size is a visible change too
    assert relative_error(out, io[key]) > 10 * TOLERANCE, (name, change)


@pytest.mark.one_backend  # the heads' graph is the same ops as the parity cases run on every backend
def test_metric_depth_is_a_sigmoid_times_max_depth(loaded):
    model, io = loaded["hf_depth_anything"]
    metric = _switched(model, depth_type="metric", max_depth=20.0).predict(io["images"], verbose=0)
    assert metric.min() >= 0 and metric.max() <= 20.0 and metric.std() > 0


@pytest.mark.one_backend  # the heads' graph is the same ops as the parity cases run on every backend
@pytest.mark.parametrize("backbone", [
    dict(patch_size=14, image_size=28, hidden_size=24, num_layers=3, num_heads=2, mlp_dim=48, layer_scale=1.0,
         register_tokens=4, prefix_posemb="class"),  # DINOv2 with registers
    dict(patch_size=8, image_size=32, hidden_size=24, num_layers=3, num_heads=2, mlp_dim=48, distillation=True),  # DeiT
    dict(patch_size=8, image_size=32, hidden_size=24, num_layers=3, num_heads=2, mlp_dim=48, pre_norm=True,
         patch_bias=False, fc_norm=True, mlp_activation="quick_gelu"),  # CLIP's image tower
    dict(patch_size=8, image_size=32, hidden_size=24, num_layers=3, num_heads=2, mlp_dim=48, classifier="gap"),
], ids=["dinov2-registers", "deit", "clip", "no-class-token"])
@pytest.mark.parametrize("kind", ["dpt", "linear"])
def test_heads_go_on_any_backbone_at_any_size(backbone, kind):
    config = keras_vit.ViTConfig(**backbone, dynamic_image_size=True)
    token = config.classifier == "token"
    head = DenseHead(kind=kind, task="segmentation", taps=(1, 2, 3) if kind == "linear" else (0, 1, 2, 3),
                     neck_hidden_sizes=(4, 8, 16, 16), fusion_hidden_size=8, classes=5,
                     readout="project" if token else "ignore", final_norm=kind == "linear" and not config.fc_norm)
    model = DensePredictor(config, head)
    p = config.patch_size[0]
    images = np.random.default_rng(0).normal(size=(2, 4 * p, 6 * p, 3)).astype("float32")
    out = model.predict(images, verbose=0)
    scale = 16 if kind == "dpt" else p  # DPT's neck and head: 16 x the patch grid, as transformers' (any patch)
    assert out.shape == (2, 4 * scale, 6 * scale, 5) and np.isfinite(out).all()


def test_the_subpixel_linear_head_gives_each_token_its_patch_of_pixels():
    """Each output pixel is its token's map times the kernel entry at the pixel's place in the patch
    (no blending across tokens), so a boundary inside a patch can be drawn; without the option the
    patch's pixels are bilinear blends of token values, and the outputs move."""
    import keras

    config = keras_vit.ViTConfig(patch_size=4, image_size=16, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                                 classifier="gap", dynamic_image_size=True)
    head = DenseHead(kind="linear", task="segmentation", taps=(2,), final_norm=True, classes=3,
                     linear_batch_norm=False, subpixel=True)
    model = DensePredictor(config, head)
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.normal(size=v.shape).astype("float32") * 0.2)
    images = rng.normal(size=(2, 12, 20, 3)).astype("float32")
    layer = model.get_layer("linear_classifier")
    taps = keras.ops.convert_to_numpy(keras.Model(model.inputs, layer.input)(images))  # (2, 3, 5, 16)
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in layer.weights)  # (4, 4, classes, 16), (classes,)
    expected = np.einsum("byxd,ijcd->byixjc", taps, kernel).reshape(2, 12, 20, 3) + bias
    out = keras.ops.convert_to_numpy(model(images))
    assert out.shape == (2, 12, 20, 3)
    assert np.allclose(out, expected, atol=1e-5), np.abs(out - expected).max()
    plain = DensePredictor(config, dataclasses.replace(head, subpixel=False))
    for v, w in zip(plain.weights, model.weights):
        if v.shape == w.shape:
            v.assign(w)
    assert relative_error(plain(images), out) > 10 * TOLERANCE
    with pytest.raises(ValueError, match="subpixel=True is an option of the linear head"):
        DenseHead(kind="dpt", task="segmentation", classes=3, subpixel=True)


@pytest.mark.one_backend  # the heads' graph is the same ops as the parity cases run on every backend
def test_from_backbone_copies_the_backbones_weights():
    vit = keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=24, num_layers=2, num_heads=2,
                                      mlp_dim=48, classes=10)
    for v in vit.weights:
        v.assign(np.random.default_rng(len(v.path)).normal(size=v.shape).astype("float32") * 0.1)
    model = DensePredictor.from_backbone(vit, DenseHead(kind="linear", task="segmentation", taps=(2,),
                                                        final_norm=True, classes=3))
    images = np.random.default_rng(1).normal(size=(1, 32, 32, 3)).astype("float32")
    ours = model.backbone.forward_features(images)
    theirs = vit.forward_features(images)
    assert np.allclose(np.asarray(ours), np.asarray(theirs), atol=1e-6)


def test_a_keras_file_round_trip_keeps_the_outputs(loaded, tmp_path):
    import keras

    model, io = loaded["hf_dpt_seg"]
    model.save(tmp_path / "seg.keras")
    back = keras.models.load_model(tmp_path / "seg.keras")
    assert isinstance(back, DensePredictor) and back.class_names == model.class_names
    assert relative_error(back.predict(io["images_alt"], verbose=0), io["logits_alt"]) <= TOLERANCE


@pytest.mark.one_backend
@pytest.mark.parametrize("name", NAMES)
def test_save_pretrained_writes_what_from_pretrained_reads_back(loaded, name, tmp_path):
    model, io = loaded[name]
    folder = keras_vit.save_pretrained(model, tmp_path / name, format="transformers")
    config = json.loads((tmp_path / name / "config.json").read_text())
    source = json.loads((DENSE / name / "config.json").read_text())
    for field in ("model_type", "architectures", "neck_hidden_sizes", "fusion_hidden_size", "reassemble_factors"):
        assert config[field] == source[field], field
    back = keras_vit.from_pretrained(folder)
    key = output_key(io)
    assert relative_error(back.predict(io["images"], verbose=0), io[key]) <= TOLERANCE


@pytest.mark.one_backend
def test_refusals_name_the_value_and_the_way_on(loaded, tmp_path):
    model, _ = loaded["hf_dpt_depth"]
    with pytest.raises(ValueError, match="dense-prediction model.*from_pretrained"):
        keras_vit.load_pretrained(model.backbone, DENSE / "hf_dpt_depth")
    with pytest.raises(ValueError, match="'classes' is a classifier's option"):
        keras_vit.from_pretrained(DENSE / "hf_dpt_depth", classes=3)
    with pytest.raises(TypeError, match="image_sise"):
        keras_vit.from_pretrained(DENSE / "hf_dpt_depth", image_sise=64)
    with pytest.raises(ValueError, match="format='transformers'"):
        keras_vit.save_pretrained(model, tmp_path / "x", format="timm")
    config = json.loads((DENSE / "hf_dpt_depth" / "config.json").read_text())
    with pytest.raises(ValueError, match="is_hybrid=true: DPT-hybrid"):
        configs_from(dict(config, is_hybrid=True), {}, "x/config.json")
    with pytest.raises(ValueError, match="readout_type|readout='bogus'"):
        configs_from(dict(config, readout_type="bogus"), {}, "x/config.json")
    with pytest.raises(ValueError, match="taps=.*no stage 9"):
        DensePredictor(model.backbone_config, dataclasses.replace(model.head_config, taps=(1, 2, 3, 9)))
    with pytest.raises(ValueError, match="task='segmentation' needs classes"):
        DenseHead(task="segmentation")
    with pytest.raises(TypeError, match="fusion_hiden_size"):
        DenseHead.from_dict({"fusion_hiden_size": 8})
    linear = DensePredictor(model.backbone_config, DenseHead(kind="linear", task="segmentation", taps=(4,), classes=2))
    with pytest.raises(ValueError, match="a linear head"):
        keras_vit.save_pretrained(linear, tmp_path / "linear", format="transformers")


@pytest.mark.one_backend
def test_a_checkpoint_that_misses_a_head_key_is_refused_unchanged(tmp_path):
    import shutil

    import safetensors.numpy as st

    folder = tmp_path / "broken"
    shutil.copytree(DENSE / "hf_depth_anything", folder)
    tensors = st.load_file(str(folder / "model.safetensors"))
    del tensors["head.conv2.weight"]
    tensors["neck.convs.0.weight"] = tensors["neck.convs.0.weight"][:, :5]
    st.save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"head\.conv2\.weight.*neck\.convs\.0\.weight: expected \(16, 10, 3, 3\)"):
        keras_vit.from_pretrained(folder)


@tensorflow_only
def test_non_square_images_go_through_dpts_own_vit(loaded):
    """transformers' DPT reshapes its tokens to a square; keras-vit's map follows the image's own grid."""
    model, _ = loaded["hf_dpt_seg"]
    out = model.predict(np.zeros((1, 32, 64, 3), "float32"), verbose=0)
    assert out.shape == (1, 32, 64, 4)
    assert os.path.isdir(DENSE / "hf_dpt_seg")
