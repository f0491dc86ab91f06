"""Writes the zoo2_more fixtures: timm's Eva layouts beside the fused ones of ../zoo2, tiny and random, saved by
timm itself (save_for_hf) with the outputs timm computes after loading the folder back:

- eva02_base: eva02_base_patch14_224's layout (q_proj / k_proj / v_proj apart, SwiGLU as fc1_g / fc1_x with
  its sub-LN `mlp.norm`), 56x56 (4x4 grid) with a 5-class head; the other size 42x70 with dynamic_img_size.
- dinov3_splus: vit_small_plus_patch16_dinov3's (SwiGLU fc1_g / fc1_x, widths aligned to 8: mlp_ratio 2.9 gives
  int(32 * 2.9) = 92 -> 96), 64x64 and 48x80, headless.
- pe_core: vit_pe_core_tiny_patch16_384's (Perception Encoder: a norm before the blocks, no patch bias, 2-D RoPE
  over (k + 1) rescaled to its 24x24 reference grid with x before y, an attention pool over every token with
  its own 8 heads, the class token included, and the output projection as the head), 64x64 and 48x80.
- pe_core_noclass: vit_pe_core_gigantic_patch14_448's (no class token; the blocks' MLP 8960/1536 wide, the
  pool's 4x), 56x56 and 42x70.

Run with timm and torch installed (not keras-vit's dependencies), from the repository root:
    python tests/data/zoo2_more/make_fixtures.py
Made with timm 1.0.31, torch 2.14.1.
"""

import json
import os

import numpy as np
import timm
import torch
from timm.models._hub import save_for_hf

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {
    "eva02_base": dict(architecture="eva02_base_patch14_224", size=(56, 56), alt=(42, 70),
                       model_args=dict(img_size=56, embed_dim=48, depth=2, num_heads=4, num_classes=5),
                       compare="logits", keras_alt={"dynamic_image_size": True}),
    "dinov3_splus": dict(architecture="vit_small_plus_patch16_dinov3", size=(64, 64), alt=(48, 80),
                         model_args=dict(img_size=64, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.9,
                                         num_classes=0),
                         compare="pooled", keras_alt={}),
    "pe_core": dict(architecture="vit_pe_core_tiny_patch16_384", size=(64, 64), alt=(48, 80),
                    model_args=dict(img_size=64, embed_dim=48, depth=2, num_heads=4, num_classes=8),
                    compare="logits", keras_alt={"dynamic_image_size": True}),
    "pe_core_noclass": dict(architecture="vit_pe_core_gigantic_patch14_448", size=(56, 56), alt=(42, 70),
                            model_args=dict(img_size=56, embed_dim=48, depth=2, num_heads=4, num_classes=6),
                            compare="logits", keras_alt={"dynamic_image_size": True}),
}


def images(rng, size, mean, std):
    pixels = rng.integers(0, 256, size=(2, *size, 3)).astype(np.float32) / 255.0
    return ((pixels - np.float32(mean)) / np.float32(std)).astype(np.float32)


def run(model, x, compare):
    with torch.no_grad():
        t = torch.from_numpy(x).permute(0, 3, 1, 2)
        if compare == "logits":
            return model(t).numpy()
        return model.forward_head(model.forward_features(t), pre_logits=True).numpy()


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    out = {"versions": {"timm": timm.__version__, "torch": torch.__version__}, "tolerance": 1e-4, "cases": {}}
    for name, case in CASES.items():
        model = timm.create_model(case["architecture"], pretrained=False, **case["model_args"]).eval()
        with torch.no_grad():
            for p in model.parameters():  # every weight random, LayerNorm gains and LayerScale included
                p.copy_(torch.randn_like(p) * 0.2)
        folder = os.path.join(HERE, name)
        save_for_hf(model, folder, model_args=case["model_args"], safe_serialization="both")
        for extra in ("pytorch_model.bin",):  # never unpickled by keras-vit: left out of the fixture
            if os.path.exists(os.path.join(folder, extra)):
                os.remove(os.path.join(folder, extra))
        loaded = timm.create_model("local-dir:" + folder, pretrained=True).eval()
        alt = timm.create_model("local-dir:" + folder, pretrained=True, dynamic_img_size=True).eval()
        cfg = loaded.pretrained_cfg
        x, x_alt = images(rng, case["size"], cfg["mean"], cfg["std"]), images(rng, case["alt"], cfg["mean"], cfg["std"])
        arrays = {"images": x, case["compare"]: run(loaded, x, case["compare"]),
                  "images_alt": x_alt, case["compare"] + "_alt": run(alt, x_alt, case["compare"])}
        np.savez_compressed(os.path.join(HERE, f"{name}.io.npz"), **arrays)
        keys = sorted(k for k in loaded.state_dict() if k.startswith("blocks.0."))
        out["cases"][name] = {"architecture": case["architecture"], "model_args": case["model_args"],
                              "compare": [case["compare"]], "alt": {"size": list(case["alt"]),
                                                                    "keras_kwargs": case["keras_alt"]},
                              "block_keys": keys}
        print(name, keys)
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
