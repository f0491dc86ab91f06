"""Where the time of one ViT-B/16 encoder block goes (batch 8, 197 tokens), by sub-graph.

Each piece of the block runs as its own tf.function (graph mode, no XLA, as Keras runs
`predict` on CPU) on inputs of its real shape, returning one element of its output (so the
fetch costs nothing); pieces are timed in interleaved rounds and
the median is reported, beside the whole block. Run in keras-vit's environment:

    python benchmarks/profile_block.py --precision float32 mixed_bfloat16 [--rounds 7]

Prints a Markdown table (and `--out FILE` writes it).
"""

import argparse
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402


def profile(precision, rounds, batch=8, tokens=197, hidden=768, heads=12, mlp=3072):
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(precision)
    from keras_vit.layers import TransformerBlock

    keras.utils.set_random_seed(0)
    block = TransformerBlock(heads, mlp, name="encoderblock_0")
    block.build((None, tokens, hidden))
    dt = block.compute_dtype
    hd = hidden // heads
    rng = np.random.default_rng(0)

    def rand(*shape, dtype=dt):
        return tf.constant(rng.normal(size=shape).astype("float32"), dtype=dtype)

    n = batch * tokens
    x3 = rand(batch, tokens, hidden)
    x2 = rand(n, hidden)
    h2 = rand(n, mlp)
    qkv5 = rand(batch, tokens, 3, heads, hd)
    q4, k4, v4 = (rand(batch, heads, tokens, hd) for _ in range(3))
    logits = rand(batch, heads, tokens, tokens)
    probs = rand(batch, heads, tokens, tokens)
    ctx = rand(batch, heads, tokens, hd)
    cast = lambda v: tf.cast(v, dt)  # noqa: E731
    c = math.sqrt(2 / math.pi)
    w_mlp = rand(hidden, mlp)

    from keras_vit.layers import matmul_bias

    def dense(x, layer, kernel=None, bias=None):  # the fused path's 2-D matmul + bias
        kernel = layer.kernel if kernel is None else kernel
        return matmul_bias(x, kernel, layer.bias if bias is None else bias, block.compute_dtype)

    def fused_qkv(x):
        return dense(x, None, tf.concat([block.query.kernel * (1 / math.sqrt(hd)), block.key.kernel,
                                                block.value.kernel], 1),
                            tf.concat([block.query.bias, block.key.bias, block.value.bias], 0))

    flops = {}
    pieces = {
        "norm1 (LayerNorm, float32 inside)": (lambda x: block.norm1(x), x3),
        "q/k/v projection: fused, one (B*T, D) x (D, 3D) matmul": (fused_qkv, x2),
        "q/k/v projection: reference, three Dense layers (tensordot + add)":
            (lambda x: [block.query(x), block.key(x), block.value(x)], x3),
        "split heads (reshape + transpose)": (lambda t: [tf.transpose(t[:, :, i], (0, 2, 1, 3)) for i in range(3)],
                                              qkv5),
        "attention logits Q K^T (batched matmul)": (lambda q: tf.matmul(q, k4, transpose_b=True), q4),
        "softmax (float32, with the casts)": (lambda l: cast(tf.nn.softmax(tf.cast(l, "float32"), -1)), logits),
        "attention x V (batched matmul)": (lambda p: tf.matmul(p, v4), probs),
        "merge heads (transpose + reshape)": (lambda t: tf.reshape(tf.transpose(t, (0, 2, 1, 3)), (n, hidden)),
                                              ctx),
        "out projection (2-D matmul + bias)": (lambda x: dense(x, block.out), x2),
        "residual add": (lambda x: x + x3, x3),
        "norm2 (LayerNorm)": (lambda x: block.norm2(x), x3),
        "bare matmul of MLP dense 1's shape, no bias (the machine's ceiling)":
            (lambda x: tf.matmul(x, w_mlp), x2),
        "MLP dense 1 (2-D matmul + bias)": (lambda x: dense(x, block.mlp_dense1), x2),
        "MLP dense 1: reference Dense (tensordot + add)": (lambda x: block.mlp_dense1(x), x3),
        "GELU tanh, x*x*x form (fused path)": (lambda h: 0.5 * h * (1.0 + tf.tanh(c * (h + 0.044715 * (h * h * h)))),
                                               h2),
        "GELU tanh, tf.nn.gelu pow(x, 3) form (reference path)": (lambda h: tf.nn.gelu(h, approximate=True), h2),
        "MLP dense 2 (2-D matmul + bias)": (lambda h: dense(h, block.mlp_dense2), h2),
        "whole block, fused path": (lambda x: block(x), x3),
        "whole block, reference path": (None, x3),
    }
    flops["q/k/v projection: fused, one (B*T, D) x (D, 3D) matmul"] = 2 * n * hidden * 3 * hidden
    flops["q/k/v projection: reference, three Dense layers (tensordot + add)"] = 2 * n * hidden * 3 * hidden
    flops["attention logits Q K^T (batched matmul)"] = 2 * batch * heads * tokens * tokens * hd
    flops["attention x V (batched matmul)"] = 2 * batch * heads * tokens * tokens * hd
    flops["out projection (2-D matmul + bias)"] = 2 * n * hidden * hidden
    for k in ("bare matmul of MLP dense 1's shape, no bias (the machine's ceiling)", "MLP dense 1 (2-D matmul + bias)", "MLP dense 1: reference Dense (tensordot + add)",
              "MLP dense 2 (2-D matmul + bias)"):
        flops[k] = 2 * n * hidden * mlp
    block_flops = 2 * n * hidden * 4 * hidden + 2 * 2 * n * hidden * mlp + 2 * 2 * batch * heads * tokens ** 2 * hd
    flops["whole block, fused path"] = flops["whole block, reference path"] = block_flops

    fns = {}
    for name, (fn, arg) in pieces.items():
        if fn is None:
            def fn(x):
                block.formulation = "reference"
                try:
                    return block(x)
                finally:
                    block.formulation = "fused"
        # Only one element comes back, so fetching the output costs nothing.
        f = tf.function(lambda a, fn=fn: tf.stack([tf.reshape(t, [-1])[-1] for t in tf.nest.flatten(fn(a))]),
                        jit_compile=False)
        f(arg)
        fns[name] = (f, arg)

    def run(f, arg):
        f(arg).numpy()

    times = {k: [] for k in fns}
    for _ in range(rounds):
        for name, (f, arg) in fns.items():
            t = time.perf_counter()
            run(f, arg)
            times[name].append(time.perf_counter() - t)
    return {k: float(np.median(v)) for k, v in times.items()}, flops


