"""keras-vit side by side with keras-hub and timm: one command, writes benchmarks/RESULTS.md.

    python benchmarks/run.py                       # everything (about 20-30 min on 2 cores)
    python benchmarks/run.py --parts inference training --rounds 5
    python benchmarks/run.py --parts memory tflite agreement profile
    python benchmarks/run.py --parts inference --baseline REV --peers --out /tmp/bench/RESULTS.md  # a change's cost

Run it with keras-vit's own Python, from the repository root. Parts:
  inference   ViT-B/16@224, batch 8, forward: keras-vit, keras-vit before the speed work
              (`--baseline`, a git revision), keras-hub and timm, float32 and bfloat16
  training    ViT-S/16@224, batch 32, AdamW train step, the same implementations
  tflite      ViT-Ti/16 converted to LiteRT (float32, float16, dynamic int8), 2 threads
              (XNNPACK), latency per image beside the Keras model's
  memory      peak RSS of fresh processes: build ViT-B/16 and ViT-H/14, and build + load an
              official-layout checkpoint (written from random weights into a temp dir)
  agreement   top-1 agreement of mixed_bfloat16 with float32 on real images
  profile     per-piece timing of one B/16 encoder block (benchmarks/profile_block.py)
  resolution  a dynamic ViT-B/16 (any size, position embeddings resampled in the graph)
              against models built at 224 and 384 (benchmarks/resolution.py)
  backends    ViT-B/16@224, batch 8, float32 inference of keras-vit under KERAS_BACKEND
              tensorflow, jax (jit) and torch, one process each (needs `.[jax,torch]`)

The peers live in their own virtual environments under `--venvs` (default
../bench-venvs beside the repository, or $KERAS_VIT_BENCH_VENVS), created when absent: keras-hub pulls a
full `tensorflow` and tensorflow-text (about 2.4 GB), timm pulls torch (about 5.5 GB with
its CUDA libraries); a few minutes each from a nearby index. They are reused when present.

Timings interleave the implementations: every implementation keeps its models built in
its own process and the processes take turns, one step each, for `--rounds` rounds; the
tables report medians, so the ratios within one run compare like with like even on a
shared, noisy machine. Nothing here is a pass/fail test.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PARTS = ("inference", "training", "tflite", "memory", "agreement", "profile", "resolution", "backends")
DEFAULT_BASELINE = "e2b7463"  # main when the speed work began (before the fused block)
PEERS = {
    "keras-hub": ["keras-hub"],
    "timm": ["torch==2.14.1", "timm"],
}


def log(*args):
    print(f"[{time.strftime('%H:%M:%S')}]", *args, file=sys.stderr, flush=True)


def load_avg():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


# -- environments ----------------------------------------------------------------------------

def peer_python(venvs, name):
    """The Python of a peer's virtual environment, created (and pip-installed) when absent."""
    env = os.path.join(venvs, name)
    python = os.path.join(env, "bin", "python")
    if os.path.exists(os.path.join(env, ".bench-ready")):
        return python
    log(f"creating {env} and installing {' '.join(PEERS[name])} (once; several GB)")
    os.makedirs(venvs, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", env], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PEERS[name]], check=True)
    with open(os.path.join(env, ".bench-ready"), "w") as f:
        f.write(" ".join(PEERS[name]) + "\n")
    return python


def baseline_tree(rev, workdir):
    """keras_vit as it was at `rev`, extracted into workdir (None when git cannot)."""
    if not rev:
        return None
    dest = os.path.join(workdir, "baseline")
    os.makedirs(dest, exist_ok=True)
    try:
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "keras_vit"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        log(f"no baseline: cannot extract keras_vit at {rev}: {e}")
        return None
    return dest


# -- interleaved timing ----------------------------------------------------------------------

class Worker:
    def __init__(self, label, python, args, pythonpath=None, backend=None):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if backend:
            env["KERAS_BACKEND"] = backend
        env.pop("PYTHONPATH", None)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        if label == "timm":
            # PyTorch's OpenMP threads spin while they wait; on a CPU shared with other jobs a
            # spinning thread loses its time slice and every parallel region waits for it:
            # passive waiting doubled timm's speed here (2.2 -> 4.5 img/s, B/16 bfloat16).
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.label = label
        self.proc = subprocess.Popen([python, os.path.join(HERE, "worker.py"), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=HERE)
        self.ready = None

    def read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"{self.label}: the worker stopped (exit {self.proc.wait()})")

    def wait_ready(self):
        self.ready = self.read()
        return self.ready

    def time(self, precision, n=1):
        self.proc.stdin.write(f"time {precision} {n}\n")
        self.proc.stdin.flush()
        return self.read()["times"]

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.proc.wait(timeout=120)


def interleaved(specs, task, variant, batch, rounds, backends=None):
    """specs: [(label, python, pythonpath)] -> {label: {precision: [seconds, ...]}}, info.
    backends: {label: KERAS_BACKEND} for keras-vit under other Keras backends."""
    workers = []
    info = {}
    try:
        for label, python, pythonpath, precisions in specs:
            log(f"{task} {variant}: building {label} ({', '.join(precisions)}), load {load_avg()}")
            w = Worker(label, python, ["--impl", label.split(" ")[0], "--task", task, "--variant", variant,
                                       "--batch", str(batch), "--precisions", *precisions], pythonpath,
                       backend=(backends or {}).get(label))
            info[label] = w.wait_ready()
            info[label]["precisions"] = precisions
            workers.append(w)
        times = {w.label: {p: [] for p in info[w.label]["precisions"]} for w in workers}
        slots = [(w, p) for w in workers for p in info[w.label]["precisions"]]
        loads = [os.getloadavg()[0]]
        for r in range(rounds):
            order = slots[r % len(slots):] + slots[:r % len(slots)]  # rotate who goes first
            for w, p in order:
                times[w.label][p] += w.time(p)
            loads.append(os.getloadavg()[0])
            log(f"{task} round {r + 1}/{rounds} done, load {loads[-1]:.2f}")
    finally:
        for w in workers:
            w.close()
    return times, info, loads


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def speed_part(args, task, variant, batch, rounds, workdir):
    py = sys.executable
    specs = [("keras-vit", py, ROOT, ["float32", "bfloat16"])]
    base = baseline_tree(args.baseline, workdir)
    if base:
        specs.append(("keras-vit before", py, base, ["float32", "bfloat16"]))
    if "keras-hub" in args.peers:
        specs.append(("keras-hub", peer_python(args.venvs, "keras-hub"), None, ["float32", "bfloat16"]))
    if "timm" in args.peers and (task == "infer" or args.train_timm):
        specs.append(("timm", peer_python(args.venvs, "timm"), None, ["float32", "bfloat16"]))
    if task == "infer":
        times, info, loads = interleaved(specs, task, variant, batch, rounds)
    else:  # one group per precision: a training process holds about 3 GB per model (batch 32)
        times, info, loads = {}, {}, []
        for precision in ("float32", "bfloat16"):
            t, i, l = interleaved([s[:3] + ([precision],) for s in specs], task, variant, batch, rounds)
            for label in t:
                times.setdefault(label, {}).update(t[label])
                info.setdefault(label, {"ready": {}, "versions": i[label]["versions"]})
                info[label]["ready"].update(i[label]["ready"])
            loads += l
    rates = {label: {p: batch / median(ts) for p, ts in per.items()} for label, per in times.items()}
    return {"variant": variant, "batch": batch, "rounds": rounds, "task": task, "img_per_s": rates,
            "times_s": times, "info": info, "load_during": [round(v, 2) for v in loads],
            "baseline": args.baseline if base else None}


def backends_part(args):
    """ViT-B/16 batch-8 float32 inference of keras-vit under each Keras backend, one process each,
    interleaved: tensorflow (tf.function), jax (jitted predict step), torch (eager)."""
    backends = {f"keras-vit {b}": b for b in ("tensorflow", "jax", "torch")}
    specs = [(label, sys.executable, ROOT, ["float32"]) for label in backends]
    times, info, loads = interleaved(specs, "infer", "B/16", 8, args.rounds, backends=backends)
    return {"variant": "B/16", "batch": 8, "rounds": args.rounds, "times_s": times, "info": info,
            "img_per_s": {label: 8 / median(t["float32"]) for label, t in times.items()},
            "load_during": [round(v, 2) for v in loads]}


def backends_table(part):
    rates = part["img_per_s"]
    tf_rate = rates["keras-vit tensorflow"]
    rows = [f"| ViT-{part['variant']}@224, batch {part['batch']}, float32 inference | img/s | vs tensorflow | "
            "first step (s) | version |", "|---|---:|---:|---:|---|"]
    for label, rate in rates.items():
        backend = label.split(" ")[1]
        ready = part["info"][label]
        version = ready["versions"].get(backend, ready["versions"].get("tensorflow"))
        rows.append(f"| {backend} | {rate:.2f} | {rate / tf_rate:.2f}x | "
                    f"{ready['ready']['float32']['first_step_s']:.1f} | {version} |")
    rows += ["", f"Medians of {part['rounds']} interleaved rounds; 1-minute load average during the rounds: "
             f"{', '.join(str(v) for v in part['load_during'])}. tensorflow: `tf.function` without XLA (as in "
             "Inference above); jax: `predict_on_batch`, a jitted XLA step; torch: `predict_on_batch`, eager."]
    return "\n".join(rows)


# -- the parts that run in keras-vit's own environment ---------------------------------------

def run_script(name, *script_args, timeout=3600):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, os.path.join(HERE, name), *script_args]
    log("running", " ".join(cmd[1:]), f"(load {load_avg()})")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise RuntimeError(f"{name} failed with exit {out.returncode}")
    return out.stdout


