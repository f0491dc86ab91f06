"""Memory and time at high resolution: keras-vit's attention (chunked above a token count) against timm.

    python benchmarks/high_resolution.py                      # all sizes, inference and training (~30 min)
    python benchmarks/high_resolution.py --sizes 518 1554 --parts inference

A DINOv2 ViT-S/14 (vit_small_patch14_dinov2: width 384, 12 blocks, 6 heads, LayerScale), random weights,
batch 1, float32, on this machine's CPUs. Every measurement is a fresh process: it builds the model, reads
its RSS (VmRSS), runs the step twice and reports the second's time and the process's peak RSS
(ru_maxrss); "activations" is peak minus the RSS after the build, what the step itself needed.

Implementations: keras-vit as shipped (attention_implementation "auto"), keras-vit with the dense form forced
("matmul", what "auto" was before the chunked attention), timm (PyTorch's scaled_dot_product_attention,
in its own virtual environment: see benchmarks/run.py, --venvs), and keras-hub's ViTBackbone where keras-hub
imports in this Python. Parts:
  inference  a forward pass at each size (default 224 518 1036 1554 2072)
  training   forward + backward (gradients of a 10-class cross-entropy) at 518 px, with and without
             rematerialisation (keras-vit remat=True, timm set_grad_checkpointing), and the largest
             difference between keras-vit's gradients with and without remat (one extra process)

KERAS_VIT_TILE_ELEMENTS=N sets keras_vit.attention.TILE_ELEMENTS in the keras-vit processes (other tile sizes).

Writes benchmarks/high_resolution.{json,md} and docs/high_resolution.png (tokens on the x axis, memory and
time on log scales). Nothing here is a pass/fail test.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PATCH, WIDTH, DEPTH, HEADS, MLP = 14, 384, 12, 6, 1536
CLASSES = 10


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def keras_vit_step(impl, size, task, remat):
    import numpy as np
    import tensorflow as tf

    import keras_vit
    import keras_vit.attention

    if os.environ.get("KERAS_VIT_TILE_ELEMENTS"):  # trying other tile sizes
        keras_vit.attention.TILE_ELEMENTS = int(os.environ["KERAS_VIT_TILE_ELEMENTS"])
    model = keras_vit.VisionTransformer(
        image_size=size, patch_size=PATCH, hidden_size=WIDTH, num_layers=DEPTH, num_heads=HEADS, mlp_dim=MLP,
        layer_scale=1e-5, include_top=task == "train", classes=CLASSES, pooling="token",
        attention_implementation="matmul" if impl == "keras-vit-dense" else "auto", remat=remat)
    images = tf.constant(np.random.default_rng(0).uniform(-1, 1, (1, size, size, 3)).astype("float32"))
    labels = tf.constant([3])
    if task == "infer":
        step = tf.function(lambda x: model(x, training=False))
        return model, lambda: step(images).numpy()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        return tape.gradient(loss, model.trainable_variables)

    return model, lambda: [g.numpy() for g in train_step(images, labels)]


def keras_hub_step(size, task):
    import keras_hub
    import numpy as np
    import tensorflow as tf

    model = keras_hub.models.ViTBackbone(image_shape=(size, size, 3), patch_size=PATCH, num_layers=DEPTH,
                                         num_heads=HEADS, hidden_dim=WIDTH, mlp_dim=MLP)
    images = tf.constant(np.random.default_rng(0).uniform(-1, 1, (1, size, size, 3)).astype("float32"))
    if task != "infer":
        raise SystemExit("keras-hub: inference only here")
    step = tf.function(lambda x: model(x, training=False))
    return model, lambda: step(images).numpy()


def timm_step(size, task, remat):
    import timm
    import torch

    torch.set_num_threads(os.cpu_count() or 2)
    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, img_size=size,
                              num_classes=CLASSES if task == "train" else 0)
    images = torch.rand(1, 3, size, size) * 2 - 1
    if task == "infer":
        model.eval()

        def infer():
            with torch.inference_mode():
                return model(images).numpy()
        return model, infer
    model.train()
    model.set_grad_checkpointing(remat)
    labels = torch.tensor([3])

    def train():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        return [p.grad for p in model.parameters()]
    return model, train


def child(impl, size, task, remat):
    if impl == "timm":
        model, step = timm_step(size, task, remat)
    elif impl == "keras-hub":
        model, step = keras_hub_step(size, task)
    else:
        model, step = keras_vit_step(impl, size, task, remat)
    built = rss_mb()
    step()
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    peak = peak_mb()
    print(json.dumps({"impl": impl, "size": size, "task": task, "remat": remat, "tokens": (size // PATCH) ** 2 + 1,
                      "rss_built_mb": round(built), "peak_mb": round(peak), "activation_mb": round(peak - built),
                      "seconds": round(seconds, 3)}))


def gradient_check(size):
    """Largest |difference| between keras-vit's gradients with and without remat, same weights, one step."""
    import numpy as np
    import tensorflow as tf

    import keras_vit

    common = dict(image_size=size, patch_size=PATCH, hidden_size=WIDTH, num_layers=DEPTH, num_heads=HEADS,
                  mlp_dim=MLP, layer_scale=1e-5, classes=CLASSES, pooling="token")
    plain, remat = keras_vit.VisionTransformer(**common), keras_vit.VisionTransformer(**common, remat=True)
    rng = np.random.default_rng(1)
    remat.set_weights([rng.normal(0, 0.02, np.shape(w)).astype("float32") for w in plain.get_weights()])
    plain.set_weights(remat.get_weights())
    images = tf.constant(rng.uniform(-1, 1, (1, size, size, 3)).astype("float32"))

    def grads(model):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(tf.constant([3]), logits, from_logits=True))
        return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    diffs = [float(np.abs(a - b).max()) for a, b in zip(grads(plain), grads(remat))]
    print(json.dumps({"max_abs_grad_diff": max(diffs)}))


