"""Makes the BEiT-at-another-size fixtures: what timm and transformers compute from the zoo's tiny BEiT
checkpoints (tests/data/zoo/timm_beit, hf_beit_cls: 32 px, patch 8, a 4x4 grid) at other image sizes,
where each library resizes the relative position bias table by its own method.

Run in a side venv (never a dependency of keras-vit), from the repository root:

    python3 -m venv /work/venv-torch-beit && /work/venv-torch-beit/bin/pip install torch==2.13.0 timm \
        transformers safetensors
    /work/venv-torch-beit/bin/python tests/data/beit_sizes/make_fixtures.py

Made with torch 2.13.0+cpu, timm 1.0.31, transformers 5.25.0 (VERSIONS checks them at run time: a
different version stops the script). Deterministic: fixed seed, float32, eval mode.

- `timm_beit.npz`: for each size HxW in SIZES, `images_HxW` (N, H, W, 3) float32 NHWC, already
  normalized (mean = std = 0.5), and `logits_HxW`, `pooled_HxW` of
  `timm.create_model("local-dir:tests/data/zoo/timm_beit", pretrained=True, img_size=(H, W))`: the model
  built at the new size loading the checkpoint, whose checkpoint_filter_fn resizes every block's
  relative_position_bias_table (timm.layers.resize_rel_pos_bias_table).
- `hf_beit_cls.npz`: the same keys from `BeitForImageClassification.from_pretrained(
  "tests/data/zoo/hf_beit_cls")` called with `interpolate_pos_encoding=True` at the new size
  (BeitRelativePositionBias resizes the table, bilinear); `pooled_HxW` is `beit.pooler_output`.
"""

import pathlib
import sys

import numpy as np
import torch
import torch.library

HERE = pathlib.Path(__file__).resolve().parent
ZOO = HERE.parent / "zoo"
VERSIONS = {"torch": "2.13.0+cpu", "timm": "1.0.31", "transformers": "5.25.0"}
SIZES = [(48, 48), (24, 24), (32, 48)]  # grids 6x6 (grown), 3x3 (shrunk), 4x6 (not square)
N = 2


def _import_torchvision_without_its_kernels():
    """timm imports torchvision, whose PyPI wheel's C kernels do not load with the CPU torch wheel
    ("operator torchvision::nms does not exist"); nothing here uses them, so their fake-kernel
    registration is skipped while torchvision imports."""
    register_fake = torch.library.register_fake

    def skip_torchvision(op, *args, **kwargs):
        if isinstance(op, str) and op.startswith("torchvision::"):
            return lambda fn: fn
        return register_fake(op, *args, **kwargs)

    torch.library.register_fake = skip_torchvision
    try:
        import torchvision  # noqa: F401
    finally:
        torch.library.register_fake = register_fake


def main():
    _import_torchvision_without_its_kernels()
    import timm
    import transformers

    found = {"torch": torch.__version__, "timm": timm.__version__, "transformers": transformers.__version__}
    if found != VERSIONS:
        sys.exit(f"versions {found}, expected {VERSIONS}")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    images = {}
    for h, w in SIZES:
        pixels = rng.integers(0, 256, size=(N, h, w, 3), dtype=np.uint8)
        images[f"{h}x{w}"] = ((pixels / 255.0 - 0.5) / 0.5).astype(np.float32)

    timm_out, hf_out = {}, {}
    hf = transformers.BeitForImageClassification.from_pretrained(str(ZOO / "hf_beit_cls")).eval()
    for (h, w), (size, x) in zip(SIZES, images.items()):
        nchw = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
        model = timm.create_model(f"local-dir:{ZOO / 'timm_beit'}", pretrained=True, img_size=(h, w)).eval()
        with torch.no_grad():
            features = model.forward_features(nchw)
            timm_out[f"pooled_{size}"] = model.forward_head(features, pre_logits=True).numpy()
            timm_out[f"logits_{size}"] = model(nchw).numpy()
            out = hf(pixel_values=nchw, interpolate_pos_encoding=True, output_hidden_states=False)
            pooled = hf.beit(pixel_values=nchw, interpolate_pos_encoding=True).pooler_output
        hf_out[f"logits_{size}"] = out.logits.numpy()
        hf_out[f"pooled_{size}"] = pooled.numpy()
        table = model.blocks[0].attn.relative_position_bias_table
        print(f"{size}: timm table {tuple(table.shape)}, logits {timm_out[f'logits_{size}'].shape}")
    for name, out in (("timm_beit", timm_out), ("hf_beit_cls", hf_out)):
        np.savez(HERE / f"{name}.npz", **{f"images_{k}": v for k, v in images.items()}, **out)
        print(f"wrote {name}.npz")


if __name__ == "__main__":
    main()
