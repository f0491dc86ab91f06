"""Makes torch_reference.npz: PyTorch's own resampling of grids, for tests/test_interpolation.py.

Run in a side venv (never a dependency of keras-vit), from the repository root:

    python -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        timm==1.0.31 transformers==5.24.0
    /work/venv-torch/bin/python tests/data/interpolation/make_reference.py

Made with torch 2.14.1+cu130 (run on the CPU), timm 1.0.31, transformers 5.24.0; the versions are
stored in the file ("versions"). Deterministic: a fixed seed, no randomness inside torch.

What it holds, for the two resampling methods keras_vit.interpolation names after PyTorch:
- "torch_bicubic_antialias": F.interpolate(x, size=..., mode="bicubic", align_corners=False,
  antialias=True), as timm.layers.resample_abs_pos_embed calls it;
- "torch_bicubic": F.interpolate(x, size=..., mode="bicubic", align_corners=False), as
  transformers' interpolate_pos_encoding (ViT, DeiT, DINOv2, CLIP, SigLIP, BEiT) calls it.

Keys (METHOD is "aa" or "plain"):
- `matrix_METHOD_{n_in}_{n_out}` (n_out, n_in) float64 for every n_in, n_out in 1..12: torch's weights,
  read off by resampling the identity (float64 input: torch computes the weights in the input's dtype);
- `grid_{k}` (gh, gw, 3) float64, and `out_METHOD_{f64,f32}_{k}`: torch's resampling of that grid
  to `cases[k]` = (gh, gw, new_gh, new_gw), from float64 and from float32 input;
- `timm_{k}`: timm.layers.resample_abs_pos_embed(posemb, new_size, old_size, num_prefix_tokens=1),
  float32, where posemb = [prefix_{k}, grid_{k} as float32] (1, 1 + gh*gw, 3);
- `hf_vit_{k}` / `hf_dinov2reg_{k}`: transformers' ViTEmbeddings / Dinov2WithRegistersEmbeddings
  .interpolate_pos_encoding at (new_gh * p, new_gw * p) pixels, float32, for the square stored grids
  (transformers assumes one); Dinov2WithRegisters uses antialias=True, the rest plain bicubic.

PyTorch quirk, left out of the cases: on the CPU, an antialiased resize to an output of width 1 whose
height changes gives every output row the weights of row 0 (torch 2.14.1: (4, 1) -> (2, 1) and
(4, 2) -> (2, 1) are off by up to 0.66; bilinear antialias does the same). Widths of 1 that stay 1
while the height is kept, heights of 1, and 1x1 outputs are right and are in the cases.
keras-vit computes the separable resampling as documented, without this quirk.
"""

import pathlib

import numpy as np
import timm
import torch
import torch.nn.functional as F
import transformers
from timm.layers import resample_abs_pos_embed

OUT = pathlib.Path(__file__).with_name("torch_reference.npz")
METHODS = {"aa": True, "plain": False}
CASES = [  # (gh, gw) -> (new_gh, new_gw)
    ((4, 4), (5, 5)), ((4, 4), (3, 3)), ((4, 4), (7, 6)), ((4, 4), (2, 5)), ((6, 4), (3, 9)),
    ((5, 7), (5, 7)), ((5, 7), (8, 3)), ((1, 4), (1, 7)), ((1, 6), (1, 2)), ((1, 1), (3, 2)),
    ((4, 4), (1, 1)), ((3, 3), (1, 4)), ((2, 3), (1, 3)), ((4, 1), (4, 2)), ((14, 14), (24, 24)),
    ((24, 24), (14, 14)), ((16, 16), (7, 11)), ((37, 37), (16, 16)), ((4, 4), (10, 6)),
]


def resize(x, size, antialias):
    """(gh, gw, C) array -> (new_gh, new_gw, C), through torch as NCHW."""
    t = torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)[None]
    out = F.interpolate(t, size=tuple(size), mode="bicubic", align_corners=False, antialias=antialias)
    return out[0].permute(1, 2, 0).numpy()


def matrix(n_in, n_out, antialias):
    """torch's (n_out, n_in) weights: the identity resampled along the height (width 2: see the quirk)."""
    eye = np.repeat(np.eye(n_in)[:, None, :], 2, axis=1)  # (n_in rows, 2 cols, n_in channels)
    return resize(eye, (n_out, 2), antialias)[:, 0, :]


def hf_embeddings(cls, config_cls, grid, dim):
    config = config_cls(hidden_size=dim, num_hidden_layers=1, num_attention_heads=1, intermediate_size=4,
                        image_size=grid * 2, patch_size=2)
    return cls(config).eval()


def main():
    rng = np.random.default_rng(0)
    arrays = {"versions": np.array([f"torch {torch.__version__}", f"timm {timm.__version__}",
                                    f"transformers {transformers.__version__}"]),
              "cases": np.array([old + new for old, new in CASES], dtype=np.int64)}
    for name, aa in METHODS.items():
        for n_in in range(1, 13):
            for n_out in range(1, 13):
                arrays[f"matrix_{name}_{n_in}_{n_out}"] = matrix(n_in, n_out, aa)
    from transformers.models.dinov2_with_registers.modeling_dinov2_with_registers import (
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersEmbeddings,
    )
    from transformers.models.vit.modeling_vit import ViTConfig, ViTEmbeddings

    for k, (old, new) in enumerate(CASES):
        grid = rng.normal(size=old + (3,))
        prefix = rng.normal(size=(1, 1, 3)).astype(np.float32)
        arrays[f"grid_{k}"] = grid
        arrays[f"prefix_{k}"] = prefix
        for name, aa in METHODS.items():
            arrays[f"out_{name}_f64_{k}"] = resize(grid, new, aa)
            arrays[f"out_{name}_f32_{k}"] = resize(grid.astype(np.float32), new, aa)
        posemb = torch.from_numpy(np.concatenate([prefix, grid.reshape(1, -1, 3).astype(np.float32)], axis=1))
        with torch.no_grad():
            arrays[f"timm_{k}"] = resample_abs_pos_embed(posemb, list(new), list(old), num_prefix_tokens=1).numpy()
            if old[0] == old[1] and old != new:
                for key, cls, config_cls in (("hf_vit", ViTEmbeddings, ViTConfig),
                                             ("hf_dinov2reg", Dinov2WithRegistersEmbeddings,
                                              Dinov2WithRegistersConfig)):
                    emb = hf_embeddings(cls, config_cls, old[0], 3)
                    emb.position_embeddings.copy_(posemb)
                    tokens = torch.zeros(1, 1 + new[0] * new[1], 3)
                    arrays[f"{key}_{k}"] = emb.interpolate_pos_encoding(tokens, new[0] * 2, new[1] * 2).numpy()
    np.savez_compressed(OUT, **arrays)
    print(f"{OUT}: {len(arrays)} arrays, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
