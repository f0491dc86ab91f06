"""Dense prediction on any keras-vit backbone: depth and semantic segmentation.

`DenseHead` (the head's options), `DensePredictor` (backbone + head as one Keras model), the heads'
layers, and transformers' DPT / Depth Anything checkpoints through `keras_vit.from_pretrained`.
Training (`keras_vit.dense.training.train`, `keras-vit train` with objective "segmentation" or "depth"): the
data readers in `keras_vit.dense.data`, losses and metrics in `keras_vit.dense.losses`, pictures in
`keras_vit.dense.visualize`, Fashion-MNIST scenes in `keras_vit.dense.scenes`.

Example:
>>> model = keras_vit.from_pretrained("tests/data/dense/hf_depth_anything")  # a (tiny) Depth Anything folder
>>> model.task, tuple(model.predict(np.zeros((1, 42, 56, 3), "float32"), verbose=0).shape)
('depth', (1, 42, 56))
"""

from keras_vit.dense.config import DenseHead
from keras_vit.dense.layers import BilinearResize, DepthOutput, TokenMap
from keras_vit.dense.model import DensePredictor

__all__ = ["BilinearResize", "DenseHead", "DensePredictor", "DepthOutput", "TokenMap"]