def json_part(name, *script_args):
    stdout = run_script(name, *script_args)
    return json.loads(stdout.strip().splitlines()[-1])


# -- the report ------------------------------------------------------------------------------

TARGETS = {
    ("infer", "float32"): [("keras-hub", 1.0), ("timm", 1.3)],
    ("infer", "bfloat16"): [("timm", 1.0), ("keras-hub", 1.25)],
    ("train", "float32"): [("keras-hub", 1.0)],
    ("train", "bfloat16"): [("keras-hub", 1.0)],
}
PRECISION_NAMES = {"float32": "float32", "bfloat16": "bfloat16 (Keras mixed_bfloat16; timm autocast)"}


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def speed_table(part):
    task = part["task"]
    rates = part["img_per_s"]
    labels = list(rates)
    what = "inference, forward pass" if task == "infer" else "training step (AdamW)"
    head = (f"| ViT-{part['variant']}@224, batch {part['batch']}, {what}: img/s | "
            + " | ".join(labels) + " | keras-vit vs before | keras-vit vs keras-hub | keras-vit vs timm | target | met |")
    rows = [head, "|---|" + "---:|" * (len(labels) + 3) + "---|---|"]
    for precision in ("float32", "bfloat16"):
        ours = rates["keras-vit"].get(precision)
        ratio = {peer: ours / rates[peer][precision] if peer in rates and precision in rates[peer] else None
                 for peer in ("keras-vit before", "keras-hub", "timm")}
        goals = TARGETS[(task, precision)]
        # a peer left out (--peers) is not timed: its target is not judged rather than failed
        met = "; ".join(f"{peer}: " + ("not timed" if ratio.get(peer) is None else "yes" if ratio[peer] >= need
                                       else "**no**") for peer, need in goals)
        target = ", ".join(f">= {need:.2f}x {peer}" for peer, need in goals)
        rows.append(f"| {PRECISION_NAMES[precision]} | "
                    + " | ".join(fmt(rates[label].get(precision)) for label in labels)
                    + f" | {fmt(ratio['keras-vit before'])}x | "
                    + (f"{fmt(ratio['keras-hub'])}x" if ratio["keras-hub"] else "-") + " | "
                    + (f"{fmt(ratio['timm'])}x" if ratio["timm"] else "-")
                    + f" | {target} | {met} |")
    times = part["times_s"]
    paired = []
    for p in ("float32", "bfloat16"):
        ours = times["keras-vit"][p]
        for peer in ("keras-vit before", "keras-hub", "timm"):
            if peer in times and p in times[peer]:
                per_round = [b / a for a, b in zip(ours, times[peer][p])]
                paired.append(f"{p} vs {peer} {median(per_round):.2f}x "
                              f"({min(per_round):.2f}-{max(per_round):.2f})")
    rows.append("")
    rows.append(f"Medians of {part['rounds']} interleaved rounds; 1-minute load average during the rounds: "
                f"{', '.join(str(v) for v in part['load_during'])}. The same ratios taken round by round "
                "(each implementation's step beside keras-vit's in the same round), median and range: "
                + "; ".join(paired) + ".")
    return "\n".join(rows)


