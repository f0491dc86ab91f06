"""Copies a finished training run into saved_models/: the model without optimizer state,
its metrics, history and learning curve, and a model card.

    python saved_models/ship.py runs/cifar10 saved_models/vit_cifar10 \
        --title "ViT on CIFAR-10, from scratch" --command "keras-vit train recipes/cifar10.py ..."

With --data (the run's data source, e.g. ../shared/data/cifar10-jpeg.tgz, named relative to the
repository as the cards name it) it also writes what the card reports on: the exports
(float32 and int8 TFLite, ONNX, and the SavedModel's check report without the SavedModel),
each checked against Keras on all of DATA's test split, and the few-shot table (fewshot.json).
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def curve(history_csv, out_png, title, test_accuracy=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(history_csv) as f:
        rows = list(csv.DictReader(f))
    epochs = [int(r["epoch"]) + 1 for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, label in (("accuracy", "train (augmented)"), ("val_accuracy", "validation")):
        if key in rows[0]:
            ax1.plot(epochs, [float(r[key]) for r in rows], label=label)
    for key, label in (("loss", "train (augmented)"), ("val_loss", "validation")):
        if key in rows[0]:
            ax2.plot(epochs, [float(r[key]) for r in rows], label=label)
    # The epoch best.keras was taken at, and where the final model's test accuracy lands.
    monitor = "val_accuracy" if "val_accuracy" in rows[0] else "accuracy"
    best = max(range(len(rows)), key=lambda i: float(rows[i][monitor]))
    ax1.plot(epochs[best], float(rows[best][monitor]), "k*", markersize=11,
             label=f"best {monitor.replace('_', ' ')} {float(rows[best][monitor]):.2%} (epoch {epochs[best]})")
    for ax in (ax1, ax2):
        ax.axvline(epochs[best], color="0.5", linestyle=":", linewidth=1)
    if test_accuracy is not None:
        ax1.axhline(test_accuracy, color="C3", linestyle="--", linewidth=1,
                    label=f"test {test_accuracy:.2%} (final model)")
    ax1.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax2.set(xlabel="epoch", ylabel="cross-entropy (label-smoothed)", title="loss")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)


def heads_table(metrics):
    """A distilled model's test accuracy per head (metrics.json's test_heads, keras_vit.distill)."""
    heads = metrics.get("test_heads")
    if not heads:
        return ""
    return f"""
## The two heads

DeiT's measure (Touvron et al., 2021, Table 3): the student alone, without the teacher, on the
{heads['examples']:,} test images, reading its class head, its distillation head, or both averaged
(what the model and every export output).

