"""`keras-vit` command line: thin front ends over the Python API, one subcommand each.

Only the standard library is imported until a command runs, so `--help` and `--version` answer at
once; every error a user can cause or meet (a bad value, a missing file or package, no network,
Ctrl-C) ends in one line on stderr, never a traceback.
"""

import argparse
import logging
import os
import sys

# Errors that carry a message meant for the user (network failures are OSErrors).
USER_ERRORS = (ValueError, TypeError, OSError, RuntimeError, ImportError)


# Each command's paths are checked before TensorFlow is imported (seconds) or a model loaded: a
# typo is reported at once, with the nearest existing path. Standard library (and keras_vit's
# standard-library modules) only.
MODEL_FILES = "a .keras file (keras-vit train writes runs/<recipe>/model.keras)"
# What keras_vit.load_model opens: export, visualize and fewshot take all of it.
CHECKPOINTS = (f"{MODEL_FILES}, a timm / transformers hub folder (config.json + model.safetensors), "
               "a .safetensors file, an official .npz or a Hugging Face hub name")
IMAGE_FILES = "give image files (JPEG, PNG, GIF, BMP or WebP)"


def _require(path, what, expected):
    from keras_vit._files import missing_path

    if not os.path.exists(path):
        raise missing_path(path, what, expected)


def _require_images(paths):
    for path in paths or ():
        _require(path, "image", IMAGE_FILES)


def _require_checkpoint(path):
    from keras_vit.presets import missing_checkpoint

    if not os.path.exists(path):
        raise missing_checkpoint(path)


def _require_model(path, command):
    """A missing local path is named before anything loads; a hub name ("facebook/dinov2-small") is left
    to keras_vit.load_model, which resolves it through huggingface_hub."""
    from keras_vit._files import is_hub_name

    if path.endswith(".npz"):
        _require_checkpoint(path)
    if not is_hub_name(path):
        _require(path, "model", f"{command} reads {CHECKPOINTS}")


def _check_convert(args):
    _require_checkpoint(args.checkpoint)


def _check_predict(args):
    if _zeroshot_labels(args) is not None:  # a two-tower checkpoint: a folder or a hub name
        _require_model(args.model, "predict --labels")
    else:
        _require(args.model, "model", f"predict runs {MODEL_FILES}, a SavedModel folder, a .tflite or a .onnx file")
        config = os.path.join(args.model, "config.json")
        if os.path.isfile(config):
            from keras_vit.zeroshot.transformers import family_of, read_config

            if family_of(read_config(args.model)) is not None:
                raise ValueError(f"{args.model} is a two-tower image-text checkpoint (CLIP / SigLIP): name the classes "
                                 "with --labels 'cat,dog,car' (or --labels-file) for zero-shot predictions.")
    _require_images(args.images)


def _zeroshot_labels(args):
    """The labels of --labels "cat,dog" or --labels-file (one per line), or None for a classifier's own classes."""
    labels_text, labels_file = getattr(args, "labels", None), getattr(args, "labels_file", None)
    if labels_text is not None and labels_file is not None:
        raise ValueError("give --labels or --labels-file, not both.")
    if labels_file is not None:
        _require(labels_file, "--labels-file", "a text file, one label per line")
        with open(labels_file, encoding="utf-8") as f:
            labels = [line.strip() for line in f if line.strip()]
    elif labels_text is not None:
        labels = [label.strip() for label in labels_text.split(",") if label.strip()]
    else:
        return None
    if not labels:
        raise ValueError("--labels / --labels-file gave no labels; e.g. --labels 'cat,dog,car'.")
    return labels


def _templates(args):
    from keras_vit.zeroshot.model import CLIP_TEMPLATES, DEFAULT_TEMPLATES

    if args.templates is None:
        return DEFAULT_TEMPLATES
    if args.templates == "clip":
        return CLIP_TEMPLATES
    return [t for t in args.templates.split("|") if t]


def _check_visualize(args):
    _require_model(args.model, "visualize")
    _require_images(args.image)
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise FileExistsError(f"--out {args.out} is a file; visualize writes a folder of figures: "
                              "name a new or existing folder.")


def _check_fewshot(args):
    _require_model(args.model, "fewshot")


