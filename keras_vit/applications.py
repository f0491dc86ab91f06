"""keras.applications-style helpers: the official input scaling and class-name decoding."""

from keras import ops


def preprocess_input(x):
    """Scales RGB pixels in [0, 255] (uint8 or float) to [-1, 1], the official preprocessing.

    Example:
    >>> preprocess_input(np.array([0, 255], "uint8"))  # -> [-1., 1.]
    """
    return ops.cast(x, "float32") / 127.5 - 1.0
