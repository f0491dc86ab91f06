"""Transfer with data that ships offline: the shipped CIFAR-10 ViT fine-tuned on Fashion-MNIST, against
the same model trained from scratch on the same images for the same steps.

    apt-get install -y dataset-fashion-mnist       # Debian: /usr/share/datasets/fashion-mnist/*-ubyte.gz
    python benchmarks/transfer.py --per-class 100 1000 --out benchmarks/transfer.md

Fashion-MNIST (Xiao et al., 2017: 28x28 grey photos of clothes, 10 classes, 60,000 training and 10,000
test images) is written as a folder of PNGs, as a user keeps photos: DATA/train/<class>/*.png holds
--per-class images of each class (a seeded draw from the 60,000) and DATA/test/<class>/*.png all
10,000 test images; `keras-vit train` reads it as any photo folder (grey to RGB, 28 -> 32 px).

Three runs per size, each `keras-vit train recipes/cifar10.py` (the shipped model's architecture, its
pad-crop and flip augmentation) for the same number of steps at the same batch:
- fine-tuned: from saved_models/vit_cifar10/model.keras (72.2% on CIFAR-10) with a new zero head, as
  the paper fine-tunes (SGD with momentum 0.9, no weight decay, cosine from 0.01 after a 10% warm-up,
  clipping at 1, no RandAugment, no label smoothing);
- from scratch, the same settings as the fine-tuning;
- from scratch, recipes/cifar10.py's own settings (AdamW 2e-3, weight decay 0.05, label smoothing 0.1,
  RandAugment (2, 5)), the recipe that trained the shipped model.
Test accuracy on the 10,000 test images; no validation split (nothing is chosen on the test images:
one learning rate, set before any run). Prints the table and writes it with --out (and the rows as JSON).
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION = "/usr/share/datasets/fashion-mnist"
CLASSES = ["t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle_boot"]
SHIPPED = os.path.join(ROOT, "saved_models", "vit_cifar10", "model.keras")
RECIPE = os.path.join(ROOT, "recipes", "cifar10.py")
FINETUNE = ["optimizer=sgd", "momentum=0.9", "weight_decay=0.0", "learning_rate=0.01", "schedule=cosine",
            "clip_norm=1.0", "randaugment=None", "label_smoothing=0.0"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_fashion(folder=FASHION):
    names = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
             "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
    out = {}
    for split, (images, labels) in names.items():
        paths = [os.path.join(folder, n) for n in (images, labels)]
        if not all(os.path.isfile(p) for p in paths):
            raise SystemExit(f"Fashion-MNIST is not in {folder}: apt-get install -y dataset-fashion-mnist "
                             "(or --fashion FOLDER with the four *-ubyte.gz files)")
        out[split] = (read_idx(paths[0]), read_idx(paths[1]))
    return out


def write_folder(root, fashion, per_class, seed=0):
    """root/train/<class>/*.png (per_class of each, seeded) and root/test/<class>/*.png (all)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x, y = fashion["train"]
    picks = {"train": np.concatenate([rng.permutation(np.flatnonzero(y == c))[:per_class] for c in range(10)])}
    picks["test"] = np.arange(len(fashion["test"][1]))
    for split, idx in picks.items():
        images, labels = fashion[split]
        for c in CLASSES:
            os.makedirs(os.path.join(root, split, c), exist_ok=True)
        for i in idx:
            png = tf.io.encode_png(images[i][..., None]).numpy()
            with open(os.path.join(root, split, CLASSES[labels[i]], f"{i:05d}.png"), "wb") as f:
                f.write(png)


def zero_head_init(path):
    """The shipped model with Fashion-MNIST's class names and a zero head (the paper's new head)."""
    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    source = keras.models.load_model(SHIPPED)
    model = type(source).from_config({**source.get_config(), "class_names": CLASSES})
    model.set_weights(source.get_weights())
    for variable in model.weights:
        if variable.path.startswith("head/"):
            variable.assign(np.zeros(variable.shape, variable.dtype))
    model.save(path)


def run(data, model_dir, steps, batch, sets, log):
    command = [sys.executable, "-m", "keras_vit.cli", "train", RECIPE, "--model-dir", model_dir, "--overwrite",
               "--set", f"data={data}", "--set", "validation_split=0", "--set", f"batch_size={batch}",
               "--set", f"steps_per_epoch={steps}", "--set", "epochs=1", "--set", f"warmup_steps={steps // 10}"]
    for item in sets:
        command += ["--set", item]
    start = time.time()
    with open(log, "w") as f:
        f.write(" ".join(command) + "\n")
        f.flush()
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode:
        raise RuntimeError(f"training failed, see {log}")
    with open(os.path.join(model_dir, "metrics.json")) as f:
        metrics = json.load(f)
    return {"test_accuracy": metrics["test_accuracy"], "wall_s": round(time.time() - start),
            "train_cpu_s": metrics["train_cpu_seconds"], "command": " ".join(command[1:])}


def table(rows):
    lines = ["| labelled images per class | steps (batch) | fine-tuned from the CIFAR-10 ViT | from scratch, same "
             "settings | from scratch, recipes/cifar10.py settings |", "|---:|---:|---:|---:|---:|"]
    for n in sorted({r["per_class"] for r in rows}):
        by = {r["arm"]: r for r in rows if r["per_class"] == n}
        first = next(iter(by.values()))
        lines.append(f"| {n:,} | {first['steps']} ({first['batch']}) | "
                     + " | ".join(f"{100 * by[a]['test_accuracy']:.2f}%" if a in by else "-"
                                  for a in ("fine-tuned", "scratch, same settings", "scratch, recipe settings"))
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--per-class", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--steps", type=int, nargs="+", default=None,
                   help="training steps for each --per-class (default: 300 for 100, 1000 for 1000; else 1 epoch x 10)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--fashion", default=FASHION, help="folder of Fashion-MNIST's four *-ubyte.gz files")
    p.add_argument("--work", default=None, help="keep the folders, runs and logs here (default: a temporary folder)")
    p.add_argument("--arms", nargs="+", default=["fine-tuned", "scratch, same settings", "scratch, recipe settings"])
    p.add_argument("--out", help="write the table (.md) and the rows (.json beside it)")
    args = p.parse_args(argv)
    defaults = {100: 300, 1000: 1000}
    steps = args.steps or [defaults.get(n, max(10 * n * 10 // args.batch, 1)) for n in args.per_class]
    fashion = load_fashion(args.fashion)
    work = args.work or tempfile.mkdtemp(prefix="keras_vit_transfer_")
    os.makedirs(work, exist_ok=True)
    init = os.path.join(work, "vit_cifar10_zero_head.keras")
    zero_head_init(init)
    arms = {"fine-tuned": FINETUNE + [f"init_checkpoint={init}"], "scratch, same settings": FINETUNE,
            "scratch, recipe settings": []}
    rows = []
    try:
        for n, count in zip(args.per_class, steps):
            data = os.path.join(work, f"fashion_{n}")
            if not os.path.isdir(data):
                write_folder(data, fashion, n)
            for arm in args.arms:
                tag = arm.split(",")[0].replace(" ", "_") + ("" if "," not in arm else "_" + arm.split(", ")[1][:6])
                result = run(data, os.path.join(work, f"run_{n}_{tag}"), count, args.batch, arms[arm],
                             os.path.join(work, f"run_{n}_{tag}.log"))
                row = {"per_class": n, "arm": arm, "steps": count, "batch": args.batch, **result}
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = table(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
