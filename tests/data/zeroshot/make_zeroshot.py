"""Writes tiny random two-tower checkpoints with transformers itself, their tokenizer files included (run in a
side venv with torch, transformers, tokenizers and sentencepiece, never the package's own):

- `hf_clip`: CLIPModel (QuickGELU, eos_token_id 49407-style: the first end-of-text token pools) with a
  CLIPTokenizer whose byte-level BPE was trained here on a small corpus (NFC, whitespace, lower case,
  <|startoftext|> ... <|endoftext|>, padded with <|endoftext|> to the longest text).
- `hf_clip_legacy`: the same with `eos_token_id: 2` in the text config, as checkpoints saved before
  transformers PR #24773 have: the highest token id pools (argmax of the ids).
- `hf_siglip`: SiglipModel with a SiglipTokenizer on a sentencepiece model trained here (lower case,
  punctuation removed, </s> appended, padded with </s> to max_length 64); logit_bias included.

Each case: the folder `save_pretrained` wrote (model and tokenizer), and CASE.io.npz with what
transformers computes after loading both back: `texts` (as a NumPy unicode array), `input_ids`,
`attention_mask` (CLIP), `images` (NHWC, normalised with the checkpoint's mean/std), `images_alt` (another
size), `image_embeds`, `image_embeds_alt` (get_image_features, interpolate_pos_encoding at the other size),
`text_embeds` (get_text_features), `logits_per_image`.

    /work/side/bin/python tests/data/zeroshot/make_zeroshot.py tests/data/zeroshot [--photos-only]

`CASE.photos.npz` (photo_probabilities): transformers' zero-shot pipeline probabilities on real photos.
"""

import json
import os
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
import transformers
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer, SiglipConfig, SiglipModel, SiglipTokenizer

