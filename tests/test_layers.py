import keras
import numpy as np
import pytest
from conftest import gradients, randomize, tensorflow_only, tiny_vit
from keras.ops import convert_to_numpy as to_numpy

import keras_vit
from keras_vit.layers import DropPath, PatchEncoder, Patches, TransformerBlock

pytestmark = pytest.mark.backends


def test_patches_row_major_square_and_non_square():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(2, 12, 8, 3)).astype("float32")
    out = to_numpy(Patches((4, 2))(images))
    assert out.shape == (2, 3 * 4, 4 * 2 * 3)
    # patch (row 1, col 2) is the 7th in row-major order, flattened as (ph, pw, C)
    np.testing.assert_array_equal(out[:, 1 * 4 + 2], images[:, 4:8, 4:6, :].reshape(2, -1))
    assert Patches(4)(np.zeros((1, 16, 24, 3), "float32")).shape == (1, 24, 48)


def test_patches_times_kernel_is_the_patch_encoder_projection():
    rng = np.random.default_rng(1)
    images = rng.normal(size=(2, 16, 24, 3)).astype("float32")
    encoder = PatchEncoder(8, patch_size=4, class_token=False)
    encoder.build((None, 16, 24, 3))
    kernel, bias = encoder.projection.get_weights()
    projected = to_numpy(Patches(4)(images)) @ kernel.reshape(-1, 8) + bias
    expected = projected + to_numpy(encoder.position_embedding)
    np.testing.assert_allclose(to_numpy(encoder(images)), expected, atol=1e-5)


def test_patches_refuse_to_crop():
    with pytest.raises(ValueError, match=r"\(30, 32\) is not a multiple of the patch size \(16, 16\)"):
        Patches(16)(np.zeros((1, 30, 32, 3), "float32"))


def test_patch_encoder_grid_class_token_and_position_embeddings():
    encoder = PatchEncoder(64, patch_size=(16, 8))
    out = encoder(np.zeros((3, 64, 48, 3), "float32"))
    assert encoder.grid_size == (4, 6) and encoder.num_patches == 24
    assert out.shape == (3, 25, 64)
    np.testing.assert_array_equal(to_numpy(encoder.cls), 0.0)
    assert encoder.position_embedding.shape == (1, 25, 64)
    assert 0.015 < to_numpy(encoder.position_embedding).std() < 0.025
    gap = PatchEncoder(64, patch_size=16, class_token=False)
    assert gap(np.zeros((1, 32, 32, 3), "float32")).shape == (1, 4, 64)


def _reference_block(x, block, approximate=True):
    """The official Encoder1DBlock written in NumPy from the block's weights."""
    def ln(v, gamma, beta):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-6) * gamma + beta

    def gelu(v):
        if approximate:
            return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3)))
        from scipy.special import erf
        return 0.5 * v * (1 + erf(v / np.sqrt(2)))

    w = {v.path.split("/", 1)[1]: to_numpy(v).astype("float64") for v in block.weights}
    b, t, d = x.shape
    h = block.num_heads
    y = ln(x, w["norm1/gamma"], w["norm1/beta"])
    q, k, v = (
        (y @ w[f"{n}/kernel"] + w[f"{n}/bias"]).reshape(b, t, h, d // h).transpose(0, 2, 1, 3)
        for n in ("query", "key", "value")
    )
    logits = (q / np.sqrt(d // h)) @ k.transpose(0, 1, 3, 2)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    att = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ w["out/kernel"] + w["out/bias"]
    x = x + att
    y = ln(x, w["norm2/gamma"], w["norm2/beta"])
    y = gelu(y @ w["mlp_dense1/kernel"] + w["mlp_dense1/bias"]) @ w["mlp_dense2/kernel"] + w["mlp_dense2/bias"]
    return x + y, probs


@pytest.mark.parametrize("approximate", [True, False])
def test_transformer_block_matches_a_numpy_reference(approximate):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 9, 32)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=48, approximate_gelu=approximate)
    block.build(x.shape)
    for v in block.weights:
        v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
    y, probs = block(x, return_attention_scores=True)
    ref_y, ref_probs = _reference_block(x.astype("float64"), block, approximate)
    np.testing.assert_allclose(to_numpy(y), ref_y, atol=2e-5)
    np.testing.assert_allclose(to_numpy(probs), ref_probs, atol=1e-6)
    assert probs.shape == (2, 4, 9, 9)
    np.testing.assert_allclose(to_numpy(probs).sum(-1), 1.0, atol=1e-6)


def test_block_refuses_hidden_size_not_divisible_by_heads():
    with pytest.raises(ValueError, match="hidden_size 30 is not divisible by num_heads 4"):
        TransformerBlock(num_heads=4, mlp_dim=8)(np.zeros((1, 3, 30), "float32"))


def test_drop_path_is_active_only_in_training():
    x = np.ones((64, 4, 8), "float32")
    layer = DropPath(0.5, seed=1)
    np.testing.assert_array_equal(to_numpy(layer(x, training=False)), x)
    out = to_numpy(layer(x, training=True))
    per_sample = out.reshape(64, -1)
    # whole samples are dropped or scaled by 1 / keep
    assert set(np.unique(per_sample)) <= {0.0, 2.0}
    assert 10 < (per_sample[:, 0] == 0).sum() < 54


def test_block_with_drop_path_is_deterministic_at_inference_only():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 5, 32)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=64, drop_path_rate=0.5)
    a, b = to_numpy(block(x, training=False)), to_numpy(block(x, training=False))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(to_numpy(block(x, training=True)), a)


