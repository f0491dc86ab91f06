"""Makes the zoo fixtures beyond ../shared/fixtures/zoo: tiny random checkpoints of the ViT descendants,
each saved by its own library, and the outputs that library computes when it loads the saved folder back.

Run in a side venv (never a dependency of keras-vit), from the repository root:

    python -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch==2.14.1 torchvision==0.29.1 \
        timm==1.0.31 transformers==5.24.0 safetensors huggingface_hub
    /work/venv-torch/bin/python tests/data/zoo/make_fixtures.py

Made with torch 2.14.1+cu130 (on the CPU), timm 1.0.31, transformers 5.24.0, huggingface_hub 2.4.0, the
versions of ../shared/fixtures/zoo (cases.json "versions" checks them at run time: a different version
stops the script). Deterministic: fixed seeds; rerunning rewrites the same numbers (the safetensors
files byte for byte).

For each CASE (tests/data/zoo/cases.json lists them; the six of ../shared/fixtures/zoo are copied there
verbatim, and their entries in cases.json are the shared file's):
- `CASE/`: the checkpoint as the library saves it: timm `save_for_hf(safe_serialization=True)`
  (config.json with architecture / model_args / pretrained_cfg, model.safetensors); transformers
  `save_pretrained` (config.json, model.safetensors) plus the family's image processor's
  `save_pretrained` (preprocessor_config.json).
- `CASE.io.npz`: `pixels` (N, H, W, 3) uint8, `images` float32 NHWC = (pixels / 255 - mean) / std with
  the checkpoint's own mean/std, and what the library computes from the folder it loads back
  (timm.create_model('local-dir:CASE', pretrained=True) / CLASS.from_pretrained('CASE'), float32, eval):
  `logits` (N, C) where the model has a head, `pooled` (N, D), `tokens` (N, T, D). Cases with `sizes`
  also hold `pixels_HxW`, `images_HxW`, `tokens_HxW`, `pooled_HxW` (and `logits_HxW`) at sizes other
  than the trained one, where the library resamples its position embeddings itself (cases.json
  `resampling` says how).
- `hub/`: a huggingface_hub cache (models--ORG--NAME/{blobs,snapshots/REV,refs/main}, as
  huggingface_hub lays it out) holding three of the checkpoints under hub names, so that
  `from_pretrained("facebook/dinov2-small")`-style names can be tested offline
  (HF_HUB_CACHE=tests/data/zoo/hub HF_HUB_OFFLINE=1); the script loads each back through the hub name
  with timm / transformers offline and checks the outputs.
"""

import hashlib
import json
import os
import pathlib
import re
import shutil
import sys

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
SHARED_CASES = HERE / "cases.json"  # the shared file, copied; this script adds its own entries to it
VERSIONS = {"torch": "2.14.1+cu130", "timm": "1.0.31", "transformers": "5.24.0"}
N = 2  # images per case: the fixtures stay small
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
CLIP_STATS = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
HALF = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
SMALL = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0)
SMALL14 = dict(img_size=56, patch_size=14, embed_dim=32, depth=2, num_heads=4)  # the MLP width as the name implies
DINO14 = dict(SMALL14, mlp_ratio=2.0)
HF_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                image_size=32, patch_size=8)
HF_SMALL14 = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=56,
                  patch_size=14)


def check_versions():
    import timm
    import transformers

    found = {"torch": torch.__version__, "timm": timm.__version__, "transformers": transformers.__version__}
    if found != VERSIONS:
        sys.exit(f"make_fixtures.py was written for {VERSIONS}, found {found}: outputs would differ from the "
                 "recorded ones. Install those versions (see the docstring).")