def _check_export(args):
    from keras_vit._files import export_format

    _require_model(args.model, "export")
    export_format(args.out, args.format)


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
    from keras_vit.training import apply_overrides, find_recipe, load_recipe, train

    recipe = find_recipe(args.recipe)
    config = apply_overrides(load_recipe(recipe), args.set)
    model_dir = args.model_dir or os.path.join("runs", os.path.splitext(os.path.basename(recipe))[0])
    if config["objective"] in ("segmentation", "depth"):
        from keras_vit.dense.training import train
    metrics = train(config, model_dir, backup_dir=args.backup_dir, overwrite=args.overwrite)
    if metrics["stopped_early"]:
        raise RuntimeError(f"training stopped after {metrics['epochs_completed']} of {config['epochs']} epochs "
                           "(a NaN loss?); see the history in the model dir")


def _visualize(args):
    from keras_vit.dense.predict import is_dense_file

    if is_dense_file(args.model):  # a depth or segmentation model: its predictions drawn over the images
        from keras_vit.dense.predict import predict_dense_files

        if not args.image:
            raise ValueError(f"{args.model} is a dense model: give the images to draw its predictions over "
                             "(--image IMG ...).")
        predict_dense_files(args.model, args.image, args.out, overlay_images=True)
        return
    from keras_vit.visualize import FIGURES, visualize_files

    written = visualize_files(args.model, args.out, args.image, batch_size=args.batch_size,
                              num_components=args.components)
    for name in FIGURES:
        if name in written:
            print(written[name]["png"])


def _export(args):
    import keras

    if keras.backend.backend() != "tensorflow":
        # SavedModel and TFLite are TensorFlow's: the same command in a process of its own under that
        # backend, which loads the .keras file (written under any backend) and runs the parity checks.
        print(f"keras-vit export: KERAS_BACKEND={keras.backend.backend()}; exporting under "
              "KERAS_BACKEND=tensorflow in a process of its own", file=sys.stderr, flush=True)
        import subprocess

        command = [sys.executable, "-m", "keras_vit.cli", *args.argv]
        return subprocess.run(command, env=dict(os.environ, KERAS_BACKEND="tensorflow")).returncode
    labels = _zeroshot_labels(args)
    if labels is not None:
        from keras_vit.zeroshot.export import export_zeroshot

        export_zeroshot(args.model, args.out, labels, templates=_templates(args), format=args.format,
                        samples=args.samples, max_samples=min(args.max_samples, 1000), overwrite=args.overwrite)
        return None
    from keras_vit.dense.predict import is_dense_file

    if is_dense_file(args.model):
        from keras_vit.dense.export import export_dense

        export_dense(args.model, args.out, format=args.format, quantize=args.quantize, samples=args.samples,
                     representative=args.representative, max_samples=args.max_samples,
                     calibration_images=args.calibration_images, overwrite=args.overwrite)
        return None
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
        image_sizes=args.image_size,
        resize=not args.no_resize,
        antialias=args.antialias,
        outputs=args.outputs.split(","),
    )


def _predict(args):
    from keras_vit.dense.predict import is_dense_file

    if is_dense_file(args.model):  # a depth or segmentation model: a picture per image into --out (a folder)
        from keras_vit.dense.predict import predict_dense_files

        predict_dense_files(args.model, args.images, args.out or "predictions")
        return
    from keras_vit.export import load_classifier
    from keras_vit.report import image_paths, predict_files

    if args.top < 1:
        raise ValueError(f"--top must be a positive int, got {args.top}.")
    labels = _zeroshot_labels(args)
    if labels is not None:  # zero-shot: the labels' text embeddings are the classes
        from keras_vit.zeroshot.export import zeroshot_classifier
        from keras_vit.zeroshot.model import load_image_text

        classifier = zeroshot_classifier(load_image_text(args.model), labels, _templates(args))
    else:
        classifier = load_classifier(args.model)
    # files named one by one are checked before any prediction; a folder's unreadable files are skipped
    paths, labels = image_paths(args.images, classifier.class_names)
    predict_files(classifier, paths, out=args.out, top=args.top, names=labels)


def _fewshot(args):
    from keras_vit.fewshot import fewshot_evaluate, format_table, write_json
    from keras_vit.loading import load_model

    model = load_model(args.model)
    result = fewshot_evaluate(model, args.data, shots=args.shots, seeds=args.seeds, holdout=args.holdout,
                              test_images=args.test_images, batch_size=args.batch_size)
    result["model"] = args.model
    print(format_table(result), flush=True)
    if args.out:
        write_json(result, args.out)
        print(args.out)


def _size(text):
    parts = [int(p) for p in text.lower().replace("x", ",").split(",") if p]
    if len(parts) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected SIZE or H,W, got {text!r}")
    return parts[0] if len(parts) == 1 else tuple(parts)


