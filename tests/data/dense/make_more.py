"""Writes two more dense fixtures with transformers itself (run in a side venv with torch and transformers,
never the package's own): `hf_depth_anything_metric` (Depth Anything V2 metric: sigmoid times max_depth,
its own head sizes) and `hf_dpt_dinov2` (DPTForDepthEstimation on a Dinov2 backbone_config, as
facebook/dpt-dinov2-*-kitti: readout project over DINOv2's class token, stages 1-4). Each case: the folder
`save_pretrained` wrote, and CASE.io.npz with the outputs transformers computes after loading it back
(`images`, `images_alt`, `depth`, `depth_alt`, `features_alt`: the neck's four inputs), as README.md says.

    /work/side/bin/python tests/data/dense/make_more.py tests/data/dense
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config, DPTConfig, DPTForDepthEstimation

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def randomize(model, seed):
    """Random weights everywhere (biases and norms too), so no path of the graph is an identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if "weight" in name and p.ndim == 1 else 0.0  # norms' scales near 1
            p.copy_(torch.randn(p.shape, generator=g) * (0.2 if p.ndim > 1 else 0.1) + centre)
        for name, b in model.named_buffers():
            if "running_var" in name:
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif "running_mean" in name:
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def images(seed, size, n=2):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(n, *size, 3)).astype(np.float32) / 255.0
    return ((pixels - np.array(MEAN, np.float32)) / np.array(STD, np.float32)).astype(np.float32)


def run(model, x, capture):
    captured = {}
    handle = capture(model).register_forward_pre_hook(lambda m, args: captured.__setitem__("in", args[0]))
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x).permute(0, 3, 1, 2))
    handle.remove()
    features = np.stack([f.numpy() for f in captured["in"]], axis=1)
    return out.predicted_depth.numpy(), features


def write(root, name, model, sizes, capture):
    folder = os.path.join(root, name)
    model.save_pretrained(folder)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "DPTImageProcessor", "image_mean": MEAN, "image_std": STD,
                   "do_normalize": True, "do_rescale": True, "rescale_factor": 1 / 255}, f, indent=2)
    loaded = type(model).from_pretrained(folder).eval()
    arrays = {}
    for suffix, size in zip(("", "_alt"), sizes):
        x = images(len(suffix) + 1, size)
        depth, features = run(loaded, x, capture)
        arrays.update({f"images{suffix}": x, f"depth{suffix}": depth, f"features{suffix}": features})
    np.savez(os.path.join(root, f"{name}.io.npz"), **arrays)
    return {k: list(v.shape) for k, v in arrays.items()}


def main(root):
    torch.manual_seed(0)
    dinov2 = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, mlp_ratio=2, patch_size=14,
                  image_size=28, out_indices=[1, 2, 3, 4], apply_layernorm=True, reshape_hidden_states=False)
    metric = DepthAnythingForDepthEstimation(DepthAnythingConfig(
        backbone_config=Dinov2Config(**dinov2), patch_size=14, reassemble_hidden_size=32,
        neck_hidden_sizes=[8, 16, 24, 32], fusion_hidden_size=16, head_hidden_size=12,
        depth_estimation_type="metric", max_depth=20)).eval()
    randomize(metric, 1)
    dpt = DPTForDepthEstimation(DPTConfig(
        backbone_config=Dinov2Config(**dinov2), hidden_size=32, is_hybrid=False, readout_type="project",
        neck_hidden_sizes=[8, 16, 24, 32], fusion_hidden_size=16, reassemble_factors=[4, 2, 1, 0.5],
        head_in_index=-1, use_batch_norm_in_fusion_residual=False, add_projection=False)).eval()
    randomize(dpt, 2)
    shapes = {
        "hf_depth_anything_metric": write(root, "hf_depth_anything_metric", metric, [(28, 28), (28, 42)],
                                          lambda m: m.neck),
        "hf_dpt_dinov2": write(root, "hf_dpt_dinov2", dpt, [(28, 28), (42, 42)], lambda m: m.neck),
    }
    print(json.dumps({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                      "shapes": shapes}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