| head | test accuracy |
|---|---:|
| class token's head alone | {heads['class_head']:.2%} |
| distillation token's head alone | {heads['distillation_head']:.2%} |
| both averaged (the model's logits) | {heads['averaged']:.2%} |
"""


def exports_table(exports_dir):
    """The card's section on the exports in exports_dir, from the JSON `keras-vit export` writes."""
    if not os.path.isdir(exports_dir):
        return ""
    rows = []
    for name in sorted(os.listdir(exports_dir)):
        if not name.endswith(".json"):
            continue
        meta = json.load(open(os.path.join(exports_dir, name)))
        p = meta["parity"]
        target = name[:-len(".json")]
        shipped = f"`exports/{target}`" if os.path.exists(os.path.join(exports_dir, target)) else f"{target} (not shipped)"
        rows.append(f"| {shipped} | {meta['format']} | {meta.get('quantization') or 'float32'} | "
                    f"{p['max_abs_logit_diff']:.2g} | {p['top1_agreement']:.2%} | {p['keras_accuracy']:.2%} | "
                    f"{p['export_accuracy']:.2%} |")
    if not rows:
        return ""
    sample = meta["parity"]["sample_source"]
    return f"""
## Exports

Written by `keras-vit export` (the commands are in docs/export.md); each was checked against the Keras model on
{sample} before it was written. The JSON beside each file holds the full report. "Keras accuracy" is the
model's in float32, the precision exports are made from; the test accuracy above was measured in the
training precision.

| file | format | weights | max abs logit diff | top-1 agreement with Keras | Keras accuracy | export accuracy |
|---|---|---|---:|---:|---:|---:|
""" + "\n".join(rows) + "\n"


def fewshot_table(out_dir):
    """The card's few-shot section, from the fewshot.json `keras-vit fewshot --out` wrote there."""
    path = os.path.join(out_dir, "fewshot.json")
    if not os.path.isfile(path):
        return ""
    r = json.load(open(path))
    shots = " ".join(r["shots"])
    rows = "\n".join(f"| {n} | {v['mean']:.2%} | {100 * v['std']:.2f} | {v['min']:.2%} | {v['max']:.2%} |"
                     for n, v in r["shots"].items())
    return f"""
## Few-shot linear evaluation

The paper's measure of a representation besides fine-tuning (Section 4): a least-squares linear classifier
on the frozen {r['feature_dim']}-d pre-logits features of N training images per class, its regularizer chosen
on {r['holdout_per_class']} further training images per class, tested on {r['test_images']:,} test images;
mean, spread, min and max over {r['seeds']} draws (`fewshot.json`). The representation was trained on the
same training set, so this measures how linearly separable the learned features are, not transfer.
Reproduce: `keras-vit fewshot {r['model']} --data {r.get('data_spec') or r['data']} \
--shots {shots} --seeds {r['seeds']}`

| shots per class | accuracy | std (points) | min | max |
|---:|---:|---:|---:|---:|
{rows}
"""


def exports_and_fewshot(out_dir, data, max_samples=10000):
    """The shipped exports, named after out_dir (`exports/<name>.tflite`, `<name>_int8.tflite`,
    `<name>.onnx`, `<name>_savedmodel.json`), and fewshot.json, in out_dir."""
    import tempfile

    from keras_vit.cli import main as cli

    name = os.path.basename(os.path.normpath(out_dir))
    model = os.path.join(out_dir, "model.keras")
    exports = os.path.join(out_dir, "exports")
    os.makedirs(exports, exist_ok=True)
    check = ["--samples", data, "--max-samples", str(max_samples), "--overwrite"]
    runs = [["--format", "tflite", "--out", os.path.join(exports, f"{name}.tflite")],
            ["--format", "tflite", "--quantize", "int8", "--representative", data,
             "--out", os.path.join(exports, f"{name}_int8.tflite")],
            ["--format", "onnx", "--out", os.path.join(exports, f"{name}.onnx")]]
    for args in runs:
        print(f"ship: keras-vit export {model} {' '.join(args + check)}", flush=True)
        if cli(["export", model, *args, *check]):
            raise SystemExit(f"ship: the export {args[-1]} failed")
    with tempfile.TemporaryDirectory() as tmp:  # the SavedModel's report ships; the folder is a command away
        saved = os.path.join(tmp, f"{name}_savedmodel")
        print(f"ship: keras-vit export {model} --format saved_model (report only)", flush=True)
        if cli(["export", model, "--format", "saved_model", "--out", saved, *check]):
            raise SystemExit("ship: the SavedModel export failed")
        shutil.copy(saved + ".json", os.path.join(exports, f"{name}_savedmodel.json"))
    print(f"ship: keras-vit fewshot {model} --data {data}", flush=True)
    if cli(["fewshot", model, "--data", data, "--shots", "1", "5", "10", "25", "--seeds", "3",
            "--out", os.path.join(out_dir, "fewshot.json")]):
        raise SystemExit("ship: the few-shot evaluation failed")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("out_dir")
    p.add_argument("--title", required=True)
    p.add_argument("--command", required=True, help="the command that trained it")
    p.add_argument("--note", default="", help="a paragraph for the card (e.g. how the run went)")
    p.add_argument("--data", default=None,
                   help="also write the exports and fewshot.json, checked on this data source's test split")
    args = p.parse_args(argv)

    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    metrics = json.load(open(os.path.join(args.run_dir, "metrics.json")))
    # A shipped model names its recipe and data relative to the repository (a user's clone, CI's
    # ../shared), not as they lay on the machine that trained it.
    config = metrics["config"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config["recipe"] = os.path.join("recipes", os.path.basename(config["recipe"]))
    if os.path.isabs(str(config["data"])):
        config["data"] = os.path.relpath(config["data"], root)
    os.makedirs(args.out_dir, exist_ok=True)
    model = keras.models.load_model(os.path.join(args.run_dir, "model.keras"), compile=False)
    model.save(os.path.join(args.out_dir, "model.keras"))  # weights and config only: no optimizer state
    shutil.copy(os.path.join(args.run_dir, "history.csv"), args.out_dir)
    with open(os.path.join(args.out_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    curve(os.path.join(args.run_dir, "history.csv"), os.path.join(args.out_dir, "curve.png"), args.title,
          metrics.get("test_accuracy"))
    if args.data:
        exports_and_fewshot(args.out_dir, args.data)
    size = os.path.getsize(os.path.join(args.out_dir, "model.keras"))
    resumed = metrics.get("resumed_at_epoch") or 0
    # A resumed run's clock starts again: say which epochs the time covers.
    timed = f"; epochs {resumed + 1}-{metrics['epochs_completed']}, resumed from the backup" if resumed else ""
    wall, cpu = metrics["train_seconds"], metrics["train_cpu_seconds"]
    if metrics.get("all_epochs_seconds"):  # history.csv's per-epoch clock: every epoch, across resumes
        wall, cpu = metrics["all_epochs_seconds"], metrics["all_epochs_cpu_seconds"]
        timed = f"; all {metrics['epochs_completed']} epochs{', across resumes' if resumed else ''}"
    augmentation = f", RandAugment {tuple(config['randaugment'])}" if config.get("randaugment") else ""
    mixing = [f"{k} {config[k]}" for k in ("mixup", "cutmix") if config.get(k)]
    augmentation += "".join(f", {m}" for m in mixing)
    stem = ""
    if model.resnet:
        r = model.resnet
        # The hybrid: the patches are cut from the ResNet stem's feature map, not from the pixels.
        norm = {"group": "GroupNorm", "batch": "BatchNorm"}[r.get("norm", "group")]
        strided = ", first stage at stride 2" if r.get("first_stride", 1) == 2 else ""
        stem = (f"hybrid: BiT ResNet stem, units {tuple(r['num_layers'])}, width factor {r['width_factor']}, "
                f"root `{r.get('root', 'bit')}`{strided}, {norm}, then ")
    distilled = ""
    if getattr(model, "distillation", False):
        distilled = (f", distillation token and second head (DeiT; logits = the two heads averaged), distilled "
                     f"from `{metrics.get('teacher')}` ({config['distill']['kind']} labels)")
    card = f"""# {args.title}

| | |
|---|---|
| model | `VisionTransformer`: image {model.image_size[0]}x{model.image_size[1]}, {stem}patch {model.patch_size[0]}, \
hidden {model.hidden_size}, {model.num_layers} layers, {model.num_heads} heads, MLP {model.mlp_dim}, \
classifier `{model.classifier}`{distilled}; {metrics['parameters']:,} parameters |
| input | RGB images scaled to [-1, 1] (`keras_vit.preprocess_input`), {model.image_size[0]}x{model.image_size[1]} |
| output | logits over {len(metrics['class_names'])} classes: {', '.join(metrics['class_names'])} |
| data | `{config['data']}`: {metrics['train_examples']:,} training images, {metrics['validation_examples']:,} \
held out to pick the best epoch, {metrics['test_examples']:,} test images |
| recipe | `recipes/{os.path.basename(config['recipe'])}` \
({config['epochs']} epochs, batch {config['batch_size']}, {config['optimizer']}, lr {config['learning_rate']}, \
{metrics.get('precision') or config['precision']}{augmentation}) |
| **test accuracy** | **{metrics['test_accuracy']:.2%}** (test loss {metrics['test_loss']:.4f}; the final model) |
| training time | {wall / 60:.0f} min wall, {cpu / 60:.0f} min CPU \
({metrics['strategy']}, {metrics['num_replicas']} replica{timed}) |
| trained | {datetime.date.today().isoformat()}, TensorFlow {metrics['versions']['tensorflow']}, \
Keras {metrics['versions']['keras']} |
| file | `model.keras`, {size / 1e6:.1f} MB, weights and config (no optimizer state) |

Reproduce: `{args.command}`
{chr(10) + args.note + chr(10) if args.note else ""}
![learning curve](curve.png)

Load: `import keras, keras_vit; model = keras.models.load_model("{args.out_dir}/model.keras")`;
the class names are in `model.class_names`. `metrics.json` holds the full resolved recipe.
"""
    card += heads_table(metrics)
    card += fewshot_table(args.out_dir)
    card += exports_table(os.path.join(args.out_dir, "exports"))
    with open(os.path.join(args.out_dir, "MODEL_CARD.md"), "w") as f:
        f.write(card)
    print(card)


if __name__ == "__main__":
    sys.exit(main())
