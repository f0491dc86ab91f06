"""Dense checkpoints against transformers: max |keras - transformers| / max(1, max |transformers|) per case,
size and Keras backend, for the DPT and Depth Anything fixtures (tests/data/dense, written by transformers
5.25.0 with the outputs it computed).

    python benchmarks/dense_parity.py                     # tensorflow, jax and torch (a process each)
    python benchmarks/dense_parity.py --backends jax

Writes benchmarks/dense_parity.{json,md}; docs/dense.md quotes the table. Not a pass/fail test: tests/test_dense.py
holds the tolerance.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DENSE = ROOT / "tests" / "data" / "dense"


def measure():
    """{case: {size: relative error}} under this process's backend."""
    import numpy as np

    import keras_vit

    out = {}
    for case in sorted(json.loads((DENSE / "cases.json").read_text())["cases"]):
        model = keras_vit.from_pretrained(DENSE / case)
        with np.load(DENSE / f"{case}.io.npz") as io:
            key = "depth" if "depth" in io else "logits"
            for suffix in ("", "_alt"):
                images, ref = io["images" + suffix], io[key + suffix]
                got = np.asarray(model.predict(images, verbose=0))
                size = f"{images.shape[1]}x{images.shape[2]}"
                out.setdefault(case, {})[size] = float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax", "torch"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure()))
        return
    results = {}
    for backend in args.backends:
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        run = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True,
                             check=True, cwd=ROOT)
        results[backend] = json.loads(run.stdout.strip().splitlines()[-1])
        print(backend, results[backend], flush=True)
    (ROOT / "benchmarks" / "dense_parity.json").write_text(json.dumps(results, indent=1) + "\n")
    cases = sorted(next(iter(results.values())))
    lines = ["| case | size | " + " | ".join(results) + " |", "|---|---|" + "---|" * len(results)]
    for case in cases:
        for size in results[next(iter(results))][case]:
            lines.append(f"| `{case}` | {size} | " + " | ".join(f"{results[b][case][size]:.1e}" for b in results) + " |")
    (ROOT / "benchmarks" / "dense_parity.md").write_text(
        "# Dense checkpoints against transformers\n\n`python benchmarks/dense_parity.py`; max |keras - transformers| / "
        "max(1, max |transformers|), float32, tolerance 1e-4.\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
