"""The recipes installed with the package (keras_vit/recipes/, the checkout's recipes/ folder),
found by name; standard library only, so the command line lists them without TensorFlow."""

import os

RECIPES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipes")


def shipped_recipes():
    """The names of the recipes installed with the package, e.g. ["cifar10", "digits", ...]."""
    try:
        return sorted(f[:-3] for f in os.listdir(RECIPES_DIR) if f.endswith(".py") and not f.startswith("_"))
    except OSError:
        return []


def find_recipe(name):
    """A recipe file: `name` itself when it is a file, else the shipped recipe of that name.

    Example:
    >>> find_recipe("digits")   # .../keras_vit/recipes/digits.py
    """
    path = os.fspath(name)
    if os.path.isfile(path):
        return path
    stem = path.removesuffix(".py")
    if os.sep not in stem and stem in shipped_recipes():
        return os.path.join(RECIPES_DIR, f"{stem}.py")
    raise ValueError(f"Recipe {path} does not exist, and is not a shipped recipe ({', '.join(shipped_recipes())}).")
