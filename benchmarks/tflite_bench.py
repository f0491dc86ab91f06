"""ViT-Ti/16 as LiteRT (TFLite) files, timed beside the Keras model, batch 1.

    python benchmarks/tflite_bench.py [--threads 2] [--rounds 15]

Converts a float32 ViT-Ti/16 (random weights, seed 0, a random head) with
`model.export(..., format="litert")`, builtin ops only, three ways: float32, float16
weights, and dynamic-range int8 (int8 weights, activations quantized on the fly). Each file
runs in `ai_edge_litert`'s Interpreter with `--threads` threads (XNNPACK, its default CPU
delegate); the Keras model runs as a tf.function, float32 and mixed_bfloat16. All paths are
timed in interleaved rounds on one real photograph and compared with Keras float32 on the
real photographs. Prints one JSON line.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import images as photos_lib  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args(argv)
    import keras
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    import keras_vit

    keras.utils.set_random_seed(0)
    model = keras_vit.ViTTi16(classifier_activation=None)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape).astype("float32"))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    bf16 = type(model).from_config(model.get_config())
    keras.mixed_precision.set_global_policy("float32")
    bf16.set_weights(model.get_weights())

    pics = photos_lib.photos()
    x_all = (photos_lib.to_input([im for _, im in pics], 224) if pics else
        np.random.default_rng(0).uniform(-1, 1, (4, 224, 224, 3)).astype("float32"))
    x_all = x_all.astype("float32")
    x1 = x_all[:1]
    reference = model.predict(x_all, verbose=0)

    tmp = tempfile.mkdtemp(prefix="keras-vit-tflite-")
    builtins = [tf.lite.OpsSet.TFLITE_BUILTINS]
    spec = [tf.TensorSpec((1, 224, 224, 3), tf.float32)]
    conversions = {
        "LiteRT float32": dict(target_spec={"supported_ops": builtins}),
        "LiteRT float16 weights": dict(optimizations=[tf.lite.Optimize.DEFAULT],
                                       target_spec={"supported_ops": builtins, "supported_types": [tf.float16]}),
        "LiteRT dynamic int8": dict(optimizations=[tf.lite.Optimize.DEFAULT], target_spec={"supported_ops": builtins}),
    }
    runners, sizes, outputs = {}, {}, {}
    try:
        for name, kwargs in conversions.items():
            path = os.path.join(tmp, name.replace(" ", "_") + ".tflite")
            model.export(path, format="litert", input_signature=spec, verbose=False, **kwargs)
            sizes[name] = os.path.getsize(path) / 2**20
            interp = Interpreter(model_path=path, num_threads=args.threads)
            interp.allocate_tensors()
            inp = interp.get_input_details()[0]["index"]
            out = interp.get_output_details()[0]["index"]

            def run(x, interp=interp, inp=inp, out=out):
                interp.set_tensor(inp, x)
                interp.invoke()
                return interp.get_tensor(out)

            runners[name] = run
            outputs[name] = np.concatenate([run(x_all[i:i + 1]) for i in range(len(x_all))])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    f32 = tf.function(lambda x: model(x, training=False), jit_compile=False)
    fbf = tf.function(lambda x: bf16(x, training=False), jit_compile=False)
    runners["Keras float32 (tf.function)"] = lambda x: f32(x).numpy()
    runners["Keras mixed_bfloat16 (tf.function)"] = lambda x: fbf(x).numpy()
    outputs["Keras float32 (tf.function)"] = reference
    outputs["Keras mixed_bfloat16 (tf.function)"] = bf16.predict(x_all, verbose=0)
    times = {k: [] for k in runners}
    for run in runners.values():
        run(x1)
        run(x1)
    for _ in range(args.rounds):
        for name, run in runners.items():
            t0 = time.perf_counter()
            run(x1)
            times[name].append(time.perf_counter() - t0)
    rows = []
    for name in runners:
        o = outputs[name].astype("float64")
        rows.append({"path": name, "mb": sizes.get(name), "ms": 1e3 * float(np.median(times[name])),
                     "max_diff": float(np.abs(o - reference).max()),
                     "agree": float(np.mean(o.argmax(-1) == reference.argmax(-1)))})
    note = (f"ViT-Ti/16 ({model.count_params():,} parameters, 5.7M; float32 file "
            f"{sizes['LiteRT float32']:.1f} MB), random weights with a random head; the logit differences and "
            f"top-1 agreement are over {len(x_all)} real photographs against Keras float32. Medians of "
            f"{args.rounds} interleaved single-image runs; the Keras paths run on TensorFlow's own thread pool "
            f"(both cores).")
    print(json.dumps({"rows": rows, "threads": args.threads, "note": note}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
