"""Peak RSS of fresh processes: import, build, and build + load an official-layout checkpoint.

    python benchmarks/memory.py [--variants B/16 H/14]

For each variant a throwaway process builds the model with random weights and writes it
with `keras_vit.save_official_npz` into a temporary folder (ViT-H/14: about 2.5 GB, deleted
afterwards). Then three fresh processes report their peak RSS (`ru_maxrss`): importing
keras-vit (TensorFlow's own footprint), building the model, and building it and loading the
checkpoint with `keras_vit.load_official_npz`. Prints one JSON line.
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def child(mode, variant, path):
    import numpy as np

    import keras_vit

    result = {}
    if mode in ("build", "load", "save"):
        model = keras_vit.create_model(variant)
        result["params"] = int(model.count_params())
        result["param_bytes"] = int(sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.weights))
        if mode == "save":
            keras_vit.save_official_npz(model, path)
            result["file_bytes"] = os.path.getsize(path)
        elif mode == "load":
            report = keras_vit.load_official_npz(model, path)
            result["loaded"] = len(report["loaded"])
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


def run_child(mode, variant, path):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, variant, path],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        sys.stderr.write(out.stderr[-3000:])
        raise RuntimeError(f"memory child {mode} {variant} failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--variants", nargs="+", default=["B/16", "H/14"])
    p.add_argument("--child", nargs=3)
    args = p.parse_args(argv)
    if args.child:
        return child(*args.child)
    rows = []
    imported = run_child("import", "-", "-")["peak_rss"]
    for variant in args.variants:
        tmp = tempfile.mkdtemp(prefix="keras-vit-mem-")
        try:
            path = os.path.join(tmp, "checkpoint.npz")
            saved = run_child("save", variant, path)
            build = run_child("build", variant, path)
            load = run_child("load", variant, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append({"variant": variant, "params": build["params"], "param_bytes": build["param_bytes"],
                     "import_rss": imported, "build_rss": build["peak_rss"], "load_rss": load["peak_rss"],
                     "file_bytes": saved["file_bytes"], "arrays_loaded": load["loaded"]})
    note = ("Peak resident memory (`ru_maxrss`) of a fresh process that imports keras-vit (and so "
            "TensorFlow), builds the model with random weights (float32), and then loads an official-layout "
            ".npz of the same model (written by `save_official_npz`). `load_official_npz` validates every "
            "header and CRC first, then reads and assigns one array at a time, so loading adds about the "
            "largest array plus allocator slack, not a second copy of the model.")
    print(json.dumps({"rows": rows, "note": note}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
