"""ViTConfig: the fields checked and normalized once, the derived sizes, presets, and the model built from it."""

import dataclasses
import json
import zipfile

import pytest
from conftest import ROOT

import keras_vit
from keras_vit.config import ViTConfig

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, classes=10)


@pytest.mark.parametrize("fields,grid,effective,stride,prefix", [
    (dict(TINY), (4, 4), (8, 8), 1, 1),
    (dict(TINY, image_size=(48, 24)), (6, 3), (8, 8), 1, 1),
    (dict(TINY, classifier="gap"), (4, 4), (8, 8), 1, 0),
    (dict(TINY, distillation=True, register_tokens=4), (4, 4), (8, 8), 1, 6),
    # the official root shrinks 4x, each stage after the first 2x more
    (dict(TINY, image_size=64, patch_size=1, resnet=dict(num_layers=(1, 1))), (8, 8), (8, 8), 8, 1),
    (dict(TINY, image_size=32, patch_size=2, resnet=dict(num_layers=(1,), root="small", first_stride=2)),
     (8, 8), (4, 4), 2, 1),
    (dict(TINY, image_size=32, patch_size=8, resnet=dict(num_layers=())), (1, 1), (32, 32), 4, 1),
])
def test_the_derived_sizes(fields, grid, effective, stride, prefix):
    config = ViTConfig(**fields)
    assert (config.grid, config.effective_patch, config.stem_stride, config.num_prefix_tokens) == (
        (grid, effective, stride, prefix))
    model = keras_vit.VisionTransformer(config)
    assert model.patch_encoder.grid_size == grid and model.num_prefix_tokens == prefix


@pytest.mark.parametrize("fields,message", [
    (dict(image_size=30), r"image_size \(30, 30\) is not a multiple of the patch size \(8, 8\)"),
    (dict(image_size=36, patch_size=1, resnet=dict(num_layers=(1, 1))),
     r"image_size \(36, 36\) is not a multiple of the hybrid's effective patch size \(8, 8\) "
     r"\(stem stride 8 x patch \(1, 1\)\)"),
    (dict(hidden_size=30), "hidden_size 30 is not divisible by num_heads 4"),
    (dict(classifier="cls"), "Unknown classifier 'cls'"),
    (dict(classifier="gap", pooling="token"), "pooling='token' needs a class token"),
    (dict(drop_path_rate=1.0), r"drop_path_rate must be in \[0, 1\), got 1.0"),
    (dict(pixel_std=(0.5, 0.0, 0.5)), r"pixel_std must be positive, got \(0.5, 0.0, 0.5\)"),
    (dict(pixel_mean=(0.5, 0.5)), r"pixel_mean must be 3 numbers \(R, G, B\), got \(0.5, 0.5\)"),
    (dict(class_names=["a", "b"]), "class_names has 2 names but the model has 10 classes"),
    (dict(resnet=dict(num_layers=(1,), root="tiny")), r"resnet root must be one of \['bit', 'small'\], got 'tiny'"),
    (dict(resnet=dict(layers=(1,))), "resnet must be None or a dict"),
    (dict(register_tokens=-1), "register_tokens must be >= 0, got -1"),
    (dict(prefix_posemb="some"), "Unknown prefix_posemb 'some'"),
    (dict(mlp_activation="relu"), "Unknown mlp_activation 'relu'"),
    (dict(crop_pct=1.5), r"crop_pct must be in \(0, 1\], got 1.5"),
    (dict(distillation=True, classifier="gap"), r"distillation=True .* does not go with classifier='gap'"),
    (dict(relative_position_bias=True, dynamic_image_size=True), r"does not go with dynamic_image_size=True"),
    (dict(channels=0), r"channels must be a positive int \(3 for RGB\), got 0"),
    (dict(variant="Ti/16"), r"variant='Ti/16' does not describe this model: patch_size=\(8, 8\)"),
])
def test_a_bad_field_is_refused_naming_it(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**dict(TINY, **fields))