@pytest.mark.parametrize(
    "layer",
    [
        Patches((4, 2)),
        PatchEncoder(16, patch_size=(2, 4), class_token=False),
        TransformerBlock(2, 32, dropout_rate=0.1, attention_dropout_rate=0.2, drop_path_rate=0.3,
                         approximate_gelu=False),
        DropPath(0.25, seed=3),
        keras_vit.StdConv2D(8, 3, strides=2),
        keras_vit.BottleneckUnit(32, strides=2),
    ],
)
def test_layer_config_round_trip(layer):
    config = keras.saving.serialize_keras_object(layer)
    assert config["module"] is None or "keras_vit" in config["registered_name"]
    clone = keras.saving.deserialize_keras_object(config)
    assert clone.get_config() == layer.get_config()


def _random_block(seed=4, **kwargs):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 11, 48)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=96, **kwargs)
    block.build(x.shape)
    for v in block.weights:
        v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))
    return block, x


@pytest.mark.parametrize("approximate", [True, False])
def test_fused_and_reference_formulations_agree(approximate):
    """The fused forward pass (one q/k/v matmul, 2-D matmuls) and the Dense-layer one agree."""
    block, x = _random_block(approximate_gelu=approximate)
    fused, fused_probs = block(x, return_attention_scores=True)
    block.formulation = "reference"
    ref, ref_probs = block(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(fused), to_numpy(ref), atol=2e-5)
    np.testing.assert_allclose(to_numpy(fused_probs), to_numpy(ref_probs), atol=1e-6)
    assert keras.backend.standardize_dtype(fused_probs.dtype) == "float32" and fused_probs.shape == (2, 4, 11, 11)


@pytest.mark.parametrize("reference", [False, True])
def test_attention_implementations_agree(reference):
    """keras.ops.dot_product_attention and the explicit matmul path give the same block output."""
    block, x = _random_block()
    block.formulation = "reference" if reference else "fused"
    expected = to_numpy(block(x))
    for impl in ("dot_product_attention", "auto"):
        block.attention_implementation = impl
        np.testing.assert_allclose(to_numpy(block(x)), expected, atol=2e-5)
    # the attention probabilities always come from the explicit path
    y, probs = block(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(y), expected, atol=2e-5)
    assert probs.shape == (2, 4, 11, 11)


def test_attention_implementation_is_validated_and_saved():
    with pytest.raises(ValueError, match="attention_implementation must be one of"):
        TransformerBlock(2, 8, attention_implementation="flash")
    block = TransformerBlock(2, 8, attention_implementation="dot_product_attention")
    assert TransformerBlock.from_config(block.get_config()).attention_implementation == "dot_product_attention"


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
def test_fused_path_under_mixed_bfloat16_keeps_float32_softmax_and_gradients():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    block, x = _random_block()
    y, probs = block(x, return_attention_scores=True)
    assert [keras.backend.standardize_dtype(t.dtype) for t in (y, probs)] == ["bfloat16", "float32"]
    np.testing.assert_allclose(to_numpy(probs).sum(-1), 1.0, atol=1e-5)
    block.formulation = "reference"
    ref = block(x)
    np.testing.assert_allclose(to_numpy(y).astype("float32"), to_numpy(ref).astype("float32"), atol=0.15, rtol=0.05)
    block.formulation = "fused"
    grads = gradients(lambda: keras.ops.sum(keras.ops.cast(block(x), "float32") ** 2), block.trainable_variables)
    assert all(g is not None and np.isfinite(g).all() for g in grads)
    assert {v.dtype for v in block.weights} == {"float32"}