def _add_train(commands):
    from keras_vit._recipes import shipped_recipes

    p = commands.add_parser(
        "train",
        help="run a training recipe with model.fit (" + ", ".join(shipped_recipes()) + ", or a recipe file)",
        description="Runs RECIPE (a shipped recipe's name, or a Python file whose get_config() returns the "
        "experiment) with model.fit under the tf.distribute strategy that fits the machine (TPU, several workers "
        "via TF_CONFIG, several GPUs, or one device). Writes model.keras, best.keras, metrics.json, history.csv "
        "and TensorBoard logs to --model-dir. Rerunning the same command after a crash or Ctrl-C resumes from "
        "the last finished epoch; a finished model dir is kept unless --overwrite.",
    )
    p.add_argument("recipe", help="a shipped recipe (" + ", ".join(shipped_recipes()) + ") or a file, "
                   "e.g. recipes/digits.py")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key, e.g. --set epochs=5 --set model.hidden_size=256 "
                   "--set data=DATA/ (a folder of train/<class>/ and test/<class>/ images) (repeatable)")
    p.add_argument("--model-dir", default=None, help="output folder (default runs/<recipe name>)")
    p.add_argument("--backup-dir", default=None,
                   help="where preemption backups go (default <model-dir>/backup); one folder per worker inside")
    p.add_argument("--overwrite", action="store_true",
                   help="train again into a model dir that holds a finished run (its files are replaced)")
    p.set_defaults(func=_train)


