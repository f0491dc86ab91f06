"""Attention whose memory is linear in the tokens: blocks of queries against blocks of keys.

The dense form holds softmax(Q K^T) as (B, heads, T, T) float32: 3.6 GB per layer for a ViT-S/14 at 1554 px
(12,322 tokens), where PyTorch's `scaled_dot_product_attention` never holds it. `chunked_attention` computes
the same values one tile of (query block x key block) at a time, with the flash-attention recurrence
(Rabe and Staats, 2021; Dao et al., 2022) over the key blocks: a running maximum `m`, normaliser `l` and
unnormalised output per query, rescaled as each key block arrives. Its gradient is the flash-attention
backward: each tile is recomputed from the saved log-sum-exp rather than stored, so training too holds
O(T x block) per layer, not O(T^2).

A tile is sized to hold `TILE_ELEMENTS` float32 logits per image. While a query block of at least 32 rows
against all T keys fits, the key block is the whole sequence and the recurrence has one step: a plain,
fused softmax per query block, which on TensorFlow's CPU kernels ran at 1.02-1.07x the dense form's time,
where the many-step recurrence took about 1.3x (6 heads, 1,370 to 5,476 tokens, 2 CPU cores). Beyond that
(about 87,000 tokens at 6 heads) the key blocks take over.

All in `keras.ops`, loops included, so it runs on TensorFlow, JAX and PyTorch; on TensorFlow the loops run
one block at a time (`tf.map_fn` and `keras.ops.scan` there would keep ten in flight, or cannot stack
outputs unlike their carry).

Example:
>>> q = k = v = keras.random.normal((1, 2, 300, 16), seed=0)
>>> tuple(chunked_attention(q * 0.25, k, v, query_block=64, key_block=128).shape)
(1, 2, 300, 16)
"""

from __future__ import annotations

from typing import Any, Callable

import keras
from keras import ops

from keras_vit._common import Tensor

if keras.backend.backend() == "tensorflow":
    import tensorflow as _TF
else:
    _TF = None

# float32 logits of one tile, per image: 2^24 (64 MB). Above it (heads x T^2 > TILE_ELEMENTS) the automatic
# choice takes the chunked form; below it the dense form is one tile anyway, and a little faster.
TILE_ELEMENTS = 2 ** 24
# Query rows per block: fewer than 32 starve the matmuls; more than 512 gain nothing (measured, 2 CPU cores).
MIN_QUERY_BLOCK, MAX_QUERY_BLOCK = 32, 512
# Query rows per block where tile_plan does not choose them (key blocks, a graph of unknown length).
QUERY_BLOCK = 128


def static_length(dim: Any) -> int | None:
    """A shape's dimension as an int, or None where the graph leaves it open (TensorFlow's None, JAX's
    symbolic dimension under shape inference, which refuses int())."""
    if dim is None:
        return None
    try:
        return int(dim)
    except Exception:  # jax.export's InconclusiveDimensionOperation and kin
        return None


def use_chunked(tokens: int, heads: int, tile_elements: int | None = None) -> bool:
    """Whether the automatic choice computes attention over `tokens` tokens chunked: when the dense logits of
    one image (heads x tokens^2 float32) exceed one tile.

    Example:
    >>> use_chunked(197, 12), use_chunked(12322, 6)
    (False, True)
    """
    return heads * tokens * tokens > (tile_elements or TILE_ELEMENTS)