def test_fused_and_reference_gradients_agree():
    block, x = _random_block()
    grads = []
    for reference in (False, True):
        block.formulation = "reference" if reference else "fused"
        grads.append(gradients(lambda: keras.ops.sum(block(x, training=True) ** 2), block.trainable_variables))
    scale = max(np.abs(g).max() for g in grads[1])
    for fused, ref, v in zip(*grads, block.trainable_variables):
        # the key bias's true gradient is 0 (softmax ignores a constant per row): compare on the global scale
        np.testing.assert_allclose(fused, ref, rtol=1e-4, atol=1e-5 * scale, err_msg=v.path)


def test_gelu_tanh_value_and_written_out_gradient():
    from keras_vit.layers import gelu_tanh

    ops = keras.ops
    values = np.linspace(-6, 6, 241, dtype="float32")
    np.testing.assert_allclose(to_numpy(gelu_tanh(values)), to_numpy(ops.gelu(values, approximate=True)), atol=1e-6)
    # the written-out gradient, through the backend's own custom-gradient machinery, against its autodiff
    # (read as a tensor first, as in a layer: tf.custom_gradient refuses functions that read variables)
    x = keras.Variable(values)
    (mine,) = gradients(lambda: ops.sum(gelu_tanh(ops.add(x, 0.0))), [x])
    (autodiff,) = gradients(lambda: ops.sum(ops.gelu(x, approximate=True)), [x])
    np.testing.assert_allclose(mine, autodiff, atol=1e-5)


def test_attention_is_its_own_layer_with_the_blocks_variables():
    from keras_vit.layers import Attention

    block, x = _random_block()
    attention = block.attention_layer()
    assert isinstance(attention, Attention) and attention.query is block.query and attention.out is block.out
    assert sorted(v.path for v in block.weights) == sorted(  # no variable of its own, none twice
        f"transformer_block/{n}/{p}" for n in ("norm1", "norm2", "query", "key", "value", "out", "mlp_dense1",
                                                "mlp_dense2") for p in (("gamma", "beta") if "norm" in n
                                                                        else ("kernel", "bias")))
    # standalone, with its own projections, it computes what it computes in the block
    alone = Attention(num_heads=4)
    alone.build(x.shape)
    for mine, theirs in zip(alone.weights, attention.weights):
        mine.assign(theirs)
    normed = block.norm1(x)
    for formulation in ("fused", "reference"):
        alone.formulation = formulation
        y, probs = alone(normed, return_attention_scores=True)
        ref, ref_probs = attention(normed, return_attention_scores=True)
        np.testing.assert_allclose(to_numpy(y), to_numpy(ref), atol=2e-5)
        np.testing.assert_allclose(to_numpy(probs), to_numpy(ref_probs), atol=1e-6)
    assert Attention.from_config(alone.get_config()).formulation == "reference"
    with pytest.raises(ValueError, match="formulation must be one of"):
        Attention(2, formulation="fast")


@tensorflow_only
def test_tensorflow_fast_paths_equal_the_portable_ones(monkeypatch):
    """Under TensorFlow the bias add is tf.nn.bias_add (grappler fuses it into the matmul); the keras.ops
    path that jax and torch take gives the same logits."""
    import keras_vit.layers

    model = randomize(tiny_vit(drop_path_rate=0.1))
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    fast = to_numpy(model(x))
    monkeypatch.setattr(keras_vit.layers, "_TF", None)
    portable = to_numpy(model(x))
    np.testing.assert_allclose(fast, portable, atol=1e-6)
    assert np.abs(fast).max() > 0.1  # a random model, not an all-zero head


def test_layers_refuse_a_misspelled_keyword_naming_the_nearest():
    from keras_vit.stem import BottleneckUnit, StdConv2D

    with pytest.raises(TypeError, match=r"TransformerBlock\(\) .* `atention_dropout_rate` \(did you mean "
                                        r"`attention_dropout_rate`\?\)"):
        TransformerBlock(4, 64, atention_dropout_rate=0.1)
    with pytest.raises(TypeError, match=r"Patches\(\) .* `nmae` \(did you mean `name`\?\)"):
        Patches(4, nmae="patches")
    with pytest.raises(TypeError, match=r"StdConv2D\(\) .* `stride` \(did you mean `strides`\?\)"):
        StdConv2D(8, 3, stride=2)
    with pytest.raises(TypeError, match=r"BottleneckUnit\(\) .* `strides_` \(did you mean `strides`\?\)"):
        BottleneckUnit(8, strides_=2)
    # Keras' own layer keywords pass, as a saved config gives them
    assert Patches(4, name="p", trainable=False, dtype="float32").name == "p"