def randomize(model, seed):
    """Every parameter random (zero-initialized tokens, LayerScale, biases, the relative position bias
    table too), so that no feature hides behind an initial value: norms' weights near 1, the rest N(0, 0.2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen)
            is_norm_weight = name.endswith("weight") and p.ndim == 1 and re.search(r"norm|ln_|layernorm", name)
            p.copy_(1.0 + 0.1 * noise if is_norm_weight else 0.2 * noise)
    return model.eval()


def pixels_for(size, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(N, *size, 3), dtype=np.uint8)


def normalize(pixels, mean, std):
    return ((pixels.astype(np.float32) / 255.0 - np.float32(mean)) / np.float32(std)).astype(np.float32)


def nchw(images):
    return torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))


def generalize(keys):
    """{'blocks.0.x': shape, 'blocks.1.x': shape} -> {'blocks.{i}.x': shape}."""
    out = {}
    for key, shape in keys.items():
        out[re.sub(r"\.(\d+)\.", ".{i}.", key, count=1)] = list(shape)
    return dict(sorted(out.items()))


def key_diff(state, plain_state):
    mine, plain = generalize(state), generalize(plain_state)
    beside = {k: v for k, v in mine.items() if k not in plain or plain[k] != v}
    absent = sorted(k for k in plain if k not in mine)
    return beside, absent


def all_keys(state):
    return {k: list(v.shape) for k, v in sorted(state.items())}


# -- sensitivities: how far each feature moves the outputs when it is left out -------------------------

def _set_params(model, pattern, value):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(pattern, name):
                p.fill_(value)


def _replace_modules(model, pattern, make):
    for name, _ in list(model.named_modules()):
        if name and re.search(pattern, name):
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, make())


def _patch_interpolate(antialias):
    """Every F.interpolate(mode='bicubic') call with antialias forced on or off, for one measurement."""
    import torch.nn.functional as F

    original = F.interpolate

    def patched(*args, **kwargs):
        if kwargs.get("mode") == "bicubic":
            kwargs["antialias"] = antialias
        return original(*args, **kwargs)

    return original, patched


def sensitivity(model, ablations, outputs_of, inputs, compare):
    """{label: max |diff| over the compared outputs} for each ablation, on a copy of the model."""
    import copy

    import torch.nn.functional as F

    reference = {}
    out = {}
    for label, (ablate, size) in ablations.items():
        x = inputs[size]
        if size not in reference:
            with torch.no_grad():
                reference[size] = outputs_of(model, x)
        ablated = copy.deepcopy(model)
        original = None
        if isinstance(ablate, tuple) and ablate[0] == "antialias":
            original, patched = _patch_interpolate(ablate[1])
            F.interpolate = patched
        else:
            ablate(ablated)
        try:
            with torch.no_grad():
                got = outputs_of(ablated, x)
        finally:
            if original is not None:
                F.interpolate = original
        out[label] = float(f"{max(np.abs(got[k] - reference[size][k]).max() for k in compare):.3g}")
    return out


def _quick_gelu():
    from timm.layers import QuickGELU
    return QuickGELU()


def _exact_gelu():
    return torch.nn.GELU()


def _tanh_gelu():
    return torch.nn.GELU(approximate="tanh")


class _MeanPool(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=1)


def _tower(model):
    """The vision tower module: transformers 5 keeps CLIPVisionModel's flat in memory (its file keys still
    start with vision_model.), the full models' under .vision_model."""
    return getattr(model, "vision_model", model)


def _swap_swiglu_halves(model):
    for layer in model.encoder.layer:
        layer.mlp.gate_proj, layer.mlp.up_proj = layer.mlp.up_proj, layer.mlp.gate_proj


# -- timm ---------------------------------------------------------------------------------------------