def tile_plan(tokens: int, heads: int, tile_elements: int | None = None) -> tuple[int, int | None]:
    """(query_block, key_block) for `tokens` tokens; key_block None: all keys in one block.

    Example:
    >>> tile_plan(12322, 6), tile_plan(200_000, 6)
    ((224, None), (128, 21760))
    """
    tile_elements = tile_elements or TILE_ELEMENTS
    rows = tile_elements // (heads * tokens)
    if rows >= MIN_QUERY_BLOCK:
        return min(MAX_QUERY_BLOCK, rows // MIN_QUERY_BLOCK * MIN_QUERY_BLOCK), None
    return QUERY_BLOCK, max(QUERY_BLOCK, tile_elements // (heads * QUERY_BLOCK) // 128 * 128)


def _scan(f: Callable, carry: Any, n: Any, dtypes: tuple[str, ...]) -> tuple[Any, list]:
    """f(i, carry) -> (carry, ys) for i in range(n), one iteration at a time; the ys stacked."""
    if _TF is None:
        carry, ys = ops.scan(lambda c, i: f(i, c), carry, ops.arange(n))
        return carry, list(ys)
    arrays = [_TF.TensorArray(dtype, size=n) for dtype in dtypes]

    def body(i, carry, arrays):
        carry, ys = f(i, carry)
        return i + 1, carry, [a.write(i, y) for a, y in zip(arrays, ys)]

    _, carry, arrays = _TF.while_loop(lambda i, *_: i < n, body, (_TF.constant(0), carry, arrays),
                                      parallel_iterations=1)
    return carry, [a.stack() for a in arrays]


def _blocks(x, n, size):
    """(B, H, T, hd) -> (n, B, H, size, hd), zero-padded to n * size rows: the leading axis is what loops index."""
    shape = ops.shape(x)
    x = ops.pad(x, ((0, 0), (0, 0), (0, n * size - shape[2]), (0, 0)))
    return ops.transpose(ops.reshape(x, (shape[0], shape[1], n, size, shape[3])), (2, 0, 1, 3, 4))


def _unblocks(x, length):
    """(n, B, H, size, ...) -> (B, H, length, ...), dropping the padding."""
    rank = len(x.shape)
    x = ops.transpose(x, (1, 2, 0, 3) + tuple(range(4, rank)))
    shape = ops.shape(x)
    x = ops.reshape(x, (shape[0], shape[1], shape[2] * shape[3]) + tuple(shape[4:]))
    return x[:, :, :length]


def _logits(q, k, bias=None):
    s = ops.cast(ops.matmul(q, ops.swapaxes(k, -1, -2)), "float32")
    return s if bias is None else s + bias


def _key_bias(j, size, length):
    """0 for the real keys of key block j, -inf for the padding past `length`: (size,) float32."""
    return ops.where(j * size + ops.arange(size) < length, 0.0, float("-inf"))


def _one_key_block(q, k, v, query_block):
    """Query blocks against all keys: an exact softmax per block, no recurrence."""
    length, dtype = ops.shape(q)[2], v.dtype
    n = (length + query_block - 1) // query_block
    qb = _blocks(q, n, query_block)

    def forward(i, carry):
        p = ops.softmax(_logits(ops.take(qb, i, axis=0), k), axis=-1)
        return carry, (ops.matmul(ops.cast(p, dtype), v),)

    _, (ob,) = _scan(forward, (), n, (dtype,))
    y = _unblocks(ob, length)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        dob = _blocks(ops.cast(upstream, dtype), n, query_block)

        def backward(i, carry):
            dk, dv = carry
            qi, doi, oi = ops.take(qb, i, axis=0), ops.take(dob, i, axis=0), ops.take(ob, i, axis=0)
            p = ops.softmax(_logits(qi, k), axis=-1)
            delta = ops.sum(ops.cast(doi, "float32") * ops.cast(oi, "float32"), axis=-1, keepdims=True)
            ds = ops.cast(p * (ops.cast(ops.matmul(doi, ops.swapaxes(v, -1, -2)), "float32") - delta), dtype)
            dv = dv + ops.cast(ops.matmul(ops.swapaxes(ops.cast(p, dtype), -1, -2), doi), "float32")
            dk = dk + ops.cast(ops.matmul(ops.swapaxes(ds, -1, -2), qi), "float32")
            return (dk, dv), (ops.matmul(ds, k),)

        zeros = ops.zeros(ops.shape(k), "float32")
        (dk, dv), (dqb,) = _scan(backward, (zeros, zeros), n, (dtype,))
        return _unblocks(dqb, length), ops.cast(dk, dtype), ops.cast(dv, dtype)

    return y, grad


def _key_blocks(q, k, v, query_block, key_block):
    """Query blocks against key blocks with the online softmax; backward in two passes (dk, dv, then dq)."""
    length, dtype = ops.shape(q)[2], v.dtype
    nq = (length + query_block - 1) // query_block
    nk = (length + key_block - 1) // key_block
    qb, kb, vb = _blocks(q, nq, query_block), _blocks(k, nk, key_block), _blocks(v, nk, key_block)

    def tile(i, j):
        return _logits(ops.take(qb, i, axis=0), ops.take(kb, j, axis=0), _key_bias(j, key_block, length))

    def forward(i, carry):
        shape = ops.shape(ops.take(qb, i, axis=0))

        def step(j, state):
            m, norm, acc = state
            s = tile(i, j)
            m_new = ops.maximum(m, ops.max(s, axis=-1))
            p = ops.exp(s - m_new[..., None])
            correction = ops.exp(m - m_new)
            pv = ops.cast(ops.matmul(ops.cast(p, dtype), ops.take(vb, j, axis=0)), "float32")
            return m_new, norm * correction + ops.sum(p, axis=-1), acc * correction[..., None] + pv

        init = (ops.full(shape[:3], float("-inf"), "float32"), ops.zeros(shape[:3], "float32"),
                ops.zeros(shape, "float32"))
        m, norm, acc = ops.fori_loop(0, nk, step, init)
        return carry, (ops.cast(acc / norm[..., None], dtype), m + ops.log(norm))

    _, (ob, lse) = _scan(forward, (), nq, (dtype, "float32"))
    y = _unblocks(ob, length)

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        dob = _blocks(ops.cast(upstream, dtype), nq, query_block)
        delta = ops.sum(ops.cast(dob, "float32") * ops.cast(ob, "float32"), axis=-1)

        def probs_and_ds(i, j):
            p = ops.exp(tile(i, j) - ops.take(lse, i, axis=0)[..., None])
            dp = ops.cast(ops.matmul(ops.take(dob, i, axis=0), ops.swapaxes(ops.take(vb, j, axis=0), -1, -2)),
                          "float32")
            return ops.cast(p, dtype), ops.cast(p * (dp - ops.take(delta, i, axis=0)[..., None]), dtype)

        def key_pass(j, carry):
            def step(i, state):
                dk, dv = state
                p, ds = probs_and_ds(i, j)
                dv = dv + ops.cast(ops.matmul(ops.swapaxes(p, -1, -2), ops.take(dob, i, axis=0)), "float32")
                return dk + ops.cast(ops.matmul(ops.swapaxes(ds, -1, -2), ops.take(qb, i, axis=0)), "float32"), dv

            zeros = ops.zeros(ops.shape(ops.take(kb, j, axis=0)), "float32")
            dk, dv = ops.fori_loop(0, nq, step, (zeros, zeros))
            return carry, (ops.cast(dk, dtype), ops.cast(dv, dtype))

        def query_pass(i, carry):
            def step(j, dq):
                return dq + ops.cast(ops.matmul(probs_and_ds(i, j)[1], ops.take(kb, j, axis=0)), "float32")

            dq = ops.fori_loop(0, nk, step, ops.zeros(ops.shape(ops.take(qb, i, axis=0)), "float32"))
            return carry, (ops.cast(dq, dtype),)

        _, (dkb, dvb) = _scan(key_pass, (), nk, (dtype, dtype))
        _, (dqb,) = _scan(query_pass, (), nq, (dtype,))
        return _unblocks(dqb, length), _unblocks(dkb, length), _unblocks(dvb, length)

    return y, grad


def chunked_attention(q: Tensor, k: Tensor, v: Tensor, query_block: int | None = None,
                      key_block: int | None = None) -> Tensor:
    """softmax(q k^T) v, one tile at a time: memory O(T x block) per head instead of O(T^2), values and
    gradients those of the dense form (float32 within about 1e-6).

    Args:
        q: queries (B, heads, T, head_dim), already scaled by 1/sqrt(head_dim).
        k, v: keys and values, as `q`.
        query_block: rows per query block; None: `tile_plan`'s (T need not be a multiple: the last block
            is padded).
        key_block: keys per block (the padding past T masked); None with `query_block` given: all keys in
            one block. Both None: `tile_plan(T, heads)`.

    Returns:
        (B, heads, T, head_dim) in `v`'s dtype; the logits and softmax in float32, as the dense form.
    """
    if _TF is not None:  # a variable read here, not inside the custom gradient (which would have to differentiate it)
        q, k, v = (_TF.convert_to_tensor(x) for x in (q, k, v))
    heads, tokens = q.shape[1], static_length(q.shape[2])
    for name, value in (("query_block", query_block), ("key_block", key_block)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}.")
    if query_block is None and key_block is None:
        if tokens is None:  # a graph of any size: 128 queries against all keys (no graph-time branch,
            # which TensorFlow's gradient of a cond around a custom gradient does not take)
            query_block, key_block = QUERY_BLOCK, None
        else:
            query_block, key_block = tile_plan(tokens, int(heads))
    elif query_block is None:
        query_block = QUERY_BLOCK

    @ops.custom_gradient
    def attend(q, k, v):
        if key_block is None:
            return _one_key_block(q, k, v, query_block)
        return _key_blocks(q, k, v, query_block, key_block)

    return attend(q, k, v)
