"""Quantized TFLite exports of the shipped CIFAR-10 model against Keras on the 10,000 test images.

    python benchmarks/a16w8.py [--model saved_models/vit_cifar10/model.keras]
                               [--data ../shared/data/cifar10-jpeg.tgz] [--samples 10000] [--out results.json]

Rows, each calibrated on the same 200 training images:
  - a16w8: `export_model(quantize="a16w8")` (ai-edge-quantizer, int16 activations, int8 weights,
    LayerNorm float), its parity report;
  - int8: `export_model(quantize="int8")` (the TFLite converter's full int8), its parity report;
  - int8, LayerNorm float / + attention softmax float: ai-edge-quantizer's static int8 recipe with
    those ops (and the head and final softmax) left in float (what "keeping some ops in higher
    precision" gives for int8; recipes match ops by their output tensor's name);
  - weight-only int8: ai-edge-quantizer's weight_only_wi8_afp32, float activations: what int8
    weights alone cost, the bound for a16w8;
  - a16w8, all ops: the same recipe without LayerNorm kept float.
Prints one JSON line per row: top-1 agreement with Keras, both accuracies, max |logit diff|, size.
The last run's rows are in benchmarks/a16w8.json (2 shared cores: about 30 min).
"""

import argparse
import copy
import json
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def _quantized(float_model, calibration, bits, float_regexes):
    from ai_edge_quantizer import quantizer, recipe

    from keras_vit.tflite_metadata import output_tensor_names

    base = recipe.static_wi8_ai16() if bits == 16 else recipe.static_wi8_ai8()
    entries = list(base)
    # float outputs computed in float (head and final softmax), as export_model's a16w8 keeps them
    outputs = "|".join(re.escape(n) for n in output_tensor_names(float_model))
    for operation, regex in [("OUTPUT", ".*"), ("*", outputs)] + [("*", r) for r in float_regexes]:
        entry = copy.deepcopy(base[0])
        entry.update(regex=regex, operation=operation, algorithm_key="no_quantize")
        entries.append(entry)
    q = quantizer.Quantizer(float_model, entries)
    result = q.calibrate({"serving_default": [{"images": im[None]} for im in calibration]}, num_threads=2)
    content = bytes(q.quantize(result, enable_progress_report=False).quantized_model)
    _check_kept_float(content, float_regexes)
    return content


def _check_kept_float(content, float_regexes):
    """A row named "... float" must have those ops in float: a regex that stops matching the
    quantizer's op scopes (they gained a trailing ';' in 0.10) would quantize them silently."""
    from ai_edge_litert.interpreter import Interpreter

    tensors = Interpreter(model_content=content).get_tensor_details()
    for regex in float_regexes:
        matched = [t for t in tensors if re.search(regex, t["name"])]
        if not any(t["dtype"] == np.float32 for t in matched):
            raise RuntimeError(f"no float32 tensor matches {regex!r} after quantization "
                               f"({len(matched)} matching tensors, none float): the row would be mislabelled")


def _row(name, logits, reference, labels, size, seconds):
    return {"row": name, "samples": len(labels),
            "top1_agreement": float(np.mean(logits.argmax(-1) == reference.argmax(-1))),
            "keras_accuracy": float(np.mean(reference.argmax(-1) == labels)),
            "export_accuracy": float(np.mean(logits.argmax(-1) == labels)),
            "max_abs_logit_diff": float(np.abs(logits - reference).max()), "bytes": size, "seconds": round(seconds, 1)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=os.path.join(ROOT, "saved_models", "vit_cifar10", "model.keras"))
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cifar10-jpeg.tgz"))
    p.add_argument("--samples", type=int, default=10000)
    p.add_argument("--out", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)

    from ai_edge_litert.interpreter import Interpreter

    from keras_vit.data import load_image_set
    from keras_vit.export import _A16W8_FLOAT_OPS, export_model, load_classifier

    reference_model = load_classifier(args.model)
    names = reference_model.class_names
    images, labels, _ = load_image_set(args.data, reference_model.image_size, class_names=names, classes=len(names),
                                       split="test", max_images=args.samples, seed=0)
    calibration, _, _ = load_image_set(args.data, reference_model.image_size, labelled=False, split="train",
                                       max_images=200, seed=1)
    reference = reference_model(images, batch_size=256)["logits"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for quantize in ("a16w8", "int8"):
            start = time.time()
            path = os.path.join(tmp, f"{quantize}.tflite")
            export_model(args.model, path, quantize=quantize, samples=args.data, max_samples=args.samples,
                         representative_images=args.data)
            logits = load_classifier(path)(images, batch_size=256)["logits"]
            rows.append(_row(quantize, logits, reference, labels, os.path.getsize(path), time.time() - start))
            print(json.dumps(rows[-1]), flush=True)
        float_path = os.path.join(tmp, "float.tflite")
        export_model(args.model, float_path, samples=os.path.join(ROOT, "tests", "data", "cifar10_sample"))
        with open(float_path, "rb") as f:
            float_model = f.read()
        norm, more = [_A16W8_FLOAT_OPS], [_A16W8_FLOAT_OPS, r".*/attention[^/]*/Softmax(;|$)"]
        from ai_edge_quantizer import quantizer, recipe

        start = time.time()
        content = bytes(quantizer.Quantizer(float_model, recipe.weight_only_wi8_afp32()).quantize(
            enable_progress_report=False).quantized_model)
        runner = Interpreter(model_content=content).get_signature_runner()
        logits = np.concatenate([runner(images=images[i:i + 256])["logits"] for i in range(0, len(images), 256)])
        rows.append(_row("weight-only int8", logits, reference, labels, len(content), time.time() - start))
        print(json.dumps(rows[-1]), flush=True)
        for name, bits, regexes in [("int8 (ai-edge-quantizer), LayerNorm float", 8, norm),
                                    ("int8 (ai-edge-quantizer), LayerNorm and attention softmax float", 8, more),
                                    ("a16w8, LayerNorm quantized too", 16, [])]:
            start = time.time()
            content = _quantized(float_model, calibration, bits, regexes)
            runner = Interpreter(model_content=content).get_signature_runner()
            logits = np.concatenate([runner(images=images[i:i + 256])["logits"] for i in range(0, len(images), 256)])
            rows.append(_row(name, logits, reference, labels, len(content), time.time() - start))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