TIMM_CASES = {
    "timm_dinov2_swiglu": dict(
        name="vit_giant_patch14_dinov2.lvd142m", args=SMALL14, num_classes=0, family="DINOv2 giant (SwiGLU)",
        tokens="class, 16 patches",
        needs=["LayerScale (ls1.gamma, ls2.gamma)",
               "packed SwiGLU MLP (timm SwiGLUPacked = GluMlp(act_layer=SiLU, gate_last=False)): "
               "h = fc1(x) (2H wide); a, b = h[..., :H], h[..., H:]; out = fc2(silu(a) * b)",
               "MLP width int(D * 5.33334) (mlp_ratio 2.66667 * 2 implied by the architecture name: 170 here, "
               "8192 for the real giant)",
               "(init_values=1e-5, mlp_layer=SwiGLUPacked, act_layer=SiLU implied by the architecture name)"],
        ablations={"LayerScale left out": (lambda m: _set_params(m, r"\.ls\d\.gamma$", 1.0), None),
                   "SiLU on the second half (gate_last)": (
                       lambda m: [setattr(b.mlp, "gate_last", True) for b in m.blocks], None)}),
    "timm_dinov2_dyn": dict(
        name="vit_small_patch14_dinov2.lvd142m", args=DINO14, num_classes=0, family="DINOv2",
        create=dict(dynamic_img_size=True), sizes=[(70, 70), (42, 70)],
        tokens="class, 16 patches; position embeddings cover all 17",
        resampling="VisionTransformer._pos_embed with dynamic_img_size: timm.layers.resample_abs_pos_embed("
                   "pos_embed, new_size=(H/14, W/14), old_size=(4, 4), num_prefix_tokens=1): the class entry kept "
                   "apart, the grid through F.interpolate(mode='bicubic', antialias=True, align_corners=False) "
                   "(keras_vit.interpolation 'torch_bicubic_antialias')",
        needs=["LayerScale (ls1.gamma, ls2.gamma) (init_values implied by the architecture name)",
               "any image size: position embeddings resampled per call with 'torch_bicubic_antialias'"],
        ablations={"LayerScale left out": (lambda m: _set_params(m, r"\.ls\d\.gamma$", 1.0), None),
                   "42x70 bicubic-no-aa": (("antialias", False), (42, 70)),
                   "70x70 bicubic-no-aa": (("antialias", False), (70, 70))}),
    "timm_dinov2_reg4_dyn": dict(
        name="vit_small_patch14_reg4_dinov2.lvd142m", args=DINO14, num_classes=0, family="DINOv2 + registers",
        create=dict(dynamic_img_size=True), sizes=[(70, 56), (42, 42)],
        tokens="class, 4 registers, 16 patches; position embeddings on the 16 patches only",
        resampling="resample_abs_pos_embed(pos_embed, new_size, old_size=(4, 4), num_prefix_tokens=0) "
                   "(no_embed_class: the table holds patches only), F.interpolate bicubic antialias=True",
        needs=["LayerScale", "4 register tokens after the class token", "no_embed_class",
               "any image size: 'torch_bicubic_antialias' over the patch table alone"],
        ablations={"42x42 bicubic-no-aa": (("antialias", False), (42, 42))}),
    "timm_clip": dict(
        name="vit_base_patch16_clip_224.laion2b", args=SMALL, num_classes=6, family="CLIP image tower (LAION, GELU)",
        tokens="class, 16 patches",
        needs=["norm_pre before the first block (pre_norm=True implied by the architecture name)",
               "patch projection without bias", "LayerNorm eps 1e-5 (implied by the architecture name)",
               "exact GELU (not QuickGELU: no _quickgelu in the name)", "OpenAI CLIP mean/std",
               "head = the image projection, here with a bias as timm's"],
        ablations={"norm_pre left out": (lambda m: setattr(m, "norm_pre", torch.nn.Identity()), None),
                   "QuickGELU for GELU": (lambda m: _replace_modules(m, r"mlp\.act$", _quick_gelu), None)}),
    "timm_siglip": dict(
        name="vit_base_patch16_siglip_224.webli", args=SMALL, num_classes=0, family="SigLIP image tower",
        tokens="16 patches (no class token)",
        needs=["no class token (class_token=False implied by the architecture name)",
               "attention-pool head (global_pool='map' implied): attn_pool.latent (1, 1, D) query; "
               "attn_pool.q (D -> D), attn_pool.kv (D -> 2D, k then v), attn_pool.proj; "
               "x = proj(attn); x = x + mlp(norm(x)); pooled = x[:, 0]",
               "exact GELU in timm (big_vision and transformers use tanh GELU)", "mean/std 0.5"],
        ablations={"MAP as average pooling": (lambda m: setattr(m, "attn_pool", None) or setattr(m, "global_pool", "avg"),
                                              None),
                   "tanh GELU for exact": (lambda m: _replace_modules(m, r"mlp\.act$", _tanh_gelu), None)}),
    "timm_beit": dict(
        name="beit_base_patch16_224.in22k_ft_in22k_in1k", args=SMALL, num_classes=5, family="BEiT",
        tokens="class, 16 patches; no absolute position embeddings",
        needs=["relative position bias per block (attn.relative_position_bias_table "
               "((2gh-1)(2gw-1)+3, heads), attn.relative_position_index buffer (T, T))",
               "q and v biases only (attn.q_bias, attn.v_bias; k has none)",
               "LayerScale as gamma_1 / gamma_2 (init_values=0.1 implied)",
               "no absolute position embeddings (use_abs_pos_emb=False implied)",
               "average pooling of the patch tokens then fc_norm (global_pool='avg', use_fc_norm)",
               "exact GELU, eps 1e-6, mean/std 0.5"],
        ablations={"relative position bias left out": (
                       lambda m: _set_params(m, r"relative_position_bias_table$", 0.0), None),
                   "LayerScale left out": (lambda m: _set_params(m, r"gamma_\d$", 1.0), None),
                   "class token for the patch mean": (lambda m: setattr(m, "global_pool", "token"), None)}),
}


