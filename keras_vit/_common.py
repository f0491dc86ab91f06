"""Small helpers every module may use: argument pairs, Keras registration, key lists in errors."""

import keras

# Every keras-vit layer and model registers under one package name, so saved files load
# after `import keras_vit` with no custom_objects.
register = keras.saving.register_keras_serializable(package="keras_vit")


def to_pair(value, what):
    """Turns an int or a pair into a (height, width) tuple of positive ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair = (value, value)
    else:
        try:
            pair = tuple(int(v) for v in value)
        except TypeError:
            raise ValueError(f"{what} must be an int or a pair (h, w), got {value!r}.") from None
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{what} must be a positive int or a pair (h, w), got {value!r}.")
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
