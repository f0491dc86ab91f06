"""The machine's matmul rate at the shape of ViT-B/16's MLP (batch 8: 1576 tokens x 768 -> 3072).

    python benchmarks/matmul_peak.py [--rounds 60]

One `tf.matmul` in a tf.function, float32 and bfloat16: the ceiling a whole model's GFLOP/s
(img/s x 35.2 GFLOP for B/16 at 224) is measured against. Prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

TOKENS, WIDTH, MLP = 8 * 197, 768, 3072


def rate(dtype, rounds):
    import tensorflow as tf

    @tf.function
    def matmul(a, b):
        return tf.matmul(a, b)

    a = tf.cast(tf.random.normal((TOKENS, WIDTH)), dtype)
    b = tf.cast(tf.random.normal((WIDTH, MLP)), dtype)
    for _ in range(10):  # warm-up: tracing, oneDNN primitive creation, clocks
        matmul(a, b).numpy()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        matmul(a, b).numpy()
        times.append(time.perf_counter() - t)
    times.sort()
    flop = 2 * TOKENS * WIDTH * MLP
    return {"median_gflops": flop / times[len(times) // 2] / 1e9, "best_gflops": flop / times[0] / 1e9}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=60)
    args = p.parse_args(argv)
    print(json.dumps({"shape": [TOKENS, WIDTH, MLP], "load": os.getloadavg(),
                      **{d: rate(d, args.rounds) for d in ("float32", "bfloat16")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
