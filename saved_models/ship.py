"""Copies a finished training run into saved_models/: the model without optimizer state,
its metrics, history and learning curve, and a model card.

    python saved_models/ship.py runs/cifar10 saved_models/vit_cifar10 \
        --title "ViT on CIFAR-10, from scratch" --command "keras-vit train recipes/cifar10.py ..."
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def curve(history_csv, out_png, title):
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
    ax1.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax2.set(xlabel="epoch", ylabel="cross-entropy (label-smoothed)", title="loss")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("out_dir")
    p.add_argument("--title", required=True)
    p.add_argument("--command", required=True, help="the command that trained it")
    args = p.parse_args(argv)

    import keras

    import keras_vit  # noqa: F401  (registers the layers)

    metrics = json.load(open(os.path.join(args.run_dir, "metrics.json")))
    os.makedirs(args.out_dir, exist_ok=True)
    model = keras.models.load_model(os.path.join(args.run_dir, "model.keras"), compile=False)
    model.save(os.path.join(args.out_dir, "model.keras"))  # weights and config only: no optimizer state
    shutil.copy(os.path.join(args.run_dir, "history.csv"), args.out_dir)
    with open(os.path.join(args.out_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    curve(os.path.join(args.run_dir, "history.csv"), os.path.join(args.out_dir, "curve.png"), args.title)
    config = metrics["config"]
    size = os.path.getsize(os.path.join(args.out_dir, "model.keras"))
    card = f"""# {args.title}

| | |
|---|---|
| model | `VisionTransformer`: image {model.image_size[0]}x{model.image_size[1]}, patch {model.patch_size[0]}, \
hidden {model.hidden_size}, {model.num_layers} layers, {model.num_heads} heads, MLP {model.mlp_dim}, \
classifier `{model.classifier}`; {metrics['parameters']:,} parameters |
| input | RGB images scaled to [-1, 1] (`keras_vit.preprocess_input`), {model.image_size[0]}x{model.image_size[1]} |
| output | logits over {len(metrics['class_names'])} classes: {', '.join(metrics['class_names'])} |
| data | `{config['data']}`: {metrics['train_examples']:,} training images, {metrics['validation_examples']:,} \
held out to pick the best epoch, {metrics['test_examples']:,} test images |
| recipe | `recipes/{os.path.basename(config['recipe'])}` \
({config['epochs']} epochs, batch {config['batch_size']}, {config['optimizer']}, lr {config['learning_rate']}, \
{config['precision']}) |
| **test accuracy** | **{metrics['test_accuracy']:.2%}** (test loss {metrics['test_loss']:.4f}; the final model) |
| training time | {metrics['train_seconds'] / 60:.0f} min wall, {metrics['train_cpu_seconds'] / 60:.0f} min CPU \
({metrics['strategy']}, {metrics['num_replicas']} replica) |
| trained | {datetime.date.today().isoformat()}, TensorFlow {metrics['versions']['tensorflow']}, \
Keras {metrics['versions']['keras']} |
| file | `model.keras`, {size / 1e6:.1f} MB, weights and config (no optimizer state) |

Reproduce: `{args.command}`

![learning curve](curve.png)

Load: `import keras, keras_vit; model = keras.models.load_model("{args.out_dir}/model.keras")`;
the class names are in `model.class_names`. `metrics.json` holds the full resolved recipe.
"""
    with open(os.path.join(args.out_dir, "MODEL_CARD.md"), "w") as f:
        f.write(card)
    print(card)


if __name__ == "__main__":
    sys.exit(main())
