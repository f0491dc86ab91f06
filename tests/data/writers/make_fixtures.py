"""What timm and transformers compute from the folders keras-vit's `save_pretrained` writes.

For every zoo case (tests/data/zoo/cases.json): keras-vit loads the fixture, writes it back to its own
format (timm or transformers) in a temporary folder, and the library itself loads that folder
(timm.create_model(architecture, pretrained=True, pretrained_cfg_overlay=dict(pretrained_cfg, file=...),
**model_args), as timm loads a hub folder: with the config's pretrained_cfg, whose num_classes keeps the
head, where the entrypoint's default cfg (1000 classes) would drop it;
transformers: the config's architecture class .from_pretrained(folder)) and computes the outputs
cases.json compares on the case's images (float32, eval mode, CPU). They are stored in
`library_outputs.npz` as "CASE/OUTPUT"; tests/test_formats.py compares keras-vit's outputs with them
without torch.

Run from the repository root with keras-vit's venv; the library side runs in a side venv (never a
dependency of keras-vit):

    python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch==2.13.0 timm transformers safetensors
    PYTHONPATH=. /work/venv/bin/python tests/data/writers/make_fixtures.py [--torch-python /work/venv-torch/bin/python]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ZOO = HERE.parent / "zoo"

LIBRARY_SIDE = r'''
import json, sys
import numpy as np, torch
folder, source, compare, images, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
x = torch.from_numpy(np.load(images)).permute(0, 3, 1, 2).contiguous()
config = json.load(open(folder + "/config.json"))
res = {}
with torch.no_grad():
    if source == "timm":
        import timm
        model = timm.create_model(config["architecture"], pretrained=True,
                                  pretrained_cfg_overlay=dict(config["pretrained_cfg"],
                                                              file=folder + "/model.safetensors"),
                                  **config["model_args"]).eval()
        tokens = model.forward_features(x)
        res = {"logits": model(x), "pooled": model.forward_head(tokens, pre_logits=True), "tokens": tokens}
    else:
        import transformers
        cls = getattr(transformers, config["architectures"][0])
        model = cls.from_pretrained(folder).eval()
        o = model(pixel_values=x)
        base = getattr(model, model.base_model_prefix, model) if hasattr(o, "logits") or hasattr(o, "image_embeds") else model
        b = base(pixel_values=x) if base is not model else o
        res = {"pooled": b.pooler_output, "tokens": b.last_hidden_state}
        if hasattr(o, "logits"):
            res["logits"] = o.logits
        elif hasattr(o, "image_embeds"):
            res["logits"] = o.image_embeds
np.savez(out, **{k: v.numpy() for k, v in res.items() if k in compare and v is not None})
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch-python", default="/work/venv-torch/bin/python")
    a = parser.parse_args()
    import keras_vit

    versions = json.loads(subprocess.run(
        [a.torch_python, "-c", "import json, torch, timm, transformers; print(json.dumps(dict(torch=torch.__version__,"
         " timm=timm.__version__, transformers=transformers.__version__)))"],
        check=True, capture_output=True, text=True).stdout)
    cases = json.loads((ZOO / "cases.json").read_text())["cases"]
    outputs, report = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in sorted(cases.items()):
            source = case["source"]
            model = keras_vit.from_pretrained(ZOO / name)
            folder = keras_vit.save_pretrained(model, os.path.join(tmp, name), format=source)
            with np.load(ZOO / f"{name}.io.npz") as io:
                images = io["images"]
            np.save(os.path.join(tmp, "images.npy"), images)
            result = os.path.join(tmp, "out.npz")
            subprocess.run([a.torch_python, "-c", LIBRARY_SIDE, folder, source, json.dumps(case["compare"]),
                            os.path.join(tmp, "images.npy"), result], check=True)
            with np.load(result) as lib:
                for key in lib.files:
                    outputs[f"{name}/{key}"] = lib[key].astype(np.float32)
            report[name] = sorted(f"{name}/{k}" for k in case["compare"])
            print(name, source, "ok", flush=True)
    np.savez_compressed(HERE / "library_outputs.npz", **outputs)
    (HERE / "library_outputs.json").write_text(json.dumps({"versions": versions, "cases": report}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
