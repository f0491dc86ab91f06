"""Top-1 agreement of mixed_bfloat16 with float32, same weights, real images.

    python benchmarks/agreement.py [--model PATH.keras] [--cifar 200]

Rows (each: a float32 model, the same model rebuilt under mixed_bfloat16 with the float32
weights copied in, run on the same images):
  - a trained model whose predictions mean something: `--model` (a .keras classifier; the
    shipped `saved_models/vit_cifar10` by default), on CIFAR-10 test JPEGs at its input size,
    with both accuracies;
  - the shipped digits model on scikit-learn's digits;
  - ViT-B/16@224 with random weights (seed 0, a random head) on the real photographs and
    CIFAR-10 test JPEGs upsampled to 224. With random weights the logits of different
    classes lie close together, so this is the harder case for agreement; it still
    compares the two precisions on the same weights.
Prints one JSON line.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import images as photos_lib  # noqa: E402

SHIPPED = os.path.join(os.path.dirname(HERE), "saved_models")
DEFAULT_MODEL = os.path.join(SHIPPED, "vit_cifar10", "model.keras")
DIGITS = os.path.join(SHIPPED, "vit_digits", "model.keras")


def twin_bf16(model):
    """The same model rebuilt under mixed_bfloat16, with model's float32 weights."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        twin = type(model).from_config(model.get_config())
    finally:
        keras.mixed_precision.set_global_policy("float32")
    twin.set_weights(model.get_weights())
    return twin


def compare(name, what, model, x, labels=None, batch=16):
    bf16 = twin_bf16(model)
    a = model.predict(x, batch_size=batch, verbose=0).astype("float64")
    b = bf16.predict(x, batch_size=batch, verbose=0).astype("float64")
    top5a = np.argsort(-a, axis=-1)[:, :5]
    top5b = np.argsort(-b, axis=-1)[:, :5]
    row = {"model": name, "images": what, "n": int(len(x)),
           "top1_agreement": float(np.mean(a.argmax(-1) == b.argmax(-1))),
           "top5_overlap": float(np.mean([len(set(p) & set(q)) / 5 for p, q in zip(top5a, top5b)])),
           "max_abs_logit_diff": float(np.abs(a - b).max()),
           "logit_std": float(a.std())}
    if labels is not None:
        row["acc_float32"] = float(np.mean(a.argmax(-1) == labels))
        row["acc_bfloat16"] = float(np.mean(b.argmax(-1) == labels))
    return row


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--cifar", type=int, default=200, help="CIFAR-10 test images to use")
    args = p.parse_args(argv)
    import keras

    import keras_vit

    rows = []
    cifar = photos_lib.cifar_test(args.cifar)
    if args.model and os.path.exists(args.model) and cifar is not None:
        tmp = tempfile.mkdtemp()
        try:  # a copy: a training run may rewrite the file meanwhile
            path = shutil.copy(args.model, os.path.join(tmp, "model.keras"))
            model = keras.models.load_model(path, compile=False)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        size = model.input_shape[1]
        rows.append(compare(f"trained CIFAR-10 ViT ({os.path.relpath(args.model)}, {model.count_params():,} "
                            f"params)", f"{len(cifar[0])} CIFAR-10 test JPEGs at {size}", model,
                            photos_lib.to_input(cifar[0], size), cifar[1], batch=64))
    if os.path.exists(DIGITS):
        from keras_vit.data import load_digits

        model = keras.models.load_model(DIGITS, compile=False)
        test = load_digits()["test"]
        x = np.asarray(test.images, "float32") / 127.5 - 1.0
        ys = test.labels
        rows.append(compare("shipped digits ViT (saved_models/vit_digits)", f"{len(x)} scikit-learn digits", model,
                            x, np.asarray(ys).reshape(-1), batch=64))
    keras.utils.set_random_seed(0)
    model = keras_vit.ViTB16(classifier_activation=None)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape).astype("float32"))
    pics = photos_lib.photos()
    x = [photos_lib.to_input([im for _, im in pics], 224)] if pics else []
    names = [n for n, _ in pics]
    if cifar is not None:
        x.append(photos_lib.to_input(cifar[0][:60], 224))
        names.append(f"{min(60, len(cifar[0]))} CIFAR-10 test JPEGs upsampled")
    rows.append(compare("ViT-B/16@224, random weights (seed 0)", ", ".join(names), model, np.concatenate(x), batch=8))
    note = ("Each row runs one set of float32 weights twice: as built (float32) and in a twin built under "
            "`mixed_bfloat16` (softmax, LayerNorms and head in float32). 'top-5 overlap' is the mean share of "
            "the float32 top-5 classes that the bfloat16 top-5 also holds.")
    print(json.dumps({"rows": rows, "note": note}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