def _add_convert(commands):
    p = commands.add_parser(
        "convert",
        help="official .npz, timm or Hugging Face checkpoint -> a ready-to-fine-tune .keras model",
        description="Reads a checkpoint and tells its format (official .npz, a timm or transformers hub folder with "
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
    p.add_argument("--resample", default=None,
                   choices=("official", "bilinear", "bicubic", "torch_bicubic_antialias", "torch_bicubic"),
                   help="position embedding resampling (default: the source's own: official for .npz, "
                        "torch_bicubic_antialias for timm, torch_bicubic for transformers)")
    p.add_argument("--out", required=True, help="output .keras file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.set_defaults(func=_convert, check=_check_convert)


def _add_visualize(commands):
    p = commands.add_parser(
        "visualize",
        help="the paper's analysis figures (Figures 6-7) for a model, with their data",
        description="Reads a keras-vit .keras model or a checkpoint (an official .npz, a timm / transformers hub "
        "folder or name) and image files, and writes attention_rollout, "
        "position_similarity, embedding_filters and attention_distance (.png with .npz and .json beside each) into "
        "--out. The attention figures need --image; images are resized to the model's input size. Runs under any "
        "Keras backend.",
    )
    p.add_argument("model", help="a .keras file, a hub folder / .safetensors (timm, transformers), an official "
                   ".npz or a hub name")
    p.add_argument("--image", nargs="+", action="extend", metavar="IMG",
                   help="image files (JPEG, PNG, GIF, BMP, WebP) for the rollout maps and attention distances")
    p.add_argument("--out", required=True, help="output folder (created; figures in it are replaced)")
    p.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default 16)")
    p.add_argument("--components", type=int, default=12,
                   help="principal components of the embedding filters to draw (default 12)")
    p.set_defaults(func=_visualize, check=_check_visualize)


def _image_size(text):
    """'224' -> (224, 224); '384x256' -> (384, 256)."""
    parts = text.lower().split("x")
    try:
        size = tuple(int(p) for p in parts)
    except ValueError:
        size = ()
    if len(size) == 1:
        size = size * 2
    if len(size) != 2 or min(size) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size such as 224 or 384x256")
    return size


def _add_zeroshot_arguments(p):
    p.add_argument("--labels", default=None, metavar="A,B,C",
                   help="zero-shot: MODEL is a CLIP / SigLIP folder or hub name (transformers' CLIPModel, "
                   "SiglipModel) and these comma-separated labels are the classes")
    p.add_argument("--labels-file", default=None, metavar="FILE", help="zero-shot: the labels, one per line")
    p.add_argument("--templates", default=None, metavar="T1|T2",
                   help="zero-shot prompt templates, '|'-separated, each with one {} for the label ('a photo of a "
                   "{}.|art of the {}.'), or 'clip' for CLIP's seven ImageNet templates; default '{}'")


def _add_export(commands):
    p = commands.add_parser(
        "export",
        help=".keras model -> SavedModel, TFLite or ONNX, preprocessing inside, checked against Keras",
        description="Reads a keras-vit .keras model (written under any Keras backend; the export runs under "
        "TensorFlow, in a process of its own when KERAS_BACKEND is another), an official .npz, a timm / "
        "transformers hub folder or a hub name, and exports it with a serving_default "
        "signature taking uint8 RGB images (N, H, W, 3) and returning logits and probabilities (with --outputs "
        "features, the pooled features); the SavedModel "
        "resizes any H, W inside, the TFLite model takes the model's size. The export is compared with Keras on "
        "sample images (max |logit diff|, top-1 agreement, accuracy when the samples are labelled) before it is "
        "renamed into place; class names and the parity report are written to OUT.json.",
    )
    p.add_argument("model", help="a .keras file, a hub folder / .safetensors (timm, transformers), an official "
                   ".npz or a hub name")
    p.add_argument("--format", choices=("saved_model", "tflite", "onnx"), default=None,
                   help="default: from --out: tflite for .tflite, onnx for .onnx, saved_model for a name without an "
                   "extension; other extensions are refused (onnx: tf2onnx + onnxruntime, pip install "
                   "'keras-vit[onnx]')")
    p.add_argument("--quantize", choices=("float16", "dynamic", "int8", "a16w8"), default=None,
                   help="TFLite: float16 weights, dynamic-range int8 weights, full int8, or a16w8 (int16 "
                   "activations, int8 weights; LayerNorm float); int8 and a16w8 calibrate on --representative")
    p.add_argument("--outputs", choices=("logits,probabilities", "probabilities", "features"),
                   default="logits,probabilities", metavar="OUTPUTS",
                   help="logits,probabilities (the default: both), probabilities (a single-output classifier, as "
                   "MediaPipe's ImageClassifier and the TFLite Task Library expect) or features (a feature "
                   "extractor: the pooled features, the head's input; headless backbones such as DINOv2)")
    p.add_argument("--representative", metavar="IMAGES", default=None,
                   help="calibration images for int8: a folder of images or of class folders, or a data source "
                   "as in recipes (a .tgz of train/<class>/ images, a folder DATA/train/<class>/, digits, "
                   "tfds:NAME; its train split); default: the model's own training data, from the metrics.json "
                   "of `keras-vit train` beside MODEL")
    p.add_argument("--calibration-images", type=int, default=200, metavar="N",
                   help="calibrate on at most N images (default 200)")
    p.add_argument("--samples", metavar="IMAGES", default=None,
                   help="images for the parity check, as --representative (a data source's test split); class "
                   "folders and data sources add accuracy. Default: the model's own test data; without it, "
                   "export stops and asks for --samples")
    p.add_argument("--max-samples", type=int, default=1000, metavar="N",
                   help="check parity on at most N samples, a random subset (default 1000)")
    p.add_argument("--attention", action="store_true", help="also output every block's attention maps")
    p.add_argument("--image-size", action="append", type=_image_size, metavar="SIZE",
                   help="a size the export serves, 224 or 384x256, repeatable: TFLite, one signature each "
                   "(serving_default the first, serving_HxW the others); with --no-resize, the sizes the "
                   "SavedModel is checked at")
    p.add_argument("--no-resize", action="store_true",
                   help="SavedModel: no resize in the graph; each batch runs at its own size (multiples of the "
                   "patch size), position embeddings resampled in the graph")
    p.add_argument("--antialias", action="store_true",
                   help="SavedModel: antialias the resize where it shrinks (TensorFlow's ScaleAndTranslate op; "
                   "TensorFlow only: tf2onnx, tensorflowjs_converter and coremltools refuse it)")
    p.add_argument("--out", required=True,
                   help="what to write: a SavedModel folder (a name without an extension), a .tflite or a .onnx file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    _add_zeroshot_arguments(p)
    p.set_defaults(func=_export, check=_check_export)


def _add_predict(commands):
    p = commands.add_parser(
        "predict",
        help="top classes of images or folders of them, from a .keras model or a SavedModel, .tflite or .onnx "
        "export",
        description="Reads a .keras model (run by the Keras backend, any of them) or an export of one: a SavedModel "
        "folder, a .tflite file (LiteRT) or a .onnx file (ONNX Runtime, pip install 'keras-vit[onnx]'), and prints, "
        "a line per image, the --top classes with their probabilities (and writes them to --out as CSV). Images of "
        "any format and size are turned upright (EXIF) and become the model's view (its crop and resize); a "
        "folder's unreadable files are skipped and named in one line.",
    )
    p.add_argument("model", help="a .keras file, a SavedModel folder, a .tflite or a .onnx file")
    p.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG, PNG, GIF, BMP or WebP files, or folders of "
                   "them (searched recursively; class subfolders named as the model's classes add accuracy)")
    p.add_argument("--top", type=int, default=5, help="classes to print per image (default 5)")
    p.add_argument("--out", default=None, metavar="CSV", help="also write the predictions here (CSV: path, "
                   "classes and probabilities, label and correct for class subfolders); for a dense model (depth, "
                   "segmentation) the folder its pictures go to (default predictions/): <name>_mask.png, a palette "
                   "PNG of class indices, or <name>_depth.png and .npy")
    _add_zeroshot_arguments(p)
    p.set_defaults(func=_predict, check=_check_predict)


def _add_fewshot(commands):
    p = commands.add_parser(
        "fewshot",
        help="few-shot linear accuracy of a model's frozen representation (the paper's Section 4)",
        description="Reads a model (a .keras file, a timm / transformers hub folder or .safetensors file, or an "
        "official .npz) and a data source, and fits a least-squares linear classifier on the pre-logits features of "
        "N training images "
        "per class (the regularizer chosen on --holdout further images per class), and prints its test "
        "accuracy per shot count: mean, spread, min and max over --seeds draws.",
    )
    p.add_argument("model", help="a .keras file, a hub folder / .safetensors (timm, transformers), an official "
                   ".npz or a hub name")
    p.add_argument("--data", required=True,
                   help="digits, a folder or .tgz of train/<class>/ and test/<class>/ images, or tfds:NAME (a "
                   "tensorflow-datasets set: prepared, or downloaded once)")
    p.add_argument("--shots", type=int, nargs="+", default=[1, 5, 10, 25], metavar="N",
                   help="images per class (default 1 5 10 25)")
    p.add_argument("--seeds", type=int, default=3, help="draws per shot count (default 3)")
    p.add_argument("--holdout", type=int, default=10,
                   help="further training images per class for choosing the regularizer (default 10)")
    p.add_argument("--test-images", type=int, default=None, help="evaluate on this many test images (default all)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--out", help="also write the result as JSON here")
    p.set_defaults(func=_fewshot, check=_check_fewshot)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description="The Vision Transformer for Keras 3: convert official checkpoints, train recipes, "
        "export, predict and visualize.",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_train, _add_convert, _add_visualize, _add_export, _add_predict, _add_fewshot):
        add(commands)
    return parser