def run(python, *args):
    out = subprocess.run([python, os.path.abspath(__file__), "--child", *map(str, args)], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        sys.stderr.write(out.stderr[-2000:])
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(result), flush=True)
    return result


def dense_fits(size):
    """Whether the dense form's logits and probabilities of one layer (2 x heads x T^2 float32) fit in half
    of the memory available now; above that it is not run (at 2072 px they are 23 GB)."""
    tokens = (size // PATCH) ** 2 + 1
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return 2 * HEADS * tokens * tokens * 4 < available / 2


def has_keras_hub():
    return subprocess.run([sys.executable, "-c", "import keras_hub"], capture_output=True).returncode == 0


def table(rows, task):
    impls = [i for i in ("keras-vit", "keras-vit-dense", "keras-hub", "timm") if any(r.get("impl") == i for r in rows)]
    lines = [f"| {'px (tokens)' if task == 'infer' else 'step at 518 px'} | "
             + " | ".join(f"{i} activations MB / s" for i in impls) + " | keras-vit / timm: memory, speed |",
             "|---" * (len(impls) + 2) + "|"]
    keys = sorted({(r["size"], r["remat"]) for r in rows if "size" in r})
    for size, remat in keys:
        got = {r["impl"]: r for r in rows if r.get("size") == size and r.get("remat") == remat}
        label = f"{size} ({(size // PATCH) ** 2 + 1})" if task == "infer" else ("remat" if remat else "no remat")
        cells = [f"{got[i]['activation_mb']:,} / {got[i]['seconds']:.2f}" if i in got else "-" for i in impls]
        ours, timm = got.get("keras-vit"), got.get("timm")
        ratio = (f"{ours['activation_mb'] / max(timm['activation_mb'], 1):.2f}x, {timm['seconds'] / ours['seconds']:.2f}x"
                 if ours and timm else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for impl, style in (("keras-vit", "o-"), ("keras-vit-dense", "s--"), ("keras-hub", "^:"), ("timm", "d-")):
        got = sorted((r["tokens"], r["activation_mb"], r["seconds"]) for r in rows
                     if r.get("impl") == impl and r.get("task") == "infer")
        if not got:
            continue
        tokens, memory, seconds = zip(*got)
        axes[0].plot(tokens, [max(m, 1) for m in memory], style, label=impl)
        axes[1].plot(tokens, seconds, style, label=impl)
    for ax, what in zip(axes, ("activation memory, MB (peak RSS - RSS after build)", "seconds per forward pass")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens (DINOv2 ViT-S/14, batch 1)")
        ax.set_title(what, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", type=int, default=[224, 518, 1036, 1554, 2072])
    p.add_argument("--parts", nargs="+", default=["inference", "training"], choices=["inference", "training"])
    p.add_argument("--venvs", default=os.environ.get("KERAS_VIT_BENCH_VENVS", os.path.join(ROOT, "..", "bench-venvs")))
    p.add_argument("--out", default=os.path.join(HERE, "high_resolution"))
    p.add_argument("--child", nargs="+")
    args = p.parse_args(argv)
    if args.child:
        if args.child[0] == "gradients":
            return gradient_check(int(args.child[1]))
        impl, size, task, remat = args.child
        return child(impl, int(size), task, remat == "True")
    sys.path.insert(0, HERE)
    from run import peer_python

    timm_python = peer_python(os.path.abspath(args.venvs), "timm")
    peers = [("keras-vit", sys.executable), ("keras-vit-dense", sys.executable), ("timm", timm_python)]
    if has_keras_hub():
        peers.insert(2, ("keras-hub", sys.executable))
    rows = []
    if "inference" in args.parts:
        for size in args.sizes:
            for impl, python in peers:
                if impl in ("keras-vit-dense", "keras-hub") and not dense_fits(size):
                    print(f"{impl} at {size} px: not run, its dense attention would not fit in memory", flush=True)
                    continue
                rows.append(run(python, impl, size, "infer", False))
    if "training" in args.parts:
        for remat in (False, True):
            for impl, python in peers:
                if impl not in ("keras-hub", "keras-vit-dense"):
                    rows.append(run(python, impl, 518, "train", remat))
        rows.append({"gradients_518": run(sys.executable, "gradients", 518)})
    rows = [r for r in rows if r]
    with open(args.out + ".json.tmp", "w") as f:
        json.dump({"model": "vit_small_patch14_dinov2, batch 1, float32", "cpus": os.cpu_count(), "rows": rows}, f,
                  indent=1)
    os.replace(args.out + ".json.tmp", args.out + ".json")
    infer = [r for r in rows if r.get("task") == "infer"]
    train = [r for r in rows if r.get("task") == "train"]
    text = ["# High resolution: activation memory and time (`python benchmarks/high_resolution.py`)", "",
            f"DINOv2 ViT-S/14, batch 1, float32, {os.cpu_count()} CPUs; fresh process per cell, second of two steps.",
            ""]
    if infer:
        text += ["## Inference", "", table(infer, "infer"), ""]
    if train:
        grad = [r["gradients_518"] for r in rows if "gradients_518" in r]
        text += ["## Training step (forward + backward) at 518 px", "", table(train, "train"), ""]
        if grad and "max_abs_grad_diff" in grad[0]:
            text += [f"keras-vit gradients with and without remat: max |difference| {grad[0]['max_abs_grad_diff']:.2e}.",
                     ""]
    with open(args.out + ".md.tmp", "w") as f:
        f.write("\n".join(text))
    os.replace(args.out + ".md.tmp", args.out + ".md")
    if infer:
        plot(infer, os.path.join(ROOT, "docs", "high_resolution.png"))
    print("\n".join(text))


if __name__ == "__main__":
    sys.exit(main())
