"""Attention with memory linear in the tokens (keras_vit.attention) and rematerialisation (remat=True).

The chunked form must equal the dense one, values and gradients, at lengths no block divides; the automatic
choice must switch at its threshold; remat must not change a gradient.
"""

import keras
import numpy as np
import pytest
from conftest import BACKEND, gradients, randomize, tensorflow_only, tiny_vit

import keras_vit
from keras_vit import attention, layers
from keras_vit.attention import chunked_attention, tile_plan, use_chunked

pytestmark = pytest.mark.backends


def reference(q, k, v, do):
    """softmax(q k^T) v and its gradients wrt q, k, v for the loss sum(y * do), in float64 NumPy."""
    q, k, v, do = (x.astype("float64") for x in (q, k, v, do))
    s = q @ np.swapaxes(k, -1, -2)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = p @ v
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return y, (ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ do)


def random_qkv(tokens, heads=3, head_dim=16, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((2, heads, tokens, head_dim)).astype("float32") for _ in range(4))
    return q * head_dim ** -0.5, k, v, do


def dense(q, k, v):
    return keras.ops.matmul(keras.ops.softmax(keras.ops.matmul(q, keras.ops.swapaxes(k, -1, -2)), axis=-1), v)


def values_and_gradients(fn, q, k, v, do):
    variables = [keras.Variable(x) for x in (q, k, v)]
    y = keras.ops.convert_to_numpy(fn(*[keras.ops.convert_to_tensor(x) for x in variables]))
    do = keras.ops.convert_to_tensor(do)
    grads = gradients(lambda: keras.ops.sum(fn(*[keras.ops.convert_to_tensor(x) for x in variables]) * do), variables)
    return y, grads


@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")  # 1 token: softmax of one logit
@pytest.mark.parametrize("tokens, query_block, key_block", [
    (1, 4, None), (7, 3, None), (301, 64, None), (301, 512, None),  # one key block: a softmax per query block
    (7, 2, 3), (301, 64, 128), (301, 37, 53), (300, 100, 100),  # key blocks: the online softmax
])
def test_chunked_equals_dense_values_and_gradients(tokens, query_block, key_block):
    q, k, v, do = random_qkv(tokens)
    want, want_grads = reference(q, k, v, do)
    dense_y, dense_grads = values_and_gradients(dense, q, k, v, do)
    y, grads = values_and_gradients(lambda a, b, c: chunked_attention(a, b, c, query_block, key_block), q, k, v, do)
    assert y.shape == want.shape and y.dtype == np.float32
    assert np.abs(y - want).max() < 1e-5
    assert np.abs(y - dense_y).max() < 1e-5
    for name, g, d, w in zip("qkv", grads, dense_grads, want_grads):
        scale = max(np.abs(w).max(), 1.0)  # at 1 token dq and dk are 0: an absolute bound there
        assert np.abs(g - w).max() < 1e-5 * scale, (name, np.abs(g - w).max(), scale)
        assert np.abs(g - d).max() < 1e-5 * scale, (name, np.abs(g - d).max(), scale)


def test_the_online_softmax_is_exercised_by_its_own_blocks():
    """Switching the key blocks on changes the computation (a test that can fail): float32 rounding differs
    from the one-block path's, while both stay within 1e-5 of the float64 reference."""
    q, k, v, do = random_qkv(301)
    one = keras.ops.convert_to_numpy(chunked_attention(q, k, v, 64, None))
    blocked = keras.ops.convert_to_numpy(chunked_attention(q, k, v, 64, 32))
    assert 0 < np.abs(one - blocked).max() < 1e-5


def test_tile_plan_and_threshold():
    # 6 heads: 6 * 1672^2 = 16,773,504 <= 2^24 < 6 * 1673^2
    assert not use_chunked(1672, 6) and use_chunked(1673, 6)
    assert not use_chunked(1182, 12) and use_chunked(1183, 12)
    assert tile_plan(12322, 6) == (224, None)  # ViT-S/14 at 1554 px: 56 blocks of 224 queries against all keys
    assert tile_plan(5477, 6) == (480, None)
    query_block, key_block = tile_plan(200_000, 6)  # beyond one tile per query block: key blocks
    assert 6 * query_block * key_block <= attention.TILE_ELEMENTS and key_block < 200_000
    with pytest.raises(ValueError, match="query_block must be a positive integer or None, got 0"):
        chunked_attention(*random_qkv(5)[:3], query_block=0)


def test_automatic_choice_switches_at_the_threshold(monkeypatch):
    calls = []

    def spy(q, k, v, *args):
        calls.append(int(q.shape[2]))
        return chunked_attention(q, k, v, *args)

    monkeypatch.setattr(layers, "chunked_attention", spy)
    monkeypatch.setattr(attention, "TILE_ELEMENTS", 4 * 40 * 40)  # 4 heads: dense up to 40 tokens
    layer = layers.Attention(num_heads=4)
    x = np.random.default_rng(0).standard_normal((1, 41, 32)).astype("float32")
    layer(x[:, :40])
    matmul = layers.Attention(num_heads=4, attention_implementation="matmul")
    matmul(x[:, :40])
    matmul.set_weights(layer.get_weights())
    if BACKEND == "torch":  # PyTorch's fused kernel (SDPA) is linear in memory itself: "auto" takes it throughout
        assert layer.implementation_for(40) == layer.implementation_for(41) == "dot_product_attention"
        return
    below = "matmul" if BACKEND == "tensorflow" else "dot_product_attention"
    assert (layer.implementation_for(40), layer.implementation_for(41)) == (below, "chunked")
    assert layer.implementation_for(41, return_attention_scores=True) == "matmul"
    y40 = keras.ops.convert_to_numpy(layer(x[:, :40]))
    assert calls == []
    y41 = keras.ops.convert_to_numpy(layer(x))
    assert calls == [41]
    assert np.abs(y40 - keras.ops.convert_to_numpy(matmul(x[:, :40]))).max() < 1e-5
    assert np.abs(y41 - keras.ops.convert_to_numpy(matmul(x))).max() < 1e-5
    _, probs = layer(x, return_attention_scores=True)  # probabilities need the dense form
    assert tuple(probs.shape) == (1, 4, 41, 41) and calls == [41]


