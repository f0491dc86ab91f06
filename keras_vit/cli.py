"""`keras-vit` command line: thin front ends over the Python API, one subcommand each."""

import argparse
import os
import sys


def _convert(args):
    from keras_vit.pretrained import convert

    convert(
        args.checkpoint,
        args.out,
        variant=args.variant,
        image_size=args.image_size,
        classes=args.classes,
        representation_size=args.representation_size,
        resample=args.resample,
        overwrite=args.overwrite,
    )


def _train(args):
    from keras_vit.training import apply_overrides, load_recipe, train

    config = apply_overrides(load_recipe(args.recipe), args.set)
    model_dir = args.model_dir or os.path.join(
        "runs", os.path.splitext(os.path.basename(args.recipe))[0])
    metrics = train(config, model_dir, backup_dir=args.backup_dir)
    if metrics["stopped_early"]:
        raise RuntimeError(f"training stopped after {metrics['epochs_completed']} of {config['epochs']} epochs "
                           "(a NaN loss?); see the history in the model dir")


def _visualize(args):
    from keras_vit.visualize import FIGURES, visualize_files

    try:
        written = visualize_files(args.model, args.out, args.image, batch_size=args.batch_size,
                                  num_components=args.components)
    except ImportError as e:  # matplotlib, an optional extra: one line, not a traceback
        raise ValueError(str(e)) from None
    for name in FIGURES:
        if name in written:
            print(written[name]["png"])


def _export(args):
    from keras_vit.export import export_model

    export_model(
        args.model,
        args.out,
        format=args.format,
        quantize=args.quantize,
        attention=args.attention,
        representative_images=args.representative,
        samples=args.samples,
        max_samples=args.max_samples,
        calibration_images=args.calibration_images,
        overwrite=args.overwrite,
    )


def _predict(args):
    from keras_vit.applications import load_image
    from keras_vit.export import load_classifier

    if args.top < 1:
        raise ValueError(f"--top must be a positive int, got {args.top}.")
    classifier = load_classifier(args.model)
    images = [(path, load_image(path)) for path in args.images]  # every file is checked before any prediction
    for path, image in images:
        (top,) = classifier.classify(image[None], top=args.top)
        print(f"{path}: " + ", ".join(f"{name} {score:.4f}" for _, name, score in top), flush=True)


