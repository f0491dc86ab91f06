"""Keeps `compile` from silently pairing a logits head with a loss that expects probabilities.

VisionTransformer and create_model end in logits (classifier_activation=None, the official
head); the keras.applications constructors (ViTB16, ...) end in softmax. A Keras user writes
`loss="sparse_categorical_crossentropy"` either way: on logits from a zero-initialized head
that loss clips the outputs and its gradient is zero, so the loss stays at ln(classes) and
nothing is learned, without a word. `match_loss_to_head` reads such a loss as from_logits=True
(with a warning saying so) and warns about the reverse: from_logits=True on a softmax model.
"""

import warnings

import keras

# The probability losses that have a from_logits switch, by the names Keras accepts as strings.
_LOSSES = {
    "sparse_categorical_crossentropy": keras.losses.SparseCategoricalCrossentropy,
    "categorical_crossentropy": keras.losses.CategoricalCrossentropy,
    "binary_crossentropy": keras.losses.BinaryCrossentropy,
    "categorical_focal_crossentropy": keras.losses.CategoricalFocalCrossentropy,
    "binary_focal_crossentropy": keras.losses.BinaryFocalCrossentropy,
}
_LOSS_CLASSES = tuple(_LOSSES.values())


def _as_loss_object(loss):
    """A string or Keras loss function of _LOSSES as its loss object, else the loss unchanged."""
    name = loss if isinstance(loss, str) else getattr(loss, "__name__", None)
    if name in _LOSSES and (isinstance(loss, str) or getattr(keras.losses, name, None) is loss):
        return _LOSSES[name]()
    return loss


def match_loss_to_head(loss, *, outputs_logits, model_name):
    """The loss to compile with: a probability loss on a logits head becomes its from_logits=True
    form (warned once); from_logits=True on a head with an activation is warned about."""
    resolved = _as_loss_object(loss)
    if not isinstance(resolved, _LOSS_CLASSES):
        return loss
    from_logits = resolved.get_config().get("from_logits", False)
    if outputs_logits and not from_logits:
        config = dict(resolved.get_config(), from_logits=True)
        warnings.warn(
            f"{model_name} outputs logits (classifier_activation=None) but the loss {_describe(loss)} expects "
            "probabilities, which would leave the zero-initialized head untrained; compiling with "
            f"{type(resolved).__name__}(from_logits=True) instead (pass that, or build with "
            "classifier_activation='softmax', to silence this).", stacklevel=3)
        return type(resolved).from_config(config)
    if not outputs_logits and from_logits:
        warnings.warn(
            f"{model_name} ends in an activation (softmax) but the loss {_describe(loss)} has from_logits=True: "
            "it will treat probabilities as logits. Use from_logits=False, or build with "
            "classifier_activation=None.", stacklevel=3)
    return loss


def _describe(loss):
    if isinstance(loss, str):
        return repr(loss)
    if isinstance(loss, keras.losses.Loss):
        return f"{type(loss).__name__}(from_logits={loss.get_config().get('from_logits')})"
    return getattr(loss, "__name__", repr(loss))
