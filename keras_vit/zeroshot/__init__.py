"""Zero-shot classification with two-tower image-text checkpoints (CLIP, SigLIP): their text towers, their own
tokenizers, `load_image_text` and `ImageText` (keras_vit/zeroshot/model.py).

Example:
>>> model = keras_vit.load_image_text("tests/data/zeroshot/hf_clip")
>>> model.logits("tests/data/cifar10_sample/cat/0511.jpg", ["a photo of a cat", "a photo of a dog"]).shape
(1, 2)
"""

from keras_vit.zeroshot.model import CLIP_TEMPLATES, DEFAULT_TEMPLATES, ImageText, load_image_text
from keras_vit.zeroshot.text import TextBlock, TextConfig, TextEmbedding, TextPool, text_tower

__all__ = ["CLIP_TEMPLATES", "DEFAULT_TEMPLATES", "ImageText", "TextBlock", "TextConfig", "TextEmbedding", "TextPool",
           "load_image_text", "text_tower"]