def _size(text):
    parts = [int(p) for p in text.lower().replace("x", ",").split(",") if p]
    if len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected SIZE or H,W, got {text!r}")
    return parts[0] if len(parts) == 1 else tuple(parts)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description="The Vision Transformer for Keras 3: convert official checkpoints, train recipes, "
        "export, predict and visualize.",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser(
        "train",
        help="run a training recipe with model.fit (recipes/*.py)",
        description="Runs RECIPE (a Python file whose get_config() returns the experiment) with model.fit "
        "under the tf.distribute strategy that fits the machine (TPU, several workers via TF_CONFIG, several "
        "GPUs, or one device). Writes model.keras, best.keras, metrics.json, history.csv and TensorBoard logs "
        "to --model-dir. Rerunning the same command after a crash resumes from the last finished epoch.",
    )
    p.add_argument("recipe", help="e.g. recipes/digits.py")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key, e.g. --set epochs=5 --set model.hidden_size=256 "
                   "--set data=../shared/data/cifar10-jpeg.tgz (repeatable)")
    p.add_argument("--model-dir", default=None, help="output folder (default runs/<recipe name>)")
    p.add_argument("--backup-dir", default=None,
                   help="where preemption backups go (default <model-dir>/backup); one folder per worker inside")
    p.set_defaults(func=_train)

    p = commands.add_parser(
        "convert",
        help="official .npz, timm or Hugging Face checkpoint -> a ready-to-fine-tune .keras model",
        description="Tells the checkpoint's format (official .npz, a timm or transformers hub folder with "
        "config.json + model.safetensors), builds its model (of VARIANT for an .npz given one) at --image-size, "
        "loads it (position embeddings resampled, a new zero-initialized head when --classes differs) and writes "
        "it atomically.",
    )
    p.add_argument("checkpoint", help="official .npz, or a timm / transformers folder (config.json + model.safetensors)")
    p.add_argument("--variant", default=None,
                   help="for an .npz: e.g. B/16, L/16, R50+B/16 (see keras_vit.VARIANTS); default: read off its shapes")
    p.add_argument("--image-size", type=_size, default=None,
                   help="SIZE or H,W (default: the checkpoint's; 224 for an .npz with --variant)")
    p.add_argument("--classes", type=int, default=None,
                   help="classes of the head (default: the checkpoint's; 1000 for an .npz with --variant)")
    p.add_argument("--representation-size", type=int, default=None,
                   help="keep a pre-logits layer of this width (default: none, as the official fine-tuning)")
    p.add_argument("--resample", default=None, choices=("official", "bilinear", "bicubic"),
                   help="position embedding resampling (default: official for .npz, bicubic as timm otherwise)")
    p.add_argument("--out", required=True, help="output .keras file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=_convert)

    p = commands.add_parser(
        "visualize",
        help="the paper's analysis figures (Figures 6-7) for a model, with their data",
        description="Writes attention_rollout, position_similarity, embedding_filters and attention_distance "
        "(.png with .npz and .json beside each) into --out. The attention figures need --image; images are "
        "resized to the model's input size.",
    )
    p.add_argument("model", help="a keras-vit model file (.keras)")
    p.add_argument("--image", nargs="+", action="extend", metavar="IMG",
                   help="image files (JPEG, PNG, GIF, BMP) for the rollout maps and attention distances")
    p.add_argument("--out", required=True, help="output folder (created; figures in it are replaced)")
    p.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default 16)")
    p.add_argument("--components", type=int, default=28,
                   help="principal components of the embedding filters to draw (default 28)")
    p.set_defaults(func=_visualize)

    p = commands.add_parser(
        "export",
        help=".keras model -> SavedModel or TFLite, preprocessing inside, checked against Keras",
        description="Exports MODEL with a serving_default signature taking uint8 RGB images (N, H, W, 3) and "
        "returning logits and probabilities; the SavedModel resizes any H, W inside, the TFLite model takes the "
        "model's size. The export is compared with Keras on sample images (max |logit diff|, top-1 agreement, "
        "accuracy when the samples are labelled) before it is renamed into place; class names and the parity "
        "report are written to OUT.json.",
    )
    p.add_argument("model", help="a keras-vit model (.keras)")
    p.add_argument("--format", choices=("saved_model", "tflite"), default=None,
                   help="default: tflite when --out ends in .tflite, else saved_model")
    p.add_argument("--quantize", choices=("float16", "dynamic", "int8"), default=None,
                   help="TFLite: float16 weights, dynamic-range int8 weights, or full int8 (calibrated on "
                   "--representative)")
    p.add_argument("--representative", metavar="IMAGES", default=None,
                   help="calibration images for int8: a folder of images or of class folders, or a data source "
                   "as in recipes (a .tgz of train/<class>/ images, a folder DATA/train/<class>/, digits, "
                   "tfds:NAME; its train split); default: the model's own training data, from the metrics.json "
                   "of `keras-vit train` beside MODEL")
    p.add_argument("--calibration-images", type=int, default=200, metavar="N",
                   help="calibrate on at most N images (default 200)")
    p.add_argument("--samples", metavar="IMAGES", default=None,
                   help="images for the parity check, as --representative (a data source's test split); class "
                   "folders and data sources add accuracy. Default: the model's own test data when it can be "
                   "read, else random pixels")
    p.add_argument("--max-samples", type=int, default=1000, metavar="N",
                   help="check parity on at most N samples, a random subset (default 1000)")
    p.add_argument("--attention", action="store_true", help="also output every block's attention maps")
    p.add_argument("--out", required=True, help="SavedModel folder or .tflite file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=_export)

    p = commands.add_parser(
        "predict",
        help="top classes of images, from a .keras, SavedModel or .tflite model",
        description="Prints, a line per image, the --top classes with their probabilities. Grayscale and RGBA "
        "images are converted to RGB (a line says so); images are resized to the model's size.",
    )
    p.add_argument("model", help="a .keras file, a SavedModel folder or a .tflite file")
    p.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG, PNG, GIF or BMP files")
    p.add_argument("--top", type=int, default=5, help="classes to print per image (default 5)")
    p.set_defaults(func=_predict)
    return parser


def _version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"keras-vit {version('keras-vit')}"
    except PackageNotFoundError:
        return "keras-vit (not installed)"


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as e:
        print(f"keras-vit {args.command}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