def timm_case(case, spec, seed):
    import timm
    from timm.models import save_for_hf

    folder = HERE / case
    shutil.rmtree(folder, ignore_errors=True)
    model_args = dict(spec["args"], num_classes=spec["num_classes"])
    source = timm.create_model(spec["name"], pretrained=False, **model_args, **spec.get("create", {}))
    randomize(source, seed)
    save_for_hf(source, folder, safe_serialization=True)
    model = timm.create_model(f"local-dir:{folder}", pretrained=True, **spec.get("create", {})).eval()
    cfg = model.pretrained_cfg
    mean, std = list(cfg["mean"]), list(cfg["std"])
    trained = (model_args["img_size"],) * 2
    io = {}
    with torch.no_grad():
        for size in [trained] + [tuple(s) for s in spec.get("sizes", [])]:
            suffix = "" if size == trained else f"_{size[0]}x{size[1]}"
            pixels = pixels_for(size, seed + size[0] * 1000 + size[1])
            images = normalize(pixels, mean, std)
            x = nchw(images)
            tokens = model.forward_features(x)
            out = {"pixels": pixels, "images": images, "tokens": tokens.numpy(),
                   "pooled": model.forward_head(tokens, pre_logits=True).numpy()}
            if spec["num_classes"]:
                out["logits"] = model(x).numpy()
            io.update({k + suffix: v for k, v in out.items()})
    np.savez_compressed(HERE / f"{case}.io.npz", **io)
    compare = (["logits"] if spec["num_classes"] else []) + ["pooled", "tokens"]

    def outputs_of(m, x):
        tokens = m.forward_features(x)
        out = {"tokens": tokens.numpy(), "pooled": m.forward_head(tokens, pre_logits=True).numpy()}
        if spec["num_classes"]:
            out["logits"] = m(x).numpy()
        return out

    inputs = {None: nchw(io["images"])}
    inputs.update({tuple(s): nchw(io[f"images_{s[0]}x{s[1]}"]) for s in spec.get("sizes", [])})
    sens = sensitivity(model, spec.get("ablations", {}), outputs_of, inputs, compare)
    config = json.loads((folder / "config.json").read_text())
    plain = timm.create_model("vit_tiny_patch16_224", pretrained=False, **model_args)
    beside, absent = key_diff(all_keys(model.state_dict()), all_keys(plain.state_dict()))
    entry = {
        "source": "timm", "architecture": spec["name"].split(".")[0], "pretrained_tag": spec["name"].split(".")[1],
        "model_args": spec["args"], "num_classes": spec["num_classes"],
        "reference": f"timm.create_model('local-dir:{case}', pretrained=True"
                     + "".join(f", {k}={v!r}" for k, v in spec.get("create", {}).items())
                     + "): model(x) (logits), forward_features(x) (tokens), "
                       "forward_head(tokens, pre_logits=True) (pooled)",
        "compare": compare, "tokens_stage": "features", "mean": mean, "std": std,
        "config_entries": {k: config[k] for k in ("architecture", "global_pool", "model_args")},
        "pretrained_cfg": config["pretrained_cfg"],
        "keys_beside_plain_vit": beside, "plain_vit_keys_absent": absent,
        "keys": generalize(all_keys(model.state_dict())),
        "family": spec["family"], "tokens": spec["tokens"], "needs": spec["needs"],
        "sensitivity": sens,
    }
    return entry, io, folder


# -- transformers --------------------------------------------------------------------------------------

def _tf():
    import transformers as t
    return t


