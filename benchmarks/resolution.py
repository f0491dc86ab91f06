"""What a model that takes any resolution costs: dynamic ViT-B/16 against models built per size.

    python benchmarks/resolution.py [--rounds 7] [--batch 8]

One set of ViT-B/16 weights (random, seed 0) in three models: the dynamic model
(`dynamic_image_size=True`, position embeddings stored for 224) and static models built at
224 and at 384 (the 384 one holds the embeddings resampled once, on the host). Each forward
pass is a `tf.function`; the dynamic model's is traced for any size (input signature
(None, None, None, 3)), the way `model.fit` with mixed sizes and a dynamic SavedModel run
it, so at 384 it resamples inside the graph on every call and at 224 takes the no-resampling
branch. The four (model, size) pairs take turns, one step each, for `--rounds` rounds;
medians are reported, with the per-round ratios. Prints one JSON line.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    import keras_vit

    dynamic = keras_vit.create_model("B/16", dynamic_image_size=True)
    rng = np.random.default_rng(0)
    for v in dynamic.weights:
        v.assign(rng.normal(scale=0.02, size=v.shape).astype(v.dtype))
    static = {size: keras_vit.create_model("B/16", image_size=size) for size in (224, 384)}
    for model in static.values():
        keras_vit.posemb.copy_weights(dynamic, model)

    any_size = tf.TensorSpec((None, None, None, 3), tf.float32)
    runs = {("dynamic", size): tf.function(lambda x: dynamic(x, training=False), input_signature=[any_size])
            for size in (224, 384)}
    for size, model in static.items():
        runs[("static", size)] = tf.function(
            lambda x, m=model: m(x, training=False),
            input_signature=[tf.TensorSpec((None, size, size, 3), tf.float32)])
    images = {size: tf.constant(rng.uniform(-1, 1, (args.batch, size, size, 3)).astype("float32"))
              for size in (224, 384)}
    diffs = {}
    for size in (224, 384):  # warm-up (tracing) and agreement
        a = runs[("dynamic", size)](images[size]).numpy()
        b = runs[("static", size)](images[size]).numpy()
        diffs[size] = float(np.abs(a - b).max())
    times = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, fn in runs.items():
            start = time.perf_counter()
            fn(images[key[1]]).numpy()
            times[key].append(time.perf_counter() - start)
    rows = []
    for size in (224, 384):
        dyn, sta = times[("dynamic", size)], times[("static", size)]
        per_round = [s / d for s, d in zip(sta, dyn)]
        rows.append({
            "size": size,
            "static_img_s": args.batch / statistics.median(sta),
            "dynamic_img_s": args.batch / statistics.median(dyn),
            "ratio": statistics.median(sta) / statistics.median(dyn),
            "ratio_rounds": [min(per_round), statistics.median(per_round), max(per_round)],
            "max_abs_logit_diff": diffs[size],
        })
    print(json.dumps({"batch": args.batch, "rounds": args.rounds, "rows": rows,
                      "load": " ".join(f"{v:.2f}" for v in os.getloadavg())}))


if __name__ == "__main__":
    main()
