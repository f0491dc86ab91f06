"""Files: atomic writes (a reader never sees a half-written model, checkpoint or export), the export
format a path names, and missing paths reported with the nearest name (a typo's fix). Standard library
only: the command line checks paths with it before TensorFlow loads."""

import contextlib
import difflib
import os
import re
import shutil
import tempfile


@contextlib.contextmanager
def atomic_path(target, *, overwrite=True, suffix=None):
    """Yields a temporary path beside `target`; renames it onto `target` on success.

    The temporary path keeps `target`'s extension (or `suffix`), since Keras picks the
    format from it. On any error the temporary file or folder is removed and `target`
    is left as it was.
    """
    target = os.path.abspath(os.fspath(target))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{target} exists; pass overwrite=True (--overwrite) to replace it.")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    name = os.path.basename(target)
    if suffix is None:
        suffix = next((s for s in (".weights.h5", ".keras", ".tflite", ".npz", ".json") if name.endswith(s)), "")
    tmp_dir = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    tmp = os.path.join(tmp_dir, "partial" + suffix)
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"nothing was written for {target}")
        if os.path.isdir(tmp):
            backup = None
            if os.path.exists(target):  # os.replace cannot put a folder over a folder
                backup = tmp_dir + ".old"
                os.rename(target, backup)
            os.rename(tmp, target)
            if backup:
                shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


EXPORT_FORMATS = ("saved_model", "tflite", "onnx")
# The file extensions that name an export format; a SavedModel is a folder, named without one.
EXPORT_EXTENSIONS = {".tflite": "tflite", ".onnx": "onnx"}
# Names a SavedModel folder must not have: files of other kinds.
_FILE_EXTENSIONS = (".tflite", ".keras", ".h5", ".json", ".onnx")


def export_format(path, format=None):
    """The export format for `path`: `format` when given, else from the name (`.tflite`, `.onnx`, a
    name without an extension, or an existing SavedModel, for a SavedModel). Any other extension
    (`vit.mlmodel`, `vit.tfjs`) is refused: keras-vit writes none of those formats.

    Example:
    >>> export_format("vit.tflite"), export_format("vit_savedmodel")
    ('tflite', 'saved_model')
    """
    path = os.fspath(path).rstrip(os.sep) or os.fspath(path)
    extension = os.path.splitext(os.path.basename(path))[1].lower()
    choices = "saved_model (a folder: a name without an extension), tflite (.tflite) or onnx (.onnx)"
    if format is None:
        if extension in EXPORT_EXTENSIONS:
            return EXPORT_EXTENSIONS[extension]
        if not extension or os.path.isfile(os.path.join(path, "saved_model.pb")):
            return "saved_model"
        raise ValueError(f"{path}: keras-vit does not export {extension} files; it writes {choices}. "
                         "Name the output so, or pass the format (format=..., --format) to write one of those "
                         "under this name.")
    if format not in EXPORT_FORMATS:
        raise ValueError(f"Unknown export format {format!r}; use one of {EXPORT_FORMATS}: {choices}.")
    if format == "saved_model" and extension in _FILE_EXTENSIONS:
        raise ValueError(f"a SavedModel is a folder; {path} looks like a file name (use --format tflite for .tflite).")
    named = EXPORT_EXTENSIONS.get(extension)
    if named is not None and named != format:
        raise ValueError(f"{path} names a {named} file, but the format is {format}: name the output for {format} "
                         f"({choices}), or drop the format to write {named}.")
    return format


def nearest(name, choices):
    """The choice closest to a misspelled `name` (difflib), or None when none is close. The one
    suggester: keywords (keras_vit._common.check_keywords), recipe keys, paths.

    Example:
    >>> nearest("clases", ["classes", "channels"])
    'classes'
    """
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def nearest_path(path):
    """An existing path one typo away from `path` (its first missing part corrected), or None.

    Example:
    >>> nearest_path("saved_models/vit_digit/model.keras")
    'saved_models/vit_digits/model.keras'
    """
    parts = os.path.normpath(os.fspath(path)).split(os.sep)
    for i, part in enumerate(parts):
        if not part or os.path.exists(os.sep.join(parts[:i + 1])):
            continue
        folder = os.sep.join(parts[:i]) or (os.sep if i else os.curdir)
        try:
            near = nearest(part, os.listdir(folder))
        except OSError:  # not a folder, or unreadable
            return None
        fixed = os.sep.join(parts[:i] + [near] + parts[i + 1:]) if near else None
        return fixed if fixed and os.path.exists(fixed) else None
    return None


def missing_path(path, what, expected):
    """The FileNotFoundError for a path that is not there: "{what} {path} does not exist (did you mean
    ...?); {expected}." with the nearest existing path when one is a typo away."""
    path = os.fspath(path)
    near = nearest_path(path)
    return FileNotFoundError(f"{what} {path} does not exist" + (f" (did you mean {near}?)" if near else "")
                             + f"; {expected}.")


# A Hugging Face repo id as from_pretrained takes it ("facebook/dinov2-small", "hf-hub:timm/..."), not a file.
_HUB_NAME = re.compile(r"^(?:hf-hub:)?[A-Za-z0-9][\w.-]*/[\w.-]+$")
_FILE_SUFFIXES = (".keras", ".npz", ".safetensors", ".h5", ".tflite", ".onnx", ".bin", ".pth", ".pt", ".ckpt", ".pkl",
                  ".pickle")


def is_hub_name(path: str | os.PathLike) -> bool:
    """Whether `path`, not on disk, reads as a Hugging Face hub name that `keras_vit.load_model` resolves
    through huggingface_hub rather than a missing file (the CLI names a missing file at once).

    Example:
    >>> is_hub_name("facebook/dinov2-small"), is_hub_name("runs/digits/model.keras")
    (True, False)
    """
    path = os.fspath(path)
    return not os.path.exists(path) and bool(_HUB_NAME.match(path)) and not path.endswith(_FILE_SUFFIXES)