def hf_cases():
    t = _tf()
    clip_vision = dict(HF_SMALL, projection_dim=16)
    clip_text = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     max_position_embeddings=16, projection_dim=16, bos_token_id=0, eos_token_id=2, pad_token_id=1)
    siglip_text = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=16, bos_token_id=0, eos_token_id=2,
                       pad_token_id=1)
    beit = dict(HF_SMALL, use_relative_position_bias=True, use_mean_pooling=True, layer_scale_init_value=0.1,
                use_absolute_position_embeddings=False, drop_path_rate=0.0, layer_norm_eps=1e-12)
    dinov2_proc = ("BitImageProcessor", dict(size={"height": 56, "width": 56}, crop_size={"height": 56, "width": 56},
                                             do_center_crop=False, image_mean=IMAGENET[0], image_std=IMAGENET[1]))
    deit_proc = ("DeiTImageProcessor", dict(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32},
                                            image_mean=IMAGENET[0], image_std=IMAGENET[1]))
    clip_proc = ("CLIPImageProcessor", dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}))
    siglip_proc = ("SiglipImageProcessor", dict(size={"height": 32, "width": 32}))
    beit_proc = ("BeitImageProcessor", dict(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32},
                                            do_center_crop=False, image_mean=HALF[0], image_std=HALF[1]))
    return {
        "hf_dinov2_reg": dict(
            model=t.Dinov2WithRegistersModel, config=t.Dinov2WithRegistersConfig(**HF_SMALL14, num_register_tokens=4),
            proc=dinov2_proc, stats=IMAGENET, outputs=dict(pooled="pooler_output", tokens="last_hidden_state"),
            sizes=[(70, 70), (42, 70)], family="DINOv2 + registers",
            tokens="class, 4 registers, 16 patches; the position table (1, 17, D) covers class + patches and is "
                   "added before the registers are inserted",
            resampling="Dinov2WithRegistersEmbeddings.interpolate_pos_encoding: class entry kept apart, the grid "
                       "through F.interpolate(size=(H/14, W/14), mode='bicubic', align_corners=False, antialias=True) "
                       "in float32 ('torch_bicubic_antialias'); skipped when the image is square with the stored "
                       "patch count",
            needs=["model_type 'dinov2_with_registers'", "LayerScale (layer_scale1.lambda1 / layer_scale2.lambda1)",
                   "embeddings.register_tokens (1, R, D) inserted after the class token AFTER the position "
                   "embeddings are added (they get none)", "embeddings.mask_token (unused at inference)",
                   "pooler_output = final-normed class token", "eps 1e-6, exact GELU"],
            ablations={"LayerScale left out": (lambda m: _set_params(m, r"layer_scale\d\.lambda1$", 1.0), None),
                       "42x70 bicubic-no-aa": (("antialias", False), (42, 70))}),
        "hf_dinov2_swiglu": dict(
            model=t.Dinov2Model, config=t.Dinov2Config(**HF_SMALL14, use_swiglu_ffn=True), proc=dinov2_proc,
            stats=IMAGENET, outputs=dict(pooled="pooler_output", tokens="last_hidden_state"),
            family="DINOv2 giant-style (SwiGLU)", tokens="class, 16 patches",
            needs=["use_swiglu_ffn: mlp.weights_in (2H, D) + bias, mlp.weights_out (D, H) + bias with "
                   "H = (int(D * mlp_ratio * 2 / 3) + 7) // 8 * 8; out = weights_out(silu(a) * b), "
                   "a, b = chunk(weights_in(x), 2) (first half through SiLU)", "LayerScale", "eps 1e-6"],
            ablations={"SiLU on the second half": (_swap_swiglu_halves, None)}),
        "hf_dinov2_interp": dict(
            model=t.Dinov2Model, config=t.Dinov2Config(**HF_SMALL14), proc=dinov2_proc, stats=IMAGENET,
            outputs=dict(pooled="pooler_output", tokens="last_hidden_state"), sizes=[(70, 70), (42, 70)],
            family="DINOv2", tokens="class, 16 patches",
            resampling="Dinov2Embeddings.interpolate_pos_encoding, always on (no flag): class entry kept apart, the "
                       "grid through F.interpolate(size=(H/14, W/14), mode='bicubic', align_corners=False) in float32, "
                       "NO antialias ('torch_bicubic'); skipped when the image is square with the stored patch count",
            needs=["as hf_dinov2", "any image size: 'torch_bicubic' (unlike timm's DINOv2 and transformers' "
                   "Dinov2WithRegisters, which antialias)"],
            ablations={"42x70 bicubic-aa": (("antialias", True), (42, 70)),
                       "70x70 bicubic-aa": (("antialias", True), (70, 70))}),
        "hf_deit_distilled": dict(
            model=t.DeiTForImageClassificationWithTeacher, config=t.DeiTConfig(**HF_SMALL, num_labels=5),
            proc=deit_proc, stats=IMAGENET,
            outputs=dict(logits="logits", tokens=("deit", "last_hidden_state")), family="DeiT distilled",
            tokens="class, distillation, 16 patches; position embeddings cover all 18",
            needs=["model_type 'deit'", "embeddings.distillation_token (1, 1, D) after the class token",
                   "cls_classifier on token 0, distillation_classifier on token 1, logits = their mean",
                   "deit.* prefix (DeiTModel without pooler inside)", "eps 1e-12, exact GELU"]),
        "hf_deit": dict(
            model=t.DeiTModel, config=t.DeiTConfig(**HF_SMALL), proc=deit_proc, stats=IMAGENET,
            outputs=dict(pooled="pooler_output", tokens="last_hidden_state"), family="DeiT (distillation token, "
            "no head)", tokens="class, distillation, 16 patches",
            needs=["DeiTModel has the distillation token whatever the checkpoint", "pooler: dense + tanh on token 0 "
                   "(pooler.dense), as ViTModel's", "eps 1e-12, exact GELU"]),
        "hf_clip_vision": dict(
            model=t.CLIPVisionModel, config=t.CLIPVisionConfig(**clip_vision), proc=clip_proc, stats=CLIP_STATS,
            outputs=dict(pooled="pooler_output", tokens="last_hidden_state"), family="CLIP image tower",
            tokens="class, 16 patches; last_hidden_state is the encoder output BEFORE post_layernorm",
            tokens_stage="encoded",
            needs=["model_type 'clip_vision_model'", "pre_layrnorm (sic) before the first block",
                   "patch_embedding without bias", "class_embedding (D,) (a vector, not (1, 1, D))",
                   "position_embedding.weight (T, D) (an nn.Embedding)", "QuickGELU (hidden_act 'quick_gelu')",
                   "eps 1e-5", "pooler_output = post_layernorm(token 0)", "OpenAI CLIP mean/std"],
            ablations={"pre_layrnorm left out": (
                           lambda m: setattr(_tower(m), "pre_layrnorm", torch.nn.Identity()), None),
                       "exact GELU for QuickGELU": (
                           lambda m: [setattr(layer.mlp, "activation_fn", _exact_gelu())
                                      for layer in _tower(m).encoder.layers], None)}),
        "hf_clip_vision_proj": dict(
            model=t.CLIPVisionModelWithProjection, config=t.CLIPVisionConfig(**clip_vision), proc=clip_proc,
            stats=CLIP_STATS, outputs=dict(logits="image_embeds", tokens="last_hidden_state"),
            family="CLIP image tower with projection", tokens="class, 16 patches (before post_layernorm)",
            tokens_stage="encoded",
            needs=["as hf_clip_vision", "visual_projection (P, D) without bias; logits here = image_embeds = "
                   "visual_projection(pooler_output) (not L2-normalized)"]),
        "hf_clip": dict(
            model=t.CLIPModel, config=t.CLIPConfig(text_config=clip_text, vision_config=clip_vision,
                                                   projection_dim=16),
            proc=clip_proc, stats=CLIP_STATS,
            outputs=dict(logits="get_image_features", pooled=("vision_model", "pooler_output"),
                         tokens=("vision_model", "last_hidden_state")),
            family="CLIP (full model: vision tower under vision_model.*)", tokens_stage="encoded",
            tokens="class, 16 patches (before post_layernorm)",
            needs=["model_type 'clip': the vision tower under vision_model.*, visual_projection at the top level; "
                   "text_model.*, text_projection, logit_scale to skip",
                   "logits here = get_image_features(x) = visual_projection(pooler_output)"]),
        "hf_siglip": dict(
            model=t.SiglipModel, config=t.SiglipConfig(text_config=siglip_text, vision_config=HF_SMALL),
            proc=siglip_proc, stats=HALF,
            outputs=dict(pooled=("vision_model", "pooler_output"), tokens=("vision_model", "last_hidden_state")),
            family="SigLIP (full model: vision tower under vision_model.*)",
            tokens="16 patches (no class token); last_hidden_state after post_layernorm",
            needs=["model_type 'siglip': vision_model.* as hf_siglip_vision; text_model.*, logit_scale, logit_bias "
                   "to skip", "get_image_features = pooler_output (MAP head output; no projection)"],
            ablations={"MAP as average pooling": (lambda m: setattr(_tower(m), "head", _MeanPool()), None)}),
        "hf_beit": dict(
            model=t.BeitModel, config=t.BeitConfig(**beit), proc=beit_proc, stats=HALF,
            outputs=dict(pooled="pooler_output", tokens="last_hidden_state"), family="BEiT",
            tokens="class, 16 patches; last_hidden_state is the encoder output (layernorm is Identity with "
                   "use_mean_pooling)", tokens_stage="encoded",
            needs=["model_type 'beit'", "relative position bias per layer (use_relative_position_bias): "
                   "attention.attention.relative_position_bias.relative_position_bias_table "
                   "((2gh-1)(2gw-1)+3, heads); the index is computed, not stored",
                   "query and value biases, key without bias", "LayerScale lambda_1 / lambda_2",
                   "pooler: LayerNorm(mean of the patch tokens) (pooler.layernorm)", "eps 1e-12, exact GELU",
                   "no absolute position embeddings"],
            ablations={"relative position bias left out": (
                           lambda m: _set_params(m, r"relative_position_bias_table$", 0.0), None),
                       "LayerScale left out": (lambda m: _set_params(m, r"lambda_\d$", 1.0), None)}),
        "hf_beit_cls": dict(
            model=t.BeitForImageClassification, config=t.BeitConfig(**beit, num_labels=5), proc=beit_proc,
            stats=HALF, outputs=dict(logits="logits", pooled=("beit", "pooler_output"),
                                     tokens=("beit", "last_hidden_state")),
            family="BEiT classifier", tokens="class, 16 patches", tokens_stage="encoded",
            needs=["as hf_beit under beit.*", "classifier on the pooled output"]),
    }