def test_the_fields_are_normalized_and_the_config_is_a_value():
    config = ViTConfig(**dict(TINY, image_size=[32, 32], pixel_mean=0.5, dropout_rate=0, layer_scale=1,
                              class_names=[str(i) for i in range(10)],
                              resnet={"num_layers": [1], "width_factor": 1, "root": "bit", "norm": "group"}))
    assert config.image_size == (32, 32) and config.patch_size == (8, 8) and config.pixel_mean == (0.5, 0.5, 0.5)
    assert config.dropout_rate == 0.0 and isinstance(config.dropout_rate, float) and config.layer_scale == 1.0
    assert config.class_names == tuple("0123456789")
    assert config.resnet == {"num_layers": (1,), "width_factor": 1}  # the defaults' keys left out, as saved
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.classes = 3  # type: ignore[misc]
    same = ViTConfig(**config.to_dict())
    assert same == config and hash(same) == hash(config) and len({same, config}) == 1
    assert dataclasses.replace(config, classes=10) == config and dataclasses.replace(config, pre_norm=True) != config
    assert json.loads(json.dumps(config.to_dict())) != config.to_dict()  # tuples became lists ...
    assert ViTConfig(**json.loads(json.dumps(config.to_dict()))) == config  # ... and come back as tuples


def test_presets_produce_configs():
    config = ViTConfig.from_preset("ViT-B_16", image_size=384, classes=10)
    assert config.variant == "B/16" and config.grid == (24, 24) and config.hidden_size == 768
    assert ViTConfig.from_preset("R50+B/16").resnet == {"num_layers": (3, 4, 9), "width_factor": 1}
    assert ViTConfig.from_preset("Ti/16", num_layers=2).variant is None  # other sizes are another model
    with pytest.raises(ValueError, match=r"Unknown ViT variant 'B/17'"):
        ViTConfig.from_preset("B/17")
    with pytest.raises(TypeError, match=r"from_preset\(\) .* `clases` \(did you mean `classes`\?\)"):
        ViTConfig.from_preset("B/16", clases=10)
    with pytest.raises(TypeError, match=r"ViTConfig\(\) .* `clases` \(did you mean `classes`\?\)"):
        ViTConfig(clases=10)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"ViTConfig\(\) .* `clases` \(did you mean `classes`\?\)"):
        dataclasses.replace(ViTConfig(), clases=10)


def test_the_model_is_built_from_its_config_and_gives_it_back():
    config = ViTConfig(**TINY)
    model = keras_vit.VisionTransformer(config, name="tiny")
    assert model.config is config
    assert model.get_config() == {"name": "tiny", "trainable": True, **config.to_dict()}
    assert keras_vit.VisionTransformer.from_config(json.loads(json.dumps(model.get_config()))).config == config
    # every field is an attribute of the model, as the keywords always were
    for field in dataclasses.fields(ViTConfig):
        assert getattr(model, field.name) == getattr(config, field.name), field.name
    # a config and keywords: the keywords replace its fields
    assert keras_vit.VisionTransformer(config, classes=3).config == dataclasses.replace(config, classes=3)
    assert keras_vit.VisionTransformer(**TINY).config == config
    with pytest.raises(TypeError, match=r"takes a ViTConfig \(or its fields as keywords\), got int 32"):
        keras_vit.VisionTransformer(32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"VisionTransformer\(\) .* `hiden_size` \(did you mean `hidden_size`\?\)"):
        keras_vit.VisionTransformer(config, hiden_size=8)


def test_configs_saved_before_vitconfig_load_as_configs():
    """The shipped models were saved from VisionTransformer's keyword arguments (before some of today's fields
    existed: those take their defaults): their configs are ViTConfigs, and save as they were."""
    for name in ("vit_cifar10", "vit_cifar10_hybrid"):
        with zipfile.ZipFile(ROOT / "saved_models" / name / "model.keras") as z:
            saved = json.loads(z.read("config.json"))["config"]
        config = ViTConfig(**{k: v for k, v in saved.items() if k not in ("name", "trainable")})
        model = keras_vit.VisionTransformer.from_config(saved)
        resaved = json.loads(json.dumps(model.get_config()))
        assert model.config == config and {k: v for k, v in resaved.items() if k in saved} == saved