CORPUS = [
    "a photo of a cat", "a photo of a dog", "a photo of a car", "a blurry photo of the truck",
    "an origami airplane", "a painting of a bird", "a close-up photo of a frog!", "a jpeg of a horse",
    "the ship at sea", "a deer in the forest", "Café crème, naïve résumé", "Grace Hopper, computer scientist",
    "a rocket on the pad", "an astronaut in space", "coffee in a cup", "a red chair by the window",
    "It's a photo of the big dog.", "there are 3 cats and 12 dogs", "A PHOTO OF A SHOE", "a sketch of a bag",
]
# What the tests tokenize: mixed case, punctuation, accents, digits, doubled spaces, an unseen word.
TEXTS = ["a photo of a cat", "A Photo of a DOG!", "  café   crème,  naïve résumé ", "a rocket-ship: 12 cats?",
         "It's the zyzzyva.", "grace hopper"]
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def randomize(model, seed):
    """Random weights everywhere (biases and norms too), so no path of the graph is an identity."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("logit_scale", "logit_bias"):
                continue
            centre = 1.0 if "weight" in name and p.ndim == 1 else 0.0
            p.copy_(torch.randn(p.shape, generator=g) * (0.2 if p.ndim > 1 else 0.1) + centre)


def images(seed, size, mean, std, n=3):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(n, *size, 3)).astype(np.float32) / 255.0
    return ((pixels - np.array(mean, np.float32)) / np.array(std, np.float32)).astype(np.float32)


def clip_tokenizer_files():
    """vocab and merges of a byte-level BPE with CLIP's pre-tokenizer and </w> word ends."""
    tok = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|"""
                                   r"""[\p{N}]|[^\s\p{L}\p{N}]+"""), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = trainers.BpeTrainer(vocab_size=400, end_of_word_suffix="</w>", show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|startoftext|>", "<|endoftext|>"])
    tok.train_from_iterator(CORPUS * 4, trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def siglip_spm(folder):
    path = os.path.join(folder, "spm")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 4), model_prefix=path, vocab_size=90,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, minloglevel=2)
    return path + ".model"


def write(root, name, model, tokenizer, sizes, mean, std, tokenize):
    folder = os.path.join(root, name)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    processor = {"image_processor_type": "CLIPImageProcessor" if "clip" in name else "SiglipImageProcessor",
                 "image_mean": mean, "image_std": std, "do_normalize": True, "do_rescale": True,
                 "rescale_factor": 1 / 255, "size": {"height": sizes[0][0], "width": sizes[0][1]}}
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f, indent=2)
    loaded = type(model).from_pretrained(folder).eval()
    tok = type(tokenizer).from_pretrained(folder)
    batch = tokenize(tok, TEXTS)
    x, x_alt = images(1, sizes[0], mean, std), images(2, sizes[1], mean, std)
    nchw = lambda a: torch.from_numpy(a).permute(0, 3, 1, 2)  # noqa: E731
    with torch.no_grad():
        out = loaded(pixel_values=nchw(x), **batch)
        alt = loaded.get_image_features(pixel_values=nchw(x_alt), interpolate_pos_encoding=True)
        text = loaded.get_text_features(**batch)
        embeds = loaded.get_image_features(pixel_values=nchw(x))
    pooled = lambda o: (o.pooler_output if hasattr(o, "pooler_output") else o).numpy()  # noqa: E731
    arrays = {"texts": np.array(TEXTS), "input_ids": batch["input_ids"].numpy(), "images": x,
              "images_alt": x_alt, "image_embeds": pooled(embeds),
              "image_embeds_alt": pooled(alt), "text_embeds": pooled(text),
              "logits_per_image": out.logits_per_image.numpy()}
    if "attention_mask" in batch:
        arrays["attention_mask"] = batch["attention_mask"].numpy()
    np.savez(os.path.join(root, f"{name}.io.npz"), **arrays)
    print(name, {k: v.shape for k, v in arrays.items()})


def main(root):
    os.makedirs(root, exist_ok=True)
    vocab, merges = clip_tokenizer_files()
    clip_tok = CLIPTokenizer(vocab=vocab, merges=merges)
    text = dict(vocab_size=len(clip_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=24, hidden_act="quick_gelu",
                bos_token_id=clip_tok.bos_token_id, eos_token_id=clip_tok.eos_token_id,
                pad_token_id=clip_tok.pad_token_id)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8, hidden_act="quick_gelu")
    clip_pad = lambda tok, texts: tok(texts, padding=True, return_tensors="pt")  # noqa: E731
    for name, eos in (("hf_clip", clip_tok.eos_token_id), ("hf_clip_legacy", 2)):
        torch.manual_seed(0)
        config = CLIPConfig(text_config={**text, "eos_token_id": eos}, vision_config=vision, projection_dim=24,
                            logit_scale_init_value=2.6592)
        model = CLIPModel(config).eval()
        randomize(model, 3 if eos == 2 else 0)
        write(root, name, model, clip_tok, [(32, 32), (48, 40)], CLIP_MEAN, CLIP_STD, clip_pad)

    with tempfile.TemporaryDirectory() as tmp:
        sig_tok = SiglipTokenizer(vocab_file=siglip_spm(tmp))
        torch.manual_seed(1)
        config = SiglipConfig(
            text_config=dict(vocab_size=sig_tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=64, projection_size=32),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                               image_size=32, patch_size=8))
        model = SiglipModel(config).eval()
        randomize(model, 1)
        with torch.no_grad():
            model.logit_scale.fill_(np.log(10.0))
            model.logit_bias.fill_(-2.5)
        siglip_pad = lambda tok, texts: {"input_ids": tok(texts, padding="max_length", max_length=64,  # noqa: E731
                                                          truncation=True, return_tensors="pt")["input_ids"]}
        write(root, "hf_siglip", model, sig_tok, [(32, 32), (40, 48)], [0.5] * 3, [0.5] * 3, siglip_pad)
    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump({"tolerance": 1e-4, "texts": TEXTS,
                   "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}, f, indent=1)


CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PIPELINE_TEMPLATE = "This is a photo of {}."  # transformers' zero-shot-image-classification default


def photo_probabilities(root):
    """CASE.photos.npz: transformers' zero-shot probabilities of photos.npz's 20 CIFAR-10 test images (uint8, as
    keras_vit decodes them; photos.npz is written by keras_vit, this venv has no image decoder) over the ten
    class names, computed as its zero-shot-image-classification pipeline does: one template, the model's
    padding, softmax (CLIP) or sigmoid (SigLIP) of logits_per_image."""
    with np.load(os.path.join(root, "photos.npz")) as photos:
        images = photos["images"].astype(np.float32) / 255.0
    for name, cls in (("hf_clip", CLIPModel), ("hf_clip_legacy", CLIPModel), ("hf_siglip", SiglipModel)):
        folder = os.path.join(root, name)
        with open(os.path.join(folder, "preprocessor_config.json")) as f:
            stats = json.load(f)
        x = (images - np.array(stats["image_mean"], np.float32)) / np.array(stats["image_std"], np.float32)
        model = cls.from_pretrained(folder).eval()
        texts = [PIPELINE_TEMPLATE.format(c) for c in CIFAR_CLASSES]
        if name == "hf_siglip":
            batch = {"input_ids": SiglipTokenizer.from_pretrained(folder)(texts, padding="max_length", max_length=64,
                                                                          return_tensors="pt")["input_ids"]}
        else:
            batch = CLIPTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(pixel_values=torch.from_numpy(x).permute(0, 3, 1, 2), **batch).logits_per_image
        probs = logits.sigmoid() if name == "hf_siglip" else logits.softmax(dim=-1)
        np.savez(os.path.join(root, f"{name}.photos.npz"), probabilities=probs.numpy(), template=PIPELINE_TEMPLATE,
                 classes=np.array(CIFAR_CLASSES))
        print(name, "photos", probs.shape)


if __name__ == "__main__":
    where = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    if "--photos-only" not in sys.argv:
        main(where)
    photo_probabilities(where)