def _hf_output(model, x, what):
    """One of the outputs named in a case: an attribute of model(x), of a sub-model's output, or a method."""
    if isinstance(what, tuple):
        sub, attr = what
        return getattr(getattr(model, sub)(pixel_values=x), attr)
    if what == "get_image_features":
        out = model.get_image_features(pixel_values=x)
        return out if torch.is_tensor(out) else out.pooler_output
    return getattr(model(pixel_values=x), what)


def hf_case(case, spec, seed):
    t = _tf()
    folder = HERE / case
    shutil.rmtree(folder, ignore_errors=True)
    torch.manual_seed(seed)
    source = randomize(spec["model"](spec["config"]), seed)
    source.save_pretrained(folder)
    proc_cls, proc_args = spec["proc"]
    processor = getattr(t, proc_cls)(**proc_args)
    processor.save_pretrained(folder)
    model = spec["model"].from_pretrained(folder).eval()
    mean, std = spec["stats"]
    size = spec["config"].vision_config.image_size if hasattr(spec["config"], "vision_config") \
        else spec["config"].image_size
    trained = (size, size)
    io, processor_diff = {}, None
    with torch.no_grad():
        for hw in [trained] + [tuple(s) for s in spec.get("sizes", [])]:
            suffix = "" if hw == trained else f"_{hw[0]}x{hw[1]}"
            pixels = pixels_for(hw, seed + hw[0] * 1000 + hw[1])
            images = normalize(pixels, mean, std)
            x = nchw(images)
            out = {"pixels": pixels, "images": images}
            for key, what in spec["outputs"].items():
                out[key] = _hf_output(model, x, what).numpy()
            io.update({k + suffix: v for k, v in out.items()})
            if hw == trained:  # the saved processor on the same pixels, for the record
                loaded = t.AutoImageProcessor.from_pretrained(folder)
                got = loaded(images=list(pixels), return_tensors="pt")["pixel_values"].numpy()
                processor_diff = float(np.abs(got.transpose(0, 2, 3, 1) - images).max())
    np.savez_compressed(HERE / f"{case}.io.npz", **io)
    compare = [k for k in ("logits", "pooled", "tokens") if k in spec["outputs"]]

    def outputs_of(m, x):
        return {key: _hf_output(m, x, what).numpy() for key, what in spec["outputs"].items()}

    inputs = {None: nchw(io["images"])}
    inputs.update({tuple(s): nchw(io[f"images_{s[0]}x{s[1]}"]) for s in spec.get("sizes", [])})
    sens = sensitivity(model, spec.get("ablations", {}), outputs_of, inputs, compare)
    config = json.loads((folder / "config.json").read_text())
    from safetensors.numpy import load_file

    state = {k: v.shape for k, v in load_file(folder / "model.safetensors").items()}
    vision = spec["config"].vision_config if hasattr(spec["config"], "vision_config") else spec["config"]
    plain_cfg = t.ViTConfig(hidden_size=vision.hidden_size, num_hidden_layers=vision.num_hidden_layers,
                            num_attention_heads=vision.num_attention_heads, image_size=vision.image_size,
                            patch_size=vision.patch_size,
                            intermediate_size=getattr(vision, "intermediate_size", 4 * vision.hidden_size))
    plain_dir = HERE / "_plain_vit"
    t.ViTModel(plain_cfg).save_pretrained(plain_dir)
    plain = {k: v.shape for k, v in load_file(plain_dir / "model.safetensors").items()}
    shutil.rmtree(plain_dir)
    beside, absent = key_diff(state, plain)
    names = {k: (".".join(v) if isinstance(v, tuple) else v) for k, v in spec["outputs"].items()}
    entry = {
        "source": "transformers", "architecture": type(model).__name__,
        "config": {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                          "intermediate_size", "mlp_ratio", "image_size", "patch_size",
                                          "num_register_tokens") if k in config}
        or {"vision_config": {k: config["vision_config"].get(k) for k in ("hidden_size", "num_hidden_layers",
                                                                          "num_attention_heads", "intermediate_size",
                                                                          "image_size", "patch_size")}},
        "reference": f"{type(model).__name__}.from_pretrained('{case}'): "
                     + ", ".join(f"{v} ({k})" for k, v in names.items()),
        "compare": compare,
        "tokens_stage": spec.get("tokens_stage", "features"), "mean": list(mean), "std": list(std),
        "config_entries": config, "preprocessor_config": json.loads((folder / "preprocessor_config.json").read_text()),
        "processor_vs_images_max_abs_diff": processor_diff,
        "keys_beside_plain_vit": generalize(beside), "plain_vit_keys_absent": absent, "keys": generalize(state),
        "family": spec["family"], "tokens": spec["tokens"], "needs": spec["needs"], "sensitivity": sens,
    }
    return entry, io, folder


