"""Official parity: max |logit difference| against the official Flax logits, per fixture.

    python benchmarks/parity.py            # float32; the fixtures in tests/data/official
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from keras_vit.checkpoints import from_official_config, load_official_npz  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "official"


def main():
    worst = 0.0
    for meta_path in sorted(FIXTURES.glob("*.json")):
        case = meta_path.stem
        meta = json.loads(meta_path.read_text())
        model = from_official_config(meta["config"], image_size=meta["image_size"])
        report = load_official_npz(model, FIXTURES / f"{case}.npz")
        io = np.load(FIXTURES / f"{case}.io.npz")
        diff = float(np.abs(model.predict(io["images"], verbose=0) - io["logits"]).max())
        worst = max(worst, diff)
        print(f"{case:24s} {report['layout']:8s} layout  max |logit diff| {diff:.2e}  "
              f"(logits up to {np.abs(io['logits']).max():.2f})")
    print(f"worst {worst:.2e} (tolerance 1e-5)")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