def _version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"keras-vit {version('keras-vit')}"
    except PackageNotFoundError:
        import keras_vit

        return f"keras-vit {keras_vit.__version__} (not installed)"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (main() may run many times in one process)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _console_logging():
    """The "keras_vit" log lines on stderr, one per stage of long work; the package itself adds
    only a NullHandler, so this is the command line's choice, not every importer's."""
    log = logging.getLogger("keras_vit")
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("keras_vit: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    # The root logger may have a handler of its own (absl installs one); print each line once.
    log.propagate = False


def _quiet_tensorflow():
    """Imports TensorFlow without its start-up lines (oneDNN and CUDA notes, "failed call to cuInit"),
    unless the user set TF_CPP_MIN_LOG_LEVEL: TensorFlow writes them through absl before it reads
    that level, so stderr is parked in a file while TensorFlow loads and finds its devices; the
    file is shown only when that fails. absl's Python warnings go from ERROR up."""
    import tempfile

    import keras_vit

    logging.getLogger("absl").setLevel(logging.ERROR)
    if keras_vit._USER_TF_LOG_LEVEL is not None or "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as parked:
        os.dup2(parked.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()  # CUDA initializes (and complains) here, not at import
        except BaseException:
            os.dup2(saved, 2)
            parked.seek(0)
            sys.stderr.write(parked.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _console_logging()
    try:
        if getattr(args, "check", None):
            args.check(args)  # paths and names, before TensorFlow loads
        _quiet_tensorflow()
        code = args.func(args)
    except KeyboardInterrupt as e:
        # training.train says where a rerun resumes; elsewhere nothing was written
        print(f"keras-vit {args.command}: {e.args[0] if e.args else 'interrupted'}", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        print(f"keras-vit {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0  # a subcommand's exit status (export under another backend)


def _one_line(error):
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, ImportError) and getattr(error, "name", None):
        extra = {"matplotlib": "viz", "ai_edge_litert": "export", "scipy": "test"}.get(error.name.split(".")[0])
        if extra and "pip install" not in text:
            text += f' (pip install "keras-vit[{extra}]")'
    return text


if __name__ == "__main__":
    sys.exit(main())
