"""Optional dependencies: imported where needed, with an error naming the extra to install."""

import importlib


def require(module, extra, *, package=None, what=None):
    """Imports `module`, or raises ImportError saying `pip install "keras-vit[extra]"`.

    package: the name to pip install, when it differs from the module's ("scikit-learn").
    what: what needs it, for the message ("the digits data set").

    Example:
    >>> tfds = require("tensorflow_datasets", "tfds", package="tensorflow-datasets")
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name != top and not module.startswith(e.name):
            raise  # the package is there but broken: its own error says more
        package = package or top
        raise ImportError(
            f"{what or module} needs the optional package {package}, which is not installed: "
            f'pip install "keras-vit[{extra}]" (or pip install {package}).'
        ) from None
