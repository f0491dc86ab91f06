"""keras-vit: the Vision Transformer as Keras 3 applications, with the official numerics."""

import logging
import os

# TensorFlow is our default backend; a user's own KERAS_BACKEND wins.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# One line per stage of long work (loading, converting, exporting) reaches the user
# like Keras' own messages; silence with logging.getLogger("keras_vit").setLevel("WARNING").
_log = logging.getLogger("keras_vit")
if not _log.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("keras_vit: %(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(logging.INFO)
    _log.propagate = False

from keras_vit.layers import Attention, DropPath, Patches, PatchEncoder, TransformerBlock  # noqa: E402
from keras_vit.stem import BottleneckUnit, StdConv2D  # noqa: E402
from keras_vit.models import (  # noqa: E402
    VARIANTS,
    R26ViTB32,
    R26ViTS32,
    R50ViTB16,
    R50ViTL32,
    RViTTi16,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    VisionTransformer,
    create_model,
)
from keras_vit.posemb import (  # noqa: E402
    resample_patch_embedding,
    resample_position_embeddings,
    with_image_size,
    with_patch_size,
)
from keras_vit.checkpoints import load_official_npz, save_official_npz  # noqa: E402
from keras_vit.pretrained import from_pretrained, load_pretrained, save_pretrained  # noqa: E402
from keras_vit.applications import (  # noqa: E402
    decode_predictions,
    imagenet_class_names,
    load_image,
    preprocess_input,
)
from keras_vit.export import export_model, load_classifier  # noqa: E402

__version__ = "0.1.0"
