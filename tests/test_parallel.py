"""Model parallelism with keras.distribution (keras_vit.parallel): the layout rules, the refusals, and a
tiny ViT on a (2, 4) mesh of 8 CPU devices against one device, in a jax process of its own
(XLA_FLAGS=--xla_force_host_platform_device_count=8 must be set before jax starts). The giant presets'
parameter counts against their papers'.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from keras_vit.config import ViTConfig
from keras_vit.parallel import check_mesh, parameter_bytes, parse_mesh, variable_axes
from keras_vit.presets import GIANT_PRESETS, canonical_variant
from keras_vit.training.distribution import check_distribution

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install -e '.[jax]')")
# The jax process is the same under every backend's run: it runs once, in the tensorflow suite.
once = pytest.mark.skipif(os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow",
                          reason="starts its own jax process; runs in the tensorflow suite only")
JAX_8 = dict(KERAS_BACKEND="jax", XLA_FLAGS="--xla_force_host_platform_device_count=8", TF_CPP_MIN_LOG_LEVEL="3")

_CHECK = r'''
import json
import jax, keras, numpy as np
import keras_vit
from keras_vit.parallel import RuleModelParallel, layout_map, parameter_bytes, variable_axes

out = {"devices": len(jax.devices())}
cfg = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128,
                          classes=10, classifier_activation=None)
rng = np.random.RandomState(0)
x = rng.normal(size=(8, 32, 32, 3)).astype("float32")
y = rng.randint(0, 10, size=(8,))
keras.utils.set_random_seed(0)
single = keras_vit.VisionTransformer(cfg)
weights = single.get_weights()
dist = keras.distribution.ModelParallel(layout_map=layout_map(cfg, "2x4"), batch_dim_name="data")
with dist.scope():
    sharded = keras_vit.VisionTransformer(cfg)
sharded.set_weights(weights)
with RuleModelParallel("2x4").scope():
    ruled = keras_vit.VisionTransformer(cfg)

def spec(v):
    s = tuple(v.value.sharding.spec)
    return list(s + (None,) * (len(v.shape) - len(s)))

out["layouts"] = {v.path: [spec(v), list(variable_axes(v.path, tuple(v.shape), (2, 4)))] for v in sharded.weights}
out["rule_layouts"] = {v.path: [spec(v), list(variable_axes(v.path, tuple(v.shape), (2, 4)))] for v in ruled.weights}
out["max_output_diff"] = float(np.max(np.abs(np.asarray(sharded(x)) - np.asarray(single(x)))))
out["output_scale"] = float(np.max(np.abs(np.asarray(single(x)))))

def grads(model):
    def loss(trainable):
        logits, _ = model.stateless_call(trainable, [v.value for v in model.non_trainable_variables], x)
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
    return jax.jit(jax.grad(loss))([v.value for v in model.trainable_variables])

out["max_grad_diff"] = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(grads(sharded), grads(single)))
per_device = {}
for v in sharded.weights:
    for shard in v.value.addressable_shards:
        per_device[str(shard.device)] = per_device.get(str(shard.device), 0) + shard.data.nbytes
out["bytes"] = dict(total=int(sum(w.nbytes for w in weights)), per_device_max=max(per_device.values()),
                    predicted=parameter_bytes(cfg, "2x4"))

def fit(model):
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]

with dist.scope():
    out["losses_sharded"] = fit(sharded)
out["losses_single"] = fit(single)
small = dict(num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128, classes=10)
families = {  # DINOv2 with registers and LayerScale, a hybrid's ResNet stem, SigLIP's attention pool, BEiT
    "dinov2_reg": lambda: keras_vit.create_model("vit_small_patch14_reg4_dinov2", image_size=56, include_top=False,
                                                 num_layers=2, num_heads=4),
    "hybrid": lambda: keras_vit.create_model("R+Ti/16", image_size=32, **small),
    "siglip_map": lambda: keras_vit.create_model("vit_base_patch16_siglip_224", image_size=32, **small),
    "beit": lambda: keras_vit.create_model("beit_base_patch16_224", image_size=32, **small),
}
out["families"] = {}
for name, build in families.items():
    keras.utils.set_random_seed(0)
    one = build()
    images = rng.normal(size=(2,) + tuple(one.input_shape[1:])).astype("float32")
    with keras.distribution.ModelParallel(layout_map=layout_map(one, "2x4"), batch_dim_name="data").scope():
        many = build()
    many.set_weights(one.get_weights())
    out["families"][name] = dict(
        diff=float(np.max(np.abs(np.asarray(many(images)) - np.asarray(one(images))))),
        sharded=sum(1 for v in many.weights if any(a is not None for a in v.value.sharding.spec)))
try:
    layout_map(keras_vit.ViTConfig(hidden_size=48, num_heads=3, mlp_dim=96, num_layers=1), "2x4")
except ValueError as e:
    out["refusal"] = str(e)
try:
    layout_map(cfg, "4x4")
except ValueError as e:
    out["too_many_devices"] = str(e)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def mesh_run():
    result = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env=dict(os.environ, **JAX_8))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_block_kernels_are_megatron_split_and_the_rest_fsdp_or_replicated():
    mesh = (2, 4)
    assert variable_axes("encoderblock_0/query/kernel", (64, 64), mesh) == ("data", "model")
    assert variable_axes("encoderblock_11/value/bias", (64,), mesh) == ("model",)
    assert variable_axes("encoderblock_0/out/kernel", (64, 64), mesh) == ("model", "data")
    assert variable_axes("encoderblock_0/out/bias", (64,), mesh) == (None,)
    assert variable_axes("encoderblock_0/mlp_dense1/kernel", (64, 256), mesh) == ("data", "model")
    assert variable_axes("encoderblock_0/mlp_dense2/kernel", (256, 64), mesh) == ("model", "data")
    assert variable_axes("backbone/encoderblock_0/mlp_dense2/kernel", (256, 64), mesh) == ("model", "data")
    assert variable_axes("encoderblock_0/layer_scale1", (64,), mesh) == (None,)
    assert variable_axes("patch_encoder/pos_embedding", (1, 17, 64), mesh) == (None, None, None)
    assert variable_axes("patch_encoder/embedding/kernel", (8, 8, 3, 64), mesh) == (None, None, None, "data")
    assert variable_axes("head/kernel", (64, 10), mesh) == ("data", None)
    # An attention-pool head's MLP is not a block's: FSDP, not Megatron
    assert variable_axes("map_head/mlp_dense1/kernel", (64, 256), mesh) == (None, "data")
    assert variable_axes("head/kernel", (63, 9), mesh) == (None, None)  # nothing divides: replicated


def test_heads_and_widths_that_do_not_divide_the_mesh_are_refused_by_name():
    with pytest.raises(ValueError, match=r"num_heads=3 does not split over the mesh's 4-way 'model' axis"):
        check_mesh(ViTConfig(hidden_size=192, num_heads=3, mlp_dim=768), (2, 4))
    with pytest.raises(ValueError, match=r"mlp_dim=100 does not split over the mesh's 8-way 'model' axis"):
        check_mesh(ViTConfig(hidden_size=64, num_heads=8, mlp_dim=100), (1, 8))
    with pytest.raises(ValueError, match=r"hidden_size=100 does not split over the mesh's 8-way 'data' axis"):
        check_mesh(ViTConfig(hidden_size=100, num_heads=4, mlp_dim=128), (8, 1))
    check_mesh(ViTConfig(hidden_size=64, num_heads=4, mlp_dim=128), (2, 4))
    with pytest.raises(ValueError, match=r"mlp_dense1/kernel \(64, 100\): its 100 features"):
        variable_axes("encoderblock_0/mlp_dense1/kernel", (64, 100), (2, 8))
    for bad in ("2", "2x4x1", "0x8", "axb"):
        with pytest.raises(ValueError, match="is not DATAxMODEL"):
            parse_mesh(bad)
    assert parse_mesh("2x4") == parse_mesh((2, 4)) == (2, 4)


def test_model_parallel_training_is_refused_outside_jax_and_without_a_mesh():
    with pytest.raises(ValueError, match="runs under KERAS_BACKEND=jax"):
        check_distribution("model_parallel", "2x4", "tensorflow")
    with pytest.raises(ValueError, match="needs a mesh"):
        check_distribution("model_parallel", None, "jax")
    with pytest.raises(ValueError, match="mesh='2x4' is for distribution='model_parallel'"):
        check_distribution(None, "2x4", "jax")
    with pytest.raises(ValueError, match="Unknown distribution 'model-parallel'"):
        check_distribution("model-parallel", "2x4", "jax")


@needs_jax
@once
def test_each_variable_carries_the_sharding_the_map_assigns(mesh_run):
    assert mesh_run["devices"] == 8
    for key in ("layouts", "rule_layouts"):
        wrong = {path: got for path, (got, want) in mesh_run[key].items() if got != want}
        assert not wrong, f"{key}: sharded otherwise than the map says: {wrong}"
    sharded = [path for path, (got, _) in mesh_run["layouts"].items() if "model" in got]
    assert len(sharded) == 2 * 10  # q, k, v, fc1 kernels and biases (8), out and fc2 kernels (2), in 2 blocks


@needs_jax
@once
def test_a_2x4_mesh_gives_one_devices_outputs_gradients_and_losses(mesh_run):
    assert mesh_run["max_output_diff"] <= 1e-6 * max(1.0, mesh_run["output_scale"])
    assert mesh_run["max_grad_diff"] <= 1e-6
    single, sharded = mesh_run["losses_single"], mesh_run["losses_sharded"]
    assert len(sharded) == 3 and single[0] > single[-1]  # it trained
    assert max(abs(a - b) for a, b in zip(single, sharded)) <= 1e-5


@needs_jax
@once
def test_every_family_shards_and_keeps_its_outputs(mesh_run):
    for name, got in mesh_run["families"].items():
        assert got["diff"] <= 1e-6, name
        assert got["sharded"] >= 2 * 10, name  # at least each block's Megatron-split variables


@needs_jax
@once
def test_parameter_bytes_per_device_fall_by_more_than_the_model_axis(mesh_run):
    got = mesh_run["bytes"]
    assert got["predicted"] == {"total": got["total"], "per_device": got["per_device_max"]}
    assert got["total"] / got["per_device_max"] >= 4  # the model axis: 4 (FSDP on "data" halves the rest)


@needs_jax
@once
def test_the_refusals_name_the_field_and_the_device_count(mesh_run):
    assert "num_heads=3" in mesh_run["refusal"]
    assert "needs 16 devices; this process sees 8" in mesh_run["too_many_devices"]


@pytest.mark.slow  # CI time (48 s; the layout map's shardings in CI: test_each_variable_carries_the_sharding_the_map_assigns)
@needs_jax
@once
def test_keras_vit_train_runs_model_parallel_on_a_2x4_mesh(tmp_path):
    run = tmp_path / "mp"
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit.cli", "train", "digits", "--set", "distribution=model_parallel",
         "--set", "mesh=2x4", "--set", "epochs=1", "--set", "steps_per_epoch=2", "--model-dir", str(run)],
        capture_output=True, text=True, cwd=ROOT, timeout=600, env=dict(os.environ, **JAX_8))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "ModelParallel 2x4 with 2 replica(s)" in result.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["strategy"] == "ModelParallel 2x4" and metrics["num_replicas"] == 2
    assert (run / "model.keras").is_file()


@pytest.mark.parametrize("name", list(GIANT_PRESETS))
def test_the_giant_presets_have_their_papers_parameter_counts(name):
    preset = GIANT_PRESETS[name]
    # One block is built (parameter_bytes' stand-in): the blocks are alike.
    count = parameter_bytes(ViTConfig.from_preset(name), (1, 1))["total"] // 4
    assert count == preset.parameters
    if name == "e/14":  # PaLI's 3.9B: the encoder with its attention-pool head, no class token
        published = parameter_bytes(ViTConfig.from_preset(name, include_top=False, pooling="map", classifier="gap"),
                                    (1, 1))["total"] // 4
        assert f"{published / 1e9:.1f}B" == preset.published
    else:  # Scaling ViT's table: the encoder without a head
        published = parameter_bytes(ViTConfig.from_preset(name, include_top=False), (1, 1))["total"] // 4
        assert f"{published / 1e6:.0f}M" == preset.published
    assert canonical_variant(preset.official_name) == name


def test_vit_g_and_vit_G_are_told_apart_by_case():
    assert canonical_variant("ViT-g_14") == "g/14" and canonical_variant("vit-G/14") == "G/14"
    assert ViTConfig.from_preset("G/14").hidden_size == 1664 and ViTConfig.from_preset("g/14").hidden_size == 1408
