"""Zero-shot image classification with a two-tower image-text checkpoint (CLIP, SigLIP).

`load_image_text(folder or hub name)` reads a full transformers `CLIPModel` / `SiglipModel` folder: the image
tower through `keras_vit.from_pretrained` (any image size), the text tower, the logit scale and bias
(keras_vit/zeroshot/transformers.py) and the checkpoint's own tokenizer (keras_vit/zeroshot/tokenizers.py).
Its methods are transformers' `get_image_features`, `get_text_features` and `logits_per_image`, and
`classify`: the labels put in prompt templates, each template's text embedding normalised, their mean
normalised again (the prompt ensemble of CLIP's ImageNet evaluation), then softmax (CLIP) or sigmoid
(SigLIP, whose pairs are scored independently) over the scaled cosine similarities.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from keras_vit._common import refuse_unknown_keywords
from keras_vit._files import is_hub_name

if TYPE_CHECKING:
    import keras

    from keras_vit.zeroshot.tokenizers import TextTokenizer

log = logging.getLogger(__name__)

# The files a two-tower checkpoint is read from (a hub download fetches these only).
HUB_FILES = ["config.json", "preprocessor_config.json", "model.safetensors", "model.safetensors.index.json",
             "model-*.safetensors", "tokenizer.json", "tokenizer_config.json", "spiece.model",
             "special_tokens_map.json"]
DEFAULT_TEMPLATES = ("{}",)
# CLIP's ImageNet prompt ensemble, abridged: the seven templates CLIP's notebook recommends as the best subset
# (openai/CLIP notebooks/Prompt_Engineering_for_ImageNet.ipynb).
CLIP_TEMPLATES = ("itap of a {}.", "a bad photo of the {}.", "a origami {}.", "a photo of the large {}.",
                  "a {} in a video game.", "art of the {}.", "a photo of the small {}.")


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class ImageText:
    """A two-tower image-text model: `image_model` (a keras_vit VisionTransformer of any image size whose output
    is the image embedding), `text_model` (token ids -> text embedding), `tokenizer`, and the scalars.

    Images are given as file paths, or arrays (N, H, W, 3) / (H, W, 3): integer pixels 0-255 are resized to the
    checkpoint's size (`keras_vit.images.model_view`, its crop and interpolation) and normalised with its
    mean and std; floating-point arrays are taken as already normalised (transformers' `pixel_values`,
    channels last) at any size the patch divides.

    Attributes:
        family: "clip" or "siglip".
        logit_scale: the stored scale (the logits multiply by its exp()).
        logit_bias: added to the logits (SigLIP's; 0 for CLIP).
        image_size: the checkpoint's image size (height, width).

    Example:
    >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_clip")
    >>> model.tokenize(["a photo of a cat", "A DOG!"]).shape  # CLIP pads to the longest text
    (2, 7)
    >>> probs = model.classify("tests/data/cifar10_sample/cat/0511.jpg", ["cat", "dog"], templates=["a photo of a {}."])
    >>> probs.shape, bool(abs(probs.sum() - 1) < 1e-5)
    ((1, 2), True)
    """

    @refuse_unknown_keywords
    def __init__(self, image_model: keras.Model, text_model: keras.Model, tokenizer: TextTokenizer, family: str,
                 logit_scale: float, logit_bias: float = 0.0, source: str | None = None) -> None:
        self.image_model, self.text_model, self.tokenizer = image_model, text_model, tokenizer
        self.family, self.logit_scale, self.logit_bias = family, float(logit_scale), float(logit_bias)
        self.source = source
        self.image_size = tuple(image_model.image_size)

    def __repr__(self) -> str:
        return (f"ImageText({self.family}, {self.source or 'in memory'}: image {self.image_size[0]}x{self.image_size[1]}, "
                f"embedding {self.embedding_dim})")

    @property
    def embedding_dim(self) -> int:
        return int(self.text_model.output_shape[-1])

    def save_pretrained(self, folder: str | os.PathLike, *, overwrite: bool = False) -> str:
        """Writes transformers' full CLIPModel / SiglipModel folder (model.safetensors, config.json,
        preprocessor_config.json and the tokenizer files), atomically; returns the folder.

        Example:
        >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_siglip")
        >>> sorted(os.listdir(model.save_pretrained("my_siglip")))[:3]
        ['config.json', 'model.safetensors', 'preprocessor_config.json']
        """
        from keras_vit.zeroshot.transformers import save_image_text

        return save_image_text(self, os.fspath(folder), overwrite=overwrite)

    # -- inputs ------------------------------------------------------------------------------------
    def tokenize(self, texts: str | Sequence[str]) -> np.ndarray:
        """Texts -> token ids (N, L) int32, exactly as the checkpoint's own tokenizer with its zero-shot padding."""
        return self.tokenizer(texts)

    def pixel_values(self, images: Any) -> np.ndarray:
        """Images (paths, integer or float arrays; see the class) -> the normalised float32 array the image tower reads."""
        from keras_vit.images import model_view, read_image, view_policy

        if isinstance(images, (str, os.PathLike)):
            images = [images]
        if isinstance(images, (list, tuple)) and images and isinstance(images[0], (str, os.PathLike)):
            images = [read_image(p) for p in images]
        if isinstance(images, (list, tuple)):
            crop, method = view_policy(self.image_model)
            arrays = [np.asarray(model_view(np.asarray(im), self.image_size, crop, method)) for im in images]
            pixels = np.stack(arrays)
        else:
            pixels = np.asarray(images)
            if pixels.ndim == 3:
                pixels = pixels[None]
            if pixels.ndim != 4 or pixels.shape[-1] != 3:
                raise ValueError(f"images must be (N, H, W, 3) or (H, W, 3), channels last; got shape {pixels.shape}.")
            if np.issubdtype(pixels.dtype, np.floating):
                return pixels.astype(np.float32)
            crop, method = view_policy(self.image_model)
            pixels = np.asarray(model_view(pixels, self.image_size, crop, method))
        mean = np.asarray(self.image_model.pixel_mean, np.float32)
        std = np.asarray(self.image_model.pixel_std, np.float32)
        return ((pixels / 255.0 - mean) / std).astype(np.float32)

    # -- the two towers ----------------------------------------------------------------------------
    def image_embeddings(self, images: Any, batch_size: int = 32) -> np.ndarray:
        """(N, E) image embeddings, not normalised: transformers' `get_image_features`."""
        x = self.pixel_values(images)
        return np.asarray(self.image_model.predict(x, batch_size=batch_size, verbose=0), np.float32)

    def text_embeddings(self, texts: str | Sequence[str], batch_size: int = 256) -> np.ndarray:
        """(N, E) text embeddings, not normalised: transformers' `get_text_features` on `tokenize(texts)`."""
        ids = self.tokenize(texts)
        return np.asarray(self.text_model.predict(ids, batch_size=batch_size, verbose=0), np.float32)

    def scores(self, image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> np.ndarray:
        """(N, M) logits of embeddings: exp(logit_scale) * cosine similarity + logit_bias."""
        cosine = _normalize(np.asarray(image_embeddings, np.float64)) @ _normalize(
            np.asarray(text_embeddings, np.float64)).T
        return (np.exp(self.logit_scale) * cosine + self.logit_bias).astype(np.float32)

    def logits(self, images: Any, texts: str | Sequence[str]) -> np.ndarray:
        """(N images, M texts): transformers' `logits_per_image` (logit scale and SigLIP's bias included)."""
        return self.scores(self.image_embeddings(images), self.text_embeddings(texts))

    # -- zero-shot classification ----------------------------------------------------------------------
    def label_embeddings(self, labels: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES) -> np.ndarray:
        """(C, E) normalised class embeddings: each label in every template ("a photo of a {}."), the template
        embeddings normalised, averaged, normalised again."""
        labels, templates = _labels(labels), _templates(templates)
        texts = [t.format(label) for label in labels for t in templates]
        embeds = _normalize(self.text_embeddings(texts).astype(np.float64))
        embeds = embeds.reshape(len(labels), len(templates), -1).mean(axis=1)
        return _normalize(embeds).astype(np.float32)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """Class probabilities of zero-shot logits: softmax over the labels (CLIP) or a sigmoid per label (SigLIP)."""
        logits = np.asarray(logits, np.float64)
        probs = 1.0 / (1.0 + np.exp(-logits)) if self.family == "siglip" else _softmax(logits)
        return probs.astype(np.float32)

    def classify(self, images: Any, labels: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES,
                 batch_size: int = 32) -> np.ndarray:
        """(N, C) probabilities of each image for each label (`probabilities` says which function).

        Example:
        >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_siglip")
        >>> photos = ["tests/data/cifar10_sample/cat/0511.jpg", "tests/data/cifar10_sample/ship/0128.jpg"]
        >>> model.classify(photos, ["cat", "dog", "car"], templates=CLIP_TEMPLATES).shape
        (2, 3)
        """
        classes = self.label_embeddings(labels, templates)
        return self.probabilities(self.scores(self.image_embeddings(images, batch_size), classes))


def _labels(labels):
    if isinstance(labels, str):
        raise TypeError(f"labels must be a list of names, got the string {labels!r}; split it first "
                        "(the CLI's --labels takes 'cat,dog,car').")
    labels = [str(label) for label in labels]
    if len(labels) < 1:
        raise ValueError("no labels given.")
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        raise ValueError(f"labels repeat: {duplicated}; each class once.")
    return labels


def _templates(templates):
    if isinstance(templates, str):
        templates = [templates]
    templates = list(templates)
    bad = [t for t in templates if t.count("{}") != 1]
    if not templates or bad:
        raise ValueError(f"each template needs exactly one '{{}}' where the label goes, e.g. 'a photo of a {{}}.'; "
                         f"got {bad or templates!r}.")
    return templates


def _folder_of(path: str) -> str:
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise ValueError(f"{path} is a file; load_image_text reads a folder (config.json, model.safetensors and the "
                         "tokenizer files), as transformers' CLIPModel / SiglipModel save_pretrained writes it.")
    if not is_hub_name(path):
        raise FileNotFoundError(f"No folder at {path} (nor a hub name, 'owner/name').")
    from keras_vit._optional import require

    huggingface_hub = require("huggingface_hub", "hub", what=f"{path!r}, read as a hub name,")
    try:
        return huggingface_hub.snapshot_download(path, allow_patterns=HUB_FILES)
    except Exception as e:
        raise ValueError(f"{path!r} is neither a local folder nor a hub repo huggingface_hub can give "
                         f"({type(e).__name__}: {e}). Offline (HF_HUB_OFFLINE=1) it must be in the cache.") from None


@refuse_unknown_keywords
def load_image_text(path: str | os.PathLike) -> ImageText:
    """A full CLIP or SigLIP checkpoint (a transformers `CLIPModel` / `SiglipModel` folder, or a hub name such as
    "openai/clip-vit-base-patch32" or "google/siglip-base-patch16-224") as an `ImageText`.

    Raises:
        ValueError: the folder is not a two-tower CLIP / SigLIP checkpoint, or its config and weights disagree
            (each named), before anything is built.
        FileNotFoundError: no such folder, or its tokenizer file is missing (named, with what writes it).

    Example:
    >>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_siglip")
    >>> model.family, model.tokenize("a photo of a cat").shape  # SigLIP pads to 64 tokens
    ('siglip', (1, 64))
    """
    from keras_vit.formats._safetensors import open_safetensors
    from keras_vit.pretrained import from_pretrained
    from keras_vit.zeroshot.tokenizers import load_tokenizer
    from keras_vit.zeroshot.transformers import FAMILIES, family_of, load_text_tower, read_config, read_scalars

    folder = _folder_of(os.fspath(path))
    config_path = os.path.join(folder, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{folder} has no config.json; a transformers CLIPModel / SiglipModel folder has one.")
    config = read_config(folder)
    family = family_of(config)
    if family is None:
        raise ValueError(f"{config_path}: model_type {config.get('model_type')!r} is not a two-tower image-text "
                         f"model keras-vit reads ({', '.join(FAMILIES)}); an image-only checkpoint is read "
                         "by keras_vit.from_pretrained.")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        from keras_vit.formats._torch import read_json

        files = sorted({os.path.join(folder, f) for f in read_json(index).get("weight_map", {}).values()})
    else:
        files = [os.path.join(folder, "model.safetensors")]
    tensors = open_safetensors(files)
    text_model, text_config = load_text_tower(folder, tensors, config)
    tokenizer = load_tokenizer(folder, family, text_config.max_length)
    scale, bias = read_scalars(tensors, family, files[0])
    image_model = from_pretrained(folder, dynamic_image_size=True)
    log.info("read %s: a %s image-text model (text: width %d, depth %d, %d tokens; embedding %d)", path, family,
             text_config.hidden_size, text_config.num_layers, text_config.max_length, text_config.projection_dim)
    return ImageText(image_model, text_model, tokenizer, family, scale, bias, source=os.fspath(path))
