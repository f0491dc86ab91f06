"""What a full training run of each recipe costs on this machine, before spending hours on it.

A recipe's wall and CPU time depend on the CPU far more than on anything in the recipe: the
hybrid CIFAR-10 recipe ran 394 ms a batch on an AVX512-BF16 CPU (mixed bfloat16, XLA) and
1.6 s on an AVX2-only one (float32). So "the hybrid fits the ViT recipe's budget" is a claim
about one machine, and this script checks it on yours: it builds every recipe's model as
`keras-vit train` does (the precision "auto" picks here, the recipe's optimizer, loss and
XLA setting), then the models take turns, one training step each on random images of the
recipe's size and batch, for --rounds rounds, and the medians give each recipe's cost per
image and, scaled by its epochs, per full run. The first recipe is the budget the others are
compared with ("x budget", and how many epochs of each fit in it).

    python benchmarks/recipe_cost.py                                # cifar10 against cifar10_hybrid
    python benchmarks/recipe_cost.py --jit both --rounds 8 --out benchmarks/recipe_cost.md

Counted: the training steps only. Not counted: the input pipeline (decoding, augmentation),
the per-epoch validation and the final test evaluation, a few percent of a CIFAR-10 run.
Nothing here is a pass/fail test.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

DEFAULT_TRAIN_EXAMPLES = 47_500  # CIFAR-10's 50,000 less the recipes' 5% validation split


def build_entry(recipe, jit_compile, train_examples=DEFAULT_TRAIN_EXAMPLES, classes=10):
    """The recipe's model, compiled as `keras-vit train` compiles it, and a batch to train on."""
    import keras
    import numpy as np

    from keras_vit import training

    config = training.load_recipe(recipe)
    if jit_compile is not None:
        config["jit_compile"] = jit_compile
    policy, _ = training.resolve_precision(config["precision"])
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(config["seed"])
        model = training.build_model(config, [str(i) for i in range(classes)])
        steps = config["steps_per_epoch"] or max(train_examples // config["batch_size"], 1)
        training.compile_for_training(model, config, steps)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(0)
    size, batch = config["image_size"], config["batch_size"]
    images = rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    labels = np.eye(classes, dtype="float32")[rng.integers(0, classes, batch)]
    name = os.path.splitext(os.path.basename(config["recipe"]))[0]
    return {"recipe": name, "config": config, "precision": policy, "jit_compile": bool(config["jit_compile"]),
            "model": model, "batch": (images, labels), "wall": [], "cpu": []}


def step(entry):
    start, cpu_start = time.perf_counter(), time.process_time()
    entry["model"].train_on_batch(*entry["batch"])
    entry["wall"].append(time.perf_counter() - start)
    entry["cpu"].append(time.process_time() - cpu_start)


def summarize(entries, train_examples):
    """Medians per step, then per image and per full run; the first entry is the budget."""
    rows = []
    for entry in entries:
        config = entry["config"]
        batch, epochs = config["batch_size"], config["epochs"]
        wall, cpu = statistics.median(entry["wall"]), statistics.median(entry["cpu"])
        steps = epochs * (config["steps_per_epoch"] or max(train_examples // batch, 1))
        rows.append({"recipe": entry["recipe"], "precision": entry["precision"], "jit_compile": entry["jit_compile"],
                     "batch": batch, "epochs": epochs, "parameters": entry["model"].count_params(),
                     "step_s": wall, "step_cpu_s": cpu, "rounds": len(entry["wall"]),
                     "cpu_ms_per_image": 1000 * cpu / batch, "run_wall_min": steps * wall / 60,
                     "run_cpu_min": steps * cpu / 60})
    budget = rows[0]["run_cpu_min"]
    for row in rows:
        row["x_budget"] = row["run_cpu_min"] / budget
        row["epochs_in_budget"] = row["epochs"] / row["x_budget"]
    return rows


def table(rows, train_examples):
    first = rows[0]
    lines = [f"Budget: `{first['recipe']}` ({first['epochs']} epochs, XLA {'on' if first['jit_compile'] else 'off'}); "
             f"{train_examples:,} training images an epoch; medians of {first['rounds']} steps per row.", "",
             "| recipe | precision | XLA | batch | step s | CPU ms / image | epochs | full run, wall min "
             "| full run, CPU min | x budget | epochs in budget |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['recipe']} | {r['precision']} | {'on' if r['jit_compile'] else 'off'} | {r['batch']} | "
                     f"{r['step_s']:.3f} | {r['cpu_ms_per_image']:.1f} | {r['epochs']} | {r['run_wall_min']:.0f} | "
                     f"{r['run_cpu_min']:.0f} | {r['x_budget']:.2f} | {r['epochs_in_budget']:.1f} |")
    return "\n".join(lines) + "\n"


def machine():
    """The CPU's model name and the flags that decide the precision (and so most of the cost)."""
    from keras_vit.training import _cpu_flags

    name = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    flags = _cpu_flags("/proc/cpuinfo") or set()
    shown = sorted(f for f in flags if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16"))
    return f"{name}, {os.cpu_count()} cores, flags {', '.join(shown) or 'unknown'}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=["cifar10", "cifar10_hybrid"],
                   help="recipe names or files; the first is the budget")
    p.add_argument("--jit", choices=["recipe", "both"], default="recipe",
                   help="'recipe': each recipe's own jit_compile; 'both': every recipe with XLA off and on")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per model (tracing, XLA compilation)")
    p.add_argument("--train-examples", type=int, default=DEFAULT_TRAIN_EXAMPLES)
    p.add_argument("--out", help="also write the table (.md) and the rows (.json beside it)")
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    settings = [None] if args.jit == "recipe" else [False, True]
    entries = []
    for recipe in args.recipes:
        for jit in settings:
            entry = build_entry(recipe, jit, args.train_examples)
            print(f"built {entry['recipe']} ({entry['precision']}, XLA {'on' if entry['jit_compile'] else 'off'}, "
                  f"{entry['model'].count_params():,} parameters); {args.warmup} warm-up steps", flush=True)
            for _ in range(args.warmup):
                step(entry)
            entry["wall"].clear()
            entry["cpu"].clear()
            entries.append(entry)
    progress = keras.utils.Progbar(args.rounds, unit_name="round")
    for i in range(args.rounds):
        for entry in entries:  # taking turns: a busy spell of the machine slows every recipe alike
            step(entry)
        progress.update(i + 1)
    rows = summarize(entries, args.train_examples)
    cpu = machine()
    text = f"Machine: {cpu}; keras {keras.__version__}, backend {keras.backend.backend()}.\n\n"
    text += table(rows, args.train_examples)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Recipe cost\n\n" + text + f"\nReproduce: `python benchmarks/recipe_cost.py "
                    f"{' '.join(argv if argv is not None else sys.argv[1:])}`\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"machine": cpu, "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
