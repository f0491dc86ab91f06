"""ONNX export: the default SavedModel's serving graph converted by tf2onnx.

`export_model(..., format="onnx")` (`keras-vit export --format onnx`) calls `convert` and then
checks the file in ONNX Runtime (`keras_vit.serving.onnx_classifier`) against Keras like every
other export. The graph is the SavedModel's `serving_default`: `images` uint8 (batch, height,
width, 3), any size, resized inside (plain bilinear) -> `logits`, `probabilities`.

tf2onnx logs an op it cannot map and still writes a model that ONNX Runtime then refuses; here
such a log line is an error, so no file is written.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from keras_vit._optional import require
from keras_vit.serving import INPUT_NAME

if TYPE_CHECKING:
    from keras_vit.serving import ServingGraph

OPSET = 17  # ONNX Runtime 1.14 and later run it; tf2onnx 1.17 maps every op of the graph at 17

_DIMENSIONS = ("batch", "height", "width")


class _Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _tf2onnx_errors():
    handler = _Errors()
    logger = logging.getLogger("tf2onnx")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _erfc(ctx, node, name, args):
    """TensorFlow's Erfc as 1 - Erf: tf.nn.gelu(approximate=False), the exact GELU of timm's and
    transformers' checkpoints, computes erfc, which tf2onnx does not map and ONNX has no op for."""
    import numpy as np
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    erf = ctx.make_node("Erf", [node.input[0]])
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype))
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])


def convert(graph: ServingGraph, path: str, name: str) -> bytes:
    """The serving graph of `graph` (a `ServingGraph`), resizing inside, as ONNX model bytes.

    Converts the same SavedModel `export_model` writes (written to a temporary folder here).
    `path` and `name` are for messages. Raises ValueError naming the ops tf2onnx cannot
    convert (it would otherwise write a model ONNX Runtime refuses).

    Example:
    >>> content = convert(ServingGraph(model), "vit.onnx", model.name)
    """
    import tempfile

    import tensorflow as tf

    tf2onnx = require("tf2onnx", "onnx", what="ONNX export")
    with tempfile.TemporaryDirectory(prefix="keras_vit_onnx_") as tmp:
        graph.write_saved_model(tmp, resize=True)
        loaded = tf.saved_model.load(tmp)  # kept: the signature alone does not keep its variables alive
        signature = loaded.signatures["serving_default"]
        serve = tf.function(lambda images: signature(images=images))
        spec = tf.TensorSpec((None, None, None, 3), tf.uint8, name=INPUT_NAME)
        with _tf2onnx_errors() as errors:
            try:
                proto, _ = tf2onnx.convert.from_function(serve, input_signature=[spec], opset=OPSET,
                                                         custom_op_handlers={"Erfc": (_erfc, [])})
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
    if errors:
        raise ValueError(f"ONNX conversion of {name} failed: tf2onnx: {'; '.join(errors)}. "
                         f"Nothing was written to {path}.")
    inputs = [i.name for i in proto.graph.input]
    outputs = [o.name for o in proto.graph.output]
    if inputs != [INPUT_NAME] or sorted(outputs) != sorted(graph.output_names):
        raise ValueError(f"ONNX conversion of {name} gave inputs {inputs} and outputs {outputs}, not "
                         f"[{INPUT_NAME!r}] and {graph.output_names}. Nothing was written to {path}.")
    # tf2onnx calls every unknown dimension unk__N; clients show these names.
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        for i, dim in enumerate(dims):
            if dim.dim_param:
                dim.dim_param = _DIMENSIONS[i] if value.name == INPUT_NAME and i < 3 else "batch" if i == 0 else ""
    return proto.SerializeToString()


def versions() -> dict[str, Any]:
    """The converter and runtime versions, for the export's metadata."""
    import onnx
    import onnxruntime
    import tf2onnx

    return {"opset": OPSET, "tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__}