# -- the huggingface_hub cache --------------------------------------------------------------------------

HUB_REPOS = {  # hub name -> (fixture folder, how to load it back by that name)
    "facebook/dinov2-small": ("hf_dinov2", "transformers"),
    "timm/vit_small_patch14_reg4_dinov2.lvd142m": ("timm_dinov2_reg4", "timm"),
    "google/siglip-base-patch16-224": ("hf_siglip", "transformers"),
}


def _git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_hub_cache():
    """models--ORG--NAME/blobs/<etag>, snapshots/<rev>/<file> -> ../../blobs/<etag> (relative symlinks),
    refs/main = <rev>: huggingface_hub's layout. LFS files (safetensors) are named by their sha256, the
    rest by their git blob sha1, as the hub's etags are; <rev> is a made-up but fixed commit hash."""
    hub = HERE / "hub"
    shutil.rmtree(hub, ignore_errors=True)
    for repo, (case, _) in HUB_REPOS.items():
        root = hub / ("models--" + repo.replace("/", "--"))
        rev = hashlib.sha1(f"keras-vit fixture {repo}".encode()).hexdigest()
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text(rev)
        (root / "blobs").mkdir()
        snap = root / "snapshots" / rev
        snap.mkdir(parents=True)
        for f in sorted((HERE / case).iterdir()):
            data = f.read_bytes()
            etag = hashlib.sha256(data).hexdigest() if f.suffix == ".safetensors" else _git_blob_sha1(data)
            (root / "blobs" / etag).write_bytes(data)
            os.symlink(os.path.join("..", "..", "blobs", etag), snap / f.name)
    return hub