def render(results, command):
    env = results.get("environment", {})
    out = ["# keras-vit benchmarks", "",
           f"Written by `{command}` on {results.get('date', '?')}. The machine, the versions and every raw "
           "timing are in `results.json` beside this file. Timings interleave the implementations (medians "
           "of alternating rounds), so the ratios are comparable within a run even while other jobs share "
           "the CPU; absolute img/s depend on the load printed beside them.", ""]
    commands = results.get("commands", {})
    if len(set(commands.values())) > 1:
        out += ["Parts and the command that last wrote them: " + "; ".join(
            f"{part}: `{cmd}`" for part, cmd in commands.items()) + ".", ""]
    out += ["## Machine and versions", ""]
    for k, v in env.items():
        out.append(f"- {k}: {v}")
    out.append("")
    if "inference" in results:
        out += ["## Inference", "", speed_table(results["inference"]), ""]
    if "agreement" in results:
        a = results["agreement"]
        out += ["## bfloat16 against float32 (same weights)", "",
                "| model | images | top-1 agreement | top-5 overlap | max abs logit diff | float32 top-1 accuracy | bfloat16 top-1 accuracy |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for row in a["rows"]:
            out.append(f"| {row['model']} | {row['images']} | {row['top1_agreement'] * 100:.1f}% | "
                       f"{row['top5_overlap'] * 100:.1f}% | {row['max_abs_logit_diff']:.3g} | "
                       f"{fmt(row.get('acc_float32'), 3)} | {fmt(row.get('acc_bfloat16'), 3)} |")
        out += ["", a.get("note", ""), ""]
    if "training" in results:
        out += ["## Training", "", speed_table(results["training"]), ""]
    if "tflite" in results:
        t = results["tflite"]
        out += [f"## TFLite (LiteRT): ViT-Ti/16@224, batch 1, {t['threads']} threads, XNNPACK", "",
                "| path | file MB | ms / image (median) | max abs logit diff vs Keras float32 | top-1 agreement |",
                "|---|---:|---:|---:|---:|"]
        for row in t["rows"]:
            out.append(f"| {row['path']} | {fmt(row.get('mb'), 1)} | {fmt(row['ms'], 1)} | "
                       f"{fmt(row.get('max_diff'), 4)} | {fmt(row.get('agree'), 2)} |")
        out += ["", t.get("note", ""), ""]
    if "memory" in results:
        m = results["memory"]
        out += ["## Memory: peak RSS of a fresh process", "",
                "| model | parameters | parameter bytes (float32) | import only | build | build + load official .npz | load overhead over build | checkpoint file |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for row in m["rows"]:
            out.append(f"| {row['variant']} | {row['params']:,} | {row['param_bytes'] / 2**20:,.0f} MiB | "
                       f"{row['import_rss'] / 2**20:,.0f} MiB | {row['build_rss'] / 2**20:,.0f} MiB | "
                       f"{row['load_rss'] / 2**20:,.0f} MiB | {(row['load_rss'] - row['build_rss']) / 2**20:,.0f} MiB "
                       f"({(row['load_rss'] - row['build_rss']) / row['param_bytes'] * 100:.0f}% of the parameters) | "
                       f"{row['file_bytes'] / 2**20:,.0f} MiB |")
        out += ["", m.get("note", ""), ""]
    if "profile" in results:
        out += ["## Where the time goes (one B/16 encoder block, batch 8)", "",
                "From `benchmarks/profile_block.py`; the analysis is in `benchmarks/PROFILE.md`.", "",
                results["profile"], ""]
    if "resolution" in results:
        r = results["resolution"]
        out += [f"## Any resolution: dynamic ViT-B/16 against models built per size (batch {r['batch']}, float32)", "",
                "| image size | built for the size: img/s | dynamic (stored at 224): img/s | dynamic vs built | "
                "per-round range | in-graph resampling | max abs logit diff |",
                "|---|---:|---:|---:|---|---|---:|"]
        for row in r["rows"]:
            lo, mid, hi = row["ratio_rounds"]
            cost = "none (stored grid)" if row["size"] == 224 else f"{(1 / row['ratio'] - 1) * 100:+.1f}% of the pass"
            out.append(f"| {row['size']} | {row['static_img_s']:.2f} | {row['dynamic_img_s']:.2f} | "
                       f"{row['ratio']:.3f}x | {lo:.3f}-{hi:.3f} (median {mid:.3f}) | {cost} | "
                       f"{row['max_abs_logit_diff']:.2g} |")
        out += ["", f"{r['rounds']} interleaved rounds, load {r['load']}. The dynamic model's pass is traced "
                "for any size, as `model.fit` over mixed sizes and a `--no-resize` SavedModel run it; targets: "
                "resampling <= 2% of the pass at 384, >= 0.99x at 224.", ""]
    if "backends" in results:
        out += ["## Keras backends", "", backends_table(results["backends"]), ""]
    if results.get("notes"):
        out += ["## Closing notes", "", results["notes"], ""]
    return "\n".join(out)


def environment(args):
    import numpy

    env = {"machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, "
                      f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM",
           "python": platform.python_version(), "numpy": numpy.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        flags = next(line for line in info.splitlines() if line.startswith("flags")).split()
        env["cpu"] = model + " (" + ", ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
                                               if f in flags) + ")"
    except (OSError, StopIteration):
        pass
    env["load average at start"] = load_avg()
    return env


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--parts", nargs="*", default=list(PARTS), choices=PARTS,
                   help="parts to run (none: only rewrite RESULTS.md from results.json)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds for inference (default 7)")
    p.add_argument("--train-rounds", type=int, default=4, help="interleaved rounds for training (default 4)")
    p.add_argument("--train-timm", action="store_true", help="also time timm's training step")
    p.add_argument("--venvs", default=os.environ.get("KERAS_VIT_BENCH_VENVS",
                                                       os.path.join(os.path.dirname(ROOT), "bench-venvs")))
    p.add_argument("--baseline", default=DEFAULT_BASELINE,
                   help="git revision timed as 'keras-vit before' ('' to skip)")
    p.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS),
                   help="peers timed beside keras-vit (none: keras-vit against --baseline alone, no peer venvs)")
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    args = p.parse_args(argv)
    command = "python benchmarks/run.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(
        sys.argv[1:] if argv is None else argv))

    raw = os.path.join(os.path.dirname(os.path.abspath(args.out)), "results.json")
    results = {}
    if os.path.exists(raw):  # a partial run keeps the other parts of the last one
        with open(raw) as f:
            results = json.load(f)
    if args.parts:  # otherwise only RESULTS.md is rewritten, from the last runs
        results["environment"] = {**results.get("environment", {}), **environment(args)}
        results["date"] = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    results.setdefault("commands", {})
    workdir = tempfile.mkdtemp(prefix="keras-vit-bench-")
    try:
        for part in args.parts:
            t0 = time.perf_counter()
            try:
                run_part(part, args, results, workdir)
            except Exception as e:  # noqa: BLE001 - one failed part must not lose the others
                log(f"{part} FAILED: {e!r}")
                results.setdefault("failed", {})[part] = repr(e)
                continue
            results.get("failed", {}).pop(part, None)
            results["commands"][part] = command
            log(f"{part} done in {time.perf_counter() - t0:.0f} s")
            versions = {}
            for key in ("inference", "training"):
                for label, info in results.get(key, {}).get("info", {}).items():
                    versions[label] = ", ".join(f"{k} {v}" for k, v in info["versions"].items() if "path" not in k)
            results["environment"].update({f"versions ({k})": v for k, v in versions.items()})
            with open(raw, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    notes_file = os.path.join(HERE, "NOTES.md")
    if os.path.exists(notes_file):
        with open(notes_file) as f:
            results["notes"] = f.read().strip()
    with open(args.out, "w") as f:
        f.write(render(results, command if args.parts else results.get("commands", {}).get("inference", command))
                + "\n")
    log(f"wrote {args.out}")
    return 1 if results.get("failed") else 0


def run_part(part, args, results, workdir):
    if part == "inference":
        results[part] = speed_part(args, "infer", "B/16", 8, args.rounds, workdir)
    elif part == "training":
        results[part] = speed_part(args, "train", "S/16", 32, args.train_rounds, workdir)
    elif part == "tflite":
        results[part] = json_part("tflite_bench.py")
    elif part == "memory":
        results[part] = json_part("memory.py")
    elif part == "agreement":
        results[part] = json_part("agreement.py")
    elif part == "profile":
        results[part] = run_script("profile_block.py", "--rounds", "7").strip()
    elif part == "resolution":
        results[part] = json_part("resolution.py", "--rounds", str(args.rounds))
    elif part == "backends":
        results[part] = backends_part(args)


if __name__ == "__main__":
    sys.exit(main())
