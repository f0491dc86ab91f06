"""float32 against mixed_bfloat16 on this machine, and what precision="auto" picks here.

    python benchmarks/precision.py                  # about 3-5 min on 2 cores
    python benchmarks/precision.py --rounds 9

ViT-B/16@224 batch-8 inference and a ViT-S/16@224 batch-32 AdamW training step, both
precisions built in one process and timed in turns (one step each per round), so a shared
machine's load hits both alike; medians, the per-round ratio's median and range, the CPU's
model name and bfloat16 flags, and the load average before and after. Prints one JSON object.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.training import BF16_CPU_FLAGS, _cpu_flags, resolve_precision  # noqa: E402

PRECISIONS = ("float32", "mixed_bfloat16")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def _steps(task, batch):
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, 224, 224, 3)).astype("float32")
    labels = rng.integers(0, 1000, (batch,))
    steps = {}
    for precision in PRECISIONS:
        keras.mixed_precision.set_global_policy(precision)
        keras.utils.set_random_seed(0)
        if task == "inference":
            model = keras_vit.create_model("B/16")
            fn = tf.function(lambda x, m=model: m(x, training=False))

            def step(fn=fn):
                fn(images).numpy()
        else:
            model = keras_vit.create_model("S/16")
            model.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

            def step(model=model):
                float(model.train_on_batch(images, labels, return_dict=True)["loss"])
        step()  # traces
        steps[precision] = step
    keras.mixed_precision.set_global_policy("float32")
    return steps


def measure(task, batch, rounds):
    steps = _steps(task, batch)
    seconds = {p: [] for p in PRECISIONS}
    for _ in range(rounds):
        for precision, step in steps.items():
            t0 = time.perf_counter()
            step()
            seconds[precision].append(time.perf_counter() - t0)
    ratios = [f / b for f, b in zip(seconds["float32"], seconds["mixed_bfloat16"])]
    return {
        "batch": batch,
        "img_per_s": {p: round(batch / statistics.median(s), 2) for p, s in seconds.items()},
        "bf16_speedup_median": round(statistics.median(ratios), 2),
        "bf16_speedup_range": [round(min(ratios), 2), round(max(ratios), 2)],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    flags = _cpu_flags("/proc/cpuinfo") or set()
    result = {
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "bf16_flags": [f for f in BF16_CPU_FLAGS if f in flags],
        "auto": resolve_precision("auto"),
        "load_before": os.getloadavg(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }
    result["inference ViT-B/16@224"] = measure("inference", 8, args.rounds)
    result["training ViT-S/16@224 AdamW"] = measure("training", 32, args.rounds)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