HUB_CHECK = """
import sys, numpy as np, torch
repo, case, lib, io_path = sys.argv[1:]
io = np.load(io_path)
x = torch.from_numpy(np.ascontiguousarray(io["images"].transpose(0, 3, 1, 2)))
with torch.no_grad():
    if lib == "timm":
        import timm
        got = timm.create_model("hf-hub:" + repo, pretrained=True).eval().forward_features(x)
    else:
        import transformers
        model = transformers.AutoModel.from_pretrained(repo).eval()
        model = getattr(model, "vision_model", model)
        got = model(pixel_values=x).last_hidden_state
print(float(np.abs(got.numpy() - io["tokens"]).max()))
"""


def check_hub_cache(hub):
    """Loads every hub name back through the library's own hub code, in a fresh process with
    HF_HUB_CACHE=hub and HF_HUB_OFFLINE=1 (huggingface_hub reads them at import), and compares the tokens."""
    import subprocess

    env = dict(os.environ, HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    for repo, (case, lib) in HUB_REPOS.items():
        run = subprocess.run([sys.executable, "-c", HUB_CHECK, repo, case, lib, str(HERE / f"{case}.io.npz")],
                             env=env, capture_output=True, text=True)
        if run.returncode:
            sys.exit(f"hub {repo}: loading offline failed:\n{run.stderr[-3000:]}")
        diff = float(run.stdout.split()[-1])
        assert diff <= 1e-6, (repo, diff)
        print(f"hub {repo}: loaded offline by name, tokens max |diff| {diff:.1e}")


# -- main -------------------------------------------------------------------------------------------------

def file_entry(folder, io):
    return {"files": sorted(p.name for p in folder.iterdir()),
            "shapes": {k: list(v.shape) for k, v in io.items()}}


def main():
    check_versions()
    torch.set_num_threads(1)
    shared = json.loads(SHARED_CASES.read_text())
    shared_names = ["timm_deit_distilled", "timm_dinov2_reg4", "hf_dinov2", "timm_clip_quickgelu",
                    "hf_siglip_vision", "timm_mae"]
    cases = {name: shared["cases"][name] for name in shared_names}  # the shared entries, unchanged
    made = {}
    for seed, (case, spec) in enumerate(TIMM_CASES.items(), start=100):
        entry, io, folder = timm_case(case, spec, seed)
        made[case] = (entry, io, folder, spec)
    for seed, (case, spec) in enumerate(hf_cases().items(), start=200):
        entry, io, folder = hf_case(case, spec, seed)
        made[case] = (entry, io, folder, spec)
    for case, (entry, io, folder, spec) in made.items():
        entry.update(file_entry(folder, io))
        if spec.get("sizes"):
            entry["trained"] = [int(s) for s in io["images"].shape[1:3]]
            entry["sizes"] = [list(s) for s in spec["sizes"]]
            entry["resampling"] = spec["resampling"]
        entry["made_by"] = "tests/data/zoo/make_fixtures.py"
        cases[case] = entry
        print(f"{case}: {entry['architecture']}, " + ", ".join(f"{k} {v}" for k, v in entry["shapes"].items()
                                                                 if not k.startswith("pixels")))
    hub = make_hub_cache()
    check_hub_cache(hub)
    out = {
        "tolerance": shared["tolerance"], "versions": VERSIONS,
        "origins": {"../shared/fixtures/zoo (copied verbatim)": shared_names,
                    "tests/data/zoo/make_fixtures.py": list(made)},
        "hub": {"path": "hub", "layout": "huggingface_hub cache: models--ORG--NAME/{blobs,snapshots/REV,refs/main}",
                "repos": {repo: {"case": case, "library": lib,
                                 "revision": (hub / ("models--" + repo.replace("/", "--")) / "refs" / "main").read_text()}
                          for repo, (case, lib) in HUB_REPOS.items()},
                "use": "HF_HUB_CACHE=tests/data/zoo/hub HF_HUB_OFFLINE=1"},
        "cases": cases,
    }
    SHARED_CASES.write_text(json.dumps(out, indent=1) + "\n")
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"cases.json: {len(cases)} cases; tests/data/zoo holds {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
