"""What DeiT distillation costs per training step, against the plain ViT recipe, in the same run.

Times `fit` steps on the real CIFAR-10 pipeline (RandAugment included) for: the ViT recipe
(recipes/cifar10.py), the DeiT recipe (recipes/cifar10_deit.py: the same student with a
distillation token, plus the frozen teacher's forward pass on every batch) with the teacher in the
training precision, and with the teacher in float32. Rounds interleave the variants, so load from
other jobs on the machine falls on all of them alike; the ratios are what to read. Also: the
teacher's forward pass alone, and its test accuracy in each precision (do its labels survive
bfloat16?).

    python benchmarks/distill_cost.py --data ../shared/data/cifar10-jpeg.tgz --steps 50 --rounds 3 --skip 10

Other students, timed beside them as DeiT variants (`--student NAME=OVERRIDES`, repeatable; the
overrides are `--set` ones, space-separated), e.g. what a wider student costs a step:

    python benchmarks/distill_cost.py --student "w192=model.hidden_size=192 model.mlp_dim=384 model.num_heads=3" \
        --steps 30 --rounds 2 --no-teacher-alone
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import keras
import numpy as np

from keras_vit import data as data_lib
from keras_vit import distill, training


def _variants(args):
    vit = training.apply_overrides(training.load_recipe(os.path.join(ROOT, "recipes", "cifar10.py")),
                                   [f"data={args.data}"])
    deit = training.apply_overrides(training.load_recipe(os.path.join(ROOT, "recipes", "cifar10_deit.py")),
                                    [f"data={args.data}", f"teacher={args.teacher}"])
    deit32 = training.apply_overrides(deit, ["distill.teacher_precision=float32"])
    variants = {"vit": vit, "deit (teacher in training precision)": deit, "deit (teacher float32)": deit32}
    for spec in args.student:
        name, sep, overrides = spec.partition("=")
        if not sep or not name or not overrides.strip():
            raise SystemExit(f"--student {spec!r}: expected NAME=KEY=VALUE [KEY=VALUE ...], e.g. "
                             "'w192=model.hidden_size=192 model.mlp_dim=384'")
        variants[f"deit {name} (teacher float32)"] = training.apply_overrides(deit32, overrides.split())
    return variants


class _StepClock(keras.callbacks.Callback):
    """Wall and CPU seconds per step over the steps after the first `skip` (the iterator's start:
    a new shuffle buffer fills, the pipeline's threads spin up)."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.seen, self.start = skip, 0, None

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.skip:
            self.start = (time.time(), time.process_time(), self.seen)
        self.end = (time.time(), time.process_time(), self.seen)

    def per_step(self):
        steps = self.end[2] - self.start[2]
        return (self.end[0] - self.start[0]) / steps, (self.end[1] - self.start[1]) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "cifar10-jpeg.tgz"))
    parser.add_argument("--teacher", default=os.path.join(ROOT, "saved_models", "vit_cifar10_hybrid", "model.keras"))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per variant per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip", type=int, default=10, help="untimed steps at the start of each round")
    parser.add_argument("--student", action="append", default=[], metavar="NAME=OVERRIDES",
                        help="another DeiT student, e.g. 'w192=model.hidden_size=192 model.mlp_dim=384' (repeatable)")
    parser.add_argument("--no-teacher-alone", action="store_true",
                        help="skip timing the teacher alone and its test accuracy in each precision")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    variants = _variants(args)
    policy, why = training.resolve_precision("auto")
    keras.mixed_precision.set_global_policy(policy)
    splits = data_lib.load_data(args.data, ("train", "test"))
    train, test = splits["train"], splits["test"]
    first = variants["vit"]
    aug = dict(crop=first["crop"], pad=first["pad"], flip=first["flip"], randaugment=first["randaugment"])
    ds = data_lib.make_dataset(train, 32, first["batch_size"], training=True, seed=0, repeat=True, **aug)

    fits, params = {}, {}
    for name, config in variants.items():
        keras.utils.set_random_seed(0)
        model = training.build_model(config, train.class_names)
        training.compile_for_training(model, config, 390)
        fit_model = training.wrap_for_training(model, config, 390)
        fit_model.fit(ds, epochs=1, steps_per_epoch=5, verbose=0)  # trace and warm up
        fits[name] = fit_model
        params[name] = model.count_params()
        print(f"{name}: {params[name]:,} parameters", flush=True)

    times = {name: [] for name in fits}
    cpu = {name: [] for name in fits}
    for r in range(args.rounds):
        for name, fit_model in fits.items():
            clock = _StepClock(skip=args.skip)
            fit_model.fit(ds, epochs=1, steps_per_epoch=args.skip + args.steps, verbose=0, callbacks=[clock])
            wall, proc = clock.per_step()
            times[name].append(wall)
            cpu[name].append(proc)
            print(f"round {r + 1} {name}: {wall:.3f} s/step, {proc:.3f} CPU s/step", flush=True)

    results = {"precision": policy, "precision_reason": why, "batch_size": first["batch_size"],
               "steps_per_variant": args.steps * args.rounds, "rows": {}}
    base = float(np.median(times["vit"]))
    base_cpu = float(np.median(cpu["vit"]))
    for name in fits:
        results["rows"][name] = {"step_s": float(np.median(times[name])), "cpu_step_s": float(np.median(cpu[name])),
                                 "x_vit_wall": float(np.median(times[name])) / base,
                                 "x_vit_cpu": float(np.median(cpu[name])) / base_cpu,
                                 "rounds_s": times[name], "parameters": params[name]}

    # the teacher alone: its forward pass and its test accuracy in each precision
    test_ds = data_lib.make_dataset(test, 32, 256, training=False)
    batch = next(iter(ds))[0]
    for precision in () if args.no_teacher_alone else ("auto", "float32"):
        teacher = distill.load_teacher(args.teacher, precision=precision)
        logits = teacher.logits_model
        logits(batch, training=False)
        start = time.time()
        for _ in range(5):
            logits(batch, training=False)
        step = (time.time() - start) / 5
        right = total = 0
        for images, labels in test_ds:
            pred = np.asarray(keras.ops.convert_to_numpy(logits(images, training=False))).argmax(-1)
            right += int((pred == np.asarray(labels).argmax(-1)).sum())
            total += len(pred)
        label = policy if precision == "auto" else "float32"
        results[f"teacher_{label}"] = {"forward_s_per_batch": step, "test_accuracy": right / total, "images": total}
        print(f"teacher {label}: {step:.3f} s per forward of {len(batch)}, test accuracy {right / total:.4f} "
              f"on {total}", flush=True)

    print(json.dumps({k: v for k, v in results.items() if k != "rows"}, indent=1))
    for name, row in results["rows"].items():
        print(f"| {name} | {row['step_s']:.3f} | {row['cpu_step_s']:.3f} | {row['x_vit_wall']:.2f} | "
              f"{row['x_vit_cpu']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
