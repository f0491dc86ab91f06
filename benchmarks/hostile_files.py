"""Checkpoints that lie: each refused by name, in how long and at what peak memory (issue 50).

Each case edits a copy of a tiny real checkpoint (tests/data: timm's, transformers', an official .npz,
a .keras file keras-vit saved) the way a mistaken or hostile upload would, and loads it in a fresh
process (`from_pretrained`, `load_keras_model`), which must end in a ValueError naming the field or
entry within the limits: the wall time and the peak RSS of that process (os.wait4) are recorded.

    python benchmarks/hostile_files.py            # writes benchmarks/hostile_files.{json,md}
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
TIMM = os.path.join(DATA, "timm", "timm_vit_token")
LIMIT_S, LIMIT_MB = 30, 2048

_LOAD = """
import sys, keras_vit
from keras_vit.checkpoints import load_keras_model
path = sys.argv[1]
try:
    load_keras_model(path) if path.endswith(".keras") else keras_vit.from_pretrained(path)
except (ValueError, TypeError) as e:
    print("REFUSED", "ValueError" if isinstance(e, ValueError) else "TypeError", str(e)[:400])
else:
    print("LOADED")
"""


def _timm(tmp, name, edit=None, raw=None, tensors=None):
    folder = os.path.join(tmp, name)
    shutil.copytree(TIMM, folder)
    path = os.path.join(folder, "config.json")
    if edit:
        with open(path) as f:
            config = json.load(f)
        edit(config)
        with open(path, "w") as f:
            json.dump(config, f)
    if raw is not None:
        with open(path, "w") as f:
            f.write(raw)
    if tensors:
        tensors(os.path.join(folder, "model.safetensors"))
    return folder


def _args(**change):
    return lambda config: config["model_args"].update(change)


def _lying_length(path):  # the header length field claims 1 TB
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", 2**40))


def _lying_shape(path):  # an entry claims (65536, 65536) over its real bytes
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["pos_embed"]["shape"] = [65536, 65536]
    new = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(new)) + new + data[8 + n:])


def _keras(tmp):
    """A .keras file keras-vit saved, its config.json edited to claim 65536 wide x 64 deep."""
    import keras_vit

    good = os.path.join(tmp, "good.keras")
    keras_vit.VisionTransformer(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                                classes=7).save(good)
    bad = os.path.join(tmp, "wide.keras")
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            content = src.read(item)
            if item.filename == "config.json":
                config = json.loads(content)
                config["config"].update(hidden_size=65536, num_layers=64, mlp_dim=65536, num_heads=64)
                content = json.dumps(config).encode()
            dst.writestr(item, content)
    return bad


def _npz(tmp):
    """An official .npz whose patch embedding's .npy header claims (8, 8, 3, 65536) over its real bytes."""
    src = os.path.join(DATA, "official", "vit_token_prelogits.npz")
    bad = os.path.join(tmp, "wide.npz")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            content = zin.read(item)
            if item.filename == "embedding/kernel.npy":
                content = content.replace(b"(8, 8, 3, 32), }   ", b"(8, 8, 3, 65536), }")  # the padding keeps its length
            zout.writestr(item.filename, content)
    return bad


def cases(tmp):
    nested = '{"architecture": "vit_tiny_patch16_224", "model_args": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return [
        ("config embed_dim 65536 x depth 64 (timm)", _timm(tmp, "wide_deep", _args(embed_dim=65536, depth=64))),
        ("config embed_dim 65536 (timm)", _timm(tmp, "wide", _args(embed_dim=65536))),
        ("config depth 64 (timm)", _timm(tmp, "deep", _args(depth=64))),
        ("config img_size 65536 (timm)", _timm(tmp, "big_image", _args(img_size=[65536, 65536]))),
        ('config depth "2" (a string)', _timm(tmp, "string", _args(depth="2"))),
        ("config depth -3", _timm(tmp, "negative", _args(depth=-3))),
        ("config.json nested 100,000 deep", _timm(tmp, "nested", raw=nested)),
        ("safetensors header length 2^40", _timm(tmp, "length", tensors=_lying_length)),
        ("safetensors entry shape (65536, 65536)", _timm(tmp, "shape", tensors=_lying_shape)),
        (".keras config 65536 wide x 64 deep", _keras(tmp)),
        (".npz header (8, 8, 3, 65536)", _npz(tmp)),
    ]


def run_case(path):
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _LOAD, path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), cwd=ROOT)
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "exit": proc.returncode, "result": out.strip().splitlines()[-1] if out.strip() else "(nothing)"}


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in cases(tmp):
            row = {"case": name, **run_case(path)}
            row["ok"] = (row["result"].startswith("REFUSED ValueError") and row["seconds"] < LIMIT_S
                         and row["peak_rss_mb"] < LIMIT_MB)
            rows.append(row)
            print(f"{name}: {row['seconds']} s, {row['peak_rss_mb']} MB, {row['result'][:200]}", flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "hostile_files.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = [f"# Checkpoints that lie (issue 50): each must be refused by name in < {LIMIT_S} s and < {LIMIT_MB} MB",
             "", "Measured by `python benchmarks/hostile_files.py` (fresh process per case; peak RSS includes "
             "importing TensorFlow and Keras).", "", "| case | seconds | peak RSS (MB) | refused with |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['seconds']} | {r['peak_rss_mb']} | {r['result'][:160].replace('|', '/')} |")
    with open(os.path.join(here, "hostile_files.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
