"""One benchmark process: builds the models of one implementation, then times them on request.

Run by `benchmarks/run.py` in the implementation's own virtual environment:

    python worker.py --impl {keras-vit,keras-hub,timm} --task {infer,train} --variant B/16
                     --batch 8 --precisions float32 bfloat16

It prints one JSON line `{"ready": ...}` once every model is built and warmed up, then
answers each stdin line `time PRECISION N` with `{"times": [seconds per step, ...]}`
and stops on `quit` or end of input. Only the standard library, numpy and the
implementation's own packages are imported, so the same file runs in every environment.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# ViT sizes (the official configurations)
SIZES = {
    "Ti/16": dict(patch=16, hidden=192, layers=12, heads=3, mlp=768),
    "S/16": dict(patch=16, hidden=384, layers=12, heads=6, mlp=1536),
    "B/16": dict(patch=16, hidden=768, layers=12, heads=12, mlp=3072),
}
TIMM_NAMES = {"Ti/16": "vit_tiny_patch16_224", "S/16": "vit_small_patch16_224", "B/16": "vit_base_patch16_224"}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def keras_models(impl, task, variant, batch, precisions, image=224, classes=1000):
    import keras
    import tensorflow as tf

    versions = {"tensorflow": tf.__version__, "keras": keras.__version__}
    backend = keras.backend.backend()
    if backend != "tensorflow":  # KERAS_BACKEND=jax / torch: the --parts backends rows
        import importlib

        versions["backend"] = backend
        versions[backend] = importlib.import_module(backend).__version__
    if impl == "keras-vit":
        import keras_vit

        versions["keras-vit"] = getattr(keras_vit, "__version__", "?")
        versions["keras-vit path"] = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))
    else:
        import keras_hub

        versions["keras-hub"] = keras_hub.__version__
    s = SIZES[variant]
    rng = np.random.default_rng(0)
    images = tf.constant(rng.uniform(-1, 1, (batch, image, image, 3)).astype("float32"))
    labels = tf.constant(rng.integers(0, classes, (batch,)))
    steps = {}
    info = {}
    for precision in precisions:
        policy = "mixed_bfloat16" if precision == "bfloat16" else "float32"
        keras.mixed_precision.set_global_policy(policy)
        keras.utils.set_random_seed(0)
        t0 = time.perf_counter()
        if impl == "keras-vit":
            model = keras_vit.create_model(variant, image_size=image, classes=classes)
        else:
            backbone = keras_hub.models.ViTBackbone(
                image_shape=(image, image, 3), patch_size=s["patch"], num_layers=s["layers"],
                num_heads=s["heads"], hidden_dim=s["hidden"], mlp_dim=s["mlp"])
            model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=classes, preprocessor=None)
        build_s = time.perf_counter() - t0
        if task == "infer" and backend != "tensorflow":
            # predict_on_batch: under jax a jitted (XLA) predict step, under torch an eager one without grad
            pixels = images.numpy()

            def step(model=model, pixels=pixels):
                np.asarray(model.predict_on_batch(pixels))
        elif task == "infer":
            fn = tf.function(lambda x, m=model: m(x, training=False), jit_compile=False)

            def step(fn=fn):
                fn(images).numpy()
        else:
            model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)

            def step(model=model):
                float(model.train_on_batch(images, labels, return_dict=True)["loss"])
        t0 = time.perf_counter()
        step()  # traces
        first_s = time.perf_counter() - t0
        step()
        steps[precision] = step
        info[precision] = {"params": int(model.count_params()), "build_s": round(build_s, 2),
                           "first_step_s": round(first_s, 2)}
    keras.mixed_precision.set_global_policy("float32")
    return steps, info, versions


def timm_models(task, variant, batch, precisions, image=224, classes=1000):
    import timm
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 2)))
    versions = {"torch": torch.__version__, "timm": timm.__version__, "threads": torch.get_num_threads()}
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.uniform(-1, 1, (batch, 3, image, image)).astype("float32"))
    labels = torch.from_numpy(rng.integers(0, classes, (batch,)))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = timm.create_model(TIMM_NAMES[variant], pretrained=False, num_classes=classes)
    build_s = time.perf_counter() - t0
    steps, info = {}, {}
    for precision in precisions:
        autocast = precision == "bfloat16"
        if task == "infer":
            model.eval()

            def step(autocast=autocast):
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    model(images).float().numpy()
        else:
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)

            def step(autocast=autocast, opt=opt):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                loss.backward()
                opt.step()
                float(loss)
        t0 = time.perf_counter()
        step()
        first_s = time.perf_counter() - t0
        step()
        steps[precision] = step
        info[precision] = {"params": sum(p.numel() for p in model.parameters()), "build_s": round(build_s, 2),
                           "first_step_s": round(first_s, 2)}
    return steps, info, versions


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--impl", required=True, choices=["keras-vit", "keras-hub", "timm"])
    p.add_argument("--task", default="infer", choices=["infer", "train"])
    p.add_argument("--variant", default="B/16", choices=sorted(SIZES))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    args = p.parse_args(argv)
    if args.impl == "timm":
        steps, info, versions = timm_models(args.task, args.variant, args.batch, args.precisions)
    else:
        steps, info, versions = keras_models(args.impl, args.task, args.variant, args.batch, args.precisions)
    emit({"ready": info, "versions": versions, "python": sys.version.split()[0]})
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "time":
            step, n = steps[parts[1]], int(parts[2])
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            emit({"times": times})
    return 0


if __name__ == "__main__":
    sys.exit(main())
