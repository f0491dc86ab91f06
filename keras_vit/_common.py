"""Small helpers every module may use: argument pairs, Keras registration, key lists in errors,
misspelled keywords refused with the nearest valid one."""

import functools
import inspect
import numbers
from typing import Any, Sequence, TypeAlias

import keras
import numpy as np

from keras_vit._files import nearest

# For annotations: what keras.ops take and give, a tensor of the backend (tf.Tensor, jax.Array, torch.Tensor),
# a symbolic KerasTensor or a NumPy array; and a layer's input shape (a tuple, list or TensorShape of ints,
# None for an unknown dimension).
Tensor: TypeAlias = Any
Shape: TypeAlias = Sequence[Any]

# Every keras-vit layer and model registers under one package name, so saved files load
# after `import keras_vit` with no custom_objects.
register = keras.saving.register_keras_serializable(package="keras_vit")


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (a Python or NumPy int; not a bool, a float or a string)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` for an error message, cut after `limit` characters (a hostile value can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_pair(value, what):
    """Turns an int or a pair into a (height, width) tuple of positive ints; anything else (a string, a
    float, a bool, another length) is a ValueError naming `what` and the value."""
    if is_int(value):
        pair = (int(value), int(value))
    elif isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or hasattr(value, "keys"):
        raise ValueError(f"{what} must be an int or a pair (h, w), got {shown(value)}.")
    else:
        pair = tuple(value)
        if not all(is_int(v) for v in pair):
            raise ValueError(f"{what} must be an int or a pair (h, w) of ints, got {shown(value)}.")
        pair = tuple(int(v) for v in pair)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{what} must be a positive int or a pair (h, w), got {shown(value)}.")
    return pair


def describe_misfit(missing, unexpected, mismatched, unexpected_hint=""):
    """"missing keys: ...; unexpected keys: ...; shape mismatches: ...", the parts that are not empty."""
    problems = []
    if missing:
        problems.append(f"missing keys: {format_keys(missing)}")
    if unexpected:
        problems.append(f"unexpected keys{unexpected_hint}: {format_keys(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {format_keys(mismatched)}")
    return "; ".join(problems)


def format_keys(keys, limit=12):
    """A sorted, comma-separated list for error messages, cut after `limit` entries."""
    keys = sorted(keys)
    more = f" ... and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def keywords_of(fn):
    """The names `fn` takes as keywords (not `self`, `*args` or `**kwargs`)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds} - {"self"}


def check_keywords(given, valid, where):
    """Refuses keywords of `given` that are not in `valid` with a TypeError naming the nearest valid
    one, e.g. "VisionTransformer() got an unexpected keyword argument `clases` (did you mean `classes`?)."
    A misspelled keyword swallowed by **kwargs would otherwise change nothing, silently.

    Example:
    >>> check_keywords({"clases": 10}, {"classes", "image_size"}, "VisionTransformer")
    Traceback (most recent call last):
    TypeError: VisionTransformer() got an unexpected keyword argument `clases` (did you mean `classes`?).
    """
    unknown = [key for key in given if key not in valid]
    if not unknown:
        return
    described, close = [], False
    for key in unknown:
        near = nearest(key, valid)
        close = close or near is not None
        described.append(f"`{key}`" + (f" (did you mean `{near}`?)" if near else ""))
    what = "an unexpected keyword argument" if len(unknown) == 1 else "unexpected keyword arguments"
    listing = "" if close else f"; it takes {', '.join(f'`{k}`' for k in sorted(valid))}"
    raise TypeError(f"{where}() got {what} {', '.join(described)}{listing}.")


def refuse_unknown_keywords(fn):
    """Decorator: a keyword `fn` does not take is refused by `check_keywords` (naming the nearest
    parameter) rather than by Python's bare "unexpected keyword argument"."""
    valid = keywords_of(fn)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        check_keywords(kwargs, valid, fn.__name__)
        return fn(*args, **kwargs)

    return checked


# What keras.layers.Layer takes besides its named arguments (it refuses anything else, with a ValueError).
_KERAS_LAYER_EXTRAS = frozenset({"input_dim", "input_shape", "batch_input_shape", "batch_size", "weights"})


def check_layer_keywords(layer_class, kwargs):
    """A keras-vit layer's `check_keywords`: `kwargs` left for keras.layers.Layer must be its keywords."""
    if kwargs:
        check_keywords(kwargs, _layer_keywords(layer_class), layer_class.__name__)


@functools.lru_cache(maxsize=None)
def _layer_keywords(layer_class):
    """Every keyword a Keras layer class takes: its own, its Keras base classes' and keras.layers.Layer's."""
    names = set(_KERAS_LAYER_EXTRAS)
    for klass in layer_class.__mro__:
        if "__init__" in vars(klass):
            names |= keywords_of(klass.__init__)
        if klass is keras.layers.Layer:
            break
    return frozenset(names)