def ablation(precision, rounds, batch=8):
    """Whole ViT-B/16 forward passes with one piece taken out: its in-graph cost."""
    import contextlib

    import keras
    import tensorflow as tf

    import keras_vit
    from keras_vit import layers as vit_layers

    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    model = keras_vit.ViTB16(classifier_activation=None)
    keras.mixed_precision.set_global_policy("float32")
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (batch, 224, 224, 3)).astype("float32"))

    @contextlib.contextmanager
    def patched(what):
        saved = []

        def patch(obj, name, value):
            saved.append((obj, name, obj.__dict__.get(name, _MISSING)))
            setattr(obj, name, value)

        for block in model.blocks:
            if what == "reference":
                patch(block.attention_layer(), "formulation", "reference")
            elif what == "norms":
                patch(block.norm1, "call", lambda v: v)
                patch(block.norm2, "call", lambda v: v)
            elif what == "gelu":
                patch(block, "_gelu", lambda v: v)
            elif what == "softmax":
                patch(vit_layers.ops, "softmax", lambda v, axis=-1: v)
            elif what == "attention":
                patch(block.attention_layer(), "_matmul_attention", lambda q, k, v, training: (v, None))
        try:
            yield
        finally:
            for obj, name, old in reversed(saved):
                if old is _MISSING:
                    delattr(obj, name)
                else:
                    setattr(obj, name, old)

    variants = {
        "whole model, fused path (as shipped)": None,
        "whole model, reference path (before)": "reference",
        "without the LayerNorms": "norms",
        "without the GELU": "gelu",
        "without the softmax": "softmax",
        "without the attention core (QK^T, softmax, x V)": "attention",
    }
    fns = {}
    for name, what in variants.items():
        f = tf.function(lambda a: tf.reshape(model(a, training=False), [-1])[-1], jit_compile=False)
        with patched(what) if what else contextlib.nullcontext():
            f(x)  # traces with the patch in place
        fns[name] = f
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            t = time.perf_counter()
            f(x).numpy()
            times[name].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    best = {k: float(np.min(v)) for k, v in times.items()}
    full, full_best = med["whole model, fused path (as shipped)"], best["whole model, fused path (as shipped)"]
    flops = 2 * 17.58e9 * batch
    rows = [f"| ViT-B/16 batch {batch} ({precision}), {rounds} rounds | median ms | vs the fused model | "
            "fastest ms | vs the fused model (fastest) | effective GFLOP/s (fastest) |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, t in med.items():
        b = best[name]
        rows.append(f"| {name} | {t * 1e3:.0f} | {100 * (t - full) / full:+.0f}% | {b * 1e3:.0f} | "
                    f"{100 * (b - full_best) / full_best:+.0f}% | {flops / b / 1e9:.0f} |")
    return "\n".join(rows)


_MISSING = object()


def table(precision, med, flops):
    whole = med["whole block, fused path"]
    rows = [f"| piece ({precision}) | ms | % of fused block | GFLOP/s |", "|---|---:|---:|---:|"]
    for name, t in med.items():
        rate = f"{flops[name] / t / 1e9:.0f}" if name in flops else ""
        rows.append(f"| {name} | {t * 1e3:.1f} | {100 * t / whole:.0f} | {rate} |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", help="write the Markdown tables here too")
    parser.add_argument("--no-ablation", action="store_true", help="skip the whole-model ablation")
    args = parser.parse_args(argv)
    out = [f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}"]
    for precision in args.precision:
        med, flops = profile(precision, args.rounds)
        out.append(table(precision, med, flops))
        if not args.no_ablation:
            out.append(ablation(precision, args.rounds))
    out.append(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    text = "\n\n".join(out)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
