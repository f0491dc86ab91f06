"""Writes the transformers side of zoo2_more: DINOv3ViTModel with the gated MLP (use_gated_mlp, DINOv3 ViT-H+
and 7B's layout: gate_proj, up_proj, down_proj with SiLU), tiny and random, saved by transformers itself, with
the outputs it computes after loading the folder back, at 64x64 and at 48x80 (transformers takes any multiple
of the patch).

Run with transformers and torch installed (not keras-vit's dependencies), from the repository root:
    python tests/data/zoo2_more/make_hf_fixtures.py
Made with transformers 5.25.0, torch 2.14.1.
"""

import json
import os

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import DINOv3ViTConfig, DINOv3ViTModel

HERE = os.path.dirname(os.path.abspath(__file__))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CONFIG = dict(hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, image_size=64,
              patch_size=16, num_register_tokens=4, use_gated_mlp=True, hidden_act="silu")


def images(rng, size):
    pixels = rng.integers(0, 256, size=(2, *size, 3)).astype(np.float32) / 255.0
    return ((pixels - np.float32(MEAN)) / np.float32(STD)).astype(np.float32)


def run(model, x):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x).permute(0, 3, 1, 2))
    return out.pooler_output.numpy(), out.last_hidden_state.numpy()


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    model = DINOv3ViTModel(DINOv3ViTConfig(**CONFIG)).eval()
    with torch.no_grad():
        for p in model.parameters():  # every weight random, LayerNorm gains and LayerScale included
            p.copy_(torch.randn_like(p) * 0.2)
    folder = os.path.join(HERE, "hf_dinov3_gated")
    model.save_pretrained(folder, safe_serialization=True)
    loaded = DINOv3ViTModel.from_pretrained(folder).eval()
    x, x_alt = images(rng, (64, 64)), images(rng, (48, 80))
    (pooled, tokens), (pooled_alt, tokens_alt) = run(loaded, x), run(loaded, x_alt)
    np.savez_compressed(os.path.join(HERE, "hf_dinov3_gated.io.npz"), images=x, pooled=pooled, tokens=tokens,
                        images_alt=x_alt, pooled_alt=pooled_alt, tokens_alt=tokens_alt)
    with safe_open(os.path.join(folder, "model.safetensors"), "np") as f:
        keys = sorted(k for k in f.keys() if k.startswith("layer.0.mlp"))
    with open(os.path.join(HERE, "hf_cases.json"), "w") as f:
        json.dump({"versions": {"transformers": transformers.__version__, "torch": torch.__version__},
                   "cases": {"hf_dinov3_gated": {"config": CONFIG, "compare": ["pooled", "tokens"],
                                                 "mlp_keys": keys}}}, f, indent=1)
    print(keys)


if __name__ == "__main__":
    main()