def test_chunked_model_matches_matmul_model_values_and_gradients():
    """A whole ViT (LayerScale, 13 tokens) with chunked attention against the dense form: outputs and every
    weight's gradient."""
    models = [randomize(tiny_vit(image_size=24, layer_scale=0.5, attention_implementation=impl), seed=1)
              for impl in ("matmul", "chunked")]
    models[1].set_weights(models[0].get_weights())
    x = np.random.default_rng(2).standard_normal((2, 24, 24, 3)).astype("float32")
    outs = [keras.ops.convert_to_numpy(m(x)) for m in models]
    assert np.abs(outs[0] - outs[1]).max() < 1e-5 * max(1.0, np.abs(outs[0]).max())
    grads = [gradients(lambda m=m: keras.ops.sum(m(x, training=True) ** 2), m.trainable_variables) for m in models]
    for g0, g1 in zip(*grads):
        assert np.abs(g0 - g1).max() <= 1e-5 * max(1.0, np.abs(g0).max())


@pytest.mark.backends_slow  # CI runs it under TensorFlow; -m slow under jax and torch too
@pytest.mark.parametrize("overrides", [{}, {"drop_path_rate": 0.0, "layer_scale": 0.1}])
def test_remat_gives_the_same_gradients(overrides):
    plain = randomize(tiny_vit(**overrides), seed=3)
    remat = tiny_vit(**overrides, remat=True)
    remat.set_weights(plain.get_weights())
    x = np.random.default_rng(4).standard_normal((2, 32, 32, 3)).astype("float32")
    grads = [gradients(lambda m=m: keras.ops.sum(m(x, training=True) ** 2), m.trainable_variables)
             for m in (plain, remat)]
    assert len(grads[0]) == len(grads[1]) > 10
    for g0, g1 in zip(*grads):
        assert np.abs(g0 - g1).max() <= 1e-5 * max(1.0, np.abs(g0).max())
    assert np.allclose(keras.ops.convert_to_numpy(plain(x)), keras.ops.convert_to_numpy(remat(x)), atol=1e-6)


def test_remat_with_dropout_trains_and_attention_dropout_is_refused():
    model = randomize(tiny_vit(dropout_rate=0.1, drop_path_rate=0.1, remat=True), seed=5)
    x = np.random.default_rng(6).standard_normal((2, 32, 32, 3)).astype("float32")
    grads = gradients(lambda: keras.ops.sum(model(x, training=True) ** 2), model.trainable_variables)
    assert all(np.isfinite(g).all() for g in grads) and any(np.abs(g).max() > 0 for g in grads)
    with pytest.raises(ValueError, match="remat=True with attention_dropout_rate=0.1"):
        tiny_vit(attention_dropout_rate=0.1, remat=True)
    with pytest.raises(ValueError, match="remat must be True or False, got .yes."):
        tiny_vit(remat="yes")


def test_remat_and_chunked_round_trip_and_are_recipe_keys():
    from keras_vit.training.config import apply_overrides, resolve_config

    model = tiny_vit(remat=True, attention_implementation="chunked")
    config = model.get_config()
    assert config["remat"] is True and config["attention_implementation"] == "chunked"
    again = keras_vit.VisionTransformer.from_config(config)
    assert all(block.remat for block in again.layers if isinstance(block, layers.TransformerBlock))
    resolved = apply_overrides(resolve_config({}), ["model.remat=True", "model.attention_implementation=chunked"])
    assert resolved["model"]["remat"] is True and resolved["model"]["attention_implementation"] == "chunked"


def test_exports_trace_the_dense_form_and_restore_the_model():
    from keras_vit.serving import dense_attention

    model = tiny_vit(attention_implementation="chunked")
    blocks = [layer for layer in model.layers if isinstance(layer, layers.TransformerBlock)]
    with dense_attention(model):
        assert {block.attention_implementation for block in blocks} == {"matmul"}
    assert {block.attention_implementation for block in blocks} == {"chunked"}


@tensorflow_only
def test_any_size_graph_with_chunked_attention_matches_matmul():
    """A TensorFlow graph of unknown token count: "chunked" runs there (5 and 17 tokens), equal to "matmul"."""
    import tensorflow as tf

    chunked = randomize(tiny_vit(dynamic_image_size=True, attention_implementation="chunked"), seed=7)
    matmul = tiny_vit(dynamic_image_size=True, attention_implementation="matmul")
    matmul.set_weights(chunked.get_weights())
    assert tiny_vit(dynamic_image_size=True).get_layer("encoderblock_0").attention_layer().implementation_for(
        None) == "matmul"
    run = tf.function(lambda x: chunked(x), input_signature=[tf.TensorSpec((None, None, None, 3))])
    for size in (16, 32):  # 4 + 1 and 16 + 1 tokens
        x = np.random.default_rng(size).standard_normal((2, size, size, 3)).astype("float32")
        assert np.abs(run(x).numpy() - matmul(x).numpy()).max() < 1e-5
