"""Ships a finished dense training run of the seg_fashion recipe into saved_models/: the model without
optimizer state, its metrics, history, curve and test pictures, 500 held-out test scenes
(test_scenes.npz: the first 500 of the run's test scenes, grey images and masks, so the shipped mIoU is
recomputed anywhere without Fashion-MNIST), the exports checked against Keras on them (float32,
float16 and int8 TFLite, ONNX; the SavedModel's report), and a model card.

    python saved_models/ship_dense.py runs/seg_fashion saved_models/seg_fashion --command "keras-vit train seg_fashion"

Needs Fashion-MNIST (apt-get install dataset-fashion-mnist) to recompose the run's scenes.
"""

import argparse
import csv
import datetime
import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SHIPPED_SCENES = 500
AIM = 0.75  # issue 51's aim for the test mIoU
CALIBRATION_SCENES = 200


def curve(history_csv, out_png, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(history_csv) as f:
        rows = list(csv.DictReader(f))
    epochs = [int(r["epoch"]) + 1 for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for key, label in (("miou", "train mIoU (augmented)"), ("val_miou", "validation mIoU"),
                       ("val_pixel_accuracy", "validation pixel accuracy")):
        if key in rows[0]:
            ax1.plot(epochs, [float(r[key]) for r in rows], label=label)
    for key, label in (("loss", "train (augmented)"), ("val_loss", "validation")):
        ax2.plot(epochs, [float(r[key]) for r in rows], label=label)
    ax1.set(xlabel="epoch", ylabel="score", title="mean IoU, pixel accuracy")
    ax2.set(xlabel="epoch", ylabel="cross-entropy over labelled pixels", title="loss")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=80)


def scenes_of(config):
    from keras_vit.dense.scenes import compose_scenes, load_fashion_mnist

    items = load_fashion_mnist(config["dense"]["fashion_dir"])
    # as keras_vit.dense.scenes.fashion_scene_splits composes them for the run: test at seed + 1
    test = compose_scenes(*items["test"], count=config["dense"]["scenes_test"], seed=config["seed"] + 1)
    calibration = compose_scenes(*items["train"], count=CALIBRATION_SCENES, seed=config["seed"] + 100)
    return test, calibration


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="the run's model dir (model.keras, metrics.json, history.csv)")
    p.add_argument("out", help="saved_models/<name>")
    p.add_argument("--command", required=True, help="the command that trained the run, for the card")
    p.add_argument("--title", default="ViT segmentation of Fashion-MNIST scenes")
    args = p.parse_args(argv)

    import keras
    import numpy as np

    import keras_vit.dense.data as dense_data
    from keras_vit.dense.export import export_dense
    from keras_vit.dense.training import evaluate_dense

    os.makedirs(os.path.join(args.out, "exports"), exist_ok=True)
    with open(os.path.join(args.run, "metrics.json")) as f:
        metrics = json.load(f)
    config = metrics["config"]
    model = keras.saving.load_model(os.path.join(args.run, "model.keras"), compile=False)
    model.save(os.path.join(args.out, "model.keras"))  # not compiled: no optimizer state
    for name in ("metrics.json", "history.csv", "test_predictions.png"):
        shutil.copy(os.path.join(args.run, name), os.path.join(args.out, name))
    curve(os.path.join(args.run, "history.csv"), os.path.join(args.out, "curve.png"), args.title)

    (images, masks), (calibration, _) = scenes_of(config)
    shipped = os.path.join(args.out, "test_scenes.npz")
    np.savez_compressed(shipped, images=images[:SHIPPED_SCENES, ..., 0], targets=masks[:SHIPPED_SCENES])
    split = dense_data.load_pairs_npz(shipped, "segmentation", model.class_names)
    scores = evaluate_dense(model, dense_data.make_dense_dataset(split, model.image_size, 64, training=False))
    with open(os.path.join(args.out, "shipped_scores.json"), "w") as f:
        json.dump({"scenes": len(split), **scores}, f, indent=2)

    name = os.path.basename(os.path.normpath(args.out))
    exports, refused = {}, {}
    for suffix, quantize in (("", None), ("_f16", "float16"), ("_int8", "int8")):
        path = os.path.join(args.out, "exports", f"{name}{suffix}.tflite")
        try:
            exports[os.path.basename(path)] = export_dense(
                model, path, quantize=quantize, samples=shipped, max_samples=SHIPPED_SCENES, overwrite=True,
                representative=(calibration, np.zeros(calibration.shape[:3])))
        except ValueError as e:  # the parity check refused it: nothing written, the card says why
            if quantize is None:
                raise
            refused[os.path.basename(path)] = str(e)
            print(f"ship: {e}", flush=True)
    path = os.path.join(args.out, "exports", f"{name}.onnx")
    exports[os.path.basename(path)] = export_dense(model, path, samples=shipped, max_samples=SHIPPED_SCENES,
                                                   overwrite=True)
    with tempfile.TemporaryDirectory() as tmp:  # the SavedModel's report ships; the folder is a command away
        saved = os.path.join(tmp, f"{name}_savedmodel")
        exports["SavedModel"] = export_dense(model, saved, samples=shipped, max_samples=SHIPPED_SCENES)
        shutil.copy(saved + ".json", os.path.join(args.out, "exports", f"{name}_savedmodel.json"))
    write_card(args, model, metrics, scores, exports, len(split), refused)


