"""Writes counts.json: timm's own parameter count of every name in keras_vit.presets.TIMM_PRESETS (and
CROPPED's), with a 1000-class head and without one (num_classes=0), each model made on PyTorch's meta device (no memory).

Run with timm and torch installed (not keras-vit's dependencies), from the repository root:
    PYTHONPATH=. python tests/data/timm_presets/make_counts.py
Made with timm 1.0.31, torch 2.14.1. torchvision is imported by timm but unused here; where its
compiled ops do not load (a CUDA build beside a CPU torch), its fake-op registrations are skipped.
"""

import json
import os
import sys
import types

try:
    import torchvision  # noqa: F401
except RuntimeError:  # "operator torchvision::nms does not exist": skip the registrations that need its ops
    for name in [m for m in sys.modules if m.startswith("torchvision")]:
        del sys.modules[name]
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")

import timm
import torch

from keras_vit.presets import timm_presets

# and one keras-vit builds only at another image size (its 384 is not a multiple of the patch)
CROPPED = ("vit_so400m_patch14_siglip_384",)

counts = {}
for arch in timm_presets() + CROPPED:
    counts[arch] = {}
    for classes in (1000, 0):
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False, num_classes=classes)
        counts[arch][str(classes)] = sum(p.numel() for p in model.parameters())
    print(arch, counts[arch])
out = {"timm": timm.__version__, "torch": torch.__version__, "counts": counts}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "counts.json"), "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