def _size(path):
    return f"{os.path.getsize(path) / 1e6:.1f} MB"


def write_card(args, model, metrics, scores, exports, shipped, refused):
    config, head, backbone = metrics["config"], model.head_config, model.backbone_config
    per_class = metrics["test_per_class"]
    rows = "\n".join(f"| {n} | {v['iou']:.4f} | {v['pixels']:,} |" if v["iou"] is not None else f"| {n} | - | 0 |"
                     for n, v in per_class.items())
    export_rows = []
    for file, report in exports.items():
        where = os.path.join(args.out, "exports", file)
        size = _size(where) if os.path.isfile(where) else "(not shipped: `keras-vit export` writes it)"
        export_rows.append(f"| {file} | {size} | {report['relative_max_abs_diff']:.2g} | "
                           f"{report['class_agreement']:.4%} | {report['export_miou']:.4f} |")
    minutes = metrics.get("all_epochs_seconds", metrics["train_seconds"]) / 60
    size = f"{backbone.image_size[0]}x{backbone.image_size[1]}"
    linear, upsampling = (("a transposed conv", "each token mapped to its patch's pixels: `subpixel`") if head.subpixel
                          else ("1x1 conv", "upsampled bilinearly"))
    table = [
        ("model", f"`DensePredictor`: a ViT backbone (image {size}, patch {backbone.patch_size}, hidden "
                  f"{backbone.hidden_size}, {backbone.num_layers} layers, {backbone.num_heads} heads, MLP "
                  f"{backbone.mlp_dim}) with DINOv2's linear head (BatchNorm + {linear} over blocks "
                  f"{', '.join(map(str, head.taps))}, through the final LayerNorm, {upsampling}); "
                  f"{model.count_params():,} parameters"),
        ("backbone", f"started from `{config['init_checkpoint']}` (recipes/fashion_items.py)"
                     if config["init_checkpoint"] else "from scratch"),
        ("input", f"grey-on-black scenes as RGB, scaled to [-1, 1], {size}"),
        ("output", f"logits (N, {size.replace('x', ', ')}, 11): background and Fashion-MNIST's 10 classes"),
        ("data", f"`fashion_scenes`: {metrics['train_examples']:,} training scenes (from the training split's "
                 f"items), {metrics['validation_examples']:,} held out to pick the best epoch, "
                 f"{metrics['test_examples']:,} test scenes composed from the test split's items only "
                 "(`keras_vit/dense/scenes.py`)"),
        ("recipe", f"`recipes/seg_fashion.py` ({config['epochs']} epochs of {config['steps_per_epoch']} steps, batch "
                   f"{config['batch_size']}, {config['optimizer']}, lr {config['learning_rate']}, "
                   f"{metrics['precision']})"),
        ("**test mIoU**", f"**{metrics['test_miou']:.4f}** over the {metrics['test_examples']:,} test scenes (pixel "
                          f"accuracy {metrics['test_pixel_accuracy']:.4f}; the final model)"),
        ("shipped test scenes", f"`test_scenes.npz`, the first {shipped} test scenes: mIoU {scores['miou']:.4f}, "
                                f"pixel accuracy {scores['pixel_accuracy']:.4f} (`shipped_scores.json`; a slow "
                                "test recomputes it)"),
        ("training time", f"{minutes:.0f} min wall ({metrics['strategy']}, {metrics['num_replicas']} replica) on 2 "
                          "CPU cores shared with other jobs"),
        ("trained", f"{datetime.date.today().isoformat()}, TensorFlow {metrics['versions']['tensorflow']}, Keras "
                    f"{metrics['versions']['keras']}"),
        ("file", f"`model.keras`, {_size(os.path.join(args.out, 'model.keras'))}, weights and config (no optimizer "
                 "state)"),
    ]
    rows_text = "\n".join(f"| {k} | {v} |" for k, v in table)
    refused_text = "".join(f"\nNot shipped: `{file}`: the check refused it ({why})\n" for file, why in refused.items())
    if metrics["test_miou"] >= AIM:
        aim_text = f"The aim, test mIoU >= {AIM}, is met."
    else:
        worst = min((v["iou"], n) for n, v in per_class.items() if v["iou"] is not None)
        with open(os.path.join(args.run, "history.csv")) as f:
            val = [float(r["val_miou"]) for r in csv.DictReader(f)]
        aim_text = (f"**The aim, test mIoU >= {AIM}, is not met**: {metrics['test_miou']:.4f}. Validation mIoU went from "
                    f"{val[0]:.2f} to {val[-1]:.2f} over the {len(val)} epochs (see the curve); the worst class is "
                    f"{worst[1]} at IoU {worst[0]:.2f}.")
    card = f"""# {args.title}

| | |
|---|---|
{rows_text}

Reproduce: `{args.command}` (Fashion-MNIST from Debian: `apt-get install dataset-fashion-mnist`).

{aim_text}

![learning curve](curve.png)

Test scenes, their masks and the predictions (one row each):

![predictions](test_predictions.png)

## IoU per class ({metrics['test_examples']:,} test scenes)

| class | IoU | pixels |
|---|---:|---:|
{rows}

## Exports

Each checked against Keras on the {shipped} shipped test scenes before it was written (`keras_vit.dense.export`;
float32 within 1e-4 of the logits' scale, float16 and int8 within 1 point of Keras' mIoU); int8 calibrated on
{CALIBRATION_SCENES} training scenes. Each export's report is in the `.json` beside it.

| export | size | max diff (relative) | pixels whose class agrees | mIoU |
|---|---|---:|---:|---:|
{chr(10).join(export_rows)}

Keras' own mIoU on these scenes: {scores['miou']:.4f}.
{refused_text}
Predict: `keras-vit predict saved_models/seg_fashion/model.keras IMAGES --out masks/` writes a palette PNG of
class indices per image; `keras-vit visualize saved_models/seg_fashion/model.keras --image IMG --out DIR`
the overlays. Export: `keras-vit export saved_models/seg_fashion/model.keras --out seg.tflite --quantize int8
--samples saved_models/seg_fashion/test_scenes.npz`.
"""
    with open(os.path.join(args.out, "MODEL_CARD.md"), "w") as f:
        f.write(card)
    print(f"ship: wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
